// SPDX-License-Identifier: MIT
#include "matcha/ic/periodic_boxes.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "matcha/core/errors.hpp"
#include "sampling.hpp"

namespace matcha::ic {

namespace {

/// The kinds of random stream, part of each stream's seed.
enum StreamKind : std::uint32_t { kLayoutStream = 1, kClumpStream = 2, kBackgroundStream = 3, kLatticeStream = 4 };

/// The stream (seed, kind, first, second): std::seed_seq's mixing and std::mt19937_64's seeding from it are both fixed
/// by the standard, so the bodies do not depend on the standard library.
std::mt19937_64 streamEngine(std::uint64_t seed, StreamKind kind, std::uint64_t first, std::uint64_t second = 0) {
  auto low = [](std::uint64_t value) { return static_cast<std::uint32_t>(value & 0xffffffffu); };
  auto high = [](std::uint64_t value) { return static_cast<std::uint32_t>(value >> 32); };
  std::seed_seq sequence{low(seed),   high(seed),  static_cast<std::uint32_t>(kind), low(first), high(first),
                         low(second), high(second)};
  return std::mt19937_64(sequence);
}

std::string formatNumber(double value) {
  std::ostringstream text;
  text << value;
  return text.str();
}

/// isfinite first: an ordered comparison with NaN raises FE_INVALID, which trapping tests turn into SIGFPE.
void requireBox(double boxSize) {
  if (!(std::isfinite(boxSize) && boxSize > 0.0)) {
    throw InputError("--box must be a finite box side > 0 (got " + formatNumber(boxSize) + ")");
  }
}

void requireBackgroundFraction(double fraction) {
  if (!(std::isfinite(fraction) && fraction >= 0.0 && fraction < 1.0)) {
    throw InputError("--background must be a fraction in [0, 1) (got " + formatNumber(fraction) + ")");
  }
}

/// A block of at most kBodiesPerStream bodies [begin, begin + count) with its own stream: one of a clump's blocks
/// (clump >= 0) or of the background (clump = -1).
struct Block {
  std::ptrdiff_t clump = -1;
  std::size_t index = 0;  ///< the block's number within its clump or the background: the stream's index
  std::size_t begin = 0;
  std::size_t count = 0;
};

/// The blocks of [begin, begin + count), appended to `blocks`.
void appendBlocks(std::vector<Block>& blocks, std::ptrdiff_t clump, std::size_t begin, std::size_t count) {
  for (std::size_t first = 0, index = 0; first < count; first += kBodiesPerStream, ++index) {
    blocks.push_back({clump, index, begin + first, std::min(kBodiesPerStream, count - first)});
  }
}

}  // namespace

// ------------------------------------------------------------------------------------------------------------ clumps

void ClumpsParams::validate() const {
  if (numBodies == 0) throw InputError("a clumps box needs at least one body (-n)");
  requireBox(boxSize);
  if (numClumps < 1) throw InputError("--clumps must be at least 1 (got 0)");
  requireBackgroundFraction(backgroundFraction);
  if (!(std::isfinite(scaleMin) && scaleMin > 0.0)) {
    throw InputError("--scale-min must be > 0 (got " + formatNumber(scaleMin) + ")");
  }
  if (!(std::isfinite(scaleMax) && scaleMax > 0.0)) {
    throw InputError("--scale-max must be > 0 (got " + formatNumber(scaleMax) + ")");
  }
  if (scaleMax < scaleMin) {
    throw InputError("--scale-max must be at least --scale-min (got " + formatNumber(scaleMax) + " < " +
                     formatNumber(scaleMin) + ")");
  }
  if (scaleMax > kMaxClumpScaleRadius) {
    throw InputError("--scale-max must be at most " + formatNumber(kMaxClumpScaleRadius) +
                     " (box sides): clumps are truncated at 20 scale radii, which must fit in half the box (got " +
                     formatNumber(scaleMax) + ")");
  }
  const std::size_t background = numBackgroundBodies(*this);
  const std::size_t clumpBodies = numBodies - background;
  if (numClumps > clumpBodies) {
    throw InputError("--clumps " + std::to_string(numClumps) + " exceeds the " + std::to_string(clumpBodies) +
                     " clump bodies (N = " + std::to_string(numBodies) + " less " + std::to_string(background) +
                     " in the background): every clump needs a body");
  }
}

std::size_t numBackgroundBodies(const ClumpsParams& params) {
  requireBackgroundFraction(params.backgroundFraction);
  const double background = std::floor(params.backgroundFraction * static_cast<double>(params.numBodies));
  // F < 1, but F N can round up to N itself; validate() then finds no clump body.
  return std::min(params.numBodies, static_cast<std::size_t>(background));
}

ClumpsLayout planClumps(const ClumpsParams& params) {
  params.validate();
  ClumpsLayout layout;
  layout.backgroundCount = numBackgroundBodies(params);
  const std::size_t clumpBodies = params.numBodies - layout.backgroundCount;
  const std::size_t share = clumpBodies / params.numClumps;
  const std::size_t remainder = clumpBodies % params.numClumps;
  const double box = params.boxSize;
  const double logScaleRatio = std::log(params.scaleMax / params.scaleMin);
  std::mt19937_64 engine = streamEngine(params.seed, kLayoutStream, 0);
  std::size_t begin = 0;
  for (std::size_t k = 0; k < params.numClumps; ++k) {
    Clump clump;
    clump.profile = k % 2 == 0 ? ClumpProfile::plummer : ClumpProfile::hernquist;
    for (double& coordinate : clump.centre) coordinate = wrapIntoBox(box * detail::uniformOpen(engine), box);
    // Log-uniform in [scaleMin, scaleMax]: exactly scaleMin when the two are equal.
    clump.scaleRadius = box * params.scaleMin * std::exp(logScaleRatio * detail::uniformOpen(engine));
    clump.begin = begin;
    clump.count = share + (k < remainder ? 1 : 0);
    clump.mass = static_cast<double>(clump.count) / static_cast<double>(params.numBodies);
    begin += clump.count;
    layout.clumps.push_back(clump);
  }
  layout.backgroundBegin = begin;
  return layout;
}

double clumpTruncatedMassFraction(ClumpProfile profile) {
  return profile == ClumpProfile::plummer ? detail::plummerMassFraction(kClumpTruncationRadius)
                                          : detail::hernquistMassFraction(kClumpTruncationRadius);
}

Particles makeClumps(const ClumpsParams& params) {
  const ClumpsLayout layout = planClumps(params);
  const std::size_t numBodies = params.numBodies;
  const double box = params.boxSize;
  Particles particles(numBodies);

  std::vector<Block> blocks;
  for (std::size_t k = 0; k < layout.clumps.size(); ++k) {
    appendBlocks(blocks, static_cast<std::ptrdiff_t>(k), layout.clumps[k].begin, layout.clumps[k].count);
  }
  appendBlocks(blocks, -1, layout.backgroundBegin, layout.backgroundCount);

  const double plummerLogMassCut = std::log(clumpTruncatedMassFraction(ClumpProfile::plummer));
  const double hernquistMassCut = clumpTruncatedMassFraction(ClumpProfile::hernquist);
  const double bodyMass = 1.0 / static_cast<double>(numBodies);

  // Pass 1: each block from its own stream. Clump bodies get their offset from the clump's centre and their velocity;
  // each block's sums of them are kept, for the clump's mean (summed in block order, whatever the threads did).
  std::vector<std::array<double, 6>> blockSums(blocks.size());
  tbb::parallel_for(
      tbb::blocked_range<std::size_t>(0, blocks.size(), 1), [&](const tbb::blocked_range<std::size_t>& r) {
        for (std::size_t b = r.begin(); b != r.end(); ++b) {
          const Block& block = blocks[b];
          const std::size_t end = block.begin + block.count;
          for (std::size_t i = block.begin; i < end; ++i) {
            particles.mass[i] = bodyMass;
            particles.id[i] = i;
          }
          if (block.clump < 0) {
            std::mt19937_64 engine = streamEngine(params.seed, kBackgroundStream, block.index);
            for (std::size_t i = block.begin; i < end; ++i) {
              particles.x[i] = wrapIntoBox(box * detail::uniformOpen(engine), box);
              particles.y[i] = wrapIntoBox(box * detail::uniformOpen(engine), box);
              particles.z[i] = wrapIntoBox(box * detail::uniformOpen(engine), box);
            }
            continue;
          }
          const Clump& clump = layout.clumps[static_cast<std::size_t>(block.clump)];
          const bool plummer = clump.profile == ClumpProfile::plummer;
          const double a = clump.scaleRadius;
          const double profileMass = clump.mass / clumpTruncatedMassFraction(clump.profile);
          const double velocityScale = std::sqrt(profileMass / a);  // G = 1
          std::mt19937_64 engine =
              streamEngine(params.seed, kClumpStream, static_cast<std::uint64_t>(block.clump), block.index);
          std::array<double, 6> sums{};
          for (std::size_t i = block.begin; i < end; ++i) {
            const detail::PhasePoint body = plummer ? detail::samplePlummerBody(plummerLogMassCut, engine)
                                                    : detail::sampleHernquistBody(hernquistMassCut, engine);
            body.storeScaled(particles, i, a, velocityScale);
            sums[0] += particles.x[i];
            sums[1] += particles.y[i];
            sums[2] += particles.z[i];
            sums[3] += particles.vx[i];
            sums[4] += particles.vy[i];
            sums[5] += particles.vz[i];
          }
          blockSums[b] = sums;
        }
      });

  // The clumps' mean offsets and velocities, from the block sums in order.
  std::vector<std::array<double, 6>> means(layout.clumps.size(), std::array<double, 6>{});
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    if (blocks[b].clump < 0) continue;
    for (int c = 0; c < 6; ++c) means[static_cast<std::size_t>(blocks[b].clump)][c] += blockSums[b][c];
  }
  for (std::size_t k = 0; k < means.size(); ++k) {
    for (double& mean : means[k]) mean /= static_cast<double>(layout.clumps[k].count);
  }

