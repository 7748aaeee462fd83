// SPDX-License-Identifier: MIT
#include "matcha/tree/periodic_tree_solver.hpp"

#include <tbb/blocked_range.h>
#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_invoke.h>
#include <tbb/parallel_reduce.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <future>
#include <limits>
#include <sstream>
#include <utility>

#include "matcha/core/errors.hpp"
#include "matcha/core/opening_criterion.hpp"
#include "matcha/core/pair_interaction.hpp"
#include "matcha/core/stopwatch.hpp"
#include "matcha/tree/batch_evaluation.hpp"

namespace matcha::tree {

namespace {

/// Bodies per task of the reuse's passes over the bodies.
constexpr std::size_t kBodiesPerTask = std::size_t{1} << 14;

/// Ranges of bodies near an escaped body per task of computeEscapedPulls and addEscapedPulls.
constexpr std::size_t kEscapedRangesPerTask = 16;
/// Bodies near an escaped body below which addEscapedPulls adds its changes on one core (a task costs more).
constexpr std::size_t kEscapedSerialBodies = std::size_t{1} << 14;

/// The overlapped walk's batches (walkAndEvaluate) grow over the last by kFirstWalkGrowth for the second batch and by
/// kWalkGrowth after: the cores should walk a batch in no more time than the GPU takes on the one in flight, or the
/// GPU waits. At the periodic defaults the H200's 16 host cores walk ~650 groups a ms against the kernels' ~450 (2^24
/// clumps), so a batch may grow at most ~1.4x; growing 4x at once, the second batch (8192 groups) took 13 ms to walk
/// against the first's ~5 ms of kernels. (The CUDA engine's pipelined batches return before their kernels end: the
/// walk cannot time the GPU batch by batch, so the growth is fixed.)
constexpr double kFirstWalkGrowth = 2.0;
constexpr double kWalkGrowth = 1.25;

/// Bodies whose speeds set a tree's K (ballRadii): about this many, every (N / kSpeedSamples)-th.
constexpr std::size_t kSpeedSamples = std::size_t{1} << 16;

/// Where a body's path continues from `built`, its place at the tree's build: `now` (in the box), moved by a box
/// length where it crossed a face since (it lies within its ball, far less than half a box, of `built`); `moved` gets
/// the displacement from `built`.
inline double continuedPath(double now, double built, double box, double& moved) {
  moved = now - built;
  if (moved > 0.5 * box) {
    moved -= box;
    return now - box;
  }
  if (moved < -0.5 * box) {
    moved += box;
    return now + box;
  }
  return now;
}

/// The engine's transfer memory, else the default resource.
std::pmr::memory_resource* transferMemoryOf(NearFieldEngine& engine) {
  std::pmr::memory_resource* memory = engine.transferMemory();
  return memory != nullptr ? memory : std::pmr::get_default_resource();
}

}  // namespace

PeriodicVisit visitPeriodic(const Octree& tree, std::uint32_t cell, const Groups& groups, std::size_t group,
                            const PeriodicSplit& split) {
  const BodyRange cellBodies = tree.bodies[cell];
  const BodyRange groupBodies = groups.ranges[group];
  if (cellBodies.first < groupBodies.last && groupBodies.first < cellBodies.last) return PeriodicVisit::open;
  const double com[3] = {tree.multipoles.x[cell], tree.multipoles.y[cell], tree.multipoles.z[cell]};
  const double tolerance =
      groups.relativeTolerance.empty() ? std::numeric_limits<double>::infinity() : groups.relativeTolerance[group];
  return visitPeriodic(com, tree.openingRadius[cell], tree.multipoles.mass[cell], tree.bmax[cell],
                       tree.multipoles.hasQuadrupole, &groups.centre[3 * group], &groups.halfExtent[3 * group],
                       tolerance, split);
}

PeriodicVisit visitPeriodic(const double* com, double openingRadius, double mass, double bmax, bool quadrupole,
                            const double* centre, const double* half, double tolerance, const PeriodicSplit& split) {
  const double distance2 = periodicDistanceToBox2(com[0], com[1], com[2], centre[0], centre[1], centre[2], half[0],
                                                  half[1], half[2], split.boxSize);
  if (std::sqrt(distance2) - bmax >= split.cutoffRadius) return PeriodicVisit::skip;
  // The relative test takes the cells' own order: a truncated quadrupole cell is the expansion of the truncated pair
  // to second order (pair_interaction.hpp: accumulateTruncatedQuadrupoleInteraction), good to third.
  return passesOpeningCriterion(distance2, openingRadius, mass, bmax, tolerance, quadrupole) ? PeriodicVisit::accept
                                                                                             : PeriodicVisit::open;
}

void buildPeriodicPlan(const Octree& tree, const Groups& groups, const PeriodicSplit& split, InteractionPlan& plan) {
  MATCHA_ASSERT(split.enabled(), "periodic walk without a periodic split");
  MATCHA_ASSERT(tree.multipoles.size() == tree.numCells() && tree.bmax.size() == tree.numCells(),
                "periodic walk needs computeMultipoles first");
  const std::size_t numGroups = groups.size();
  std::vector<std::vector<std::uint32_t>> cellLists(numGroups);
  std::vector<std::vector<BodyRange>> rangeLists(numGroups);
  std::vector<std::uint32_t> bodyCounts(numGroups, 0);
  tbb::enumerable_thread_specific<std::vector<std::uint32_t>> stacks;
  tbb::parallel_for(std::size_t{0}, numGroups, [&](std::size_t group) {
    std::vector<std::uint32_t>& stack = stacks.local();
    std::vector<std::uint32_t>& cells = cellLists[group];
    std::vector<BodyRange>& ranges = rangeLists[group];
    stack.assign(1, 0);
    while (!stack.empty()) {
      const std::uint32_t cell = stack.back();
      stack.pop_back();
      const PeriodicVisit visit = visitPeriodic(tree, cell, groups, group, split);
      if (visit == PeriodicVisit::skip) continue;
      if (visit == PeriodicVisit::accept) {
        cells.push_back(cell);
      } else if (tree.isLeaf(cell)) {
        const BodyRange bodies = tree.bodies[cell];
        bodyCounts[group] += bodies.size();
        if (!ranges.empty() && ranges.back().last == bodies.first) {
          ranges.back().last = bodies.last;
        } else {
          ranges.push_back(bodies);
        }
      } else {
        // Last child first, so that the first pops first and leaves come out in body order (ranges merge).
        for (int k = tree.numChildren[cell] - 1; k >= 0; --k) stack.push_back(tree.firstChild[cell] + k);
      }
    }
  });

  plan.clear();
  plan.groups = groups.ranges;
  plan.groupCentres = groups.centre;
  plan.groupIds.resize(numGroups);
  for (std::size_t g = 0; g < numGroups; ++g) plan.groupIds[g] = static_cast<std::uint32_t>(g);
  plan.listBodyCounts = bodyCounts;
  for (std::size_t g = 0; g < numGroups; ++g) {
    plan.cellList.insert(plan.cellList.end(), cellLists[g].begin(), cellLists[g].end());
    plan.bodyList.insert(plan.bodyList.end(), rangeLists[g].begin(), rangeLists[g].end());
    MATCHA_ASSERT(plan.cellList.size() < (std::size_t{1} << 32) && plan.bodyList.size() < (std::size_t{1} << 32),
                  "interaction lists exceed 32-bit offsets");
    plan.cellListOffsets.push_back(static_cast<std::uint32_t>(plan.cellList.size()));
    plan.bodyListOffsets.push_back(static_cast<std::uint32_t>(plan.bodyList.size()));
  }
}

void requireInsideBox(const Particles& particles, double boxSize) {
  // On every core, the first offender by index (the same message whatever the threads): one core took 64-72 ms of a
  // 2^24-body call (H200 host), more than a fifth of a reused call.
  const auto outside = [boxSize](double c) { return !(c >= 0.0 && c < boxSize); };  // the negated form catches NaN
  const std::size_t n = particles.size();
  const std::size_t first = tbb::parallel_reduce(
      tbb::blocked_range<std::size_t>(0, n, kBodiesPerTask), n,
      [&](const tbb::blocked_range<std::size_t>& r, std::size_t found) {
        for (std::size_t i = r.begin(); i != r.end() && i < found; ++i) {
          if (outside(particles.x[i]) || outside(particles.y[i]) || outside(particles.z[i])) return i;
        }
        return found;
      },
      [](std::size_t a, std::size_t b) { return std::min(a, b); });
  if (first == n) return;
  std::ostringstream message;
  message.precision(17);
  message << "body " << particles.id[first] << " lies outside the periodic box [0, " << boxSize << ")^3 at ("
          << particles.x[first] << ", " << particles.y[first] << ", " << particles.z[first] << ")";
  throw InputError(message.str());
}

PeriodicTreeSolver::PeriodicTreeSolver(NearFieldEngine& engine, const TreeParams& treeParams,
                                       const GravityParams& gravity)
    : engine_(engine),
      params_(treeParams),
      gravity_(gravity),
      keys_(transferMemoryOf(engine)),
      sortedKeys_(transferMemoryOf(engine)),
      order_(transferMemoryOf(engine)) {
  params_.validate();
  gravity_.validate();
  if (!gravity_.periodic.enabled()) throw InputError("the periodic tree solver needs a periodic box");
  if (!engine_.periodicShortRange()) {
    throw InputError("the " + engine_.name() +
                     " engine has no periodic short-range kernels: use the CPU engine or the CUDA engine in float");
  }
}

void PeriodicTreeSolver::setSoftening(double eps) { gravity_ = gravity_.withSoftening(eps); }

std::string PeriodicTreeSolver::describe() const {
  std::ostringstream text;
  text.precision(4);
  text << "periodic tree short range (box " << gravity_.periodic.boxSize << ", r_s " << gravity_.periodic.splitRadius
       << ", r_cut " << gravity_.periodic.cutoffRadius << ", theta " << params_.theta << ", ncrit " << params_.ncrit
       << ", nleaf " << params_.nleaf << ", " << toString(params_.multipole) << ", alpha " << params_.alpha
       << (params_.overlapWalk
               ? (engine_.evaluatesOnDevice() ? ", walked in batches beside the engine" : ", walked in batches")
               : "")
       << ") on " << engine_.name();
  return text.str();
}

bool PeriodicTreeSolver::setSortedBodiesHook(SortedBodiesHook hook) {
  sortedHook_ = std::move(hook);
  return true;
}

bool PeriodicTreeSolver::setUnsortedBodiesHook(UnsortedBodiesHook hook) {
  unsortedHook_ = std::move(hook);
  return true;
}

bool PeriodicTreeSolver::setForceAddendProvider(ForceAddendProvider provider) {
  addendProvider_ = std::move(provider);
  return true;
}

const InteractionPlan& PeriodicTreeSolver::lastPlan() const {
  if (!planJoined_) {
    plan_.clear();
    for (std::size_t k = 0; k < numBatches_; ++k) appendGroups(batches_[k], 0, batches_[k].numGroups(), plan_);
    planJoined_ = true;
  }
  return plan_;
}

namespace {

/// What one evaluation of a plan (or batch) gave, and the engine's timings of it.
struct Evaluated {
  InteractionCounts counts;
  EngineTimings timings;
};

/// Adds an evaluation's interactions and the engine's upload, kernel and download times to `report`.
void addEvaluation(const InteractionCounts& counts, const EngineTimings& timings, ForceReport& report) {
  report.counts += counts;
  report.timings[Phase::upload] += timings.uploadSeconds;
  report.timings[Phase::kernels] += timings.kernelSeconds;
  report.timings[Phase::download] += timings.downloadSeconds;
}

}  // namespace

PeriodicTreeSolver::ListTotals PeriodicTreeSolver::walkAndEvaluate(
    const Particles& particles, const ForceView& out, ForceReport& report, bool evaluatePlan, bool sequential,
    std::future<EngineTimings>* bodiesSent, const std::function<void()>& whileLastBatchRuns, bool takeAddend) {
  const SourceView sources = particles.sources();
  // The caller's addend, asked for only as the last batch goes to the engine (TreePM's mesh has had the walk's time to
  // finish). Declared before the evaluations in flight, which read it until they are done.
  ForceAddend addend;
  const auto lastBatch = [&](PlanBatch where) {
    MATCHA_ASSERT(where.last, "an addend handed with a batch that is not the call's last");
    if (takeAddend) {
      addend = addendProvider_();
      MATCHA_ASSERT(addend.count == sources.count && (out.pot == nullptr || addend.pot != nullptr),
                    "PeriodicTreeSolver: the addend does not cover the bodies' outputs");
      where.addend = &addend;
      report.addendTaken = true;
    }
    return where;
  };
  const auto numGroups = static_cast<std::uint32_t>(groups_.size());
  ListTotals lists;
  const auto countLists = [&](const InteractionPlan& plan) {
    std::uint64_t entries = plan.cellList.size();
    for (std::size_t g = 0; g < plan.numGroups(); ++g) {
      const std::uint64_t listBodies = plan.numListBodies(g), listCells = plan.numListCells(g);
      entries += listBodies;
      lists.bodies += listBodies;
      lists.cells += listCells;
      lists.maxBodies = std::max(lists.maxBodies, listBodies);
      lists.maxCells = std::max(lists.maxCells, listCells);
    }
    ++lists.batches;
    return entries;
  };
  // A plan that is a call's first and last batch is evaluated as evaluatePlan evaluates it, on every engine.
  const auto evaluate = [&](const InteractionPlan& plan, PlanBatch where) {
    Evaluated done;
    done.counts = engine_.evaluatePlanBatch(sources, tree_.multipoles, plan, gravity_, out, where);
    done.timings = engine_.lastTimings();  // read by the thread that evaluated, before the next evaluation
    return done;
  };
  const auto take = [&](const Evaluated& done) { addEvaluation(done.counts, done.timings, report); };
  const bool sentAhead = bodiesSent != nullptr && bodiesSent->valid();
  const auto takeSentAhead = [&] {
    if (bodiesSent == nullptr || !bodiesSent->valid()) return;
    const Stopwatch waiting;
    const EngineTimings timings = bodiesSent->get();
    report.timings.engineWaitSeconds += waiting.seconds();
    addEvaluation({}, timings, report);
  };
  Stopwatch clock;
  if (!params_.overlapWalk || sequential) {
    // An engine on a device takes the call's bodies and cells on a second host thread while the cores walk (an empty
    // first batch), then the whole plan as the last batch: evaluatePlan's forces, bit for bit (evaluatePlanBatch).
    // The upload was ~23 ms of a 2^24 call (clumps, H200), all of it after the walk before.
    const bool uploadAhead = evaluatePlan && engine_.evaluatesOnDevice();
    std::future<Evaluated> uploading;
    if (uploadAhead && !sentAhead) {
      uploading = std::async(std::launch::async, evaluate, std::cref(noGroups_), PlanBatch{true, false});
    }
    planBuilder_.build(walkTree_, groups_, 0, numGroups, plan_);
    planJoined_ = true;
    numBatches_ = 0;
    report.timings[Phase::walk] += clock.seconds();
    countLists(plan_);
    if (uploadAhead) {
      if (sentAhead) {
        takeSentAhead();
      } else {
        const Stopwatch waiting;
        take(uploading.get());
        report.timings.engineWaitSeconds += waiting.seconds();
      }
      take(evaluate(plan_, lastBatch(PlanBatch{false, true})));
    } else if (evaluatePlan) {
      take(evaluate(plan_, lastBatch(PlanBatch{})));
    }
    if (whileLastBatchRuns) whileLastBatchRuns();
    return lists;
  }

  // An engine on a device evaluates each batch on a second host thread while the cores walk the next; the walk waits
  // only when it is ahead of the engine by a batch.
  BatchEvaluation batches(engine_, sources, tree_.multipoles, gravity_, out, report);
  const bool beside = batches.beside();
  const auto hand = [&](const InteractionPlan& plan, PlanBatch where) { batches.hand(plan, where); };
  const auto collect = [&] {
    takeSentAhead();
    batches.collect();
  };
  PlanBatch where{true, false};
  if (beside) {
    if (!sentAhead) hand(noGroups_, where);  // the bodies and cells go over while the first batch is walked
    where.first = false;
  }
  // The open-boundary solver's batches: a small first one, so that the engine starts early, then growing ones of at
  // most a quarter of the groups and kPlanEntries list entries, growing by kFirstWalkGrowth then kWalkGrowth.
  const std::uint64_t batchEntries = std::min(kPlanEntries, params_.maxBatchEntries);
  std::uint32_t first = 0;
  std::uint64_t lastBatchGroups = 0;
  double entriesPerGroup = 0.0;
  numBatches_ = 0;
  while (first < numGroups) {
    const double growth = numBatches_ <= 1 ? kFirstWalkGrowth : kWalkGrowth;
    const auto end = static_cast<std::uint32_t>(std::min<std::uint64_t>(
        numGroups, first + walkBatchGroups(numGroups, lastBatchGroups, entriesPerGroup, batchEntries, true, growth)));
    if (batches_.size() <= numBatches_) batches_.emplace_back();
    InteractionPlan& batch = batches_[numBatches_++];
    clock.restart();
    planBuilder_.build(walkTree_, groups_, first, end, batch);
    report.timings[Phase::walk] += clock.seconds();
    const std::uint64_t entries = countLists(batch);
    collect();
    where.last = end == numGroups;
    hand(batch, where.last ? lastBatch(where) : where);
    where.first = false;
    entriesPerGroup = double(entries) / double(end - first);
    lastBatchGroups = end - first;
    first = end;
  }
  if (whileLastBatchRuns) whileLastBatchRuns();
  collect();
  planJoined_ = false;
  MATCHA_ASSERT(!takeAddend || report.addendTaken, "PeriodicTreeSolver: a pass without a last batch for the addend");
  return lists;
}

ForceReport PeriodicTreeSolver::computeForces(Particles& particles) {
  const Stopwatch total;
  ForceReport report;
  const std::size_t n = particles.size();
  if (n == 0) throw InputError("no bodies to compute forces for");
  if (n >= (std::size_t{1} << 31)) throw InputError("at most 2^31 - 1 bodies are supported");

  // A call that may reuse the tree keeps the bodies' order: the hook (TreePM's mesh, whose GPU work is most of a
  // reused call's) starts before the ball pass. Should the tree not hold after all (a body left its ball), the build's
  // sort calls the hook again, which supersedes this call (ForceSolver::SortedBodiesHook).
  // (Not on a tree of points, built without the bodies' speeds: it holds only while nothing moves.)
  // The caller's drift of the positions, where it left it to this call (ForceSolver::setPendingDrift), is made while
  // the engine evaluates where the engine drifts its own copy and checks the balls (reuseAndEvaluate); at once else.
  const bool mayDriftOnEngine = mirrorValid_ && engineMayDrift() && engine_.checksBalls() && treeHeld_ &&
                                builtCalls_ < treeSteps_ && builtIds_.size() == n;
  if (!mayDriftOnEngine) runPendingDrift();
  if (sortedHook_ && treeHeld_ && treeHasBalls_ && builtCalls_ < treeSteps_ && builtIds_.size() == n) {
    runPendingDrift();
    sortedHook_(particles.sources(), {});
  }
  // Why the call builds anew, should it. A tree of points (the first, built without the bodies' speeds) was planned
  // to end as soon as they move.
  TreeEnd end = endedForCheckpoint_ ? TreeEnd::checkpoint : TreeEnd::planned;
  endedForCheckpoint_ = false;
  if (treeHeld_ && treeHasBalls_ && builtCalls_ < treeSteps_) end = TreeEnd::other;
  bool holds = reuseTree(particles, report, mayDriftOnEngine, end);
  if (!holds && copyDifferedLate_) {
    // The engine's copy was not the caller's bodies, as found once the caller's drift was made beside the evaluation:
    // as where it is found before, the host's pass and the positions (the forces an engine that reads them gives).
    holds = reuseTree(particles, report, false, end);
  }
  if (holds) {
    const Stopwatch repairing;
    addEscapedPulls(particles);
    report.timings[Phase::repair] += repairing.seconds();
    report.numBodiesEscaped = escaped_.size();
    stats_.bodiesEscaped = escaped_.size();
  } else {
    runPendingDrift();
    escaped_.clear();
    stats_.bodiesEscaped = 0;
    requireInsideBox(particles, gravity_.periodic.boxSize);
    const std::uint32_t steps = params_.reuse != 0 ? params_.reuse : periodicAutoReuse(engine_.evaluatesOnDevice());
    buildAndEvaluate(particles, steps, report);
    report.treeEnd = end;
    report.plannedCalls = treeSteps_;
  }
  clearUnwantedPotentials(particles);
  report.timings.totalSeconds = total.seconds();
  return report;
}

bool PeriodicTreeSolver::reuseTree(Particles& particles, ForceReport& report, bool onEngine, TreeEnd& end) {
  const Stopwatch checking;
  bool holds = false;
  copyDifferedLate_ = false;
  const auto maxEscaped = static_cast<std::uint32_t>(escapedMaxBodies(particles.size()));
  // Where the engine keeps its copy of the bodies and their balls, it drifts the copy and finds the bodies outside
  // their balls itself: no pass over the bodies on the host (their ids are compared beside the kernels).
  driftedOnEngine_ = false;
  if (onEngine) {
    BodyUpdate update = driftUpdate(particles);
    update.positionsPending = driftPending();
    const DriftCheck check = engine_.driftResident(particles.sources(), update, maxEscaped);
    if (check.mismatch) {
      // The copy was not the caller's bodies: the host's pass below, and the positions go over.
      mirrorValid_ = false;
      report.advanceMismatch = true;
      stats_.advanceMismatch = true;
    } else {
      driftedOnEngine_ = true;
      escaped_ = check.outside;
      pathsStored_ = false;
      holds = check.numOutside <= maxEscaped;
      if (!holds && treeHasBalls_) end = TreeEnd::escaped;
    }
  }
  // Else treeHolds' pass, which finds a body outside the box too (then the tree does not hold): a pass fewer on reused
  // calls. Where the engine drifts its own copy of the bodies this call, it continues their paths itself: the pass
  // writes none.
  if (!driftedOnEngine_) {
    runPendingDrift();
    holds = treeHolds(particles, !(mirrorValid_ && engineMayDrift()));
  }
  // A few bodies outside their balls keep the tree: their pulls are added exactly (addEscapedPulls); more than the
  // budget's worth of bodies near them make the call build anew.
  if (holds && !escaped_.empty()) {
    holds = escaped_.size() <= maxEscaped && prepareEscaped(particles);
    if (!holds && treeHasBalls_) end = escaped_.size() > maxEscaped ? TreeEnd::escaped : TreeEnd::crowded;
  }
  report.timings[Phase::motion] += checking.seconds();
  // Computes the escaped bodies' pulls while the engine evaluates; false where the bodies' ids, compared there too
  // after the engine's check of the balls, are not the tree's (the call then builds anew), or the copy was not theirs.
  if (holds) {
    holds = reuseAndEvaluate(particles, report);
    if (!holds) end = TreeEnd::other;
  }
  return holds;
}

bool PeriodicTreeSolver::sameBodiesAsBuilt(const Particles& particles) const {
  const std::size_t n = particles.size();
  if (builtIds_.size() != n) return false;
  return tbb::parallel_reduce(
      tbb::blocked_range<std::size_t>(0, n, kBodiesPerTask), true,
      [&](const tbb::blocked_range<std::size_t>& r, bool same) {
        for (std::size_t i = r.begin(); same && i != r.end(); ++i) same = particles.id[i] == builtIds_[i];
        return same;
      },
      [](bool a, bool b) { return a && b; });
}

bool PeriodicTreeSolver::treeHolds(const Particles& particles, bool storePaths) {
  const std::size_t n = particles.size();
  escaped_.clear();
  pathsStored_ = false;
  if (!treeHeld_ || builtCalls_ >= treeSteps_ || builtIds_.size() != n) return false;
  // One pass: the ids, the balls, and (storePaths) each body where its path continues from the build. Bodies outside
  // their balls are collected (escaped_), not a reason to stop: addEscapedPulls may keep the tree for them.
  pathX_.resize(n);
  pathY_.resize(n);
  pathZ_.resize(n);
  const double box = gravity_.periodic.boxSize;
  const auto inside = [box](double c) { return c >= 0.0 && c < box; };  // false for NaN
  tbb::enumerable_thread_specific<std::vector<std::uint32_t>> outside;
  const bool fits = tbb::parallel_reduce(
      tbb::blocked_range<std::size_t>(0, n, kBodiesPerTask), true,
      [&](const tbb::blocked_range<std::size_t>& r, bool holds) {
        std::vector<std::uint32_t>* mine = nullptr;
        for (std::size_t i = r.begin(); holds && i != r.end(); ++i) {
          double dx, dy, dz;
          const double px = continuedPath(particles.x[i], builtX_[i], box, dx);
          const double py = continuedPath(particles.y[i], builtY_[i], box, dy);
          const double pz = continuedPath(particles.z[i], builtZ_[i], box, dz);
          if (storePaths) {
            pathX_[i] = px;
            pathY_[i] = py;
            pathZ_[i] = pz;
          }
          const double ball = sortedRadius_[i];
          holds = particles.id[i] == builtIds_[i] && inside(particles.x[i]) && inside(particles.y[i]) &&
                  inside(particles.z[i]);
          if (holds && !(dx * dx + dy * dy + dz * dz <= ball * ball)) {
            if (mine == nullptr) mine = &outside.local();
            mine->push_back(static_cast<std::uint32_t>(i));
          }
        }
        return holds;
      },
      [](bool a, bool b) { return a && b; });
  if (!fits) return false;
  for (const std::vector<std::uint32_t>& some : outside) escaped_.insert(escaped_.end(), some.begin(), some.end());
  std::sort(escaped_.begin(), escaped_.end());
  pathsStored_ = storePaths;
  return true;
}

void PeriodicTreeSolver::pathOf(const Particles& particles, std::uint32_t i, double* where) const {
  if (pathsStored_) {
    where[0] = pathX_[i];
    where[1] = pathY_[i];
    where[2] = pathZ_[i];
    return;
  }
  const double box = gravity_.periodic.boxSize;
  double moved;
  where[0] = continuedPath(particles.x[i], builtX_[i], box, moved);
  where[1] = continuedPath(particles.y[i], builtY_[i], box, moved);
  where[2] = continuedPath(particles.z[i], builtZ_[i], box, moved);
}

void PeriodicTreeSolver::storePaths(const Particles& particles) {
  const std::size_t n = particles.size();
  const double box = gravity_.periodic.boxSize;
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n, kBodiesPerTask),
                    [&](const tbb::blocked_range<std::size_t>& r) {
                      double moved;
                      for (std::size_t i = r.begin(); i != r.end(); ++i) {
                        pathX_[i] = continuedPath(particles.x[i], builtX_[i], box, moved);
                        pathY_[i] = continuedPath(particles.y[i], builtY_[i], box, moved);
                        pathZ_[i] = continuedPath(particles.z[i], builtZ_[i], box, moved);
                      }
                    });
  for (std::size_t k = 0; k < escaped_.size(); ++k) {
    const std::uint32_t i = escaped_[k];
    pathX_[i] = escapedClamped_[3 * k];
    pathY_[i] = escapedClamped_[3 * k + 1];
    pathZ_[i] = escapedClamped_[3 * k + 2];
  }
  pathsStored_ = true;
}

