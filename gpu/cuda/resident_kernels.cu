// SPDX-License-Identifier: MIT
// The kernels around resident lists (NearFieldEngine::setTree/setLists/launchResident): the bodies between the
// caller's order and the tree's, the refit of every cell (core/cell_refit.hpp: refitCell, the CPU engine's twin), the
// groups' boxes, the check of every list entry against the opening criterion (core/opening_criterion.hpp), the
// installation of new lists in the arena, and the cost keys that order the warp tasks.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>

#include "cuda_check.cuh"
#include "matcha/core/cell_refit.hpp"
#include "matcha/core/opening_criterion.hpp"
#include "resident_kernels.cuh"

namespace matcha::gpu::detail {

namespace {

constexpr unsigned kThreads = 256;

unsigned blocksFor(std::size_t count, unsigned perBlock = kThreads) {
  return static_cast<unsigned>(
      std::max<std::size_t>(1, std::min<std::size_t>((count + perBlock - 1) / perBlock, 1u << 20)));
}

__global__ void gatherPositionsKernel(const double* x, const double* y, const double* z, const std::uint32_t* order,
                                      std::uint32_t n, double* treeX, double* treeY, double* treeZ) {
  for (std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const std::uint32_t j = order[i];
    treeX[i] = x[j];
    treeY[i] = y[j];
    treeZ[i] = z[j];
  }
}

__global__ void scatterForcesKernel(DeviceForces tree, const std::uint32_t* order, std::uint32_t n, DeviceForces out) {
  for (std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const std::uint32_t j = order[i];
    out.ax[j] = tree.ax[i];
    out.ay[j] = tree.ay[i];
    out.az[j] = tree.az[i];
    if (out.pot != nullptr) out.pot[j] = tree.pot[i];
  }
}

__global__ void packRunsKernel(DeviceForces tree, const uint4* runs, std::uint32_t numRuns, double* packed,
                               std::size_t numPacked) {
  for (std::uint32_t k = blockIdx.x; k < numRuns; k += gridDim.x) {
    const uint4 run = runs[k];
    for (std::uint32_t t = threadIdx.x; t < run.y; t += blockDim.x) {
      const std::size_t from = std::size_t{run.x} + t, to = std::size_t{run.z} + t;
      packed[to] = tree.ax[from];
      packed[numPacked + to] = tree.ay[from];
      packed[2 * numPacked + to] = tree.az[from];
      if (tree.pot != nullptr) packed[3 * numPacked + to] = tree.pot[from];
    }
  }
}

/// The host's leapfrog between two calls (core/particles.hpp: BodyAdvance), rounded as the host rounds it: the _rn
/// intrinsics keep nvcc from fusing a product into the sum that follows (the host compiles the integrator with
/// -ffp-contract=off), so the copy stays the caller's bodies bit for bit.
__global__ void advanceBodiesKernel(MirrorBodies bodies, std::uint32_t n, double firstKick, double secondKick,
                                    double drift) {
  for (std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    double* position[3] = {bodies.x, bodies.y, bodies.z};
    double* velocity[3] = {bodies.vx, bodies.vy, bodies.vz};
    const double* acceleration[3] = {bodies.ax, bodies.ay, bodies.az};
    for (int d = 0; d < 3; ++d) {
      const double a = acceleration[d][i];
      double v = velocity[d][i];
      // A zero kick is no kick (after the first call the host has none to close): v + a * 0 could turn -0 into +0.
      if (firstKick != 0.0) v = __dadd_rn(v, __dmul_rn(a, firstKick));
      if (secondKick != 0.0) v = __dadd_rn(v, __dmul_rn(a, secondKick));
      velocity[d][i] = v;
      position[d][i] = __dadd_rn(position[d][i], __dmul_rn(v, drift));
    }
  }
}

__global__ void scatterVelocitiesKernel(const std::uint32_t* ids, const double* packed, std::uint32_t count, double* vx,
                                        double* vy, double* vz) {
  for (std::uint32_t k = blockIdx.x * blockDim.x + threadIdx.x; k < count; k += gridDim.x * blockDim.x) {
    const std::uint32_t i = ids[k];
    vx[i] = packed[k];
    vy[i] = packed[std::size_t{count} + k];
    vz[i] = packed[2 * std::size_t{count} + k];
  }
}

/// core's wrapIntoBox, rounded as the host rounds it (its -ffp-contract=off).
__device__ inline double wrappedIntoBox(double x, double box) {
  if (x >= 0.0 && x < box) return __dadd_rn(x, 0.0);
  if (!isfinite(x)) return x;
  const double wrapped = __dsub_rn(x, __dmul_rn(box, floor(__ddiv_rn(x, box))));
  return wrapped >= 0.0 && wrapped < box ? __dadd_rn(wrapped, 0.0) : 0.0;
}

/// The leapfrog's drift of a block step in a box (core/particles.hpp: BodyDrift) and the periodic solver's path
/// continuation (tree/periodic_tree_solver.cpp: treeHolds), each product and sum rounded on its own as on the host. A
/// path continues from the last launch's place, which lies within a ball of the build's place: the same face crossings
/// as the host finds from the build's.
__global__ void driftBodiesKernel(DriftedBodies bodies, std::uint32_t n, double drift, double box) {
  const double half = 0.5 * box;
  for (std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    double* position[3] = {bodies.x, bodies.y, bodies.z};
    const double* velocity[3] = {bodies.vx, bodies.vy, bodies.vz};
    double* path[3] = {bodies.pathX, bodies.pathY, bodies.pathZ};
    for (int d = 0; d < 3; ++d) {
      double x = __dadd_rn(position[d][i], __dmul_rn(velocity[d][i], drift));
      x = __dadd_rn(x, 0.0);
      if (!(x >= 0.0 && x < box)) x = wrappedIntoBox(x, box);
      position[d][i] = x;
      const double moved = __dsub_rn(x, path[d][i]);
      path[d][i] = moved > half ? __dsub_rn(x, box) : (moved < -half ? __dadd_rn(x, box) : x);
    }
  }
}

__global__ void placeBodiesKernel(const std::uint32_t* ids, const double* points, std::uint32_t count, double* x,
                                  double* y, double* z) {
  for (std::uint32_t k = blockIdx.x * blockDim.x + threadIdx.x; k < count; k += gridDim.x * blockDim.x) {
    const std::uint32_t i = ids[k];
    x[i] = points[3 * std::size_t{k}];
    y[i] = points[3 * std::size_t{k} + 1];
    z[i] = points[3 * std::size_t{k} + 2];
  }
}

/// The periodic solver's ball test (tree/periodic_tree_solver.cpp: treeHolds, continuedPath), each product and sum
/// rounded on its own as on the host: the same bodies outside, bit for bit. Their ids go to outside[] while fewer than
/// `capacity` are found; *count counts them all.
__global__ void bodiesOutsideBallsKernel(BallsOfBodies balls, std::uint32_t n, double box, std::uint32_t capacity,
                                         std::uint32_t* outside, std::uint32_t* count) {
  const double half = 0.5 * box;
  for (std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const double* position[3] = {balls.x, balls.y, balls.z};
    const double* centre[3] = {balls.centreX, balls.centreY, balls.centreZ};
    double moved[3];
    for (int d = 0; d < 3; ++d) {
      moved[d] = __dsub_rn(position[d][i], centre[d][i]);
      if (moved[d] > half) {
        moved[d] = __dsub_rn(moved[d], box);
      } else if (moved[d] < -half) {
        moved[d] = __dadd_rn(moved[d], box);
      }
    }
    const double distance2 = __dadd_rn(__dadd_rn(__dmul_rn(moved[0], moved[0]), __dmul_rn(moved[1], moved[1])),
                                       __dmul_rn(moved[2], moved[2]));
    const double radius = balls.radius[i];
    if (!(distance2 <= __dmul_rn(radius, radius))) {
      const std::uint32_t k = atomicAdd(count, 1u);
      if (k < capacity) outside[k] = i;
    }
  }
}

/// Positions of the bodies k n / count, k < count, as 3 x count values (x first).
__global__ void samplePositionsKernel(const double* x, const double* y, const double* z, std::uint32_t n,
                                      std::uint32_t count, double* sample) {
  for (std::uint32_t k = blockIdx.x * blockDim.x + threadIdx.x; k < count; k += gridDim.x * blockDim.x) {
    const std::uint32_t i = sampleIndex(k, n, count);
    sample[k] = x[i];
    sample[count + k] = y[i];
    sample[2 * count + k] = z[i];
  }
}

__global__ void refitLevelKernel(RefitBodies bodies, RefitCells cells, std::uint32_t firstCell, std::uint32_t lastCell,
                                 double theta) {
  for (std::uint32_t cell = firstCell + blockIdx.x * blockDim.x + threadIdx.x; cell < lastCell;
       cell += gridDim.x * blockDim.x) {
    refitCell(bodies, cells, cell, theta);
  }
}

/// One warp per group: the tight box of its bodies, as centre and half extents (the CPU engine's formula).
__global__ void groupBoxesKernel(const double* x, const double* y, const double* z, const uint2* groups,
                                 std::uint32_t numGroups, double* centres, double* halves) {
  const unsigned lane = threadIdx.x % 32;
  const std::uint32_t numWarps = gridDim.x * (blockDim.x / 32);
  for (std::uint32_t g = (blockIdx.x * blockDim.x + threadIdx.x) / 32; g < numGroups; g += numWarps) {
    const uint2 range = groups[g];
    double lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
    for (std::uint32_t i = range.x + lane; i < range.y; i += 32) {
      const double p[3] = {x[i], y[i], z[i]};
      for (int d = 0; d < 3; ++d) {
        lo[d] = fmin(lo[d], p[d]);
        hi[d] = fmax(hi[d], p[d]);
      }
    }
    for (int offset = 16; offset > 0; offset /= 2) {
      for (int d = 0; d < 3; ++d) {
        lo[d] = fmin(lo[d], __shfl_xor_sync(0xffffffffu, lo[d], offset));
        hi[d] = fmax(hi[d], __shfl_xor_sync(0xffffffffu, hi[d], offset));
      }
    }
    if (lane == 0) {
      for (int d = 0; d < 3; ++d) {
        centres[3 * g + d] = 0.5 * (lo[d] + hi[d]);
        halves[3 * g + d] = 0.5 * (hi[d] - lo[d]);
      }
    }
  }
}

/// One warp per group of `groups` (all groups when null): every cell of its list must hold none of its bodies and
/// pass the opening criterion against its box; a group with one that does not is flagged and listed once.
template <bool kQuadrupole>
__global__ void checkListsKernel(CheckArgs args) {
  const unsigned lane = threadIdx.x % 32;
  const std::uint32_t numWarps = gridDim.x * (blockDim.x / 32);
  for (std::uint32_t k = (blockIdx.x * blockDim.x + threadIdx.x) / 32; k < args.numGroups; k += numWarps) {
    const std::uint32_t g = args.groups != nullptr ? args.groups[k] : k;
    const uint4 list = args.groupLists[g];
    const uint2 range = args.groupBodies[g];
    const double* centre = args.groupCentres + 3 * g;
    const double* half = args.groupHalves + 3 * g;
    const double tolerance = args.tolerance[g];
    bool fails = false;
    for (std::uint32_t e = lane; e < list.w && !fails; e += 32) {
      const std::uint32_t c = args.cellList[list.z + e];
      const uint2 cellBodies = args.cellBodies[c];
      const bool holdsGroup = cellBodies.x < range.y && range.x < cellBodies.y;
      const double distance2 = distanceToBox2(args.cellX[c], args.cellY[c], args.cellZ[c], centre[0], centre[1],
                                              centre[2], half[0], half[1], half[2]);
      fails = holdsGroup || !passesOpeningCriterion(distance2, args.openingRadius[c], args.cellMass[c], args.bmax[c],
                                                    tolerance, kQuadrupole);
    }
    if (__any_sync(0xffffffffu, fails) && lane == 0) {
      if (atomicExch(args.failedFlags + g, 1u) == 0u) args.failedList[atomicAdd(args.failedCount, 1u)] = g;
    }
  }
}

/// One warp per group of a new plan: its ranges expanded into the body arena at bodyTop + bodyOffsets[k], and its
/// descriptor pointing there and at its cells (already copied to cellTop + cellOffsets[k]).
__global__ void installListsKernel(InstallArgs args) {
  const unsigned lane = threadIdx.x % 32;
  const std::uint32_t numWarps = gridDim.x * (blockDim.x / 32);
  for (std::uint32_t k = (blockIdx.x * blockDim.x + threadIdx.x) / 32; k < args.numLists; k += numWarps) {
    std::uint32_t position = args.bodyTop + args.bodyOffsets[k];
    for (std::uint32_t r = args.rangeOffsets[k]; r < args.rangeOffsets[k + 1]; ++r) {
      const uint2 range = args.ranges[r];
      for (std::uint32_t j = range.x + lane; j < range.y; j += 32) args.bodyArena[position + (j - range.x)] = j;
      position += range.y - range.x;
    }
    if (lane == 0) {
      args.groupLists[args.groupIds[k]] =
          uint4{args.bodyTop + args.bodyOffsets[k], args.counts[k], args.cellTop + args.cellOffsets[k],
                args.cellOffsets[k + 1] - args.cellOffsets[k]};
    }
  }
}

/// The longest-processing-time order of the warp tasks: key = 63 - the bucket of log2(cost), so that an ascending
/// sort puts the most expensive first.
__global__ void taskKeysKernel(const uint4* tasks, std::uint32_t numTasks, const uint4* groupLists, TaskCostModel model,
                               std::uint32_t* keys) {
  for (std::uint32_t t = blockIdx.x * blockDim.x + threadIdx.x; t < numTasks; t += gridDim.x * blockDim.x) {
    const uint4 task = tasks[t];
    const uint4 list = groupLists[task.x];
    const double entries = double(list.y) + double(list.w) * model.cellWeight;
    const double cost = entries * model.costPerEntry[task.w];
    const int bucket = cost < 1.0 ? 0 : min(63, 1 + static_cast<int>(log2(cost)));
    keys[t] = static_cast<std::uint32_t>(63 - bucket);
  }
}

}  // namespace

void launchGatherPositions(const double* x, const double* y, const double* z, const std::uint32_t* order,
                           std::uint32_t n, double* treeX, double* treeY, double* treeZ, cudaStream_t stream) {
  gatherPositionsKernel<<<blocksFor(n), kThreads, 0, stream>>>(x, y, z, order, n, treeX, treeY, treeZ);
}

void launchScatterForces(DeviceForces tree, const std::uint32_t* order, std::uint32_t n, DeviceForces out,
                         cudaStream_t stream) {
  scatterForcesKernel<<<blocksFor(n), kThreads, 0, stream>>>(tree, order, n, out);
}

void launchPackRuns(DeviceForces tree, const uint4* runs, std::uint32_t numRuns, double* packed, std::size_t numPacked,
                    cudaStream_t stream) {
  if (numRuns == 0) return;
  packRunsKernel<<<std::min<std::uint32_t>(numRuns, 65535), kThreads, 0, stream>>>(tree, runs, numRuns, packed,
                                                                                   numPacked);
}

void launchAdvanceBodies(const MirrorBodies& bodies, std::uint32_t n, const BodyAdvance& advance, cudaStream_t stream) {
  advanceBodiesKernel<<<blocksFor(n), kThreads, 0, stream>>>(bodies, n, advance.firstKick, advance.secondKick,
                                                             advance.drift);
}

void launchScatterVelocities(const std::uint32_t* ids, const double* packed, std::uint32_t count, double* vx,
                             double* vy, double* vz, cudaStream_t stream) {
  if (count == 0) return;
  scatterVelocitiesKernel<<<blocksFor(count), kThreads, 0, stream>>>(ids, packed, count, vx, vy, vz);
}

void launchDriftBodies(const DriftedBodies& bodies, std::uint32_t n, const BodyDrift& drift, cudaStream_t stream) {
  if (n == 0) return;
  driftBodiesKernel<<<blocksFor(n), kThreads, 0, stream>>>(bodies, n, drift.drift, drift.boxSize);
}

void launchPlaceBodies(const std::uint32_t* ids, const double* points, std::uint32_t count, double* x, double* y,
                       double* z, cudaStream_t stream) {
  if (count == 0) return;
  placeBodiesKernel<<<blocksFor(count), kThreads, 0, stream>>>(ids, points, count, x, y, z);
}

void launchBodiesOutsideBalls(const BallsOfBodies& balls, std::uint32_t n, double box, std::uint32_t capacity,
                              std::uint32_t* outside, std::uint32_t* count, cudaStream_t stream) {
  if (n == 0) return;
  bodiesOutsideBallsKernel<<<blocksFor(n), kThreads, 0, stream>>>(balls, n, box, capacity, outside, count);
}

void launchSamplePositions(const double* x, const double* y, const double* z, std::uint32_t n, std::uint32_t count,
                           double* sample, cudaStream_t stream) {
  samplePositionsKernel<<<blocksFor(count), kThreads, 0, stream>>>(x, y, z, n, count, sample);
}

void launchRefitLevel(const RefitBodies& bodies, const RefitCells& cells, std::uint32_t firstCell,
                      std::uint32_t lastCell, double theta, cudaStream_t stream) {
  if (lastCell <= firstCell) return;
  refitLevelKernel<<<blocksFor(lastCell - firstCell, 128), 128, 0, stream>>>(bodies, cells, firstCell, lastCell, theta);
}

void launchGroupBoxes(const double* x, const double* y, const double* z, const uint2* groups, std::uint32_t numGroups,
                      double* centres, double* halves, cudaStream_t stream) {
  groupBoxesKernel<<<blocksFor(std::size_t{numGroups} * 32), kThreads, 0, stream>>>(x, y, z, groups, numGroups, centres,
                                                                                    halves);
}

void launchCheckLists(const CheckArgs& args, bool quadrupole, cudaStream_t stream) {
  if (args.numGroups == 0) return;
  const unsigned blocks = blocksFor(std::size_t{args.numGroups} * 32);
  if (quadrupole) {
    checkListsKernel<true><<<blocks, kThreads, 0, stream>>>(args);
  } else {
    checkListsKernel<false><<<blocks, kThreads, 0, stream>>>(args);
  }
}

void launchInstallLists(const InstallArgs& args, cudaStream_t stream) {
  installListsKernel<<<blocksFor(std::size_t{args.numLists} * 32), kThreads, 0, stream>>>(args);
}

void launchTaskKeys(const uint4* tasks, std::uint32_t numTasks, const uint4* groupLists, const TaskCostModel& model,
                    std::uint32_t* keys, cudaStream_t stream) {
  taskKeysKernel<<<blocksFor(numTasks), kThreads, 0, stream>>>(tasks, numTasks, groupLists, model, keys);
}

std::size_t sortTasksScratchBytes(std::uint32_t count) {
  std::size_t bytes = 0;
  MATCHA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, bytes, static_cast<const std::uint32_t*>(nullptr), static_cast<std::uint32_t*>(nullptr),
      static_cast<const uint4*>(nullptr), static_cast<uint4*>(nullptr), static_cast<int>(count), 0, 6));
  return bytes;
}

void sortTasks(void* scratch, std::size_t scratchBytes, const std::uint32_t* keysIn, std::uint32_t* keysOut,
               const uint4* tasksIn, uint4* tasksOut, std::uint32_t count, cudaStream_t stream) {
  // Keys < 64: six bits.
  MATCHA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(scratch, scratchBytes, keysIn, keysOut, tasksIn, tasksOut,
                                                    static_cast<int>(count), 0, 6, stream));
}

}  // namespace matcha::gpu::detail
