// SPDX-License-Identifier: MIT
// What the leapfrog's run loop (run_loop.cpp) and the Hermite run (hermite_run.cpp) share: when a checkpoint is due,
// the ETA's pace, the copy of the last good state, and the one-line description of a value that is not finite. Private
// to integrator/.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "matcha/core/particles.hpp"
#include "matcha/integrator/diagnostics.hpp"
#include "matcha/integrator/leapfrog.hpp"

namespace matcha::integrator::detail {

/// When a run writes a checkpoint (RunCallbacks::onCheckpoint): every `interval` wall seconds, and after an output
/// unless the last checkpoint is younger than a minute (or the interval, when that is shorter); the first output is
/// always followed by one. The caller asks at the places where it can save its state; a checkpoint that has waited
/// for such a place longer than a minute (or the interval) is overdue, and the caller makes one
/// (ForceSolver::endTreeForCheckpoint). So is one that follows an output: written at the output's step it is the
/// output's state (one copy of the bodies serves both), and a run that ends a few steps after its output still
/// leaves a checkpoint there, where late in a comoving run no tree ends at a boundary for minutes. With interval 0
/// checkpoints take the places as they come and are never overdue.
class CheckpointCadence {
 public:
  /// @param interval  in: IntegratorParams::checkpointInterval (wall seconds, >= 0)
  /// @param now       in: the run's wall clock at its start
  CheckpointCadence(double interval, double now) : interval_(interval), last_(now) {}

  /// An output was written (at wall time irrelevant: it only makes the next boundary a candidate).
  void noteOutput() { outputSince_ = true; }

  /// Whether a checkpoint is due at wall time `now`; the first time it is, the wait for a place to take it starts.
  bool due(double now) {
    const double since = now - last_;
    const bool isDue =
        since >= interval_ || (outputSince_ && (!taken_ || since >= std::min(interval_, kOutputCheckpointSeconds)));
    if (isDue && !waiting_) {
      waiting_ = true;
      dueSince_ = now;
    }
    return isDue;
  }

  /// Whether the due checkpoint follows an output or has waited for a place longer than min(interval, a minute) by
  /// wall time `now`.
  bool overdue(double now) const {
    return interval_ > 0.0 && waiting_ &&
           (outputSince_ || now - dueSince_ >= std::min(interval_, kOutputCheckpointSeconds));
  }

  /// A checkpoint was written; `now` is the wall time after it.
  void taken(double now) {
    last_ = now;
    outputSince_ = false;
    taken_ = true;
    waiting_ = false;
  }

 private:
  /// An output is followed by a checkpoint unless the last one is younger than this (wall seconds): at 2^22 bodies a
  /// checkpoint is ~0.9 GB and half a second to write, which outputs every few seconds would pay again and again.
  static constexpr double kOutputCheckpointSeconds = 60.0;

  double interval_;
  double last_;
  bool outputSince_ = false;
  bool taken_ = false;
  bool waiting_ = false;   ///< a checkpoint is due and waits for a place to take it
  double dueSince_ = 0.0;  ///< since when (while waiting_)
};

/// to <- from, every array, in parallel blocks (the copy of the last good state).
void copyState(const Particles& from, Particles& to);

/// "step 5, t = 0.0390625: body id 17 (index 3): ax = nan" and, when the diagnostics' sums overflowed with every
/// value finite (value unset), the energy of `diagnostics` instead. `stepName` is "step" or "block step".
std::string describeNonFinite(const char* stepName, std::uint64_t step, double time,
                              const std::optional<NonFiniteValue>& value, const Diagnostics* diagnostics);

/// The progress line's ETA from the run's pace since the end of its first step: that step carries the warm-up (a
/// restarted run's first tree and mesh, the device's first launches: 3.7-4.7 s against a 256^3 box's ~0.18 s steps on
/// the H200), which made the first minute's ETAs hours long.
class PaceSinceFirstStep {
 public:
  /// Records the share of the run done (StepSchedule::fractionDone) and the wall time at the end of the first step;
  /// later calls change nothing.
  void markFirstStep(double fraction, double seconds) {
    if (marked_) return;
    marked_ = true;
    fraction_ = fraction;
    seconds_ = seconds;
  }
  /// The wall time since the first step times (share left) / (share done since); -1 (not known) before any share is
  /// done since the first step.
  double etaSeconds(double fraction, double seconds) const {
    if (!marked_ || !(fraction > fraction_)) return -1.0;
    return (seconds - seconds_) * (1.0 - fraction) / (fraction - fraction_);
  }

 private:
  bool marked_ = false;
  double fraction_ = 0.0;
  double seconds_ = 0.0;
};

}  // namespace matcha::integrator::detail
