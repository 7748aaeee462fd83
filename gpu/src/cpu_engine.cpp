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
#include <span>
#include <type_traits>
#include <vector>

#include "matcha/core/cell_refit.hpp"
#include "matcha/core/errors.hpp"
#include "matcha/core/opening_criterion.hpp"
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

  // Pads with zero-mass sources at the centre: they add exactly nothing (mass 0 times a finite 1/r, or a skipped
  // zero-distance pair when eps = 0).
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

/// One group's work: its bodies, the centre its float coordinates are taken from, and its list.
struct GroupWork {
  BodyRange targets;
  double centre[3];
  std::span<const std::uint32_t> cells;
  std::span<const BodyRange> ranges;
  bool accurateNearPairs = false;

  std::uint64_t numListBodies() const {
    std::uint64_t count = 0;
    for (const BodyRange& range : ranges) count += range.size();
    return count;
  }
};

GroupWork groupWork(const InteractionPlan& plan, std::size_t group) {
  GroupWork work;
  work.targets = plan.groups[group];
  for (int d = 0; d < 3; ++d) work.centre[d] = plan.groupCentres[3 * group + d];
  work.cells = {plan.cellList.data() + plan.cellListOffsets[group], plan.numListCells(group)};
  work.ranges = {plan.bodyList.data() + plan.bodyListOffsets[group],
                 std::size_t{plan.bodyListOffsets[group + 1] - plan.bodyListOffsets[group]}};
  work.accurateNearPairs = plan.accurateNearPairs;
  return work;
}

