// SPDX-License-Identifier: MIT
// What `matcha run --restart` needs of a run folder and its checkpoint on one rank and on several (run_command.cpp,
// distributed_run.cpp): the run's first diagnostics in the checkpoint's run state, the folder rewound to the
// checkpoint, and the checks of a continued run's end.
#pragma once

#include <filesystem>

#include "matcha/core/checkpoint_state.hpp"
#include "matcha/integrator/diagnostics.hpp"
#include "matcha/integrator/run_loop.hpp"
#include "options.hpp"

namespace matcha::app {

/// The first diagnostics of a run into a checkpoint's run state (dE/E's reference after a restart), and back
/// (InputError naming what a checkpoint lacks).
void saveDiagnostics(const integrator::Diagnostics& d, CheckpointState& state);
integrator::Diagnostics loadDiagnostics(const CheckpointState& state);

/// A restarted run's folder as the stopped run left it at its checkpoint: snapshots from the checkpoint's next
/// output on (written after it) are removed, and the diagnostics log is cut after the last line at or before the
/// checkpoint's time (within `tolerance`), so that the continued run appends what the stopped one would have.
void rewindRunFolder(const std::filesystem::path& dir, const integrator::RunPosition& position, double time,
                     double tolerance);

/// Whether the run in `dir` ended (summary.json says "complete"): it went past its last checkpoint.
bool runIsComplete(const std::filesystem::path& dir);

/// A restart of a run that ended continues it only towards a later end than it had: InputError otherwise.
void requireLaterEnd(const std::filesystem::path& dir, const Options& options, const CheckpointState& run,
                     bool complete);

/// A fixed-step leapfrog run's checkpoint `run` (in `dir`, after step `step`) goes on with `options` only with its own
/// dt and towards an end after that step (later than its t-end when the run is `complete`): InputError otherwise.
/// options.integrator.tStart must be the checkpoint's.
void requireLeapfrogContinues(const std::filesystem::path& dir, const Options& options, const CheckpointState& run,
                              std::uint64_t step, bool complete);

}  // namespace matcha::app
