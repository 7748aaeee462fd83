// SPDX-License-Identifier: MIT
#include "matcha/integrator/hermite_run.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "matcha/core/errors.hpp"
#include "matcha/core/stopwatch.hpp"
#include "run_support.hpp"

namespace matcha::integrator {

namespace {

/// `value` / `unit` as a whole number, or nullopt when it is not one to 1e-9 (relative).
std::optional<std::uint64_t> wholeMultiple(double value, double unit) {
  const double ratio = value / unit;
  const double nearest = std::round(ratio);
  if (!(nearest >= 0.0 && nearest <= 0x1p53) || std::abs(ratio - nearest) > 1e-9 * std::max(1.0, ratio)) {
    return std::nullopt;
  }
  return static_cast<std::uint64_t>(nearest);
}

}  // namespace

void validateHermiteRun(const IntegratorParams& params, const HermiteParams& hermite) {
  params.validate();
  hermite.validate();
  if (params.boxSize != 0.0) throw InputError("hermite runs have open boundaries: no periodic box");
  std::ostringstream message;
  message.precision(12);
  if (!wholeMultiple(params.outputInterval, hermite.maxStep).value_or(0)) {
    message << "--output-interval " << params.outputInterval << " must be a whole number of the largest step "
            << hermite.maxStep << " (hermite runs synchronise every body at the outputs)";
    throw InputError(message.str());
  }
  const double span = params.tEnd - params.tStart;
  if (!wholeMultiple(span, hermite.maxStep)) {
    const double below = std::floor(span / hermite.maxStep) * hermite.maxStep;
    message << "--t-end " << params.tEnd << " must lie a whole number of the largest step " << hermite.maxStep
            << " after the start " << params.tStart << " (every body is synchronised at the end): e.g. t-end "
            << params.tStart + below << " or " << params.tStart + below + hermite.maxStep;
    throw InputError(message.str());
  }
  // Block times are sums of powers of two from 0: exact in double while they need at most 52 bits below the span.
  if (span / hermite.minStep > 0x1p52) {
    message << "the smallest step " << hermite.minStep << " is too small for a run of " << span
            << " time units: block times would round in double; raise --min-step to " << span * 0x1p-52 << " or more";
    throw InputError(message.str());
  }
}

HermiteRunSummary runHermite(Particles& p, HermiteIntegrator& integrator, const IntegratorParams& params,
                             const RunCallbacks& callbacks, const RunPosition* resumeFrom) {
  MATCHA_ASSERT(!callbacks.outputPotentials && !callbacks.onTimings && !callbacks.onLastCallOnTree,
                "runHermite: outputPotentials, onTimings and onLastCallOnTree belong to solver runs");
  const HermiteParams& hermite = integrator.params();
  validateHermiteRun(params, hermite);
  const Stopwatch wall;
  HermiteRunSummary result;
  RunSummary& summary = result.run;
  const double span = params.tEnd - params.tStart;
  const std::uint64_t syncsPerOutput = *wholeMultiple(params.outputInterval, hermite.maxStep);

  // The state of the latest output, what onNonFinite saves when a step fails: between outputs the bodies are at
  // their own times, a state no snapshot could describe.
  Particles lastGood;
  double lastGoodTime = params.tStart;
  std::uint64_t lastGoodStep = 0;
  detail::copyState(p, lastGood);
  const auto failed = [&](const NumericalError& error) {
    if (callbacks.onNonFinite) callbacks.onNonFinite(lastGood, lastGoodTime, lastGoodStep);
    throw error;
  };

  std::uint64_t outputIndex = 0;
  const auto output = [&](double time) {
    integrator.measurePotentials(p);
    const Diagnostics now = measureDiagnostics(p, time);
    if (!std::isfinite(now.total)) {
      failed(NumericalError(
          detail::describeNonFinite("block step", integrator.counters().blockSteps, time, std::nullopt, &now)));
    }
    if (callbacks.onDiagnostics) callbacks.onDiagnostics(now);
    if (callbacks.onOutput) callbacks.onOutput(p, now, outputIndex);
    ++outputIndex;
    detail::copyState(p, lastGood);
    lastGoodTime = time;
    lastGoodStep = integrator.counters().blockSteps;
    return now;
  };

  double outputSeconds = 0.0;
  if (resumeFrom != nullptr) {
    MATCHA_ASSERT(integrator.synchronized(), "runHermite: resume from a restored integrator");
    summary.initial = resumeFrom->initial;
    summary.final = summary.initial;
    outputIndex = resumeFrom->nextOutputIndex;
    lastGoodTime = params.tStart + integrator.time();
    lastGoodStep = integrator.counters().blockSteps;
  } else {
    try {
      integrator.initialize(p);
    } catch (const NumericalError& error) {
      failed(error);
    }
    const Stopwatch clock;
    // The first force call's potentials are at the bodies' own positions already; measurePotentials repeats that
    // call, which keeps every output's energies measured alike.
    summary.initial = output(params.tStart);
    summary.final = summary.initial;
    outputSeconds += clock.seconds();
  }
  const HermiteCounters atStart = integrator.counters();
  const double fractionAtStart = span > 0.0 ? integrator.time() / span : 1.0;
  detail::PaceSinceFirstStep pace;  // from the end of the first block step, as runLeapfrog's
  double latestEnergy = summary.final.total;
  detail::CheckpointCadence checkpoints(params.checkpointInterval, wall.seconds());

  while (integrator.time() < span) {
    try {
      integrator.step(p);
    } catch (const NumericalError& error) {
      failed(error);
    }
    const double time = integrator.time();
    const bool last = time >= span;
    if (integrator.synchronized()) {
      // Multiples of the largest step: every body is here. Outputs fall on every syncsPerOutput-th and at the end.
      const auto syncIndex = static_cast<std::uint64_t>(time / hermite.maxStep);
      if (syncIndex % syncsPerOutput == 0 || last) {
        const Stopwatch clock;
        summary.final = output(params.tStart + time);
        latestEnergy = summary.final.total;
        checkpoints.noteOutput();
        outputSeconds += clock.seconds();
      }
      if (callbacks.onCheckpoint && !last && checkpoints.due(wall.seconds())) {
        callbacks.onCheckpoint(
            p, params.tStart + time,
            RunPosition{integrator.counters().blockSteps, outputIndex, summary.initial, params.tStart + time});
        checkpoints.taken(wall.seconds());
      }
    }
    if (callbacks.onProgress) {
      const HermiteCounters& counters = integrator.counters();
      ProgressInfo info;
      info.step = counters.blockSteps;
      info.bodySteps = counters.bodySteps;
      info.time = params.tStart + time;
      info.tEnd = params.tEnd;
      info.elapsedSeconds = wall.seconds();
      const double fraction = span > 0.0 ? time / span : 1.0;
      const bool progressed = fraction > fractionAtStart;
      // The steps ahead are not known: the block steps so far scaled to the whole span.
      const double estimate = progressed ? static_cast<double>(counters.blockSteps - atStart.blockSteps) *
                                                   (1.0 - fractionAtStart) / (fraction - fractionAtStart) +
                                               static_cast<double>(atStart.blockSteps)
                                         : 0.0;
      info.totalSteps = last ? counters.blockSteps
                             : std::max<std::uint64_t>(counters.blockSteps + 1, static_cast<std::uint64_t>(estimate));
      pace.markFirstStep(fraction, info.elapsedSeconds);
      info.etaSeconds = last ? 0.0 : pace.etaSeconds(fraction, info.elapsedSeconds);  // -1 until known
      info.relativeEnergyError = relativeEnergyError(latestEnergy, summary.initial.total);
      callbacks.onProgress(info);
    }
  }

  const HermiteCounters& counters = integrator.counters();
  result.counters = counters;
  summary.steps = counters.blockSteps;
  summary.wallSeconds = wall.seconds();
  summary.forceSeconds = counters.forceSeconds;
  summary.stepWallSeconds = counters.forceSeconds + counters.integrationSeconds;
  summary.integrationSeconds = counters.integrationSeconds;
  summary.outputSeconds = outputSeconds;
  summary.interactions.bodyBody = counters.interactions;
  summary.initialEnergy = summary.initial.total;
  summary.finalEnergy = summary.final.total;
  summary.relativeEnergyError = relativeEnergyError(summary.finalEnergy, summary.initialEnergy);
  return result;
}

}  // namespace matcha::integrator
