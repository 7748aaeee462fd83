// SPDX-License-Identifier: MIT
// The CPU engine and the pair interaction against closed forms, then against the double oracle.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfenv>
#include <cmath>
#include <cstdio>
#include <limits>

#include "matcha/core/errors.hpp"
#include "matcha/core/pair_interaction.hpp"
#include "matcha/gpu/cpu_engine.hpp"
#include "matcha/gpu/direct_solver.hpp"
#include "matcha/testing/float_sums.hpp"
#include "matcha/testing/floating_point_traps.hpp"
#include "matcha/testing/generators.hpp"

namespace matcha::gpu {
namespace {

using FloatingPointTraps = testing::ScopedFloatingPointTraps;

void poison(Particles& p) {
  for (auto* array : {&p.ax, &p.ay, &p.az, &p.pot}) std::fill(array->begin(), array->end(), std::nan(""));
}

TEST(PairInteraction, MatchesClosedForm) {
  double ax = 0, ay = 0, az = 0, pot = 0;
  // m = 2 at distance 3 along y, eps = 4: a = 2 * 3 / 5^3, phi = -2 / 5.
  accumulatePairInteraction<double>(0.0, 3.0, 0.0, 2.0, 16.0, ax, ay, az, pot);
  EXPECT_DOUBLE_EQ(ax, 0.0);
  EXPECT_DOUBLE_EQ(ay, 6.0 / 125.0);
  EXPECT_DOUBLE_EQ(az, 0.0);
  EXPECT_DOUBLE_EQ(pot, -0.4);
}

TEST(PairInteraction, ZeroSeparationAddsNothingEvenWithoutSoftening) {
  FloatingPointTraps traps;
  float ax = 1, ay = 2, az = 3, pot = 4;
  accumulatePairInteraction<float>(0.0f, 0.0f, 0.0f, 5.0f, 0.0f, ax, ay, az, pot);
  EXPECT_EQ(ax, 1.0f);
  EXPECT_EQ(ay, 2.0f);
  EXPECT_EQ(az, 3.0f);
  EXPECT_EQ(pot, 4.0f);
}

// The quadrupole term against the exact pull of the point masses it stands for: a random, elongated cluster (a
// cube's quadrupole would vanish by symmetry) seen from distances 10 and 40 times its size. The monopole's relative
// error falls as (size/d)^2, 16x from d = 10 to 40; the quadrupole's as (size/d)^3 (the octupole is next), 64x.
TEST(PairInteraction, QuadrupoleApproximatesItsPointMassesToThirdOrder) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  Particles cluster = testing::uniformCube(40, seed, 0.5);
  for (std::size_t k = 0; k < cluster.size(); ++k) {
    cluster.x[k] *= 1.0;
    cluster.y[k] *= 0.5;
    cluster.z[k] *= 0.25;
  }
  double mass = 0, com[3] = {0, 0, 0};
  for (std::size_t k = 0; k < cluster.size(); ++k) {
    mass += cluster.mass[k];
    com[0] += cluster.mass[k] * cluster.x[k];
    com[1] += cluster.mass[k] * cluster.y[k];
    com[2] += cluster.mass[k] * cluster.z[k];
  }
  for (double& c : com) c /= mass;
  Quadrupole<double> q{0, 0, 0, 0, 0, 0, 0};
  for (std::size_t k = 0; k < cluster.size(); ++k) {
    const double d[3] = {cluster.x[k] - com[0], cluster.y[k] - com[1], cluster.z[k] - com[2]};
    const double d2 = d[0] * d[0] + d[1] * d[1] + d[2] * d[2];
    const double m = cluster.mass[k];
    q.xx += m * (3 * d[0] * d[0] - d2);
    q.yy += m * (3 * d[1] * d[1] - d2);
    q.zz += m * (3 * d[2] * d[2] - d2);
    q.xy += m * 3 * d[0] * d[1];
    q.xz += m * 3 * d[0] * d[2];
    q.yz += m * 3 * d[1] * d[2];
    q.trace += m * d2;
  }
  // Errors summed over eight directions, so that no direction where a term happens to vanish decides the test.
  const double eps2 = 1e-6;
  const double directions[8][3] = {{0.6, -0.48, 0.64},   {-0.8, 0.36, 0.48}, {0.0, 0.6, -0.8}, {0.48, 0.64, 0.6},
                                   {-0.36, -0.48, -0.8}, {1.0, 0.0, 0.0},    {0.0, -1.0, 0.0}, {0.64, 0.0, -0.768}};
  double monoError[2] = {0, 0}, quadError[2] = {0, 0}, monoPotError[2] = {0, 0}, quadPotError[2] = {0, 0};
  for (int s = 0; s < 2; ++s) {
    const double distance = s == 0 ? 10.0 : 40.0;
    for (const auto& direction : directions) {
      double target[3];
      for (int c = 0; c < 3; ++c) target[c] = com[c] + direction[c] * distance;
      double exact[4] = {0, 0, 0, 0}, mono[4] = {0, 0, 0, 0}, quad[4] = {0, 0, 0, 0};
      for (std::size_t k = 0; k < cluster.size(); ++k) {
        accumulatePairInteraction<double>(cluster.x[k] - target[0], cluster.y[k] - target[1], cluster.z[k] - target[2],
                                          cluster.mass[k], eps2, exact[0], exact[1], exact[2], exact[3]);
      }
      const double d[3] = {com[0] - target[0], com[1] - target[1], com[2] - target[2]};
      accumulatePairInteraction<double>(d[0], d[1], d[2], mass, eps2, mono[0], mono[1], mono[2], mono[3]);
      accumulateQuadrupoleInteraction<double>(d[0], d[1], d[2], mass, q, eps2, quad[0], quad[1], quad[2], quad[3]);
      const auto error = [&](const double* a) {
        return std::hypot(a[0] - exact[0], a[1] - exact[1], a[2] - exact[2]) / std::hypot(exact[0], exact[1], exact[2]);
      };
      monoError[s] += error(mono);
      quadError[s] += error(quad);
      monoPotError[s] += std::abs(mono[3] - exact[3]) / std::abs(exact[3]);
      quadPotError[s] += std::abs(quad[3] - exact[3]) / std::abs(exact[3]);
    }
    EXPECT_LT(4.0 * quadError[s], monoError[s]) << "distance " << distance;
    EXPECT_LT(4.0 * quadPotError[s], monoPotError[s]) << "distance " << distance;
  }
  EXPECT_GT(quadError[0] / quadError[1], 40.0) << "quadrupole acceleration error should fall as d^-3";
  EXPECT_LT(monoError[0] / monoError[1], 25.0) << "monopole acceleration error should fall as d^-2";
  EXPECT_GT(quadPotError[0] / quadPotError[1], 40.0) << "quadrupole potential error should fall as d^-3";
}

class CpuEngineBothPrecisions : public ::testing::TestWithParam<Precision> {};

TEST_P(CpuEngineBothPrecisions, TwoBodiesMatchNewton) {
  Particles p(2);
  p.x = {0.0, 2.0};
  p.mass = {1.0, 3.0};
  p.id = {0, 1};
  poison(p);
  GravityParams gravity;
  gravity.eps = 0.0;
  gravity.G = 2.0;
  CpuEngine engine(GetParam());
  const InteractionCounts counts = engine.evaluateDirect(p.sources(), gravity, p.forces());
  const double tolerance = GetParam() == Precision::float32 ? 1e-6 : 1e-15;
  EXPECT_NEAR(p.ax[0], 2.0 * 3.0 / 4.0, tolerance);
  EXPECT_NEAR(p.ax[1], -2.0 * 1.0 / 4.0, tolerance);
  EXPECT_NEAR(p.pot[0], -2.0 * 3.0 / 2.0, tolerance);
  EXPECT_NEAR(p.pot[1], -2.0 * 1.0 / 2.0, tolerance);
  EXPECT_EQ(p.ay[0], 0.0);
  EXPECT_EQ(counts.bodyBody, 4u);
  EXPECT_EQ(counts.bodyCell, 0u);
}

TEST_P(CpuEngineBothPrecisions, SingleBodyFeelsNothing) {
  FloatingPointTraps traps;
  Particles p(1);
  p.x = {3.0};
  p.mass = {1.0};
  poison(p);
  GravityParams gravity;
  gravity.eps = 0.0;
  CpuEngine(GetParam()).evaluateDirect(p.sources(), gravity, p.forces());
  EXPECT_EQ(p.ax[0], 0.0);
  EXPECT_EQ(p.pot[0], 0.0);
}

TEST_P(CpuEngineBothPrecisions, CoincidentBodiesWithoutSofteningStayFinite) {
  FloatingPointTraps traps;
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  Particles p = testing::uniformCube(333, seed);
  for (std::size_t i = 0; i < 50; ++i) {  // 50 bodies stacked on body 100
    p.x[i] = p.x[100];
    p.y[i] = p.y[100];
    p.z[i] = p.z[100];
  }
  poison(p);
  GravityParams gravity;
  gravity.eps = 0.0;
  CpuEngine(GetParam()).evaluateDirect(p.sources(), gravity, p.forces());
  for (std::size_t i = 0; i < p.size(); ++i) {
    ASSERT_TRUE(std::isfinite(p.ax[i]) && std::isfinite(p.ay[i]) && std::isfinite(p.az[i]) && std::isfinite(p.pot[i]))
        << "body " << i;
  }
}

// Newton's third law: the total momentum change of direct summation is zero up to rounding, sum m a ~ eps * sum
// m |a| (double) or ~ 1e-7 relative (float).
TEST_P(CpuEngineBothPrecisions, DirectSummationConservesMomentum) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  Particles p = testing::clumpInHalo(2500, seed);
  GravityParams gravity;
  CpuEngine(GetParam()).evaluateDirect(p.sources(), gravity, p.forces());
  double sum[3] = {0, 0, 0}, scale = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    sum[0] += p.mass[i] * p.ax[i];
    sum[1] += p.mass[i] * p.ay[i];
    sum[2] += p.mass[i] * p.az[i];
    scale += p.mass[i] * std::sqrt(p.ax[i] * p.ax[i] + p.ay[i] * p.ay[i] + p.az[i] * p.az[i]);
  }
  const double bound = GetParam() == Precision::float64 ? 1e-13 : 1e-6;
  for (double component : sum) EXPECT_LT(std::abs(component), bound * scale);
}

