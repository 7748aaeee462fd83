// SPDX-License-Identifier: MIT
#include "matcha/tree/space_filling_curve.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_reduce.h>
#include <tbb/parallel_sort.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "matcha/core/errors.hpp"

namespace matcha::tree {

namespace {

struct Extent {
  std::array<double, 3> lo{std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity(),
                           std::numeric_limits<double>::infinity()};
  std::array<double, 3> hi{-std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                           -std::numeric_limits<double>::infinity()};
};

// Spreads the low 21 bits of v so that bit k lands at bit 3k.
std::uint64_t spreadBits(std::uint64_t v) {
  v &= 0x1fffff;
  v = (v | v << 32) & 0x1f00000000ffffULL;
  v = (v | v << 16) & 0x1f0000ff0000ffULL;
  v = (v | v << 8) & 0x100f00f00f00f00fULL;
  v = (v | v << 4) & 0x10c30c30c30c30c3ULL;
  v = (v | v << 2) & 0x1249249249249249ULL;
  return v;
}

// Integer cell coordinates of every source at level kMaxLevel, passed to keyOf; the key of body i goes to keys[i].
template <typename KeyOf>
void computeKeys(const SourceView& sources, const Cube& cube, std::vector<std::uint64_t>& keys, KeyOf keyOf) {
  keys.resize(sources.count);
  constexpr double kCells = double(1u << kMaxLevel);
  const double scale = kCells / cube.side;
  const auto toInteger = [&](double coordinate, double lo) {
    const double scaled = std::floor((coordinate - lo) * scale);
    return static_cast<std::uint32_t>(std::clamp(scaled, 0.0, kCells - 1.0));
  };
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, sources.count), [&](const tbb::blocked_range<std::size_t>& r) {
    for (std::size_t i = r.begin(); i != r.end(); ++i) {
      keys[i] = keyOf(toInteger(sources.x[i], cube.lo[0]), toInteger(sources.y[i], cube.lo[1]),
                      toInteger(sources.z[i], cube.lo[2]));
    }
  });
}

}  // namespace

Cube computeBoundingCube(const SourceView& sources) {
  MATCHA_ASSERT(sources.count > 0, "bounding cube of no bodies");
  const Extent extent = tbb::parallel_reduce(
      tbb::blocked_range<std::size_t>(0, sources.count), Extent{},
      [&](const tbb::blocked_range<std::size_t>& range, Extent acc) {
        for (std::size_t i = range.begin(); i != range.end(); ++i) {
          const double p[3] = {sources.x[i], sources.y[i], sources.z[i]};
          for (int d = 0; d < 3; ++d) {
            acc.lo[d] = std::min(acc.lo[d], p[d]);
            acc.hi[d] = std::max(acc.hi[d], p[d]);
          }
        }
        return acc;
      },
      [](Extent a, const Extent& b) {
        for (int d = 0; d < 3; ++d) {
          a.lo[d] = std::min(a.lo[d], b.lo[d]);
          a.hi[d] = std::max(a.hi[d], b.hi[d]);
        }
        return a;
      });
  double side = 0.0;
  for (int d = 0; d < 3; ++d) side = std::max(side, extent.hi[d] - extent.lo[d]);
  // A single body (or coincident bodies) has zero extent; any positive side works.
  if (side <= 0.0) side = 1.0;
  // The margin keeps the largest coordinate strictly inside, so its integer coordinate stays below 2^21.
  side *= 1.0 + 1e-6;
  Cube cube;
  cube.side = side;
  for (int d = 0; d < 3; ++d) {
    const double centre = 0.5 * (extent.lo[d] + extent.hi[d]);
    cube.lo[d] = centre - 0.5 * side;
  }
  return cube;
}

std::uint64_t mortonKey(std::uint32_t ix, std::uint32_t iy, std::uint32_t iz) {
  return spreadBits(ix) | spreadBits(iy) << 1 | spreadBits(iz) << 2;
}

void computeMortonKeys(const SourceView& sources, const Cube& cube, std::vector<std::uint64_t>& keys) {
  computeKeys(sources, cube, keys, mortonKey);
}

std::uint64_t hilbertKey(std::uint32_t ix, std::uint32_t iy, std::uint32_t iz) {
  // Skilling's AxesToTranspose for 3 axes of kMaxLevel bits: undo the excess work level by level (invert or swap the
  // low bits), then Gray-encode. The result is the key's bits in "transposed" form, axis 0 holding the most
  // significant bit of every triple.
  std::uint32_t axis[3] = {ix, iy, iz};
  constexpr std::uint32_t kTopBit = 1u << (kMaxLevel - 1);
  for (std::uint32_t bit = kTopBit; bit > 1; bit >>= 1) {
    const std::uint32_t lowBits = bit - 1;
    for (int d = 0; d < 3; ++d) {
      if (axis[d] & bit) {
        axis[0] ^= lowBits;
      } else {
        const std::uint32_t swapped = (axis[0] ^ axis[d]) & lowBits;
        axis[0] ^= swapped;
        axis[d] ^= swapped;
      }
    }
  }
  axis[1] ^= axis[0];
  axis[2] ^= axis[1];
  std::uint32_t flips = 0;
  for (std::uint32_t bit = kTopBit; bit > 1; bit >>= 1) {
    if (axis[2] & bit) flips ^= bit - 1;
  }
  for (std::uint32_t& a : axis) a ^= flips;
  return mortonKey(axis[2], axis[1], axis[0]);
}

void computeHilbertKeys(const SourceView& sources, const Cube& cube, std::vector<std::uint64_t>& keys) {
  computeKeys(sources, cube, keys, hilbertKey);
}

std::vector<std::uint32_t> sortByKey(std::vector<std::uint64_t>& keys) {
  MATCHA_ASSERT(keys.size() <= std::numeric_limits<std::uint32_t>::max(), "too many bodies for 32-bit indices");
  struct KeyIndex {
    std::uint64_t key;
    std::uint32_t index;
  };
  std::vector<KeyIndex> pairs(keys.size());
  tbb::parallel_for(std::size_t{0}, keys.size(), [&](std::size_t i) {
    pairs[i] = {keys[i], static_cast<std::uint32_t>(i)};
  });
  tbb::parallel_sort(pairs.begin(), pairs.end(), [](const KeyIndex& a, const KeyIndex& b) {
    return a.key < b.key || (a.key == b.key && a.index < b.index);
  });
  std::vector<std::uint32_t> order(keys.size());
  tbb::parallel_for(std::size_t{0}, keys.size(), [&](std::size_t i) {
    keys[i] = pairs[i].key;
    order[i] = pairs[i].index;
  });
  return order;
}

}  // namespace matcha::tree
