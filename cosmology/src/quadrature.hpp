// SPDX-License-Identifier: MIT
// The module's one quadrature: tanh-sinh (Boost.Math) with a checked error estimate, and number
// formatting for one-line messages. Private to cosmology/src.
#pragma once

#include <boost/math/quadrature/tanh_sinh.hpp>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "matcha/core/errors.hpp"

namespace matcha::cosmology::detail {

/// A double with up to 10 significant digits, for one-line messages (std::to_string prints 1e-7 as 0.000000).
inline std::string formatNumber(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.10g", value);
  return buffer;
}

/// One tanh-sinh rule for the whole module: its abscissa tables are built once and grown on demand (Boost guards the
/// growth with a mutex, so concurrent integrations are safe). Not const: Boost 1.74's integrate() cannot be called
/// on a const rule (its definition lacks the declaration's const).
inline boost::math::quadrature::tanh_sinh<double>& tanhSinhRule() {
  static boost::math::quadrature::tanh_sinh<double> rule;
  return rule;
}

/// integral_lower^upper integrand(x) dx (negative for upper < lower) by tanh-sinh quadrature (Boost.Math), refined
/// until two successive levels agree to relativeTolerance times the integral of |integrand|. The integrands of this
/// module are smooth and bounded on their intervals (the callers substitute away endpoint cusps and cut oscillating
/// ones into panels), where tanh-sinh converges double-exponentially.
///
/// The interval is mapped onto [0, 1] here because Boost 1.74 reports the error estimate on the unit interval's
/// scale but the L1 norm on the caller's; on a fixed interval the two agree within a factor 2 in every Boost
/// version. (Boost 1.74's adaptive Gauss-Kronrod compares unscaled panel errors with scaled tolerances, so on short
/// intervals it bisects to its depth limit: it is not used.)
/// @throws NumericalError naming `what` when the estimate stays above 100 relativeTolerance times the L1 norm or
///   the value is not finite
template <class Integrand>
double integrate(const Integrand& integrand, double lower, double upper, double relativeTolerance, const char* what) {
  if (lower == upper) return 0.0;
  if (upper < lower) return -integrate(integrand, upper, lower, relativeTolerance, what);  // exactly antisymmetric
  const double width = upper - lower;
  double errorEstimate = 0.0;
  double absoluteIntegral = 0.0;
  double value = 0.0;
  try {
    value = tanhSinhRule().integrate([&](double t) { return integrand(lower + width * t); }, 0.0, 1.0,
                                     relativeTolerance, &errorEstimate, &absoluteIntegral);
  } catch (const std::runtime_error&) {  // boost::math::evaluation_error: the integrand is not finite somewhere
    throw NumericalError(std::string("cosmology: the integrand of ") + what + " over [" + formatNumber(lower) + ", " +
                         formatNumber(upper) + "] is not finite");
  }
  if (!(std::isfinite(value) && errorEstimate <= 100.0 * relativeTolerance * absoluteIntegral)) {
    throw NumericalError(std::string("cosmology: the quadrature of ") + what + " over [" + formatNumber(lower) + ", " +
                         formatNumber(upper) + "] did not converge (estimated error " +
                         formatNumber(errorEstimate * width) + ", integral " + formatNumber(value * width) + ")");
  }
  return width * value;
}

}  // namespace matcha::cosmology::detail
