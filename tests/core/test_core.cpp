// SPDX-License-Identifier: MIT
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "matcha/core/errors.hpp"
#include "matcha/core/force_error.hpp"
#include "matcha/core/interaction_plan.hpp"
#include "matcha/core/params.hpp"
#include "matcha/core/particles.hpp"

namespace matcha {
namespace {

TEST(Params, DefaultsAreValid) {
  EXPECT_NO_THROW(TreeParams{}.validate());
  EXPECT_NO_THROW(GravityParams{}.validate());
  EXPECT_NO_THROW(IntegratorParams{}.validate());
}

TEST(Params, RejectOutOfRangeAndNonFiniteValues) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (double theta : {0.0, -1.0, 1.5000001, nan, inf}) {
    TreeParams tree;
    tree.theta = theta;
    EXPECT_THROW(tree.validate(), InputError) << theta;
  }
  TreeParams tree;
  tree.theta = 1.5;
  EXPECT_NO_THROW(tree.validate());
  tree.ncrit = 0;
  EXPECT_THROW(tree.validate(), InputError);
  for (double eps : {-1e-9, nan, inf}) {
    GravityParams gravity;
    gravity.eps = eps;
    EXPECT_THROW(gravity.validate(), InputError) << eps;
  }
  GravityParams unsoftened;
  unsoftened.eps = 0.0;
  EXPECT_NO_THROW(unsoftened.validate());
  for (double dt : {0.0, -0.1, nan, inf}) {
    IntegratorParams integrator;
    integrator.dt = dt;
    EXPECT_THROW(integrator.validate(), InputError) << dt;
  }
  IntegratorParams integrator;
  integrator.outputInterval = 0.0;
  EXPECT_THROW(integrator.validate(), InputError);
}

TEST(Params, ErrorMessagesAreOneLine) {
  TreeParams tree;
  tree.theta = 7.0;
  try {
    tree.validate();
    FAIL() << "no error";
  } catch (const InputError& error) {
    EXPECT_EQ(std::string(error.what()).find('\n'), std::string::npos);
    EXPECT_NE(std::string(error.what()).find("theta"), std::string::npos);
  }
}

TEST(Particles, PermuteMovesEveryArrayTogether) {
  Particles p(4);
  for (std::size_t i = 0; i < 4; ++i) {
    p.x[i] = double(i);
    p.vz[i] = 10.0 * double(i);
    p.mass[i] = 1.0 + double(i);
    p.pot[i] = -double(i);
    p.id[i] = 100 + i;
  }
  const std::vector<std::uint32_t> order{2, 0, 3, 1};
  p.permute(order);
  for (std::size_t k = 0; k < 4; ++k) {
    EXPECT_EQ(p.x[k], double(order[k]));
    EXPECT_EQ(p.vz[k], 10.0 * double(order[k]));
    EXPECT_EQ(p.mass[k], 1.0 + double(order[k]));
    EXPECT_EQ(p.pot[k], -double(order[k]));
    EXPECT_EQ(p.id[k], 100 + order[k]);
  }
}

// Growing with room keeps every body's values, zeroes the new ones and leaves room for an eighth more; shrinking and
// growing back within that room does not move the arrays.
TEST(Particles, ResizeWithRoomKeepsTheBodiesAndLeavesRoom) {
  Particles p(1000);
  for (std::size_t i = 0; i < p.size(); ++i) {
    p.x[i] = double(i);
    p.id[i] = i;
  }
  p.resizeWithRoom(1600);
  ASSERT_EQ(p.size(), 1600u);
  EXPECT_EQ(p.x[999], 999.0);
  EXPECT_EQ(p.id[999], 999u);
  EXPECT_EQ(p.x[1000], 0.0);
  EXPECT_EQ(p.pot[1599], 0.0);
  EXPECT_GE(p.x.capacity(), 1800u);
  EXPECT_GE(p.id.capacity(), 1800u);
  const double* before = p.vz.data();
  p.resizeWithRoom(1500);
  p.resizeWithRoom(1790);
  EXPECT_EQ(p.vz.data(), before) << "a growth within the room reallocated";
  EXPECT_EQ(p.x[999], 999.0);
}

TEST(Particles, ValidateNamesTheBadBody) {
  Particles p(3);
  p.mass = {1.0, 1.0, 1.0};
  EXPECT_NO_THROW(p.validate());
  p.vy[1] = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THROW(p.validate(), InputError);
  p.vy[1] = 0.0;
  p.mass[2] = 0.0;
  EXPECT_THROW(p.validate(), InputError);
}

TEST(ForceError, PercentilesAreNearestRank) {
  std::vector<double> values;
  for (int i = 100; i >= 1; --i) values.push_back(double(i));
  EXPECT_EQ(percentile(values, 0.5), 50.0);
  EXPECT_EQ(percentile(values, 0.99), 99.0);
  EXPECT_EQ(percentile(values, 1.0), 100.0);
  EXPECT_EQ(percentile(values, 0.0), 1.0);
  EXPECT_EQ(percentile({}, 0.5), 0.0);
}

TEST(ForceError, RelativeErrorsOfKnownVectors) {
  const std::vector<double> refX{3.0, 0.0}, refY{4.0, 0.0}, refZ{0.0, 0.0};
  const std::vector<double> testX{3.0, 0.5}, testY{4.5, 0.0}, testZ{0.0, 0.0};
  const std::vector<double> errors = relativeForceErrors({testX, testY, testZ}, {refX, refY, refZ});
  EXPECT_DOUBLE_EQ(errors[0], 0.1);  // |(0, 0.5, 0)| / 5
  EXPECT_DOUBLE_EQ(errors[1], 0.5);  // zero reference: the absolute error shows
  const ForceErrorStats stats = summariseForceErrors({testX, testY, testZ}, {refX, refY, refZ});
  EXPECT_EQ(stats.count, 2u);
  EXPECT_DOUBLE_EQ(stats.max, 0.5);
}

}  // namespace
}  // namespace matcha

