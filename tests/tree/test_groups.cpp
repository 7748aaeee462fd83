// SPDX-License-Identifier: MIT
// Groups (makeGroups): the count rule of the modified tree, the extent rule on top of it, and what the groups do to
// the interaction lists (TreeSolver::buildPlanOnly). Hand-sized cases first, then seeded random inputs.
#include <gtest/gtest.h>
#include <tbb/global_control.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "matcha/gpu/cpu_engine.hpp"
#include "matcha/testing/generators.hpp"
#include "matcha/testing/same_bodies.hpp"
#include "matcha/tree/space_filling_curve.hpp"
#include "matcha/tree/tree_solver.hpp"

namespace matcha::tree {
namespace {

// The groups Barnes (1990) takes, and makeGroups took before the extent rule: the largest cells with at most ncrit
// bodies (oversized leaves cut into chunks of ncrit). The reference for "the rule leaves ordinary inputs alone".
std::size_t countOnlyGroups(const Octree& tree, std::uint32_t ncrit) {
  std::size_t count = 0;
  std::vector<std::uint32_t> stack{0};
  while (!stack.empty()) {
    const std::uint32_t cell = stack.back();
    stack.pop_back();
    const std::uint32_t size = tree.bodies[cell].size();
    if (size <= ncrit) {
      ++count;
    } else if (tree.isLeaf(cell)) {
      count += (size + ncrit - 1) / ncrit;
    } else {
      for (std::uint32_t k = 0; k < tree.numChildren[cell]; ++k) stack.push_back(tree.firstChild[cell] + k);
    }
  }
  return count;
}

struct ListLengths {
  double mean = 0.0;  ///< bodies + cells per group list, mean over groups
  std::uint64_t max = 0;
};

ListLengths listLengths(const InteractionPlan& plan) {
  ListLengths lengths;
  for (std::size_t g = 0; g < plan.numGroups(); ++g) {
    const std::uint64_t length = plan.numListBodies(g) + plan.numListCells(g);
    lengths.mean += double(length);
    lengths.max = std::max(lengths.max, length);
  }
  lengths.mean /= double(plan.numGroups());
  return lengths;
}

TreeParams treeParams(std::uint32_t ncrit, std::uint32_t nleaf) {
  TreeParams params;
  params.ncrit = ncrit;
  params.nleaf = nleaf;
  return params;
}

// ------------------------------------------------------------------------------------------------ hand-sized cases

TEST(Groups, TwoFarBodiesAloneFormOneGroup) {
  // Nothing lies near the pair, so its wide box costs nothing: the probes beside it fall outside the root.
  Particles p(2);
  p.x = {-500.0, 700.0};
  p.y = {0.0, 3.0};
  p.z = {1.0, -2.0};
  p.mass = {0.5, 0.5};
  p.id = {0, 1};
  gpu::CpuEngine engine(gpu::Precision::float64);
  TreeSolver solver(engine, treeParams(64, 8), GravityParams{});
  solver.buildPlanOnly(p);
  ASSERT_EQ(solver.groups().size(), 1u);
  EXPECT_EQ(solver.groups().ranges[0].size(), 2u);
  EXPECT_EQ(solver.groups().numExtentSplits, 0u);
  EXPECT_DOUBLE_EQ(solver.groups().halfExtent[0], 600.0);
  EXPECT_DOUBLE_EQ(solver.groups().centre[0], 100.0);
}

TEST(Groups, SliceOfADenseBlockIsCutAwayFromItsFarOutlier) {
  // slicedCube: ~40 bodies of the block's slice and the anchor at +1000 share the octant [0, 1000]^3. By count that
  // octant is one group whose box spans 1000 and lies flat on the block's face; the extent rule must split it so
  // that no group holds both a slice body and the anchor, and every slice group stays within a few of the block's
  // cells of the face.
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const std::size_t n = 1 << 16;
  Particles p = testing::slicedCube(n, seed);
  gpu::CpuEngine engine(gpu::Precision::float64);
  TreeSolver solver(engine, treeParams(64, 8), GravityParams{});
  solver.buildPlanOnly(p);
  const Groups& groups = solver.groups();
  EXPECT_GT(groups.numExtentSplits, 0u);
  const double thickness = testing::sliceThickness(n);
  std::size_t sliceBodies = 0;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    bool holdsSlice = false, holdsAnchor = false;
    for (std::uint32_t i = groups.ranges[g].first; i < groups.ranges[g].last; ++i) {
      const bool inSlice = p.x[i] >= 0.0 && p.x[i] < thickness;
      sliceBodies += inSlice ? 1 : 0;
      holdsSlice = holdsSlice || inSlice;
      holdsAnchor = holdsAnchor || p.x[i] == testing::kSliceAnchor;
    }
    EXPECT_FALSE(holdsSlice && holdsAnchor) << "group " << g << " holds slice bodies and the far anchor";
    if (holdsSlice) {
      // The rule allows 4 group-scale cells of the block beside the face, at ncrit 64 of edge 2000 / 2^14 = 0.12
      // (2000 / 2^13 = 0.24 near the block's edges, where cells are partly empty): E <~ 1, measured at most 0.89
      // over 30 seeds. By count alone the slice's group spans 1000 (or 2 without the anchor).
      EXPECT_LT(2.0 * *std::max_element(&groups.halfExtent[3 * g], &groups.halfExtent[3 * g] + 3), 1.5)
          << "group " << g;
    }
  }
  EXPECT_GT(sliceBodies, 10u);
}

// --------------------------------------------------------------------------------------------- seeded random inputs

// The rule must leave ordinary inputs (nearly) alone. A candidate fails it when its box is more than 4 times the
// group scale beside one of its faces; beside an ordinary group lie groups of its own size or one level smaller
// (extent over group scale ~1, at most 2 for 99% of candidates). Measured over 31 seeds at N = 32768, ncrit 64, with
// siblings packed: the uniform cube is never split (its density is uniform: the ratio never exceeds 1); groups /
// groups by count and packing alone at most 1.030 on Plummer spheres and 1.060 on clump in halo (the halo's packs
// that border the clump; with single cells as candidates, before packing, 1.0064 and 1.021 over 40 seeds). Bounds:
// the cube unchanged; Plummer 1.05, clump in halo 1.10.
TEST(Groups, ExtentRuleBarelyChangesOrdinaryInputs) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  struct Case {
    const char* name;
    Particles particles;
    double maxGrowth;  ///< bound on groups / groups by count alone
  };
  const std::size_t n = 1 << 15;
  Case cases[] = {{"uniform cube", testing::uniformCube(n, seed), 1.0},
                  {"Plummer", testing::plummer(n, seed), 1.05},
                  {"clump in halo", testing::clumpInHalo(n, seed), 1.10}};
  for (Case& c : cases) {
    SCOPED_TRACE(c.name);
    gpu::CpuEngine engine(gpu::Precision::float64);
    TreeSolver solver(engine, treeParams(64, 8), GravityParams{});
    solver.buildPlanOnly(c.particles);
    const std::size_t byCount = solver.groups().numCandidates;
    const std::size_t numGroups = solver.groups().size();
    EXPECT_GE(numGroups, byCount);
    EXPECT_LE(double(numGroups), c.maxGrowth * double(byCount)) << numGroups << " groups, " << byCount << " by count";
    if (c.maxGrowth == 1.0) {
      EXPECT_EQ(solver.groups().numExtentSplits, 0u);
    }
  }
}

