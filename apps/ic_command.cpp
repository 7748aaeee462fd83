// SPDX-License-Identifier: MIT
// `matcha ic plummer`: writes a Plummer sphere as an HDF5 initial-conditions file, as NEMO's mkplummer is used.
#include <iostream>

#include "commands.hpp"
#include "matcha/core/errors.hpp"
#include "matcha/ic/plummer.hpp"
#include "matcha/io/snapshot.hpp"
#include "memory_check.hpp"

namespace matcha::app {

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
  return [command, &options] {
    validateOptions(options, kBodies);
    if (options.outPath.empty()) throw InputError("--out: the output file must be named (got an empty string)");
    requireBodiesFit(static_cast<std::uint64_t>(options.numBodies), false);
    options.integrator.boxSize = options.box;
    const Particles particles = loadInitialConditions(options, std::cout);
    io::SnapshotMetadata metadata;
    metadata.boxSize = options.box;
    metadata.parameters = usedParameterList(*command);
    io::SnapshotWriteOptions writeOptions;
    writeOptions.includeForces = false;
    const std::filesystem::path path = options.outPath;
    if (path.has_parent_path()) io::ensureWritableDirectory(path.parent_path());
    io::writeSnapshot(path, particles, metadata, writeOptions);
    std::cout << "wrote " << particles.size() << " Plummer bodies (seed " << options.seed << ") to " << path.string()
              << "\n";
    return 0;
  };
}

}  // namespace matcha::app
