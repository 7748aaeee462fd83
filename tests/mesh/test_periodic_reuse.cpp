// SPDX-License-Identifier: MIT
// The periodic tree solver's reuse (tree/periodic_tree_solver.hpp, TreeParams::reuse > 1): a tree built over the
// bodies as balls serves the calls after it while every body stays in its ball. Checked at every call of a drifting,
// clustered box whose bodies cross the faces: the reused lists pass the opening criterion and the r_cut skip at the
// bodies' current positions (the walk a fresh tree would do, on the reused tree refitted), the forces match brute
// force as a fresh tree's do, a body that leaves its ball keeps the tree (its pulls added exactly), and many such
// bodies, or bodies in another order, make the call build anew.
#include <gtest/gtest.h>
#include <tbb/global_control.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "matcha/core/checkpoint_state.hpp"
#include "matcha/core/errors.hpp"
#include "matcha/core/force_error.hpp"
#include "matcha/core/opening_criterion.hpp"
#include "matcha/core/pair_interaction.hpp"
#include "matcha/core/tree_topology.hpp"
#include "matcha/gpu/cpu_engine.hpp"
#include "matcha/integrator/leapfrog.hpp"
#include "matcha/mesh/treepm_solver.hpp"
#include "matcha/testing/block_steps.hpp"
#include "matcha/testing/generators.hpp"
#include "matcha/testing/mirroring_engine.hpp"
#include "matcha/testing/periodic_reference.hpp"
#include "matcha/testing/same_bodies.hpp"
#include "matcha/tree/periodic_tree_solver.hpp"

namespace matcha::mesh {
namespace {

/// Per body |a - a_brute| over the rms |a_brute| (tests/support: the short range by brute force in double).
std::vector<double> errorsAgainstBruteForce(const Particles& p, const GravityParams& gravity) {
  return testing::errorsOverRmsById(p, testing::bruteForceShortRange(p, gravity));
}

/// The solver's current lists against the bodies' current positions, as a fresh walk of the refitted tree would
/// judge them: `path` are the positions continued from the build across the faces crossed since (the frame in which
/// the engine refits its copy of the tree; the test refits the solver's tree as built the same way). Every listed cell
/// passes the periodic opening test (or lies beyond r_cut) with the group's box taken around its bodies now; no body
/// is listed twice; every body left out lies at least r_cut from each of the group's bodies at its nearest image.
void expectListsHoldNow(const tree::PeriodicTreeSolver& solver, const TreeParams& params, const Particles& path,
                        const PeriodicSplit& split) {
  tree::Octree octree = solver.octree();
  tree::computeMultipoles(path.sources(), params.theta, params.multipole, octree);
  const InteractionPlan& plan = solver.lastPlan();
  tree::Groups groups = solver.groups();
  const std::vector<float> points(path.size(), 0.0f);
  tree::setGroupBoxesOfBalls(path.sources(), points.data(), groups);  // the boxes of the bodies as they are now
  const std::size_t n = path.size();
  const double L = split.boxSize;
  for (std::size_t g = 0; g < plan.numGroups(); ++g) {
    std::vector<int> covered(n, 0);
    for (std::uint32_t k = plan.cellListOffsets[g]; k < plan.cellListOffsets[g + 1]; ++k) {
      const std::uint32_t cell = plan.cellList[k];
      ASSERT_NE(tree::visitPeriodic(octree, cell, groups, g, split), tree::PeriodicVisit::open)
          << "group " << g << " keeps cell " << cell << ", which a walk now would open";
      for (std::uint32_t i = octree.bodies[cell].first; i < octree.bodies[cell].last; ++i) ++covered[i];
    }
    for (std::uint32_t k = plan.bodyListOffsets[g]; k < plan.bodyListOffsets[g + 1]; ++k) {
      for (std::uint32_t i = plan.bodyList[k].first; i < plan.bodyList[k].last; ++i) ++covered[i];
    }
    const BodyRange own = plan.groups[g];
    for (std::size_t j = 0; j < n; ++j) {
      ASSERT_LE(covered[j], 1) << "group " << g << " lists body " << j << " twice";
      if (covered[j] != 0) continue;
      for (std::uint32_t i = own.first; i < own.last; ++i) {
        const double dx = nearestImage(path.x[j] - path.x[i], L), dy = nearestImage(path.y[j] - path.y[i], L);
        const double dz = nearestImage(path.z[j] - path.z[i], L);
        ASSERT_GE(std::sqrt(dx * dx + dy * dy + dz * dz), split.cutoffRadius)
            << "group " << g << " left out body " << j << ", within r_cut of its body " << i;
      }
    }
  }
}

/// A clustered box drifting through its faces: bulk motion of 0.02 r_s a call along each axis (bodies within ~0.2 r_s
/// of a face cross it over the calls), each body with its own random velocity of 0.003 r_s a call (rms per axis),
/// all times `speed`. At speed 1 the fastest body's ball for 4 calls stays within kLargestBall of r_cut.
struct DriftingBox {
  Particles bodies;
  std::vector<double> vx, vy, vz;  ///< per body, by id

