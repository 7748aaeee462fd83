// SPDX-License-Identifier: MIT
// Tests of cosmology::Background: Einstein-de Sitter and open-universe closed forms, the flat Lambda-CDM closed form
// of t(a), high-precision references (reference/background_reference.py, mpmath), an independent fixed-step RK4 of
// the growth equations written here, independent Simpson quadratures of the drift and kick integrals, the limits
// a -> 0, and every validation error.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <functional>
#include <iomanip>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

#include "matcha/core/errors.hpp"
#include "matcha/cosmology/background.hpp"
#include "matcha/testing/relative_error.hpp"
#include "matcha/testing/test_environment.hpp"

namespace {

using matcha::InputError;
using matcha::cosmology::Background;
using matcha::cosmology::CosmologyParams;

[[maybe_unused]] const auto* const kTraps = matcha::testing::trapFloatingPointInEveryTest();

/// H0 in units G = 1 with the critical density 3 H0^2 / (8 pi G) = 1.
const double kUnitDensityHubble = std::sqrt(8.0 * std::numbers::pi / 3.0);

CosmologyParams model(double omegaMatter, double omegaLambda, double maxScaleFactor = 1.0) {
  CosmologyParams params;
  params.omegaMatter = omegaMatter;
  params.omegaLambda = omegaLambda;
  params.maxScaleFactor = maxScaleFactor;
  return params;
}

/// Composite Simpson's rule on n (even) intervals: a rule and a variable (ln a) the library does not use.
double simpson(const std::function<double(double)>& f, double lower, double upper, int intervals) {
  const double h = (upper - lower) / intervals;
  double sum = f(lower) + f(upper);
  for (int i = 1; i < intervals; ++i) sum += (i % 2 == 1 ? 4.0 : 2.0) * f(lower + i * h);
  return sum * h / 3.0;
}

/// The growth equations integrated the plain way, independently of the library's scaled Bulirsch-Stoer: classical
/// RK4 with a fixed step in x = ln a on y = (D1, dD1/dx, D2, dD2/dx), from a0 = 1e-9 with the Einstein-de Sitter
/// start (D1 = a0, D2 = -3/7 a0^2), whose O(a0) error stays ~1e-9 relative.
struct GrowthReference {
  double d1, f1, d2, f2;
};

GrowthReference integrateGrowthRk4(const CosmologyParams& params, double scaleFactor) {
  using State = std::array<double, 4>;
  const double om = params.omegaMatter;
  const double ol = params.omegaLambda;
  const double ok = 1.0 - om - ol;
  const auto derivative = [&](double x, const State& y) {
    const double a = std::exp(x);
    const double e2 = om / (a * a * a) + ok / (a * a) + ol;  // E^2, directly
    const double dLogE = (-3.0 * om / (a * a * a) - 2.0 * ok / (a * a)) / (2.0 * e2);
    const double omegaOfA = om / (a * a * a) / e2;
    return State{y[1], -(2.0 + dLogE) * y[1] + 1.5 * omegaOfA * y[0], y[3],
                 -(2.0 + dLogE) * y[3] + 1.5 * omegaOfA * (y[2] - y[0] * y[0])};
  };
  const double a0 = 1e-9;
  State y{a0, a0, -3.0 / 7.0 * a0 * a0, -6.0 / 7.0 * a0 * a0};
  const int steps = 20000;
  const double x0 = std::log(a0);
  const double h = (std::log(scaleFactor) - x0) / steps;
  for (int i = 0; i < steps; ++i) {
    const double x = x0 + i * h;
    const auto shifted = [&](const State& k, double factor) {
      State s = y;
      for (int j = 0; j < 4; ++j) s[j] += factor * h * k[j];
      return s;
    };
    const State k1 = derivative(x, y);
    const State k2 = derivative(x + 0.5 * h, shifted(k1, 0.5));
    const State k3 = derivative(x + 0.5 * h, shifted(k2, 0.5));
    const State k4 = derivative(x + h, shifted(k3, 1.0));
    for (int j = 0; j < 4; ++j) y[j] += h / 6.0 * (k1[j] + 2.0 * k2[j] + 2.0 * k3[j] + k4[j]);
  }
  return {y[0], y[1] / y[0], y[2], y[3] / y[2]};
}

// ----------------------------------------------------------------------------------------------- closed forms

TEST(Background, EinsteinDeSitterMatchesClosedForms) {
  const double h0 = 2.5;  // not 1: every time-like result must scale as 1/H0
  const Background background(model(1.0, 0.0), h0);
  for (const double a : {1e-9, 1e-4, 0.01, 0.3, 0.77, 1.0}) {
    SCOPED_TRACE("a = " + std::to_string(a));
    EXPECT_RELATIVE(background.expansionRate(a), std::pow(a, -1.5), 1e-14);
    EXPECT_RELATIVE(background.hubble(a), h0 * std::pow(a, -1.5), 1e-14);
    EXPECT_RELATIVE(background.omegaMatterAt(a), 1.0, 1e-15);
    EXPECT_RELATIVE(background.cosmicTime(a), 2.0 / 3.0 * std::pow(a, 1.5) / h0, 1e-13);
    EXPECT_RELATIVE(background.growthFactor(a), a, 1e-13);
    EXPECT_RELATIVE(background.growthRate(a), 1.0, 1e-13);
    EXPECT_RELATIVE(background.secondOrderGrowthFactor(a), -3.0 / 7.0 * a * a, 1e-11);
    EXPECT_RELATIVE(background.secondOrderGrowthRate(a), 2.0, 1e-11);
    for (const double a1 : {1e-6, 0.02, 0.5}) {
      EXPECT_RELATIVE(background.driftFactor(a1, a), 2.0 / h0 * (1.0 / std::sqrt(a1) - 1.0 / std::sqrt(a)), 1e-12);
      EXPECT_RELATIVE(background.kickFactor(a1, a), 2.0 / h0 * (std::sqrt(a) - std::sqrt(a1)), 1e-12);
    }
  }
}

TEST(Background, FlatLambdaCdmMatchesIssueTargets) {
  // The targets of issue 16 for Omega_m = 0.32; they agree with the exact values below to 2e-8 (D1) and 4e-9 (f1).
  const Background background(model(0.32, 0.68), kUnitDensityHubble);
  EXPECT_RELATIVE(background.growthFactor(1.0), 0.7906690063, 1e-6);
  EXPECT_RELATIVE(background.growthRate(1.0), 0.5318013709, 1e-6);
  EXPECT_RELATIVE(background.cosmicTime(1.0), 0.3271034094, 1e-6);
  EXPECT_RELATIVE(background.growthFactor(1e-8), 1e-8, 1e-8);  // the normalisation D1 -> a
}

TEST(Background, FlatLambdaCdmTimeMatchesClosedForm) {
  // t(a) = 2 / (3 H0 sqrt(Omega_Lambda)) asinh(sqrt(Omega_Lambda / Omega_m) a^(3/2)) in flat Lambda-CDM.
  for (const double omegaMatter : {0.05, 0.32, 0.9}) {
    const double omegaLambda = 1.0 - omegaMatter;
    const Background background(model(omegaMatter, omegaLambda), kUnitDensityHubble);
    for (const double a : {1e-7, 1e-3, 0.1, 0.5, 1.0}) {
      const double expected = 2.0 / (3.0 * kUnitDensityHubble * std::sqrt(omegaLambda)) *
                              std::asinh(std::sqrt(omegaLambda / omegaMatter) * std::pow(a, 1.5));
      EXPECT_RELATIVE(background.cosmicTime(a), expected, 1e-12) << "Omega_m " << omegaMatter << ", a " << a;
    }
  }
  const Background planck(model(0.32, 0.68), kUnitDensityHubble);
  EXPECT_RELATIVE(planck.cosmicTime(1.0), 0.3271034094340955, 1e-13);
}

struct HighPrecisionReference {
  double a, d1, f1, d2, f2;
};

TEST(Background, GrowthMatchesHighPrecisionReferences) {
  // Printed by reference/background_reference.py (mpmath, 30 digits): 2F1 closed form or Heath integral for D1, a
  // Taylor-series ODE solver for D2.
  const std::vector<HighPrecisionReference> flat = {
      {0.01, 0.0099999961363675, 0.99999884091096126, -4.2857110377161283e-5, 1.9999977264022552},
      {0.1, 0.099961402222825101, 0.99884277612102782, -0.004282470118950212, 1.9977300458828785},
      {0.5, 0.47845747456344727, 0.87906163609983478, -0.098272385844112658, 1.7625976198261112},
      {1, 0.79066902325855848, 0.53180136879902803, -0.27011339443143832, 1.0780895459773989},
  };
  const std::vector<HighPrecisionReference> closed = {
      {0.01, 0.010019085173307224, 1.0019081508375509, -4.3016328175017788e-5, 2.0037102326757773},
      {0.1, 0.10189679419143959, 1.0180153290935367, -0.0044451508708371677, 2.0350012955986568},
      {0.5, 0.51860503504463741, 0.92312467187080582, -0.11491454458684051, 1.8477066824110015},
      {1, 0.86569962678517456, 0.51635130337894242, -0.32185639325339114, 1.0462971852831784},
  };
  for (const auto& [params, references] : {std::pair{model(0.32, 0.68), flat}, std::pair{model(0.3, 0.8), closed}}) {
    const Background background(params, 1.0);
    for (const HighPrecisionReference& r : references) {
      SCOPED_TRACE("Omega_Lambda " + std::to_string(params.omegaLambda) + ", a " + std::to_string(r.a));
      EXPECT_RELATIVE(background.growthFactor(r.a), r.d1, 1e-13);
      EXPECT_RELATIVE(background.growthRate(r.a), r.f1, 1e-12);
      EXPECT_RELATIVE(background.secondOrderGrowthFactor(r.a), r.d2, 1e-11);
      EXPECT_RELATIVE(background.secondOrderGrowthRate(r.a), r.f2, 1e-11);
    }
  }
}

TEST(Background, OpenUniverseMatchesAnalyticGrowthTimeDriftAndKick) {
  // Omega_Lambda = 0, Omega_k = 1 - Omega_m > 0, x = Omega_k a / Omega_m (Peebles 1980 / Groth & Peebles 1975):
  //   D1 = (5/2) (Omega_m / Omega_k) [1 + 3/x + 3 sqrt(1 + x) x^(-3/2) ln(sqrt(1 + x) - sqrt(x))],
  //   H0 t = sqrt(a (Omega_m + Omega_k a)) / Omega_k - Omega_m Omega_k^(-3/2) asinh(sqrt(x)),
  //   H0 kick = 2 Omega_k^(-1/2) asinh(sqrt(x)) |_a1^a2,   H0 drift = -2 sqrt(Omega_m + Omega_k a) / (Omega_m sqrt(a))
  // |_a1^a2. The D1 bracket cancels ~1/x digits at small x, hence a >= 0.05 below.
  const double om = 0.3;
  const double ok = 0.7;
  const double h0 = 0.8;
  const Background background(model(om, 0.0), h0);
  const auto growth = [&](double a) {
    const double x = ok * a / om;
    return 2.5 * om / ok *
           (1.0 + 3.0 / x + 3.0 * std::sqrt(1.0 + x) / std::pow(x, 1.5) * std::log(std::sqrt(1.0 + x) - std::sqrt(x)));
  };
  const auto time = [&](double a) {
    return (std::sqrt(a * (om + ok * a)) / ok - om / std::pow(ok, 1.5) * std::asinh(std::sqrt(ok * a / om))) / h0;
  };
  const auto kickPrimitive = [&](double a) { return 2.0 / std::sqrt(ok) * std::asinh(std::sqrt(ok * a / om)) / h0; };
  const auto driftPrimitive = [&](double a) { return -2.0 * std::sqrt(om + ok * a) / (om * std::sqrt(a)) / h0; };
  for (const double a : {0.05, 0.2, 0.6, 1.0}) {
    SCOPED_TRACE("a = " + std::to_string(a));
    EXPECT_RELATIVE(background.growthFactor(a), growth(a), 1e-11);
    const double step = 1e-4;  // f1 by a central difference of the closed form in ln a: error ~ step^2 ~ 1e-8
    const double rate = (std::log(growth(a * std::exp(step))) - std::log(growth(a * std::exp(-step)))) / (2.0 * step);
    EXPECT_RELATIVE(background.growthRate(a), rate, 1e-7);
    EXPECT_RELATIVE(background.cosmicTime(a), time(a), 1e-12);
    EXPECT_RELATIVE(background.kickFactor(0.01, a), kickPrimitive(a) - kickPrimitive(0.01), 1e-12);
    EXPECT_RELATIVE(background.driftFactor(0.01, a), driftPrimitive(a) - driftPrimitive(0.01), 1e-12);
  }
}

// ------------------------------------------------------------------------------------- independent integrations

TEST(Background, GrowthMatchesIndependentRk4Integration) {
  for (const CosmologyParams& params : {model(0.3, 0.0), model(0.3, 0.8), model(0.25, 0.75), model(2.0, 0.5)}) {
    const Background background(params, 1.0);
    for (const double a : {0.02, 0.3, 1.0}) {
      SCOPED_TRACE("Omega_m " + std::to_string(params.omegaMatter) + ", Omega_Lambda " +
                   std::to_string(params.omegaLambda) + ", a " + std::to_string(a));
      const GrowthReference reference = integrateGrowthRk4(params, a);
      EXPECT_RELATIVE(background.growthFactor(a), reference.d1, 1e-8);
      EXPECT_RELATIVE(background.growthRate(a), reference.f1, 1e-8);
      EXPECT_RELATIVE(background.secondOrderGrowthFactor(a), reference.d2, 1e-8);
      EXPECT_RELATIVE(background.secondOrderGrowthRate(a), reference.f2, 1e-8);
    }
  }
}

TEST(Background, SecondOrderGrowthFollowsTheOmegaFits) {
  // The sign convention: D2 ~ -(3/7) D1^2 Omega_m(a)^(-1/143) and f2 ~ 2 Omega_m(a)^(6/11) (Bouchet et al. 1995),
  // fits good to ~1e-3 in flat Lambda-CDM.
  const Background background(model(0.32, 0.68), 1.0);
  for (const double a : {0.01, 0.2, 0.5, 1.0}) {
    const double d1 = background.growthFactor(a);
    const double omegaOfA = background.omegaMatterAt(a);
    EXPECT_LT(background.secondOrderGrowthFactor(a), 0.0);
    EXPECT_RELATIVE(background.secondOrderGrowthFactor(a), -3.0 / 7.0 * d1 * d1 * std::pow(omegaOfA, -1.0 / 143.0),
                    1e-3);
    EXPECT_RELATIVE(background.secondOrderGrowthRate(a), 2.0 * std::pow(omegaOfA, 6.0 / 11.0), 5e-3);
  }
}

TEST(Background, EarlyTimesApproachEinsteinDeSitter) {
  for (const CosmologyParams& params : {model(0.3, 0.0), model(0.3, 0.8), model(0.32, 0.68), model(0.05, 1.2)}) {
    const Background background(params, 1.0);
    const double a = 1e-10;
    SCOPED_TRACE("Omega_m " + std::to_string(params.omegaMatter) + ", Omega_Lambda " +
                 std::to_string(params.omegaLambda));
    EXPECT_RELATIVE(background.growthFactor(a), a, 1e-8);
    EXPECT_RELATIVE(background.growthRate(a), 1.0, 1e-8);
    EXPECT_RELATIVE(background.secondOrderGrowthFactor(a), -3.0 / 7.0 * a * a, 1e-8);
    EXPECT_RELATIVE(background.secondOrderGrowthRate(a), 2.0, 1e-8);
    EXPECT_RELATIVE(background.omegaMatterAt(a), 1.0, 1e-8);
    EXPECT_RELATIVE(background.cosmicTime(a), 2.0 / 3.0 * std::pow(a, 1.5) / std::sqrt(params.omegaMatter), 1e-8);
  }
}

TEST(Background, DriftKickAndTimeMatchIndependentQuadrature) {
  // Simpson in ln a on the integrands as written in the header (no substitution), 2e4 intervals: error ~1e-14.
  const CosmologyParams params = model(0.3, 0.8);
  const double h0 = 1.7;
  const Background background(params, h0);
  const auto hubble = [&](double a) {
    return h0 * std::sqrt(params.omegaMatter / (a * a * a) + params.omegaCurvature() / (a * a) + params.omegaLambda);
  };
  for (const auto& [a1, a2] : {std::pair{0.02, 1.0}, std::pair{0.3, 0.31}, std::pair{1e-4, 0.5}}) {
    SCOPED_TRACE("from " + std::to_string(a1) + " to " + std::to_string(a2));
    const double lower = std::log(a1);
    const double upper = std::log(a2);
    const double drift =
        simpson([&](double x) { return 1.0 / (std::exp(2.0 * x) * hubble(std::exp(x))); }, lower, upper, 20000);
    const double kick =
        simpson([&](double x) { return 1.0 / (std::exp(x) * hubble(std::exp(x))); }, lower, upper, 20000);
    const double elapsed = simpson([&](double x) { return 1.0 / hubble(std::exp(x)); }, lower, upper, 20000);
    EXPECT_RELATIVE(background.driftFactor(a1, a2), drift, 1e-11);
    EXPECT_RELATIVE(background.kickFactor(a1, a2), kick, 1e-11);
    EXPECT_RELATIVE(background.cosmicTime(a2) - background.cosmicTime(a1), elapsed, 1e-10);
  }
  // The derivatives with respect to the upper end are the integrands: dt/da = 1/(a H), and 1/(a^3 H), 1/(a^2 H); as
  // central differences over +-1e-4 a, whose error (step^2 / 6) g''/g is ~2e-8 for these g ~ a^-3.
  for (const double a : {0.05, 0.4, 1.0 - 1e-3}) {
    const double step = 1e-4 * a;
    const double below = a - step;
    const double above = a + step;
    const double h = background.hubble(a);
    EXPECT_RELATIVE(background.driftFactor(below, above) / (2.0 * step), 1.0 / (a * a * a * h), 1e-7);
    EXPECT_RELATIVE(background.kickFactor(below, above) / (2.0 * step), 1.0 / (a * a * h), 1e-7);
    EXPECT_RELATIVE((background.cosmicTime(above) - background.cosmicTime(below)) / (2.0 * step), 1.0 / (a * h), 1e-7);
  }
}

TEST(Background, DriftAndKickAreAdditiveAndAntisymmetric) {
  const Background background(model(0.32, 0.68, 1.5), 1.0);
  const std::vector<double> scaleFactors = {1e-5, 0.01, 0.0123, 0.2, 0.7, 1.0, 1.5};
  for (const double a1 : scaleFactors) {
    EXPECT_EQ(background.driftFactor(a1, a1), 0.0);
    EXPECT_EQ(background.kickFactor(a1, a1), 0.0);
    for (const double a2 : scaleFactors) {
      if (a1 == a2) continue;
      EXPECT_EQ(-background.driftFactor(a2, a1), background.driftFactor(a1, a2));
      EXPECT_EQ(-background.kickFactor(a2, a1), background.kickFactor(a1, a2));
      for (const double a3 : scaleFactors) {
        if (a2 == a3 || a1 == a3) continue;
        EXPECT_RELATIVE(background.driftFactor(a1, a2) + background.driftFactor(a2, a3), background.driftFactor(a1, a3),
                        1e-11)
            << a1 << " " << a2 << " " << a3;
        EXPECT_RELATIVE(background.kickFactor(a1, a2) + background.kickFactor(a2, a3), background.kickFactor(a1, a3),
                        1e-11)
            << a1 << " " << a2 << " " << a3;
      }
    }
  }
}

// --------------------------------------------------------------------------------------- helpers and accessors

TEST(Background, OmegaMatterRedshiftAndGrowthRatio) {
  const CosmologyParams params = model(0.3, 0.8);
  const Background background(params, 1.0);
  EXPECT_RELATIVE(background.omegaMatterAt(1.0), 0.3, 1e-15);
  for (const double a : {0.01, 0.5, 1.0}) {
    const double e = background.expansionRate(a);
    EXPECT_RELATIVE(background.omegaMatterAt(a), 0.3 / (a * a * a * e * e), 1e-14);
    EXPECT_RELATIVE(background.growthFactorRatio(a), background.growthFactor(a) / background.growthFactor(1.0), 1e-15);
    EXPECT_RELATIVE(background.growthFactorRatio(a, 0.5), background.growthFactor(a) / background.growthFactor(0.5),
                    1e-15);
  }
  EXPECT_EQ(background.growthFactorRatio(1.0), 1.0);
  EXPECT_EQ(background.expansionRate(1.0), 1.0);

  using matcha::cosmology::redshiftFromScaleFactor;
  using matcha::cosmology::scaleFactorFromRedshift;
  EXPECT_EQ(redshiftFromScaleFactor(1.0), 0.0);
  EXPECT_EQ(scaleFactorFromRedshift(0.0), 1.0);
  EXPECT_RELATIVE(scaleFactorFromRedshift(99.0), 0.01, 1e-15);
  EXPECT_RELATIVE(redshiftFromScaleFactor(0.01), 99.0, 1e-14);
  for (const double z : {0.5, 3.0, 127.0, 1e4})
    EXPECT_RELATIVE(redshiftFromScaleFactor(scaleFactorFromRedshift(z)), z, 1e-12);
  EXPECT_THROW(redshiftFromScaleFactor(0.0), InputError);
  EXPECT_THROW(redshiftFromScaleFactor(std::numeric_limits<double>::quiet_NaN()), InputError);
  EXPECT_THROW(scaleFactorFromRedshift(-1.0), InputError);
  EXPECT_THROW(scaleFactorFromRedshift(std::numeric_limits<double>::infinity()), InputError);

  // 100 km/s/Mpc = 3.2407792894e-18 s^-1 (the IAU parsec).
  EXPECT_RELATIVE(matcha::cosmology::hubbleTodayPerSecond(1.0), 3.2407792894e-18, 1e-10);
  EXPECT_RELATIVE(matcha::cosmology::hubbleTodayPerSecond(0.7), 0.7 * 3.2407792894e-18, 1e-10);
  EXPECT_THROW(matcha::cosmology::hubbleTodayPerSecond(0.0), InputError);
}

// ------------------------------------------------------------------------------------------------------ errors

/// Runs `call`, expecting an InputError whose message is one line and contains `fragment`.
void expectOneLineInputError(const std::function<void()>& call, const std::string& fragment) {
  try {
    call();
    ADD_FAILURE() << "no InputError; expected one mentioning '" << fragment << "'";
  } catch (const InputError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find(fragment), std::string::npos) << "message: " << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << "message: " << message;
  }
}