// A hand-made plan: two groups, one list with a body range and a cell. Each output equals the sum of the pair
// interactions listed, evaluated in double here, less the body's own pair (each list holds its group's bodies, as a
// tree's lists do).
TEST_P(CpuEngineBothPrecisions, EvaluatesExactlyTheListedInteractions) {
  Particles p(5);
  p.x = {0.0, 1.0, 2.0, 3.0, 4.0};
  p.y = {0.5, 0.0, -0.5, 0.0, 0.25};
  p.mass = {1.0, 2.0, 3.0, 4.0, 5.0};
  poison(p);
  CellMultipoles cells;
  cells.resize(2, false);
  cells.x = {10.0, -10.0};
  cells.y = {0.0, 3.0};
  cells.z = {1.0, 0.0};
  cells.mass = {7.0, 11.0};
  InteractionPlan plan;
  plan.groups = {{0, 2}, {2, 4}};  // body 4 is in no group: it must stay untouched
  plan.groupCentres = {0.5, 0.25, 0.0, 2.5, -0.25, 0.0};
  plan.bodyList = {{0, 3}, {2, 5}};
  plan.bodyListOffsets = {0, 1, 2};
  plan.cellList = {1, 0, 1};
  plan.cellListOffsets = {0, 1, 3};
  GravityParams gravity;
  gravity.eps = 0.1;
  const InteractionCounts counts = CpuEngine(GetParam()).evaluatePlan(p.sources(), cells, plan, gravity, p.forces());
  EXPECT_EQ(counts.bodyBody, 2u * 3u + 2u * 3u);
  EXPECT_EQ(counts.bodyCell, 2u * 1u + 2u * 2u);

  const auto expected = [&](std::uint32_t i, std::vector<std::uint32_t> bodies, std::vector<std::uint32_t> cellIds) {
    double a[4] = {0, 0, 0, 0};
    for (std::uint32_t j : bodies) {
      accumulatePairInteraction<double>(p.x[j] - p.x[i], p.y[j] - p.y[i], p.z[j] - p.z[i], p.mass[j], 0.01, a[0], a[1],
                                        a[2], a[3]);
    }
    for (std::uint32_t c : cellIds) {
      accumulatePairInteraction<double>(cells.x[c] - p.x[i], cells.y[c] - p.y[i], cells.z[c] - p.z[i], cells.mass[c],
                                        0.01, a[0], a[1], a[2], a[3]);
    }
    a[3] -= selfPairPotential(p.mass[i], 0.01);
    const double tolerance = GetParam() == Precision::float32 ? 2e-6 : 1e-14;
    EXPECT_NEAR(p.ax[i], a[0], tolerance * std::abs(a[0]) + 1e-12) << "body " << i;
    EXPECT_NEAR(p.ay[i], a[1], tolerance * std::abs(a[1]) + 1e-12) << "body " << i;
    EXPECT_NEAR(p.pot[i], a[3], tolerance * std::abs(a[3])) << "body " << i;
  };
  expected(0, {0, 1, 2}, {1});
  expected(1, {0, 1, 2}, {1});
  expected(2, {2, 3, 4}, {0, 1});
  expected(3, {2, 3, 4}, {0, 1});
  EXPECT_TRUE(std::isnan(p.ax[4])) << "a body outside every group was written";
}

