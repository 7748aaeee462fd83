// SPDX-License-Identifier: MIT
// Groups of the modified tree (Barnes 1990): the bodies that share one interaction list.
#pragma once

#include <cstdint>
#include <vector>

#include "matcha/core/interaction_plan.hpp"
#include "matcha/core/particles.hpp"
#include "matcha/tree/octree.hpp"

namespace matcha::tree {

struct Groups {
  std::vector<BodyRange> ranges;   ///< bodies of each group: contiguous, disjoint, in sorted order, covering all bodies
  std::vector<double> centre;      ///< centre of each group's bounding box, 3 per group
  std::vector<double> halfExtent;  ///< half the box's extent along each axis, 3 per group (0 for a single body)

  std::size_t size() const { return ranges.size(); }
};

/// Groups are the largest cells holding at most `ncrit` bodies (Barnes 1990's modified tree). A leaf with more than
/// `ncrit` bodies (nleaf > ncrit, or a deepest-level leaf) is cut into consecutive chunks of at most `ncrit`.
/// Each group's tight bounding box is computed from its bodies; the walk tests the opening criterion against it.
/// Overwrites `groups` (reusing its capacity). Parallel over groups for the boxes.
void makeGroups(const Octree& tree, const SourceView& sources, std::uint32_t ncrit, Groups& groups);

}  // namespace matcha::tree
