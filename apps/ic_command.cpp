// SPDX-License-Identifier: MIT
// `matcha ic plummer`: writes a Plummer sphere as an HDF5 initial-conditions file, as NEMO's mkplummer is used.
#include <iostream>

#include "commands.hpp"
#include "matcha/ic/plummer.hpp"
#include "matcha/io/snapshot.hpp"

namespace matcha::app {

std::function<int()> addIcCommand(CLI::App& parent, Options& options) {
  CLI::App* group = parent.add_subcommand("ic", "write initial conditions");
  group->require_subcommand(1);
  CLI::App* command = group->add_subcommand("plummer", "Plummer sphere in N-body units (Aarseth, Henon & Wielen 1974)");
  options.outPath = "plummer.hdf5";
  command->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  command->add_option("--config", "parameter file: `key = value` lines with the long option names");
  command->add_option("-n,--bodies", options.numBodies, "number of bodies")->capture_default_str();
  command->add_option("--seed", options.seed, "random seed")->capture_default_str();
  command->add_option("--out", options.outPath, "output file (HDF5, GADGET layout)")->capture_default_str();
  return [command, &options] {
    validateOptions(options, kBodies);
    const Particles particles = loadInitialConditions(options);
    io::SnapshotMetadata metadata;
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
