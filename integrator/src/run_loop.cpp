// SPDX-License-Identifier: MIT
#include "matcha/integrator/run_loop.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>

#include "matcha/core/errors.hpp"
#include "matcha/core/stopwatch.hpp"
#include "matcha/integrator/leapfrog.hpp"

namespace matcha::integrator {

namespace {

/// The progress report's energy is measured at most this often (wall seconds), and at every output.
constexpr double kProgressEnergySeconds = 1.0;

/// An output is followed by a checkpoint unless the last one is younger than this (wall seconds): at 2^22 bodies a
/// checkpoint is ~0.9 GB and half a second to write, which outputs every few seconds would pay again and again.
constexpr double kOutputCheckpointSeconds = 60.0;

/// Which steps carry an output: output k (k >= 1) falls on step round(k * outputInterval / dt). Computed from k each
/// time rather than by adding intervals, so that no rounding drift accumulates over long runs.
class OutputSchedule {
 public:
  OutputSchedule(double outputInterval, double dt) : stepsPerOutput_(outputInterval / dt) { nextK_ = firstAfter(0.0); }

  /// True when an output falls on `step` (steps are visited in increasing order); then moves past it. Several k
  /// landing on the same step (outputInterval < dt) give one output.
  bool isDueAndAdvance(std::uint64_t step) {
    const double s = static_cast<double>(step);
    if (stepsPerOutput_ <= 1.0) return true;  // consecutive outputs are at most one step apart: every step is hit
    if (stepOf(nextK_) > s) return false;
    nextK_ = firstAfter(s);
    return true;
  }

  /// Whether an output falls on `step`, in any order (isDueAndAdvance's answer, without moving past it).
  bool isDue(std::uint64_t step) const {
    if (stepsPerOutput_ <= 1.0) return true;
    const double s = static_cast<double>(step);
    return step > 0 && stepOf(firstAfter(s - 1.0)) == s;
  }

 private:
  double stepOf(double k) const { return std::round(k * stepsPerOutput_); }

  /// Smallest k >= 1 whose step lies after `s`. Only used with stepsPerOutput_ > 1, where k - 1 != k in double for
  /// every k reached (k <= 2^53 / stepsPerOutput_ + 1), so the adjusting loops end after a step or two.
  double firstAfter(double s) const {
    double k = std::max(1.0, std::ceil((s + 0.5) / stepsPerOutput_));
    while (k > 1.0 && stepOf(k - 1.0) > s) k -= 1.0;
    while (stepOf(k) <= s) k += 1.0;
    return k;
  }

  double stepsPerOutput_;
  double nextK_ = 1.0;
};

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

/// The force call's part of an OutputTimings.
void addForceCall(OutputTimings& timings, const ForceReport& report) {
  timings.force += report.timings;
  timings.rebuilds += report.rebuilt ? 1 : 0;
  timings.groupsWalked += report.numGroupsWalked;
  timings.groupsRepaired += report.numGroupsRepaired;
}

/// Adds the steps of one output interval to the run's totals.
void addInterval(RunSummary& summary, const OutputTimings& interval) {
  summary.stepForceTimings += interval.force;
  summary.stepWallSeconds += interval.stepWallSeconds;
  summary.integrationSeconds += interval.integrationSeconds;
  summary.stepCpuSeconds += interval.stepCpuSeconds;
  summary.rebuilds += interval.rebuilds;
  summary.groupsWalked += interval.groupsWalked;
  summary.groupsRepaired += interval.groupsRepaired;
}

/// to <- from, every array, in parallel blocks (the copy of the last good state after every step).
void copyState(const Particles& from, Particles& to) {
  const std::size_t n = from.size();
  if (to.size() != n) to.resize(n);
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n, 8192), [&](const tbb::blocked_range<std::size_t>& block) {
    const auto first = static_cast<std::ptrdiff_t>(block.begin());
    const auto last = static_cast<std::ptrdiff_t>(block.end());
    for (const auto member :
         {&Particles::x, &Particles::y, &Particles::z, &Particles::vx, &Particles::vy, &Particles::vz, &Particles::mass,
          &Particles::ax, &Particles::ay, &Particles::az, &Particles::pot}) {
      std::copy((from.*member).begin() + first, (from.*member).begin() + last, (to.*member).begin() + first);
    }
    std::copy(from.id.begin() + first, from.id.begin() + last, to.id.begin() + first);
  });
}

