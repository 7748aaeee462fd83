// SPDX-License-Identifier: MIT
// Plummer-sphere initial conditions in N-body units, sampled as Aarseth, Henon & Wielen (1974, A&A 37, 183).
#pragma once

#include <cstddef>
#include <cstdint>

#include "matcha/core/particles.hpp"

namespace matcha::ic {

/// Length of the Plummer scale radius a in N-body units (G = M = 1, E = -1/4; Heggie & Mathieu 1986): the Plummer
/// energy is E = -3 pi G M^2 / (64 a), so E = -1/4 needs a = 3 pi / 16 ~ 0.589.
inline constexpr double kPlummerScaleRadius = 3.0 * 3.14159265358979323846 / 16.0;

struct PlummerParams {
  std::size_t numBodies = 65536;  ///< number of bodies N, >= 1; each has mass 1/N
  std::uint64_t seed = 1;         ///< seed of the std::mt19937_64 stream; the same seed gives the same bodies
  /// Radius cut as a mass fraction in (0, 1]: radii are drawn from the cumulative mass m(r)/M < massCut, so the
  /// bodies lie within r_cut = a (massCut^(-2/3) - 1)^(-1/2) of the centre (before centring, see makePlummer).
  /// The default 0.999 gives r_cut ~ 38.7 a ~ 22.8 N-body length units. 1.0 means untruncated; the largest
  /// radius the sampler can then return is ~1.2e8 a (set by the largest uniform deviate, 1 - 2^-53).
  double massCut = 0.999;
};

/// Returns the largest radius (N-body length units, before centring) that makePlummer can place a body at for the
/// given mass cut: a (massCut^(-2/3) - 1)^(-1/2), or +inf for massCut = 1. Throws InputError unless massCut is in
/// (0, 1].
double plummerCutRadius(double massCut);

/// Samples a Plummer sphere of params.numBodies equal-mass bodies, in N-body units (G = 1, M = 1, E = -1/4).
///
/// Sampling follows Aarseth, Henon & Wielen (1974, A&A 37, 183), in units G = M = a = 1, with uniform deviates
/// X1..X7 in (0, 1) drawn per body in this order:
///   - radius from the cumulative mass X1 (scaled by massCut): r = (X1^(-2/3) - 1)^(-1/2);
///   - isotropic position direction: z = (1 - 2 X2) r, x and y on the circle of radius sqrt(r^2 - z^2) at angle
///     2 pi X3;
///   - speed v = q v_esc with v_esc = sqrt(2) (1 + r^2)^(-1/4), where q comes from von Neumann rejection on
///     g(q) = q^2 (1 - q^2)^(7/2): pairs (X4, X5) are drawn until 0.1 X5 < g(X4), then q = X4 (max g ~ 0.092);
///   - isotropic velocity direction from X6 and X7 as for the position.
/// Then positions are scaled by 3 pi / 16 and velocities by sqrt(16 / (3 pi)) to reach N-body units. Finally the
/// mass-weighted mean position and velocity are subtracted, so the centre of mass sits at the origin and the total
/// momentum is zero (to rounding); this shifts every body by the same small vector (~ 1/sqrt(N) length units).
///
/// The energy is E = -1/4 only in expectation and only for massCut = 1: the cut removes the slowest outer bodies and
/// raises the kinetic energy by ~0.1% at massCut = 0.999; sampling noise is ~0.6% / sqrt(N / 20000).
///
/// Uniform deviates are built from raw 64-bit draws of std::mt19937_64 (whose output sequence the standard fixes),
/// not from std::uniform_real_distribution (whose output is implementation-defined), so a seed names the same
/// bodies with every standard library; the transcendental functions may still differ in the last bit between libm
/// versions.
///
/// @param params  in: N, seed and mass cut
/// @return  N bodies with ids 0..N-1, masses 1/N, accelerations and potentials zero
/// @throws InputError for N == 0, or massCut not in (0, 1] (NaN included)
Particles makePlummer(const PlummerParams& params);

/// makePlummer in pieces, for ranks that each make their own bodies of one sphere (apps/: `matcha run` on several
/// ranks), none holding the whole: each takes bodies [first, first + count) of the sphere, sampled as makePlummer
/// samples them (the deviates of the bodies before `first` drawn and dropped: the time of first + count bodies, ~0.2
/// us each), and centres them with the sums of every body (PlummerCentring), which the callers carry from one piece to
/// the next in body order. makePlummer is these pieces in one, so the pieces give its bodies bit for bit.
///
/// @return  bodies first .. first + count - 1 (ids, masses 1/N), not centred; none when count is 0
/// @throws InputError as makePlummer, and when first + count exceeds N
Particles makePlummerRange(const PlummerParams& params, std::size_t first, std::size_t count);

/// The centring of makePlummer: twice, the mass-weighted mean position and velocity subtracted from every body. The
/// means' sums run over the bodies in id order, as one loop would: `add` adds a piece's bodies to them (the running
/// sums of the pieces before, in order), and once every piece is added, `subtract` takes the means off a piece.
struct PlummerCentring {
  /// The running sums: the mass, then mass times x, y, z, vx, vy, vz.
  static constexpr std::size_t kSums = 7;
  using Sums = double[kSums];
  /// Adds the bodies of `piece`, in their order, to `sums` (zero before the first piece).
  static void add(const Particles& piece, double* sums);
  /// Subtracts the means (sums over all pieces: their mass-weighted sums over the mass) from every body of `piece`.
  static void subtract(const double* sums, Particles& piece);
};

}  // namespace matcha::ic
