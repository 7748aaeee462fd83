// SPDX-License-Identifier: MIT
// The subcommands of `matcha`. Each registers its options on a CLI11 subcommand and returns what to run.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "force_reference.hpp"
#include "matcha/core/checkpoint_state.hpp"
#include "matcha/core/force_solver.hpp"
#include "matcha/core/hermite_engine.hpp"
#include "matcha/tree/tree_solver.hpp"
#include "options.hpp"

namespace matcha::app {

/// The option groups of `run` and `compare`.
inline constexpr unsigned kRunOptions = kBodies | kTree | kGravity | kIntegrator | kSolver | kEngine | kJson |
                                        kDiagnostics | kTimings | kDryRun | kPeriodic;
inline constexpr unsigned kCompareOptions = kBodies | kTree | kTreeSweep | kGravity | kEngine | kJson | kPeriodic;

/// compare's own options, beside the shared ones.
struct CompareOptions {
  std::string reference = "auto";  ///< --reference: auto, cpu-double or gpu-double
  std::int64_t sample = 0;         ///< --sample: bodies the errors are measured on, 0 = all
  std::uint64_t sampleSeed = 1;    ///< --sample-seed
  std::string csvPath;             ///< --csv: one row per configuration
};

/// One tree configuration's forces on compare's targets, as the configuration's solver measured them.
struct TreeMeasurement {
  ForceReport report;     ///< the timed call's (interactions over all processes)
  tree::TreeStats stats;  ///< cells, groups and list lengths
  double seconds = 0.0;   ///< wall time of the timed call
  TargetForces forces;    ///< the accelerations of the sample's targets, by slot
  std::string description;
};

/// How `compare` shares its work with other processes (compareDistributed): on rank 0, its bodies once ready (ids
/// 0..N-1, before the sweep) go to the others, and each configuration is measured by all of them together.
struct CompareSharing {
  std::function<void(const Particles& bodies)> shareBodies;
  std::function<TreeMeasurement(const Options& configuration, const Sample& sample)> measure;
};

/// How a Hermite run spans several processes (runDistributed). Rank 0 runs it as one rank does, in its folder; every
/// rank integrates the same bodies alike (the integration is O(N) a block step, the forces O(N^2)), and their engines
/// share each force sum, the j-particles split over them. On rank 0, once the run is checked and its bodies (with a
/// restart's integrator state) are known, `share` hands them, the run's parameters and rank 0's engine to the others,
/// and returns the engine that spans the ranks, which the run then uses (with --dry-run: rank 0's own, the others
/// stopping).
struct HermiteSharing {
  std::function<std::unique_ptr<HermiteEngine>(const Options& options, const Particles& bodies,
                                               const CheckpointState* integratorState,
                                               std::unique_ptr<HermiteEngine> engine)>
      share;
};

/// `matcha run` of a Hermite run (fresh, or --restart of a Hermite checkpoint) on rank 0 of several (runDistributed),
/// sharing as `sharing` says: the one-rank command with its checks, its folder and its outputs.
int runHermiteOnRankZero(CLI::App& command, const Options& options, const HermiteSharing& sharing);

/// `matcha compare` of the bodies of `given` (the one-rank command when `sharing` is null).
int compareSolvers(const Options& given, const CompareOptions& compare, const CompareSharing* sharing);

/// Throws InputError (one line) unless 0 <= --force-check K <= the run's bodies.
void requireForceCheckSample(const Options& options, std::uint64_t numBodies);

/// summary.json's record of the build.
nlohmann::json buildJson();

/// Whether `matcha run`'s diagnostics take their potentials from a direct sum at each output rather than from the
/// solver (--diagnostic-potential, its auto by the run's size and engine).
bool directOutputPotentials(const Options& options, std::size_t numBodies, bool onGpu);

/// Registers the subcommand on `parent`; the returned function runs it after parsing and returns the exit code.
std::function<int()> addRunCommand(CLI::App& parent, Options& options);
std::function<int()> addCompareCommand(CLI::App& parent, Options& options);
std::function<int()> addIcCommand(CLI::App& parent, Options& options);
/// `tune`: the fastest tree setting for the bodies at an error target (apps/tune_command.cpp).
std::function<int()> addTuneCommand(CLI::App& parent, Options& options);
/// `render` keeps its own options (none are shared with the other subcommands).
std::function<int()> addRenderCommand(CLI::App& parent);
/// `analyze` and its measurements (`analyze power`, `analyze pancake`), with their own options.
std::function<int()> addAnalyzeCommand(CLI::App& parent);

}  // namespace matcha::app
