// SPDX-License-Identifier: MIT
// The physics of one softened pair interaction, written once for the CPU engines, the CPU oracle and the CUDA
// kernels (DESIGN.md §3). Everything here is a host-device inline template; nothing allocates or branches on data
// except through selects that compilers turn into blends.
#pragma once

#include <cmath>

#include "matcha/core/host_device.hpp"

namespace matcha {

/// 1/sqrt(x) in the precision of T; on the GPU the hardware reciprocal square root.
/// float on the GPU: the flush-to-zero form of the approximate instruction (one MUFU.RSQ, ~2 ulp). The non-ftz
/// form costs extra instructions to rescale subnormal inputs; those arise only for r^2 + eps^2 < 1.2e-38, where
/// 1/r^3 overflows float anyway.
/// double on the GPU: the hardware estimate (MUFU.RSQ64H, ~23 correct bits) refined by two Newton steps to about
/// one ulp, 7 FP64 instructions. CUDA's rsqrt(double) adds a guarded slow path for special inputs that costs ~24
/// integer and branch instructions per call, nearly doubling the double kernel's issue count; r^2 + eps^2 is never
/// negative, infinite or subnormal here (a zero input gives NaN, which the zero-distance rules discard).
template <class T>
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE T reciprocalSqrt(T x) {
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(T) == 4) {
    float y;
    asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
  } else {
    double y;
    asm("rsqrt.approx.ftz.f64 %0, %1;" : "=d"(y) : "d"(x));
    const double halfX = 0.5 * x;
    y = fma(y, fma(-halfX, y * y, 0.5), y);  // y <- y (3/2 - x y^2 / 2)
    y = fma(y, fma(-halfX, y * y, 0.5), y);
    return y;
  }
#else
  return T(1) / std::sqrt(x);
#endif
}

/// sqrt(x) for x >= 0; float on the GPU the approximate instruction (one MUFU, ~1 ulp): the IEEE sqrtf adds a Newton
/// step and a slow path for subnormals, ~8 instructions per truncated pair for a distance that only feeds erfc.
template <class T>
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE T squareRoot(T x) {
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(T) == 4) {
    float y;
    asm("sqrt.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
  } else {
    return sqrt(x);
  }
#else
  return std::sqrt(x);
#endif
}

/// Adds the pull of source j on target i:
///   a_i += m_j r_ij / (|r_ij|^2 + eps^2)^{3/2},   phi_i -= m_j / sqrt(|r_ij|^2 + eps^2),   r_ij = x_j - x_i.
/// G is applied by the caller once per target, not per pair.
///
/// Which pairs count is decided by r^2 + eps^2 > 0, not by r^2 > 0, so that two distinct bodies at one point feel each
/// other's softened potential -m/eps (their acceleration is zero by symmetry either way). With eps > 0 every pair
/// therefore counts, the self pair too: it adds exactly 0 to the acceleration and -m_i/eps to the potential, and the
/// caller removes the latter once per body where the body's sum is finalised (selfPairPotential). That keeps the
/// self-term rule out of the inner loops: a body's own index is not known there, and a test on it would cost an
/// instruction per pair. With eps = 0 a pair at zero separation is singular (0/0): it is skipped, the self pair and
/// any coincident distinct pair alike (DESIGN.md §3: never NaN), and selfPairPotential is 0.
/// The skipped pair's argument of the square root is replaced by 1 before the division so that vectorised lanes
/// never divide by zero (tests trap floating-point exceptions).
///
/// @param dx,dy,dz  in: x_j - x_i
/// @param massJ     in: m_j (0 for padding; padding then adds exactly nothing)
/// @param eps2      in: squared Plummer softening length
/// @param ax,ay,az,pot  in/out: accumulated, never overwritten
template <class T>
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE void accumulatePairInteraction(T dx, T dy, T dz, T massJ, T eps2, T& ax, T& ay,
                                                                     T& az, T& pot) {
  const T r2 = dx * dx + dy * dy + dz * dz;
  const T sum = r2 + eps2;
  const bool counted = sum > T(0);
  const T softenedR2 = counted ? sum : T(1);
  const T invR = counted ? reciprocalSqrt(softenedR2) : T(0);
  const T massInvR = massJ * invR;
  const T massInvR3 = massInvR * invR * invR;
  ax += massInvR3 * dx;
  ay += massInvR3 * dy;
  az += massInvR3 * dz;
  pot -= massInvR;
}

