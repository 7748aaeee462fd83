// SPDX-License-Identifier: MIT
#include "matcha/tree/walk.hpp"

#if defined(__SSE2__)
#include <immintrin.h>
#endif
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_scan.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>

#include "matcha/core/errors.hpp"
#include "matcha/core/opening_criterion.hpp"

namespace matcha::tree {

namespace {}  // namespace

double distanceToBox2(const double* point, const double* boxCentre, const double* boxHalfExtent) {
  return matcha::distanceToBox2(point[0], point[1], point[2], boxCentre[0], boxCentre[1], boxCentre[2],
                                boxHalfExtent[0], boxHalfExtent[1], boxHalfExtent[2]);
}

bool acceptCell(const Octree& tree, std::uint32_t cell, const Groups& groups, std::size_t group) {
  const BodyRange cellBodies = tree.bodies[cell];
  const BodyRange groupBodies = groups.ranges[group];
  const bool holdsGroupBodies = cellBodies.first < groupBodies.last && groupBodies.first < cellBodies.last;
  if (holdsGroupBodies) return false;
  const double com[3] = {tree.multipoles.x[cell], tree.multipoles.y[cell], tree.multipoles.z[cell]};
  const double d2 = distanceToBox2(com, &groups.centre[3 * group], &groups.halfExtent[3 * group]);
  const double tolerance =
      groups.relativeTolerance.empty() ? std::numeric_limits<double>::infinity() : groups.relativeTolerance[group];
  // For a tree of balls (comSpread), the true centre of mass may lie comSpread nearer and its bodies comSpread
  // farther out: the relative test takes both (the opening radius already holds 2 comSpread).
  const double spread = tree.comSpread.empty() ? 0.0 : tree.comSpread[cell];
  const double distance = std::max(0.0, std::sqrt(d2) - spread);
  return d2 > tree.openingRadius[cell] * tree.openingRadius[cell] &&
         passesOpeningCriterion(distance * distance, 0.0, tree.multipoles.mass[cell], tree.bmax[cell] + spread,
                                tolerance, tree.multipoles.hasQuadrupole);
}

namespace {

/// The float nearest above `value` (a float that is >= value).
float roundUp(double value) {
  float f = static_cast<float>(value);
  if (double(f) < value) f = std::nextafter(f, std::numeric_limits<float>::infinity());
  return f;
}

/// The float nearest below `value`.
float roundDown(double value) {
  float f = static_cast<float>(value);
  if (double(f) > value) f = std::nextafter(f, -std::numeric_limits<float>::infinity());
  return f;
}

// Relative error bounds of the float test: the stored squared radii are raised by kRadiusFactor, the computed squared
// distance (three products and two sums) errs by a few units of 2^-24, far below it.
constexpr double kRadiusFactor = 1.0 + 0x1p-20;
// Coordinates in scaled units lie within the root's cube, |v| <= 1 (up to rounding), where a float's spacing is at
// most 2^-23: each rounded coordinate is off by at most half of that, and the distance computed from two of them and
// a rounded-up half extent by at most a few spacings. kSlackSpacings of them cover it with room to spare.
constexpr double kSlackSpacings = 8.0;

}  // namespace

void buildWalkTree(const Octree& tree, WalkTree& walkTree, const PeriodicSplit& periodic) {
  MATCHA_ASSERT(tree.multipoles.size() == tree.numCells() && tree.bmax.size() == tree.numCells(),
                "buildWalkTree needs computeMultipoles first");
  walkTree.periodic = periodic.enabled();
  if (walkTree.periodic) {
    MATCHA_ASSERT(tree.numCells() > 0 && tree.halfSide[0] == 0.5 * periodic.boxSize,
                  "a periodic walk tree needs the periodic cube as its root");
    // The root's half side is L / 2 exactly, so L is 2 in scaled units; r_cut is rounded up (the skip errs towards
    // opening).
    walkTree.periodicBox = 2.0f;
    walkTree.cutoff = roundUp(periodic.cutoffRadius / tree.halfSide[0] * kRadiusFactor);
  }
  const std::size_t numCells = tree.numCells();
  walkTree.lengthScale = tree.halfSide[0] > 0.0 ? tree.halfSide[0] : 1.0;
  walkTree.massScale = tree.multipoles.mass[0] > 0.0 ? tree.multipoles.mass[0] : 1.0;
  for (int d = 0; d < 3; ++d) walkTree.origin[d] = tree.centre[d];
  walkTree.slack = static_cast<float>(kSlackSpacings * 0x1p-23);
  walkTree.truncationPower = tree.multipoles.hasQuadrupole ? 3 : 2;

  // Block 0 holds the root; the children of the k-th cell that has children are block k + 1, in cell order.
  // A parallel scan: the count of cells with children before each one.
  std::vector<std::uint32_t>& blockOf = walkTree.blockOfCell;
  blockOf.resize(numCells);
  const std::uint32_t numBlocks =
      1 + tbb::parallel_scan(
              tbb::blocked_range<std::size_t>(0, numCells, 4096), std::uint32_t{0},
              [&](const tbb::blocked_range<std::size_t>& r, std::uint32_t numBefore, bool isFinalScan) {
                for (std::size_t c = r.begin(); c != r.end(); ++c) {
                  if (tree.isLeaf(c)) {
                    if (isFinalScan) blockOf[c] = WalkTree::kLeaf;
                  } else {
                    if (isFinalScan) blockOf[c] = numBefore + 1;
                    ++numBefore;
                  }
                }
                return numBefore;
              },
              std::plus<>());
  // Value-initialises (serially) only the blocks past the last build's count: the loop below writes every block.
  walkTree.blocks.resize(numBlocks);

  const double invLength = 1.0 / walkTree.lengthScale;
  const double invMass = 1.0 / walkTree.massScale;
  const double slack = walkTree.slack;
  const int power = walkTree.truncationPower;
  const auto clearBlock = [](WalkTree::Block& block) {
    for (int k = 0; k < WalkTree::kLanes; ++k) {
      block.x[k] = block.y[k] = block.z[k] = 0.0f;
      block.openingRadius2[k] = std::numeric_limits<float>::infinity();
      block.first[k] = block.last[k] = 0;
      block.next[k] = block.cell[k] = WalkTree::kEmpty;
      block.truncation[k] = 0.0f;
      block.comSpread[k] = 0.0f;
      block.bmax[k] = 0.0f;
    }
    block.laneMask = block.leafMask = 0;
  };
  const auto setLane = [&](WalkTree::Block& block, int k, std::uint32_t cell) {
    block.x[k] = static_cast<float>((tree.multipoles.x[cell] - walkTree.origin[0]) * invLength);
    block.y[k] = static_cast<float>((tree.multipoles.y[cell] - walkTree.origin[1]) * invLength);
    block.z[k] = static_cast<float>((tree.multipoles.z[cell] - walkTree.origin[2]) * invLength);
    const double radius = tree.openingRadius[cell] * invLength + slack;
    block.openingRadius2[k] = roundUp(radius * radius * kRadiusFactor);
    block.first[k] = tree.bodies[cell].first;
    block.last[k] = tree.bodies[cell].last;
    block.next[k] = blockOf[cell];
    block.cell[k] = cell;
    const double spread = tree.comSpread.empty() ? 0.0 : tree.comSpread[cell] * invLength;
    const double b = tree.bmax[cell] * invLength + spread;
    // b^2 or b^3 by products (std::pow is a libm call per cell): each rounds by half a unit, far inside kRadiusFactor.
    const double bPower = power == 3 ? b * b * b : b * b;
    block.truncation[k] = roundUp(tree.multipoles.mass[cell] * invMass * bPower * kRadiusFactor);
    block.comSpread[k] = roundUp(spread);
    block.bmax[k] = roundUp(b * kRadiusFactor);
    block.laneMask |= 1u << k;
    if (tree.isLeaf(cell)) block.leafMask |= 1u << k;
  };
  clearBlock(walkTree.blocks[0]);
  setLane(walkTree.blocks[0], 0, 0);
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, numCells), [&](const tbb::blocked_range<std::size_t>& r) {
    for (std::size_t c = r.begin(); c != r.end(); ++c) {
      if (tree.isLeaf(c)) continue;
      WalkTree::Block& block = walkTree.blocks[blockOf[c]];
      clearBlock(block);
      for (int k = 0; k < tree.numChildren[c]; ++k) setLane(block, k, tree.firstChild[c] + k);
    }
  });
}

