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

}  // namespace matcha::testing