  DriftingBox(std::uint64_t seed, double L, double splitRadius, double speed = 1.0)
      : bodies(testing::clumpyBox(seed, L, 350, 700)) {
    wrapIntoBox(bodies, L);
    std::mt19937_64 engine(seed + 7);
    std::normal_distribution<double> normal(0.0, 0.003 * splitRadius * speed);
    vx.resize(bodies.size());
    vy.resize(bodies.size());
    vz.resize(bodies.size());
    for (std::size_t k = 0; k < bodies.size(); ++k) {
      vx[k] = 0.02 * splitRadius * speed + normal(engine);
      vy[k] = 0.02 * splitRadius * speed + normal(engine);
      vz[k] = -0.02 * splitRadius * speed + normal(engine);
    }
  }
  /// One call's motion, folded back into the box as a periodic run's drift does.
  void drift(double L) {
    for (std::size_t i = 0; i < bodies.size(); ++i) {
      const std::uint64_t k = bodies.id[i];
      bodies.x[i] = wrapIntoBox(bodies.x[i] + vx[k], L);
      bodies.y[i] = wrapIntoBox(bodies.y[i] + vy[k], L);
      bodies.z[i] = wrapIntoBox(bodies.z[i] + vz[k], L);
    }
  }
};

/// A box of side 1 with a 16^3 mesh (r_cut 0.35), eps 1e-3.
GravityParams boxGravity() {
  MeshParams meshParams;
  meshParams.boxSize = 1.0;
  meshParams.grid = 16;
  GravityParams gravity;
  gravity.eps = 1e-3;
  gravity.periodic = periodicSplit(meshParams);
  return gravity;
}

/// Whether `bodies` hold one of bin `lowest` or above: a group a call asked for those bodies' forces evaluates.
bool holdsActiveBody(BodyRange bodies, const std::vector<std::uint8_t>& timeBin, std::uint8_t lowest) {
  for (std::uint32_t i = bodies.first; i < bodies.last; ++i) {
    if (timeBin[i] >= lowest) return true;
  }
  return false;
}

/// The interactions of `plan`'s groups that hold an active body (holdsActiveBody; bins in the plan's body order).
std::uint64_t interactionsOfActiveGroups(const InteractionPlan& plan, const std::vector<std::uint8_t>& timeBin,
                                         std::uint8_t lowest) {
  std::uint64_t total = 0;
  for (std::size_t g = 0; g < plan.numGroups(); ++g) {
    if (!holdsActiveBody(plan.groups[g], timeBin, lowest)) continue;
    total += std::uint64_t(plan.groups[g].size()) * (plan.numListBodies(g) + plan.numListCells(g));
  }
  return total;
}

/// `going` and `restored` (a solver restored from a state `going` saved at this point) over five more calls on the
/// drifting bodies: the same trees and forces, bit for bit. Returns `going`'s report of the first of them.
ForceReport expectRestoredSolverFollows(tree::PeriodicTreeSolver& going, tree::PeriodicTreeSolver& restored,
                                        DriftingBox& box, double L = 1.0) {
  ForceReport first;
  Particles twin = box.bodies;
  for (int more = 0; more < 5; ++more) {
    SCOPED_TRACE("call " + std::to_string(more) + " after the checkpoint");
    const ForceReport a = going.computeForces(box.bodies);
    const ForceReport b = restored.computeForces(twin);
    if (more == 0) first = a;
    EXPECT_EQ(a.rebuilt, b.rebuilt);
    EXPECT_EQ(box.bodies.id, twin.id);
    EXPECT_EQ(box.bodies.ax, twin.ax);
    EXPECT_EQ(box.bodies.ay, twin.ay);
    EXPECT_EQ(box.bodies.az, twin.az);
    box.drift(L);
    twin.x = box.bodies.x;
    twin.y = box.bodies.y;
    twin.z = box.bodies.z;
  }
  return first;
}

/// Each test's fresh seed (its trace is the test's own SCOPED_TRACE), the box and its drifting bodies.
class PeriodicReuse : public ::testing::Test {
 protected:
  static constexpr double L = 1.0;
  const std::uint64_t seed = testing::freshSeed();
  const GravityParams gravity = boxGravity();
  DriftingBox drifting(double speed = 1.0) const { return DriftingBox(seed, L, gravity.periodic.splitRadius, speed); }
};

TEST_F(PeriodicReuse, ReusedListsHoldAtEveryCallAndMatchBruteForce) {
  SCOPED_TRACE(testing::seedTrace(seed));
  DriftingBox box = drifting();

  TreeParams reused;
  reused.reuse = 4;
  TreeParams fresh;
  fresh.reuse = 1;
  gpu::CpuEngine engine(gpu::Precision::float64);
  tree::PeriodicTreeSolver reusing(engine, reused, gravity);
  tree::PeriodicTreeSolver rebuilding(engine, fresh, gravity);

  Particles built;  // the bodies at the last build, in the tree's order
  int reusedCalls = 0, crossings = 0;
  std::vector<double> reusedErrors, freshErrors;
  for (int call = 1; call <= 11; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    Particles again = box.bodies;
    const ForceReport report = reusing.computeForces(box.bodies);
    rebuilding.computeForces(again);
    // Calls 1 and 2 build (the first tree's balls are points, the bodies' speeds unknown), then each tree serves
    // four calls: 2-5, 6-9, 10-.
    const bool expectBuild = call <= 2 || (call - 2) % 4 == 0;
    EXPECT_EQ(report.rebuilt, expectBuild);
    // Every tree here ends as planned: the first (of points) as the bodies move, the others after their four calls.
    EXPECT_EQ(report.treeEnd, expectBuild ? TreeEnd::planned : TreeEnd::none);
    EXPECT_EQ(report.plannedCalls, expectBuild ? reusing.lastStats().reuseSteps : 0u);
    EXPECT_EQ(reusing.lastStats().callsOnTree, expectBuild ? 1u : std::uint32_t((call - 2) % 4 + 1));
    if (call >= 2) {
      EXPECT_EQ(reusing.lastStats().reuseSteps, 4u) << "the balls for four calls fit kLargestBall";
    }
    if (report.rebuilt) {
      built = box.bodies;
    } else {
      ++reusedCalls;
      ASSERT_EQ(built.id, box.bodies.id) << "a reused call keeps the bodies' order";
      Particles path = box.bodies;
      for (std::size_t i = 0; i < path.size(); ++i) {
        double* now[3] = {&path.x[i], &path.y[i], &path.z[i]};
        const double before[3] = {built.x[i], built.y[i], built.z[i]};
        for (int d = 0; d < 3; ++d) {
          if (*now[d] - before[d] > 0.5 * L) *now[d] -= L, ++crossings;
          if (*now[d] - before[d] < -0.5 * L) *now[d] += L, ++crossings;
        }
      }
      expectListsHoldNow(reusing, reused, path, gravity.periodic);
      const std::vector<double> errors = errorsAgainstBruteForce(box.bodies, gravity);
      reusedErrors.insert(reusedErrors.end(), errors.begin(), errors.end());
      const std::vector<double> reference = errorsAgainstBruteForce(again, gravity);
      freshErrors.insert(freshErrors.end(), reference.begin(), reference.end());
    }
    box.drift(L);
  }
  ASSERT_EQ(reusedCalls, 7);
  EXPECT_GT(crossings, 10) << "the test should move bodies across the faces";
  const double p99 = percentile(reusedErrors, 0.99), freshP99 = percentile(freshErrors, 0.99);
  std::printf("reused calls: p99 %.2e max %.2e; fresh trees at the same positions: p99 %.2e max %.2e\n", p99,
              *std::max_element(reusedErrors.begin(), reusedErrors.end()), freshP99,
              *std::max_element(freshErrors.begin(), freshErrors.end()));
  // The reused lists are a fresh walk's with room to spare: no less accurate (the fresh defaults' bounds of
  // PeriodicWalk.ShortRangeMatchesBruteForce, which measures 3.4e-6 - 2.8e-5 at p99).
  EXPECT_LT(p99, 2e-4);
  EXPECT_LT(*std::max_element(reusedErrors.begin(), reusedErrors.end()), 1e-3);
}

// Bodies that leave their balls (two heavy ones, a jump of a quarter of the box between calls, then one runs on at a
// tenth of the box a call) keep the tree: the engine evaluates them on their balls' surfaces, and their pulls from
// where they are and their own forces are added in double, so the forces match brute force as a fresh tree's do and
// theirs are the exact short range.
// A tree keeps at least kEscapedMaxBodies out of their balls, and one body in kEscapedMaxShare of more: 8,192 of a
// 256^3 box's.
TEST(PeriodicEscapedBodies, TheirCountGrowsWithTheBodies) {
  EXPECT_EQ(tree::escapedMaxBodies(0), tree::kEscapedMaxBodies);
  EXPECT_EQ(tree::escapedMaxBodies(4096), tree::kEscapedMaxBodies);
  EXPECT_EQ(tree::escapedMaxBodies(std::size_t{1} << 21), tree::kEscapedMaxBodies);
  EXPECT_EQ(tree::escapedMaxBodies(std::size_t{1} << 24), 8192u);
}

// Bodies out of their balls beyond escapedMaxBodies make the call build anew, and so do the bodies handed over in
// another order.
TEST_F(PeriodicReuse, ABodyOutsideItsBallKeepsTheTreeManyOrAnotherOrderBuildAnew) {
  SCOPED_TRACE(testing::seedTrace(seed));
  DriftingBox box = drifting();
  TreeParams params;
  params.reuse = 8;
  gpu::CpuEngine engine(gpu::Precision::float64);
  tree::PeriodicTreeSolver solver(engine, params, gravity);
  // The two bodies that will jump each weigh as much as a fifth of the others together: a pull from the wrong place
  // would show far beyond the bounds below on the bodies near either place, and on each other.
  const std::uint64_t jumper = box.bodies.id[17], partner = box.bodies.id[18];
  box.bodies.mass[17] *= 0.2 * double(box.bodies.size());
  box.bodies.mass[18] *= 0.2 * double(box.bodies.size());
  for (int call = 1; call <= 2; ++call) {
    solver.computeForces(box.bodies);
    box.drift(L);
  }
  ASSERT_GE(solver.lastStats().reuseSteps, 4u) << "the tree of call 2 is to serve calls 3, 4 and 5";
  const auto indexOf = [&](std::uint64_t id) {
    return static_cast<std::size_t>(std::find(box.bodies.id.begin(), box.bodies.id.end(), id) - box.bodies.id.begin());
  };
  const std::size_t jumperAt = indexOf(jumper), partnerAt = indexOf(partner);

  // The escaped bodies' own forces (their pulls from every body within r_cut) and everyone's against brute force.
  const auto expectExact = [&](std::vector<std::uint64_t> escapedIds, const char* what) {
    SCOPED_TRACE(what);
    const Particles reference = testing::bruteForceShortRange(box.bodies, gravity);
    const std::vector<double> errors = errorsAgainstBruteForce(box.bodies, gravity);
    EXPECT_LT(percentile(errors, 0.99), 2e-4);
    EXPECT_LT(*std::max_element(errors.begin(), errors.end()), 1e-3);
    for (const std::uint64_t id : escapedIds) {
      const std::size_t at = indexOf(id);
      const double scale = std::sqrt(reference.ax[at] * reference.ax[at] + reference.ay[at] * reference.ay[at] +
                                     reference.az[at] * reference.az[at]);
      EXPECT_NEAR(box.bodies.ax[at], reference.ax[at], 1e-12 * scale);
      EXPECT_NEAR(box.bodies.ay[at], reference.ay[at], 1e-12 * scale);
      EXPECT_NEAR(box.bodies.az[at], reference.az[at], 1e-12 * scale);
      EXPECT_NEAR(box.bodies.pot[at], reference.pot[at], 1e-12 * std::fabs(reference.pot[at]));
    }
  };

  solver.setPotentialsWanted(true);
  for (const std::size_t at : {jumperAt, partnerAt}) box.bodies.x[at] = wrapIntoBox(box.bodies.x[at] + 0.25 * L, L);
  ForceReport report = solver.computeForces(box.bodies);
  EXPECT_FALSE(report.rebuilt) << "two bodies jumped out of their balls: their pulls are added, the tree kept";
  EXPECT_EQ(report.numBodiesEscaped, 2u);
  EXPECT_EQ(solver.lastStats().bodiesEscaped, 2u);
  EXPECT_EQ(solver.lastStats().callsOnTree, 2u);
  expectExact({jumper, partner}, "after the jump");

  // One running on at a tenth of the box a call, both stay out of their balls for the tree's calls.
  box.vx[jumper] = 0.1 * L;
  for (int call = 3; call <= 4; ++call) {
    box.drift(L);
    report = solver.computeForces(box.bodies);
    EXPECT_FALSE(report.rebuilt);
    EXPECT_EQ(report.numBodiesEscaped, 2u);
    expectExact({jumper, partner}, "running");
  }
  box.vx[jumper] = box.vx[partner];

  // Every body out of its ball at once: more than escapedMaxBodies or the budget near them, a tree built anew.
  ASSERT_GT(box.bodies.size(), tree::escapedMaxBodies(box.bodies.size()));
  box.drift(L);
  for (std::size_t i = 0; i < box.bodies.size(); ++i) box.bodies.y[i] = wrapIntoBox(box.bodies.y[i] + 0.1 * L, L);
  report = solver.computeForces(box.bodies);
  EXPECT_TRUE(report.rebuilt) << "every body jumped out of its ball";
  EXPECT_EQ(report.treeEnd, TreeEnd::escaped) << "a tree with calls left, ended by the bodies out of their balls";
  EXPECT_EQ(report.numBodiesEscaped, 0u);
  EXPECT_LT(percentile(errorsAgainstBruteForce(box.bodies, gravity), 0.99), 2e-4);

  // The next tree serves one call (the jump set its bodies' speeds); the one after has calls left.
  const auto settle = [&] {
    box.drift(L);
    ASSERT_TRUE(solver.computeForces(box.bodies).rebuilt);
    ASSERT_GE(solver.lastStats().reuseSteps, 2u);
  };
  settle();

  // Fewer than escapedMaxBodies out of their balls, but with more bodies near them than the repair's budget.
  constexpr std::size_t kJumpers = 200;
  box.drift(L);
  for (std::size_t i = 0; i < kJumpers; ++i) box.bodies.y[i] = wrapIntoBox(box.bodies.y[i] + 0.1 * L, L);
  // Each jumper has ~a third of the box within r_cut (0.35) + its jump of its two places: 200 of them count more
  // bodies near them than kEscapedMinBudget (and a quarter of the bodies).
  ASSERT_LT(kJumpers, tree::escapedMaxBodies(box.bodies.size()));
  ASSERT_LT(tree::kEscapedBudget * double(box.bodies.size()), double(tree::kEscapedMinBudget));
  ASSERT_GT(double(kJumpers) * 0.3 * double(box.bodies.size()), double(tree::kEscapedMinBudget));
  report = solver.computeForces(box.bodies);
  EXPECT_TRUE(report.rebuilt);
  EXPECT_EQ(report.treeEnd, TreeEnd::crowded);
  settle();

  box.drift(L);
  std::mt19937_64 engineForOrder(seed + 3);
  std::vector<std::uint32_t> order(box.bodies.size());
  for (std::uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), engineForOrder);
  box.bodies.permute(order);
  report = solver.computeForces(box.bodies);
  EXPECT_TRUE(report.rebuilt) << "the bodies came in another order";
  EXPECT_EQ(report.treeEnd, TreeEnd::other);
  EXPECT_LT(percentile(errorsAgainstBruteForce(box.bodies, gravity), 0.99), 2e-4);
}

// The escaped bodies' pulls are added one escaped body at a time (their sums each in one order): a reused call with a
// dozen of them gives the same bits on one thread as on all.
TEST_F(PeriodicReuse, EscapedBodiesGiveTheSameBitsOnOneThreadAsOnAll) {
  SCOPED_TRACE(testing::seedTrace(seed));
  const auto run = [&](std::size_t threads) {
    tbb::global_control control(tbb::global_control::max_allowed_parallelism, threads);
    DriftingBox box = drifting();
    TreeParams params;
    params.reuse = 8;
    gpu::CpuEngine engine(gpu::Precision::float64);
    tree::PeriodicTreeSolver solver(engine, params, gravity);
    solver.setPotentialsWanted(true);
    for (int call = 1; call <= 2; ++call) {
      solver.computeForces(box.bodies);
      box.drift(L);
    }
    for (std::size_t i = 0; i < box.bodies.size(); i += 97) box.bodies.x[i] = wrapIntoBox(box.bodies.x[i] + 0.2 * L, L);
    const ForceReport report = solver.computeForces(box.bodies);
    EXPECT_FALSE(report.rebuilt);
    EXPECT_GE(report.numBodiesEscaped, 10u);
    return box.bodies;
  };
  const Particles one = run(1), all = run(std::max(2, int(std::thread::hardware_concurrency())));
  ASSERT_EQ(one.id, all.id);
  EXPECT_EQ(one.ax, all.ax);
  EXPECT_EQ(one.ay, all.ay);
  EXPECT_EQ(one.az, all.az);
  EXPECT_EQ(one.pot, all.pot);
}

// Block time steps (ForceSolver::setLowestActiveBin): a reused call evaluates only the groups that hold a body whose
// step ends, and gives those bodies the forces of a call that evaluates every group, bit for bit; the other groups'
// bodies keep what they had.
TEST_F(PeriodicReuse, AReusedCallEvaluatesOnlyTheGroupsOfActiveBodies) {
  SCOPED_TRACE(testing::seedTrace(seed));
  DriftingBox subsetBox = drifting(), wholeBox = drifting();
  TreeParams params;
  params.reuse = 8;
  params.ncrit = 32;
  gpu::CpuEngine engine(gpu::Precision::float64);
  tree::PeriodicTreeSolver subset(engine, params, gravity), whole(engine, params, gravity);
  for (int call = 1; call <= 2; ++call) {
    subset.computeForces(subsetBox.bodies);
    whole.computeForces(wholeBox.bodies);
    subsetBox.drift(L);
    wholeBox.drift(L);
  }
  ASSERT_EQ(subsetBox.bodies.id, wholeBox.bodies.id);
  Particles& p = subsetBox.bodies;
  const Particles before = p;
  // Bin 2 (active) for the bodies in a slab of a fifth of the box, bins 0 and 1 (not active) elsewhere.
  p.timeBin.resize(p.size());
  std::size_t numActive = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    p.timeBin[i] = p.x[i] < 0.2 * L ? 2 : std::uint8_t(i % 2);
    numActive += p.timeBin[i] == 2 ? 1 : 0;
  }
  ASSERT_GT(numActive, 10u);
  subset.setLowestActiveBin(2);
  const ForceReport partial = subset.computeForces(p);
  subset.setLowestActiveBin(0);
  const ForceReport full = whole.computeForces(wholeBox.bodies);
  ASSERT_FALSE(partial.rebuilt);
  ASSERT_FALSE(full.rebuilt);
  ASSERT_EQ(partial.numBodiesEscaped, 0u) << "escaped bodies' pulls reach every body near them";
  ASSERT_EQ(p.id, wholeBox.bodies.id) << "a reused call keeps the order";
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (p.timeBin[i] != 2) continue;
    EXPECT_EQ(p.ax[i], wholeBox.bodies.ax[i]) << "body " << i;
    EXPECT_EQ(p.ay[i], wholeBox.bodies.ay[i]) << "body " << i;
    EXPECT_EQ(p.az[i], wholeBox.bodies.az[i]) << "body " << i;
  }
  // The groups without an active body were not evaluated: their bodies keep what they had, and the call's interactions
  // are exactly the other groups' (bounds of half the bodies and half the interactions failed where a clump lay in the
  // slab).
  const InteractionPlan& plan = whole.lastPlan();
  std::size_t kept = 0;
  for (std::size_t g = 0; g < plan.numGroups(); ++g) {
    if (holdsActiveBody(plan.groups[g], p.timeBin, 2)) continue;
    for (std::uint32_t i = plan.groups[g].first; i < plan.groups[g].last; ++i) {
      EXPECT_TRUE(p.ax[i] == before.ax[i] && p.ay[i] == before.ay[i] && p.az[i] == before.az[i]) << "body " << i;
      ++kept;
    }
  }
  EXPECT_GT(kept, 0u);
  EXPECT_EQ(partial.counts.total(), interactionsOfActiveGroups(plan, p.timeBin, 2));
  EXPECT_LT(partial.counts.total(), full.counts.total());
}