/// The self pair's term of a body's potential sum, as the pair loops add it: -m_i / eps for eps > 0 (the pair at
/// r = 0 counts, see accumulatePairInteraction), 0 for eps = 0 (skipped). Every body meets itself exactly once among
/// its sources (a tree list holds each source once and always the group's own bodies; a direct sum holds every body),
/// so subtracting this once, in double, where the body's potential is finalised leaves the sum over j != i. It uses
/// the pair's own reciprocalSqrt(eps2), so where the self pair was evaluated in double (double engines; float plans
/// with accurateNearPairs, whose near pairs go to double) the two cancel exactly. Where it was summed in float (float
/// tree plans) pot_i keeps an absolute error of ~6e-8 m_i/eps from the float sum that held it: negligible beside the
/// tree's potential error unless m_i/eps is thousands of times |pot_i| (very small eps with few bodies).
template <class T>
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE T inverseSoftening(T eps2) {
  return eps2 > T(0) ? reciprocalSqrt(eps2) : T(0);
}
/// The self pair's term: -m_i inverseSoftening(eps2). Kernels take inverseSoftening from the host, computed once per
/// call, and add m_i times it: the reciprocal square root in double per body, after their loops, raised the CUDA
/// kernels' register use by up to 15 (a block fewer per SM for some shapes) and slowed those that compute potentials
/// by 6-10% (H200). The host's 1/sqrt and the device's reciprocalSqrt may differ in the last bit: 1e-16 of m_i/eps.
template <class T>
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE T selfPairPotential(T massI, T eps2) {
  return -(massI * inverseSoftening(eps2));
}

/// The same pull as accumulatePairInteraction, in the fewest instructions, for batches of pairs that the caller
/// checks (the CUDA kernels' inner loop, DESIGN.md §4). eps^2 is folded into the sum of squares (three fused
/// multiply-adds) and there is no select: it equals accumulatePairInteraction up to rounding wherever r^2 + eps^2 > 0,
/// that is for every pair when eps > 0, and differs (inf or NaN) only for a pair at zero separation with eps = 0.
/// Returns the pair's r^2 + eps^2, so that a caller that cannot rule out near pairs beforehand can keep the batch's
/// minimum (one FMNMX per pair) and test `minimum > eps2` afterwards:
///  - true: every pair of the batch had r^2 > 0, so no pair was singular and the batch's sums stand;
///  - false: some pair was at zero separation (the body's own, a coincident body) or so close that r^2 + eps^2
///    rounded to eps^2; the caller evaluates the batch again with accumulatePairInteraction, which matters only when
///    eps = 0 (the partial sums then may hold inf or NaN) and gives the same sums up to rounding otherwise.
/// A zero-distance pair gives exactly r^2 + eps^2 == eps2, so the test never misses one. A caller that has bounded
/// r^2 + eps^2 from below for the whole batch (the CUDA kernels' far tiles) skips the minimum. Padding sources
/// (mass 0) must sit far away (not at zero separation), or they trigger needless re-evaluations. Like
/// accumulatePairInteraction it counts the self pair when eps > 0: the caller removes it (selfPairPotential).
///
/// @param dx,dy,dz,massJ,eps2  in: as for accumulatePairInteraction
/// @param ax,ay,az,pot         in/out: accumulated
/// @return r^2 + eps^2 as computed here: fma(dx, dx, fma(dy, dy, fma(dz, dz, eps2)))
template <class T>
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE T accumulatePairInteractionUnchecked(T dx, T dy, T dz, T massJ, T eps2, T& ax,
                                                                           T& ay, T& az, T& pot) {
  const T softenedR2 = dx * dx + (dy * dy + (dz * dz + eps2));  // nvcc contracts this into three FMAs
  const T invR = reciprocalSqrt(softenedR2);
  const T massInvR = massJ * invR;
  const T massInvR3 = massInvR * (invR * invR);
  ax += massInvR3 * dx;
  ay += massInvR3 * dy;
  az += massInvR3 * dz;
  pot -= massInvR;
  return softenedR2;
}

