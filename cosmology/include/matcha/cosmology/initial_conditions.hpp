// SPDX-License-Identifier: MIT
// Cosmological initial conditions (issue 16): a Gaussian random field with a linear power spectrum on an n^3 grid,
// and bodies on that grid displaced and set moving by Lagrangian perturbation theory, Zel'dovich (1LPT) or second
// order (2LPT, Scoccimarro 1998), as 2LPTic and N-GenIC make them.
//
// Units (GADGET's): lengths in Mpc/h, masses in 1e10 M_sun/h, velocities in km/s stored as GADGET's u = v / sqrt(a),
// with v = a dx/dt the peculiar velocity (x comoving). Wavenumbers in h/Mpc, power in (Mpc/h)^3 (linear_power.hpp).
//
// Conventions:
//  - The field. Grid point p = (px, py, pz) sits at q = p L / n. delta(q) = sum_m delta_m exp(i k.q), k = 2 pi m / L,
//    over the modes m of mesh::FourierGrid's layout (fourier_grid.hpp); delta_{-m} = conj(delta_m). Then
//    <|delta_m|^2> = P(k) / L^3, which is what measurePowerSpectrum (power_spectrum.hpp) reads back as P(k).
//    DensityModes hold the linear field at a = 1 (z = 0), P the z = 0 spectrum.
//  - Random numbers. Each mode's amplitude and phase come from a counter-based hash (SplitMix64's finaliser) of the
//    seed and the mode's signed wavenumbers (mx, my, mz): no generator state is shared between modes, so the field
//    does not depend on the thread schedule or the thread count, and a mode's value does not depend on n either (a
//    larger grid with the same seed and box keeps the smaller grid's modes and adds the new ones). On the mz = 0 plane
//    only one of m and -m draws (the one with mx > 0, or mx = 0 and my > 0); the other is its conjugate. The values
//    depend on libm's log, sin and cos being the same: bit-identical on machines with the same C library.
//  - Amplitudes. delta_m = sqrt(P / L^3) r exp(i theta), theta uniform in [0, 2 pi); r Rayleigh with <r^2> = 1
//    (a complex Gaussian), or r = 1 with fixedAmplitude (Angulo & Pontzen 2016). invertPhases multiplies every mode by
//    -1 (theta + pi): the partner of a paired run.
//  - Excluded modes. k = 0 is zero (the mean density is the background). For even n, every mode with a component at
//    the Nyquist index n/2 is zero as well: those modes are their own partners along that axis, so a derivative
//    (i k) has no real value there, and dropping them keeps delta, Psi and their products real and symmetric. The
//    field therefore holds the modes with |m_i| < n/2 on every axis.
//  - Displacements (2LPTic's convention; background.hpp): x = q + Psi1 + Psi2 with
//      Psi1 = -D1 grad(phi1),  laplacian(phi1) = delta / D1(1)              (so div Psi1 = -(D1/D1(1)) delta)
//      Psi2 = +D2 grad(phi2),  laplacian(phi2) = sum_{i<j} (phi1,ii phi1,jj - phi1,ij^2)
//    with D1, D2 = Background::growthFactor, secondOrderGrowthFactor at the start (D2 ~ -3/7 D1^2 < 0), both
//    normalised so D1 -> a as a -> 0. Derivatives are spectral (i k); the second-order source is formed on the grid
//    without de-aliasing, as 2LPTic does.
//  - Velocities: v = a H(a) (f1 Psi1 + f2 Psi2), H = 100 E(a) km/s per Mpc/h, f1 and f2 the growth rates; stored as
//    u = v / sqrt(a).
//  - Bodies: one per grid point, id = (px n + py) n + pz, mass Omega_m rho_crit L^3 / n^3 with
//    rho_crit = kCriticalDensity; positions wrapped into [0, L).
#pragma once

#include <complex>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "matcha/core/particles.hpp"
#include "matcha/cosmology/background.hpp"

