// SPDX-License-Identifier: MIT
#include "matcha/tree/space_filling_curve.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_reduce.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <utility>

#include "matcha/core/errors.hpp"
#include "matcha/core/stopwatch.hpp"
#include "parallel_arrays.hpp"

namespace matcha::tree {

namespace {

// Each byte b spread so that its bit k lands at bit 3k (24 bits).
constexpr std::array<std::uint32_t, 256> kSpreadByte = [] {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t b = 0; b < 256; ++b) {
    for (int k = 0; k < 8; ++k) table[b] |= ((b >> k) & 1u) << (3 * k);
  }
  return table;
}();

// Spreads the low 21 bits of v so that bit k lands at bit 3k: three lookups in a 1 KiB table that stays in L1. The
// keys of a tree build are compute bound on one core of the H200's host (72 ms at 2^22 bodies with the five
// shift-and-mask rounds per coordinate, 17 ns a body).
std::uint64_t spreadBits(std::uint32_t v) {
  return std::uint64_t{kSpreadByte[v & 0xff]} | std::uint64_t{kSpreadByte[(v >> 8) & 0xff]} << 24 |
         std::uint64_t{kSpreadByte[(v >> 16) & 0x1f]} << 48;
}

// Integer cell coordinates of every source at level kMaxLevel, passed to keyOf; the key of body i goes to keys[i].
template <typename KeyOf>
void computeKeys(const SourceView& sources, const Cube& cube, std::span<std::uint64_t> keys, KeyOf keyOf) {
  MATCHA_ASSERT(keys.size() == sources.count, "keys sized unlike the bodies");
  const double scale = keyScale(cube);
  // keyCell clamps, then truncates, which is the floor for the non-negative values left: std::floor is a libm call on
  // the baseline x86-64 the project builds for (no SSE4.1 round), and took 40% of the keys' time.
  const auto toInteger = [&](double coordinate, double lo) { return keyCell(coordinate, lo, scale); };
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, sources.count), [&](const tbb::blocked_range<std::size_t>& r) {
    for (std::size_t i = r.begin(); i != r.end(); ++i) {
      keys[i] = keyOf(toInteger(sources.x[i], cube.lo[0]), toInteger(sources.y[i], cube.lo[1]),
                      toInteger(sources.z[i], cube.lo[2]));
    }
  });
}

}  // namespace