// The same on a call that builds a tree for the calls after it: its lists are walked for every group and kept, and
// the engine evaluates the active bodies' groups alone; a body's force is that of the call that evaluates them all.
TEST_F(PeriodicReuse, ACallThatBuildsEvaluatesOnlyTheGroupsOfActiveBodies) {
  SCOPED_TRACE(testing::seedTrace(seed));
  DriftingBox subsetBox = drifting(), wholeBox = drifting();
  TreeParams params;
  params.reuse = 8;
  params.ncrit = 32;
  gpu::CpuEngine engine(gpu::Precision::float64);
  tree::PeriodicTreeSolver subset(engine, params, gravity), whole(engine, params, gravity);
  subset.computeForces(subsetBox.bodies);
  whole.computeForces(wholeBox.bodies);
  subsetBox.drift(L);
  wholeBox.drift(L);
  Particles& p = subsetBox.bodies;
  p.timeBin.resize(p.size());
  for (std::size_t i = 0; i < p.size(); ++i) p.timeBin[i] = p.y[i] < 0.25 * L ? 3 : 1;
  subset.setLowestActiveBin(3);
  const ForceReport partial = subset.computeForces(p);  // the tree for calls 2-9: sorts the bodies, bins with them
  subset.setLowestActiveBin(0);
  const ForceReport full = whole.computeForces(wholeBox.bodies);
  ASSERT_TRUE(partial.rebuilt);
  ASSERT_TRUE(full.rebuilt);
  ASSERT_EQ(p.id, wholeBox.bodies.id) << "the same sort";
  const double rms = std::sqrt(
      std::inner_product(wholeBox.bodies.ax.begin(), wholeBox.bodies.ax.end(), wholeBox.bodies.ax.begin(), 0.0) /
      double(p.size()));
  std::size_t active = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    ASSERT_EQ(p.timeBin[i], p.y[i] < 0.25 * L ? 3 : 1) << "bins follow their bodies";
    if (p.timeBin[i] != 3) continue;
    ++active;
    EXPECT_NEAR(p.ax[i], wholeBox.bodies.ax[i], 1e-12 * rms) << "body " << i;
    EXPECT_NEAR(p.ay[i], wholeBox.bodies.ay[i], 1e-12 * rms) << "body " << i;
    EXPECT_NEAR(p.az[i], wholeBox.bodies.az[i], 1e-12 * rms) << "body " << i;
  }
  EXPECT_GT(active, 10u);
  // Exactly the active bodies' groups' lists (a bound of half the whole call's failed where a clump lay in the slab:
  // seeds 4499440917904867573 and 4433088256833991726).
  EXPECT_EQ(partial.counts.total(), interactionsOfActiveGroups(whole.lastPlan(), p.timeBin, 3));
  EXPECT_LT(partial.counts.total(), full.counts.total());
  // The next call reuses the tree, all of it.
  subsetBox.drift(L);
  wholeBox.drift(L);
  EXPECT_FALSE(subset.computeForces(p).rebuilt);
  EXPECT_FALSE(whole.computeForces(wholeBox.bodies).rebuilt);
  EXPECT_EQ(p.ax, wholeBox.bodies.ax);
}

