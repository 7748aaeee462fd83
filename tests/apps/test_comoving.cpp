// SPDX-License-Identifier: MIT
// The comoving run's pieces (apps/comoving_run.hpp): GADGET's units and H0, the stored velocities, the time line as
// the run loop's schedule (steps that land on every output, factors, the acceleration limit, the softening that
// follows a maximum physical one), and a run of free bodies through the real run loop whose drift is known exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <bit>
#include <cmath>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "comoving_run.hpp"
#include "matcha/core/errors.hpp"
#include "matcha/core/force_solver.hpp"
#include "matcha/cosmology/initial_conditions.hpp"
#include "matcha/integrator/run_loop.hpp"
#include "matcha/testing/relative_error.hpp"

namespace {

using matcha::InputError;
using matcha::Particles;
namespace app = matcha::app;
namespace cosmo = matcha::cosmology;
namespace mi = matcha::integrator;

cosmo::Background einsteinDeSitter() {
  cosmo::CosmologyParams params;
  params.omegaMatter = 1.0;
  params.omegaLambda = 0.0;
  params.hubbleParam = 0.7;
  return cosmo::Background(params, 100.0);
}

cosmo::ComovingTimelineParams timelineParams() {
  cosmo::ComovingTimelineParams params;
  params.redshiftStart = 49.0;
  params.redshiftEnd = 0.0;
  params.outputRedshifts = {3.0, 1.0};
  params.softening = 0.05;
  return params;
}

Particles bodiesWithAcceleration(double magnitude) {
  Particles p(3);
  p.ax = {magnitude, 0.0, 0.0};
  p.ay = {0.0, -0.5 * magnitude, 0.0};
  p.mass = {1.0, 1.0, 1.0};
  return p;
}

TEST(ComovingUnits, GadgetUnitsGiveTheirGAndHubbleConstant) {
  const matcha::UnitSystem units = app::gadgetCosmologicalUnits();
  EXPECT_RELATIVE(units.gravitationalConstant, 43.0071, 1e-4);  // GADGET's 43007.1 for kpc, /1e3 for Mpc
  EXPECT_RELATIVE(app::hubbleTodayInCodeUnits(units), 100.0, 1e-14);
  // The critical density 3 H0^2 / (8 pi G) in these units is the one the initial conditions use.
  const double hubble = app::hubbleTodayInCodeUnits(units);
  EXPECT_RELATIVE(3.0 * hubble * hubble / (8.0 * M_PI * units.gravitationalConstant), cosmo::kCriticalDensity, 1e-4);
  matcha::UnitSystem kpc = units;
  kpc.lengthInCm /= 1e3;
  EXPECT_RELATIVE(app::hubbleTodayInCodeUnits(kpc), 0.1, 1e-14);
}

TEST(ComovingUnits, StoredVelocitiesAreMomentaOverASqrtA) {
  Particles p(2);
  p.vx = {3.0, -1.0};
  p.vy = {0.5, 0.0};
  p.vz = {0.0, 2.0};
  const double a = 0.02;
  app::storedVelocitiesToMomenta(p, a);
  EXPECT_RELATIVE(p.vx[0], 3.0 * std::pow(a, 1.5), 1e-15);
  EXPECT_RELATIVE(p.vz[1], 2.0 * std::pow(a, 1.5), 1e-15);
  EXPECT_RELATIVE(p.vx[0] * app::storedVelocityPerMomentum(a), 3.0, 1e-15);
}

TEST(ComovingUnits, RedshiftListsAndTheirRefusals) {
  EXPECT_EQ(app::parseRedshiftList("3,1,0.5,0"), (std::vector<double>{3.0, 1.0, 0.5, 0.0}));
  EXPECT_EQ(app::parseRedshiftList("2"), std::vector<double>{2.0});
  for (const char* bad : {"3,,1", "a", "1,", "1e999", "nan", "3;1", ""}) {
    EXPECT_THROW(app::parseRedshiftList(bad), InputError) << bad;
  }
}

TEST(ComovingUnits, StartTimeMustBeTheRedshiftsScaleFactor) {
  matcha::io::CosmologyHeader header{49.0, 0.3, 0.7, 0.7};
  EXPECT_EQ(app::startScaleFactor(0.02, header, "f"), 0.02);
  EXPECT_THROW(app::startScaleFactor(0.03, header, "f"), InputError);
  EXPECT_THROW(app::startScaleFactor(0.0, header, "f"), InputError);
  EXPECT_THROW(app::startScaleFactor(1.5, header, "f"), InputError);
}

TEST(ComovingUnits, TotalMassMustBeTheMeanMatterDensity) {
  const cosmo::Background background = einsteinDeSitter();
  const double G = app::gadgetCosmologicalUnits().gravitationalConstant;
  const double critical = 3.0 * 100.0 * 100.0 / (8.0 * M_PI * G);
  const double box = 64.0;
  EXPECT_NO_THROW(app::requireMeanMatterDensity(critical * box * box * box, box, background, G, "f"));
  EXPECT_THROW(app::requireMeanMatterDensity(1.01 * critical * box * box * box, box, background, G, "f"), InputError);
  EXPECT_THROW(app::requireMeanMatterDensity(critical * box * box * box, 100.0, background, G, "f"), InputError);
}

// Without accelerations the steps are the d ln a limit's, evened out to land on each output and on the end; each
// step's factors are the time line's; mayEndAtOutput says yes before every step that ends at a stop.
TEST(ComovingSchedule, StepsLandOnEveryOutputWithTheTimelinesFactors) {
  const cosmo::ComovingTimeline timeline(einsteinDeSitter(), timelineParams());
  app::ComovingSchedule schedule(timeline);
  const Particles still = bodiesWithAcceleration(0.0);
  double a = schedule.startTime();
  std::vector<double> outputs;
  std::uint64_t steps = 0;
  while (true) {
    const bool announced = schedule.mayEndAtOutput(steps, a);
    const mi::PlannedStep planned = schedule.plan(steps, a, still);
    ++steps;
    const cosmo::KdkFactors factors = timeline.kdkFactors(a, planned.endTime);
    EXPECT_EQ(planned.factors.openingKick, factors.firstKick);
    EXPECT_EQ(planned.factors.drift, factors.drift);
    EXPECT_EQ(planned.factors.closingKick, factors.secondKick);
    EXPECT_LE(std::log(planned.endTime / a), 0.025 * (1 + 1e-12));
    EXPECT_FALSE(planned.softening) << "no maximum physical softening: eps stays";
    if (planned.output) {
      EXPECT_TRUE(announced) << "step " << steps;
      outputs.push_back(planned.endTime);
    }
    a = planned.endTime;
    if (planned.last) break;
    ASSERT_LT(steps, 1000u);
  }
  ASSERT_EQ(outputs.size(), 3u);
  EXPECT_EQ(outputs[0], timeline.outputScaleFactors()[0]);
  EXPECT_EQ(outputs[1], timeline.outputScaleFactors()[1]);
  EXPECT_EQ(outputs[2], 1.0);
  // ceil of each gap in ln a over 0.025: the fewest steps within the limit.
  const double gaps[3] = {std::log(0.25 / 0.02), std::log(0.5 / 0.25), std::log(1.0 / 0.5)};
  std::uint64_t expected = 0;
  for (const double gap : gaps) expected += static_cast<std::uint64_t>(std::ceil(gap / 0.025));
  EXPECT_EQ(steps, expected);
  EXPECT_EQ(schedule.fractionDone(1.0), 1.0);
  EXPECT_EQ(schedule.fractionDone(0.02), 0.0);
  EXPECT_EQ(schedule.estimatedSteps(steps, 1.0), steps);
}

// Large accelerations: the step is Power et al.'s, H sqrt(2 eta eps a^3 / |g|) in ln a.
TEST(ComovingSchedule, AccelerationsLimitTheStep) {
  const cosmo::ComovingTimeline timeline(einsteinDeSitter(), timelineParams());
  app::ComovingSchedule schedule(timeline);
  const double g = 1e9;
  const Particles pulled = bodiesWithAcceleration(g);
  const double a = 0.5;
  const mi::PlannedStep planned = schedule.plan(0, a, pulled);
  const double limit = einsteinDeSitter().hubble(a) * std::sqrt(2.0 * 0.025 * 0.05 * a * a * a / g);
  ASSERT_LT(limit, 0.025);
  const double step = std::log(planned.endTime / a);
  EXPECT_LE(step, limit * (1 + 1e-12));
  EXPECT_GE(step, 0.5 * limit);
}

// Long-range steps (GADGET's PM steps) over short steps of ~0.003 in ln a (Power et al.'s limit, constant in
// Einstein-de Sitter) with bodies of rms momentum p: each long-range step's limit is the displacement criterion's
// (min(max-dlna, f a^2 H length / p)) made a whole number of short steps, it lands on every output, the short steps
// land on its end (within kLongRangeLandingStretch of their limit), its kicks are kdkFactors of its ends, velocities
// are read and diagnostics planned at its ends only, and a schedule resumed at any of its ends plans the same steps.
TEST(ComovingSchedule, LongRangeStepsLandOnOutputsAndSpanWholeShortSteps) {
  const cosmo::ComovingTimeline timeline(einsteinDeSitter(), timelineParams());
  const double g = std::pow(100.0 * std::sqrt(2.0 * 0.025 * 0.05) / 0.003, 2.0);
  Particles moving = bodiesWithAcceleration(g);
  const double momentum = 40.0, length = 0.5;  // rms |p| and the long-range length
  moving.vx = {momentum, 0.0, 0.0};
  moving.vy = {0.0, momentum, 0.0};
  moving.vz = {0.0, 0.0, momentum};
  struct Step {
    double start, end;
    mi::PlannedStep planned;
    bool readsVelocities;
  };
  const auto runFrom = [&](app::ComovingSchedule& schedule, std::uint64_t steps, double a) {
    std::vector<Step> taken;
    while (steps < 5000) {
      const bool reads = schedule.readsVelocities(steps, a);
      const bool announced = schedule.mayPlanDiagnostics(steps, a) || schedule.mayEndAtOutput(steps, a);
      const mi::PlannedStep planned = schedule.plan(steps, a, moving);
      ++steps;
      if (planned.diagnostics) {
        EXPECT_TRUE(announced) << "step " << steps;
      }
      taken.push_back({a, planned.endTime, planned, reads});
      a = planned.endTime;
      if (planned.last) break;
    }
    return taken;
  };
  app::ComovingSchedule schedule(timeline, length);
  EXPECT_TRUE(schedule.longRangeSteps());
  const std::vector<Step> whole = runFrom(schedule, 0, schedule.startTime());
  ASSERT_TRUE(whole.back().planned.last);
  double longStart = 0.0, longEnd = 0.0;
  std::size_t longSteps = 0, outputs = 0;
  for (const Step& step : whole) {
    const mi::KdkStep& f = step.planned.factors;
    EXPECT_EQ(step.readsVelocities, f.longRangeOpeningKick > 0.0);
    if (f.longRangeOpeningKick > 0.0) {
      EXPECT_EQ(longEnd, longSteps == 0 ? 0.0 : step.start) << "a long-range step begins where the last ended";
      longStart = step.start;
      ++longSteps;
      const double a = step.start;
      const double limit = std::min(0.025, 0.2 * a * a * einsteinDeSitter().hubble(a) * length / momentum);
      // Its end: found below at the step with the closing kick; checked there against the limit.
      longEnd = -limit;
    }
    EXPECT_EQ(step.planned.diagnostics, f.longRangeAtEnd);
    EXPECT_LE(std::log(step.end / step.start), 0.003 * cosmo::kLongRangeLandingStretch * (1 + 1e-12));
    if (f.longRangeAtEnd) {
      const double limit = -longEnd;
      EXPECT_LE(std::log(step.end / longStart), limit * (1 + 1e-9)) << "at a = " << step.start;
      const cosmo::KdkFactors kicks = timeline.kdkFactors(longStart, step.end);
      EXPECT_EQ(f.longRangeClosingKick, kicks.secondKick);
      longEnd = step.end;
    } else {
      EXPECT_EQ(f.longRangeClosingKick, 0.0);
      EXPECT_FALSE(step.planned.output) << "outputs end long-range steps";
    }
    outputs += step.planned.output ? 1 : 0;
  }
  EXPECT_EQ(outputs, 3u);
  // ~ln(50) / 0.003 = 1304 short steps; the long-range limit grows from 0.0004 (below one short step: a long-range
  // step a step) to 0.025 at a = 1.
  EXPECT_LT(whole.size(), 1304u * 105 / 100);
  EXPECT_LT(longSteps, whole.size() / 2);
  EXPECT_GT(longSteps, 100u);
  for (const std::size_t k : {std::size_t{0}, std::size_t{300}, whole.size() / 2}) {
    std::size_t at = k;
    while (!whole[at].planned.factors.longRangeAtEnd) ++at;  // the first long-range step's end from step k
    app::ComovingSchedule resumed(timeline, length);
    resumed.resume(at + 1, whole[at].end);
    const std::vector<Step> rest = runFrom(resumed, at + 1, whole[at].end);
    ASSERT_EQ(rest.size(), whole.size() - at - 1);
    for (std::size_t s = 0; s < rest.size(); ++s) {
      EXPECT_EQ(rest[s].end, whole[at + 1 + s].end);
      EXPECT_EQ(rest[s].planned.factors.longRangeOpeningKick, whole[at + 1 + s].planned.factors.longRangeOpeningKick);
    }
  }
}

// With a maximum physical softening, the solver is told eps_eff(a) = min(eps, eps_max / a) of each step's end, once
// per change.
TEST(ComovingSchedule, SofteningFollowsTheMaximumPhysicalOne) {
  cosmo::ComovingTimelineParams params = timelineParams();
  params.maxPhysicalSoftening = 0.02;  // eps_com 0.05 reaches it at a = 0.4
  const cosmo::ComovingTimeline timeline(einsteinDeSitter(), params);
  app::ComovingSchedule schedule(timeline);
  const Particles still = bodiesWithAcceleration(0.0);
  double a = schedule.startTime();
  double softening = 0.05;
  int changes = 0;
  for (std::uint64_t step = 0;; ++step) {
    const mi::PlannedStep planned = schedule.plan(step, a, still);
    const double expected = std::min(0.05, 0.02 / planned.endTime);
    if (planned.softening) {
      ++changes;
      EXPECT_EQ(*planned.softening, expected);
      EXPECT_NE(*planned.softening, softening);
      softening = *planned.softening;
    }
    EXPECT_EQ(softening, expected) << "a = " << planned.endTime;
    a = planned.endTime;
    if (planned.last) break;
  }
  EXPECT_GT(changes, 10);
}

/// No gravity: a comoving body keeps its momentum p, so x(a) = x0 + p drift(a0, a).
class NoForce : public matcha::ForceSolver {
 public:
  matcha::ForceReport computeForces(Particles& p) override {
    std::fill(p.ax.begin(), p.ax.end(), 0.0);
    std::fill(p.ay.begin(), p.ay.end(), 0.0);
    std::fill(p.az.begin(), p.az.end(), 0.0);
    std::fill(p.pot.begin(), p.pot.end(), 0.0);
    return {};
  }
  std::string describe() const override { return "no force"; }
};

// The run loop with the comoving schedule: free bodies drift by exactly the sum of the steps' drift factors, which is
// the drift factor from start to end; the Layzer-Irvine check of free bodies holds (K a^2 constant).
TEST(ComovingSchedule, FreeBodiesDriftByTheWholeRunsDriftFactor) {
  const cosmo::Background background = einsteinDeSitter();
  const cosmo::ComovingTimeline timeline(background, timelineParams());
  app::ComovingSchedule schedule(timeline);
  Particles p(2);
  p.x = {1.0, 2.0};
  p.y = {3.0, 4.0};
  p.z = {5.0, 6.0};
  p.vx = {10.0, -20.0};
  p.vy = {0.0, 5.0};
  p.mass = {1.0, 2.0};
  p.id = {0, 1};
  const Particles start = p;
  NoForce solver;
  std::optional<app::LayzerIrvineCheck> check;
  mi::RunCallbacks callbacks;
  callbacks.onDiagnostics = [&](const mi::Diagnostics& d) {
    if (check) {
      check->add(d);
    } else {
      check.emplace(d);
    }
  };
  matcha::IntegratorParams settings;
  mi::runSteps(p, solver, schedule, settings, callbacks);
  const double drift = background.driftFactor(timeline.startScaleFactor(), 1.0);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_RELATIVE(p.x[i], start.x[i] + start.vx[i] * drift, 1e-12);
    EXPECT_RELATIVE(p.y[i], start.y[i] + start.vy[i] * drift, 1e-12);
    EXPECT_EQ(p.vx[i], start.vx[i]);
  }
  ASSERT_TRUE(check);
  EXPECT_EQ(check->check().scaleFactor(), 1.0);
  // K = sum m p^2 / (2 a^2) falls as a^-2; K + integral 2K dln a stays, to the trapezoid's error on exp(-2 ln a):
  // (2 d ln a)^2 / 12 = 2.1e-4 of the integral for steps of 0.025 (measured 2.04e-4).
  EXPECT_LT(std::abs(check->check().violation()) / check->check().initialEnergy(), 2.5e-4);
}

