// SPDX-License-Identifier: MIT
#include "matcha/mesh/treepm_solver.hpp"

#include <sstream>
#include <utility>

#include "matcha/core/errors.hpp"
#include "matcha/core/stopwatch.hpp"

namespace matcha::mesh {

PeriodicSplit periodicSplit(const MeshParams& params) {
  params.validate();
  PeriodicSplit split;
  split.boxSize = params.boxSize;
  split.splitRadius = params.splitRadius();
  split.cutoffRadius = params.cutoffRadius();
  return split;
}

TreePmSolver::TreePmSolver(std::unique_ptr<ForceSolver> shortRange, const MeshParams& meshParams,
                           const GravityParams& gravity)
    : shortRange_(std::move(shortRange)), mesh_(meshParams), gravity_(gravity) {
  MATCHA_ASSERT(shortRange_ != nullptr, "TreePM without a short-range solver");
  gravity_.validate();
  const PeriodicSplit split = periodicSplit(meshParams);
  MATCHA_ASSERT(gravity_.periodic.boxSize == split.boxSize && gravity_.periodic.splitRadius == split.splitRadius &&
                    gravity_.periodic.cutoffRadius == split.cutoffRadius,
                "the short range and the mesh must split the force at the same r_s and r_cut");
}

ForceReport TreePmSolver::computeForces(Particles& particles) {
  const Stopwatch total;
  const bool wantPotentials = potentialsWanted();
  shortRange_->setPotentialsWanted(wantPotentials);
  // On the GPU the mesh starts as soon as the short range has put the bodies in their final order (its sort, which
  // also makes the deposit and interpolation touch neighbouring mesh points in turn: 1.5x faster than random order at
  // 128^3, README "Particle mesh") and runs beside the tree's build, walk and kernels; its results are added after the
  // short range, as the sequential call adds them.
  bool started = false;
  const bool beside = mesh_.runsBeside() && shortRange_->setSortedBodiesHook([&](const Particles& sorted) {
    mesh_.startLongRange(sorted.sources(), gravity_, wantPotentials);
    started = true;
  });
  ForceReport report;
  try {
    report = shortRange_->computeForces(particles);
  } catch (...) {
    if (beside) shortRange_->setSortedBodiesHook({});
    mesh_.abandonLongRange();
    throw;
  }
  if (beside) shortRange_->setSortedBodiesHook({});
  const Stopwatch clock;
  if (started) {
    const LongRangeTiming timing = mesh_.finishLongRange(particles.sources(), gravity_, forcesToWrite(particles));
    report.timings[Phase::mesh] += timing.seconds;
    report.timings.meshWaitSeconds += timing.waitSeconds;
  } else {
    mesh_.addLongRange(particles.sources(), gravity_, forcesToWrite(particles));
    report.timings[Phase::mesh] += clock.seconds();
  }
  clearUnwantedPotentials(particles);
  report.timings.totalSeconds = total.seconds();
  return report;
}

void TreePmSolver::setSoftening(double eps) {
  shortRange_->setSoftening(eps);
  gravity_ = gravity_.withSoftening(eps);
}

std::string TreePmSolver::describe() const {
  const MeshParams& p = mesh_.params();
  std::ostringstream text;
  text.precision(4);
  text << "TreePM (mesh " << p.grid << "^3 on " << toString(p.backend) << ", " << toString(p.assignment) << ", "
       << toString(p.gradient) << (p.interlace ? ", interlaced" : "") << ", a_smooth " << p.aSmooth << ", r_cut "
       << p.cutoffFactor << " r_s" << (mesh_.runsBeside() ? ", beside the short range" : "") << ") + "
       << shortRange_->describe();
  return text.str();
}

}  // namespace matcha::mesh
