// SPDX-License-Identifier: MIT
// `matcha`: the command line. The only place that turns an error into a message and an exit code (STYLE.md habit 9):
//   0 success (and --help, --version), 1 a file or device failed (IoError, CudaError), 2 bad input (InputError, a
//   command line CLI11 cannot parse), 3 an internal error (InvariantError, anything unexpected such as bad_alloc).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "commands.hpp"
#include "distributed_run.hpp"
#include "matcha/core/errors.hpp"
#include "options.hpp"

namespace {

constexpr int kExitIo = 1;
constexpr int kExitBadInput = 2;
constexpr int kExitInternal = 3;

/// An empty value (`--t-end ''`, `--t-end=`) is refused by every option that takes one: CLI11 reads it as 0 for a
/// number, which ran a 0-step run with exit 0, and a folder or file named '' means nothing either.
void refuseEmptyValues(CLI::App& command) {
  const CLI::Validator nonEmpty([](std::string& value) { return value.empty() ? std::string("an empty value") : ""; },
                                "", "non-empty");
  for (CLI::Option* option : command.get_options()) {
    if (option->get_expected_max() > 0) option->check(nonEmpty);
  }
  for (CLI::App* sub : command.get_subcommands([](const CLI::App*) { return true; })) refuseEmptyValues(*sub);
}

const CLI::App* findSubcommand(const CLI::App& parent, const std::string& name) {
  for (const CLI::App* sub : parent.get_subcommands([](const CLI::App*) { return true; })) {
    if (sub->get_name() == name) return sub;
  }
  return nullptr;
}

// Splices the arguments of `--config FILE` in right after the subcommand's name, so that options given on the
// command line (which come later) override the file's values.
std::vector<std::string> expandConfigFile(const std::vector<std::string>& args, const CLI::App& app) {
  const CLI::App* command = &app;
  std::size_t insertAt = 0;
  for (std::size_t k = 0; k < args.size(); ++k) {
    const CLI::App* sub = findSubcommand(*command, args[k]);
    if (sub == nullptr) break;
    command = sub;
    insertAt = k + 1;
  }
  std::string configPath;
  bool configGiven = false;
  for (std::size_t k = insertAt; k < args.size(); ++k) {
    if (args[k] == "--config") {
      if (k + 1 >= args.size()) throw matcha::InputError("--config needs a file name");
      configPath = args[k + 1];
      configGiven = true;
    } else if (args[k].rfind("--config=", 0) == 0) {
      configPath = args[k].substr(9);
      configGiven = true;
    }
  }
  if (configGiven && configPath.empty()) throw matcha::InputError("--config needs a file name (got '')");
  // `run --restart DIR` takes the run's own parameters (DIR/used_parameters.toml) as its config file: options given
  // with it override them, as they would a --config file's.
  if (command->get_name() == "run") {
    for (std::size_t k = insertAt; k < args.size(); ++k) {
      std::string restartDir;
      if (args[k] == "--restart" && k + 1 < args.size()) restartDir = args[k + 1];
      if (args[k].rfind("--restart=", 0) == 0) restartDir = args[k].substr(10);
      if (restartDir.empty()) continue;
      if (configGiven) {
        throw matcha::InputError("--restart takes the run's parameters from " + restartDir +
                                 "/used_parameters.toml: --config cannot be given with it");
      }
      matcha::app::refuseStartOptionsOnRestart(
          std::vector<std::string>(args.begin() + static_cast<std::ptrdiff_t>(insertAt), args.end()), *command,
          restartDir);
      configPath = (std::filesystem::path(restartDir) / "used_parameters.toml").string();
      if (!std::filesystem::is_regular_file(configPath)) {
        throw matcha::InputError("--restart " + restartDir + ": there is no " + configPath +
                                 " (not a run folder of matcha run)");
      }
    }
  }
  if (configPath.empty() || command == &app) return args;
  const std::vector<std::string> commandLine(args.begin() + static_cast<std::ptrdiff_t>(insertAt), args.end());
  std::vector<std::string> expanded(args.begin(), args.begin() + static_cast<std::ptrdiff_t>(insertAt));
  const std::vector<std::string> fromFile = matcha::app::configFileArguments(configPath, *command, app, commandLine);
  expanded.insert(expanded.end(), fromFile.begin(), fromFile.end());
  expanded.insert(expanded.end(), commandLine.begin(), commandLine.end());
  return expanded;
}

// The command line as a shell would take it back (for the run folder's RUNNING marker).
std::string joinCommandLine(int argc, char** argv) {
  std::string line;
  for (int k = 0; k < argc; ++k) {
    std::string arg = argv[k];
    if (arg.empty() || arg.find_first_of(" \t'\"\\$`") != std::string::npos) {
      std::string quoted = "'";
      for (const char c : arg) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
      arg = quoted + "'";
    }
    line += (k == 0 ? "" : " ") + arg;
  }
  return line;
}

}  // namespace