template <class Real, class Offset>
void packGroupListAs(const SourceView& sources, const CellMultipoles& cells, const GroupWork& work,
                     PackedList<Real>& list, Offset offset) {
  const double cx = work.centre[0];
  const double cy = work.centre[1];
  const double cz = work.centre[2];
  const std::size_t numBodies = work.numListBodies();
  const std::size_t numCells = work.cells.size();
  const bool quadrupole = cells.hasQuadrupole;
  list.resize(numBodies + (quadrupole ? 0 : numCells), quadrupole ? numCells : 0,
              std::is_same_v<Real, float> && work.accurateNearPairs);
  std::size_t k = 0;
  for (const BodyRange& range : work.ranges) {
    for (std::uint32_t j = range.first; j < range.last; ++j, ++k) {
      list.setSource(k, offset(sources.x[j] - cx), offset(sources.y[j] - cy), offset(sources.z[j] - cz),
                     sources.mass[j]);
    }
  }
  std::size_t q = 0;
  for (const std::uint32_t cell : work.cells) {
    if (!quadrupole) {
      list.setSource(k++, offset(cells.x[cell] - cx), offset(cells.y[cell] - cy), offset(cells.z[cell] - cz),
                     cells.mass[cell]);
      continue;
    }
    list.cellX[q] = static_cast<Real>(offset(cells.x[cell] - cx));
    list.cellY[q] = static_cast<Real>(offset(cells.y[cell] - cy));
    list.cellZ[q] = static_cast<Real>(offset(cells.z[cell] - cz));
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

/// Packs a group's list relative to its centre; with `boxSize` > 0 (periodic) each source at the nearest image of its
/// offset, so that the float coordinates stay within half a box of the centre.
template <class Real>
void packGroupList(const SourceView& sources, const CellMultipoles& cells, const GroupWork& work,
                   PackedList<Real>& list, double boxSize = 0.0) {
  if (boxSize > 0.0) {
    const auto image = [&](double d) { return nearestImage(d, boxSize); };
    packGroupListAs(sources, cells, work, list, image);
  } else {
    packGroupListAs(sources, cells, work, list, [](double d) { return d; });
  }
}

/// Writes body i's sums, times G. The pair loops counted the body's own pair when eps > 0 (in the precision they ran
/// in: a float eps^2 that underflowed to 0 skipped it, hence `selfCounted`); its -m_i/eps comes out here, once.
[[gnu::always_inline]] inline void storeBodyForces(const SourceView& sources, const GravityParams& gravity,
                                                   bool selfCounted, std::uint32_t i, double ax, double ay, double az,
                                                   double pot, const ForceView& out) {
  out.ax[i] = gravity.G * ax;
  out.ay[i] = gravity.G * ay;
  out.az[i] = gravity.G * az;
  const double self = selfCounted ? selfPairPotential<double>(sources.mass[i], gravity.eps2()) : 0.0;
  if (out.pot != nullptr) out.pot[i] = gravity.G * (pot - self);
}

template <class Real>
[[gnu::always_inline]] inline void evaluateGroup(const SourceView& sources, const GroupWork& work,
                                                 const PackedList<Real>& list, const GravityParams& gravity,
                                                 const ForceView& out) {
  const double cx = work.centre[0];
  const double cy = work.centre[1];
  const double cz = work.centre[2];
  const Real eps2 = static_cast<Real>(gravity.eps2());
  const std::size_t numSourcesPadded = list.mass.size();
  const std::size_t numCellsPadded = list.cellMass.size();
  const Real* __restrict jx = list.x.data();
  const Real* __restrict jy = list.y.data();
  const Real* __restrict jz = list.z.data();
  const Real* __restrict jm = list.mass.data();
  for (std::uint32_t i = work.targets.first; i < work.targets.last; ++i) {
    const double dxi = sources.x[i] - cx, dyi = sources.y[i] - cy, dzi = sources.z[i] - cz;
    const Real xi = static_cast<Real>(dxi);
    const Real yi = static_cast<Real>(dyi);
    const Real zi = static_cast<Real>(dzi);
    double ax = 0.0, ay = 0.0, az = 0.0, pot = 0.0;
    // Double keeps 1e-16 of the distance from the centre and needs no second pass; the checked interaction of the
    // first pass already skips the singular pairs of eps = 0.
    const bool secondPass = std::is_same_v<Real, float> && work.accurateNearPairs;
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
    storeBodyForces(sources, gravity, eps2 > Real(0), i, ax, ay, az, pot, out);
  }
}

/// The periodic TreePM short range (GravityParams::periodic): evaluateGroup's tiles with the erfc-truncated pair and
/// cell (pair_interaction.hpp), each separation taken at its nearest image. The list is packed at the nearest images
/// of the group's centre; a body away from the centre may still be nearer another image of a source, hence the
/// per-pair fold (two selects per axis). No second pass in double: tree plans never ask for one.
template <class Real>
[[gnu::always_inline]] inline void evaluateGroupPeriodic(const SourceView& sources, const GroupWork& work,
                                                         const PackedList<Real>& list, const GravityParams& gravity,
                                                         const ForceView& out) {
  const PeriodicSplit& split = gravity.periodic;
  const double cx = work.centre[0];
  const double cy = work.centre[1];
  const double cz = work.centre[2];
  const Real eps2 = static_cast<Real>(gravity.eps2());
  const Real box = static_cast<Real>(split.boxSize);
  const Real invTwoSplit = static_cast<Real>(0.5 / split.splitRadius);
  const Real cutoff2 = static_cast<Real>(split.cutoffRadius * split.cutoffRadius);
  const std::size_t numSourcesPadded = list.mass.size();
  const std::size_t numCellsPadded = list.cellMass.size();
  const Real* __restrict jx = list.x.data();
  const Real* __restrict jy = list.y.data();
  const Real* __restrict jz = list.z.data();
  const Real* __restrict jm = list.mass.data();
  for (std::uint32_t i = work.targets.first; i < work.targets.last; ++i) {
    const Real xi = static_cast<Real>(nearestImage(sources.x[i] - cx, split.boxSize));
    const Real yi = static_cast<Real>(nearestImage(sources.y[i] - cy, split.boxSize));
    const Real zi = static_cast<Real>(nearestImage(sources.z[i] - cz, split.boxSize));
    double ax = 0.0, ay = 0.0, az = 0.0, pot = 0.0;
    for (std::size_t tile = 0; tile < numSourcesPadded; tile += kTileSize) {
      Real tileAx = 0, tileAy = 0, tileAz = 0, tilePot = 0;
#pragma omp simd reduction(+ : tileAx, tileAy, tileAz, tilePot)
      for (std::size_t j = tile; j < tile + kTileSize; ++j) {
        accumulateTruncatedPairInteraction<Real>(nearestImage(jx[j] - xi, box), nearestImage(jy[j] - yi, box),
                                                 nearestImage(jz[j] - zi, box), jm[j], eps2, invTwoSplit, cutoff2,
                                                 tileAx, tileAy, tileAz, tilePot);
      }
      ax += tileAx;
      ay += tileAy;
      az += tileAz;
      pot += tilePot;
    }
    for (std::size_t tile = 0; tile < numCellsPadded; tile += kTileSize) {
      Real tileAx = 0, tileAy = 0, tileAz = 0, tilePot = 0;
#pragma omp simd reduction(+ : tileAx, tileAy, tileAz, tilePot)
      for (std::size_t c = tile; c < tile + kTileSize; ++c) {
        const Quadrupole<Real> q{list.qxx[c], list.qyy[c], list.qzz[c],  list.qxy[c],
                                 list.qxz[c], list.qyz[c], list.trace[c]};
        accumulateTruncatedQuadrupoleInteraction<Real>(nearestImage(list.cellX[c] - xi, box),
                                                       nearestImage(list.cellY[c] - yi, box),
                                                       nearestImage(list.cellZ[c] - zi, box), list.cellMass[c], q, eps2,
                                                       invTwoSplit, tileAx, tileAy, tileAz, tilePot);
      }
      ax += tileAx;
      ay += tileAy;
      az += tileAz;
      pot += tilePot;
    }
    storeBodyForces(sources, gravity, eps2 > Real(0), i, ax, ay, az, pot, out);  // g(0) = 1: the same self term
  }
}

// The inner loop compiled for three instruction sets, picked at load time by the CPU (GCC function multiversioning):
// the build stays portable (no -march=native) yet uses 8- or 16-wide FMA lanes where the machine has them.
#define MATCHA_SIMD_CLONES __attribute__((target_clones("arch=skylake-avx512", "arch=haswell", "default")))

// One entry point per precision for both flavours: the periodic short range (GravityParams::periodic) or the
// Newtonian pull.
MATCHA_SIMD_CLONES void evaluateGroupFloat(const SourceView& sources, const GroupWork& work,
                                           const PackedList<float>& list, const GravityParams& gravity,
                                           const ForceView& out) {
  if (gravity.periodic.enabled()) {
    evaluateGroupPeriodic<float>(sources, work, list, gravity, out);
  } else {
    evaluateGroup<float>(sources, work, list, gravity, out);
  }
}

MATCHA_SIMD_CLONES void evaluateGroupDouble(const SourceView& sources, const GroupWork& work,
                                            const PackedList<double>& list, const GravityParams& gravity,
                                            const ForceView& out) {
  if (gravity.periodic.enabled()) {
    evaluateGroupPeriodic<double>(sources, work, list, gravity, out);
  } else {
    evaluateGroup<double>(sources, work, list, gravity, out);
  }
}

/// Packs and evaluates one group; returns its interactions.
template <class Real>
InteractionCounts evaluateGroupWork(const SourceView& sources, const CellMultipoles& cells, const GroupWork& work,
                                    PackedList<Real>& list, const GravityParams& gravity, const ForceView& out) {
  const bool periodic = gravity.periodic.enabled();
  packGroupList(sources, cells, work, list, periodic ? gravity.periodic.boxSize : 0.0);
  MATCHA_ASSERT(!(periodic && work.accurateNearPairs), "periodic plans are tree plans (no second pass in double)");
  if constexpr (std::is_same_v<Real, float>) {
    evaluateGroupFloat(sources, work, list, gravity, out);
  } else {
    evaluateGroupDouble(sources, work, list, gravity, out);
  }
  const std::uint64_t numTargets = work.targets.size();
  return {numTargets * work.numListBodies(), numTargets * work.cells.size()};
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
                        local += evaluateGroupWork(sources, cells, groupWork(plan, group), list, gravity, out);
                      }
                    });
  return counts.combine([](InteractionCounts a, const InteractionCounts& b) { return a += b; });
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// Resident lists

