// SPDX-License-Identifier: MIT
// The treecode over several MPI ranks as a ForceSolver (issue 19): each call decomposes the bodies along the
// space-filling curve (balanced by the last call's work), builds each rank's tree over its own bodies, exchanges the
// local essential trees, and evaluates each local group's list on the rank's engine. With a periodic split it is the
// short range of periodic TreePM over the ranks (tree/periodic_tree_solver.hpp's, the long range being the mesh's).
#pragma once

#include <mpi.h>
#include <tbb/task_arena.h>

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "matcha/core/force_solver.hpp"
#include "matcha/core/near_field_engine.hpp"
#include "matcha/core/params.hpp"
#include "matcha/parallel/domain_decomposition.hpp"
#include "matcha/parallel/local_essential_tree.hpp"
#include "matcha/tree/groups.hpp"
#include "matcha/tree/octree.hpp"
#include "matcha/tree/space_filling_curve.hpp"
#include "matcha/tree/walk.hpp"

namespace matcha::parallel {

/// What one rank did in the last call, and the balance of all ranks.
struct DistributedStats {
  // This rank's wall-clock seconds by phase (both passes of a call with an estimate pass).
  /// Waiting at the call's start for the other ranks to arrive: the last step's imbalance (the slowest rank's force
  /// call and integration), and on a GPU the ranks share, their kernels queued behind one another.
  double arrivalWaitSeconds = 0.0;
  double decompositionSeconds = 0.0;  ///< bounding cube, splitters and the bodies' migration
  double localBuildSeconds = 0.0;     ///< keys, sort, octree, multipoles, groups, walk tree of the local bodies
  double letBuildSeconds = 0.0;       ///< pruning the local tree for the other ranks
  double communicationSeconds = 0.0;  ///< domain boxes and subtrees between ranks
  /// The local groups' walks: of the local tree (from its start to its end beside the exchange, where it yields the
  /// cores to the pruning: evaluatePass) and of the received subtrees.
  double walkSeconds = 0.0;
  double kernelSeconds = 0.0;  ///< the engine's evaluation
  double callSeconds = 0.0;    ///< the whole call on this rank, the arrival wait included

  /// The rest of the call on this rank's main thread, in spans that follow one another and, with the arrival wait,
  /// the decomposition and the rest of the local build, add up to callSeconds but for what lies between them (a
  /// call's setup and bookkeeping). The phases above overlap where this path does not (the local
  /// walk runs beside the exchange, the engine beside the lists' merge): it says where the call's wall time goes.
  struct MainThreadPath {
    double bodyChecks = 0.0;  ///< every body's numbers checked, with the verdict of all ranks
    double sort = 0.0;        ///< of localBuildSeconds: the keys sorted (on the engine's device where it sorts)
    /// Of localBuildSeconds: the bodies and their weights put in the tree's order (where the build defers the motion's
    /// arrays, deferredMotion_, their permutation falls in listsAndKernels, beside the engine).
    double permute = 0.0;
    double relativeTest = 0.0;     ///< the |a| summed over all ranks for the relative test, the groups' tolerances
    double exchange = 0.0;         ///< LocalEssentialTree::exchange: pruning and communication, the local walk beside
    double localWalkWait = 0.0;    ///< waiting for the local walk after the exchange
    double listsAndKernels = 0.0;  ///< the received subtrees' walks merged into lists, and the engine's evaluation
    double outputs = 0.0;          ///< the forces copied from the engine's outputs into the bodies' arrays
    double balance = 0.0;          ///< the work's sums over the ranks (the wait for the slowest rank's evaluation)
  };
  MainThreadPath path;