/// The smallest normal number of T (std::numeric_limits<T>::min(), which device code cannot call).
template <class T>
MATCHA_HOST_DEVICE constexpr T smallestNormal() {
  if constexpr (sizeof(T) == 4) {
    return T(0x1p-126f);
  } else {
    return T(0x1p-1022);
  }
}

/// Adds the pull of source j on target i, its time derivative (the jerk) and the potential, for 4th-order Hermite
/// integration (Makino & Aarseth 1992; HermiteEngine in hermite_engine.hpp), with s^2 = |r|^2 + eps^2:
///   a    += m_j r / s^3
///   jerk += m_j (v / s^3 - 3 (r.v) r / s^5)
///   phi  -= m_j / s,                              r = x_j - x_i,  v = v_j - v_i.
/// G is applied by the caller. A pair with s^2 = 0 (eps = 0 and coincident particles) adds nothing, as in
/// accumulatePairInteraction: the select keeps every lane free of 0/0 (tests trap floating-point exceptions). So does a
/// pair whose s^2 is below the smallest normal number of T (1.2e-38 in float): there 1/s^3 overflows, and on the GPU
/// the flush-to-zero reciprocal square root returns inf for it. The caller skips a source by giving it mass 0 (a
/// particle's own j-copy, which need not sit at r = 0: the caller's predicted i-position and the engine's predicted
/// j-position can differ in the last bits, and mass 0 times a finite 1/s^3 adds exactly nothing; the rule above keeps
/// 1/s^3 finite when those bits put the copy 1e-20 away). About 30 floating-point instructions, one a reciprocal
/// square root.
///
/// @param dx,dy,dz     in: x_j - x_i
/// @param dvx,dvy,dvz  in: v_j - v_i
/// @param massJ        in: m_j (0: adds nothing)
/// @param eps2         in: squared Plummer softening length
/// @param ax..az,jx..jz,pot  in/out: accumulated, never overwritten
/// @return |r|^2, unsoftened, for the caller's nearest-neighbour search
template <class T>
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE T accumulateJerkPairInteraction(T dx, T dy, T dz, T dvx, T dvy, T dvz, T massJ,
                                                                      T eps2, T& ax, T& ay, T& az, T& jx, T& jy, T& jz,
                                                                      T& pot) {
  const T r2 = dx * dx + dy * dy + dz * dz;
  const T sum = r2 + eps2;
  const bool counted = sum >= smallestNormal<T>();
  const T invR = counted ? reciprocalSqrt(counted ? sum : T(1)) : T(0);
  const T invR2 = invR * invR;
  const T massInvR = massJ * invR;
  const T massInvR3 = massInvR * invR2;
  const T rv3 = T(3) * (dx * dvx + dy * dvy + dz * dvz) * invR2;  // 3 (r.v) / s^2
  ax += massInvR3 * dx;
  ay += massInvR3 * dy;
  az += massInvR3 * dz;
  jx += massInvR3 * (dvx - rv3 * dx);
  jy += massInvR3 * (dvy - rv3 * dy);
  jz += massInvR3 * (dvz - rv3 * dz);
  pot -= massInvR;
  return r2;
}

/// The short-range factors of the TreePM force split (Bagla 2002; Springel 2005, GADGET-2 eq. 21-22) at separation r,
/// with r_s the split radius and x = r / (2 r_s):
///   force:     f(r) = erfc(x) + (2 / sqrt(pi)) x exp(-x^2)   [= erfc(r/2r_s) + r exp(-r^2/4r_s^2) / (r_s sqrt(pi))]
///   potential: g(r) = erfc(x)
/// The Newtonian 1/r splits exactly into g(r) / r, summed in real space, and erf(r / 2 r_s) / r, whose Fourier
/// transform 4 pi exp(-k^2 r_s^2) / k^2 the particle mesh sums (mesh/particle_mesh.hpp). 1 - f(r) is the share of a
/// Gaussian cloud (density ~ exp(-r^2 / 4 r_s^2)) within r, so f r / r^3 and the cloud's pull add up to r / r^3.
/// Both fall from 1 at r = 0: f = 1.75e-2 and g = 1.5e-3 at 4.5 r_s, f = 1.7e-3 at 5.5 r_s, f = 4.4e-4 at 6 r_s.
/// In double erfc and exp are <cmath>'s (CUDA's on the GPU); float uses the polynomial below.
template <class T>
struct ShortRangeFactors {
  T force;      ///< f(r): multiplies the Newtonian (Plummer-softened) pull
  T potential;  ///< g(r): multiplies the Newtonian (Plummer-softened) potential
  T gaussian;   ///< exp(-x^2), which f' and g' carry (accumulateTruncatedQuadrupoleInteraction)
};

