// SPDX-License-Identifier: MIT
// Relative force errors against a reference, summarised as percentiles: the accuracy report of `matcha compare`
// and the assertion of the accuracy tests (STYLE.md habit 4).
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace matcha {

/// Accelerations of a set of bodies, component arrays of equal length.
struct AccelerationSet {
  std::span<const double> ax, ay, az;
};

struct ForceErrorStats {
  std::size_t count = 0;
  double median = 0.0;  ///< of |a - a_ref| / |a_ref| over bodies
  double p90 = 0.0;
  double p99 = 0.0;
  double max = 0.0;  ///< the Chamomile E_max when the reference is double-precision direct summation
  double rms = 0.0;
};

/// Per-body relative errors |a - a_ref| / |a_ref|. A body with |a_ref| = 0 (a lone body) gets error |a|, so an
/// engine that invents a force still shows. Allocates the result.
std::vector<double> relativeForceErrors(const AccelerationSet& test, const AccelerationSet& reference);

/// Percentiles (nearest rank) of the relative errors. Throws InvariantError when the sets differ in length.
ForceErrorStats summariseForceErrors(const AccelerationSet& test, const AccelerationSet& reference);

/// Nearest-rank percentile q in [0, 1] of `values` (copied and partially sorted). 0 for an empty input.
double percentile(std::vector<double> values, double q);

}  // namespace matcha
