// SPDX-License-Identifier: MIT
// Reuse of a tree and its lists across steps (TreeParams::reuse, tree_solver.hpp): over 50 leapfrog steps of a
// Plummer sphere and of a cold collapse, every list in use passes the opening criterion at every step it is used
// (checked by a spy engine with the tree's own double criterion, independently of the engine's check), the engine
// flags exactly the lists that do not, the repaired lists pass, the errors stay those of a fresh walk, and a run with
// reuse agrees with one without.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "matcha/core/force_error.hpp"
#include "matcha/gpu/cpu_engine.hpp"
#include "matcha/integrator/diagnostics.hpp"
#include "matcha/integrator/leapfrog.hpp"
#include "matcha/integrator/run_loop.hpp"
#include "matcha/testing/generators.hpp"
#include "matcha/testing/mirroring_engine.hpp"
#include "matcha/testing/restart_check.hpp"
#include "matcha/tree/tree_solver.hpp"
#include "matcha/tree/walk.hpp"

namespace matcha::tree {
namespace {

/// A CPU engine that, at every evaluation, checks every resident list it is asked to evaluate against the bodies'
/// positions with the tree module's own double criterion (acceptCell on an Octree refitted by computeMultipoles),
/// and compares what it finds with the engine's own check.
class CheckingEngine final : public NearFieldEngine {
 public:
  explicit CheckingEngine(gpu::Precision precision) : inner_(precision) {}

  std::string name() const override { return "checking " + inner_.name(); }
  InteractionCounts evaluatePlan(const SourceView& sources, const CellMultipoles& cells, const InteractionPlan& plan,
                                 const GravityParams& gravity, const ForceView& out) override {
    return inner_.evaluatePlan(sources, cells, plan, gravity, out);
  }
  InteractionCounts evaluateDirect(const SourceView& sources, const GravityParams& gravity,
                                   const ForceView& out) override {
    return inner_.evaluateDirect(sources, gravity, out);
  }
  EngineTimings lastTimings() const override { return inner_.lastTimings(); }

  void setTree(const TreeTopology& topology, const SourceView& bodies) override {
    topology_ = topology;
    cells_.assign(topology.numGroups(), {});
    ranges_.assign(topology.numGroups(), {});
    mass_.resize(bodies.count);
    for (std::size_t i = 0; i < bodies.count; ++i)
      mass_[i] = bodies.mass[topology.order.empty() ? i : topology.order[i]];
    inner_.setTree(topology, bodies);
    heldEntries_ = 0;
    launchedOnTree_ = false;
  }
  void setLists(const InteractionPlan& plan) override {
    for (std::size_t k = 0; k < plan.numGroups(); ++k) {
      const std::uint32_t g = plan.groupIds[k];
      heldEntries_ += plan.numListCells(k) + plan.numListBodies(k);
      // The list covers every body exactly once: in one of its ranges or inside exactly one of its cells.
      std::vector<BodyRange> covered(plan.bodyList.begin() + plan.bodyListOffsets[k],
                                     plan.bodyList.begin() + plan.bodyListOffsets[k + 1]);
      for (std::uint32_t c = plan.cellListOffsets[k]; c < plan.cellListOffsets[k + 1]; ++c) {
        covered.push_back(topology_.cellBodies[plan.cellList[c]]);
      }
      std::sort(covered.begin(), covered.end(), [](BodyRange a, BodyRange b) { return a.first < b.first; });
      std::uint32_t cursor = 0;
      for (const BodyRange& range : covered) {
        EXPECT_EQ(range.first, cursor) << "group " << g << "'s list leaves a gap or overlaps";
        cursor = range.last;
      }
      EXPECT_EQ(cursor, topology_.numBodies()) << "group " << g;
      cells_[g].assign(plan.cellList.begin() + plan.cellListOffsets[k],
                       plan.cellList.begin() + plan.cellListOffsets[k + 1]);
      ranges_[g].assign(plan.bodyList.begin() + plan.bodyListOffsets[k],
                        plan.bodyList.begin() + plan.bodyListOffsets[k + 1]);
    }
    inner_.setLists(plan);
  }
  void dropLists() override {
    for (auto& c : cells_) c.clear();
    inner_.dropLists();
    heldEntries_ = 0;
    ++numDrops_;
  }
  void launchResident(const SourceView& bodies, const GravityParams& gravity, const ForceView& out,
                      std::span<const std::uint32_t> groups, const BodyUpdate& update) override {
    // BodyMotion::unchanged is the caller's word that these are the last launch's positions: hold it to it.
    if (update.motion == BodyMotion::unchanged && launchedOnTree_) {
      const bool same = std::equal(bodies.x, bodies.x + bodies.count, lastX_.begin()) &&
                        std::equal(bodies.y, bodies.y + bodies.count, lastY_.begin()) &&
                        std::equal(bodies.z, bodies.z + bodies.count, lastZ_.begin());
      EXPECT_TRUE(same) << "a launch said the bodies had not moved since the last one, but they had";
      ++numUnchanged_;
    }
    lastX_.assign(bodies.x, bodies.x + bodies.count);
    lastY_.assign(bodies.y, bodies.y + bodies.count);
    lastZ_.assign(bodies.z, bodies.z + bodies.count);
    launchedOnTree_ = true;
    expected_ = check(bodies, groups);
    inner_.launchResident(bodies, gravity, out, groups, update);
  }
  void discardResident() override { inner_.discardResident(); }
  ResidentResult finishResident() override {
    ResidentResult result = inner_.finishResident();
    EXPECT_EQ(std::vector<std::uint32_t>(expected_.begin(), expected_.end()), result.failedGroups)
        << "the engine's check and the tree's criterion disagree";
    numFailed_ += result.failedGroups.size();
    ++numLaunches_;
    return result;
  }

  std::uint64_t numChecked() const { return numChecked_; }
  std::uint64_t numFailed() const { return numFailed_; }
  /// List entries (cells + j-bodies) handed over since the last setTree or dropLists, replaced lists included.
  std::uint64_t heldEntries() const { return heldEntries_; }
  std::uint64_t numDrops() const { return numDrops_; }
  /// Launches that reused the last launch's positions and refit (BodyMotion::unchanged).
  std::uint64_t numUnchanged() const { return numUnchanged_; }