// Packing consecutive small siblings fills the groups: on these inputs the largest cells under ncrit = 64 hold 14-18
// bodies on average, packed groups 37-44 (31 seeds, N = 32768). Every group stays within ncrit, and the groups cover
// the bodies in order. Bound: at least half of ncrit on average.
TEST(Groups, PackedSiblingsFillGroupsToAtLeastHalfOfNcrit) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const std::size_t n = 1 << 15;
  Particles inputs[] = {testing::uniformCube(n, seed), testing::plummer(n, seed), testing::clumpInHalo(n, seed)};
  for (Particles& p : inputs) {
    gpu::CpuEngine engine(gpu::Precision::float64);
    TreeSolver solver(engine, treeParams(64, 8), GravityParams{});
    solver.buildPlanOnly(p);
    const Groups& groups = solver.groups();
    std::uint32_t next = 0;
    for (const BodyRange& group : groups.ranges) {
      ASSERT_EQ(group.first, next);
      ASSERT_GE(group.size(), 1u);
      ASSERT_LE(group.size(), 64u);
      next = group.last;
    }
    EXPECT_EQ(next, n);
    EXPECT_GE(double(n) / double(groups.size()), 32.0) << groups.size() << " groups";
    EXPECT_LT(groups.size(), countOnlyGroups(solver.octree(), 64));
  }
}