  std::uint64_t numLocalBodies = 0;
  std::uint64_t numGroups = 0;
  /// Interactions this rank evaluated in the call's final pass (body-body + body-cell), and the ranks' largest and
  /// mean.
  double work = 0.0, maxWork = 0.0, meanWork = 0.0;
  bool estimatePass = false;  ///< the call evaluated twice (no accelerations came for the relative test)
  /// The call kept the last call's split and local tree, refitted (block time steps: DistributedTreeSolver).
  bool keptTree = false;
  /// The call kept the last call's lists too (reuse K > 1 with a known advance: DistributedTreeSolver): no walk or
  /// pruning, the exchange only the sent cells' multipoles and bodies' positions (keptTree is set too).
  bool keptLists = false;
  /// Bodies of all ranks found outside their balls at a call that could otherwise have kept the lists (it built).
  std::uint64_t bodiesOutsideBalls = 0;
  /// The final pass's batches of lists (TreeParams::overlapWalk; 0: one plan, evaluated whole).
  std::uint64_t listBatches = 0;
  DecompositionStats decomposition;  ///< the weights' balance the splitters were chosen for (the last call's work)
  LetStats let;                      ///< the final pass's exchange

  /// Interactions per body of the evaluated groups, over all ranks (the kept tree's measure of its growth).
  double workPerEvaluatedBody = 0.0;
  /// max / mean of the ranks' work in the final pass (1: perfect balance).
  double imbalance() const { return meanWork > 0.0 ? maxWork / meanWork : 1.0; }
};

/// One rank's phases summed over the calls of a run (DistributedTreeSolver::totals), for the per-rank table of `matcha
/// run --timings` on several ranks.
struct DistributedTotals {
  std::uint64_t calls = 0;
  double arrivalWaitSeconds = 0.0, decompositionSeconds = 0.0, localBuildSeconds = 0.0, letBuildSeconds = 0.0,
         communicationSeconds = 0.0, walkSeconds = 0.0, kernelSeconds = 0.0, callSeconds = 0.0;
  double work = 0.0;             ///< interactions this rank evaluated in the calls' final passes
  std::uint64_t lastBodies = 0;  ///< the bodies this rank held after the last call
  /// The calls after the first kWarmUpCalls, and their whole time and decomposition: the steady state. The first
  /// calls move the bodies from their scattered shares into the key ranges (every array migrates) and grow every
  /// buffer; later ones migrate only the bodies that crossed a boundary.
  static constexpr std::uint64_t kWarmUpCalls = 2;
  std::uint64_t steadyCalls = 0;
  double steadyCallSeconds = 0.0, steadyDecompositionSeconds = 0.0;
  /// The steady calls' other phases (DistributedStats' of the same names): where a long run's call goes.
  double steadyArrivalWaitSeconds = 0.0, steadyLocalBuildSeconds = 0.0, steadyLetBuildSeconds = 0.0,
         steadyCommunicationSeconds = 0.0, steadyWalkSeconds = 0.0, steadyKernelSeconds = 0.0;
  double steadyLetAssemblySeconds = 0.0;  ///< the final passes' LetStats::assemblySeconds
  /// The steady decomposition's stages (DecompositionStats): checks, the cube and keys, the splitter search, the moves.
  double steadyCheckSeconds = 0.0, steadyKeySeconds = 0.0, steadySplitSeconds = 0.0, steadyMoveSeconds = 0.0;
  double steadyMoveExchangeSeconds = 0.0;  ///< of the moves: their two MPI exchanges
  /// The bodies this rank sent to others in the steady calls: those that crossed a boundary by their drift or by the
  /// splitters' move to the new weights.
  std::uint64_t steadyBodiesSent = 0;
  /// The steady calls' main-thread path (DistributedStats::MainThreadPath), summed.
  DistributedStats::MainThreadPath steadyPath;
  /// Calls that kept the last call's split and tree (block time steps), all calls counted: their decomposition is 0.
  std::uint64_t keptTrees = 0;
  /// Of those, the calls that kept the lists too (DistributedStats::keptLists), and their whole time: against the
  /// other calls', what a kept call saves and what the balls' longer lists cost the builds.
  std::uint64_t keptLists = 0;
  double keptListSeconds = 0.0;