 private:
  /// The groups (of `groups`, all when empty) with a list entry that fails at these positions.
  std::set<std::uint32_t> check(const SourceView& bodies, std::span<const std::uint32_t> groups) {
    const std::size_t n = bodies.count;
    std::vector<double> x(n), y(n), z(n);
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t j = topology_.order.empty() ? i : topology_.order[i];
      x[i] = bodies.x[j];
      y[i] = bodies.y[j];
      z[i] = bodies.z[j];
    }
    Octree tree;
    tree.bodies = topology_.cellBodies;
    tree.firstChild = topology_.firstChild;
    tree.numChildren = topology_.numChildren;
    tree.levelOffsets = topology_.levelOffsets;
    tree.centre = topology_.cellCentre;
    tree.halfSide = topology_.cellHalfSide;
    tree.level.resize(tree.bodies.size());
    for (int l = 0; l < topology_.numLevels(); ++l) {
      for (std::uint32_t c = topology_.levelOffsets[l]; c < topology_.levelOffsets[l + 1]; ++c)
        tree.level[c] = std::uint8_t(l);
    }
    computeMultipoles({x.data(), y.data(), z.data(), mass_.data(), n}, topology_.theta, topology_.multipole, tree);
    Groups boxes;
    boxes.ranges = topology_.groups;
    boxes.relativeTolerance = topology_.relativeTolerance;
    boxes.centre.resize(3 * boxes.ranges.size());
    boxes.halfExtent.resize(3 * boxes.ranges.size());
    for (std::size_t g = 0; g < boxes.ranges.size(); ++g) {
      const BodyRange r = boxes.ranges[g];
      const std::vector<double>* coordinates[3] = {&x, &y, &z};
      for (int d = 0; d < 3; ++d) {
        const auto [lo, hi] = std::minmax_element(coordinates[d]->begin() + r.first, coordinates[d]->begin() + r.last);
        boxes.centre[3 * g + d] = 0.5 * (*lo + *hi);
        boxes.halfExtent[3 * g + d] = 0.5 * (*hi - *lo);
      }
    }
    std::set<std::uint32_t> failing;
    const auto checkGroup = [&](std::uint32_t g) {
      for (const std::uint32_t cell : cells_[g]) {
        ++numChecked_;
        if (!acceptCell(tree, cell, boxes, g)) {
          failing.insert(g);
          return;
        }
      }
    };
    if (groups.empty()) {
      for (std::uint32_t g = 0; g < topology_.numGroups(); ++g) checkGroup(g);
    } else {
      for (const std::uint32_t g : groups) checkGroup(g);
    }
    return failing;
  }

