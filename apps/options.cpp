// SPDX-License-Identifier: MIT
#include "options.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iterator>
#include <sstream>

#include "matcha/core/errors.hpp"
#include "matcha/core/version.hpp"
#include "matcha/ic/plummer.hpp"
#include "matcha/integrator/hermite_run.hpp"
#include "matcha/io/snapshot.hpp"
#include "matcha/mesh/treepm_solver.hpp"
#include "matcha/tree/periodic_tree_solver.hpp"

namespace matcha::app {

namespace {

std::string formatNumber(double value) {
  std::ostringstream text;
  text << value;
  return text.str();
}

// A check that names the accepted words in its message: "--multipole: must be mono or quad (got 'hex')".
CLI::Validator oneOf(const std::vector<std::string>& words) {
  std::string list, set;
  for (std::size_t k = 0; k < words.size(); ++k) {
    list += (k == 0 ? "" : k + 1 == words.size() ? " or " : ", ") + words[k];
    set += (k == 0 ? "{" : ",") + words[k];
  }
  return CLI::Validator(
      [words, list](std::string& value) {
        if (std::find(words.begin(), words.end(), value) != words.end()) return std::string();
        return "must be " + list + " (got '" + value + "')";
      },
      set + "}");
}

// An enum option spelled as the words toString() gives: the message names them, and used_parameters.toml echoes the
// word rather than the enum's number (which a CLI11 transformer would leave in the results).
template <typename Enum>
void addWordOption(CLI::App& command, const std::string& name, Enum& target, const std::vector<Enum>& values,
                   const std::string& description) {
  std::vector<std::string> words;
  for (const Enum value : values) words.push_back(toString(value));
  command
      .add_option_function<std::string>(
          name,
          [&target, values](const std::string& word) {
            for (const Enum value : values) {
              if (toString(value) == word) target = value;
            }
          },
          description)
      ->check(oneOf(words))
      ->default_str(toString(target));
}

/// A check for an option that takes a number or the word auto: "must be <what> or auto (got 'x')" otherwise. Only the
/// form is checked here; the value's range is the option's own.
CLI::Validator numberOrAuto(const std::string& what, const std::string& typeName, bool positive = false) {
  return CLI::Validator(
      [what, positive](std::string& text) {
        if (text == "auto") return std::string();
        try {
          std::size_t used = 0;
          const double value = std::stod(text, &used);
          if (used == text.size() && (!positive || (std::isfinite(value) && value > 0.0))) return std::string();
        } catch (const std::exception&) {
        }
        return "must be " + what + " or auto (got '" + text + "')";
      },
      typeName);
}

/// A number option whose default is the word auto (`isAuto`, resolved later): `value` takes the number given.
void addNumberOrAutoOption(CLI::App& command, const std::string& name, double& value, bool& isAuto,
                           const std::string& typeName, const std::string& description) {
  command
      .add_option_function<std::string>(
          name,
          [&value, &isAuto](const std::string& text) {
            isAuto = text == "auto";
            if (!isAuto) value = std::stod(text);
          },
          description)
      ->check(numberOrAuto("a number", typeName))
      ->default_str("auto");
}

/// A whole-number option (a count, up to 2^32 - 1) whose default is the word auto, as addNumberOrAutoOption.
void addCountOrAutoOption(CLI::App& command, const std::string& name, std::uint32_t& value, bool& isAuto,
                          const std::string& description) {
  const auto parse = [](const std::string& text, std::uint32_t& count) {
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), count);
    return !text.empty() && error == std::errc() && end == text.data() + text.size();
  };
  command
      .add_option_function<std::string>(
          name,
          [&value, &isAuto, parse](const std::string& text) {
            isAuto = text == "auto";
            if (!isAuto) parse(text, value);
          },
          description)
      ->check(CLI::Validator(
          [parse](std::string& text) {
            std::uint32_t count = 0;
            if (text == "auto" || parse(text, count)) return std::string();
            return "must be a whole number or auto (got '" + text + "')";
          },
          "COUNT|auto"))
      ->default_str("auto");
}

/// Outputs fall on steps: an interval that is not a whole number of steps would be rounded to one without a word,
/// so it is refused with the two nearest values that are. An interval below dt (every step) is refused alike.
void requireWholeOutputInterval(const IntegratorParams& params) {
  const double ratio = params.outputInterval / params.dt;
  const double nearest = std::round(ratio);
  if (nearest >= 1.0 && std::abs(ratio - nearest) <= 1e-9 * ratio) return;
  std::ostringstream message;
  message << std::setprecision(12) << "--output-interval " << params.outputInterval
          << " is not a whole number of steps of dt = " << params.dt;
  if (ratio < 1.0) {
    message << "; the nearest valid value is " << params.dt;
  } else {
    message << "; the nearest valid values are " << std::floor(ratio) * params.dt << " and "
            << std::ceil(ratio) * params.dt;
  }
  throw InputError(message.str());
}

std::string trim(const std::string& text) {
  const std::size_t first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(" \t") - first + 1);
}

}  // namespace

CLI::Option* addBoxOption(CLI::App& command, double& target, const std::string& description) {
  return command.add_option("--box", target, description)
      ->check(CLI::Validator(
          [](std::string& text) {
            double value = 0.0;
            try {
              std::size_t used = 0;
              value = std::stod(text, &used);
              if (used != text.size()) return "must be a number (got '" + text + "')";
            } catch (const std::exception&) {
              return "must be a number (got '" + text + "')";
            }
            if (!std::isfinite(value) || !(value > 0.0)) {
              return "must be a finite box side > 0 (got " + text + "); --open runs without a box";
            }
            return std::string();
          },
          "L"));
}