void PeriodicTreeSolver::escapedNeighbours(const double* point, double radius, std::vector<BodyRange>& ranges) const {
  ranges.clear();
  const double box = gravity_.periodic.boxSize;
  const double radius2 = radius * radius;
  std::vector<std::uint32_t> stack{0};
  while (!stack.empty()) {
    const std::uint32_t cell = stack.back();
    stack.pop_back();
    // Every body of the cell lies, anywhere in its ball, within the cube of halfExtent about the cell's centre.
    const double* centre = &tree_.centre[3 * cell];
    const double half = tree_.halfExtent[cell];
    if (periodicDistanceToBox2(point[0], point[1], point[2], centre[0], centre[1], centre[2], half, half, half, box) >=
        radius2) {
      continue;
    }
    if (tree_.isLeaf(cell)) {
      const BodyRange bodies = tree_.bodies[cell];
      if (!ranges.empty() && ranges.back().last == bodies.first) {
        ranges.back().last = bodies.last;
      } else {
        ranges.push_back(bodies);
      }
      continue;
    }
    // Children pushed last to first: visited first to last, so that the ranges come in the bodies' order.
    for (std::uint32_t k = tree_.numChildren[cell]; k-- > 0;) stack.push_back(tree_.firstChild[cell] + k);
  }
}

