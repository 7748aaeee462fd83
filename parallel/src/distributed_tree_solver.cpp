// SPDX-License-Identifier: MIT
#include "matcha/parallel/distributed_tree_solver.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_reduce.h>
#include <tbb/task_arena.h>
#include <tbb/task_group.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <sstream>

#include "matcha/core/errors.hpp"
#include "matcha/core/pair_interaction.hpp"
#include "matcha/core/stopwatch.hpp"
#include "matcha/parallel/collective.hpp"
#include "matcha/tree/batch_evaluation.hpp"
#include "matcha/tree/periodic_tree_solver.hpp"
#include "matcha/tree/tree_solver.hpp"

namespace matcha::parallel {

namespace {

/// Whether every body passes Particles::validate (finite position, velocity and mass, mass > 0) and, with boxSize > 0,
/// tree::requireInsideBox, checked on the rank's cores: those serial checks, a pass over every array each call (~10%
/// of a call at 2^24 bodies a rank), then run only to name the first offender. The same pass takes the bodies' extent
/// (tree::computeExtent's, exact in any order) for the decomposition's bounding cube, which then reads the positions
/// no more (a pass of 4-8 ms a call at 2^22 bodies a rank on 4-8 cores of an H100's host).
bool allBodiesValid(const Particles& p, double boxSize, tree::Extent& extent) {
  struct Verdict {
    bool valid = true;
    tree::Extent extent;
  };
  const Verdict verdict = tbb::parallel_reduce(
      tbb::blocked_range<std::size_t>(0, p.size(), 16384), Verdict{},
      [&](const tbb::blocked_range<std::size_t>& range, Verdict acc) {
        for (std::size_t i = range.begin(); acc.valid && i < range.end(); ++i) {
          const double position[3] = {p.x[i], p.y[i], p.z[i]};
          acc.valid = std::isfinite(position[0]) && std::isfinite(position[1]) && std::isfinite(position[2]) &&
                      std::isfinite(p.vx[i]) && std::isfinite(p.vy[i]) && std::isfinite(p.vz[i]) &&
                      std::isfinite(p.mass[i]) && p.mass[i] > 0.0;
          if (boxSize > 0.0) {
            for (const double c : position) acc.valid = acc.valid && c >= 0.0 && c < boxSize;
          }
          for (int d = 0; d < 3; ++d) {
            acc.extent.lo[d] = std::min(acc.extent.lo[d], position[d]);
            acc.extent.hi[d] = std::max(acc.extent.hi[d], position[d]);
          }
        }
        return acc;
      },
      [](Verdict a, const Verdict& b) {
        a.valid = a.valid && b.valid;
        for (int d = 0; d < 3; ++d) {
          a.extent.lo[d] = std::min(a.extent.lo[d], b.extent.lo[d]);
          a.extent.hi[d] = std::max(a.extent.hi[d], b.extent.hi[d]);
        }
        return a;
      });
  extent = verdict.extent;
  return verdict.valid;
}

/// A kept tree serves block time steps while a call's interactions per evaluated body stay within this factor of the
/// building call's (over all ranks), and at most kMaxKeptTrees calls in a row: its cells grow as their bodies drift out
/// of their cubes. On the periodic test's clumpy box (DistributedPeriodic.BlockStepsKeepTheTreeAcrossFacesAndDomains)
/// a drift of ~3e-3 box left the interactions per body at 0.99-1.07x a new tree's, one of ~0.2 box took them to
/// 2.0-2.3x; past 1.5x the build (~half a call's host time at 1M bodies a rank) would cost less than the longer walks,
/// exports and kernels.
constexpr double kKeptTreeWorkGrowth = 1.5;
constexpr std::uint64_t kMaxKeptTrees = 16;

/// Room in a kept list's balls (DistributedTreeSolver::setBalls): a body outside its ball makes every rank's next
/// call build. The acceleration may change by kBallAccelerationChange of itself (the balls are sized from the one
/// the body brought to the building call, the last call's), and the whole path may be longer by kBallSlack: a close
/// encounter turns a fast body's acceleration around within a step, which adds little to its path but more than any
/// fraction of the acceleration it brought. Chosen on the test's Plummer sphere (8,192 bodies, dt 1/128, K = 4, no
/// softening) with the first version's balls, centred on each body's position with the whole path as radius (the
/// code is not kept): with TreeSolver's 0.25 (tree::kAccelerationChange) and no slack, 1 to 356 bodies left their
/// balls by up to 1.1% within the three calls after a build; with 1.0 and no slack, 1 or 2 fast bodies by 0.1-0.2%;
/// with these two, one body in seven runs. The balls about the path's midpoint were not measured apart.
constexpr double kBallAccelerationChange = 0.5;
constexpr double kBallSlack = 0.05;

/// Bodies whose ids tell whether a call brings the last call's bodies in its order (sameBodies), as TreeSolver checks.
constexpr std::size_t kIdSamples = 64;

}  // namespace

void DistributedTotals::add(const DistributedStats& call) {
  ++calls;
  arrivalWaitSeconds += call.arrivalWaitSeconds;
  decompositionSeconds += call.decompositionSeconds;
  localBuildSeconds += call.localBuildSeconds;
  letBuildSeconds += call.letBuildSeconds;
  communicationSeconds += call.communicationSeconds;
  walkSeconds += call.walkSeconds;
  kernelSeconds += call.kernelSeconds;
  callSeconds += call.callSeconds;
  work += call.work;
  lastBodies = call.numLocalBodies;
  if (calls > kWarmUpCalls) {
    ++steadyCalls;
    steadyCallSeconds += call.callSeconds;
    steadyDecompositionSeconds += call.decompositionSeconds;
    steadyArrivalWaitSeconds += call.arrivalWaitSeconds;
    steadyLocalBuildSeconds += call.localBuildSeconds;
    steadyLetBuildSeconds += call.letBuildSeconds;
    steadyCommunicationSeconds += call.communicationSeconds;
    steadyWalkSeconds += call.walkSeconds;
    steadyKernelSeconds += call.kernelSeconds;
    steadyLetAssemblySeconds += call.let.assemblySeconds;
    steadyCheckSeconds += call.decomposition.checkSeconds;
    steadyKeySeconds += call.decomposition.keySeconds;
    steadySplitSeconds += call.decomposition.splitSeconds;
    steadyMoveSeconds += call.decomposition.moveSeconds;
    steadyMoveExchangeSeconds += call.decomposition.moveExchangeSeconds;
    steadyBodiesSent += call.decomposition.bodiesSent;
    steadyPath.bodyChecks += call.path.bodyChecks;
    steadyPath.sort += call.path.sort;
    steadyPath.permute += call.path.permute;
    steadyPath.relativeTest += call.path.relativeTest;
    steadyPath.outputs += call.path.outputs;
    steadyPath.exchange += call.path.exchange;
    steadyPath.localWalkWait += call.path.localWalkWait;
    steadyPath.listsAndKernels += call.path.listsAndKernels;
    steadyPath.balance += call.path.balance;
  }
  keptTrees += call.keptTree ? 1 : 0;
  keptLists += call.keptLists ? 1 : 0;
  keptListSeconds += call.keptLists ? call.callSeconds : 0.0;
}

DistributedTreeSolver::DistributedTreeSolver(NearFieldEngine& engine, const TreeParams& treeParams,
                                             const GravityParams& gravity, MPI_Comm comm)
    : engine_(engine), params_(treeParams), gravity_(gravity), comm_(comm), numRanks_(numRanksOf(comm)) {
  params_.validate();
  gravity_.validate();
  if (gravity_.periodic.enabled() && !engine_.periodicShortRange()) {
    throw InputError("the " + engine_.name() + " engine has no periodic short-range kernels");
  }
}

std::string DistributedTreeSolver::describe() const {
  std::ostringstream text;
  text << "distributed tree";
  if (gravity_.periodic.enabled()) {
    text << " periodic short range (box " << gravity_.periodic.boxSize << ", r_s " << gravity_.periodic.splitRadius
         << ", r_cut " << gravity_.periodic.cutoffRadius << ")";
  }
  text << " over " << numRanks_ << (numRanks_ == 1 ? " rank" : " ranks") << " (theta " << params_.theta << ", ncrit "
       << params_.ncrit << ", nleaf " << params_.nleaf << ", " << toString(params_.multipole) << ", alpha "
       << params_.alpha << ") on " << engine_.name();
  return text.str();
}

bool DistributedTreeSolver::setGlobalRelativeTolerances(const Particles& particles) {
  const Stopwatch clock;
  const auto timed = [&](bool set) {
    stats_.path.relativeTest += clock.seconds();
    return set;
  };
  groups_.relativeTolerance.assign(groups_.size(), std::numeric_limits<double>::infinity());
  if (params_.alpha <= 0.0) return timed(false);
  // The |a| the build carried into the tree's order where it left the accelerations behind (buildLocalTree), the same
  // bits as the accelerations give.
  const AccelerationSet accelerations{particles.ax, particles.ay, particles.az};
  const std::span<const double> magnitudes(sortedMagnitudes_);
  double sums[2] = {forcesLeftBehind_ ? tree::sumOfAccelerationMagnitudes(magnitudes)
                                      : tree::sumOfAccelerationMagnitudes(accelerations),
                    double(particles.size())};  // sum of |a|, bodies
  MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_DOUBLE, MPI_SUM, comm_);
  if (!(sums[0] > 0.0) || !std::isfinite(sums[0])) return timed(false);
  if (forcesLeftBehind_) {
    tree::setRelativeTolerancesWithTotal(magnitudes, sums[0], sums[1], params_.alpha, gravity_.G, groups_);
  } else {
    tree::setRelativeTolerancesWithTotal(accelerations, sums[0], sums[1], params_.alpha, gravity_.G, groups_);
  }
  return timed(true);
}