// A group's list (bodies + cells) stays within a small multiple of the mean list. What a face adds to a list grows
// as the square of the group's extent over the scale of the material beside it (groups.hpp); the extent rule caps
// that ratio. Measured max / mean over 20 seeds, N = 2^16, theta 0.5, ncrit 64, nleaf 8 | 64 (with nleaf 64 the
// slice and the anchor share one leaf, which the rule splits below the tree), with single cells as groups:
//   untruncated Plummer  1.44 - 1.53 | 1.42 - 1.50, and the same by count alone (1.43 - 1.52 | 1.42 - 1.50): its
//                        outliers lie in sparse cells, and their wide boxes touch no dense material;
//   sliced cube          1.34 - 1.57 | 1.53 - 1.64, against 5.40 - 5.67 | 4.80 - 4.95 by count alone.
// With packed siblings (12 seeds): untruncated Plummer 1.30 - 1.36 | 1.32 - 1.37, sliced cube 1.42 - 1.46 |
// 1.62 - 1.70. Bound 3: ~2x the worst measured with the rule, and well below every sliced cube measured without it.
class ListLength : public ::testing::TestWithParam<std::tuple<int, std::uint32_t>> {};

TEST_P(ListLength, MaxStaysWithinThreeTimesTheMean) {
  const auto [input, nleaf] = GetParam();
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const std::size_t n = 1 << 16;
  Particles p = input == 0 ? testing::untruncatedPlummer(n, seed) : testing::slicedCube(n, seed);
  gpu::CpuEngine engine(gpu::Precision::float64);
  TreeSolver solver(engine, treeParams(64, nleaf), GravityParams{});
  const ListLengths lengths = listLengths(solver.buildPlanOnly(p));
  EXPECT_LE(double(lengths.max), 3.0 * lengths.mean)
      << "mean " << lengths.mean << ", max " << lengths.max << ", " << solver.groups().size() << " groups";
}

INSTANTIATE_TEST_SUITE_P(Inputs, ListLength, ::testing::Combine(::testing::Values(0, 1), ::testing::Values(8u, 64u)),
                         [](const ::testing::TestParamInfo<ListLength::ParamType>& paramInfo) {
                           return std::string(std::get<0>(paramInfo.param) == 0 ? "UntruncatedPlummer" : "SlicedCube") +
                                  "_nleaf" + std::to_string(std::get<1>(paramInfo.param));
                         });

// The relative opening test opens more cells for groups of small |a| (the core of a Plummer sphere), so their lists
// grow beyond the others; on the untruncated Plummer sphere the longest must still be a small multiple of the mean.
// Measured max / mean over 12 seeds (N = 2^16, theta 0.5, alpha 1e-3, ncrit 64, nleaf 8): 1.84 - 2.96 (theta alone
// 1.41 - 1.54); with packed siblings 1.87 - 2.78 (12 seeds). The longest lists belong to the groups at the centre,
// whose |a| -> 0 (floored: groups.hpp). Bound 6.
TEST(ListLength, StaysWithinAFewTimesTheMeanWithTheRelativeTest) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  Particles p = testing::untruncatedPlummer(1 << 16, seed);
  gpu::CpuEngine engine(gpu::Precision::float32);
  TreeParams params = treeParams(64, 8);
  params.alpha = 1e-3;
  TreeSolver solver(engine, params, GravityParams{});
  solver.computeForces(p);  // the accelerations the test scales by
  const ListLengths withTest = listLengths(solver.buildPlanOnly(p));
  params.alpha = 0.0;
  TreeSolver thetaAlone(engine, params, GravityParams{});
  const ListLengths without = listLengths(thetaAlone.buildPlanOnly(p));
  EXPECT_LE(double(withTest.max), 6.0 * withTest.mean) << "mean " << withTest.mean << ", max " << withTest.max;
  EXPECT_GT(withTest.mean, without.mean) << "the relative test opened no cell";
}

