// SPDX-License-Identifier: MIT
// Bounding cube, Morton (Z-order) and Hilbert keys, and the parallel key sort that puts bodies in space-filling-curve
// order.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "matcha/core/near_field_engine.hpp"
#include "matcha/core/particles.hpp"
#include "matcha/core/tree_prediction.hpp"

namespace matcha::tree {

// The key's bits per dimension and the root cube are core's (core/tree_prediction.hpp), which the CUDA engine shares
// when it predicts a tree's inputs on its device.
using matcha::Cube;
using matcha::kMaxLevel;

/// The smallest and largest coordinate of the sources on each axis (+inf and -inf where there are none; a NaN
/// coordinate is passed over, as std::min and std::max pass it).
struct Extent {
  std::array<double, 3> lo{std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity(),
                           std::numeric_limits<double>::infinity()};
  std::array<double, 3> hi{-std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                           -std::numeric_limits<double>::infinity()};
};

/// The sources' Extent. Parallel (TBB): each core's share an axis at a time, in eight running minima and maxima, so
/// that the compares of a share do not wait on one another (one running pair took ~2x the keys' own pass).
Extent computeExtent(const SourceView& sources);

/// Smallest cube around all sources, widened by a relative margin so no body sits exactly on the upper face.
/// Parallel (TBB). Throws InvariantError on an empty input.
Cube computeBoundingCube(const SourceView& sources);

/// Interleaves the low 21 bits of ix, iy, iz into a 63-bit Morton key (x in the lowest bit of each triple).
std::uint64_t mortonKey(std::uint32_t ix, std::uint32_t iy, std::uint32_t iz);
/// The cell (ix, iy, iz) at level kMaxLevel whose Morton key is `key`: mortonKey's inverse on keys below 2^63.
std::array<std::uint32_t, 3> mortonCell(std::uint64_t key);

/// Morton keys of all sources in `cube`. out: keys[i] for body i (resized). Parallel; allocates only `keys`.
void computeMortonKeys(const SourceView& sources, const Cube& cube, std::vector<std::uint64_t>& keys);
/// As above, into `keys` of one key per body (memory the caller chose: NearFieldEngine::transferMemory).
void computeMortonKeys(const SourceView& sources, const Cube& cube, std::span<std::uint64_t> keys);

/// The 63-bit Hilbert key of the cell (ix, iy, iz) at level kMaxLevel (Skilling's transpose algorithm, AIP Conf.
/// Proc. 707, 2004). Like a Morton key, its top 3k bits name the level-k octree cell; unlike one, cells consecutive in
/// key order share a face at every level, so a run of consecutive bodies never jumps across the box.
std::uint64_t hilbertKey(std::uint32_t ix, std::uint32_t iy, std::uint32_t iz);

/// Hilbert keys of all sources in `cube`; otherwise as computeMortonKeys.
void computeHilbertKeys(const SourceView& sources, const Cube& cube, std::vector<std::uint64_t>& keys);

/// Sorts keys ascending, ties by body index (so the order is deterministic), keeping its buffers from call to call:
/// once sizes settle a sort allocates only its per-range bucket cursors. A most-significant-digit radix sort on 8-bit
/// digits below the bits all keys share: a range is split into buckets, large buckets (a dense clump shares many
/// leading bits) are split again, and buckets of a few thousand bodies are finished with std::sort while they sit in
/// cache. Keys already in order (a body order kept from the previous step) are detected in the first pass and cost
/// nothing more.
class KeySorter {
 public:
  /// @param keys    in: one key per body, in body order
  /// @param sorted  out: the keys in ascending order (resized)
  /// @param order   out: the permutation, sorted[k] = keys[order[k]] (resized)
  void sort(std::span<const std::uint64_t> keys, std::vector<std::uint64_t>& sorted, std::vector<std::uint32_t>& order);
  /// As above, into `sorted` and `order` of the keys' size.
  void sort(std::span<const std::uint64_t> keys, std::span<std::uint64_t> sorted, std::span<std::uint32_t> order);