void addOptions(CLI::App& command, Options& options, unsigned sets) {
  // Later values win, so the command line (parsed after the config file's arguments) overrides the file.
  command.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  command.add_option("--config", "parameter file: `key = value` lines with the long option names");
  if (sets & kBodies) {
    auto* bodies = addBodiesOption(command, options.numBodies, "number of bodies of the Plummer sphere");
    addSeedOption(command, "--seed", options.seed, "random seed of the Plummer sphere, 0 to 2^64 - 1");
    command.add_option("--ic", options.icFile, "initial conditions: an HDF5 snapshot (GADGET layout, PartType1)")
        ->excludes(bodies);
  }
  if (sets & kTree) {
    const bool sweep = (sets & kTreeSweep) != 0;
    const TreeParams open;
    const tree::OpeningSettings& periodic = tree::kPeriodicOpening;
    const tree::OpeningSettings& periodicOnCpu = tree::kPeriodicOpeningOnCpu;
    const auto autoText = [](double openValue, double periodicValue, double periodicOnCpuValue) {
      std::string text = "auto: " + formatNumber(openValue) + " with open boundaries, " + formatNumber(periodicValue) +
                         " in a periodic box";
      if (periodicOnCpuValue != periodicValue) text += " (" + formatNumber(periodicOnCpuValue) + " on the CPU engine)";
      return text;
    };
    if (sweep) {
      options.thetaList = "auto";
      options.multipoleChoice = toString(options.tree.multipole);
      command
          .add_option("--theta", options.thetaList,
                      "opening angles, comma-separated (0.3,0.5,0.7), each in (0, 1.5], or " +
                          autoText(open.theta, periodic.theta, periodicOnCpu.theta))
          ->capture_default_str();
    } else {
      addNumberOrAutoOption(
          command, "--theta", options.tree.theta, options.openingAuto.theta, "THETA|auto",
          "opening angle, in (0, 1.5], or " + autoText(open.theta, periodic.theta, periodicOnCpu.theta));
    }
    addCountOrAutoOption(command, "--ncrit", options.tree.ncrit, options.openingAuto.ncrit,
                         "most bodies per group (one interaction list each), or " +
                             autoText(open.ncrit, periodic.ncrit, periodicOnCpu.ncrit));
    addCountOrAutoOption(command, "--nleaf", options.tree.nleaf, options.openingAuto.nleaf,
                         "most bodies per leaf cell, or " + autoText(open.nleaf, periodic.nleaf, periodicOnCpu.nleaf));
    command
        .add_option(
            "--reuse", options.tree.reuse,
            "steps a tree and its interaction lists serve, built with room for the bodies' motion over those steps: "
            "auto (0, chosen from measured costs; in a periodic box 8 on the CUDA engine and off on the CPU engine), "
            "off "
            "(1, a new tree every force call) or a number up to 64")
        ->transform(CLI::Transformer({{"auto", "0"}, {"off", "1"}}))
        ->check(CLI::Range(0, 64))
        ->capture_default_str();
    command
        .add_option("--pipeline", options.tree.pipeline,
                    "build each next tree on the CPU cores while the GPU evaluates the steps before it (on; with "
                    "--reuse off on the CUDA engine each step's own tree is built during the step before), or within "
                    "the step that needs it (off)")
        ->transform(CLI::Transformer({{"on", "1"}, {"off", "0"}}))
        ->check(CLI::IsMember({"0", "1"}))
        ->capture_default_str();
    command
        .add_option("--device-advance", options.tree.advanceOnDevice,
                    "with reuse on the CUDA engine, let the GPU kick and drift its own copy of the bodies between "
                    "trees (the same bits as the host's) and start each step's kernels as the step before ends (in a "
                    "periodic box with block time steps: drift its copy, receiving the kicked bodies' velocities "
                    "alone) (on), or send the positions every step after the host's drift (off)")
        ->transform(CLI::Transformer({{"on", "1"}, {"off", "0"}}))
        ->capture_default_str();
    command
        .add_option("--device-sort", options.tree.sortOnDevice,
                    "sort each tree's space-filling-curve keys on the GPU (on: the same order as the host's sort, "
                    "sooner) or on the host's cores (off); the CPU engine always sorts on the host")
        ->transform(CLI::Transformer({{"on", "1"}, {"off", "0"}}))
        ->capture_default_str();
    command
        .add_option("--device-predict", options.tree.predictOnDevice,
                    "with --device-advance on the CUDA engine, predict each background-built tree's positions, keys "
                    "and their sort on the GPU from its copy of the bodies (on: the same bits as the host's), or on "
                    "the host's cores (off)")
        ->transform(CLI::Transformer({{"on", "1"}, {"off", "0"}}))
        ->capture_default_str();
    addNumberOrAutoOption(command, "--alpha", options.tree.alpha, options.openingAuto.alpha, "ALPHA|auto",
                          "relative opening tolerance on top of theta: open a cell while its truncation term exceeds "
                          "alpha |a_old|; 0 = theta alone; or " +
                              autoText(open.alpha, periodic.alpha, periodicOnCpu.alpha));
    if (sweep) {
      command
          .add_option("--multipole", options.multipoleChoice,
                      "cells as monopoles (mono), monopole + quadrupole (quad), or both (one row each)")
          ->check(oneOf({"mono", "quad", "both"}))
          ->capture_default_str();
    } else {
      addWordOption(command, "--multipole", options.tree.multipole,
                    {MultipoleOrder::monopole, MultipoleOrder::quadrupole},
                    "cells as monopoles (mono) or monopole + quadrupole (quad)");
    }
  }
  if (sets & kGravity) {
    command
        .add_option_function<std::string>(
            "--eps",
            [&options](const std::string& text) {
              options.epsAuto = text == "auto";
              options.gravity.eps = options.epsAuto ? GravityParams{}.eps : std::stod(text);
            },
            "Plummer softening length, >= 0, or auto: " + formatNumber(GravityParams{}.eps) +
                " with open boundaries, 1/" + formatNumber(kPeriodicSofteningPerSpacing) +
                " of the mean spacing L / N^(1/3) in a periodic box (well below the mesh's split radius r_s, "
                "where TreePM's softened short range meets Ewald's softened force law)")
        ->check(numberOrAuto("a number", "EPS|auto"))
        ->default_str("auto");
  }
  if (sets & kIntegrator) {
    addWordOption(command, "--integrator", options.integratorKind, {IntegratorKind::leapfrog, IntegratorKind::hermite},
                  "leapfrog: kick-drift-kick with the fixed step --dt on --solver; hermite: 4th-order Hermite with "
                  "block time steps (Makino & Aarseth 1992) on the Hermite engine, with --solver direct, open "
                  "boundaries (--eta, --eta-start, --max-step, --min-step)");
    command.add_option("--dt", options.integrator.dt, "leapfrog time step, > 0")->capture_default_str();
    const integrator::HermiteParams hermite;
    command
        .add_option("--eta-start", options.hermite.etaStart,
                    "hermite: each body's first step eta-start |a| / |j| (to a power of two; then tried against "
                    "Aarseth's criterion), > 0")
        ->capture_default_str();
    command
        .add_option_function<std::string>(
            "--max-step",
            [&options](const std::string& text) { options.maxStepRequested = text == "auto" ? 0.0 : std::stod(text); },
            "hermite: the largest step, a power of two dividing --output-interval (every body is synchronised at "
            "its multiples, the outputs among them), or auto: the largest such power of two")
        ->check(numberOrAuto("a power of two such as 0.125,", "STEP|auto", true))
        ->default_str("auto");
    char minStep[32];
    std::snprintf(minStep, sizeof minStep, "%.17g", hermite.minStep);  // 2^-40 exactly, echoed and read back
    command
        .add_option("--min-step", options.hermite.minStep,
                    "hermite: the smallest step allowed; a body whose step falls below it (a close encounter with "
                    "--eps 0) stops the run with one line naming it and its nearest neighbour (default 2^-40)")
        ->default_str(minStep);
    command
        .add_option("--t-end", options.integrator.tEnd,
                    "end time, absolute (an --ic snapshot starts at its Time); a whole number of steps from the start")
        ->capture_default_str();
    command
        .add_option("--output-interval", options.integrator.outputInterval,
                    "time between snapshots and diagnostics, a multiple of dt (hermite: of --max-step)")
        ->capture_default_str();
  }
  if (sets & kSolver) {
    addWordOption(command, "--solver", options.solver, {SolverKind::tree, SolverKind::direct}, "force solver");
  }
  if (sets & kEngine) {
    addWordOption(command, "--engine", options.engine, {EngineKind::automatic, EngineKind::cpu, EngineKind::cuda},
                  "force engine: auto picks CUDA when a GPU is present");
  }
  if (sets & kJson) command.add_flag("--json", options.json, "print the summary as JSON on stdout");
  if (sets & kDiagnostics) {
    addWordOption(command, "--diagnostic-potential", options.diagnosticPotential,
                  {DiagnosticPotential::automatic, DiagnosticPotential::solver, DiagnosticPotential::direct},
                  "potentials of the energy diagnostics: the solver's, a direct sum at each output, or auto (direct "
                  "for tree runs where it is cheap)");
  }
  if (sets & kTimings) {
    command.add_flag(
        "--timings", options.timings,
        "print where the time goes: a line per output and, at the end, a table of the force call's phases");
  }
  if (sets & kPeriodic) {
    CLI::Option* box = addBoxOption(command, options.box,
                                    "periodic box of side L, bodies in [0, L)^3: TreePM gravity (the tree's short "
                                    "range + a particle mesh, on the engine's side: cuFFT beside the CUDA engine, FFTW "
                                    "beside the CPU's); an --ic file that records a box runs periodic without it");
    command.add_flag("--open", options.open, "open boundaries, also for an --ic file that records a periodic box")
        ->excludes(box);
    command
        .add_option("--pm-grid", options.pmGrid,
                    "periodic: mesh points per side, " + std::to_string(mesh::kMinGrid) + " to " +
                        std::to_string(mesh::kMaxGrid) + "; default: 2 N^(1/3) rounded up to an FFT-friendly size")
        ->check(CLI::Range(mesh::kMinGrid, mesh::kMaxGrid));
    addWordOption(command, "--pm-assignment", options.mesh.assignment,
                  {mesh::MassAssignment::tsc, mesh::MassAssignment::cic},
                  "periodic: the mesh's mass assignment window (tsc: 0.5% force law; cic: cheaper, ~1%)");
    command
        .add_option("--mesh-overlap", options.mesh.overlap,
                    "periodic, mesh on the GPU (CUDA engine): start the mesh before the short range, beside the "
                    "tree's sort, build and walk (on), or after the short range (off); the same forces")
        ->transform(CLI::Transformer({{"on", "1"}, {"off", "0"}}))
        ->capture_default_str();
    addWordOption(command, "--pm-ranks", options.meshOnRanks,
                  {MeshOnRanks::automatic, MeshOnRanks::replicated, MeshOnRanks::slabs},
                  "periodic, on several ranks: the mesh in slabs over the ranks (slabs: 1/K of the grid a rank), or "
                  "the whole mesh on every rank, the ranks' deposits summed (replicated); on each rank's engine's "
                  "side (cuFFT on its GPU beside the CUDA engine, FFTW beside the CPU's); auto: slabs");
    command
        .add_option("--walk-overlap", options.tree.overlapWalk,
                    "periodic: walk the groups in batches, the engine evaluating each batch while the next is walked "
                    "(on), or walk them all, then evaluate (off); the same forces")
        ->transform(CLI::Transformer({{"on", "1"}, {"off", "0"}}))
        ->capture_default_str();
  }
  if (sets & kDryRun) {
    command.add_flag("--dry-run", options.dryRun,
                     "print the host and device memory the run needs (measured on its bodies) and stop");
  }
}