/// f(r) and g(r) from a polynomial erfc that shares its Gaussian with f's second term, for float (no table, no
/// erfcf): erfc(x) = t P(t) exp(-x^2), t = 1 / (1 + x/2), P of degree 6 (the form of Abramowitz & Stegun 7.1.26,
/// refitted for relative error on 0 <= x <= 3, i.e. r <= 6 r_s, with Lawson-weighted least squares: A&S's own
/// coefficients are fitted for absolute error, 1.5e-7, which is 1e-4 of g at the default cut). The fit's relative error
/// is 1.9e-7 in exact arithmetic; evaluated in float (host: 1/(1 + x/2) and std::exp) the worst relative error up to
/// x = 2.25 (r_cut = 4.5 r_s) is 7.0e-7 in g and 4.4e-7 in f against erfc in double
/// (tests/core/test_truncated_pair.cpp measures it). On the GPU t is the hardware reciprocal (rcp.approx, 1 ulp),
/// the Gaussian the hardware 2^x of -x^2 log2(e) (ex2.approx), whose error grows as ~6e-8 x^2 + 2 ulp: 4e-7 at
/// x = 2.25, so f and g stay within ~1e-6 relative, far below the tree's 1e-4..1e-3. Both in their .ftz forms:
/// __fdividef and __expf, which these were, give the same bits for the arguments here (a denominator in [1, 3), an
/// exponent above -126: x < 9), but without flush-to-zero in the build each wraps its MUFU in a test and two
/// conditional multiplies for denormal arguments or results (the periodic plan kernel's SASS on sm_90: 5 instructions
/// each, 7 of its ~48 a pair). Cost: 2 MUFU (rcp, ex2) and ~12 FP32 instructions for both factors, against ~40 for
/// erfcf + expf.
/// Beyond x = 3 (cells a little past the cut) the error grows slowly while f and g fall below 2e-4.
template <class T>
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE ShortRangeFactors<T> shortRangeFactorsPolynomial(T r, T invTwoSplit) {
  constexpr T kTwoOverSqrtPi = T(1.1283791670955126);
  const T x = r * invTwoSplit;
#if defined(__CUDA_ARCH__)
  T t, gauss;
  if constexpr (sizeof(T) == 4) {
    const float denominator = fma(T(0.5), x, T(1));
    const float exponent = (x * x) * -0x1.715476p+0f;  // -x^2 log2(e), log2(e) rounded to float as __expf takes it
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(t) : "f"(denominator));
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(gauss) : "f"(exponent));
  } else {
    t = T(1) / fma(T(0.5), x, T(1));
    gauss = exp(-x * x);
  }
#else
  const T t = T(1) / (T(0.5) * x + T(1));
  const T gauss = std::exp(-x * x);
#endif
  T poly = T(8.7953426445e-02);
  poly = poly * t + T(-3.5115545936e-01);
  poly = poly * t + T(3.7219023647e-01);
  poly = poly * t + T(5.9439213468e-02);
  poly = poly * t + T(2.6803628772e-01);
  poly = poly * t + T(2.8169351437e-01);
  poly = poly * t + T(2.8184297449e-01);
  const T erfcX = (t * poly) * gauss;
  return {erfcX + (kTwoOverSqrtPi * x) * gauss, erfcX, gauss};
}

