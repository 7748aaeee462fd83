// SPDX-License-Identifier: MIT
// Structure of keys, octree, multipoles, groups and plans: exact checks, hand-sized cases first, then seeded
// random Plummer and clump-in-halo inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "matcha/core/errors.hpp"
#include "matcha/gpu/cpu_engine.hpp"
#include "matcha/testing/generators.hpp"
#include "matcha/tree/space_filling_curve.hpp"
#include "matcha/tree/tree_solver.hpp"
#include "matcha/tree/walk.hpp"

namespace matcha::tree {
namespace {

TEST(MortonKey, InterleavesXLowest) {
  EXPECT_EQ(mortonKey(0, 0, 0), 0u);
  EXPECT_EQ(mortonKey(1, 0, 0), 1u);
  EXPECT_EQ(mortonKey(0, 1, 0), 2u);
  EXPECT_EQ(mortonKey(0, 0, 1), 4u);
  EXPECT_EQ(mortonKey(1, 1, 1), 7u);
  EXPECT_EQ(mortonKey(2, 0, 0), 8u);
  EXPECT_EQ(mortonKey(0x1fffff, 0x1fffff, 0x1fffff), (std::uint64_t{1} << 63) - 1);
}

// Against the definition, bit by bit: bit k of x, y and z lands at bits 3k, 3k + 1 and 3k + 2, for random coordinates
// of all 21 bits and for every single bit.
TEST(MortonKey, MatchesTheBitByBitDefinition) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  std::mt19937_64 random(seed);
  const auto definition = [](std::uint32_t x, std::uint32_t y, std::uint32_t z) {
    std::uint64_t key = 0;
    for (int k = 0; k < kMaxLevel; ++k) {
      key |= std::uint64_t{(x >> k) & 1u} << (3 * k) | std::uint64_t{(y >> k) & 1u} << (3 * k + 1) |
             std::uint64_t{(z >> k) & 1u} << (3 * k + 2);
    }
    return key;
  };
  for (int k = 0; k < kMaxLevel; ++k) {
    const std::uint32_t bit = 1u << k;
    EXPECT_EQ(mortonKey(bit, 0, 0), definition(bit, 0, 0)) << "bit " << k;
    EXPECT_EQ(mortonKey(0, bit, 0), definition(0, bit, 0)) << "bit " << k;
    EXPECT_EQ(mortonKey(0, 0, bit), definition(0, 0, bit)) << "bit " << k;
  }
  for (int i = 0; i < 100000; ++i) {
    const auto x = static_cast<std::uint32_t>(random() & 0x1fffff), y = static_cast<std::uint32_t>(random() & 0x1fffff),
               z = static_cast<std::uint32_t>(random() & 0x1fffff);
    ASSERT_EQ(mortonKey(x, y, z), definition(x, y, z)) << x << " " << y << " " << z;
  }
}

// mortonCell undoes mortonKey: on random cells, on every single bit and on the corners.
TEST(MortonKey, MortonCellIsItsInverse) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  std::mt19937_64 random(seed);
  using Cell = std::array<std::uint32_t, 3>;
  EXPECT_EQ(mortonCell(0), (Cell{0, 0, 0}));
  EXPECT_EQ(mortonCell((std::uint64_t{1} << 63) - 1), (Cell{0x1fffff, 0x1fffff, 0x1fffff}));
  for (int k = 0; k < kMaxLevel; ++k) {
    const std::uint32_t bit = 1u << k;
    EXPECT_EQ(mortonCell(mortonKey(bit, 0, 0)), (Cell{bit, 0, 0})) << "bit " << k;
    EXPECT_EQ(mortonCell(mortonKey(0, 0, bit)), (Cell{0, 0, bit})) << "bit " << k;
  }
  for (int i = 0; i < 100000; ++i) {
    const Cell cell{static_cast<std::uint32_t>(random() & 0x1fffff), static_cast<std::uint32_t>(random() & 0x1fffff),
                    static_cast<std::uint32_t>(random() & 0x1fffff)};
    ASSERT_EQ(mortonCell(mortonKey(cell[0], cell[1], cell[2])), cell);
    const std::uint64_t key = random() >> 1;
    const Cell back = mortonCell(key);
    ASSERT_EQ(mortonKey(back[0], back[1], back[2]), key);
  }
}

