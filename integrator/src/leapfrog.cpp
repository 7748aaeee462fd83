// SPDX-License-Identifier: MIT
#include "matcha/integrator/leapfrog.hpp"

#include <string>

#include "matcha/core/errors.hpp"
#include "matcha/core/params.hpp"

namespace matcha::integrator {

void kick(Particles& p, double dt) {
  const std::size_t count = p.size();
  for (std::size_t i = 0; i < count; ++i) {
    p.vx[i] += p.ax[i] * dt;
    p.vy[i] += p.ay[i] * dt;
    p.vz[i] += p.az[i] * dt;
  }
}

void drift(Particles& p, double dt) {
  const std::size_t count = p.size();
  for (std::size_t i = 0; i < count; ++i) {
    p.x[i] += p.vx[i] * dt;
    p.y[i] += p.vy[i] * dt;
    p.z[i] += p.vz[i] * dt;
  }
}

LeapfrogKDK::LeapfrogKDK(ForceSolver& solver, double dt) : solver_(solver), dt_(dt) {
  requireFinite(dt, "dt");
  if (dt <= 0.0) throw InputError("dt must be > 0 (got " + std::to_string(dt) + ")");
}

ForceReport LeapfrogKDK::initialize(Particles& p) {
  const ForceReport report = solver_.computeForces(p);
  initialized_ = true;
  return report;
}

ForceReport LeapfrogKDK::step(Particles& p) {
  MATCHA_ASSERT(initialized_, "LeapfrogKDK::step called before initialize");
  const double halfStep = 0.5 * dt_;
  kick(p, halfStep);
  drift(p, dt_);
  // The solver may permute the bodies here; kick and drift are elementwise, so nothing indexed survives the call.
  const ForceReport report = solver_.computeForces(p);
  kick(p, halfStep);
  ++stepsTaken_;
  return report;
}

}  // namespace matcha::integrator