namespace {

/// Each group's resident list in two growing arrays; a replaced list leaves its old entries behind until the
/// garbage outweighs the live entries and the arena is compacted.
class ListArena {
 public:
  void reset(std::size_t numGroups) {
    cells_.clear();
    ranges_.clear();
    spans_.assign(numGroups, Span{});
    liveCells_ = liveRanges_ = 0;
  }

  void set(const InteractionPlan& plan) {
    MATCHA_ASSERT(plan.groupIds.size() == plan.numGroups(), "setLists needs a group id per list");
    for (std::size_t k = 0; k < plan.numGroups(); ++k) {
      const std::uint32_t group = plan.groupIds[k];
      MATCHA_ASSERT(group < spans_.size(), "setLists: group id outside the tree");
      Span& span = spans_[group];
      liveCells_ -= span.cellEnd - span.cellBegin;
      liveRanges_ -= span.rangeEnd - span.rangeBegin;
      span.cellBegin = cells_.size();
      cells_.insert(cells_.end(), plan.cellList.begin() + plan.cellListOffsets[k],
                    plan.cellList.begin() + plan.cellListOffsets[k + 1]);
      span.cellEnd = cells_.size();
      span.rangeBegin = ranges_.size();
      ranges_.insert(ranges_.end(), plan.bodyList.begin() + plan.bodyListOffsets[k],
                     plan.bodyList.begin() + plan.bodyListOffsets[k + 1]);
      span.rangeEnd = ranges_.size();
      span.set = true;
      liveCells_ += span.cellEnd - span.cellBegin;
      liveRanges_ += span.rangeEnd - span.rangeBegin;
    }
    if (cells_.size() + ranges_.size() > 2 * (liveCells_ + liveRanges_) + (std::size_t{1} << 20)) compact();
  }