// The radix sort gives exactly what std::sort on (key, index) gives: random keys, a clump that shares most leading
// bits (sorted by the deeper, parallel digits), many equal keys (ties by index), keys already in order, keys nearly in
// order (the previous step's order), and the tiny cases. The same sorter is reused, as the solver reuses it.
TEST(KeySorter, EqualsStdSortOnKeyThenIndex) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  std::mt19937_64 random(seed);
  const std::size_t n = 300000;
  std::vector<std::pair<const char*, std::vector<std::uint64_t>>> cases;
  std::vector<std::uint64_t> keys(n);
  for (auto& key : keys) key = random() >> 1;
  cases.emplace_back("random", keys);
  for (auto& key : keys) key = (std::uint64_t{0x5a5a} << 47) | (random() >> 40);  // one clump: 47 shared bits
  cases.emplace_back("clump", keys);
  for (auto& key : keys) key = random() % 97;
  cases.emplace_back("ties", keys);
  std::sort(keys.begin(), keys.end());
  cases.emplace_back("sorted", keys);
  for (std::size_t i = 0; i + 1 < n; i += 1 + random() % 7) std::swap(keys[i], keys[i + 1]);
  cases.emplace_back("nearly sorted", keys);
  cases.emplace_back("empty", std::vector<std::uint64_t>{});
  cases.emplace_back("one", std::vector<std::uint64_t>{42});
  cases.emplace_back("two equal", std::vector<std::uint64_t>{7, 7});
  KeySorter sorter;
  std::vector<std::uint64_t> sorted;
  std::vector<std::uint32_t> order;
  for (const auto& [name, input] : cases) {
    SCOPED_TRACE(name);
    std::vector<std::pair<std::uint64_t, std::uint32_t>> reference(input.size());
    for (std::size_t i = 0; i < input.size(); ++i) reference[i] = {input[i], static_cast<std::uint32_t>(i)};
    std::sort(reference.begin(), reference.end());
    sorter.sort(input, sorted, order);
    ASSERT_EQ(sorted.size(), input.size());
    ASSERT_EQ(order.size(), input.size());
    for (std::size_t i = 0; i < input.size(); ++i) {
      ASSERT_EQ(sorted[i], reference[i].first) << "at " << i;
      ASSERT_EQ(order[i], reference[i].second) << "at " << i;
    }
  }
}

// The Hilbert key's defining properties, checked on every cell of levels 1..4, each cell represented by a point at a
// random offset inside it: the top 3L bits of the key name the level-L cell (a permutation of 0 .. 8^L - 1, whatever
// the offset), and cells consecutive in key order share a face, which is what keeps a run of consecutive bodies
// compact.
TEST(HilbertKey, PrefixesNameCellsAndConsecutiveCellsShareAFace) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  std::mt19937_64 random(seed);
  EXPECT_EQ(hilbertKey(0, 0, 0), 0u);
  for (int level = 1; level <= 4; ++level) {
    SCOPED_TRACE("level " + std::to_string(level));
    const std::uint32_t cellsPerSide = 1u << level;
    const int shift = kMaxLevel - level;
    std::vector<std::array<std::uint32_t, 3>> cellOfPrefix(std::size_t{1} << (3 * level), {~0u, ~0u, ~0u});
    for (std::uint32_t i = 0; i < cellsPerSide; ++i) {
      for (std::uint32_t j = 0; j < cellsPerSide; ++j) {
        for (std::uint32_t k = 0; k < cellsPerSide; ++k) {
          const std::uint32_t insideCell = (1u << shift) - 1;
          const std::uint64_t key =
              hilbertKey((i << shift) | (random() & insideCell), (j << shift) | (random() & insideCell),
                         (k << shift) | (random() & insideCell));
          const std::uint64_t prefix = key >> (3 * shift);
          ASSERT_LT(prefix, cellOfPrefix.size());
          ASSERT_EQ(cellOfPrefix[prefix][0], ~0u) << "two cells share the prefix " << prefix;
          cellOfPrefix[prefix] = {i, j, k};
        }
      }
    }
    for (std::size_t prefix = 1; prefix < cellOfPrefix.size(); ++prefix) {
      int faceSteps = 0;
      for (int d = 0; d < 3; ++d) {
        faceSteps += std::abs(int(cellOfPrefix[prefix][d]) - int(cellOfPrefix[prefix - 1][d]));
      }
      ASSERT_EQ(faceSteps, 1) << "cells " << prefix - 1 << " and " << prefix << " along the curve are not neighbours";
    }
  }
}

