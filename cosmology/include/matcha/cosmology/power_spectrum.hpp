// SPDX-License-Identifier: MIT
// The power spectrum P(k) of the mass density contrast of bodies in a periodic cube, measured on a mesh: masses
// deposited with a CIC or TSC window (mesh/'s MassMesh), Fourier transformed, the window deconvolved, optionally
// interlaced, and |delta_k|^2 averaged over spherical shells in |k|; and the growth of each mode between two snapshots
// of one box (measureGrowth), on the same mesh, window and shells, so that cosmic variance cancels.
//
// Conventions (README "Power spectra"):
//  - A cube of side L, periodic; bodies may lie anywhere (reduced into [0, L)). Mesh of n^3 points, h = L / n.
//  - delta(x) = rho(x) / rho_mean - 1 on the mesh, delta_k = (1/N_cells) sum_x delta(x) exp(-i k.x) (N_cells = n^3),
//    k = 2 pi m / L for integer m; then P(k) = L^3 <|delta_k|^2> / W(k)^2 over the modes of a bin, with
//    W(k) = prod_axes sinc(pi m_i / n)^p (p = 2 CIC, 3 TSC): the window's transform, divided out. A plane wave
//    delta = A cos(k.x) puts L^3 A^2 / 4 on each of k and -k; a Poisson sample of N equal masses has the flat
//    P = L^3 / N (the shot noise) at k << k_N, raised towards k_N by the aliased images of the noise (Jing 2005).
//  - Units: k in inverse length units of the positions (h/Mpc for positions in Mpc/h, as GADGET's are), P in length^3.
//  - Modes: each independent mode counts once: k and -k are one mode (delta_{-k} = conj delta_k); a mode that is its
//  own
//    partner (m_i in {0, n/2} on every axis) counts once too. A bin of N modes of a Gaussian field scatters by
//    sigma_P / P = 1 / sqrt(N).
//  - Bins: from k_F = 2 pi / L (the fundamental; k = 0 is left out) to k_N = pi n / L (the mesh's Nyquist, included:
//    modes beyond it, in the corners of the cube of modes, are left out). Linear bins of width w k_F,
//    [k_F + j w k_F, k_F + (j + 1) w k_F), or logarithmic bins, [k_F 10^(j/B), k_F 10^((j+1)/B)); the last bin ends at
//    k_N. Only bins that hold modes are reported.
//  - Shot noise: L^3 sum m_i^2 / (sum m_i)^2 (L^3 / N for equal masses), reported, subtracted only when asked.
//  - Interlacing (Hockney & Eastwood 1981; Sefusatti et al. 2016): a second deposit with every body moved by h/2 along
//    each axis, its transform times exp(i k.(1,1,1) h/2), averaged with the first: the aliased images of odd order
//    cancel. Twice the deposits and transforms, and twice the mesh memory. (A component at the Nyquist index n/2 is
//    taken as m = +n/2 in the phase.)
#pragma once

#include <complex>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "matcha/core/particles.hpp"
#include "matcha/mesh/mass_mesh.hpp"
#include "matcha/mesh/particle_mesh.hpp"

namespace matcha::cosmology {

/// How the shells in |k| are cut.
enum class PowerBinning {
  linear,       ///< width PowerSpectrumParams::binWidth k_F, from k_F
  logarithmic,  ///< PowerSpectrumParams::binsPerDecade per decade, from k_F
};

inline constexpr int kMaxBinsPerDecade = 1000;  ///< most logarithmic bins per decade
inline constexpr int kMaxLinearBins = 1 << 16;  ///< most linear bins (a width far below k_F leaves most of them empty)

/// What to measure and how. Defaults set here only.
struct PowerSpectrumParams {
  double boxSize = 1.0;  ///< L, side of the periodic cube (length units), finite and > 0
  /// n, mesh points per side: in [mesh::kMinGrid, mesh::kMaxGrid] with no prime factor other than 2, 3, 5 and 7 (the
  /// sizes FFTW transforms fast); the command line's default is defaultPowerSpectrumGrid(N).
  int grid = 64;
  /// The window (and so the deconvolution): TSC, as the particle mesh's default, aliases less: a Poisson sample's
  /// deconvolved noise along an axis, without interlacing, lies 0.14% above L^3 / N at k_N / 2 with TSC, 1.5% with CIC
  /// (Jing 2005's sums; both double it at k_N).
  mesh::MassAssignment assignment = mesh::MassAssignment::tsc;
  bool interlace = false;  ///< a second deposit shifted by h/2 along each axis (twice the memory and time)
  PowerBinning binning = PowerBinning::linear;
  double binWidth = 1.0;           ///< linear bins: the width in units of k_F, finite, > 0, <= kMaxLinearBins bins
  int binsPerDecade = 10;          ///< logarithmic bins: per decade of k, 1 to kMaxBinsPerDecade
  bool subtractShotNoise = false;  ///< report P - shot noise instead of P

