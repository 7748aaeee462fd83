// SPDX-License-Identifier: MIT
// Where a run's steps end and what they do: the fixed-step run's schedule (FixedSteps) and the interface through which
// a comoving run (apps/, from cosmology/'s ComovingTimeline) gives the run loop steps of varying length. The run loop
// (run_loop.hpp: runSteps) asks the schedule for each step just before taking it, so a step may depend on the state
// it starts from (a comoving step's limit reads the accelerations).
#pragma once

#include <cstdint>
#include <optional>

#include "matcha/core/params.hpp"
#include "matcha/core/particles.hpp"
#include "matcha/integrator/leapfrog.hpp"

namespace matcha::integrator {

/// One step as the schedule plans it.
struct PlannedStep {
  KdkStep factors;       ///< its kicks and drift
  double endTime = 0.0;  ///< the run's clock after it (a fixed-step run's time; a comoving run's scale factor)
  bool output = false;   ///< an output falls at its end
  bool last = false;     ///< the run's last step (always an output too)
  /// With StepSchedule::plansDiagnostics: the diagnostics (potentials included) are measured after it. Outputs and the
  /// last step measure them anyway.
  bool diagnostics = false;
  /// The softening length its force call uses, when it differs from the solver's (a comoving run whose physical
  /// softening has reached its maximum: ForceSolver::setSoftening); unset: unchanged.
  std::optional<double> softening;
};

/// A run's time line. The run loop calls plan() once per step, in order, after the previous step (state
/// synchronised or not: plan reads positions, masses and accelerations, and velocities only where readsVelocities
/// says, synchronised then).
class StepSchedule {
 public:
  virtual ~StepSchedule() = default;

  /// The run's clock at its start and where it ends.
  virtual double startTime() const = 0;
  virtual double endTime() const = 0;

  /// Whether the run is over after `stepsTaken` steps at `time` (a run of no steps is over at its start); after a
  /// step that plan() marked last, it is.
  virtual bool done(std::uint64_t stepsTaken, double time) const = 0;

  /// Plans the step after `stepsTaken` steps, which ended at `time`; `p` is the state after them with its
  /// accelerations. Called once per step, in order.
  virtual PlannedStep plan(std::uint64_t stepsTaken, double time, const Particles& p) = 0;

  /// Whether the step after `stepsTaken` steps (ending at `time`) may end at an output or the end: asked a step
  /// ahead of plan(), for the solver's word on potentials (ForceSolver::expectPotentials). A wrong yes costs
  /// potentials computed for nothing; a wrong no the work the solver started ahead.
  virtual bool mayEndAtOutput(std::uint64_t stepsTaken, double time) const = 0;

  /// Whether the schedule says after which steps, besides the outputs, the diagnostics (potentials included) are
  /// measured (PlannedStep::diagnostics): a comoving run integrates the Layzer-Irvine equation over them. The run loop
  /// then measures no energies of its own for the progress line.
  virtual bool plansDiagnostics() const { return false; }

  /// With plansDiagnostics: whether the step after `stepsTaken` steps (ending at `time`) may be one whose diagnostics
  /// plan() will ask for. Asked a step ahead of plan(), as mayEndAtOutput, with the same costs of a wrong answer.
  virtual bool mayPlanDiagnostics(std::uint64_t /*stepsTaken*/, double /*time*/) const { return false; }

  /// The share of the run done at `time`, in [0, 1]: the progress line's ETA.
  virtual double fractionDone(double time) const = 0;

  /// The run's number of steps, or an estimate when the steps are not known ahead (`stepsTaken` at `time`).
  virtual std::uint64_t estimatedSteps(std::uint64_t stepsTaken, double time) const = 0;

  /// Continues a run from step `stepsTaken` at `time` (a checkpoint): plan() then goes on from there.
  virtual void resume(std::uint64_t stepsTaken, double time) = 0;

  /// Whether plan(stepsTaken, time, ...) reads the bodies' velocities (a long-range step's limit reads their rms
  /// momentum): the run loop then makes a closing kick left over first, so that plan sees the same state in a run
  /// that synchronised there for other reasons, or was restarted there, as in one that did not.
  virtual bool readsVelocities(std::uint64_t /*stepsTaken*/, double /*time*/) const { return false; }

  /// Whether its steps come with long-range steps (KdkStep's long-range kicks, GADGET's PM steps): the run loop then
  /// turns them on in the solver (ForceSolver::setLongRangeSteps), which must split its force. Such a schedule plans
  /// outputs and diagnostics only at the ends of long-range steps (PlannedStep::factors.longRangeAtEnd), where the
  /// force call computes the whole force and its potentials.
  virtual bool longRangeSteps() const { return false; }

  /// The step, when every step has the same factors {dt/2, dt, dt/2}: the leapfrog then tells the solver how the
  /// bodies move between its calls (LeapfrogKDK, ForceSolver::expectAdvance). Unset: steps vary.
  virtual std::optional<double> fixedStep() const { return std::nullopt; }
};

/// Which steps of a fixed-step run carry an output: output k (k >= 1) falls on step round(k * outputInterval / dt).
/// Computed from k each time rather than by adding intervals, so that no rounding drift accumulates over long runs.
class OutputSchedule {
 public:
  OutputSchedule(double outputInterval, double dt);

  /// True when an output falls on `step` (steps are visited in increasing order); then moves past it. Several k
  /// landing on the same step (outputInterval < dt) give one output.
  bool isDueAndAdvance(std::uint64_t step);

  /// Whether an output falls on `step`, in any order (isDueAndAdvance's answer, without moving past it).
  bool isDue(std::uint64_t step) const;

 private:
  double stepOf(double k) const;
  double firstAfter(double s) const;

  double stepsPerOutput_;
  double nextK_ = 1.0;
};

/// The fixed-step run: round((tEnd - tStart) / dt) steps of dt from tStart (checkedStepCount), times tStart + k dt,
/// outputs every outputInterval (OutputSchedule) and at the end.
class FixedSteps final : public StepSchedule {
 public:
  /// @throws InputError as IntegratorParams::validate and checkedStepCount
  explicit FixedSteps(const IntegratorParams& params);

  double startTime() const override { return params_.tStart; }
  double endTime() const override { return params_.tEnd; }
  bool done(std::uint64_t stepsTaken, double) const override { return stepsTaken >= numSteps_; }
  PlannedStep plan(std::uint64_t stepsTaken, double time, const Particles& p) override;
  bool mayEndAtOutput(std::uint64_t stepsTaken, double time) const override;
  double fractionDone(double time) const override;
  std::uint64_t estimatedSteps(std::uint64_t, double) const override { return numSteps_; }
  void resume(std::uint64_t stepsTaken, double time) override;
  std::optional<double> fixedStep() const override { return params_.dt; }

  std::uint64_t numSteps() const { return numSteps_; }
  /// The run's time after `steps` steps: tStart + steps dt (computed, not summed).
  double timeAfter(std::uint64_t steps) const { return params_.tStart + static_cast<double>(steps) * params_.dt; }

 private:
  IntegratorParams params_;
  std::uint64_t numSteps_;
  OutputSchedule outputs_;
};

/// The number of steps from 0 to tEnd: round(tEnd / dt), or InputError when tEnd is not a whole number of steps (to
/// 1e-9 relative: 0.3 / 0.1 = 2.9999999999999996 must pass, 1 / 0.3 must not) or more than 2^53 of them. The run and
/// its memory estimate (matcha run --dry-run) count alike.
std::uint64_t checkedStepCount(double tEnd, double dt);

}  // namespace matcha::integrator