/// f(r) and g(r) above for a separation r >= 0, given invTwoSplit = 1 / (2 r_s). Float takes
/// shortRangeFactorsPolynomial, on the host (the CPU engine) as on the GPU: the same factors in both float engines, and
/// no erfcf per pair (glibc's erfcf and expf were ~37% of the CPU engine's periodic call, not vectorised; 2^15 bodies
/// in a box on the 2-core build machine, alternating runs: the engine's 0.89-0.90 s a call -> 0.69-0.76 s, p99 against
/// double unchanged at 1.162e-4). Double takes <cmath>'s (or CUDA's) erfc and exp.
template <class T>
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE ShortRangeFactors<T> shortRangeFactors(T r, T invTwoSplit) {
  constexpr T kTwoOverSqrtPi = T(1.1283791670955126);  // 2 / sqrt(pi)
  if constexpr (sizeof(T) == 4) return shortRangeFactorsPolynomial(r, invTwoSplit);
  const T x = r * invTwoSplit;
#if defined(__CUDA_ARCH__)
  const T erfcX = erfc(x);
  const T gauss = exp(-x * x);
#else
  const T erfcX = std::erfc(x);
  const T gauss = std::exp(-x * x);
#endif
  return {erfcX + kTwoOverSqrtPi * x * gauss, erfcX, gauss};
}

/// The short-range (TreePM) variant of accumulatePairInteraction: the same Plummer-softened pull and potential, the
/// pull multiplied by f(r) and the potential by g(r) (shortRangeFactors, r the unsoftened separation), and nothing at
/// all from a pair at r >= r_cut, where the mesh's long-range part stands for the whole pull (the error this leaves is
/// f(r_cut) of the Newtonian pull just beyond the cut). Softening applies to the short range only, as in GADGET: the
/// mesh's long-range part is Newtonian, and eps << r_s keeps the difference small (README "Particle mesh").
///
/// The zero-distance rules are accumulatePairInteraction's, and f(0) = g(0) = 1: with eps > 0 the self pair adds 0 to
/// the acceleration and exactly -m_i/eps to the potential, so selfPairPotential removes it as before; with eps = 0 a
/// pair at zero separation is skipped. Beyond the cut (and for a skipped pair) the selected factors are 0, so no lane
/// divides by zero or takes a square root of a negative number.
///
/// @param dx,dy,dz     in: x_j - x_i, already the nearest periodic image (the caller wraps)
/// @param massJ        in: m_j
/// @param eps2         in: squared Plummer softening length
/// @param invTwoSplit  in: 1 / (2 r_s)
/// @param cutoff2      in: r_cut^2; pairs with r^2 >= cutoff2 add nothing
/// @param ax,ay,az,pot in/out: accumulated, never overwritten
template <class T>
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE void accumulateTruncatedPairInteraction(T dx, T dy, T dz, T massJ, T eps2,
                                                                              T invTwoSplit, T cutoff2, T& ax, T& ay,
                                                                              T& az, T& pot) {
  const T r2 = dx * dx + dy * dy + dz * dz;
  const T sum = r2 + eps2;
  const bool counted = sum > T(0) && r2 < cutoff2;
  const T softenedR2 = counted ? sum : T(1);
  const T invR = counted ? reciprocalSqrt(softenedR2) : T(0);
  const T r = squareRoot(counted ? r2 : T(0));
  const ShortRangeFactors<T> factors = shortRangeFactors(r, invTwoSplit);
  const T massInvR = massJ * invR;
  const T forceFactor = massInvR * invR * invR * factors.force;
  ax += forceFactor * dx;
  ay += forceFactor * dy;
  az += forceFactor * dz;
  pot -= massInvR * factors.potential;
}

/// The nearest periodic image of a separation d with |d| < 3L/2 (coordinates already reduced to within a box of each
/// other): d shifted by one box length when it lies beyond half a box, with two selects that vectorise (no rounding
/// to an integer per pair). The result lies in [-L/2, L/2].
template <class T>
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE T nearestImage(T d, T boxSize) {
  const T half = T(0.5) * boxSize;
  d = d > half ? d - boxSize : d;
  return d < -half ? d + boxSize : d;
}

