// SPDX-License-Identifier: MIT
// The options and the making of cosmological initial conditions (cosmology/initial_conditions.hpp), shared by
// `matcha ic cosmo` (which writes them to a file) and `matcha run --cosmology` (which runs them, its first snapshot
// being them): one registration and one construction, so the same options give the same bodies bit for bit in both.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <ostream>
#include <string>

#include "linear_power_options.hpp"
#include "matcha/cosmology/initial_conditions.hpp"
#include "matcha/io/snapshot.hpp"

namespace matcha::app {

/// What the options hold; defaults are the library's (CosmologicalIcParams, CosmologyParams, LinearPowerParams).
/// The box and the seed are the command's own options (ic cosmo's --box and --seed, run's), set by the caller.
struct CosmologicalIcOptions {
  cosmology::CosmologicalIcParams ic;
  LinearPowerOptions power;  ///< --power, --sigma8, --ns, --omega-b (shared with `analyze power --linear`)
};

/// Registers --grid, --z-start, --lpt, --power (with --sigma8, --ns, --omega-b), --omega-m, --omega-lambda, --h,
/// --fixed-amplitude and --invert-phases on `command`, bound to `options`, their defaults shown. With `needs` (run's
/// --cosmology), each of them needs that option: given without it, the command line is refused (CLI11, one line).
void addCosmologicalIcOptions(CLI::App& command, CosmologicalIcOptions& options, CLI::Option* needs = nullptr);

/// Checks, before any work, what the options say: the parameters (CosmologicalIcParams::validate), the spectrum's
/// options that need no file (checkLinearPowerOptions), and, with `wholeOnThisHost`, the host memory the making needs
/// (cosmologicalIcBytes; a run on several ranks makes its start in shares and checks their memory itself). Throws
/// InputError, one line.
void checkCosmologicalIcOptions(const CLI::App& command, const CosmologicalIcOptions& options,
                                bool wholeOnThisHost = true);

/// The linear spectrum the options name (a table read, or sigma_8 integrated): before any body is made, so that a
/// bad table costs nothing. Warns on `warnings` when a table does not cover the grid's modes. Throws InputError.
cosmology::LinearPowerSpectrum cosmologicalIcSpectrum(const CLI::App& command, const CosmologicalIcOptions& options,
                                                      std::ostream& warnings);

/// "generating n^3 bodies in a box of L Mpc/h at z = z (2LPT, sigma8 s, seed k)": what the making says first.
std::string describeCosmologicalIcs(const CosmologicalIcOptions& options,
                                    const cosmology::LinearPowerSpectrum& spectrum);

/// Makes the bodies from `spectrum` (cosmology::makeCosmologicalIcs), saying so on `info` first (it can take
/// minutes). Velocities are GADGET's stored u = v / sqrt(a).
cosmology::CosmologicalIcs makeCosmologicalIcs(const CosmologicalIcOptions& options,
                                               const cosmology::LinearPowerSpectrum& spectrum, std::ostream& info);

/// The cosmology header of the initial conditions: their redshift, Omega_m, Omega_Lambda and h.
io::CosmologyHeader cosmologicalIcHeader(const CosmologicalIcOptions& options);

/// What a file of cosmological initial conditions says of them, in GADGET's units: Time = a of `cosmology`'s
/// redshift, BoxSize, the cosmology header, /Units, and the parameters `command` used (`ic cosmo`, `ic pancake`).
io::SnapshotMetadata cosmologicalIcMetadata(const CLI::App& command, const io::CosmologyHeader& cosmology,
                                            double boxSize);

}  // namespace matcha::app
