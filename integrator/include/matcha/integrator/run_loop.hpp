// SPDX-License-Identifier: MIT
// The fixed-step run: leapfrog from the start time to tEnd with outputs and progress reports through callbacks, so that
// the apps decide what an output is (snapshot, diagnostics line) and how often to print progress.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>

#include "matcha/core/force_solver.hpp"
#include "matcha/core/interaction_plan.hpp"
#include "matcha/core/params.hpp"
#include "matcha/core/particles.hpp"
#include "matcha/integrator/diagnostics.hpp"
#include "matcha/integrator/step_schedule.hpp"

namespace matcha::integrator {

struct ProgressInfo {
  std::uint64_t step = 0;        ///< steps done so far (1 after the first step)
  std::uint64_t totalSteps = 0;  ///< steps the run will take (an estimate where steps vary: StepSchedule)
  double time = 0.0;             ///< simulation time after this step
  double tEnd = 0.0;             ///< simulation end time
  double elapsedSeconds = 0.0;   ///< wall time since the run started (first force call included)
  /// The larger of the wall time since the run's first step times (share left) / (share done since) (StepSchedule::
  /// fractionDone) and the steps left (totalSteps - step) times the recent steps' wall time; 0 after the last step,
  /// -1 (not known) after the first alone, whose time is mostly the run's warm-up.
  double etaSeconds = 0.0;
  double relativeEnergyError = 0.0;  ///< |E - E0| / |E0| now, or at the latest output (RunCallbacks::outputPotentials)
  std::uint64_t bodySteps = 0;       ///< Hermite runs (runHermite): bodies advanced so far; 0 for leapfrog runs
};

/// Where the wall time went from one output to the next, handed to RunCallbacks::onTimings right after each
/// onOutput so that the caller can print a line per output. Output 0 has no steps behind it: it reports the initial
/// force call instead. Summed over outputs 1, 2, ..., the step fields give RunSummary's step totals.
struct OutputTimings {
  std::uint64_t outputIndex = 0;    ///< the output these timings end at (onOutput's outputIndex)
  std::uint64_t steps = 0;          ///< steps since the previous output; 0 at output 0
  ForceTimings force;               ///< those steps' force calls, summed; at output 0 the initial force call
  double stepWallSeconds = 0.0;     ///< wall time of those steps: kicks, drift and force call (0 at output 0)
  double integrationSeconds = 0.0;  ///< their kicks and drifts
  double driftInCallSeconds = 0.0;  ///< of it, StepReport::driftInCallSeconds, summed
  double stepCpuSeconds = 0.0;      ///< CPU time of the process over those steps, all threads (StepReport::cpuSeconds)
  /// This output's outputPotentials, diagnostics and onOutput, plus the diagnostics measured after each step since
  /// the previous output (onProgress without outputPotentials) and the onLastCallOnTree calls since then. onTimings
  /// itself is not timed.
  double outputSeconds = 0.0;
  std::uint64_t rebuilds = 0;  ///< force calls among them that put a new tree to use (ForceReport::rebuilt)
  /// Those new trees by ForceReport::treeEnd (index TreeEnd), and the calls their builds planned, summed.
  std::array<std::uint64_t, kNumTreeEnds> treeEnds{};
  std::uint64_t plannedCalls = 0;
  std::uint64_t groupsWalked = 0;           ///< ForceReport::numGroupsWalked, summed over them
  std::uint64_t groupsRepaired = 0;         ///< ForceReport::numGroupsRepaired, summed over them
  std::uint64_t bodiesEscaped = 0;          ///< ForceReport::numBodiesEscaped, summed over them
  std::uint64_t bodiesStepped = 0;          ///< StepReport::bodiesStepped, summed over them
  std::uint64_t longRangeSteps = 0;         ///< steps among them whose force call had the long range (TreePM's mesh)
  std::uint64_t callsAdvancedOnDevice = 0;  ///< calls with ForceReport::advancedOnDevice among them
  std::uint64_t advanceMismatches = 0;      ///< calls with ForceReport::advanceMismatch among them
};

/// The run keeps a copy of its state for onNonFinite this often (in steps), and at each output.
inline constexpr std::uint64_t kLastGoodEverySteps = 16;

/// Where a run stands between two steps: what a checkpoint records beside the bodies and the solver's state, and
/// where a restarted run resumes (runLeapfrog's `resumeFrom`).
struct RunPosition {
  std::uint64_t step = 0;             ///< steps taken since the run's tStart
  std::uint64_t nextOutputIndex = 1;  ///< onOutput's index of the next output
  Diagnostics initial;                ///< the run's first diagnostics (its energy is dE/E's reference)
  double time = 0.0;                  ///< the run's clock after `step` (StepSchedule: a comoving run's a)
};

struct RunCallbacks {
  /// Called at the start (after the first force call), at every output time and at the end (once, also when the end is
  /// an output time). outputIndex counts the calls: 0, 1, 2, ... The particles may be in any order (use ids).
  std::function<void(const Particles&, const Diagnostics&, std::uint64_t outputIndex)> onOutput;
  /// Called after every step; the caller throttles printing. Without outputPotentials, its energy error is measured
  /// at most once per second of wall time, on a step planned one step ahead, whose force call then computes
  /// potentials (the solver computes them only where energies are measured: at outputs and those steps).
  std::function<void(const ProgressInfo&)> onProgress;
  /// Optional: called before the diagnostics of every output (t = 0 and the end included) to overwrite p.pot with
  /// potentials more accurate than the solver's, e.g. a direct sum while the run uses a tree (whose potential error
  /// dominates the measured |dE/E| at small dt). It must change nothing but pot: not the order, positions,
  /// velocities or accelerations (the next kick uses them). With it set, onProgress reports the latest output's
  /// energy error rather than one measured every step, which would mix the two kinds of potential. The solver is
  /// then asked for accelerations only (ForceSolver::setPotentialsWanted) for the whole run.
  std::function<void(Particles&)> outputPotentials;
  /// Optional: called after onOutput at every output (t = 0 and the end included) with the cost of the run since
  /// the previous output; what `matcha run --timings` prints as its line per output.
  std::function<void(const OutputTimings&)> onTimings;
  /// Optional: called once when the run stops on a value that is not finite, right before runLeapfrog throws
  /// NumericalError, with the last good state kept (every kLastGoodEverySteps steps and at each output: its
  /// positions, velocities, accelerations and potentials as they were after that step's force call, potentials NaN
  /// where that call computed none (between outputs); at step 0 before
  /// the first force call, the initial conditions as given), its time and its step, so that it can be saved. What it
  /// throws replaces NumericalError.
  std::function<void(const Particles& lastGood, double time, std::uint64_t step)> onNonFinite;
  /// Optional: a checkpoint is due (IntegratorParams::checkpointInterval of wall time since the last, or an output
  /// since the last when that is a minute old or the interval is shorter; on sharedSeconds' clock where that is set,
  /// so that every process takes its checkpoints after the same steps) and the solver can save its state
  /// (ForceSolver::atCheckpointBoundary): the state after step `position.step` at time `time`. Never after the last
  /// step.
  std::function<void(const Particles&, double time, const RunPosition& position)> onCheckpoint;
  /// Optional: called after every step whose force call was the last on its tree (ForceSolver::atCheckpointBoundary:
  /// the next call puts a new tree to use; for a solver without state, every step), with the state after the step:
  /// where a tree reused over several steps is least accurate, so that a caller can measure the forces there
  /// (`matcha run --force-check`). It must not change `p`. Its time counts as output time, not step time.
  std::function<void(const Particles&, double time, std::uint64_t step)> onLastCallOnTree;
  /// Optional: called with every diagnostics the run measures, in time order, before the output's onOutput where
  /// there is one: the start, outputs, the progress line's energies, and every step where the schedule asks
  /// (StepSchedule::plansDiagnostics: a comoving run's Layzer-Irvine integral). At most once per step.
  std::function<void(const Diagnostics&)> onDiagnostics;
  /// Optional, for a run whose bodies are spread over several processes (each runs this loop on its own share, the
  /// solver exchanging what the forces need): the whole system's diagnostics from those of this process's bodies
  /// (measureDiagnostics), e.g. their sums over the processes. It may be collective: with it set, the loop measures
  /// diagnostics only where every process does (outputs, every step where the schedule asks, and the progress line's
  /// steps when they follow sharedSeconds; without it, the progress line shows the latest output's energy error).
  std::function<Diagnostics(const Diagnostics& local)> combineDiagnostics;
  /// Optional, with combineDiagnostics and onProgress set on every process: the run's wall seconds as the processes
  /// agree on them (e.g. one process's, broadcast) from this process's `local` ones; the progress line's energies and
  /// the checkpoints (onCheckpoint) are planned on this clock, so that they fall on the same steps everywhere. Called
  /// by every process at the same points (at most three times a step with checkpoints, twice without), so it may be
  /// collective.
  std::function<double(double local)> sharedSeconds;
};

/// The whole run. Its times are wall clock; the force calls' split into phases is the solver's (ForceTimings).
struct RunSummary {
  std::uint64_t steps = 0;           ///< steps taken
  double wallSeconds = 0.0;          ///< whole run, callbacks included
  double forceSeconds = 0.0;         ///< sum of the solver's reported timings.totalSeconds over all force calls
  ForceTimings initialForceTimings;  ///< the initial force call (the one that may run Phase::estimate)
  ForceTimings stepForceTimings;     ///< the steps' force calls, summed (the initial call not included)
  double stepWallSeconds = 0.0;      ///< wall time of the steps (kick, drift, force call, kick), outputs excluded
  /// Of it, the first step's (this process's first: a restart's after the checkpoint), where a run of two or more steps
  /// timed it: a run's first steps pay one-off costs (a solver's pipeline started, on K ranks the bodies moved from
  /// their scattered shares into their domains), so the steps after it give the pace of a long run.
  std::optional<double> firstStepWallSeconds;
  double integrationSeconds = 0.0;  ///< the kicks and drifts of all steps
  double driftInCallSeconds = 0.0;  ///< of it, OutputTimings::driftInCallSeconds, summed
  double stepCpuSeconds = 0.0;      ///< CPU time of the process over the steps, all threads, outputs excluded
  double outputSeconds = 0.0;       ///< every OutputTimings::outputSeconds, output 0 included
  std::uint64_t rebuilds = 0;       ///< steps' force calls that put a new tree to use (ForceReport::rebuilt)
  std::array<std::uint64_t, kNumTreeEnds> treeEnds{};  ///< OutputTimings::treeEnds over the steps
  std::uint64_t plannedCalls = 0;                      ///< OutputTimings::plannedCalls over the steps
  std::uint64_t longRangeSteps = 0;                    ///< OutputTimings::longRangeSteps over the steps
  std::uint64_t groupsWalked = 0;                      ///< ForceReport::numGroupsWalked over the steps' force calls
  std::uint64_t groupsRepaired = 0;                    ///< ForceReport::numGroupsRepaired over the steps' force calls
  std::uint64_t bodiesEscaped = 0;                     ///< ForceReport::numBodiesEscaped over the steps' force calls
  /// StepReport::bodiesStepped over the steps (block time steps: fewer than N a step).
  std::uint64_t bodiesStepped = 0;
  std::uint64_t callsAdvancedOnDevice = 0;  ///< steps' force calls with ForceReport::advancedOnDevice
  std::uint64_t advanceMismatches = 0;      ///< steps' force calls with ForceReport::advanceMismatch
  double initialEnergy = 0.0;               ///< E at t = 0
  double finalEnergy = 0.0;                 ///< E at tEnd
  double relativeEnergyError = 0.0;         ///< |E_final - E_0| / |E_0| (see relativeEnergyError)
  InteractionCounts interactions;           ///< summed over all force calls, the initial one included
  std::uint64_t forceCalls = 0;             ///< this process's force calls: steps + 1, or a restarted run's steps since
  Diagnostics initial;                      ///< at t = 0
  Diagnostics final;                        ///< at tEnd
};

/// Runs KDK leapfrog from params.tStart to params.tEnd with step params.dt: one initial force call, then
/// round((tEnd - tStart) / dt) steps; the times reported (diagnostics, progress) are tStart + steps * dt. Output k (k =
/// 1, 2, ...) happens after step round(k outputInterval / dt) (the nearest step, computed from k so that no drift
/// accumulates); outputs that would fall on the same step are merged, and the final step is always an output.
/// Diagnostics are measured at every output (after callbacks.outputPotentials, when set) and, when onProgress is set
/// without outputPotentials, for the progress report at most once a second of wall time (one O(N) pass; the report
/// repeats the latest energy error in between). Every step and output is timed (RunSummary, RunCallbacks::onTimings): a
/// few clock reads per step.
///
/// @param p          in/out: the initial state, advanced to tEnd; may be reordered by the solver (ids survive)
/// @param solver     in: gravity
/// @param params     in: dt, tEnd, outputInterval
/// @param callbacks  in: either may be empty
/// Every step checks the new state for values that are not finite (LeapfrogKDK::step: positions, velocities,
/// accelerations, and potentials when the solver computes them), as does the initial force call, and every
/// measurement of the diagnostics checks the energies. The first such value stops the run: onNonFinite gets the last
/// good state, kept by a copy of the state after every good step (one parallel pass; memory for a second state).
///
/// @throws InputError when params.validate() fails, when (tEnd - tStart) / dt is not within 1e-9 (relative) of an
/// integer
///         ("t-end must be a multiple of dt"), or when it exceeds 2^53 steps; NumericalError (one line: the step, the
///         time, the body's id and index, the quantity and its value) on the first value that is not finite;
///         whatever the solver or callbacks throw
/// @param resumeFrom in, optional: continue a run from a checkpoint: `p` is the state after step resumeFrom->step
///                   with its forces, the solver restored (ForceSolver::restoreState); no initial force call and no
///                   output 0, the outputs go on from resumeFrom->nextOutputIndex, and the summary's energy error is
///                   against resumeFrom->initial. Every later step is then what the uninterrupted run computed.
RunSummary runLeapfrog(Particles& p, ForceSolver& solver, const IntegratorParams& params, const RunCallbacks& callbacks,
                       const RunPosition* resumeFrom = nullptr);

/// The same run with the steps of `schedule` (runLeapfrog is runSteps with FixedSteps(params)): each step is planned
/// just before it is taken, from the state it starts from; outputs fall where the schedule says, and the last
/// planned step ends the run. Of `params` only boxSize and checkpointInterval are read here. With
/// schedule.plansDiagnostics(), the solver computes potentials at the steps whose PlannedStep::diagnostics is set and
/// the diagnostics are measured after each of them (onDiagnostics), and nowhere else but at outputs. A step that sets
/// PlannedStep::softening changes the solver's before its force call. Throws as runLeapfrog, and what the schedule
/// throws.
RunSummary runSteps(Particles& p, ForceSolver& solver, StepSchedule& schedule, const IntegratorParams& params,
                    const RunCallbacks& callbacks, const RunPosition* resumeFrom = nullptr);

}  // namespace matcha::integrator
