// SPDX-License-Identifier: MIT
// The short range of periodic TreePM gravity (issue 15) as a ForceSolver: the octree over the periodic cube, one walk
// per group that takes every cell at its nearest image and skips what lies beyond r_cut, and the engine's truncated
// pairs (GravityParams::periodic). The long range is the particle mesh's (mesh/treepm_solver.hpp adds the two).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory_resource>
#include <span>
#include <string>
#include <vector>

#include "matcha/core/force_solver.hpp"
#include "matcha/core/near_field_engine.hpp"
#include "matcha/core/params.hpp"
#include "matcha/core/tree_topology.hpp"
#include "matcha/tree/groups.hpp"
#include "matcha/tree/octree.hpp"
#include "matcha/tree/space_filling_curve.hpp"
#include "matcha/tree/tree_solver.hpp"
#include "matcha/tree/walk.hpp"

namespace matcha::tree {

/// Whether `cell` may stand in for its bodies in `group`'s short-range list, and whether it matters at all:
enum class PeriodicVisit {
  skip,    ///< every body of the cell lies at least r_cut from the group's box at its nearest image: nothing to add
  accept,  ///< the cell passes the opening criterion (acceptCell's tests) at its nearest image
  open,    ///< neither: its children (or, for a leaf, its bodies) go to the list
};

/// The periodic twin of acceptCell, in double. Distances are to the nearest image of the group's box
/// (opening_criterion.hpp: periodicDistanceToBox2) from the cell's centre of mass. A cell is skipped when that
/// distance minus b_max (all its bodies lie within b_max of the centre of mass, so each of their images is at least
/// that far) is at least r_cut; a cell holding any of the group's bodies is always opened. The relative test takes the
/// power of the cells' own order (M b^3 / d^5 for quadrupole cells: the truncated expansion is good to third order).
PeriodicVisit visitPeriodic(const Octree& tree, std::uint32_t cell, const Groups& groups, std::size_t group,
                            const PeriodicSplit& split);

/// visitPeriodic's test on the numbers alone, for a cell that holds none of the group's bodies: the cell's centre of
/// mass `com` (3), opening radius, mass, b_max and order, the group's box (centre and half extents, 3 each) and
/// relative tolerance (+inf: off). The local essential trees (parallel/) take it for other ranks' groups, on the
/// numbers that travel, so that sender and receiver decide alike.
PeriodicVisit visitPeriodic(const double* com, double openingRadius, double mass, double bmax, bool quadrupole,
                            const double* centre, const double* half, double tolerance, const PeriodicSplit& split);

/// Walks the tree for every group and writes the short-range lists into `plan` (cleared first): accepted cells, and
/// the bodies of opened leaves as ranges (consecutive leaves merged), with nothing beyond r_cut. The tree's root must
/// be the periodic cube (its bodies within [0, L)^3). Parallel over groups (TBB); allocates. The reference walk, in
/// double, one group and one cell at a time: the solver walks the float WalkTree instead (walk.hpp: buildWalkTree
/// with the split), whose lists tests check against this one.
void buildPeriodicPlan(const Octree& tree, const Groups& groups, const PeriodicSplit& split, InteractionPlan& plan);

/// A body's ball in a periodic tree built for K calls (TreeParams::reuse) holds kBallRoom times the path it would
/// take over the K - 1 calls after the build at the mean speed it had over the last tree's calls (its displacement
/// since that build, at the nearest image, over the calls made): room for the speed to grow by half. A body that
/// leaves its ball anyway costs its pulls in double (escapedMaxBodies) or a tree built within that call, not
/// accuracy.
inline constexpr double kBallRoom = 1.5;

/// A periodic tree serves fewer calls than TreeParams::reuse asks where the balls of more than kFastShare of the
/// bodies would exceed kLargestBall of r_cut (one call, without balls, where even two calls would): the balls add to
/// every group's box and every cell's size, and balls of 5% of r_cut make the lists up to (1 + 2 * 0.05)^3 = 1.33
/// times longer at the cut. Bodies that cross several r_s a step (a dt too long for the split, a clump's core) so
/// cost a tree a call, as reuse off does, not lists that grow without bound. The share, not the fastest body: with
/// the fastest body setting K, a 256^3 comoving box's trees served ~3 steps whatever K was asked (H200, 2026-11-29).
inline constexpr double kLargestBall = 0.05;
inline constexpr double kFastShare = 0.01;
/// No ball exceeds kBallCap times kLargestBall of r_cut: a body faster than that leaves its ball early (see below)
/// instead of opening every cell about it for every group.
inline constexpr double kBallCap = 4.0;

/// Bodies that leave their balls keep the tree while they are few. The engine evaluates the lists with each such
/// body moved back onto its ball's surface (along its path from the build), where the lists hold for it; then, in
/// double, each body within r_cut of it loses its pull from there and gains its pull from where it is, and its own
/// force is the truncated pull of every body within r_cut of it (the whole short range: there is nothing beyond).
/// Exact up to the tree's own error of that one source's pull. The tree is built anew instead where more than
/// escapedMaxBodies(n) have left their balls or more than kEscapedBudget of the bodies (at least kEscapedMinBudget)
/// lie near them. A 32^3 comoving box from z = 4 to 3 (CPU engine, reuse 8): every one of its 19 trees had ended at
/// a call where one to four of the 32,768 bodies had left their balls, by 3-85%. The count grows with the bodies (one
/// in kEscapedMaxShare): with a fixed 1,024, the trees of a 256^3 box ended at that count below z = 1.5 (45-95% of
/// them, after 4.7 of the 6-8 calls planned; H200, 2026-11-30), while the pairs near the escaped bodies, what their
/// pulls cost, are bounded by the budget anyway; the count bounds their neighbour queries (one tree walk each).
inline constexpr std::size_t kEscapedMaxBodies = 1024;
inline constexpr std::size_t kEscapedMaxShare = 2048;
inline std::size_t escapedMaxBodies(std::size_t numBodies) {
  return numBodies / kEscapedMaxShare > kEscapedMaxBodies ? numBodies / kEscapedMaxShare : kEscapedMaxBodies;
}
inline constexpr double kEscapedBudget = 0.25;
inline constexpr std::uint64_t kEscapedMinBudget = 65536;
/// An escaped body is moved to this fraction of its ball's radius: within it despite rounding.
inline constexpr double kEscapedClampShrink = 0.999;

/// K of TreeParams::reuse 0 (auto) in a periodic box: kPeriodicAutoReuse on an engine that evaluates on a device
/// (the CUDA engine, where the CPU's tree build is most of a call), 1 (a tree per call) elsewhere (the CPU engine,
/// whose evaluation dwarfs the build: longer lists cost more than the build saves). A fixed K, not measured as the
/// open-boundary solver's search does, so that a periodic run's forces do not depend on timing: the same run gives
/// the same bits, and a restart continues it bit for bit. 8, the open-boundary search's largest K: kLargestBall
/// shortens the trees where the bodies move fast. A 256^3 comoving box from z = 49 to 25 on the H200: 421 ms a step
/// at K = 8 (7 trees in 35 steps, kernels 71.1 ms), 475 at K = 4 (9 trees, 69.7 ms), ~620 at K = 1 (2026-11-29).
inline constexpr std::uint32_t kPeriodicAutoReuse = 8;
inline std::uint32_t periodicAutoReuse(bool engineOnDevice) { return engineOnDevice ? kPeriodicAutoReuse : 1; }

/// The opening settings of a periodic box where the user names none (the command line's auto): theta 0.8, ncrit 512,
/// nleaf 32, alpha 2e-3, against the open-boundary defaults' 0.5, 256, 8 and 1e-3 (TreeParams). The short range ends
/// at r_cut, so a looser opening angle costs less accuracy than with open boundaries, and larger groups and leaves
/// halve the walk, the multipoles and the octree, which build a periodic tree on the host's cores. Measured on the
/// H200 with its 16-core host (2026-11-30, one call each; bench/RESULTS.md): 2^24 bodies in clumps (`matcha ic
/// clumps`), TreePM against Ewald on 4096 bodies, p99 4.8e-4 in a 479 ms call against 3.8e-4 in 738 ms (the issue's
/// bound: 1e-3); the nearly uniform 256^3 box at z = 49, p99 7.0e-4 against 8.6e-4; its comoving steps to z = 30, 301
/// against 369 ms a step, the Layzer-Irvine check unchanged (1.53e-4 against 1.54e-4). Leaves of 32 rather than 16
/// (2026-12-02, one lease): the clumps' call 462 -> 399 ms at p99 4.84e-4 -> 4.92e-4 (walk 97 -> 68, groups 42 -> 31,
/// multipoles 30 -> 21, octree 20 -> 12 ms; the kernels 119 -> 121), the uniform box's p99 7.03e-4 -> 6.98e-4 with
/// its kernels unchanged (88 ms); leaves of 64 gave 379 ms on the clumps but the uniform box's kernels 88 -> 114 ms,
/// which every reused step of a comoving run pays. Theta 0.8 rather than 0.7 at nleaf 32: the clumps' call 399 -> 365
/// ms (kernels 121 -> 105), p99 4.92e-4 -> 5.13e-4 and max 8.7e-4 -> 8.1e-4; the uniform box's p99 (6.98e-4) and
/// kernels the same, and its comoving steps to z = 30 too (337 against 340 ms a step, Layzer-Irvine 1.23e-4 both):
/// there the relative test, not theta, decides. Leaves of 64 again (2026-12-03, calls without potentials): the
/// clumps' call 255 -> 242 ms (five each), but the uniform box's kernels 84 -> 102 ms and its comoving force calls
/// (a tree for several) 536 -> 561 ms; leaves of 64 split down where wider than r_cut kept the uniform box's lists and
/// lost the clumps' gain. 32 stays.
struct OpeningSettings {
  double theta;
  std::uint32_t ncrit;
  std::uint32_t nleaf;
  double alpha;
};
inline constexpr OpeningSettings kPeriodicOpening{0.8, 512, 32, 2e-3};
/// On the CPU engine a periodic box's groups are smaller. There a tree serves one call (periodicAutoReuse) and the
/// evaluation of the lists dwarfs the build, so shorter lists pay for the extra groups and walks. Measured on the
/// 2-core build machine (2026-12-01, `matcha compare --engine cpu --sample 1024`, 2 threads, theta 0.7, nleaf 16):
/// 2^15 bodies of `ic clumps`, 0.79 s a call at ncrit 512 and 0.45 at 128 (p99 3.4e-4 and 4.2e-4); 2^18, 10.6 and
/// 6.1 s (p99 4.5e-4 and 6.4e-4; ncrit 64: 5.9 s, 7.4e-4); a 64^3 2LPT box at z = 49, 11.0 and 6.3 s (p99 1.45e-3
/// at both, the mesh's part).
inline constexpr OpeningSettings kPeriodicOpeningOnCpu{0.7, 128, 16, 2e-3};
/// A periodic box's opening settings for an engine on a device (kPeriodicOpening) or the CPU engine.
inline const OpeningSettings& periodicOpening(bool engineOnDevice) {
  return engineOnDevice ? kPeriodicOpening : kPeriodicOpeningOnCpu;
}
/// TreeParams' defaults with kPeriodicOpening's settings: a periodic run's where the user names none.
inline TreeParams periodicDefaultTreeParams() {
  TreeParams params;
  params.theta = kPeriodicOpening.theta;
  params.ncrit = kPeriodicOpening.ncrit;
  params.nleaf = kPeriodicOpening.nleaf;
  params.alpha = kPeriodicOpening.alpha;
  return params;
}

/// The periodic short-range solver. A call builds a tree (root: the cube [0, L)^3), its groups and their lists, and
/// has the engine evaluate them with gravity.periodic; with TreeParams::reuse K > 1 (0: periodicAutoReuse) the tree
/// and its lists then serve the next calls too, up to K in all, as long as every body stays within its ball
/// (kBallRoom) of where it was at the build. The tree is built over the bodies as balls, so that every
/// list holds what the opening criterion and the r_cut skip demand wherever in its ball each body is: a list
/// reused at a later call is one that call's own walk could have made, with a few more entries (its relative test
/// scaled by the accelerations the build's call brought, as the open-boundary solver's reused lists are, less their
/// allowance for |a| falling). The engine keeps the tree and its lists (NearFieldEngine's resident lists, unchecked
/// in a box), and evaluates them there from the build's own call on (one upload of the lists: with the walk
/// sequential; an overlapped walk's batches are evaluated as they are walked, then handed over); a later call only
/// has it refit its cells to the bodies' positions and evaluate the lists again; it takes each body where its path
/// continues from the build, across a face it crossed since (its position + or - L: the integrator wraps the bodies
/// at each drift, which would otherwise tear the cells that hold them apart); the engine takes every pair and cell at
/// its nearest image anyway. Other bodies or another order (the same ids in the same places are checked), or more
/// bodies outside their balls than escapedMaxBodies and kEscapedBudget allow, make the call build anew; fewer have
/// their pulls added exactly (escapedMaxBodies). TreeParams::pipeline and predictOnDevice are ignored (no background
/// builds: every tree is built within its call; built in the background beside the calls before, trees left a 256^3
/// comoving box's steps no faster on the H200's host, bench/RESULTS.md 2026-11-30); sortOnDevice is not, nor is
/// advanceOnDevice: where the caller says how the bodies moved since the last call (ForceSolver::setBodyDrift: block
/// time steps) an engine that keeps its own copy of the bodies (the CUDA engine) drifts it, receiving the kicked
/// bodies' velocities instead of every position, from the tree's build on (BodyMotion::drifted: the same bits). A
/// call's bodies must lie in [0, L)^3.
///
/// With TreeParams::overlapWalk the groups are walked in batches cut as the open-boundary solver cuts
/// them (walkBatchGroups) and each batch goes to NearFieldEngine::evaluatePlanBatch as soon as it is walked: an engine
/// on a device (evaluatesOnDevice) evaluates it on a second host thread while the cores walk the next batch, and takes
/// the bodies and cells while the first is walked; another engine evaluates each batch after its walk. Each group's
/// list does not depend on the batch around it (the walk visits the tree depth first for each group on its own), and
/// the engines' batches give one plan's sums, so the forces are the sequential call's (overlapWalk false) bit for bit.
class PeriodicTreeSolver final : public ForceSolver {
 public:
  /// `engine` must outlive the solver and support the periodic short range (NearFieldEngine::periodicShortRange).
  /// Throws InputError for invalid parameters, gravity without a periodic split, or an engine without it.
  PeriodicTreeSolver(NearFieldEngine& engine, const TreeParams& treeParams, const GravityParams& gravity);

