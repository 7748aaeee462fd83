// SPDX-License-Identifier: MIT
#include "matcha/ic/plummer.hpp"

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "matcha/core/errors.hpp"
#include "sampling.hpp"

namespace matcha::ic {

namespace {

constexpr double kPi = 3.14159265358979323846;

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
  return kPlummerScaleRadius * detail::plummerRadiusFromLogMass(std::log(massCut));
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
    const detail::PhasePoint body = detail::samplePlummerBody(logMassCut, engine);
    body.storeScaled(particles, i, kPlummerScaleRadius, velocityScale);
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
