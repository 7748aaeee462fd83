// SPDX-License-Identifier: MIT
#include "matcha/gpu/cpu_engine.hpp"

#include <tbb/blocked_range.h>
#include <tbb/combinable.h>
#include <tbb/enumerable_thread_specific.h>
#include <tbb/info.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "matcha/core/errors.hpp"
#include "matcha/core/pair_interaction.hpp"

namespace matcha::gpu {

namespace {

// j-bodies per partial sum. Float partial sums over 128 terms keep the rounding error at the 1e-7 level whatever the
// list length; the partial sums are added in double (DESIGN.md §3).
constexpr std::size_t kTileSize = 128;

template <class Real>
struct PackedList {
  std::vector<Real> x, y, z, mass;

  void resize(std::size_t count) {
    // Pad to whole tiles with zero-mass sources so the inner loop has no remainder.
    const std::size_t padded = (count + kTileSize - 1) / kTileSize * kTileSize;
    for (auto* array : {&x, &y, &z, &mass}) {
      array->resize(padded);
      std::fill(array->begin() + static_cast<std::ptrdiff_t>(count), array->end(), Real(0));
    }
  }
};

template <class Real>
void packGroupList(const SourceView& sources, const CellMultipoles& cells, const InteractionPlan& plan,
                   std::size_t group, PackedList<Real>& list) {
  const double cx = plan.groupCentres[3 * group + 0];
  const double cy = plan.groupCentres[3 * group + 1];
  const double cz = plan.groupCentres[3 * group + 2];
  const std::size_t numEntries = plan.numListBodies(group) + plan.numListCells(group);
  list.resize(numEntries);
  std::size_t k = 0;
  for (std::uint32_t r = plan.bodyListOffsets[group]; r < plan.bodyListOffsets[group + 1]; ++r) {
    for (std::uint32_t j = plan.bodyList[r].first; j < plan.bodyList[r].last; ++j, ++k) {
      list.x[k] = static_cast<Real>(sources.x[j] - cx);
      list.y[k] = static_cast<Real>(sources.y[j] - cy);
      list.z[k] = static_cast<Real>(sources.z[j] - cz);
      list.mass[k] = static_cast<Real>(sources.mass[j]);
    }
  }
  for (std::uint32_t c = plan.cellListOffsets[group]; c < plan.cellListOffsets[group + 1]; ++c, ++k) {
    const std::uint32_t cell = plan.cellList[c];
    list.x[k] = static_cast<Real>(cells.x[cell] - cx);
    list.y[k] = static_cast<Real>(cells.y[cell] - cy);
    list.z[k] = static_cast<Real>(cells.z[cell] - cz);
    list.mass[k] = static_cast<Real>(cells.mass[cell]);
  }
}

template <class Real>
[[gnu::always_inline]] inline void evaluateGroup(const SourceView& sources, const InteractionPlan& plan,
                                                 std::size_t group, const PackedList<Real>& list,
                                                 const GravityParams& gravity, const ForceView& out) {
  const double cx = plan.groupCentres[3 * group + 0];
  const double cy = plan.groupCentres[3 * group + 1];
  const double cz = plan.groupCentres[3 * group + 2];
  const Real eps2 = static_cast<Real>(gravity.eps2());
  const std::size_t numPadded = list.mass.size();
  const Real* __restrict jx = list.x.data();
  const Real* __restrict jy = list.y.data();
  const Real* __restrict jz = list.z.data();
  const Real* __restrict jm = list.mass.data();
  for (std::uint32_t i = plan.groups[group].first; i < plan.groups[group].last; ++i) {
    const Real xi = static_cast<Real>(sources.x[i] - cx);
    const Real yi = static_cast<Real>(sources.y[i] - cy);
    const Real zi = static_cast<Real>(sources.z[i] - cz);
    double ax = 0.0, ay = 0.0, az = 0.0, pot = 0.0;
    for (std::size_t tile = 0; tile < numPadded; tile += kTileSize) {
      Real tileAx = 0, tileAy = 0, tileAz = 0, tilePot = 0;
#pragma omp simd reduction(+ : tileAx, tileAy, tileAz, tilePot)
      for (std::size_t j = tile; j < tile + kTileSize; ++j) {
        accumulatePairInteraction<Real>(jx[j] - xi, jy[j] - yi, jz[j] - zi, jm[j], eps2, tileAx, tileAy, tileAz,
                                        tilePot);
      }
      ax += tileAx;
      ay += tileAy;
      az += tileAz;
      pot += tilePot;
    }
    out.ax[i] = gravity.G * ax;
    out.ay[i] = gravity.G * ay;
    out.az[i] = gravity.G * az;
    out.pot[i] = gravity.G * pot;
  }
}

// The inner loop compiled for three instruction sets, picked at load time by the CPU (GCC function multiversioning):
// the build stays portable (no -march=native) yet uses 8- or 16-wide FMA lanes where the machine has them.
#define MATCHA_SIMD_CLONES __attribute__((target_clones("arch=skylake-avx512", "arch=haswell", "default")))

MATCHA_SIMD_CLONES void evaluateGroupFloat(const SourceView& sources, const InteractionPlan& plan, std::size_t group,
                                           const PackedList<float>& list, const GravityParams& gravity,
                                           const ForceView& out) {
  evaluateGroup<float>(sources, plan, group, list, gravity, out);
}

MATCHA_SIMD_CLONES void evaluateGroupDouble(const SourceView& sources, const InteractionPlan& plan, std::size_t group,
                                            const PackedList<double>& list, const GravityParams& gravity,
                                            const ForceView& out) {
  evaluateGroup<double>(sources, plan, group, list, gravity, out);
}

template <class Real>
void evaluateGroupDispatch(const SourceView& sources, const InteractionPlan& plan, std::size_t group,
                           const PackedList<Real>& list, const GravityParams& gravity, const ForceView& out) {
  if constexpr (std::is_same_v<Real, float>) {
    evaluateGroupFloat(sources, plan, group, list, gravity, out);
  } else {
    evaluateGroupDouble(sources, plan, group, list, gravity, out);
  }
}

template <class Real>
InteractionCounts evaluatePlanIn(const SourceView& sources, const CellMultipoles& cells, const InteractionPlan& plan,
                                 const GravityParams& gravity, const ForceView& out) {
  MATCHA_ASSERT(plan.groupCentres.size() == 3 * plan.numGroups(), "plan has no centre for some group");
  MATCHA_ASSERT(plan.cellListOffsets.size() == plan.numGroups() + 1, "plan cell offsets malformed");
  MATCHA_ASSERT(plan.bodyListOffsets.size() == plan.numGroups() + 1, "plan body offsets malformed");
  // Threads come from TBB, the pool the tree already uses; OpenMP supplies only the SIMD directive. Two thread
  // runtimes side by side each spin-wait on the cores while the other works: measured 40x slower force calls at
  // small N and ~2x at N = 65536 on 2 cores.
  tbb::enumerable_thread_specific<PackedList<Real>> lists;  // one per thread, reused across its groups
  tbb::combinable<InteractionCounts> counts;
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, plan.numGroups(), 1),
                    [&](const tbb::blocked_range<std::size_t>& r) {
                      PackedList<Real>& list = lists.local();
                      InteractionCounts& local = counts.local();
                      for (std::size_t group = r.begin(); group != r.end(); ++group) {
                        packGroupList(sources, cells, plan, group, list);
                        evaluateGroupDispatch(sources, plan, group, list, gravity, out);
                        const std::uint64_t numTargets = plan.groups[group].size();
                        local.bodyBody += numTargets * plan.numListBodies(group);
                        local.bodyCell += numTargets * plan.numListCells(group);
                      }
                    });
  return counts.combine([](InteractionCounts a, const InteractionCounts& b) { return a += b; });
}

}  // namespace

