// SPDX-License-Identifier: MIT
// Instantiations of the group x list kernel and the list-expansion helper.
#include <algorithm>
#include <array>
#include <type_traits>

#include "kernel_variants.cuh"

namespace matcha::gpu::detail {

__global__ void expandBodyRangesKernel(const uint2* bodyRanges, const std::uint32_t* bodyRangeOffsets,
                                       const uint4* groupLists, std::uint32_t numGroups, std::uint32_t* expanded) {
  const std::uint32_t lane = threadIdx.x % 32;
  const std::uint32_t numWarps = gridDim.x * (blockDim.x / 32);
  for (std::uint32_t group = (blockIdx.x * blockDim.x + threadIdx.x) / 32; group < numGroups; group += numWarps) {
    std::uint32_t position = groupLists[group].x;
    for (std::uint32_t r = bodyRangeOffsets[group]; r < bodyRangeOffsets[group + 1]; ++r) {
      const uint2 range = bodyRanges[r];
      for (std::uint32_t j = range.x + lane; j < range.y; j += 32) expanded[position + (j - range.x)] = j;
      position += range.y - range.x;
    }
  }
}

void launchExpandBodyRanges(const uint2* bodyRanges, const std::uint32_t* bodyRangeOffsets, const uint4* groupLists,
                            std::uint32_t numGroups, std::uint32_t* expanded, cudaStream_t stream) {
  constexpr unsigned kThreads = 256;
  const unsigned numBlocks = std::max(1u, std::min(65535u, (numGroups + kThreads / 32 - 1) / (kThreads / 32)));
  expandBodyRangesKernel<<<numBlocks, kThreads, 0, stream>>>(bodyRanges, bodyRangeOffsets, groupLists, numGroups,
                                                             expanded);
}

namespace {

constexpr int kPlanWarps = 4;

// 4 blocks of 4 warps per SM, 128 registers. Quadrupole cells need them (at 96 registers ptxas spilled 124-304 bytes),
// double plans too (126). Float monopole plans ran at 5 blocks and 96 registers (on an H100: 77% issue efficiency
// against 72% at 4 blocks) until their 128-row tasks (firstPlanTaskKind) came in: with those, 128 registers ran faster
// (Plummer 2^20, theta 0.5, H200, ms a launch with / without the potential: ncrit 256 3.53 / 3.13 -> 3.23 / 3.06,
// ncrit 1024 5.18 / 4.55 -> 4.69 / 4.49, periodic 5.46 -> 4.99; small groups, ncrit 64, 3.11 / 2.93 -> 3.18 / 2.98).
constexpr int kPlanMinBlocks = 4;

template <class Real, bool kQuadrupole, int kTile, bool kAccurate, bool kPotential, bool kPeriodic = false>
PlanVariant<Real> makePlanVariant() {
  return {kTile,
          kQuadrupole,
          kAccurate,
          kPotential,
          kPeriodic,
          kPlanWarps * 32,
          reinterpret_cast<const void*>(
              &planKernel<Real, kQuadrupole, kAccurate, kPotential, kTile, kPlanWarps, kPlanMinBlocks, kPeriodic>),
          [](unsigned numBlocks, cudaStream_t stream, const PlanArgs<Real>& args) {
            planKernel<Real, kQuadrupole, kAccurate, kPotential, kTile, kPlanWarps, kPlanMinBlocks, kPeriodic>
                <<<numBlocks, kPlanWarps * 32, 0, stream>>>(args);
          }};
}

/// A plan kernel with and without the potential.
template <class Real, bool kQuadrupole, int kTile, bool kAccurate = false, bool kPeriodic = false>
std::array<PlanVariant<Real>, 2> makePlanVariants() {
  return {makePlanVariant<Real, kQuadrupole, kTile, kAccurate, true, kPeriodic>(),
          makePlanVariant<Real, kQuadrupole, kTile, kAccurate, false, kPeriodic>()};
}

}  // namespace

template <>
std::span<const PlanVariant<float>> planVariants<float>() {
  // Plans with accurateNearPairs (direct sums onto a subsample, as `matcha compare --sample` makes) use tile 64.
  static const std::vector variants = joinVariantPairs<PlanVariant<float>>({
      makePlanVariants<float, false, 32>(),
      makePlanVariants<float, false, 64>(),
      makePlanVariants<float, true, 32>(),
      makePlanVariants<float, true, 64>(),
      makePlanVariants<float, false, 64, true>(),
      makePlanVariants<float, true, 64, true>(),
      // The periodic short range at the default tile only (each variant adds ~0.7 MB to the binaries): the engine
      // takes them whatever its planTileSize.
      makePlanVariants<float, false, kPeriodicPlanTile, false, true>(),
      makePlanVariants<float, true, kPeriodicPlanTile, false, true>(),
  });
  return variants;
}

template <>
std::span<const PlanVariant<double>> planVariants<double>() {
  static const std::vector variants = joinVariantPairs<PlanVariant<double>>(
      {makePlanVariants<double, false, 64>(), makePlanVariants<double, true, 64>()});
  return variants;
}

}  // namespace matcha::gpu::detail
