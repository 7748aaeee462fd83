// SPDX-License-Identifier: MIT
// Periodic TreePM gravity (issue 15) as one ForceSolver: a short-range solver (the periodic tree,
// tree/periodic_tree_solver.hpp) plus the particle mesh's long range. Lives in mesh/ because it needs only core's
// ForceSolver interface and the mesh: tree/ and mesh/ stay independent (DESIGN.md §2), and apps/ wires the two.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "matcha/core/force_solver.hpp"
#include "matcha/core/params.hpp"
#include "matcha/mesh/particle_mesh.hpp"

namespace matcha::mesh {

/// The short-range split that matches `params`: its box, r_s = a_smooth L / n and r_cut = cutoffFactor r_s, for
/// GravityParams::periodic. Throws InputError for invalid params.
PeriodicSplit periodicSplit(const MeshParams& params);

class TreePmSolver final : public ForceSolver {
 public:
  /// `shortRange` computes the short-range part with gravity.periodic == periodicSplit(meshParams) (the caller
  /// builds it with that gravity; this checks the split it is told about). Allocates the mesh (meshMemoryBytes).
  /// Throws InputError for invalid params, InvariantError when gravity.periodic differs from the mesh's split.
  TreePmSolver(std::unique_ptr<ForceSolver> shortRange, const MeshParams& meshParams, const GravityParams& gravity);

  /// A long range computed elsewhere, with meshParams' split: adds the long-range pull (and potentials, where out.pot
  /// is given) at the bodies of `sources`, as ParticleMesh::addLongRange does. A distributed run's mesh in slabs over
  /// the ranks (mesh/slab_mesh.hpp), called collectively.
  using LongRange = std::function<void(const SourceView& sources, const GravityParams& gravity, const ForceView& out)>;

  /// TreePM with `longRange` for the mesh (no ParticleMesh is allocated); `longRangeName` says where it runs in
  /// describe() ("slabs over 4 ranks"). Otherwise as above.
  TreePmSolver(std::unique_ptr<ForceSolver> shortRange, const MeshParams& meshParams, const GravityParams& gravity,
               LongRange longRange, std::string longRangeName);

  /// Overwrites acc and pot with short range + long range at every body (the short-range solver may reorder the
  /// bodies). The report is the short range's, with the mesh's time as Phase::mesh and in totalSeconds. A mesh that
  /// runs beside (ParticleMesh::runsBeside, and a short range that says how it sorts its bodies:
  /// ForceSolver::setSortedBodiesHook) starts, on the caller's order, while the short range sorts its keys
  /// (ForceSolver::setUnsortedBodiesHook; where the call sorts nothing, at its sorted-bodies hook), takes the short
  /// range's order from its hook (ParticleMesh::reorderLongRange) and is added after it; Phase::mesh is
  /// then its whole time, overlapping the short range's phases, and ForceTimings::meshWaitSeconds what the call
  /// waited for it at the end. The forces are the sequential call's (MeshParams::overlap false) either way.
  ForceReport computeForces(Particles& particles) override;
  void setSoftening(double eps) override;
  std::string describe() const override;
  /// Long-range steps: a call that is not due (ForceSolver::setLongRangeDue) is the short range's alone, no mesh; a
  /// call that is keeps the mesh's accelerations apart (lastLongRange) and adds them to the short range's.
  bool splitsLongRange() const override { return true; }
  /// The short range's: within long-range steps its calls are the short range's alone (computeForces).
  bool takesPendingDrift() const override { return shortRange_->takesPendingDrift(); }
  void setLongRangeSteps(bool on) override;
  AccelerationView lastLongRange() const override;
  /// The mesh alone (ParticleMesh::addLongRange, without potentials) at the bodies as they are, for lastLongRange.
  void computeLongRange(Particles& particles) override;

  /// Checkpoints are the short range's (the periodic tree's reuse), and with long-range steps on only after a call
  /// that computed the long range: a long-range step's end, where the state carries no long range half applied.
  bool atCheckpointBoundary() const override {
    return shortRange_->atCheckpointBoundary() && (!longRangeStepsOn() || longRangeKept_);
  }
  /// Within a long-range step nothing is ended: its end is where the long range is whole.
  bool endTreeForCheckpoint() override {
    return (!longRangeStepsOn() || longRangeKept_) && shortRange_->endTreeForCheckpoint();
  }
  void saveState(CheckpointState& state) override { shortRange_->saveState(state); }
  void restoreState(const CheckpointState& state, const Particles& particles) override {
    shortRange_->restoreState(state, particles);
  }

  /// The mesh's ParticleMesh::setDensityReduction: TreePM over the ranks of a distributed run, whose short range is
  /// the distributed tree's (parallel/) and whose mesh every rank solves for the whole system. Computing forces is then
  /// collective.
  /// Only with the constructor that allocates the mesh.
  void setDensityReduction(ParticleMesh::DensityReduction reduce);

  const MeshParams& meshParams() const { return meshParams_; }
  ForceSolver& shortRange() { return *shortRange_; }

 private:
  std::unique_ptr<ForceSolver> shortRange_;
  bool replicated_ = false;  ///< setDensityReduction was given: every rank solves the whole mesh (describe())
  MeshParams meshParams_;
  std::optional<ParticleMesh> mesh_;  ///< the mesh of this process, unless the long range is computed elsewhere:
  LongRange longRange_;               ///< then this
  std::string longRangeName_;
  GravityParams gravity_;
  /// With long-range steps on: the last call's long-range accelerations, in its order (longRangeKept_: it computed
  /// them; the arrays keep their size between calls).
  std::vector<double> longX_, longY_, longZ_;
  bool longRangeKept_ = false;

  /// The long range at the bodies as they are, added to out: the mesh's addLongRange or longRange_.
  void addLongRange(const Particles& particles, const ForceView& out);
  /// longX_, longY_, longZ_ of `count` zeros, on every core.
  void zeroLongRange(std::size_t count);
};

}  // namespace matcha::mesh
