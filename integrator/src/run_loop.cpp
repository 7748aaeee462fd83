// SPDX-License-Identifier: MIT
#include "matcha/integrator/run_loop.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>

#include "matcha/core/errors.hpp"
#include "matcha/core/stopwatch.hpp"
#include "matcha/integrator/leapfrog.hpp"
#include "run_support.hpp"

namespace matcha::integrator {

namespace {

/// The progress line's ETA takes the wall time of a step averaged over about this many recent steps.
constexpr double kStepTimeSmoothing = 16.0;

/// The progress report's energy is measured at most this often (wall seconds), and at every output.
constexpr double kProgressEnergySeconds = 1.0;

/// Sets ForceSolver::potentialsWanted for a run and restores it on every path out.
class PotentialsWantedScope {
 public:
  PotentialsWantedScope(ForceSolver& solver, bool wanted) : solver_(solver), before_(solver.potentialsWanted()) {
    solver_.setPotentialsWanted(wanted);
  }
  ~PotentialsWantedScope() {
    solver_.setPotentialsWanted(before_);
    solver_.expectPotentials(std::nullopt);
  }
  PotentialsWantedScope(const PotentialsWantedScope&) = delete;
  PotentialsWantedScope& operator=(const PotentialsWantedScope&) = delete;

 private:
  ForceSolver& solver_;
  bool before_;
};

/// Turns the solver's long-range steps on for a run whose schedule takes them, and off again on every path out.
class LongRangeStepsScope {
 public:
  LongRangeStepsScope(ForceSolver& solver, bool on) : solver_(solver), on_(on) {
    if (!on_) return;
    if (!solver_.splitsLongRange()) {
      throw InputError("long-range steps need a solver with a long range of its own (periodic TreePM), not " +
                       solver_.describe());
    }
    solver_.setLongRangeSteps(true);
  }
  ~LongRangeStepsScope() {
    if (!on_) return;
    solver_.setLongRangeSteps(false);
    solver_.setLongRangeDue(true);
  }
  LongRangeStepsScope(const LongRangeStepsScope&) = delete;
  LongRangeStepsScope& operator=(const LongRangeStepsScope&) = delete;

