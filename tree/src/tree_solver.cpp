// SPDX-License-Identifier: MIT
#include "matcha/tree/tree_solver.hpp"

#include <tbb/task_group.h>

#include <algorithm>
#include <cstdio>

#include "matcha/core/errors.hpp"
#include "matcha/core/stopwatch.hpp"
#include "matcha/tree/space_filling_curve.hpp"

namespace matcha::tree {

TreeSolver::TreeSolver(NearFieldEngine& engine, const TreeParams& treeParams, const GravityParams& gravity)
    : engine_(engine), params_(treeParams), gravity_(gravity) {
  params_.validate();
  gravity_.validate();
}

std::string TreeSolver::describe() const {
  char alpha[32] = "";
  if (params_.alpha > 0.0) std::snprintf(alpha, sizeof alpha, ", alpha %g", params_.alpha);
  char text[192];
  std::snprintf(text, sizeof text, "tree (theta %g%s, ncrit %u, nleaf %u, %s) on ", params_.theta, alpha, params_.ncrit,
                params_.nleaf, toString(params_.multipole).c_str());
  return text + engine_.name();
}

void TreeSolver::buildTree(Particles& particles, ForceTimings& timings) {
  if (particles.empty()) throw InputError("no bodies to compute forces for");
  if (particles.size() >= (std::size_t{1} << 31)) throw InputError("at most 2^31 - 1 bodies are supported");
  Stopwatch clock;
  const auto phaseDone = [&](Phase phase) {
    timings[phase] += clock.seconds();
    clock.restart();
  };
  const Cube cube = computeBoundingCube(particles.sources());
  computeMortonKeys(particles.sources(), cube, keys_);
  phaseDone(Phase::keys);
  sorter_.sort(keys_, sortedKeys_, order_);
  particles.permute(order_);
  phaseDone(Phase::sort);
  buildOctree(sortedKeys_, cube, params_.nleaf, tree_);
  phaseDone(Phase::octree);
  computeMultipoles(particles.sources(), params_.theta, params_.multipole, tree_);
  phaseDone(Phase::multipoles);
  makeGroups(tree_, particles.sources(), params_.ncrit, groups_);
  buildWalkTree(tree_, walkTree_);
  phaseDone(Phase::groups);

  stats_ = TreeStats{};
  stats_.numBodies = particles.size();
  stats_.numCells = tree_.numCells();
  stats_.numLeaves = static_cast<std::uint64_t>(std::count(tree_.numChildren.begin(), tree_.numChildren.end(), 0));
  stats_.depth = tree_.numLevels() - 1;
  stats_.numGroups = groups_.size();
  stats_.meanGroupSize = double(particles.size()) / double(groups_.size());
  for (const BodyRange& range : groups_.ranges)
    stats_.maxGroupSize = std::max<std::uint64_t>(stats_.maxGroupSize, range.size());
}

const InteractionPlan& TreeSolver::buildPlanOnly(Particles& particles) {
  ForceTimings unused;
  buildTree(particles, unused);
  setRelativeTolerances(particles, params_.alpha, gravity_.G, groups_);
  planBuilders_[0].build(walkTree_, groups_, 0, static_cast<std::uint32_t>(groups_.size()), plans_[0]);
  return plans_[0];
}

ForceReport TreeSolver::computeForces(Particles& particles) {
  Stopwatch total;
  ForceReport report;
  buildTree(particles, report.timings);
  report.rebuilt = true;
  report.numGroupsWalked = groups_.size();
  if (params_.alpha > 0.0 && !setRelativeTolerances(particles, params_.alpha, gravity_.G, groups_)) {
    // No accelerations to scale the relative test by (fresh initial conditions): get them with theta alone first,
    // as GADGET does on its first step.
    const Stopwatch estimate;
    ForceReport estimateReport;
    evaluateGroups(particles, estimateReport);
    report.counts += estimateReport.counts;
    report.timings[Phase::estimate] = estimate.seconds();
    stats_.estimatePass = true;
    setRelativeTolerances(particles, params_.alpha, gravity_.G, groups_);
  }
  evaluateGroups(particles, report);
  clearUnwantedPotentials(particles);
  report.timings.totalSeconds = total.seconds();
  return report;
}

void TreeSolver::evaluateGroups(Particles& particles, ForceReport& report) {
  const auto numGroups = static_cast<std::uint32_t>(groups_.size());
  std::uint64_t sumListBodies = 0, sumListCells = 0;
  stats_.maxListBodies = stats_.maxListCells = 0;
  stats_.numBatches = 0;
  const ForceCallScope forceCall(engine_, particles.sources(), tree_.multipoles);  // bodies and cells stay put
  // Two plans in flight: while the engine evaluates batch k, the CPU cores walk the tree for batch k + 1
  // (DESIGN.md §4: time per step ~ max(walk, engine) rather than their sum). The batch size adapts to the list
  // lengths seen so far, keeping each plan near maxBatchEntries entries.
  std::uint32_t groupsPerBatch = std::max<std::uint32_t>(1, std::min<std::uint32_t>(numGroups, 4096));
  const auto nextBatchSize = [&](const InteractionPlan& plan) {
    const std::uint64_t entries = plan.cellList.size() + plan.bodyList.size();
    const double entriesPerGroup = std::max(1.0, double(entries) / double(std::max<std::size_t>(plan.numGroups(), 1)));
    return static_cast<std::uint32_t>(
        std::clamp(double(params_.maxBatchEntries) / entriesPerGroup, 1.0, double(numGroups)));
  };
  int current = 0;
  std::uint32_t first = 0;
  std::uint32_t last = std::min(numGroups, first + groupsPerBatch);
  Stopwatch walkClock;
  planBuilders_[current].build(walkTree_, groups_, first, last, plans_[current]);
  report.timings[Phase::walk] += walkClock.seconds();
  while (first < numGroups) {
    const InteractionPlan& plan = plans_[current];
    const std::uint32_t nextFirst = last;
    const std::uint32_t nextLast = std::min(numGroups, nextFirst + nextBatchSize(plan));
    tbb::task_group walkAhead;
    if (nextFirst < numGroups) {
      walkAhead.run([&, next = 1 - current] {
        Stopwatch clock;
        planBuilders_[next].build(walkTree_, groups_, nextFirst, nextLast, plans_[next]);
        report.timings[Phase::walk] += clock.seconds();  // only this task writes it until wait()
      });
    }
    try {
      report.counts +=
          engine_.evaluatePlan(particles.sources(), tree_.multipoles, plan, gravity_, forcesToWrite(particles));
    } catch (...) {
      walkAhead.wait();  // the walk reads the tree; it must finish before the exception unwinds anything
      throw;
    }
    const EngineTimings engine = engine_.lastTimings();
    report.timings[Phase::upload] += engine.uploadSeconds;
    report.timings[Phase::kernels] += engine.kernelSeconds;
    report.timings[Phase::download] += engine.downloadSeconds;
    for (std::size_t g = 0; g < plan.numGroups(); ++g) {
      const std::uint64_t listBodies = plan.numListBodies(g);
      const std::uint64_t listCells = plan.numListCells(g);
      sumListBodies += listBodies;
      sumListCells += listCells;
      stats_.maxListBodies = std::max(stats_.maxListBodies, listBodies);
      stats_.maxListCells = std::max(stats_.maxListCells, listCells);
    }
    ++stats_.numBatches;
    walkAhead.wait();
    current = 1 - current;
    first = nextFirst;
    last = nextLast;
  }
  stats_.meanListBodies = double(sumListBodies) / double(numGroups);
  stats_.meanListCells = double(sumListCells) / double(numGroups);
}

}  // namespace matcha::tree
