// SPDX-License-Identifier: MIT
// Linear matter power spectra at z = 0 (issue 16): the Eisenstein & Hu (1998, ApJ 496, 605; "EH98") fitting formulae
// for the transfer function, with baryon acoustic oscillations or without them, and tables from Boltzmann codes
// (CAMB, CLASS); normalised by sigma_8.
//
// Units: wavenumbers k in h/Mpc, power P(k) in (Mpc/h)^3, radii in Mpc/h; the convention of CAMB's and CLASS's
// outputs, with sigma^2(R) = 1/(2 pi^2) integral k^2 P(k) W^2(kR) dk, W(x) = 3 (sin x - x cos x) / x^3 (top hat).
// To get the spectrum at scale factor a, multiply P by Background::growthFactorRatio(a)^2 (background.hpp).
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <vector>

namespace matcha::cosmology {

/// The radius of sigma_8, in Mpc/h.
inline constexpr double kSigma8Radius = 8.0;

/// The cosmology the Eisenstein & Hu transfer functions depend on. Defaults: Planck 2018 (TT,TE,EE+lowE+lensing+BAO).
struct EisensteinHuParams {
  double omegaMatter = 0.3111;  ///< Omega_m today, CDM plus baryons: finite and > 0
  double omegaBaryon = 0.0490;  ///< Omega_b today: finite, 0 < Omega_b < Omega_m
  double hubbleParam = 0.6766;  ///< h = H0 / (100 km/s/Mpc): finite and > 0
  /// T_CMB in K, finite and > 0. Default: 2.7255 K (Fixsen 2009), the value CAMB and CLASS use; EH98's own code
  /// defaulted to 2.728 K (COBE FIRAS 1996), which lowers T(k) by 0.05% at k = 0.01 h/Mpc to 0.3% at 1 h/Mpc.
  double cmbTemperature = 2.7255;

  /// Throws InputError (one line, naming the parameter) unless every field is finite and in range.
  void validate() const;
};

/// The EH98 transfer functions of one cosmology, T(k) -> 1 as k -> 0. Massless neutrinos only (EH98 treat no
/// massive ones); no radiation-era or dark-energy effects beyond what the fits absorb. EH98 quote a few percent of
/// agreement with Boltzmann codes for the full form in the models they calibrated on.
class EisensteinHuTransfer {
 public:
  /// @throws InputError as EisensteinHuParams::validate
  explicit EisensteinHuTransfer(const EisensteinHuParams& params);

  /// The full fitting formula, EH98 eqs. 2-24: CDM and baryons, acoustic oscillations and Silk damping.
  /// @param wavenumber  k in h/Mpc, >= 0 (no check: the caller's loop is hot); T(0) = 1
  double withWiggles(double wavenumber) const;
  /// The "no-wiggle" shape, EH98 eqs. 26-31: the zero-baryon form with an effective shape parameter that carries
  /// the baryons' suppression but no oscillations. Same argument as withWiggles.
  double noWiggle(double wavenumber) const;

  /// The sound horizon at the drag epoch, EH98 eq. 6, in Mpc (not Mpc/h).
  double soundHorizon() const { return soundHorizon_; }
  /// EH98's approximation to it, eq. 26 (used by noWiggle), in Mpc.
  double soundHorizonFit() const { return soundHorizonFit_; }

  const EisensteinHuParams& params() const { return params_; }

 private:
  EisensteinHuParams params_;
  // The k-independent quantities of EH98 (names as in the paper), k in Mpc^-1, lengths in Mpc.
  double omegaMatterH2_, baryonFraction_, cdmFraction_, thetaCmb_;
  double equalityWavenumber_, soundHorizon_, silkWavenumber_;
  double alphaCdm_, betaCdm_, alphaBaryon_, betaBaryon_, betaNode_;
  double soundHorizonFit_, alphaGamma_;
};

enum class TransferForm {
  withWiggles,  ///< EisensteinHuTransfer::withWiggles
  noWiggle,     ///< EisensteinHuTransfer::noWiggle
};

/// An EH98 power spectrum P(k) = A k^n_s T(k)^2, its amplitude A set by sigma_8.
struct LinearPowerParams {
  EisensteinHuParams transfer;                    ///< the transfer function's cosmology
  TransferForm form = TransferForm::withWiggles;  ///< which EH98 transfer function
  double spectralIndex = 0.9665;                  ///< n_s, finite (Planck 2018)
  double sigma8 = 0.8102;                         ///< sigma(8 Mpc/h) at z = 0, finite and > 0 (Planck 2018)