namespace {

/// What a group's walk tests every block against, in the walk tree's scaled float units.
struct GroupTest {
  float centre[3], half[3];   ///< the group's box (half extents rounded up)
  std::uint32_t first, last;  ///< its bodies
  bool relative;              ///< the relative test is on
  float tolerance;            ///< its bound, scaled and rounded down
  float slack;
  int power;  ///< p + 2: the power of the distance in the relative test
};

/// The lanes of a block a group accepts, and (periodic walks) those it skips: neither go on to be opened.
struct LaneVerdict {
  unsigned accepted = 0;
  unsigned skipped = 0;
};

/// The lanes of `block` the group accepts: outside the opening sphere, holding none of the group's bodies (empty
/// lanes never pass: their radius is infinite) and, with the relative test, with a truncation term within the
/// tolerance at the distance lowered by its rounding error and the cell's centre-of-mass spread. kPeriodic: each
/// offset at its nearest image (min(|dx|, L - |dx|), exact in float for L = 2), and the lanes whose bodies all lie
/// beyond r_cut (the distance lowered by its rounding error, less b_max, at least the rounded-up cut) skipped, as
/// visitPeriodic does. SSE2 (the x86-64 baseline) on two 4-wide halves.
template <bool kPeriodic>
[[gnu::always_inline]] inline LaneVerdict judgeLanes(const WalkTree::Block& block, const GroupTest& group,
                                                     const WalkTree& walkTree) {
  LaneVerdict verdict;
#if defined(__SSE2__)
  const __m128 signBit = _mm_set1_ps(-0.0f);
  const __m128 zero = _mm_setzero_ps();
  const __m128i first = _mm_set1_epi32(static_cast<int>(group.first));  // bodies < 2^31: signed compares suffice
  const __m128i last = _mm_set1_epi32(static_cast<int>(group.last));
  for (int h = 0; h < WalkTree::kLanes; h += 4) {
    const auto gap = [&](const float* coordinate, int d) {
      __m128 offset = _mm_andnot_ps(signBit, _mm_sub_ps(_mm_load_ps(coordinate + h), _mm_set1_ps(group.centre[d])));
      if constexpr (kPeriodic) offset = _mm_min_ps(offset, _mm_sub_ps(_mm_set1_ps(walkTree.periodicBox), offset));
      return _mm_max_ps(_mm_sub_ps(offset, _mm_set1_ps(group.half[d])), zero);
    };
    const __m128 dx = gap(block.x, 0), dy = gap(block.y, 1), dz = gap(block.z, 2);
    const __m128 distance2 = _mm_add_ps(_mm_add_ps(_mm_mul_ps(dx, dx), _mm_mul_ps(dy, dy)), _mm_mul_ps(dz, dz));
    __m128 accept = _mm_cmpgt_ps(distance2, _mm_load_ps(block.openingRadius2 + h));
    const __m128i holdsGroup =
        _mm_and_si128(_mm_cmplt_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(block.first + h)), last),
                      _mm_cmplt_epi32(first, _mm_load_si128(reinterpret_cast<const __m128i*>(block.last + h))));
    accept = _mm_andnot_ps(_mm_castsi128_ps(holdsGroup), accept);
    // The distance lowered by its rounding error: the relative test and the periodic skip take it.
    const auto lowerDistance = [&] {
      return _mm_sub_ps(_mm_mul_ps(_mm_sqrt_ps(distance2), _mm_set1_ps(1.0f - 0x1p-20f)), _mm_set1_ps(group.slack));
    };
    if constexpr (kPeriodic) {
      // A cell holding one of the group's bodies is opened, never skipped (visitPeriodic); empty lanes have no
      // bodies to skip.
      const __m128 beyond =
          _mm_cmpge_ps(_mm_sub_ps(lowerDistance(), _mm_load_ps(block.bmax + h)), _mm_set1_ps(walkTree.cutoff));
      const unsigned skipped =
          static_cast<unsigned>(_mm_movemask_ps(_mm_andnot_ps(_mm_castsi128_ps(holdsGroup), beyond)));
      verdict.skipped |= (skipped & (block.laneMask >> h) & 0xfu) << h;
      accept = _mm_andnot_ps(beyond, accept);
    }
    if (group.relative && _mm_movemask_ps(accept) != 0) {
      const __m128 distance = _mm_sub_ps(lowerDistance(), _mm_load_ps(block.comSpread + h));
      __m128 bound = _mm_set1_ps(group.tolerance);
      for (int e = 0; e < group.power; ++e) bound = _mm_mul_ps(bound, distance);
      accept = _mm_and_ps(
          accept, _mm_and_ps(_mm_cmpgt_ps(distance, zero), _mm_cmple_ps(_mm_load_ps(block.truncation + h), bound)));
    }
    verdict.accepted |= static_cast<unsigned>(_mm_movemask_ps(accept)) << h;
  }