  gpu::CpuEngine inner_;
  TreeTopology topology_;
  std::vector<double> mass_;
  std::vector<std::vector<std::uint32_t>> cells_;
  std::vector<std::vector<BodyRange>> ranges_;
  std::set<std::uint32_t> expected_;
  std::uint64_t heldEntries_ = 0, numDrops_ = 0, numUnchanged_ = 0;
  bool launchedOnTree_ = false;
  std::vector<double> lastX_, lastY_, lastZ_;  ///< the positions of the last launch
  std::uint64_t numChecked_ = 0, numFailed_ = 0, numLaunches_ = 0;
};

struct ReuseCase {
  const char* name;
  Particles (*make)(std::size_t, std::uint64_t);
  double dt;
};

// A Plummer sphere in equilibrium, and a cold collapse: a uniform cube at rest falls in on itself, its bodies
// speeding up all the while (50 steps of 1/64 bring it to ~3/4 of its free-fall time), the case where a tree built
// for predicted positions goes stale fastest.
const ReuseCase kCases[] = {
    {"Plummer", testing::plummer, 1.0 / 128.0},
    {"ColdCollapse", [](std::size_t n, std::uint64_t seed) { return testing::uniformCube(n, seed); }, 1.0 / 64.0}};

class Reuse : public ::testing::TestWithParam<int> {};

// Every list in use passes the criterion at every step, bar those the engine flags and the solver walks again, whose
// new lists pass; the run with reuse matches the one without within the tree's errors at matched steps and in energy.
TEST_P(Reuse, ListsPassTheCriterionAtEveryStepAndTheRunMatchesOneWithoutReuse) {
  const ReuseCase& c = kCases[GetParam()];
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const std::size_t n = 4096;
  const GravityParams gravity;
  Particles withReuse = c.make(n, seed);
  Particles without = withReuse;

  CheckingEngine engine(gpu::Precision::float32);
  TreeParams params;
  params.reuse = 4;
  // ncrit 64: about 90 groups of 4096 bodies (the default gives 24), so that the percentiles compared below, over
  // groups whose tolerances were scaled by different estimates, are not those of a handful of lists.
  params.ncrit = 64;
  TreeSolver solver(engine, params, gravity);
  integrator::LeapfrogKDK leapfrog(solver, c.dt);
  gpu::CpuEngine plainEngine(gpu::Precision::float32);
  params.reuse = 1;
  TreeSolver fresh(plainEngine, params, gravity);
  integrator::LeapfrogKDK reference(fresh, c.dt);
  gpu::CpuEngine oracle(gpu::Precision::float64);

  leapfrog.initialize(withReuse);
  reference.initialize(without);
  const double initialEnergy = integrator::measureDiagnostics(withReuse, 0.0).total;
  std::uint64_t rebuilds = 0, repaired = 0;
  double worstRatio = 0.0;
  int checkedSteps = 0;
  for (int step = 1; step <= 50; ++step) {
    const ForceReport report = leapfrog.step(withReuse).force;
    reference.step(without);
    rebuilds += report.rebuilt ? 1 : 0;
    repaired += report.numGroupsRepaired;
    // Errors at the last call each reused tree serves, where its lists are furthest from the positions they were
    // built for. (A tree for one call, the first ones, is a fresh walk whose relative test took the last call's |a|
    // where the reference takes this call's: at step 1 that alone gave a p99 ratio of 1.31, seed 974076703680801407.)
    if (solver.lastStats().reuseSteps > 1 && solver.lastStats().callsOnTree == solver.lastStats().reuseSteps) {
      // Errors against double direct summation at this step's positions, with and without reuse.
      Particles exact = withReuse;
      oracle.evaluateDirect(exact.sources(), gravity, exact.forces());
      Particles freshHere = withReuse;
      TreeSolver(plainEngine, params, gravity).computeForces(freshHere);
      const auto byId = [](const Particles& p) {
        std::vector<std::size_t> index(p.size());
        for (std::size_t i = 0; i < p.size(); ++i) index[p.id[i]] = i;
        return index;
      };
      const auto reorder = [&](const Particles& p, const Particles& like) {
        const std::vector<std::size_t> index = byId(p);
        Particles out = like;
        for (std::size_t i = 0; i < like.size(); ++i) {
          out.ax[i] = p.ax[index[like.id[i]]];
          out.ay[i] = p.ay[index[like.id[i]]];
          out.az[i] = p.az[index[like.id[i]]];
        }
        return out;
      };
      const Particles freshInOrder = reorder(freshHere, withReuse);
      const ForceErrorStats reused =
          summariseForceErrors({withReuse.ax, withReuse.ay, withReuse.az}, {exact.ax, exact.ay, exact.az});
      const ForceErrorStats walked =
          summariseForceErrors({freshInOrder.ax, freshInOrder.ay, freshInOrder.az}, {exact.ax, exact.ay, exact.az});
      // 10% of slack: the two solvers scale their relative tests by acceleration estimates a few calls apart, and
      // ~90 lists answer to the change (measured worst ratio over 12 seeds: 1.045).
      EXPECT_LE(reused.p99, 1.10 * walked.p99 + 1e-6)
          << "step " << step << ": reuse p99 " << reused.p99 << ", fresh walk " << walked.p99;
      EXPECT_LE(reused.median, 1.10 * walked.median + 1e-7) << "step " << step;
      worstRatio = std::max(worstRatio, reused.p99 / walked.p99);
      ++checkedSteps;
    }
  }
  EXPECT_GT(engine.numChecked(), 1000u * 50u) << "the lists were not checked";
  EXPECT_GE(checkedSteps, 3) << "too few last calls on a tree were checked against direct summation";
  EXPECT_LT(rebuilds, 50u) << "the tree was never reused";
  EXPECT_GE(rebuilds, 50u / 4u);
  // Energy drifts alike with and without reuse (the tree's potentials, at the same dt): its force errors are those
  // of a fresh walk, so the drift must be too. Measured over 5 seeds: Plummer 8e-5..3e-4 both ways, cold collapse
  // 1.7e-3..2.3e-3 (fast bodies, dt 1/64), within 10% of each other.
  const double driftWith =
      integrator::relativeEnergyError(integrator::measureDiagnostics(withReuse, 0.0).total, initialEnergy);
  const double driftWithout =
      integrator::relativeEnergyError(integrator::measureDiagnostics(without, 0.0).total, initialEnergy);
  // Both energies carry their last call's tree potentials, whose own error sets the floor of what can be told
  // apart: a drift without reuse of 1.8e-6 (seed 12635464680820535889) against 2.1e-5 with reuse is that error, not a
  // drift. The floor: twice the error of the tree's potential energy at the end of the run without reuse.
  Particles exactEnd = without;
  oracle.evaluateDirect(exactEnd.sources(), gravity, exactEnd.forces());
  const double potentialError = std::abs(integrator::measureDiagnostics(without, 0.0).potential -
                                         integrator::measureDiagnostics(exactEnd, 0.0).potential) /
                                std::abs(initialEnergy);
  EXPECT_LE(driftWith, 1.5 * driftWithout + 2.0 * potentialError + 2e-6)
      << "energy drift " << driftWith << " with reuse, " << driftWithout << " without; the tree's potential energy "
      << "errs by " << potentialError;
  std::printf(
      "%s: %llu rebuilds in 50 steps, %llu groups repaired, %llu list entries checked, worst p99 ratio %.3f, "
      "|dE/E| %.2e with reuse, %.2e without\n",
      c.name, static_cast<unsigned long long>(rebuilds), static_cast<unsigned long long>(repaired),
      static_cast<unsigned long long>(engine.numChecked()), worstRatio, driftWith, driftWithout);
}

// Bodies that leave the paths their tree was built for (a kick nobody predicted) make lists fail the criterion: the
// engine flags those groups, the solver walks them again at the bodies' positions and evaluates them once more, and
// the forces are then as good as a fresh walk's; the next call builds a new tree. Twice: with room for the repaired
// lists beside the tree's, and with TreeParams::maxBatchEntries just the tree's lists, so that the repair (most
// groups) would take the engine past 5/4 of it: the tree's lists are dropped first.
TEST(Reuse, ListsThatFailAreWalkedAgainAndTheNextCallRebuilds) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const GravityParams gravity;
  std::uint64_t treeEntries = 0;
  for (const bool tight : {false, true}) {
    SCOPED_TRACE(tight ? "maxBatchEntries: the tree's lists" : "maxBatchEntries: the default");
    Particles p = testing::plummer(4096, seed);
    CheckingEngine engine(gpu::Precision::float32);
    TreeParams params;
    params.reuse = 8;
    if (tight) params.maxBatchEntries = treeEntries;
    TreeSolver solver(engine, params, gravity);
    integrator::LeapfrogKDK leapfrog(solver, 1.0 / 128.0);
    leapfrog.initialize(p);
    for (int step = 0; step < 3; ++step) leapfrog.step(p);
    ASSERT_FALSE(leapfrog.step(p).force.rebuilt) << "the tree built two steps ago should still serve";
    if (!tight) treeEntries = engine.heldEntries();
    ASSERT_EQ(engine.heldEntries(), treeEntries) << "the same bodies should give the same tree";
    // An unpredicted jolt: every body moved by up to 0.05 in a random direction.
    std::mt19937_64 random(seed);
    std::uniform_real_distribution<double> jolt(-0.05, 0.05);
    for (std::size_t i = 0; i < p.size(); ++i) {
      p.x[i] += jolt(random);
      p.y[i] += jolt(random);
      p.z[i] += jolt(random);
    }
    const std::uint64_t dropsBefore = engine.numDrops();
    const std::uint64_t unchangedBefore = engine.numUnchanged();
    const ForceReport report = solver.computeForces(p);
    EXPECT_FALSE(report.rebuilt);
    EXPECT_EQ(engine.numUnchanged(), unchangedBefore + 1) << "the repair reuses the launch's positions and refit";
    EXPECT_GT(report.numGroupsRepaired, 4 * report.numGroupsWalked / 10) << "the jolt should fail most groups";
    EXPECT_GT(report.timings[Phase::repair], 0.0);
    if (tight) {
      EXPECT_EQ(engine.numDrops(), dropsBefore + 2) << "the tree's lists dropped before the repair, its lists after";
    } else {
      EXPECT_EQ(engine.numDrops(), dropsBefore);
      EXPECT_GT(engine.heldEntries(), treeEntries) << "the repaired lists beside the tree's";
    }
    Particles exact = p;
    gpu::CpuEngine oracle(gpu::Precision::float64);
    oracle.evaluateDirect(exact.sources(), gravity, exact.forces());
    Particles walked = p;
    TreeParams fresh = params;
    fresh.reuse = 1;
    fresh.maxBatchEntries = TreeParams{}.maxBatchEntries;
    gpu::CpuEngine plain(gpu::Precision::float32);
    TreeSolver(plain, fresh, gravity).computeForces(walked);
    const ForceErrorStats repaired = summariseForceErrors({p.ax, p.ay, p.az}, {exact.ax, exact.ay, exact.az});
    const ForceErrorStats walkedErrors =
        summariseForceErrors({walked.ax, walked.ay, walked.az}, {exact.ax, exact.ay, exact.az});
    EXPECT_LE(repaired.p99, 1.05 * walkedErrors.p99 + 1e-6);
    EXPECT_LE(repaired.max, 1.5 * walkedErrors.max + 1e-6);
    EXPECT_TRUE(solver.computeForces(p).rebuilt) << "after a large repair the next call builds anew";
  }
}