  // Pass 2: centre of mass onto the clump's centre, no bulk motion, positions folded into the box.
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, blocks.size(), 1),
                    [&](const tbb::blocked_range<std::size_t>& r) {
                      for (std::size_t b = r.begin(); b != r.end(); ++b) {
                        const Block& block = blocks[b];
                        if (block.clump < 0) continue;
                        const Clump& clump = layout.clumps[static_cast<std::size_t>(block.clump)];
                        const std::array<double, 6>& mean = means[static_cast<std::size_t>(block.clump)];
                        for (std::size_t i = block.begin; i < block.begin + block.count; ++i) {
                          particles.x[i] = wrapIntoBox(clump.centre[0] + (particles.x[i] - mean[0]), box);
                          particles.y[i] = wrapIntoBox(clump.centre[1] + (particles.y[i] - mean[1]), box);
                          particles.z[i] = wrapIntoBox(clump.centre[2] + (particles.z[i] - mean[2]), box);
                          particles.vx[i] -= mean[3];
                          particles.vy[i] -= mean[4];
                          particles.vz[i] -= mean[5];
                        }
                      }
                    });
  return particles;
}

// ----------------------------------------------------------------------------------------------------------- lattice

namespace {

/// The largest n with n^3 <= count.
std::size_t cubeRootBelow(std::size_t count) {
  auto root = static_cast<std::size_t>(std::llround(std::cbrt(static_cast<double>(count))));
  // cbrt may be off in the last place; settle on the exact integer.
  while (root > 0 && root * root * root > count) --root;
  while ((root + 1) * (root + 1) * (root + 1) <= count) ++root;
  return root;
}

}  // namespace

