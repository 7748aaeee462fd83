// SPDX-License-Identifier: MIT
// Tree forces against the oracle: CPU direct summation in double (DESIGN.md §5), with fresh seeds.
#include <gtest/gtest.h>

#include "matcha/core/force_error.hpp"
#include "matcha/gpu/cpu_engine.hpp"
#include "matcha/testing/generators.hpp"
#include "matcha/tree/tree_solver.hpp"

namespace matcha::tree {
namespace {

AccelerationSet accelerations(const Particles& p) { return {p.ax, p.ay, p.az}; }

// Sorts `p` once (so that later solves keep the order) and returns the double-precision direct-summation forces.
Particles sortedWithOracle(Particles p, const GravityParams& gravity) {
  gpu::CpuEngine engine(gpu::Precision::float64);
  TreeSolver(engine, TreeParams{}, gravity).buildPlanOnly(p);
  engine.evaluateDirect(p.sources(), gravity, p.forces());
  return p;
}

ForceErrorStats treeError(const Particles& oracle, double theta, gpu::Precision precision, const GravityParams& gravity,
                          std::uint32_t ncrit = 64) {
  Particles p = oracle;
  gpu::CpuEngine engine(precision);
  TreeParams params;
  params.theta = theta;
  params.ncrit = ncrit;
  TreeSolver(engine, params, gravity).computeForces(p);
  for (std::size_t i = 0; i < p.size(); ++i) EXPECT_EQ(p.id[i], oracle.id[i]) << "order changed between solves";
  return summariseForceErrors(accelerations(p), accelerations(oracle));
}

class TreeAccuracy : public ::testing::TestWithParam<int> {
 protected:
  Particles make(std::size_t n, std::uint64_t seed) const {
    return GetParam() == 0 ? testing::plummer(n, seed) : testing::clumpInHalo(n, seed);
  }
};

// theta -> 0 opens every cell, so the tree is direct summation by another route: float tree equals double direct
// to float precision. The bound is the float direct-summation error itself (tile partial sums keep it near 1e-7
// typical, a few 1e-6 at worst for bodies whose force nearly cancels).
TEST_P(TreeAccuracy, TinyThetaEqualsDirectToFloatPrecision) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const GravityParams gravity;
  const Particles oracle = sortedWithOracle(make(3000, seed), gravity);
  const ForceErrorStats error = treeError(oracle, 1e-4, gpu::Precision::float32, gravity);
  EXPECT_LT(error.median, 1e-6);
  EXPECT_LT(error.p99, 5e-6);
  EXPECT_LT(error.max, 1e-4);
}

// The float direct sum against the double oracle: same function, float arithmetic.
TEST_P(TreeAccuracy, FloatDirectMatchesDoubleDirect) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const GravityParams gravity;
  const Particles oracle = sortedWithOracle(make(3000, seed), gravity);
  Particles p = oracle;
  gpu::CpuEngine(gpu::Precision::float32).evaluateDirect(p.sources(), gravity, p.forces());
  const ForceErrorStats error = summariseForceErrors(accelerations(p), accelerations(oracle));
  EXPECT_LT(error.median, 1e-6);
  EXPECT_LT(error.p99, 5e-6);
  EXPECT_LT(error.max, 1e-4);
  for (std::size_t i = 0; i < p.size(); ++i) {
    ASSERT_NEAR(p.pot[i], oracle.pot[i], 1e-5 * std::abs(oracle.pot[i])) << "body " << i;
  }
}

TEST_P(TreeAccuracy, ErrorFallsAsThetaFalls) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const GravityParams gravity;
  const Particles oracle = sortedWithOracle(make(8000, seed), gravity);
  double previousP99 = 1.0, previousMedian = 1.0;
  for (double theta : {1.0, 0.7, 0.5, 0.3, 0.15}) {
    SCOPED_TRACE("theta " + std::to_string(theta));
    // The double engine isolates the tree's truncation error from float rounding.
    const ForceErrorStats error = treeError(oracle, theta, gpu::Precision::float64, gravity);
    EXPECT_LT(error.p99, previousP99);
    EXPECT_LT(error.median, previousMedian);
    previousP99 = error.p99;
    previousMedian = error.median;
  }
}

// theta = 0.5, monopole cells, the box-distance criterion with the centre-of-mass offset. Bound: the leading
// error of a monopole cell of size l seen from distance d is its quadrupole term, at most ~(3/2)(b/d)^2 of the
// cell's own pull (Barnes & Hut 1989, ApJS 70, 389, §2), with b <= (sqrt 3 / 2) l and d >= l / theta, i.e. ~0.28
// at theta = 0.5 for the worst-placed cell. The hundreds of cells of one list err in uncorrelated directions
// and the nearest bodies are summed exactly, so the total error is 1e-3-ish for most bodies: measured here
// (Plummer, nleaf 8, ncrit 16/64/256, 25 seeds at N = 16000) worst median 7.7e-4, worst p99 5.0e-3, worst max
// 4.4e-2 (a body whose total force nearly cancels). Bounds, with room for unseen seeds: median 1.5e-3, p99 7.5e-3,
// max 0.1. The clump-in-halo input is harder: halo bodies see the clump, a third of the mass, through a few cells
// whose quadrupole error is not diluted by the rest of the list (measured p99 5-9e-3), so it gets twice the median
// and p99 bounds and a max of 0.3 (up to 0.14 measured: a halo body where the halo's and the clump's pulls nearly
// cancel). Quadrupole cells (issue 4) tighten all of these.
TEST_P(TreeAccuracy, ThetaHalfStaysWithinMonopoleBound) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const GravityParams gravity;
  const Particles oracle = sortedWithOracle(make(16000, seed), gravity);
  for (std::uint32_t ncrit : {16u, 64u, 256u}) {
    SCOPED_TRACE("ncrit " + std::to_string(ncrit));
    const ForceErrorStats error = treeError(oracle, 0.5, gpu::Precision::float32, gravity, ncrit);
    const double scale = GetParam() == 0 ? 1.0 : 2.0;
    EXPECT_LT(error.median, 1.5e-3 * scale);
    EXPECT_LT(error.p99, 7.5e-3 * scale);
    EXPECT_LT(error.max, GetParam() == 0 ? 0.1 : 0.3);
  }
}

INSTANTIATE_TEST_SUITE_P(Inputs, TreeAccuracy, ::testing::Values(0, 1),
                         [](const ::testing::TestParamInfo<int>& paramInfo) {
                           return paramInfo.param == 0 ? std::string("Plummer") : std::string("ClumpInHalo");
                         });

}  // namespace
}  // namespace matcha::tree
