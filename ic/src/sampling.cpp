// SPDX-License-Identifier: MIT
#include "sampling.hpp"

#include <algorithm>
#include <cmath>

namespace matcha::ic::detail {

namespace {

constexpr double kPi = 3.14159265358979323846;

/// Velocity in units of the local escape speed, drawn from g(q) = q^2 (1 - q^2)^(7/2) by von Neumann rejection with
/// the constant envelope 0.1 (max g = 0.0922 at q = sqrt(2/9)). Accepts ~46% of pairs.
double drawPlummerSpeedFraction(std::mt19937_64& engine) {
  while (true) {
    const double q = uniformOpen(engine);
    const double ceiling = 0.1 * uniformOpen(engine);
    const double oneMinusQSquared = 1.0 - q * q;
    const double g = q * q * std::pow(oneMinusQSquared, 3.5);
    if (ceiling < g) return q;
  }
}

/// B(q) of the Hernquist distribution function (sampling.hpp) at q^2 = eps, given oneMinusEps = 1 - eps computed
/// without cancellation by the caller. Below q = 0.1 the closed form loses digits (its terms ~3q cancel to ~25.6 q^5),
/// so the Taylor series is used there; its first omitted term, 9/304 q^19, is < 1e-15 of the sum.
double hernquistB(double eps, double oneMinusEps) {
  const double q = std::sqrt(eps);
  if (q < 0.1) {
    const double q2 = eps;
    // 128/5 q^5 - 192/7 q^7 + 16/3 q^9 + 8/11 q^11 + 3/13 q^13 + 1/10 q^15 + 7/136 q^17 (Horner in q^2).
    const double series =
        128.0 / 5.0 +
        q2 * (-192.0 / 7.0 +
              q2 * (16.0 / 3.0 + q2 * (8.0 / 11.0 + q2 * (3.0 / 13.0 + q2 * (1.0 / 10.0 + q2 * (7.0 / 136.0))))));
    return series * q2 * q2 * q;
  }
  return 3.0 * std::asin(q) + q * std::sqrt(oneMinusEps) * (1.0 - 2.0 * eps) * (8.0 * eps * eps - 8.0 * eps - 3.0);
}

}  // namespace

double uniformOpen(std::mt19937_64& engine) { return (static_cast<double>(engine() >> 12) + 0.5) * 0x1.0p-52; }

void isotropicVector(double length, std::mt19937_64& engine, double& x, double& y, double& z) {
  z = (1.0 - 2.0 * uniformOpen(engine)) * length;
  const double azimuth = 2.0 * kPi * uniformOpen(engine);
  // max() guards the rounding case z^2 > length^2, which would give sqrt(negative) = NaN.
  const double cylindrical = std::sqrt(std::max(0.0, length * length - z * z));
  x = cylindrical * std::cos(azimuth);
  y = cylindrical * std::sin(azimuth);
}

double plummerRadiusFromLogMass(double logMassFraction) {
  return 1.0 / std::sqrt(std::expm1(-(2.0 / 3.0) * logMassFraction));
}

PhasePoint samplePlummerBody(double logMassCut, std::mt19937_64& engine) {
  PhasePoint body;
  // X1 = massCut * u, taken in logarithms so that a tiny massCut cannot underflow to X1 = 0.
  const double radius = plummerRadiusFromLogMass(logMassCut + std::log(uniformOpen(engine)));
  isotropicVector(radius, engine, body.x, body.y, body.z);
  const double escapeSpeed = std::sqrt(2.0) * std::pow(1.0 + radius * radius, -0.25);
  const double speed = drawPlummerSpeedFraction(engine) * escapeSpeed;
  isotropicVector(speed, engine, body.vx, body.vy, body.vz);
  return body;
}

double plummerMassFraction(double radius) { return radius * radius * radius / std::pow(1.0 + radius * radius, 1.5); }

PhasePoint sampleHernquistBody(double massFraction, std::mt19937_64& engine) {
  PhasePoint body;
  const double s = std::sqrt(massFraction * uniformOpen(engine));
  const double radius = s / (1.0 - s);
  isotropicVector(radius, engine, body.x, body.y, body.z);

  const double psi = 1.0 / (1.0 + radius);       // relative potential -Phi
  const double delta = radius / (1.0 + radius);  // 1 - psi, without the cancellation near the centre
  const double ceiling = hernquistB(psi, delta);
  double w = 0.0;  // v^2 / 2
  while (true) {
    const double envelope = psi * std::pow(uniformOpen(engine), 2.0 / 3.0);
    w = delta * envelope / (1.0 - envelope);
    // w <= psi up to rounding; eps = 0 gives B = 0, which no draw accepts.
    const double eps = std::max(0.0, psi - w);
    if (uniformOpen(engine) * ceiling < hernquistB(eps, delta + w)) break;
  }
  isotropicVector(std::sqrt(2.0 * w), engine, body.vx, body.vy, body.vz);
  return body;
}

double hernquistMassFraction(double radius) {
  const double s = radius / (1.0 + radius);
  return s * s;
}

}  // namespace matcha::ic::detail