namespace matcha::cosmology {

/// The critical density today, 3 H0^2 / (8 pi G), in GADGET's units: 1e10 M_sun/h per (Mpc/h)^3 (GADGET-4's
/// value, 27.7536627; h-independent in these units).
inline constexpr double kCriticalDensity = 27.7536627;

/// H0 in GADGET's velocity-over-length units: 100 km/s per Mpc/h.
inline constexpr double kHubbleKmPerSPerMpcOverH = 100.0;

/// What the initial conditions are. Defaults are set here only; the cosmology's are CosmologyParams' (Planck 2018).
struct CosmologicalIcParams {
  double boxSize = 100.0;  ///< L, the periodic cube's side, Mpc/h: finite and > 0
  int grid = 64;           ///< n: n^3 bodies and grid points, in [mesh::kMinGrid, kMaxGrid], prime factors 2, 3, 5, 7
  double startRedshift = 49;    ///< z of the initial conditions: finite and > 0
  std::uint64_t seed = 1;       ///< names the random field
  int lptOrder = 2;             ///< 1: Zel'dovich; 2: second-order LPT
  bool fixedAmplitude = false;  ///< |delta_m| = sqrt(P / L^3) exactly (Angulo & Pontzen 2016)
  bool invertPhases = false;    ///< delta -> -delta (the paired run's partner)
  CosmologyParams cosmology;    ///< Omega_m, Omega_Lambda, h of the background (and so D1, D2, f1, f2, H)

  double scaleFactor() const { return 1.0 / (1.0 + startRedshift); }

  /// Throws InputError, one line naming the parameter as its command-line option: a box not finite or <= 0, a grid
  /// out of range or with another prime factor (naming the next friendly size), a start redshift not finite or <= 0,
  /// an lptOrder other than 1 or 2, and the cosmology's own checks (CosmologyParams::validate).
  void validate() const;
};

/// The Fourier modes delta_m of a linear density field at a = 1 (layout and convention above): n * n * (n/2 + 1)
/// values, mode (mx, my, mz) at index (mx n + my) (n/2 + 1) + mz.
struct DensityModes {
  int grid = 0;
  double boxSize = 0.0;
  std::vector<std::complex<double>> values;
};

/// The Gaussian random field of `params` (grid, box, seed, fixedAmplitude, invertPhases) for the z = 0 power spectrum
/// `power` (k in h/Mpc -> P in (Mpc/h)^3, >= 0, thread-safe: it is called from TBB's workers). Validates params.
/// Parallel (TBB); the same bits whatever the thread count. Allocates 8 n^2 (n + 2) bytes.
DensityModes gaussianDensityModes(const CosmologicalIcParams& params, const std::function<double(double)>& power);

/// The growth at the start, as used for the displacements and velocities.
struct IcGrowth {
  double scaleFactor = 0;      ///< a = 1 / (1 + z)
  double growthRatio = 0;      ///< D1(a) / D1(1): the factor on the z = 0 field
  double growthFactor = 0;     ///< D1(a), normalised D1 -> a at a -> 0
  double secondOrder = 0;      ///< D2(a), same normalisation (~ -3/7 D1^2)
  double growthRate = 0;       ///< f1 = dln D1 / dln a
  double secondOrderRate = 0;  ///< f2 = dln D2 / dln a
  double hubble = 0;           ///< H(a) in km/s per Mpc/h
  double particleMass = 0;     ///< Omega_m rho_crit L^3 / n^3, 1e10 M_sun/h
};

struct CosmologicalIcs {
  Particles particles;  ///< n^3 bodies (conventions above), forces and potentials zero
  IcGrowth growth;
};

/// Bodies displaced and set moving by `modes` (n and L must equal params'; InputError otherwise): Zel'dovich, and
/// with lptOrder 2 the second-order term. The modes with a Nyquist component or k = 0 are ignored (taken as zero).
/// Validates params. Parallel (TBB; FFTW on TBB's threads, plans for a fixed number of jobs): the same bits whatever
/// the thread count. Allocates cosmologicalIcBytes(params) less the modes.
CosmologicalIcs makeCosmologicalIcs(const CosmologicalIcParams& params, const DensityModes& modes);

/// gaussianDensityModes then makeCosmologicalIcs.
CosmologicalIcs makeCosmologicalIcs(const CosmologicalIcParams& params, const std::function<double(double)>& power);

/// Bytes makeCosmologicalIcs(params, power) holds at its peak: the bodies (Particles' 13 doubles and an id each),
/// the modes, and one Fourier grid (1LPT) or four (2LPT: the source and three second derivatives of phi1). For a
/// memory check before any work; does not validate.
std::size_t cosmologicalIcBytes(const CosmologicalIcParams& params);

}  // namespace matcha::cosmology
