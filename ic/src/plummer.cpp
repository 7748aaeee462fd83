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

Particles makePlummerRange(const PlummerParams& params, std::size_t first, std::size_t count) {
  if (params.numBodies == 0) throw InputError("Plummer sphere needs at least one body");
  checkMassCut(params.massCut);
  if (first > params.numBodies || count > params.numBodies - first) {
    throw InputError("Plummer sphere of " + std::to_string(params.numBodies) + " bodies has no bodies " +
                     std::to_string(first) + " to " + std::to_string(first + count - 1));
  }
  Particles particles(count);
  std::mt19937_64 engine(params.seed);
  const double logMassCut = std::log(params.massCut);
  const double velocityScale = std::sqrt(16.0 / (3.0 * kPi));
  const double bodyMass = 1.0 / static_cast<double>(params.numBodies);
  for (std::size_t i = 0; i < first; ++i) detail::samplePlummerBody(logMassCut, engine);  // another piece's bodies
  for (std::size_t i = 0; i < count; ++i) {
    const detail::PhasePoint body = detail::samplePlummerBody(logMassCut, engine);
    body.storeScaled(particles, i, kPlummerScaleRadius, velocityScale);
    particles.mass[i] = bodyMass;
    particles.id[i] = first + i;
  }
  return particles;
}

void PlummerCentring::add(const Particles& piece, double* sums) {
  // One loop per sum, in body order: each sum rounds as a loop over every body in id order would.
  for (const double m : piece.mass) sums[0] += m;
  const std::vector<double>* values[6] = {&piece.x, &piece.y, &piece.z, &piece.vx, &piece.vy, &piece.vz};
  for (int k = 0; k < 6; ++k) {
    double weighted = sums[1 + k];
    for (std::size_t i = 0; i < piece.size(); ++i) weighted += piece.mass[i] * (*values[k])[i];
    sums[1 + k] = weighted;
  }
}

void PlummerCentring::subtract(const double* sums, Particles& piece) {
  std::vector<double>* values[6] = {&piece.x, &piece.y, &piece.z, &piece.vx, &piece.vy, &piece.vz};
  for (int k = 0; k < 6; ++k) {
    const double mean = sums[1 + k] / sums[0];
    for (double& value : *values[k]) value -= mean;
  }
}

Particles makePlummer(const PlummerParams& params) {
  Particles particles = makePlummerRange(params, 0, params.numBodies);
  // Twice: the second pass removes the rounding left by the first (the mean is computed from ~N terms of size ~1),
  // so the residual is ~1e-16.
  for (int pass = 0; pass < 2; ++pass) {
    PlummerCentring::Sums sums{};
    PlummerCentring::add(particles, sums);
    PlummerCentring::subtract(sums, particles);
  }
  return particles;
}

}  // namespace matcha::ic
