// SPDX-License-Identifier: MIT
#include "matcha/tree/walk.hpp"

#include <tbb/parallel_for.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#include "matcha/core/errors.hpp"

namespace matcha::tree {

namespace {

// Groups walked by one task: enough work to amortise the task, small enough to balance clustered inputs.
constexpr std::uint32_t kGroupsPerFragment = 4;

}  // namespace

double distanceToBox2(const double* point, const double* boxCentre, const double* boxHalfExtent) {
  double distance2 = 0.0;
  for (int d = 0; d < 3; ++d) {
    const double outside = std::max(0.0, std::abs(point[d] - boxCentre[d]) - boxHalfExtent[d]);
    distance2 += outside * outside;
  }
  return distance2;
}

bool acceptCell(const Octree& tree, std::uint32_t cell, const Groups& groups, std::size_t group) {
  const BodyRange cellBodies = tree.bodies[cell];
  const BodyRange groupBodies = groups.ranges[group];
  const bool holdsGroupBodies = cellBodies.first < groupBodies.last && groupBodies.first < cellBodies.last;
  if (holdsGroupBodies) return false;
  const double com[3] = {tree.multipoles.x[cell], tree.multipoles.y[cell], tree.multipoles.z[cell]};
  const double d2 = distanceToBox2(com, &groups.centre[3 * group], &groups.halfExtent[3 * group]);
  if (!(d2 > tree.openingRadius2[cell])) return false;
  const double tolerance = groups.relativeTolerance[group];
  if (tolerance == std::numeric_limits<double>::infinity()) return true;
  // M b^p / d^(p+2) <= tolerance, multiplied out: the truncation term of a quadrupole cell falls as (b/d)^3, of a
  // monopole cell as (b/d)^2, times M / d^2.
  const double b = tree.bmax[cell];
  const double b2 = b * b;
  if (tree.multipoles.hasQuadrupole) return tree.multipoles.mass[cell] * b2 * b <= tolerance * d2 * d2 * std::sqrt(d2);
  return tree.multipoles.mass[cell] * b2 <= tolerance * d2 * d2;
}

void PlanBuilder::build(const Octree& tree, const Groups& groups, std::uint32_t firstGroup, std::uint32_t lastGroup,
                        InteractionPlan& plan) {
  MATCHA_ASSERT(firstGroup <= lastGroup && lastGroup <= groups.size(), "group batch out of range");
  const std::uint32_t numGroups = lastGroup - firstGroup;
  const std::uint32_t numFragments = (numGroups + kGroupsPerFragment - 1) / kGroupsPerFragment;
  if (fragments_.size() < numFragments) fragments_.resize(numFragments);

  tbb::parallel_for(std::uint32_t{0}, numFragments, [&](std::uint32_t f) {
    Fragment& fragment = fragments_[f];
    fragment.cells.clear();
    fragment.bodyRanges.clear();
    fragment.numCells.clear();
    fragment.numBodyRanges.clear();
    // Depth-first with children pushed in reverse, so leaves come in body order and ranges arrive sorted. The depth
    // is at most kMaxLevel and each level leaves at most 7 siblings waiting.
    std::array<std::uint32_t, 8 * (kMaxLevel + 2)> stack;
    const std::uint32_t groupEnd = std::min(lastGroup, firstGroup + (f + 1) * kGroupsPerFragment);
    for (std::uint32_t group = firstGroup + f * kGroupsPerFragment; group < groupEnd; ++group) {
      const std::size_t cellsBefore = fragment.cells.size();
      const std::size_t rangesBefore = fragment.bodyRanges.size();
      std::size_t top = 0;
      stack[top++] = 0;
      while (top > 0) {
        const std::uint32_t cell = stack[--top];
        if (acceptCell(tree, cell, groups, group)) {
          fragment.cells.push_back(cell);
        } else if (tree.isLeaf(cell)) {
          const BodyRange range = tree.bodies[cell];
          if (fragment.bodyRanges.size() > rangesBefore && fragment.bodyRanges.back().last == range.first) {
            fragment.bodyRanges.back().last = range.last;
          } else {
            fragment.bodyRanges.push_back(range);
          }
        } else {
          const std::uint32_t firstChild = tree.firstChild[cell];
          for (std::uint32_t child = firstChild + tree.numChildren[cell]; child-- > firstChild;) stack[top++] = child;
        }
      }
      fragment.numCells.push_back(static_cast<std::uint32_t>(fragment.cells.size() - cellsBefore));
      fragment.numBodyRanges.push_back(static_cast<std::uint32_t>(fragment.bodyRanges.size() - rangesBefore));
    }
  });

  // Concatenate the fragments in group order.
  plan.clear();
  plan.groups.assign(groups.ranges.begin() + firstGroup, groups.ranges.begin() + lastGroup);
  plan.groupCentres.assign(groups.centre.begin() + 3 * std::size_t{firstGroup},
                           groups.centre.begin() + 3 * std::size_t{lastGroup});
  plan.cellListOffsets.reserve(numGroups + 1);
  plan.bodyListOffsets.reserve(numGroups + 1);
  std::vector<std::size_t> cellStart(numFragments), rangeStart(numFragments);
  std::size_t numCellEntries = 0, numRangeEntries = 0;
  for (std::uint32_t f = 0; f < numFragments; ++f) {
    cellStart[f] = numCellEntries;
    rangeStart[f] = numRangeEntries;
    for (std::size_t k = 0; k < fragments_[f].numCells.size(); ++k) {
      numCellEntries += fragments_[f].numCells[k];
      numRangeEntries += fragments_[f].numBodyRanges[k];
      plan.cellListOffsets.push_back(static_cast<std::uint32_t>(numCellEntries));
      plan.bodyListOffsets.push_back(static_cast<std::uint32_t>(numRangeEntries));
    }
  }
  MATCHA_ASSERT(numCellEntries < (std::size_t{1} << 32) && numRangeEntries < (std::size_t{1} << 32),
                "interaction-list batch exceeds 32-bit offsets");
  plan.cellList.resize(numCellEntries);
  plan.bodyList.resize(numRangeEntries);
  tbb::parallel_for(std::uint32_t{0}, numFragments, [&](std::uint32_t f) {
    std::copy(fragments_[f].cells.begin(), fragments_[f].cells.end(), plan.cellList.begin() + cellStart[f]);
    std::copy(fragments_[f].bodyRanges.begin(), fragments_[f].bodyRanges.end(), plan.bodyList.begin() + rangeStart[f]);
  });
}

}  // namespace matcha::tree