// Lists that do not fit TreeParams::maxBatchEntries stream: walked, handed over, evaluated and dropped batch by batch,
// every call (nothing to reuse). The forces are the same, bit for bit, as with every list kept (the same lists, each
// group evaluated alike), with and without the estimate pass of fresh bodies.
TEST(Reuse, StreamedListsGiveTheSameForces) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const GravityParams gravity;
  for (const bool fresh : {true, false}) {
    Particles kept = testing::plummer(8192, seed);
    if (!fresh) gpu::CpuEngine(gpu::Precision::float32).evaluateDirect(kept.sources(), gravity, kept.forces());
    Particles streamed = kept;
    gpu::CpuEngine engine(gpu::Precision::float32);
    CheckingEngine streamingEngine(gpu::Precision::float32);
    TreeParams params;
    params.ncrit = 64;  // many groups, so that the batches are many
    TreeSolver keeping(engine, params, gravity);
    params.maxBatchEntries = 20000;  // about a tenth of the entries of all lists
    TreeSolver streaming(streamingEngine, params, gravity);
    keeping.computeForces(kept);
    const ForceReport report = streaming.computeForces(streamed);
    EXPECT_GT(streaming.lastStats().numBatches, 5u);
    // Every batch after a call's first reuses its positions and refit (the engine checks that they did not move).
    EXPECT_GE(streamingEngine.numUnchanged(), streaming.lastStats().numBatches - 1);
    EXPECT_TRUE(report.rebuilt);
    ASSERT_EQ(kept.id, streamed.id);
    EXPECT_EQ(kept.ax, streamed.ax);
    EXPECT_EQ(kept.ay, streamed.ay);
    EXPECT_EQ(kept.az, streamed.az);
    EXPECT_EQ(kept.pot, streamed.pot);
    // And the next call streams again: nothing was kept to reuse.
    EXPECT_TRUE(streaming.computeForces(streamed).rebuilt);
  }
}

// walkBatchGroups: the first batch has kFirstBatchGroups (fewer where a batch holds fewer entries); each next one
// grows over the last by at most the growth asked (the periodic solver's, from the engine's pace against the walk's),
// kept within [1, kBatchGrowth], and by at most kBatchGrowth where none is asked; it also holds at most the batch's
// entries at the last batch's entries per group, a quarter of the groups where overlapped (but kMinOverlapGroups),
// and the groups there are.
TEST(WalkBatches, GrowByTheGrowthAskedWithinTheirBounds) {
  const std::uint64_t groups = 1 << 20, entries = kPlanEntries;
  EXPECT_EQ(walkBatchGroups(groups, 0, 0.0, entries, true), kFirstBatchGroups);
  EXPECT_EQ(walkBatchGroups(groups, 0, 0.0, 100 * kEntriesPerGroupGuess, true), 100u);
  EXPECT_EQ(walkBatchGroups(groups, 2048, 10.0, entries, false), kBatchGrowth * 2048);
  EXPECT_EQ(walkBatchGroups(groups, 2048, 10.0, entries, false, 1.5), 3072u);
  EXPECT_EQ(walkBatchGroups(groups, 2048, 10.0, entries, false, 100.0), kBatchGrowth * 2048);
  EXPECT_EQ(walkBatchGroups(groups, 2048, 10.0, entries, false, 0.1), 2048u) << "a batch never shrinks by growth";
  EXPECT_EQ(walkBatchGroups(groups, 2048, double(entries) / 1024.0, entries, false, 2.0), 1024u) << "entries bound";
  EXPECT_EQ(walkBatchGroups(groups, 1 << 18, 10.0, entries, true, 2.0), groups / kOverlapBatches) << "a quarter";
  EXPECT_EQ(walkBatchGroups(4000, 3000, 10.0, entries, false, 2.0), 4000u) << "at most the groups there are";
  EXPECT_EQ(walkBatchGroups(4000, 1000, 10.0, entries, true, 4.0), kMinOverlapGroups) << "a quarter, but 2048";
}