// Each group's tolerance is alpha |a|_min / G over its own bodies, with |a|_min floored at a fraction of the mean;
// without accelerations, or with alpha 0, the test stays off.
TEST(RelativeTolerances, ScaleByEachGroupsSmallestAccelerationAboveTheFloor) {
  Particles p(5);
  p.ax = {3.0, 0.0, 0.0, 0.0, -8.0};
  p.ay = {0.0, 4.0, 0.0, 6.0, 0.0};
  p.az = {4.0, 0.0, 0.0, 0.0, 0.0};  // |a| = 5, 4, 0, 6, 8: mean 4.6
  Groups groups;
  groups.ranges = {{0, 2}, {2, 3}, {3, 5}};
  const double inf = std::numeric_limits<double>::infinity();
  ASSERT_TRUE(setRelativeTolerances(p, 1e-3, 2.0, groups));
  ASSERT_EQ(groups.relativeTolerance.size(), 3u);
  EXPECT_DOUBLE_EQ(groups.relativeTolerance[0], 1e-3 * 4.0 / 2.0);
  EXPECT_DOUBLE_EQ(groups.relativeTolerance[1], 1e-3 * kRelativeFloorOfMeanAccel * 4.6 / 2.0);
  EXPECT_DOUBLE_EQ(groups.relativeTolerance[2], 1e-3 * 6.0 / 2.0);

  EXPECT_FALSE(setRelativeTolerances(p, 0.0, 2.0, groups));
  EXPECT_EQ(groups.relativeTolerance, std::vector<double>(3, inf));
  Particles fresh(5);
  groups.relativeTolerance.assign(3, 1.0);
  EXPECT_FALSE(setRelativeTolerances(fresh, 1e-3, 2.0, groups));
  EXPECT_EQ(groups.relativeTolerance, std::vector<double>(3, inf));
}