std::string versionText() {
  const std::string commit = kGitCommit;
  if (commit == "unknown") return std::string("matcha ") + kVersion + " (git commit unknown)";
  const std::string dirty = kGitDirty;
  return std::string("matcha ") + kVersion + " (git " + commit +
         (dirty == "true"    ? ", modified"
          : dirty == "false" ? ""
                             : ", modified: unknown") +
         ")";
}

std::optional<std::uint64_t> parseWholeNumber(std::string_view text) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string_view::npos) return std::nullopt;
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;  // beyond 2^64 - 1
  return value;
}

CLI::Option* addBodiesOption(CLI::App& command, std::int64_t& target, const std::string& description) {
  return command
      .add_option_function<std::string>(
          "-n,--bodies",
          [&target](const std::string& text) { target = static_cast<std::int64_t>(*parseWholeNumber(text)); },
          description + ", 1 to 2^31 - 1")
      ->check(CLI::Validator(
          [](std::string& text) {
            const std::optional<std::uint64_t> value = parseWholeNumber(text);
            if (!value) return "must be a whole number of bodies written in digits (got '" + text + "')";
            if (*value < 1 || *value > kMaxBodies) {
              return "must be 1 to " + std::to_string(kMaxBodies) +
                     " (2^31 - 1: the tree indexes bodies in 32 bits) (got " + text + ")";
            }
            return std::string();
          },
          "BODIES"))
      ->default_str(std::to_string(target));
}

