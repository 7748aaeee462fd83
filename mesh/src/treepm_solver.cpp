// SPDX-License-Identifier: MIT
#include "matcha/mesh/treepm_solver.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <optional>
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
    : TreePmSolver(std::move(shortRange), meshParams, gravity, LongRange{}, {}) {}

TreePmSolver::TreePmSolver(std::unique_ptr<ForceSolver> shortRange, const MeshParams& meshParams,
                           const GravityParams& gravity, LongRange longRange, std::string longRangeName)
    : shortRange_(std::move(shortRange)),
      meshParams_(meshParams),
      longRange_(std::move(longRange)),
      longRangeName_(std::move(longRangeName)),
      gravity_(gravity) {
  MATCHA_ASSERT(shortRange_ != nullptr, "TreePM without a short-range solver");
  if (!longRange_) mesh_.emplace(meshParams);
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
  longRangeKept_ = false;
  MATCHA_ASSERT(lowestActiveBin() == 0 || (longRangeStepsOn() && !longRangeDue()),
                "a call with the long range asked for the forces of some bodies only");
  shortRange_->setLowestActiveBin(lowestActiveBin());
  shortRange_->setBodyDrift(bodyDrift());
  if (longRangeStepsOn() && !longRangeDue()) {
    // Within a long-range step: the short range alone, which makes the caller's drift where it left it to the call.
    shortRange_->setPendingDrift(takePendingDrift());
    ForceReport report;
    try {
      report = shortRange_->computeForces(particles);
    } catch (...) {
      shortRange_->takePendingDrift();  // refers to the caller's step, which ends here
      throw;
    }
    shortRange_->runPendingDrift();  // where it did not
    report.timings.totalSeconds = total.seconds();
    return report;
  }
  runPendingDrift();  // the mesh reads the positions
  // On the GPU the mesh runs beside the short range: it starts on the bodies in the order the call found them (in a
  // run, nearly the order of the last tree's sort, in which the deposit and interpolation touch neighbouring mesh
  // points in turn) while the short range's GPU sorts its keys (ForceSolver::setUnsortedBodiesHook: the mesh's copy of
  // the bodies to page-locked memory, ~15 ms of a 2^24 call on the H200's host, then runs while the cores would wait
  // for the bus), and is done before the short range's kernels need the GPU (started after the sort, its ~100 ms at
  // 512^3 ran under them: 2^24 clumps on the H200). The short range says through its sorted-bodies hook how it
  // reordered the bodies; the mesh gathers its results into that order on the GPU, and they are added after the short
  // range, as the sequential call adds them. A call that sorts nothing (a reused tree's) starts the mesh at that hook,
  // which it calls first thing, on the order it keeps.
  bool started = false;
  const auto start = [&](const SourceView& bodies) {
    if (started) return;
    mesh_->startLongRange(bodies, gravity_, wantPotentials);
    started = true;
  };
  const bool beside =
      mesh_ && mesh_->runsBeside() &&
      shortRange_->setSortedBodiesHook([&](const SourceView& bodies, std::span<const std::uint32_t> order) {
        if (started) {
          mesh_->reorderLongRange(order);
        } else {
          start(bodies);  // already in the order the call leaves them
        }
      });
  const bool startsAtSort = beside && shortRange_->setUnsortedBodiesHook(start);
  // With long-range steps the mesh's accelerations go to their own arrays first (its potentials to the bodies'), then
  // onto the short range's: the integrator kicks with the two parts apart.
  const bool keep = longRangeStepsOn();
  // Else the mesh's forces, once the short range asks for them (its last lists go to the GPU), are added by its
  // engine as it copies its own forces out, under the GPU's last kernels: after the call, that pass over the bodies
  // took ~13 ms of a 2^24 call (H200 host). A call that does not ask (a reused tree's) leaves the add to finish below.
  // The short range asks after its sorted-bodies hook, which has started the mesh.
  std::optional<LongRangeForces> collected;
  const bool handOver = beside && !keep && shortRange_->setForceAddendProvider([&] {
    MATCHA_ASSERT(started, "TreePmSolver: the mesh's forces asked for before the short range's sorted-bodies hook");
    collected = mesh_->collectLongRange(particles.sources(), gravity_);
    return collected->forces;
  });
  const auto unhook = [&] {
    if (beside) shortRange_->setSortedBodiesHook({});
    if (startsAtSort) shortRange_->setUnsortedBodiesHook({});
    if (handOver) shortRange_->setForceAddendProvider({});
  };
  ForceReport report;
  try {
    report = shortRange_->computeForces(particles);
  } catch (...) {
    unhook();
    if (mesh_) mesh_->abandonLongRange();
    throw;
  }
  unhook();
  MATCHA_ASSERT(collected.has_value() == report.addendTaken, "TreePmSolver: the mesh's forces taken but not added");
  if (collected) {
    report.timings[Phase::mesh] += collected->timing.seconds;
    report.timings.meshWaitSeconds += collected->timing.waitSeconds;
    clearUnwantedPotentials(particles);
    report.timings.totalSeconds = total.seconds();
    return report;
  }
  const Stopwatch clock;
  ForceView meshOut = forcesToWrite(particles);
  if (keep) {
    zeroLongRange(particles.size());
    meshOut.ax = longX_.data();
    meshOut.ay = longY_.data();
    meshOut.az = longZ_.data();
  }
  if (started) {
    const LongRangeTiming timing = mesh_->finishLongRange(particles.sources(), gravity_, meshOut);
    report.timings[Phase::mesh] += timing.seconds;
    report.timings.meshWaitSeconds += timing.waitSeconds;
  } else {
    addLongRange(particles, meshOut);
    report.timings[Phase::mesh] += clock.seconds();
  }
  if (keep) {
    const Stopwatch adding;
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, particles.size(), std::size_t{1} << 14),
                      [&](const tbb::blocked_range<std::size_t>& r) {
                        for (std::size_t i = r.begin(); i != r.end(); ++i) {
                          particles.ax[i] += longX_[i];
                          particles.ay[i] += longY_[i];
                          particles.az[i] += longZ_[i];
                        }
                      });
    report.timings[Phase::mesh] += adding.seconds();
    longRangeKept_ = true;
  }
  clearUnwantedPotentials(particles);
  report.timings.totalSeconds = total.seconds();
  return report;
}