const tree::Groups& DistributedTreeSolver::groupsToEvaluate(const Particles& particles) {
  const std::uint8_t lowest = particles.timeBin.size() == particles.size() ? lowestActiveBin() : 0;
  if (lowest == 0) return groups_;
  const std::size_t numGroups = groups_.size();
  std::vector<std::uint8_t>& active = groupActive_;
  active.assign(numGroups, 0);
  tbb::parallel_for(std::size_t{0}, numGroups, [&](std::size_t g) {
    const BodyRange range = groups_.ranges[g];
    for (std::uint32_t i = range.first; i < range.last && active[g] == 0; ++i) {
      active[g] = particles.timeBin[i] >= lowest ? 1 : 0;
    }
  });
  // Cleared, not replaced: the block steps' calls keep the vectors' room from call to call.
  activeGroups_.ranges.clear();
  activeGroups_.centre.clear();
  activeGroups_.halfExtent.clear();
  activeGroups_.relativeTolerance.clear();
  for (std::size_t g = 0; g < numGroups; ++g) {
    if (active[g] == 0) continue;
    activeGroups_.ranges.push_back(groups_.ranges[g]);
    activeGroups_.centre.insert(activeGroups_.centre.end(), &groups_.centre[3 * g], &groups_.centre[3 * g + 3]);
    activeGroups_.halfExtent.insert(activeGroups_.halfExtent.end(), &groups_.halfExtent[3 * g],
                                    &groups_.halfExtent[3 * g + 3]);
    activeGroups_.relativeTolerance.push_back(groups_.relativeTolerance[g]);
  }
  return activeGroups_;
}