Particles cubeCorners() {
  Particles p(8);
  for (std::uint32_t i = 0; i < 8; ++i) {
    p.x[i] = (i & 1) ? 1.0 : -1.0;
    p.y[i] = (i & 2) ? 1.0 : -1.0;
    p.z[i] = (i & 4) ? 1.0 : -1.0;
    p.mass[i] = 0.125;
    p.id[i] = 7 - i;  // ids in reverse so the sort visibly permutes them
  }
  return p;
}

// computeExtent's eight running bounds a lane: the plain loop's minima and maxima on every axis, for counts that fill
// the lanes and blocks or not, a NaN passed over, none giving the empty extent.
TEST(Extent, IsThePlainLoopsMinimaAndMaxima) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  std::mt19937_64 random(seed);
  std::normal_distribution<double> gauss(0.0, 100.0);
  for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{8}, std::size_t{9},
                              std::size_t{16385}, std::size_t{200003}}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    std::vector<double> axes[3];
    for (auto& axis : axes) {
      axis.resize(n);
      for (double& v : axis) v = gauss(random);
    }
    if (n > 3) axes[1][n / 2] = std::numeric_limits<double>::quiet_NaN();
    const Extent extent = computeExtent({axes[0].data(), axes[1].data(), axes[2].data(), axes[0].data(), n});
    for (int d = 0; d < 3; ++d) {
      double lo = std::numeric_limits<double>::infinity(), hi = -lo;
      for (const double v : axes[d]) {
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
      EXPECT_EQ(extent.lo[d], lo) << "axis " << d;
      EXPECT_EQ(extent.hi[d], hi) << "axis " << d;
    }
  }
}

TEST(Octree, EightCornersGiveOneLevelOfEightLeaves) {
  Particles p = cubeCorners();
  gpu::CpuEngine engine(gpu::Precision::float64);
  TreeParams params;
  params.nleaf = 1;
  params.ncrit = 1;
  TreeSolver solver(engine, params, GravityParams{});
  solver.buildPlanOnly(p);
  const Octree& tree = solver.octree();
  ASSERT_EQ(tree.numCells(), 9u);
  EXPECT_EQ(tree.numLevels(), 2);
  EXPECT_EQ(tree.numChildren[0], 8);
  EXPECT_NEAR(tree.multipoles.mass[0], 1.0, 1e-15);
  EXPECT_NEAR(tree.multipoles.x[0], 0.0, 1e-15);
  for (std::uint32_t c = 1; c < 9; ++c) {
    EXPECT_TRUE(tree.isLeaf(c));
    EXPECT_EQ(tree.bodies[c].size(), 1u);
  }
  // Morton order: x varies fastest, so after sorting, body k is the corner with bits k.
  for (std::uint32_t k = 0; k < 8; ++k) {
    EXPECT_EQ(p.x[k], (k & 1) ? 1.0 : -1.0);
    EXPECT_EQ(p.z[k], (k & 4) ? 1.0 : -1.0);
    EXPECT_EQ(p.id[k], 7 - k);
  }
  EXPECT_EQ(solver.groups().size(), 8u);
}

TEST(Octree, CoincidentBodiesStopAtTheDeepestLevel) {
  Particles p(40);
  for (std::size_t i = 0; i < p.size(); ++i) {
    p.x[i] = i < 30 ? 0.25 : -0.5 + 0.01 * double(i);
    p.y[i] = i < 30 ? 0.25 : 0.1;
    p.z[i] = 0.0;
    p.mass[i] = 1.0 / 40;
    p.id[i] = i;
  }
  gpu::CpuEngine engine(gpu::Precision::float64);
  TreeParams params;
  params.nleaf = 4;
  params.ncrit = 8;
  TreeSolver solver(engine, params, GravityParams{});
  const InteractionPlan& plan = solver.buildPlanOnly(p);
  EXPECT_EQ(solver.octree().numLevels() - 1, kMaxLevel);
  for (const BodyRange& group : solver.groups().ranges) EXPECT_LE(group.size(), 8u);
  EXPECT_GT(plan.numGroups(), 0u);
}

