// SPDX-License-Identifier: MIT
// What the integrator and the apps see of gravity: one call that fills accelerations and potentials.
#pragma once

#include <algorithm>
#include <limits>
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

  /// Overwrites particles.{ax,ay,az,pot} for every body (pot with NaN when potentials are not wanted). May reorder
  /// the bodies (all arrays together, see Particles); callers must not keep indices across the call, only ids.
  virtual ForceReport computeForces(Particles& particles) = 0;

  /// Whether computeForces must compute potentials (the default). A caller that takes them from elsewhere, such as
  /// a run whose energy diagnostics use direct-sum potentials (integrator::RunCallbacks::outputPotentials), turns
  /// them off: the engines then compute accelerations only (ForceView::pot null), the same accelerations faster, and
  /// pot is set to NaN, so that no stale potential passes for a current one.
  void setPotentialsWanted(bool wanted) { potentialsWanted_ = wanted; }
  bool potentialsWanted() const { return potentialsWanted_; }

  /// Describes the solver and its engine, e.g. "tree (theta 0.5, ncrit 64, nleaf 16) on cpu-float".
  virtual std::string describe() const = 0;

 protected:
  /// Where an engine writes for `particles`: its forces, without the potential when it is not wanted.
  ForceView forcesToWrite(Particles& particles) const {
    ForceView view = particles.forces();
    if (!potentialsWanted_) view.pot = nullptr;
    return view;
  }
  /// Ends a call: pot = NaN for every body when potentials were not wanted.
  void clearUnwantedPotentials(Particles& particles) const {
    if (!potentialsWanted_)
      std::fill(particles.pot.begin(), particles.pot.end(), std::numeric_limits<double>::quiet_NaN());
  }

 private:
  bool potentialsWanted_ = true;
};

}  // namespace matcha
