// SPDX-License-Identifier: MIT
// The treecode as a ForceSolver: sort, build, group, walk in batches, hand each batch's plan to an engine.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "matcha/core/force_solver.hpp"
#include "matcha/core/near_field_engine.hpp"
#include "matcha/core/params.hpp"
#include "matcha/tree/groups.hpp"
#include "matcha/tree/octree.hpp"
#include "matcha/tree/space_filling_curve.hpp"
#include "matcha/tree/walk.hpp"

namespace matcha::tree {

/// What the last force call built, for `matcha compare` and the tests.
struct TreeStats {
  std::uint64_t numBodies = 0;
  std::uint64_t numCells = 0;
  std::uint64_t numLeaves = 0;
  int depth = 0;  ///< deepest level (root = 0)
  std::uint64_t numGroups = 0;
  double meanGroupSize = 0.0;
  std::uint64_t maxGroupSize = 0;
  double meanListBodies = 0.0;  ///< j-bodies per group list, mean over groups
  std::uint64_t maxListBodies = 0;
  double meanListCells = 0.0;  ///< j-cells per group list, mean over groups
  std::uint64_t maxListCells = 0;
  std::uint64_t numBatches = 0;  ///< plans handed to the engine (in the final pass)
  /// The call evaluated the groups twice: first with theta alone, to get the accelerations the relative opening
  /// test (TreeParams::alpha) scales by, because the bodies came without any. Counts and timings cover both passes;
  /// list lengths describe the second.
  bool estimatePass = false;
};

class TreeSolver final : public ForceSolver {
 public:
  /// `engine` must outlive the solver. Throws InputError on invalid parameters.
  TreeSolver(NearFieldEngine& engine, const TreeParams& treeParams, const GravityParams& gravity);

  /// Sorts the bodies along the Morton curve (permuting every array of `particles`), builds the tree and the
  /// groups, and evaluates the groups' lists in batches of at most about TreeParams::maxBatchEntries list entries,
  /// walking the next batch while the engine evaluates the current one (ForceReport's walk and engine times then
  /// overlap; their sum can exceed the total).
  /// Overwrites acc and pot of every body. With TreeParams::alpha > 0 the accelerations the bodies bring (the last
  /// call's, permuted with them) scale the relative opening test; bodies whose accelerations are all zero are
  /// evaluated twice, with theta alone and then with the test (TreeStats::estimatePass).
  ForceReport computeForces(Particles& particles) override;
  std::string describe() const override;

  const TreeStats& lastStats() const { return stats_; }
  const Octree& octree() const { return tree_; }
  const Groups& groups() const { return groups_; }

  /// Builds the tree and groups for `particles` (sorting them) without evaluating forces, and returns the plan of
  /// all groups in one batch, with the relative test scaled by the accelerations `particles` holds. For tests and
  /// tools that inspect plans.
  const InteractionPlan& buildPlanOnly(Particles& particles);

 private:
  /// Sorts the bodies, builds the octree, multipoles, groups and the walk tree; adds each phase's time to `timings`.
  void buildTree(Particles& particles, ForceTimings& timings);
  /// Walks and evaluates every group, batch by batch; adds its counts and walk/engine times to `report`.
  void evaluateGroups(Particles& particles, ForceReport& report);

  NearFieldEngine& engine_;
  TreeParams params_;
  GravityParams gravity_;
  // Reused across calls so a step allocates nothing once sizes settle.
  std::vector<std::uint64_t> keys_, sortedKeys_;
  std::vector<std::uint32_t> order_;
  KeySorter sorter_;
  Octree tree_;
  WalkTree walkTree_;
  Groups groups_;
  PlanBuilder planBuilders_[2];  ///< double-buffered: batch k + 1 is walked while the engine evaluates batch k
  InteractionPlan plans_[2];
  TreeStats stats_;
};

}  // namespace matcha::tree