int main(int argc, char** argv) {
  // Under mpirun, one rank of the world (apps/distributed_run.hpp); without it, a world of one rank.
  const matcha::app::MpiSession mpi(argc, argv);
  CLI::App app{"matcha: a Barnes-Hut treecode with a GPU near-field (N-body units: G = 1)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", matcha::app::versionText(), "print the version and the git commit, then exit");
  // One options struct per subcommand: their defaults differ (e.g. --out is a folder for run, a file for ic).
  matcha::app::Options runOptions, compareOptions, icOptions, tuneOptions;
  runOptions.commandLine = joinCommandLine(argc, argv);
  runOptions.arguments.assign(argv + 1, argv + argc);
  const auto runCommand = matcha::app::addRunCommand(app, runOptions);
  const auto compareCommand = matcha::app::addCompareCommand(app, compareOptions);
  const auto icCommand = matcha::app::addIcCommand(app, icOptions);
  const auto tuneCommand = matcha::app::addTuneCommand(app, tuneOptions);
  const auto renderCommand = matcha::app::addRenderCommand(app);
  const auto analyzeCommand = matcha::app::addAnalyzeCommand(app);
  refuseEmptyValues(app);

  try {
    std::vector<std::string> args(argv + 1, argv + argc);
    args = expandConfigFile(args, app);
    std::reverse(args.begin(), args.end());  // CLI11 parses a vector from its back
    app.parse(args);
    matcha::app::requireRunsOnRanks(*app.get_subcommands().front());
    if (app.got_subcommand("run")) return runCommand();
    if (app.got_subcommand("compare")) return compareCommand();
    if (app.got_subcommand("tune")) return tuneCommand();
    if (app.got_subcommand("render")) return renderCommand();
    if (app.got_subcommand("analyze")) return analyzeCommand();
    return icCommand();
  } catch (const matcha::app::RankZeroFailed& failure) {  // rank 0 printed the message
    return failure.exitCode();
  } catch (const CLI::Success& success) {  // --help, --help-all, --version: printed, exit 0
    return app.exit(success);
  } catch (const CLI::ParseError& error) {
    // CLI11's own codes (104-109) would say nothing to a script that the table in README does not say.
    return matcha::app::reportFailure(kExitBadInput, error.what() + std::string(" (see matcha --help)"));
  } catch (const matcha::InputError& error) {
    return matcha::app::reportFailure(kExitBadInput, error.what());
  } catch (const matcha::InvariantError& error) {
    return matcha::app::reportFailure(kExitInternal, error.what());
  } catch (const matcha::NumericalError& error) {  // the run went non-finite: internal, as far as checks can tell
    return matcha::app::reportFailure(kExitInternal, error.what());
  } catch (const matcha::Error& error) {
    return matcha::app::reportFailure(kExitIo, error.what());
  } catch (const std::exception& error) {
    return matcha::app::reportFailure(kExitInternal, std::string("unexpected: ") + error.what());
  }
}