/// Which pairs the float engines evaluate a second time, in double.
///
/// Float is good to ~1e-7 per pair, and a direct sum of float pairs in per-tile partial sums stays near 1e-7 of the
/// sum of the pair magnitudes. Two kinds of pair break that, and both are rare:
///  - close to the centre's rounding: float coordinates relative to a shared centre c (a group's or a block's) round
///    each position to ~6e-8 of its distance R from c, so the separation of a pair much closer than R loses
///    digits (relative error ~1.2e-7 R / s);
///  - strong: a pair within a couple of softening lengths pulls with up to ~m/eps^2, which can exceed the body's
///    total acceleration many times over (bodies near the centre of a system, where the rest cancels), so its own
///    ~2e-7 float error becomes a large fraction of a_i (measured: 3.8e-6 for one body of a 2^15 Plummer sphere with
///    eps = 1/256, with exact separations and per-pair double sums).
/// A tile whose smallest softened squared distance s^2 = r^2 + eps^2 for body i falls at or below
///     closePairThreshold = max(25 eps^2, eps^2 + |x_i - c|^2 / kCloseSeparationRatio^2)
/// (s < 5 eps, or r < R / 16) is evaluated again for body i: the pairs below the threshold in double, from
/// separations taken in double, the others again in float. The pairs left in float then have separations good to
/// ~2e-6 relative at worst. The self pair (r = 0) always qualifies, so in space-filling-curve order (compact blocks,
/// small R) this costs a few extra tiles per body, one of which the self-term rule needed anyway; in random order R
/// is the distance from the system's centre and many more tiles qualify (correct, but slower: sort first).
/// Why 5 eps: float direct summation of a Plummer sphere of 2^17 bodies (eps 1/256, 256-body blocks in Hilbert order,
/// CPU engine, one seed) had E_max 2.0e-6 with 3 eps, 1.7e-6 when the CPU engine also summed the redone tile's float
/// pairs in double (which it keeps: its partial sums are 128 terms long), 1.1e-6 with 5 eps and 1.0e-6 with 8 eps:
/// past 5 eps the pairs that remain in float no longer set the maximum.
inline constexpr double kCloseSeparationRatio = 16.0;
inline constexpr double kStrongPairSoftenings = 5.0;
template <class T>
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE T closePairThreshold(T xi, T yi, T zi, T eps2) {
  constexpr T kInvRatio2 = T(1.0 / (kCloseSeparationRatio * kCloseSeparationRatio));
  constexpr T kStrong2 = T(kStrongPairSoftenings * kStrongPairSoftenings);
  const T closeToCentre = eps2 + (xi * xi + yi * yi + zi * zi) * kInvRatio2;
  const T strong = kStrong2 * eps2;
  return closeToCentre > strong ? closeToCentre : strong;
}

/// Which bodies the float engines sum a second time, whole, in double: those whose float sum cancelled.
///
/// A float partial sum errs by ~1e-8..1e-7 of what it sums, so a body's float error is set by the sum of the
/// magnitudes of its float partial sums, M = sum over partial sums of |s_x| + |s_y| + |s_z|, not by its acceleration.
/// Where the pulls cancel (near the centre of a system, or between two clumps) |a_i| is many times smaller than M and
/// the relative error grows by that ratio: the one Plummer seed of eight whose float E_max missed the 2e-6 target
/// (5.3e-6, N = 2^17) had a body whose terms summed to 500 times its |a|. A body with
///     (|a_x| + |a_y| + |a_z|) * kCancellationRatio < M
/// is summed again in double over every source. M is a lower bound of the sum of the pair magnitudes (the pairs of a
/// partial sum cancel too, more so in random order), so the bodies left in float cancel by less than ~32-100 and keep
/// ~1e-8 of that ratio. Measured on Plummer spheres of 2^17 bodies (H100, eight seeds): 13-35 bodies qualified in
/// Hilbert order and 0-2 in random order, and E_max fell to 3.1e-7..5.6e-7. Each costs one sum over every source in
/// double, ~1/1000 of the whole float sum per 1000 bodies.
/// The near pairs that closePairThreshold already sends to double do not count in M. A partial sum is what one
/// accumulator summed in sequence: a CUDA thread's tile or bag, a CPU SIMD lane's share of a tile (not the tile's
/// total, which can cancel between lanes while each lane's rounding stays).
inline constexpr double kCancellationRatio = 32.0;
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE bool floatSumCancelled(double ax, double ay, double az, double floatMagnitude) {
  return (std::fabs(ax) + std::fabs(ay) + std::fabs(az)) * kCancellationRatio < floatMagnitude;
}

/// Traceless quadrupole of a cell, about its centre of mass, and the trace of its second moment (CellMultipoles).
template <class T>
struct Quadrupole {
  T xx, yy, zz, xy, xz, yz;
  T trace;  ///< sum m |x - com|^2
};

