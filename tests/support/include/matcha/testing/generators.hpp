// SPDX-License-Identifier: MIT
// Shared test inputs (DESIGN.md §5): Plummer sphere, uniform cube and a tight clump inside a wide halo, each from an
// explicit seed so that a failing test can be replayed. GoogleTest-independent; tests record the seed themselves:
//
//   const std::uint64_t seed = matcha::testing::freshSeed();
//   SCOPED_TRACE(matcha::testing::seedTrace(seed));
//   RecordProperty("seed", std::to_string(seed));
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "matcha/core/particles.hpp"

namespace matcha::testing {

/// Name of the environment variable that pins freshSeed() to one value, e.g. MATCHA_TEST_SEED=12345.
inline constexpr const char* kSeedEnvironmentVariable = "MATCHA_TEST_SEED";

/// A new seed for a randomised test: from std::random_device (64 bits from two draws), or the value of the
/// environment variable MATCHA_TEST_SEED when it is set, to replay a failure. Does not print anything.
/// @throws InputError when MATCHA_TEST_SEED is set but is not a decimal unsigned 64-bit integer
std::uint64_t freshSeed();

/// One line for SCOPED_TRACE and failure messages: "seed = <n> (replay with MATCHA_TEST_SEED=<n>)".
std::string seedTrace(std::uint64_t seed);

/// Plummer sphere in N-body units: ic::makePlummer with N = n, the given seed and the default mass cut (0.999).
/// @throws InputError for n == 0
Particles plummer(std::size_t n, std::uint64_t seed);

/// Plummer sphere without a radius cut: ic::makePlummer with massCut = 1. A few bodies land at tens to thousands of
/// scale radii (the outermost of N lies near a sqrt(1.5 N) ~ 190 length units for N = 2^16, and beyond 10^4 with
/// probability ~1.5 N (a / 10^4)^2), so the root cell is hundreds of times the core.
/// @throws InputError for n == 0
Particles untruncatedPlummer(std::size_t n, std::uint64_t seed);

/// n bodies uniform in the cube [-halfSide, halfSide)^3, masses 1/n, zero velocities, ids 0..n-1, accelerations and
/// potentials zero. Same seed, same bodies (raw std::mt19937_64 draws, no implementation-defined distributions).
/// @throws InputError for n == 0, or halfSide not finite and > 0
Particles uniformCube(std::size_t n, std::uint64_t seed, double halfSide = 1.0);

/// Layout of clumpInHalo, so that tests can find the clump.
inline constexpr double kClumpMassFraction = 0.3;                     ///< share of the bodies in the clump
inline constexpr double kClumpScaleRadius = 0.01;                     ///< Plummer scale radius a of the clump
inline constexpr std::array<double, 3> kClumpCentre{0.7, -0.3, 0.2};  ///< where the clump's centre of mass sits
inline constexpr double kHaloScaleRadius = 1.0;                       ///< Plummer scale radius a of the halo

/// Number of clump bodies in clumpInHalo(n, ...): floor(0.3 n).
std::size_t numClumpBodies(std::size_t n);

/// The hard case for trees: a tight, dense clump off-centre inside a wide halo. Bodies [0, n - numClumpBodies(n))
/// form the halo, a Plummer sphere of scale radius 1 centred on the origin; the remaining numClumpBodies(n) bodies
/// form the clump, a Plummer sphere of scale radius 0.01 centred on (0.7, -0.3, 0.2), ~94% of it within 0.05 of that
/// centre. Both spheres are cut at the mass fraction 0.999 and carry velocities in virial equilibrium in their own
/// potentials (no bulk motion). Every body has mass 1/n; ids 0..n-1; accelerations and potentials zero.
/// @throws InputError for n == 0
Particles clumpInHalo(std::size_t n, std::uint64_t seed);

/// Layout of cornerClump.
inline constexpr double kCornerClumpRadius = 0.01;                               ///< radius of the uniform ball
inline constexpr std::array<double, 3> kCornerClumpCentre{0.015, 0.015, 0.015};  ///< its centre

/// Number of clump bodies in cornerClump(n, ...): floor(n / 2).
std::size_t numCornerClumpBodies(std::size_t n);

/// A massive clump in the corner of a cell, the case the centre-of-mass offset term of the opening criterion is for
/// (Salmon & Warren 1994): bodies [0, n - numCornerClumpBodies(n)) uniform in [-1, 1)^3 (as uniformCube), the other
/// half of the bodies (and of the mass) uniform in a ball of radius 0.01 centred on (0.015, 0.015, 0.015), i.e. 0.005
/// inside the corner at the origin of the octant [0, 1]^3. For n >~ 1000 the root cube is [-1, 1]^3 to ~2/n, so that
/// corner is the root's centre: the top-level octant holds ~56% of the mass with its centre of mass ~0.86 of its
/// half-diagonal away from its geometric centre, and the bodies just across the corner see it from ~0.01. Masses 1/n,
/// ids 0..n-1, zero velocities, accelerations and potentials zero.
/// @throws InputError for n == 0
Particles cornerClump(std::size_t n, std::uint64_t seed);

/// Layout of slicedCube.
inline constexpr double kSliceAnchor = 1000.0;        ///< the two anchor bodies sit at +-(1000, 1000, 1000)
inline constexpr double kSliceExpectedBodies = 40.0;  ///< expected number of bodies in the slice

/// Thickness of the slice of slicedCube(n, ...): 2 * 40 / (n - 2), so that ~40 bodies lie in it.
double sliceThickness(std::size_t n);

/// The input where groups chosen by body count alone get a huge list: a dense block whose face lies just across a
/// boundary of the root's octants, so that a thin slice of it sits in a big, otherwise nearly empty cell with a far
/// outlier. Bodies 0 and 1 are anchors at -(1000, 1000, 1000) and +(1000, 1000, 1000); they fix the root cube to
/// [-1000, 1000]^3 (with its relative margin), whose octants meet at the origin. Bodies [2, n) are uniform in
/// [t - 2, t) x [0.5, 2.5)^2 with t = sliceThickness(n): ~40 of them (binomial) lie in the slice x in [0, t), in the
/// octant [0, 1000]^3 together with the anchor at +1000: a cell of ~41 bodies whose tight box is ~1000 wide and
/// lies flat against the block's dense face (the rest of the block, resolved by cells ~10^4 times smaller, is just
/// across x = 0). Masses 1/n, ids 0..n-1, zero velocities.
/// @throws InputError for n < 3
Particles slicedCube(std::size_t n, std::uint64_t seed);

/// Where the residual body of balancedPulls sits: (kBalancedPullsResidualDistance, 0, 0).
inline constexpr double kBalancedPullsResidualDistance = 0.3;

/// The input where float direct summation loses digits to cancellation (pair_interaction.hpp: floatSumCancelled):
/// body 0 at the origin, bodies [1, n - 1) in pairs mirrored through the origin (uniform in [-1, 1)^3, the second of a
/// pair at exactly minus the first), whose pulls on body 0 cancel exactly, and body n - 1 at (0.3, 0, 0), the only
/// net pull on body 0. For n ~ 4000 the pulls on body 0 sum in magnitude to ~1000 times that net pull. Masses 1/n,
/// ids 0..n-1, zero velocities.
/// @throws InputError for n < 4 or odd n (body 0, the mirrored pairs and the residual body make an even n)
Particles balancedPulls(std::size_t n, std::uint64_t seed);

/// n bodies at one point, (0.25, -0.5, 3), away from the origin so that no coordinate is zero: masses 1/n, ids 0..n-1,
/// zero velocities. With softening eps each feels -(n - 1) / (n eps) of potential and no force.
Particles coincidentBodies(std::size_t n);

/// A clustered periodic box of side L: four Plummer clumps of `perClump` bodies with scale radii 0.01-0.04 L at random
/// places, some reaching across the box's faces, in `background` bodies uniform over the box; every body's position is
/// then moved by a random whole number of boxes (-3..2 per axis), so the bodies lie anywhere (wrapIntoBox folds them
/// back). Masses uniform in [0.5, 1.5) / N, ids 0..N-1, zero velocities.
Particles clumpyBox(std::uint64_t seed, double L, std::size_t perClump, std::size_t background);

}  // namespace matcha::testing