TEST_P(CpuEngineBothPrecisions, DirectWritesEveryOutput) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  for (std::size_t n : {1u, 63u, 64u, 65u, 129u, 1000u}) {  // around the 64-body blocks and 128-body tiles
    Particles p = testing::plummer(n, seed);
    poison(p);
    CpuEngine(GetParam()).evaluateDirect(p.sources(), GravityParams{}, p.forces());
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_FALSE(std::isnan(p.ax[i]) || std::isnan(p.ay[i]) || std::isnan(p.az[i]) || std::isnan(p.pot[i]))
          << "n " << n << " body " << i;
    }
  }
}

// A solver asked for accelerations only (ForceSolver::setPotentialsWanted) hands the engine no potential array, sets
// pot to NaN, and gives the very same accelerations; asked again, it computes potentials again.
TEST_P(CpuEngineBothPrecisions, AccelerationsOnlyLeaveThePotentialOut) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  CpuEngine engine(GetParam());
  DirectSolver solver(engine, GravityParams{});
  Particles withPotentials = testing::plummer(1000, seed);
  Particles accelerationsOnly = withPotentials;
  solver.computeForces(withPotentials);
  solver.setPotentialsWanted(false);
  solver.computeForces(accelerationsOnly);
  EXPECT_EQ(accelerationsOnly.ax, withPotentials.ax);
  EXPECT_EQ(accelerationsOnly.ay, withPotentials.ay);
  EXPECT_EQ(accelerationsOnly.az, withPotentials.az);
  EXPECT_TRUE(
      std::all_of(accelerationsOnly.pot.begin(), accelerationsOnly.pot.end(), [](double v) { return std::isnan(v); }));
  solver.setPotentialsWanted(true);
  solver.computeForces(accelerationsOnly);
  EXPECT_EQ(accelerationsOnly.pot, withPotentials.pot);
}

