// SPDX-License-Identifier: MIT
// Periodic-box initial conditions (issue 15), inputs for TreePM against Ewald: a clustered box (Plummer and Hernquist
// clumps in a uniform background) and a nearly uniform one (a perturbed simple cubic lattice). N-body units: G = 1,
// total mass 1, every body of mass 1/N; every position in [0, L)^3.
//
// Both generators draw from many std::mt19937_64 streams, one per block of kBodiesPerStream bodies (and one for the
// clumps' layout), each seeded by a std::seed_seq of (seed, stream kind, index): the blocks are sampled in parallel
// (TBB), and a seed names the same bodies, bit for bit, whatever the thread count. As in makePlummer, uniform deviates
// come from raw 64-bit draws, not from the implementation-defined std:: distributions.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "matcha/core/particles.hpp"

namespace matcha::ic {

/// Bodies per random stream: the unit of parallel work, and part of what a seed means (body j of a clump, of the
/// background or of the lattice draws from the stream of its block j / kBodiesPerStream).
inline constexpr std::size_t kBodiesPerStream = 16384;

// ------------------------------------------------------------------------------------------------------------ clumps

enum class ClumpProfile {
  plummer,    ///< density 3 M / (4 pi a^3) (1 + r^2 / a^2)^(-5/2)
  hernquist,  ///< density M a / (2 pi r (r + a)^3) (Hernquist 1990)
};

/// Both profiles are truncated at this many scale radii: no clump body lies farther than 20 a from its clump's centre
/// of mass (up to the centring shift, ~a / sqrt(n)). The truncated Plummer sphere keeps 99.63% of the untruncated
/// mass, the truncated Hernquist sphere 400/441 = 90.70% (its r^-4 tail holds 9.3% beyond 20 a).
inline constexpr double kClumpTruncationRadius = 20.0;

/// Largest scale radius, in units of the box side L: a clump's truncation radius, 20 a, is at most L/2, so no clump
/// reaches its own periodic image and every body's nearest-image separation from its clump's centre is its offset.
inline constexpr double kMaxClumpScaleRadius = 0.5 / kClumpTruncationRadius;

struct ClumpsParams {
  std::size_t numBodies = 65536;    ///< N, >= 1; each body has mass 1/N
  std::uint64_t seed = 1;           ///< names the layout and the bodies
  double boxSize = 1.0;             ///< side L of the periodic cube, finite and > 0
  std::size_t numClumps = 32;       ///< K >= 1, at most the number of clump bodies
  double backgroundFraction = 0.2;  ///< F in [0, 1): floor(F N) bodies (numBackgroundBodies) are the background
  double scaleMin = 0.005;          ///< smallest clump scale radius, in units of L: > 0
  double scaleMax = 0.025;          ///< largest, in units of L: scaleMin <= scaleMax <= kMaxClumpScaleRadius