// A tree built within a call is evaluated batch by batch as it is walked (the engine works on one batch while the
// CPU walks the next: walkBatchGroups). The forces are the same, bit for bit, as those of one launch of every group's
// list from the same plan, and every body is written once.
TEST(Reuse, OverlappedBatchesGiveTheForcesOfOneLaunch) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const GravityParams gravity;
  Particles p = testing::plummer(32768, seed);
  gpu::CpuEngine engine(gpu::Precision::float32);
  engine.evaluateDirect(p.sources(), gravity, p.forces());  // the relative test's accelerations, the same for both
  Particles batched = p;
  TreeParams params;
  params.ncrit = 8;  // many groups: several batches of at least kMinOverlapGroups
  params.reuse = 1;
  TreeSolver solver(engine, params, gravity);
  // The accelerations are the relative test's input (an unwritten one keeps its direct-summation value and fails
  // below); the potential is output only: an unwritten one stays NaN.
  std::fill(batched.pot.begin(), batched.pot.end(), std::nan(""));
  solver.computeForces(batched);
  const std::uint64_t numGroups = solver.lastStats().numGroups;
  ASSERT_GT(numGroups, 2 * kMinOverlapGroups);
  EXPECT_EQ(solver.lastStats().numBatches,
            std::min<std::uint64_t>(kOverlapBatches, (numGroups + kMinOverlapGroups - 1) / kMinOverlapGroups));

  gpu::CpuEngine single(gpu::Precision::float32);
  TreeSolver planner(single, params, gravity);
  InteractionPlan lists = planner.buildPlanOnly(p);  // sorts p as the solver sorted `batched`
  ASSERT_EQ(p.id, batched.id);
  lists.groupIds.resize(lists.numGroups());
  for (std::uint32_t g = 0; g < lists.numGroups(); ++g) lists.groupIds[g] = g;
  TreeTopology topology = planner.topology();
  topology.relativeTolerance = planner.groups().relativeTolerance;
  single.setTree(topology, p.sources());
  single.setLists(lists);
  single.launchResident(p.sources(), gravity, p.forces(), {}, BodyMotion::moved);
  EXPECT_TRUE(single.finishResident().failedGroups.empty());
  EXPECT_EQ(p.ax, batched.ax);
  EXPECT_EQ(p.ay, batched.ay);
  EXPECT_EQ(p.az, batched.az);
  EXPECT_EQ(p.pot, batched.pot);
}

/// The positions and accelerations of `from` written into `to`'s bodies of the same ids (`to` holds the same bodies in
/// another order: a solver that sorts its caller's bodies).
void copyMotionById(const Particles& from, Particles& to) {
  std::vector<std::size_t> slot(to.size());
  for (std::size_t i = 0; i < to.size(); ++i) slot[to.id[i]] = i;
  for (std::size_t i = 0; i < from.size(); ++i) {
    const std::size_t j = slot[from.id[i]];
    to.x[j] = from.x[i];
    to.y[j] = from.y[i];
    to.z[j] = from.z[i];
    to.ax[j] = from.ax[i];
    to.ay[j] = from.ay[i];
    to.az[j] = from.az[i];
  }
}

/// `like` with the accelerations of `from`'s bodies of the same ids.
Particles withAccelerationsById(const Particles& like, const Particles& from) {
  std::vector<std::size_t> slot(from.size());
  for (std::size_t j = 0; j < from.size(); ++j) slot[from.id[j]] = j;
  Particles out = like;
  for (std::size_t i = 0; i < like.size(); ++i) {
    out.ax[i] = from.ax[slot[like.id[i]]];
    out.ay[i] = from.ay[slot[like.id[i]]];
    out.az[i] = from.az[slot[like.id[i]]];
  }
  return out;
}

// Trees built in the background (TreeParams::pipeline: started a call or more ahead, for the positions predicted from
// then, handed to the engine in the caller's order) and trees built within the call that needs them (the bodies
// sorted) serve the same bodies equally well: fed the same positions step after step, both solvers' forces stay
// within a fresh walk's errors of direct summation, and within that of each other. Background builds must happen.
TEST(Reuse, PipelinedAndWithinTheCallBuildsGiveTheSameForces) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const GravityParams gravity;
  Particles p = testing::plummer(4096, seed);
  CheckingEngine pipelinedEngine(gpu::Precision::float32);
  CheckingEngine withinEngine(gpu::Precision::float32);
  TreeParams params;
  params.reuse = 3;
  TreeSolver pipelined(pipelinedEngine, params, gravity);
  params.pipeline = false;
  TreeSolver within(withinEngine, params, gravity);
  gpu::CpuEngine oracle(gpu::Precision::float64);
  Particles twin = p;
  pipelined.computeForces(p);
  within.computeForces(twin);
  const double dt = 1.0 / 128.0;
  int backgroundTrees = 0;
  for (int step = 1; step <= 30; ++step) {
    integrator::kick(p, dt);
    integrator::drift(p, dt);
    // The same bodies in the other solver's order (which sorts them at its builds).
    copyMotionById(p, twin);
    const ForceReport report = pipelined.computeForces(p);
    within.computeForces(twin);
    if (report.rebuilt && pipelined.lastStats().background) ++backgroundTrees;
    if (step % 10 != 0) continue;
    Particles exact = p;
    oracle.evaluateDirect(exact.sources(), gravity, exact.forces());
    const Particles other = withAccelerationsById(p, twin);
    const ForceErrorStats a = summariseForceErrors({p.ax, p.ay, p.az}, {exact.ax, exact.ay, exact.az});
    const ForceErrorStats b = summariseForceErrors({other.ax, other.ay, other.az}, {exact.ax, exact.ay, exact.az});
    const ForceErrorStats between = summariseForceErrors({p.ax, p.ay, p.az}, {other.ax, other.ay, other.az});
    EXPECT_LE(a.p99, 1.1 * b.p99 + 1e-6) << "step " << step;
    EXPECT_LE(between.p99, 2.0 * b.p99) << "step " << step;
  }
  EXPECT_GE(backgroundTrees, 5) << "no tree was built in the background";
}