  void add(const DistributedStats& call);
};

class DistributedTreeSolver final : public ForceSolver {
 public:
  /// `engine` (this rank's: the CPU engine, or later the rank's GPU) must outlive the solver; `comm` is the
  /// communicator whose ranks share the bodies (every rank must construct its solver with the same parameters). Throws
  /// InputError on invalid parameters.
  ///
  /// Block time steps (ForceSolver::setLowestActiveBin): a call that evaluates some groups only, after another such
  /// call on the same bodies, keeps the last call's split and local tree (no decomposition, sort or octree build: at
  /// 1M bodies a rank these were ~15 ms of a ~30 ms call on the host) and refits it to the bodies' positions: the
  /// multipoles, cell sizes (tree::computeMultipoles takes every cell's extent from its bodies, so the opening
  /// criterion's guarantees hold wherever they moved) and the groups (tree::makeGroups) anew. In a periodic box the
  /// kept tree takes each body at the image nearest its leaf (unwrapIntoLeaves), so that no cell holds bodies from both
  /// sides of a face a body was wrapped across since the build. The bodies stay on their ranks until the next call that
  /// builds: the local essential trees do not need the domains disjoint. The first such call after a call of every
  /// group builds, so that a checkpoint (written after a call of every group, atCheckpointBoundary) restarts as the run
  /// went on, bit for bit. The refit cells grow as their bodies leave their cubes, and the lists with them: a tree is
  /// kept while the interactions per evaluated body stay within 1.5x the building call's, at most 16 calls in a row.
  /// TreeParams::reuse 1 builds at every call. With reuse K > 1 a tree serves at most K calls, and calls of every
  /// group keep it too: without the leapfrog's word on the motion (below) with the same refit, the walks and exchanges
  /// made anew, so the forces keep a new tree's guarantees; a checkpoint then waits for a call that builds, or makes
  /// the next call build (endTreeForCheckpoint). Reuse 0 (auto) keeps trees over block time steps only: over whole
  /// steps the kept lists' balls made a step slower on the one measured GPU machine (bench/RESULTS.md).
  ///
  /// Kept lists: with reuse K > 1 in open space, every call evaluating every group, and the integrator's word on the
  /// motion (expectAdvance: a leapfrog of fixed steps), a call that builds makes its tree, groups and lists for the K
  /// calls it will serve, as TreeSolver makes its trees for predicted positions: each body becomes a ball about its
  /// predicted path over the next K - 1 steps that holds that path (setBalls: from v and the kicks' a, with room for
  /// the acceleration to change), the multipoles bound every position within the balls (Octree::comSpread), the
  /// groups' boxes hold their bodies' balls, and the other ranks prune their trees with those bounds (exportSubtree),
  /// so that every list passes the opening criterion wherever in its ball each body is. The next K - 1 calls, while
  /// every body on every rank stays within its ball, keep the split, the tree and the lists: they compute the local
  /// multipoles for the current positions, send the cells and bodies the build's exchange sent with their new
  /// multipoles and positions (LocalEssentialTree::refresh), and evaluate the kept lists: no decomposition, sort,
  /// walk or pruning. A body outside its ball makes that call build, on every rank.
  ///
  /// With gravity.periodic enabled the solver is PeriodicTreeSolver over the ranks: the keys are taken in the box [0,
  /// L)^3, so that every rank's tree has it as its root; each rank walks its own tree with the periodic float walk
  /// (tree::buildWalkTree with the split) and prunes it for the other ranks' groups with tree::visitPeriodic
  /// (exportSubtree: nothing beyond r_cut is sent), and the engine evaluates the truncated pairs at their nearest
  /// images. The engine must have the periodic short range (NearFieldEngine::periodicShortRange; InputError
  /// otherwise).
  DistributedTreeSolver(NearFieldEngine& engine, const TreeParams& treeParams, const GravityParams& gravity,
                        MPI_Comm comm);