  /// Overwrites acc and pot with the short-range part at every body; sorts the bodies along the Morton curve (a call
  /// that reuses the tree keeps their order), calling the unsorted-bodies hook while it sorts and the sorted-bodies
  /// hook after, if set. With TreeParams::alpha > 0 the accelerations the bodies bring scale the relative opening test;
  /// bodies without any (all zero) are evaluated twice, first with theta alone (ForceReport phase estimate). With the
  /// walk overlapped, Phase::walk is the batches' walks and upload, kernels and download the engine's evaluations of
  /// them, which ran at the same time; ForceTimings::engineWaitSeconds is what the walk waited for the engine. Throws
  /// InputError, naming the body, for a body outside [0, L)^3 or with a non-finite coordinate.
  ForceReport computeForces(Particles& particles) override;
  /// Called right after the sort of a call that builds, with the sort's order, and first thing in a call that expects
  /// to reuse the tree, with none (again after the sort where the tree does not hold after all:
  /// ForceSolver::setSortedBodiesHook). Always true.
  bool setSortedBodiesHook(SortedBodiesHook hook) override;
  /// Called on a second thread in a call that builds, between its keys and its sort, and waited for before the bodies
  /// are moved (ForceSolver::setUnsortedBodiesHook). Always true.
  bool setUnsortedBodiesHook(UnsortedBodiesHook hook) override;
  /// Called, where the engine adds addends (NearFieldEngine::addsForceAddend), just before a building call hands its
  /// last batch of lists to the engine (the bodies are sorted and the hook has run), in a call in which every body gets
  /// new forces and the engine evaluates the walked lists as they come (not a tree for several calls walked in one
  /// plan); other calls leave the addend to the caller. True.
  bool setForceAddendProvider(ForceAddendProvider provider) override;
  /// Where the engine drifts its own copy of the bodies and checks their balls (TreeParams::advanceOnDevice, the CUDA
  /// engine): a reused tree's call makes the caller's drift while the engine evaluates, else first.
  bool takesPendingDrift() const override {
    return params_.advanceOnDevice && engine_.advancesBodies() && engine_.checksBalls();
  }
  void setSoftening(double eps) override;
  std::string describe() const override;

