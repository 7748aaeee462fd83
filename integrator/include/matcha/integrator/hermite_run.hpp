// SPDX-License-Identifier: MIT
// A Hermite run (`matcha run --integrator hermite`): block steps from the start to the end with outputs, progress,
// checkpoints and the last good state through the same callbacks as a leapfrog run (run_loop.hpp), so that the apps
// write snapshots, the diagnostics log and summary.json alike for both.
#pragma once

#include "matcha/core/params.hpp"
#include "matcha/core/particles.hpp"
#include "matcha/integrator/hermite.hpp"
#include "matcha/integrator/run_loop.hpp"

namespace matcha::integrator {

/// A Hermite run's summary: RunSummary's fields (steps = block steps; forceSeconds = the engine's time in the
/// steps, diagnostic potentials apart; interactions.bodyBody = the pairs of the steps' and the initial force calls)
/// and the integrator's counters.
struct HermiteRunSummary {
  RunSummary run;
  HermiteCounters counters;
};

/// The checks runHermite makes before any work, for callers that want them earlier (`matcha run` before it makes the
/// bodies): params valid (IntegratorParams::validate), open boundaries, and every output and the end on a
/// synchronisation time: outputInterval and tEnd - tStart whole numbers of maxStep, and (tEnd - tStart) / minStep at
/// most 2^52 so that every block time is exact in double.
/// @throws InputError (one line, naming the values that would do)
void validateHermiteRun(const IntegratorParams& params, const HermiteParams& hermite);

/// Integrates `p` with `integrator` from params.tStart to params.tEnd. Outputs (onOutput, after onDiagnostics) at the
/// start, every params.outputInterval and at the end: all of them synchronisation times (multiples of the largest
/// step from the start, validateHermiteRun), where every body is at the output's time and the potentials are those
/// of the corrected positions (HermiteIntegrator::measurePotentials): the schedule of the block steps is the same
/// whatever the outputs. onProgress after every block step (ProgressInfo::step = block steps, bodySteps, the energy
/// error of the latest output); onCheckpoint at synchronisation times when due (as runLeapfrog: the interval, the
/// first output, outputs a minute apart), never at the end; onNonFinite with the state of the latest output (or the
/// initial conditions) before a NumericalError (a value not finite, or a step below the smallest) is rethrown.
/// outputPotentials, onTimings and onLastCallOnTree must be empty (InvariantError): they belong to solvers.
///
/// @param p           in/out: the bodies (never reordered), advanced to tEnd
/// @param integrator  in/out: with the run's parameters; initialized here, or restored by the caller (resumeFrom)
/// @param params      in: tStart, tEnd, outputInterval, checkpointInterval (dt is the leapfrog's and not read)
/// @param resumeFrom  in, optional: continue from a checkpoint: `integrator` restored (HermiteIntegrator::restore) and
///                    `p` its bodies; no initial force call and no output 0; outputs go on from nextOutputIndex
/// @throws InputError as validateHermiteRun; NumericalError; whatever the engine or the callbacks throw
HermiteRunSummary runHermite(Particles& p, HermiteIntegrator& integrator, const IntegratorParams& params,
                             const RunCallbacks& callbacks, const RunPosition* resumeFrom = nullptr);

}  // namespace matcha::integrator
