// SPDX-License-Identifier: MIT
// The tree walk: one walk per group, producing that group's single interaction list (DESIGN.md §1).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "matcha/core/interaction_plan.hpp"
#include "matcha/core/params.hpp"
#include "matcha/tree/groups.hpp"
#include "matcha/tree/octree.hpp"

namespace matcha::tree {

/// Squared distance from point p to the axis-aligned box (centre, halfExtent); 0 inside the box.
double distanceToBox2(const double* point, const double* boxCentre, const double* boxHalfExtent);

/// The opening criterion (MAC), in double: the reference the walk's float test is checked against. A cell may stand
/// in for its bodies in a group's list when the group's box lies outside the sphere of radius r_open
/// (computeMultipoles) around the cell's centre of mass, and the cell holds none of the group's bodies (a cell
/// containing the group is always opened, whatever theta). Where the group has a relative tolerance
/// (setRelativeTolerances), the cell must also pass the relative test: its leading truncated term M b_max^p / d^(p+2)
/// at the box's nearest point (p = 2 monopole, 3 quadrupole) within that tolerance. The test only ever opens more
/// cells than theta alone, so a poor acceleration estimate costs time, never accuracy.
bool acceptCell(const Octree& tree, std::uint32_t cell, const Groups& groups, std::size_t group);

/// The octree laid out for the walk. Each cell that has children owns one block holding its (at most eight)
/// children field by field, so that one group's opening test of all the children of a cell is a handful of 8-wide
/// float operations over four cache lines instead of eight visits to a dozen scattered double arrays. Coordinates are
/// floats relative to the root cube's centre, lengths scaled by the root's half side and masses by the total, and the
/// stored opening radii and truncation terms are rounded so that the float test never accepts a cell the double
/// criterion (acceptCell) would open: a cell accepted in float is accepted in double; the few cells at the boundary
/// are opened instead (they cost a few more interactions, never accuracy).
struct WalkTree {
  static constexpr int kLanes = 8;
  /// next[] of a lane without a cell, and of a leaf (whose bodies the walk lists when it opens it).
  static constexpr std::uint32_t kEmpty = 0xffffffffu;
  static constexpr std::uint32_t kLeaf = 0xfffffffeu;

  struct alignas(64) Block {
    float x[kLanes], y[kLanes], z[kLanes];  ///< centre of mass, relative to `origin`, over `lengthScale`
    /// (r_open + slack)^2 (1 + 2^-20), rounded up; +inf for an empty lane, which is then never accepted
    float openingRadius2[kLanes];
    std::uint32_t first[kLanes], last[kLanes];  ///< the cell's bodies (0, 0 for an empty lane)
    std::uint32_t next[kLanes];                 ///< the block of the cell's children, or kLeaf, or kEmpty
    std::uint32_t cell[kLanes];                 ///< the cell's id
    /// M (b_max + comSpread)^p in scaled units, rounded up (the relative test's truncation term without its
    /// 1 / d^(p+2))
    float truncation[kLanes];
    float comSpread[kLanes];  ///< Octree::comSpread in scaled units, rounded up (0 for exact positions)
    float bmax[kLanes];       ///< b_max + comSpread in scaled units, rounded up (periodic walks skip by it)
    std::uint32_t laneMask;   ///< bit k: lane k holds a cell
    std::uint32_t leafMask;   ///< bit k: lane k holds a leaf
  };

  std::vector<Block> blocks;               ///< blocks[0] holds the root alone, in lane 0
  std::vector<std::uint32_t> blockOfCell;  ///< the block of each cell's children, kLeaf for a leaf
  double origin[3] = {0, 0, 0};
  double lengthScale = 1.0;  ///< the root's half side
  double massScale = 1.0;    ///< the total mass
  /// Absolute error bound of a float coordinate or box edge, in scaled units, plus the rounding of the distance.
  float slack = 0.0f;
  int truncationPower = 3;  ///< p: 3 for quadrupole cells, 2 for monopoles
  /// The periodic short range (buildWalkTree with a PeriodicSplit): the walk takes every cell at the nearest image of
  /// its centre of mass relative to the group's box, and skips it when its bodies all lie beyond r_cut.
  bool periodic = false;
  float periodicBox = 0.0f;  ///< L in scaled units (2: the root is the periodic cube)
  float cutoff = 0.0f;       ///< r_cut in scaled units, rounded up
};

/// Lays `tree` out as a WalkTree (reusing the capacity of `walkTree`). Needs computeMultipoles first. Parallel.
/// With `periodic` enabled the tree's root must be the periodic cube [0, L)^3 (PeriodicTreeSolver builds it so), and
/// the walk becomes the float twin of visitPeriodic (tree/periodic_tree_solver.hpp): a cell it accepts passes
/// visitPeriodic's test, a cell it skips visitPeriodic skips too (a cell at the boundary is opened instead).
void buildWalkTree(const Octree& tree, WalkTree& walkTree, const PeriodicSplit& periodic = PeriodicSplit{});

/// Walks the tree for groups [firstGroup, lastGroup) and writes their lists into `plan` (cleared first): accepted
/// cells go to the cell list, leaves that must be opened to the body list as ranges (disjoint; sibling leaves merged
/// into one range, otherwise in the walk's order). Parallel over groups (TBB); the builder keeps per-task buffers
/// between calls so that repeated batches do not allocate once sizes settle.
class PlanBuilder {
 public:
  /// Groups walked together by one task (they share the walk's loads of the tree; PlanBuilder::build).
  static constexpr std::uint32_t kGroupsPerFragment = 8;

  void build(const WalkTree& walkTree, const Groups& groups, std::uint32_t firstGroup, std::uint32_t lastGroup,
             InteractionPlan& plan);
  /// The same for the groups `groupIds` (any order), which the plan lists in that order; plan.groupIds = groupIds.
  void build(const WalkTree& walkTree, const Groups& groups, std::span<const std::uint32_t> groupIds,
             InteractionPlan& plan);

 private:
  struct Fragment {
    std::uint32_t numGroups = 0;
    // Each group's list, as the fragment's groups walk together; copied into the plan from here.
    std::vector<std::uint32_t> groupCells[kGroupsPerFragment];
    std::vector<BodyRange> groupRanges[kGroupsPerFragment];
    std::uint32_t groupBodies[kGroupsPerFragment];
  };
  std::vector<Fragment> fragments_;
  std::vector<std::size_t> cellStart_, rangeStart_;
  std::vector<std::uint32_t> ids_;
};

}  // namespace matcha::tree