// Checks every structural invariant of tree, groups and plan on `p` (already sorted by the solver).
void expectTreeInvariants(const TreeSolver& solver, const Particles& p, const InteractionPlan& plan,
                          const TreeParams& params) {
  const Octree& tree = solver.octree();
  const std::size_t n = p.size();
  std::vector<int> leafCount(n, 0);
  double totalMass = 0.0;
  for (std::size_t i = 0; i < n; ++i) totalMass += p.mass[i];
  for (std::uint32_t c = 0; c < tree.numCells(); ++c) {
    const BodyRange range = tree.bodies[c];
    ASSERT_GT(range.size(), 0u) << "empty cell " << c;
    if (tree.isLeaf(c)) {
      for (std::uint32_t i = range.first; i < range.last; ++i) ++leafCount[i];
      if (tree.level[c] < kMaxLevel) {
        EXPECT_LE(range.size(), params.nleaf) << "leaf " << c;
      }
    } else {
      // Children partition the parent's range, in order.
      std::uint32_t next = range.first;
      for (std::uint32_t child = tree.firstChild[c]; child < tree.firstChild[c] + tree.numChildren[c]; ++child) {
        EXPECT_EQ(tree.bodies[child].first, next);
        EXPECT_EQ(tree.level[child], tree.level[c] + 1);
        next = tree.bodies[child].last;
      }
      EXPECT_EQ(next, range.last);
    }
    // Mass and centre of mass equal the direct sums over the cell's bodies.
    double mass = 0.0, mx = 0.0, my = 0.0, mz = 0.0;
    for (std::uint32_t i = range.first; i < range.last; ++i) {
      mass += p.mass[i];
      mx += p.mass[i] * p.x[i];
      my += p.mass[i] * p.y[i];
      mz += p.mass[i] * p.z[i];
      // Every body lies inside its cell's cube.
      const double* centre = &tree.centre[3 * c];
      const double half = tree.halfSide[c] * (1 + 1e-12);
      ASSERT_LE(std::abs(p.x[i] - centre[0]), half);
      ASSERT_LE(std::abs(p.y[i] - centre[1]), half);
      ASSERT_LE(std::abs(p.z[i] - centre[2]), half);
    }
    EXPECT_NEAR(tree.multipoles.mass[c], mass, 1e-12 * mass);
    const double scale = 1e-12 * (1.0 + tree.halfSide[c]);
    EXPECT_NEAR(tree.multipoles.x[c], mx / mass, scale);
    EXPECT_NEAR(tree.multipoles.y[c], my / mass, scale);
    EXPECT_NEAR(tree.multipoles.z[c], mz / mass, scale);
  }
  for (std::size_t i = 0; i < n; ++i)
    ASSERT_EQ(leafCount[i], 1) << "body " << i << " is in " << leafCount[i] << " leaves";

  // Groups: contiguous, in order, covering every body once, at most ncrit each.
  std::uint32_t next = 0;
  for (const BodyRange& group : solver.groups().ranges) {
    EXPECT_EQ(group.first, next);
    EXPECT_GE(group.size(), 1u);
    EXPECT_LE(group.size(), params.ncrit);
    next = group.last;
  }
  EXPECT_EQ(next, n);

  // Plan: each group's list accounts for every body exactly once, either as a body or inside one accepted cell,
  // so its masses add up to the total mass; accepted cells never hold the group's own bodies, and pass the group's
  // opening test.
  ASSERT_EQ(plan.numGroups(), solver.groups().size());
  for (std::size_t g = 0; g < plan.numGroups(); ++g) {
    std::vector<BodyRange> covered;
    for (std::uint32_t k = plan.bodyListOffsets[g]; k < plan.bodyListOffsets[g + 1]; ++k)
      covered.push_back(plan.bodyList[k]);
    for (std::uint32_t k = plan.cellListOffsets[g]; k < plan.cellListOffsets[g + 1]; ++k) {
      const BodyRange cellBodies = tree.bodies[plan.cellList[k]];
      EXPECT_FALSE(cellBodies.first < plan.groups[g].last && plan.groups[g].first < cellBodies.last);
      // The walk's float test accepts only cells the double criterion accepts.
      ASSERT_TRUE(acceptCell(tree, plan.cellList[k], solver.groups(), g))
          << "group " << g << ", cell " << plan.cellList[k];
      covered.push_back(cellBodies);
    }
    std::sort(covered.begin(), covered.end(), [](BodyRange a, BodyRange b) { return a.first < b.first; });
    std::uint32_t cursor = 0;
    for (const BodyRange& range : covered) {
      ASSERT_EQ(range.first, cursor) << "group " << g << " list leaves a gap or overlaps at body " << cursor;
      cursor = range.last;
    }
    ASSERT_EQ(cursor, n) << "group " << g;
  }
}

