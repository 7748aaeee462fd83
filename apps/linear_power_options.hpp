// SPDX-License-Identifier: MIT
// The options that name a linear power spectrum at z = 0, shared by `ic cosmo` (--power) and `analyze power`
// (--linear): one registration and one construction, so the same options (and the same defaults) give the same
// spectrum in both, and a spectrum measured from initial conditions is compared with the one they were drawn from.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "matcha/cosmology/background.hpp"
#include "matcha/cosmology/linear_power.hpp"

namespace matcha::app {

/// What the options hold; defaults are the library's (LinearPowerParams: sigma8, n_s, Omega_b).
struct LinearPowerOptions {
  std::string source = "eh";            ///< eh, eh-nowiggle, or the path of a two-column table k P(k)
  cosmology::LinearPowerParams params;  ///< sigma8, n_s, Omega_b; form, Omega_m and h are set from source and cosmology
};

/// Registers `sourceOption` (e.g. "--power"; a keyword or a file, with `sourceHelp`) and --sigma8, --ns, --omega-b on
/// `command`, their defaults shown. Returns the source option.
CLI::Option* addLinearPowerOptions(CLI::App& command, LinearPowerOptions& options, const std::string& sourceOption,
                                   const std::string& sourceHelp);

/// Checks what needs no file and no cosmology, before any work: sigma8 finite and > 0, and no --ns or --omega-b with
/// a table (they apply to EH98 only). Throws InputError (one line, naming the option).
void checkLinearPowerOptions(const CLI::App& command, const LinearPowerOptions& options,
                             const std::string& sourceOption);

/// The z = 0 spectrum the options name: EH98 with `cosmology`'s Omega_m and h, or the table (rescaled to --sigma8
/// only when --sigma8 was given). Runs checkLinearPowerOptions first. Throws InputError (one line): a source that is
/// neither keyword nor an existing file, a table that cannot be read, bad EH98 parameters (Omega_b >= Omega_m).
/// Reads the table, and for EH98 integrates sigma(8 Mpc/h) (~25 ms).
cosmology::LinearPowerSpectrum makeLinearPowerSpectrum(const CLI::App& command, const LinearPowerOptions& options,
                                                       const std::string& sourceOption,
                                                       const cosmology::CosmologyParams& cosmology);

/// A one-line description of the spectrum the options name, for file headers: e.g. "eh (Eisenstein & Hu 1998, with
/// wiggles), sigma8 0.8102, n_s 0.9665, Omega_b 0.049" or "table plin.txt, sigma8 0.81 (the table's own)".
std::string describeLinearPower(const CLI::App& command, const LinearPowerOptions& options,
                                const cosmology::LinearPowerSpectrum& spectrum);

}  // namespace matcha::app
