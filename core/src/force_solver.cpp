// SPDX-License-Identifier: MIT
#include "matcha/core/force_solver.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <limits>

#include "matcha/core/errors.hpp"

namespace matcha {

void ForceSolver::clearUnwantedPotentials(Particles& particles) const {
  if (potentialsWanted_) return;
  double* pot = particles.pot.data();
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, particles.pot.size(), std::size_t{1} << 16),
                    [&](const tbb::blocked_range<std::size_t>& r) {
                      std::fill(pot + r.begin(), pot + r.end(), std::numeric_limits<double>::quiet_NaN());
                    });
}

void ForceSolver::setSoftening(double /*eps*/) {
  throw InputError("the softening of " + describe() + " cannot change during a run");
}

void ForceSolver::setLongRangeSteps(bool on) {
  MATCHA_ASSERT(!on, "long-range steps asked of " + describe() + ", which computes the whole force at every call");
}

void ForceSolver::computeLongRange(Particles& /*particles*/) {
  MATCHA_ASSERT(false, "computeLongRange asked of " + describe() + ", which has no long range of its own");
}

const char* phaseName(Phase phase) {
  switch (phase) {
    case Phase::estimate:
      return "estimate";
    case Phase::keys:
      return "keys";
    case Phase::sort:
      return "sort";
    case Phase::octree:
      return "octree";
    case Phase::multipoles:
      return "multipoles";
    case Phase::groups:
      return "groups";
    case Phase::walk:
      return "walk";
    case Phase::upload:
      return "upload";
    case Phase::kernels:
      return "kernels";
    case Phase::download:
      return "download";
    case Phase::repair:
      return "repair";
    case Phase::motion:
      return "motion";
    case Phase::mesh:
      return "mesh";
    case Phase::decomposition:
      return "decomposition";
    case Phase::exchange:
      return "exchange";
    case Phase::count:
      break;
  }
  return "unknown";
}

double ForceTimings::treeSeconds() const {
  return (*this)[Phase::keys] + (*this)[Phase::sort] + (*this)[Phase::octree] + (*this)[Phase::multipoles] +
         (*this)[Phase::groups];
}

double ForceTimings::engineSeconds() const {
  return (*this)[Phase::upload] + (*this)[Phase::kernels] + (*this)[Phase::download];
}

ForceTimings& ForceTimings::operator+=(const ForceTimings& other) {
  for (int p = 0; p < kNumPhases; ++p) seconds[p] += other.seconds[p];
  totalSeconds += other.totalSeconds;
  rebuildWaitSeconds += other.rebuildWaitSeconds;
  engineWaitSeconds += other.engineWaitSeconds;
  meshWaitSeconds += other.meshWaitSeconds;
  return *this;
}

}  // namespace matcha