  /// Throws InputError (one line, naming the parameter as its command-line option) unless every field is in range,
  /// NaN and inf included, and K does not exceed N - floor(F N).
  void validate() const;
};

/// floor(F N), computed in double (F N is rounded once, so e.g. 0.2 N is floor(N / 5) for every N up to 2^31): the
/// bodies of the uniform background. Throws InputError unless F is in [0, 1).
std::size_t numBackgroundBodies(const ClumpsParams& params);

/// One clump of a clumps box.
struct Clump {
  ClumpProfile profile = ClumpProfile::plummer;
  std::array<double, 3> centre{};  ///< where its centre of mass sits, in [0, L)^3 (nearest image of the bodies)
  double scaleRadius = 0.0;        ///< a, in length units (not units of L)
  std::size_t begin = 0;           ///< its bodies are [begin, begin + count) of makeClumps's result
  std::size_t count = 0;
  double mass = 0.0;  ///< its bodies' mass, count / N (the truncated profile's mass)
};

/// Where makeClumps puts what: clump k holds bodies [clumps[k].begin, + count), the clumps in order from 0, then the
/// background [backgroundBegin, N).
struct ClumpsLayout {
  std::vector<Clump> clumps;
  std::size_t backgroundBegin = 0;
  std::size_t backgroundCount = 0;
};

/// The layout makeClumps(params) fills, without sampling a body: the clumps' profiles (alternating: even k Plummer,
/// odd k Hernquist), their centres (uniform in the box), scale radii (log-uniform in [scaleMin, scaleMax] L) and
/// body ranges: the N - floor(F N) clump bodies shared equally, the first (N - floor(F N)) mod K clumps one more.
/// @throws InputError as ClumpsParams::validate
ClumpsLayout planClumps(const ClumpsParams& params);

/// The mass fraction of the untruncated profile within kClumpTruncationRadius scale radii: 20^3 / 401^(3/2) for
/// Plummer, 400/441 for Hernquist. A clump of mass M is the truncated part of the untruncated profile of mass
/// M / fraction, whose velocities it carries.
double clumpTruncatedMassFraction(ClumpProfile profile);

/// A periodic cube of side L holding K clumps in a uniform background, laid out as planClumps(params) says.
///
/// Each clump is a sphere in its own equilibrium (G = 1, its own potential only): with mass M (count / N) and scale
/// radius a, it is the part within 20 a of the untruncated profile of mass M_p = M / clumpTruncatedMassFraction.
/// Positions are drawn from that truncated density, velocities from the untruncated profile's isotropic distribution
/// function at the body's radius: Plummer spheres as makePlummer (Aarseth, Henon & Wielen 1974) with the mass cut
/// 20^3 / 401^(3/2), Hernquist spheres from Hernquist (1990) eq. 17 by rejection. Inside 20 a the missing outer mass
/// only adds a constant to the potential, so these velocities balance the truncated clump's own gravity; what is left
/// is the boundary's pressure (no body outside to push back the ones near 20 a), which makes 2T / |W| 1.0002
/// (Plummer) and 1.0050 (Hernquist) in expectation rather than 1. Lengths are scaled by a, velocities by
/// sqrt(G M_p / a). Each clump's mean offset and mean velocity are subtracted, so its centre of mass sits at its
/// centre and it has no bulk motion; then the positions are folded into [0, L)^3 (wrapIntoBox).
///
/// Background bodies: uniform in [0, L)^3, at rest. Masses 1/N, ids 0..N-1, accelerations and potentials zero.
/// Memory: the N bodies and O(N / kBodiesPerStream) bookkeeping.
/// @throws InputError as ClumpsParams::validate
Particles makeClumps(const ClumpsParams& params);

// ----------------------------------------------------------------------------------------------------------- lattice

struct LatticeParams {
  std::size_t numBodies = 262144;  ///< N = n^3, n >= 1: 64^3 by default
  std::uint64_t seed = 1;          ///< names the displacements
  double boxSize = 1.0;            ///< side L of the periodic cube, finite and > 0
  double perturbation = 0.1;       ///< A in [0, 0.5): displacements up to A grid spacings per coordinate

  /// Throws InputError (one line, naming the parameter as its command-line option) unless N is a perfect cube (the
  /// message names the nearest cubes), L is finite and > 0 and A in [0, 0.5).
  void validate() const;
};

/// n with n^3 = numBodies, or 0 when numBodies is not a perfect cube.
std::size_t exactCubeRoot(std::size_t numBodies);

/// A perturbed simple cubic lattice of N = n^3 bodies in a periodic cube of side L, grid spacing h = L / n. Body
/// (i n + j) n + k (i, j, k in [0, n)) sits at
///   x = (i + 0.5 + d_x) * (L / n),  y likewise with j and d_y,  z with k and d_z,
/// each d uniform in (-A, A), so for A = 0 exactly at the cell centres (i + 0.5) * (L / n). With A < 0.5 every body
/// stays inside its own grid cell, so no coordinate crosses a face (the result still passes through wrapIntoBox, in
/// case of rounding). Velocities zero, masses 1/N, ids 0..N-1.
/// @throws InputError as LatticeParams::validate
Particles makeLattice(const LatticeParams& params);

}  // namespace matcha::ic
