// SPDX-License-Identifier: MIT
#include "matcha/cosmology/background.hpp"

#include <array>
#include <boost/numeric/odeint.hpp>
#include <cmath>
#include <string>

#include "matcha/core/errors.hpp"
#include "matcha/core/units.hpp"
#include "quadrature.hpp"

namespace matcha::cosmology {

namespace {

using detail::formatNumber;

constexpr double kQuadratureTolerance = 1e-13;
constexpr double kOdeTolerance = 1e-13;
/// The growth ODE starts at this fraction of the requested scale factor (see secondOrderGrowthFactor).
constexpr double kGrowthStartFraction = 1e-6;

void requireFinite(double value, const char* name) {
  if (!std::isfinite(value)) {
    throw InputError(std::string("cosmology: ") + name + " must be finite (got " + formatNumber(value) + ")");
  }
}

void requirePositive(double value, const char* name) {
  requireFinite(value, name);  // first: an ordered comparison with NaN raises FE_INVALID (SIGFPE in trapping tests)
  if (!(value > 0.0)) {
    throw InputError(std::string("cosmology: ") + name + " must be > 0 (got " + formatNumber(value) + ")");
  }
}

}  // namespace

void CosmologyParams::validate() const {
  requirePositive(omegaMatter, "Omega_m");
  requireFinite(omegaLambda, "Omega_Lambda");
  requirePositive(hubbleParam, "h");
  requireFinite(maxScaleFactor, "the largest scale factor");
  if (!(maxScaleFactor >= 1.0)) {
    throw InputError("cosmology: the largest scale factor must be >= 1 (got " + formatNumber(maxScaleFactor) + ")");
  }
  // a^3 E^2 = Omega_m + Omega_k a + Omega_Lambda a^3 is Omega_m > 0 at a = 0; a cubic's minimum on (0, a_max] lies at
  // a_max or where its derivative Omega_k + 3 Omega_Lambda a^2 vanishes, so two values decide positivity exactly.
  const double omegaK = omegaCurvature();
  const auto cubic = [&](double a) { return omegaMatter + omegaK * a + omegaLambda * a * a * a; };
  double worstScaleFactor = maxScaleFactor;
  if (omegaLambda != 0.0 && -omegaK / (3.0 * omegaLambda) > 0.0) {
    const double stationary = std::sqrt(-omegaK / (3.0 * omegaLambda));
    if (stationary < maxScaleFactor && cubic(stationary) < cubic(worstScaleFactor)) worstScaleFactor = stationary;
  }
  const double worst = cubic(worstScaleFactor);
  if (!(worst > 0.0)) {
    const std::string model =
        "Omega_m = " + formatNumber(omegaMatter) + ", Omega_Lambda = " + formatNumber(omegaLambda);
    const std::string where =
        "E(a)^2 = " + formatNumber(worst / std::pow(worstScaleFactor, 3)) + " at a = " + formatNumber(worstScaleFactor);
    if (worstScaleFactor < 1.0) {
      throw InputError("cosmology: " + model + " has no big bang (" + where + ": the expansion reversed before today)");
    }
    throw InputError("cosmology: " + model + " stops expanding before the largest scale factor " +
                     formatNumber(maxScaleFactor) + " (" + where + ")");
  }
}

double hubbleTodayPerSecond(double hubbleParam) {
  requirePositive(hubbleParam, "h");
  constexpr double kMegaparsecInCm = 1e3 * kKiloparsecInCm;
  constexpr double kHundredKmPerSInCmPerS = 1e7;
  return hubbleParam * kHundredKmPerSInCmPerS / kMegaparsecInCm;
}

double redshiftFromScaleFactor(double scaleFactor) {
  requirePositive(scaleFactor, "the scale factor");
  return 1.0 / scaleFactor - 1.0;
}

double scaleFactorFromRedshift(double redshift) {
  requireFinite(redshift, "the redshift");
  if (!(redshift > -1.0)) {
    throw InputError("cosmology: the redshift must be > -1 (got " + formatNumber(redshift) + ")");
  }
  return 1.0 / (1.0 + redshift);
}

// -------------------------------------------------------------------------------------------------------- Background

Background::Background(const CosmologyParams& params, double hubbleToday) : params_(params), hubbleToday_(hubbleToday) {
  params_.validate();
  requirePositive(hubbleToday, "H0");
}

void Background::checkScaleFactor(double scaleFactor, const char* what) const {
  if (!(std::isfinite(scaleFactor) && scaleFactor > 0.0 && scaleFactor <= params_.maxScaleFactor)) {
    throw InputError(std::string("cosmology: ") + what + ": the scale factor must be in (0, " +
                     formatNumber(params_.maxScaleFactor) + "] (got " + formatNumber(scaleFactor) + ")");
  }
}

double Background::cubicExpansion(double a) const {
  return params_.omegaMatter + params_.omegaCurvature() * a + params_.omegaLambda * a * a * a;
}

double Background::expansionRate(double a) const {
  checkScaleFactor(a, "E(a)");
  return std::sqrt(cubicExpansion(a) / a) / a;
}

double Background::hubble(double a) const {
  checkScaleFactor(a, "H(a)");
  return hubbleToday_ * expansionRate(a);
}

double Background::omegaMatterAt(double a) const {
  checkScaleFactor(a, "Omega_m(a)");
  return params_.omegaMatter / cubicExpansion(a);
}

double Background::cosmicTime(double a) const {
  checkScaleFactor(a, "t(a)");
  // t = (1/H0) integral_0^a sqrt(a') P(a')^-1/2 da'; with a' = a w^2 the sqrt(a') cusp becomes the smooth 2 w^2.
  const double integral =
      detail::integrate([&](double w) { return 2.0 * w * w / std::sqrt(cubicExpansion(a * w * w)); }, 0.0, 1.0,
                        kQuadratureTolerance, "the cosmic time");
  return a * std::sqrt(a) * integral / hubbleToday_;
}

double Background::growthFactor(double a) const {
  checkScaleFactor(a, "D1(a)");
  // D1 = (5/2) Omega_m E(a) integral_0^a a'^(3/2) P(a')^(-3/2) da' = (5/2) Omega_m a sqrt(P(a)) J(a) with a' = a w^2,
  // J = integral_0^1 2 w^4 P(a w^2)^(-3/2) dw: smooth, and free of the a^-3/2 and a^5/2 that would overflow.
  const double integral = detail::integrate(
      [&](double w) {
        const double cubic = cubicExpansion(a * w * w);
        return 2.0 * w * w * w * w / (cubic * std::sqrt(cubic));
      },
      0.0, 1.0, kQuadratureTolerance, "the linear growth factor");
  return 2.5 * params_.omegaMatter * a * std::sqrt(cubicExpansion(a)) * integral;
}

double Background::growthFactorRatio(double a, double referenceScaleFactor) const {
  return growthFactor(a) / growthFactor(referenceScaleFactor);
}

double Background::growthRate(double a) const {
  checkScaleFactor(a, "f1(a)");
  // Differentiating D1 = C E I: f1 = dln E / dln a + a / ((a E)^3 I) = [(5/2) Omega_m a / D1 - (3/2) Omega_m
  //   - Omega_k a] / P(a), all terms O(1) as a -> 0 (no cancellation beyond the factor ~2.5).
  const double omegaM = params_.omegaMatter;
  return (2.5 * omegaM * a / growthFactor(a) - 1.5 * omegaM - params_.omegaCurvature() * a) / cubicExpansion(a);
}

// ---------------------------------------------------------------------------------------------- second-order growth

struct Background::GrowthState {
  double firstOrder;   ///< D1
  double firstRate;    ///< f1
  double secondOrder;  ///< D2
  double secondRate;   ///< f2
};

Background::GrowthState Background::integrateGrowth(double a) const {
  // Variables scaled by their Einstein-de Sitter behaviour, functions of x = ln a: u1 = D1/a, v1 = D1'/a,
  // u2 = D2/a^2, v2 = D2'/a^2 (' = d/dx). They are constants (1, 1, -3/7, -6/7) in Einstein-de Sitter and vary
  // slowly otherwise, so the step control measures the departure from EdS rather than the growth itself:
  //   u1' = v1 - u1,        v1' = -(3 + g) v1 + (3/2) Omega_m(a) u1,
  //   u2' = v2 - 2 u2,      v2' = -(4 + g) v2 + (3/2) Omega_m(a) (u2 - u1^2),
  // g = dln E / dln a = -(3 Omega_m + 2 Omega_k a) / (2 P(a)).
  using State = std::array<double, 4>;
  const double omegaM = params_.omegaMatter;
  const double omegaK = params_.omegaCurvature();
  const auto system = [&](const State& y, State& dydx, double x) {
    const double scale = std::exp(x);
    const double cubic = cubicExpansion(scale);
    const double logSlope = -(3.0 * omegaM + 2.0 * omegaK * scale) / (2.0 * cubic);
    const double source = 1.5 * omegaM / cubic;  // (3/2) Omega_m(a)
    dydx[0] = y[1] - y[0];
    dydx[1] = -(3.0 + logSlope) * y[1] + source * y[0];
    dydx[2] = y[3] - 2.0 * y[2];
    dydx[3] = -(4.0 + logSlope) * y[3] + source * (y[2] - y[0] * y[0]);
  };

  const double start = kGrowthStartFraction * a;
  const double startGrowth = growthFactor(start) / start;
  const double startRate = growthRate(start);
  const double startSecond = -3.0 / 7.0 * startGrowth * startGrowth;
  State y{startGrowth, startRate * startGrowth, startSecond, 2.0 * startRate * startSecond};

  namespace odeint = boost::numeric::odeint;
  odeint::bulirsch_stoer<State> stepper(kOdeTolerance, kOdeTolerance);
  const double startLog = std::log(start);
  const double endLog = std::log(a);
  odeint::integrate_adaptive(stepper, system, y, startLog, endLog, 0.1 * (endLog - startLog));
  for (const double value : y) {
    if (!std::isfinite(value)) {
      throw NumericalError("cosmology: the growth ODE gave a non-finite value at a = " + formatNumber(a));
    }
  }
  return {y[0] * a, y[1] / y[0], y[2] * a * a, y[3] / y[2]};
}

double Background::secondOrderGrowthFactor(double a) const {
  checkScaleFactor(a, "D2(a)");
  return integrateGrowth(a).secondOrder;
}

double Background::secondOrderGrowthRate(double a) const {
  checkScaleFactor(a, "f2(a)");
  return integrateGrowth(a).secondRate;
}

// ----------------------------------------------------------------------------------------------------- drift & kick

double Background::driftFactor(double a1, double a2) const {
  checkScaleFactor(a1, "the drift factor");
  checkScaleFactor(a2, "the drift factor");
  // integral da / (a^3 H) = (1/H0) integral a^(-3/2) P(a)^(-1/2) da; with a = w^-2, a^(-3/2) da = -2 dw, so the
  // a^(-3/2) divergence at small a becomes a bounded integrand over w in [a2^-1/2, a1^-1/2].
  const double integral =
      detail::integrate([&](double w) { return 2.0 / std::sqrt(cubicExpansion(1.0 / (w * w))); }, 1.0 / std::sqrt(a2),
                        1.0 / std::sqrt(a1), kQuadratureTolerance, "the drift factor");
  return integral / hubbleToday_;
}

double Background::kickFactor(double a1, double a2) const {
  checkScaleFactor(a1, "the kick factor");
  checkScaleFactor(a2, "the kick factor");
  // integral da / (a^2 H) = (1/H0) integral a^(-1/2) P(a)^(-1/2) da; with a = w^2, a^(-1/2) da = 2 dw.
  const double integral = detail::integrate([&](double w) { return 2.0 / std::sqrt(cubicExpansion(w * w)); },
                                            std::sqrt(a1), std::sqrt(a2), kQuadratureTolerance, "the kick factor");
  return integral / hubbleToday_;
}

}  // namespace matcha::cosmology
