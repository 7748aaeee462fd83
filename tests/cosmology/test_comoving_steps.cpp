// SPDX-License-Identifier: MIT
// Tests of the comoving runs' time line and Layzer-Irvine check (cosmology/comoving_steps.hpp): Einstein-de Sitter
// closed forms of the KDK factors and of the step limit, Power et al.'s criterion against a direct evaluation in
// physical variables, landing on outputs and a_end, a free body, a linear Zel'dovich mode integrated with the steps
// (second-order convergence to D1), the cosmic energy equation on exact K(a), W(a), and every refusal.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <iomanip>
#include <numbers>
#include <string>
#include <vector>

#include "matcha/core/errors.hpp"
#include "matcha/cosmology/background.hpp"
#include "matcha/cosmology/comoving_steps.hpp"
#include "matcha/testing/relative_error.hpp"
#include "matcha/testing/test_environment.hpp"

namespace {

using matcha::InputError;
using matcha::NumericalError;
using matcha::cosmology::Background;
using matcha::cosmology::ComovingTimeline;
using matcha::cosmology::ComovingTimelineParams;
using matcha::cosmology::CosmologyParams;
using matcha::cosmology::LayzerIrvine;
using matcha::cosmology::scaleFactorFromRedshift;

[[maybe_unused]] const auto* const kTraps = matcha::testing::trapFloatingPointInEveryTest();

/// H0 in units G = 1 with the critical density 3 H0^2 / (8 pi G) = 1.
const double kH0 = std::sqrt(8.0 * std::numbers::pi / 3.0);

Background background(double omegaMatter, double omegaLambda) {
  CosmologyParams params;
  params.omegaMatter = omegaMatter;
  params.omegaLambda = omegaLambda;
  return Background(params, kH0);
}
Background einsteinDeSitter() { return background(1.0, 0.0); }
Background planck() { return Background(CosmologyParams{}, kH0); }

ComovingTimelineParams timelineParams(double zStart, double zEnd, std::vector<double> outputs = {},
                                      double maxDlnA = 0.025, double softening = 0.01) {
  ComovingTimelineParams params;
  params.redshiftStart = zStart;
  params.redshiftEnd = zEnd;
  params.outputRedshifts = std::move(outputs);
  params.maxDlnA = maxDlnA;
  params.softening = softening;
  return params;
}

/// Every scale factor a run from a_start takes, a_start included, with the largest acceleration accelerationAt(a).
std::vector<double> stepEnds(const ComovingTimeline& timeline, const std::function<double(double)>& accelerationAt) {
  std::vector<double> ends{timeline.startScaleFactor()};
  while (ends.back() < timeline.endScaleFactor()) {
    ends.push_back(timeline.nextStep(ends.back(), accelerationAt(ends.back())));
    if (ends.size() > 100000) break;  // a bug: fail below rather than loop
  }
  return ends;
}
const auto kNoAcceleration = [](double) { return 0.0; };

// ---- KDK factors and step limit: closed forms ----

TEST(ComovingTimeline, KdkFactorsMatchEinsteinDeSitterClosedForms) {
  const ComovingTimeline timeline(einsteinDeSitter(), timelineParams(99.0, 0.0));
  for (const auto& [a0, a1] : {std::pair{0.01, 0.0102}, std::pair{0.1, 0.13}, std::pair{0.5, 1.0}}) {
    const auto f = timeline.kdkFactors(a0, a1);
    const double am = std::sqrt(a0 * a1);
    EXPECT_RELATIVE(f.midScaleFactor, am, 1e-15);
    // EdS: kick = (2/H0)(sqrt(a2) - sqrt(a1)), drift = (2/H0)(a1^-1/2 - a2^-1/2).
    EXPECT_RELATIVE(f.firstKick, 2.0 / kH0 * (std::sqrt(am) - std::sqrt(a0)), 1e-12);
    EXPECT_RELATIVE(f.secondKick, 2.0 / kH0 * (std::sqrt(a1) - std::sqrt(am)), 1e-12);
    EXPECT_RELATIVE(f.drift, 2.0 / kH0 * (1.0 / std::sqrt(a0) - 1.0 / std::sqrt(a1)), 1e-12);
  }
}

TEST(ComovingTimeline, StepLimitMatchesEinsteinDeSitterClosedForm) {
  // EdS: H = H0 a^-3/2, so L = H0 sqrt(2 eta eps_eff / |g|): constant in a while eps_eff = eps_com, and
  // H0 sqrt(2 eta eps_max / (a |g|)) once eps_max / a < eps_com.
  auto params = timelineParams(99.0, 0.0, {}, 10.0, 0.02);
  params.eta = 0.03;
  params.maxPhysicalSoftening = 0.01;  // eps_eff = eps_com for a <= 0.5
  const ComovingTimeline timeline(einsteinDeSitter(), params);
  const double g = 1e4;
  for (const double a : {0.01, 0.2, 0.5}) {
    EXPECT_RELATIVE(timeline.comovingSoftening(a), 0.02, 1e-15);
    EXPECT_RELATIVE(timeline.maxStep(a, g), kH0 * std::sqrt(2.0 * 0.03 * 0.02 / g), 1e-13);
  }
  for (const double a : {0.6, 1.0}) {
    EXPECT_RELATIVE(timeline.comovingSoftening(a), 0.01 / a, 1e-15);
    EXPECT_RELATIVE(timeline.maxStep(a, g), kH0 * std::sqrt(2.0 * 0.03 * 0.01 / (a * g)), 1e-13);
  }
}

TEST(ComovingTimeline, StepLimitIsPowerCriterionInPhysicalVariables) {
  // Lambda-CDM: the criterion evaluated the physical way, dt = sqrt(2 eta eps_phys / |a_phys|) with eps_phys =
  // a eps_eff, a_phys = g / a^2 (p = a^2 dx/dt), then d ln a = H dt; and the limit's g^-1/2 scaling.
  auto params = timelineParams(49.0, 0.0, {}, 0.025, 0.05);
  params.maxPhysicalSoftening = 0.02;
  const Background cosmology = planck();
  const ComovingTimeline timeline(cosmology, params);
  for (const double a : {0.02, 0.1, 0.4, 0.7, 1.0}) {
    const double g = 1e3 / (a * a);  // accelerations that bind the criterion at every a
    const double epsPhysical = a * std::min(0.05, 0.02 / a);
    const double physicalAcceleration = g / (a * a);
    const double dt = std::sqrt(2.0 * params.eta * epsPhysical / physicalAcceleration);
    const double expected = cosmology.hubble(a) * dt;
    ASSERT_LT(expected, params.maxDlnA);
    EXPECT_RELATIVE(timeline.maxStep(a, g), expected, 1e-13) << "a = " << a;
    EXPECT_RELATIVE(timeline.maxStep(a, 4.0 * g), 0.5 * expected, 1e-13) << "a = " << a;
    // The step taken from a is within the limit and at least half of it (no sliver).
    const double step = std::log(timeline.nextStep(std::min(a, 0.99), g) / std::min(a, 0.99));
    const double limit = timeline.maxStep(std::min(a, 0.99), g);
    EXPECT_LE(step, limit * (1.0 + 1e-12));
    EXPECT_GE(step, 0.5 * limit);
  }
  EXPECT_EQ(timeline.maxStep(0.5, 0.0), params.maxDlnA);  // no acceleration, no acceleration limit
  EXPECT_EQ(timeline.maxStep(0.5, 1e-12), params.maxDlnA);
}

// ---- Where the steps end ----

TEST(ComovingTimeline, StepsLandExactlyOnOutputsAndEndWithinTheLimit) {
  const std::vector<double> outputZ{0.5, 3.0, 0.0, 1.0};  // any order; z = 0 is a_end
  const ComovingTimeline timeline(planck(), timelineParams(49.0, 0.0, outputZ));
  ASSERT_EQ(timeline.outputScaleFactors().size(), 4U);
  EXPECT_EQ(timeline.outputScaleFactors().back(), 1.0);

  // Without accelerations and with accelerations that make the limit vary by 10x along the run.
  const std::vector<std::function<double(double)>> accelerations{kNoAcceleration,
                                                                 [](double a) { return 50.0 / (1.0 + 100.0 * a * a); }};
  for (const auto& accelerationAt : accelerations) {
    const auto ends = stepEnds(timeline, accelerationAt);
    ASSERT_EQ(ends.back(), timeline.endScaleFactor());
    std::vector<double> landed;
    for (std::size_t i = 1; i < ends.size(); ++i) {
      const double a0 = ends[i - 1];
      const double a1 = ends[i];
      ASSERT_GT(a1, a0);
      const double limit = timeline.maxStep(a0, accelerationAt(a0));
      EXPECT_LE(std::log(a1 / a0), limit * (1.0 + 1e-12)) << "step " << i;
      EXPECT_LE(std::log(a1 / a0), 0.025 * (1.0 + 1e-12)) << "step " << i;
      EXPECT_GE(std::log(a1 / a0), 0.5 * limit) << "step " << i;  // no slivers
      if (timeline.outputIndexAt(a1)) landed.push_back(a1);
    }
    EXPECT_EQ(landed, timeline.outputScaleFactors());  // each output once, bit for bit, in order
    for (const double z : outputZ) EXPECT_TRUE(timeline.outputIndexAt(scaleFactorFromRedshift(z)));
  }
  // The acceleration-limited run takes more steps.
  EXPECT_GT(stepEnds(timeline, accelerations[1]).size(), stepEnds(timeline, kNoAcceleration).size() + 50);
}

TEST(ComovingTimeline, GapJustAboveOneStepIsSplitInTwoEqualSteps) {
  // ln(a_end / a_start) = 1.0001 maxDlnA: two steps of half, not a full step and a sliver.
  const double maxDlnA = 0.025;
  const double aStart = std::exp(-1.0001 * maxDlnA);
  const ComovingTimeline timeline(planck(), timelineParams(1.0 / aStart - 1.0, 0.0, {}, maxDlnA));
  const auto ends = stepEnds(timeline, kNoAcceleration);
  ASSERT_EQ(ends.size(), 3U);
  EXPECT_RELATIVE(std::log(ends[1] / ends[0]), std::log(ends[2] / ends[1]), 1e-12);
  EXPECT_EQ(ends[2], 1.0);
  // A gap within the limit is one step, landing exactly.
  EXPECT_EQ(timeline.nextStep(ends[1], 0.0), 1.0);
}

TEST(ComovingTimeline, StepsAfterTheLastOutputGoToTheEnd) {
  const ComovingTimeline timeline(planck(), timelineParams(49.0, 0.0, {3.0, 49.0}, 0.1));
  EXPECT_EQ(timeline.outputScaleFactors().front(), timeline.startScaleFactor());  // an output at z_start is a_start
  EXPECT_EQ(timeline.outputIndexAt(timeline.startScaleFactor()), std::size_t{0});
  // From the output itself and from beyond it: forward, towards a_end, within the limit.
  for (const double a : {0.25, 0.5, 0.8}) {
    const double next = timeline.nextStep(a, 0.0);
    EXPECT_GT(next, a);
    EXPECT_LE(std::log(next / a), 0.1 * (1.0 + 1e-12));
    EXPECT_GE(std::log(next / a), 0.05);
  }
  EXPECT_EQ(timeline.nextStep(0.95, 0.0), 1.0);
  EXPECT_THROW(timeline.nextStep(1.0, 0.0), InputError);  // already at the end
}

// ---- The steps integrate the comoving equations ----

TEST(ComovingTimeline, FreeBodyKeepsItsMomentumAndDriftsByTheExactIntegral) {
  const Background cosmology = planck();
  const ComovingTimeline timeline(cosmology, timelineParams(49.0, 0.0, {3.0, 1.0, 0.5}));
  const double p0 = 0.37;
  double x = 1.5;
  double p = p0;
  const double g = 0.0;
  const auto ends = stepEnds(timeline, kNoAcceleration);
  for (std::size_t i = 1; i < ends.size(); ++i) {
    const auto f = timeline.kdkFactors(ends[i - 1], ends[i]);
    p += g * f.firstKick;
    x += p * f.drift;
    p += g * f.secondKick;
  }
  EXPECT_EQ(p, p0);
  // The drift over the run, summed over ~160 steps, equals one quadrature over the whole run.
  EXPECT_RELATIVE(x - 1.5, p0 * cosmology.driftFactor(timeline.startScaleFactor(), 1.0), 1e-12);
  // EdS cross-check of that integral: (2/H0)(a0^-1/2 - 1).
  const ComovingTimeline eds(einsteinDeSitter(), timelineParams(49.0, 0.0));
  double xEds = 0.0;
  const auto edsEnds = stepEnds(eds, kNoAcceleration);
  for (std::size_t i = 1; i < edsEnds.size(); ++i) xEds += p0 * eds.kdkFactors(edsEnds[i - 1], edsEnds[i]).drift;
  EXPECT_RELATIVE(xEds, p0 * 2.0 / kH0 * (std::sqrt(50.0) - 1.0), 1e-12);
}

/// A linear Zel'dovich mode in 1D, integrated with the time line's KDK steps: the comoving acceleration of a body
/// displaced by s from its Lagrangian position is g = (3/2) Omega_m H0^2 s (lap phi = 4 pi G rho_mean_comoving delta,
/// delta = -ds/dq, and 4 pi G rho_mean = (3/2) Omega_m H0^2 in these units), independent of a; the growing solution
/// is s = D1(a), p = a^2 ds/dt = a^2 H f1 D1. Returns the relative error of s at a_end.
double zeldovichError(const Background& cosmology, double maxDlnA) {
  const ComovingTimeline timeline(cosmology, timelineParams(49.0, 0.0, {2.0, 0.5}, maxDlnA, 1e6));
  const double k = 1.5 * cosmology.params().omegaMatter * kH0 * kH0;
  const double a0 = timeline.startScaleFactor();
  double s = cosmology.growthFactor(a0);
  double p = a0 * a0 * cosmology.hubble(a0) * cosmology.growthRate(a0) * s;
  double a = a0;
  while (a < timeline.endScaleFactor()) {
    const double next = timeline.nextStep(a, std::abs(k * s));
    const auto f = timeline.kdkFactors(a, next);
    p += k * s * f.firstKick;
    s += p * f.drift;
    p += k * s * f.secondKick;
    a = next;
  }
  return s / cosmology.growthFactor(1.0) - 1.0;
}

TEST(ComovingTimeline, LinearModeFollowsTheGrowthFactorAtSecondOrder) {
  for (const Background& cosmology : {planck(), einsteinDeSitter()}) {
    const double coarse = zeldovichError(cosmology, 0.05);
    const double fine = zeldovichError(cosmology, 0.025);
    EXPECT_LT(std::abs(fine), 1e-3);
    EXPECT_GT(std::abs(fine), 1e-9);  // the check below measures an order, not rounding
    EXPECT_NEAR(coarse / fine, 4.0, 0.5) << "coarse " << coarse << ", fine " << fine;
  }
}

// ---- Layzer-Irvine ----

/// Feeds K(a), W(a) at the steps of a run from z = 49 to 0 with steps of maxDlnA; returns the check.
LayzerIrvine layzerIrvine(const std::function<double(double)>& kinetic, const std::function<double(double)>& potential,
                          double maxDlnA) {
  const ComovingTimeline timeline(einsteinDeSitter(), timelineParams(49.0, 0.0, {3.0, 1.0}, maxDlnA));
  const auto ends = stepEnds(timeline, kNoAcceleration);
  LayzerIrvine check(ends[0], kinetic(ends[0]), potential(ends[0]));
  for (std::size_t i = 1; i < ends.size(); ++i) check.add(ends[i], kinetic(ends[i]), potential(ends[i]));
  EXPECT_EQ(check.scaleFactor(), 1.0);
  return check;
}

TEST(LayzerIrvine, LinearGrowingModeOfEinsteinDeSitterConservesTheCosmicEnergy) {
  // EdS linear growth: s = a psi, v = a ds/dt = a^2 H psi ~ a^1/2, so K ~ a; Phi = phi / a with phi ~ delta ~ a, so
  // W ~ (mass) delta Phi ~ a. Then d(K + W)/d ln a = K + W = -(2K + W) gives K = -(2/3) W.
  const auto potential = [](double a) { return -2.0 * a; };
  const auto kinetic = [](double a) { return 4.0 / 3.0 * a; };
  const auto check = layzerIrvine(kinetic, potential, 0.04);  // ~100 steps
  EXPECT_LT(std::abs(check.relativeViolation()), 1e-4);       // trapezoid: ~(0.04^2 / 12) (1/3) ~ 4e-5
  EXPECT_GT(std::abs(check.relativeViolation()), 1e-7);       // and it is the trapezoid's, not zero by construction
  EXPECT_EQ(check.relativeViolation(), check.violation() / 2.0);

  // K off by 1%: the check sees it (~2e-2).
  const auto perturbed = layzerIrvine([&](double a) { return 1.01 * kinetic(a); }, potential, 0.04);
  EXPECT_GT(std::abs(perturbed.relativeViolation()), 1e-2);
  // The comoving potential energy fed as if physical (phi not divided by a: W ~ a^2 with K unchanged): seen.
  const auto comovingW = layzerIrvine(
      kinetic, [](double a) { return -2.0 * a * a; }, 0.04);
  EXPECT_GT(std::abs(comovingW.relativeViolation()), 0.1);
}

TEST(LayzerIrvine, GrowingAndDecayingSolutionConvergesAtSecondOrder) {
  // W = -a^2 solves the equation with K = (3/4) a^2 + C a^-2: the homogeneous part C a^-2 is free streaming (W = 0,
  // p constant, K = |p|^2 / (2 a^2)). C makes it a third of K at a_start.
  const double c = 0.5 * 0.75 * std::pow(0.02, 4);
  const auto kinetic = [&](double a) { return 0.75 * a * a + c / (a * a); };
  const auto potential = [](double a) { return -a * a; };
  const double coarse = layzerIrvine(kinetic, potential, 0.04).relativeViolation();
  const double fine = layzerIrvine(kinetic, potential, 0.02).relativeViolation();
  EXPECT_LT(std::abs(coarse), 1e-3);
  EXPECT_NEAR(coarse / fine, 4.0, 0.5) << "coarse " << coarse << ", fine " << fine;
}

TEST(LayzerIrvine, FreeBodyHasNoViolationBeyondTheRule) {
  // W = 0 and p constant: K = m |p|^2 / (2 a^2) from kineticEnergy; K + integral 2K d ln a is constant.
  const double m = 2.0;
  const double p = 0.3;
  const auto kinetic = [&](double a) { return LayzerIrvine::kineticEnergy(m * p * p, a); };
  EXPECT_RELATIVE(kinetic(0.5), m * p * p / (2.0 * 0.25), 1e-15);
  const auto check = layzerIrvine(
      kinetic, [](double) { return 0.0; }, 0.025);
  // The trapezoid's error on 2K ~ exp(-2 ln a): (d ln a)^2 / 12 of the integral of (2K)'' = 8K, i.e. ~(d ln a)^2 / 3
  // K0.
  EXPECT_LT(std::abs(check.violation()), 3e-4 * kinetic(1.0 / 50.0));
  EXPECT_TRUE(std::isinf(check.relativeViolation()));
  EXPECT_EQ(LayzerIrvine(0.5, 0.0, 0.0).relativeViolation(), 0.0);
  EXPECT_RELATIVE(LayzerIrvine::potentialEnergy(-3.0, 0.5), -6.0, 1e-15);
}

// ---- Refusals ----

template <typename Error, typename F>
void expectOneLineError(F&& f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing \"" << fragment << "\"";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(fragment), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

TEST(ComovingTimeline, RefusesBadParametersWithOneLine) {
  const Background cosmology = planck();
  const auto build = [&](ComovingTimelineParams params) {
    return [=] { [[maybe_unused]] const ComovingTimeline timeline(cosmology, params); };
  };
  auto params = timelineParams(49.0, 0.0);
  expectOneLineError<InputError>(build(timelineParams(0.0, 1.0)), "z_start must be > z_end");
  expectOneLineError<InputError>(build(timelineParams(2.0, 2.0)), "z_start must be > z_end");
  expectOneLineError<InputError>(build(timelineParams(2.0, -1.0)), "z_end must be > -1");
  expectOneLineError<InputError>(build(timelineParams(2.0, -0.5)), "largest scale factor");
  expectOneLineError<InputError>(build(timelineParams(NAN, 0.0)), "z_start must be finite");
  expectOneLineError<InputError>(build(timelineParams(49.0, 0.0, {50.0})), "outside the run");
  expectOneLineError<InputError>(build(timelineParams(49.0, 1.0, {0.5})), "outside the run");
  expectOneLineError<InputError>(build(timelineParams(49.0, 0.0, {1.0, 3.0, 1.0})), "given twice");
  expectOneLineError<InputError>(build(timelineParams(49.0, 0.0, {1.0, 1.0 + 1e-12})), "given twice");
  expectOneLineError<InputError>(build(timelineParams(49.0, 0.0, {NAN})), "output redshift");
  expectOneLineError<InputError>(build(timelineParams(49.0, 0.0, {}, 0.0)), "max-dlna must be > 0");
  expectOneLineError<InputError>(build(timelineParams(49.0, 0.0, {}, -0.1)), "max-dlna must be > 0");
  expectOneLineError<InputError>(build(timelineParams(49.0, 0.0, {}, 0.025, 0.0)), "softening must be > 0");
  expectOneLineError<InputError>(build(timelineParams(49.0, 0.0, {}, 0.025, -1.0)), "softening must be > 0");
  params.eta = 0.0;
  expectOneLineError<InputError>(build(params), "eta must be > 0");
  params.eta = -1.0;
  expectOneLineError<InputError>(build(params), "eta must be > 0");
  params.eta = 0.025;
  params.maxPhysicalSoftening = 0.0;
  expectOneLineError<InputError>(build(params), "maximum physical softening must be > 0");
  // Outputs within rounding of the ends are the ends.
  const ComovingTimeline snapped(cosmology, timelineParams(49.0, 0.0, {0.0 + 1e-13, 49.0 * (1.0 - 1e-13)}));
  EXPECT_EQ(snapped.outputScaleFactors(), (std::vector<double>{snapped.startScaleFactor(), 1.0}));
}

TEST(ComovingTimeline, RefusesBadStepRequests) {
  const ComovingTimeline timeline(planck(), timelineParams(49.0, 0.0));
  expectOneLineError<InputError>([&] { timeline.nextStep(0.01, 0.0); }, "must be in [");
  expectOneLineError<InputError>([&] { timeline.nextStep(1.0, 0.0); }, "already at its end");
  expectOneLineError<InputError>([&] { timeline.nextStep(0.5, -1.0); }, "must be >= 0");
  expectOneLineError<NumericalError>([&] { timeline.nextStep(0.5, INFINITY); }, "not finite");
  expectOneLineError<NumericalError>([&] { timeline.nextStep(0.5, 1e300); }, "rounds away");
  expectOneLineError<InputError>([&] { timeline.kdkFactors(0.5, 0.5); }, "must end after it starts");
  expectOneLineError<InputError>([&] { timeline.kdkFactors(0.5, 1.1); }, "must be in [");
  LayzerIrvine check(0.1, 1.0, -1.0);
  expectOneLineError<InputError>([&] { check.add(0.1, 1.0, -1.0); }, "increasing a");
  expectOneLineError<NumericalError>([&] { check.add(0.2, NAN, -1.0); }, "K is not finite");
  expectOneLineError<InputError>([&] { [[maybe_unused]] const LayzerIrvine bad(0.0, 1.0, -1.0); }, "must be > 0");
}

}  // namespace