// A reused call checks the box in its ball pass (no pass of its own): a body on the far face or with a NaN coordinate,
// however close to where its ball allows, is refused with the one-line InputError of a fresh call.
TEST_F(PeriodicReuse, ABodyLeavingTheBoxIsRefusedOnAReusedCall) {
  SCOPED_TRACE(testing::seedTrace(seed));
  TreeParams params;
  params.reuse = 8;
  gpu::CpuEngine engine(gpu::Precision::float64);
  for (const double misplaced : {L, std::nan("")}) {
    DriftingBox box = drifting();
    tree::PeriodicTreeSolver solver(engine, params, gravity);
    for (int call = 1; call <= 3; ++call) {
      solver.computeForces(box.bodies);
      box.drift(L);
    }
    ASSERT_FALSE(solver.atCheckpointBoundary()) << "the next call would reuse the tree";
    const std::size_t far = std::max_element(box.bodies.x.begin(), box.bodies.x.end()) - box.bodies.x.begin();
    box.bodies.x[far] = misplaced;  // the body nearest the face x = L moved onto it
    try {
      solver.computeForces(box.bodies);
      ADD_FAILURE() << "body " << box.bodies.id[far] << " at x = " << misplaced << " was taken";
    } catch (const InputError& error) {
      EXPECT_NE(std::string(error.what()).find("lies outside the periodic box"), std::string::npos) << error.what();
    }
  }
}