bool PeriodicTreeSolver::prepareEscaped(const Particles& particles) {
  const std::size_t n = particles.size();
  const double cut = gravity_.periodic.cutoffRadius;
  escapedTrue_.resize(3 * escaped_.size());
  escapedClamped_.resize(3 * escaped_.size());
  escapedRanges_.resize(escaped_.size());
  tbb::parallel_for(std::size_t{0}, escaped_.size(), [&](std::size_t k) {
    const std::uint32_t i = escaped_[k];
    double* where = &escapedTrue_[3 * k];
    double* clamped = &escapedClamped_[3 * k];
    if (driftPending()) {
      // The caller's positions are not drifted yet (computeForces): this body's, as its drift will make it.
      const BodyDrift& drift = *bodyDrift();
      const double box = gravity_.periodic.boxSize;
      double moved;
      where[0] = continuedPath(driftedCoordinate(particles.x[i], particles.vx[i], drift), builtX_[i], box, moved);
      where[1] = continuedPath(driftedCoordinate(particles.y[i], particles.vy[i], drift), builtY_[i], box, moved);
      where[2] = continuedPath(driftedCoordinate(particles.z[i], particles.vz[i], drift), builtZ_[i], box, moved);
    } else {
      pathOf(particles, i, where);
    }
    // On its ball's surface (just within it, against rounding), along its path from the build: where the tree's lists
    // hold for it.
    const double moved[3] = {where[0] - builtX_[i], where[1] - builtY_[i], where[2] - builtZ_[i]};
    const double distance = std::sqrt(moved[0] * moved[0] + moved[1] * moved[1] + moved[2] * moved[2]);
    const double scale = kEscapedClampShrink * double(sortedRadius_[i]) / distance;
    const double built[3] = {builtX_[i], builtY_[i], builtZ_[i]};
    for (int d = 0; d < 3; ++d) clamped[d] = built[d] + moved[d] * scale;
    // One query holds both places: every body within r_cut of either lies within r_cut + their distance of the first.
    escapedNeighbours(where, cut + distance * (1.0 - scale), escapedRanges_[k]);
  });
  std::uint64_t candidates = 0;
  for (const std::vector<BodyRange>& ranges : escapedRanges_) {
    for (const BodyRange& range : ranges) candidates += range.size();
  }
  const std::uint64_t budget = std::max<std::uint64_t>(kEscapedMinBudget, std::uint64_t(kEscapedBudget * double(n)));
  if (candidates > budget) return false;
  for (std::size_t k = 0; pathsStored_ && k < escaped_.size(); ++k) {
    const std::uint32_t i = escaped_[k];
    pathX_[i] = escapedClamped_[3 * k];
    pathY_[i] = escapedClamped_[3 * k + 1];
    pathZ_[i] = escapedClamped_[3 * k + 2];
  }
  return true;
}