Extent computeExtent(const SourceView& sources) {
  const double* axes[3] = {sources.x, sources.y, sources.z};
  return tbb::parallel_reduce(
      tbb::blocked_range<std::size_t>(0, sources.count, 16384), Extent{},
      [&](const tbb::blocked_range<std::size_t>& range, Extent acc) {
        constexpr std::size_t kLanes = 8;
        for (int d = 0; d < 3; ++d) {
          const double* axis = axes[d];
          std::array<double, kLanes> lo, hi;
          lo.fill(acc.lo[d]);
          hi.fill(acc.hi[d]);
          std::size_t i = range.begin();
          // std::min's and std::max's compares, lane by lane: a NaN never replaces a bound.
          for (; i + kLanes <= range.end(); i += kLanes) {
            for (std::size_t k = 0; k < kLanes; ++k) {
              const double v = axis[i + k];
              lo[k] = v < lo[k] ? v : lo[k];
              hi[k] = hi[k] < v ? v : hi[k];
            }
          }
          for (; i < range.end(); ++i) {
            lo[0] = std::min(lo[0], axis[i]);
            hi[0] = std::max(hi[0], axis[i]);
          }
          for (std::size_t k = 0; k < kLanes; ++k) {
            acc.lo[d] = std::min(acc.lo[d], lo[k]);
            acc.hi[d] = std::max(acc.hi[d], hi[k]);
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
}

Cube computeBoundingCube(const SourceView& sources) {
  MATCHA_ASSERT(sources.count > 0, "bounding cube of no bodies");
  const Extent extent = computeExtent(sources);
  return cubeAroundExtent(extent.lo.data(), extent.hi.data());
}

std::uint64_t mortonKey(std::uint32_t ix, std::uint32_t iy, std::uint32_t iz) {
  return spreadBits(ix) | spreadBits(iy) << 1 | spreadBits(iz) << 2;
}

std::array<std::uint32_t, 3> mortonCell(std::uint64_t key) {
  // Every third bit gathered back, bit 3k of the shifted key to bit k: rare (a decomposition's few splitters), so
  // the plain loop.
  std::array<std::uint32_t, 3> cell{0, 0, 0};
  for (int axis = 0; axis < 3; ++axis) {
    for (int k = 0; k < kMaxLevel; ++k) cell[axis] |= std::uint32_t((key >> (3 * k + axis)) & 1u) << k;
  }
  return cell;
}

void computeMortonKeys(const SourceView& sources, const Cube& cube, std::span<std::uint64_t> keys) {
  // A lambda, not the function's pointer: the key is inlined into the loop instead of called through the pointer.
  computeKeys(sources, cube, keys,
              [](std::uint32_t x, std::uint32_t y, std::uint32_t z) { return mortonKey(x, y, z); });
}

void computeMortonKeys(const SourceView& sources, const Cube& cube, std::vector<std::uint64_t>& keys) {
  keys.resize(sources.count);
  computeMortonKeys(sources, cube, std::span<std::uint64_t>(keys));
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
  keys.resize(sources.count);
  computeKeys(sources, cube, keys,
              [](std::uint32_t x, std::uint32_t y, std::uint32_t z) { return hilbertKey(x, y, z); });
}

namespace {

// 8-bit digits: 256 buckets keep each chunk's write cursors in L1 however large the range. A range above
// kParallelRange bodies (the first digits, or a dense clump whose bodies share many leading bits) is counted and
// scattered by several chunks in parallel, and its buckets are then sorted in parallel; smaller ranges go serially,
// the parallelism being across them; buckets of at most kSmallBucket bodies finish with std::sort. A digit pass over
// a bucket costs ~4 n + 512 operations against std::sort's ~3 n log2 n, so digits pay down to ~64 bodies: with 2048
// the sort of 2^22 nearly sorted Plummer keys took 108 ms on one core of the build machine, with 64 87 ms (16: 99).
constexpr int kDigitBits = 8;
constexpr std::size_t kNumBuckets = std::size_t{1} << kDigitBits;
constexpr std::size_t kSmallBucket = 64;
constexpr std::size_t kParallelRange = std::size_t{1} << 16;
constexpr std::size_t kMaxChunks = 64;

using Buckets = std::array<std::size_t, kNumBuckets + 1>;

}  // namespace

KeySorter::KeyIndex* KeySorter::sortRange(KeyIndex* data, KeyIndex* temp, std::size_t count, int shift, bool copyBack) {
  if (count <= kSmallBucket || shift <= 0) {
    std::sort(data, data + count, [](const KeyIndex& a, const KeyIndex& b) {
      return a.key < b.key || (a.key == b.key && a.index < b.index);
    });
    return data;
  }
  const int low = std::max(0, shift - kDigitBits);
  const std::uint64_t mask = (std::uint64_t{1} << (shift - low)) - 1;
  const auto digit = [&](const KeyIndex& pair) { return static_cast<std::size_t>((pair.key >> low) & mask); };
  Buckets start{};
  if (count <= kParallelRange) {
    for (std::size_t i = 0; i < count; ++i) ++start[digit(data[i]) + 1];
    for (std::size_t b = 0; b < kNumBuckets; ++b) start[b + 1] += start[b];
    std::array<std::size_t, kNumBuckets> next;
    std::copy(start.begin(), start.end() - 1, next.begin());
    for (std::size_t i = 0; i < count; ++i) temp[next[digit(data[i])]++] = data[i];  // stable
  } else {
    // Each chunk counts its bodies per bucket, then scatters them into its own slice of every bucket: stable, so
    // nearly sorted input stays nearly sorted within a bucket.
    const std::size_t numChunks = std::min<std::size_t>(kMaxChunks, count / (kParallelRange / 4));
    const std::size_t chunkSize = (count + numChunks - 1) / numChunks;
    std::vector<Buckets> cursor(numChunks);
    tbb::parallel_for(std::size_t{0}, numChunks, [&](std::size_t c) {
      Buckets& histogram = cursor[c];
      histogram.fill(0);
      const std::size_t end = std::min(count, (c + 1) * chunkSize);
      for (std::size_t i = c * chunkSize; i < end; ++i) ++histogram[digit(data[i])];
    });
    std::size_t position = 0;
    for (std::size_t b = 0; b < kNumBuckets; ++b) {
      start[b] = position;
      for (std::size_t c = 0; c < numChunks; ++c) {
        const std::size_t n = cursor[c][b];
        cursor[c][b] = position;
        position += n;
      }
    }
    start[kNumBuckets] = count;
    tbb::parallel_for(std::size_t{0}, numChunks, [&](std::size_t c) {
      Buckets& next = cursor[c];
      const std::size_t end = std::min(count, (c + 1) * chunkSize);
      for (std::size_t i = c * chunkSize; i < end; ++i) temp[next[digit(data[i])]++] = data[i];
    });
  }
  // The buckets now lie in temp; sorting each with data as its scratch leaves the result in temp, copied back only if
  // asked (a bucket's copy stays in cache; the whole array's, at the top, is a pass through memory the caller skips).
  const auto finishBucket = [&](std::size_t b) {
    const std::size_t first = start[b], n = start[b + 1] - first;
    if (n > 1) sortRange(temp + first, data + first, n, low, true);
    if (copyBack) std::copy(temp + first, temp + first + n, data + first);
  };
  if (count <= kParallelRange) {
    for (std::size_t b = 0; b < kNumBuckets; ++b) finishBucket(b);
  } else {
    tbb::parallel_for(std::size_t{0}, kNumBuckets, finishBucket);
  }
  return copyBack ? data : temp;
}

void KeySorter::sort(std::span<const std::uint64_t> keys, std::vector<std::uint64_t>& sorted,
                     std::vector<std::uint32_t>& order) {
  sorted.resize(keys.size());
  order.resize(keys.size());
  sort(keys, std::span<std::uint64_t>(sorted), std::span<std::uint32_t>(order));
}

void KeySorter::sort(std::span<const std::uint64_t> keys, std::span<std::uint64_t> sorted,
                     std::span<std::uint32_t> order) {
  MATCHA_ASSERT(keys.size() <= std::numeric_limits<std::uint32_t>::max(), "too many bodies for 32-bit indices");
  MATCHA_ASSERT(sorted.size() == keys.size() && order.size() == keys.size(), "sort outputs sized unlike the keys");
  const std::size_t n = keys.size();
  pairs_.resize(n);
  scratch_.resize(n);
  // One pass: the pairs, whether the keys are already in order, and the bits all keys share (which need no pass).
  struct Scan {
    std::uint64_t lowest = ~0ull, highest = 0;
    bool inOrder = true;
  };
  const Scan scan = tbb::parallel_reduce(
      tbb::blocked_range<std::size_t>(0, n), Scan{},
      [&](const tbb::blocked_range<std::size_t>& r, Scan acc) {
        for (std::size_t i = r.begin(); i != r.end(); ++i) {
          acc.lowest = std::min(acc.lowest, keys[i]);
          acc.highest = std::max(acc.highest, keys[i]);
          acc.inOrder = acc.inOrder && (i == 0 || keys[i - 1] <= keys[i]);
          pairs_[i] = {keys[i], static_cast<std::uint32_t>(i)};
        }
        return acc;
      },
      [](Scan a, const Scan& b) {
        return Scan{std::min(a.lowest, b.lowest), std::max(a.highest, b.highest), a.inOrder && b.inOrder};
      });
  const KeyIndex* result = scan.inOrder ? pairs_.data()
                                        : sortRange(pairs_.data(), scratch_.data(), n,
                                                    64 - __builtin_clzll(scan.lowest ^ scan.highest), false);
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n), [&](const tbb::blocked_range<std::size_t>& r) {
    for (std::size_t i = r.begin(); i != r.end(); ++i) {
      sorted[i] = result[i].key;
      order[i] = result[i].index;
    }
  });
}

bool sortKeysOn(NearFieldEngine* engine, KeySorter& host, std::span<const std::uint64_t> keys,
                std::span<std::uint64_t> sorted, std::span<std::uint32_t> order) {
  MATCHA_ASSERT(sorted.size() == keys.size() && order.size() == keys.size(), "sort outputs sized unlike the keys");
  if (engine != nullptr && engine->sortKeys(keys, 3 * kMaxLevel, sorted, order)) return true;
  host.sort(keys, sorted, order);
  return false;
}

bool sortKeysOn(NearFieldEngine* engine, KeySorter& host, std::span<const std::uint64_t> keys,
                std::vector<std::uint64_t>& sorted, std::vector<std::uint32_t>& order) {
  sorted.resize(keys.size());
  order.resize(keys.size());
  return sortKeysOn(engine, host, keys, std::span<std::uint64_t>(sorted), std::span<std::uint32_t>(order));
}

void BodyPermuter::permute(Particles& particles, std::span<const std::uint32_t> order) {
  gatherSources(particles, order);
  permuteMotion(particles, order);
  for (auto* array : {&particles.ax, &particles.ay, &particles.az, &particles.pot}) {
    gatherInPlace(*array, order, scratch_);
  }
}

void BodyPermuter::permuteAllButForces(Particles& particles, std::span<const std::uint32_t> order,
                                       std::vector<double>& accelerationMagnitudes) {
  permuteSources(particles, order, accelerationMagnitudes);
  permuteMotion(particles, order);
}

void BodyPermuter::permuteSources(Particles& particles, std::span<const std::uint32_t> order,
                                  std::vector<double>& accelerationMagnitudes) {
  gatherSources(particles, order);
  // Each body's |a| as groups.cpp's Magnitude rounds it, the forces still in the old order.
  const double* ax = particles.ax.data();
  const double* ay = particles.ay.data();
  const double* az = particles.az.data();
  accelerationMagnitudes.resize(order.size());
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, order.size(), 8192),
                    [&](const tbb::blocked_range<std::size_t>& r) {
                      for (std::size_t k = r.begin(); k != r.end(); ++k) {
                        const std::uint32_t i = order[k];
                        accelerationMagnitudes[k] = std::sqrt(ax[i] * ax[i] + ay[i] * ay[i] + az[i] * az[i]);
                      }
                    });
}