InteractionCounts DistributedTreeSolver::evaluatePass(Particles& particles, const tree::Groups& groups, double theta,
                                                      MultipoleOrder order, bool potentials, ForceReport& report) {
  const std::size_t n = particles.size();
  Stopwatch clock;
  // The local groups' walks of the local tree run on the rank's worker threads beside the exchange, which this thread
  // makes (only it calls MPI), its own parallel loops isolated so that it does not take up the walk's tasks while it
  // waits and hold back the messages. The walk's arena has the lower priority: the workers prune the subtrees for the
  // other ranks first, which the other ranks wait for, and walk while this thread communicates and assembles, where
  // the walk once took the same cores as the pruning and the communication began after both. With one thread a rank
  // the walk runs after the exchange, at the wait. The walks read the tree and the groups only; the exchange the tree,
  // the bodies and the groups.
  tbb::task_group localWalk;
  double localWalkSeconds = 0.0;
  numBatches_ = 0;  // a rank without bodies has no lists
  plan_.clear();
  planJoined_ = true;
  if (n > 0) {
    tree::computeMultipoles(treeSources_, theta, order, tree_, ballsOn_ ? ballRadius_.data() : nullptr);
    tree::buildWalkTree(tree_, walkTree_, gravity_.periodic);
    report.timings[Phase::multipoles] += clock.seconds();
    stats_.localBuildSeconds += clock.seconds();
    walkArena_.execute([&] {
      localWalk.run([&] {
        const Stopwatch walking;
        planBuilder_.build(walkTree_, groups, 0, static_cast<std::uint32_t>(groups.size()), localPlan_);
        localWalkSeconds = walking.seconds();
      });
    });
  }
  // Waited for on every way out (the exchange may throw): the walk writes this solver's plan.
  struct WalkWaitedOnLeaving {
    tbb::task_arena& arena;
    tbb::task_group& walk;
    ~WalkWaitedOnLeaving() {
      try {
        arena.execute([&] { walk.wait(); });
      } catch (...) {  // NOLINT(bugprone-empty-catch): the exception that unwinds is the one to report
      }
    }
  } walkWaitedOnLeaving{walkArena_, localWalk};
  clock.restart();
  const BodyIds ids = deferredMotion_.pending() ? BodyIds(particles.id, order_) : BodyIds(particles.id);
  tbb::this_task_arena::isolate([&] { let_.exchange(tree_, treeSources_, ids, groups, comm_, gravity_.periodic); });
  stats_.path.exchange += clock.seconds();
  clock.restart();
  walkArena_.execute([&] { localWalk.wait(); });
  stats_.path.localWalkWait += clock.seconds();
  if (ballsOn_) {
    // The walks and the pruning took the balls about the predicted paths; the engine takes the bodies where they are:
    // the local multipoles for the positions now, and the cells and bodies sent refreshed (as a kept call's).
    const Stopwatch refit;
    if (n > 0) tree::computeMultipoles(particles.sources(), theta, order, tree_);
    report.timings[Phase::multipoles] += refit.seconds();
    stats_.localBuildSeconds += refit.seconds();
    let_.refresh(tree_, particles.sources(), comm_);
    stats_.letBuildSeconds += let_.stats().buildSeconds;
    stats_.communicationSeconds += let_.stats().communicationSeconds;
    report.timings[Phase::exchange] += let_.stats().buildSeconds + let_.stats().communicationSeconds;
  }
  stats_.walkSeconds += localWalkSeconds;
  report.timings[Phase::walk] += localWalkSeconds;
  const LetStats& let = let_.stats();
  stats_.letBuildSeconds += let.buildSeconds;
  stats_.communicationSeconds += let.communicationSeconds;
  report.timings[Phase::exchange] += let.buildSeconds + let.communicationSeconds;
  if (n == 0) return {};
  // The engine writes the outputs of the plan's groups, this rank's bodies: the front of the sources (the received
  // bodies behind them are sources only). Its outputs span all the sources, as the engine contract has them.
  const std::size_t numSources = let_.sources().count;
  for (auto* array : {&outAx_, &outAy_, &outAz_}) array->resize(numSources);
  outPot_.resize(potentials ? numSources : 0);
  const ForceView out{outAx_.data(), outAy_.data(), outAz_.data(), potentials ? outPot_.data() : nullptr, numSources};
  clock.restart();
  const InteractionCounts counts = mergeAndEvaluate(groups, out, report);
  stats_.path.listsAndKernels += clock.seconds();
  stats_.walkSeconds += let_.stats().walkSeconds;
  report.timings[Phase::walk] += let_.stats().walkSeconds;
  const Stopwatch copying;
  if (&groups == &groups_) {
    takeOutputs(particles, potentials);
  } else {
    // The engine wrote the evaluated groups' bodies only: the others keep what they brought.
    tbb::parallel_for(std::size_t{0}, groups.size(), [&](std::size_t g) {
      const BodyRange range = groups.ranges[g];
      for (std::uint32_t i = range.first; i < range.last; ++i) {
        particles.ax[i] = outAx_[i];
        particles.ay[i] = outAy_[i];
        particles.az[i] = outAz_[i];
        if (potentials) particles.pot[i] = outPot_[i];
      }
    });
  }
  stats_.path.outputs += copying.seconds();
  return counts;
}