// Where the integrator announces how the bodies move (a leapfrog's kicks and drift: ForceSolver::expectAdvance), the
// solver predicts from the bodies' velocities and accelerations instead of recording the positions of the last calls.
// The two predict the same paths up to rounding: the runs agree step by step within the float engine's rounding (a
// ball a rounding larger may open a cell the other accepts), every list of both passes the criterion at every step,
// and the lists are as long.
TEST(Reuse, AnnouncedMotionPredictsAsTheRecordedPositionsDo) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const GravityParams gravity;
  Particles announced = testing::plummer(4096, seed);
  Particles recorded = announced;
  CheckingEngine announcedEngine(gpu::Precision::float32), recordedEngine(gpu::Precision::float32);
  TreeParams params;
  params.reuse = 3;
  params.ncrit = 64;
  TreeSolver announcedSolver(announcedEngine, params, gravity), recordedSolver(recordedEngine, params, gravity);
  const double dt = 1.0 / 128.0;
  integrator::LeapfrogKDK announcedRun(announcedSolver, dt), recordedRun(recordedSolver, dt);
  announcedRun.initialize(announced);
  recordedRun.initialize(recorded);
  recordedSolver.expectAdvance(std::nullopt);  // the word taken back: this solver records positions
  std::uint64_t interactions[2] = {0, 0}, repaired = 0;
  int backgroundTrees = 0;
  double worst = 0.0, worstMedian = 0.0;
  for (int step = 1; step <= 30; ++step) {
    const ForceReport a = announcedRun.step(announced).force;
    const ForceReport b = recordedRun.step(recorded).force;
    repaired += a.numGroupsRepaired + b.numGroupsRepaired;
    interactions[0] += a.counts.bodyBody + a.counts.bodyCell;
    interactions[1] += b.counts.bodyBody + b.counts.bodyCell;
    if (a.rebuilt && announcedSolver.lastStats().background) ++backgroundTrees;
    ASSERT_EQ(announced.id, recorded.id) << "the two runs sorted their bodies differently at step " << step;
    const ForceErrorStats between =
        summariseForceErrors({announced.ax, announced.ay, announced.az}, {recorded.ax, recorded.ay, recorded.az});
    worstMedian = std::max(worstMedian, between.median);
    worst = std::max(worst, between.p99);
  }
  // Measured over 6 seeds: medians 2.1e-6..3.2e-6 and p99s 6.1e-5..7.3e-5 apart (the float engine's sums, and the
  // bodies of a few groups that took one cell the other opened, which the runs' chaos then spreads), interactions
  // within 0.03% of each other.
  EXPECT_LE(worstMedian, 2e-5) << "the runs' forces differ by more than rounding and a few opening decisions";
  EXPECT_LE(worst, 3e-4) << "the runs' forces differ by more than rounding and a few opening decisions";
  EXPECT_EQ(repaired, 0u) << "a prediction missed the motion";
  EXPECT_GE(backgroundTrees, 5) << "no tree was built in the background";
  EXPECT_NEAR(double(interactions[0]) / double(interactions[1]), 1.0, 0.002);
  EXPECT_GT(announcedEngine.numChecked(), 0u);
  std::printf("announced vs recorded motion: worst median difference %.2e, p99 %.2e, interactions %llu vs %llu\n",
              worstMedian, worst, static_cast<unsigned long long>(interactions[0]),
              static_cast<unsigned long long>(interactions[1]));
}

// A run stopped at a checkpoint and continued from its saved state by a new solver and engine computes what the run
// that went on computed, bit for bit: with the relative opening test (alpha > 0), with trees reused over three steps
// and built in the background (the saved state holds the next tree's inputs), and with a new tree every step.
TEST(Restart, ContinuesBitForBitFromACheckpoint) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const auto cpuEngine = [] { return std::make_unique<gpu::CpuEngine>(gpu::Precision::float32); };
  TreeParams params;
  params.alpha = 1e-3;
  for (const std::uint32_t reuse : {3u, 1u}) {
    SCOPED_TRACE("reuse " + std::to_string(reuse));
    params.reuse = reuse;
    testing::expectBitIdenticalRestart(cpuEngine, params, 3000, 40, seed);
  }
}

// With background builds off, every tree is built within the call that needs it: a restart is exact there too.
TEST(Restart, ContinuesBitForBitWithoutThePipeline) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  TreeParams params;
  params.alpha = 1e-3;
  params.reuse = 4;
  params.pipeline = false;
  testing::expectBitIdenticalRestart([] { return std::make_unique<gpu::CpuEngine>(gpu::Precision::float32); }, params,
                                     2000, 30, seed);
}

/// Reuse 3 with every tree's first call launched ahead whatever the timing (adoptAheadWaits): the settings of the
/// launch-ahead tests, whose counts and checkpoints must not depend on how fast the background builds run.
TreeParams launchingAhead() {
  TreeParams params;
  params.alpha = 1e-3;
  params.reuse = 3;
  params.adoptAheadWaits = true;
  return params;
}

// TreeParams::advanceOnDevice, on an engine that keeps its own copy of the bodies (testing::MirroringEngine, the CUDA
// engine's contract on the CPU): calls after a tree's first are launched as the call before them ends, on positions
// the engine advanced itself, and the run is the run of an engine that is sent the positions, bit for bit.
TEST(AdvanceOnDevice, LaunchesAheadOnTheEnginesOwnCopyGiveTheSameRunBitForBit) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const GravityParams gravity;
  TreeParams params = launchingAhead();
  Particles sent = testing::plummer(3000, seed);
  Particles advanced = sent;
  // Both through a MirroringEngine, whose outputs reach the caller at finishResident (the CPU engine writes them at
  // the launch, before a background build copies the accelerations it scales by): only the advance differs.
  gpu::CpuEngine plainInner(gpu::Precision::float32), innerEngine(gpu::Precision::float32);
  testing::MirroringEngine plainEngine(plainInner), mirror(innerEngine);
  TreeSolver advancing(mirror, params, gravity);
  params.advanceOnDevice = false;
  TreeSolver plain(plainEngine, params, gravity);
  const double dt = 1.0 / 128.0;
  integrator::LeapfrogKDK sentRun(plain, dt), advancedRun(advancing, dt);
  sentRun.initialize(sent);
  advancedRun.initialize(advanced);
  int ahead = 0, onDevice = 0, treesAhead = 0, trees = 0;
  std::uint64_t plainRebuilds = 0, advancingRebuilds = 0;
  constexpr int kSteps = 40;
  for (int step = 1; step <= kSteps; ++step) {
    plainRebuilds += sentRun.step(sent).force.rebuilt;
    const integrator::StepReport report = advancedRun.step(advanced);
    advancingRebuilds += report.force.rebuilt;
    EXPECT_FALSE(plain.lastStats().advancedOnDevice) << "an engine that reads the caller's arrays advanced nothing";
    ahead += advancing.lastStats().launchedAhead;
    onDevice += advancing.lastStats().advancedOnDevice;
    if (report.force.rebuilt && step > 3) {
      ++trees;
      treesAhead += advancing.lastStats().launchedAhead;
    }
  }
  EXPECT_FALSE(advancing.lastStats().advanceMismatch);
  // K = 3: every call from the fourth on is launched ahead, a tree's first too: the call before it puts the tree to
  // use as it ends (adoptAhead). Each such call still reports the rebuild, as the run without the advance does.
  EXPECT_GE(onDevice, kSteps - 2);
  EXPECT_GE(ahead, kSteps - 4);
  EXPECT_GE(trees, 10);
  EXPECT_EQ(treesAhead, trees) << "a tree's first call was not launched ahead";
  EXPECT_EQ(advancingRebuilds, plainRebuilds);
  // The first three calls build their trees within the call (the first twice: the estimate pass).
  EXPECT_LE(mirror.numMoved(), 4u) << "positions were sent after the first calls";
  EXPECT_EQ(plainEngine.numAdvanced(), 0u);
  testing::expectSameBodiesBitForBit(sent, advanced, "from the run that sent its positions");
}

