// SPDX-License-Identifier: MIT
// The tree as an engine keeps it between steps (DESIGN.md §1, §4): the tree solver builds the octree, the groups and
// their lists on the CPU every few steps; in between, the engine refits the cells to the moved bodies, evaluates each
// group's resident list and checks that every accepted cell still passes the opening criterion. tree/ fills this,
// engines read it; neither side knows the other.
#pragma once

#include <cstdint>
#include <vector>

#include "matcha/core/interaction_plan.hpp"
#include "matcha/core/params.hpp"

namespace matcha {

struct TreeTopology {
  // Cells over the bodies in the tree's order, stored breadth-first (level by level) with each cell's children
  // contiguous, as tree/octree.hpp builds them.
  std::vector<BodyRange> cellBodies;        ///< the cell's bodies, in tree order
  std::vector<std::uint32_t> firstChild;    ///< id of the first child; children are contiguous
  std::vector<std::uint8_t> numChildren;    ///< 0 for a leaf
  std::vector<std::uint32_t> levelOffsets;  ///< cells of level L are [levelOffsets[L], levelOffsets[L + 1])
  std::vector<double> cellCentre;           ///< geometric centre of the cell's cube, 3 per cell
  std::vector<double> cellHalfSide;         ///< half edge of the cube

  std::vector<BodyRange> groups;  ///< the groups, contiguous runs of bodies in tree order covering them all
  /// Per group: the relative opening test's bound alpha |a|_min / G, fixed when the tree was built; +inf: theta alone.
  std::vector<double> relativeTolerance;
  double theta = 0.5;
  MultipoleOrder multipole = MultipoleOrder::quadrupole;

  /// The tree's order of the caller's bodies: tree position k holds the body at index order[k] of the arrays the
  /// engine is given. Empty when the two orders coincide (the solver sorted the caller's bodies).
  std::vector<std::uint32_t> order;

  std::size_t numCells() const { return cellBodies.size(); }
  std::size_t numGroups() const { return groups.size(); }
  std::size_t numBodies() const { return groups.empty() ? 0 : groups.back().last; }
  int numLevels() const { return static_cast<int>(levelOffsets.size()) - 1; }
};

}  // namespace matcha
