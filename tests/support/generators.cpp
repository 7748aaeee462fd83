// SPDX-License-Identifier: MIT
#include "matcha/testing/generators.hpp"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "matcha/core/errors.hpp"
#include "matcha/ic/plummer.hpp"

namespace matcha::testing {

namespace {

/// Uniform deviate in (0, 1) from one raw draw; the same construction as in ic/ (midpoints of 2^52 equal bins), so
/// results do not depend on the standard library's distributions.
double uniformOpen(std::mt19937_64& engine) { return (static_cast<double>(engine() >> 12) + 0.5) * 0x1.0p-52; }

/// SplitMix64 finaliser: derives well-separated seeds for sub-streams from one test seed (neighbouring seeds give
/// unrelated outputs).
std::uint64_t splitMix64(std::uint64_t value) {
  value += 0x9e3779b97f4a7c15ULL;
  value = (value ^ (value >> 30)) * 0xbf58476d1ce4e5b9ULL;
  value = (value ^ (value >> 27)) * 0x94d049bb133111ebULL;
  return value ^ (value >> 31);
}

/// A Plummer sphere of `count` bodies with total mass `totalMass` and scale radius `scaleRadius`, in virial
/// equilibrium in its own potential (G = 1), centred on `centre`. Rescales ic::makePlummer's N-body-unit sphere:
/// lengths by scaleRadius / a_nbody and velocities by sqrt(G M / a) / sqrt(G M_nbody / a_nbody).
Particles scaledPlummer(std::size_t count, std::uint64_t seed, double totalMass, double scaleRadius,
                        const std::array<double, 3>& centre) {
  ic::PlummerParams params;
  params.numBodies = count;
  params.seed = seed;
  Particles sphere = ic::makePlummer(params);
  const double lengthScale = scaleRadius / ic::kPlummerScaleRadius;
  const double velocityScale = std::sqrt(totalMass / lengthScale);
  for (std::size_t i = 0; i < count; ++i) {
    sphere.x[i] = centre[0] + sphere.x[i] * lengthScale;
    sphere.y[i] = centre[1] + sphere.y[i] * lengthScale;
    sphere.z[i] = centre[2] + sphere.z[i] * lengthScale;
    sphere.vx[i] *= velocityScale;
    sphere.vy[i] *= velocityScale;
    sphere.vz[i] *= velocityScale;
  }
  return sphere;
}

}  // namespace

std::uint64_t freshSeed() {
  if (const char* pinned = std::getenv(kSeedEnvironmentVariable); pinned != nullptr) {
    std::uint64_t seed = 0;
    const char* end = pinned + std::strlen(pinned);
    const auto [stop, error] = std::from_chars(pinned, end, seed);
    if (error != std::errc() || stop != end || stop == pinned) {
      throw InputError(std::string(kSeedEnvironmentVariable) + " must be an unsigned 64-bit decimal integer (got \"" +
                       pinned + "\")");
    }
    return seed;
  }
  std::random_device device;
  // random_device yields 32-bit unsigned ints on common platforms; two draws fill the 64-bit seed.
  const auto high = static_cast<std::uint64_t>(device()) & 0xffffffffULL;
  const auto low = static_cast<std::uint64_t>(device()) & 0xffffffffULL;
  return (high << 32) | low;
}

std::string seedTrace(std::uint64_t seed) {
  const std::string text = std::to_string(seed);
  return "seed = " + text + " (replay with " + kSeedEnvironmentVariable + "=" + text + ")";
}

Particles plummer(std::size_t n, std::uint64_t seed) {
  ic::PlummerParams params;
  params.numBodies = n;
  params.seed = seed;
  return ic::makePlummer(params);
}

Particles untruncatedPlummer(std::size_t n, std::uint64_t seed) {
  ic::PlummerParams params;
  params.numBodies = n;
  params.seed = seed;
  params.massCut = 1.0;
  return ic::makePlummer(params);
}

Particles uniformCube(std::size_t n, std::uint64_t seed, double halfSide) {
  if (n == 0) throw InputError("uniform cube needs at least one body");
  if (!(std::isfinite(halfSide) && halfSide > 0.0)) {
    throw InputError("uniform cube half side must be finite and > 0 (got " + std::to_string(halfSide) + ")");
  }
  Particles particles(n);
  std::mt19937_64 engine(seed);
  const double bodyMass = 1.0 / static_cast<double>(n);
  for (std::size_t i = 0; i < n; ++i) {
    // uniformOpen is in (0, 1), so coordinates lie strictly inside the cube.
    particles.x[i] = halfSide * (2.0 * uniformOpen(engine) - 1.0);
    particles.y[i] = halfSide * (2.0 * uniformOpen(engine) - 1.0);
    particles.z[i] = halfSide * (2.0 * uniformOpen(engine) - 1.0);
    particles.mass[i] = bodyMass;
    particles.id[i] = i;
  }
  return particles;
}

std::size_t numClumpBodies(std::size_t n) {
  // Integer arithmetic (3n/10), so the split is exact and the same everywhere.
  return n * 3 / 10;
}

Particles clumpInHalo(std::size_t n, std::uint64_t seed) {
  if (n == 0) throw InputError("clump-in-halo needs at least one body");
  const std::size_t numClump = numClumpBodies(n);
  const std::size_t numHalo = n - numClump;  // >= 1 for every n >= 1
  const double bodyMass = 1.0 / static_cast<double>(n);

  Particles particles(n);
  auto place = [&](const Particles& part, std::size_t offset) {
    for (std::size_t i = 0; i < part.size(); ++i) {
      const std::size_t k = offset + i;
      particles.x[k] = part.x[i];
      particles.y[k] = part.y[i];
      particles.z[k] = part.z[i];
      particles.vx[k] = part.vx[i];
      particles.vy[k] = part.vy[i];
      particles.vz[k] = part.vz[i];
      particles.mass[k] = bodyMass;
      particles.id[k] = k;
    }
  };
  const double haloMass = static_cast<double>(numHalo) * bodyMass;
  place(scaledPlummer(numHalo, splitMix64(seed), haloMass, kHaloScaleRadius, {0.0, 0.0, 0.0}), 0);
  if (numClump > 0) {
    const double clumpMass = static_cast<double>(numClump) * bodyMass;
    place(scaledPlummer(numClump, splitMix64(seed ^ 0x5bd1e9955bd1e995ULL), clumpMass, kClumpScaleRadius, kClumpCentre),
          numHalo);
  }
  return particles;
}

std::size_t numCornerClumpBodies(std::size_t n) { return n / 2; }

Particles cornerClump(std::size_t n, std::uint64_t seed) {
  if (n == 0) throw InputError("corner clump needs at least one body");
  const std::size_t numClump = numCornerClumpBodies(n);
  const std::size_t numCube = n - numClump;
  Particles particles = uniformCube(n, seed);  // masses, ids and the cube bodies [0, numCube)
  // The ball by rejection from its bounding cube, from a stream of its own.
  std::mt19937_64 engine(splitMix64(seed ^ 0x2545f4914f6cdd1dULL));
  for (std::size_t i = numCube; i < n; ++i) {
    double d[3];
    do {
      for (double& c : d) c = 2.0 * uniformOpen(engine) - 1.0;
    } while (d[0] * d[0] + d[1] * d[1] + d[2] * d[2] >= 1.0);
    particles.x[i] = kCornerClumpCentre[0] + kCornerClumpRadius * d[0];
    particles.y[i] = kCornerClumpCentre[1] + kCornerClumpRadius * d[1];
    particles.z[i] = kCornerClumpCentre[2] + kCornerClumpRadius * d[2];
  }
  return particles;
}

double sliceThickness(std::size_t n) {
  if (n < 3) throw InputError("sliced cube needs at least three bodies");
  return 2.0 * kSliceExpectedBodies / static_cast<double>(n - 2);
}

Particles slicedCube(std::size_t n, std::uint64_t seed) {
  const double thickness = sliceThickness(n);  // throws for n < 3
  Particles particles = uniformCube(n, seed);  // in [-1, 1)^3; masses and ids
  for (std::size_t i = 2; i < n; ++i) {
    particles.x[i] += thickness - 1.0;  // [t - 2, t)
    particles.y[i] += 1.5;              // [0.5, 2.5)
    particles.z[i] += 1.5;
  }
  for (std::size_t k = 0; k < 2; ++k) {
    const double sign = k == 0 ? -1.0 : 1.0;
    particles.x[k] = particles.y[k] = particles.z[k] = sign * kSliceAnchor;
  }
  return particles;
}

Particles balancedPulls(std::size_t n, std::uint64_t seed) {
  if (n < 4 || n % 2 != 0) throw InputError("balanced pulls need an even number of bodies, at least 4");
  Particles particles = uniformCube(n, seed);  // masses, ids; the first of each mirrored pair
  particles.x[0] = particles.y[0] = particles.z[0] = 0.0;
  for (std::size_t i = 2; i + 1 < n; i += 2) {
    particles.x[i] = -particles.x[i - 1];
    particles.y[i] = -particles.y[i - 1];
    particles.z[i] = -particles.z[i - 1];
  }
  particles.x[n - 1] = kBalancedPullsResidualDistance;
  particles.y[n - 1] = particles.z[n - 1] = 0.0;
  return particles;
}

Particles coincidentBodies(std::size_t n) {
  Particles bodies(n);
  for (std::size_t i = 0; i < n; ++i) {
    bodies.x[i] = 0.25;
    bodies.y[i] = -0.5;
    bodies.z[i] = 3.0;
    bodies.mass[i] = 1.0 / double(n);
    bodies.id[i] = i;
  }
  return bodies;
}

Particles clumpyBox(std::uint64_t seed, double L, std::size_t perClump, std::size_t background) {
  constexpr int kClumps = 4;
  Particles p(kClumps * perClump + background);
  std::mt19937_64 engine(seed);
  const auto uniform = [&engine] { return std::generate_canonical<double, 64>(engine); };
  std::size_t k = 0;
  for (int c = 0; c < kClumps; ++c) {
    const Particles clump = plummer(perClump, seed + 17 * (c + 1));
    const double scale = (0.01 + 0.03 * uniform()) * L;
    double centre[3];
    for (double& v : centre) v = L * uniform();
    for (std::size_t i = 0; i < perClump; ++i, ++k) {
      p.x[k] = centre[0] + scale * clump.x[i];
      p.y[k] = centre[1] + scale * clump.y[i];
      p.z[k] = centre[2] + scale * clump.z[i];
    }
  }
  const Particles cube = uniformCube(background, seed + 5, 0.5 * L);
  for (std::size_t i = 0; i < background; ++i, ++k) {
    p.x[k] = cube.x[i];
    p.y[k] = cube.y[i];
    p.z[k] = cube.z[i];
  }
  for (std::size_t i = 0; i < p.size(); ++i) {
    p.mass[i] = (0.5 + uniform()) / static_cast<double>(p.size());
    p.x[i] += L * std::floor(6 * uniform() - 3);
    p.y[i] += L * std::floor(6 * uniform() - 3);
    p.z[i] += L * std::floor(6 * uniform() - 3);
    p.id[i] = i;
  }
  return p;
}

}  // namespace matcha::testing