  bool has(std::uint32_t group) const { return spans_[group].set; }
  std::span<const std::uint32_t> cells(std::uint32_t group) const {
    return {cells_.data() + spans_[group].cellBegin, spans_[group].cellEnd - spans_[group].cellBegin};
  }
  std::span<const BodyRange> ranges(std::uint32_t group) const {
    return {ranges_.data() + spans_[group].rangeBegin, spans_[group].rangeEnd - spans_[group].rangeBegin};
  }

 private:
  struct Span {
    std::uint64_t cellBegin = 0, cellEnd = 0, rangeBegin = 0, rangeEnd = 0;
    bool set = false;
  };

  void compact() {
    std::vector<std::uint32_t> cells;
    std::vector<BodyRange> ranges;
    cells.reserve(liveCells_);
    ranges.reserve(liveRanges_);
    for (Span& span : spans_) {
      const std::uint64_t cellBegin = cells.size(), rangeBegin = ranges.size();
      cells.insert(cells.end(), cells_.begin() + span.cellBegin, cells_.begin() + span.cellEnd);
      ranges.insert(ranges.end(), ranges_.begin() + span.rangeBegin, ranges_.begin() + span.rangeEnd);
      span.cellBegin = cellBegin;
      span.cellEnd = cells.size();
      span.rangeBegin = rangeBegin;
      span.rangeEnd = ranges.size();
    }
    cells_.swap(cells);
    ranges_.swap(ranges);
  }

  std::vector<std::uint32_t> cells_;
  std::vector<BodyRange> ranges_;
  std::vector<Span> spans_;
  std::uint64_t liveCells_ = 0, liveRanges_ = 0;
};

/// Whether `cell` may stand in for its bodies in `group`'s list at the refitted positions: it holds none of the
/// group's bodies and passes the opening criterion against the group's box.
bool passesCheck(const TreeTopology& topology, const CellMultipoles& cells, std::span<const double> openingRadius,
                 std::span<const double> bmax, const double* boxCentre, const double* boxHalf, std::uint32_t group,
                 std::uint32_t cell) {
  const BodyRange cellBodies = topology.cellBodies[cell];
  const BodyRange groupBodies = topology.groups[group];
  if (cellBodies.first < groupBodies.last && groupBodies.first < cellBodies.last) return false;
  const double distance2 = distanceToBox2(cells.x[cell], cells.y[cell], cells.z[cell], boxCentre[0], boxCentre[1],
                                          boxCentre[2], boxHalf[0], boxHalf[1], boxHalf[2]);
  return passesOpeningCriterion(distance2, openingRadius[cell], cells.mass[cell], bmax[cell],
                                topology.relativeTolerance[group], cells.hasQuadrupole);
}

}  // namespace