  const GravityParams& gravity() const { return gravity_; }
  /// The last call's plan of all groups, for tests and benchmarks (with the walk overlapped, its batches' plans joined
  /// on the first request).
  const InteractionPlan& lastPlan() const;
  /// The current tree as built, its cells' multipoles those of its first call (the engine refits its own copy on the
  /// calls after: NearFieldEngine's resident lists), for tests.
  const Octree& octree() const { return tree_; }
  /// The current tree's groups (boxes of the bodies' balls at the build, relative tolerances), for tests.
  const Groups& groups() const { return groups_; }
  /// The current tree's groups and lists, and the calls made on it (TreeStats::reuseSteps, callsOnTree).
  const TreeStats& lastStats() const { return stats_; }

  /// Checkpoints: between a tree's last call and the next (always with reuse off). The state is what the next
  /// tree's balls depend on (the bodies' positions at the last build and the calls made since), so that the restarted
  /// run computes the forces of the run that went on, bit for bit.
  bool atCheckpointBoundary() const override;
  /// The current tree's plan ends at the call just made (the next call builds, its treeEnd TreeEnd::checkpoint).
  bool endTreeForCheckpoint() override;
  void saveState(CheckpointState& state) override;
  void restoreState(const CheckpointState& state, const Particles& particles) override;