// Float direct summation at the Chamomile level: the close and strong pairs are evaluated again in double
// (pair_interaction.hpp: closePairThreshold) and bodies whose float sums cancelled are summed again in double
// (floatSumCancelled), in any body order. The target, E_max <= 2e-6 at N = 2^17, is checked on the GPU
// (CudaEngineTest.DirectEmaxOnPlummer131072); here N = 16384 keeps the test short, and its bodies are 8x heavier, so
// a strong pair weighs 8x more against a_i. Measured in random order: 0.59e-6..1.5e-6 in five seeds, among them seed
// 3984802214369302179 (a CI run), which gave 4.4e-6 before the cancellation rule. A maximum over the bodies has a
// heavy tail over seeds, so the bound leaves a margin; a lost tile or a float partial sum that grew with N would still
// break it by orders of magnitude.
TEST(CpuEngineFloat, DirectEmaxNearTheChamomileLevel) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const Particles bodies = testing::plummer(16384, seed);
  Particles reference = bodies, single = bodies;
  CpuEngine(Precision::float64).evaluateDirect(reference.sources(), GravityParams{}, reference.forces());
  CpuEngine(Precision::float32).evaluateDirect(single.sources(), GravityParams{}, single.forces());
  double emax = 0.0;
  std::size_t worst = 0;
  for (std::size_t i = 0; i < bodies.size(); ++i) {
    const double error =
        std::hypot(single.ax[i] - reference.ax[i], single.ay[i] - reference.ay[i], single.az[i] - reference.az[i]) /
        std::hypot(reference.ax[i], reference.ay[i], reference.az[i]);
    if (error > emax) {
      emax = error;
      worst = i;
    }
  }
  std::printf("E_max CPU float direct vs CPU double, Plummer N = 16384 (random order): %.3e\n  worst %s\n", emax,
              testing::describeCancellation(bodies, reference, worst, GravityParams{}).c_str());
  EXPECT_LT(emax, 5e-6);
}