void BodyPermuter::permuteMotion(Particles& particles, std::span<const std::uint32_t> order) {
  MATCHA_ASSERT(order.size() == particles.size(), "permutation length differs from particle count");
  for (auto* array : {&particles.vx, &particles.vy, &particles.vz}) gatherInPlace(*array, order, scratch_);
  gatherInPlace(particles.id, order, idScratch_);
  if (particles.timeBin.size() == particles.size()) gatherInPlace(particles.timeBin, order, binScratch_);
}

void BodyPermuter::gatherSources(Particles& particles, std::span<const std::uint32_t> order) {
  MATCHA_ASSERT(order.size() == particles.size(), "permutation length differs from particle count");
  for (auto* array : {&particles.x, &particles.y, &particles.z, &particles.mass}) {
    gatherInPlace(*array, order, scratch_);
  }
}

double DeferredMotionPermutation::run() {
  if (particles_ == nullptr) return 0.0;
  Particles& particles = *particles_;
  particles_ = nullptr;
  const Stopwatch permuting;
  permuter_.permuteMotion(particles, order_);
  return permuting.seconds();
}

std::vector<std::uint32_t> sortByKey(std::vector<std::uint64_t>& keys) {
  KeySorter sorter;
  std::vector<std::uint64_t> sorted;
  std::vector<std::uint32_t> order;
  sorter.sort(keys, sorted, order);
  keys.swap(sorted);
  return order;
}

}  // namespace matcha::tree
