// SPDX-License-Identifier: MIT
#include "matcha/testing/float_sums.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace matcha::testing {

std::string describeCancellation(const Particles& bodies, const Particles& reference, std::size_t i,
                                 const GravityParams& gravity) {
  const double eps2 = gravity.eps2();
  double sumOfMagnitudes = 0.0, nearby = 0.0, nearest2 = std::numeric_limits<double>::infinity();
  for (std::size_t j = 0; j < bodies.size(); ++j) {
    if (j == i) continue;
    const double dx = bodies.x[j] - bodies.x[i], dy = bodies.y[j] - bodies.y[i], dz = bodies.z[j] - bodies.z[i];
    const double d2 = dx * dx + dy * dy + dz * dz;
    const double magnitude = gravity.G * bodies.mass[j] * std::sqrt(d2) / std::pow(d2 + eps2, 1.5);
    sumOfMagnitudes += magnitude;
    if (d2 < 25.0 * eps2) nearby += magnitude;
    nearest2 = std::min(nearest2, d2);
  }
  const double accel = std::hypot(reference.ax[i], reference.ay[i], reference.az[i]);
  char text[256];
  std::snprintf(text, sizeof text,
                "body %zu: r = %.3g, |a| = %.3g, sum |terms| / |a| = %.3g (within 5 eps: %.3g), nearest neighbour "
                "%.3g eps",
                i, std::hypot(bodies.x[i], bodies.y[i], bodies.z[i]), accel, sumOfMagnitudes / accel, nearby / accel,
                eps2 > 0 ? std::sqrt(nearest2 / eps2) : std::numeric_limits<double>::infinity());
  return text;
}

}  // namespace matcha::testing