// A caller that moves its bodies otherwise than it said: the engine's copy differs from them, the call is evaluated
// again at the caller's positions (the forces are theirs, within the tree's errors of direct summation), and positions
// are sent from then on.
TEST(AdvanceOnDevice, ABrokenWordIsCaughtAndTheForcesAreTheCallersPositions) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const GravityParams gravity;
  TreeParams params;
  params.reuse = 4;
  Particles p = testing::plummer(3000, seed);
  gpu::CpuEngine inner(gpu::Precision::float32);
  testing::MirroringEngine mirror(inner);
  TreeSolver solver(mirror, params, gravity);
  const double dt = 1.0 / 128.0;
  integrator::LeapfrogKDK run(solver, dt);
  run.initialize(p);
  // The first three calls build their trees within the call (no motion known to predict): the fourth is advanced.
  for (int step = 1; step <= 3; ++step) run.step(p);
  ASSERT_TRUE(solver.lastStats().advancedOnDevice) << "the fourth call was not advanced on the engine";
  // The bodies jump by ~1% of the half-mass radius: forces evaluated at the old positions would be off by more.
  std::mt19937_64 random(seed);
  std::normal_distribution<double> jump(0.0, 0.01);
  for (std::size_t i = 0; i < p.size(); ++i) {
    p.x[i] += jump(random);
    p.y[i] += jump(random);
    p.z[i] += jump(random);
  }
  run.step(p);
  EXPECT_TRUE(solver.lastStats().advanceMismatch) << "the engine's copy was not compared with the caller's bodies";
  EXPECT_FALSE(solver.lastStats().advancedOnDevice);
  Particles exact = p;
  gpu::CpuEngine oracle(gpu::Precision::float64);
  oracle.evaluateDirect(exact.sources(), gravity, exact.forces());
  const ForceErrorStats errors = summariseForceErrors({p.ax, p.ay, p.az}, {exact.ax, exact.ay, exact.az});
  EXPECT_LT(errors.p99, 3e-3) << "the forces are not those of the caller's positions";
  const std::uint64_t moved = mirror.numMoved();
  run.step(p);
  EXPECT_GT(mirror.numMoved(), moved) << "positions are not sent after the copy differed";
}

// A launch made ahead for a call that does not come as announced is discarded, and the call is evaluated anew: the
// word taken back (expectAdvance(nullopt)) and the bodies left where they were.
TEST(AdvanceOnDevice, ALaunchAheadForACallThatDidNotComeIsDiscarded) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const GravityParams gravity;
  TreeParams params;
  params.reuse = 4;
  Particles p = testing::plummer(2000, seed);
  gpu::CpuEngine inner(gpu::Precision::float32);
  testing::MirroringEngine mirror(inner);
  TreeSolver solver(mirror, params, gravity);
  {
    integrator::LeapfrogKDK run(solver, 1.0 / 128.0);
    run.initialize(p);
    run.step(p);
    run.step(p);  // the third call builds a tree for four calls and launches the fourth ahead
  }               // the leapfrog takes its word back
  ASSERT_EQ(mirror.numDiscarded(), 0u);
  const Particles before = p;
  solver.computeForces(p);
  EXPECT_EQ(mirror.numDiscarded(), 1u) << "the launch made ahead was not discarded";
  EXPECT_FALSE(solver.lastStats().advancedOnDevice);
  // The same tree, lists and positions as the last call: the same forces.
  EXPECT_EQ(p.ax, before.ax);
  EXPECT_EQ(p.ay, before.ay);
  EXPECT_EQ(p.az, before.az);
}

// A run that wants the solver's potentials at its outputs only (integrator::runLeapfrog) says so a call ahead: the
// calls launched ahead compute them where the next call wants them and not elsewhere, none is discarded, and the run
// is the run of a solver that computes them at every call, bit for bit (the kernels' accelerations do not depend on
// the potentials). A call that comes wanting potentials against the word is evaluated anew, with them.
TEST(AdvanceOnDevice, PotentialsAtTheCallsThatWantThemWithTheLaunchesAheadKept) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const GravityParams gravity;
  const TreeParams params = launchingAhead();
  Particles outputsOnly = testing::plummer(3000, seed);
  Particles always = outputsOnly;
  gpu::CpuEngine innerA(gpu::Precision::float32), innerB(gpu::Precision::float32);
  testing::MirroringEngine mirrorA(innerA), mirrorB(innerB);
  TreeSolver solverA(mirrorA, params, gravity), solverB(mirrorB, params, gravity);
  IntegratorParams run;
  run.dt = 1.0 / 128.0;
  run.tEnd = 24.0 / 128.0;
  run.outputInterval = 8.0 / 128.0;
  int outputs = 0;
  integrator::RunCallbacks callbacks;
  callbacks.onOutput = [&](const Particles& state, const integrator::Diagnostics&, std::uint64_t) {
    ++outputs;
    EXPECT_TRUE(std::all_of(state.pot.begin(), state.pot.end(), [](double v) { return std::isfinite(v); }));
  };
  integrator::runLeapfrog(outputsOnly, solverA, run, callbacks);
  EXPECT_EQ(outputs, 4);
  EXPECT_EQ(mirrorA.numDiscarded(), 0u) << "a launch ahead guessed the potentials wrong";
  EXPECT_GE(mirrorA.numAdvanced(), 18u);

  integrator::LeapfrogKDK reference(solverB, run.dt);
  reference.initialize(always);
  for (int step = 0; step < 24; ++step) reference.step(always);
  testing::expectSameBodiesBitForBit(always, outputsOnly, "from the run with potentials at every call");
  EXPECT_EQ(always.pot, outputsOnly.pot) << "the last step is an output";

  // Against the word: the launch ahead of the next call leaves the potentials out, the call wants them.
  integrator::LeapfrogKDK again(solverA, run.dt);
  again.initialize(outputsOnly);
  solverA.setPotentialsWanted(false);
  for (int step = 0; step < 4; ++step) again.step(outputsOnly);
  EXPECT_TRUE(std::isnan(outputsOnly.pot[0]));
  const std::uint64_t discarded = mirrorA.numDiscarded();
  solverA.setPotentialsWanted(true);
  again.step(outputsOnly);
  EXPECT_EQ(mirrorA.numDiscarded(), discarded + 1) << "the launch without potentials was used";
  EXPECT_TRUE(std::all_of(outputsOnly.pot.begin(), outputsOnly.pot.end(), [](double v) { return std::isfinite(v); }));
}