/// Body k (by id) feels a constant comoving pull pull[k] along x: its momentum after a run is p0 + pull[k] times the
/// kick factor of the whole run, however its steps tile the run. A long range of zero, kept apart (TreePM's shape), so
/// that long-range and block time steps apply; records the lowest active bin of every call.
class ConstantPulls final : public matcha::ForceSolver {
 public:
  explicit ConstantPulls(std::vector<double> pull) : pull_(std::move(pull)) {}
  matcha::ForceReport computeForces(Particles& p) override {
    lowestActiveBins.push_back(lowestActiveBin());
    for (std::size_t i = 0; i < p.size(); ++i) {
      p.ax[i] = pull_[p.id[i]];
      p.ay[i] = p.az[i] = p.pot[i] = 0.0;
    }
    zeros_.assign(p.size(), 0.0);
    return {};
  }
  bool splitsLongRange() const override { return true; }
  void setLongRangeSteps(bool on) override { longRangeSteps_ = on; }
  matcha::AccelerationView lastLongRange() const override {
    return {zeros_.data(), zeros_.data(), zeros_.data(), zeros_.size()};
  }
  void computeLongRange(Particles& p) override { zeros_.assign(p.size(), 0.0); }
  std::string describe() const override { return "constant pulls"; }
  std::vector<std::uint8_t> lowestActiveBins;

