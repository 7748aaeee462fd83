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
#include <numeric>
#include <type_traits>
#include <vector>

#include "matcha/core/errors.hpp"
#include "matcha/core/pair_interaction.hpp"
#include "matcha/core/stopwatch.hpp"

namespace matcha::gpu {

namespace {

// j-bodies per partial sum. Float partial sums over 128 terms keep the rounding error at the 1e-7 level whatever the
// list length; the partial sums are added in double (DESIGN.md §3).
constexpr std::size_t kTileSize = 128;
// Float sums that direct summation keeps apart within a tile: one per AVX-512 lane (two AVX2 vectors).
constexpr std::size_t kLanes = 16;

/// A group's interaction list, relative to the group centre c, padded to whole tiles:
///  - sources: list bodies, and the cells too when they are monopoles, as (x, y, z, mass) with x = Real(x_j - c),
///    and, for plans with accurateNearPairs only, the same in double for the tiles and bodies evaluated again in double
///    (pair_interaction.hpp: closePairThreshold);
///  - quadrupole cells: (x, y, z, mass) of the centre of mass and the six tensor components.
template <class Real>
struct PackedList {
  std::vector<Real> x, y, z, mass;
  std::vector<double> exactX, exactY, exactZ, exactMass;
  std::vector<Real> cellX, cellY, cellZ, cellMass, qxx, qyy, qzz, qxy, qxz, qyz, trace;
  bool keepExact = false;  ///< fill exactX..exactMass (tree plans never read them)

  static std::size_t padded(std::size_t count) { return (count + kTileSize - 1) / kTileSize * kTileSize; }

  // Pads with zero-mass sources at the centre: they add exactly nothing (a zero-distance pair is skipped).
  void resize(std::size_t sources, std::size_t quadrupoleCells, bool withExact) {
    keepExact = withExact;
    for (auto* array : {&x, &y, &z, &mass}) {
      array->resize(padded(sources));
      std::fill(array->begin() + static_cast<std::ptrdiff_t>(sources), array->end(), Real(0));
    }
    for (auto* array : {&exactX, &exactY, &exactZ, &exactMass}) {
      if (!withExact) continue;  // keep their capacity; nothing reads them
      array->resize(padded(sources));
      std::fill(array->begin() + static_cast<std::ptrdiff_t>(sources), array->end(), 0.0);
    }
    for (auto* array : {&cellX, &cellY, &cellZ, &cellMass, &qxx, &qyy, &qzz, &qxy, &qxz, &qyz, &trace}) {
      array->resize(padded(quadrupoleCells));
      std::fill(array->begin() + static_cast<std::ptrdiff_t>(quadrupoleCells), array->end(), Real(0));
    }
    // Padding cells sit far away (a zero-mass quadrupole at zero distance would still divide by eps = 0).
    std::fill(cellX.begin() + static_cast<std::ptrdiff_t>(quadrupoleCells), cellX.end(), Real(1.0e12));
  }

