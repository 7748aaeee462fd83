// SPDX-License-Identifier: MIT
// The subcommands of `matcha`. Each registers its options on a CLI11 subcommand and returns what to run.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

#include "options.hpp"

namespace matcha::app {

/// Registers the subcommand on `parent`; the returned function runs it after parsing and returns the exit code.
std::function<int()> addRunCommand(CLI::App& parent, Options& options);
std::function<int()> addCompareCommand(CLI::App& parent, Options& options);
std::function<int()> addIcCommand(CLI::App& parent, Options& options);
/// `tune`: the fastest tree setting for the bodies at an error target (apps/tune_command.cpp).
std::function<int()> addTuneCommand(CLI::App& parent, Options& options);
/// `render` keeps its own options (none are shared with the other subcommands).
std::function<int()> addRenderCommand(CLI::App& parent);
/// `analyze` and its measurements (`analyze power`, `analyze pancake`), with their own options.
std::function<int()> addAnalyzeCommand(CLI::App& parent);

}  // namespace matcha::app