TEST(Background, BadParametersThrowOneLineErrors) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  struct Case {
    CosmologyParams params;
    std::string fragment;
  };
  std::vector<Case> cases = {
      {model(0.0, 0.7), "Omega_m must be > 0"},
      {model(-0.1, 0.7), "Omega_m must be > 0"},
      {model(nan, 0.7), "Omega_m must be finite"},
      {model(inf, 0.7), "Omega_m must be finite"},
      {model(0.3, nan), "Omega_Lambda must be finite"},
      {model(0.3, -inf), "Omega_Lambda must be finite"},
      {model(0.3, 0.7, 0.5), "largest scale factor must be >= 1"},
      {model(0.3, 0.7, nan), "largest scale factor must be finite"},
      // 0.3 - 1.8 a + 2.5 a^3 < 0 near a = 0.49: bounced, no big bang.
      {model(0.3, 2.5), "has no big bang"},
      // 0.3 + 1.2 a - 0.5 a^3 reaches 0 between a = 1 and 2.
      {model(0.3, -0.5, 2.0), "stops expanding before the largest scale factor 2"},
      // An open universe with Lambda < 0 recollapses after a = 1 too, a closed one with Omega_m >> 1 as well.
      {model(3.0, 0.0, 4.0), "stops expanding"},
  };
  for (const double h : {0.0, -0.7, nan}) {
    CosmologyParams params = model(0.3, 0.7);
    params.hubbleParam = h;
    cases.push_back({params, "h must be"});
  }
  for (const Case& c : cases) {
    SCOPED_TRACE("expecting '" + c.fragment + "'");
    expectOneLineInputError([&] { c.params.validate(); }, c.fragment);
    expectOneLineInputError([&] { Background(c.params, 1.0); }, c.fragment);
  }
  // The same recollapsing model is fine while it still expands: up to a = 1, and Omega_m = 3 up to a = 1.4.
  EXPECT_NO_THROW(model(0.3, -0.5, 1.0).validate());
  EXPECT_NO_THROW(model(3.0, 0.0, 1.4).validate());
  for (const double h0 : {0.0, -1.0, nan, inf}) expectOneLineInputError([&] { Background(model(0.3, 0.7), h0); }, "H0");
}