  void setSource(std::size_t k, double dx, double dy, double dz, double m) {
    x[k] = static_cast<Real>(dx);
    y[k] = static_cast<Real>(dy);
    z[k] = static_cast<Real>(dz);
    mass[k] = static_cast<Real>(m);
    if (!keepExact) return;
    exactX[k] = dx;
    exactY[k] = dy;
    exactZ[k] = dz;
    exactMass[k] = m;
  }
};

template <class Real>
void packGroupList(const SourceView& sources, const CellMultipoles& cells, const InteractionPlan& plan,
                   std::size_t group, PackedList<Real>& list) {
  const double cx = plan.groupCentres[3 * group + 0];
  const double cy = plan.groupCentres[3 * group + 1];
  const double cz = plan.groupCentres[3 * group + 2];
  const std::size_t numBodies = plan.numListBodies(group);
  const std::size_t numCells = plan.numListCells(group);
  const bool quadrupole = cells.hasQuadrupole;
  list.resize(numBodies + (quadrupole ? 0 : numCells), quadrupole ? numCells : 0,
              std::is_same_v<Real, float> && plan.accurateNearPairs);
  std::size_t k = 0;
  for (std::uint32_t r = plan.bodyListOffsets[group]; r < plan.bodyListOffsets[group + 1]; ++r) {
    for (std::uint32_t j = plan.bodyList[r].first; j < plan.bodyList[r].last; ++j, ++k) {
      list.setSource(k, sources.x[j] - cx, sources.y[j] - cy, sources.z[j] - cz, sources.mass[j]);
    }
  }
  std::size_t q = 0;
  for (std::uint32_t c = plan.cellListOffsets[group]; c < plan.cellListOffsets[group + 1]; ++c) {
    const std::uint32_t cell = plan.cellList[c];
    if (!quadrupole) {
      list.setSource(k++, cells.x[cell] - cx, cells.y[cell] - cy, cells.z[cell] - cz, cells.mass[cell]);
      continue;
    }
    list.cellX[q] = static_cast<Real>(cells.x[cell] - cx);
    list.cellY[q] = static_cast<Real>(cells.y[cell] - cy);
    list.cellZ[q] = static_cast<Real>(cells.z[cell] - cz);
    list.cellMass[q] = static_cast<Real>(cells.mass[cell]);
    list.qxx[q] = static_cast<Real>(cells.qxx[cell]);
    list.qyy[q] = static_cast<Real>(cells.qyy[cell]);
    list.qzz[q] = static_cast<Real>(cells.qzz[cell]);
    list.qxy[q] = static_cast<Real>(cells.qxy[cell]);
    list.qxz[q] = static_cast<Real>(cells.qxz[cell]);
    list.qyz[q] = static_cast<Real>(cells.qyz[cell]);
    list.trace[q] = static_cast<Real>(cells.trace[cell]);
    ++q;
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
  const std::size_t numSourcesPadded = list.mass.size();
  const std::size_t numCellsPadded = list.cellMass.size();
  const Real* __restrict jx = list.x.data();
  const Real* __restrict jy = list.y.data();
  const Real* __restrict jz = list.z.data();
  const Real* __restrict jm = list.mass.data();
  for (std::uint32_t i = plan.groups[group].first; i < plan.groups[group].last; ++i) {
    const double dxi = sources.x[i] - cx, dyi = sources.y[i] - cy, dzi = sources.z[i] - cz;
    const Real xi = static_cast<Real>(dxi);
    const Real yi = static_cast<Real>(dyi);
    const Real zi = static_cast<Real>(dzi);
    double ax = 0.0, ay = 0.0, az = 0.0, pot = 0.0;
    // Double keeps 1e-16 of the distance from the centre and needs no second pass; the checked interaction of the
    // first pass already applies the self-term rule.
    const bool secondPass = std::is_same_v<Real, float> && plan.accurateNearPairs;
    const Real threshold = secondPass ? closePairThreshold(xi, yi, zi, eps2) : Real(0);
    double floatMagnitude = 0.0;  // what the float sums summed (pair_interaction.hpp: floatSumCancelled)
    for (std::size_t tile = 0; tile < numSourcesPadded; tile += kTileSize) {
      Real tileAx = 0, tileAy = 0, tileAz = 0, tilePot = 0;
      Real minSoftenedR2 = std::numeric_limits<Real>::max();
      Real tileMagnitude = 0;
      if (secondPass) {
        // M sums each SIMD lane's partial sum, as the CUDA twin sums each thread's, not the tile's: when the pulls
        // cancel between lanes (a mirrored pair split across two) the tile's sum is small while each lane's float
        // sum, and its rounding, is not. Measured: balancedPulls' body 0 erred by 5.6e-6, for one seed in ten, with M
        // taken from the tile sums. The lanes are explicit here so that M can see them; summing |pair| instead cost
        // a third of the float direct sum's speed, the explicit lanes ~5% (2 cores, within the noise).
#pragma omp simd reduction(+ : tileAx, tileAy, tileAz, tilePot, tileMagnitude) reduction(min : minSoftenedR2)
        for (std::size_t lane = 0; lane < kLanes; ++lane) {
          Real laneAx = 0, laneAy = 0, laneAz = 0;
          for (std::size_t j = tile + lane; j < tile + kTileSize; j += kLanes) {
            const Real dx = jx[j] - xi, dy = jy[j] - yi, dz = jz[j] - zi;
            minSoftenedR2 = std::min(minSoftenedR2, dx * dx + dy * dy + dz * dz + eps2);
            accumulatePairInteraction<Real>(dx, dy, dz, jm[j], eps2, laneAx, laneAy, laneAz, tilePot);
          }
          tileAx += laneAx;
          tileAy += laneAy;
          tileAz += laneAz;
          tileMagnitude += std::fabs(laneAx) + std::fabs(laneAy) + std::fabs(laneAz);
        }
      } else {
#pragma omp simd reduction(+ : tileAx, tileAy, tileAz, tilePot) reduction(min : minSoftenedR2)
        for (std::size_t j = tile; j < tile + kTileSize; ++j) {
          const Real dx = jx[j] - xi, dy = jy[j] - yi, dz = jz[j] - zi;
          minSoftenedR2 = std::min(minSoftenedR2, dx * dx + dy * dy + dz * dz + eps2);
          accumulatePairInteraction<Real>(dx, dy, dz, jm[j], eps2, tileAx, tileAy, tileAz, tilePot);
        }
      }
      if (secondPass && minSoftenedR2 <= threshold) {
        // A close or strong pair (the CUDA twin's rule): the near pairs in double, the others again in float but
        // summed in double: this tile holds the body's largest terms, and 128-term float sums of them were too long
        // (the CUDA twin sums at most 64 terms in float instead).
        tileAx = tileAy = tileAz = tilePot = 0;
        for (std::size_t j = tile; j < tile + kTileSize; ++j) {
          const Real dx = jx[j] - xi, dy = jy[j] - yi, dz = jz[j] - zi;
          if (dx * dx + dy * dy + dz * dz + eps2 <= threshold) {
            accumulatePairInteraction<double>(list.exactX[j] - dxi, list.exactY[j] - dyi, list.exactZ[j] - dzi,
                                              list.exactMass[j], gravity.eps2(), ax, ay, az, pot);
          } else {
            Real pairAx = 0, pairAy = 0, pairAz = 0, pairPot = 0;
            accumulatePairInteraction<Real>(dx, dy, dz, jm[j], eps2, pairAx, pairAy, pairAz, pairPot);
            floatMagnitude += std::fabs(pairAx) + std::fabs(pairAy) + std::fabs(pairAz);
            ax += pairAx;
            ay += pairAy;
            az += pairAz;
            pot += pairPot;
          }
        }
      } else {
        floatMagnitude += tileMagnitude;
      }
      ax += tileAx;
      ay += tileAy;
      az += tileAz;
      pot += tilePot;
    }
    if (secondPass && floatSumCancelled(ax, ay, az, floatMagnitude)) {
      // The float sums cancelled (the CUDA twin's rule): the whole list again in double.
      ax = ay = az = pot = 0.0;
      for (std::size_t j = 0; j < numSourcesPadded; ++j) {
        accumulatePairInteraction<double>(list.exactX[j] - dxi, list.exactY[j] - dyi, list.exactZ[j] - dzi,
                                          list.exactMass[j], gravity.eps2(), ax, ay, az, pot);
      }
    }
    for (std::size_t tile = 0; tile < numCellsPadded; tile += kTileSize) {
      Real tileAx = 0, tileAy = 0, tileAz = 0, tilePot = 0;
#pragma omp simd reduction(+ : tileAx, tileAy, tileAz, tilePot)
      for (std::size_t c = tile; c < tile + kTileSize; ++c) {
        const Quadrupole<Real> q{list.qxx[c], list.qyy[c], list.qzz[c],  list.qxy[c],
                                 list.qxz[c], list.qyz[c], list.trace[c]};
        accumulateQuadrupoleInteraction<Real>(list.cellX[c] - xi, list.cellY[c] - yi, list.cellZ[c] - zi,
                                              list.cellMass[c], q, eps2, tileAx, tileAy, tileAz, tilePot);
      }
      ax += tileAx;
      ay += tileAy;
      az += tileAz;
      pot += tilePot;
    }
    out.ax[i] = gravity.G * ax;
    out.ay[i] = gravity.G * ay;
    out.az[i] = gravity.G * az;
    if (out.pot != nullptr) out.pot[i] = gravity.G * pot;
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
  const Stopwatch clock;
  const InteractionCounts counts = precision_ == Precision::float32
                                       ? evaluatePlanIn<float>(sources, cells, plan, gravity, out)
                                       : evaluatePlanIn<double>(sources, cells, plan, gravity, out);
  timings_ = EngineTimings{0.0, clock.seconds(), 0.0};
  return counts;
}

InteractionCounts CpuEngine::evaluateDirect(const SourceView& sources, const GravityParams& gravity,
                                            const ForceView& out) {
  MATCHA_ASSERT(out.count == sources.count, "direct summation output size differs from source count");
  const InteractionPlan plan = makeDirectPlan(sources, 64);
  return evaluatePlan(sources, CellMultipoles{}, plan, gravity, out);
}

InteractionPlan makeDirectPlan(const SourceView& sources, std::uint32_t blockSize) {
  MATCHA_ASSERT(sources.count <= std::numeric_limits<std::uint32_t>::max(), "too many bodies for 32-bit indices");
  return makeDirectPlan(sources, blockSize, BodyRange{0, static_cast<std::uint32_t>(sources.count)});
}

InteractionPlan makeDirectPlan(const SourceView& sources, std::uint32_t blockSize, BodyRange targets) {
  MATCHA_ASSERT(blockSize >= 1, "block size must be >= 1");
  MATCHA_ASSERT(sources.count <= std::numeric_limits<std::uint32_t>::max(), "too many bodies for 32-bit indices");
  MATCHA_ASSERT(targets.first <= targets.last && targets.last <= sources.count, "direct-sum targets out of range");
  const auto numBodies = static_cast<std::uint32_t>(sources.count);
  InteractionPlan plan;
  const std::uint32_t numGroups = (targets.size() + blockSize - 1) / blockSize;
  plan.groups.reserve(numGroups);
  plan.groupCentres.reserve(3 * std::size_t{numGroups});
  for (std::uint32_t first = targets.first; first < targets.last; first += blockSize) {
    const std::uint32_t last = std::min(targets.last, first + blockSize);
    plan.groups.push_back({first, last});
    // The mean position, as the CUDA direct kernel's blocks use: in random order a block's bounding box is set by
    // its outermost bodies, and its centre can sit several length units from the core bodies it holds.
    for (const double* coordinate : {sources.x, sources.y, sources.z}) {
      plan.groupCentres.push_back(std::accumulate(coordinate + first, coordinate + last, 0.0) / double(last - first));
    }
    plan.cellListOffsets.push_back(0);
    plan.bodyList.push_back({0, numBodies});
    plan.bodyListOffsets.push_back(static_cast<std::uint32_t>(plan.bodyList.size()));
  }
  plan.accurateNearPairs = true;
  return plan;
}

}  // namespace matcha::gpu
