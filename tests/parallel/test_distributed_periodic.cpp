// SPDX-License-Identifier: MIT
// The periodic short range over several ranks (DistributedTreeSolver with a periodic split) against the one-rank
// PeriodicTreeSolver on the same bodies: per body, by id, and against a near-exact reference; each local group's whole
// list covers every body within r_cut of its box (nearest image) exactly once and what the other ranks sent stays
// within r_cut of a local group; a body outside the box stops every rank with one message.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "matcha/core/errors.hpp"
#include "matcha/core/force_error.hpp"
#include "matcha/core/opening_criterion.hpp"
#include "matcha/gpu/cpu_engine.hpp"
#include "matcha/mesh/particle_mesh.hpp"
#include "matcha/mesh/slab_mesh.hpp"
#include "matcha/mesh/treepm_solver.hpp"
#include "matcha/parallel/collective.hpp"
#include "matcha/parallel/distributed_tree_solver.hpp"
#include "matcha/tree/periodic_tree_solver.hpp"
#include "mpi_testing.hpp"

namespace matcha::parallel {
namespace {

using testing::worldRank;
using testing::worldSize;

/// TreePM's split for a 32^3 mesh in a box of side L (mesh/: periodicSplit, which parallel/'s tests do not link):
/// r_s = 1.25 L / 32, r_cut = 4.5 r_s = 0.176 L; softening 1e-3 L, TreePM's default.
GravityParams periodicGravity(double L) {
  GravityParams gravity;
  gravity.eps = 1e-3 * L;
  gravity.periodic.boxSize = L;
  gravity.periodic.splitRadius = 1.25 * L / 32.0;
  gravity.periodic.cutoffRadius = 4.5 * gravity.periodic.splitRadius;
  return gravity;
}

/// The two boxes of these tests, 2^13 bodies each: four Plummer clumps (some across the faces) in a uniform
/// background, where lists are long and cells deep, and a uniform box, where short-range pulls nearly cancel.
Particles periodicBox(bool clumpy, std::uint64_t seed, double L) {
  Particles p = clumpy ? matcha::testing::clumpyBox(seed, L, 1024, 4096)
                       : matcha::testing::uniformCube(std::size_t{1} << 13, seed, 0.5 * L);
  wrapIntoBox(p, L);
  return p;
}

/// Accelerations of `p` put back into id order (ids 0 .. N-1).
Particles byId(const Particles& p) {
  std::vector<std::uint32_t> order(p.size());
  for (std::size_t i = 0; i < p.size(); ++i) order[p.id[i]] = static_cast<std::uint32_t>(i);
  Particles sorted = p;
  sorted.permute(order);
  return sorted;
}

double rmsAcceleration(const Particles& p) {
  double sum = 0.0;
  for (std::size_t i = 0; i < p.size(); ++i) sum += p.ax[i] * p.ax[i] + p.ay[i] * p.ay[i] + p.az[i] * p.az[i];
  return std::sqrt(sum / double(p.size()));
}

/// Per body, |a - a_ref| over the rms |a_ref| (short-range pulls nearly vanish for some bodies, so that per-body
/// relative differences would measure those), both in id order.
std::vector<double> differences(const Particles& test, const Particles& reference) {
  const double rms = rmsAcceleration(reference);
  std::vector<double> d(test.size());
  for (std::size_t i = 0; i < test.size(); ++i) {
    d[i] = std::hypot(test.ax[i] - reference.ax[i], test.ay[i] - reference.ay[i], test.az[i] - reference.az[i]) / rms;
  }
  return d;
}

struct PeriodicCase {
  const char* name;
  bool clumpy;
  double theta;
  MultipoleOrder order;
  double alpha;
  gpu::Precision precision;  ///< of the engines on both sides
  /// Bounds on the per-body differences between K ranks and one (differences()): p99 and max.
  double p99, max;
};

/// Rank 0's verdict on K ranks' forces (`local`, this rank's bodies as the solver returned them) against
/// PeriodicTreeSolver on one rank, on the same engine precision and parameters, on the bodies as they came into the K
/// ranks' call (`input`: the same positions, and the accelerations that scaled the relative test), per body by id (c's
/// bounds on differences()); and both against a near-exact reference (the one-rank solver at theta 0.02 without the
/// relative test on the double engine: bodies alone within r_cut, brute force's sums to ~1e-12, tests/mesh:
/// PeriodicWalk.ShortRangeMatchesBruteForce), K ranks' errors within noise of one rank's. Collective (the gathers).
void expectOneRankForces(const Particles& local, const Particles& input, const DistributedTreeSolver& solver,
                         const PeriodicCase& c, const TreeParams& params, const GravityParams& gravity) {
  const LetStats let = solver.lastStats().let;
  std::uint64_t received = let.cellsReceived + let.bodiesReceived;
  MPI_Allreduce(MPI_IN_PLACE, &received, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  if (worldSize() > 1) {
    EXPECT_GT(received, 0u) << "no rank needed another's bodies: the exchange went untested";
  }
  const Particles gathered = testing::gatherById(local);
  const Particles all = testing::gatherById(input);
  if (worldRank() != 0) return;
  ASSERT_EQ(gathered.size(), all.size());

  Particles single = all;
  gpu::CpuEngine oneEngine(c.precision);
  tree::PeriodicTreeSolver oneRank(oneEngine, params, gravity);
  oneRank.computeForces(single);
  single = byId(single);
  Particles exact = all;
  gpu::CpuEngine doubleEngine(gpu::Precision::float64);
  TreeParams nearExact;
  nearExact.theta = 0.02;
  nearExact.alpha = 0.0;
  tree::PeriodicTreeSolver reference(doubleEngine, nearExact, gravity);
  reference.computeForces(exact);
  exact = byId(exact);
  std::size_t listCells = 0;
  for (std::size_t g = 0; g < solver.lastPlan().numGroups(); ++g) listCells += solver.lastPlan().numListCells(g);

  // Not trivially equal: the pulls are there, and the comparison holds every body.
  const double rms = rmsAcceleration(single);
  ASSERT_GT(rms, 0.0);
  ASSERT_GT(rmsAcceleration(gathered), 0.5 * rms);
  const std::vector<double> kVsOne = differences(gathered, single);
  ASSERT_EQ(kVsOne.size(), all.size());
  const std::vector<double> kErrors = differences(gathered, exact), oneErrors = differences(single, exact);
  const double p50 = percentile(kVsOne, 0.5), p99 = percentile(kVsOne, 0.99);
  const double worst = *std::max_element(kVsOne.begin(), kVsOne.end());
  const ForceErrorStats relative =
      summariseForceErrors({gathered.ax, gathered.ay, gathered.az}, {single.ax, single.ay, single.az});
  std::printf(
      "[ periodic ] %s, %d ranks vs 1 (of the rms pull %.3e): p50 %.2e p99 %.2e max %.2e; per-body relative p50 %.2e "
      "p99 %.2e | against the reference: %d ranks p50 %.2e p99 %.2e max %.2e, 1 rank p50 %.2e p99 %.2e max %.2e; "
      "rank 0 LET received %llu cells %llu bodies, sent %llu cells %llu bodies; rank 0 list cells %zu\n",
      c.name, worldSize(), rms, p50, p99, worst, relative.median, relative.p99, worldSize(), percentile(kErrors, 0.5),
      percentile(kErrors, 0.99), *std::max_element(kErrors.begin(), kErrors.end()), percentile(oneErrors, 0.5),
      percentile(oneErrors, 0.99), *std::max_element(oneErrors.begin(), oneErrors.end()),
      (unsigned long long)let.cellsReceived, (unsigned long long)let.bodiesReceived, (unsigned long long)let.cellsSent,
      (unsigned long long)let.bodiesSent, listCells);
  EXPECT_LE(p99, c.p99) << c.name;
  EXPECT_LE(worst, c.max) << c.name;
  // Against the reference, K ranks' errors are one rank's within noise.
  EXPECT_LE(percentile(kErrors, 0.5), 1.1 * percentile(oneErrors, 0.5) + 1e-6) << c.name;
  EXPECT_LE(percentile(kErrors, 0.99), 1.2 * percentile(oneErrors, 0.99) + 1e-6) << c.name;
}

TreeParams paramsOf(const PeriodicCase& c) {
  TreeParams params;
  params.theta = c.theta;
  params.multipole = c.order;
  params.alpha = c.alpha;
  return params;
}

class DistributedPeriodicForces : public ::testing::TestWithParam<PeriodicCase> {};

// From fresh initial conditions (both sides make their estimate pass). With theta 0.02 and alpha 1e-30 every cell
// within reach is opened down to bodies on one rank as on K: the lists hold the same bodies and the forces differ by
// the sums' order alone. With the defaults the K ranks' trees differ from the one-rank tree where a cell would hold
// bodies of two ranks, and their groups differ near the domains' faces: the lists take other cells, and the forces
// differ by the trees' approximation, a different sample of the same error distribution.
TEST_P(DistributedPeriodicForces, MatchOneRankPerBody) {
  const PeriodicCase c = GetParam();
  const std::uint64_t seed = testing::sharedSeed();
  SCOPED_TRACE(matcha::testing::seedTrace(seed));
  const double L = 1.5;
  const GravityParams gravity = periodicGravity(L);
  Particles local = testing::dealOut(periodicBox(c.clumpy, seed, L), worldRank(), worldSize());
  const Particles input = local;
  const TreeParams params = paramsOf(c);
  gpu::CpuEngine engine(c.precision);
  DistributedTreeSolver solver(engine, params, gravity, MPI_COMM_WORLD);
  solver.computeForces(local);
  EXPECT_EQ(solver.lastStats().estimatePass, c.alpha > 0.0);
  expectOneRankForces(local, input, solver, c, params, gravity);
}

// Bounds: the measured worst over 17 runs at 2 and 4 ranks (fresh seeds), with a margin (README "Running on several
// ranks"). "Bodies alone": theta 0.02 and alpha 1e-30, so that no cell passes unless it is (as good as) a point: on K
// ranks as on one the lists hold every body within reach. On the uniform box no list holds a cell, and in double the
// sums differ by their order alone (max 1.6e-14). On the clumpy box, a few cells at the cut's boundary remain, which
// one side's float walk takes and the other's double test skips (such a cell adds its truncated pull, f(r_cut) =
// 1.75e-2 of the Newtonian): in double p99 1.9e-9 in 17 runs, 1.4e-7 and then 1.4e-6 in later draws (more bodies near
// such a cell: MATCHA_TEST_SEED=15585679705000575767 on 2 ranks, p99 1.42e-6, max 8.0e-6, the same before and after
// the fifth session's decomposition changes), max 1.1e-5: the p99 bound is the max's scale, 1e-5. In float p99 8.6e-7,
// max 1.3e-4 (close pairs in float about other group centres, over the uniform box's small rms). The defaults (theta
// 0.5, quadrupoles; alpha 1e-3, or 0 in the tests below): p99 2.2e-4, max 1.2e-3, the trees' approximation error (p99
// 2e-4 - 4.5e-4 against the reference, on both sides).
INSTANTIATE_TEST_SUITE_P(
    Boxes, DistributedPeriodicForces,
    ::testing::Values(PeriodicCase{"clumpy, bodies alone, double", true, 0.02, MultipoleOrder::quadrupole, 1e-30,
                                   gpu::Precision::float64, 1e-5, 1e-4},
                      PeriodicCase{"uniform, bodies alone, double", false, 0.02, MultipoleOrder::quadrupole, 1e-30,
                                   gpu::Precision::float64, 1e-13, 1e-12},
                      PeriodicCase{"clumpy, bodies alone", true, 0.02, MultipoleOrder::quadrupole, 1e-30,
                                   gpu::Precision::float32, 2e-5, 1e-3},
                      PeriodicCase{"uniform, bodies alone", false, 0.02, MultipoleOrder::quadrupole, 1e-30,
                                   gpu::Precision::float32, 2e-5, 1e-3},
                      PeriodicCase{"clumpy, defaults", true, 0.5, MultipoleOrder::quadrupole, 1e-3,
                                   gpu::Precision::float32, 6e-4, 5e-3},
                      PeriodicCase{"uniform, defaults", false, 0.5, MultipoleOrder::quadrupole, 1e-3,
                                   gpu::Precision::float32, 6e-4, 5e-3}),
    [](const ::testing::TestParamInfo<PeriodicCase>& param) {
      std::string name = param.param.name;
      std::replace_if(
          name.begin(), name.end(), [](char ch) { return !std::isalnum(static_cast<unsigned char>(ch)); }, '_');
      return name;
    });

// Bodies that drift across the box's faces (wrapped back in, as the integrator wraps them at each drift) and across
// the domains: three calls, each split by the last call's work with its accelerations scaling the relative test, then
// the defaults' bounds against one rank on the same bodies.
TEST(DistributedPeriodic, BodiesThatCrossFacesAndDomainsMigrate) {
  const std::uint64_t seed = testing::sharedSeed();
  SCOPED_TRACE(matcha::testing::seedTrace(seed));
  const double L = 1.5;
  const GravityParams gravity = periodicGravity(L);
  const std::size_t n = std::size_t{1} << 13;
  Particles local = testing::dealOut(periodicBox(true, seed, L), worldRank(), worldSize());
  // K ranks' p99 difference from one rank: 1e-5 - 2e-4 of the rms pull on 12 fresh seeds, 4.8e-4 on seed
  // 288995809125929944 (where the drifted bodies' trees are cut differently the difference is of the trees' own
  // error, whose p99 against the reference is 3-7e-4 on both sides; that comparison below is the one that matters).
  const PeriodicCase c{"clumpy, after drifts across the faces",
                       true,
                       0.5,
                       MultipoleOrder::quadrupole,
                       1e-3,
                       gpu::Precision::float32,
                       8e-4,
                       5e-3};
  const TreeParams params = paramsOf(c);
  gpu::CpuEngine engine;
  DistributedTreeSolver solver(engine, params, gravity, MPI_COMM_WORLD);
  solver.computeForces(local);
  std::uint64_t migrated = 0;
  Particles input;
  for (int call = 0; call < 3; ++call) {
    for (std::size_t i = 0; i < local.size(); ++i) {
      const double phase = double(local.id[i]);
      local.x[i] += 0.2 * L + 0.01 * L * std::sin(phase);
      local.y[i] -= 0.15 * L;
      local.z[i] += 0.05 * L * std::cos(phase);
    }
    wrapIntoBox(local, L);
    input = local;
    solver.computeForces(local);
    EXPECT_FALSE(solver.lastStats().estimatePass);
    migrated += solver.lastStats().decomposition.bodiesReceived;
  }
  MPI_Allreduce(MPI_IN_PLACE, &migrated, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  if (worldSize() > 1) {
    EXPECT_GT(migrated, 0u);
  }
  std::vector<std::uint64_t> ids = testing::allGather(local.id, MPI_UINT64_T);
  std::sort(ids.begin(), ids.end());
  ASSERT_EQ(ids.size(), n);
  for (std::size_t k = 0; k < n; ++k) ASSERT_EQ(ids[k], k);
  const DistributedStats& stats = solver.lastStats();
  if (worldRank() == 0) {
    std::printf(
        "[ balance  ] periodic clumpy box after 3 drifts: work imbalance %.3f (split for %.3f), %llu bodies "
        "migrated in all\n",
        stats.imbalance(), stats.decomposition.imbalance(), (unsigned long long)migrated);
  }
  // The split balances the last call's work at the last call's positions, and the clumps have moved by 0.2 L since:
  // 1.04-1.14 in most draws on 4 ranks, 1.30 in one of ~20 (a clump that crossed into a lighter domain). A bound on
  // the split's purpose, not its exactness (test_distributed_forces.cpp holds the split of unmoved bodies to 1.15).
  EXPECT_LE(stats.imbalance(), 1.5);
  expectOneRankForces(local, input, solver, c, params, gravity);
}

// Block time steps keep the tree: a call of some groups only (every body in bin 1 or 2, the call asked for bins >= 1:
// all are evaluated, so that every force can be checked) after another keeps the last call's split and tree, refitted
// to bodies that drifted across the box's faces (wrapped back in: their cells then span the box, and are opened) and
// across the domains (they stay on their ranks), and keeps the defaults' bounds against one rank. A solver with reuse 1
// builds at every call; a checkpoint's boundary (a call of every group, or endTreeForCheckpoint) makes the next build.
TEST(DistributedPeriodic, BlockStepsKeepTheTreeAcrossFacesAndDomains) {
  const std::uint64_t seed = testing::sharedSeed();
  SCOPED_TRACE(matcha::testing::seedTrace(seed));
  const double L = 1.5;
  const GravityParams gravity = periodicGravity(L);
  Particles local = testing::dealOut(periodicBox(true, seed, L), worldRank(), worldSize());
  const PeriodicCase c{"clumpy, a kept tree after drifts across the faces",
                       true,
                       0.5,
                       MultipoleOrder::quadrupole,
                       1e-3,
                       gpu::Precision::float32,
                       6e-4,
                       5e-3};  // MatchOneRankPerBody's defaults' bounds (K ranks' trees differ from one rank's)
  TreeParams params = paramsOf(c);
  gpu::CpuEngine engine;
  DistributedTreeSolver solver(engine, params, gravity, MPI_COMM_WORLD);
  params.reuse = 1;
  DistributedTreeSolver everyCall(engine, params, gravity, MPI_COMM_WORLD);
  params.reuse = 0;
  local.timeBin.assign(local.size(), 1);
  for (std::size_t i = 0; i < local.size(); ++i) local.timeBin[i] = static_cast<std::uint8_t>(1 + local.id[i] % 2);
  Particles other = local;
  solver.computeForces(local);  // every group (bin 0 and up)
  everyCall.computeForces(other);
  EXPECT_TRUE(solver.atCheckpointBoundary());
  solver.setLowestActiveBin(1);
  everyCall.setLowestActiveBin(1);
  solver.computeForces(local);
  everyCall.computeForces(other);
  EXPECT_FALSE(solver.lastStats().keptTree) << "the first call of some groups builds";
  EXPECT_FALSE(solver.atCheckpointBoundary());
  EXPECT_TRUE(everyCall.atCheckpointBoundary());
  const auto drift = [&](Particles& p, double by) {
    for (std::size_t i = 0; i < p.size(); ++i) {
      const double phase = double(p.id[i]);
      p.x[i] += by * L * (3.0 + std::sin(phase));
      p.y[i] -= 2.0 * by * L;
      p.z[i] += by * L * std::cos(phase);
    }
    wrapIntoBox(p, L);
  };
  const auto keptCall = [&](double by, const char* what, const PeriodicCase& bounds) {
    SCOPED_TRACE(what);
    drift(local, by);
    drift(other, by);
    const Particles input = local;
    solver.computeForces(local);
    everyCall.computeForces(other);
    EXPECT_TRUE(solver.lastStats().keptTree);
    EXPECT_FALSE(everyCall.lastStats().keptTree) << "reuse 1 builds at every call";
    EXPECT_EQ(solver.lastStats().decompositionSeconds, 0.0);
    EXPECT_EQ(local.id, input.id) << "a kept tree keeps its bodies where they are";
    EXPECT_FALSE(solver.lastStats().estimatePass);
    expectOneRankForces(local, input, solver, bounds, params, gravity);
    if (worldRank() == 0) {
      std::printf("[ kept     ] %s: interactions per evaluated body %.0f on the kept tree, %.0f on a new one\n", what,
                  solver.lastStats().workPerEvaluatedBody, everyCall.lastStats().workPerEvaluatedBody);
    }
    return solver.lastStats().workPerEvaluatedBody / everyCall.lastStats().workPerEvaluatedBody;
  };
  // A step's drift (~3e-3 of the box, some bodies across a face): the tree serves on (the interactions per body
  // 0.99-1.07x a new tree's over draws).
  const double grown = keptCall(1e-3, "a drift of ~3e-3 box", c);
  EXPECT_LT(grown, 1.3);
  EXPECT_FALSE(solver.atCheckpointBoundary()) << "the kept tree has not outgrown its use";
  // A drift of ~0.2 box that spreads the clumps by ~0.1 box (a fifth of the bodies across a face, many across the
  // domains): the cells grew with it, the lists too (2.0-2.3x a new tree's), and the next call builds. The spread
  // clumps' small pulls leave one rank's own error up to 7e-4 of their rms, hence the wider bounds between K ranks and
  // one (against the reference, the kept tree's errors stay within noise of one rank's: p99 ~3e-6 against ~5e-4).
  PeriodicCase spread = c;
  spread.p99 = 1.5e-3;
  spread.max = 1e-2;
  EXPECT_GT(keptCall(0.06, "a drift of ~0.2 box", spread), 1.5);
  EXPECT_TRUE(solver.atCheckpointBoundary()) << "the kept tree outgrew its use";
  solver.computeForces(local);
  EXPECT_FALSE(solver.lastStats().keptTree);
  std::uint64_t moved = solver.lastStats().decomposition.bodiesReceived;
  MPI_Allreduce(MPI_IN_PLACE, &moved, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  if (worldSize() > 1) {
    EXPECT_GT(moved, 0u) << "the drift moved no body into another domain: the kept tree's case went untested";
  }

  // A checkpoint's boundary made (endTreeForCheckpoint): the next call builds, as a restarted run's first would.
  EXPECT_FALSE(solver.atCheckpointBoundary());
  EXPECT_TRUE(solver.endTreeForCheckpoint());
  EXPECT_TRUE(solver.atCheckpointBoundary());
  solver.computeForces(local);
  EXPECT_FALSE(solver.lastStats().keptTree);
  EXPECT_EQ(solver.totals().keptTrees, 2u);
}

// Ranks left without bodies (one body weighs as much as ten million others: on 4 ranks two hold nothing) take part in
// the exchange with no tree and no groups; the others' forces keep the defaults' bounds against one rank.
TEST(DistributedPeriodic, RanksWithoutBodiesTakePart) {
  const std::uint64_t seed = testing::sharedSeed();
  SCOPED_TRACE(matcha::testing::seedTrace(seed));
  const double L = 1.5;
  const GravityParams gravity = periodicGravity(L);
  Particles local = testing::dealOut(periodicBox(false, seed, L), worldRank(), worldSize());
  const PeriodicCase c{"uniform, ranks left empty", false, 0.5, MultipoleOrder::quadrupole, 0.0,
                       gpu::Precision::float32,     4e-4,  5e-3};
  const TreeParams params = paramsOf(c);
  gpu::CpuEngine engine;
  DistributedTreeSolver solver(engine, params, gravity, MPI_COMM_WORLD);
  std::vector<double> weights(local.size(), 1.0);
  for (std::size_t i = 0; i < local.size(); ++i) weights[i] = local.id[i] == 7 ? 1e7 : 1.0;
  solver.setWorkWeights(weights);
  const Particles input = local;
  solver.computeForces(local);
  int empty = local.empty() ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &empty, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(empty, std::max(0, worldSize() - 2));
  expectOneRankForces(local, input, solver, c, params, gravity);
}

// Block time steps (ForceSolver::setLowestActiveBin): a call evaluates only the groups that hold a body whose step ends
// there. Two solvers that split alike (each primed by the same first call) get the same bodies with bins, one asked
// for bins >= 2 only, the other for every body: the active bodies' forces are the same, bit for bit (their groups'
// lists are the same, the other ranks pruning for fewer groups), the others' are computed as well where they share a
// group with an active body and keep what they brought elsewhere, and the call walked fewer groups; the next split
// keeps weights for every body.
TEST(DistributedPeriodic, BlockStepsEvaluateTheActiveGroupsAlone) {
  const std::uint64_t seed = testing::sharedSeed();
  SCOPED_TRACE(matcha::testing::seedTrace(seed));
  const double L = 1.0;
  const GravityParams gravity = periodicGravity(L);
  TreeParams params;
  params.theta = 0.6;
  params.alpha = 1e-3;
  gpu::CpuEngine engine;
  DistributedTreeSolver some(engine, params, gravity, MPI_COMM_WORLD), all(engine, params, gravity, MPI_COMM_WORLD);
  const Particles box = periodicBox(true, seed, L);
  Particles first = testing::dealOut(box, worldRank(), worldSize());
  Particles second = first;
  some.computeForces(first);
  all.computeForces(second);
  ASSERT_EQ(first.id, second.id);
  // Active (bins 2, 3) in a slab of the box, as a clump's bodies would be: the groups elsewhere hold none.
  const auto binOf = [&](std::uint64_t id) {
    return static_cast<std::uint8_t>((box.x[id] < 0.35 * L ? 2 : 0) + id % 2);
  };
  for (Particles* p : {&first, &second}) {
    p->timeBin.resize(p->size());
    for (std::size_t i = 0; i < p->size(); ++i) p->timeBin[i] = binOf(p->id[i]);
    for (double& x : p->x) x = wrapIntoBox(x + 1e-4 * L, L);  // the bodies moved a little since
  }
  const Particles brought = first;
  some.setLowestActiveBin(2);
  const ForceReport partial = some.computeForces(first);
  const ForceReport whole = all.computeForces(second);
  ASSERT_EQ(first.id, second.id) << "the two solvers split alike";
  std::size_t active = 0, kept = 0;
  std::vector<std::size_t> slotOfId;
  for (std::size_t i = 0; i < brought.size(); ++i) {
    if (slotOfId.size() <= brought.id[i]) slotOfId.resize(brought.id[i] + 1, SIZE_MAX);
    slotOfId[brought.id[i]] = i;
  }
  for (std::size_t i = 0; i < first.size(); ++i) {
    ASSERT_EQ(first.timeBin[i], binOf(first.id[i])) << "the bins travel with their bodies";
    if (first.timeBin[i] >= 2) {
      ++active;
      ASSERT_EQ(first.ax[i], second.ax[i]) << "body " << first.id[i];
      ASSERT_EQ(first.az[i], second.az[i]) << "body " << first.id[i];
    } else if (first.id[i] < slotOfId.size() && slotOfId[first.id[i]] != SIZE_MAX) {
      // In an evaluated group (beside an active body) an inactive body gets its force too; elsewhere it keeps its own.
      const double own = brought.ax[slotOfId[first.id[i]]];
      ASSERT_TRUE(first.ax[i] == own || first.ax[i] == second.ax[i]) << "body " << first.id[i];
      kept += first.ax[i] == own && own != second.ax[i] ? 1 : 0;
    }
  }
  std::uint64_t counts[5] = {active, first.size(), partial.numGroupsWalked, whole.numGroupsWalked, kept};
  MPI_Allreduce(MPI_IN_PLACE, counts, 5, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_GT(counts[0], 0u) << "no body was active";
  EXPECT_GT(counts[4], 0u) << "no inactive group kept its bodies' forces";
  EXPECT_LT(counts[2], counts[3]) << "every group was walked";
  EXPECT_EQ(some.nextWorkWeights().size(), first.size());
  EXPECT_TRUE(
      std::all_of(some.nextWorkWeights().begin(), some.nextWorkWeights().end(), [](double w) { return w > 0; }));
}

// TreePM over K ranks: the distributed tree's short range and a particle mesh that every rank solves for the whole
// box, its deposits summed over the ranks (ParticleMesh::setDensityReduction with sumOverRanks, the CUDA engine's
// way), or the mesh in slabs over the ranks (mesh::SlabMesh as TreePM's long range, the CPU engine's), against
// one-rank TreePM on the same bodies, per body by id. The short range takes bodies alone in double (theta 0.02, alpha
// 1e-30: the clumpy case of MatchOneRankPerBody, whose bounds these are), so the mesh adds its summation order's
// rounding only; a rank's mesh without the others' deposits is off by the long range itself (without the sum, 2 ranks:
// p99 3e-2 of the rms pull, the potential 0.3 of its rms). Twice: every rank with bodies, then ranks left without any
// (they deposit nothing and still take part in the sum).
TEST(DistributedPeriodic, TreePmOverRanksMatchesOneRank) {
  const std::uint64_t seed = testing::sharedSeed();
  SCOPED_TRACE(matcha::testing::seedTrace(seed));
  const double L = 1.5;
  mesh::MeshParams meshParams;
  meshParams.boxSize = L;
  meshParams.grid = 32;
  GravityParams gravity;
  gravity.eps = 1e-3 * L;
  gravity.periodic = mesh::periodicSplit(meshParams);
  TreeParams params;
  params.theta = 0.02;
  params.alpha = 1e-30;
  mesh::SlabMesh slabs(meshParams, MPI_COMM_WORLD);
  for (const auto& [inSlabs, emptyRanks] : {std::pair{false, false}, {false, true}, {true, false}, {true, true}}) {
    SCOPED_TRACE(emptyRanks ? "ranks left without bodies" : "bodies on every rank");
    SCOPED_TRACE(inSlabs ? "the mesh in slabs" : "the whole mesh on every rank");
    Particles local = testing::dealOut(periodicBox(true, seed, L), worldRank(), worldSize());
    const Particles input = local;
    gpu::CpuEngine engine(gpu::Precision::float64);
    auto shortRange = std::make_unique<DistributedTreeSolver>(engine, params, gravity, MPI_COMM_WORLD);
    if (emptyRanks) {  // one body weighs as much as ten million others: on 4 ranks two hold nothing
      std::vector<double> weights(local.size(), 1.0);
      for (std::size_t i = 0; i < local.size(); ++i) weights[i] = local.id[i] == 7 ? 1e7 : 1.0;
      shortRange->setWorkWeights(weights);
    }
    std::unique_ptr<mesh::TreePmSolver> treePm;
    if (inSlabs) {
      treePm = std::make_unique<mesh::TreePmSolver>(
          std::move(shortRange), meshParams, gravity,
          [&slabs](const SourceView& s, const GravityParams& g, const ForceView& out) {
            slabs.addLongRange(s, g, out);
          },
          "slabs");
      EXPECT_NE(treePm->describe().find("mesh 32^3 on slabs"), std::string::npos) << treePm->describe();
    } else {
      treePm = std::make_unique<mesh::TreePmSolver>(std::move(shortRange), meshParams, gravity);
      treePm->setDensityReduction([](std::span<double> grid) { sumOverRanks(grid, MPI_COMM_WORLD); });
    }
    treePm->computeForces(local);
    int empty = local.empty() ? 1 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &empty, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    EXPECT_EQ(empty, emptyRanks ? std::max(0, worldSize() - 2) : 0);
    const Particles gathered = testing::gatherById(local);
    const Particles all = testing::gatherById(input);
    if (worldRank() != 0) continue;
    ASSERT_EQ(gathered.size(), all.size());
    Particles single = all;
    gpu::CpuEngine oneEngine(gpu::Precision::float64);
    mesh::TreePmSolver oneRank(std::make_unique<tree::PeriodicTreeSolver>(oneEngine, params, gravity), meshParams,
                               gravity);
    oneRank.computeForces(single);
    single = byId(single);
    Particles longRange = byId(all);
    for (std::vector<double>* array : {&longRange.ax, &longRange.ay, &longRange.az, &longRange.pot}) {
      std::fill(array->begin(), array->end(), 0.0);
    }
    mesh::ParticleMesh(meshParams).addLongRange(longRange.sources(), gravity, longRange.forces());
    const std::vector<double> kVsOne = differences(gathered, single);
    const double p99 = percentile(kVsOne, 0.99), worst = *std::max_element(kVsOne.begin(), kVsOne.end());
    double potentialWorst = 0.0, potentialRms = 0.0;
    for (std::size_t i = 0; i < single.size(); ++i) {
      potentialWorst = std::max(potentialWorst, std::abs(gathered.pot[i] - single.pot[i]));
      potentialRms += single.pot[i] * single.pot[i];
    }
    potentialRms = std::sqrt(potentialRms / double(single.size()));
    const double meshShare = rmsAcceleration(longRange) / rmsAcceleration(single);
    std::printf(
        "[ TreePM ] %d ranks vs 1, %s (the mesh's rms pull %.2f of the whole): p99 %.2e max %.2e of the rms pull; "
        "potential max %.2e of its rms\n",
        worldSize(), inSlabs ? "slabs" : "whole mesh", meshShare, p99, worst, potentialWorst / potentialRms);
    ASSERT_GT(meshShare, 1e-3) << "the long range must matter for the comparison to see the mesh";
    EXPECT_LE(p99, 1e-5);
    EXPECT_LE(worst, 1e-4);
    EXPECT_LE(potentialWorst, 1e-5 * potentialRms);
  }
}

class DistributedPeriodicCoverage : public ::testing::TestWithParam<testing::TreeCase> {};

// Each local group's whole list (its float walk of the local tree, then its walks of the received subtrees): no body
// twice, every body within r_cut of the group's box at its nearest image exactly once (cells by their bodies' ids,
// bodies by id), and any body left out at least r_cut away; every received cell in it passes visitPeriodic for the
// group (the sender's decision, repeated on the same numbers), every local one is not opened there (the float walk is
// visitPeriodic's conservative twin). What came from the other ranks stays within reach: every received body lies
// within r_cut + 2 b_max of its leaf of some local group's box (its leaf was not skipped by it).
TEST_P(DistributedPeriodicCoverage, EveryBodyWithinTheCutOnce) {
  const testing::TreeCase c = GetParam();
  const std::uint64_t seed = testing::sharedSeed();
  SCOPED_TRACE(matcha::testing::seedTrace(seed));
  const double L = 1.5;
  const GravityParams gravity = periodicGravity(L);
  const PeriodicSplit& split = gravity.periodic;
  const Particles all = periodicBox(true, seed, L);
  const std::size_t n = all.size();
  Particles local = testing::dealOut(all, worldRank(), worldSize());
  TreeParams params;
  params.theta = c.theta;
  params.multipole = c.order;
  params.alpha = c.alpha;
  params.ncrit = c.ncrit;
  gpu::CpuEngine engine;
  DistributedTreeSolver solver(engine, params, gravity, MPI_COMM_WORLD);
  solver.computeForces(local);

  // Which ids each rank's cells hold: every rank's bodies in its tree order, and its cells' ranges over them.
  const tree::Octree& octree = solver.octree();
  std::vector<std::uint32_t> ranges;
  for (std::size_t cell = 0; cell < octree.numCells(); ++cell) {
    ranges.push_back(octree.bodies[cell].first);
    ranges.push_back(octree.bodies[cell].last);
  }
  const std::vector<std::uint64_t> allIds = testing::allGather(local.id, MPI_UINT64_T);
  const std::vector<std::uint32_t> allRanges = testing::allGather(ranges, MPI_UINT32_T);
  std::vector<std::size_t> idOffset(worldSize() + 1, 0), rangeOffset(worldSize() + 1, 0);
  {
    int count = static_cast<int>(local.size()), cells = static_cast<int>(ranges.size());
    std::vector<int> counts(worldSize()), cellCounts(worldSize());
    MPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD);
    MPI_Allgather(&cells, 1, MPI_INT, cellCounts.data(), 1, MPI_INT, MPI_COMM_WORLD);
    for (int r = 0; r < worldSize(); ++r) {
      idOffset[r + 1] = idOffset[r] + counts[r];
      rangeOffset[r + 1] = rangeOffset[r] + cellCounts[r];
    }
  }

  const LocalEssentialTree& let = solver.localEssentialTree();
  const InteractionPlan& plan = solver.lastPlan();
  const tree::Groups& groups = solver.groups();
  const CellMultipoles& cells = let.cells();
  ASSERT_EQ(plan.numGroups(), groups.size());
  const auto distanceToGroup = [&](std::size_t g, double x, double y, double z) {
    const double* centre = &groups.centre[3 * g];
    const double* half = &groups.halfExtent[3 * g];
    return std::sqrt(periodicDistanceToBox2(x, y, z, centre[0], centre[1], centre[2], half[0], half[1], half[2], L));
  };
  std::vector<int> covered(n);
  std::size_t withinCut = 0, leftOut = 0, remoteCells = 0, remoteBodies = 0;
  for (std::size_t g = 0; g < plan.numGroups(); ++g) {
    std::fill(covered.begin(), covered.end(), 0);
    const auto cover = [&](int owner, std::uint32_t first, std::uint32_t last) {
      for (std::uint32_t b = first; b < last; ++b) ++covered[allIds[idOffset[owner] + b]];
    };
    const double tolerance = groups.relativeTolerance[g];
    for (std::uint32_t k = plan.cellListOffsets[g]; k < plan.cellListOffsets[g + 1]; ++k) {
      const std::uint32_t cell = plan.cellList[k];
      const bool remote = cell >= let.numLocalCells();
      const int owner = remote ? let.cellOwner(cell) : worldRank();
      const std::size_t ownerCell = remote ? let.cellSourceId(cell) : cell;
      const std::size_t at = rangeOffset[owner] + 2 * ownerCell;
      cover(owner, allRanges[at], allRanges[at + 1]);
      if (remote) {
        const ExportedCell& sent = let.receivedCell(cell);
        ASSERT_EQ(tree::visitPeriodic(sent.com, sent.openingRadius, sent.mass, sent.bmax, cells.hasQuadrupole,
                                      &groups.centre[3 * g], &groups.halfExtent[3 * g], tolerance, split),
                  tree::PeriodicVisit::accept)
            << "group " << g << ", received cell " << cell;
        ++remoteCells;
      } else {
        ASSERT_NE(tree::visitPeriodic(octree, cell, groups, g, split), tree::PeriodicVisit::open)
            << "group " << g << ", cell " << cell;
      }
    }
    for (std::uint32_t k = plan.bodyListOffsets[g]; k < plan.bodyListOffsets[g + 1]; ++k) {
      for (std::uint32_t b = plan.bodyList[k].first; b < plan.bodyList[k].last; ++b) {
        const bool remote = b >= let.numLocalBodies();
        ++covered[remote ? let.bodyId(b) : local.id[b]];
        remoteBodies += remote ? 1 : 0;
      }
    }
    for (std::size_t id = 0; id < n; ++id) {
      ASSERT_LE(covered[id], 1) << "group " << g << " on rank " << worldRank() << " lists body " << id << " twice";
      const double distance = distanceToGroup(g, all.x[id], all.y[id], all.z[id]);
      if (distance < split.cutoffRadius) {
        ++withinCut;
        ASSERT_EQ(covered[id], 1) << "group " << g << " on rank " << worldRank() << " lost body " << id << " at "
                                  << distance << " from its box";
      } else if (covered[id] == 0) {
        ++leftOut;
      }
    }
  }

  // Every received body within reach of some local group: its leaf's centre of mass less than r_cut + b_max from the
  // group's box, the body within b_max of it.
  std::size_t beyond = 0;
  const SourceView sources = let.sources();
  for (std::size_t cell = let.numLocalCells(); cell < cells.size(); ++cell) {
    const ExportedCell& sent = let.receivedCell(cell);
    for (std::uint32_t b = sent.firstBody; b < sent.lastBody; ++b) {
      double nearest = std::numeric_limits<double>::infinity();
      for (std::size_t g = 0; g < groups.size(); ++g) {
        nearest = std::min(nearest, distanceToGroup(g, sources.x[b], sources.y[b], sources.z[b]));
      }
      beyond += nearest < split.cutoffRadius + 2.0 * sent.bmax ? 0 : 1;
    }
  }
  EXPECT_EQ(beyond, 0u) << "received bodies beyond any local group's reach";
  EXPECT_GT(withinCut, 0u);
  const LetStats& stats = solver.lastStats().let;
  std::uint64_t totals[2] = {stats.cellsSent, stats.bodiesSent};
  MPI_Allreduce(MPI_IN_PLACE, totals, 2, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  if (worldSize() == 1) {
    EXPECT_EQ(stats.cellsReceived + stats.bodiesReceived + stats.cellsSent + stats.bodiesSent, 0u);
  } else {
    EXPECT_GT(totals[0], 0u);
  }
  if (worldRank() == 0) {
    std::printf(
        "[ LET      ] periodic, theta %.2f %s alpha %g ncrit %u: rank 0 %zu bodies %zu groups, received %llu cells "
        "%llu bodies, sent %llu; all ranks sent %llu cells %llu bodies (of %zu bodies); rank 0's lists: %zu "
        "received cells, %zu received bodies, %zu group-body pairs within r_cut, %zu left out beyond\n",
        c.theta, toString(c.order).c_str(), c.alpha, c.ncrit, local.size(), groups.size(),
        (unsigned long long)stats.cellsReceived, (unsigned long long)stats.bodiesReceived,
        (unsigned long long)(stats.cellsSent + stats.bodiesSent), (unsigned long long)totals[0],
        (unsigned long long)totals[1], n, remoteCells, remoteBodies, withinCut, leftOut);
  }
}

INSTANTIATE_TEST_SUITE_P(Criteria, DistributedPeriodicCoverage,
                         ::testing::Values(testing::TreeCase{0.5, MultipoleOrder::quadrupole, 1e-3, 256},
                                           testing::TreeCase{0.8, MultipoleOrder::monopole, 0.0, 64}));

// A body outside [0, L)^3 on one rank: every rank throws one InputError, the lowest offender's, naming the rank and
// the body; the solver then takes the corrected bodies.
TEST(DistributedPeriodic, BodyOutsideTheBoxStopsEveryRank) {
  const double L = 1.0;
  gpu::CpuEngine engine;
  DistributedTreeSolver solver(engine, TreeParams{}, periodicGravity(L), MPI_COMM_WORLD);
  const Particles all = periodicBox(false, 11, L);
  const int last = worldSize() - 1;
  for (const double outside : {L, -1e-12, 2.5 * L}) {
    Particles local = testing::dealOut(all, worldRank(), worldSize());
    if (worldRank() == last) local.y[local.size() / 2] = outside;
    std::string message;
    try {
      solver.computeForces(local);
    } catch (const InputError& error) {
      message = error.what();
    }
    ASSERT_FALSE(message.empty()) << "no error for a body at y = " << outside;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_NE(message.find("outside the periodic box"), std::string::npos) << message;
    if (worldSize() > 1) {
      EXPECT_EQ(message.rfind("rank " + std::to_string(last) + ": ", 0), 0u) << message;
    }
  }
  Particles local = testing::dealOut(all, worldRank(), worldSize());
  EXPECT_NO_THROW(solver.computeForces(local));
}

}  // namespace
}  // namespace matcha::parallel