/// "step 5, t = 0.0390625: body id 17 (index 3): ax = nan" and, when the diagnostics' sums overflowed with every
/// value finite, the energy instead.
std::string describeNonFinite(std::uint64_t step, double time, const std::optional<NonFiniteValue>& value,
                              const Diagnostics* diagnostics) {
  char head[96];
  std::snprintf(head, sizeof head, "step %llu, t = %.17g: ", static_cast<unsigned long long>(step), time);
  char body[160];
  if (value) {
    // "nan", not glibc's "-nan" for a NaN with its sign bit set: the sign of a NaN means nothing.
    const std::string shown = std::isnan(value->value) ? "nan" : (value->value > 0 ? "inf" : "-inf");
    std::snprintf(body, sizeof body, "body id %llu (index %zu): %s = %s", static_cast<unsigned long long>(value->id),
                  value->index, value->quantity.c_str(), shown.c_str());
  } else {
    std::snprintf(
        body, sizeof body, "energy E = %g (T = %g, W = %g)", diagnostics != nullptr ? diagnostics->total : 0.0,
        diagnostics != nullptr ? diagnostics->kinetic : 0.0, diagnostics != nullptr ? diagnostics->potential : 0.0);
  }
  return std::string("a value is not finite at ") + head + body;
}

/// Largest step count accepted: beyond 2^53, step numbers are no longer exact in double and time = steps * dt lies.
constexpr double kMaxSteps = 0x1p53;

}  // namespace

std::uint64_t checkedStepCount(double tEnd, double dt) {
  const double ratio = tEnd / dt;
  if (!(ratio <= kMaxSteps)) throw InputError("t-end / dt is more than 2^53 steps");
  const double nearest = std::round(ratio);
  if (std::abs(ratio - nearest) > 1e-9 * std::max(1.0, ratio)) {
    char message[160];
    std::snprintf(message, sizeof message, "t-end must be a multiple of dt (t-end = %.17g, dt = %.17g, ratio %.17g)",
                  tEnd, dt, ratio);
    throw InputError(message);
  }
  return static_cast<std::uint64_t>(nearest);
}

