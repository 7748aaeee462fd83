// SPDX-License-Identifier: MIT
// The tree solver's memory estimate (tree/memory_estimate.hpp): the list sizes scaled up from a sample of groups
// against the walk of every group (exact when every group is sampled, within a few percent otherwise), the balls of
// trees that serve several steps, and the parts the solver model adds. The total against a measured peak is
// tests/apps/test_cli.cpp's.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "matcha/core/errors.hpp"
#include "matcha/gpu/cpu_engine.hpp"
#include "matcha/testing/generators.hpp"
#include "matcha/tree/memory_estimate.hpp"
#include "matcha/tree/tree_solver.hpp"

namespace matcha::tree {
namespace {

struct ListCounts {
  std::uint64_t cells = 0, ranges = 0, bodies = 0, groups = 0;
};

/// Every group's list, walked by the solver itself (theta alone when the bodies carry no accelerations).
ListCounts walkEveryGroup(Particles bodies, const TreeParams& params) {
  gpu::CpuEngine engine(gpu::Precision::float32);
  TreeSolver solver(engine, params, GravityParams{});
  const InteractionPlan& plan = solver.buildPlanOnly(bodies);
  ListCounts counts;
  counts.cells = plan.cellList.size();
  counts.ranges = plan.bodyList.size();
  for (std::size_t g = 0; g < plan.numGroups(); ++g) counts.bodies += plan.numListBodies(g);
  counts.groups = plan.numGroups();
  return counts;
}

TreeParams thetaAlone() {
  TreeParams params;
  params.alpha = 0.0;  // the solver's plan-only walk has no accelerations to scale the relative test by
  return params;
}

double relativeDifference(double estimate, double exact) { return std::abs(estimate - exact) / exact; }

TEST(MemoryEstimate, EveryGroupSampledGivesTheExactListSizes) {
  // 1000 bodies make far fewer than 512 groups: the sample is every group, and the counts are the walk's own.
  const Particles bodies = testing::plummer(1000, 7);
  const TreeParams params = thetaAlone();
  const TreeSizes sizes = measureTreeSizes(bodies, params, GravityParams{});
  const ListCounts exact = walkEveryGroup(bodies, params);
  EXPECT_EQ(sizes.numGroups, exact.groups);
  EXPECT_EQ(sizes.numSampledGroups, sizes.numGroups);
  EXPECT_EQ(sizes.listCells, exact.cells);
  EXPECT_EQ(sizes.listRanges, exact.ranges);
  EXPECT_EQ(sizes.listBodies, exact.bodies);
  EXPECT_EQ(sizes.numBodies, 1000u);
  EXPECT_GT(sizes.numCells, sizes.numGroups);
  EXPECT_GE(sizes.numBlocks, 1u);
  ASSERT_EQ(sizes.batchGroups.size(), 1u);  // one batch of every group
  EXPECT_EQ(sizes.residentGroups, sizes.numGroups);
  EXPECT_GT(sizes.walkBufferBytesPerGroup, 0.0);
}

TEST(MemoryEstimate, SampledListSizesAreWithinAFewPercentOfTheFullWalk) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  TreeParams params = thetaAlone();
  params.ncrit = 32;  // many groups (~6000), so that the sample is a small part of them (8%)
  struct Input {
    std::string name;
    Particles bodies;
  };
  std::vector<Input> inputs;
  inputs.push_back({"plummer", testing::plummer(1 << 17, seed)});
  inputs.push_back({"clump in halo", testing::clumpInHalo(1 << 17, seed)});
  for (const Input& input : inputs) {
    SCOPED_TRACE(input.name);
    const TreeSizes sizes = measureTreeSizes(input.bodies, params, GravityParams{});
    const ListCounts exact = walkEveryGroup(input.bodies, params);
    ASSERT_EQ(sizes.numGroups, exact.groups);
    EXPECT_LT(sizes.numSampledGroups, sizes.numGroups);
    // 512 groups in 64 runs from 64 stretches of the curve: the estimates are off by 1% (rms), 3% at most over
    // 8 seeds of both inputs.
    EXPECT_LT(relativeDifference(double(sizes.listCells), double(exact.cells)), 0.06);
    EXPECT_LT(relativeDifference(double(sizes.listBodies), double(exact.bodies)), 0.06);
    EXPECT_LT(relativeDifference(double(sizes.listRanges), double(exact.ranges)), 0.08);
  }
}

TEST(MemoryEstimate, BallRadiiFollowThePredictedPath) {
  // One body at speed 1 with |a| = 2, dt = 0.1, a tree for the 3 calls from the next one on (calls 1 .. 3): half the
  // chord, 0.5 * 2 * 1 * 0.1, plus room (2^2 / 8 + kAccelerationChange * 3 * 4 / 2) times |a| dt^2 = 0.02.
  Particles body(1);
  body.mass[0] = 1.0;
  body.vx[0] = 1.0;
  body.az[0] = 2.0;
  const std::vector<float> radius = predictedBallRadii(body, 3, 0.1, GravityParams{}, 1);
  ASSERT_EQ(radius.size(), 1u);
  EXPECT_NEAR(radius[0], 0.1 + (0.5 + kAccelerationChange * 6.0) * 0.02, 1e-6);
  // One call per tree, built within it: points. Built a call ahead (reuse off on the CUDA engine), room for one
  // step's change of acceleration: kAccelerationChange * |a| dt^2.
  EXPECT_EQ(predictedBallRadii(body, 1, 0.1, GravityParams{}, 0)[0], 0.0f);
  EXPECT_NEAR(predictedBallRadii(body, 1, 0.1, GravityParams{}, 1)[0], kAccelerationChange * 0.02, 1e-7);

  // Without accelerations, the mass inside each body's radius pulls it: balls grow with K and with the distance
  // travelled, and longer-lived trees have longer lists.
  const Particles plummer = testing::plummer(1 << 14, 3);
  const std::vector<float> two = predictedBallRadii(plummer, 2, 1.0 / 128, GravityParams{});
  const std::vector<float> four = predictedBallRadii(plummer, 4, 1.0 / 128, GravityParams{});
  for (std::size_t i = 0; i < plummer.size(); ++i) {
    ASSERT_GT(two[i], 0.0f);
    ASSERT_GT(four[i], two[i]);
  }
  const TreeSizes exact = measureTreeSizes(plummer, TreeParams{}, GravityParams{});
  const TreeSizes balls = measureTreeSizes(plummer, TreeParams{}, GravityParams{}, four);
  EXPECT_GT(balls.listCells + balls.listBodies, exact.listCells + exact.listBodies);
}

TEST(MemoryEstimate, SolverPartsAddUpAndGrowWithWhatTheRunKeeps) {
  const Particles bodies = testing::plummer(1 << 14, 5);
  TreeParams params;
  const TreeSizes sizes = measureTreeSizes(bodies, params, GravityParams{});
  const auto total = [&](const TreeRunShape& shape, const TreeSizes& s) {
    MemoryEstimate estimate;
    addTreeSolverMemory(s, params, shape, estimate);
    std::uint64_t host = 0;
    for (const MemoryPart& part : estimate.parts) host += part.hostBytes;
    EXPECT_EQ(host, estimate.hostBytes);
    EXPECT_EQ(estimate.deviceBytes, 0u);
    EXPECT_EQ(estimate.numBodies, bodies.size());
    return estimate.hostBytes;
  };
  const std::uint64_t oneCall = total({1, 1, 1.0 / 128}, sizes);
  const std::uint64_t twoCalls = total({2, 1, 1.0 / 128}, sizes);
  const std::uint64_t reuse = total({10, 4, 1.0 / 128}, sizes);
  // The bodies alone are 96 bytes each; a tree and its lists several times that.
  EXPECT_GT(oneCall, 4 * 96 * bodies.size());
  EXPECT_GT(twoCalls, oneCall);  // two trees from the second call on
  EXPECT_GT(reuse, twoCalls);    // motion history, background copies, a repair's tree

  MemoryEstimate estimate;
  addTreeSolverMemory(sizes, params, {2, 1, 1.0 / 128}, estimate);
  EXPECT_EQ(estimate.listEntries, sizes.listCells + sizes.listRanges);
  EXPECT_EQ(estimate.listBodies, sizes.listBodies);

  // Lists beyond maxBatchEntries stream: only the batches that fit stay.
  TreeParams small = params;
  small.maxBatchEntries = (sizes.listCells + sizes.listBodies) / 4;
  const TreeSizes streaming = measureTreeSizes(bodies, small, GravityParams{});
  EXPECT_LT(streaming.residentGroups, streaming.numGroups);
  EXPECT_GT(streaming.batchGroups.size(), 1u);
  EXPECT_LT(total({2, 1, 1.0 / 128}, streaming), twoCalls);
}

TEST(MemoryEstimate, RejectsNoBodies) {
  EXPECT_THROW(measureTreeSizes(Particles{}, TreeParams{}, GravityParams{}), InputError);
}

}  // namespace
}  // namespace matcha::tree