  /// Throws InputError (one line) for a bad box, a grid out of range or not FFT-friendly (naming the next friendly
  /// size), a bad bin width (or one that makes more than kMaxLinearBins bins) or a bad number of bins per decade.
  void validate() const;
};

/// One shell of modes.
struct PowerBin {
  double kLow = 0, kHigh = 0;  ///< the shell's edges (inverse length): kLow <= |k| < kHigh (<= k_N for the last)
  double k = 0;                ///< the mean |k| of its modes
  double power = 0;            ///< P(k), length^3 (less the shot noise when PowerSpectrum::shotNoiseSubtracted)
  std::uint64_t numModes = 0;  ///< independent modes (k and -k once)
};

struct PowerSpectrum {
  std::vector<PowerBin> bins;  ///< the shells that hold modes, by increasing k
  double shotNoise = 0;        ///< L^3 sum m^2 / (sum m)^2, length^3
  bool shotNoiseSubtracted = false;
  double fundamental = 0;  ///< k_F = 2 pi / L
  double nyquist = 0;      ///< k_N = pi n / L
  std::size_t numBodies = 0;
  double totalMass = 0;  ///< sum m
};

/// The density contrast's modes of one set of bodies on the measurement mesh (PowerSpectrumParams' grid, box, window
/// and interlacing): what measurePowerSpectrum sums, kept so that two snapshots can be compared mode by mode
/// (measureGrowth) after their bodies are gone. Holds one mesh (two interlaced) and nothing of the bodies.
class MeshDensity {
 public:
  /// Deposits and transforms `bodies` (as measurePowerSpectrum; the same checks and InputErrors). Parallel (TBB); the
  /// same bits whatever the threads. Allocates powerSpectrumMemoryBytes(params, bodies.count).
  MeshDensity(const SourceView& bodies, const PowerSpectrumParams& params);

  const PowerSpectrumParams& params() const { return params_; }
  std::size_t numBodies() const { return numBodies_; }
  double totalMass() const { return totalMass_; }
  double shotNoise() const { return shotNoise_; }  ///< L^3 sum m^2 / (sum m)^2

  /// M delta_k (M = sum m) of the stored coefficient `index` (MassMesh's layout), whose signed modes are mx, my, mz:
  /// the transform, interlaced when asked; the window not divided out.
  std::complex<double> mode(std::size_t index, int mx, int my, int mz) const;

 private:
  PowerSpectrumParams params_;
  std::size_t numBodies_ = 0;
  double totalMass_ = 0, shotNoise_ = 0;
  std::optional<mesh::MassMesh> mesh_;     ///< made once the bodies passed their checks
  std::optional<mesh::MassMesh> shifted_;  ///< the interlaced deposit
};

/// Measures P(k) of `bodies` (conventions above).
/// @param bodies  in: positions (anywhere: periodic) and masses (finite, > 0) of 1 to 2^32 - 1 bodies
/// @param params  in: validated here
/// Throws InputError (one line) for bad params, no bodies, too many, a non-finite position or a mass that is not a
/// finite number > 0 (naming the body). Parallel (TBB; FFTW on TBB's threads); the same bits whatever the number of
/// threads (the mesh's ordered deposit and fixed FFT plans, shells summed in a fixed order). Allocates
/// powerSpectrumMemoryBytes(params, bodies.count).
PowerSpectrum measurePowerSpectrum(const SourceView& bodies, const PowerSpectrumParams& params);

/// One shell of modes compared between two snapshots of a box: the growth of each mode, summed over the shell.
struct GrowthBin {
  double kLow = 0, kHigh = 0;  ///< the shell's edges, as PowerBin's
  double k = 0;                ///< the mean |k| of its modes
  std::uint64_t numModes = 0;  ///< independent modes (k and -k once)
  double startPower = 0;       ///< P(k) of the start, L^3 <|delta_s|^2> / W^2 (no shot noise subtracted)
  double endPower = 0;         ///< P(k) of the end, alike
  double crossPower = 0;       ///< L^3 <Re(delta_e conj(delta_s))> / W^2
  /// Re sum delta_e conj(delta_s) / sum |delta_s|^2: each mode's growth, weighted by its start power. A mode that
  /// only grows, delta_e = g delta_s, gives g whatever its amplitude: cosmic variance cancels.
  double crossRatio() const { return crossPower / startPower; }
  /// sum |delta_e|^2 / sum |delta_s|^2, the growth of the shell's power (the same modes at both times).
  double autoRatio() const { return endPower / startPower; }
  /// crossPower / sqrt(startPower endPower): 1 for modes that only grow, less as they decorrelate.
  double correlation() const;
};

struct GrowthSpectrum {
  std::vector<GrowthBin> bins;  ///< the shells that hold modes, by increasing k
  double fundamental = 0;       ///< k_F = 2 pi / L
  double nyquist = 0;           ///< k_N = pi n / L
};

/// Compares two snapshots' density mode by mode on the same mesh and shells (conventions above).
/// @param start, end  in: measured with the same grid, box, window, interlacing and bins (else InputError, one line)
/// Parallel (TBB); the same bits whatever the threads. Allocates only the shells' sums.
GrowthSpectrum measureGrowth(const MeshDensity& start, const MeshDensity& end);

/// Bytes measurePowerSpectrum holds at its peak besides the bodies: one mesh (two interlaced) of
/// mesh::massMeshBytes(n) and 4 bytes per body per mesh for the deposit order. For a memory check before any work.
std::size_t powerSpectrumMemoryBytes(const PowerSpectrumParams& params, std::size_t numBodies);

/// The default grid for N bodies: the FFT-friendly size at or above 2 N^(1/3) (and mesh::kMinGrid). Two mesh points
/// per mean interparticle spacing put k_N at twice the particles' own Nyquist wavenumber pi N^(1/3) / L, so the
/// window's deconvolution and its aliases (both grow towards k_N) stay small up to the scales the bodies resolve;
/// the mesh then costs 64 bytes per body (128 interlaced), about the bodies' own share.
/// Throws InputError when that exceeds mesh::kMaxGrid.
int defaultPowerSpectrumGrid(std::size_t numBodies);

}  // namespace matcha::cosmology