/// Adds the pull of a cell (mass M at the centre of mass, quadrupole Q about it) on target i, to quadrupole order,
/// for the Plummer-softened potential -m / sqrt(r^2 + eps^2). Its Taylor expansion about the centre of mass (the
/// dipole vanishes there) with s^2 = |d|^2 + eps^2, d = com - x_i, is
///   phi_i -= M / s + (d.Q.d - eps^2 T) / (2 s^5),
///   a_i   += M d / s^3 - Q d / s^5 + (5/2) (d.Q.d - eps^2 T) d / s^7,
/// where T = sum m |x - com|^2 is the trace the traceless Q leaves out: with softening the second-order term keeps
/// a part proportional to it, which dominates a few eps from a round cell (there it cut the cell's error from
/// 1.2e-2 to 2e-3). For eps = 0 this is the classical quadrupole. The group walk never lets a cell that contains
/// target i in front of it, so d is never zero here and no zero-distance rule applies.
/// About 35 floating-point instructions against the monopole's 14.
///
/// @param dx,dy,dz  in: com - x_i
/// @param mass      in: M
/// @param q         in: Q and T
/// @param eps2      in: squared softening length
/// @param ax,ay,az,pot  in/out: accumulated
template <class T>
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE void accumulateQuadrupoleInteraction(T dx, T dy, T dz, T mass,
                                                                           const Quadrupole<T>& q, T eps2, T& ax, T& ay,
                                                                           T& az, T& pot) {
  const T r2 = dx * dx + (dy * dy + (dz * dz + eps2));
  const T invR = reciprocalSqrt(r2);
  const T invR2 = invR * invR;
  const T qdx = q.xx * dx + q.xy * dy + q.xz * dz;  // Q d
  const T qdy = q.xy * dx + q.yy * dy + q.yz * dz;
  const T qdz = q.xz * dx + q.yz * dy + q.zz * dz;
  const T dqd = qdx * dx + qdy * dy + (qdz * dz - eps2 * q.trace);  // d.Q.d - eps^2 T
  const T invR3 = invR * invR2;
  const T invR5 = invR3 * invR2;
  const T halfDqdInvR5 = T(0.5) * dqd * invR5;
  const T radial = mass * invR3 + T(5) * halfDqdInvR5 * invR2;
  ax += radial * dx - invR5 * qdx;
  ay += radial * dy - invR5 * qdy;
  az += radial * dz - invR5 * qdz;
  pot -= mass * invR + halfDqdInvR5;
}