#else
  for (int k = 0; k < WalkTree::kLanes; ++k) {
    const auto gap = [&](const float* coordinate, int d) {
      float offset = std::fabs(coordinate[k] - group.centre[d]);
      if constexpr (kPeriodic) offset = std::min(offset, walkTree.periodicBox - offset);
      return std::max(offset - group.half[d], 0.0f);
    };
    const float dx = gap(block.x, 0), dy = gap(block.y, 1), dz = gap(block.z, 2);
    const float distance2 = dx * dx + dy * dy + dz * dz;
    const bool holdsGroup = block.first[k] < group.last && group.first < block.last[k];
    const float lowered = std::sqrt(distance2) * (1.0f - 0x1p-20f) - group.slack;
    if (kPeriodic && !holdsGroup && (block.laneMask >> k & 1u) != 0 && lowered - block.bmax[k] >= walkTree.cutoff) {
      verdict.skipped |= 1u << k;
      continue;
    }
    bool accept = distance2 > block.openingRadius2[k] && !holdsGroup;
    if (accept && group.relative) {
      const float distance = lowered - block.comSpread[k];
      float bound = group.tolerance;
      for (int e = 0; e < group.power; ++e) bound *= distance;
      accept = distance > 0.0f && block.truncation[k] <= bound;
    }
    verdict.accepted |= unsigned(accept) << k;
  }
