// SPDX-License-Identifier: MIT
// What the integrator and the apps see of gravity: one call that fills accelerations and potentials.
#pragma once

#include <string>

#include "matcha/core/interaction_plan.hpp"
#include "matcha/core/particles.hpp"

namespace matcha {

/// Wall-clock seconds spent in each stage of one force call. Stages that overlap are timed separately.
struct ForceTimings {
  double treeSeconds = 0.0;    ///< keys, sort, octree build, multipoles, groups
  double walkSeconds = 0.0;    ///< tree walks and plan building
  double engineSeconds = 0.0;  ///< near-field evaluation
  double totalSeconds = 0.0;   ///< whole call
};

struct ForceReport {
  InteractionCounts counts;
  ForceTimings timings;
};

class ForceSolver {
 public:
  virtual ~ForceSolver() = default;

  /// Overwrites particles.{ax,ay,az,pot} for every body. May reorder the bodies (all arrays together, see
  /// Particles); callers must not keep indices across the call, only ids.
  virtual ForceReport computeForces(Particles& particles) = 0;

  /// Describes the solver and its engine, e.g. "tree (theta 0.5, ncrit 64, nleaf 16) on cpu-float".
  virtual std::string describe() const = 0;
};

}  // namespace matcha
