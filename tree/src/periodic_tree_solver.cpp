// SPDX-License-Identifier: MIT
#include "matcha/tree/periodic_tree_solver.hpp"

#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "matcha/core/errors.hpp"
#include "matcha/core/opening_criterion.hpp"
#include "matcha/core/stopwatch.hpp"

namespace matcha::tree {

PeriodicVisit visitPeriodic(const Octree& tree, std::uint32_t cell, const Groups& groups, std::size_t group,
                            const PeriodicSplit& split) {
  const BodyRange cellBodies = tree.bodies[cell];
  const BodyRange groupBodies = groups.ranges[group];
  if (cellBodies.first < groupBodies.last && groupBodies.first < cellBodies.last) return PeriodicVisit::open;
  const double* centre = &groups.centre[3 * group];
  const double* half = &groups.halfExtent[3 * group];
  const double distance2 =
      periodicDistanceToBox2(tree.multipoles.x[cell], tree.multipoles.y[cell], tree.multipoles.z[cell], centre[0],
                             centre[1], centre[2], half[0], half[1], half[2], split.boxSize);
  if (std::sqrt(distance2) - tree.bmax[cell] >= split.cutoffRadius) return PeriodicVisit::skip;
  const double tolerance =
      groups.relativeTolerance.empty() ? std::numeric_limits<double>::infinity() : groups.relativeTolerance[group];
  // The relative test takes the cells' own order: a truncated quadrupole cell is the expansion of the truncated pair
  // to second order (pair_interaction.hpp: accumulateTruncatedQuadrupoleInteraction), good to third.
  return passesOpeningCriterion(distance2, tree.openingRadius[cell], tree.multipoles.mass[cell], tree.bmax[cell],
                                tolerance, tree.multipoles.hasQuadrupole)
             ? PeriodicVisit::accept
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
  for (std::size_t i = 0; i < particles.size(); ++i) {
    const double p[3] = {particles.x[i], particles.y[i], particles.z[i]};
    for (int d = 0; d < 3; ++d) {
      // The negated form also catches NaN.
      if (!(p[d] >= 0.0 && p[d] < boxSize)) {
        std::ostringstream message;
        message.precision(17);
        message << "body " << particles.id[i] << " lies outside the periodic box [0, " << boxSize << ")^3 at (" << p[0]
                << ", " << p[1] << ", " << p[2] << ")";
        throw InputError(message.str());
      }
    }
  }
}

PeriodicTreeSolver::PeriodicTreeSolver(NearFieldEngine& engine, const TreeParams& treeParams,
                                       const GravityParams& gravity)
    : engine_(engine), params_(treeParams), gravity_(gravity) {
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
       << ", nleaf " << params_.nleaf << ", " << toString(params_.multipole) << ", alpha " << params_.alpha << ") on "
       << engine_.name();
  return text.str();
}

ForceReport PeriodicTreeSolver::computeForces(Particles& particles) {
  const Stopwatch total;
  ForceReport report;
  const std::size_t n = particles.size();
  if (n == 0) throw InputError("no bodies to compute forces for");
  if (n >= (std::size_t{1} << 31)) throw InputError("at most 2^31 - 1 bodies are supported");
  const double boxSize = gravity_.periodic.boxSize;
  requireInsideBox(particles, boxSize);

  Stopwatch clock;
  const auto phaseDone = [&](Phase phase) {
    report.timings[phase] += clock.seconds();
    clock.restart();
  };
  // The root is the periodic cube itself, not the bodies' bounding cube: cells then never straddle a face, so every
  // cell's bodies are one compact region whose nearest image is that of its centre of mass.
  Cube cube;
  cube.side = boxSize;
  computeMortonKeys(particles.sources(), cube, keys_);
  phaseDone(Phase::keys);
  sortKeysOn(params_.sortOnDevice ? &engine_ : nullptr, sorter_, keys_, sortedKeys_, order_);
  permuter_.permute(particles, order_);
  phaseDone(Phase::sort);
  buildOctree(sortedKeys_, cube, params_.nleaf, tree_);
  phaseDone(Phase::octree);
  computeMultipoles(particles.sources(), params_.theta, params_.multipole, tree_);
  phaseDone(Phase::multipoles);
  makeGroups(tree_, particles.sources(), params_.ncrit, groups_);
  bool tolerancesSet = setRelativeTolerances(particles, params_.alpha, gravity_.G, groups_);
  buildWalkTree(tree_, walkTree_, gravity_.periodic);
  phaseDone(Phase::groups);

  const ForceView out = forcesToWrite(particles);
  const auto walkAndEvaluate = [&] {
    planBuilder_.build(walkTree_, groups_, 0, static_cast<std::uint32_t>(groups_.size()), plan_);
    phaseDone(Phase::walk);
    const InteractionCounts counts = engine_.evaluatePlan(particles.sources(), tree_.multipoles, plan_, gravity_, out);
    report.counts += counts;
    const EngineTimings& engineTimings = engine_.lastTimings();
    report.timings[Phase::upload] += engineTimings.uploadSeconds;
    report.timings[Phase::kernels] += engineTimings.kernelSeconds;
    report.timings[Phase::download] += engineTimings.downloadSeconds;
    clock.restart();
  };
  if (!tolerancesSet && params_.alpha > 0.0) {
    // No accelerations yet (fresh initial conditions): a first pass with theta alone gives the |a| that the relative
    // test scales by, as the open-boundary solver's estimate pass does; its walk and evaluation count as the estimate.
    const Stopwatch estimate;
    walkAndEvaluate();
    tolerancesSet = setRelativeTolerances(particles, params_.alpha, gravity_.G, groups_);
    for (const Phase phase : {Phase::walk, Phase::upload, Phase::kernels, Phase::download}) report.timings[phase] = 0.0;
    report.timings[Phase::estimate] += estimate.seconds();
    clock.restart();
  }
  walkAndEvaluate();
  stats_ = TreeStats{};
  stats_.numBodies = n;
  stats_.numCells = tree_.numCells();
  for (std::size_t c = 0; c < tree_.numCells(); ++c) stats_.numLeaves += tree_.isLeaf(c) ? 1 : 0;
  stats_.depth = tree_.numLevels() - 1;
  stats_.numGroups = groups_.size();
  stats_.meanGroupSize = double(n) / double(groups_.size());
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    stats_.maxGroupSize = std::max<std::uint64_t>(stats_.maxGroupSize, groups_.ranges[g].size());
    stats_.meanListBodies += double(plan_.numListBodies(g));
    stats_.maxListBodies = std::max(stats_.maxListBodies, plan_.numListBodies(g));
    stats_.meanListCells += double(plan_.numListCells(g));
    stats_.maxListCells = std::max(stats_.maxListCells, plan_.numListCells(g));
  }
  stats_.meanListBodies /= double(groups_.size());
  stats_.meanListCells /= double(groups_.size());
  stats_.numBatches = 1;
  stats_.estimatePass = report.timings[Phase::estimate] > 0.0;
  report.rebuilt = true;
  report.numGroupsWalked = groups_.size();
  clearUnwantedPotentials(particles);
  report.timings.totalSeconds = total.seconds();
  return report;
}

}  // namespace matcha::tree
