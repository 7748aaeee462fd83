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
  const EngineTimings engine = engine_.lastTimings();
  report.timings[Phase::upload] = engine.uploadSeconds;
  report.timings[Phase::kernels] = engine.kernelSeconds;
  report.timings[Phase::download] = engine.downloadSeconds;
  report.timings.totalSeconds = clock.seconds();
  return report;
}

void DirectSolver::setSoftening(double eps) { gravity_ = gravity_.withSoftening(eps); }

std::string DirectSolver::describe() const { return "direct summation on " + engine_.name(); }

}  // namespace matcha::gpu