// Body 0 of balancedPulls feels ~1/1000 of what its pulls sum to: float partial sums would leave it a relative error
// of ~5e-6 (measured with the rule switched off: 5.0e-6..7.5e-6 in three seeds). The engine sums it again in double
// (floatSumCancelled), so it matches the oracle to double rounding times the cancellation; the oracle itself matches
// the residual body's pull.
TEST(CpuEngineFloat, DirectSumsACancelledBodyAgainInDouble) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const Particles bodies = testing::balancedPulls(4098, seed);
  Particles reference = bodies, single = bodies;
  const GravityParams gravity;
  CpuEngine(Precision::float64).evaluateDirect(reference.sources(), gravity, reference.forces());
  CpuEngine(Precision::float32).evaluateDirect(single.sources(), gravity, single.forces());
  const double d = testing::kBalancedPullsResidualDistance;
  const double residualPull = gravity.G * bodies.mass.back() * d / std::pow(d * d + gravity.eps2(), 1.5);
  EXPECT_NEAR(reference.ax[0], residualPull, 1e-10 * residualPull);
  const double error =
      std::hypot(single.ax[0] - reference.ax[0], single.ay[0] - reference.ay[0], single.az[0] - reference.az[0]) /
      std::hypot(reference.ax[0], reference.ay[0], reference.az[0]);
  std::printf("CPU float, body 0 of balanced pulls: relative error %.3e\n  %s\n", error,
              testing::describeCancellation(bodies, reference, 0, gravity).c_str());
  EXPECT_LT(error, 1e-9);
}

TEST(DirectSolver, RejectsNegativeSoftening) {
  CpuEngine engine;
  GravityParams gravity;
  gravity.eps = -0.1;
  EXPECT_THROW(DirectSolver(engine, gravity), InputError);
}

INSTANTIATE_TEST_SUITE_P(Precisions, CpuEngineBothPrecisions, ::testing::Values(Precision::float32, Precision::float64),
                         [](const ::testing::TestParamInfo<Precision>& paramInfo) {
                           return paramInfo.param == Precision::float32 ? std::string("Float") : std::string("Double");
                         });

}  // namespace
}  // namespace matcha::gpu
