// SPDX-License-Identifier: MIT
#include "matcha/core/force_error.hpp"

#include <algorithm>
#include <cmath>

#include "matcha/core/errors.hpp"

namespace matcha {

std::vector<double> relativeForceErrors(const AccelerationSet& test, const AccelerationSet& reference) {
  const std::size_t n = reference.ax.size();
  MATCHA_ASSERT(test.ax.size() == n && test.ay.size() == n && test.az.size() == n && reference.ay.size() == n &&
                    reference.az.size() == n,
                "force sets differ in length");
  std::vector<double> errors(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double dx = test.ax[i] - reference.ax[i];
    const double dy = test.ay[i] - reference.ay[i];
    const double dz = test.az[i] - reference.az[i];
    const double norm = std::sqrt(reference.ax[i] * reference.ax[i] + reference.ay[i] * reference.ay[i] +
                                  reference.az[i] * reference.az[i]);
    const double difference = std::sqrt(dx * dx + dy * dy + dz * dz);
    errors[i] = norm > 0.0 ? difference / norm : difference;
  }
  return errors;
}

double percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0.0;
  const auto rank = static_cast<std::size_t>(std::ceil(std::clamp(q, 0.0, 1.0) * double(values.size())));
  const std::size_t index = rank == 0 ? 0 : rank - 1;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(index), values.end());
  return values[index];
}

ForceErrorStats summariseForceErrors(const AccelerationSet& test, const AccelerationSet& reference) {
  const std::vector<double> errors = relativeForceErrors(test, reference);
  ForceErrorStats stats;
  stats.count = errors.size();
  if (errors.empty()) return stats;
  stats.median = percentile(errors, 0.5);
  stats.p90 = percentile(errors, 0.9);
  stats.p99 = percentile(errors, 0.99);
  stats.max = *std::max_element(errors.begin(), errors.end());
  double sum2 = 0.0;
  for (double e : errors) sum2 += e * e;
  stats.rms = std::sqrt(sum2 / double(errors.size()));
  return stats;
}

}  // namespace matcha