// BodyPermuter::permuteAllButForces (the periodic and the distributed builds where every body gets new forces): every
// array but the forces as permute leaves it, the forces untouched, and tolerances from the carried |a| bit for bit
// those from the permuted accelerations (with the floor of a larger set's sum too), with and without time bins. Its two
// parts (permuteSources, then permuteMotion: the periodic build moves the velocities, ids and bins while the GPU
// finishes) leave the same, the motion untouched in between.
TEST(RelativeTolerances, PermutationWithoutTheForcesCarriesTheSameMagnitudes) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  std::mt19937_64 random(seed);
  std::normal_distribution<double> gauss;
  for (const bool bins : {false, true}) {
    Particles p = testing::plummer(20000, seed);
    for (std::size_t i = 0; i < p.size(); ++i) {
      p.ax[i] = gauss(random);
      p.ay[i] = gauss(random) * 1e-3;
      p.az[i] = gauss(random) * 1e3;
      p.pot[i] = gauss(random);
    }
    if (bins) {
      p.timeBin.resize(p.size());
      for (std::size_t i = 0; i < p.size(); ++i) p.timeBin[i] = static_cast<std::uint8_t>(random() % 7);
    }
    std::vector<std::uint32_t> order(p.size());
    std::iota(order.begin(), order.end(), 0u);
    std::shuffle(order.begin(), order.end(), random);
    Particles full = p, light = p;
    BodyPermuter permuter;
    permuter.permute(full, order);
    std::vector<double> magnitudes;
    permuter.permuteAllButForces(light, order, magnitudes);
    EXPECT_EQ(light.x, full.x);
    EXPECT_EQ(light.vz, full.vz);
    EXPECT_EQ(light.mass, full.mass);
    EXPECT_EQ(light.id, full.id);
    EXPECT_EQ(light.timeBin, full.timeBin);
    EXPECT_EQ(light.ax, p.ax) << "the forces were moved";
    EXPECT_EQ(light.pot, p.pot);
    Groups fromForces, fromMagnitudes;
    for (std::uint32_t first = 0; first < p.size(); first += 97) {
      const BodyRange range{first, std::min<std::uint32_t>(first + 97, static_cast<std::uint32_t>(p.size()))};
      fromForces.ranges.push_back(range);
      fromMagnitudes.ranges.push_back(range);
    }
    ASSERT_TRUE(setRelativeTolerances(full, 2e-3, 1.0, fromForces));
    ASSERT_TRUE(setRelativeTolerances(std::span<const double>(magnitudes), 2e-3, 1.0, fromMagnitudes));
    EXPECT_EQ(fromMagnitudes.relativeTolerance, fromForces.relativeTolerance);
    // The distributed solver's floor from all ranks' sum (here a larger set's: twice these bodies'), the same way.
    const AccelerationSet permuted{full.ax, full.ay, full.az};
    const double sum = sumOfAccelerationMagnitudes(permuted);
    EXPECT_EQ(sumOfAccelerationMagnitudes(std::span<const double>(magnitudes)), sum);
    setRelativeTolerancesWithTotal(permuted, 3.0 * sum, 2.0 * double(p.size()), 2e-3, 1.0, fromForces);
    setRelativeTolerancesWithTotal(std::span<const double>(magnitudes), 3.0 * sum, 2.0 * double(p.size()), 2e-3, 1.0,
                                   fromMagnitudes);
    EXPECT_EQ(fromMagnitudes.relativeTolerance, fromForces.relativeTolerance);

    Particles split = p;
    std::vector<double> splitMagnitudes;
    permuter.permuteSources(split, order, splitMagnitudes);
    EXPECT_EQ(split.x, full.x);
    EXPECT_EQ(split.z, full.z);
    EXPECT_EQ(split.mass, full.mass);
    EXPECT_EQ(split.vx, p.vx) << "permuteSources moved the velocities";
    EXPECT_EQ(split.id, p.id);
    EXPECT_EQ(split.timeBin, p.timeBin);
    EXPECT_EQ(splitMagnitudes, magnitudes);
    permuter.permuteMotion(split, order);
    testing::expectSameBodiesBitForBit(light, split, "permuteSources + permuteMotion against permuteAllButForces");
  }
}

// The floor's mean |a| is a parallel sum: the tolerances (and so the lists) are the same, bit for bit, on one thread
// and on all of them, call after call.
TEST(RelativeTolerances, DoNotDependOnTheThreads) {
  const std::size_t n = 300001;
  Particles p(n);
  std::mt19937_64 random(7);
  std::uniform_real_distribution<double> component(-1.0, 1.0);
  for (std::size_t i = 0; i < n; ++i) {
    const double scale = i < 1000 ? 1e-6 : 1.0;  // the first group's bodies sit below the floor
    p.ax[i] = scale * component(random);
    p.ay[i] = scale * component(random);
    p.az[i] = scale * component(random);
  }
  Groups groups;
  for (std::uint32_t first = 0; first < n; first += 1000) {
    groups.ranges.push_back({first, std::min<std::uint32_t>(first + 1000, static_cast<std::uint32_t>(n))});
  }
  std::vector<double> oneThread;
  {
    tbb::global_control threads(tbb::global_control::max_allowed_parallelism, 1);
    ASSERT_TRUE(setRelativeTolerances(p, 1e-3, 1.0, groups));
    oneThread = groups.relativeTolerance;
  }
  for (int repeat = 0; repeat < 20; ++repeat) {
    ASSERT_TRUE(setRelativeTolerances(p, 1e-3, 1.0, groups));
    ASSERT_EQ(groups.relativeTolerance, oneThread) << "call " << repeat;
  }
}

}  // namespace
}  // namespace matcha::tree