void PeriodicTreeSolver::computeEscapedPulls(const Particles& particles) {
  const std::size_t numEscaped = escaped_.size();
  escapedOwn_.assign(numEscaped, Pull{});
  // Each range's first slot in escapedChanges_, escaped body after escaped body.
  escapedFirstRange_.assign(numEscaped + 1, 0);
  escapedRangeSlot_.assign(1, 0);
  for (std::size_t k = 0; k < numEscaped; ++k) {
    for (const BodyRange& range : escapedRanges_[k])
      escapedRangeSlot_.push_back(escapedRangeSlot_.back() + range.size());
    escapedFirstRange_[k + 1] = escapedRangeSlot_.size() - 1;
  }
  escapedChanges_.resize(escapedRangeSlot_.back());
  if (numEscaped == 0) return;
  const double box = gravity_.periodic.boxSize;
  const double eps2 = gravity_.eps2();
  const double invTwoSplit = 0.5 / gravity_.periodic.splitRadius;
  const double cut2 = gravity_.periodic.cutoffRadius * gravity_.periodic.cutoffRadius;
  const double G = gravity_.G;
  const std::vector<double>& mass = particles.mass;
  // The engine's places: each body's path (pathOf), the escaped bodies' clamped places; their true places are
  // escapedTrue_.
  const auto isEscaped = [&](std::uint32_t j) { return std::binary_search(escaped_.begin(), escaped_.end(), j); };
  // With block time steps only the bodies whose steps end here need their forces right (ForceSolver::
  // setLowestActiveBin): the others' are not read before a later call computes them again.
  const std::uint8_t lowest = particles.timeBin.size() == particles.size() ? lowestActiveBin() : 0;
  const auto needed = [&](std::uint32_t i) { return lowest == 0 || particles.timeBin[i] >= lowest; };
  const auto pullOn = [&](const double* at, const double* from, double m, Pull& pull) {
    accumulateTruncatedPairInteraction<double>(nearestImage(from[0] - at[0], box), nearestImage(from[1] - at[1], box),
                                               nearestImage(from[2] - at[2], box), m, eps2, invTwoSplit, cut2, pull.ax,
                                               pull.ay, pull.az, pull.pot);
  };
  // Every escaped body, and each one's ranges (leaves, most of a few dozen bodies) shared out whole: a task per range
  // would cost more than its pairs. Each result has a slot of its own: the same sums whatever the thread count.
  tbb::parallel_for(std::size_t{0}, numEscaped, [&](std::size_t k) {
    const std::uint32_t e = escaped_[k];
    const double* where = &escapedTrue_[3 * k];
    const double* clamped = &escapedClamped_[3 * k];
    const std::vector<BodyRange>& ranges = escapedRanges_[k];
    // Its own force: the truncated pull of every body within r_cut of where it is (the short range has no other part),
    // each from the engine's place of that body (the others escaped at their true places).
    if (needed(e)) {
      Pull sum;
      for (const BodyRange& range : ranges) {
        for (std::uint32_t j = range.first; j < range.last; ++j) {
          if (j == e || isEscaped(j)) continue;
          double from[3];
          pathOf(particles, j, from);
          pullOn(where, from, mass[j], sum);
        }
      }
      for (std::size_t other = 0; other < numEscaped; ++other) {
        if (other != k) pullOn(where, &escapedTrue_[3 * other], mass[escaped_[other]], sum);
      }
      escapedOwn_[k] = sum;
    }
    // The other bodies felt it at its clamped place: that pull out, its pull from its true place in.
    const std::size_t* rangeSlot = &escapedRangeSlot_[escapedFirstRange_[k]];
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, ranges.size(), kEscapedRangesPerTask),
                      [&](const tbb::blocked_range<std::size_t>& some) {
                        for (std::size_t r = some.begin(); r != some.end(); ++r) {
                          Pull* change = &escapedChanges_[rangeSlot[r]];
                          for (std::uint32_t i = ranges[r].first; i < ranges[r].last; ++i, ++change) {
                            if (i == e || !needed(i) || isEscaped(i)) continue;
                            double at[3];
                            pathOf(particles, i, at);
                            Pull added, removed;
                            pullOn(at, where, mass[e], added);
                            pullOn(at, clamped, mass[e], removed);
                            *change = Pull{G * (added.ax - removed.ax), G * (added.ay - removed.ay),
                                           G * (added.az - removed.az), G * (added.pot - removed.pot)};
                          }
                        }
                      });
  });
}

