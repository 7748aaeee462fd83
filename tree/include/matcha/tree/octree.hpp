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

  // Filled by computeMultipoles (core/cell_refit.hpp: refitCell).
  CellMultipoles multipoles;          ///< mass, centre of mass and (optionally) quadrupole per cell, in double
  std::vector<double> openingRadius;  ///< r_open (core/opening_criterion.hpp), plus twice comSpread
  std::vector<double> bmax;           ///< radius of a sphere around the centre of mass holding all the cell's bodies
  std::vector<double> halfExtent;     ///< half edge of the smallest cube about `centre` holding them (>= halfSide)
  /// Trees built for positions a few steps ahead (bodies given as balls): how far the true centre of mass can lie
  /// from multipoles' (computeMultipoles); empty for a tree of exact positions.
  std::vector<double> comSpread;

  std::size_t numCells() const { return bodies.size(); }
  bool isLeaf(std::uint32_t cell) const { return numChildren[cell] == 0; }
  /// Number of levels (1 for a root-only tree).
  int numLevels() const { return static_cast<int>(levelOffsets.size()) - 1; }
};

/// Builds the octree over `sortedKeys` (ascending Morton keys of the bodies, as KeySorter leaves them) in `cube`.
/// A cell is split while it holds more than `nleaf` bodies, down to kMaxLevel; a leaf at kMaxLevel may hold more
/// (coincident or nearly coincident bodies). Overwrites `tree` (reusing its capacity). Parallel over each level.
void buildOctree(std::span<const std::uint64_t> sortedKeys, const Cube& cube, std::uint32_t nleaf, Octree& tree);

/// Upward pass (core/cell_refit.hpp: refitCell): each cell's mass and centre of mass in double (leaves sum their
/// bodies, other cells their children), with `order` quadrupole also its traceless quadrupole about the centre of mass
/// (CellMultipoles), its half extent h, its b_max (the radius about the centre of mass that holds its bodies), and its
/// opening radius for the walk, r_open = 2 h / theta + |com - geometric centre|: the Barnes-Hut size/distance
/// criterion with the centre-of-mass offset correction (Barnes 1994; GADGET's and Bonsai's r_crit), which keeps a cell
/// whose mass sits in one corner from being accepted by a group just beyond that corner (Salmon & Warren 1994).
/// With `radius` (one per body, in the sorted order) each body is a ball of that radius: every bound then holds for
/// any positions within the balls, and tree.comSpread says how far the centre of mass can move. Parallel over each
/// level.
void computeMultipoles(const SourceView& sources, double theta, MultipoleOrder order, Octree& tree,
                       const float* radius = nullptr);

}  // namespace matcha::tree
