// SPDX-License-Identifier: MIT
// The octree over bodies sorted in Morton order. Cells are stored breadth-first, one level after another, with the
// children of a cell contiguous, so the upward pass is a loop over levels and each level is one parallel loop.
// Every cell owns a contiguous range of the sorted bodies (STYLE.md habit 5).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "matcha/core/interaction_plan.hpp"
#include "matcha/core/params.hpp"
#include "matcha/core/particles.hpp"
#include "matcha/tree/space_filling_curve.hpp"

namespace matcha::tree {

struct Octree {
  // Per-cell arrays, indexed by cell id; cell 0 is the root.
  std::vector<BodyRange> bodies;          ///< the cell's bodies in sorted order
  std::vector<std::uint32_t> firstChild;  ///< id of the first child; children are contiguous
  std::vector<std::uint8_t> numChildren;  ///< 0 for a leaf, else 1..8 (empty octants get no cell)
  std::vector<std::uint8_t> level;        ///< 0 for the root
  std::vector<double> centre;             ///< geometric centre, 3 per cell
  std::vector<double> halfSide;           ///< half the edge length of the cell's cube

  /// Cells of level L are ids [levelOffsets[L], levelOffsets[L+1]).
  std::vector<std::uint32_t> levelOffsets;

  // Filled by computeMultipoles.
  CellMultipoles multipoles;           ///< mass, centre of mass and (optionally) quadrupole per cell, in double
  std::vector<double> openingRadius2;  ///< squared opening radius r_open (see computeMultipoles)
  std::vector<double> bmax;            ///< radius of a sphere around the centre of mass holding all the cell's bodies

  std::size_t numCells() const { return bodies.size(); }
  bool isLeaf(std::uint32_t cell) const { return numChildren[cell] == 0; }
  /// Number of levels (1 for a root-only tree).
  int numLevels() const { return static_cast<int>(levelOffsets.size()) - 1; }
};

/// Builds the octree over `sortedKeys` (ascending Morton keys of the bodies, as KeySorter leaves them) in `cube`.
/// A cell is split while it holds more than `nleaf` bodies, down to kMaxLevel; a leaf at kMaxLevel may hold more
/// (coincident or nearly coincident bodies). Overwrites `tree` (reusing its capacity). Parallel over each level.
void buildOctree(std::span<const std::uint64_t> sortedKeys, const Cube& cube, std::uint32_t nleaf, Octree& tree);

/// Upward pass: each cell's mass and centre of mass in double (leaves sum their bodies, other cells their
/// children), with `order` quadrupole also its traceless quadrupole about the centre of mass (CellMultipoles), and
/// its opening radius for the walk,
///     r_open = l / theta + |com - geometric centre|,     l = the cell's edge length,
/// the Barnes-Hut size/distance criterion with the centre-of-mass offset correction (Barnes 1994; the same as
/// GADGET's and Bonsai's "r_crit"). The offset term keeps a cell whose mass sits in one corner from being accepted
/// by a group just beyond that corner, the case where the plain criterion gives unbounded errors (Salmon & Warren
/// 1994). Also each cell's b_max, for the relative opening test: exact for a leaf, for a parent the smaller of its
/// children's bound (b_max,c + |com_c - com|) and the distance to the cube's farthest corner. Parallel over each
/// level.
void computeMultipoles(const SourceView& sources, double theta, MultipoleOrder order, Octree& tree);

}  // namespace matcha::tree