void addSeedOption(CLI::App& command, const std::string& name, std::uint64_t& target, const std::string& description) {
  command
      .add_option_function<std::string>(
          name, [&target](const std::string& text) { target = *parseWholeNumber(text); }, description)
      ->check(CLI::Validator(
          [](std::string& text) {
            if (parseWholeNumber(text)) return std::string();
            return "must be a whole number from 0 to 18446744073709551615 (2^64 - 1) written in digits (got '" + text +
                   "')";
          },
          "SEED"))
      ->default_str(std::to_string(target));
}

std::string toString(IntegratorKind kind) { return kind == IntegratorKind::hermite ? "hermite" : "leapfrog"; }

std::string toString(MeshOnRanks choice) {
  switch (choice) {
    case MeshOnRanks::automatic:
      return "auto";
    case MeshOnRanks::replicated:
      return "replicated";
    case MeshOnRanks::slabs:
      return "slabs";
  }
  return "?";
}

std::string toString(DiagnosticPotential choice) {
  switch (choice) {
    case DiagnosticPotential::automatic:
      return "auto";
    case DiagnosticPotential::solver:
      return "solver";
    case DiagnosticPotential::direct:
      return "direct";
  }
  return "?";
}

void validateOptions(const Options& options, unsigned sets) {
  if ((sets & kBodies) && options.icFile.empty() &&
      (options.numBodies < 1 || static_cast<std::uint64_t>(options.numBodies) > kMaxBodies)) {
    throw InputError("-n/--bodies must be 1 to " + std::to_string(kMaxBodies) + " (2^31 - 1) (got " +
                     std::to_string(options.numBodies) + ")");
  }
  if ((sets & kTree) && (sets & kTreeSweep)) {
    treeSweep(options);
  } else if (sets & kTree) {
    options.tree.validate();
  }
  if (sets & kGravity) options.gravity.validate();
  if (sets & kIntegrator) {
    options.integrator.validate();
    // A Hermite run's outputs fall on multiples of its largest step, not of dt (prepareHermiteRun).
    if (options.integratorKind == IntegratorKind::leapfrog) requireWholeOutputInterval(options.integrator);
  }
}

bool givenOnCommandLine(const Options& options, const std::string& name) {
  return std::any_of(options.arguments.begin(), options.arguments.end(), [&name](const std::string& argument) {
    return argument == name || argument.rfind(name + "=", 0) == 0;
  });
}