void PeriodicTreeSolver::addEscapedPulls(Particles& particles) const {
  if (escaped_.empty()) return;
  MATCHA_ASSERT(escapedFirstRange_.size() == escaped_.size() + 1, "escaped bodies' pulls added before computed");
  const ForceView out = forcesToWrite(particles);
  const double G = gravity_.G;
  const auto isEscaped = [&](std::uint32_t j) { return std::binary_search(escaped_.begin(), escaped_.end(), j); };
  const std::uint8_t lowest = particles.timeBin.size() == particles.size() ? lowestActiveBin() : 0;
  const auto needed = [&](std::uint32_t i) { return lowest == 0 || particles.timeBin[i] >= lowest; };
  // One escaped body at a time (a body near two gets their changes in their order); its bodies are distinct, so one
  // with many is shared out.
  for (std::size_t k = 0; k < escaped_.size(); ++k) {
    const std::uint32_t e = escaped_[k];
    const std::vector<BodyRange>& ranges = escapedRanges_[k];
    const std::size_t* rangeSlot = &escapedRangeSlot_[escapedFirstRange_[k]];
    const auto add = [&](std::size_t firstRange, std::size_t endRange) {
      for (std::size_t r = firstRange; r != endRange; ++r) {
        std::size_t slot = rangeSlot[r];
        for (std::uint32_t i = ranges[r].first; i < ranges[r].last; ++i, ++slot) {
          if (i == e || !needed(i) || isEscaped(i)) continue;
          const Pull& change = escapedChanges_[slot];
          out.ax[i] += change.ax;
          out.ay[i] += change.ay;
          out.az[i] += change.az;
          if (out.pot != nullptr) out.pot[i] += change.pot;
        }
      }
    };
    if (rangeSlot[ranges.size()] - rangeSlot[0] < kEscapedSerialBodies) {
      add(0, ranges.size());
      continue;
    }
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, ranges.size(), kEscapedRangesPerTask),
                      [&](const tbb::blocked_range<std::size_t>& some) { add(some.begin(), some.end()); });
  }
  for (std::size_t k = 0; k < escaped_.size(); ++k) {
    const std::uint32_t e = escaped_[k];
    if (!needed(e)) continue;
    out.ax[e] = G * escapedOwn_[k].ax;
    out.ay[e] = G * escapedOwn_[k].ay;
    out.az[e] = G * escapedOwn_[k].az;
    if (out.pot != nullptr) out.pot[e] = G * escapedOwn_[k].pot;
  }
}

std::uint32_t PeriodicTreeSolver::ballRadii(const Particles& particles, std::uint32_t steps,
                                            std::vector<float>& radius) const {
  const std::size_t n = particles.size();
  if (steps <= 1 || !motionKnown_ || builtCalls_ == 0 || !sameBodiesAsBuilt(particles)) return 0;
  const double box = gravity_.periodic.boxSize;
  const double perCall = 1.0 / double(builtCalls_);
  // Each body's mean displacement per call since the last build.
  const auto speed = [&](std::size_t i) {
    const double dx = nearestImage(particles.x[i] - builtX_[i], box);
    const double dy = nearestImage(particles.y[i] - builtY_[i], box);
    const double dz = nearestImage(particles.z[i] - builtZ_[i], box);
    return static_cast<float>(perCall * std::sqrt(dx * dx + dy * dy + dz * dz));
  };
  // As many calls as keep the balls of all but the fastest kFastShare of the bodies within kLargestBall of r_cut
  // (the speed at that quantile from every stride-th body: the same bodies whatever the thread count).
  const std::size_t stride = std::max<std::size_t>(1, n / kSpeedSamples);
  std::vector<float> sample;
  sample.reserve(n / stride + 1);
  for (std::size_t i = 0; i < n; i += stride) sample.push_back(speed(i));
  const auto quantile = sample.begin() + static_cast<std::ptrdiff_t>((1.0 - kFastShare) * double(sample.size() - 1));
  std::nth_element(sample.begin(), quantile, sample.end());
  const double fast = *quantile;
  const double largestBall = kLargestBall * gravity_.periodic.cutoffRadius;
  std::uint32_t calls = steps;
  if (fast > 0.0) {
    calls =
        static_cast<std::uint32_t>(std::clamp(1.0 + std::floor(largestBall / (kBallRoom * fast)), 1.0, double(steps)));
  }
  if (calls == 1) return 1;  // a tree for this call alone needs no balls
  // The fastest bodies' balls are capped: one that outruns its cap ends the tree early (the call builds anew),
  // instead of a ball that would open every cell around it for every group.
  radius.resize(n);
  const float scale = static_cast<float>(kBallRoom * double(calls - 1));
  const auto cap = static_cast<float>(kBallCap * largestBall);
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n, kBodiesPerTask),
                    [&](const tbb::blocked_range<std::size_t>& r) {
                      for (std::size_t i = r.begin(); i != r.end(); ++i) radius[i] = std::min(speed(i) * scale, cap);
                    });
  return calls;
}

