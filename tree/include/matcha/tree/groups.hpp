// SPDX-License-Identifier: MIT
// Groups of the modified tree (Barnes 1990): the bodies that share one interaction list.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "matcha/core/force_error.hpp"
#include "matcha/core/interaction_plan.hpp"
#include "matcha/core/particles.hpp"
#include "matcha/tree/octree.hpp"

namespace matcha::tree {

struct Groups {
  std::vector<BodyRange> ranges;   ///< bodies of each group: contiguous, disjoint, in sorted order, covering all bodies
  std::vector<double> centre;      ///< centre of each group's bounding box, 3 per group
  std::vector<double> halfExtent;  ///< half the box's extent along each axis, 3 per group (0 for a single body)
  std::size_t numCandidates = 0;   ///< groups by count and packing alone, before the extent rule (diagnostics)
  std::size_t numExtentSplits = 0;  ///< candidates split by the extent rule (diagnostics; rare in ordinary inputs)
  /// Per group, the relative opening test's bound on a cell's truncation term M b^p / d^(p+2) (acceptCell):
  /// alpha |a|_min / G. +inf where the test is off; makeGroups leaves it off, setRelativeTolerances sets it.
  std::vector<double> relativeTolerance;

  std::size_t size() const { return ranges.size(); }
};

/// Largest ratio of a group's tight-box extent to the group scale just outside the box (the extent rule).
inline constexpr double kMaxExtentOverGroupScale = 4.0;

/// Groups are runs of consecutive bodies in the tree's order that fill the kernel's warp tasks: the largest cells
/// holding at most `ncrit` bodies (Barnes 1990's modified tree), with consecutive small siblings packed together up to
/// `ncrit` bodies (a cell of 200 bodies with eight children of 25 gives groups of 50, 50, 50 and 50, not eight of
/// 25), as long as the group's tight box is not much larger than the groups beside it (the extent rule below). A pack
/// lies inside its parent's cube, so its box stays compact. A leaf with more than `ncrit` bodies (nleaf > ncrit, or a
/// deepest-level leaf) is cut into consecutive chunks of at most `ncrit`, each a candidate like a cell. Each group's
/// tight bounding box is computed from its bodies; the walk tests the opening criterion against it.
/// Why pack: on a Plummer sphere the largest cells under ncrit = 64 hold 19 bodies on average, which leaves the
/// kernel's 32- to 128-row warp tasks half empty and multiplies the walks (one per group); packed, the groups hold
/// about twice as many (bench/RESULTS.md).
///
/// The extent rule. A group's list holds every cell near its box that the opening criterion opens, down to the
/// leaves there: material lying against a box face of extent E opens ~(E / s)^2 cells or leaves of edge s per
/// layer, so what the face adds to the list grows as the square of E over the scale of that material. A cell
/// chosen by count alone is as large as the density of ITS bodies allows, which says nothing about the material
/// beside it: a big, nearly empty cell whose few bodies sit against a dense region (a thin slice cut off a
/// sharp-edged body by a cell boundary, perhaps with a far outlier in the same cell) gets a box pressed flat against
/// material resolved thousands of times finer, and a list that is a large fraction of N. So a candidate becomes a
/// group only if
///     E <= kMaxExtentOverGroupScale * r_face   for each of its six faces,
/// where E is the largest edge of the tight box and r_face the group scale beside the face: the edge of the cube
/// that would hold a group there by count alone (the largest cell around the point with at most ncrit bodies, the
/// leaf there if it holds more, or the empty octant the point falls in), at a probe E / 8 outside the face, beside
/// the body that sets the face. Cells are split while they hold more than ncrit bodies, so dense material within
/// ~E / 8 of the probe shows as a small group scale there. A candidate that fails is split into its child cells
/// (below a leaf: the octants of its cube, which cut the Morton-ordered range into contiguous pieces; a pack: its
/// member cells) and each piece is tested again, down to single bodies or the deepest level.
/// Why 4: beside an ordinary group lie groups of its own size or one level smaller (E / r ~ 1 for half of them; at
/// most 2 for 99% at ncrit 64, at most 4 for 99% at ncrit 256; measured on Plummer spheres, untruncated ones,
/// clump-in-halo, corner-clump and uniform-cube inputs of 2^16 bodies). E / r > 4 needs group cells at least three
/// levels finer than the candidate's own cell, i.e. material ~64 times denser right beside its face: 0 - 0.05% of
/// candidates at ncrit 64, 0 - 0.3% at ncrit 256 (none on uniform cubes, none on Plummer spheres of 2^20 bodies at
/// ncrit 256 - 1024). The cap bounds a face's share of a list at ~4^2 times an ordinary group's; on the sliced cube of
/// the tests the longest list drops from 5.5 to 1.6 times the mean. A sparse group far from dense material (a Plummer
/// outlier with a few halo bodies) passes however large its box: its faces see sparse cells, and its list is short.
/// Cost: six point descents per candidate, from a nearby ancestor down to the group scale (no extra walk).
///
/// Overwrites `groups` (reusing its capacity). Parallel over pieces of the tree (subtrees of at most 1/256 of the
/// bodies, found by a serial descent over the cells above them): each piece's candidates, boxes, rule and splits.
void makeGroups(const Octree& tree, const SourceView& sources, std::uint32_t ncrit, Groups& groups);

/// Sets every group's box to the box of its bodies taken as balls of radius[i] around their positions (a tree built
/// for predicted positions: tree/tree_solver.hpp), so that the walk's opening test holds wherever in its ball each
/// body is. Parallel over groups.
void setGroupBoxesOfBalls(const SourceView& sources, const float* radius, Groups& groups);

/// A body whose force nearly cancels (the centre of a symmetric input, a Plummer sphere's centre) has |a| near 0;
/// the relative test would then open every cell for its group and make its list run to N. So |a|_min is floored at
/// this fraction of the mean |a| of all bodies. At 1/100 the floor costs a group at most (100)^(3/5) ~ 16 times the
/// list it would get at the mean |a| (d ~ (M b^3 / |a|)^(1/5), list ~ 1/theta_eff^3), and leaves alone every body of
/// a Plummer sphere outside r ~ 0.01 (all but a few in 10^5).
inline constexpr double kRelativeFloorOfMeanAccel = 0.01;

/// Sets groups.relativeTolerance to alpha |a|_min / G per group (the relative opening test, TreeParams::alpha),
/// where |a|_min is the smallest |a| over the group's bodies in `previous` (accelerations from an earlier force call,
/// in the current body order), floored as above. Returns false, leaving the test off, when alpha is 0 or every
/// acceleration in `previous` is zero (fresh initial conditions: no estimate yet). Parallel over groups.
bool setRelativeTolerances(const Particles& previous, double alpha, double G, Groups& groups);
/// The same from accelerations alone, in the groups' order.
bool setRelativeTolerances(const AccelerationSet& previous, double alpha, double G, Groups& groups);
/// The same from each body's |a| (in the groups' order), as a background build carries it (rounded down to a float).
bool setRelativeTolerances(std::span<const float> accelerationMagnitudes, double alpha, double G, Groups& groups);
/// The same from each body's |a| in double (BodyPermuter::permuteAllButForces), bit for bit what the accelerations
/// themselves give.
bool setRelativeTolerances(std::span<const double> accelerationMagnitudes, double alpha, double G, Groups& groups);

/// The sum of |a| over `accelerations`, as setRelativeTolerances makes its floor from it: a deterministic reduce, the
/// same bits for any thread count.
double sumOfAccelerationMagnitudes(const AccelerationSet& accelerations);
/// setRelativeTolerances with the floor made from the sum of |a| over `numBodies` bodies, a larger set than these (the
/// bodies of every rank of a distributed run, parallel/), so that every part of the system has the same floor; on
/// one rank, the tolerances of setRelativeTolerances bit for bit. Needs alpha > 0 and a positive sum.
void setRelativeTolerancesWithTotal(const AccelerationSet& accelerations, double sumOfMagnitudes, double numBodies,
                                    double alpha, double G, Groups& groups);
/// The two above from each body's |a| in double (BodyPermuter::permuteAllButForces), bit for bit what the accelerations
/// themselves give.
double sumOfAccelerationMagnitudes(std::span<const double> accelerationMagnitudes);
void setRelativeTolerancesWithTotal(std::span<const double> accelerationMagnitudes, double sumOfMagnitudes,
                                    double numBodies, double alpha, double G, Groups& groups);

}  // namespace matcha::tree