  /// Collective: every rank of the communicator calls it with its bodies (a rank may bring none). Migrates bodies: on
  /// return `particles` holds the bodies of this rank's key range (Domain), in the tree's order, with acc and pot
  /// overwritten (pot NaN when potentials are not wanted). The split balances each body's interactions in the last
  /// call when the bodies are those it returned (same number on this rank; positions and velocities may have changed),
  /// else counts bodies. With TreeParams::alpha > 0, bodies that bring no accelerations on any rank are evaluated
  /// twice, cheaply (monopoles at tree::kEstimateTheta) and then with the relative test, as TreeSolver does.
  ///
  /// The report's counts and timings are this rank's. Throws InputError on every rank when any rank's bodies are
  /// invalid (Particles::validate), in a periodic box when a body lies outside [0, L)^3 (tree::requireInsideBox), or
  /// when there are fewer bodies than ranks. In a periodic box the estimate pass is PeriodicTreeSolver's (theta
  /// alone, the cells' own order).
  ForceReport computeForces(Particles& particles) override;
  /// From the next call on (every call makes its lists and multipoles anew, so nothing made with the old one remains):
  /// a comoving run's softening once it is fixed in physical units. Every rank must set the same.
  void setSoftening(double eps) override { gravity_ = gravity_.withSoftening(eps); }
  std::string describe() const override;
  /// Whether the next call builds its tree whatever it is asked (it keeps the last call's tree only after a call of
  /// some groups: block time steps). Every rank answers the same.
  bool atCheckpointBoundary() const override { return !mayKeepTree_; }
  /// Makes the next call build its tree (and split the bodies anew), as a restarted run's first call will.
  bool endTreeForCheckpoint() override {
    mayKeepTree_ = false;
    listsKept_ = false;
    return true;
  }
  /// The leapfrog's word on the motion between calls (kept lists' balls: see the constructor). Every rank gets the
  /// same word.
  void expectAdvance(const std::optional<BodyAdvance>& advance) override { advance_ = advance; }

  /// Weights for the next call's split instead of the last call's work: one per body, in the order the next call
  /// will bring them (that call throws InputError on every rank when a weight is negative or not finite, or their
  /// number is not its bodies'). For a caller that knows its bodies' costs, and for the tests (a split that leaves
  /// ranks empty).
  void setWorkWeights(std::vector<double> weights) {
    work_ = std::move(weights);
    weightsGiven_ = true;
  }

  /// The weights of the next call's split: each body's interactions in the last call, in the order it returned them
  /// (or what setWorkWeights gave since). A checkpoint keeps them, so that a restart on as many ranks, given them
  /// back (setWorkWeights) with each rank's bodies in the same order, splits and computes as the run would have.
  const std::vector<double>& nextWorkWeights() const { return work_; }

  const DistributedStats& lastStats() const { return stats_; }
  /// This rank's phases summed over every call so far.
  const DistributedTotals& totals() const { return totals_; }
  // The last call's pieces, for tests and diagnostics.
  const Domain& domain() const { return domain_; }
  const tree::Octree& octree() const { return tree_; }
  const tree::Groups& groups() const { return groups_; }
  const LocalEssentialTree& localEssentialTree() const { return let_; }
  /// The final pass's plan: the local groups' whole lists, indexing localEssentialTree()'s sources and cells (its
  /// batches joined, where the pass evaluated them in batches).
  const InteractionPlan& lastPlan() const;