struct CpuEngine::Resident {
  TreeTopology topology;
  ListArena lists;
  std::vector<double> mass;             ///< tree order
  std::vector<double> x, y, z;          ///< tree order, when the caller's order differs
  std::vector<double> ax, ay, az, pot;  ///< outputs in tree order, when the caller's order differs
  CellMultipoles cells;                 ///< refitted each launch
  std::vector<double> halfExtent, bmax, openingRadius;
  std::vector<double> boxCentre, boxHalf;  ///< 3 per group
  std::vector<std::uint32_t> allGroups;
  ResidentResult result;
  bool hasTree = false;
  bool refitted = false;  ///< a launch since setTree refitted the cells (BodyMotion::unchanged may skip the refit)
};

CpuEngine::CpuEngine(Precision precision) : precision_(precision), resident_(std::make_unique<Resident>()) {}

CpuEngine::~CpuEngine() = default;

void CpuEngine::setTree(const TreeTopology& topology, const SourceView& bodies) {
  Resident& r = *resident_;
  const std::size_t n = topology.numBodies();
  MATCHA_ASSERT(bodies.count == n, "setTree: the tree and the bodies differ in number");
  MATCHA_ASSERT(topology.order.empty() || topology.order.size() == n, "setTree: order has the wrong length");
  MATCHA_ASSERT(topology.relativeTolerance.size() == topology.numGroups(), "setTree: a tolerance per group needed");
  r.topology = topology;
  r.mass.resize(n);
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n), [&](const tbb::blocked_range<std::size_t>& range) {
    for (std::size_t i = range.begin(); i != range.end(); ++i)
      r.mass[i] = bodies.mass[topology.order.empty() ? i : topology.order[i]];
  });
  r.lists.reset(topology.numGroups());
  r.cells.resize(topology.numCells(), topology.multipole == MultipoleOrder::quadrupole);
  for (auto* array : {&r.halfExtent, &r.bmax, &r.openingRadius}) array->resize(topology.numCells());
  r.boxCentre.resize(3 * topology.numGroups());
  r.boxHalf.resize(3 * topology.numGroups());
  r.allGroups.resize(topology.numGroups());
  std::iota(r.allGroups.begin(), r.allGroups.end(), 0u);
  r.hasTree = true;
  r.refitted = false;
}

void CpuEngine::setLists(const InteractionPlan& plan) {
  MATCHA_ASSERT(resident_->hasTree, "setLists before setTree");
  resident_->lists.set(plan);
}

void CpuEngine::dropLists() {
  MATCHA_ASSERT(resident_->hasTree, "dropLists before setTree");
  resident_->lists.reset(resident_->topology.numGroups());
}