#endif
  return verdict;
}

}  // namespace

void PlanBuilder::build(const WalkTree& walkTree, const Groups& groups, std::uint32_t firstGroup,
                        std::uint32_t lastGroup, InteractionPlan& plan) {
  MATCHA_ASSERT(firstGroup <= lastGroup && lastGroup <= groups.size(), "group batch out of range");
  ids_.resize(lastGroup - firstGroup);
  std::iota(ids_.begin(), ids_.end(), firstGroup);
  build(walkTree, groups, ids_, plan);
}

void PlanBuilder::build(const WalkTree& walkTree, const Groups& groups, std::span<const std::uint32_t> groupIds,
                        InteractionPlan& plan) {
  MATCHA_ASSERT(!walkTree.blocks.empty(), "walk of an empty tree");
  MATCHA_ASSERT(groups.size() == 0 || groups.ranges.back().last < (std::uint32_t{1} << 31),
                "the walk supports at most 2^31 - 1 bodies");
  const auto numGroups = static_cast<std::uint32_t>(groupIds.size());
  const std::uint32_t numFragments =
      (numGroups + PlanBuilder::kGroupsPerFragment - 1) / PlanBuilder::kGroupsPerFragment;
  if (fragments_.size() < numFragments) fragments_.resize(numFragments);
  const double invLength = 1.0 / walkTree.lengthScale;
  const float slack = walkTree.slack;
  const int power = walkTree.truncationPower;
  const bool periodic = walkTree.periodic;
  // The relative test's tolerance in the walk tree's scaled units: M b^p / d^(p+2) <= tol becomes
  // M' b'^p / d'^(p+2) <= tol L^2 / M_total.
  const double toleranceScale = walkTree.lengthScale * walkTree.lengthScale / walkTree.massScale;

  tbb::parallel_for(std::uint32_t{0}, numFragments, [&](std::uint32_t f) {
    Fragment& fragment = fragments_[f];
    // The fragment's groups (neighbours along the curve) walk the tree together: each block is loaded once for all
    // the groups that need it opened, and each of them tests it with its own box. They share the coarse part of the
    // walk and part of the fine, so the blocks loaded per group fall several-fold; the walk is bound by those loads
    // (measured: 4 ns per list entry on one core of a 2-core build machine, 12 on one of the H200 host's, and 4x from
    // 16 of its cores, walking one group at a time).
    const std::uint32_t firstSlot = f * PlanBuilder::kGroupsPerFragment;
    const std::uint32_t numTogether = std::min(numGroups, firstSlot + PlanBuilder::kGroupsPerFragment) - firstSlot;
    fragment.numGroups = numTogether;
    GroupTest tests[PlanBuilder::kGroupsPerFragment];
    for (std::uint32_t g = 0; g < numTogether; ++g) {
      const std::uint32_t group = groupIds[firstSlot + g];
      MATCHA_ASSERT(group < groups.size(), "walk of a group outside the tree");
      GroupTest& test = tests[g];
      test.first = groups.ranges[group].first;
      test.last = groups.ranges[group].last;
      for (int d = 0; d < 3; ++d) {
        test.centre[d] = static_cast<float>((groups.centre[3 * group + d] - walkTree.origin[d]) * invLength);
        test.half[d] = roundUp(groups.halfExtent[3 * group + d] * invLength);
      }
      const double tolerance =
          groups.relativeTolerance.empty() ? std::numeric_limits<double>::infinity() : groups.relativeTolerance[group];
      test.relative = tolerance != std::numeric_limits<double>::infinity();
      test.tolerance = test.relative ? roundDown(tolerance * toleranceScale * (1.0 - 0x1p-18)) : 0.0f;
      test.slack = slack;
      test.power = power + 2;
      fragment.groupCells[g].clear();
      fragment.groupRanges[g].clear();
      fragment.groupBodies[g] = 0;
    }
    // Depth-first over blocks, each with the groups that still need it. Accepted lanes go straight to a group's cell
    // list and opened leaves straight to its body list (merged with the range before when they continue it: sibling
    // leaves do); lanes with children go on the stack, with the groups that opened them. At most 7 siblings wait per
    // level, so the stack holds at most 8 (kMaxLevel + 1) entries.
    struct Entry {
      std::uint32_t block;
      std::uint32_t groups;  ///< bit g: the fragment's group g needs this block
    };
    Entry stack[WalkTree::kLanes * (kMaxLevel + 2)];
    int top = 0;
    stack[top++] = {0, (1u << numTogether) - 1};
    while (top > 0) {
      const Entry entry = stack[--top];
      const WalkTree::Block& block = walkTree.blocks[entry.block];
      if (top > 0) __builtin_prefetch(&walkTree.blocks[stack[top - 1].block]);
      unsigned opened[PlanBuilder::kGroupsPerFragment];
      unsigned openedInternal = 0;
      for (unsigned active = entry.groups; active != 0; active &= active - 1) {
        const int g = __builtin_ctz(active);
        const LaneVerdict verdict =
            periodic ? judgeLanes<true>(block, tests[g], walkTree) : judgeLanes<false>(block, tests[g], walkTree);
        const unsigned accepted = verdict.accepted;
        std::vector<std::uint32_t>& cells = fragment.groupCells[g];
        for (unsigned lanes = accepted; lanes != 0; lanes &= lanes - 1)
          cells.push_back(block.cell[__builtin_ctz(lanes)]);
        opened[g] = block.laneMask & ~accepted & ~verdict.skipped;
        openedInternal |= opened[g] & ~block.leafMask;
        std::vector<BodyRange>& ranges = fragment.groupRanges[g];
        for (unsigned lanes = opened[g] & block.leafMask; lanes != 0; lanes &= lanes - 1) {
          const int k = __builtin_ctz(lanes);
          fragment.groupBodies[g] += block.last[k] - block.first[k];
          if (!ranges.empty() && ranges.back().last == block.first[k]) {
            ranges.back().last = block.last[k];  // sibling leaves continue each other
          } else {
            ranges.push_back({block.first[k], block.last[k]});
          }
        }
      }
      for (unsigned lanes = openedInternal; lanes != 0;) {
        const int k = 31 - __builtin_clz(lanes);  // last lane first, so that the first pops first
        lanes &= ~(1u << k);
        unsigned needing = 0;
        for (unsigned active = entry.groups; active != 0; active &= active - 1) {
          const int g = __builtin_ctz(active);
          needing |= (opened[g] >> k & 1u) << g;
        }
        stack[top++] = {block.next[k], needing};
        __builtin_prefetch(&walkTree.blocks[block.next[k]]);
      }
    }
  });

  // Concatenate the fragments in group order.
  plan.clear();
  plan.groupIds.assign(groupIds.begin(), groupIds.end());
  plan.groups.resize(numGroups);
  plan.groupCentres.resize(3 * std::size_t{numGroups});
  for (std::uint32_t k = 0; k < numGroups; ++k) {
    plan.groups[k] = groups.ranges[groupIds[k]];
    for (int d = 0; d < 3; ++d) plan.groupCentres[3 * k + d] = groups.centre[3 * std::size_t{groupIds[k]} + d];
  }
  plan.cellListOffsets.reserve(numGroups + 1);
  plan.bodyListOffsets.reserve(numGroups + 1);
  plan.listBodyCounts.reserve(numGroups);
  cellStart_.resize(numFragments);
  rangeStart_.resize(numFragments);
  std::size_t numCellEntries = 0, numRangeEntries = 0;
  for (std::uint32_t f = 0; f < numFragments; ++f) {
    cellStart_[f] = numCellEntries;
    rangeStart_[f] = numRangeEntries;
    const Fragment& fragment = fragments_[f];
    for (std::uint32_t g = 0; g < fragment.numGroups; ++g) {
      numCellEntries += fragment.groupCells[g].size();
      numRangeEntries += fragment.groupRanges[g].size();
      plan.cellListOffsets.push_back(static_cast<std::uint32_t>(numCellEntries));
      plan.bodyListOffsets.push_back(static_cast<std::uint32_t>(numRangeEntries));
      plan.listBodyCounts.push_back(fragment.groupBodies[g]);
    }
  }
  MATCHA_ASSERT(numCellEntries < (std::size_t{1} << 32) && numRangeEntries < (std::size_t{1} << 32),
                "interaction-list batch exceeds 32-bit offsets");
  // A quarter to spare when growing: the next build's lists are a little longer or shorter, and a fresh allocation
  // pays a page fault per 4 KiB (expensive in a virtual machine) besides the copy.
  if (numCellEntries > plan.cellList.capacity()) plan.cellList.reserve(numCellEntries + numCellEntries / 4);
  if (numRangeEntries > plan.bodyList.capacity()) plan.bodyList.reserve(numRangeEntries + numRangeEntries / 4);
  plan.cellList.resize(numCellEntries);
  plan.bodyList.resize(numRangeEntries);
  tbb::parallel_for(std::uint32_t{0}, numFragments, [&](std::uint32_t f) {
    const Fragment& fragment = fragments_[f];
    auto cellsTo = plan.cellList.begin() + cellStart_[f];
    auto rangesTo = plan.bodyList.begin() + rangeStart_[f];
    for (std::uint32_t g = 0; g < fragment.numGroups; ++g) {
      cellsTo = std::copy(fragment.groupCells[g].begin(), fragment.groupCells[g].end(), cellsTo);
      rangesTo = std::copy(fragment.groupRanges[g].begin(), fragment.groupRanges[g].end(), rangesTo);
    }
  });
}

}  // namespace matcha::tree