void DistributedTreeSolver::takeOutputs(Particles& particles, bool potentials) {
  const std::size_t n = particles.size();
  const auto take = [n](std::vector<double>& outputs, std::vector<double>& bodies) {
    MATCHA_ASSERT(outputs.size() >= n, "the engine's outputs hold fewer entries than the bodies");
    outputs.swap(bodies);
    bodies.resize(n);
  };
  take(outAx_, particles.ax);
  take(outAy_, particles.ay);
  take(outAz_, particles.az);
  if (potentials) take(outPot_, particles.pot);
}

InteractionCounts DistributedTreeSolver::mergeAndEvaluate(const tree::Groups& groups, const ForceView& out,
                                                          ForceReport& report) {
  const std::size_t numGroups = groups.size();
  listLengths_.resize(numGroups);
  // Each group's whole list length (cells + j-bodies), the split's weight; returns the batch's list entries.
  const auto noteLengths = [&](const InteractionPlan& batch, std::size_t first) {
    std::uint64_t entries = 0;
    for (std::size_t k = 0; k < batch.numGroups(); ++k) {
      const std::uint64_t length = batch.numListCells(k) + batch.numListBodies(k);
      listLengths_[first + k] = double(length);
      entries += length;
    }
    return entries;
  };
  // The lists in batches along the curve, as the one-rank solvers walk theirs: an engine on a device evaluates each
  // batch on a second host thread while the cores merge the next, and takes the sources and cells (an empty first
  // batch) while the first is merged; the merge waits only when it is a batch ahead. The forces are the whole plan's,
  // bit for bit (NearFieldEngine::evaluatePlanBatch).
  tree::BatchEvaluation batches(engine_, let_.sources(), let_.cells(), gravity_, out, report);
  const double kernelsBefore = report.timings[Phase::kernels];
  const auto done = [&] {
    stats_.kernelSeconds += report.timings[Phase::kernels] - kernelsBefore;
    return batches.counts();
  };
  // The bodies' motion into the tree's order, where the build left it (deferredMotion_), while the engine runs.
  const auto permuteMotion = [&] { report.timings[Phase::sort] += deferredMotion_.run(); };
  if (!params_.overlapWalk) {
    let_.buildPlan(groups, localPlan_, plan_);
    planJoined_ = true;
    noteLengths(plan_, 0);
    batches.evaluateNow(plan_, PlanBatch{});
    permuteMotion();
    return done();
  }
  PlanBatch where{true, false};
  if (batches.beside()) {
    batches.hand(noGroups_, where);
    where.first = false;
  }
  const std::uint64_t batchEntries = std::min(tree::kPlanEntries, params_.maxBatchEntries);
  std::size_t first = 0;
  std::uint64_t lastBatchGroups = 0;
  double entriesPerGroup = 0.0;
  while (first < numGroups) {
    const std::size_t end = static_cast<std::size_t>(std::min<std::uint64_t>(
        numGroups, first + tree::walkBatchGroups(numGroups, lastBatchGroups, entriesPerGroup, batchEntries, true)));
    if (batches_.size() <= numBatches_) batches_.emplace_back();
    InteractionPlan& batch = batches_[numBatches_++];
    let_.buildPlan(groups, localPlan_, first, end, batch);
    const std::uint64_t entries = noteLengths(batch, first);
    batches.collect();
    where.last = end == numGroups;
    batches.hand(batch, where);
    where.first = false;
    entriesPerGroup = double(entries) / double(end - first);
    lastBatchGroups = end - first;
    first = end;
  }
  permuteMotion();
  batches.collect();
  planJoined_ = false;
  return done();
}

const InteractionPlan& DistributedTreeSolver::lastPlan() const {
  if (!planJoined_) {
    plan_.clear();
    for (std::size_t k = 0; k < numBatches_; ++k) appendGroups(batches_[k], 0, batches_[k].numGroups(), plan_);
    planJoined_ = true;
  }
  return plan_;
}

