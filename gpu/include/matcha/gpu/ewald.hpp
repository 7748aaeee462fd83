// SPDX-License-Identifier: MIT
// The exact periodic reference: Ewald summation in double precision on the CPU (Hernquist, Bouchet & Suto 1991), the
// oracle that periodic solvers (TreePM) are measured against. A slow, exact sum, O(targets x sources) in real space
// plus O((targets + sources) x wave vectors) in Fourier space; no correction table.
//
// Conventions (README "Periodic reference (Ewald)"):
//  - A cubic box of side L, periodic in x, y and z. Bodies may sit anywhere: separations are wrapped to the nearest
//    image and phases are taken of positions reduced into [0, L).
//  - Neutralising background: the mean density is subtracted (the k = 0 Fourier term is dropped), as cosmological
//    codes do. It changes no force; it fixes the potential's constant so that the potential of the box averages to
//    zero. Tinfoil boundary (the Ewald sum itself): no uniform field, however the image sum would be ordered.
//  - Signs as pair_interaction.hpp: a_i = sum_j G m_j grad psi, phi_i = -sum_j G m_j psi(x_i - x_j), where psi is the
//    periodic Green's function (psi -> 1/r as r -> 0):
//      psi(r) = sum_n erfc(alpha |r + nL|) / |r + nL| + (4 pi / L^3) sum_{k != 0} exp(-k^2 / 4 alpha^2) / k^2 cos(k.r)
//               - pi / (alpha^2 L^3),                 k = 2 pi h / L, h integer.
//  - Self pairs: a body does not act on itself, only through its images and the background: its own term is
//    lim_{r -> 0} (psi(r) - 1/r) = -2.8372974794806 / L (the simple cubic lattice's constant), so a body alone in
//    the box has the potential phi = +2.8372975 G m / L (positive: the subtracted background outweighs its images),
//    and no acceleration.
//  - Softening: the Ewald sum is Newtonian. GravityParams::eps softens the nearest image only: each pair's nearest
//    image enters as accumulatePairInteraction (Plummer, and its rules for zero separation), the rest of the
//    periodic sum (further images, background) unsoftened, i.e.
//      periodic = Plummer(nearest image) + (Ewald - Newtonian(nearest image)).
//    eps = 0 gives the exact Newtonian periodic force. Two distinct bodies at one point then skip their nearest
//    image (as direct summation does) and keep the rest, like a body's own term.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "matcha/core/params.hpp"
#include "matcha/core/particles.hpp"

namespace matcha::gpu {

/// The box and where the Ewald sums are cut. alpha is the splitting parameter: erfc(alpha r) / r in real space,
/// exp(-k^2 / 4 alpha^2) / k^2 in Fourier space. Both sums are cut where their Gaussian factor falls to exp(-X^2):
/// real-space images are kept for alpha |r + nL| < X (the nearest image always), wave vectors for |k| < 2 alpha X.
/// The defaults, alpha L = 12 and X = 6, cut both at exp(-36) = 2.3e-16: the real-space cutoff is X / alpha = L / 2,
/// so only the nearest image of each source enters real space, and |h| < alpha L X / pi = 22.9, 25,270 wave vectors
/// (half of the 50,540 with 0 < |h| < 22.9: k and -k are summed together). Truncation then changes nothing above
/// rounding: X = 6 and X = 8 agree to ~5e-16 (forces) and ~5e-15 (potentials) of their rms, alpha L = 3, 6, 12 and 20
/// to ~2e-15 (tests Ewald.ConvergedInItsCutoff, Ewald.IndependentOfAlpha); the issue asks for 1e-10.
struct EwaldParams {
  double boxSize = 1.0;         ///< L, side of the periodic cube (length units), finite and > 0
  double alphaTimesBox = 12.0;  ///< alpha L (dimensionless), finite and in [1, 32]
  double cutoff = 6.0;          ///< X (dimensionless): both sums cut at exp(-X^2); finite and in [3, 8]

  /// Throws InputError when a value is out of range: below alpha L = 1 thousands of real-space images enter per pair,
  /// above 32 (with X = 8) a million wave vectors.
  void validate() const;
};

/// How many terms the sums keep, for reports and tests.
struct EwaldTerms {
  double realCutoff = 0;           ///< X / alpha (length units)
  double waveCutoff = 0;           ///< 2 alpha X (1 / length units)
  std::size_t numImageShifts = 0;  ///< lattice shifts n != 0 that can come within realCutoff of a nearest image
  std::size_t numWaveVectors = 0;  ///< wave vectors summed, one of each pair +-k
};

/// The terms that `params` keeps. Throws InputError for invalid params.
EwaldTerms ewaldTerms(const EwaldParams& params);

/// Periodic accelerations and potentials at every body from every body (see the conventions above).
///
/// @param sources  in: positions and masses, sources.count bodies (anywhere; positions are not changed)
/// @param gravity  in: G, and eps for the nearest image (0: Newtonian)
/// @param ewald    in: box and cutoffs
/// @param out      out: out.count == sources.count; ax, ay, az (and pot unless null) overwritten for every body
/// Parallel (TBB) over targets; allocates the wave-vector table and the sources' structure factors. Deterministic:
/// the same inputs give the same bits whatever the thread count, and the same bits as the subset form for the
/// bodies it evaluates. Throws InputError for invalid params, InvariantError when out's size differs.
void evaluateEwald(const SourceView& sources, const GravityParams& gravity, const EwaldParams& ewald,
                   const ForceView& out);

/// The same at a subset of the bodies (a random subsample for `compare`), from all the sources.
///
/// @param targets  in: indices into sources of the bodies to evaluate, each < sources.count (repeats allowed)
/// @param out      out: out.count == targets.size(); entry k is body targets[k] (compact, not the sources' index
///                 space); overwritten
void evaluateEwald(const SourceView& sources, const GravityParams& gravity, const EwaldParams& ewald,
                   std::span<const std::uint32_t> targets, const ForceView& out);

/// The subset form on the GPU (gpu/cuda/ewald_kernels.cu), for large N: the same sums in double (the real-space term
/// is the CPU's own function, detail/ewald_terms.hpp), each in a fixed order, so a call gives the same bits every
/// time; against the CPU it differs by rounding (its phases come from sincospi per axis and pair, its sums run in
/// another order). Allocates its device buffers per call. Throws InputError for invalid params or targets, and in a
/// build without CUDA or on a machine without a usable device.
void evaluateEwaldOnGpu(const SourceView& sources, const GravityParams& gravity, const EwaldParams& ewald,
                        std::span<const std::uint32_t> targets, const ForceView& out);

/// lim_{r -> 0} (psi(r) - 1/r) L for the simple cubic lattice with a neutralising background (Nijboer & de Wette
/// 1957): the potential of a body alone in a box of side L is -G m kEwaldSelfConstant / L.
inline constexpr double kEwaldSelfConstant = -2.837297479480620;

}  // namespace matcha::gpu
