// SPDX-License-Identifier: MIT
#include "matcha/tree/groups.hpp"

#include <tbb/parallel_for.h>

#include <algorithm>

#include "matcha/core/errors.hpp"

namespace matcha::tree {

void makeGroups(const Octree& tree, const SourceView& sources, std::uint32_t ncrit, Groups& groups) {
  MATCHA_ASSERT(ncrit >= 1, "ncrit must be >= 1");
  groups.ranges.clear();
  // Depth-first, children in order, so groups come out in body order. The descent stops at the first cell small
  // enough, so it visits only the cells above the groups: cheap next to the walk.
  std::vector<std::uint32_t> stack{0};
  while (!stack.empty()) {
    const std::uint32_t cell = stack.back();
    stack.pop_back();
    const BodyRange range = tree.bodies[cell];
    if (range.size() <= ncrit) {
      groups.ranges.push_back(range);
    } else if (tree.isLeaf(cell)) {
      for (std::uint32_t first = range.first; first < range.last; first += ncrit) {
        groups.ranges.push_back({first, std::min(range.last, first + ncrit)});
      }
    } else {
      const std::uint32_t firstChild = tree.firstChild[cell];
      for (std::uint32_t child = firstChild + tree.numChildren[cell]; child-- > firstChild;) stack.push_back(child);
    }
  }

  const std::size_t numGroups = groups.ranges.size();
  groups.centre.resize(3 * numGroups);
  groups.halfExtent.resize(3 * numGroups);
  tbb::parallel_for(std::size_t{0}, numGroups, [&](std::size_t g) {
    const BodyRange range = groups.ranges[g];
    const double* coordinates[3] = {sources.x, sources.y, sources.z};
    for (int d = 0; d < 3; ++d) {
      const auto [lo, hi] = std::minmax_element(coordinates[d] + range.first, coordinates[d] + range.last);
      groups.centre[3 * g + d] = 0.5 * (*lo + *hi);
      groups.halfExtent[3 * g + d] = 0.5 * (*hi - *lo);
    }
  });
}

}  // namespace matcha::tree
