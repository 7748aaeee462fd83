// SPDX-License-Identifier: MIT
// Where a run's time goes, as `matcha run --timings` prints it and as summary.json and `compare --json` record it.
// Phases are listed by looping over core's Phase, so a phase added there appears here without an edit.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "matcha/core/force_solver.hpp"
#include "matcha/integrator/run_loop.hpp"

namespace matcha::app {

/// A span of wall time for people: "42 s", "12 min 5 s", "2 h 13 min", "3 d 4 h", "> 1 year" (an ETA of a run that
/// will not end in any useful time), "?" when not finite or negative.
std::string formatDuration(double seconds);

/// {phase name: seconds * scale} for every phase, zeros included.
nlohmann::json phasesJson(const ForceTimings& timings, double scale = 1.0);

/// The line printed after an output's diagnostics line (no newline), in milliseconds per step, phases that took no
/// time left out:
///   # timings since last output: N steps, X ms/step (force Y: keys .. walk .. kernels ..; integration Z; output W)
/// where X is the step's wall time (kicks, drift, force call) and W the output work spread over the steps. At
/// output 0, which has no steps, the initial force call's phases in milliseconds.
std::string formatOutputTimings(const integrator::OutputTimings& timings);

/// The end-of-run table (lines ending in newlines): per phase of the steps' force calls, then integration, output,
/// step (wall) and force call (wall): total seconds, ms per step, % of the steps' wall time; then the busy fraction
/// (kernels / step wall time), rebuilds and groups walked per step. `onGpu` says whether the kernels phase is GPU
/// kernel time or the CPU engine's evaluation.
std::string formatTimingsTable(const integrator::RunSummary& summary, bool onGpu);

/// summary.json's "timings" object: the same numbers as the table, and the initial call's phases. Means over steps
/// are null for a run without steps.
nlohmann::json timingsJson(const integrator::RunSummary& summary, bool onGpu);

/// A run's progress on stderr: one line at most per second (and at the last step), rewritten in place on a terminal.
/// A comoving run's (layzerIrvine set) shows the redshift, the steps as an estimate ahead and the Layzer-Irvine check
/// instead of t and dE/E; a Hermite run's (blockSteps) its block steps, the bodies they advanced and the |dE/E| of its
/// latest output. On several ranks, rank 0's alone.
class ProgressLine {
 public:
  explicit ProgressLine(bool blockSteps = false);
  void update(const integrator::ProgressInfo& info, std::optional<double> layzerIrvine = std::nullopt);

 private:
  bool blockSteps_;
  bool terminal_;
  double lastPrinted_ = -1e30;
};

}  // namespace matcha::app
