// SPDX-License-Identifier: MIT
#include "cosmological_ics.hpp"

#include <cmath>
#include <numbers>
#include <sstream>
#include <string>

#include "comoving_run.hpp"
#include "matcha/core/errors.hpp"
#include "memory_check.hpp"
#include "options.hpp"

namespace matcha::app {

void addCosmologicalIcOptions(CLI::App& command, CosmologicalIcOptions& options, CLI::Option* needs) {
  cosmology::CosmologicalIcParams& ic = options.ic;
  std::vector<CLI::Option*> added;
  added.push_back(command.add_option("--grid", ic.grid, "n: n^3 bodies on an n^3 grid (prime factors 2, 3, 5, 7 only)")
                      ->capture_default_str());
  added.push_back(command.add_option("--z-start", ic.startRedshift, "redshift of the initial conditions, > 0")
                      ->capture_default_str());
  added.push_back(
      command.add_option("--lpt", ic.lptOrder, "1: Zel'dovich; 2: second-order LPT")->capture_default_str());
  const std::size_t first = command.get_options().size();
  addLinearPowerOptions(command, options.power, "--power",
                        "linear P(k) at z = 0: eh (Eisenstein & Hu 1998 with wiggles), eh-nowiggle, or a two-column "
                        "file k [h/Mpc] P [(Mpc/h)^3] (CAMB, CLASS)")
      ->capture_default_str();
  // --power and its --sigma8, --ns, --omega-b: the options registered just now.
  const std::vector<CLI::Option*> all = command.get_options();
  added.insert(added.end(), all.begin() + static_cast<std::ptrdiff_t>(first), all.end());
  added.push_back(
      command.add_option("--omega-m", ic.cosmology.omegaMatter, "Omega_m today, > 0")->capture_default_str());
  added.push_back(
      command.add_option("--omega-lambda", ic.cosmology.omegaLambda, "Omega_Lambda today")->capture_default_str());
  added.push_back(
      command.add_option("--h", ic.cosmology.hubbleParam, "h = H0 / (100 km/s/Mpc), > 0")->capture_default_str());
  added.push_back(command.add_flag("--fixed-amplitude", ic.fixedAmplitude,
                                   "every mode's amplitude exactly sqrt(P) (Angulo & Pontzen 2016)"));
  added.push_back(
      command.add_flag("--invert-phases", ic.invertPhases, "delta -> -delta (the partner of a paired run)"));
  if (needs != nullptr) {
    for (CLI::Option* option : added) option->needs(needs);
  }
}

void checkCosmologicalIcOptions(const CLI::App& command, const CosmologicalIcOptions& options, bool wholeOnThisHost) {
  const cosmology::CosmologicalIcParams& params = options.ic;
  params.validate();
  checkLinearPowerOptions(command, options.power, "--power");
  const std::uint64_t numBodies = static_cast<std::uint64_t>(params.grid) * params.grid * params.grid;
  requireBodiesFit(numBodies, false);
  if (!wholeOnThisHost) return;
  const std::uint64_t needed = cosmology::cosmologicalIcBytes(params);
  const std::uint64_t available = availableHostBytes();
  if (available != 0 && needed > available) {
    throw InputError("initial conditions on a " + std::to_string(params.grid) + "^3 grid need ~" + formatBytes(needed) +
                     " of host memory (" + formatBytes(available) + " available); choose a smaller --grid");
  }
}

cosmology::LinearPowerSpectrum cosmologicalIcSpectrum(const CLI::App& command, const CosmologicalIcOptions& options,
                                                      std::ostream& warnings) {
  const cosmology::CosmologicalIcParams& params = options.ic;
  cosmology::LinearPowerSpectrum spectrum =
      makeLinearPowerSpectrum(command, options.power, "--power", params.cosmology);
  const double fundamental = 2.0 * std::numbers::pi / params.boxSize;
  const double highest = std::sqrt(3.0) * fundamental * (params.grid / 2);
  if (spectrum.minWavenumber() > fundamental || spectrum.maxWavenumber() < highest) {
    warnings << "warning: the power table covers k = " << spectrum.minWavenumber() << " to " << spectrum.maxWavenumber()
             << " h/Mpc, the grid's modes " << fundamental << " to " << highest
             << " h/Mpc; modes outside the table get no power\n";
  }
  return spectrum;
}

std::string describeCosmologicalIcs(const CosmologicalIcOptions& options,
                                    const cosmology::LinearPowerSpectrum& spectrum) {
  const cosmology::CosmologicalIcParams& params = options.ic;
  std::ostringstream line;
  line << "generating " << params.grid << "^3 bodies in a box of " << params.boxSize
       << " Mpc/h at z = " << params.startRedshift << " (" << (params.lptOrder == 2 ? "2LPT" : "Zel'dovich")
       << ", sigma8 " << spectrum.sigma8() << ", seed " << params.seed << ")";
  return line.str();
}

cosmology::CosmologicalIcs makeCosmologicalIcs(const CosmologicalIcOptions& options,
                                               const cosmology::LinearPowerSpectrum& spectrum, std::ostream& info) {
  const cosmology::CosmologicalIcParams& params = options.ic;
  info << describeCosmologicalIcs(options, spectrum) << "..." << std::endl;
  return cosmology::makeCosmologicalIcs(params, [&spectrum](double k) { return spectrum.power(k); });
}

io::CosmologyHeader cosmologicalIcHeader(const CosmologicalIcOptions& options) {
  const cosmology::CosmologicalIcParams& params = options.ic;
  return io::CosmologyHeader{params.startRedshift, params.cosmology.omegaMatter, params.cosmology.omegaLambda,
                             params.cosmology.hubbleParam};
}

io::SnapshotMetadata cosmologicalIcMetadata(const CLI::App& command, const io::CosmologyHeader& cosmology,
                                            double boxSize) {
  io::SnapshotMetadata metadata;
  metadata.time = 1.0 / (1.0 + cosmology.redshift);
  metadata.boxSize = boxSize;
  metadata.cosmology = cosmology;
  metadata.units = gadgetCosmologicalUnits();  // the units comoving runs assume when a file has none
  metadata.parameters = usedParameterList(command);
  return metadata;
}

}  // namespace matcha::app