// The engine's side of the reuse (NearFieldEngine's resident lists in a box): given a tree and its lists, a resident
// launch refits the cells to the positions it is given and evaluates the lists as evaluatePlan evaluates the same plan
// on the host's multipoles (the periodic kernels: nearest images, truncated pairs), and checks nothing. On the CPU
// engine in double, at the positions of the build and at positions moved by a fraction of r_s (the host refitting its
// copy of the tree the same way), to the rounding of the sums' order.
TEST_F(PeriodicReuse, ResidentListsEvaluateAsThePlanOnRefittedCells) {
  SCOPED_TRACE(testing::seedTrace(seed));
  DriftingBox box = drifting();
  TreeParams params;
  params.reuse = 1;  // a tree of points, multipoles at the bodies' positions
  gpu::CpuEngine engine(gpu::Precision::float64);
  tree::PeriodicTreeSolver solver(engine, params, gravity);
  Particles built = box.bodies;
  solver.computeForces(built);  // sorts `built` into the tree's order
  tree::Octree octree = solver.octree();
  const tree::Groups& groups = solver.groups();
  InteractionPlan lists = solver.lastPlan();
  lists.groupIds.resize(lists.numGroups());
  std::iota(lists.groupIds.begin(), lists.groupIds.end(), 0u);
  TreeTopology topology;
  tree::fillTopology(octree, groups, params, topology);
  gpu::CpuEngine resident(gpu::Precision::float64);
  resident.setTree(topology, built.sources());
  resident.setLists(lists);
  for (const double shift : {0.0, 0.05 * gravity.periodic.splitRadius}) {
    SCOPED_TRACE("positions moved by " + std::to_string(shift));
    Particles now = built;  // moved along a fixed direction, unwrapped: a path continued from the build
    for (std::size_t i = 0; i < now.size(); ++i) {
      now.x[i] += shift;
      now.y[i] -= 0.5 * shift;
    }
    tree::computeMultipoles(now.sources(), params.theta, params.multipole, octree);
    Particles onPlan = now;
    engine.evaluatePlan(now.sources(), octree.multipoles, lists, gravity, onPlan.forces());
    Particles onResident = now;
    resident.launchResident(now.sources(), gravity, onResident.forces(), {}, BodyMotion::moved);
    const ResidentResult result = resident.finishResident();
    EXPECT_TRUE(result.failedGroups.empty()) << "periodic lists are not checked";
    const std::vector<double> differences = testing::errorsOverRmsById(onResident, onPlan);
    const double worst = *std::max_element(differences.begin(), differences.end());
    EXPECT_LT(worst, 1e-12) << "largest difference " << worst << " of the rms pull";
  }
}

