// SPDX-License-Identifier: MIT
// The treecode as a ForceSolver (DESIGN.md §1, §4): build the tree, the groups and their lists on the CPU every few
// steps, and between builds let the engine refit the cells to the moved bodies and evaluate the lists it keeps.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "matcha/core/force_error.hpp"
#include "matcha/core/force_solver.hpp"
#include "matcha/core/near_field_engine.hpp"
#include "matcha/core/params.hpp"
#include "matcha/core/stopwatch.hpp"
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
  bool background = false;        ///< the current tree was built on the CPU cores while earlier calls ran
  /// ... from inputs the engine predicted on its device (TreeParams::predictOnDevice), not from the host's passes.
  bool predictedOnDevice = false;
  /// The call's positions were not sent to the engine: it advanced its own copy of the bodies
  /// (TreeParams::advanceOnDevice), launched as the last call ended (launchedAhead) or within this one.
  bool advancedOnDevice = false;
  bool launchedAhead = false;
  /// The engine's copy of the bodies once differed from the caller's (the host rounded its leapfrog differently, or
  /// the bodies were moved otherwise than announced): positions are sent every call since.
  bool advanceMismatch = false;
  /// Bodies outside their balls at this call whose pulls the periodic solver added exactly (its tree held for the
  /// rest).
  std::uint64_t bodiesEscaped = 0;
};

/// Theta of the first call's estimate pass, with monopole cells: about a ninth of the final pass's work, with |a|
/// good to a few percent, which is all the relative test needs (groups.hpp: setRelativeTolerances).
inline constexpr double kEstimateTheta = 0.9;

/// What an engine keeps of a tree (NearFieldEngine::setTree): `tree`'s cells and levels and `groups` (their bodies
/// and relative tolerances) over the bodies in the tree's order, theta and the multipole order of `params`; copied on
/// all cores. topology.order is left to the caller (empty where the caller's bodies were sorted into the tree's order).
void fillTopology(const Octree& tree, const Groups& groups, const TreeParams& params, TreeTopology& topology);

/// The walk hands the engine batches of about kPlanEntries list entries (cells + j-bodies; at most
/// TreeParams::maxBatchEntries), so that streaming lists hold one batch at a time; the first batch has at most
/// kFirstBatchGroups groups, sized for kEntriesPerGroupGuess entries per group, and each next one follows from what
/// the last one took, at most kBatchGrowth times as many groups as the last (the first groups along the curve may
/// have short lists: a halo's; one batch sized from them was 10x its bound of entries). A tree built within a call is
/// evaluated batch by batch as it is walked, the engine working on one batch while the CPU walks the next: there
/// batches are also at most 1/kOverlapBatches of the groups (but at least kMinOverlapGroups, so that a batch fills the
/// GPU and the walk's threads). tree/memory_estimate models the solver's memory with these same numbers
/// (walkBatchGroups).
inline constexpr std::uint64_t kPlanEntries = std::uint64_t{1} << 26;
inline constexpr std::uint64_t kFirstBatchGroups = 2048;
inline constexpr std::uint64_t kEntriesPerGroupGuess = 4096;
inline constexpr std::uint64_t kOverlapBatches = 4;
inline constexpr std::uint64_t kMinOverlapGroups = 2048;
inline constexpr std::uint64_t kBatchGrowth = 4;

/// Groups in the walk's next batch: `previousGroups` is the last batch's (0 for the first), `entriesPerGroup` what it
/// took per group (ignored for the first), `batchEntries` the entries a batch may hold; `overlapped` for a tree built
/// within a call (its batches are evaluated while the next is walked); `growth` the most the batch may grow over the
/// last (at most kBatchGrowth).
inline std::uint64_t walkBatchGroups(std::uint64_t numGroups, std::uint64_t previousGroups, double entriesPerGroup,
                                     std::uint64_t batchEntries, bool overlapped,
                                     double growth = double(kBatchGrowth)) {
  const double mostGroups =
      std::min(double(numGroups), std::clamp(growth, 1.0, double(kBatchGrowth)) * double(previousGroups));
  std::uint64_t groups =
      previousGroups == 0
          ? std::clamp<std::uint64_t>(batchEntries / kEntriesPerGroupGuess, 1, std::min(numGroups, kFirstBatchGroups))
          : static_cast<std::uint64_t>(
                std::clamp(double(batchEntries) / std::max(1.0, entriesPerGroup), 1.0, std::max(1.0, mostGroups)));
  if (overlapped) {
    const std::uint64_t share = std::max(kMinOverlapGroups, (numGroups + kOverlapBatches - 1) / kOverlapBatches);
    groups = std::min(groups, share);
  }
  return std::max<std::uint64_t>(groups, 1);
}