void PeriodicTreeSolver::buildAndEvaluate(Particles& particles, std::uint32_t steps, ForceReport& report) {
  const std::size_t n = particles.size();
  Stopwatch clock;
  const auto phaseDone = [&](Phase phase) {
    report.timings[phase] += clock.seconds();
    clock.restart();
  };
  // The balls come from the bodies' motion since the last build, in its order: before this call's sort. Without it
  // (the first tree, other bodies) they are points: the tree serves its next calls only if nothing moves, and the
  // next call builds one with balls.
  const std::uint32_t ballCalls = ballRadii(particles, steps, radius_);
  const bool balls = ballCalls > 1;
  const std::uint32_t treeCalls = ballCalls == 0 ? steps : ballCalls;
  phaseDone(Phase::motion);
  // The root is the periodic cube itself, not the bodies' bounding cube: cells then never straddle a face, so every
  // cell's bodies are one compact region whose nearest image is that of its centre of mass.
  Cube cube;
  cube.side = gravity_.periodic.boxSize;
  keys_.resize(n);
  sortedKeys_.resize(n);
  order_.resize(n);
  computeMortonKeys(particles.sources(), cube, std::span<std::uint64_t>(keys_));
  phaseDone(Phase::keys);
  {
    // The unsorted-bodies hook (TreePM's mesh start, its copy of the bodies) runs while the GPU sorts the keys, when
    // the cores mostly wait for the bus; its exception, if any, is the call's, and a throwing sort waits for it.
    std::future<void> unsortedRunning;
    if (unsortedHook_) {
      unsortedRunning = std::async(std::launch::async, [&] { unsortedHook_(particles.sources()); });
    }
    sortKeysOn(params_.sortOnDevice ? &engine_ : nullptr, sorter_, keys_, sortedKeys_, order_);
    if (unsortedRunning.valid()) unsortedRunning.get();
  }
  phaseDone(Phase::sort);
  // The octree needs the sorted keys alone: it is built beside the bodies' permutation, memory-bound passes sharing
  // the cores. The 2^24 clumps call (H200 host) spent ~40 ms on the permutation, 15 on the hook (TreePM's mesh start)
  // and 20 on the octree one after another.
  double permuteSeconds = 0.0, octreeSeconds = 0.0;
  // Where every body gets new forces in this call (no block time steps' inactive bodies, which keep theirs), the old
  // ones are not carried along, only their magnitudes for the relative test.
  const bool someActive = lowestActiveBin() > 0 && particles.timeBin.size() == n;
  // Such a call reads only the bodies' positions and masses until its walk is done: their velocities, ids and time
  // bins go into the new order while the host waits for the engine's last kernels (whileLastBatchRuns), ~40% of the
  // permutation's memory traffic off the host's part of the call. A call that ends early moves them as it leaves, so
  // the caller never sees its bodies half sorted.
  DeferredMotionPermutation motionPermutation(permuter_);
  tbb::parallel_invoke(
      [&] {
        const Stopwatch permuting;
        if (someActive) {
          permuter_.permute(particles, order_);
        } else {
          permuter_.permuteSources(particles, order_, sortedAccelMagnitudes_);
          motionPermutation.defer(particles, order_);
        }
        if (treeCalls > 1) {
          sortedRadius_.resize(n);
          tbb::parallel_for(std::size_t{0}, n,
                            [&](std::size_t k) { sortedRadius_[k] = balls ? radius_[order_[k]] : 0.0f; });
        }
        permuteSeconds = permuting.seconds();
      },
      [&] {
        const Stopwatch building;
        buildOctree(sortedKeys_, cube, params_.nleaf, tree_);
        octreeSeconds = building.seconds();
      });
  // Each phase its own time (they overlap); the hook's is the caller's. The deferred part of the permutation counts
  // in the sort phase too, though it runs beside the engine's kernels.
  const auto permuteMotion = [&] { report.timings[Phase::sort] += motionPermutation.run(); };
  report.timings[Phase::sort] += permuteSeconds;
  report.timings[Phase::octree] += octreeSeconds;
  // The hook (TreePM: the sort's order to the mesh started before the call, which then gathers its results on the
  // GPU; the mesh's start here took ~15 ms of a 2^24 call) runs beside the multipoles and groups, which read the
  // bodies too; it is done before anything writes their forces. (A future from std::async waits for its thread when
  // destroyed: an exception thrown here leaves no hook running.)
  std::future<void> hookRunning;
  if (sortedHook_) hookRunning = std::async(std::launch::async, [&] { sortedHook_(particles.sources(), order_); });
  clock.restart();
  computeMultipoles(particles.sources(), params_.theta, params_.multipole, tree_,
                    balls ? sortedRadius_.data() : nullptr);
  phaseDone(Phase::multipoles);
  // A tree for several calls is handed to the engine anyway (resident lists): the sequential walk's plan is then
  // evaluated there, this call too, so that its lists cross to the GPU once, not twice (evaluatePlan, then the
  // hand-over). The batches of an overlapped walk are evaluated as they are walked. With block time steps the walk is
  // sequential too, and the engine evaluates the active bodies' groups alone (findActiveGroups).
  const bool evaluateResident = treeCalls > 1 && (!params_.overlapWalk || someActive);
  const ForceView out = forcesToWrite(particles);
  // An engine on a device takes the bodies and cells (an empty first batch) on another thread while the cores make
  // the groups: the first lists of a 2^24 call waited ~20 ms for them (H200). With an estimate pass first, they are
  // that pass's, and the call's own pass sends them again.
  std::future<EngineTimings> bodiesSent;
  if (!evaluateResident && engine_.evaluatesOnDevice()) {
    bodiesSent = std::async(std::launch::async, [&] {
      engine_.evaluatePlanBatch(particles.sources(), tree_.multipoles, noGroups_, gravity_, out,
                                PlanBatch{true, false});
      return engine_.lastTimings();
    });
  }
  makeGroups(tree_, particles.sources(), params_.ncrit, groups_);
  if (balls) setGroupBoxesOfBalls(particles.sources(), sortedRadius_.data(), groups_);
  bool tolerancesSet = someActive ? setRelativeTolerances(particles, params_.alpha, gravity_.G, groups_)
                                  : setRelativeTolerances(std::span<const double>(sortedAccelMagnitudes_),
                                                          params_.alpha, gravity_.G, groups_);
  buildWalkTree(tree_, walkTree_, gravity_.periodic);
  phaseDone(Phase::groups);
  if (hookRunning.valid()) hookRunning.get();  // its exception, if any, is the call's

  if (!tolerancesSet && params_.alpha > 0.0) {
    // No accelerations yet (fresh initial conditions): a first pass with theta alone gives the |a| that the relative
    // test scales by, as the open-boundary solver's estimate pass does; its walk and evaluation count as the estimate.
    const Stopwatch estimate;
    walkAndEvaluate(particles, out, report, true, false, &bodiesSent, permuteMotion);
    tolerancesSet = setRelativeTolerances(particles, params_.alpha, gravity_.G, groups_);
    for (const Phase phase : {Phase::walk, Phase::upload, Phase::kernels, Phase::download}) report.timings[phase] = 0.0;
    report.timings.engineWaitSeconds = 0.0;
    report.timings[Phase::estimate] += estimate.seconds();
  }
  // The caller's addend (TreePM's long range) goes to the engine with the last batch of lists, where the engine adds
  // it as it copies out the batches' forces: not into a tree's resident lists, nor where some bodies keep their forces.
  const bool takeAddend = addendProvider_ && engine_.addsForceAddend() && !evaluateResident && !someActive;
  const ListTotals lists = walkAndEvaluate(particles, out, report, !evaluateResident, evaluateResident, &bodiesSent,
                                           permuteMotion, takeAddend);
  permuteMotion();  // a no-op after every pass, which runs it; here so that nothing below can read half-sorted bodies

  clock.restart();
  treeSteps_ = treeCalls;
  builtCalls_ = 1;
  // The engine keeps a tree's lists for the calls after only within TreeParams::maxBatchEntries (the CUDA engine's
  // arenas index 32 bits): a tree whose lists hold more serves this call alone, and the next call builds anew.
  treeHeld_ = treeCalls > 1 && lists.bodies + lists.cells <= params_.maxBatchEntries;
  if (evaluateResident && !treeHeld_) evaluateWalkedPlan(particles, out, report);
  treeHasBalls_ = balls;
  motionKnown_ = steps > 1;  // also under a tree for one call: the next tree's balls need the bodies' speeds
  // The places and ids at the build, which the next calls' balls and checks read (not this call's evaluation): made
  // beside the kernels where the engine evaluates the resident lists now.
  const auto keepBuildPositions = [&] {
    if (!motionKnown_) return;
    const Stopwatch copying;
    // On every core: one core's copies took ~60 ms of a 2^24 call (H200 host).
    builtX_.resize(n);
    builtY_.resize(n);
    builtZ_.resize(n);
    builtIds_.resize(n);
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n, kBodiesPerTask),
                      [&](const tbb::blocked_range<std::size_t>& r) {
                        for (std::size_t i = r.begin(); i != r.end(); ++i) {
                          builtX_[i] = particles.x[i];
                          builtY_[i] = particles.y[i];
                          builtZ_[i] = particles.z[i];
                          builtIds_[i] = particles.id[i];
                        }
                      });
    report.timings[Phase::motion] += copying.seconds();
  };
  const bool evaluateNow = treeHeld_ && evaluateResident;
  if (!evaluateNow) {
    keepBuildPositions();
    clock.restart();
  }
  if (treeHeld_) {
    handTreeToEngine(particles);
    phaseDone(Phase::upload);
  }
  if (evaluateNow) {
    // At the build every body's path is its position: the engine keeps the bodies and their velocities as its copy
    // where the caller says how they move (driftUpdate, the calls after).
    const bool subset = findActiveGroups(particles);
    evaluateResidentLists(particles, particles.sources(), out, report,
                          subset ? std::span<const std::uint32_t>(activeGroups_) : std::span<const std::uint32_t>{},
                          copyForDrift(particles), keepBuildPositions);
  }
  if (!treeHeld_ || !evaluateResident) mirrorValid_ = false;  // the bodies were sorted, and no launch kept them

  stats_ = TreeStats{};
  stats_.numBodies = n;
  stats_.numCells = tree_.numCells();
  stats_.numLeaves = stats_.numCells - (walkTree_.blocks.size() - 1);  // a cell with children owns one block
  stats_.depth = tree_.numLevels() - 1;
  stats_.numGroups = groups_.size();
  stats_.meanGroupSize = double(n) / double(groups_.size());
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    stats_.maxGroupSize = std::max<std::uint64_t>(stats_.maxGroupSize, groups_.ranges[g].size());
  }
  stats_.meanListBodies = double(lists.bodies) / double(groups_.size());
  stats_.meanListCells = double(lists.cells) / double(groups_.size());
  stats_.maxListBodies = lists.maxBodies;
  stats_.maxListCells = lists.maxCells;
  stats_.numBatches = lists.batches;
  stats_.estimatePass = report.timings[Phase::estimate] > 0.0;
  stats_.reuseSteps = treeCalls;
  stats_.callsOnTree = 1;
  report.rebuilt = true;
  report.numGroupsWalked = groups_.size();
}