void prepareHermiteRun(Options& options, const InitialConditionsInfo& ic) {
  const std::string hermite = "--integrator hermite";
  if (options.solver != SolverKind::direct) {
    throw InputError(hermite +
                     " sums the forces directly on the Hermite engine: give --solver direct (the tree "
                     "solver gives no jerks)");
  }
  if (options.cosmology) {
    throw InputError(hermite + " does not run comoving: --cosmology runs take the leapfrog");
  }
  if (ic.cosmology) {
    throw InputError(hermite + " does not run comoving: --ic " + options.icFile +
                     " has a cosmology (comoving runs take the leapfrog)");
  }
  if (options.box > 0.0 || (ic.boxSize > 0.0 && !options.open)) {
    throw InputError(hermite + " runs have open boundaries: " +
                     (options.box > 0.0 ? std::string("--box cannot be given")
                                        : "--ic " + options.icFile +
                                              " records a periodic box; add --open to run it "
                                              "with open boundaries"));
  }
  if (options.timings) {
    throw InputError(hermite +
                     ": --timings shows the phases of the leapfrog's force calls; a Hermite run reports its "
                     "engine and host seconds in its summary and summary.json");
  }
  if (options.forceCheck != 0) {
    throw InputError(hermite + ": --force-check measures a solver's forces; the Hermite engine's are direct sums");
  }
  if (givenOnCommandLine(options, "--dt")) {
    throw InputError(hermite + " chooses each body's step (--eta, --max-step): --dt is the leapfrog's");
  }
  options.hermite.eta = options.eta.value_or(integrator::HermiteParams{}.eta);
  if (!(std::isfinite(options.hermite.eta) && options.hermite.eta > 0.0)) {
    throw InputError("--eta " + formatNumber(options.hermite.eta) +
                     ": Aarseth's accuracy parameter of a hermite run must be finite and > 0 (default " +
                     formatNumber(integrator::HermiteParams{}.eta) + ")");
  }
  options.hermite.maxStep = integrator::resolveMaxStep(options.integrator.outputInterval, options.maxStepRequested);
  integrator::validateHermiteRun(options.integrator, options.hermite);
}

void echoDefault(CLI::App& command, const std::string& name, double value) {
  std::ostringstream text;
  text << std::setprecision(17) << value;
  command.get_option(name)->default_str(text.str());
}

void refuseComovingOptions(const Options& options) {
  for (const char* name : {"--z-end", "--output-z", "--max-dlna", "--max-physical-softening", "--pm-steps",
                           "--pm-displacement", "--block-steps"}) {
    if (givenOnCommandLine(options, name)) {
      throw InputError(std::string(name) +
                       " is an option of comoving runs (an --ic file with a cosmology, or --cosmology); this run is "
                       "not one");
    }
  }
}

void prepareLeapfrogRun(Options& options, bool comoving) {
  for (const char* name : {"--eta-start", "--max-step", "--min-step"}) {
    if (givenOnCommandLine(options, name)) {
      throw InputError(std::string(name) + " is an option of --integrator hermite; this run takes the leapfrog");
    }
  }
  if (comoving) {
    options.comoving.eta = options.eta.value_or(cosmology::ComovingTimelineParams{}.eta);
    // Block time steps live within long-range steps: without them the default is global steps, a typed "on" refused.
    if (options.blockSteps && !options.longRangeSteps && givenOnCommandLine(options, "--block-steps")) {
      throw InputError("--block-steps on needs long-range steps (--pm-steps on)");
    }
  } else if (options.eta && givenOnCommandLine(options, "--eta")) {
    throw InputError(
        "--eta is Aarseth's parameter of --integrator hermite and Power et al.'s of comoving runs; this run is "
        "neither (a leapfrog's step is --dt)");
  }
}

std::vector<TreeParams> treeSweep(const Options& options) {
  std::vector<MultipoleOrder> orders;
  if (options.multipoleChoice != "quad") orders.push_back(MultipoleOrder::monopole);
  if (options.multipoleChoice != "mono") orders.push_back(MultipoleOrder::quadrupole);
  std::vector<double> thetas;
  std::size_t start = 0;
  while (trim(options.thetaList) != "auto") {
    const std::size_t comma = options.thetaList.find(',', start);
    const std::string entry = trim(options.thetaList.substr(start, comma == std::string::npos ? comma : comma - start));
    std::size_t used = 0;
    double theta = 0.0;
    try {
      theta = std::stod(entry, &used);
    } catch (const std::exception&) {
      used = 0;  // not a number, or out of double's range: reported below
    }
    if (entry.empty() || used != entry.size()) {
      throw InputError("--theta: '" + entry + "' is not a number (give a list such as 0.3,0.5,0.7)");
    }
    thetas.push_back(theta);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (thetas.empty()) thetas.push_back(options.tree.theta);  // auto: the box's (resolvePeriodicBox)
  std::vector<TreeParams> sweep;
  for (const MultipoleOrder order : orders) {
    for (const double theta : thetas) {
      TreeParams params = options.tree;
      params.theta = theta;
      params.multipole = order;
      params.validate();
      sweep.push_back(params);
    }
  }
  return sweep;
}

namespace {

/// Whether a subcommand of `app` (at any depth) other than `except` takes the long option `name`.
bool anotherCommandTakes(const CLI::App& app, const CLI::App& except, const std::string& name) {
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (sub != &except && sub->get_option_no_throw(name) != nullptr) return true;
    if (anotherCommandTakes(*sub, except, name)) return true;
  }
  return false;
}

/// The options of `command` that `arguments` give ("--name", "--name=value", "-n").
std::vector<const CLI::Option*> givenOptions(const CLI::App& command, const std::vector<std::string>& arguments) {
  std::vector<const CLI::Option*> given;
  for (const std::string& argument : arguments) {
    if (argument.size() < 2 || argument[0] != '-') continue;
    const std::string name = argument.substr(0, argument.find('='));
    if (const CLI::Option* option = command.get_option_no_throw(name)) given.push_back(option);
  }
  return given;
}

/// Whether the command line's options `given` override a file's `option`: one of them excludes it, or excludes an
/// option it needs (`--ic F` drops a file's `cosmology = true` and with it the `grid` that needs it).
bool overriddenBy(const CLI::Option& option, const std::vector<const CLI::Option*>& given) {
  const auto excludedByGiven = [&given](const CLI::Option& candidate) {
    const auto excludes = candidate.get_excludes();  // by value
    return std::any_of(given.begin(), given.end(), [&excludes](const CLI::Option* other) {
      return std::find(excludes.begin(), excludes.end(), other) != excludes.end();
    });
  };
  if (excludedByGiven(option)) return true;
  const auto needs = option.get_needs();  // by value
  return std::any_of(needs.begin(), needs.end(), [&](const CLI::Option* need) { return excludedByGiven(*need); });
}

}  // namespace