struct InputCase {
  const char* name;
  Particles (*make)(std::size_t, std::uint64_t);
};

class TreeInvariants : public ::testing::TestWithParam<std::tuple<int, std::uint32_t, std::uint32_t>> {};

// Every input of the support library: random (uniform cube), smooth (Plummer), clustered (clump in halo, a massive
// clump in a cell corner), with far outliers (untruncated Plummer) and with a slab cut by a cell boundary (where the
// extent rule of makeGroups splits candidates, also below the leaves).
const InputCase kInputs[] = {
    {"plummer", testing::plummer},
    {"clump-in-halo", testing::clumpInHalo},
    {"untruncated-plummer", testing::untruncatedPlummer},
    {"corner-clump", testing::cornerClump},
    {"sliced-cube", testing::slicedCube},
    {"uniform-cube", [](std::size_t n, std::uint64_t seed) { return testing::uniformCube(n, seed); }}};
constexpr int kNumInputs = sizeof(kInputs) / sizeof(kInputs[0]);

TEST_P(TreeInvariants, HoldOnEveryInput) {
  const auto [inputIndex, nleaf, ncrit] = GetParam();
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  Particles p = kInputs[inputIndex].make(6000, seed);
  std::multiset<std::uint64_t> idsBefore(p.id.begin(), p.id.end());
  TreeParams params;
  params.nleaf = nleaf;
  params.ncrit = ncrit;
  gpu::CpuEngine engine(gpu::Precision::float64);
  TreeSolver solver(engine, params, GravityParams{});
  const InteractionPlan& plan = solver.buildPlanOnly(p);
  SCOPED_TRACE(kInputs[inputIndex].name);
  expectTreeInvariants(solver, p, plan, params);
  EXPECT_EQ(std::multiset<std::uint64_t>(p.id.begin(), p.id.end()), idsBefore) << "sorting lost or duplicated bodies";
}

INSTANTIATE_TEST_SUITE_P(LeafAndGroupSizes, TreeInvariants,
                         ::testing::Combine(::testing::Range(0, kNumInputs), ::testing::Values(1u, 8u, 16u, 64u),
                                            ::testing::Values(1u, 16u, 64u, 300u)),
                         [](const ::testing::TestParamInfo<TreeInvariants::ParamType>& paramInfo) {
                           std::string name = kInputs[std::get<0>(paramInfo.param)].name;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name + "_nleaf" + std::to_string(std::get<1>(paramInfo.param)) + "_ncrit" +
                                  std::to_string(std::get<2>(paramInfo.param));
                         });

// The quadrupole of every cell, built in the upward pass from its children with the parallel-axis theorem, equals
// the direct sum over its bodies about their centre of mass, Q = sum_k m_k (3 d d^T - |d|^2 I), d = x_k - com. The
// reference is summed in long double. The tolerance is 1e-12 of the cell's sum m |d|^2 (the tree's shifts add
// terms of size m_c |d_c|^2 <= sum m |d|^2 per level, each rounded to ~1e-16 of itself), plus the rounding of the
// positions themselves: each offset d = x - com carries an error of ~1e-16 |x| in both the tree and the reference,
// i.e. an error of ~6e-16 m |d| |x| in each component, which for the tightest cells of the clumps (|d| ~ 1e-4 at
// |x| ~ 0.8, nleaf 1) reaches 1e-12 of sum m |d|^2 by itself; so add 1e-14 sum m (|d| + 1e-16 |x|) |x| (the second
// term for one-body cells, where the tree's centre of mass may sit an ulp off its body and sum m |d|^2 is rounding
// noise). Measured worst difference / tolerance: 0.046 (20 fresh seeds x 12 cases).
class CellQuadrupoles : public ::testing::TestWithParam<std::tuple<int, std::uint32_t>> {};