void PeriodicTreeSolver::handTreeToEngine(const Particles& particles) {
  fillTopology(tree_, groups_, params_, topology_);  // its relative tolerances unread: periodic lists are unchecked
  topology_.order.clear();                           // the call sorted the caller's bodies into the tree's order
  engine_.setTree(topology_, particles.sources());
  if (planJoined_) {
    engine_.setLists(plan_);
  } else {
    for (std::size_t k = 0; k < numBatches_; ++k) engine_.setLists(batches_[k]);
  }
}

void PeriodicTreeSolver::evaluateWalkedPlan(const Particles& particles, const ForceView& out, ForceReport& report) {
  const InteractionCounts counts = engine_.evaluatePlan(particles.sources(), tree_.multipoles, plan_, gravity_, out);
  addEvaluation(counts, engine_.lastTimings(), report);
}

void PeriodicTreeSolver::evaluateResidentLists(const Particles& particles, const SourceView& positions,
                                               const ForceView& out, ForceReport& report,
                                               std::span<const std::uint32_t> groups, const BodyUpdate& update,
                                               const std::function<void()>& beside) {
  BodyUpdate launch = update;
  if (!groups.empty() && particles.timeBin.size() == particles.size()) {
    // Of the groups, only the bodies whose steps end here need forces (findActiveGroups).
    launch.timeBin = particles.timeBin.data();
    launch.lowestActiveBin = lowestActiveBin();
  }
  engine_.launchResident(positions, gravity_, out, groups, launch);
  if (beside) beside();
  const Stopwatch waiting;
  const ResidentResult result = engine_.finishResident();
  report.timings.engineWaitSeconds += waiting.seconds();
  MATCHA_ASSERT(result.failedGroups.empty(), "the engine checked periodic lists");
  addEvaluation(result.counts, result.timings, report);
  // The engine's copy (kept by a launch with velocities, drifted since) is the caller's only while every launch on it
  // vouched for it and its sample agreed.
  mirrorValid_ = (update.motion == BodyMotion::moved && update.vx != nullptr) ||
                 (update.motion == BodyMotion::drifted && !result.advanceMismatch);
  stats_.advancedOnDevice = update.motion == BodyMotion::drifted && !result.advanceMismatch;
  if (update.motion == BodyMotion::drifted && result.advanceMismatch) stats_.advanceMismatch = true;
}

bool PeriodicTreeSolver::engineMayDrift() const {
  return params_.advanceOnDevice && engine_.advancesBodies() && bodyDrift().has_value() &&
         bodyDrift()->boxSize == gravity_.periodic.boxSize;
}

BodyUpdate PeriodicTreeSolver::copyForDrift(const Particles& particles) const {
  BodyUpdate update(BodyMotion::moved);
  if (engineMayDrift()) {
    update.vx = particles.vx.data();
    update.vy = particles.vy.data();
    update.vz = particles.vz.data();
    // Each body's ball about where it is, for the engine's own check at the calls after (driftResident).
    if (engine_.checksBalls() && sortedRadius_.size() == particles.size()) update.ballRadius = sortedRadius_.data();
  }
  return update;
}

