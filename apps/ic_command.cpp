// SPDX-License-Identifier: MIT
// `matcha ic`: writes initial conditions as an HDF5 file, as NEMO's mkplummer is used: `plummer` (a Plummer sphere),
// `clumps` (a periodic box of Plummer and Hernquist clumps in a uniform background) and `lattice` (a perturbed simple
// cubic lattice in a periodic box), `cosmo` (cosmological initial conditions, Zel'dovich or 2LPT, in GADGET's
// units) and `pancake` (the Zel'dovich pancake or the unperturbed grid, test problems of comoving runs with an exact
// answer, in the same units). The periodic ones record BoxSize L, so runs from them are periodic.
#include <cmath>
#include <filesystem>
#include <iostream>
#include <memory>
#include <sstream>

#include "commands.hpp"
#include "comoving_run.hpp"
#include "cosmological_ics.hpp"
#include "distributed_run.hpp"
#include "matcha/core/errors.hpp"
#include "matcha/core/units.hpp"
#include "matcha/cosmology/initial_conditions.hpp"
#include "matcha/cosmology/linear_power.hpp"
#include "matcha/cosmology/zeldovich_pancake.hpp"
#include "matcha/ic/periodic_boxes.hpp"
#include "matcha/ic/plummer.hpp"
#include "matcha/io/snapshot.hpp"
#include "memory_check.hpp"
#include "output_file.hpp"

