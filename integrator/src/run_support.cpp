// SPDX-License-Identifier: MIT
#include "run_support.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <cmath>
#include <cstdio>

namespace matcha::integrator {

namespace detail {

void copyState(const Particles& from, Particles& to) {
  const std::size_t n = from.size();
  if (to.size() != n) to.resize(n);
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n, 8192), [&](const tbb::blocked_range<std::size_t>& block) {
    const auto first = static_cast<std::ptrdiff_t>(block.begin());
    const auto last = static_cast<std::ptrdiff_t>(block.end());
    for (const auto member :
         {&Particles::x, &Particles::y, &Particles::z, &Particles::vx, &Particles::vy, &Particles::vz, &Particles::mass,
          &Particles::ax, &Particles::ay, &Particles::az, &Particles::pot}) {
      std::copy((from.*member).begin() + first, (from.*member).begin() + last, (to.*member).begin() + first);
    }
    std::copy(from.id.begin() + first, from.id.begin() + last, to.id.begin() + first);
  });
}

std::string describeNonFinite(const char* stepName, std::uint64_t step, double time,
                              const std::optional<NonFiniteValue>& value, const Diagnostics* diagnostics) {
  char head[96];
  std::snprintf(head, sizeof head, "%s %llu, t = %.17g: ", stepName, static_cast<unsigned long long>(step), time);
  char body[160];
  if (value) {
    // "nan", not glibc's "-nan" for a NaN with its sign bit set: the sign of a NaN means nothing.
    const std::string shown = std::isnan(value->value) ? "nan" : (value->value > 0 ? "inf" : "-inf");
    std::snprintf(body, sizeof body, "body id %llu (index %zu): %s = %s", static_cast<unsigned long long>(value->id),
                  value->index, value->quantity.c_str(), shown.c_str());
  } else {
    std::snprintf(
        body, sizeof body, "energy E = %g (T = %g, W = %g)", diagnostics != nullptr ? diagnostics->total : 0.0,
        diagnostics != nullptr ? diagnostics->kinetic : 0.0, diagnostics != nullptr ? diagnostics->potential : 0.0);
  }
  return std::string("a value is not finite at ") + head + body;
}

}  // namespace detail

}  // namespace matcha::integrator
