// SPDX-License-Identifier: MIT
// Launchers of the kernels around resident lists (resident_kernels.cu). Included only by .cu files.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "matcha/core/cell_refit.hpp"
#include "matcha/core/particles.hpp"
#include "nbody_kernels.cuh"

namespace matcha::gpu::detail {

/// What checkListsKernel reads: the lists, the refitted cells and the groups' boxes and tolerances.
struct CheckArgs {
  const std::uint32_t* groups;  ///< the groups to check (numGroups of them), or null for groups 0 .. numGroups - 1
  std::uint32_t numGroups;
  const uint4* groupLists;  ///< per group {first j-body, j-bodies, first cell, cells} (PlanArgs::groupLists)
  const std::uint32_t* cellList;
  const uint2* cellBodies;   ///< per cell, its bodies
  const uint2* groupBodies;  ///< per group, its bodies
  const double* cellX;
  const double* cellY;
  const double* cellZ;
  const double* cellMass;
  const double* openingRadius;
  const double* bmax;
  const double* groupCentres;  ///< 3 per group
  const double* groupHalves;   ///< 3 per group
  const double* tolerance;     ///< per group; +inf: theta alone
  std::uint32_t* failedFlags;  ///< per group, zero before
  std::uint32_t* failedList;
  std::uint32_t* failedCount;  ///< zero before
};

/// What installListsKernel reads and writes.
struct InstallArgs {
  std::uint32_t numLists;
  const std::uint32_t* groupIds;      ///< per list: the group it belongs to
  const uint2* ranges;                ///< body ranges of every list
  const std::uint32_t* rangeOffsets;  ///< numLists + 1
  const std::uint32_t* cellOffsets;   ///< numLists + 1, into the cells copied at cellTop
  const std::uint32_t* counts;        ///< j-bodies per list (the walk's count)
  const std::uint32_t* bodyOffsets;   ///< exclusive scan of counts
  std::uint32_t bodyTop;
  std::uint32_t cellTop;
  std::uint32_t* bodyArena;
  uint4* groupLists;
};

/// The cost model that orders warp tasks (cuda_engine.cu): cost = (j-bodies + cells x cellWeight) x costPerEntry[kind].
struct TaskCostModel {
  double cellWeight;
  double costPerEntry[8];
};

/// The engine's copy of the caller's bodies (NearFieldEngine BodyUpdate), in the caller's order.
struct MirrorBodies {
  double* x;
  double* y;
  double* z;
  double* vx;
  double* vy;
  double* vz;
  const double* ax;
  const double* ay;
  const double* az;
};

/// A periodic box's bodies as the engine keeps them for BodyMotion::drifted (NearFieldEngine BodyUpdate): its copy
/// of the caller's positions (in the box) and velocities, and the positions of the last launch, each body's path.
struct DriftedBodies {
  double* x;
  double* y;
  double* z;
  const double* vx;
  const double* vy;
  const double* vz;
  double* pathX;
  double* pathY;
  double* pathZ;
};

/// The engine's copy of the bodies (positions in the box) and their balls (centres and radii), for the periodic
/// solver's test of which bodies left them (NearFieldEngine::driftResident).
struct BallsOfBodies {
  const double* x;
  const double* y;
  const double* z;
  const double* centreX;
  const double* centreY;
  const double* centreZ;
  const float* radius;
};

/// The k-th of `count` bodies sampled evenly from n: k n / count (64-bit product).
__host__ __device__ inline std::uint32_t sampleIndex(std::uint32_t k, std::uint32_t n, std::uint32_t count) {
  return static_cast<std::uint32_t>(std::uint64_t{k} * n / count);
}

void launchAdvanceBodies(const MirrorBodies& bodies, std::uint32_t n, const BodyAdvance& advance, cudaStream_t stream);
/// v[ids[k]] = packed[k], packed[count + k], packed[2 count + k] (x, y, z) for k < count.
void launchScatterVelocities(const std::uint32_t* ids, const double* packed, std::uint32_t count, double* vx,
                             double* vy, double* vz, cudaStream_t stream);
/// BodyDrift's drift and wrap on the copy, then each path continued from where it was (BodyMotion::drifted), rounded
/// as the host rounds them.
void launchDriftBodies(const DriftedBodies& bodies, std::uint32_t n, const BodyDrift& drift, cudaStream_t stream);
/// path[ids[k]] = points[3 k], points[3 k + 1], points[3 k + 2] for k < count.
void launchPlaceBodies(const std::uint32_t* ids, const double* points, std::uint32_t count, double* x, double* y,
                       double* z, cudaStream_t stream);
/// The bodies outside their balls (|d|^2 > r^2, d at the nearest image, rounded as the host's treeHolds): ids, in no
/// particular order, into outside[] below `capacity`; *count (zeroed by the caller) counts them all.
void launchBodiesOutsideBalls(const BallsOfBodies& balls, std::uint32_t n, double box, std::uint32_t capacity,
                              std::uint32_t* outside, std::uint32_t* count, cudaStream_t stream);
void launchSamplePositions(const double* x, const double* y, const double* z, std::uint32_t n, std::uint32_t count,
                           double* sample, cudaStream_t stream);
void launchGatherPositions(const double* x, const double* y, const double* z, const std::uint32_t* order,
                           std::uint32_t n, double* treeX, double* treeY, double* treeZ, cudaStream_t stream);
void launchScatterForces(DeviceForces tree, const std::uint32_t* order, std::uint32_t n, DeviceForces out,
                         cudaStream_t stream);
/// Packs runs of the outputs (run k: {first, count, offset}) into `packed`, component c at c * numPacked + offset +
/// t: a subset's outputs leave the device in one copy per component, not one per run.
void launchPackRuns(DeviceForces tree, const uint4* runs, std::uint32_t numRuns, double* packed, std::size_t numPacked,
                    cudaStream_t stream);
void launchRefitLevel(const RefitBodies& bodies, const RefitCells& cells, std::uint32_t firstCell,
                      std::uint32_t lastCell, double theta, cudaStream_t stream);
void launchGroupBoxes(const double* x, const double* y, const double* z, const uint2* groups, std::uint32_t numGroups,
                      double* centres, double* halves, cudaStream_t stream);
void launchCheckLists(const CheckArgs& args, bool quadrupole, cudaStream_t stream);
void launchInstallLists(const InstallArgs& args, cudaStream_t stream);
void launchTaskKeys(const uint4* tasks, std::uint32_t numTasks, const uint4* groupLists, const TaskCostModel& model,
                    std::uint32_t* keys, cudaStream_t stream);

std::size_t sortTasksScratchBytes(std::uint32_t count);
void sortTasks(void* scratch, std::size_t scratchBytes, const std::uint32_t* keysIn, std::uint32_t* keysOut,
               const uint4* tasksIn, uint4* tasksOut, std::uint32_t count, cudaStream_t stream);

}  // namespace matcha::gpu::detail