/// The acceleration of a body may change by this fraction of itself over a tree's calls before its ball is too
/// small: room for close encounters, which change it fastest. A body that leaves its ball anyway costs a repair (the
/// engine checks every list entry at every call), not an error. 1.0 before: on the H200 at 2^22 (Plummer, dt 1/128,
/// theta 1.0, ncrit 1024, nleaf 16, reuse 3), 0.25 took the kernels from 50.6 to 48.5 ms a step with no repair in
/// 60 steps; the cold collapse of tests/tree/test_reuse.cpp passes with it.
inline constexpr double kAccelerationChange = 0.25;

/// A predicted body's ball for the calls `first` .. `last` from now holds half the chord of its path plus this many
/// times its second difference |d2| (about |a| dt^2): the parabola's sag, (last - first)^2 / 8, and the prediction's
/// error should the acceleration change by kAccelerationChange of itself, last (last + 1) / 2.
inline constexpr double predictionRoom(double first, double last) {
  return (last - first) * (last - first) / 8.0 + kAccelerationChange * last * (last + 1.0) / 2.0;
}

/// The largest K that TreeParams::reuse 0 chooses: beyond it the balls of a Plummer sphere at dt 1/128 make the lists
/// several times longer.
inline constexpr std::uint32_t kMaxAutoReuse = 8;

/// The K that TreeParams::reuse 0 starts its search from: on the H200's 16-core host, Plummer spheres of 2^20 and 2^22
/// bodies at theta 0.8, dt 1/128 ran their steady-state steps fastest at K = 3 (22 and 94 ms, against 26 and 110 at
/// K = 2 and 44 and 189 at K = 4; bench/RESULTS.md), and a search that starts at the best K spends no trees on worse
/// ones.
inline constexpr std::uint32_t kAutoReuseStart = 3;

/// Reuse off (TreeParams::reuse 1: a tree for every call) with TreeParams::pipeline and advanceOnDevice on an engine
/// that keeps and advances its own copy of the bodies (the CUDA engine): each call's tree is still its own, but it is
/// built during the call before, on the CPU cores while the GPU evaluates that call, for the positions one step ahead
/// that the engine predicts from its copy (balls with room for one step's change of acceleration), as trees for K >= 2
/// calls are. The step then costs the build or the kernels, whichever is longer, instead of their sum: on the
/// H200's host 26 / 76 / 267 ms a step at 2^20 / 2^22 / 2^24 Plummer bodies against 33 / 101 / 346 built within
/// each call (bench/RESULTS.md, 2026-11-29 third session). Elsewhere (the CPU engine, whose evaluation would compete
/// with the build for the cores, or with pipeline off) every tree is built within its call, for the exact positions.
inline bool buildsFreshTreesAhead(const TreeParams& params, bool engineAdvancesBodies) {
  return params.reuse == 1 && params.pipeline && params.advanceOnDevice && engineAdvancesBodies;
}

class TreeSolver final : public ForceSolver {
 public:
  /// `engine` must outlive the solver. Throws InputError on invalid parameters.
  TreeSolver(NearFieldEngine& engine, const TreeParams& treeParams, const GravityParams& gravity);
  ~TreeSolver() override;
  TreeSolver(const TreeSolver&) = delete;
  TreeSolver& operator=(const TreeSolver&) = delete;

