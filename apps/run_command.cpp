// SPDX-License-Identifier: MIT
// `matcha run`: initial conditions -> leapfrog with the chosen solver -> snapshots, diagnostics log, summary.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "matcha/core/errors.hpp"
#include "matcha/gpu/engine_factory.hpp"
#include "matcha/integrator/run_loop.hpp"
#include "matcha/io/snapshot.hpp"

namespace matcha::app {

namespace {

constexpr unsigned kRunOptions = kBodies | kTree | kGravity | kIntegrator | kSolver | kEngine | kJson;

// One progress line at most per second (and at the last step); rewritten in place on a terminal.
class ProgressLine {
 public:
  void update(const integrator::ProgressInfo& info) {
    const bool last = info.step == info.totalSteps;
    if (!last && info.elapsedSeconds - lastPrinted_ < 1.0) return;
    lastPrinted_ = info.elapsedSeconds;
    std::fprintf(stderr, "%sstep %llu/%llu  t = %.4f/%.4g  elapsed %.1f s  ETA %.1f s  |dE/E| = %.2e%s",
                 terminal_ ? "\r" : "", static_cast<unsigned long long>(info.step),
                 static_cast<unsigned long long>(info.totalSteps), info.time, info.tEnd, info.elapsedSeconds,
                 info.etaSeconds, info.relativeEnergyError, terminal_ ? (last ? "\n" : "   ") : "\n");
    std::fflush(stderr);
  }

 private:
  bool terminal_ = ::isatty(STDERR_FILENO) != 0;
  double lastPrinted_ = -1e30;
};

int runSimulation(const CLI::App& command, const Options& options) {
  validateOptions(options, kRunOptions);
  const std::filesystem::path outDir = options.outPath;
  io::ensureWritableDirectory(outDir);
  // Human-readable lines go to stdout, or to stderr when stdout carries the JSON summary.
  std::ostream& info = options.json ? std::cerr : std::cout;

  Particles particles = loadInitialConditions(options);
  gpu::EngineChoice engine = gpu::makeEngine(options.engine);
  const std::unique_ptr<ForceSolver> solver = makeSolver(options, *engine.engine);
  info << "matcha run: " << particles.size() << " bodies from "
       << (options.icFile.empty() ? "a Plummer sphere (seed " + std::to_string(options.seed) + ")" : options.icFile)
       << "\nsolver: " << solver->describe() << "\nengine: " << engine.reason << "\noutput: " << outDir.string()
       << "/ (snapshot_NNN.hdf5, diagnostics.log, used_parameters.toml, summary.json)\n";

  writeTextFile((outDir / "used_parameters.toml").string(), usedParameters(command));
  std::ofstream log(outDir / "diagnostics.log", std::ios::trunc);
  if (!log) throw IoError("cannot write " + (outDir / "diagnostics.log").string());
  log << "# " << solver->describe() << "\n" << integrator::diagnosticsHeader() << "\n";
  info << integrator::diagnosticsHeader() << "\n";

  io::SnapshotMetadata metadata;
  metadata.parameters = usedParameterList(command);
  integrator::Diagnostics initial;
  ProgressLine progress;
  integrator::RunCallbacks callbacks;
  callbacks.onOutput = [&](const Particles& state, const integrator::Diagnostics& diagnostics, std::uint64_t index) {
    if (index == 0) initial = diagnostics;
    const std::string row = integrator::formatDiagnostics(diagnostics, initial);
    log << row << std::endl;
    info << row << std::endl;
    char name[32];
    std::snprintf(name, sizeof name, "snapshot_%03llu.hdf5", static_cast<unsigned long long>(index));
    metadata.time = diagnostics.time;
    io::writeSnapshot(outDir / name, state, metadata);
  };
  callbacks.onProgress = [&](const integrator::ProgressInfo& step) { progress.update(step); };

  const integrator::RunSummary summary = integrator::runLeapfrog(particles, *solver, options.integrator, callbacks);
  const double interactionsPerSecond =
      summary.forceSeconds > 0 ? double(summary.interactions.total()) / summary.forceSeconds : 0.0;
  const nlohmann::json json = {
      {"bodies", particles.size()},
      {"solver", solver->describe()},
      {"engine", engine.engine->name()},
      {"steps", summary.steps},
      {"t_end", options.integrator.tEnd},
      {"dt", options.integrator.dt},
      {"initial_energy", summary.initialEnergy},
      {"final_energy", summary.finalEnergy},
      {"relative_energy_error", summary.relativeEnergyError},
      {"wall_seconds", summary.wallSeconds},
      {"force_seconds", summary.forceSeconds},
      {"interactions", {{"body_body", summary.interactions.bodyBody}, {"body_cell", summary.interactions.bodyCell}}},
      {"interactions_per_second", interactionsPerSecond},
      {"output_dir", outDir.string()}};
  writeTextFile((outDir / "summary.json").string(), json.dump(2) + "\n");
  log << "# |dE/E| = " << summary.relativeEnergyError << " after " << summary.steps << " steps\n";
  if (options.json) {
    std::cout << json.dump(2) << std::endl;
  } else {
    std::printf(
        "summary: |dE/E| = %.3e after %llu steps to t = %g; wall %.2f s (force %.2f s); %.3e interactions/s "
        "(%.0f body-body + %.0f body-cell per body per step)\n",
        summary.relativeEnergyError, static_cast<unsigned long long>(summary.steps), options.integrator.tEnd,
        summary.wallSeconds, summary.forceSeconds, interactionsPerSecond,
        double(summary.interactions.bodyBody) / double(particles.size()) / double(summary.steps + 1),
        double(summary.interactions.bodyCell) / double(particles.size()) / double(summary.steps + 1));
  }
  return 0;
}

}  // namespace

std::function<int()> addRunCommand(CLI::App& parent, Options& options) {
  CLI::App* command = parent.add_subcommand("run", "run a simulation (default: 65,536-body Plummer sphere to t = 1)");
  addOptions(*command, options, kRunOptions);
  options.outPath = "matcha-out";
  command->add_option("--out", options.outPath, "output folder (created if missing)")->capture_default_str();
  return [command, &options] { return runSimulation(*command, options); };
}

}  // namespace matcha::app
