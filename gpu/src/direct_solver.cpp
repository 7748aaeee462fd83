// SPDX-License-Identifier: MIT
#include "matcha/gpu/direct_solver.hpp"

#include "matcha/core/stopwatch.hpp"

namespace matcha::gpu {

DirectSolver::DirectSolver(NearFieldEngine& engine, const GravityParams& gravity, BodyOrdering ordering)
    : engine_(engine), gravity_(gravity), ordering_(std::move(ordering)) {
  gravity_.validate();
}

ForceReport DirectSolver::computeForces(Particles& particles) {
  Stopwatch clock;
  ForceReport report;
  if (ordering_) ordering_(particles);
  report.counts = engine_.evaluateDirect(particles.sources(), gravity_, forcesToWrite(particles));
  clearUnwantedPotentials(particles);
  report.timings.engineSeconds = clock.seconds();
  report.timings.totalSeconds = report.timings.engineSeconds;
  return report;
}

std::string DirectSolver::describe() const { return "direct summation on " + engine_.name(); }

}  // namespace matcha::gpu