 private:
  /// The list lengths of one pass over the groups (TreeStats' list fields), summed over its plans.
  struct ListTotals {
    std::uint64_t bodies = 0, cells = 0, maxBodies = 0, maxCells = 0;
    std::uint64_t batches = 0;
  };
  /// One pass over all groups: walks them (one plan, or batches with TreeParams::overlapWalk) and has the engine
  /// evaluate them into `out`, adding the phases and counts to `report`. Without `evaluatePlan` the one plan (the
  /// sequential walk's) is only walked, into plan_; `sequential` walks one plan whatever TreeParams::overlapWalk says.
  /// `bodiesSent`, where valid: the empty first batch (the bodies and cells) already handed to an engine on a device,
  /// on another thread, whose timings it brings; the pass waits for it before its first lists. `whileLastBatchRuns`,
  /// where given, runs on the calling thread once the last batch is in the engine's hands, before the pass waits for
  /// it (host work that the engine's last kernels hide), or after the evaluation where the walk is not overlapped.
  /// `takeAddend`: the caller's ForceAddendProvider is called right before the last batch goes to the engine, which
  /// adds what it returns (PlanBatch::addend), and report.addendTaken says so.
  ListTotals walkAndEvaluate(const Particles& particles, const ForceView& out, ForceReport& report,
                             bool evaluatePlan = true, bool sequential = false,
                             std::future<EngineTimings>* bodiesSent = nullptr,
                             const std::function<void()>& whileLastBatchRuns = {}, bool takeAddend = false);
  /// Has the engine evaluate plan_ (walked, not evaluated) into `out`.
  void evaluateWalkedPlan(const Particles& particles, const ForceView& out, ForceReport& report);
  /// Has the engine refit its copy of the current tree to `positions` and evaluate the lists it keeps into `out`: of
  /// `groups` alone where given (ids into groups_), of every group otherwise.
  /// `update` says how `positions` relate to the engine's copy of the bodies (BodyMotion::moved, or drifted:
  /// driftUpdate); a drifted launch whose copy the engine finds different from `positions` is launched again with them.
  /// `beside`, where given, runs on the host between the launch and its finish, while a device evaluates.
  /// Of `groups`, only the bodies of `particles` whose steps end here need forces (their bins go with the launch).
  void evaluateResidentLists(const Particles& particles, const SourceView& positions, const ForceView& out,
                             ForceReport& report, std::span<const std::uint32_t> groups, const BodyUpdate& update,
                             const std::function<void()>& beside = {});
  /// Whether the engine may keep and drift its own copy of the bodies this call: it can (advancesBodies), and the
  /// caller said how the bodies moved (ForceSolver::bodyDrift) in this box.
  bool engineMayDrift() const;
  /// The checks of a call that may reuse the tree and, where it holds, its evaluation (reuseAndEvaluate): on the
  /// engine's copy (`onEngine`: driftResident) or the host's pass (treeHolds). False where the call must build anew
  /// (`end` says why) or, with copyDifferedLate_, try the host's pass.
  bool reuseTree(Particles& particles, ForceReport& report, bool onEngine, TreeEnd& end);
  /// A build's launch: BodyMotion::moved, with the velocities for the engine to keep where engineMayDrift.
  BodyUpdate copyForDrift(const Particles& particles) const;
  /// A reused call's launch where the engine's copy is the caller's bodies as the last launch left them (mirrorValid_)
  /// and engineMayDrift: BodyMotion::drifted with the kicked bodies (kicked_) and the escaped ones' clamped places.
  BodyUpdate driftUpdate(const Particles& particles);
  /// The groups that hold a body of bin lowestActiveBin() or above (block time steps), ascending, into activeGroups_;
  /// false where every group does or no bins are set (the call evaluates them all).
  bool findActiveGroups(const Particles& particles);
  /// Builds a tree for this call and the K - 1 after it (`steps`), walks and evaluates it.
  void buildAndEvaluate(Particles& particles, std::uint32_t steps, ForceReport& report);
  /// Whether the current tree may serve this call: calls left, the same bodies in its order, each inside the box.
  /// Fills escaped_ with the bodies outside their balls, and with `storePaths` pathX_ (and Y, Z) as it checks.
  bool treeHolds(const Particles& particles, bool storePaths);
  /// Body i where the engine evaluates it this call (a reused tree's), 3 doubles: where its path continues from the
  /// build (an escaped body's true place; its clamped place once storePaths or prepareEscaped stored the paths).
  void pathOf(const Particles& particles, std::uint32_t i, double* where) const;
  /// Fills pathX_ (and Y, Z) with every body's pathOf, for a call whose treeHolds did not.
  void storePaths(const Particles& particles);
  /// For the bodies of escaped_: whether they are few enough (escapedMaxBodies, kEscapedBudget) to keep the tree;
  /// if so their places in pathX_ become their clamped ones (kEscapedClampShrink), escapedTrue_ and escapedClamped_
  /// hold both, and escapedRanges_ the bodies that may lie within r_cut of either.
  bool prepareEscaped(const Particles& particles);
  /// Bodies that may lie within `radius` of `point` (the nearest image), anywhere in their balls, as ranges in the
  /// tree's order.
  void escapedNeighbours(const double* point, double radius, std::vector<BodyRange>& ranges) const;
  /// The escaped bodies' pulls from their true places instead of their clamped ones on the bodies near them, and
  /// their own forces, in double (escapedMaxBodies' comment), into escapedOwn_ and escapedChanges_: reads only the
  /// bodies' places and bins, so it runs while the engine evaluates the lists (reuseAndEvaluate).
  void computeEscapedPulls(const Particles& particles);
  /// After the engine's evaluation at pathX_: computeEscapedPulls' changes added to the forces of the bodies near the
  /// escaped ones, and the escaped bodies' own forces set, in the same order whatever the thread count.
  void addEscapedPulls(Particles& particles) const;
  /// Hands the tree just built and its lists to the engine, which keeps them for the calls after (resident lists).
  void handTreeToEngine(const Particles& particles);
  /// Has the engine refit its copy of the current tree to the bodies where their paths continue from the build and
  /// evaluate the lists it keeps, computing the escaped bodies' pulls meanwhile (computeEscapedPulls). False where the
  /// engine checked the balls (driftedOnEngine_) but the bodies' ids, compared meanwhile, are not the tree's: the
  /// forces written are not theirs, and the call must build anew.
  bool reuseAndEvaluate(Particles& particles, ForceReport& report);
  /// Whether `particles` are the bodies of the last build (the same ids, in its order).
  bool sameBodiesAsBuilt(const Particles& particles) const;
  /// Each body's ball for a tree built now for up to `steps` calls, in the bodies' current order (the last build's),
  /// and the calls the tree is to serve (fewer than `steps` where kLargestBall and kFastShare say so; 1: no balls); 0
  /// where the bodies' motion is not known (no tree before with reuse, other bodies). `radius` is set only for >= 2.
  std::uint32_t ballRadii(const Particles& particles, std::uint32_t steps, std::vector<float>& radius) const;

