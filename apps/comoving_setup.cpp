// SPDX-License-Identifier: MIT
#include "comoving_setup.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <sstream>
#include <vector>

#include "cosmological_ics.hpp"
#include "matcha/core/errors.hpp"

namespace matcha::app {

void takeRunOptionsIntoCosmologicalIcs(Options& options) {
  CosmologicalIcOptions& ics = options.cosmologicalIcs;
  if (options.box > 0.0) ics.ic.boxSize = options.box;
  ics.ic.seed = options.seed;
}

InitialConditionsInfo planCosmologicalIcs(const CLI::App& command, Options& options, bool madeInShares) {
  takeRunOptionsIntoCosmologicalIcs(options);
  CosmologicalIcOptions& ics = options.cosmologicalIcs;
  checkCosmologicalIcOptions(command, ics, !madeInShares);
  if (!(options.comoving.redshiftEnd < ics.ic.startRedshift)) {
    std::ostringstream message;
    message << std::setprecision(12) << "--z-end " << options.comoving.redshiftEnd << " must be below --z-start "
            << ics.ic.startRedshift << " (the run goes forward in time)";
    throw InputError(message.str());
  }
  InitialConditionsInfo info;
  const std::uint64_t side = static_cast<std::uint64_t>(ics.ic.grid);
  info.numBodies = side * side * side;
  info.time = ics.ic.scaleFactor();
  info.boxSize = ics.ic.boxSize;
  info.cosmology = cosmologicalIcHeader(ics);
  info.units = gadgetCosmologicalUnits();  // the units makeCosmologicalIcs writes in
  return info;
}

ComovingRun prepareComovingRun(Options& options, double aStart, double scaleFactorNow,
                               const io::CosmologyHeader& header, const std::optional<UnitSystem>& fileUnits,
                               double boxSize, const std::string& source) {
  if (!(boxSize > 0.0)) {
    throw InputError(source + " has a cosmology but no periodic box (BoxSize): comoving runs are periodic" +
                     (options.open ? " (--open was given)" : ""));
  }
  const UnitSystem units = fileUnits.value_or(gadgetCosmologicalUnits());
  options.gravity.G = units.gravitationalConstant;
  cosmology::ComovingTimelineParams params = options.comoving;
  params.redshiftStart = cosmology::redshiftFromScaleFactor(aStart);
  params.outputRedshifts =
      options.outputRedshifts.empty() ? std::vector<double>{} : parseRedshiftList(options.outputRedshifts);
  params.softening = options.gravity.eps;
  if (options.comoving.maxPhysicalSoftening) {
    const double largest = *options.comoving.maxPhysicalSoftening;
    if (!(std::isfinite(largest) && largest >= 0.0)) {
      throw InputError("--max-physical-softening must be a finite length >= 0 (0: none; got " +
                       std::to_string(largest) + ")");
    }
    if (largest == 0.0) params.maxPhysicalSoftening.reset();  // --max-physical-softening 0: none
  }
  const cosmology::Background background = comovingBackground(header, units, source);
  ComovingRun run{cosmology::ComovingTimeline(background, params), header, units};
  options.gravity.eps = run.timeline.comovingSoftening(scaleFactorNow);
  return run;
}

std::string initialConditionsSource(const Options& options) {
  return options.cosmology ? "--cosmology" : "--ic " + options.icFile;
}

std::optional<ComovingRun> comovingRunOfInitialConditions(Options& options, const InitialConditionsInfo& ic) {
  if (!ic.cosmology) return std::nullopt;
  const std::string source = initialConditionsSource(options);
  const double aStart = startScaleFactor(ic.time, *ic.cosmology, source);
  ComovingRun run =
      prepareComovingRun(options, aStart, aStart, *ic.cosmology, ic.units, options.integrator.boxSize, source);
  options.integrator.tStart = run.timeline.startScaleFactor();
  return run;
}

std::optional<double> comovingLongRangeLength(const Options& options, std::uint64_t numBodies,
                                              const ForceSolver& solver) {
  if (!options.longRangeSteps || !solver.splitsLongRange() || numBodies == 0) return std::nullopt;
  const double spacing = options.mesh.boxSize / std::cbrt(static_cast<double>(numBodies));
  return std::min(options.mesh.splitRadius(), spacing);
}

ComovingSchedule makeComovingSchedule(const ComovingRun& run, const Options& options, std::uint64_t numBodies,
                                      const ForceSolver& solver) {
  const std::optional<double> longRangeLength = comovingLongRangeLength(options, numBodies, solver);
  // Block time steps live within long-range steps (prepareLeapfrogRun refused a typed "on" without them).
  return ComovingSchedule(run.timeline, longRangeLength, options.blockSteps && longRangeLength);
}

std::string cosmologicalIcSource(const cosmology::CosmologicalIcParams& made) {
  std::ostringstream text;
  text << (made.lptOrder == 2 ? "2LPT" : "Zel'dovich") << " initial conditions made by the run (--cosmology: box "
       << made.boxSize << " Mpc/h, z = " << made.startRedshift << ", seed " << made.seed << ")";
  return text.str();
}

std::uint64_t fewestComovingSteps(const ComovingRun& run, const Options& options, double from) {
  return static_cast<std::uint64_t>(
      std::ceil(std::log(run.timeline.endScaleFactor() / from) / options.comoving.maxDlnA));
}

std::uint64_t checkComovingStart(const ComovingRun& run, const Options& options, double totalMass,
                                 const std::string& source) {
  const cosmology::ComovingTimeline& timeline = run.timeline;
  requireMeanMatterDensity(totalMass, options.integrator.boxSize, timeline.background(), options.gravity.G, source);
  return fewestComovingSteps(run, options, timeline.startScaleFactor());
}

ComovingResume resumeComovingRun(Options& options, const io::Checkpoint& checkpoint,
                                 const integrator::RunPosition& position, bool complete,
                                 const std::filesystem::path& dir) {
  if (!checkpoint.snapshot.cosmology) throw InputError("--restart: the comoving checkpoint has no cosmology header");
  const CheckpointState& state = checkpoint.run;
  const std::string source = "the checkpoint of " + dir.string();
  ComovingRun run =
      prepareComovingRun(options, options.integrator.tStart, position.time, *checkpoint.snapshot.cosmology,
                         checkpoint.snapshot.units, options.integrator.boxSize, source);
  const double aEnd = run.timeline.endScaleFactor();
  if (!(position.time < aEnd) || (complete && aEnd <= state.scalar("t_end"))) {
    std::ostringstream message;
    message << std::setprecision(12) << "--restart " << dir.string() << ": ";
    if (complete) {
      message << "the run is complete (z-end " << cosmology::redshiftFromScaleFactor(state.scalar("t_end")) << ")";
    } else {
      message << "the checkpoint is at z = " << cosmology::redshiftFromScaleFactor(position.time);
    }
    message << "; give a lower --z-end to continue it";
    throw InputError(message.str());
  }
  const std::uint64_t fewestSteps = position.step + fewestComovingSteps(run, options, position.time);
  return ComovingResume{std::move(run), LayzerIrvineCheck::restore(state), fewestSteps};
}

std::string describeComovingRun(const ComovingRun& run, const Options& options, std::uint64_t fewestSteps) {
  const cosmology::ComovingTimeline& timeline = run.timeline;
  std::ostringstream info;
  info << "comoving: z = " << cosmology::redshiftFromScaleFactor(timeline.startScaleFactor()) << " -> "
       << cosmology::redshiftFromScaleFactor(timeline.endScaleFactor()) << " (Omega_m " << run.header.omega0
       << ", Omega_Lambda " << run.header.omegaLambda << ", h " << run.header.hubbleParam
       << "); steps: d ln a <= " << options.comoving.maxDlnA << " and Power et al.'s eta " << options.comoving.eta
       << " (~" << fewestSteps << " steps); comoving softening " << options.gravity.eps
       << (options.comoving.maxPhysicalSoftening
               ? ", at most " + std::to_string(*options.comoving.maxPhysicalSoftening) + " physical"
               : std::string())
       << "; G = " << options.gravity.G << "; energy check: Layzer-Irvine"
       << (options.longRangeSteps ? "; the mesh's long range over long-range steps (--pm-steps)" : "")
       << (options.blockSteps && options.longRangeSteps ? "; block time steps within them (--block-steps)" : "");
  return info.str();
}

void setComovingSnapshotState(double scaleFactor, io::SnapshotMetadata& metadata, io::SnapshotWriteOptions& write) {
  metadata.time = scaleFactor;
  MATCHA_ASSERT(metadata.cosmology.has_value(), "a comoving snapshot without its cosmology");
  metadata.cosmology->redshift = cosmology::redshiftFromScaleFactor(scaleFactor);
  write.velocityScale = storedVelocityPerMomentum(scaleFactor);
}

void saveComovingCheckpoint(const ComovingRun& run, const LayzerIrvineCheck& check, CheckpointState& state) {
  // The checkpoint's bodies keep the run's momenta (p = a^2 dx/dt, not u): a restart continues from them as held.
  state.set("t_end", run.timeline.endScaleFactor());
  state.set("comoving", 1.0);
  check.save(state);
}

void addComovingSummary(nlohmann::json& json, const ComovingRun& run, const Options& options,
                        const integrator::RunSummary& summary, std::uint64_t longRangeSteps,
                        const LayzerIrvineCheck& check) {
  // A comoving run's energy check is Layzer-Irvine's; its times are scale factors and its steps vary.
  const cosmology::ComovingTimeline& timeline = run.timeline;
  json["t_start"] = timeline.startScaleFactor();
  json["t_end"] = timeline.endScaleFactor();
  json.erase("dt");
  json.erase("relative_energy_error");
  json["comoving"] = {{"a_start", timeline.startScaleFactor()},
                      {"a_end", timeline.endScaleFactor()},
                      {"z_start", cosmology::redshiftFromScaleFactor(timeline.startScaleFactor())},
                      {"z_end", cosmology::redshiftFromScaleFactor(timeline.endScaleFactor())},
                      {"max_dlna", options.comoving.maxDlnA},
                      {"eta", options.comoving.eta},
                      {"pm_steps", options.longRangeSteps},
                      {"block_steps", options.blockSteps && longRangeSteps > 0},
                      {"long_range_steps", longRangeSteps},
                      {"steps_per_unit_ln_a",
                       double(summary.steps) / std::log(timeline.endScaleFactor() / timeline.startScaleFactor())},
                      {"layzer_irvine_relative_violation", check.relativeViolation()},
                      {"layzer_irvine_integral", check.check().integral()}};
}

std::string comovingSummaryLine(const ComovingRun& run, const integrator::RunSummary& summary,
                                const LayzerIrvineCheck& check) {
  const double interactionsPerSecond =
      summary.forceSeconds > 0 ? double(summary.interactions.total()) / summary.forceSeconds : 0.0;
  char line[320];
  std::snprintf(line, sizeof line,
                "summary: Layzer-Irvine |dE|/|W| = %.3e after %llu steps to z = %g; wall %.2f s (force %.2f s); "
                "%.3e interactions/s",
                std::abs(check.relativeViolation()), static_cast<unsigned long long>(summary.steps),
                cosmology::redshiftFromScaleFactor(run.timeline.endScaleFactor()), summary.wallSeconds,
                summary.forceSeconds, interactionsPerSecond);
  return line;
}

std::string comovingLogSummary(const integrator::RunSummary& summary, const LayzerIrvineCheck& check) {
  std::ostringstream line;
  line << "# Layzer-Irvine (K + W + int (2K+W) dln a - E0) / |W| = " << check.relativeViolation() << " after "
       << summary.steps << " steps";
  return line.str();
}

}  // namespace matcha::app
