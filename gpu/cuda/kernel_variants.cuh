// SPDX-License-Identifier: MIT
// The explicitly instantiated kernel variants (STYLE.md habit 6), as tables the engine picks from at run time:
// direct-kernel shapes (tile size p, i-bodies per thread, threads per body q) and group x list tile sizes, for float
// and double. Defined at the bottom of direct_kernels.cu and plan_kernels.cu.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

#include "nbody_kernels.cuh"

namespace matcha::gpu::detail {

template <class Real>
struct DirectVariant {
  int threads;
  int bodiesPerThread;
  int threadsPerBody;
  int tile;
  int rows;            ///< i-bodies per block
  bool potential;      ///< writes out.pot (false: accelerations only)
  const void* kernel;  ///< for the occupancy query
  void (*launch)(dim3 grid, cudaStream_t stream, const DirectArgs<Real>& args);
};

template <class Real>
std::span<const DirectVariant<Real>> directVariants();

/// The variants of the tables below come in pairs (with and without the potential); this lays them out in one list.
template <class Variant>
std::vector<Variant> joinVariantPairs(std::initializer_list<std::array<Variant, 2>> pairs) {
  std::vector<Variant> variants;
  for (const auto& pair : pairs) variants.insert(variants.end(), pair.begin(), pair.end());
  return variants;
}

void launchTileBoxes(DeviceSoA sources, std::uint32_t numBodies, std::uint32_t tile, double* boxes,
                     cudaStream_t stream);

void launchCombineSplits(const double4_16a* partial, const float* partialMagnitude, std::uint32_t numSplits,
                         std::uint32_t numBodies, double G, DeviceForces out, std::uint32_t* cancelledBodies,
                         cudaStream_t stream);

void launchSumCancelledBodiesInDouble(DeviceSoA sources, std::uint32_t numBodies, const std::uint32_t* cancelledBodies,
                                      double eps2, double G, DeviceForces out, int numSMs, cudaStream_t stream);

template <class Real>
struct PlanVariant {
  int tile;         ///< sources per warp tile
  bool quadrupole;  ///< cells as quadrupoles (else as point masses)
  bool accurate;    ///< for plans with accurateNearPairs (float)
  bool potential;   ///< writes out.pot (false: accelerations only)
  bool periodic;    ///< the periodic short range (GravityParams::periodic), float only
  int threads;
  const void* kernel;
  void (*launch)(unsigned numBlocks, cudaStream_t stream, const PlanArgs<Real>& args);
};

template <class Real>
std::span<const PlanVariant<Real>> planVariants();

/// The one tile size of the periodic plan kernels (CudaKernelConfig's default planTileSize).
inline constexpr int kPeriodicPlanTile = 64;

/// expanded[groupLists[g].x + k] = the k-th j-body of group g (its ranges bodyRanges[bodyRangeOffsets[g] ..
/// bodyRangeOffsets[g + 1]) laid end to end), for g < numGroups.
void launchExpandBodyRanges(const uint2* bodyRanges, const std::uint32_t* bodyRangeOffsets, const uint4* groupLists,
                            std::uint32_t numGroups, std::uint32_t* expanded, cudaStream_t stream);

}  // namespace matcha::gpu::detail