void refuseStartOptionsOnRestart(const std::vector<std::string>& commandLine, const CLI::App& run,
                                 const std::string& restartDir) {
  // Every spelling of the start's options: "bodies" and "n" for -n,--bodies.
  std::vector<std::string> longNames, shortNames;
  for (const char* name : {"--bodies", "--seed", "--ic", "--cosmology", "--grid", "--z-start", "--lpt", "--power",
                           "--sigma8", "--ns", "--omega-b", "--fixed-amplitude", "--invert-phases"}) {
    const CLI::Option* option = run.get_option_no_throw(name);
    if (option == nullptr) continue;
    for (const std::string& spelling : option->get_lnames()) longNames.push_back(spelling);
    for (const std::string& spelling : option->get_snames()) shortNames.push_back(spelling);
  }
  for (const std::string& token : commandLine) {
    std::string name;
    if (token.rfind("--", 0) == 0) {
      name = token.substr(2, token.find('=') == std::string::npos ? std::string::npos : token.find('=') - 2);
      if (std::find(longNames.begin(), longNames.end(), name) == longNames.end()) continue;
    } else if (token.size() >= 2 && token[0] == '-' && std::isalpha(static_cast<unsigned char>(token[1]))) {
      name = token.substr(1, 1);  // -n512 as -n 512
      if (std::find(shortNames.begin(), shortNames.end(), name) == shortNames.end()) continue;
    } else {
      continue;
    }
    throw InputError("--restart " + restartDir + " continues the run's bodies from its checkpoint: " + token +
                     " makes a start and cannot be given with it");
  }
}

