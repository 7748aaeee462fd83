// SPDX-License-Identifier: MIT
#include "matcha/integrator/leapfrog.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <string>
#include <vector>

#include "matcha/core/errors.hpp"
#include "matcha/core/params.hpp"
#include "matcha/core/stopwatch.hpp"

namespace matcha::integrator {

namespace {

/// Fewest bodies per TBB task. A kick or drift is 3 multiply-adds over 9 arrays per body, about a nanosecond, so a
/// block of 2048 is worth a task (a task costs about a microsecond); a few thousand bodies already use two threads.
constexpr std::size_t kBodiesPerTask = 2048;

/// out[i] += in[i] * dt for the three components, on every body, in blocks over the TBB threads.
void addScaled(std::vector<double>& outX, std::vector<double>& outY, std::vector<double>& outZ,
               const std::vector<double>& inX, const std::vector<double>& inY, const std::vector<double>& inZ,
               double dt) {
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, outX.size(), kBodiesPerTask),
                    [&](const tbb::blocked_range<std::size_t>& block) {
                      for (std::size_t i = block.begin(); i < block.end(); ++i) {
                        outX[i] += inX[i] * dt;
                        outY[i] += inY[i] * dt;
                        outZ[i] += inZ[i] * dt;
                      }
                    });
}

}  // namespace

void kick(Particles& p, double dt) { addScaled(p.vx, p.vy, p.vz, p.ax, p.ay, p.az, dt); }

void drift(Particles& p, double dt) { addScaled(p.x, p.y, p.z, p.vx, p.vy, p.vz, dt); }

LeapfrogKDK::LeapfrogKDK(ForceSolver& solver, double dt) : solver_(solver), dt_(dt) {
  requireFinite(dt, "dt");
  if (dt <= 0.0) throw InputError("dt must be > 0 (got " + std::to_string(dt) + ")");
}

ForceReport LeapfrogKDK::initialize(Particles& p) {
  const ForceReport report = solver_.computeForces(p);
  initialized_ = true;
  return report;
}

StepReport LeapfrogKDK::step(Particles& p) {
  MATCHA_ASSERT(initialized_, "LeapfrogKDK::step called before initialize");
  const double halfStep = 0.5 * dt_;
  StepReport report;
  const Stopwatch wall;
  Stopwatch clock;
  kick(p, halfStep);
  drift(p, dt_);
  report.integrationSeconds = clock.seconds();
  // The solver may permute the bodies here; kick and drift are elementwise, so nothing indexed survives the call.
  report.force = solver_.computeForces(p);
  clock.restart();
  kick(p, halfStep);
  report.integrationSeconds += clock.seconds();
  ++stepsTaken_;
  report.wallSeconds = wall.seconds();
  return report;
}

}  // namespace matcha::integrator