TEST_P(CellQuadrupoles, EqualTheSumOverTheCellsBodies) {
  const auto [inputIndex, nleaf] = GetParam();
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  SCOPED_TRACE(kInputs[inputIndex].name);
  Particles p = kInputs[inputIndex].make(6000, seed);
  TreeParams params;
  params.nleaf = nleaf;
  params.multipole = MultipoleOrder::quadrupole;
  gpu::CpuEngine engine(gpu::Precision::float64);
  TreeSolver solver(engine, params, GravityParams{});
  solver.buildPlanOnly(p);
  const Octree& tree = solver.octree();
  const matcha::CellMultipoles& m = tree.multipoles;
  ASSERT_TRUE(m.hasQuadrupole);
  ASSERT_EQ(m.qxx.size(), tree.numCells());
  double worst = 0.0;
  for (std::uint32_t c = 0; c < tree.numCells(); ++c) {
    const BodyRange range = tree.bodies[c];
    long double mass = 0, mx = 0, my = 0, mz = 0;
    for (std::uint32_t i = range.first; i < range.last; ++i) {
      mass += p.mass[i];
      mx += static_cast<long double>(p.mass[i]) * p.x[i];
      my += static_cast<long double>(p.mass[i]) * p.y[i];
      mz += static_cast<long double>(p.mass[i]) * p.z[i];
    }
    const long double com[3] = {mx / mass, my / mass, mz / mass};
    long double q[6] = {0, 0, 0, 0, 0, 0};  // xx yy zz xy xz yz
    long double spread = 0;                 // sum m |d|^2
    long double rounding = 0;               // sum m (|d| + 1e-16 |x|) |x|, for the rounding floor
    for (std::uint32_t i = range.first; i < range.last; ++i) {
      const long double d[3] = {p.x[i] - com[0], p.y[i] - com[1], p.z[i] - com[2]};
      const long double d2 = d[0] * d[0] + d[1] * d[1] + d[2] * d[2];
      const long double mi = p.mass[i];
      q[0] += mi * (3 * d[0] * d[0] - d2);
      q[1] += mi * (3 * d[1] * d[1] - d2);
      q[2] += mi * (3 * d[2] * d[2] - d2);
      q[3] += mi * 3 * d[0] * d[1];
      q[4] += mi * 3 * d[0] * d[2];
      q[5] += mi * 3 * d[1] * d[2];
      spread += mi * d2;
      const long double r = std::hypot(p.x[i], p.y[i], p.z[i]);
      rounding += mi * (std::sqrt(d2) + 1e-16L * r) * r;
    }
    const double tolerance = static_cast<double>(1e-12L * spread + 1e-14L * rounding);
    const double treeQ[6] = {m.qxx[c], m.qyy[c], m.qzz[c], m.qxy[c], m.qxz[c], m.qyz[c]};
    for (int k = 0; k < 6; ++k) {
      const double difference = std::abs(static_cast<double>(treeQ[k] - q[k]));
      worst = std::max(worst, difference / tolerance);
      ASSERT_LE(difference, tolerance) << "cell " << c << " component " << k << ", " << range.size() << " bodies";
    }
    const double traceDifference = std::abs(static_cast<double>(m.trace[c] - spread));
    ASSERT_LE(traceDifference, tolerance) << "cell " << c << " trace, " << range.size() << " bodies";
  }
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", worst);
  RecordProperty("worstDifferenceOverTolerance", text);
}

// b_max, the radius the relative opening test scales by (walk.hpp), must hold every body of its cell: a radius too
// small would let the test accept a cell whose far bodies it has not accounted for. A leaf's is exact; a parent's is
// the smaller of two upper bounds, so it lies between the exact radius and the cube's corner distance.
class CellRadius : public ::testing::TestWithParam<int> {};