std::vector<std::string> configFileArguments(const std::string& path, const CLI::App& command, const CLI::App& root,
                                             const std::vector<std::string>& commandLine) {
  std::error_code ec;
  // An ifstream opens a folder and reads it as an empty file: the run would start with every default.
  if (std::filesystem::is_directory(path, ec)) {
    throw InputError("--config " + path + ": is a folder, not a parameter file");
  }
  std::ifstream file(path);
  if (!file) throw InputError("--config " + path + ": cannot open the parameter file");
  {
    // A binary file (a program, an HDF5 file given by mistake) is named as such, its bytes not echoed.
    const std::string text{std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
    const auto control = std::find_if(text.begin(), text.end(), [](char c) {
      const auto byte = static_cast<unsigned char>(c);
      return (byte < 0x20 && c != '\n' && c != '\r' && c != '\t') || byte == 0x7f;
    });
    if (control != text.end()) {
      throw InputError("--config " + path + ": not a text parameter file (a control byte at offset " +
                       std::to_string(control - text.begin()) + ")");
    }
    // A key given twice: which one was meant is not for matcha to guess (CLI11 reads the two as one list).
    std::istringstream lines(text);
    std::vector<std::string> keys;
    for (std::string line; std::getline(lines, line);) {
      const std::size_t start = line.find_first_not_of(" \t");
      const std::size_t equals = line.find('=');
      if (start == std::string::npos || line[start] == '#' || line[start] == '[' || equals == std::string::npos) {
        continue;
      }
      std::string key = line.substr(start, equals - start);
      key.erase(key.find_last_not_of(" \t") + 1);
      if (std::find(keys.begin(), keys.end(), key) != keys.end()) {
        throw InputError("--config " + path + ": key '" + key + "' is given twice");
      }
      keys.push_back(key);
    }
    file.clear();
    file.seekg(0);
  }
  const std::vector<const CLI::Option*> given = givenOptions(command, commandLine);
  std::vector<CLI::ConfigItem> items;
  try {
    items = CLI::ConfigTOML().from_config(file);
  } catch (const CLI::ParseError& error) {
    throw InputError("--config " + path + ": malformed parameter file (" + error.what() + ")");
  }
  std::vector<std::string> arguments;
  for (const CLI::ConfigItem& item : items) {
    if (item.name == "++" || item.name == "--") continue;  // section markers
    // A parameter file's `out` is a run's folder (configs/run.toml, used_parameters.toml); `ic`'s --out is the file
    // it writes, which a shared file must not name: the bodies would land in a file called like the run's folder.
    const bool icCommand = command.get_parent() != nullptr && command.get_parent()->get_name() == "ic";
    if (icCommand && item.name == "out") continue;
    if (item.fullname().find_first_of(" \t") != std::string::npos) {
      // `theta 0.5`: CLI11 reads a dotted key ("theta 0" in section "5"); say what the line lacks.
      throw InputError("--config " + path + ": '" + item.fullname() + "' is not a `key = value` line");
    }
    if (!item.parents.empty()) {
      throw InputError("--config " + path + ": sections are not supported (key '" + item.fullname() + "')");
    }
    // Not parameters: `help = true` printed the help and ran nothing (exit 0), and `restart = DIR` restarted DIR
    // without its own used_parameters.toml, which --restart on the command line takes.
    if (item.name == "help") {
      throw InputError("--config " + path + ": 'help' is not a parameter (matcha " + command.get_name() +
                       " --help prints the options)");
    }
    if (item.name == "restart") {
      throw InputError("--config " + path +
                       ": 'restart' is not a parameter: give --restart DIR on the command line (it takes "
                       "DIR/used_parameters.toml as the run's parameters)");
    }
    const CLI::Option* option = command.get_option_no_throw("--" + item.name);
    if (option == nullptr && item.name != "config" && anotherCommandTakes(root, command, "--" + item.name)) continue;
    if (option == nullptr || item.name == "config") {
      throw InputError("--config " + path + ": unknown key '" + item.name + "'");
    }
    if (overriddenBy(*option, given)) continue;
    if (item.inputs.empty()) throw InputError("--config " + path + ": key '" + item.name + "' needs a value");
    if (option->get_expected_max() == 0) {  // a flag: true/false
      if (item.inputs.size() != 1) throw InputError("--config " + path + ": key '" + item.name + "' needs one value");
      const std::string& flag = item.inputs[0];
      if (flag == "true" || flag == "1") {
        arguments.push_back("--" + item.name);
      } else if (flag != "false" && flag != "0") {
        // `dry-run = yes` ran the whole simulation before: a flag's value is checked as the command line's is.
        throw InputError("--config " + path + ": key '" + item.name + "' is a flag: true or false (got '" + flag +
                         "')");
      }
      continue;
    }
    // A list (`theta = 0.3, 0.5` or `[0.3, 0.5]`) becomes the comma-separated text of compare's --theta; an option
    // that takes one value rejects it when the arguments are parsed.
    std::string value = item.inputs[0];
    for (std::size_t k = 1; k < item.inputs.size(); ++k) value += "," + item.inputs[k];
    arguments.push_back("--" + item.name);
    arguments.push_back(value);
  }
  return arguments;
}

std::vector<std::pair<std::string, std::string>> usedParameterList(const CLI::App& command) {
  std::vector<std::pair<std::string, std::string>> parameters;
  for (const CLI::Option* option : command.get_options()) {
    const std::string name = option->get_single_name();
    // --restart is how a run started, not a parameter of it: a file that carried it would restart whatever read it.
    if (name == "help" || name == "config" || name == "restart" || name.empty()) continue;
    // An option that was not given and is excluded by one that was (-n when --ic is used) did not take part.
    const auto excludes = option->get_excludes();  // returned by value
    const bool excluded =
        option->count() == 0 &&
        std::any_of(excludes.begin(), excludes.end(), [](const CLI::Option* other) { return other->count() > 0; });
    if (excluded) continue;
    // Nor did one that was not given and needs one that was not (run's --grid without --cosmology).
    const auto needs = option->get_needs();  // returned by value
    const bool unused = option->count() == 0 && std::any_of(needs.begin(), needs.end(), [](const CLI::Option* other) {
                          return other->count() == 0;
                        });
    if (unused) continue;
    std::string value;
    if (option->count() > 0) {
      value = option->results().back();
    } else if (option->get_expected_max() == 0) {
      value = "false";
    } else {
      value = option->get_default_str();
    }
    if (option->get_expected_max() == 0 && option->count() > 0) value = "true";
    if (value.empty()) continue;  // an optional file that was not given (--ic)
    parameters.emplace_back(name, value);
  }
  return parameters;
}

std::string usedParameters(const CLI::App& command) {
  std::ostringstream text;
  text << "# matcha " << command.get_name() << ": the parameters of this run, defaults included; usable as --config\n";
  for (const auto& [key, value] : usedParameterList(command)) {
    const bool numeric = !value.empty() && value.find_first_not_of("0123456789+-.eE") == std::string::npos;
    const bool boolean = value == "true" || value == "false";
    text << key << " = " << (numeric || boolean ? value : "\"" + value + "\"") << "\n";
  }
  return text.str();
}

namespace {}  // namespace

InitialConditionsInfo inspectInitialConditions(const Options& options) {
  InitialConditionsInfo info;
  if (options.icFile.empty()) {
    info.numBodies = static_cast<std::uint64_t>(options.numBodies);
    return info;
  }
  // A missing, unreadable or corrupt IC file is the user's input, as README's exit codes say: 2, not 1.
  const io::SnapshotInfo snapshot = asBadInput([&] { return io::inspectSnapshot(options.icFile); });
  if (snapshot.numBodies > kMaxBodies) {
    throw InputError("--ic " + options.icFile + " holds " + std::to_string(snapshot.numBodies) + " bodies; at most " +
                     std::to_string(kMaxBodies) + " (2^31 - 1) are supported");
  }
  info.numBodies = snapshot.numBodies;
  info.time = snapshot.time;
  info.boxSize = snapshot.boxSize;
  info.cosmology = snapshot.cosmology;
  info.units = snapshot.units;
  return info;
}

double resolvePeriodicBox(Options& options, double fileBoxSize, std::uint64_t numBodies) {
  const double box = options.open ? 0.0 : options.box > 0.0 ? options.box : fileBoxSize;
  const TreeParams open;
  const bool inBox = box > 0.0;
  // The engine is made later (makeRunEngine); auto takes the CUDA engine where one is built and a device answers.
  const bool onDevice =
      inBox && (options.engine == EngineKind::cuda || (options.engine == EngineKind::automatic &&
                                                       gpu::cudaEngineBuilt() && gpu::queryCudaDevice().available));
  const tree::OpeningSettings& periodic = tree::periodicOpening(onDevice);
  if (options.openingAuto.theta) options.tree.theta = inBox ? periodic.theta : open.theta;
  if (options.openingAuto.ncrit) options.tree.ncrit = inBox ? periodic.ncrit : open.ncrit;
  if (options.openingAuto.nleaf) options.tree.nleaf = inBox ? periodic.nleaf : open.nleaf;
  if (options.openingAuto.alpha) options.tree.alpha = inBox ? periodic.alpha : open.alpha;
  options.gravity.periodic = PeriodicSplit{};
  options.integrator.boxSize = 0.0;
  if (!(box > 0.0)) {
    // A mesh option without a box was ignored before: say that it does nothing here.
    for (const char* name : {"--pm-grid", "--pm-assignment", "--mesh-overlap", "--pm-ranks"}) {
      if (givenOnCommandLine(options, name)) {
        throw InputError(std::string(name) +
                         " sets the periodic mesh, and this run has open boundaries (give --box, or an --ic file "
                         "with a periodic box)");
      }
    }
    return 0.0;
  }
  if (options.solver == SolverKind::direct) {
    throw InputError(
        "periodic gravity needs the tree solver (its reference is `matcha compare`'s Ewald sum), not "
        "--solver direct");
  }
  options.mesh.boxSize = box;
  options.mesh.grid = options.pmGrid > 0 ? options.pmGrid : mesh::defaultPmGrid(numBodies, options.mesh);
  options.gravity.periodic = mesh::periodicSplit(options.mesh);
  if (options.epsAuto) options.gravity.eps = periodicSoftening(box, numBodies);
  options.integrator.boxSize = box;
  return box;
}

double periodicSoftening(double boxSize, std::uint64_t numBodies) {
  return boxSize / std::cbrt(static_cast<double>(std::max<std::uint64_t>(numBodies, 1))) / kPeriodicSofteningPerSpacing;
}

std::string periodicSofteningWarning(const Options& options, std::uint64_t numBodies) {
  const PeriodicSplit& split = options.gravity.periodic;
  if (!split.enabled() || !(options.gravity.eps > 0.1 * split.splitRadius)) return "";
  std::ostringstream text;
  text.precision(3);
  text << "warning: eps " << options.gravity.eps << " is " << options.gravity.eps / split.splitRadius << " r_s (r_s "
       << split.splitRadius << "): TreePM softens only the short range, so its forces part from a "
       << "softened Newtonian law (Ewald's) by ~(eps/r_s)^2/10; --eps auto gives "
       << periodicSoftening(split.boxSize, numBodies);
  return text.str();
}

gpu::EngineChoice makeRunEngine(const Options& options) { return gpu::makeEngine(options.engine); }

Particles loadInitialConditions(const Options& options, std::ostream& info) {
  if (!options.icFile.empty()) {
    info << "reading initial conditions from " << options.icFile << "..." << std::endl;
    io::Snapshot snapshot = asBadInput([&] { return io::readSnapshot(options.icFile); });
    snapshot.particles.validate();
    if (options.integrator.boxSize > 0.0) {
      try {
        tree::requireInsideBox(snapshot.particles, options.integrator.boxSize);
      } catch (const InputError& error) {
        throw InputError("--ic " + options.icFile + ": " + error.what());
      }
    }
    return std::move(snapshot.particles);
  }
  ic::PlummerParams plummer;
  plummer.numBodies = static_cast<std::size_t>(options.numBodies);
  plummer.seed = options.seed;
  info << "generating a " << options.numBodies << "-body Plummer sphere (seed " << options.seed << ")"
       << (options.integrator.boxSize > 0.0 ? ", centred in the periodic box" : "") << "..." << std::endl;
  Particles particles = ic::makePlummer(plummer);
  if (const double box = options.integrator.boxSize; box > 0.0) centrePlummerInBox(particles, box);
  return particles;
}

void centrePlummerInBox(Particles& particles, double box) {
  for (auto* coordinate : {&particles.x, &particles.y, &particles.z}) {
    for (double& value : *coordinate) value += 0.5 * box;
  }
  wrapIntoBox(particles, box);
}

}  // namespace matcha::app

