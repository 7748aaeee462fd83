// SPDX-License-Identifier: MIT
// Hermite results (acceleration, jerk, potential, nearest neighbour) against a reference, per i-particle: what the
// CUDA Hermite engine's test and the C libraries' tests check against the CPU Hermite engine in double.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "matcha/core/force_error.hpp"
#include "matcha/testing/hermite_inputs.hpp"

namespace matcha::testing {

inline double norm3(const std::vector<double>& v, std::size_t i) {
  return std::hypot(v[3 * i], v[3 * i + 1], v[3 * i + 2]);
}

inline double difference3(const std::vector<double>& a, const std::vector<double>& b, std::size_t i) {
  return std::hypot(a[3 * i] - b[3 * i], a[3 * i + 1] - b[3 * i + 1], a[3 * i + 2] - b[3 * i + 2]);
}

/// Relative errors of results against a reference, per i-particle.
struct HermiteComparison {
  std::vector<double> acc, jerk, pot;
  std::size_t unwritten = 0;            ///< outputs still poisoned, or not finite
  std::size_t neighbourMismatches = 0;  ///< a different nearest neighbour that is not a tie (within 1e-5)
  double nearestDistanceError = 0.0;    ///< largest relative error of the nearest distance^2

  /// Prints the percentiles (50, 90, 99, max) of each error, one line each, under `what`.
  void print(const char* what) const {
    const auto line = [&](const char* name, const std::vector<double>& errors) {
      std::printf("  %-4s p50 %.2e  p90 %.2e  p99 %.2e  max %.2e\n", name, percentile(errors, 0.5),
                  percentile(errors, 0.9), percentile(errors, 0.99), percentile(errors, 1.0));
    };
    std::printf("%s: relative errors against the CPU Hermite engine (double), %zu i-particles\n", what, pot.size());
    line("acc", acc);
    line("jerk", jerk);
    line("pot", pot);
  }
};

/// `results` against `reference` for `block` (i-particles) and the j-particles `js` (at time 0, for telling a tie
/// from a wrong neighbour: another neighbour is right only when it is as near, in double, to 1e-5).
inline HermiteComparison compareHermite(const HermiteResults& results, const HermiteResults& reference,
                                        const std::vector<JParticle>& js, const IBlock& block) {
  HermiteComparison c;
  const auto relative = [](double error, double scale) { return scale > 0 ? error / scale : error; };
  for (std::size_t i = 0; i < reference.size(); ++i) {
    for (int d = 0; d < 3; ++d) {
      if (!std::isfinite(results.acc[3 * i + d]) || !std::isfinite(results.jerk[3 * i + d])) ++c.unwritten;
    }
    if (!std::isfinite(results.pot[i]) || results.nearestId[i] == -7) ++c.unwritten;
    c.acc.push_back(relative(difference3(results.acc, reference.acc, i), norm3(reference.acc, i)));
    c.jerk.push_back(relative(difference3(results.jerk, reference.jerk, i), norm3(reference.jerk, i)));
    c.pot.push_back(relative(std::abs(results.pot[i] - reference.pot[i]), std::abs(reference.pot[i])));
    if (reference.nearestId[i] < 0) {
      if (results.nearestId[i] != -1) ++c.neighbourMismatches;
      continue;
    }
    if (!std::isnan(results.nearestDistance2[i])) {
      c.nearestDistanceError = std::max(c.nearestDistanceError,
                                        relative(std::abs(results.nearestDistance2[i] - reference.nearestDistance2[i]),
                                                 reference.nearestDistance2[i]));
    }
    if (results.nearestId[i] == reference.nearestId[i]) continue;
    const auto found =
        std::find_if(js.begin(), js.end(), [&](const JParticle& p) { return p.id == results.nearestId[i]; });
    if (found == js.end()) {
      ++c.neighbourMismatches;
      continue;
    }
    double r2 = 0.0;
    for (int d = 0; d < 3; ++d) r2 += std::pow(found->pos[d] - block.pos[3 * i + d], 2);
    if (std::abs(r2 - reference.nearestDistance2[i]) > 1e-5 * reference.nearestDistance2[i]) ++c.neighbourMismatches;
  }
  return c;
}

}  // namespace matcha::testing
