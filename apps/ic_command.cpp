// SPDX-License-Identifier: MIT
// `matcha ic`: writes initial conditions as an HDF5 file, as NEMO's mkplummer is used: `plummer` (a Plummer sphere),
// `clumps` (a periodic box of Plummer and Hernquist clumps in a uniform background) and `lattice` (a perturbed simple
// cubic lattice in a periodic box). The periodic ones record BoxSize L, so runs from them are periodic.
#include <iostream>
#include <memory>

#include "commands.hpp"
#include "matcha/core/errors.hpp"
#include "matcha/ic/periodic_boxes.hpp"
#include "matcha/ic/plummer.hpp"
#include "matcha/io/snapshot.hpp"
#include "memory_check.hpp"

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
};

void requireOutputFile(const std::string& outPath) {
  if (outPath.empty()) throw InputError("--out: the output file must be named (got an empty string)");
}

/// Writes the bodies (atomically, without forces) with `boxSize` in the header (0: open boundaries) and the
/// parameters `command` used.
void writeInitialConditions(const CLI::App& command, const Particles& particles, double boxSize,
                            const std::string& outPath) {
  io::SnapshotMetadata metadata;
  metadata.boxSize = boxSize;
  metadata.parameters = usedParameterList(command);
  io::SnapshotWriteOptions writeOptions;
  writeOptions.includeForces = false;
  const std::filesystem::path path = outPath;
  if (path.has_parent_path()) io::ensureWritableDirectory(path.parent_path());
  io::writeSnapshot(path, particles, metadata, writeOptions);
}

CLI::App* addClumpsCommand(CLI::App& group, PeriodicBoxOptions& options) {
  CLI::App* command = group.add_subcommand(
      "clumps", "periodic box of Plummer and Hernquist clumps, each in its own equilibrium, in a uniform background");
  command->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  command->add_option("--config", "parameter file: `key = value` lines with the long option names");
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
  command->add_option("-o,--out", options.clumpsOut, "output file (HDF5, GADGET layout)")->capture_default_str();
  return command;
}

CLI::App* addLatticeCommand(CLI::App& group, PeriodicBoxOptions& options) {
  CLI::App* command =
      group.add_subcommand("lattice", "perturbed simple cubic lattice in a periodic box, bodies at rest");
  command->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  command->add_option("--config", "parameter file: `key = value` lines with the long option names");
  addBodiesOption(*command, options.latticeBodies, "number of bodies, a perfect cube n^3");
  addSeedOption(*command, "--seed", options.lattice.seed, "random seed, 0 to 2^64 - 1");
  command->add_option("--box", options.lattice.boxSize, "side L of the periodic cube, > 0; the file records BoxSize L")
      ->capture_default_str();
  command
      ->add_option("--perturbation", options.lattice.perturbation,
                   "each coordinate displaced uniformly in [-A, A] grid spacings from its cell's centre, A in [0, 0.5)")
      ->capture_default_str();
  command->add_option("-o,--out", options.latticeOut, "output file (HDF5, GADGET layout)")->capture_default_str();
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
  requireOutputFile(options.clumpsOut);
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
  requireOutputFile(options.latticeOut);
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
  addBoxOption(*command, options.box,
               "a periodic box of side L: the sphere is centred in it, its outliers folded back into [0, L)^3, and the "
               "file records BoxSize L (runs from it are periodic)");
  // Shared by the returned function, which outlives this scope.
  const auto boxOptions = std::make_shared<PeriodicBoxOptions>();
  CLI::App* clumps = addClumpsCommand(*group, *boxOptions);
  CLI::App* lattice = addLatticeCommand(*group, *boxOptions);
  return [command, clumps, lattice, boxOptions, &options] {
    if (clumps->parsed()) return runClumps(*clumps, *boxOptions);
    if (lattice->parsed()) return runLattice(*lattice, *boxOptions);
    validateOptions(options, kBodies);
    requireOutputFile(options.outPath);
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