/// The short-range (TreePM) variant of accumulateQuadrupoleInteraction for a cell: the Taylor expansion, about the
/// centre of mass and to second order in the bodies' offsets, of the truncated pair itself (accumulateTruncated-
/// PairInteraction's pull m f(r) d / s^3 and potential -m g(r) / s, s^2 = r^2 + eps^2, r = |d|), as GADGET-4 expands
/// its short-range kernel. No cut: f is continuous, and a cell whose centre lies beyond r_cut but whose bodies reach
/// inside keeps its small share.
///
/// For a radial pull K(r) d the second-order term is (1/2) S_jk d_j d_k (K(r) d), S = sum m y y^T the cell's second
/// moment; with L = K' / r it is L S d + (L / 2) T d + (L' / 2r) (d.S.d) d, T = trace S. Written with the traceless
/// Q = 3 S - T I:
///   a_i += M f d / s^3 + (L / 3) Q d + [ (L' / 6r) d.Q.d + T (5 L / 6 + r L' / 6) ] d,
///   K = f / s^3,  L = -(A G r / 2) / s^3 - 3 f / s^5,
///   L' / r = A G (r / (4 r_s^2) - 1 / (2 r)) / s^3 + 3 A G r / s^5 + 15 f / s^7,
/// with G = exp(-x^2) (f' = -A G r^2 / 2, f'' = -A G r (1 - x^2)) and A = 1 / (sqrt(pi) r_s^3). Likewise the potential,
/// with Phi = -g / s and H = Phi' / r:
///   phi_i += -M g / s + (1/2) [ H T + (H' / r) (d.Q.d + T r^2) / 3 ],
///   H = A r_s^2 G / (r s) + g / s^3,
///   H' / r = -A G / (2 r s) - A r_s^2 G / (r^3 s) - 2 A r_s^2 G / (r s^3) - 3 g / s^5.
/// Far inside the split (G -> 0, f = g = 1) these are accumulateQuadrupoleInteraction's terms. Taking f times the
/// Newtonian quadrupole instead (this function before 2026-11-25) leaves an error of the quadrupole term's order times
/// r |f'(r)| / f(r), up to ~1 at r ~ 2-4 r_s: such a cell is good to second order in b_max / r like a monopole (on
/// clumpy boxes of 2^18 bodies quadrupoles then did no better than monopoles); expanded properly it is good to third,
/// and the walk's relative test takes the quadrupole's power. The 1 / r and 1 / r^3 terms cancel each other's
/// growth: a cell is never near r = 0 (the walk never puts a cell that holds target i in front of it).
/// About 60 floating-point instructions against the Newtonian quadrupole's 35.
///
/// @param dx,dy,dz     in: com - x_i, the nearest image
/// @param mass,q,eps2  in: as for accumulateQuadrupoleInteraction
/// @param invTwoSplit  in: 1 / (2 r_s)
/// @param ax,ay,az,pot in/out: accumulated
template <class T>
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE void accumulateTruncatedQuadrupoleInteraction(T dx, T dy, T dz, T mass,
                                                                                    const Quadrupole<T>& q, T eps2,
                                                                                    T invTwoSplit, T& ax, T& ay, T& az,
                                                                                    T& pot) {
  constexpr T kEightOverSqrtPi = T(4.5135166683820502);  // A = 8 invTwoSplit^3 / sqrt(pi)
  const T r2 = dx * dx + dy * dy + dz * dz;
  const T invR = r2 > T(0) ? reciprocalSqrt(r2) : T(0);
  const T r = r2 * invR;
  const T invS = reciprocalSqrt(r2 + eps2);
  const T invS2 = invS * invS;
  const T invS3 = invS * invS2;
  const T invS5 = invS3 * invS2;
  const ShortRangeFactors<T> factors = shortRangeFactors(r, invTwoSplit);
  const T f = factors.force, g = factors.potential;
  const T invTwoSplit2 = invTwoSplit * invTwoSplit;
  const T ag = kEightOverSqrtPi * invTwoSplit * invTwoSplit2 * factors.gaussian;  // A G
  const T split2 = T(0.25) / invTwoSplit2;                                        // r_s^2

  const T qdx = q.xx * dx + q.xy * dy + q.xz * dz;  // Q d
  const T qdy = q.xy * dx + q.yy * dy + q.yz * dz;
  const T qdz = q.xz * dx + q.yz * dy + q.zz * dz;
  const T dqd = qdx * dx + qdy * dy + qdz * dz;

  const T l = -(T(0.5) * ag * r) * invS3 - T(3) * f * invS5;
  const T lOverR = ag * (r * invTwoSplit2 - T(0.5) * invR) * invS3 + (T(3) * ag * r + T(15) * f * invS2) * invS5;
  const T third = T(1) / T(3);
  const T sixth = T(1) / T(6);
  const T radial = mass * f * invS3 + sixth * (lOverR * dqd + q.trace * (T(5) * l + lOverR * r2));
  const T tangential = third * l;
  ax += radial * dx + tangential * qdx;
  ay += radial * dy + tangential * qdy;
  az += radial * dz + tangential * qdz;

  const T agSplit2InvR = ag * split2 * invR;
  const T h = agSplit2InvR * invS + g * invS3;
  const T hOverR = -(T(0.5) * ag * invR) * invS - agSplit2InvR * (invR * invR) * invS - T(2) * agSplit2InvR * invS3 -
                   T(3) * g * invS5;
  pot += -mass * g * invS + T(0.5) * (h * q.trace + third * hOverR * (dqd + q.trace * r2));
}

/// Floating-point operations per monopole interaction in the two conventions the literature uses: 20 (GPU Gems 3
/// ch. 31, acceleration only) and 38 (Chamomile / kirin, counting the reciprocal square root as several flops).
inline constexpr double kFlopsPerInteractionGpuGems = 20.0;
inline constexpr double kFlopsPerInteractionChamomile = 38.0;

}  // namespace matcha