#include "matcha/gpu/direct_solver.hpp"
#include "matcha/tree/space_filling_curve.hpp"
#include "matcha/tree/tree_solver.hpp"

namespace matcha::app {

std::unique_ptr<ForceSolver> makeSolver(const Options& options, const gpu::EngineChoice& choice) {
  NearFieldEngine& engine = *choice.engine;
  if (options.solver == SolverKind::direct) {
    // Bodies in Hilbert order before each direct sum: compact blocks give the float engines their accuracy and speed.
    // Hilbert rather than the tree's Morton order because a Morton run can jump across the box, and a block joining
    // two distant pieces puts its float origin far from both (CPU float E_max at 2^17 in 256-body blocks, one
    // seed: 1.4e-6 in Morton order, 1.1e-6 in Hilbert order).
    auto hilbertOrder = [keys = std::vector<std::uint64_t>()](Particles& particles) mutable {
      tree::computeHilbertKeys(particles.sources(), tree::computeBoundingCube(particles.sources()), keys);
      particles.permute(tree::sortByKey(keys));
    };
    return std::make_unique<gpu::DirectSolver>(engine, options.gravity, std::move(hilbertOrder));
  }
  if (options.gravity.periodic.enabled()) {
    // TreePM: the tree's short range and the mesh split the force at the same r_s (resolvePeriodicBox set both).
    auto shortRange = std::make_unique<tree::PeriodicTreeSolver>(engine, options.tree, options.gravity);
    mesh::MeshParams meshParams = options.mesh;
    meshParams.backend = choice.onGpu ? mesh::MeshBackend::cufft : mesh::MeshBackend::fftw;
    return std::make_unique<mesh::TreePmSolver>(std::move(shortRange), meshParams, options.gravity);
  }
  return std::make_unique<tree::TreeSolver>(engine, options.tree, options.gravity);
}

}  // namespace matcha::app