std::size_t exactCubeRoot(std::size_t numBodies) {
  const std::size_t root = cubeRootBelow(numBodies);
  return root * root * root == numBodies ? root : 0;
}

void LatticeParams::validate() const {
  if (numBodies == 0) throw InputError("a lattice needs at least one body (-n)");
  if (exactCubeRoot(numBodies) == 0) {
    const std::size_t root = cubeRootBelow(numBodies);
    const std::size_t below = root * root * root, above = (root + 1) * (root + 1) * (root + 1);
    throw InputError("-n " + std::to_string(numBodies) +
                     " is not a perfect cube, as a lattice needs; the nearest cubes are " + std::to_string(below) +
                     " (" + std::to_string(root) + "^3) and " + std::to_string(above) + " (" +
                     std::to_string(root + 1) + "^3)");
  }
  requireBox(boxSize);
  if (!(std::isfinite(perturbation) && perturbation >= 0.0 && perturbation < 0.5)) {
    throw InputError("--perturbation must be in [0, 0.5) grid spacings (got " + formatNumber(perturbation) + ")");
  }
}

Particles makeLattice(const LatticeParams& params) {
  params.validate();
  const std::size_t numBodies = params.numBodies;
  const std::size_t side = exactCubeRoot(numBodies);
  const double box = params.boxSize;
  const double spacing = box / static_cast<double>(side);
  const double amplitude = params.perturbation;
  const double bodyMass = 1.0 / static_cast<double>(numBodies);
  Particles particles(numBodies);

  const std::size_t numBlocks = (numBodies + kBodiesPerStream - 1) / kBodiesPerStream;
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, numBlocks, 1), [&](const tbb::blocked_range<std::size_t>& r) {
    for (std::size_t block = r.begin(); block != r.end(); ++block) {
      std::mt19937_64 engine = streamEngine(params.seed, kLatticeStream, block);
      const std::size_t begin = block * kBodiesPerStream;
      const std::size_t end = std::min(numBodies, begin + kBodiesPerStream);
      for (std::size_t b = begin; b < end; ++b) {
        const std::size_t cell[3] = {b / (side * side), (b / side) % side, b % side};
        double* const coordinates[3] = {&particles.x[b], &particles.y[b], &particles.z[b]};
        for (int c = 0; c < 3; ++c) {
          const double displacement = amplitude * (2.0 * detail::uniformOpen(engine) - 1.0);
          *coordinates[c] = wrapIntoBox((static_cast<double>(cell[c]) + 0.5 + displacement) * spacing, box);
        }
        particles.mass[b] = bodyMass;
        particles.id[b] = b;
      }
    }
  });
  return particles;
}

}  // namespace matcha::ic
