// SPDX-License-Identifier: MIT
#include "matcha/tree/octree.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "matcha/core/cell_refit.hpp"
#include "matcha/core/errors.hpp"

namespace matcha::tree {

namespace {

// The octant digit (0..7) of `key` one level below `level`.
std::uint32_t childDigit(std::uint64_t key, int level) {
  const int shift = 3 * (kMaxLevel - level - 1);
  return static_cast<std::uint32_t>((key >> shift) & 7u);
}

// Blocks of a level's cells: the first pass counts each block's children, a scan over the blocks gives each block
// where its children start, and the second pass places them, so the exclusive scan over the level's cells runs in
// parallel inside the two passes. Enough blocks to balance many cores, few enough that their scan costs nothing.
constexpr std::uint32_t kMaxBlocksPerLevel = 1024;

// Sizes the per-cell vectors for `numCells` cells. Growing value-initialises the new elements serially, so the
// vectors keep their size from the last build (and within this one only ever grow): a rebuild over similar bodies
// then fills next to nothing, and the passes write every element of each level they use.
void resizeCells(Octree& tree, std::size_t numCells) {
  tree.bodies.resize(numCells);
  tree.firstChild.resize(numCells);
  tree.numChildren.resize(numCells);
  tree.level.resize(numCells);
  tree.centre.resize(3 * numCells);
  tree.halfSide.resize(numCells);
}

void growCells(Octree& tree, std::size_t numCells) {
  if (tree.bodies.size() < numCells) resizeCells(tree, numCells);
}

}  // namespace

void buildOctree(std::span<const std::uint64_t> sortedKeys, const Cube& cube, std::uint32_t nleaf, Octree& tree) {
  MATCHA_ASSERT(!sortedKeys.empty(), "octree of no bodies");
  MATCHA_ASSERT(nleaf >= 1, "nleaf must be >= 1");
  tree.levelOffsets.assign(1, 0);

  resizeCells(tree, std::max<std::size_t>(tree.bodies.size(), 1));
  tree.bodies[0] = {0, static_cast<std::uint32_t>(sortedKeys.size())};
  tree.level[0] = 0;
  for (int d = 0; d < 3; ++d) tree.centre[d] = cube.lo[d] + 0.5 * cube.side;
  tree.halfSide[0] = 0.5 * cube.side;
  tree.levelOffsets.push_back(1);

  // Per cell of the current level that splits: where each of its 8 octants starts in the sorted bodies (9
  // boundaries). A block's splitting cells take the block's first slots, in order: most cells are leaves, and the
  // slots left over at the end of each block are never touched, so a level costs page faults (the buffer is fresh
  // each build) only for the cells that split. Never filled: every slot read was written.
  std::unique_ptr<std::uint32_t[]> octantStart;
  std::size_t octantStartSize = 0;
  // Per block of the current level: the number of its cells' children, then (scanned) the id of its first child.
  std::vector<std::uint32_t> blockChildren;
  std::size_t numCells = 1;
  for (int level = 0; level < kMaxLevel; ++level) {
    const std::uint32_t begin = tree.levelOffsets[level];
    const std::uint32_t end = tree.levelOffsets[level + 1];
    const std::uint32_t numLevelCells = end - begin;
    if (9 * std::size_t{numLevelCells} > octantStartSize) {
      octantStartSize = 9 * std::size_t{numLevelCells};
      octantStart = std::make_unique_for_overwrite<std::uint32_t[]>(octantStartSize);
    }
    const std::uint32_t cellsPerBlock = (numLevelCells + kMaxBlocksPerLevel - 1) / kMaxBlocksPerLevel;
    const std::uint32_t numBlocks = (numLevelCells + cellsPerBlock - 1) / cellsPerBlock;
    blockChildren.resize(numBlocks);
    const auto blockEnd = [&](std::uint32_t block) { return std::min(numLevelCells, (block + 1) * cellsPerBlock); };

    tbb::parallel_for(std::uint32_t{0}, numBlocks, [&](std::uint32_t block) {
      std::uint32_t numBlockChildren = 0;
      std::uint32_t* starts = &octantStart[9 * std::size_t{block * cellsPerBlock}];
      for (std::uint32_t k = block * cellsPerBlock; k < blockEnd(block); ++k) {
        const BodyRange range = tree.bodies[begin + k];
        std::uint32_t count = 0;
        if (range.size() > nleaf) {
          starts[0] = range.first;
          starts[8] = range.last;
          // Keys are sorted and share the cell's prefix, so the octant digit is monotone over the range.
          for (std::uint32_t digit = 1; digit < 8; ++digit) {
            const auto* it = std::partition_point(sortedKeys.data() + starts[digit - 1], sortedKeys.data() + range.last,
                                                  [&](std::uint64_t key) { return childDigit(key, level) < digit; });
            starts[digit] = static_cast<std::uint32_t>(it - sortedKeys.data());
          }
          for (int digit = 0; digit < 8; ++digit) count += starts[digit + 1] > starts[digit] ? 1 : 0;
          starts += 9;
        }
        tree.numChildren[begin + k] = static_cast<std::uint8_t>(count);
        numBlockChildren += count;
      }
      blockChildren[block] = numBlockChildren;
    });

    // Children of the level are appended in the order of their parents.
    std::uint32_t next = end;
    for (std::uint32_t& children : blockChildren) {
      const std::uint32_t first = next;
      next += children;
      children = first;
    }
    numCells = next;
    growCells(tree, numCells);

    tbb::parallel_for(std::uint32_t{0}, numBlocks, [&](std::uint32_t block) {
      std::uint32_t child = blockChildren[block];
      const std::uint32_t* starts = &octantStart[9 * std::size_t{block * cellsPerBlock}];
      for (std::uint32_t k = block * cellsPerBlock; k < blockEnd(block); ++k) {
        const std::uint32_t parent = begin + k;
        tree.firstChild[parent] = child;
        if (tree.numChildren[parent] == 0) continue;  // a cell that splits has children: its range is not empty
        const double childHalf = 0.5 * tree.halfSide[parent];
        for (std::uint32_t digit = 0; digit < 8; ++digit) {
          if (starts[digit + 1] == starts[digit]) continue;
          tree.bodies[child] = {starts[digit], starts[digit + 1]};
          // A leaf unless the next level splits it (a cell of the deepest level always is one).
          tree.firstChild[child] = 0;
          tree.numChildren[child] = 0;
          tree.level[child] = static_cast<std::uint8_t>(level + 1);
          tree.halfSide[child] = childHalf;
          for (int d = 0; d < 3; ++d) {
            const double sign = (digit >> d) & 1u ? 1.0 : -1.0;  // bit d of the digit is dimension d (x lowest)
            tree.centre[3 * child + d] = tree.centre[3 * parent + d] + sign * childHalf;
          }
          ++child;
        }
        starts += 9;
      }
    });
    if (next == end) break;  // every cell of this level is a leaf
    tree.levelOffsets.push_back(next);
  }
  resizeCells(tree, numCells);
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