 private:
  /// Sets groups_.relativeTolerance to alpha |a|_min / G per group, |a|_min floored at
  /// tree::kRelativeFloorOfMeanAccel times the mean |a| of ALL ranks' bodies (tree::setRelativeTolerances floors at
  /// its own bodies' mean, which on K ranks would give each rank a different floor). Returns false, the test off,
  /// when alpha is 0 or every rank's accelerations are all zero. Collective.
  bool setGlobalRelativeTolerances(const Particles& particles);
  /// Multipoles at `theta` and `order`, the walks of `groups` (groups_ or a subset of it), the exchange and the
  /// evaluation into the acc (and pot when `potentials`) of the bodies of `groups`. Collective.
  InteractionCounts evaluatePass(Particles& particles, const tree::Groups& groups, double theta, MultipoleOrder order,
                                 bool potentials, ForceReport& report);
  /// The call's split (decompose) and local tree: the bodies sorted into it, its octree and groups. A call of every
  /// group (not `evaluatesSomeGroups`) without balls leaves the forces out of the sort (forcesLeftBehind_).
  void buildLocalTree(Particles& particles, bool evaluatesSomeGroups, ForceReport& report);
  /// The call's evaluation on the local tree: relative tolerances (an estimate pass where no accelerations came), the
  /// final pass over the groups asked for, the next split's weights and the ranks' work.
  void evaluateCall(Particles& particles, ForceReport& report);
  /// Each group's whole list (LocalEssentialTree::buildPlan of localPlan_), evaluated into `out`: with
  /// TreeParams::overlapWalk in batches along the curve, each evaluated while the next is merged (on a second host
  /// thread where the engine works on a device), else as one plan. Sets listLengths_. Returns the interactions.
  InteractionCounts mergeAndEvaluate(const tree::Groups& groups, const ForceView& out, ForceReport& report);
  /// Each body (in the order of `particles`) as a ball for lists that serve this call and the next K - 1
  /// (TreeParams::reuse): centred on the path the leapfrog's advance_ takes it on from its position and velocity at
  /// the acceleration it brought, holding that path with room for the acceleration to change (kBallAccelerationChange,
  /// kBallSlack). Sets ballRadius_, the centres ballX_.. and treeSources_ to the centres: the tree's keys, multipoles
  /// and groups, the walks and the pruning take the balls.
  void setBalls(const Particles& particles);
  /// The local bodies outside their balls (setBalls) at their positions now.
  std::uint64_t bodiesOutsideBalls(const Particles& particles) const;
  /// A call on kept lists: the local multipoles at the positions now, the exchange's cells and bodies refreshed
  /// (LocalEssentialTree::refresh), the last build's lists evaluated again. Collective.
  void evaluateKeptLists(Particles& particles, ForceReport& report);
  /// The engine's outputs of the local bodies (the front of the sources) as every body's acc (and pot): the arrays
  /// swapped with the bodies' and cut to their number, not copied (a pass over 3-4 arrays of every body, 3-7 ms a call
  /// at 2^22 bodies a rank on an H100's host); the bodies' old arrays are the next call's outputs.
  void takeOutputs(Particles& particles, bool potentials);
  /// The call's work after its final pass over `evaluated` on the rank's `n` bodies: stats_ (the ranks' sums and
  /// largest) and each evaluated body's weight for the next split. Collective.
  void noteWork(std::size_t n, const tree::Groups& evaluated, const InteractionCounts& counts);
  /// The groups whose forces the call must compute: every group, or with block time steps (ForceSolver::
  /// setLowestActiveBin, the bodies' timeBin) those that hold a body whose step ends here, as activeGroups_ (with
  /// their boxes and tolerances). The others' bodies keep the acc and pot they brought.
  const tree::Groups& groupsToEvaluate(const Particles& particles);

  NearFieldEngine& engine_;
  TreeParams params_;
  GravityParams gravity_;
  MPI_Comm comm_;
  int numRanks_ = 1;

