// SPDX-License-Identifier: MIT
#include "matcha/testing/periodic_reference.hpp"

#include <tbb/parallel_for.h>

#include <cmath>
#include <cstdint>
#include <unordered_map>

#include "matcha/core/errors.hpp"
#include "matcha/core/pair_interaction.hpp"

namespace matcha::testing {

namespace {

/// The nearest image of a separation of any length (bodies anywhere, not only in [0, L)^3, as the mesh's tests have
/// them), where core's nearestImage folds at most one box length.
double nearestImageOfAny(double d, double boxSize) { return d - boxSize * std::nearbyint(d / boxSize); }

}  // namespace

Particles bruteForceShortRange(Particles p, const GravityParams& gravity) {
  const PeriodicSplit& split = gravity.periodic;
  const double invTwoSplit = 0.5 / split.splitRadius, cutoff2 = split.cutoffRadius * split.cutoffRadius;
  const Particles at = p;  // the positions, read by every task while each writes its own bodies' forces
  tbb::parallel_for(std::size_t{0}, p.size(), [&](std::size_t i) {
    double ax = 0, ay = 0, az = 0, pot = 0;
    for (std::size_t j = 0; j < p.size(); ++j) {
      if (j == i) continue;
      accumulateTruncatedPairInteraction<double>(nearestImageOfAny(at.x[j] - at.x[i], split.boxSize),
                                                 nearestImageOfAny(at.y[j] - at.y[i], split.boxSize),
                                                 nearestImageOfAny(at.z[j] - at.z[i], split.boxSize), at.mass[j],
                                                 gravity.eps2(), invTwoSplit, cutoff2, ax, ay, az, pot);
    }
    p.ax[i] = gravity.G * ax;
    p.ay[i] = gravity.G * ay;
    p.az[i] = gravity.G * az;
    p.pot[i] = gravity.G * pot;
  });
  return p;
}

std::vector<double> errorsOverRmsById(const Particles& computed, const Particles& reference) {
  MATCHA_ASSERT(computed.size() == reference.size(), "errorsOverRmsById: other bodies");
  std::unordered_map<std::uint64_t, std::size_t> slotOf;
  double rms = 0;
  for (std::size_t k = 0; k < reference.size(); ++k) {
    slotOf[reference.id[k]] = k;
    rms += reference.ax[k] * reference.ax[k] + reference.ay[k] * reference.ay[k] + reference.az[k] * reference.az[k];
  }
  rms = std::sqrt(rms / double(reference.size()));
  std::vector<double> errors(computed.size());
  for (std::size_t i = 0; i < computed.size(); ++i) {
    const auto found = slotOf.find(computed.id[i]);
    MATCHA_ASSERT(found != slotOf.end(), "errorsOverRmsById: a body the reference does not have");
    const std::size_t k = found->second;
    errors[i] = std::hypot(computed.ax[i] - reference.ax[k], computed.ay[i] - reference.ay[k],
                           computed.az[i] - reference.az[k]) /
                rms;
  }
  return errors;
}

}  // namespace matcha::testing
