// SPDX-License-Identifier: MIT
// The treecode as a ForceSolver (DESIGN.md §1, §4): build the tree, the groups and their lists on the CPU every few
// steps, and between builds let the engine refit the cells to the moved bodies and evaluate the lists it keeps.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "matcha/core/force_solver.hpp"
#include "matcha/core/near_field_engine.hpp"
#include "matcha/core/params.hpp"
#include "matcha/core/tree_topology.hpp"
#include "matcha/tree/groups.hpp"
#include "matcha/tree/octree.hpp"
#include "matcha/tree/space_filling_curve.hpp"
#include "matcha/tree/walk.hpp"

namespace matcha::tree {

/// What the last tree build made and the last force call used, for `matcha compare` and the tests.
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
  std::uint64_t numBatches = 0;  ///< lists handed to the engine in this many parts (memory bound)
  /// The call evaluated the groups twice: first a cheap pass (monopole cells, theta kEstimateTheta) to get the
  /// accelerations the relative opening test (TreeParams::alpha) scales by, because the bodies came without any.
  /// Counts and timings cover both passes; list lengths describe the second.
  bool estimatePass = false;
  std::uint32_t reuseSteps = 1;   ///< calls the current tree and lists were built to serve (TreeParams::reuse)
  std::uint32_t callsOnTree = 0;  ///< calls made on the current tree so far, this one included
  std::uint64_t numRepaired = 0;  ///< groups whose lists failed the opening criterion at this call
  bool predicted = false;         ///< the current tree was built for predicted positions (reuse)
};

/// Theta of the first call's estimate pass, with monopole cells: about a ninth of the final pass's work, with |a|
/// good to a few percent, which is all the relative test needs (groups.hpp: setRelativeTolerances).
inline constexpr double kEstimateTheta = 0.9;

/// The largest K that TreeParams::reuse 0 chooses: beyond it the balls of a Plummer sphere at dt 1/128 make the lists
/// several times longer.
inline constexpr std::uint32_t kMaxAutoReuse = 8;

class TreeSolver final : public ForceSolver {
 public:
  /// `engine` must outlive the solver. Throws InputError on invalid parameters.
  TreeSolver(NearFieldEngine& engine, const TreeParams& treeParams, const GravityParams& gravity);
  ~TreeSolver() override;

  /// Overwrites acc and pot of every body. Bodies and their order are the caller's between calls (positions and
  /// velocities may change; adding, removing or reordering bodies makes the next call start afresh).
  ///
  /// A call either builds a new tree (keys, sort, octree, multipoles, groups, the walk of every group, handing the
  /// topology and the lists to the engine) or reuses the current one, which the engine refits to the positions of
  /// this call. A build sorts the bodies along the Morton curve (permuting every array of `particles`). With reuse
  /// (TreeParams::reuse != 1) a tree is built for the positions the next K calls are predicted to have, from the
  /// positions of the last three calls (exact for the constant-acceleration motion of a leapfrog step): each body
  /// becomes a ball around its predicted path with room for the acceleration to change, so that every accepted cell
  /// passes the opening criterion at each of those calls. The engine checks that at every call; a group whose list
  /// fails (the motion was not as predicted) is walked again at its current positions and evaluated once more
  /// (Phase::repair), and the next call builds afresh.
  ///
  /// With TreeParams::alpha > 0 the accelerations the bodies bring scale the relative opening test; bodies whose
  /// accelerations are all zero are evaluated twice, cheaply and then with the test (TreeStats::estimatePass).
  ForceReport computeForces(Particles& particles) override;
  std::string describe() const override;

  const TreeStats& lastStats() const { return stats_; }
  /// The last build's tree and groups (for trees built for predicted positions: their geometry).
  const Octree& octree() const { return tree_; }
  const Groups& groups() const { return groups_; }
  /// What the last build handed to the engine (NearFieldEngine::setTree).
  const TreeTopology& topology() const { return topology_; }