void CpuEngine::launchResident(const SourceView& bodies, const GravityParams& gravity, const ForceView& out,
                               std::span<const std::uint32_t> groups, const BodyUpdate& update) {
  Resident& r = *resident_;
  MATCHA_ASSERT(r.hasTree, "launchResident before setTree");
  // Periodic lists hold by the solver's balls, not by the open-boundary test (NearFieldEngine): not checked.
  const bool checked = !gravity.periodic.enabled();
  // This engine reads the caller's arrays: an advance it does not repeat, the positions it reads are already moved.
  const bool refitNeeded = update.motion != BodyMotion::unchanged || !r.refitted;
  const Stopwatch clock;
  const TreeTopology& topology = r.topology;
  const std::size_t n = topology.numBodies();
  MATCHA_ASSERT(bodies.count == n && out.count == n, "launchResident: the tree and the bodies differ in number");
  const bool gathered = !topology.order.empty();

  // Positions in tree order.
  SourceView sources{bodies.x, bodies.y, bodies.z, r.mass.data(), n};
  ForceView forces = out;
  if (gathered) {
    if (refitNeeded) {
      for (auto* array : {&r.x, &r.y, &r.z, &r.ax, &r.ay, &r.az, &r.pot}) array->resize(n);
      tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n), [&](const tbb::blocked_range<std::size_t>& range) {
        for (std::size_t i = range.begin(); i != range.end(); ++i) {
          const std::uint32_t j = topology.order[i];
          r.x[i] = bodies.x[j];
          r.y[i] = bodies.y[j];
          r.z[i] = bodies.z[j];
        }
      });
    }
    sources = {r.x.data(), r.y.data(), r.z.data(), r.mass.data(), n};
    forces = {r.ax.data(), r.ay.data(), r.az.data(), out.pot != nullptr ? r.pot.data() : nullptr, n};
  }

  // Refit, level by level from the deepest.
  RefitCells refit;
  refit.bodies = topology.cellBodies.data();
  refit.firstChild = topology.firstChild.data();
  refit.numChildren = topology.numChildren.data();
  refit.centre = topology.cellCentre.data();
  refit.halfSide = topology.cellHalfSide.data();
  refit.mass = r.cells.mass.data();
  refit.x = r.cells.x.data();
  refit.y = r.cells.y.data();
  refit.z = r.cells.z.data();
  if (r.cells.hasQuadrupole) {
    double* q[7] = {r.cells.qxx.data(), r.cells.qyy.data(), r.cells.qzz.data(),  r.cells.qxy.data(),
                    r.cells.qxz.data(), r.cells.qyz.data(), r.cells.trace.data()};
    for (int k = 0; k < 7; ++k) refit.quadrupole[k] = q[k];
  }
  refit.halfExtent = r.halfExtent.data();
  refit.bmax = r.bmax.data();
  refit.openingRadius = r.openingRadius.data();
  const RefitBodies refitBodies{sources.x, sources.y, sources.z, sources.mass, nullptr};
  for (int level = topology.numLevels() - 1; refitNeeded && level >= 0; --level) {
    tbb::parallel_for(
        tbb::blocked_range<std::uint32_t>(topology.levelOffsets[level], topology.levelOffsets[level + 1], 64),
        [&](const tbb::blocked_range<std::uint32_t>& range) {
          for (std::uint32_t cell = range.begin(); cell != range.end(); ++cell) {
            refitCell(refitBodies, refit, cell, topology.theta);
          }
        });
  }
  r.refitted = true;

  // Group boxes, then each group's list evaluated and checked.
  const std::span<const std::uint32_t> evaluated =
      groups.empty() ? std::span<const std::uint32_t>(r.allGroups) : groups;
  tbb::combinable<InteractionCounts> counts;
  tbb::combinable<std::vector<std::uint32_t>> failed;
  const auto run = [&]<class Real>(Real) {
    tbb::enumerable_thread_specific<PackedList<Real>> packed;
    tbb::parallel_for(
        tbb::blocked_range<std::size_t>(0, evaluated.size(), 1), [&](const tbb::blocked_range<std::size_t>& range) {
          PackedList<Real>& list = packed.local();
          for (std::size_t k = range.begin(); k != range.end(); ++k) {
            const std::uint32_t group = evaluated[k];
            MATCHA_ASSERT(group < topology.numGroups() && r.lists.has(group), "launchResident: a group without a list");
            const BodyRange targets = topology.groups[group];
            double lo[3], hi[3];
            for (int d = 0; d < 3; ++d) {
              lo[d] = std::numeric_limits<double>::infinity();
              hi[d] = -lo[d];
            }
            for (std::uint32_t i = targets.first; i < targets.last; ++i) {
              const double p[3] = {sources.x[i], sources.y[i], sources.z[i]};
              for (int d = 0; d < 3; ++d) {
                lo[d] = std::min(lo[d], p[d]);
                hi[d] = std::max(hi[d], p[d]);
              }
            }
            double* centre = &r.boxCentre[3 * group];
            double* half = &r.boxHalf[3 * group];
            GroupWork work;
            work.targets = targets;
            for (int d = 0; d < 3; ++d) {
              centre[d] = 0.5 * (lo[d] + hi[d]);
              half[d] = 0.5 * (hi[d] - lo[d]);
              work.centre[d] = centre[d];
            }
            work.cells = r.lists.cells(group);
            work.ranges = r.lists.ranges(group);
            counts.local() += evaluateGroupWork(sources, r.cells, work, list, gravity, forces);
            for (const std::uint32_t cell : checked ? work.cells : std::span<const std::uint32_t>{}) {
              if (!passesCheck(topology, r.cells, r.openingRadius, r.bmax, centre, half, group, cell)) {
                failed.local().push_back(group);
                break;
              }
            }
          }
        });
  };
  if (precision_ == Precision::float32) {
    run(float{});
  } else {
    run(double{});
  }

  if (gathered) {
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, evaluated.size()),
                      [&](const tbb::blocked_range<std::size_t>& range) {
                        for (std::size_t k = range.begin(); k != range.end(); ++k) {
                          const BodyRange targets = topology.groups[evaluated[k]];
                          for (std::uint32_t i = targets.first; i < targets.last; ++i) {
                            const std::uint32_t j = topology.order[i];
                            out.ax[j] = r.ax[i];
                            out.ay[j] = r.ay[i];
                            out.az[j] = r.az[i];
                            if (out.pot != nullptr) out.pot[j] = r.pot[i];
                          }
                        }
                      });
  }

  r.result = ResidentResult{};
  r.result.counts = counts.combine([](InteractionCounts a, const InteractionCounts& b) { return a += b; });
  failed.combine_each([&](const std::vector<std::uint32_t>& list) {
    r.result.failedGroups.insert(r.result.failedGroups.end(), list.begin(), list.end());
  });
  std::sort(r.result.failedGroups.begin(), r.result.failedGroups.end());
  r.result.timings = EngineTimings{0.0, clock.seconds(), 0.0};
  timings_ = r.result.timings;
}