 private:
  std::vector<double> pull_;
  std::vector<double> zeros_;
};

// Block time steps through the run loop: every long-range step is split into 2^b steps of its finest bin b, each body
// steps by its own pull (fewer body steps than bodies times steps), the fastest body's steps stay within its limit,
// and each body's kicks tile the run: its momentum is p0 + pull times the whole run's kick factor.
TEST(ComovingSchedule, BlockStepsGiveEachBodyItsOwnStepsAndTileItsKicks) {
  const cosmo::Background background = einsteinDeSitter();
  cosmo::ComovingTimelineParams params = timelineParams();
  params.maxRmsDisplacement = 1e3;  // long-range steps of maxDlnA, 0.025, whatever the pulls' momenta
  const cosmo::ComovingTimeline timeline(background, params);
  const double g = std::pow(100.0 * std::sqrt(2.0 * 0.025 * 0.05) / 0.003, 2.0);  // a step of 0.003 at a = 1
  const std::vector<double> pulls = {g, g / 16.0, -g / 300.0, 0.0, -g / 4.0};
  Particles p(pulls.size());
  for (std::size_t k = 0; k < p.size(); ++k) {
    p.id[k] = k;
    p.mass[k] = 1.0;
    p.x[k] = 0.1 * double(k);
    p.vx[k] = 40.0;
    p.vy[k] = -40.0 + 10.0 * double(k);
  }
  const Particles start = p;
  ConstantPulls solver(pulls);
  app::ComovingSchedule schedule(timeline, 0.5, true);
  std::vector<double> ends{schedule.startTime()};
  mi::RunCallbacks callbacks;
  callbacks.onProgress = [&](const mi::ProgressInfo& info) { ends.push_back(info.time); };
  matcha::IntegratorParams settings;
  const mi::RunSummary summary = mi::runSteps(p, solver, schedule, settings, callbacks);
  ASSERT_EQ(ends.back(), 1.0);
  ASSERT_EQ(solver.lowestActiveBins.size(), summary.steps + 1);
  const double kick = background.kickFactor(schedule.startTime(), 1.0);
  for (std::size_t i = 0; i < p.size(); ++i) {
    const std::uint64_t k = p.id[i];
    EXPECT_RELATIVE(p.vx[i], start.vx[k] + pulls[k] * kick, 1e-11) << "body " << k;
    EXPECT_EQ(p.vy[i], start.vy[k]);
  }
  // Long-range steps: the calls from one with every body (lowest bin 0) to the next; 2^b of them, with the lowest
  // bins of a hierarchy (b, b-1, b, b-2, ...).
  std::size_t longSteps = 0, split = 0;
  std::size_t first = 1;
  for (std::size_t call = 1; call < solver.lowestActiveBins.size(); ++call) {
    if (solver.lowestActiveBins[call] != 0) continue;
    const std::size_t calls = call - first + 1;
    ASSERT_EQ(calls & (calls - 1), 0u) << "a long-range step of " << calls << " steps, ending at call " << call;
    const int finest = std::countr_zero(calls);
    for (std::size_t c = first; c < call; ++c) {
      EXPECT_EQ(solver.lowestActiveBins[c], finest - std::countr_zero(c - first + 1)) << "call " << c;
    }
    ++longSteps;
    split += calls > 1 ? 1 : 0;
    first = call + 1;
  }
  EXPECT_EQ(first, solver.lowestActiveBins.size());
  EXPECT_EQ(longSteps, schedule.longRangeStepsBegun());
  EXPECT_EQ(summary.longRangeSteps, longSteps) << "the run's count of the steps with the long range";
  EXPECT_GT(split, longSteps * 9 / 10) << "the strongest pull needs shorter steps than the long range";
  // The strongest pull's limit, at each step's start, holds for every step (bins are set at the steps' starts from
  // the limit there; a limit that shrinks within a step of 1% in a by ~1%).
  for (std::size_t s = 1; s < ends.size(); ++s) {
    EXPECT_LE(std::log(ends[s] / ends[s - 1]), 1.02 * timeline.maxStep(ends[s - 1], g)) << "step " << s;
  }
  EXPECT_LT(summary.bodiesStepped, summary.steps * p.size() * 2 / 3) << "the weaker pulls take longer steps";
  EXPECT_GT(summary.bodiesStepped, summary.steps);
}