  NearFieldEngine& engine_;
  TreeParams params_;
  GravityParams gravity_;
  /// A build's keys, sorted keys and order, in the engine's transfer memory where it has one (page-locked on the CUDA
  /// engine, whose sort then copies them directly: NearFieldEngine::transferMemory).
  std::pmr::vector<std::uint64_t> keys_, sortedKeys_;
  std::pmr::vector<std::uint32_t> order_;
  KeySorter sorter_;
  BodyPermuter permuter_;
  std::vector<double> sortedAccelMagnitudes_;  ///< a build's: the bodies' |a| before it, in its order
  Octree tree_;
  Groups groups_;
  WalkTree walkTree_;
  PlanBuilder planBuilder_;
  /// The whole plan: the sequential walk's, or the batches joined by lastPlan().
  mutable InteractionPlan plan_;
  mutable bool planJoined_ = true;
  /// The overlapped walk's plans, batch k in batches_[k] for k < numBatches_: a deque, so that a batch in the engine's
  /// hands keeps its place while later ones are added.
  std::deque<InteractionPlan> batches_;
  std::size_t numBatches_ = 0;
  InteractionPlan noGroups_;  ///< the empty batch that hands the engine the bodies and cells ahead of the first lists
  SortedBodiesHook sortedHook_;
  UnsortedBodiesHook unsortedHook_;
  ForceAddendProvider addendProvider_;
  TreeStats stats_;

