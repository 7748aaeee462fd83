// SPDX-License-Identifier: MIT
// Options shared by the subcommands, spelled the same everywhere, with defaults taken from the params structs.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cosmological_ics.hpp"
#include "matcha/core/errors.hpp"
#include "matcha/core/params.hpp"
#include "matcha/core/particles.hpp"
#include "matcha/cosmology/comoving_steps.hpp"
#include "matcha/gpu/engine_factory.hpp"
#include "matcha/integrator/hermite.hpp"
#include "matcha/io/snapshot.hpp"
#include "matcha/mesh/particle_mesh.hpp"

namespace matcha::app {

/// Where the potentials behind `matcha run`'s energy diagnostics come from (--diagnostic-potential).
enum class DiagnosticPotential {
  automatic,  ///< direct when the run uses the tree and a direct sum is cheap (directPotentialsAreCheap), else solver
  solver,     ///< the force call's own potentials (the tree's carry its force error into W)
  direct,     ///< a direct sum on the run's engine at every output
};
std::string toString(DiagnosticPotential choice);

/// How a periodic run on several ranks holds its particle mesh (--pm-ranks), on each rank's engine's side (cuFFT on its
/// GPU beside the CUDA engine, FFTW on the cores beside the CPU's): in slabs over the ranks (mesh::SlabMesh, each rank
/// 1/K of the grid), which no grid size outgrows, or each rank the whole grid, solved from the deposits of all ranks
/// summed over them (an MPI_Allreduce of the grid at every pass: 1 GiB at 512^3).
enum class MeshOnRanks {
  automatic,   ///< slabs
  replicated,  ///< each rank the whole grid (its host sums the ranks' deposits: 8 grid^3 bytes a rank)
  slabs,       ///< slabs over the ranks
};
std::string toString(MeshOnRanks choice);

/// `matcha run --integrator`: the fixed-step KDK leapfrog on a force solver (integrator/leapfrog.hpp), or the
/// 4th-order Hermite integrator with block time steps on a Hermite engine (integrator/hermite.hpp).
enum class IntegratorKind { leapfrog, hermite };
std::string toString(IntegratorKind kind);

struct Options {
  std::int64_t numBodies = 65536;  ///< -n/--bodies: Plummer bodies when no --ic is given
  std::uint64_t seed = 1;          ///< --seed
  std::string icFile;              ///< --ic: HDF5 initial conditions (GADGET layout), instead of a Plummer sphere
  std::string outPath;             ///< --out: output folder (run) or file (ic)
  bool json = false;               ///< --json: machine-readable summary on stdout
  SolverKind solver = SolverKind::tree;
  EngineKind engine = EngineKind::automatic;
  TreeParams tree;
  /// --theta, --ncrit, --nleaf and --alpha left at auto (the default): TreeParams' values with open boundaries,
  /// tree::kPeriodicOpening's in a periodic box (resolvePeriodicBox sets them). compare's --theta list is auto as the
  /// text "auto".
  struct OpeningAuto {
    bool theta = true, ncrit = true, nleaf = true, alpha = true;
  } openingAuto;
  GravityParams gravity;
  bool epsAuto = true;  ///< --eps auto (the default): GravityParams' eps, or periodicSoftening in a periodic box
  IntegratorParams integrator;
  DiagnosticPotential diagnosticPotential = DiagnosticPotential::automatic;  ///< --diagnostic-potential (run)
  MeshOnRanks meshOnRanks = MeshOnRanks::automatic;                          ///< --pm-ranks (run on several ranks)
  bool timings = false;  ///< --timings (run): a timings line per output and a table of the phases at the end
  bool dryRun = false;   ///< --dry-run (run): print the memory the run needs and stop
  /// --background-output (run): snapshots and checkpoints written on a thread of their own (io::BackgroundWriter)
  bool backgroundOutput = true;
  /// --snapshot-files ranks (run on K ranks): every rank writes its own bodies, GADGET's multi-file snapshots
  /// (io::SnapshotWriteOptions::FilePart), rather than rank 0 the gathered whole
  bool snapshotPerRank = false;
  // compare's sweep (kTreeSweep): the text of --theta and --multipole, expanded by treeSweep().
  std::string thetaList;        ///< --theta: comma-separated opening angles, e.g. "0.3,0.5,0.7"
  std::string multipoleChoice;  ///< --multipole: mono, quad or both
  bool overwrite = false;  ///< --overwrite: run, remove another run's files from --out first; ic plummer, replace --out
  std::string commandLine;      ///< the arguments as given (main), for the run folder's RUNNING marker
  std::string restartDir;       ///< --restart (run): the run folder whose newest checkpoint the run continues
  std::int64_t forceCheck = 0;  ///< --force-check (run): bodies whose forces are checked at each tree's last step
  // Periodic TreePM (kPeriodic). resolvePeriodicBox turns them into mesh and gravity.periodic for the bodies at hand.
  double box = 0.0;   ///< --box: side L of the periodic box, > 0; 0: not given (an --ic file's own box applies)
  bool open = false;  ///< --open: open boundaries, also for an --ic file that records a periodic box
  int pmGrid = 0;     ///< --pm-grid: mesh points per side; 0: mesh::defaultPmGrid(N)
  mesh::MeshParams
      mesh;  ///< the mesh of a periodic run (boxSize, grid set by resolvePeriodicBox; assignment by --pm-assignment)
  // Comoving runs (run): an --ic file with a cosmology (Omega0 > 0 in /Header) runs in comoving coordinates. The
  // redshifts, step limits and maximum physical softening; softening is the comoving eps (--eps) and the start is
  // the file's a, both set when the run is prepared.
  cosmology::ComovingTimelineParams comoving;
  /// --pm-steps (run): a comoving run's long range (TreePM's mesh) kicks over long-range steps (GADGET's PM steps,
  /// comoving.maxRmsDisplacement) rather than at every step.
  bool longRangeSteps = true;
  /// --block-steps (run): a comoving run's bodies take block time steps within each long-range step, each by its own
  /// acceleration (integrator::BinnedStep), rather than every body the step of the fastest. Without long-range steps
  /// (--pm-steps off) the run takes global steps unless --block-steps on was typed, which is then refused.
  bool blockSteps = true;
  std::string outputRedshifts;  ///< --output-z: comma-separated redshifts of the snapshots ("": the end only)
  // The integrator (run). --eta has two meanings, each where it applies: Aarseth's accuracy parameter of a Hermite
  // run (hermite.eta) and Power et al.'s of a comoving leapfrog run (comoving.eta); prepareHermiteRun and the
  // comoving run's preparation take it (resolveEta), or their default where it was not given.
  IntegratorKind integratorKind = IntegratorKind::leapfrog;  ///< --integrator
  std::optional<double> eta;                                 ///< --eta as given (unset: the default of the run's kind)
  integrator::HermiteParams hermite;  ///< --eta-start, --min-step; eta and maxStep resolved by prepareHermiteRun
  double maxStepRequested = 0.0;      ///< --max-step: a power of two, or 0 (auto: from --output-interval)
  /// The arguments after the program's name as the user typed them (main), before a --config file's are spliced in:
  /// an option of another integrator is refused when the user gave it (givenOnCommandLine), not when a shared
  /// parameter file (configs/run.toml, used_parameters.toml) carries it.
  std::vector<std::string> arguments;
  // run --cosmology: 2LPT initial conditions made by the run itself from `ic cosmo`'s options (their box and seed are
  // --box and --seed), run comoving; their state at z-start is the run's first snapshot.
  bool cosmology = false;  ///< --cosmology
  CosmologicalIcOptions cosmologicalIcs;
};

/// Most bodies a run, compare or ic takes: the tree indexes bodies in 32-bit signed integers.
inline constexpr std::uint64_t kMaxBodies = (std::uint64_t{1} << 31) - 1;

/// Which option groups a subcommand takes.
enum OptionSet : unsigned {
  kBodies = 1u << 0,       // -n, --seed, --ic
  kTree = 1u << 1,         // --theta, --ncrit, --nleaf, --multipole
  kGravity = 1u << 2,      // --eps
  kIntegrator = 1u << 3,   // --dt, --t-end, --output-interval
  kSolver = 1u << 4,       // --solver
  kEngine = 1u << 5,       // --engine
  kJson = 1u << 6,         // --json
  kTreeSweep = 1u << 7,    // with kTree: --theta takes a comma-separated list, --multipole also `both` (compare)
  kDiagnostics = 1u << 8,  // --diagnostic-potential
  kTimings = 1u << 9,      // --timings
  kDryRun = 1u << 10,      // --dry-run
  kPeriodic = 1u << 11,    // --box, --open, --pm-grid, --pm-assignment, --mesh-overlap, --pm-ranks, --walk-overlap
};

/// "matcha 0.1.0 (git <commit>)", with ", modified" when the build's tracked files differed from the commit, or
/// "(git commit unknown)" outside a git checkout: `matcha --version`.
std::string versionText();

/// Registers the options of `sets` on `command`, bound to `options`, plus --config FILE.
void addOptions(CLI::App& command, Options& options, unsigned sets);

/// `text` as a whole number written in decimal digits (no sign, no exponent, no spaces), nullopt otherwise or when
/// it exceeds 2^64 - 1.
std::optional<std::uint64_t> parseWholeNumber(std::string_view text);

/// -n/--bodies bound to `target`: digits only, 1 to kMaxBodies (so "-n 1e11" and "-n -1" get a message, not a
/// conversion).
CLI::Option* addBodiesOption(CLI::App& command, std::int64_t& target, const std::string& description);

/// A seed option bound to `target`: exactly the integers 0 to 2^64 - 1 in digits; "-1", "1e20" or 2^64 are refused
/// (CLI11 would wrap or round them onto seeds that another spelling also gives).
void addSeedOption(CLI::App& command, const std::string& name, std::uint64_t& target, const std::string& description);

/// --box bound to `target`: a finite number > 0, else a one-line parse error (exit 2).
CLI::Option* addBoxOption(CLI::App& command, double& target, const std::string& description);

/// Validates every parameter that `command` takes; throws InputError with a one-line message. With kIntegrator, an
/// output interval must be a whole number of steps (the message names the nearest valid values).
void validateOptions(const Options& options, unsigned sets);

/// The bodies a command will load, known before they are allocated.
struct InitialConditionsInfo {
  std::uint64_t numBodies = 0;
  double time = 0.0;     ///< the IC file's /Header Time; 0 for a Plummer sphere
  double boxSize = 0.0;  ///< the IC file's periodic box (io::SnapshotInfo::boxSize); 0 for open or a Plummer sphere
  std::optional<io::CosmologyHeader> cosmology;  ///< the IC file's cosmology (a comoving run's), if it has one
  std::optional<UnitSystem> units;               ///< the IC file's /Units, if complete
};

/// -n, or the body count and time of --ic read from the file without its bodies. Throws InputError when the count
/// exceeds kMaxBodies, and what io::inspectSnapshot throws.
InitialConditionsInfo inspectInitialConditions(const Options& options);

/// Runs `read` (of a file the user gave: IC, checkpoint) with an IoError turned into an InputError of the same
/// message: a missing, unreadable or corrupt input file is bad input (exit 2), as README's exit codes say.
template <class Read>
auto asBadInput(const Read& read) {
  try {
    return read();
  } catch (const IoError& error) {
    throw InputError(error.what());
  }
}

/// The tree configurations of a kTreeSweep command: every --multipole order (mono before quad) times every --theta in
/// the order given, the other fields from options.tree. Throws InputError naming the first bad entry.
std::vector<TreeParams> treeSweep(const Options& options);

/// Reads a parameter file (TOML-style `key = value` lines, `#` comments, keys spelled as the long option names)
/// and returns it as command-line arguments ("--key", "value", ...) for `command`.
/// In: `commandLine`, the arguments given after the subcommand: a file key whose option excludes one of them is left
/// out (the command line overrides the file: `--ic F` drops the file's `bodies`, `-n` its `ic`). A key that
/// `command` does not take but another subcommand of `root` does is left out too (one file serves run and compare).
/// Throws InputError on a missing, unreadable or malformed file, a folder, and a key that no subcommand takes.
std::vector<std::string> configFileArguments(const std::string& path, const CLI::App& command, const CLI::App& root,
                                             const std::vector<std::string>& commandLine);

/// `run --restart DIR` continues DIR's bodies from its checkpoint: an option on `commandLine` (the arguments after
/// `run`) that only makes a start (-n, --seed, --ic, --cosmology and the initial conditions' --grid, --z-start, --lpt,
/// --power, --sigma8, --ns, --omega-b, --fixed-amplitude, --invert-phases) would be ignored without a word, a restart
/// with another body count or seed than the run's; InputError, one line, naming it.
void refuseStartOptionsOnRestart(const std::vector<std::string>& commandLine, const CLI::App& run,
                                 const std::string& restartDir);

/// The parameters `command` actually used, defaults included, as `key = value` lines: a valid --config file.
std::string usedParameters(const CLI::App& command);

/// Shows `value` as the default of option `name` (what --help and used_parameters.toml say): a default the run chose
/// from the kind of run (--eta's), to 17 digits.
void echoDefault(CLI::App& command, const std::string& name, double value);

/// The same parameters as (key, value) pairs, for snapshot headers.
std::vector<std::pair<std::string, std::string>> usedParameterList(const CLI::App& command);

/// The periodic box of a run on `numBodies` bodies whose --ic file records `fileBoxSize` (0: open, or no file): --open
/// gives 0, --box its L, else the file's box. It sets the opening settings left at auto (Options::openingAuto) to
/// the box's: tree::kPeriodicOpening in a periodic box, TreeParams' defaults else. For a periodic box it sets
/// options.mesh (boxSize, and grid: --pm-grid,
/// or mesh::defaultPmGrid), options.gravity.periodic (the matching split), options.integrator.boxSize (the drift's
/// wrap), and returns L; else it clears them and returns 0. Throws InputError (one line) for a mesh that cannot be
/// (a grid out of range, r_cut >= L/2) or periodic gravity with the direct solver.
double resolvePeriodicBox(Options& options, double fileBoxSize, std::uint64_t numBodies);

/// --eps auto in a periodic box: 1/kPeriodicSofteningPerSpacing of the mean spacing L / N^(1/3) (cosmological runs
/// take 1/25 to 1/50). TreePM softens only the short-range share of each pair (GADGET's convention), so it departs from
/// a softened Newtonian force law, as Ewald sums it, by ~(eps / r_s)^2 / 10 of the pull of the bodies a few r_s away:
/// with the default mesh (r_s ~ 0.6 of the spacing) eps is ~0.04 r_s and that departure ~1e-4 (on a clumpy box of
/// 2^18 bodies, theta 0.2: median 2.3e-4 at eps 0.05 r_s, 4.9e-5 at 0.02 r_s; 1/256 of the box at 2^20 is 0.65 r_s).
inline constexpr double kPeriodicSofteningPerSpacing = 40.0;
double periodicSoftening(double boxSize, std::uint64_t numBodies);

/// A one-line warning for a periodic run whose softening reaches past r_s / 10 (where TreePM's and Ewald's force laws
/// part by more than ~1e-3), or "" (open boundaries, or a softening well below r_s).
std::string periodicSofteningWarning(const Options& options, std::uint64_t numBodies);

/// Whether the user typed option `name` ("--dt") on the command line (Options::arguments), as "--dt X" or "--dt=X".
bool givenOnCommandLine(const Options& options, const std::string& name);

/// A `matcha run --integrator hermite` on bodies described by `ic`, checked and resolved before any body is made:
/// refused (InputError, one line) with the tree solver, a periodic box (--box, or an --ic file with a BoxSize without
/// --open), a cosmological --ic file, --timings, --force-check, or --dt typed on the command line (the leapfrog's
/// step); options.hermite then gets eta (--eta or its default) and maxStep (--max-step, or
/// integrator::resolveMaxStep from --output-interval), and the run's times are checked against it
/// (integrator::validateHermiteRun: outputs and the end on synchronisation times).
void prepareHermiteRun(Options& options, const InitialConditionsInfo& ic);

/// A run that is not comoving refuses the comoving runs' options typed on the command line (--z-end, --output-z,
/// --max-dlna, --max-physical-softening, --pm-steps, --pm-displacement), which it would not use (a parameter file's
/// are left alone: they may be another run's).
void refuseComovingOptions(const Options& options);

/// A leapfrog run refuses the Hermite options typed on the command line (--eta-start, --max-step, --min-step), and
/// --eta unless `comoving` (a parameter file's are left alone: they may be another run's). Sets options.comoving.eta
/// from --eta for a comoving run.
void prepareLeapfrogRun(Options& options, bool comoving);

/// The engine of --engine (gpu::makeEngine): auto takes the CUDA engine where a device is present, for periodic runs
/// too (its float kernels evaluate the TreePM short range).
gpu::EngineChoice makeRunEngine(const Options& options);

/// Plummer sphere from -n/--seed, or the bodies of --ic (validated). Prints one line to `info` first ("generating a
/// 1048576-body Plummer sphere (seed 7)..." or "reading initial conditions from F..."): both can take minutes.
/// With a periodic box (options.integrator.boxSize > 0): the Plummer sphere is centred in the box and its few outliers
/// beyond it folded back in (wrapIntoBox), while an --ic file's bodies must already lie in [0, L)^3, else InputError
/// naming the first one outside (a file is data to keep as it is: its bodies are not moved without a word).
Particles loadInitialConditions(const Options& options, std::ostream& info);

/// A generated Plummer sphere's bodies in a periodic box of side `box` > 0: centred in it, the few outliers beyond it
/// folded back into [0, L)^3 (wrapIntoBox), body by body (a share of the sphere as the whole).
void centrePlummerInBox(Particles& particles, double box);

}  // namespace matcha::app

#include <memory>

#include "matcha/core/force_solver.hpp"
#include "matcha/core/near_field_engine.hpp"

namespace matcha::app {

/// The solver of --solver, on `engine`'s engine (which must outlive it). Periodic runs put the mesh with the engine:
/// cuFFT on the GPU beside the CUDA engine, FFTW on the CPU beside the CPU engine.
std::unique_ptr<ForceSolver> makeSolver(const Options& options, const gpu::EngineChoice& engine);

}  // namespace matcha::app