  /// Overwrites acc and pot of every body. Bodies and their order are the caller's between calls (positions and
  /// velocities may change; adding, removing or reordering bodies makes the next call start afresh).
  ///
  /// A call either puts a new tree to use (keys, sort, octree, multipoles, groups, the walk of every group, the
  /// topology and the lists handed to the engine) or reuses the current one, which the engine refits to the
  /// positions of this call. With reuse (TreeParams::reuse != 1) a tree is built for the positions the K calls it
  /// will serve are predicted to have, from the positions of the last three calls (exact for the constant-acceleration
  /// motion of a leapfrog step): each body becomes a ball around its predicted path with room for the acceleration to
  /// change, so that every accepted cell passes the opening criterion at each of those calls. The engine checks that
  /// at every call; a group whose list fails (the motion was not as predicted) is walked again at its current
  /// positions and evaluated once more (Phase::repair).
  ///
  /// Trees are built in the background (TreeParams::pipeline): the next tree is started a few calls before the
  /// current one runs out, on the CPU cores, while the engine evaluates those calls, and is put to use when it is
  /// due (waiting for it, if need be: ForceTimings::rebuildWaitSeconds). Such a tree does not reorder `particles`:
  /// the engine takes the bodies in the caller's order (TreeTopology::order). A tree built within a call sorts the
  /// bodies along the Morton curve (permuting every array of `particles`): the first calls, reuse off (unless each
  /// tree is built a call ahead: buildsFreshTreesAhead), and after a repair of many groups.
  ///
  /// With TreeParams::alpha > 0 the accelerations the bodies bring scale the relative opening test; bodies whose
  /// accelerations are all zero are evaluated twice, cheaply and then with the test (TreeStats::estimatePass).
  ForceReport computeForces(Particles& particles) override;
  std::string describe() const override;

  /// Between the last call of a tree and the next: what comes next is a tree not yet in use (built in the
  /// background from inputs saveState keeps, or within the next call from the bodies and their motion).
  bool atCheckpointBoundary() const override;
  /// The calls made, the positions of the last calls (the motion the predictions extrapolate), the next tree's
  /// inputs when it is built in the background (waiting for that build), and reuse auto's search. With a fixed
  /// TreeParams::reuse a restored solver then builds the trees and lists the saving one would have, so the forces
  /// are the same bit for bit; reuse auto chooses K from measured times, which a restarted run measures anew.
  void saveState(CheckpointState& state) override;
  void restoreState(const CheckpointState& state, const Particles& particles) override;
  /// With TreeParams::advanceOnDevice and an engine that advancesBodies(): calls on a tree after its first leave the
  /// positions on the device, which advances its copy of the bodies; and each such call is launched as the call before
  /// it ends, so that the GPU evaluates it while the host kicks and drifts. The launch serves the next call if that
  /// call comes with the same bodies and output arrays; else it is discarded.
  void expectAdvance(const std::optional<BodyAdvance>& advance) override;

  const TreeStats& lastStats() const { return stats_; }
  /// The current tree and groups (for trees built for predicted positions: their geometry), and what the engine was
  /// handed of them (NearFieldEngine::setTree).
  const Octree& octree() const;
  const Groups& groups() const;
  const TreeTopology& topology() const;

  /// Builds the tree and groups for `particles` as they are (sorting them) without evaluating forces, and returns the
  /// lists of all groups in one plan, with the relative test scaled by the accelerations `particles` holds. For tests
  /// and tools that inspect plans. The next computeForces builds afresh.
  const InteractionPlan& buildPlanOnly(Particles& particles);

 private:
  struct Motion;
  struct TreeBuild;