namespace matcha::app {

namespace {

/// The options of `ic clumps` and `ic lattice` (Options serves run, compare and `ic plummer`).
struct PeriodicBoxOptions {
  ic::ClumpsParams clumps;
  std::int64_t clumpBodies = static_cast<std::int64_t>(ic::ClumpsParams{}.numBodies);
  std::int64_t numClumps = static_cast<std::int64_t>(ic::ClumpsParams{}.numClumps);
  std::string clumpsOut = "clumps.hdf5";
  ic::LatticeParams lattice;
  std::int64_t latticeBodies = static_cast<std::int64_t>(ic::LatticeParams{}.numBodies);
  std::string latticeOut = "lattice.hdf5";
  bool overwrite = false;  ///< --overwrite: replace an existing --out
};

/// Checks --out before any work: initial conditions a user wrote, perhaps with hours of a generator's time in them, are
/// not replaced by a repeated command unless it says --overwrite.
void requireOutputFile(const std::string& outPath, bool overwrite) {
  checkOutputFile(outPath, {}, overwrite, isHdf5File, "an HDF5 file");
}

/// Writes the bodies (atomically, without forces) with `boxSize` in the header (0: open boundaries) and the
/// parameters `command` used.
void writeInitialConditions(const CLI::App& command, const Particles& particles, double boxSize,
                            const std::string& outPath) {
  requireUsableBodies("ic " + command.get_name(), particles);
  io::SnapshotMetadata metadata;
  metadata.boxSize = boxSize;
  metadata.parameters = usedParameterList(command);
  io::SnapshotWriteOptions writeOptions;
  writeOptions.includeForces = false;
  const std::filesystem::path path = outPath;
  if (path.has_parent_path()) io::ensureWritableDirectory(path.parent_path());
  io::writeSnapshot(path, particles, metadata, writeOptions);
}

/// A generator's subcommand with what every periodic `ic` generator takes first: the last of repeated options wins,
/// and --config.
CLI::App* addGeneratorCommand(CLI::App& group, const std::string& name, const std::string& description) {
  CLI::App* command = group.add_subcommand(name, description);
  command->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  command->add_option("--config", "parameter file: `key = value` lines with the long option names");
  return command;
}

/// What every periodic `ic` generator takes last: -o/--out (its default the value `out` holds) and --overwrite.
void addOutputOptions(CLI::App& command, std::string& out, bool& overwrite) {
  command.add_option("-o,--out", out, "output file (HDF5, GADGET layout)")->capture_default_str();
  command.add_flag("--overwrite", overwrite, "replace an existing file at --out");
}

CLI::App* addClumpsCommand(CLI::App& group, PeriodicBoxOptions& options) {
  CLI::App* command = addGeneratorCommand(
      group, "clumps",
      "periodic box of Plummer and Hernquist clumps, each in its own equilibrium, in a uniform background");
  addBodiesOption(*command, options.clumpBodies, "number of bodies, each of mass 1/N");
  addSeedOption(*command, "--seed", options.clumps.seed, "random seed, 0 to 2^64 - 1");
  command->add_option("--box", options.clumps.boxSize, "side L of the periodic cube, > 0; the file records BoxSize L")
      ->capture_default_str();
  command
      ->add_option("--clumps", options.numClumps,
                   "number of clumps K, alternately Plummer and Hernquist spheres, each an equal share of the clump "
                   "bodies")
      ->capture_default_str();
  command
      ->add_option("--background", options.clumps.backgroundFraction,
                   "fraction F of the bodies in the uniform background (floor(F N) bodies, at rest), in [0, 1)")
      ->capture_default_str();
  command
      ->add_option("--scale-min", options.clumps.scaleMin,
                   "smallest clump scale radius a, in units of L (radii are log-uniform between the two)")
      ->capture_default_str();
  command
      ->add_option("--scale-max", options.clumps.scaleMax,
                   "largest clump scale radius, in units of L, at most 0.025 (clumps are truncated at 20 a)")
      ->capture_default_str();
  addOutputOptions(*command, options.clumpsOut, options.overwrite);
  return command;
}

CLI::App* addLatticeCommand(CLI::App& group, PeriodicBoxOptions& options) {
  CLI::App* command =
      addGeneratorCommand(group, "lattice", "perturbed simple cubic lattice in a periodic box, bodies at rest");
  addBodiesOption(*command, options.latticeBodies, "number of bodies, a perfect cube n^3");
  addSeedOption(*command, "--seed", options.lattice.seed, "random seed, 0 to 2^64 - 1");
  command->add_option("--box", options.lattice.boxSize, "side L of the periodic cube, > 0; the file records BoxSize L")
      ->capture_default_str();
  command
      ->add_option("--perturbation", options.lattice.perturbation,
                   "each coordinate displaced uniformly in [-A, A] grid spacings from its cell's centre, A in [0, 0.5)")
      ->capture_default_str();
  addOutputOptions(*command, options.latticeOut, options.overwrite);
  return command;
}

int runClumps(const CLI::App& command, PeriodicBoxOptions& options) {
  if (options.numClumps < 1) {
    throw InputError("--clumps must be at least 1 (got " + std::to_string(options.numClumps) + ")");
  }
  ic::ClumpsParams params = options.clumps;
  params.numBodies = static_cast<std::size_t>(options.clumpBodies);
  params.numClumps = static_cast<std::size_t>(options.numClumps);
  params.validate();
  requireOutputFile(options.clumpsOut, options.overwrite);
  requireBodiesFit(params.numBodies, false);
  const std::size_t background = ic::numBackgroundBodies(params);
  std::cout << "generating a periodic box of side " << params.boxSize << ": " << params.numBodies - background
            << " bodies in " << params.numClumps << " clumps and " << background << " in the background (seed "
            << params.seed << ")..." << std::endl;
  const Particles particles = ic::makeClumps(params);
  writeInitialConditions(command, particles, params.boxSize, options.clumpsOut);
  std::cout << "wrote " << particles.size() << " bodies (" << params.numClumps << " clumps, box " << params.boxSize
            << ", seed " << params.seed << ") to " << options.clumpsOut << "\n";
  return 0;
}

int runLattice(const CLI::App& command, PeriodicBoxOptions& options) {
  ic::LatticeParams params = options.lattice;
  params.numBodies = static_cast<std::size_t>(options.latticeBodies);
  params.validate();
  requireOutputFile(options.latticeOut, options.overwrite);
  requireBodiesFit(params.numBodies, false);
  const std::size_t side = ic::exactCubeRoot(params.numBodies);
  std::cout << "generating a " << side << "^3 lattice in a periodic box of side " << params.boxSize << ", perturbation "
            << params.perturbation << " (seed " << params.seed << ")..." << std::endl;
  const Particles particles = ic::makeLattice(params);
  writeInitialConditions(command, particles, params.boxSize, options.latticeOut);
  std::cout << "wrote " << particles.size() << " lattice bodies (box " << params.boxSize << ", seed " << params.seed
            << ") to " << options.latticeOut << "\n";
  return 0;
}

/// Writes cosmological initial conditions (atomically, without forces) in GADGET's units: Time = a of the header's
/// redshift, BoxSize, the cosmology header, /Units, and the parameters `command` used. `out`'s folder must exist.
void writeCosmologicalInitialConditions(const CLI::App& command, const Particles& particles,
                                        const io::CosmologyHeader& cosmology, double boxSize,
                                        const std::filesystem::path& out) {
  requireUsableBodies("ic " + command.get_name(), particles);
  io::SnapshotWriteOptions writeOptions;
  writeOptions.includeForces = false;
  io::writeSnapshot(out, particles, cosmologicalIcMetadata(command, cosmology, boxSize), writeOptions);
}

/// The options of `ic cosmo`: those shared with `run --cosmology`, the box and the seed, and the output.
struct CosmoOptions {
  CosmologicalIcOptions ic;
  std::string out = "cosmo.hdf5";
  bool overwrite = false;
};

CLI::App* addCosmoCommand(CLI::App& group, CosmoOptions& options) {
  CLI::App* command = addGeneratorCommand(
      group, "cosmo",
      "cosmological initial conditions: n^3 bodies displaced by Zel'dovich or 2LPT from a Gaussian field (GADGET "
      "units: Mpc/h, 1e10 Msun/h, km/s as v/sqrt(a))");
  command->add_option("--box", options.ic.ic.boxSize, "side L of the periodic cube, Mpc/h, > 0")->capture_default_str();
  addSeedOption(*command, "--seed", options.ic.ic.seed, "random seed of the field, 0 to 2^64 - 1");
  addCosmologicalIcOptions(*command, options.ic);
  addOutputOptions(*command, options.out, options.overwrite);
  return command;
}

int runCosmo(const CLI::App& command, CosmoOptions& options) {
  // Under mpirun on K ranks: each rank makes and writes its planes' bodies, a set of K files (distributed_run.hpp).
  if (worldSize() > 1) return writeCosmologicalIcsOnRanks(command, options.ic, options.out, options.overwrite);
  checkCosmologicalIcOptions(command, options.ic);
  requireOutputFile(options.out, options.overwrite);
  const std::filesystem::path out = options.out;
  const cosmology::LinearPowerSpectrum spectrum = cosmologicalIcSpectrum(command, options.ic, std::cerr);
  if (out.has_parent_path()) io::ensureWritableDirectory(out.parent_path());
  const cosmology::CosmologicalIcs ics = makeCosmologicalIcs(options.ic, spectrum, std::cout);
  writeCosmologicalInitialConditions(command, ics.particles, cosmologicalIcHeader(options.ic), options.ic.ic.boxSize,
                                     out);
  std::cout << "wrote " << ics.particles.size() << " bodies (a = " << ics.growth.scaleFactor
            << ", D1/D1(1) = " << ics.growth.growthRatio << ", mass " << ics.growth.particleMass << " 1e10 Msun/h) to "
            << options.out << "\n";
  return 0;
}

/// The options of `ic pancake`; defaults are ZeldovichPancakeParams'.
struct PancakeOptions {
  cosmology::ZeldovichPancakeParams pancake;
  std::string out = "pancake.hdf5";
  bool overwrite = false;
};

CLI::App* addPancakeCommand(CLI::App& group, PancakeOptions& options) {
  CLI::App* command = addGeneratorCommand(
      group, "pancake",
      "Zel'dovich pancake in Einstein-de Sitter: n^3 bodies displaced by one plane wave along x whose wavelength is "
      "the box, the exact solution until its caustic (or, with --unperturbed, the grid at rest); GADGET units");
  command->add_option("--box", options.pancake.boxSize, "side L of the periodic cube and the wavelength, Mpc/h, > 0")
      ->capture_default_str();
  command
      ->add_option("--grid", options.pancake.grid,
                   "n: n^3 bodies on an n^3 grid, 2 to " + std::to_string(cosmology::kMaxPancakeGrid))
      ->capture_default_str();
  command->add_option("--z-start", options.pancake.startRedshift, "redshift of the initial conditions, > --z-caustic")
      ->capture_default_str();
  command
      ->add_option("--z-caustic", options.pancake.causticRedshift,
                   "redshift where the first caustic forms (at x = 0), > -1")
      ->capture_default_str();
  command->add_option("--h", options.pancake.hubbleParam, "h = H0 / (100 km/s/Mpc), > 0, for the header only")
      ->capture_default_str();
  command->add_flag("--unperturbed", options.pancake.unperturbed,
                    "the plain grid at rest instead (the constant comoving volume test; --z-caustic is not used)");
  addOutputOptions(*command, options.out, options.overwrite);
  return command;
}

int runPancake(const CLI::App& command, PancakeOptions& options) {
  const cosmology::ZeldovichPancakeParams& params = options.pancake;
  params.validate();
  requireOutputFile(options.out, options.overwrite);
  const std::filesystem::path out = options.out;
  const std::uint64_t numBodies = static_cast<std::uint64_t>(params.grid) * params.grid * params.grid;
  requireBodiesFit(numBodies, false);
  if (out.has_parent_path()) io::ensureWritableDirectory(out.parent_path());
  if (params.unperturbed) {
    std::cout << "generating an unperturbed " << params.grid << "^3 grid at rest in a box of " << params.boxSize
              << " Mpc/h at z = " << params.startRedshift << " (Omega_m = 1)..." << std::endl;
  } else {
    std::cout << "generating a Zel'dovich pancake of " << params.grid << "^3 bodies, wavelength " << params.boxSize
              << " Mpc/h, at z = " << params.startRedshift << " with its caustic at z = " << params.causticRedshift
              << " (Omega_m = 1)..." << std::endl;
  }
  const Particles particles = cosmology::makeZeldovichPancake(params);
  // Einstein-de Sitter: Omega0 = 1, OmegaLambda = 0 in the header make a comoving run of the file use it.
  writeCosmologicalInitialConditions(
      command, particles, io::CosmologyHeader{params.startRedshift, 1.0, 0.0, params.hubbleParam}, params.boxSize, out);
  std::cout << "wrote " << particles.size() << " bodies (a = " << params.startScaleFactor() << ", mass "
            << particles.mass[0] << " 1e10 Msun/h";
  if (!params.unperturbed) std::cout << ", peak velocity u " << cosmology::pancakePeakVelocity(params) << " km/s";
  std::cout << ") to " << options.out << "\n";
  return 0;
}
}  // namespace

std::function<int()> addIcCommand(CLI::App& parent, Options& options) {
  CLI::App* group = parent.add_subcommand("ic", "write initial conditions");
  group->require_subcommand(1);
  CLI::App* command = group->add_subcommand("plummer", "Plummer sphere in N-body units (Aarseth, Henon & Wielen 1974)");
  options.outPath = "plummer.hdf5";
  command->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  command->add_option("--config", "parameter file: `key = value` lines with the long option names");
  addBodiesOption(*command, options.numBodies, "number of bodies");
  addSeedOption(*command, "--seed", options.seed, "random seed, 0 to 2^64 - 1");
  command->add_option("--out", options.outPath, "output file (HDF5, GADGET layout)")->capture_default_str();
  command->add_flag("--overwrite", options.overwrite, "replace an existing file at --out");
  addBoxOption(*command, options.box,
               "a periodic box of side L: the sphere is centred in it, its outliers folded back into [0, L)^3, and the "
               "file records BoxSize L (runs from it are periodic)");
  // Shared by the returned function, which outlives this scope.
  const auto boxOptions = std::make_shared<PeriodicBoxOptions>();
  CLI::App* clumps = addClumpsCommand(*group, *boxOptions);
  CLI::App* lattice = addLatticeCommand(*group, *boxOptions);
  const auto cosmoOptions = std::make_shared<CosmoOptions>();
  CLI::App* cosmo = addCosmoCommand(*group, *cosmoOptions);
  const auto pancakeOptions = std::make_shared<PancakeOptions>();
  CLI::App* pancake = addPancakeCommand(*group, *pancakeOptions);
  return [command, clumps, lattice, cosmo, pancake, boxOptions, cosmoOptions, pancakeOptions, &options] {
    if (cosmo->parsed()) return runCosmo(*cosmo, *cosmoOptions);
    if (pancake->parsed()) return runPancake(*pancake, *pancakeOptions);
    if (clumps->parsed()) return runClumps(*clumps, *boxOptions);
    if (lattice->parsed()) return runLattice(*lattice, *boxOptions);
    validateOptions(options, kBodies);
    requireOutputFile(options.outPath, options.overwrite);
    requireBodiesFit(static_cast<std::uint64_t>(options.numBodies), false);
    options.integrator.boxSize = options.box;
    const Particles particles = loadInitialConditions(options, std::cout);
    writeInitialConditions(*command, particles, options.box, options.outPath);
    std::cout << "wrote " << particles.size() << " Plummer bodies (seed " << options.seed << ") to " << options.outPath
              << "\n";
    return 0;
  };
}

}  // namespace matcha::app