ForceReport DistributedTreeSolver::computeForces(Particles& particles) {
  const Stopwatch total;
  ForceReport report;
  stats_ = DistributedStats{};
  // The build may leave the bodies' motion to be permuted later (deferredMotion_): never past the call, even one that
  // ends early.
  struct MotionPermutedOnLeaving {
    tree::DeferredMotionPermutation& motion;
    ~MotionPermutedOnLeaving() { motion.run(); }
  } motionPermutedOnLeaving{deferredMotion_};
  // The ranks' arrival, timed apart from the checks and the decomposition, whose collectives would otherwise hold it.
  Stopwatch clock;
  MPI_Barrier(comm_);
  stats_.arrivalWaitSeconds = clock.seconds();
  clock.restart();
  const bool periodic = gravity_.periodic.enabled();
  checkOnEveryRank(
      [&] {
        if (particles.size() >= (std::size_t{1} << 31)) throw InputError("at most 2^31 - 1 bodies a rank");
        if (allBodiesValid(particles, periodic ? gravity_.periodic.boxSize : 0.0, bodyExtent_)) return;
        particles.validate();
        if (periodic) tree::requireInsideBox(particles, gravity_.periodic.boxSize);
        MATCHA_ASSERT(false, "a body failed the parallel check but passed the serial ones");
      },
      comm_);
  stats_.path.bodyChecks = clock.seconds();

  // A call of some groups only after another keeps the last call's split and tree (the class's comment says why it
  // may). Every rank decides alike: the bins asked for are every rank's, and the bodies checked on all ranks.
  // With TreeParams::reuse K > 1 a call of every group may keep it too, for at most K calls.
  const bool partial = particles.timeBin.size() == particles.size() && lowestActiveBin() > 0;
  const bool keepsAcrossSteps = params_.reuse > 1;
  // Kept lists (the class's comment): every rank has the same word on the motion and the same bins.
  const bool keepsLists = keepsAcrossSteps && !periodic && !partial && advance_.has_value() && advance_->drift > 0.0;
  const bool keepable = mayKeepTree_ && !weightsGiven_ && sameBodies(particles);
  const bool listsKeepable = keepsLists && listsKept_ && keepable;
  // The ranks that may keep the tree, those that may keep the lists, and the bodies outside their balls.
  std::uint64_t votes[3] = {(partial || keepsAcrossSteps) && !keepsLists && keepable ? 1u : 0u, listsKeepable ? 1u : 0u,
                            listsKeepable ? bodiesOutsideBalls(particles) : 0u};
  MPI_Allreduce(MPI_IN_PLACE, votes, 3, MPI_UINT64_T, MPI_SUM, comm_);
  const auto ranks = static_cast<std::uint64_t>(numRanks_);
  const bool keepTree = votes[0] == ranks;
  stats_.bodiesOutsideBalls = votes[1] == ranks ? votes[2] : 0;
  mayKeepTree_ = false;  // until this call ends well
  forcesLeftBehind_ = false;
  stats_.keptLists = votes[1] == ranks && votes[2] == 0;
  stats_.keptTree = keepTree || stats_.keptLists;
  if (stats_.keptLists) {
    evaluateKeptLists(particles, report);
    ++keptInARow_;
    mayKeepTree_ = keptInARow_ + 1 < params_.reuse;
    report.timings.totalSeconds = total.seconds();
    stats_.callSeconds = report.timings.totalSeconds;
    totals_.add(stats_);
    return report;
  }
  listsKept_ = false;
  ballsOn_ = false;

  // The last call's interactions per body weigh the split when these are the bodies it returned.
  clock.restart();
  if (!weightsGiven_ && work_.size() != particles.size()) work_.clear();
  weightsGiven_ = false;
  treeSources_ = particles.sources();
  if (keepTree) {
    const std::size_t n = particles.size();
    if (n > 0 && periodic) {
      // Each body at the image nearest its leaf, so that no cell of the kept tree holds bodies on both sides of the
      // box (wrapped across a face since the build): bodies may lie a drift outside [0, L)^3, as in one rank's reused
      // periodic trees, and every test and pair takes nearest images. (With such cells the periodic test's worst
      // errors were 3x a new tree's, at the bodies beside the face.)
      unwrapIntoLeaves(particles);
      treeSources_ = {unwrappedX_.data(), unwrappedY_.data(), unwrappedZ_.data(), particles.mass.data(), n};
    }
    if (n > 0) tree::makeGroups(tree_, treeSources_, params_.ncrit, groups_);
    report.timings[Phase::groups] += clock.seconds();
    stats_.localBuildSeconds += clock.seconds();
  } else {
    ballsOn_ = keepsLists;  // the tree being built is a tree of balls (buildLocalTree)
    buildLocalTree(particles, partial, report);
  }
  evaluateCall(particles, report);
  listsKept_ = ballsOn_;
  // A kept tree's cells grow with their bodies' drift out of their cubes (their extents about the cubes' centres), and
  // with them the lists: past kKeptTreeWorkGrowth times the interactions per evaluated body of the call that built
  // the tree, or after kMaxKeptTrees calls, the next call builds. Every rank decides alike (global sums).
  if (stats_.keptTree) {
    ++keptInARow_;
  } else {
    keptInARow_ = 0;
    builtWorkPerBody_ = stats_.workPerEvaluatedBody;
  }
  const std::uint64_t mostKept = keepsAcrossSteps ? params_.reuse - 1 : kMaxKeptTrees;
  const bool outgrown = keptInARow_ >= mostKept ||
                        (stats_.keptTree && stats_.workPerEvaluatedBody > kKeptTreeWorkGrowth * builtWorkPerBody_);
  mayKeepTree_ = (partial || keepsAcrossSteps) && params_.reuse != 1 && !outgrown;
  treeBodies_ = particles.size();
  idSample_.resize(std::min(kIdSamples, particles.size()));
  for (std::size_t k = 0; k < idSample_.size(); ++k)
    idSample_[k] = particles.id[k * particles.size() / idSample_.size()];
  report.timings.totalSeconds = total.seconds();
  stats_.callSeconds = report.timings.totalSeconds;
  totals_.add(stats_);
  return report;
}