// A tree whose lists would hold more entries than the engine keeps (TreeParams::maxBatchEntries, the CUDA engine's
// 32-bit arenas at N ~ 2^25 and up) serves its own call alone: every call builds, with a fresh tree's accuracy.
TEST_F(PeriodicReuse, ListsBeyondWhatTheEngineKeepsGetATreeEachCall) {
  SCOPED_TRACE(testing::seedTrace(seed));
  DriftingBox box = drifting();
  TreeParams params;
  params.reuse = 4;
  params.maxBatchEntries = 1000;
  gpu::CpuEngine engine(gpu::Precision::float64);
  tree::PeriodicTreeSolver solver(engine, params, gravity);
  for (int call = 1; call <= 4; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    const ForceReport report = solver.computeForces(box.bodies);
    EXPECT_TRUE(report.rebuilt);
    EXPECT_GT(solver.lastStats().meanListBodies * double(solver.lastStats().numGroups), 1000.0);
    EXPECT_TRUE(solver.atCheckpointBoundary()) << "no tree is held for a later call";
    EXPECT_LT(percentile(errorsAgainstBruteForce(box.bodies, gravity), 0.99), 2e-4);
    box.drift(L);
  }
}

// The sorted-bodies hook (TreePM's start of the mesh): a call that expects to reuse a tree of balls calls it first
// thing, in the order the call keeps; where the tree does not hold after all (bodies out of their balls, another order)
// the build calls it again after its sort. Trees of points (call 1's, and call 10's of bodies in another order) are not
// expected to hold. Whatever the call, the hook's last call saw the bodies as the call leaves them. The unsorted-bodies
// hook (TreePM's start of the mesh where the call sorts) is called once in each call that builds, never in one that
// reuses, between the sorted hook's first-thing call and its call after the sort, on the bodies as the call found them.
TEST_F(PeriodicReuse, TheSortedBodiesHookLastSeesTheOrderTheCallLeaves) {
  SCOPED_TRACE(testing::seedTrace(seed));
  DriftingBox box = drifting();
  TreeParams params;
  params.reuse = 4;
  gpu::CpuEngine engine(gpu::Precision::float64);
  tree::PeriodicTreeSolver solver(engine, params, gravity);
  int hooks = 0;
  std::vector<std::uint64_t> idsAtStart;
  std::vector<double> xAtHook, xAtStart, massAtStart;
  std::vector<std::uint32_t> orderAtHook;
  ASSERT_TRUE(solver.setSortedBodiesHook([&](const SourceView& sorted, std::span<const std::uint32_t> order) {
    ++hooks;
    xAtHook.assign(sorted.x, sorted.x + sorted.count);
    orderAtHook.assign(order.begin(), order.end());
    // The order maps the call's start to the bodies as the hook sees them (empty: none moved).
    for (std::size_t k = 0; k < sorted.count; ++k) {
      ASSERT_EQ(xAtStart[order.empty() ? k : order[k]], sorted.x[k]) << "body " << k;
      ASSERT_EQ(massAtStart[order.empty() ? k : order[k]], sorted.mass[k]) << "body " << k;
    }
  }));
  int unsortedHooks = 0, sortedHooksBeforeUnsorted = -1;
  ASSERT_TRUE(solver.setUnsortedBodiesHook([&](const SourceView& bodies) {
    ++unsortedHooks;
    sortedHooksBeforeUnsorted = hooks;
    ASSERT_EQ(bodies.count, xAtStart.size());
    for (std::size_t k = 0; k < bodies.count; ++k) {
      ASSERT_EQ(xAtStart[k], bodies.x[k]) << "body " << k << ": the unsorted hook saw moved bodies";
      ASSERT_EQ(massAtStart[k], bodies.mass[k]) << "body " << k;
    }
  }));
  std::mt19937_64 random(seed + 11);
  int reused = 0, superseded = 0;
  for (int call = 1; call <= 12; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    const bool expectsReuse = !solver.atCheckpointBoundary() && call != 2 && call != 11;  // after trees of points
    if (call == 7) {  // every body out of its ball: too many to keep the tree (escapedMaxBodies)
      for (double& x : box.bodies.x) x = wrapIntoBox(x + 0.1 * L, L);
    }
    if (call == 10) {
      std::vector<std::uint32_t> order(box.bodies.size());
      std::iota(order.begin(), order.end(), 0u);
      std::shuffle(order.begin(), order.end(), random);
      box.bodies.permute(order);  // another order
    }
    hooks = 0;
    unsortedHooks = 0;
    sortedHooksBeforeUnsorted = -1;
    idsAtStart = box.bodies.id;
    xAtStart = box.bodies.x;
    massAtStart = box.bodies.mass;
    const ForceReport report = solver.computeForces(box.bodies);
    EXPECT_EQ(hooks, expectsReuse && report.rebuilt ? 2 : 1);
    EXPECT_EQ(unsortedHooks, report.rebuilt ? 1 : 0);
    if (report.rebuilt) {
      EXPECT_EQ(sortedHooksBeforeUnsorted, hooks - 1) << "the unsorted hook came after the sort";
    }
    EXPECT_EQ(xAtHook, box.bodies.x) << "the hook last saw another order than the call left";
    for (std::size_t k = 0; k < box.bodies.size(); ++k) {  // the ids too, which the call moves after the hook
      ASSERT_EQ(idsAtStart[orderAtHook.empty() ? k : orderAtHook[k]], box.bodies.id[k]) << "body " << k;
    }
    reused += report.rebuilt ? 0 : 1;
    superseded += hooks == 2 ? 1 : 0;
    box.drift(L);
  }
  EXPECT_GE(reused, 5);
  EXPECT_EQ(superseded, 2) << "calls 7 and 10 expected to reuse the tree and built";
}

