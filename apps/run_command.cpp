// SPDX-License-Identifier: MIT
// `matcha run`: initial conditions -> leapfrog with the chosen solver, or Hermite with block steps on a Hermite engine
// -> snapshots, diagnostics log, summary.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <sstream>
#include <vector>

#include "commands.hpp"
#include "comoving_setup.hpp"
#include "distributed_run.hpp"
#include "force_reference.hpp"
#include "matcha/core/errors.hpp"
#include "matcha/core/force_error.hpp"
#include "matcha/core/stopwatch.hpp"
#include "matcha/core/version.hpp"
#include "matcha/gpu/engine_factory.hpp"
#include "matcha/integrator/hermite_run.hpp"
#include "matcha/integrator/run_loop.hpp"
#include "matcha/io/background_writer.hpp"
#include "matcha/io/run_folder.hpp"
#include "matcha/io/snapshot.hpp"
#include "memory_check.hpp"
#include "restart_support.hpp"
#include "timings.hpp"

namespace matcha::app {

namespace {

/// --diagnostic-potential auto takes direct sums at outputs up to these sizes: on an H100 a float direct sum of 2^21
/// bodies takes ~2.4 s (1.85e12 pairs/s), about two tree force calls at that size; on 2 CPU cores one of 2^13 bodies
/// takes ~0.1 s, while 2^16 would take ~6 s, 15 tree force calls (bench/RESULTS.md).
constexpr std::size_t kAutoDirectPotentialsMaxBodiesGpu = std::size_t{1} << 21;
constexpr std::size_t kAutoDirectPotentialsMaxBodiesCpu = std::size_t{1} << 13;

}  // namespace

/// A direct-summation run's own potentials are already direct.
bool directOutputPotentials(const Options& options, std::size_t numBodies, bool onGpu) {
  // A periodic run's potentials are TreePM's: an open-boundary direct sum would measure another energy.
  if (options.solver != SolverKind::tree || options.gravity.periodic.enabled()) return false;
  switch (options.diagnosticPotential) {
    case DiagnosticPotential::direct:
      return true;
    case DiagnosticPotential::solver:
      return false;
    case DiagnosticPotential::automatic:
      break;
  }
  return numBodies <= (onGpu ? kAutoDirectPotentialsMaxBodiesGpu : kAutoDirectPotentialsMaxBodiesCpu);
}

namespace {

/// Overwrites the potentials with a direct sum on the run's engine, in the order the solver left the bodies (the
/// tree's space-filling curve, compact blocks for the float engines); the accelerations go to scratch arrays, so the
/// trajectory does not change. Keeps the seconds spent.
class DirectPotentials {
 public:
  DirectPotentials(NearFieldEngine& engine, const GravityParams& gravity) : engine_(engine), gravity_(gravity) {}

  void operator()(Particles& p) {
    const Stopwatch clock;
    ax_.resize(p.size());
    ay_.resize(p.size());
    az_.resize(p.size());
    engine_.evaluateDirect(p.sources(), gravity_, {ax_.data(), ay_.data(), az_.data(), p.pot.data(), p.size()});
    seconds_ += clock.seconds();
  }
  double seconds() const { return seconds_; }

 private:
  NearFieldEngine& engine_;
  GravityParams gravity_;
  std::vector<double> ax_, ay_, az_;
  double seconds_ = 0.0;
};

/// What integrates a run in its folder: the leapfrog on a force solver (and the solver's engine), or the Hermite
/// integrator on its engine. Exactly one of `solver` and `hermite` is set; they outlive the run.
struct RunIntegrator {
  ForceSolver* solver = nullptr;
  gpu::EngineChoice* engine = nullptr;  ///< the solver's engine (leapfrog runs)
  integrator::HermiteIntegrator* hermite = nullptr;
  std::string hermiteEngineName;    ///< HermiteEngine::name() (Hermite runs)
  std::string hermiteEngineReason;  ///< gpu::makeHermiteEngine's reason (Hermite runs)

  static RunIntegrator leapfrog(ForceSolver& solver, gpu::EngineChoice& engine) {
    RunIntegrator runner;
    runner.solver = &solver;
    runner.engine = &engine;
    return runner;
  }
  static RunIntegrator hermiteOn(integrator::HermiteIntegrator& integrator, const HermiteEngine& engine,
                                 std::string reason) {
    RunIntegrator runner;
    runner.hermite = &integrator;
    runner.hermiteEngineName = engine.name();
    runner.hermiteEngineReason = std::move(reason);
    return runner;
  }