bool DistributedTreeSolver::sameBodies(const Particles& particles) const {
  if (treeBodies_ != particles.size() || idSample_.size() != std::min(kIdSamples, particles.size())) return false;
  for (std::size_t k = 0; k < idSample_.size(); ++k) {
    if (particles.id[k * particles.size() / idSample_.size()] != idSample_[k]) return false;
  }
  return true;
}

void DistributedTreeSolver::unwrapIntoLeaves(const Particles& particles) {
  const double box = gravity_.periodic.boxSize;
  const std::size_t n = particles.size();
  const double* from[3] = {particles.x.data(), particles.y.data(), particles.z.data()};
  std::vector<double>* to[3] = {&unwrappedX_, &unwrappedY_, &unwrappedZ_};
  for (std::vector<double>* array : to) array->resize(n);
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, tree_.numCells(), 1024),
                    [&](const tbb::blocked_range<std::size_t>& cells) {
                      for (std::size_t c = cells.begin(); c < cells.end(); ++c) {
                        if (!tree_.isLeaf(static_cast<std::uint32_t>(c))) continue;
                        for (int d = 0; d < 3; ++d) {
                          const double centre = tree_.centre[3 * c + d];
                          std::vector<double>& coordinate = *to[d];
                          for (std::uint32_t i = tree_.bodies[c].first; i < tree_.bodies[c].last; ++i) {
                            coordinate[i] = centre + nearestImage(from[d][i] - centre, box);
                          }
                        }
                      }
                    });
}

void DistributedTreeSolver::buildLocalTree(Particles& particles, bool evaluatesSomeGroups, ForceReport& report) {
  const bool periodic = gravity_.periodic.enabled();
  Stopwatch clock;
  // In a periodic box the keys are taken in the box itself, as PeriodicTreeSolver takes them: every rank's tree then
  // has the box as its root, and its cells never straddle a face (each cell's bodies have one nearest image).
  Cube box;
  box.side = gravity_.periodic.boxSize;
  domain_ = decompose(particles, &work_, comm_, &stats_.decomposition, periodic ? &box : nullptr,
                      &decompositionBuffers_, &bodyExtent_);
  stats_.decompositionSeconds = clock.seconds();
  report.timings[Phase::decomposition] += stats_.decompositionSeconds;

  clock.restart();
  const std::size_t n = particles.size();
  if (n > 0) {
    // The tree over this rank's bodies in the global cube: its cells are the one-rank tree's cells wherever they hold
    // only this rank's bodies. Its keys are the decomposition's, which followed the bodies; for a tree of balls those
    // of the balls' centres (clamped into the cube), so that each cell lies about its balls: cells keyed by the
    // positions would hold balls half a path away from them, and their sizes, the opening radii and the lists would
    // grow by that (4.6x the interactions of a new tree at 2^22 Plummer bodies a rank, theta 1, K = 3, on an H100).
    if (ballsOn_) {
      setBalls(particles);
      tree::computeMortonKeys(treeSources_, domain_.cube, decompositionBuffers_.keys);
    }
    tree::sortKeysOn(params_.sortOnDevice ? &engine_ : nullptr, sorter_, decompositionBuffers_.keys, sortedKeys_,
                     order_);
    const double sortSeconds = clock.seconds();
    stats_.path.sort += sortSeconds;
    // A call that overwrites every body's forces leaves the old ones where they are (4 of the permutation's 13 arrays)
    // and carries their |a| for the relative test instead, and moves the velocities, ids and bins while the engine runs
    // its last lists (5 more; deferredMotion_); one of some groups keeps the others' forces, and the balls are made
    // from the accelerations and velocities.
    forcesLeftBehind_ = !evaluatesSomeGroups && !ballsOn_;
    if (forcesLeftBehind_) {
      permuter_.permuteSources(particles, order_, sortedMagnitudes_);
      deferredMotion_.defer(particles, order_);
    } else {
      permuter_.permute(particles, order_);
    }
    if (work_.size() == n) {
      // The split's weights follow the bodies into the tree's order: a call that evaluates some groups only (block
      // time steps) keeps the others' weights from the calls that last evaluated them.
      sortedWork_.resize(n);
      tbb::parallel_for(std::size_t{0}, n, [&](std::size_t k) { sortedWork_[k] = work_[order_[k]]; });
      work_.swap(sortedWork_);
    }
    report.timings[Phase::sort] += clock.seconds();
    stats_.path.permute += clock.seconds() - sortSeconds;
    stats_.localBuildSeconds += clock.seconds();
    clock.restart();
    tree::buildOctree(sortedKeys_, domain_.cube, params_.nleaf, tree_);
    treeSources_ = particles.sources();  // the bodies sorted into the tree
    if (ballsOn_) setBalls(particles);   // in the tree's order (treeSources_: their centres)
    tree::makeGroups(tree_, treeSources_, params_.ncrit, groups_);
    if (ballsOn_) tree::setGroupBoxesOfBalls(treeSources_, ballRadius_.data(), groups_);
    report.timings[Phase::groups] += clock.seconds();
  } else {
    tree_ = tree::Octree{};
    groups_ = tree::Groups{};
  }
  stats_.localBuildSeconds += clock.seconds();
}