  /// Builds the tree and groups for `particles` as they are (sorting them) without evaluating forces, and returns the
  /// lists of all groups in one plan, with the relative test scaled by the accelerations `particles` holds. For tests
  /// and tools that inspect plans. The next computeForces builds afresh.
  const InteractionPlan& buildPlanOnly(Particles& particles);

 private:
  struct Motion;

  /// Drops everything kept between calls: the next call builds from scratch.
  void reset();
  /// Whether `particles` are the bodies of the last call, in the same order (count and a sample of ids).
  bool sameBodies(const Particles& particles) const;
  /// Builds a tree and all its lists for calls [call_, call_ + steps - 1] (one call unless the last three calls'
  /// positions are known) and hands them to the engine. Returns true when the lists had to be evaluated in batches
  /// (then this call's forces are done).
  bool build(Particles& particles, std::uint32_t steps, ForceReport& report);
  /// Sorts the bodies by the keys of `positions` (particles' own, or predicted), builds the octree, multipoles and
  /// groups over them (balls of `radius` where given), the walk tree, and fills topology_; times each phase.
  void buildTree(Particles& particles, const SourceView& positions, const float* radius, ForceTimings& timings);
  /// Walks every group and hands the lists to the engine, batch by batch. When they would take more than
  /// TreeParams::maxBatchEntries (cells + j-bodies), evaluates them batch by batch instead (writing `out`), dropping
  /// each, and returns true.
  bool walkAllGroups(const Particles& particles, const ForceView& out, ForceReport& report);
  /// Adds an engine result's counts and phases to `report`.
  static void addResult(const ResidentResult& result, ForceReport& report);
  /// Walks the failed groups at the current positions (exact) and evaluates them again.
  void repair(Particles& particles, std::vector<std::uint32_t> failed, ForceReport& report);
  /// K: calls a tree should serve, from TreeParams::reuse, or from measured costs for reuse 0 (called once per tree).
  std::uint32_t chooseReuseSteps();

  NearFieldEngine& engine_;
  TreeParams params_;
  GravityParams gravity_;

  // Reused across calls so that a step allocates nothing once sizes settle.
  std::vector<std::uint64_t> keys_, sortedKeys_;
  std::vector<std::uint32_t> order_;
  KeySorter sorter_;
  BodyPermuter permuter_;
  std::vector<double> permuteScratch_;
  Octree tree_;
  Groups groups_;
  WalkTree walkTree_;
  TreeTopology topology_;
  PlanBuilder planBuilder_;
  InteractionPlan plan_;
  std::vector<std::uint32_t> streamIds_;
  std::unique_ptr<Motion> motion_;  ///< positions of earlier calls and the predicted ones (reuse)
  Octree exactTree_;                ///< the current tree refitted to exact positions, for repairs
  WalkTree exactWalkTree_;
  Groups exactGroups_;
  std::vector<std::uint64_t> idSample_;  ///< ids at a few positions, to notice reordered bodies

  bool hasTree_ = false;
  std::uint64_t call_ = 0;           ///< calls made, this one included
  std::uint64_t lastValidCall_ = 0;  ///< the last call the current tree's lists were built for
  std::uint64_t groupsWalkedInBuild_ = 0;
  // The search for K of reuse 0 (chooseReuseSteps): the best K so far and its mean wall seconds per call, the K on
  // trial (0: none) and the direction of the search; the calls and seconds of the tree in use, built for windowSteps_
  // calls.
  std::uint32_t bestSteps_ = 2;
  double bestCallSeconds_ = std::numeric_limits<double>::infinity();
  std::uint32_t trialSteps_ = 0;
  int direction_ = 1;
  bool turned_ = false;
  bool searchedOnce_ = false;
  std::uint64_t treesAtBest_ = 0;
  double windowSeconds_ = 0.0;
  std::uint64_t windowCalls_ = 0;
  std::uint32_t windowSteps_ = 0;
  TreeStats stats_;
};

}  // namespace matcha::tree
