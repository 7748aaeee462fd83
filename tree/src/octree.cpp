// SPDX-License-Identifier: MIT
#include "matcha/tree/octree.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>

#include "matcha/core/cell_refit.hpp"
#include "matcha/core/errors.hpp"

namespace matcha::tree {

namespace {

// The octant digit (0..7) of `key` one level below `level`.
std::uint32_t childDigit(std::uint64_t key, int level) {
  const int shift = 3 * (kMaxLevel - level - 1);
  return static_cast<std::uint32_t>((key >> shift) & 7u);
}

void appendCell(Octree& tree) {
  tree.bodies.emplace_back();
  tree.firstChild.push_back(0);
  tree.numChildren.push_back(0);
  tree.level.push_back(0);
  tree.centre.insert(tree.centre.end(), 3, 0.0);
  tree.halfSide.push_back(0.0);
}

}  // namespace

void buildOctree(std::span<const std::uint64_t> sortedKeys, const Cube& cube, std::uint32_t nleaf, Octree& tree) {
  MATCHA_ASSERT(!sortedKeys.empty(), "octree of no bodies");
  MATCHA_ASSERT(nleaf >= 1, "nleaf must be >= 1");
  tree.bodies.clear();
  tree.firstChild.clear();
  tree.numChildren.clear();
  tree.level.clear();
  tree.centre.clear();
  tree.halfSide.clear();
  tree.levelOffsets.assign(1, 0);

  appendCell(tree);
  tree.bodies[0] = {0, static_cast<std::uint32_t>(sortedKeys.size())};
  for (int d = 0; d < 3; ++d) tree.centre[d] = cube.lo[d] + 0.5 * cube.side;
  tree.halfSide[0] = 0.5 * cube.side;
  tree.levelOffsets.push_back(1);

  // Per cell of the current level: where each of its 8 octants starts in the sorted bodies (9 boundaries).
  std::vector<std::uint32_t> octantStart;
  std::vector<std::uint32_t> numNewChildren;
  for (int level = 0; level < kMaxLevel; ++level) {
    const std::uint32_t begin = tree.levelOffsets[level];
    const std::uint32_t end = tree.levelOffsets[level + 1];
    const std::uint32_t numLevelCells = end - begin;
    octantStart.assign(9 * std::size_t{numLevelCells}, 0);
    numNewChildren.assign(numLevelCells, 0);

    tbb::parallel_for(std::uint32_t{0}, numLevelCells, [&](std::uint32_t k) {
      const BodyRange range = tree.bodies[begin + k];
      if (range.size() <= nleaf) return;
      std::uint32_t* starts = &octantStart[9 * std::size_t{k}];
      starts[0] = range.first;
      starts[8] = range.last;
      // Keys are sorted and share the cell's prefix, so the octant digit is monotone over the range.
      for (std::uint32_t digit = 1; digit < 8; ++digit) {
        const auto* it = std::partition_point(sortedKeys.data() + starts[digit - 1], sortedKeys.data() + range.last,
                                              [&](std::uint64_t key) { return childDigit(key, level) < digit; });
        starts[digit] = static_cast<std::uint32_t>(it - sortedKeys.data());
      }
      std::uint32_t count = 0;
      for (int digit = 0; digit < 8; ++digit) count += starts[digit + 1] > starts[digit] ? 1 : 0;
      numNewChildren[k] = count;
    });

    // Exclusive scan: children of the level are appended in the order of their parents.
    std::uint32_t next = end;
    for (std::uint32_t k = 0; k < numLevelCells; ++k) {
      tree.firstChild[begin + k] = next;
      tree.numChildren[begin + k] = static_cast<std::uint8_t>(numNewChildren[k]);
      next += numNewChildren[k];
    }
    if (next == end) break;  // every cell of this level is a leaf
    const std::size_t numCells = next;
    tree.bodies.resize(numCells);
    tree.firstChild.resize(numCells, 0);
    tree.numChildren.resize(numCells, 0);
    tree.level.resize(numCells, static_cast<std::uint8_t>(level + 1));
    tree.centre.resize(3 * numCells, 0.0);
    tree.halfSide.resize(numCells, 0.0);

    tbb::parallel_for(std::uint32_t{0}, numLevelCells, [&](std::uint32_t k) {
      const std::uint32_t parent = begin + k;
      if (numNewChildren[k] == 0) return;
      const std::uint32_t* starts = &octantStart[9 * std::size_t{k}];
      const double childHalf = 0.5 * tree.halfSide[parent];
      std::uint32_t child = tree.firstChild[parent];
      for (std::uint32_t digit = 0; digit < 8; ++digit) {
        if (starts[digit + 1] == starts[digit]) continue;
        tree.bodies[child] = {starts[digit], starts[digit + 1]};
        tree.halfSide[child] = childHalf;
        for (int d = 0; d < 3; ++d) {
          const double sign = (digit >> d) & 1u ? 1.0 : -1.0;  // bit d of the digit is dimension d (x lowest)
          tree.centre[3 * child + d] = tree.centre[3 * parent + d] + sign * childHalf;
        }
        ++child;
      }
    });
    tree.levelOffsets.push_back(static_cast<std::uint32_t>(numCells));
  }
}

void computeMultipoles(const SourceView& sources, double theta, MultipoleOrder order, Octree& tree,
                       const float* radius) {
  MATCHA_ASSERT(theta > 0.0, "theta must be > 0");
  const std::size_t numCells = tree.numCells();
  const bool withQuadrupole = order == MultipoleOrder::quadrupole;
  CellMultipoles& m = tree.multipoles;
  m.resize(numCells, withQuadrupole);
  tree.openingRadius.resize(numCells);
  tree.bmax.resize(numCells);
  tree.halfExtent.resize(numCells);
  tree.comSpread.resize(radius != nullptr ? numCells : 0);

  const RefitBodies bodies{sources.x, sources.y, sources.z, sources.mass, radius};
  RefitCells cells;
  cells.bodies = tree.bodies.data();
  cells.firstChild = tree.firstChild.data();
  cells.numChildren = tree.numChildren.data();
  cells.centre = tree.centre.data();
  cells.halfSide = tree.halfSide.data();
  cells.mass = m.mass.data();
  cells.x = m.x.data();
  cells.y = m.y.data();
  cells.z = m.z.data();
  if (withQuadrupole) {
    double* q[7] = {m.qxx.data(), m.qyy.data(), m.qzz.data(), m.qxy.data(), m.qxz.data(), m.qyz.data(), m.trace.data()};
    for (int k = 0; k < 7; ++k) cells.quadrupole[k] = q[k];
  }
  cells.halfExtent = tree.halfExtent.data();
  cells.bmax = tree.bmax.data();
  cells.openingRadius = tree.openingRadius.data();
  cells.comSpread = radius != nullptr ? tree.comSpread.data() : nullptr;
  for (int level = tree.numLevels() - 1; level >= 0; --level) {
    tbb::parallel_for(tbb::blocked_range<std::uint32_t>(tree.levelOffsets[level], tree.levelOffsets[level + 1], 64),
                      [&](const tbb::blocked_range<std::uint32_t>& r) {
                        for (std::uint32_t cell = r.begin(); cell != r.end(); ++cell) {
                          refitCell(bodies, cells, cell, theta);
                        }
                      });
  }
}

}  // namespace matcha::tree
