// SPDX-License-Identifier: MIT
#include "matcha/gpu/memory_model.hpp"

#include <algorithm>
#include <cstddef>

#include "matcha/core/interaction_plan.hpp"
#include "matcha/gpu/cuda_engine.hpp"
#include "matcha/gpu/detail/memory_bridge.hpp"

namespace matcha::gpu {

namespace {

// Mirrors device_memory.cuh: DeviceBuffer and PinnedBuffer allocate 1/8 more than asked for.
double withRoom(double bytes) { return bytes * 1.125; }

// Mirrors cuda_engine.cu: two page-locked list staging buffers of 64 MiB.
constexpr double kListStagingBytes = 2.0 * double(std::uint64_t{64} << 20);

// The CUDA engine's warp tasks per group (ResidentTree::tasks; forEachWarpTask cuts a group of up to ncrit bodies
// into one or two tasks, more only for groups beyond the largest task), each kept as a task, its sorted copy and two
// sort keys; the sort's scratch about as much again.
constexpr double kTasksPerGroup = 2.0;
constexpr double kBytesPerTask = 2 * 16 + 2 * 4 + 20;

/// Bytes a CUDA list arena (cuda_engine.cu: growArena) holds at its peak while the batches of `batchEntries`
/// entries are installed one after another into an empty arena (from 0 again after each batch when `streaming`):
/// a growth allocates the entries needed plus a quarter (and DeviceBuffer's eighth), and copies the old arena into
/// the new one, so both exist for a moment.
double arenaPeakBytes(const TreeSizes& sizes, double entriesPerGroup, bool streaming) {
  double capacity = 0.0, peak = 0.0, top = 0.0;
  for (const std::uint64_t groups : sizes.batchGroups) {
    const double entries = double(groups) * entriesPerGroup;
    if (streaming) top = 0.0;
    const double needed = top + entries + 1.0;
    if (needed > capacity) {
      const double grown = withRoom(needed * 1.25);
      peak = std::max(peak, capacity + grown);
      capacity = grown;
    }
    top += entries;
  }
  return std::max(peak, capacity) * sizeof(std::uint32_t);
}

}  // namespace

void addEngineTreeMemory(const TreeSizes& sizes, bool onGpu, MemoryEstimate& estimate) {
  const double n = double(sizes.numBodies);
  const double cells = double(sizes.numCells);
  const double groups = double(sizes.numGroups);
  const bool streaming = sizes.residentGroups < sizes.numGroups;
  const double quadrupoleDoubles = sizes.quadrupole ? 7.0 : 0.0;
  // The lists the engine holds at once: all, or one batch when they stream (the solver drops them between batches).
  const double listGroups = streaming ? double(sizes.largestBatchGroups) : groups;
  const auto bytes = [](double value) { return static_cast<std::uint64_t>(value); };

  // The topology: per cell its bodies, first child, child count, centre and half side; per group its bodies and
  // tolerance; the caller's order of the bodies when it differs from the tree's.
  const double topology = cells * (sizeof(BodyRange) + sizeof(std::uint32_t) + 1 + 4 * sizeof(double)) +
                          groups * (sizeof(BodyRange) + sizeof(double)) +
                          (sizes.gathered ? n * sizeof(std::uint32_t) : 0.0);
  if (!onGpu) {
    // CpuEngine::Resident: the topology; masses (and, in a different order than the caller's, positions and the four
    // outputs) in the tree's order; the refitted cells (mass, centre of mass, quadrupole, half extent, b_max, opening
    // radius); group boxes and ids; the lists (ListArena: a cell id per accepted cell, a range per j-body range, the
    // spans of each group).
    estimate.add("engine: topology and bodies", bytes(topology + n * sizeof(double) * (sizes.gathered ? 8.0 : 1.0)));
    estimate.add("engine: cells and groups", bytes(cells * (7.0 + quadrupoleDoubles) * sizeof(double) +
                                                   groups * (6 * sizeof(double) + sizeof(std::uint32_t))));
    estimate.add("engine: lists", bytes(listGroups * (sizes.cellsPerGroup() * sizeof(std::uint32_t) +
                                                      sizes.rangesPerGroup() * sizeof(BodyRange)) +
                                        groups * 40.0));
    return;
  }

  // CudaEngine::Impl::ResidentTree on the device.
  estimate.add("engine: topology and bodies", 0,
               bytes(withRoom(topology) + withRoom(n * sizeof(double)) * (sizes.gathered ? 15.0 : 8.0)));
  // Refitted cells (mass, centre of mass, half extent, b_max, opening radius, quadrupole); per group its box (centre
  // and half extents), list descriptor and check flags, and its warp tasks.
  estimate.add("engine: cells, groups and tasks", 0,
               bytes(withRoom(cells * (7.0 + quadrupoleDoubles) * sizeof(double)) +
                     withRoom(groups * (6 * sizeof(double) + 16 + 2 * sizeof(std::uint32_t))) +
                     withRoom(groups * kTasksPerGroup * kBytesPerTask)));
  // The arenas (a cell id per accepted cell, a body index per j-body) and the staging of one batch's ranges and
  // offsets.
  const double largestBatch = double(sizes.largestBatchGroups);
  estimate.add(
      "engine: lists", 0,
      bytes(arenaPeakBytes(sizes, sizes.cellsPerGroup(), streaming) +
            arenaPeakBytes(sizes, sizes.bodiesPerGroup(), streaming) +
            withRoom(largestBatch * (sizes.rangesPerGroup() * sizeof(BodyRange) + 5 * sizeof(std::uint32_t)))));
  // Page-locked host staging: positions (3 per body), outputs (4; a subset's outputs use them too), two list buffers,
  // per-group counts and flags; and pageable per-group copies.
  double pinned = withRoom(7.0 * n * sizeof(double)) + withRoom(kListStagingBytes) +
                  withRoom(largestBatch * 2 * sizeof(std::uint32_t)) + withRoom(groups * sizeof(std::uint32_t));
  estimate.add("engine: page-locked staging", bytes(pinned + groups * (sizeof(BodyRange) + 2 * sizeof(std::uint64_t))));
}

void addEngineKeySortMemory(std::uint64_t numBodies, bool onGpu, MemoryEstimate& estimate) {
  if (!onGpu || numBodies < CudaEngine::kMinSortKeys) return;
  // key_sort.cu: two key and two index buffers; CUB's scratch for double buffers is its digit histograms and tile
  // states, well under a byte a key (one byte a key is allowed); on the host two page-locked 8 MiB staging pieces.
  const double n = double(numBodies);
  estimate.add(
      "engine: key sort", static_cast<std::uint64_t>(withRoom(2.0 * double(std::uint64_t{8} << 20))),
      static_cast<std::uint64_t>(withRoom(n * 2 * (sizeof(std::uint64_t) + sizeof(std::uint32_t))) + withRoom(n)));
}

void addEngineTreePredictionMemory(std::uint64_t numBodies, bool onGpu, MemoryEstimate& estimate) {
  if (!onGpu) return;
  // tree_prediction.cu: the balls' centres (3 doubles), radii and lowest |a| (2 floats), the earlier accelerations (3
  // floats), keys and indices twice each (CUB's double buffers, its scratch under a byte a key), the inputs in the
  // tree's order (4 doubles, 2 floats); cuda_engine.cu's masses in the caller's order. On the host two page-locked
  // 16 MiB staging pieces.
  const double n = double(numBodies);
  const double perBody = 3 * sizeof(double) + 2 * sizeof(float) + 3 * sizeof(float) +
                         2 * (sizeof(std::uint64_t) + sizeof(std::uint32_t)) + 4 * sizeof(double) + 2 * sizeof(float) +
                         sizeof(double) + 1;
  estimate.add("engine: tree prediction", static_cast<std::uint64_t>(withRoom(2.0 * double(std::uint64_t{16} << 20))),
               static_cast<std::uint64_t>(withRoom(n * perBody)));
}

void addEngineDirectMemory(std::uint64_t numBodies, bool onGpu, MemoryEstimate& estimate) {
  if (!onGpu) return;
  // cuda_engine.cu (evaluateDirectIn): sources (x, y, z, mass) and outputs (4 doubles), one split's partial sums
  // (double4) and magnitudes (float), the cancelled-body list; large sums run as one split.
  const double n = double(numBodies);
  estimate.add(
      "engine: direct-sum buffers", 0,
      static_cast<std::uint64_t>(withRoom(n * (8 * sizeof(double) + 32 + sizeof(float) + sizeof(std::uint32_t)))));
}

CudaMemoryInfo queryCudaMemory(int device) { return detail::queryCudaMemoryImpl(device); }

}  // namespace matcha::gpu