  /// Drops everything kept between calls (waiting for a background build): the next call builds from scratch.
  void reset();
  /// Whether `particles` are the bodies of the last call, in the same order (count and a sample of ids).
  bool sameBodies(const Particles& particles) const;
  /// Builds `build`'s tree over `positions` (the caller's order, with the masses; balls of `radius` where given).
  /// With `sortCaller` its bodies (and the motion history) are permuted into the tree's order and the relative test
  /// is scaled by their accelerations; else the build keeps its own copies in the tree's order, the topology maps
  /// them (TreeTopology::order), and the relative test is scaled by `accelerations` (|a| of each body, the caller's
  /// order). Then the walk tree. Times each phase into build.timings.
  void buildTree(TreeBuild& build, Particles* sortCaller, const SourceView& positions, const float* accelerations,
                 const float* radius);
  /// Walks every group of `build` into its plans, batch by batch (walkBatchGroups). In the background (`particles`
  /// null) the plans are kept for adopt(); returns false when they would take more than TreeParams::maxBatchEntries
  /// (cells + j-bodies) or when the build is cancelled (cancel_). Within a call (`particles` given), `build`'s tree is
  /// handed to the engine first and each batch is evaluated (writing `out`) while the CPU walks the next; the lists
  /// stay in the engine unless they would take more than maxBatchEntries: from there on each batch is evaluated and
  /// dropped (the lists stream), and it returns false. Groups whose lists failed the engine's check go to `failed`.
  bool walkAllGroups(TreeBuild& build, const Particles* particles, const ForceView& out, ForceReport* report,
                     std::vector<std::uint32_t>* failed);
  /// Builds a tree for calls [call_, call_ + steps - 1] within this call, evaluates this call's forces with it as it
  /// walks, and puts it to use (lists that had to stream serve this call alone).
  void buildNow(Particles& particles, std::uint32_t steps, ForceReport& report);
  /// Makes `build` the current tree; a tree built in the background is handed to the engine first (`upload`).
  void adopt(std::unique_ptr<TreeBuild>& build, const Particles& particles, ForceReport& report, bool upload);
  /// At the end of a tree's last call, with the engine holding the bodies and the next tree's build done (or waited
  /// for: TreeParams::adoptAheadWaits): puts it to use now (the upload included), so that the next call's launch can
  /// be made ahead and the GPU works while the host integrates. Returns whether it did; the next call reports the
  /// adoption as its own.
  bool adoptAhead(const Particles& particles);
  /// Starts building the tree after the current one, for the calls after it, on a thread of its own. Its inputs were
  /// predicted on the engine's device by this call's launch (`onDevice`: predictionRequest) or are predicted here, on
  /// the host. Returns the seconds this thread spent on it (the host's prediction and copies of the build's inputs:
  /// Phase::motion).
  double startBackgroundBuild(const Particles& particles, bool onDevice);
  /// K of the tree after the current one: chooseReuseSteps, asked once per tree (a launch made ahead asks for it
  /// before the call that starts the build).
  std::uint32_t nextTreeSteps();
  /// The engine's prediction of the next tree's inputs, for the launch of call `call` (the current tree's first call,
  /// where its successor's build starts): with the motion announced into that call and the one before, and the
  /// accelerations of the call before the last as floats (`rateKnown`: the rate of |a| is known at `call`). Empty
  /// where the host predicts (an engine that does not, TreeParams::predictOnDevice off, unannounced motion, K = 1).
  /// The request lives in predictionRequest_ until the next one.
  const TreePredictionRequest* predictionRequest(std::uint64_t call, const std::optional<BodyAdvance>& motionIn,
                                                 const std::optional<BodyAdvance>& motionBefore, bool rateKnown,
                                                 const std::vector<float>& earlierAx,
                                                 const std::vector<float>& earlierAy,
                                                 const std::vector<float>& earlierAz);
  /// Whether the call after this one starts the next background build (its tree was put to use ahead, here).
  bool buildStartsNextCall() const;
  /// What that thread runs: `build`'s tree over the predicted positions, from its inputs (inMass, inAx, ...), and
  /// the walk of its lists, kept for adopt().
  void buildForLater(TreeBuild& build);
  /// Waits for the background build, if any; rethrows what it threw.
  void joinBackgroundBuild();
  /// Walks the failed groups at the current positions (exact) and evaluates them again.
  void repair(Particles& particles, std::vector<std::uint32_t> failed, ForceReport& report);
  /// K: calls a tree should serve, from TreeParams::reuse, or from measured costs for reuse 0 (called once per tree).
  std::uint32_t chooseReuseSteps();
  /// Feeds a tree's mean wall seconds per call to chooseReuseSteps' search, once the tree is done with.
  void recordTreeCost(const TreeBuild& tree);
  /// Whether the engine may advance its copy of the bodies (expectAdvance, TreeParams::advanceOnDevice).
  bool advancing() const;
  /// buildsFreshTreesAhead for this solver's parameters and engine.
  bool freshTreesAhead() const;
  /// Whether trees are built in the background for later calls: with reuse and TreeParams::pipeline, or
  /// freshTreesAhead.
  bool buildsAhead() const;
  /// A launch's BodyUpdate for moved bodies: with their velocities when the engine is to keep a copy.
  BodyUpdate movedBodies(const Particles& particles);
  /// Drops a launch made ahead for a call that did not come as announced.
  void discardLaunchAhead();
  /// Adds an engine result's counts and phases to `report`.
  static void addResult(const ResidentResult& result, ForceReport& report);

