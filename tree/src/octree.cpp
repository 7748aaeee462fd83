// SPDX-License-Identifier: MIT
#include "matcha/tree/octree.hpp"

#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>

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

namespace {

// Adds the traceless quadrupole of mass m at offset d from the expansion centre, m (3 d d^T - |d|^2 I), and its
// second-moment trace m |d|^2 (q[6]).
void addPointQuadrupole(double m, double dx, double dy, double dz, double (&q)[7]) {
  const double d2 = dx * dx + dy * dy + dz * dz;
  q[6] += m * d2;
  q[0] += m * (3.0 * dx * dx - d2);
  q[1] += m * (3.0 * dy * dy - d2);
  q[2] += m * (3.0 * dz * dz - d2);
  q[3] += m * 3.0 * dx * dy;
  q[4] += m * 3.0 * dx * dz;
  q[5] += m * 3.0 * dy * dz;
}

}  // namespace

void computeMultipoles(const SourceView& sources, double theta, MultipoleOrder order, Octree& tree) {
  MATCHA_ASSERT(theta > 0.0, "theta must be > 0");
  const std::size_t numCells = tree.numCells();
  const bool withQuadrupole = order == MultipoleOrder::quadrupole;
  tree.multipoles.resize(numCells, withQuadrupole);
  tree.openingRadius2.resize(numCells);
  tree.bmax.resize(numCells);
  CellMultipoles& m = tree.multipoles;
  for (int level = tree.numLevels() - 1; level >= 0; --level) {
    tbb::parallel_for(tree.levelOffsets[level], tree.levelOffsets[level + 1], [&](std::uint32_t cell) {
      double mass = 0.0, mx = 0.0, my = 0.0, mz = 0.0;
      const BodyRange bodies = tree.bodies[cell];
      const std::uint32_t firstChild = tree.firstChild[cell];
      const std::uint32_t lastChild = firstChild + tree.numChildren[cell];
      if (tree.isLeaf(cell)) {
        for (std::uint32_t i = bodies.first; i < bodies.last; ++i) {
          mass += sources.mass[i];
          mx += sources.mass[i] * sources.x[i];
          my += sources.mass[i] * sources.y[i];
          mz += sources.mass[i] * sources.z[i];
        }
      } else {
        for (std::uint32_t child = firstChild; child < lastChild; ++child) {
          mass += m.mass[child];
          mx += m.mass[child] * m.x[child];
          my += m.mass[child] * m.y[child];
          mz += m.mass[child] * m.z[child];
        }
      }
      // A cell of massless bodies (test particles) sits at its geometric centre and pulls with nothing.
      const double* centre = &tree.centre[3 * cell];
      m.mass[cell] = mass;
      m.x[cell] = mass > 0.0 ? mx / mass : centre[0];
      m.y[cell] = mass > 0.0 ? my / mass : centre[1];
      m.z[cell] = mass > 0.0 ? mz / mass : centre[2];
      if (withQuadrupole) {
        // About the cell's own centre of mass: a leaf sums its bodies, a parent shifts its children's tensors
        // (parallel-axis theorem: Q = sum_c Q_c + m_c (3 d_c d_c^T - |d_c|^2 I), d_c = com_c - com).
        double q[7] = {0, 0, 0, 0, 0, 0, 0};
        if (tree.isLeaf(cell)) {
          for (std::uint32_t i = bodies.first; i < bodies.last; ++i) {
            addPointQuadrupole(sources.mass[i], sources.x[i] - m.x[cell], sources.y[i] - m.y[cell],
                               sources.z[i] - m.z[cell], q);
          }
        } else {
          for (std::uint32_t child = firstChild; child < lastChild; ++child) {
            addPointQuadrupole(m.mass[child], m.x[child] - m.x[cell], m.y[child] - m.y[cell], m.z[child] - m.z[cell],
                               q);
            q[0] += m.qxx[child];
            q[1] += m.qyy[child];
            q[2] += m.qzz[child];
            q[3] += m.qxy[child];
            q[4] += m.qxz[child];
            q[5] += m.qyz[child];
            q[6] += m.trace[child];
          }
        }
        m.qxx[cell] = q[0];
        m.qyy[cell] = q[1];
        m.qzz[cell] = q[2];
        m.qxy[cell] = q[3];
        m.qxz[cell] = q[4];
        m.qyz[cell] = q[5];
        m.trace[cell] = q[6];
      }
      const double dx = m.x[cell] - centre[0];
      const double dy = m.y[cell] - centre[1];
      const double dz = m.z[cell] - centre[2];
      const double comOffset = std::sqrt(dx * dx + dy * dy + dz * dz);
      const double openingRadius = 2.0 * tree.halfSide[cell] / theta + comOffset;
      tree.openingRadius2[cell] = openingRadius * openingRadius;
      double bmax2 = 0.0, bmax = 0.0;
      if (tree.isLeaf(cell)) {
        for (std::uint32_t i = bodies.first; i < bodies.last; ++i) {
          const double bx = sources.x[i] - m.x[cell], by = sources.y[i] - m.y[cell], bz = sources.z[i] - m.z[cell];
          bmax2 = std::max(bmax2, bx * bx + by * by + bz * bz);
        }
        bmax = std::sqrt(bmax2);
      } else {
        // The corner bound: the cube's centre is comOffset away and its corners sqrt(3) halfSide beyond that.
        bmax = comOffset + std::sqrt(3.0) * tree.halfSide[cell];
        double fromChildren = 0.0;
        for (std::uint32_t child = firstChild; child < lastChild; ++child) {
          const double cx = m.x[child] - m.x[cell], cy = m.y[child] - m.y[cell], cz = m.z[child] - m.z[cell];
          fromChildren = std::max(fromChildren, tree.bmax[child] + std::sqrt(cx * cx + cy * cy + cz * cz));
        }
        bmax = std::min(bmax, fromChildren);
      }
      tree.bmax[cell] = bmax;
    });
  }
}

}  // namespace matcha::tree