// Bodies that cross many r_s a call (here, with bulk motion of 4 r_s a call) get no reuse: a ball for even two calls
// would exceed kLargestBall of r_cut, so each call builds a tree of its own, of the length a fresh walk gives.
TEST_F(PeriodicReuse, BodiesTooFastForTheirBallsGetATreeEachCall) {
  SCOPED_TRACE(testing::seedTrace(seed));
  DriftingBox box = drifting(200.0);
  TreeParams reused;
  reused.reuse = 4;
  TreeParams fresh;
  fresh.reuse = 1;
  gpu::CpuEngine engine(gpu::Precision::float32);
  tree::PeriodicTreeSolver reusing(engine, reused, gravity);
  tree::PeriodicTreeSolver rebuilding(engine, fresh, gravity);
  for (int call = 1; call <= 4; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    Particles again = box.bodies;
    const ForceReport report = reusing.computeForces(box.bodies);
    const ForceReport reference = rebuilding.computeForces(again);
    EXPECT_TRUE(report.rebuilt);
    if (call >= 2) {
      EXPECT_EQ(reusing.lastStats().reuseSteps, 1u);
    }
    EXPECT_EQ(report.counts.bodyBody, reference.counts.bodyBody) << "the same lists as a fresh tree's";
    EXPECT_EQ(report.counts.bodyCell, reference.counts.bodyCell);
    box.drift(L);
  }
}

// A solver restored from a checkpoint taken between two trees builds the trees and forces of the solver that went
// on, bit for bit (the next tree's balls come from the saved build positions); a checkpoint without the reuse's state
// (written before periodic trees were reused) restores too, its next tree built without balls.
TEST_F(PeriodicReuse, RestoredSolverContinuesBitForBit) {
  SCOPED_TRACE(testing::seedTrace(seed));
  DriftingBox box = drifting();
  TreeParams params;
  params.reuse = 3;
  gpu::CpuEngine engine(gpu::Precision::float32);
  tree::PeriodicTreeSolver going(engine, params, gravity);
  int call = 0;
  while (call < 3 || !going.atCheckpointBoundary()) {
    going.computeForces(box.bodies);
    box.drift(L);
    ++call;
    ASSERT_LT(call, 20);
  }
  CheckpointState state;
  going.saveState(state);
  tree::PeriodicTreeSolver restored(engine, params, gravity);
  restored.restoreState(state, box.bodies);
  tree::PeriodicTreeSolver fromOldCheckpoint(engine, params, gravity);
  EXPECT_NO_THROW(fromOldCheckpoint.restoreState(CheckpointState{}, box.bodies));
  expectRestoredSolverFollows(going, restored, box);
}

// A tree with calls left, ended for a checkpoint (endTreeForCheckpoint): the call just made becomes a boundary, the
// next call builds (its treeEnd says why), and a solver restored from the state saved there builds the same trees and
// forces, bit for bit, as the solver that went on.
TEST_F(PeriodicReuse, ATreeEndedForACheckpointRestartsBitForBit) {
  SCOPED_TRACE(testing::seedTrace(seed));
  DriftingBox box = drifting();
  TreeParams params;
  params.reuse = 4;
  gpu::CpuEngine engine(gpu::Precision::float32);
  tree::PeriodicTreeSolver going(engine, params, gravity);
  // Two trees in, then one call into the third: a tree with calls left.
  int call = 0;
  int builds = 0;
  while (builds < 3) {
    builds += going.computeForces(box.bodies).rebuilt ? 1 : 0;
    box.drift(L);
    ASSERT_LT(++call, 20);
  }
  ASSERT_FALSE(going.atCheckpointBoundary()) << "the third tree was planned for more than one call";
  EXPECT_TRUE(going.endTreeForCheckpoint());
  EXPECT_TRUE(going.atCheckpointBoundary());
  CheckpointState state;
  going.saveState(state);
  tree::PeriodicTreeSolver restored(engine, params, gravity);
  restored.restoreState(state, box.bodies);
  const ForceReport first = expectRestoredSolverFollows(going, restored, box);
  EXPECT_TRUE(first.rebuilt);
  EXPECT_EQ(first.treeEnd, TreeEnd::checkpoint);
}