  NearFieldEngine& engine_;
  TreeParams params_;
  GravityParams gravity_;

  std::unique_ptr<TreeBuild> current_;  ///< the tree in use (its lists live in the engine)
  std::unique_ptr<TreeBuild> next_;     ///< the tree being built in the background, or built and waiting
  std::thread background_;
  std::atomic<bool> backgroundDone_{false};  ///< the background build's thread has finished (joining it won't wait)
  std::atomic<bool> cancel_{false};
  std::unique_ptr<Motion> motion_;  ///< positions of earlier calls, and the predicted ones (reuse)
  BodyPermuter permuter_;
  std::vector<double> permuteScratch_;
  Octree exactTree_;  ///< the current tree refitted to exact positions, for repairs
  WalkTree exactWalkTree_;
  Groups exactGroups_;
  PlanBuilder repairBuilder_;
  InteractionPlan repairPlan_;
  std::vector<std::uint32_t> streamIds_;
  std::vector<std::uint64_t> idSample_;  ///< ids at a few positions, to notice reordered bodies

  std::uint64_t call_ = 0;  ///< calls made, this one included
  /// The firstCall of the tree whose successor was planned (startBackgroundBuild), kNoCall when none was.
  static constexpr std::uint64_t kNoCall = ~std::uint64_t{0};
  std::uint64_t nextPlannedFor_ = kNoCall;
  /// nextTreeSteps' K and the firstCall of the tree it was chosen after (kNoCall: none yet).
  std::uint32_t nextSteps_ = 1;
  std::uint64_t nextStepsFor_ = kNoCall;
  /// The call whose launch asked the engine to predict the next tree's inputs (kNoCall: none), and the request.
  std::uint64_t predictionLaunchedFor_ = kNoCall;
  TreePredictionRequest predictionRequest_;
  /// Since the last call ended, and whether the time until the next call is the caller's step (the last call did not
  /// want potentials: no energies measured, no outputs written after it). Reuse auto's costs are whole steps: a call
  /// launched ahead ends before the GPU is done with the next one, and a background build slows the caller's
  /// integration as much as the call, so the calls' own times made K = 4-5 look cheaper than K = 3 (2^22 bodies on
  /// the H200: 77-103 ms a step against 38).
  Stopwatch sinceLastCall_;
  bool lastCallTimed_ = false;
  bool restored_ = false;               ///< restoreState ran and no call since
  std::optional<BodyAdvance> advance_;  ///< expectAdvance's word
  /// The motion from the end of the last call to this one: expectAdvance's word as the last call ended.
  std::optional<BodyAdvance> motionSinceLastCall_;
  bool advanceMismatch_ = false;  ///< the engine's copy once differed: advancing() stays false
  /// The engine holds a copy of the bodies as the last call left them (in the caller's order, accelerations included),
  /// and `heldThisCall_` whether this call's launches gave it one.
  bool engineHoldsBodies_ = false;
  bool heldThisCall_ = false;
  /// The call the engine's launch in flight was made ahead for (kNoCall: none), with the output it writes and whether
  /// it computes potentials.
  std::uint64_t launchedAheadFor_ = kNoCall;
  const double* aheadOutput_ = nullptr;
  bool aheadPotentials_ = false;
  /// The last call of a tree put the next tree to use as it ended (adoptAhead), so that the next call's launch could
  /// be made ahead too: what the adoption would have reported, and the new tree's statistics, which the next call
  /// takes over.
  bool adoptedAhead_ = false;
  ForceReport adoptedReport_;
  TreeStats adoptedStats_;
  // The search for K of reuse 0 (chooseReuseSteps): the best K so far and its mean wall seconds per call, the K on
  // trial (0: none) and the direction of the search.
  std::uint32_t bestSteps_ = kAutoReuseStart;
  std::uint64_t treesAdopted_ = 0;  ///< trees put to use since the solver started (reset() included)
  double bestCallSeconds_ = std::numeric_limits<double>::infinity();
  std::uint32_t trialSteps_ = 0;
  int direction_ = 1;
  bool turned_ = false;
  bool searchedOnce_ = false;
  std::uint64_t treesAtBest_ = 0;
  TreeStats stats_;
};

}  // namespace matcha::tree
