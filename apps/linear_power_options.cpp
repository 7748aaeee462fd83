// SPDX-License-Identifier: MIT
#include "linear_power_options.hpp"

#include <cmath>
#include <filesystem>
#include <optional>
#include <sstream>

#include "matcha/core/errors.hpp"

namespace matcha::app {
namespace {

bool isTable(const std::string& source) { return source != "eh" && source != "eh-nowiggle"; }

std::string shortNumber(double value) {
  std::ostringstream text;
  text.precision(10);
  text << value;
  return text.str();
}

}  // namespace

CLI::Option* addLinearPowerOptions(CLI::App& command, LinearPowerOptions& options, const std::string& sourceOption,
                                   const std::string& sourceHelp) {
  CLI::Option* source = command.add_option(sourceOption, options.source, sourceHelp);
  command.add_option("--sigma8", options.params.sigma8, "sigma_8 at z = 0, > 0 (a file keeps its own unless given)")
      ->capture_default_str();
  command.add_option("--ns", options.params.spectralIndex, "spectral index n_s (EH98 only)")->capture_default_str();
  command
      .add_option("--omega-b", options.params.transfer.omegaBaryon, "Omega_b today (EH98 only), 0 < Omega_b < Omega_m")
      ->capture_default_str();
  return source;
}

void checkLinearPowerOptions(const CLI::App& command, const LinearPowerOptions& options,
                             const std::string& sourceOption) {
  if (!(std::isfinite(options.params.sigma8) && options.params.sigma8 > 0)) {
    throw InputError("--sigma8 must be a finite number > 0 (got " + shortNumber(options.params.sigma8) + ")");
  }
  if (!isTable(options.source)) return;
  for (const char* name : {"--ns", "--omega-b"}) {
    if (command.count(name) > 0) {
      throw InputError(std::string(name) + " applies to the EH98 spectra only, not to a table (" + sourceOption + " " +
                       options.source + ")");
    }
  }
}

cosmology::LinearPowerSpectrum makeLinearPowerSpectrum(const CLI::App& command, const LinearPowerOptions& options,
                                                       const std::string& sourceOption,
                                                       const cosmology::CosmologyParams& cosmology) {
  checkLinearPowerOptions(command, options, sourceOption);
  if (isTable(options.source)) {
    std::error_code ec;
    // A mistyped keyword would otherwise read as a missing file; say what was expected.
    if (!std::filesystem::exists(options.source, ec)) {
      throw InputError(sourceOption + " " + options.source +
                       ": neither eh, eh-nowiggle nor an existing table file (two columns k [h/Mpc], P [(Mpc/h)^3])");
    }
    std::optional<double> sigma8;
    if (command.count("--sigma8") > 0) sigma8 = options.params.sigma8;
    return cosmology::LinearPowerSpectrum::fromTable(options.source, sigma8);
  }
  cosmology::LinearPowerParams params = options.params;
  params.form = options.source == "eh" ? cosmology::TransferForm::withWiggles : cosmology::TransferForm::noWiggle;
  params.transfer.omegaMatter = cosmology.omegaMatter;
  params.transfer.hubbleParam = cosmology.hubbleParam;
  try {
    return cosmology::LinearPowerSpectrum::eisensteinHu(params);
  } catch (const NumericalError& error) {
    // Parameters far outside any cosmology (h 2000, n_s 2000, Omega_b 1e-300) make the fit's spectrum overflow.
    throw InputError(sourceOption + " " + options.source + ": no finite spectrum for Omega_m " +
                     shortNumber(cosmology.omegaMatter) + ", Omega_b " + shortNumber(params.transfer.omegaBaryon) +
                     ", h " + shortNumber(cosmology.hubbleParam) + ", n_s " + shortNumber(params.spectralIndex) + " (" +
                     error.what() + ")");
  }
}

std::string describeLinearPower(const CLI::App& command, const LinearPowerOptions& options,
                                const cosmology::LinearPowerSpectrum& spectrum) {
  if (isTable(options.source)) {
    return "table " + options.source + ", sigma8 " + shortNumber(spectrum.sigma8()) +
           (command.count("--sigma8") > 0 ? " (--sigma8)" : " (the table's own)");
  }
  return options.source +
         (options.source == "eh" ? " (Eisenstein & Hu 1998, with wiggles)" : " (Eisenstein & Hu 1998, no wiggles)") +
         ", sigma8 " + shortNumber(options.params.sigma8) + ", n_s " + shortNumber(options.params.spectralIndex) +
         ", Omega_b " + shortNumber(options.params.transfer.omegaBaryon);
}

}  // namespace matcha::app