  /// Throws InputError (one line, naming the parameter) unless every field is finite and in range.
  void validate() const;
};

/// The rows of a power-spectrum table: k strictly increasing, k and P finite and > 0, at least 2 rows.
struct PowerTable {
  std::vector<double> wavenumbers;  ///< k, h/Mpc
  std::vector<double> powers;       ///< P(k), (Mpc/h)^3
};

/// Reads a two-column text table, k [h/Mpc] and P(k) [(Mpc/h)^3] per line, as CAMB's matterpower.dat and CLASS's
/// pk.dat are written; everything from '#' to the end of a line is a comment, blank lines are skipped, fields are
/// separated by spaces or tabs, CR-LF line ends are accepted.
/// @throws InputError (one line, naming the file and, where one is at fault, the line) for a file that cannot be
///   opened, a line that is not two numbers, a value that is not finite or not > 0, a k that does not exceed the
///   previous row's, and fewer than 2 rows.
PowerTable readPowerTable(const std::filesystem::path& path);

/// A linear power spectrum at z = 0. Immutable and thread-safe.
class LinearPowerSpectrum {
 public:
  /// P(k) = A k^n_s T(k)^2 with A chosen so that sigma(8 Mpc/h) = params.sigma8.
  /// @throws InputError as LinearPowerParams::validate
  static LinearPowerSpectrum eisensteinHu(const LinearPowerParams& params);

  /// The table of readPowerTable(path), interpolated by cubic Hermite segments in (ln k, ln P) with slopes from
  /// three-point differences (C^1, third order). Measured midway between the rows of an EH98 spectrum with wiggles,
  /// the largest error is 7e-4 with 50 rows per decade of k and 5e-5 with 100 (linear log-log: 3e-3 and 8e-4).
  /// Outside [first k, last k] the power is 0: nothing is invented where the table says nothing, so sigma(R) and
  /// any initial conditions see exactly the table's range; callers that need a wider range check
  /// minWavenumber() and maxWavenumber() and ask for a wider table.
  /// @param sigma8  empty: keep the table's amplitude (sigma8() reports it); otherwise rescale P so that
  ///                sigma(8 Mpc/h) = *sigma8, which must be finite and > 0
  /// @throws InputError as readPowerTable, or for a bad sigma8
  static LinearPowerSpectrum fromTable(const std::filesystem::path& path, std::optional<double> sigma8 = std::nullopt);

  /// P(k) in (Mpc/h)^3 for k in h/Mpc: 0 at k = 0 and outside a table's range. Throws InputError for k < 0 or NaN.
  double power(double wavenumber) const;

  /// sigma(R), the rms linear density contrast in spheres of radius R (Mpc/h, finite and > 0, else InputError),
  /// by tanh-sinh quadrature in ln k (panels of at most a quarter period of W^2, ending at a table's rows; ~1e-10
  /// relative): over kR in [1e-4, 1e3] for EH98 spectra (outside it sigma^2 gains 5e-11 relative at n_s = 0.97,
  /// 2e-9 at n_s = 1.5), over the table's range clipped to the same kR window for tables. Some 700 panels, ~25 ms.
  double sigma(double radius) const;
  /// sigma(8 Mpc/h), computed at construction: the requested value, or a table's own when it was not rescaled.
  double sigma8() const { return sigma8_; }

  /// Where P may be nonzero, in h/Mpc: (0, inf) for EH98, a table's first and last k.
  double minWavenumber() const { return minWavenumber_; }
  double maxWavenumber() const { return maxWavenumber_; }

 private:
  LinearPowerSpectrum(std::function<double(double)> shape, double minWavenumber, double maxWavenumber,
                      std::vector<double> nodeLogWavenumbers);
  /// sigma^2(R) of amplitude_ * shape_.
  double sigmaSquared(double radius) const;
  void normalise(double sigma8);

  std::function<double(double)> shape_;  ///< P(k) / amplitude_, zero outside [minWavenumber_, maxWavenumber_]
  double amplitude_ = 1.0;
  double minWavenumber_;
  double maxWavenumber_;
  /// ln k of a table's rows: quadrature panels end there, so each panel sees one smooth cubic segment.
  std::vector<double> nodeLogWavenumbers_;
  double sigma8_ = 0.0;
};

}  // namespace matcha::cosmology