TEST(Background, ScaleFactorsOutsideTheRangeThrow) {
  const Background background(model(0.3, 0.7, 2.0), 1.0);
  const std::vector<std::function<double(const Background&, double)>> members = {
      [](const Background& b, double a) { return b.expansionRate(a); },
      [](const Background& b, double a) { return b.hubble(a); },
      [](const Background& b, double a) { return b.omegaMatterAt(a); },
      [](const Background& b, double a) { return b.cosmicTime(a); },
      [](const Background& b, double a) { return b.growthFactor(a); },
      [](const Background& b, double a) { return b.growthFactorRatio(a); },
      [](const Background& b, double a) { return b.growthFactorRatio(0.5, a); },
      [](const Background& b, double a) { return b.growthRate(a); },
      [](const Background& b, double a) { return b.secondOrderGrowthFactor(a); },
      [](const Background& b, double a) { return b.secondOrderGrowthRate(a); },
      [](const Background& b, double a) { return b.driftFactor(a, 0.5); },
      [](const Background& b, double a) { return b.driftFactor(0.5, a); },
      [](const Background& b, double a) { return b.kickFactor(a, 0.5); },
      [](const Background& b, double a) { return b.kickFactor(0.5, a); },
  };
  for (std::size_t i = 0; i < members.size(); ++i) {
    SCOPED_TRACE("member " + std::to_string(i));
    for (const double a :
         {0.0, -0.5, 2.0000001, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
      expectOneLineInputError([&] { members[i](background, a); }, "the scale factor must be in (0, 2]");
    }
    EXPECT_TRUE(std::isfinite(members[i](background, 2.0)));
    EXPECT_TRUE(std::isfinite(members[i](background, 1e-30)));
  }
}

}  // namespace