// Block time steps in a box (the real leapfrog, TreePM with long-range steps on the CPU mesh, trees for 4 calls): where
// the engine keeps a copy of the bodies (testing::MirroringEngine, as the CUDA engine does), the solver has it drift
// that copy (BodyMotion::drifted) from each tree's build on, handing it the kicked bodies' velocities and the escaped
// bodies' places: the copy's positions are the caller's at every call, bit for bit, and the run is the run of an engine
// that reads the caller's positions. A body moved behind the leapfrog's back makes the next drifted launch's copy
// differ: the engine says so, the solver sends the positions for that call, and the run is still the same bits (the
// engine evaluates in double).
TEST_F(PeriodicReuse, BlockStepsDriftTheEnginesCopyOfTheBodies) {
  namespace mi = matcha::integrator;
  SCOPED_TRACE(testing::seedTrace(seed));
  DriftingBox box = drifting(2.0);
  Particles start = box.bodies;
  for (std::size_t i = 0; i < start.size(); ++i) {
    const std::uint64_t k = start.id[i];
    start.vx[i] = box.vx[k];
    start.vy[i] = box.vy[k];
    start.vz[i] = box.vz[k];
  }
  struct Run {
    Particles bodies;
    int calls = 0;
    std::uint64_t escapedOnDrifted = 0;  ///< bodies out of their balls at the calls the engine's copy served
    int driftsInCall = 0;                ///< steps whose drift the call made beside the engine's work
  };
  // The run with the copy perturbs body 0 after each drifted call whose tree is to serve the next, and records which
  // calls: the other run perturbs after the same.
  std::vector<int> perturbAfter;
  const auto run = [&](NearFieldEngine& engine, bool keeps) {
    TreeParams params;
    params.reuse = 4;
    params.ncrit = 32;
    MeshParams meshParams;
    meshParams.boxSize = L;
    meshParams.grid = 16;
    auto shortRange = std::make_unique<tree::PeriodicTreeSolver>(engine, params, gravity);
    const tree::PeriodicTreeSolver& periodic = *shortRange;
    TreePmSolver solver(std::move(shortRange), meshParams, gravity);
    solver.setLongRangeSteps(true);
    solver.setPotentialsWanted(false);
    Run result;
    result.bodies = start;
    Particles& p = result.bodies;
    mi::LeapfrogKDK leapfrog(solver, mi::LeapfrogKDK::VariableSteps{}, L);
    leapfrog.initialize(p);
    // A long step: bins 0 to 2, the velocities' drift about two calls' worth of DriftingBox's motion.
    const double largest = mi::maxAcceleration(p);
    const double binScale = 3.5 / std::sqrt(largest);
    const double longStep = 2.0;
    // Kicks that change the speeds a little (the box's pulls are strong): some bodies leave their balls.
    const double kickScale = 6e-6;
    for (int longSteps = 0; longSteps < 3; ++longSteps) {
      testing::takeBlockLongStep(leapfrog, p, longStep, binScale, kickScale, [&](const mi::StepReport& report) {
        EXPECT_FALSE(report.nonFinite.has_value());
        EXPECT_LE(report.driftInCallSeconds, report.integrationSeconds);
        result.driftsInCall += report.driftInCallSeconds > 0.0 ? 1 : 0;
        const int call = ++result.calls;
        const tree::TreeStats& stats = periodic.lastStats();
        if (stats.advancedOnDevice) result.escapedOnDrifted += stats.bodiesEscaped;
        const bool perturb = keeps ? longSteps >= 1 && stats.advancedOnDevice && stats.callsOnTree < stats.reuseSteps
                                   : std::find(perturbAfter.begin(), perturbAfter.end(), call) != perturbAfter.end();
        if (perturb) {
          // Not the leapfrog's doing (in both runs alike): the next drifted launch's copy is not the caller's bodies,
          // the engine says so, and the solver sends the positions instead.
          p.x[0] = wrapIntoBox(p.x[0] + 1e-9 * gravity.periodic.splitRadius, L);
          if (keeps) perturbAfter.push_back(call);
        }
      });
    }
    return result;
  };
  gpu::CpuEngine reading(gpu::Precision::float64);
  gpu::CpuEngine inner(gpu::Precision::float64);
  testing::MirroringEngine keeping(inner, true);
  // And an engine that also finds the bodies outside their balls on its copy, as the CUDA engine does
  // (NearFieldEngine::driftResident): the host makes no pass over the bodies, and the run is the same.
  gpu::CpuEngine checkingInner(gpu::Precision::float64);
  testing::MirroringEngine checking(checkingInner, true, true);
  const Run b = run(keeping, true), a = run(reading, false), c = run(checking, false);
  std::printf(
      "block steps: %d calls, %d drifted launches (%d with a copy not the caller's), %llu kicked, %llu placed of %zu "
      "bodies\n",
      a.calls, int(keeping.numDrifted()), int(keeping.numMismatches()),
      static_cast<unsigned long long>(keeping.numKicked()), static_cast<unsigned long long>(keeping.numPlaced()),
      start.size());
  ASSERT_EQ(a.calls, b.calls);
  EXPECT_GE(a.calls, 9) << "bins below 0";
  EXPECT_GE(keeping.numDrifted(), std::uint64_t(a.calls / 3)) << "of " << a.calls << " calls";
  EXPECT_GE(keeping.numMismatches(), 1u) << "no perturbed call was followed by a drifted one";
  EXPECT_LE(keeping.numMismatches(), perturbAfter.size()) << "copies that differed but for the perturbed body";
  EXPECT_GT(keeping.numKicked(), 0u);
  EXPECT_GT(keeping.numPlaced(), 0u) << "no body left its ball (109-185 placed in 8 seeds)";
  EXPECT_LT(keeping.numKicked(), std::uint64_t(keeping.numDrifted()) * start.size())
      << "only the kicked bodies' velocities";
  testing::expectSameBodiesBitForBit(a.bodies, b.bodies, "with the engine's copy drifted", /*withPotentials=*/false);
  std::printf(
      "with the balls checked on the copy: %llu checks, %d drifted launches (%d with a copy not the caller's), "
      "%llu placed\n",
      static_cast<unsigned long long>(checking.numDriftChecks()), int(checking.numDrifted()),
      int(checking.numMismatches()), static_cast<unsigned long long>(checking.numPlaced()));
  EXPECT_GE(checking.numDriftChecks(), std::uint64_t(a.calls / 3)) << "of " << a.calls << " calls";
  // Within the long-range steps the leapfrog leaves its drift of the positions to the call (takesPendingDrift), which
  // makes it while the engine evaluates: the copy is checked against them at the launch's finish.
  EXPECT_GT(checking.numPendingChecks(), 0u);
  EXPECT_GT(c.driftsInCall, 0) << "the leapfrog left no drift to the call";
  EXPECT_EQ(a.driftsInCall + b.driftsInCall, 0) << "engines that check no balls take no drift into the call";
  // Caught at the check, also before a call that then builds anew (the drifted launch never came to the other engine).
  EXPECT_GE(checking.numMismatches(), keeping.numMismatches());
  EXPECT_LE(checking.numMismatches(), perturbAfter.size()) << "copies that differed but for the perturbed body";
  // (Bodies out of their balls at calls the copy served: 4-22 in 11 of 12 seeds, none in one.)
  EXPECT_EQ(checking.numPlacedServed(), c.escapedOnDrifted)
      << "the bodies the engine found outside their balls, placed (at the launches whose copy was the caller's)";
  testing::expectSameBodiesBitForBit(a.bodies, c.bodies, "with the balls checked on the copy",
                                     /*withPotentials=*/false);
}

}  // namespace
}  // namespace matcha::mesh