 private:
  struct KeyIndex {
    std::uint64_t key;
    std::uint32_t index;
  };
  /// Sorts data[0, count) by the key bits below bit `shift` (those above are equal), ties by index, with temp[0,
  /// count) as scratch. Returns where the result lies: data, or temp when `copyBack` is false and a digit pass ran.
  static KeyIndex* sortRange(KeyIndex* data, KeyIndex* temp, std::size_t count, int shift, bool copyBack);
  std::vector<KeyIndex> pairs_, scratch_;
};

/// KeySorter::sort's result into `sorted` and `order` of the keys' size, from the device of `engine` where it is given
/// and sorts (NearFieldEngine::sortKeys: the CUDA engine, from 2^16 keys on; TreeParams::sortOnDevice), else from
/// `host`. Returns whether the device sorted.
bool sortKeysOn(NearFieldEngine* engine, KeySorter& host, std::span<const std::uint64_t> keys,
                std::span<std::uint64_t> sorted, std::span<std::uint32_t> order);
/// As above, resizing `sorted` and `order` to the keys' size.
bool sortKeysOn(NearFieldEngine* engine, KeySorter& host, std::span<const std::uint64_t> keys,
                std::vector<std::uint64_t>& sorted, std::vector<std::uint32_t>& order);

/// Puts every array of a Particles into a new order, in parallel, swapping each array with one scratch array, so that
/// once sizes settle nothing is allocated or freed (Particles::permute allocates a scratch array per call and runs on
/// one core: 170 ms for 2^22 bodies on the H200's host, against ~10 ms here).
class BodyPermuter {
 public:
  /// new[i] = old[order[i]] for every array of `particles`; `order` must be a permutation of [0, size).
  void permute(Particles& particles, std::span<const std::uint32_t> order);
  /// permute for a caller that overwrites every body's forces (ax, ay, az, pot) before it reads them: those stay in
  /// the old order, unread and unwritten (4 of the 13 arrays: ~a quarter of the permutation's memory traffic), and
  /// `accelerationMagnitudes` gets each body's old |a| in the new order instead, which the relative opening test reads
  /// (setRelativeTolerances: the same bits as from the permuted accelerations).
  void permuteAllButForces(Particles& particles, std::span<const std::uint32_t> order,
                           std::vector<double>& accelerationMagnitudes);
  /// permuteAllButForces in two parts, for a caller that reads only the bodies' sources (positions and masses) for a
  /// while: permuteSources puts those into the new order and fills `accelerationMagnitudes` as permuteAllButForces
  /// does; permuteMotion, called later with the same order, moves the rest (velocities, ids, time bins). Between the
  /// two the Particles are half sorted and must be read through sources() alone. Together they leave exactly what
  /// permuteAllButForces leaves.
  void permuteSources(Particles& particles, std::span<const std::uint32_t> order,
                      std::vector<double>& accelerationMagnitudes);
  void permuteMotion(Particles& particles, std::span<const std::uint32_t> order);

 private:
  /// new[i] = old[order[i]] for the positions and masses.
  void gatherSources(Particles& particles, std::span<const std::uint32_t> order);

  std::vector<double> scratch_;
  std::vector<std::uint64_t> idScratch_;
  std::vector<std::uint8_t> binScratch_;
};

/// BodyPermuter::permuteMotion held back: defer() notes the bodies and the order (their sources already moved by
/// permuteSources), run() moves the rest, or the destructor does, for a call that ends early (an exception): a
/// caller's Particles are never left half sorted. A solver defers it to run while the engine's last kernels do.
class DeferredMotionPermutation {
 public:
  explicit DeferredMotionPermutation(BodyPermuter& permuter) : permuter_(permuter) {}
  DeferredMotionPermutation(const DeferredMotionPermutation&) = delete;
  DeferredMotionPermutation& operator=(const DeferredMotionPermutation&) = delete;
  ~DeferredMotionPermutation() { run(); }

  /// `particles` and `order` must stay as they are until run().
  void defer(Particles& particles, std::span<const std::uint32_t> order) {
    particles_ = &particles;
    order_ = order;
  }
  bool pending() const { return particles_ != nullptr; }
  /// Returns its seconds (0 where nothing was pending).
  double run();

 private:
  BodyPermuter& permuter_;
  Particles* particles_ = nullptr;
  std::span<const std::uint32_t> order_;
};

/// Sorts `keys` ascending (ties by body index, so the order is deterministic) and returns the permutation that was
/// applied: sorted[k] = keys_before[order[k]]. Parallel (KeySorter); allocates.
std::vector<std::uint32_t> sortByKey(std::vector<std::uint64_t>& keys);

}  // namespace matcha::tree