  /// The run log's line for what computes the forces and moves the bodies.
  std::string describe() const {
    if (hermite == nullptr) return solver->describe();
    const integrator::HermiteParams& p = hermite->params();
    std::ostringstream text;
    text << "Hermite 4th order with block time steps (Makino & Aarseth 1992): Aarseth's eta " << p.eta
         << ", first steps eta-start " << p.etaStart << ", steps powers of two from min-step " << p.minStep
         << " to max-step " << p.maxStep << "; direct summation on the Hermite engine";
    return text.str();
  }
  std::string engineReason() const { return hermite != nullptr ? hermiteEngineReason : engine->reason; }
  std::string engineName() const { return hermite != nullptr ? hermiteEngineName : engine->engine->name(); }
};

}  // namespace

// summary.json's "status" is "complete" or "failed" (with "error").
nlohmann::json buildJson() { return {{"version", kVersion}, {"git_commit", kGitCommit}, {"git_dirty", kGitDirty}}; }

namespace {

/// (tEnd - tStart) / dt must be a whole number of steps, checked before the bodies are made or read (runLeapfrog's
/// own check came after a 2^24-body Plummer sphere was generated); with an --ic snapshot's start time the plain
/// "multiple of dt" would not say why 1.0 fails.
void requireWholeStepsFromStart(const Options& options) {
  const IntegratorParams& p = options.integrator;
  if (p.tStart == 0.0) {
    integrator::checkedStepCount(p.tEnd, p.dt);
    return;
  }
  try {
    integrator::checkedStepCount(p.tEnd - p.tStart, p.dt);
  } catch (const InputError&) {
    std::ostringstream message;
    message << std::setprecision(12) << "--t-end " << p.tEnd << " is absolute time and " << options.icFile
            << " starts at t = " << p.tStart << ": t-end - " << p.tStart << " must be a multiple of dt = " << p.dt;
    throw InputError(message.str());
  }
}

/// summary.json's record of a Hermite run: its parameters and what its block steps did.
nlohmann::json hermiteJson(const integrator::HermiteRunSummary& summary, const integrator::HermiteParams& params) {
  const integrator::HermiteCounters& c = summary.counters;
  return {{"eta", params.eta},
          {"eta_start", params.etaStart},
          {"max_step", params.maxStep},
          {"min_step", params.minStep},
          {"block_steps", c.blockSteps},
          {"body_steps", c.bodySteps},
          {"mean_block_size", c.meanBlockSize()},
          {"smallest_step", c.smallestStep},
          {"largest_step", c.largestStep},
          {"interactions", c.interactions},
          {"diagnostic_interactions", c.diagnosticInteractions},
          {"engine_seconds", c.forceSeconds},
          {"host_seconds", c.integrationSeconds},
          {"diagnostic_seconds", c.diagnosticSeconds},
          {"interactions_per_second", c.forceSeconds > 0.0 ? double(c.interactions) / c.forceSeconds : 0.0}};
}

/// The run itself, in a folder that prepareRunFolder took over; ends by writing summary.json ("complete") and
/// removing the RUNNING marker.
int runInFolder(const CLI::App& command, const Options& options, Particles& particles, const RunIntegrator& runner,
                const RunMemory& memory, bool directPotentials, const std::string& source, std::ostream& info,
                const integrator::RunPosition* resume, const ComovingRun* comoving = nullptr,
                std::optional<LayzerIrvineCheck> layzerIrvine = std::nullopt) {
  const std::filesystem::path outDir = options.outPath;
  integrator::HermiteIntegrator* const hermite = runner.hermite;
  const std::string potentialSource =
      hermite != nullptr ? "the Hermite engine at each output, at the synchronised positions"
      : directPotentials
          ? "direct summation at each output (the solver computes accelerations only)"
          : (options.solver == SolverKind::tree ? "the tree's (its force error enters W)" : "the solver's");
  info << "matcha run: " << particles.size() << " bodies from " << source
       << (hermite != nullptr ? "\nintegrator: " : "\nsolver: ") << runner.describe()
       << "\nengine: " << runner.engineReason() << "\nenergy diagnostics: potentials from " << potentialSource
       << "\nmemory: ~" << formatBytes(memory.estimate.hostBytes) << " host"
       << (memory.onGpu ? ", ~" + formatBytes(memory.estimate.deviceBytes) + " device" : std::string())
       << " (estimated; --dry-run for the parts)\noutput: " << outDir.string()
       << "/ (snapshot_NNN.hdf5, diagnostics.log, used_parameters.toml, summary.json; RUNNING until the end)\n";
  if (memory.backgroundCopyBytes > 0) info << backgroundOutputDropped(memory) << "\n";
  if (resume != nullptr) {
    info << "restart: step " << resume->step << " of the run, " << (comoving != nullptr ? "a = " : "t = ")
         << resume->time << ", from " << (outDir / io::kCheckpointName).string() << "\n";
  } else if (comoving != nullptr) {
    info << describeComovingRun(*comoving, options, memory.numSteps) << "\n";
  } else if (!options.icFile.empty()) {
    info << "start: t = " << options.integrator.tStart << ", the Header Time of " << options.icFile << " (t-end "
         << options.integrator.tEnd << " is absolute time"
         << (hermite != nullptr ? std::string(")\n") : ": " + std::to_string(memory.numSteps) + " steps)\n");
  }

  io::writeTextFile(outDir / "used_parameters.toml", usedParameters(command));
  std::ofstream log(outDir / "diagnostics.log", resume != nullptr ? std::ios::app : std::ios::trunc);
  if (!log) throw IoError("cannot write " + (outDir / "diagnostics.log").string());
  if (resume != nullptr) {
    log << "# restarted at step " << resume->step << " by " << versionText() << "\n";
  } else {
    log << "# " << versionText() << "\n# " << runner.describe() << "; potentials from " << potentialSource << "\n"
        << (comoving != nullptr ? comovingDiagnosticsHeader() : integrator::diagnosticsHeader()) << "\n";
  }
  info << (comoving != nullptr ? comovingDiagnosticsHeader() : integrator::diagnosticsHeader()) << "\n";

  io::SnapshotMetadata metadata;
  metadata.parameters = usedParameterList(command);
  metadata.boxSize = options.integrator.boxSize;
  if (comoving != nullptr) {
    metadata.units = comoving->units;
    metadata.cosmology = comoving->header;
  }
  // A comoving state's metadata at scale factor a: Time a, Redshift, and the momenta written as GADGET's u.
  const auto stateAt = [&](double time, io::SnapshotMetadata& meta, io::SnapshotWriteOptions& write) {
    meta.time = time;
    if (comoving != nullptr) setComovingSnapshotState(time, meta, write);
  };
  integrator::Diagnostics initial = resume != nullptr ? resume->initial : integrator::Diagnostics{};
  ProgressLine progress(hermite != nullptr);
  integrator::RunCallbacks callbacks;
  if (comoving != nullptr) {
    callbacks.onDiagnostics = [&](const integrator::Diagnostics& diagnostics) {
      if (layzerIrvine) {
        layzerIrvine->add(diagnostics);
      } else {
        layzerIrvine.emplace(diagnostics);
      }
    };
  }
  // A Hermite run's work and wall time up to each output (summary.json's hermite.outputs): kirin's Table 1 times the
  // steps from t = 0.25 to 0.5, the difference of two entries. Wall seconds of this process (a restart starts at 0).
  const Stopwatch runClock;
  nlohmann::json hermiteOutputs = nlohmann::json::array();
  // --background-output: snapshots and checkpoints written while the next steps run (io::BackgroundWriter); the last
  // good state, written when a run fails, waits for them.
  std::optional<io::BackgroundWriter> background;
  if (memory.backgroundOutput) background.emplace();
  // The time of the state the writer copied last: a checkpoint of that same state (right after its output) is written
  // from that copy, after the snapshot, rather than waiting for it.
  double copiedTime = std::numeric_limits<double>::quiet_NaN();
  callbacks.onOutput = [&](const Particles& state, const integrator::Diagnostics& diagnostics, std::uint64_t index) {
    if (index == 0) initial = diagnostics;
    if (hermite != nullptr) {
      const integrator::HermiteCounters& counters = hermite->counters();
      hermiteOutputs.push_back({{"time", diagnostics.time},
                                {"wall_seconds", runClock.seconds()},
                                {"block_steps", counters.blockSteps},
                                {"body_steps", counters.bodySteps},
                                {"interactions", counters.interactions},
                                {"engine_seconds", counters.forceSeconds}});
    }
    const std::string row = comoving != nullptr ? formatComovingDiagnostics(diagnostics, *layzerIrvine)
                                                : integrator::formatDiagnostics(diagnostics, initial);
    log << row << std::endl;
    info << row << std::endl;
    char name[32];
    std::snprintf(name, sizeof name, "snapshot_%03llu.hdf5", static_cast<unsigned long long>(index));
    io::SnapshotWriteOptions write;
    stateAt(diagnostics.time, metadata, write);
    if (background) {
      background->submit(state, [path = outDir / name, meta = metadata, write](const Particles& copy) {
        io::writeSnapshot(path, copy, meta, write);
      });
      copiedTime = diagnostics.time;
    } else {
      io::writeSnapshot(outDir / name, state, metadata, write);
    }
  };
  callbacks.onProgress = [&](const integrator::ProgressInfo& step) {
    progress.update(step, comoving != nullptr
                              ? std::optional<double>(layzerIrvine ? layzerIrvine->relativeViolation() : 0.0)
                              : std::nullopt);
  };
  if (options.timings) {
    // After the output's diagnostics line, on the terminal and as a comment in the log.
    callbacks.onTimings = [&](const integrator::OutputTimings& timings) {
      const std::string line = formatOutputTimings(timings);
      log << line << std::endl;
      info << line << std::endl;
    };
  }
  std::optional<ForceCheck> forceCheck;
  if (options.forceCheck > 0) {
    forceCheck.emplace(static_cast<std::size_t>(options.forceCheck), options.gravity, options.integrator.boxSize,
                       options.seed);
    callbacks.onLastCallOnTree = [&](const Particles& state, double time, std::uint64_t step) {
      const std::string line = (*forceCheck)(state, time, step);
      log << line << std::endl;
      info << line << std::endl;
    };
  }
  std::optional<DirectPotentials> outputPotentials;
  if (directPotentials) {
    outputPotentials.emplace(*runner.engine->engine, options.gravity);
    callbacks.outputPotentials = std::ref(*outputPotentials);
  }
  // The potentials' seconds at outputs: a Hermite run's measurePotentials, a tree run's direct sums.
  const auto diagnosticSeconds = [&] {
    return hermite != nullptr ? hermite->counters().diagnosticSeconds
                              : (outputPotentials ? outputPotentials->seconds() : 0.0);
  };
  // A value that is not finite stops the run; the last good state is saved so that nothing is lost.
  const std::filesystem::path lastGoodPath = outDir / "last_good_state.hdf5";
  double lastGoodTime = options.integrator.tStart;
  std::uint64_t lastGoodStep = 0;
  callbacks.onNonFinite = [&](const Particles& state, double time, std::uint64_t step) {
    io::SnapshotMetadata lastGood = metadata;
    io::SnapshotWriteOptions write;
    stateAt(time, lastGood, write);
    lastGood.step = step;
    // Between outputs a run with direct diagnostic potentials has none (pot NaN): the file then has no Potential,
    // so that it still reads back as initial conditions.
    write.includePotential = std::all_of(state.pot.begin(), state.pot.end(), [](double v) { return std::isfinite(v); });
    if (background) background->finish();  // HDF5 is one thread's at a time
    io::writeSnapshot(lastGoodPath, state, lastGood, write);
    lastGoodTime = time;
    lastGoodStep = step;
  };

  // Checkpoints: the state after a step, what the solver's next calls depend on, and where the run stands.
  callbacks.onCheckpoint = [&](const Particles& state, double time, const integrator::RunPosition& position) {
    CheckpointState run;
    run.set("step", double(position.step));
    run.set("next_output_index", double(position.nextOutputIndex));
    run.set("time", time);
    run.set("t_start", options.integrator.tStart);
    if (hermite != nullptr) {
      // A Hermite checkpoint falls on a synchronisation time; its integrator's state goes where a solver's would.
      run.set("hermite", 1.0);
      run.set("max_step", hermite->params().maxStep);
    } else {
      run.set("dt", options.integrator.dt);
    }
    run.set("t_end", options.integrator.tEnd);
    run.set("bodies", double(state.size()));
    saveDiagnostics(position.initial, run);
    if (comoving != nullptr) saveComovingCheckpoint(*comoving, *layzerIrvine, run);
    CheckpointState solverState;
    if (hermite != nullptr) {
      hermite->saveState(solverState);
    } else {
      runner.solver->saveState(solverState);
    }
    io::SnapshotMetadata saved = metadata;
    io::SnapshotWriteOptions unused;  // the checkpoint keeps the momenta as held
    stateAt(time, saved, unused);
    saved.step = position.step;
    const bool potentials = std::all_of(state.pot.begin(), state.pot.end(), [](double v) { return std::isfinite(v); });
    if (background) {
      auto writeCheckpoint = [path = outDir / io::kCheckpointName, saved, run = std::move(run),
                              solverState = std::move(solverState), potentials](const Particles& copy) {
        io::writeCheckpoint(path, copy, saved, run, solverState, potentials);
      };
      if (time == copiedTime) {
        background->submitSameBodies(std::move(writeCheckpoint));
      } else {
        background->submit(state, std::move(writeCheckpoint));
        copiedTime = time;
      }
    } else {
      io::writeCheckpoint(outDir / io::kCheckpointName, state, saved, run, solverState, potentials);
    }
  };

  integrator::RunSummary summary;
  std::optional<integrator::HermiteRunSummary> hermiteSummary;
  std::uint64_t longRangeSteps = 0;  ///< a comoving run's long-range steps begun (summary.json)
  try {
    if (hermite != nullptr) {
      hermiteSummary = integrator::runHermite(particles, *hermite, options.integrator, callbacks, resume);
      summary = hermiteSummary->run;
    } else if (comoving != nullptr) {
      ComovingSchedule schedule = makeComovingSchedule(*comoving, options, particles.size(), *runner.solver);
      summary = integrator::runSteps(particles, *runner.solver, schedule, options.integrator, callbacks, resume);
      longRangeSteps = schedule.longRangeStepsBegun();
    } else {
      summary = integrator::runLeapfrog(particles, *runner.solver, options.integrator, callbacks, resume);
    }
  } catch (const NumericalError& error) {
    std::string message = std::string(error.what()) + "; the last good state (step " + std::to_string(lastGoodStep) +
                          ") is in " + lastGoodPath.string();
    // A file still being written is complete (or failed, and said so) before the record of the failed run.
    if (background) {
      try {
        background->finish();
      } catch (const std::exception& writeError) {
        message += "; and " + std::string(writeError.what());
      }
    }
    nlohmann::json failed = {{"status", "failed"},
                             {"error", message},
                             {"matcha", buildJson()},
                             {"bodies", particles.size()},
                             {"integrator", toString(options.integratorKind)},
                             {"solver", runner.describe()},
                             {"engine", runner.engineName()},
                             {"t_start", options.integrator.tStart},
                             {"t_end", options.integrator.tEnd},
                             {"dt", options.integrator.dt},
                             {"last_good_state", lastGoodPath.string()},
                             {"last_good_time", lastGoodTime},
                             {"last_good_step", lastGoodStep},
                             {"output_dir", outDir.string()}};
    if (hermite != nullptr) {
      failed.erase("dt");
      failed["max_step"] = hermite->params().maxStep;
    }
    log << "# failed: " << message << "\n";
    log.close();
    io::writeTextFile(outDir / "summary.json", failed.dump(2) + "\n");
    io::removeRunningMarker(outDir);
    if (options.json) std::cout << failed.dump(2) << std::endl;
    throw NumericalError(message);
  }
  if (background) {
    // The last snapshot is on disk before the summary calls the run complete; the wait is the run's.
    const double before = background->callerSeconds();
    background->finish();
    const double waited = background->callerSeconds() - before;
    summary.wallSeconds += waited;
    summary.outputSeconds += waited;
  }
  const double interactionsPerSecond =
      summary.forceSeconds > 0 ? double(summary.interactions.total()) / summary.forceSeconds : 0.0;
  nlohmann::json json = {
      {"bodies", particles.size()},
      {"status", "complete"},
      {"matcha", buildJson()},
      {"integrator", toString(options.integratorKind)},
      {"solver", runner.describe()},
      {"engine", runner.engineName()},
      {"steps", summary.steps},
      {"t_start", options.integrator.tStart},
      {"t_end", options.integrator.tEnd},
      {"dt", options.integrator.dt},
      {"initial_energy", summary.initialEnergy},
      {"final_energy", summary.finalEnergy},
      {"relative_energy_error", summary.relativeEnergyError},
      {"diagnostic_potential", hermite != nullptr ? "engine"
                               : directPotentials ? "direct"
                                                  : "solver"},
      {"diagnostic_seconds", diagnosticSeconds()},
      {"wall_seconds", summary.wallSeconds},
      {"force_seconds", summary.forceSeconds},
      {"interactions", {{"body_body", summary.interactions.bodyBody}, {"body_cell", summary.interactions.bodyCell}}},
      {"interactions_per_second", interactionsPerSecond},
      {"timings", hermite != nullptr ? nlohmann::json(nullptr) : timingsJson(summary, runner.engine->onGpu)},
      {"force_checks", forceCheck ? forceCheck->json() : nlohmann::json(nullptr)},
      // Seconds the run waited for its files (the copies and the writes still in flight) and the writes took on
      // their own thread; null when they were written in place (--background-output off).
      {"background_output", background ? nlohmann::json{{"run_seconds", background->callerSeconds()},
                                                        {"writer_seconds", background->writerSeconds()}}
                                       : nlohmann::json(nullptr)},
      {"output_dir", outDir.string()}};
  if (hermiteSummary) {
    // A Hermite run has no dt and no force phases: its record says what the block steps did.
    json.erase("dt");
    json.erase("timings");
    json.erase("force_checks");
    json["hermite"] = hermiteJson(*hermiteSummary, hermite->params());
    json["hermite"]["outputs"] = hermiteOutputs;
  }
  if (comoving != nullptr) {
    addComovingSummary(json, *comoving, options, summary, longRangeSteps, *layzerIrvine);
    log << comovingLogSummary(summary, *layzerIrvine) << "\n";
  } else {
    log << "# |dE/E| = " << summary.relativeEnergyError << " after " << summary.steps
        << (hermite != nullptr ? " block steps\n" : " steps\n");
  }
  log.close();
  io::writeTextFile(outDir / "summary.json", json.dump(2) + "\n");
  io::removeRunningMarker(outDir);
  if (options.json) {
    std::cout << json.dump(2) << std::endl;
  } else if (comoving != nullptr) {
    std::printf("%s\n", comovingSummaryLine(*comoving, summary, *layzerIrvine).c_str());
  } else if (hermiteSummary) {
    const integrator::HermiteCounters& counters = hermiteSummary->counters;
    std::printf(
        "summary: |dE/E| = %.3e after %llu block steps (%llu body steps, %.1f bodies per block, steps %.3g to %.3g) "
        "to t = %g; wall %.2f s (engine %.2f s, host %.2f s, diagnostic potentials %.2f s); %.3e interactions/s\n",
        summary.relativeEnergyError, static_cast<unsigned long long>(counters.blockSteps),
        static_cast<unsigned long long>(counters.bodySteps), counters.meanBlockSize(), counters.smallestStep,
        counters.largestStep, options.integrator.tEnd, summary.wallSeconds, counters.forceSeconds,
        counters.integrationSeconds, counters.diagnosticSeconds, interactionsPerSecond);
  } else {
    std::printf(
        "summary: |dE/E| = %.3e after %llu steps to t = %g; wall %.2f s (force %.2f s, diagnostic potentials %.2f s); "
        "%.3e interactions/s (%.0f body-body + %.0f body-cell per body per step)\n",
        summary.relativeEnergyError, static_cast<unsigned long long>(summary.steps), options.integrator.tEnd,
        summary.wallSeconds, summary.forceSeconds, diagnosticSeconds(), interactionsPerSecond,
        double(summary.interactions.bodyBody) / double(particles.size()) /
            double(std::max<std::uint64_t>(summary.forceCalls, 1)),
        double(summary.interactions.bodyCell) / double(particles.size()) /
            double(std::max<std::uint64_t>(summary.forceCalls, 1)));
  }
  if (options.timings) info << formatTimingsTable(summary, runner.engine->onGpu) << std::flush;
  return 0;
}

/// Writes summary.json ("failed") and removes the marker when a run in its folder stops on an error other than a
/// value that is not finite (runInFolder handles that one); rethrows.
int runGuarded(const std::filesystem::path& outDir, const std::function<int()>& run) {
  try {
    return run();
  } catch (const NumericalError&) {
    throw;  // runInFolder wrote its summary (with the last good state) and removed the marker
  } catch (const std::exception& error) {
    // The marker goes, the failure stays: summary.json says the run failed and why, so a folder is never left
    // looking like a run in progress by a run that ended. Best effort: the original error is what the user needs.
    try {
      nlohmann::json failed = {
          {"status", "failed"}, {"error", error.what()}, {"matcha", buildJson()}, {"output_dir", outDir.string()}};
      io::writeTextFile(outDir / "summary.json", failed.dump(2) + "\n");
      io::removeRunningMarker(outDir);
    } catch (const std::exception&) {
    }
    throw;
  }
}

/// Sets the value used_parameters.toml echoes for `name` when the user did not give it: an option whose default
/// depends on the run (--eta: Aarseth's 0.02 for hermite, Power et al.'s 0.025 for comoving runs, none otherwise).

/// A default for --help: a double as the stream writes it (0.02, 0.025).
std::string formatDefault(double value) {
  std::ostringstream text;
  text << value;
  return text.str();
}

/// The source line of a run's bodies.
std::string bodiesSource(const Options& options) {
  return options.icFile.empty() ? "a Plummer sphere (seed " + std::to_string(options.seed) + ")" : options.icFile;
}

/// `matcha run --integrator hermite`: checked (prepareHermiteRun) before the bodies are made, then run in its folder
/// on the Hermite engine of --engine.
int runHermiteSimulation(CLI::App& command, Options options, const InitialConditionsInfo& ic,
                         const io::RunFolderRequest& folder, std::ostream& info, const HermiteSharing* sharing) {
  prepareHermiteRun(options, ic);
  if (!options.eta) echoDefault(command, "--eta", options.hermite.eta);
  requireBodiesFit(ic.numBodies, false);
  Particles particles = loadInitialConditions(options, info);
  gpu::requireFloatRange(particles, options.gravity);
  std::string reason;
  std::unique_ptr<HermiteEngine> engine = gpu::makeHermiteEngine(options.engine, &reason);
  const RunMemory memory = estimateHermiteRunMemory(particles.size(), options.backgroundOutput);
  const std::string source = bodiesSource(options);
  if (!options.dryRun) requireRunFits(memory);
  // On several ranks the others take the bodies here and integrate alongside (with --dry-run they stop).
  if (sharing != nullptr) engine = sharing->share(options, particles, nullptr, std::move(engine));
  integrator::HermiteIntegrator hermite(*engine, options.hermite, options.gravity.G, options.gravity.eps,
                                        options.integrator.tStart);
  const RunIntegrator runner = RunIntegrator::hermiteOn(hermite, *engine, reason);
  if (options.dryRun) {
    info << "matcha run --dry-run: " << particles.size() << " bodies from " << source
         << ", block steps (their number is not known ahead)\nintegrator: " << runner.describe()
         << "\nengine: " << reason << "\n"
         << formatRunMemory(memory) << std::flush;
    if (options.json) std::cout << runMemoryJson(memory) << std::endl;
    return 0;
  }
  io::prepareRunFolder(folder, io::markerForThisProcess(options.commandLine));
  return runGuarded(options.outPath, [&] {
    return runInFolder(command, options, particles, runner, memory, false, source, info, nullptr);
  });
}

/// `matcha run --restart DIR --dry-run`: what continuing the run would take, printed (JSON too with --json); nothing
/// runs and nothing is written.
int printRestartDryRun(const Options& options, std::size_t numBodies, const std::string& integration,
                       const std::string& engineReason, const RunMemory& memory, std::ostream& info) {
  info << "matcha run --restart " << options.restartDir << " --dry-run: " << numBodies
       << " bodies from its checkpoint\n"
       << integration << "\nengine: " << engineReason << "\n"
       << formatRunMemory(memory) << std::flush;
  if (options.json) std::cout << runMemoryJson(memory) << std::endl;
  return 0;
}

/// `matcha run --restart DIR` of a Hermite run: its checkpoint (a synchronisation time) restores the integrator, which
/// continues as the run that did not stop, bit for bit.
int resumeHermite(CLI::App& command, Options options, io::Checkpoint checkpoint,
                  const integrator::RunPosition& position, std::ostream& info, const HermiteSharing* sharing) {
  const std::filesystem::path dir = options.restartDir;
  const CheckpointState& run = checkpoint.run;
  Particles particles = std::move(checkpoint.snapshot.particles);
  if (run.count("bodies") != particles.size()) throw InputError("--restart: the checkpoint's body count is corrupt");
  options.integrator.tStart = run.scalar("t_start");
  InitialConditionsInfo ic;
  ic.numBodies = particles.size();
  ic.time = options.integrator.tStart;
  prepareHermiteRun(options, ic);
  requireLaterEnd(dir, options, run, runIsComplete(dir));
  if (!(position.time < options.integrator.tEnd)) {
    std::ostringstream message;
    message << std::setprecision(12) << "--restart " << dir.string() << ": the checkpoint is at t = " << position.time
            << " and t-end " << options.integrator.tEnd << " is no later; give a later --t-end";
    throw InputError(message.str());
  }
  std::string reason;
  std::unique_ptr<HermiteEngine> engine = gpu::makeHermiteEngine(options.engine, &reason);
  const RunMemory memory = estimateHermiteRunMemory(particles.size(), options.backgroundOutput);
  if (!options.dryRun) requireRunFits(memory);
  // On several ranks the others take the bodies and the integrator's state here and continue alongside (with
  // --dry-run they stop).
  if (sharing != nullptr) engine = sharing->share(options, particles, &checkpoint.solver, std::move(engine));
  integrator::HermiteIntegrator hermite(*engine, options.hermite, options.gravity.G, options.gravity.eps,
                                        options.integrator.tStart);
  hermite.restore(particles, checkpoint.solver);
  const RunIntegrator runner = RunIntegrator::hermiteOn(hermite, *engine, reason);
  if (options.dryRun) return printRestartDryRun(options, particles.size(), runner.describe(), reason, memory, info);
  const io::RunFolderRequest folder{dir, io::RunFolderMode::resume, {}};
  io::prepareRunFolder(folder, io::markerForThisProcess(options.commandLine));
  return runGuarded(dir, [&] {
    // Outputs fall on multiples of the largest step: a log line half of one later belongs to the stopped run's steps.
    rewindRunFolder(dir, position, position.time, 0.5 * options.hermite.maxStep);
    return runInFolder(command, options, particles, runner, memory, false, "the checkpoint of " + dir.string(), info,
                       &position);
  });
}

/// `matcha run --restart DIR`: the run in DIR continued from its checkpoint. The parameters are the run's own
/// (main.cpp reads DIR/used_parameters.toml as the config file); the bodies, their forces, the step and the
/// solver's state come from the checkpoint.
int resumeSimulation(CLI::App& command, Options options, const HermiteSharing* sharing = nullptr) {
  const std::filesystem::path dir = options.restartDir;
  options.outPath = dir.string();
  options.icFile.clear();  // the bodies come from the checkpoint
  validateOptions(options, kRunOptions);
  std::ostream& info = options.json ? std::cerr : std::cout;
  const io::RunFolderRequest folder{dir, io::RunFolderMode::resume, {}};
  io::checkRunFolder(folder);
  info << "reading the checkpoint " << (dir / io::kCheckpointName).string() << "..." << std::endl;
  io::Checkpoint checkpoint = asBadInput([&] { return io::readCheckpoint(dir / io::kCheckpointName); });
  const CheckpointState& run = checkpoint.run;
  integrator::RunPosition position;
  position.step = run.count("step");
  position.nextOutputIndex = run.count("next_output_index");
  position.initial = loadDiagnostics(run);
  position.time = run.scalar("time");
  const bool hermiteCheckpoint = run.scalars.count("hermite") != 0;
  if (hermiteCheckpoint != (options.integratorKind == IntegratorKind::hermite)) {
    throw InputError("--restart " + dir.string() + ": the checkpoint is a " +
                     (hermiteCheckpoint ? "hermite" : "leapfrog") + " run's; --integrator " +
                     toString(options.integratorKind) + " cannot continue it");
  }
  const bool comovingCheckpoint = run.scalars.count("comoving") != 0;
  if (!comovingCheckpoint) refuseComovingOptions(options);
  if (hermiteCheckpoint) return resumeHermite(command, options, std::move(checkpoint), position, info, sharing);
  prepareLeapfrogRun(options, comovingCheckpoint);
  const double dt = comovingCheckpoint ? 0.0 : run.scalar("dt");
  Particles particles = std::move(checkpoint.snapshot.particles);
  if (run.count("bodies") != particles.size()) throw InputError("--restart: the checkpoint's body count is corrupt");
  options.integrator.tStart = run.scalar("t_start");
  resolvePeriodicBox(options, checkpoint.snapshot.boxSize, particles.size());
  if (const std::string warning = periodicSofteningWarning(options, particles.size()); !warning.empty()) {
    std::cerr << warning << '\n';
  }
  const bool complete = runIsComplete(dir);
  std::optional<ComovingRun> comoving;
  std::optional<LayzerIrvineCheck> layzerIrvine;
  std::optional<std::uint64_t> comovingSteps;
  if (comovingCheckpoint) {
    ComovingResume resumed = resumeComovingRun(options, checkpoint, position, complete, dir);
    comoving.emplace(std::move(resumed.run));
    layzerIrvine.emplace(resumed.layzerIrvine);
    comovingSteps = resumed.fewestSteps;
  } else {
    requireLeapfrogContinues(dir, options, run, position.step, complete);
  }
  gpu::requireFloatRange(particles, options.gravity);
  requireForceCheckSample(options, particles.size());
  gpu::EngineChoice engine = makeRunEngine(options);
  const bool directPotentials = directOutputPotentials(options, particles.size(), engine.onGpu);
  const RunMemory memory = estimateRunMemory(options, particles, engine.onGpu, directPotentials, comovingSteps);
  const std::unique_ptr<ForceSolver> solver = makeSolver(options, engine);
  // A checkpoint of a run on several ranks holds the distributed solver's split, not a one-rank solver's state: the
  // solver starts afresh from the checkpoint's bodies and forces, as after a tree's last call.
  const bool writtenOnRanks = run.scalars.count("ranks") != 0 && run.count("ranks") > 1;
  if (!writtenOnRanks) solver->restoreState(checkpoint.solver, particles);
  if (options.dryRun)
    return printRestartDryRun(options, particles.size(), solver->describe(), engine.reason, memory, info);
  requireRunFits(memory);
  io::prepareRunFolder(folder, io::markerForThisProcess(options.commandLine));
  const RunIntegrator runner = RunIntegrator::leapfrog(*solver, engine);
  return runGuarded(dir, [&] {
    // The log's lines start with their time: a fixed-step run's lines half a step later, a comoving run's (a, printed
    // to 11 digits) any later, belong to steps after the checkpoint.
    rewindRunFolder(dir, position, position.time, comovingCheckpoint ? 1e-9 * position.time : 0.5 * dt);
    return runInFolder(command, options, particles, runner, memory, directPotentials,
                       "the checkpoint of " + dir.string(), info, &position, comoving ? &*comoving : nullptr,
                       layzerIrvine);
  });
}

int runSimulation(CLI::App& command, const Options& given, const HermiteSharing* sharing = nullptr) {
  if (!given.restartDir.empty()) return resumeSimulation(command, given, sharing);
  Options options = given;
  validateOptions(options, kRunOptions);
  const std::filesystem::path outDir = options.outPath;
  // Human-readable lines go to stdout, or to stderr when stdout carries the JSON summary.
  std::ostream& info = options.json ? std::cerr : std::cout;

  // Before any work: a folder that holds another run's files (or the IC file) is refused, not mixed into.
  const io::RunFolderRequest folder{outDir, options.overwrite ? io::RunFolderMode::overwrite : io::RunFolderMode::fresh,
                                    options.icFile};
  io::checkRunFolder(folder);
  // The bodies' count and start time from the IC file's header, before the bodies are read; with --cosmology from
  // the options, with the linear spectrum made (a table read) before any body is.
  std::optional<cosmology::LinearPowerSpectrum> spectrum;
  const InitialConditionsInfo ic =
      options.cosmology ? planCosmologicalIcs(command, options) : inspectInitialConditions(options);
  if (options.cosmology) spectrum = cosmologicalIcSpectrum(command, options.cosmologicalIcs, std::cerr);
  options.integrator.tStart = ic.time;
  if (!ic.cosmology) refuseComovingOptions(options);
  if (options.integratorKind == IntegratorKind::hermite)
    return runHermiteSimulation(command, options, ic, folder, info, sharing);
  prepareLeapfrogRun(options, ic.cosmology.has_value());
  if (ic.cosmology && !options.eta) echoDefault(command, "--eta", options.comoving.eta);
  resolvePeriodicBox(options, ic.boxSize, ic.numBodies);
  if (const std::string warning = periodicSofteningWarning(options, ic.numBodies); !warning.empty()) {
    std::cerr << warning << '\n';
  }
  // A file with a cosmology runs in comoving coordinates, its steps set by the time line rather than --dt.
  const std::optional<ComovingRun> comoving = comovingRunOfInitialConditions(options, ic);
  if (!comoving) {
    options.integrator.validate();
    requireWholeStepsFromStart(options);
  }

  // The memory the run needs, from a tree built over its bodies and a sample of its lists, before any force call
  // and before anything is written: a run that will not fit is refused with one line, not killed hours later.
  requireBodiesFit(ic.numBodies);
  requireForceCheckSample(options, ic.numBodies);
  Particles particles = options.cosmology ? makeCosmologicalIcs(options.cosmologicalIcs, *spectrum, info).particles
                                          : loadInitialConditions(options, info);
  std::optional<std::uint64_t> comovingSteps;
  if (comoving) {
    comovingSteps =
        checkComovingStart(*comoving, options, std::accumulate(particles.mass.begin(), particles.mass.end(), 0.0),
                           initialConditionsSource(options));
    storedVelocitiesToMomenta(particles, comoving->timeline.startScaleFactor());
  }
  gpu::requireFloatRange(particles, options.gravity);
  gpu::EngineChoice engine = makeRunEngine(options);
  const bool directPotentials = directOutputPotentials(options, particles.size(), engine.onGpu);
  const RunMemory memory = estimateRunMemory(options, particles, engine.onGpu, directPotentials, comovingSteps);
  const std::unique_ptr<ForceSolver> solver = makeSolver(options, engine);
  const std::string source =
      options.cosmology ? cosmologicalIcSource(options.cosmologicalIcs.ic) : bodiesSource(options);
  if (options.dryRun) {
    info << "matcha run --dry-run: " << particles.size() << " bodies from " << source << ", " << memory.numSteps
         << " steps\nsolver: " << solver->describe() << "\nengine: " << engine.reason << "\n"
         << formatRunMemory(memory) << std::flush;
    if (options.json) std::cout << runMemoryJson(memory) << std::endl;
    return 0;
  }
  requireRunFits(memory);
  io::prepareRunFolder(folder, io::markerForThisProcess(options.commandLine));
  const RunIntegrator runner = RunIntegrator::leapfrog(*solver, engine);
  return runGuarded(outDir, [&] {
    return runInFolder(command, options, particles, runner, memory, directPotentials, source, info, nullptr,
                       comoving ? &*comoving : nullptr);
  });
}

}  // namespace

void requireForceCheckSample(const Options& options, std::uint64_t numBodies) {
  if (options.forceCheck < 0 || std::uint64_t(options.forceCheck) > numBodies) {
    throw InputError("--force-check " + std::to_string(options.forceCheck) + ": must be 0 (off) to the run's " +
                     std::to_string(numBodies) + " bodies");
  }
}

int runHermiteOnRankZero(CLI::App& command, const Options& options, const HermiteSharing& sharing) {
  return runSimulation(command, options, &sharing);
}

std::function<int()> addRunCommand(CLI::App& parent, Options& options) {
  CLI::App* command = parent.add_subcommand("run", "run a simulation (default: 65,536-body Plummer sphere to t = 1)");
  addOptions(*command, options, kRunOptions);
  options.outPath = "matcha-out";
  command
      ->add_option("--out", options.outPath,
                   "output folder (created if missing; refused when it holds another run's files)")
      ->capture_default_str();
  command->add_flag("--overwrite", options.overwrite,
                    "remove another run's files (snapshots, logs, summary, marker) from --out before running");
  command
      ->add_option("--checkpoint-interval", options.integrator.checkpointInterval,
                   "wall-clock seconds between checkpoints (OUT/checkpoint.hdf5, for --restart); 0: as often as the "
                   "solver allows; checkpoints also follow the first output after the start and any output a minute "
                   "after the last")
      ->capture_default_str();
  command
      ->add_option("--background-output", options.backgroundOutput,
                   "write snapshots and checkpoints on a thread of their own while the run goes on (on: needs a copy "
                   "of the bodies in memory, and where that would not fit they are written in place; runs over "
                   "several ranks write in place), or in place (off)")
      ->transform(CLI::Transformer({{"on", "1"}, {"off", "0"}}))
      ->capture_default_str();
  command
      ->add_option("--snapshot-files", options.snapshotPerRank,
                   "runs on K ranks: each snapshot one file, the bodies gathered to rank 0, which writes it (one), or "
                   "one file a rank, each written by its rank at once without a gather (ranks: GADGET's multi-file "
                   "snapshots, snapshot_NNN.R.hdf5 with NumFilesPerSnapshot K; yt opens snapshot_NNN.0.hdf5, matcha "
                   "any file of the set or snapshot_NNN.hdf5); a run on one rank writes one file either way")
      ->transform(CLI::Transformer({{"one", "0"}, {"ranks", "1"}}))
      ->capture_default_str();
  command
      ->add_option("--force-check", options.forceCheck,
                   "after the last step on each tree (every step with --reuse off), measure the accelerations of this "
                   "many bodies drawn at random against direct summation in double (Ewald in a periodic box); "
                   "percentiles in the log and summary.json; 0: off")
      ->capture_default_str();
  // Comoving runs (an --ic file with a cosmology): defaults from cosmology::ComovingTimelineParams.
  command
      ->add_option("--z-end", options.comoving.redshiftEnd,
                   "comoving runs: the redshift the run ends at (> -1, below the file's or --z-start)")
      ->capture_default_str();
  command->add_option(
      "--output-z", options.outputRedshifts,
      "comoving runs: comma-separated redshifts of the snapshots, e.g. 3,1,0.5,0 (the start and the end "
      "are always written)");
  command
      ->add_option("--max-dlna", options.comoving.maxDlnA,
                   "comoving runs: the largest step in ln a (GADGET's MaxSizeTimestep)")
      ->capture_default_str();
  command
      ->add_option("--pm-steps", options.longRangeSteps,
                   "comoving runs: the mesh's long range kicks over long-range steps (GADGET's PM steps: the bodies' "
                   "rms displacement within --pm-displacement of min(r_s, mean spacing), at most --max-dlna), the "
                   "short range over the steps within them, the mesh computed at the long-range steps' ends only "
                   "(on); or the whole force every step (off)")
      ->transform(CLI::Transformer({{"on", "1"}, {"off", "0"}}))
      ->capture_default_str();
  command
      ->add_option("--block-steps", options.blockSteps,
                   "comoving runs with --pm-steps on: block time steps (GADGET's): within each long-range step every "
                   "body steps by its own acceleration (Power et al.'s limit, --eta), in powers of two of the "
                   "long-range step, and each force call computes the forces of the bodies whose steps end there "
                   "(on); or every body the step of the fastest (off)")
      ->transform(CLI::Transformer({{"on", "1"}, {"off", "0"}}))
      ->capture_default_str();
  command
      ->add_option("--pm-displacement", options.comoving.maxRmsDisplacement,
                   "comoving runs with --pm-steps on: the largest rms displacement of a long-range step over min(r_s, "
                   "mean spacing) (GADGET's MaxRMSDisplacementFac)")
      ->capture_default_str();
  // One option, two meanings, each where it applies (Options::eta); no default here: the run's kind sets it.
  command->add_option_function<double>(
      "--eta", [&options](double value) { options.eta = value; },
      "--integrator hermite: Aarseth's accuracy parameter, each body's step the power of two at or below sqrt(eta "
      "(|a||a2| + |j|^2) / (|j||a3| + |a2|^2)) (default " +
          formatDefault(integrator::HermiteParams{}.eta) +
          "); comoving runs: Power et al.'s (2003), steps dt <= sqrt(2 eta eps / |a|) in physical units (default " +
          formatDefault(cosmology::ComovingTimelineParams{}.eta) + "); refused for other runs");
  command->add_option(
      "--max-physical-softening", options.comoving.maxPhysicalSoftening,
      "comoving runs: the largest physical softening; the comoving --eps then shrinks as 1/a once a eps "
      "exceeds it (GADGET's SofteningMaxPhys); 0 or unset: none");
  // run --cosmology: the initial conditions of ic cosmo, made by the run; --box and --seed are theirs.
  CLI::Option* cosmology = command->add_flag(
      "--cosmology", options.cosmology,
      "make 2LPT initial conditions (the options of ic cosmo, its box --box and seed --seed) and run them comoving "
      "from --z-start to --z-end; the start is snapshot_000. A file runs comoving only with the cosmology its /Header "
      "records");
  for (const char* name : {"--ic", "--bodies", "--open"}) cosmology->excludes(command->get_option(name));
  command->get_option("--seed")->description(
      "random seed of the Plummer sphere, or with --cosmology of the initial conditions' field, 0 to 2^64 - 1");
  CLI::Option* box = command->get_option("--box");
  box->description(box->get_description() + "; with --cosmology the initial conditions' box in Mpc/h (default " +
                   std::to_string(static_cast<int>(cosmology::CosmologicalIcParams{}.boxSize)) + ")");
  addCosmologicalIcOptions(*command, options.cosmologicalIcs, cosmology);
  command->add_option("--restart", options.restartDir,
                      "continue the run in this folder from its checkpoint, bit for bit as if it had not stopped "
                      "(its used_parameters.toml gives the parameters; options given here override them)");
  return [command, &options] {
    return worldSize() > 1 ? runDistributed(*command, options) : runSimulation(*command, options);
  };
}

}  // namespace matcha::app
