// SPDX-License-Identifier: MIT
#include "restart_support.hpp"

#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "matcha/core/errors.hpp"
#include "matcha/io/run_folder.hpp"

namespace matcha::app {

void saveDiagnostics(const integrator::Diagnostics& d, CheckpointState& state) {
  state.set("initial_time", d.time);
  state.set("initial_kinetic", d.kinetic);
  state.set("initial_potential", d.potential);
  state.set("initial_total", d.total);
  state.set("initial_virial_ratio", d.virialRatio);
  state.set("initial_mass", d.mass);
  const char* axes[3] = {"x", "y", "z"};
  for (int k = 0; k < 3; ++k) {
    state.set(std::string("initial_momentum_") + axes[k], d.momentum[k]);
    state.set(std::string("initial_angular_momentum_") + axes[k], d.angularMomentum[k]);
    state.set(std::string("initial_centre_of_mass_") + axes[k], d.centreOfMass[k]);
  }
}

integrator::Diagnostics loadDiagnostics(const CheckpointState& state) {
  integrator::Diagnostics d;
  d.time = state.scalar("initial_time");
  d.kinetic = state.scalar("initial_kinetic");
  d.potential = state.scalar("initial_potential");
  d.total = state.scalar("initial_total");
  d.virialRatio = state.scalar("initial_virial_ratio");
  d.mass = state.scalar("initial_mass");
  const char* axes[3] = {"x", "y", "z"};
  for (int k = 0; k < 3; ++k) {
    d.momentum[k] = state.scalar(std::string("initial_momentum_") + axes[k]);
    d.angularMomentum[k] = state.scalar(std::string("initial_angular_momentum_") + axes[k]);
    d.centreOfMass[k] = state.scalar(std::string("initial_centre_of_mass_") + axes[k]);
  }
  return d;
}

void rewindRunFolder(const std::filesystem::path& dir, const integrator::RunPosition& position, double time,
                     double tolerance) {
  const io::RunFolderContents contents = io::inspectRunFolder(dir);
  for (const std::string& name : contents.snapshots) {
    const std::uint64_t index = std::stoull(name.substr(9));  // snapshot_NNN.hdf5 or snapshot_NNN.K.hdf5: NNN
    if (index >= position.nextOutputIndex) std::filesystem::remove(dir / name);
  }
  const std::filesystem::path logPath = dir / "diagnostics.log";
  std::ifstream in(logPath);
  std::string kept, line;
  bool past = false;
  while (!past && std::getline(in, line)) {
    if (!line.empty() && line[0] != '#') {
      // A diagnostics line starts with its time: lines more than `tolerance` after the checkpoint's time belong to
      // the stopped run's steps after it (an output at the checkpoint's own step stays).
      char* end = nullptr;
      const double lineTime = std::strtod(line.c_str(), &end);
      if (end != line.c_str() && lineTime > time + tolerance) {
        past = true;
        break;
      }
    }
    kept += line + "\n";
  }
  in.close();
  io::writeTextFile(logPath, kept);
}

bool runIsComplete(const std::filesystem::path& dir) {
  std::ifstream summaryFile(dir / "summary.json");
  const nlohmann::json summary = nlohmann::json::parse(summaryFile, nullptr, false);  // discarded when unreadable
  return !summary.is_discarded() && summary.value("status", "") == "complete";
}

void requireLaterEnd(const std::filesystem::path& dir, const Options& options, const CheckpointState& run,
                     bool complete) {
  if (complete && options.integrator.tEnd <= run.scalar("t_end")) {
    std::ostringstream message;
    message << std::setprecision(12) << "--restart " << dir.string() << ": the run is complete (t-end "
            << run.scalar("t_end") << "); give a later --t-end to continue it";
    throw InputError(message.str());
  }
}

void requireLeapfrogContinues(const std::filesystem::path& dir, const Options& options, const CheckpointState& run,
                              std::uint64_t step, bool complete) {
  const double dt = run.scalar("dt");
  if (dt != options.integrator.dt) {
    std::ostringstream message;
    message << std::setprecision(17) << "--restart " << dir.string() << ": the checkpoint's run has dt = " << dt
            << " and --dt " << options.integrator.dt
            << " was asked for; a restart continues with its dt (--ic with a snapshot starts a new run)";
    throw InputError(message.str());
  }
  options.integrator.validate();
  const std::uint64_t numSteps =
      integrator::checkedStepCount(options.integrator.tEnd - options.integrator.tStart, options.integrator.dt);
  requireLaterEnd(dir, options, run, complete);
  if (step >= numSteps) {
    throw InputError("--restart " + dir.string() + ": the checkpoint is at step " + std::to_string(step) +
                     " and t-end " + std::to_string(options.integrator.tEnd) + " is no later; give a later --t-end");
  }
}

}  // namespace matcha::app