  // Reuse (TreeParams::reuse != 1). The bodies at the last build, in the tree's order: their positions and ids, and
  // the balls the tree was built for. builtCalls_ counts the calls made since that build, the build's own included.
  std::vector<double> builtX_, builtY_, builtZ_;
  std::vector<std::uint64_t> builtIds_;
  std::vector<float> radius_, sortedRadius_;
  std::uint64_t builtCalls_ = 0;
  std::uint32_t treeSteps_ = 1;      ///< K of the current tree
  bool endedForCheckpoint_ = false;  ///< endTreeForCheckpoint cut the current tree's plan short
  bool treeHeld_ = false;            ///< the current tree and its lists may serve a later call (within its balls)
  bool treeHasBalls_ = false;        ///< its bodies are balls (not points: built without the bodies' speeds)
  bool motionKnown_ = false;         ///< builtX_, builtIds_ and builtCalls_ hold the last build's bodies
  TreeTopology topology_;            ///< what handTreeToEngine gives the engine (kept: its arrays are reused)
  /// The bodies where their paths continue from the build (a reused call's positions, across faces crossed since),
  /// where pathsStored_ (not while the engine drifts its own copy: pathOf then computes one where needed).
  std::vector<double> pathX_, pathY_, pathZ_;
  bool pathsStored_ = false;
  /// This call's bodies outside their balls (ascending), their true and clamped places (3 each) and their neighbours.
  std::vector<std::uint32_t> escaped_;
  std::vector<double> escapedTrue_, escapedClamped_;
  std::vector<std::vector<BodyRange>> escapedRanges_;
  /// A pull in double: acceleration and potential.
  struct Pull {
    double ax = 0, ay = 0, az = 0, pot = 0;
  };
  /// computeEscapedPulls' results: each escaped body's own short-range pull (G not applied), and for each escaped body
  /// k the change, G applied, of the pull it gives each body of its ranges (escapedRanges_[k], body by body): range r
  /// of escaped body k from slot escapedRangeSlot_[escapedFirstRange_[k] + r] on (escapedRangeSlot_ ends with the
  /// total, so that each escaped body's last range has its end too).
  std::vector<Pull> escapedOwn_, escapedChanges_;
  std::vector<std::size_t> escapedFirstRange_, escapedRangeSlot_;
  /// The engine keeps a copy of the bodies (positions in the box and velocities) that is the caller's bodies as the
  /// last launch left them: a launch with velocities, or drifted launches since (BodyMotion::drifted may follow).
  bool mirrorValid_ = false;
  /// This call's bodies were drifted on the engine's copy, and its balls checked there (NearFieldEngine::
  /// driftResident): the launch places the escaped bodies and evaluates.
  bool driftedOnEngine_ = false;
  /// The engine's drifted copy differed from the caller's positions drifted beside its evaluation (reuseAndEvaluate).
  bool copyDifferedLate_ = false;
  std::vector<std::uint32_t> kicked_, kickedCounts_;  ///< driftUpdate's kicked bodies, and its count per block
  std::vector<std::uint8_t> groupActive_;             ///< findActiveGroups' flag per group
  std::vector<std::uint32_t> activeGroups_;           ///< findActiveGroups' result
};

/// Throws InputError, naming the first offender by id, unless every body lies in [0, boxSize)^3.
void requireInsideBox(const Particles& particles, double boxSize);

}  // namespace matcha::tree