BodyUpdate PeriodicTreeSolver::driftUpdate(const Particles& particles) {
  MATCHA_ASSERT(mirrorValid_ && engineMayDrift(), "a drifted launch without the engine's copy of the bodies");
  BodyUpdate update(BodyMotion::drifted);
  const BodyDrift& drift = *bodyDrift();
  const std::size_t n = particles.size();
  update.drift = drift;
  update.vx = particles.vx.data();
  update.vy = particles.vy.data();
  update.vz = particles.vz.data();
  update.kickedAll = drift.kickedFrom == 0 || particles.timeBin.size() != n;
  if (!update.kickedAll) {
    // The kicked bodies in ascending order (each block's in turn), on every core.
    const std::size_t blocks = (n + kBodiesPerTask - 1) / kBodiesPerTask;
    kickedCounts_.assign(blocks + 1, 0);
    tbb::parallel_for(std::size_t{0}, blocks, [&](std::size_t b) {
      std::uint32_t count = 0;
      for (std::size_t i = b * kBodiesPerTask; i < std::min(n, (b + 1) * kBodiesPerTask); ++i) {
        count += particles.timeBin[i] >= drift.kickedFrom ? 1 : 0;
      }
      kickedCounts_[b + 1] = count;
    });
    for (std::size_t b = 0; b < blocks; ++b) kickedCounts_[b + 1] += kickedCounts_[b];
    kicked_.resize(kickedCounts_[blocks]);
    tbb::parallel_for(std::size_t{0}, blocks, [&](std::size_t b) {
      std::uint32_t* to = kicked_.data() + kickedCounts_[b];
      for (std::size_t i = b * kBodiesPerTask; i < std::min(n, (b + 1) * kBodiesPerTask); ++i) {
        if (particles.timeBin[i] >= drift.kickedFrom) *to++ = static_cast<std::uint32_t>(i);
      }
    });
    update.kicked = kicked_;
  }
  // The bodies outside their balls, evaluated on their surfaces (prepareEscaped).
  update.placed = escaped_;
  update.placedPoints = escapedClamped_.data();
  return update;
}

bool PeriodicTreeSolver::reuseAndEvaluate(Particles& particles, ForceReport& report) {
  // The engine refits its copy of the tree to the paths (on the GPU: the host refit and the upload of cells and lists
  // took ~110 ms of a 2^24-body call on the H200's host) and evaluates the lists it keeps.
  // With block time steps, only the groups whose bodies' steps end here: the engine refits every cell to the paths
  // (all bodies moved) but evaluates and returns those groups' lists alone.
  const bool subset = findActiveGroups(particles);
  const std::span<const std::uint32_t> groups =
      subset ? std::span<const std::uint32_t>(activeGroups_) : std::span<const std::uint32_t>{};
  const ForceView out = forcesToWrite(particles);
  // The escaped bodies' pulls (Phase::repair) on the host while the engine evaluates: they read the bodies' places,
  // which the launches do not change, and are added once the engine's forces are in (addEscapedPulls).
  bool repairComputed = false;
  bool sameBodies = true;
  const auto repairBeside = [&] {
    if (repairComputed) return;
    runPendingDrift();  // the engine drifted its copy already: the host's positions now, for the pulls below
    if (driftedOnEngine_) {
      const Stopwatch checking;
      sameBodies = sameBodiesAsBuilt(particles);
      report.timings[Phase::motion] += checking.seconds();
    }
    const Stopwatch repairing;
    computeEscapedPulls(particles);
    report.timings[Phase::repair] += repairing.seconds();
    repairComputed = true;
  };
  if (driftedOnEngine_) {
    // The engine drifted its copy and checked the balls (driftResident): the escaped bodies' places, then the refit.
    BodyUpdate update(BodyMotion::drifted);
    update.drift = *bodyDrift();
    update.driftedBefore = true;
    update.placed = escaped_;
    update.placedPoints = escapedClamped_.data();
    evaluateResidentLists(particles, particles.sources(), out, report, groups, update, repairBeside);
    if (!sameBodies || !mirrorValid_) {
      // Other bodies (the call builds anew), or, where the caller drifted its positions beside the evaluation, a copy
      // that was not theirs (computeForces tries the host's pass).
      copyDifferedLate_ = sameBodies;
      report.advanceMismatch = report.advanceMismatch || sameBodies;
      mirrorValid_ = false;
      return false;
    }
    report.advancedOnDevice = true;
  } else if (!pathsStored_) {
    // Where the caller says how the bodies moved, an engine with its own copy of them drifts it and continues the
    // paths itself: the kicked bodies' velocities cross the bus instead of every position (at 2^24 bodies, 400 MB a
    // call), checked against the bodies as they are (in the box).
    evaluateResidentLists(particles, particles.sources(), out, report, groups, driftUpdate(particles), repairBeside);
    report.advancedOnDevice = mirrorValid_;
    report.advanceMismatch = !mirrorValid_;
    // A copy that was not the caller's bodies (moved otherwise than the word said) gave forces that are not theirs:
    // the paths go over and the lists are evaluated again.
    if (!mirrorValid_) storePaths(particles);
  }
  if (pathsStored_) {
    const SourceView path{pathX_.data(), pathY_.data(), pathZ_.data(), particles.mass.data(), particles.size()};
    evaluateResidentLists(particles, path, out, report, groups, BodyMotion::moved, repairBeside);
  }
  ++builtCalls_;
  stats_.callsOnTree = static_cast<std::uint32_t>(builtCalls_);
  stats_.estimatePass = false;
  return true;
}

bool PeriodicTreeSolver::findActiveGroups(const Particles& particles) {
  const std::uint8_t lowest = lowestActiveBin();
  if (lowest == 0 || particles.timeBin.size() != particles.size()) return false;
  const std::size_t numGroups = groups_.size();
  groupActive_.resize(numGroups);
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, numGroups, 64), [&](const tbb::blocked_range<std::size_t>& r) {
    for (std::size_t g = r.begin(); g != r.end(); ++g) {
      const BodyRange range = groups_.ranges[g];
      std::uint8_t active = 0;
      for (std::uint32_t i = range.first; i < range.last && active == 0; ++i) {
        active = particles.timeBin[i] >= lowest ? 1 : 0;
      }
      groupActive_[g] = active;
    }
  });
  activeGroups_.clear();
  for (std::uint32_t g = 0; g < numGroups; ++g) {
    if (groupActive_[g] != 0) activeGroups_.push_back(g);
  }
  return activeGroups_.size() < numGroups;
}

bool PeriodicTreeSolver::atCheckpointBoundary() const { return !treeHeld_ || builtCalls_ >= treeSteps_; }

bool PeriodicTreeSolver::endTreeForCheckpoint() {
  if (!atCheckpointBoundary()) {
    // As if the build had planned the calls served so far: the next call builds as after a planned end, from the same
    // state (builtCalls_, the build positions) that saveState writes and a restart restores.
    treeSteps_ = static_cast<std::uint32_t>(builtCalls_);
    endedForCheckpoint_ = true;
  }
  return true;
}

namespace {

constexpr const char* kStatePrefix = "periodic_tree.";

std::string stateName(const char* name) { return std::string(kStatePrefix) + name; }

}  // namespace

void PeriodicTreeSolver::saveState(CheckpointState& state) {
  MATCHA_ASSERT(atCheckpointBoundary(), "PeriodicTreeSolver::saveState between the calls of a tree");
  state.set(stateName("built_calls"), motionKnown_ ? double(builtCalls_) : 0.0);
  if (motionKnown_) {
    state.doubles[stateName("built_x")] = builtX_;
    state.doubles[stateName("built_y")] = builtY_;
    state.doubles[stateName("built_z")] = builtZ_;
  }
}

void PeriodicTreeSolver::restoreState(const CheckpointState& state, const Particles& particles) {
  treeHeld_ = false;
  mirrorValid_ = false;
  // A checkpoint of a run before periodic trees were reused keeps no state for them: the next tree's balls are points.
  builtCalls_ = state.scalars.count(stateName("built_calls")) != 0 ? state.count(stateName("built_calls")) : 0;
  motionKnown_ = builtCalls_ > 0;
  if (motionKnown_) {
    const auto bodyArray = [&](const char* name) -> const std::vector<double>& {
      const std::vector<double>& array = state.doubleArray(stateName(name));
      if (array.size() != particles.size()) {
        throw InputError("the checkpoint's " + stateName(name) + " has " + std::to_string(array.size()) +
                         " entries for " + std::to_string(particles.size()) + " bodies");
      }
      return array;
    };
    builtX_ = bodyArray("built_x");
    builtY_ = bodyArray("built_y");
    builtZ_ = bodyArray("built_z");
    builtIds_.assign(particles.id.begin(), particles.id.end());  // saved in the tree's order, as the bodies were
  } else {
    builtIds_.clear();
  }
}

}  // namespace matcha::tree