  std::vector<double> work_;   ///< each body's interactions in the last call, in the order it returned them
  bool weightsGiven_ = false;  ///< work_ came from setWorkWeights for the next call
  /// The engine's outputs, one per source of the local essential tree (the local bodies, then the received ones: the
  /// engines' index space, NearFieldEngine::evaluatePlan); the local bodies' become the particles' (takeOutputs).
  std::vector<double> outAx_, outAy_, outAz_, outPot_;
  Domain domain_;
  DecompositionBuffers decompositionBuffers_;  ///< decompose()'s, kept from call to call
  /// The bodies' extent as the call's checks found it (allBodiesValid), for the decomposition's cube.
  tree::Extent bodyExtent_;
  std::vector<std::uint64_t> sortedKeys_;
  std::vector<std::uint32_t> order_;
  tree::KeySorter sorter_;
  tree::BodyPermuter permuter_;
  tree::Octree tree_;
  tree::Groups groups_;
  tree::Groups activeGroups_;              ///< groupsToEvaluate's subset of groups_ (block time steps)
  std::vector<std::uint8_t> groupActive_;  ///< groupsToEvaluate's flag per group of groups_ (scratch)
  std::vector<double> sortedWork_;         ///< work_ in the tree's order (scratch)
  /// This call's build sorted the bodies but for their forces, which stay in the order they came in until the call
  /// overwrites them (BodyPermuter::permuteSources): their |a| in the tree's order is sortedMagnitudes_, which the
  /// relative test reads instead (setGlobalRelativeTolerances).
  bool forcesLeftBehind_ = false;
  std::vector<double> sortedMagnitudes_;
  /// Such a build moves the velocities, ids and time bins into the tree's order later (BodyPermuter::permuteMotion),
  /// while the engine runs the call's last lists (mergeAndEvaluate); computeForces sees it done before it returns, or
  /// leaves. The LET export reads the ids through order_ meanwhile.
  tree::DeferredMotionPermutation deferredMotion_{permuter_};
  tree::WalkTree walkTree_;
  tree::PlanBuilder planBuilder_;
  /// Where the local walk runs beside the exchange (evaluatePass): workers only, below the exchange's priority.
  tbb::task_arena walkArena_{tbb::task_arena::automatic, 0, tbb::task_arena::priority::low};
  InteractionPlan localPlan_;
  /// The whole plan: the sequential merge's, or the batches joined by lastPlan().
  mutable InteractionPlan plan_;
  mutable bool planJoined_ = true;
  /// The overlapped merge's batches, batch k in batches_[k] for k < numBatches_: a deque, so that a batch in the
  /// engine's hands stays where it is while the next is added.
  std::deque<InteractionPlan> batches_;
  std::size_t numBatches_ = 0;
  InteractionPlan noGroups_;  ///< the empty batch that hands the engine the sources and cells ahead of the lists
  /// Whether the next call, if it evaluates some groups only (or any call, with reuse K > 1), may keep this call's
  /// tree: this call evaluated some groups only (block time steps) or reuse is K > 1, reuse is not 1, and its tree has
  /// not outgrown its use (kKeptTreeWorkGrowth, K or kMaxKeptTrees calls).
  bool mayKeepTree_ = false;
  std::uint64_t keptInARow_ = 0;        ///< calls since the last build that kept its tree
  std::optional<BodyAdvance> advance_;  ///< expectAdvance's word
  /// This call's tree was built over balls (setBalls), and its lists (batches_, or plan_ where numBatches_ is 0) may
  /// serve the next calls.
  bool listsKept_ = false;
  bool ballsOn_ = false;                       ///< the tree being built is a tree of balls (ballRadius_)
  std::vector<float> ballRadius_;              ///< each body's ball, in the tree's order
  std::vector<double> ballX_, ballY_, ballZ_;  ///< the balls' centres (setBalls)
  double builtWorkPerBody_ = 0.0;        ///< DistributedStats::workPerEvaluatedBody of the call that built the tree
  std::uint64_t treeBodies_ = 0;         ///< the bodies the last call's tree holds
  std::vector<std::uint64_t> idSample_;  ///< ids of every (n / kIdSamples)-th of them, in the tree's order
  /// Whether `particles` are the bodies the last call returned, in its order (same count and sampled ids).
  bool sameBodies(const Particles& particles) const;
  /// In a periodic box, for a kept tree: unwrapped*_ = each body's position at the image nearest its leaf's centre.
  void unwrapIntoLeaves(const Particles& particles);
  /// The positions the call's tree, walks and exchange take: the particles' own, or for a kept tree in a periodic box
  /// unwrapped*_ (unwrapIntoLeaves); masses are the particles'.
  SourceView treeSources_;
  std::vector<double> unwrappedX_, unwrappedY_, unwrappedZ_;
  std::vector<double> listLengths_;  ///< each evaluated group's whole list (cells + j-bodies) in the last pass
  LocalEssentialTree let_;
  DistributedStats stats_;
  DistributedTotals totals_;
};

}  // namespace matcha::parallel