RunSummary runLeapfrog(Particles& p, ForceSolver& solver, const IntegratorParams& params, const RunCallbacks& callbacks,
                       const RunPosition* resumeFrom) {
  params.validate();
  const std::uint64_t numSteps = checkedStepCount(params.tEnd - params.tStart, params.dt);
  // The leapfrog counts time from 0; the run's clock starts at the initial conditions' time.
  const auto runTime = [&](double sinceStart) { return params.tStart + sinceStart; };

  const Stopwatch wall;
  RunSummary summary;
  // With potentials from outputPotentials, no diagnostic reads the solver's: it computes accelerations only.
  const PotentialsWantedScope potentials(solver, !callbacks.outputPotentials);
  // From the solver, potentials only where energies are measured: the initial call, the outputs (and the last step)
  // and the progress line's steps (progressEnergyStep). The accelerations are the same without them, and sooner: the
  // CUDA plan kernel with quadrupoles ~15% (H200: 9.49 against 11.1 ms at 2^20), one array fewer to download.
  const bool solverPotentials = !callbacks.outputPotentials;
  std::uint64_t progressEnergyStep = 0;  ///< the next step whose energy the progress line shows (0: none planned)
  LeapfrogKDK leapfrog(solver, params.dt, params.boxSize);
  auto account = [&summary](const ForceReport& report) {
    summary.forceSeconds += report.timings.totalSeconds;
    summary.interactions += report.counts;
  };

  const auto measureOutput = [&](double time) {
    if (callbacks.outputPotentials) callbacks.outputPotentials(p);
    return measureDiagnostics(p, time);
  };

  // The last state whose values were all finite, what onNonFinite saves.
  Particles lastGood;
  double lastGoodTime = runTime(0.0);
  std::uint64_t lastGoodStep = 0;
  copyState(p, lastGood);
  const auto stop = [&](std::uint64_t step, double time, const std::optional<NonFiniteValue>& value,
                        const Diagnostics* diagnostics) {
    const std::string message = describeNonFinite(step, time, value, diagnostics);
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
  Stopwatch outputClock;
  OutputSchedule schedule(params.outputInterval, params.dt);
  const auto potentialsAt = [&](std::uint64_t step) {
    return schedule.isDue(step) || step == numSteps || step == progressEnergyStep;
  };
  if (resumeFrom != nullptr) {
    // A checkpoint's state carries its forces: no initial force call, no output 0.
    if (resumeFrom->step >= numSteps) throw InputError("the run to resume has no step left before t-end");
    leapfrog.resume(resumeFrom->step);
    lastGoodTime = runTime(leapfrog.time());
    lastGoodStep = resumeFrom->step;
    summary.initial = resumeFrom->initial;
    summary.final = summary.initial;
    outputIndex = resumeFrom->nextOutputIndex;
    firstStep = resumeFrom->step + 1;
    schedule.isDueAndAdvance(resumeFrom->step);  // past the outputs before the checkpoint
  } else {
    if (solverPotentials) solver.expectPotentials(potentialsAt(firstStep));
    const ForceReport initialReport = leapfrog.initialize(p);
    if (const auto bad = leapfrog.findNonFiniteForces(p)) stop(0, runTime(0.0), bad, nullptr);
    copyState(p, lastGood);
    account(initialReport);
    summary.initialForceTimings = initialReport.timings;
    addForceCall(interval, initialReport);
    summary.initial = measureOutput(runTime(0.0));
    requireFiniteEnergy(summary.initial, 0);
    summary.final = summary.initial;
    if (callbacks.onOutput) callbacks.onOutput(p, summary.initial, outputIndex);
    interval.outputSeconds = outputClock.seconds();
    summary.outputSeconds += interval.outputSeconds;
    if (callbacks.onTimings) callbacks.onTimings(interval);
    ++outputIndex;
  }
  interval = OutputTimings{};
  interval.outputIndex = outputIndex;

  double latestEnergy = summary.initial.total;  ///< for the progress report
  double lastProgressEnergy = -kProgressEnergySeconds;
  double lastCheckpoint = wall.seconds();
  bool outputSinceCheckpoint = false;
  bool checkpointed = false;  ///< the first output is always followed by a checkpoint
  for (std::uint64_t step = firstStep; step <= numSteps; ++step) {
    if (solverPotentials) {
      // The progress line's energy is planned a step ahead, so that the next call knows to compute potentials.
      if (callbacks.onProgress && progressEnergyStep < step &&
          wall.seconds() - lastProgressEnergy >= kProgressEnergySeconds) {
        progressEnergyStep = step + 1;
      }
      solver.setPotentialsWanted(potentialsAt(step));
      solver.expectPotentials(potentialsAt(step + 1));
    }
    // The closing kick waits for the next step's pass over the bodies (LeapfrogKDK::step) unless something reads
    // the state first: then synchronise() makes it, rounded the same, so the run is the same bit for bit.
    const StepReport stepReport = leapfrog.step(p, ClosingKick::deferred);
    if (stepReport.nonFinite) stop(step, runTime(leapfrog.time()), stepReport.nonFinite, nullptr);
    account(stepReport.force);
    addForceCall(interval, stepReport.force);
    ++interval.steps;
    interval.stepWallSeconds += stepReport.wallSeconds;
    interval.integrationSeconds += stepReport.integrationSeconds;
    interval.stepCpuSeconds += stepReport.cpuSeconds;
    const auto synchronise = [&] {
      const double seconds = leapfrog.synchronize(p);
      interval.stepWallSeconds += seconds;
      interval.integrationSeconds += seconds;
    };

    if (callbacks.onLastCallOnTree && solver.atCheckpointBoundary()) {
      synchronise();
      const Stopwatch checking;
      callbacks.onLastCallOnTree(p, runTime(leapfrog.time()), step);
      interval.outputSeconds += checking.seconds();
      summary.outputSeconds += checking.seconds();
    }
    // Evaluated for every step so the schedule advances even when the final step forces an output anyway.
    const bool scheduled = schedule.isDueAndAdvance(step);
    const bool isOutput = scheduled || step == numSteps;
    // The progress line's energy: a pass over every body, so at most once per kProgressEnergySeconds of wall time
    // (the line prints once a second; at 2^22 bodies the pass takes ~10 ms, a fifth of a step).
    const bool progressEnergy = callbacks.onProgress && solverPotentials && step == progressEnergyStep;
    if (isOutput || progressEnergy) {
      synchronise();
      if (progressEnergy) lastProgressEnergy = wall.seconds();
      outputClock.restart();
      const Diagnostics now =
          isOutput ? measureOutput(runTime(leapfrog.time())) : measureDiagnostics(p, runTime(leapfrog.time()));
      requireFiniteEnergy(now, step);
      latestEnergy = now.total;
      if (isOutput) {
        summary.final = now;
        if (callbacks.onOutput) callbacks.onOutput(p, now, outputIndex);
      }
      const double seconds = outputClock.seconds();
      interval.outputSeconds += seconds;
      summary.outputSeconds += seconds;
      if (isOutput) {
        outputSinceCheckpoint = true;
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
    if (isOutput || step % kLastGoodEverySteps == 0) {
      synchronise();
      copyState(p, lastGood);
      lastGoodTime = runTime(leapfrog.time());
      lastGoodStep = step;
    }
    const double sinceCheckpoint = wall.seconds() - lastCheckpoint;
    const bool checkpointDue =
        sinceCheckpoint >= params.checkpointInterval ||
        (outputSinceCheckpoint &&
         (!checkpointed || sinceCheckpoint >= std::min(params.checkpointInterval, kOutputCheckpointSeconds)));
    if (callbacks.onCheckpoint && step < numSteps && checkpointDue && solver.atCheckpointBoundary()) {
      synchronise();
      callbacks.onCheckpoint(p, runTime(leapfrog.time()), RunPosition{step, outputIndex, summary.initial});
      lastCheckpoint = wall.seconds();
      outputSinceCheckpoint = false;
      checkpointed = true;
    }
    if (callbacks.onProgress) {
      ProgressInfo info;
      info.step = step;
      info.totalSteps = numSteps;
      info.time = runTime(leapfrog.time());
      info.tEnd = params.tEnd;
      info.elapsedSeconds = wall.seconds();
      info.etaSeconds =
          info.elapsedSeconds / static_cast<double>(step - firstStep + 1) * static_cast<double>(numSteps - step);
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
