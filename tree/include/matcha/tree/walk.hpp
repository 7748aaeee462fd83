// SPDX-License-Identifier: MIT
// The tree walk: one walk per group, producing that group's single interaction list (DESIGN.md §1).
#pragma once

#include <cstdint>
#include <vector>

#include "matcha/core/interaction_plan.hpp"
#include "matcha/tree/groups.hpp"
#include "matcha/tree/octree.hpp"

namespace matcha::tree {

/// Squared distance from point p to the axis-aligned box (centre, halfExtent); 0 inside the box.
double distanceToBox2(const double* point, const double* boxCentre, const double* boxHalfExtent);

/// The opening criterion (MAC): a cell may stand in for its bodies in a group's list when the group's box lies
/// outside the sphere of radius r_open (computeMultipoles) around the cell's centre of mass, and the cell holds
/// none of the group's bodies (a cell containing the group is always opened, whatever theta). Where the group has a
/// relative tolerance (setRelativeTolerances), the cell must also pass the relative test: its leading truncated term
/// M b_max^p / d^(p+2) at the box's nearest point (p = 2 monopole, 3 quadrupole) within that tolerance. The test only
/// ever opens more cells than theta alone, so a poor acceleration estimate costs time, never accuracy.
bool acceptCell(const Octree& tree, std::uint32_t cell, const Groups& groups, std::size_t group);

/// Walks the tree for groups [firstGroup, lastGroup) and writes their lists into `plan` (cleared first): accepted
/// cells go to the cell list, leaves that must be opened to the body list as ranges (adjacent ranges merged, in
/// ascending order). Parallel over groups (TBB); the builder keeps per-task buffers between calls so that repeated
/// batches do not allocate.
class PlanBuilder {
 public:
  void build(const Octree& tree, const Groups& groups, std::uint32_t firstGroup, std::uint32_t lastGroup,
             InteractionPlan& plan);

 private:
  struct Fragment {
    std::vector<std::uint32_t> cells;
    std::vector<BodyRange> bodyRanges;
    std::vector<std::uint32_t> numCells;       // per group of the fragment
    std::vector<std::uint32_t> numBodyRanges;  // per group of the fragment
  };
  std::vector<Fragment> fragments_;
};

}  // namespace matcha::tree
