// SPDX-License-Identifier: MIT
#include "matcha/ic/plummer.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "matcha/core/errors.hpp"

namespace matcha::ic {

namespace {

constexpr double kPi = 3.14159265358979323846;

/// Uniform deviate in the open interval (0, 1) from one raw 64-bit draw: the top 52 bits, offset by half a step, so
/// the result is one of 2^52 equally spaced midpoints in [2^-53, 1 - 2^-53], all exactly representable. The interval
/// is open because both ends are singular for the radius formula (X1 = 0 and, without a cut, X1 = 1).
double uniformOpen(std::mt19937_64& engine) { return (static_cast<double>(engine() >> 12) + 0.5) * 0x1.0p-52; }

/// Radius (scale radius a = 1) enclosing the mass fraction exp(logMassFraction): (X^(-2/3) - 1)^(-1/2). Written with
/// expm1 of the logarithm because near X = 1 the difference X^(-2/3) - 1 would cancel to exactly 0 (an infinite
/// radius) in the direct form.
double plummerRadiusFromLogMass(double logMassFraction) {
  return 1.0 / std::sqrt(std::expm1(-(2.0 / 3.0) * logMassFraction));
}

/// Writes a vector of length `length` in a direction drawn isotropically from two deviates (AHW 1974 eqs. for
/// x, y, z: z uniform in [-length, length], azimuth uniform).
void isotropicVector(double length, std::mt19937_64& engine, double& x, double& y, double& z) {
  z = (1.0 - 2.0 * uniformOpen(engine)) * length;
  const double azimuth = 2.0 * kPi * uniformOpen(engine);
  // max() guards the rounding case z^2 > length^2, which would give sqrt(negative) = NaN.
  const double cylindrical = std::sqrt(std::max(0.0, length * length - z * z));
  x = cylindrical * std::cos(azimuth);
  y = cylindrical * std::sin(azimuth);
}

/// Velocity in units of the local escape speed, drawn from g(q) = q^2 (1 - q^2)^(7/2) by von Neumann rejection with
/// the constant envelope 0.1 (max g = 0.0922 at q = sqrt(2/9)). Accepts ~46% of pairs.
double drawSpeedFraction(std::mt19937_64& engine) {
  while (true) {
    const double q = uniformOpen(engine);
    const double ceiling = 0.1 * uniformOpen(engine);
    const double oneMinusQSquared = 1.0 - q * q;
    const double g = q * q * std::pow(oneMinusQSquared, 3.5);
    if (ceiling < g) return q;
  }
}

/// Subtracts the mass-weighted mean of `values` from every entry. Run twice by the caller: the second pass removes
/// the rounding left by the first (the mean is computed from ~N terms of size ~1), so the residual is ~1e-16.
void subtractWeightedMean(std::vector<double>& values, const std::vector<double>& mass, double totalMass) {
  double weighted = 0.0;
  for (std::size_t i = 0; i < values.size(); ++i) weighted += mass[i] * values[i];
  const double mean = weighted / totalMass;
  for (double& value : values) value -= mean;
}

void checkMassCut(double massCut) {
  // isfinite first: an ordered comparison with NaN raises FE_INVALID, which trapping tests turn into SIGFPE.
  if (!(std::isfinite(massCut) && massCut > 0.0 && massCut <= 1.0)) {
    throw InputError("Plummer mass cut must be in (0, 1] (got " + std::to_string(massCut) + ")");
  }
}

}  // namespace

double plummerCutRadius(double massCut) {
  checkMassCut(massCut);
  if (massCut == 1.0) return std::numeric_limits<double>::infinity();
  return kPlummerScaleRadius * plummerRadiusFromLogMass(std::log(massCut));
}

Particles makePlummer(const PlummerParams& params) {
  if (params.numBodies == 0) throw InputError("Plummer sphere needs at least one body");
  checkMassCut(params.massCut);

  const std::size_t numBodies = params.numBodies;
  Particles particles(numBodies);
  std::mt19937_64 engine(params.seed);

  const double logMassCut = std::log(params.massCut);
  const double velocityScale = std::sqrt(16.0 / (3.0 * kPi));
  const double bodyMass = 1.0 / static_cast<double>(numBodies);

  for (std::size_t i = 0; i < numBodies; ++i) {
    // X1 = massCut * u, taken in logarithms so that a tiny massCut cannot underflow to X1 = 0.
    const double radius = plummerRadiusFromLogMass(logMassCut + std::log(uniformOpen(engine)));
    double x, y, z;
    isotropicVector(radius, engine, x, y, z);

    const double escapeSpeed = std::sqrt(2.0) * std::pow(1.0 + radius * radius, -0.25);
    const double speed = drawSpeedFraction(engine) * escapeSpeed;
    double vx, vy, vz;
    isotropicVector(speed, engine, vx, vy, vz);

    particles.x[i] = x * kPlummerScaleRadius;
    particles.y[i] = y * kPlummerScaleRadius;
    particles.z[i] = z * kPlummerScaleRadius;
    particles.vx[i] = vx * velocityScale;
    particles.vy[i] = vy * velocityScale;
    particles.vz[i] = vz * velocityScale;
    particles.mass[i] = bodyMass;
    particles.id[i] = i;
  }

  double totalMass = 0.0;
  for (double m : particles.mass) totalMass += m;
  for (int pass = 0; pass < 2; ++pass) {
    for (auto* array : {&particles.x, &particles.y, &particles.z, &particles.vx, &particles.vy, &particles.vz}) {
      subtractWeightedMean(*array, particles.mass, totalMass);
    }
  }
  return particles;
}

}  // namespace matcha::ic
