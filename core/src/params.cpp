// SPDX-License-Identifier: MIT
#include "matcha/core/params.hpp"

#include <cmath>
#include <iomanip>
#include <sstream>

#include "matcha/core/errors.hpp"

namespace matcha {

void requireFinite(double value, const std::string& name) {
  if (!std::isfinite(value)) throw InputError(name + " must be a finite number");
}

void GravityParams::validate() const {
  requireFinite(G, "G");
  requireFinite(eps, "eps");
  if (G <= 0.0) throw InputError("G must be > 0");
  if (eps < 0.0) throw InputError("eps must be >= 0 (got " + std::to_string(eps) + ")");
  periodic.validate();
}

GravityParams GravityParams::withSoftening(double softening) const {
  GravityParams changed = *this;
  changed.eps = softening;
  changed.validate();
  return changed;
}

void PeriodicSplit::validate() const {
  if (!enabled()) return;
  requireFinite(boxSize, "box size");
  if (boxSize < 0.0) throw InputError("box size must be > 0 (got " + std::to_string(boxSize) + ")");
  requireFinite(splitRadius, "split radius");
  requireFinite(cutoffRadius, "cutoff radius");
  if (!(splitRadius > 0.0 && cutoffRadius >= splitRadius)) {
    throw InputError("the periodic split needs 0 < r_s <= r_cut (got r_s " + std::to_string(splitRadius) + ", r_cut " +
                     std::to_string(cutoffRadius) + ")");
  }
  if (!(cutoffRadius < 0.5 * boxSize)) {
    std::ostringstream message;
    message << std::setprecision(6) << "the short-range cutoff r_cut = " << cutoffRadius
            << " must be below half the box (" << 0.5 * boxSize
            << "): use a finer mesh (--pm-grid) or a smaller a_smooth or cutoff factor";
    throw InputError(message.str());
  }
}

void TreeParams::validate() const {
  requireFinite(theta, "theta");
  if (!(theta > 0.0 && theta <= 1.5)) throw InputError("theta must be in (0, 1.5] (got " + std::to_string(theta) + ")");
  requireFinite(alpha, "alpha");
  if (alpha < 0.0) throw InputError("alpha must be >= 0 (got " + std::to_string(alpha) + ")");
  if (ncrit < 1) throw InputError("ncrit must be >= 1");
  if (nleaf < 1) throw InputError("nleaf must be >= 1");
  if (maxBatchEntries < 1 || maxBatchEntries > (std::uint64_t{3} << 30)) {
    throw InputError("maxBatchEntries must be in [1, 3 * 2^30] (the engine's arenas are indexed in 32 bits)");
  }
  if (reuse > 64) throw InputError("reuse must be 0 (chosen from measured costs), 1 (off) or a step count up to 64");
}

void IntegratorParams::validate() const {
  requireFinite(dt, "dt");
  requireFinite(tEnd, "t-end");
  requireFinite(outputInterval, "output-interval");
  if (dt <= 0.0) throw InputError("dt must be > 0 (got " + std::to_string(dt) + ")");
  requireFinite(tStart, "start time");
  if (!(checkpointInterval >= 0.0)) {
    throw InputError("checkpoint-interval must be >= 0 seconds (got " + std::to_string(checkpointInterval) + ")");
  }
  if (tEnd < 0.0) throw InputError("t-end must be >= 0 (got " + std::to_string(tEnd) + ")");
  if (tEnd < tStart) {
    std::ostringstream message;
    message << std::setprecision(12) << "t-end " << tEnd << " is before the start time of the initial conditions, "
            << tStart << " (t-end is absolute time)";
    throw InputError(message.str());
  }
  if (outputInterval <= 0.0)
    throw InputError("output-interval must be > 0 (got " + std::to_string(outputInterval) + ")");
  requireFinite(boxSize, "box");
  if (boxSize < 0.0)
    throw InputError("box must be > 0, or 0 for open boundaries (got " + std::to_string(boxSize) + ")");
}

std::string toString(SolverKind kind) { return kind == SolverKind::tree ? "tree" : "direct"; }

std::string toString(MultipoleOrder order) { return order == MultipoleOrder::monopole ? "mono" : "quad"; }

std::string toString(EngineKind kind) {
  switch (kind) {
    case EngineKind::automatic:
      return "auto";
    case EngineKind::cpu:
      return "cpu";
    case EngineKind::cuda:
      return "cuda";
  }
  return "unknown";
}

}  // namespace matcha