TEST_P(CellRadius, HoldsEveryBodyOfTheCell) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  SCOPED_TRACE(kInputs[GetParam()].name);
  Particles p = kInputs[GetParam()].make(6000, seed);
  gpu::CpuEngine engine(gpu::Precision::float64);
  TreeSolver solver(engine, TreeParams{}, GravityParams{});
  solver.buildPlanOnly(p);
  const Octree& tree = solver.octree();
  ASSERT_EQ(tree.bmax.size(), tree.numCells());
  for (std::uint32_t c = 0; c < tree.numCells(); ++c) {
    const double com[3] = {tree.multipoles.x[c], tree.multipoles.y[c], tree.multipoles.z[c]};
    double farthest = 0.0;
    for (std::uint32_t i = tree.bodies[c].first; i < tree.bodies[c].last; ++i) {
      farthest = std::max(farthest, std::hypot(p.x[i] - com[0], p.y[i] - com[1], p.z[i] - com[2]));
    }
    const double corner = std::hypot(std::abs(com[0] - tree.centre[3 * c]) + tree.halfSide[c],
                                     std::abs(com[1] - tree.centre[3 * c + 1]) + tree.halfSide[c],
                                     std::abs(com[2] - tree.centre[3 * c + 2]) + tree.halfSide[c]);
    const double roundoff = 1e-12 * (std::abs(com[0]) + std::abs(com[1]) + std::abs(com[2]) + farthest);
    ASSERT_GE(tree.bmax[c] + roundoff, farthest) << "cell " << c << ", " << tree.bodies[c].size() << " bodies";
    ASSERT_LE(tree.bmax[c], std::sqrt(3.0) * tree.halfSide[c] +
                                std::hypot(com[0] - tree.centre[3 * c], com[1] - tree.centre[3 * c + 1],
                                           com[2] - tree.centre[3 * c + 2]) +
                                roundoff)
        << "cell " << c;
    ASSERT_LE(farthest, corner + roundoff) << "cell " << c << ": a body outside its cube";
    if (tree.isLeaf(c)) {
      ASSERT_NEAR(tree.bmax[c], farthest, roundoff) << "leaf " << c;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Inputs, CellRadius, ::testing::Range(0, kNumInputs),
                         [](const ::testing::TestParamInfo<int>& paramInfo) {
                           std::string name = kInputs[paramInfo.param].name;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

TEST(MonopoleCells, StoreNoQuadrupole) {
  Particles p = testing::plummer(500, 3);
  TreeParams params;
  params.multipole = MultipoleOrder::monopole;
  gpu::CpuEngine engine(gpu::Precision::float64);
  TreeSolver solver(engine, params, GravityParams{});
  solver.buildPlanOnly(p);
  EXPECT_FALSE(solver.octree().multipoles.hasQuadrupole);
  EXPECT_TRUE(solver.octree().multipoles.qxx.empty());
}

INSTANTIATE_TEST_SUITE_P(Inputs, CellQuadrupoles,
                         ::testing::Combine(::testing::Range(0, kNumInputs), ::testing::Values(1u, 8u)),
                         [](const ::testing::TestParamInfo<CellQuadrupoles::ParamType>& paramInfo) {
                           std::string name = kInputs[std::get<0>(paramInfo.param)].name;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name + "_nleaf" + std::to_string(std::get<1>(paramInfo.param));
                         });

TEST(TreeSolver, RejectsBadParameters) {
  gpu::CpuEngine engine;
  const auto make = [&](double theta, std::uint32_t ncrit, std::uint32_t nleaf) {
    TreeParams params;
    params.theta = theta;
    params.ncrit = ncrit;
    params.nleaf = nleaf;
    TreeSolver solver(engine, params, GravityParams{});
  };
  EXPECT_THROW(make(0.0, 64, 16), InputError);
  EXPECT_THROW(make(-0.5, 64, 16), InputError);
  EXPECT_THROW(make(1.6, 64, 16), InputError);
  EXPECT_THROW(make(std::nan(""), 64, 16), InputError);
  EXPECT_THROW(make(0.5, 0, 16), InputError);
  EXPECT_THROW(make(0.5, 64, 0), InputError);
  EXPECT_NO_THROW(make(1.5, 1, 1));
  for (const double alpha : {-1e-3, std::nan(""), std::numeric_limits<double>::infinity()}) {
    TreeParams params;
    params.alpha = alpha;
    EXPECT_THROW(TreeSolver(engine, params, GravityParams{}), InputError) << "alpha " << alpha;
  }
  GravityParams badEps;
  badEps.eps = -1.0;
  EXPECT_THROW(TreeSolver(engine, TreeParams{}, badEps), InputError);
  Particles none;
  TreeSolver solver(engine, TreeParams{}, GravityParams{});
  EXPECT_THROW(solver.computeForces(none), InputError);
}

}  // namespace
}  // namespace matcha::tree
