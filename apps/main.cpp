// SPDX-License-Identifier: MIT
// `matcha`: the command line. The only place that turns an error into a message and an exit code (STYLE.md habit 9).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "commands.hpp"
#include "matcha/core/errors.hpp"
#include "options.hpp"

namespace {

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
  for (std::size_t k = insertAt; k < args.size(); ++k) {
    if (args[k] == "--config") {
      if (k + 1 >= args.size()) throw matcha::InputError("--config needs a file name");
      configPath = args[k + 1];
    } else if (args[k].rfind("--config=", 0) == 0) {
      configPath = args[k].substr(9);
    }
  }
  if (configPath.empty() || command == &app) return args;
  std::vector<std::string> expanded(args.begin(), args.begin() + static_cast<std::ptrdiff_t>(insertAt));
  const std::vector<std::string> fromFile = matcha::app::configFileArguments(configPath, *command);
  expanded.insert(expanded.end(), fromFile.begin(), fromFile.end());
  expanded.insert(expanded.end(), args.begin() + static_cast<std::ptrdiff_t>(insertAt), args.end());
  return expanded;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"matcha: a Barnes-Hut treecode with a GPU near-field (N-body units: G = 1)"};
  app.require_subcommand(1);
  // One options struct per subcommand: their defaults differ (e.g. --out is a folder for run, a file for ic).
  matcha::app::Options runOptions, compareOptions, icOptions;
  const auto runCommand = matcha::app::addRunCommand(app, runOptions);
  const auto compareCommand = matcha::app::addCompareCommand(app, compareOptions);
  const auto icCommand = matcha::app::addIcCommand(app, icOptions);

  try {
    std::vector<std::string> args(argv + 1, argv + argc);
    args = expandConfigFile(args, app);
    std::reverse(args.begin(), args.end());  // CLI11 parses a vector from its back
    app.parse(args);
    if (app.got_subcommand("run")) return runCommand();
    if (app.got_subcommand("compare")) return compareCommand();
    return icCommand();
  } catch (const CLI::CallForHelp& help) {
    return app.exit(help);
  } catch (const CLI::CallForAllHelp& help) {
    return app.exit(help);
  } catch (const CLI::ParseError& error) {
    std::cerr << "matcha: error: " << error.what() << " (see matcha --help)\n";
    return error.get_exit_code() != 0 ? error.get_exit_code() : 2;
  } catch (const matcha::InputError& error) {
    std::cerr << "matcha: error: " << error.what() << "\n";
    return 2;
  } catch (const matcha::NumericalError& error) {  // the run went non-finite: internal, as far as checks can tell
    std::cerr << "matcha: error: " << error.what() << "\n";
    return 3;
  } catch (const matcha::Error& error) {
    std::cerr << "matcha: error: " << error.what() << "\n";
    return 1;
  } catch (const std::exception& error) {
    std::cerr << "matcha: unexpected error: " << error.what() << "\n";
    return 3;
  }
}