void DistributedTreeSolver::evaluateCall(Particles& particles, ForceReport& report) {
  const bool periodic = gravity_.periodic.enabled();
  const std::size_t n = particles.size();
  bool tolerancesSet = setGlobalRelativeTolerances(particles);
  if (!tolerancesSet && params_.alpha > 0.0) {
    // No accelerations on any rank (fresh initial conditions): a first pass for the |a| the relative test scales by,
    // as the one-rank solvers' estimate passes: TreeSolver's cheap one (monopole cells at kEstimateTheta), or
    // PeriodicTreeSolver's, with theta alone.
    const Stopwatch estimate;
    ForceReport pass;
    if (periodic) {
      evaluatePass(particles, groups_, params_.theta, params_.multipole, false, pass);
    } else {
      evaluatePass(particles, groups_, tree::kEstimateTheta, MultipoleOrder::monopole, false, pass);
    }
    report.counts += pass.counts;
    forcesLeftBehind_ = false;  // the pass wrote every body's acceleration
    // The balls for the accelerations the pass found: with none (as the bodies came) a ball would hold only the
    // drift at the velocity, and a body the kicks move more would leave it at the next call.
    if (ballsOn_ && n > 0) {
      setBalls(particles);
      tree::setGroupBoxesOfBalls(treeSources_, ballRadius_.data(), groups_);
    }
    tolerancesSet = setGlobalRelativeTolerances(particles);
    report.timings[Phase::estimate] += estimate.seconds();
    stats_.estimatePass = true;
  }
  const tree::Groups& evaluated = groupsToEvaluate(particles);
  const InteractionCounts counts =
      evaluatePass(particles, evaluated, params_.theta, params_.multipole, potentialsWanted(), report);
  stats_.let = let_.stats();
  stats_.listBatches = numBatches_;
  noteWork(n, evaluated, counts);
  report.rebuilt = !stats_.keptTree;
  report.numGroupsWalked = evaluated.size();
  clearUnwantedPotentials(particles);
}

void DistributedTreeSolver::noteWork(std::size_t n, const tree::Groups& evaluated, const InteractionCounts& counts) {
  const Stopwatch balance;
  // Each body's work for the next split: the length of its group's whole list (a group not evaluated keeps its
  // weight; where it has none yet, the mean of those evaluated).
  if (work_.size() != n) {
    double lengths = 0.0;
    for (std::size_t g = 0; g < evaluated.size(); ++g) lengths += listLengths_[g];
    work_.assign(n, evaluated.size() > 0 ? lengths / double(evaluated.size()) : 1.0);
  }
  tbb::parallel_for(std::size_t{0}, evaluated.size(), [&](std::size_t g) {
    std::fill(work_.begin() + evaluated.ranges[g].first, work_.begin() + evaluated.ranges[g].last, listLengths_[g]);
  });
  stats_.numLocalBodies = n;
  stats_.numGroups = groups_.size();
  stats_.work = double(counts.total());
  std::uint64_t evaluatedBodies = 0;
  for (std::size_t g = 0; g < evaluated.size(); ++g) evaluatedBodies += evaluated.ranges[g].size();
  double sums[2] = {stats_.work, double(evaluatedBodies)};
  double maxWork = stats_.work;
  MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_DOUBLE, MPI_SUM, comm_);
  MPI_Allreduce(MPI_IN_PLACE, &maxWork, 1, MPI_DOUBLE, MPI_MAX, comm_);
  stats_.meanWork = sums[0] / double(numRanks_);
  stats_.maxWork = maxWork;
  stats_.workPerEvaluatedBody = sums[1] > 0.0 ? sums[0] / sums[1] : 0.0;
  stats_.path.balance += balance.seconds();
}