// Periodic boxes: positions fold into [0, L) exactly where they must, and stay put where they are already inside.
TEST(WrapIntoBox, FoldsIntoTheHalfOpenBox) {
  const double L = 3.0;
  EXPECT_EQ(matcha::wrapIntoBox(L, L), 0.0);  // x = L is the face x = 0
  EXPECT_EQ(matcha::wrapIntoBox(2 * L, L), 0.0);
  EXPECT_EQ(matcha::wrapIntoBox(0.0, L), 0.0);
  const double minusZero = matcha::wrapIntoBox(-0.0, L);
  EXPECT_EQ(minusZero, 0.0);
  EXPECT_FALSE(std::signbit(minusZero));  // -0.0 becomes +0.0
  // Just below 0: x + L rounds to L, which must not stay (it is outside [0, L)).
  const double justBelow = matcha::wrapIntoBox(-1e-300, L);
  EXPECT_TRUE(justBelow >= 0.0 && justBelow < L) << justBelow;
  EXPECT_EQ(matcha::wrapIntoBox(std::nextafter(L, 0.0), L), std::nextafter(L, 0.0));  // inside: unchanged
  EXPECT_DOUBLE_EQ(matcha::wrapIntoBox(-0.5, L), 2.5);
  EXPECT_DOUBLE_EQ(matcha::wrapIntoBox(7.25, L), 1.25);
  EXPECT_DOUBLE_EQ(matcha::wrapIntoBox(-1e6 - 0.5, L), std::fmod(-1e6 - 0.5, L) + L);
  EXPECT_TRUE(std::isnan(matcha::wrapIntoBox(std::nan(""), L)));  // left for the caller's check to name
  EXPECT_TRUE(std::isinf(matcha::wrapIntoBox(-INFINITY, L)));
  for (double x = -10.0; x < 10.0; x += 0.0137) {
    const double wrapped = matcha::wrapIntoBox(x, L);
    ASSERT_TRUE(wrapped >= 0.0 && wrapped < L) << x;
    EXPECT_NEAR(std::remainder(wrapped - x, L), 0.0, 1e-12) << x;
  }
}

