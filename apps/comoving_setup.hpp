// SPDX-License-Identifier: MIT
// A comoving run set up from the run's options, shared by `matcha run` on one rank (run_command.cpp) and on several
// (distributed_run.cpp): its time line from a cosmological file or checkpoint, its schedule, what its start line,
// snapshots, checkpoints and summary say. comoving_run.hpp holds what needs no options (the schedule itself, the
// Layzer-Irvine check, the units), linked by the tests on its own.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "comoving_run.hpp"
#include "matcha/core/force_solver.hpp"
#include "matcha/cosmology/initial_conditions.hpp"
#include "matcha/integrator/run_loop.hpp"
#include "options.hpp"

namespace matcha::app {

/// `run --cosmology`: the initial conditions' box (--box, else ic cosmo's default) and seed (--seed) from the run's
/// own options; every check of the options before any work (ic cosmo's, and a z-end below z-start); what the run
/// needs to know of the bodies before they are made, as an --ic file's header would tell it. Throws InputError.
/// `madeInShares`: the ranks of a distributed run make the start, each its share (the host memory is theirs to check).
InitialConditionsInfo planCosmologicalIcs(const CLI::App& command, Options& options, bool madeInShares = false);

/// The run's --box and --seed in options.cosmologicalIcs (what planCosmologicalIcs begins with): on every rank of a
/// run that makes its start in shares.
void takeRunOptionsIntoCosmologicalIcs(Options& options);

/// "2LPT initial conditions made by the run (--cosmology: box L Mpc/h, z = z, seed s)": the start line's source.
std::string cosmologicalIcSource(const cosmology::CosmologicalIcParams& made);

/// What makes a run comoving: its background, its time line and the units of its file.
struct ComovingRun {
  cosmology::ComovingTimeline timeline;
  io::CosmologyHeader header;  ///< the cosmology the snapshots record (their Redshift set at each output)
  UnitSystem units;
};

/// The comoving run of a cosmological file (or checkpoint) starting at scale factor aStart in a box of side boxSize:
/// G and the softening go to options.gravity (eps_eff(a) at `scaleFactorNow`: the start, or a checkpoint's a), the
/// redshifts and step limits from options. Throws InputError (one line naming `source`) for an open box, a cosmology
/// or time line that cannot be.
ComovingRun prepareComovingRun(Options& options, double aStart, double scaleFactorNow,
                               const io::CosmologyHeader& header, const std::optional<UnitSystem>& fileUnits,
                               double boxSize, const std::string& source);

/// Where the initial conditions come from, as errors name them: "--cosmology", or "--ic FILE".
std::string initialConditionsSource(const Options& options);

/// The comoving run of initial conditions whose header has a cosmology (an --ic file's, or --cosmology's), starting
/// at their Time (checked against their Redshift), with options.integrator.tStart set to it; nullopt for initial
/// conditions without one. Throws as startScaleFactor and prepareComovingRun.
std::optional<ComovingRun> comovingRunOfInitialConditions(Options& options, const InitialConditionsInfo& ic);

/// A comoving run's long-range length (ComovingSchedule): the smaller of the split radius and the mean spacing of
/// `numBodies` (all ranks'), where --pm-steps is on and the solver splits its force (TreePM); unset otherwise.
std::optional<double> comovingLongRangeLength(const Options& options, std::uint64_t numBodies,
                                              const ForceSolver& solver);

/// The schedule of a comoving run (long-range and block steps as options and solver allow).
ComovingSchedule makeComovingSchedule(const ComovingRun& run, const Options& options, std::uint64_t numBodies,
                                      const ForceSolver& solver);

/// The fewest steps from scale factor `from` to the run's end that the limit in ln a (--max-dlna) allows; the
/// accelerations' limit adds more once structures form.
std::uint64_t fewestComovingSteps(const ComovingRun& run, const Options& options, double from);

/// A comoving run's start: the bodies' total mass (all ranks') must be the box's mean density; the fewest steps the
/// limit in ln a allows (the memory estimate's and the start line's).
std::uint64_t checkComovingStart(const ComovingRun& run, const Options& options, double totalMass,
                                 const std::string& source);

/// A comoving checkpoint taken up (`--restart`): the run from its cosmology at its a, the Layzer-Irvine check as it
/// stood, and the fewest steps left. Throws InputError (one line) for a checkpoint without a cosmology, or one at or
/// past z-end (a complete run needs a lower --z-end to continue).
struct ComovingResume {
  ComovingRun run;
  LayzerIrvineCheck layzerIrvine;
  std::uint64_t fewestSteps = 0;
};
ComovingResume resumeComovingRun(Options& options, const io::Checkpoint& checkpoint,
                                 const integrator::RunPosition& position, bool complete,
                                 const std::filesystem::path& dir);

/// The start line of a comoving run ("comoving: z = ... -> ..., cosmology, steps, softening, G, energy check").
std::string describeComovingRun(const ComovingRun& run, const Options& options, std::uint64_t fewestSteps);

/// A state at scale factor a as a comoving run's snapshots record it: Time a, its Redshift, and the momenta written as
/// GADGET's u (write.velocityScale).
void setComovingSnapshotState(double scaleFactor, io::SnapshotMetadata& metadata, io::SnapshotWriteOptions& write);

/// What a comoving checkpoint adds to the run's state: the flag, z-end's a and the Layzer-Irvine check.
void saveComovingCheckpoint(const ComovingRun& run, const LayzerIrvineCheck& check, CheckpointState& state);

/// summary.json's entries of a comoving run: t_start and t_end as scale factors, no dt and no dE/E, and "comoving".
void addComovingSummary(nlohmann::json& json, const ComovingRun& run, const Options& options,
                        const integrator::RunSummary& summary, std::uint64_t longRangeSteps,
                        const LayzerIrvineCheck& check);

/// The last line of a comoving run on the terminal, and the log's ("# Layzer-Irvine ...").
std::string comovingSummaryLine(const ComovingRun& run, const integrator::RunSummary& summary,
                                const LayzerIrvineCheck& check);
std::string comovingLogSummary(const integrator::RunSummary& summary, const LayzerIrvineCheck& check);

}  // namespace matcha::app