void TreePmSolver::setLongRangeSteps(bool on) {
  longRangeSteps_ = on;
  longRangeKept_ = false;
  if (!on) {
    longX_ = {};
    longY_ = {};
    longZ_ = {};
  }
}

AccelerationView TreePmSolver::lastLongRange() const {
  if (!longRangeKept_) return {};
  return AccelerationView{longX_.data(), longY_.data(), longZ_.data(), longX_.size()};
}

void TreePmSolver::zeroLongRange(std::size_t count) {
  longX_.resize(count);
  longY_.resize(count);
  longZ_.resize(count);
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, count, std::size_t{1} << 14),
                    [&](const tbb::blocked_range<std::size_t>& r) {
                      std::fill(longX_.begin() + r.begin(), longX_.begin() + r.end(), 0.0);
                      std::fill(longY_.begin() + r.begin(), longY_.begin() + r.end(), 0.0);
                      std::fill(longZ_.begin() + r.begin(), longZ_.begin() + r.end(), 0.0);
                    });
}

void TreePmSolver::computeLongRange(Particles& particles) {
  const std::size_t n = particles.size();
  zeroLongRange(n);
  addLongRange(particles, ForceView{longX_.data(), longY_.data(), longZ_.data(), nullptr, n});
  longRangeKept_ = true;
}

void TreePmSolver::addLongRange(const Particles& particles, const ForceView& out) {
  if (mesh_) {
    mesh_->addLongRange(particles.sources(), gravity_, out);
  } else {
    longRange_(particles.sources(), gravity_, out);
  }
}

void TreePmSolver::setDensityReduction(ParticleMesh::DensityReduction reduce) {
  MATCHA_ASSERT(mesh_.has_value(), "TreePmSolver::setDensityReduction without a mesh of its own");
  mesh_->setDensityReduction(std::move(reduce));
  replicated_ = true;
}

void TreePmSolver::setSoftening(double eps) {
  shortRange_->setSoftening(eps);
  gravity_ = gravity_.withSoftening(eps);
}

std::string TreePmSolver::describe() const {
  const MeshParams& p = meshParams_;
  std::ostringstream text;
  text.precision(4);
  text << "TreePM (mesh " << p.grid << "^3 on " << (mesh_ ? toString(p.backend) : longRangeName_)
       << (replicated_ ? " on every rank, the ranks' deposits summed" : "") << ", " << toString(p.assignment) << ", "
       << toString(p.gradient) << (p.interlace ? ", interlaced" : "") << ", a_smooth " << p.aSmooth << ", r_cut "
       << p.cutoffFactor << " r_s" << (mesh_ && mesh_->runsBeside() ? ", beside the short range" : "") << ") + "
       << shortRange_->describe();
  return text.str();
}

}  // namespace matcha::mesh
