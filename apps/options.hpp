// SPDX-License-Identifier: MIT
// Options shared by the subcommands, spelled the same everywhere, with defaults taken from the params structs.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "matcha/core/params.hpp"
#include "matcha/core/particles.hpp"

namespace matcha::app {

/// Where the potentials behind `matcha run`'s energy diagnostics come from (--diagnostic-potential).
enum class DiagnosticPotential {
  automatic,  ///< direct when the run uses the tree and a direct sum is cheap (directPotentialsAreCheap), else solver
  solver,     ///< the force call's own potentials (the tree's carry its force error into W)
  direct,     ///< a direct sum on the run's engine at every output
};
std::string toString(DiagnosticPotential choice);

struct Options {
  std::int64_t numBodies = 65536;  ///< -n/--bodies: Plummer bodies when no --ic is given
  std::uint64_t seed = 1;          ///< --seed
  std::string icFile;              ///< --ic: HDF5 initial conditions (GADGET layout), instead of a Plummer sphere
  std::string outPath;             ///< --out: output folder (run) or file (ic)
  bool json = false;               ///< --json: machine-readable summary on stdout
  SolverKind solver = SolverKind::tree;
  EngineKind engine = EngineKind::automatic;
  TreeParams tree;
  GravityParams gravity;
  IntegratorParams integrator;
  DiagnosticPotential diagnosticPotential = DiagnosticPotential::automatic;  ///< --diagnostic-potential (run)
  bool timings = false;  ///< --timings (run): a timings line per output and a table of the phases at the end
  bool dryRun = false;   ///< --dry-run (run): print the memory the run needs and stop
  // compare's sweep (kTreeSweep): the text of --theta and --multipole, expanded by treeSweep().
  std::string thetaList;        ///< --theta: comma-separated opening angles, e.g. "0.3,0.5,0.7"
  std::string multipoleChoice;  ///< --multipole: mono, quad or both
};

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
};

/// Registers the options of `sets` on `command`, bound to `options`, plus --config FILE.
void addOptions(CLI::App& command, Options& options, unsigned sets);

/// Validates every parameter that `command` takes; throws InputError with a one-line message.
void validateOptions(const Options& options, unsigned sets);

/// The tree configurations of a kTreeSweep command: every --multipole order (mono before quad) times every --theta in
/// the order given, the other fields from options.tree. Throws InputError naming the first bad entry.
std::vector<TreeParams> treeSweep(const Options& options);

/// Reads a parameter file (TOML-style `key = value` lines, `#` comments, keys spelled as the long option names)
/// and returns it as command-line arguments ("--key", "value", ...). Throws InputError on a missing or
/// malformed file and on a key that `command` does not take.
std::vector<std::string> configFileArguments(const std::string& path, const CLI::App& command);

/// The parameters `command` actually used, defaults included, as `key = value` lines: a valid --config file.
std::string usedParameters(const CLI::App& command);

/// The same parameters as (key, value) pairs, for snapshot headers.
std::vector<std::pair<std::string, std::string>> usedParameterList(const CLI::App& command);

/// Plummer sphere from -n/--seed, or the bodies of --ic (validated).
Particles loadInitialConditions(const Options& options);

}  // namespace matcha::app

#include <memory>

#include "matcha/core/force_solver.hpp"
#include "matcha/core/near_field_engine.hpp"

namespace matcha::app {

/// The solver of --solver, on `engine` (which must outlive it).
std::unique_ptr<ForceSolver> makeSolver(const Options& options, NearFieldEngine& engine);

/// Writes `text` to `path` atomically (temporary file, then rename); throws IoError.
void writeTextFile(const std::string& path, const std::string& text);

}  // namespace matcha::app
