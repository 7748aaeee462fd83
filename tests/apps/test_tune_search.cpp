// SPDX-License-Identifier: MIT
// `matcha tune`'s search without timing anything: the front, the goal's choice, the ladders, and the whole search
// driven by a made-up cost model whose best setting is known.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tune_search.hpp"

namespace {

using matcha::MultipoleOrder;
using matcha::app::TuneGoal;
using matcha::app::TuneMove;
using matcha::app::TunePoint;
using matcha::app::TuneSetting;

TunePoint point(double ms, double error) {
  TunePoint p;
  p.stepSeconds = ms * 1e-3;
  p.error = error;
  p.pointSeconds = 1.0;
  return p;
}

TEST(TuneFront, KeepsThePointsNoOtherBeatsInBothByIncreasingTime) {
  // 0 and 3 equal (3 dropped as the later), 2 dominated by 1, 4 dominated by 0.
  const std::vector<TunePoint> points{point(10, 1e-3), point(20, 2e-4), point(25, 3e-4),
                                      point(10, 1e-3), point(12, 2e-3), point(5, 5e-3)};
  const std::vector<std::size_t> front = matcha::app::paretoFront(points);
  EXPECT_EQ(front, (std::vector<std::size_t>{5, 0, 1}));
  EXPECT_TRUE(matcha::app::paretoFront({}).empty());
}

TEST(TuneGoal, ChoosesTheFastestWithinTheErrorOrTheMostAccurateWithinTheTime) {
  const std::vector<TunePoint> points{point(10, 1e-3), point(20, 2e-4), point(5, 5e-3), point(15, 4e-4)};
  EXPECT_EQ(matcha::app::bestPoint(points, {TuneGoal::Kind::targetError, 5e-4}), 3u);
  EXPECT_EQ(matcha::app::bestPoint(points, {TuneGoal::Kind::targetError, 1e-3}), 0u);  // at the limit counts
  EXPECT_EQ(matcha::app::bestPoint(points, {TuneGoal::Kind::targetError, 1e-4}), 1u);  // none: the nearest
  EXPECT_EQ(matcha::app::bestPoint(points, {TuneGoal::Kind::stepTime, 16e-3}), 3u);
  EXPECT_EQ(matcha::app::bestPoint(points, {TuneGoal::Kind::stepTime, 1e-3}), 2u);  // none: the fastest
  EXPECT_FALSE(matcha::app::bestPoint({}, {TuneGoal::Kind::stepTime, 1.0}).has_value());
}

TEST(TuneMoves, FollowTheLaddersAndStopAtTheirEnds) {
  TuneSetting s;  // quad theta 0.5 alpha 1e-3 ncrit 256 nleaf 8 reuse auto
  using P = TuneMove::Parameter;
  EXPECT_DOUBLE_EQ(matcha::app::moveSetting(s, {P::theta, 1}, 1)->theta, 0.6);
  EXPECT_DOUBLE_EQ(matcha::app::moveSetting(s, {P::theta, -1}, 2)->theta, 0.45);
  EXPECT_DOUBLE_EQ(matcha::app::moveSetting(s, {P::theta, 1}, 3)->theta, 0.525);
  EXPECT_DOUBLE_EQ(matcha::app::moveSetting(s, {P::alpha, 1}, 1)->alpha, 2e-3);
  EXPECT_DOUBLE_EQ(matcha::app::moveSetting(s, {P::alpha, 1}, 2)->alpha, 1.4e-3);  // two significant digits
  EXPECT_EQ(matcha::app::moveSetting(s, {P::ncrit, 1}, 1)->ncrit, 512u);
  EXPECT_EQ(matcha::app::moveSetting(s, {P::nleaf, -1}, 1)->nleaf, 4u);
  EXPECT_EQ(matcha::app::moveSetting(s, {P::reuse, 1}, 1)->reuse, 3u);  // auto starts at 3
  EXPECT_EQ(matcha::app::moveSetting(s, {P::reuse, -1}, 1)->reuse, 2u);
  EXPECT_EQ(matcha::app::moveSetting(s, {P::multipole, 1}, 1)->multipole, MultipoleOrder::monopole);
  EXPECT_FALSE(matcha::app::moveSetting(s, {P::multipole, -1}, 1));

  TuneSetting edge;
  edge.theta = 1.5;
  edge.alpha = 2.5e-4;
  edge.ncrit = 16;
  edge.nleaf = 16;
  edge.reuse = 1;
  EXPECT_FALSE(matcha::app::moveSetting(edge, {P::theta, 1}, 1));
  EXPECT_DOUBLE_EQ(matcha::app::moveSetting(edge, {P::alpha, -1}, 1)->alpha, 0.0);  // below the smallest: theta alone
  EXPECT_FALSE(matcha::app::moveSetting(edge, {P::ncrit, -1}, 1));                  // ncrit 8 < nleaf 16
  EXPECT_FALSE(matcha::app::moveSetting(edge, {P::nleaf, 1}, 1));                   // nleaf 32 > ncrit 16
  EXPECT_FALSE(matcha::app::moveSetting(edge, {P::reuse, -1}, 1));
  edge.alpha = 0.0;
  EXPECT_FALSE(matcha::app::moveSetting(edge, {P::alpha, -1}, 1));
  EXPECT_DOUBLE_EQ(matcha::app::moveSetting(edge, {P::alpha, 1}, 1)->alpha, 2.5e-4);
  // A moved setting is valid for the tree (TreeParams::validate).
  EXPECT_NO_THROW(matcha::app::moveSetting(s, {P::theta, 1}, 1)->applyTo(matcha::TreeParams{}).validate());
}

TEST(TuneSnap, TakesAFamilyToItsLimitAndBisectsWhereTheLinePointsOutside) {
  const TuneGoal goal{TuneGoal::Kind::targetError, 1e-3};
  TunePoint a = point(10, 1e-4);  // theta 0.5
  // One point: error ~ theta^3 puts the limit at 0.5 * 10^(1/3) = 1.077, on the grid below: 1.075.
  auto snap = matcha::app::snapToLimit({a}, a.setting, goal);
  ASSERT_TRUE(snap);
  EXPECT_DOUBLE_EQ(snap->setting.theta, 1.075);
  EXPECT_NEAR(snap->predicted, 10e-3 * std::pow(1.075 / 0.5, -1.5), 1e-9);
  // Two points fix the line: error ~ theta^2 through (0.5, 1e-4) and (1.0, 4e-4) meets 1e-3 at 1.58: beyond the
  // range, so its end.
  TunePoint b = point(5, 4e-4);
  b.setting.theta = 1.0;
  snap = matcha::app::snapToLimit({a, b}, a.setting, goal);
  ASSERT_TRUE(snap);
  EXPECT_DOUBLE_EQ(snap->setting.theta, 1.5);
  // Another family's points do not count; a family whose sides are one step apart is resolved.
  TunePoint other = b;
  other.setting.ncrit = 1024;
  other.error = 2e-3;
  snap = matcha::app::snapToLimit({a, b, other}, a.setting, goal);
  ASSERT_TRUE(snap);
  EXPECT_DOUBLE_EQ(snap->setting.theta, 1.5);
  TunePoint c = point(4, 2e-3);
  c.setting.theta = 1.025;
  EXPECT_FALSE(matcha::app::snapToLimit({a, b, c}, a.setting, goal));
  // Noise: a line through both sides that points outside them gives the midpoint (bisection).
  c.setting.theta = 1.4;
  c.error = 1.5e-3;
  TunePoint d = point(7, 9e-4);  // feasible at 0.6, but worse than the points around it say
  d.setting.theta = 0.6;
  snap = matcha::app::snapToLimit({a, b, c, d}, a.setting, goal);
  ASSERT_TRUE(snap);
  EXPECT_GT(snap->setting.theta, 1.0);
  EXPECT_LT(snap->setting.theta, 1.4);
  // A time limit: the feasible side is the larger theta.
  const TuneGoal time{TuneGoal::Kind::stepTime, 5e-3};
  snap = matcha::app::snapToLimit({a}, a.setting, time);  // 10 ms at 0.5, time ~ theta^-1.5: 5 ms at 0.794
  ASSERT_TRUE(snap);
  EXPECT_DOUBLE_EQ(snap->setting.theta, 0.8);
  EXPECT_FALSE(matcha::app::snapToLimit({}, a.setting, goal));
}

TEST(TuneSearch, StartsWithTheDefaultsAndTheCoarseGridAndNeverMeasuresTwice) {
  const TuneSetting defaults;
  const std::vector<TuneSetting> grid = matcha::app::coarseGrid(defaults);
  ASSERT_EQ(grid.size(), 3u);
  EXPECT_TRUE(grid[0].same(defaults));
  EXPECT_DOUBLE_EQ(grid[1].theta, 0.8);
  EXPECT_EQ(grid[1].multipole, MultipoleOrder::quadrupole);
  EXPECT_DOUBLE_EQ(grid[2].theta, 0.8);
  EXPECT_EQ(grid[2].multipole, MultipoleOrder::monopole);
  // Reuse auto (the defaults') searches K in the run; the grid's other two fix it at auto's start, and keep a K the
  // defaults fix.
  EXPECT_EQ(grid[0].reuse, 0u);
  EXPECT_EQ(grid[1].reuse, 3u);
  EXPECT_EQ(grid[2].reuse, 3u);
  TuneSetting fixed = defaults;
  fixed.reuse = 2;
  for (const TuneSetting& s : matcha::app::coarseGrid(fixed)) EXPECT_EQ(s.reuse, 2u);
  matcha::app::TuneSearch search(defaults, {TuneGoal::Kind::targetError, 1e-3});
  for (std::size_t k = 0; k < grid.size(); ++k) {
    const auto next = search.next();
    ASSERT_TRUE(next);
    EXPECT_TRUE(search.next()->same(*next)) << "next() without record() gives the same setting";
    EXPECT_TRUE(next->same(grid[k]));
    EXPECT_EQ(search.stage(), "coarse grid");
    TunePoint p = point(10.0 / next->theta, 1e-3 * next->theta);
    p.setting = *next;
    search.record(p);
  }
}

/// A made-up treecode: error grows with theta^3 and alpha, monopoles 4x worse; time falls with theta^3 and is least
/// at ncrit 1024, nleaf 16, reuse 3.
TunePoint model(const TuneSetting& s) {
  const bool quad = s.multipole == MultipoleOrder::quadrupole;
  const double error = 1e-3 * std::pow(s.theta, 3) * (quad ? 1.0 : 4.0) * (1.0 + 300.0 * s.alpha);
  const double reuse = s.reuse == 0 ? 3.2 : s.reuse;
  const double time = 1e-3 / std::pow(s.theta, 3) * (quad ? 1.4 : 1.0) / (1.0 + 100.0 * s.alpha) *
                      (1.0 + 0.1 * std::pow(std::log2(s.ncrit / 1024.0), 2)) *
                      (1.0 + 0.05 * std::pow(std::log2(s.nleaf / 16.0), 2)) * (1.0 + 0.05 * std::pow(reuse - 3, 2));
  TunePoint p;
  p.setting = s;
  p.error = error;
  p.stepSeconds = time;
  p.pointSeconds = 30 * time;
  return p;
}

TEST(TuneSearch, FindsTheModelsBestCostParametersAndBeatsTheDefaults) {
  for (const TuneGoal goal : {TuneGoal{TuneGoal::Kind::targetError, 3e-4}, TuneGoal{TuneGoal::Kind::stepTime, 4e-3}}) {
    SCOPED_TRACE(goal.kind == TuneGoal::Kind::targetError ? "target error" : "step time");
    const TuneSetting defaults;
    matcha::app::TuneSearch search(defaults, goal);
    std::size_t count = 0;
    while (const auto next = search.next()) {
      search.record(model(*next));
      ASSERT_LT(++count, 200u) << "the search must converge";
    }
    EXPECT_EQ(search.stage(), "converged");
    EXPECT_EQ(search.remaining(), 0u);
    const auto& points = search.points();
    for (std::size_t a = 0; a < points.size(); ++a) {
      for (std::size_t b = a + 1; b < points.size(); ++b) EXPECT_FALSE(points[a].setting.same(points[b].setting));
    }
    const TunePoint& best = points[*matcha::app::bestPoint(points, goal)];
    EXPECT_TRUE(goal.feasible(best)) << best.setting.describe();
    EXPECT_EQ(best.setting.ncrit, 1024u) << best.setting.describe();
    EXPECT_EQ(best.setting.nleaf, 16u) << best.setting.describe();
    EXPECT_EQ(best.setting.reuse, 3u) << best.setting.describe();
    // Against a brute-force grid of the model (theta to 0.025, alpha on a fine ladder, the best cost parameters):
    // within 5% of its best in the goal's objective.
    double bruteBest = 1e30;
    for (const MultipoleOrder order : {MultipoleOrder::monopole, MultipoleOrder::quadrupole}) {
      for (double theta = 0.2; theta <= 1.5001; theta += 0.025) {
        for (const double alpha : {0.0, 2.5e-4, 5e-4, 7e-4, 1e-3, 1.4e-3, 2e-3, 2.8e-3, 4e-3, 5.6e-3, 8e-3}) {
          TuneSetting s{order, theta, alpha, 1024, 16, 3};
          const TunePoint p = model(s);
          if (!goal.feasible(p)) continue;
          bruteBest = std::min(bruteBest, goal.kind == TuneGoal::Kind::targetError ? p.stepSeconds : p.error);
        }
      }
    }
    const double found = goal.kind == TuneGoal::Kind::targetError ? best.stepSeconds : best.error;
    EXPECT_LE(found, 1.05 * bruteBest) << best.setting.describe();
    const TunePoint& base = points[0];
    EXPECT_TRUE(base.setting.same(defaults));
    EXPECT_TRUE(goal.better(best, base));
  }
}

TEST(TuneBudget, EstimatesAPointFromTheNearestMeasuredOne) {
  EXPECT_EQ(matcha::app::estimatePointSeconds({}, TuneSetting{}), 0.0);
  TunePoint near = point(10, 1e-3), far = point(10, 1e-3);
  near.pointSeconds = 2.0;
  far.pointSeconds = 8.0;
  far.setting.theta = 1.0;
  far.setting.ncrit = 2048;
  TuneSetting asked;
  asked.ncrit = 512;
  EXPECT_DOUBLE_EQ(matcha::app::estimatePointSeconds({near, far}, asked), 2.5);
  asked.theta = 0.9;
  asked.ncrit = 2048;
  EXPECT_DOUBLE_EQ(matcha::app::estimatePointSeconds({near, far}, asked), 10.0);
}

}  // namespace