CpuEngine::CpuEngine(Precision precision) : precision_(precision) {}

std::string CpuEngine::name() const {
  return std::string(precision_ == Precision::float32 ? "cpu-float" : "cpu-double") + " (" +
         std::to_string(tbb::info::default_concurrency()) + " threads)";
}

InteractionCounts CpuEngine::evaluatePlan(const SourceView& sources, const CellMultipoles& cells,
                                          const InteractionPlan& plan, const GravityParams& gravity,
                                          const ForceView& out) {
  if (precision_ == Precision::float32) return evaluatePlanIn<float>(sources, cells, plan, gravity, out);
  return evaluatePlanIn<double>(sources, cells, plan, gravity, out);
}

InteractionCounts CpuEngine::evaluateDirect(const SourceView& sources, const GravityParams& gravity,
                                            const ForceView& out) {
  MATCHA_ASSERT(out.count == sources.count, "direct summation output size differs from source count");
  const InteractionPlan plan = makeDirectPlan(sources, 64);
  return evaluatePlan(sources, CellMultipoles{}, plan, gravity, out);
}

InteractionPlan makeDirectPlan(const SourceView& sources, std::uint32_t blockSize) {
  MATCHA_ASSERT(blockSize >= 1, "block size must be >= 1");
  MATCHA_ASSERT(sources.count <= std::numeric_limits<std::uint32_t>::max(), "too many bodies for 32-bit indices");
  const auto numBodies = static_cast<std::uint32_t>(sources.count);
  InteractionPlan plan;
  const std::uint32_t numGroups = (numBodies + blockSize - 1) / blockSize;
  plan.groups.reserve(numGroups);
  plan.groupCentres.reserve(3 * std::size_t{numGroups});
  for (std::uint32_t first = 0; first < numBodies; first += blockSize) {
    const std::uint32_t last = std::min(numBodies, first + blockSize);
    plan.groups.push_back({first, last});
    for (const double* coordinate : {sources.x, sources.y, sources.z}) {
      const auto [lo, hi] = std::minmax_element(coordinate + first, coordinate + last);
      plan.groupCentres.push_back(0.5 * (*lo + *hi));
    }
    plan.cellListOffsets.push_back(0);
    plan.bodyList.push_back({0, numBodies});
    plan.bodyListOffsets.push_back(static_cast<std::uint32_t>(plan.bodyList.size()));
  }
  return plan;
}

}  // namespace matcha::gpu