void DistributedTreeSolver::setBalls(const Particles& particles) {
  const std::size_t n = particles.size();
  ballRadius_.resize(n);
  for (auto* centre : {&ballX_, &ballY_, &ballZ_}) centre->resize(n);
  treeSources_ = {ballX_.data(), ballY_.data(), ballZ_.data(), particles.mass.data(), n};
  // After the build's call the leapfrog kicks each body by (second + first kick) a and drifts it by `drift` v, once a
  // step: j steps on, x_j = x + j drift v + j (j + 1) / 2 drift kick a for a constant a (v as the body brings it,
  // before this call's closing kick). The lists serve j = 0 .. k = K - 1: the ball is centred halfway between x_0
  // and x_k and holds every x_j (|j - k / 2| <= k / 2, |j (j + 1) / 2 - k (k + 1) / 4| <= k (k + 1) / 4), with room
  // for a to change by kBallAccelerationChange of itself (x_k moves by k (k + 1) / 2 drift kick of the change).
  const double k = double(params_.reuse - 1);
  const double drift = advance_->drift;
  // A step's two half kicks (the word after a run's first call has no first kick: that call closed no step).
  const double kick = std::max(advance_->firstKick + advance_->secondKick, 2.0 * advance_->secondKick);
  const double halfway = 0.25 * k * (k + 1.0) * drift * kick;  // x_k's acceleration term, halved
  const double accelerationRoom = halfway * (1.0 + 2.0 * kBallAccelerationChange);
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n, 16384), [&](const tbb::blocked_range<std::size_t>& range) {
    for (std::size_t i = range.begin(); i < range.end(); ++i) {
      const double v[3] = {particles.vx[i], particles.vy[i], particles.vz[i]};
      const double a[3] = {particles.ax[i], particles.ay[i], particles.az[i]};
      const double speed = std::sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
      const double acceleration = std::sqrt(a[0] * a[0] + a[1] * a[1] + a[2] * a[2]);
      ballX_[i] = particles.x[i] + 0.5 * k * drift * v[0] + halfway * a[0];
      ballY_[i] = particles.y[i] + 0.5 * k * drift * v[1] + halfway * a[1];
      ballZ_[i] = particles.z[i] + 0.5 * k * drift * v[2] + halfway * a[2];
      const double radius = (0.5 * k * drift * speed + accelerationRoom * acceleration) * (1.0 + kBallSlack);
      // Rounded up to a float (the tree's bounds take the balls as floats).
      float r = static_cast<float>(radius);
      if (double(r) < radius) r = std::nextafter(r, std::numeric_limits<float>::infinity());
      ballRadius_[i] = std::isfinite(r) ? r : 0.0f;
    }
  });
}

std::uint64_t DistributedTreeSolver::bodiesOutsideBalls(const Particles& particles) const {
  if (ballRadius_.size() != particles.size()) return particles.size();
  return tbb::parallel_reduce(
      tbb::blocked_range<std::size_t>(0, particles.size(), 16384), std::uint64_t{0},
      [&](const tbb::blocked_range<std::size_t>& range, std::uint64_t outside) {
        for (std::size_t i = range.begin(); i < range.end(); ++i) {
          const double dx = particles.x[i] - ballX_[i], dy = particles.y[i] - ballY_[i],
                       dz = particles.z[i] - ballZ_[i];
          const double r = ballRadius_[i];
          outside += dx * dx + dy * dy + dz * dz <= r * r ? 0 : 1;
        }
        return outside;
      },
      [](std::uint64_t a, std::uint64_t b) { return a + b; });
}

void DistributedTreeSolver::evaluateKeptLists(Particles& particles, ForceReport& report) {
  const std::size_t n = particles.size();
  const bool potentials = potentialsWanted();
  Stopwatch clock;
  treeSources_ = particles.sources();
  if (n > 0) tree::computeMultipoles(treeSources_, params_.theta, params_.multipole, tree_);
  report.timings[Phase::multipoles] += clock.seconds();
  stats_.localBuildSeconds = clock.seconds();
  let_.refresh(tree_, treeSources_, comm_);
  const LetStats& let = let_.stats();
  stats_.let = let;
  stats_.letBuildSeconds = let.buildSeconds;
  stats_.communicationSeconds = let.communicationSeconds;
  report.timings[Phase::exchange] += let.buildSeconds + let.communicationSeconds;
  InteractionCounts counts;
  if (n > 0) {
    const std::size_t numSources = let_.sources().count;
    // The last call took its outputs' arrays for the bodies' (takeOutputs), leaving theirs.
    for (auto* array : {&outAx_, &outAy_, &outAz_}) array->resize(numSources);
    outPot_.resize(potentials ? numSources : 0);
    const ForceView out{outAx_.data(), outAy_.data(), outAz_.data(), potentials ? outPot_.data() : nullptr, numSources};
    const double kernelsBefore = report.timings[Phase::kernels];
    tree::BatchEvaluation batches(engine_, let_.sources(), let_.cells(), gravity_, out, report);
    if (numBatches_ == 0) {
      batches.evaluateNow(plan_, PlanBatch{});
    } else {
      for (std::size_t k = 0; k < numBatches_; ++k) {
        batches.evaluateNow(batches_[k], PlanBatch{k == 0, k + 1 == numBatches_});
      }
    }
    counts = batches.counts();
    stats_.kernelSeconds = report.timings[Phase::kernels] - kernelsBefore;
    const Stopwatch copying;
    takeOutputs(particles, potentials);
    stats_.path.outputs += copying.seconds();
  }
  stats_.listBatches = numBatches_;
  noteWork(n, groups_, counts);
  report.rebuilt = false;
  report.numGroupsWalked = 0;
  clearUnwantedPotentials(particles);
}

}  // namespace matcha::parallel