 private:
  ForceSolver& solver_;
  bool on_;
};

/// The force call's part of an OutputTimings.
void addForceCall(OutputTimings& timings, const ForceReport& report) {
  timings.force += report.timings;
  timings.rebuilds += report.rebuilt ? 1 : 0;
  if (report.rebuilt) {
    ++timings.treeEnds[static_cast<int>(report.treeEnd)];
    timings.plannedCalls += report.plannedCalls;
  }
  timings.groupsWalked += report.numGroupsWalked;
  timings.groupsRepaired += report.numGroupsRepaired;
  timings.bodiesEscaped += report.numBodiesEscaped;
  timings.callsAdvancedOnDevice += report.advancedOnDevice ? 1 : 0;
  timings.advanceMismatches += report.advanceMismatch ? 1 : 0;
}

/// Adds the steps of one output interval to the run's totals.
void addInterval(RunSummary& summary, const OutputTimings& interval) {
  summary.stepForceTimings += interval.force;
  summary.stepWallSeconds += interval.stepWallSeconds;
  summary.integrationSeconds += interval.integrationSeconds;
  summary.driftInCallSeconds += interval.driftInCallSeconds;
  summary.stepCpuSeconds += interval.stepCpuSeconds;
  summary.rebuilds += interval.rebuilds;
  for (int k = 0; k < kNumTreeEnds; ++k) summary.treeEnds[k] += interval.treeEnds[k];
  summary.plannedCalls += interval.plannedCalls;
  summary.groupsWalked += interval.groupsWalked;
  summary.groupsRepaired += interval.groupsRepaired;
  summary.bodiesEscaped += interval.bodiesEscaped;
  summary.bodiesStepped += interval.bodiesStepped;
  summary.longRangeSteps += interval.longRangeSteps;
  summary.callsAdvancedOnDevice += interval.callsAdvancedOnDevice;
  summary.advanceMismatches += interval.advanceMismatches;
}

}  // namespace

RunSummary runLeapfrog(Particles& p, ForceSolver& solver, const IntegratorParams& params, const RunCallbacks& callbacks,
                       const RunPosition* resumeFrom) {
  FixedSteps schedule(params);
  return runSteps(p, solver, schedule, params, callbacks, resumeFrom);
}

RunSummary runSteps(Particles& p, ForceSolver& solver, StepSchedule& schedule, const IntegratorParams& params,
                    const RunCallbacks& callbacks, const RunPosition* resumeFrom) {
  const Stopwatch wall;
  RunSummary summary;
  // With potentials from outputPotentials, no diagnostic reads the solver's: it computes accelerations only.
  const PotentialsWantedScope potentials(solver, !callbacks.outputPotentials);
  // From the solver, potentials only where energies are measured: the initial call, the outputs (and the last step)
  // and the progress line's steps (progressEnergyStep), or the steps where the schedule plans diagnostics. The
  // accelerations are the same without them, and sooner: the CUDA plan kernel with quadrupoles ~15% (H200: 9.49
  // against 11.1 ms at 2^20), one array fewer to download.
  const bool solverPotentials = !callbacks.outputPotentials;
  const bool scheduleDiagnostics = schedule.plansDiagnostics();
  const LongRangeStepsScope longRangeSteps(solver, schedule.longRangeSteps());
  std::uint64_t progressEnergyStep = 0;  ///< the next step whose energy the progress line shows (0: none planned)
  // A fixed step lets the leapfrog tell the solver how the bodies move between its calls (expectAdvance).
  std::optional<LeapfrogKDK> leapfrogHolder;
  if (const std::optional<double> dt = schedule.fixedStep()) {
    leapfrogHolder.emplace(solver, *dt, params.boxSize);
  } else {
    leapfrogHolder.emplace(solver, LeapfrogKDK::VariableSteps{}, params.boxSize);
  }
  LeapfrogKDK& leapfrog = *leapfrogHolder;
  double time = schedule.startTime();  ///< the run's clock after the steps taken
  auto account = [&summary](const ForceReport& report) {
    summary.forceSeconds += report.timings.totalSeconds;
    summary.interactions += report.counts;
    ++summary.forceCalls;
  };

  const auto measure = [&](double at) {
    const Diagnostics local = measureDiagnostics(p, at);
    return callbacks.combineDiagnostics ? callbacks.combineDiagnostics(local) : local;
  };
  const auto measureOutput = [&](double at) {
    if (callbacks.outputPotentials) callbacks.outputPotentials(p);
    return measure(at);
  };
  // The progress line's own energies follow the wall clock: with diagnostics over several processes, one they share.
  // A schedule that plans its diagnostics has them measured where it says only, not where the clock says: its samples
  // (a comoving run's Layzer-Irvine integral) are then the same in every run of the same state.
  const bool progressEnergies = callbacks.onProgress && solverPotentials && !scheduleDiagnostics &&
                                (!callbacks.combineDiagnostics || callbacks.sharedSeconds);
  const auto progressClock = [&] {
    return callbacks.sharedSeconds ? callbacks.sharedSeconds(wall.seconds()) : wall.seconds();
  };

  // The last state whose values were all finite, what onNonFinite saves.
  Particles lastGood;
  double lastGoodTime = time;
  std::uint64_t lastGoodStep = 0;
  detail::copyState(p, lastGood);
  const auto stop = [&](std::uint64_t step, double at, const std::optional<NonFiniteValue>& value,
                        const Diagnostics* diagnostics) {
    const std::string message = detail::describeNonFinite("step", step, at, value, diagnostics);
    if (callbacks.onNonFinite) callbacks.onNonFinite(lastGood, lastGoodTime, lastGoodStep);
    throw NumericalError(message);
  };
  // Energies are sums over the bodies: they overflow, or carry a potential the diagnostics computed, on their own.
  const auto requireFiniteEnergy = [&](const Diagnostics& d, std::uint64_t step) {
    if (std::isfinite(d.total)) return;
    stop(step, d.time, findNonFinite(p, true), &d);
  };

  // The run since the previous output; output 0 reports the initial force call, which the step totals leave out.
  OutputTimings interval;
  std::uint64_t outputIndex = 0;
  std::uint64_t firstStep = 1;
  Stopwatch outputClock;  ///< restarted at each output
  if (resumeFrom != nullptr) {
    // A checkpoint's state carries its forces: no initial force call, no output 0.
    schedule.resume(resumeFrom->step, resumeFrom->time);
    leapfrog.resume(resumeFrom->step);
    time = resumeFrom->time;
    lastGoodTime = time;
    lastGoodStep = resumeFrom->step;
    summary.initial = resumeFrom->initial;
    summary.final = summary.initial;
    outputIndex = resumeFrom->nextOutputIndex;
    firstStep = resumeFrom->step + 1;
  } else {
    if (solverPotentials) {
      solver.expectPotentials(schedule.mayEndAtOutput(0, time) ||
                              (scheduleDiagnostics && schedule.mayPlanDiagnostics(0, time)));
    }
    const ForceReport initialReport = leapfrog.initialize(p);
    if (const auto bad = leapfrog.findNonFiniteForces(p)) stop(0, time, bad, nullptr);
    detail::copyState(p, lastGood);
    account(initialReport);
    summary.initialForceTimings = initialReport.timings;
    addForceCall(interval, initialReport);
    outputClock.restart();  // output 0 is its diagnostics and snapshot, not the force call before them
    summary.initial = measureOutput(time);
    requireFiniteEnergy(summary.initial, 0);
    summary.final = summary.initial;
    if (callbacks.onDiagnostics) callbacks.onDiagnostics(summary.initial);
    if (callbacks.onOutput) callbacks.onOutput(p, summary.initial, outputIndex);
    interval.outputSeconds = outputClock.seconds();
    summary.outputSeconds += interval.outputSeconds;
    if (callbacks.onTimings) callbacks.onTimings(interval);
    ++outputIndex;
  }
  interval = OutputTimings{};
  interval.outputIndex = outputIndex;
  detail::PaceSinceFirstStep pace;
  double lastProgressSeconds = wall.seconds();
  double recentStepSeconds = -1.0;  ///< none yet

  double latestEnergy = summary.initial.total;  ///< for the progress report
  double lastProgressEnergy = -kProgressEnergySeconds;
  // Checkpoints follow the shared clock too: over several processes each one's state is part of the checkpoint.
  const auto checkpointClock = [&] { return callbacks.onCheckpoint ? progressClock() : wall.seconds(); };
  detail::CheckpointCadence checkpoints(params.checkpointInterval, checkpointClock());
  // The first step's wall time, apart: a run's steady pace is that of the steps after it (RunSummary).
  const auto stepWallSoFar = [&] { return summary.stepWallSeconds + interval.stepWallSeconds; };
  const double wallBeforeFirstStep = stepWallSoFar();
  for (std::uint64_t step = firstStep; !schedule.done(step - 1, time); ++step) {
    if (step == firstStep + 1) summary.firstStepWallSeconds = stepWallSoFar() - wallBeforeFirstStep;
    if (schedule.readsVelocities(step - 1, time)) {
      const double seconds = leapfrog.synchronize(p);
      interval.stepWallSeconds += seconds;
      interval.integrationSeconds += seconds;
    }
    const PlannedStep planned = schedule.plan(step - 1, time, p);
    if (solverPotentials) {
      // The progress line's energy is planned a step ahead, so that the next call knows to compute potentials.
      if (progressEnergies && progressEnergyStep < step &&
          progressClock() - lastProgressEnergy >= kProgressEnergySeconds) {
        progressEnergyStep = step + 1;
      }
      const bool scheduleMeasures = scheduleDiagnostics && planned.diagnostics;
      solver.setPotentialsWanted(scheduleMeasures || planned.output || step == progressEnergyStep);
      const bool nextMayMeasure = schedule.mayEndAtOutput(step, planned.endTime) ||
                                  (scheduleDiagnostics && schedule.mayPlanDiagnostics(step, planned.endTime));
      solver.expectPotentials((!planned.last && nextMayMeasure) || step + 1 == progressEnergyStep);
    }
    MATCHA_ASSERT(planned.factors.longRangeAtEnd || !(planned.output || planned.last || planned.diagnostics),
                  "an output or diagnostics planned inside a long-range step, where the force call has no long range");
    if (planned.softening) solver.setSoftening(*planned.softening);
    // The closing kick waits for the next step's pass over the bodies (LeapfrogKDK::step) unless something reads
    // the state first: then synchronise() makes it, rounded the same, so the run is the same bit for bit.
    const StepReport stepReport = leapfrog.step(p, planned.factors, ClosingKick::deferred);
    time = planned.endTime;
    if (stepReport.nonFinite) stop(step, time, stepReport.nonFinite, nullptr);
    account(stepReport.force);
    addForceCall(interval, stepReport.force);
    ++interval.steps;
    interval.bodiesStepped += stepReport.bodiesStepped;
    interval.longRangeSteps += planned.factors.longRangeAtEnd ? 1 : 0;
    interval.stepWallSeconds += stepReport.wallSeconds;
    interval.integrationSeconds += stepReport.integrationSeconds;
    interval.driftInCallSeconds += stepReport.driftInCallSeconds;
    interval.stepCpuSeconds += stepReport.cpuSeconds;
    const auto synchronise = [&] {
      const double seconds = leapfrog.synchronize(p);
      interval.stepWallSeconds += seconds;
      interval.integrationSeconds += seconds;
    };

    // Inside a long-range step of block time steps each body's velocity is at its own step's middle and only the
    // bodies whose steps ended have current forces: what reads the whole state waits for the long-range step's end.
    const bool synchronous = planned.factors.endsSynchronized();
    if (callbacks.onLastCallOnTree && solver.atCheckpointBoundary() && synchronous) {
      synchronise();
      const Stopwatch checking;
      callbacks.onLastCallOnTree(p, time, step);
      interval.outputSeconds += checking.seconds();
      summary.outputSeconds += checking.seconds();
    }
    const bool isOutput = planned.output || planned.last;
    // The progress line's energy: a pass over every body, so at most once per kProgressEnergySeconds of wall time
    // (the line prints once a second; at 2^22 bodies the pass takes ~10 ms, a fifth of a step).
    const bool progressEnergy = progressEnergies && step == progressEnergyStep;
    if (isOutput || progressEnergy || (scheduleDiagnostics && planned.diagnostics && solverPotentials)) {
      synchronise();
      if (progressEnergy) lastProgressEnergy = progressClock();
      outputClock.restart();
      const Diagnostics now = isOutput ? measureOutput(time) : measure(time);
      requireFiniteEnergy(now, step);
      latestEnergy = now.total;
      if (callbacks.onDiagnostics) callbacks.onDiagnostics(now);
      if (isOutput) {
        summary.final = now;
        if (callbacks.onOutput) callbacks.onOutput(p, now, outputIndex);
      }
      const double seconds = outputClock.seconds();
      interval.outputSeconds += seconds;
      summary.outputSeconds += seconds;
      if (isOutput) {
        checkpoints.noteOutput();
        addInterval(summary, interval);
        if (callbacks.onTimings) callbacks.onTimings(interval);
        ++outputIndex;
        interval = OutputTimings{};
        interval.outputIndex = outputIndex;
      }
    }
    // A copy of every array costs about two kicks (at 2^22 bodies on the H200's host: 9 ms against 4-6 ms for the
    // whole step's kicks and drift), so the last good state is refreshed every kLastGoodEverySteps steps and at each
    // output, not every step.
    const bool lastGoodDue = planned.factors.block ? synchronous && step >= lastGoodStep + kLastGoodEverySteps
                                                   : step % kLastGoodEverySteps == 0;
    if (isOutput || lastGoodDue) {
      synchronise();
      detail::copyState(p, lastGood);
      lastGoodTime = time;
      lastGoodStep = step;
    }
    // A checkpoint waits for the solver's boundary (between two trees) unless it follows an output or has waited too
    // long: late in a comoving run the trees end by their bodies' motion, never at a boundary, and the run ends one.
    if (callbacks.onCheckpoint && !planned.last && synchronous && checkpoints.due(checkpointClock()) &&
        (solver.atCheckpointBoundary() || (checkpoints.overdue(checkpointClock()) && solver.endTreeForCheckpoint()))) {
      synchronise();
      callbacks.onCheckpoint(p, time, RunPosition{step, outputIndex, summary.initial, time});
      checkpoints.taken(checkpointClock());
    }
    if (callbacks.onProgress) {
      ProgressInfo info;
      info.step = step;
      info.totalSteps = planned.last ? step : std::max(step + 1, schedule.estimatedSteps(step, time));
      info.time = time;
      info.tEnd = schedule.endTime();
      info.elapsedSeconds = wall.seconds();
      // The wall time of a step after the first, smoothed over ~kStepTimeSmoothing recent steps (outputs included).
      const double stepSeconds = info.elapsedSeconds - lastProgressSeconds;
      lastProgressSeconds = info.elapsedSeconds;
      const double fraction = schedule.fractionDone(time);
      if (step == firstStep) {
        pace.markFirstStep(fraction, info.elapsedSeconds);
      } else {
        recentStepSeconds = recentStepSeconds < 0.0
                                ? stepSeconds
                                : recentStepSeconds + (stepSeconds - recentStepSeconds) / kStepTimeSmoothing;
      }
      // The larger of two estimates: the run's pace since its first step over its share of the clock, and the steps
      // left at the recent steps' pace (a comoving run's steps shorten and slow as structure forms, which the first
      // misses). Not known after the first step alone.
      const double byPace = pace.etaSeconds(fraction, info.elapsedSeconds);
      if (planned.last) {
        info.etaSeconds = 0.0;
      } else if (recentStepSeconds < 0.0 || byPace < 0.0) {
        info.etaSeconds = -1.0;
      } else {
        info.etaSeconds = std::max(byPace, static_cast<double>(info.totalSteps - step) * recentStepSeconds);
      }
      info.relativeEnergyError = relativeEnergyError(latestEnergy, summary.initial.total);
      callbacks.onProgress(info);
    }
  }

  leapfrog.synchronize(p);  // the last step is an output, which synchronised already
  summary.steps = leapfrog.stepsTaken();
  summary.wallSeconds = wall.seconds();
  summary.initialEnergy = summary.initial.total;
  summary.finalEnergy = summary.final.total;
  summary.relativeEnergyError = relativeEnergyError(summary.finalEnergy, summary.initialEnergy);
  return summary;
}

}  // namespace matcha::integrator