TEST(PeriodicSplit, ValidatesTheBoxAndTheCutoff) {
  matcha::GravityParams gravity;
  EXPECT_NO_THROW(gravity.validate());  // open boundaries by default
  gravity.periodic = {1.0, 0.02, 0.11};
  EXPECT_NO_THROW(gravity.validate());
  for (const matcha::PeriodicSplit bad :
       {matcha::PeriodicSplit{-1.0, 0.02, 0.11}, matcha::PeriodicSplit{NAN, 0.02, 0.11},
        matcha::PeriodicSplit{INFINITY, 0.02, 0.11}, matcha::PeriodicSplit{1.0, 0.0, 0.11},
        matcha::PeriodicSplit{1.0, 0.2, 0.5}, matcha::PeriodicSplit{1.0, 0.2, 0.7},
        matcha::PeriodicSplit{1.0, 0.2, 0.1}}) {
    gravity.periodic = bad;
    EXPECT_THROW(gravity.validate(), matcha::InputError) << bad.boxSize << " " << bad.cutoffRadius;
  }
}

// A plan of three groups by hand, joined back from its pieces (the periodic solver's batches, lastPlan) and one group
// picked out (the CUDA engine's deferred groups): offsets go on from the target's own, ids and counts come along, and
// a range outside the plan is an invariant error.
TEST(InteractionPlan, AppendGroupsJoinsAndPicksGroups) {
  matcha::InteractionPlan plan;
  plan.groups = {{0, 4}, {4, 6}, {6, 9}};
  plan.groupIds = {7, 8, 9};
  plan.listBodyCounts = {5, 0, 9};
  plan.groupCentres = {0, 0, 0, 1, 1, 1, 2, 2, 2};
  plan.cellList = {11, 12, 13, 14};
  plan.cellListOffsets = {0, 2, 3, 4};
  plan.bodyList = {{0, 5}, {0, 6}, {7, 10}};
  plan.bodyListOffsets = {0, 1, 1, 3};
  matcha::InteractionPlan joined;
  joined.clear();
  matcha::appendGroups(plan, 0, 1, joined);
  matcha::appendGroups(plan, 1, 1, joined);  // nothing
  matcha::appendGroups(plan, 1, 3, joined);
  EXPECT_EQ(joined.groupIds, plan.groupIds);
  EXPECT_EQ(joined.listBodyCounts, plan.listBodyCounts);
  EXPECT_EQ(joined.groupCentres, plan.groupCentres);
  EXPECT_EQ(joined.cellList, plan.cellList);
  EXPECT_EQ(joined.cellListOffsets, plan.cellListOffsets);
  EXPECT_EQ(joined.bodyListOffsets, plan.bodyListOffsets);
  ASSERT_EQ(joined.bodyList.size(), 3u);
  EXPECT_EQ(joined.bodyList[2].first, 7u);
  EXPECT_EQ(joined.numGroups(), 3u);

  matcha::InteractionPlan picked;
  matcha::appendGroups(plan, 2, 3, picked);
  matcha::appendGroups(plan, 0, 1, picked);
  EXPECT_EQ(picked.groupIds, (std::vector<std::uint32_t>{9, 7}));
  EXPECT_EQ(picked.cellListOffsets, (std::vector<std::uint32_t>{0, 1, 3}));
  EXPECT_EQ(picked.cellList, (std::vector<std::uint32_t>{14, 11, 12}));
  EXPECT_EQ(picked.bodyListOffsets, (std::vector<std::uint32_t>{0, 2, 3}));
  EXPECT_EQ(picked.bodyList[0].first, 0u);
  EXPECT_EQ(picked.bodyList[1].first, 7u);
  EXPECT_EQ(picked.bodyList[2].last, 5u);
  EXPECT_EQ(picked.numListBodies(1), 5u);
  EXPECT_EQ(picked.groupCentres, (std::vector<double>{2, 2, 2, 0, 0, 0}));
  EXPECT_THROW(matcha::appendGroups(plan, 2, 4, picked), matcha::InvariantError);
  matcha::InteractionPlan withoutIds = plan;
  withoutIds.groupIds.clear();
  matcha::InteractionPlan target;
  matcha::appendGroups(withoutIds, 0, 1, target);
  EXPECT_THROW(matcha::appendGroups(plan, 0, 1, target), matcha::InvariantError);  // ids for some groups only
}