TEST(LayzerIrvineCheck, ASavedCheckContinuesAsTheOneThatWentOn) {
  mi::Diagnostics d;
  d.time = 0.1;
  d.kinetic = 2.0;
  d.potential = -7.0;
  app::LayzerIrvineCheck going(d);
  d.time = 0.2;
  d.kinetic = 5.0;
  d.potential = -9.0;
  going.add(d);
  matcha::CheckpointState state;
  going.save(state);
  app::LayzerIrvineCheck restored = app::LayzerIrvineCheck::restore(state);
  d.time = 0.3;
  d.kinetic = 6.0;
  d.potential = -12.0;
  going.add(d);
  restored.add(d);
  EXPECT_EQ(going.relativeViolation(), restored.relativeViolation());
  EXPECT_EQ(going.check().integral(), restored.check().integral());
  // The same state again (an output right after its step's sample) adds nothing.
  going.add(d);
  EXPECT_EQ(going.check().integral(), restored.check().integral());
}

// Over several ranks each schedule sees its own bodies and reads the run's through RankReductions: two "ranks" (two
// threads exchanging their values at a barrier, as MPI_Allgather would) holding halves of the bodies plan, step after
// step, exactly the steps one schedule plans from all of them: the long-range steps' lengths (the rms momentum), the
// short steps (the largest |a|) and, with block time steps, the ticks (the finest bin).
TEST(ComovingSchedule, RanksPlanTheStepsOfAllTheirBodies) {
  const cosmo::ComovingTimeline timeline(einsteinDeSitter(), timelineParams());
  const std::size_t n = 8;
  Particles all(n);
  for (std::size_t i = 0; i < n; ++i) {
    all.mass[i] = 1.0;
    all.ax[i] = 1e8 * double(i + 1);  // the largest |a| on the second half: Power et al.'s limit holds
    all.vy[i] = 3.0 * double((i * 5) % n);
    all.vz[i] = i < n / 2 ? 1.5 : 0.0;
  }
  Particles halves[2] = {Particles(n / 2), Particles(n / 2)};
  for (std::size_t i = 0; i < n; ++i) {
    Particles& half = halves[i / (n / 2)];
    const std::size_t k = i % (n / 2);
    half.mass[k] = all.mass[k];
    half.ax[k] = all.ax[i];
    half.vy[k] = all.vy[i];
    half.vz[k] = all.vz[i];
  }
  for (const bool block : {false, true}) {
    SCOPED_TRACE(block ? "block time steps" : "global steps");
    const double length = 0.05;
    // The bins the leapfrog would set: the finest from the bodies' own |a| (here the second half's).
    const auto setBins = [](Particles& p, std::uint8_t finest) {
      p.timeBin.assign(p.size(), 0);
      if (!p.timeBin.empty()) p.timeBin.back() = finest;
    };
    const auto runFrom = [&](app::ComovingSchedule& schedule, Particles& p, std::uint8_t finest) {
      std::vector<mi::PlannedStep> planned;
      double a = schedule.startTime();
      for (std::uint64_t step = 0; step < 400; ++step) {
        if (block) setBins(p, finest);
        planned.push_back(schedule.plan(step, a, p));
        a = planned.back().endTime;
        if (planned.back().last) break;
      }
      return planned;
    };
    app::ComovingSchedule whole(timeline, length, block);
    const std::vector<mi::PlannedStep> expected = runFrom(whole, all, 3);
    // The exchange of two ranks: each posts its value, both read both at the barrier.
    std::barrier meeting(2);
    double posted[2] = {0.0, 0.0};
    const auto exchange = [&](int rank, double local) {
      posted[rank] = local;
      meeting.arrive_and_wait();
      const double values[2] = {posted[0], posted[1]};
      meeting.arrive_and_wait();
      return std::pair<double, double>(values[0], values[1]);
    };
    std::vector<mi::PlannedStep> ranksPlanned[2];
    const auto rank = [&](int r) {
      app::ComovingSchedule schedule(timeline, length, block);
      app::RankReductions reductions;
      reductions.maximum = [&, r](double local) {
        const auto [first, second] = exchange(r, local);
        return std::max(first, second);
      };
      reductions.sum = [&, r](double local) {
        const auto [first, second] = exchange(r, local);
        return first + second;
      };
      schedule.setRankReductions(std::move(reductions));
      ranksPlanned[r] = runFrom(schedule, halves[r], r == 1 ? 3 : 1);
    };
    std::thread other(rank, 1);
    rank(0);
    other.join();
    for (const std::vector<mi::PlannedStep>& planned : ranksPlanned) {
      ASSERT_EQ(planned.size(), expected.size());
      for (std::size_t s = 0; s < planned.size(); ++s) {
        EXPECT_EQ(planned[s].endTime, expected[s].endTime) << "step " << s;
        EXPECT_EQ(planned[s].factors.openingKick, expected[s].factors.openingKick) << "step " << s;
        EXPECT_EQ(planned[s].factors.longRangeOpeningKick, expected[s].factors.longRangeOpeningKick) << "step " << s;
        EXPECT_EQ(planned[s].factors.longRangeClosingKick, expected[s].factors.longRangeClosingKick) << "step " << s;
        ASSERT_EQ(planned[s].factors.block.has_value(), block);
        if (block) {
          EXPECT_EQ(planned[s].factors.block->nextTick, expected[s].factors.block->nextTick) << "step " << s;
        }
      }
    }
    // Without the reductions a rank plans from its own bodies: the first half alone, with the smaller accelerations
    // and the larger momenta, plans other steps.
    app::ComovingSchedule alone(timeline, length, block);
    Particles first = halves[0];
    const std::vector<mi::PlannedStep> own = runFrom(alone, first, 1);
    bool differs = own.size() != expected.size();
    for (std::size_t s = 0; s < std::min(own.size(), expected.size()); ++s) {
      differs = differs || own[s].endTime != expected[s].endTime;
    }
    EXPECT_TRUE(differs) << "the test's halves plan alike: it would not see a missing reduction";
  }
}

}  // namespace