// A restart continues bit for bit with the engine advancing its copy of the bodies too.
TEST(Restart, ContinuesBitForBitWithTheBodiesAdvancedOnTheEngine) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  // The checkpoints fall where the next tree was put to use ahead (adoptAhead).
  const TreeParams params = launchingAhead();
  testing::expectBitIdenticalRestart(
      [] {
        return std::make_unique<testing::MirroringEngine>(std::make_unique<gpu::CpuEngine>(gpu::Precision::float32));
      },
      params, 2000, 30, seed);
}

// Reuse off on an engine that keeps its own copy of the bodies (tree_solver.hpp: buildsFreshTreesAhead): every call
// still gets a tree of its own, but from the fourth call on it was built during the call before, for the positions
// predicted one step ahead. Every list of those trees passes the criterion at the positions of its call (a checking
// engine under the mirroring one), and the forces, fed the same positions step after step, stay within a fresh walk's
// errors of direct summation: those of trees built within each call for the exact positions (pipeline off).
TEST(Reuse, TreesBuiltAStepAheadServeTheirCallAsTreesBuiltWithinIt) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const GravityParams gravity;
  Particles p = testing::plummer(4096, seed);
  CheckingEngine checking(gpu::Precision::float32);
  testing::MirroringEngine aheadEngine(checking);
  gpu::CpuEngine withinEngine(gpu::Precision::float32);
  TreeParams params;
  params.reuse = 1;
  params.ncrit = 64;
  ASSERT_TRUE(buildsFreshTreesAhead(params, aheadEngine.advancesBodies()));
  TreeSolver ahead(aheadEngine, params, gravity);
  params.pipeline = false;
  ASSERT_FALSE(buildsFreshTreesAhead(params, aheadEngine.advancesBodies()));
  TreeSolver within(withinEngine, params, gravity);
  gpu::CpuEngine oracle(gpu::Precision::float64);
  Particles twin = p;
  ahead.computeForces(p);
  within.computeForces(twin);
  const double dt = 1.0 / 128.0;
  int builtAhead = 0;
  std::uint64_t repaired = 0, groupsUsed = 0;
  constexpr int kSteps = 30;
  for (int step = 1; step <= kSteps; ++step) {
    integrator::kick(p, dt);
    integrator::drift(p, dt);
    copyMotionById(p, twin);
    const ForceReport report = ahead.computeForces(p);
    within.computeForces(twin);
    const TreeStats& stats = ahead.lastStats();
    EXPECT_TRUE(report.rebuilt) << "step " << step << ": a tree served a second call";
    EXPECT_EQ(stats.callsOnTree, 1u) << "step " << step;
    repaired += report.numGroupsRepaired;
    groupsUsed += stats.numGroups;
    builtAhead += stats.background ? 1 : 0;
    if (step % 10 != 0) continue;
    Particles exact = p;
    oracle.evaluateDirect(exact.sources(), gravity, exact.forces());
    const Particles other = withAccelerationsById(p, twin);
    const ForceErrorStats a = summariseForceErrors({p.ax, p.ay, p.az}, {exact.ax, exact.ay, exact.az});
    const ForceErrorStats b = summariseForceErrors({other.ax, other.ay, other.az}, {exact.ax, exact.ay, exact.az});
    // The balls make the lists a little longer (more cells opened), never less accurate: 10% of slack for the
    // relative test, scaled by |a| estimates a call apart.
    EXPECT_LE(a.p99, 1.1 * b.p99 + 1e-6) << "step " << step << ": built ahead " << a.p99 << ", within " << b.p99;
    EXPECT_LE(a.median, 1.1 * b.median + 1e-7) << "step " << step;
  }
  // The first calls build within the call (no motion to predict from yet); every later one a step ahead.
  EXPECT_GE(builtAhead, kSteps - 3) << "trees were not built a step ahead";
  EXPECT_GT(checking.numChecked(), 1000u * kSteps) << "the lists were not checked";
  // A body whose acceleration changes by more than the room's quarter of itself in one step (a close passage) may
  // leave its ball: its group's list fails the check and is walked again (repaired) at the exact positions. Rare:
  // 0-1 of ~4000-4700 lists in 30 steps over 8 seeds.
  EXPECT_EQ(checking.numFailed(), repaired);
  EXPECT_LE(100 * repaired, groupsUsed) << repaired << " of " << groupsUsed << " lists failed";
  std::printf("%d of %d trees built a step ahead, %llu of %llu lists repaired\n", builtAhead, kSteps,
              static_cast<unsigned long long>(repaired), static_cast<unsigned long long>(groupsUsed));
}

// A restart continues bit for bit with each tree built a step ahead (reuse off on an engine that keeps the bodies).
TEST(Restart, ContinuesBitForBitWithTreesBuiltAStepAhead) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  for (const bool waits : {true, false}) {
    SCOPED_TRACE(waits ? "adoption ahead waits" : "adoption ahead when done");
    TreeParams params;
    params.alpha = 1e-3;
    params.reuse = 1;
    params.adoptAheadWaits = waits;
    testing::expectBitIdenticalRestart(
        [] {
          return std::make_unique<testing::MirroringEngine>(std::make_unique<gpu::CpuEngine>(gpu::Precision::float32));
        },
        params, 2000, 30, seed);
  }
}

INSTANTIATE_TEST_SUITE_P(Inputs, Reuse, ::testing::Range(0, 2), [](const ::testing::TestParamInfo<int>& paramInfo) {
  return std::string(kCases[paramInfo.param].name);
});

}  // namespace
}  // namespace matcha::tree