ResidentResult CpuEngine::finishResident() { return std::move(resident_->result); }

void CpuEngine::discardResident() { resident_->result = ResidentResult{}; }

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
  if (gravity.periodic.enabled()) {
    throw InputError("periodic direct summation is not available: the periodic reference is Ewald summation");
  }
  const InteractionPlan plan = makeDirectPlan(sources, 64);
  return evaluatePlan(sources, CellMultipoles{}, plan, gravity, out);
}

InteractionPlan makeDirectPlan(const SourceView& sources, std::uint32_t blockSize) {
  MATCHA_ASSERT(sources.count <= std::numeric_limits<std::uint32_t>::max(), "too many bodies for 32-bit indices");
  return makeDirectPlan(sources, blockSize, BodyRange{0, static_cast<std::uint32_t>(sources.count)});
}

InteractionPlan makeDirectPlan(const SourceView& sources, std::uint32_t blockSize, BodyRange targets) {
  MATCHA_ASSERT(sources.count <= std::numeric_limits<std::uint32_t>::max(), "too many bodies for 32-bit indices");
  return makeDirectPlan(sources, blockSize, targets, BodyRange{0, static_cast<std::uint32_t>(sources.count)});
}

InteractionPlan makeDirectPlan(const SourceView& sources, std::uint32_t blockSize, BodyRange targets, BodyRange list) {
  MATCHA_ASSERT(blockSize >= 1, "block size must be >= 1");
  MATCHA_ASSERT(sources.count <= std::numeric_limits<std::uint32_t>::max(), "too many bodies for 32-bit indices");
  MATCHA_ASSERT(targets.first <= targets.last && targets.last <= sources.count, "direct-sum targets out of range");
  MATCHA_ASSERT(list.first <= list.last && list.last <= sources.count, "direct-sum sources out of range");
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
    if (list.size() > 0) plan.bodyList.push_back(list);
    plan.bodyListOffsets.push_back(static_cast<std::uint32_t>(plan.bodyList.size()));
  }
  plan.accurateNearPairs = true;
  return plan;
}

}  // namespace matcha::gpu
