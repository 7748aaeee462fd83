// SPDX-License-Identifier: MIT
// `matcha analyze power SNAPSHOT`: the power spectrum of a periodic snapshot's mass density
// (cosmology/power_spectrum.hpp) as a text file: a commented header, then one line per bin, `k P(k) modes shot_noise`,
// and with --linear a fifth column, the linear spectrum at the snapshot's time (cosmology/linear_power.hpp scaled by
// Background's growth factor), so that a measurement is compared with linear theory without any outside file.
// `matcha analyze pancake SNAPSHOT`: a snapshot of a run from `ic pancake` against the exact Zel'dovich solution at its
// scale factor (cosmology/zeldovich_pancake.hpp), or with --unperturbed against the grid at rest: a table of the
// largest and 99th-percentile errors, or JSON.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "commands.hpp"
#include "linear_power_options.hpp"
#include "matcha/core/errors.hpp"
#include "matcha/core/memory_estimate.hpp"
#include "matcha/core/stopwatch.hpp"
#include "matcha/cosmology/background.hpp"
#include "matcha/cosmology/linear_power.hpp"
#include "matcha/cosmology/power_spectrum.hpp"
#include "matcha/cosmology/zeldovich_pancake.hpp"
#include "matcha/ic/periodic_boxes.hpp"
#include "matcha/io/run_folder.hpp"
#include "matcha/io/snapshot.hpp"
#include "memory_check.hpp"
#include "options.hpp"
#include "output_file.hpp"

namespace matcha::app {
namespace {

namespace fs = std::filesystem;

/// The first line of every file `analyze power` writes: --overwrite replaces only files that start with it.
constexpr const char* kPowerFileTitle = "# matcha analyze power:";

struct PowerOptions {
  std::string snapshot;
  std::optional<int> grid;  ///< --grid; default: cosmology::defaultPowerSpectrumGrid(N)
  std::string assignment = mesh::toString(cosmology::PowerSpectrumParams{}.assignment);
  bool interlace = false;
  bool subtractShotNoise = false;
  double binWidth = cosmology::PowerSpectrumParams{}.binWidth;
  std::optional<int> logBins;  ///< --log-bins B: logarithmic bins, B per decade
  std::optional<double> box;   ///< --box; default: the snapshot's BoxSize
  std::optional<std::string> outPath;
  bool overwrite = false;
  LinearPowerOptions linear;  ///< --linear (no default: without it no fifth column), --sigma8, --ns, --omega-b
  // A snapshot without a cosmology (Omega0 = 0) gets one only from all of these: matcha does not guess a cosmology.
  std::optional<double> omegaMatter, omegaLambda, hubbleParam, redshift, scaleFactor;
};

/// The snapshot's cosmology and time, from its /Header or from the options, and the linear growth there.
struct CosmologyAtTime {
  cosmology::CosmologyParams params;
  double scaleFactor = 0;
  double growthRatio = 0;  ///< D1(a) / D1(1), Background::growthFactorRatio
  bool fromOptions = false;
};

/// The linear theory of the fifth column.
struct LinearColumn {
  std::string description;    ///< describeLinearPower
  std::vector<double> power;  ///< P_lin(k) D1(a)^2 / D1(1)^2 at each bin's mean k
};

std::string number(double value, int digits = 6) {
  std::ostringstream text;
  text.precision(digits);
  text << value;
  return text.str();
}

/// An earlier power spectrum: what --overwrite may replace.
bool isPowerSpectrumFile(const fs::path& path) {
  std::ifstream file(path);
  std::string firstLine;
  std::getline(file, firstLine);
  return firstLine.rfind(kPowerFileTitle, 0) == 0;
}

/// The file: `# key = value` header lines, then the column names and one line per bin.
std::string powerFileText(const PowerOptions& options, const io::SnapshotInfo& info,
                          const cosmology::PowerSpectrumParams& params, const cosmology::PowerSpectrum& spectrum,
                          const std::optional<CosmologyAtTime>& cosmo, const std::optional<LinearColumn>& linear) {
  std::ostringstream text;
  text << kPowerFileTitle << " P(k) of the mass density contrast, the mass-assignment window divided out\n";
  text << "# snapshot = " << options.snapshot << "\n";
  text << "# matcha = " << versionText() << "\n";
  text << "# time = " << number(info.time, 17) << "  (/Header Time: the scale factor a in a comoving run)\n";
  text << "# bodies = " << spectrum.numBodies << "\n";
  text << "# box = " << number(params.boxSize, 17) << (options.box ? "  (--box)" : "  (/Header BoxSize)") << "\n";
  text << "# grid = " << params.grid << (options.grid ? "" : "  (default: FFT-friendly, >= 2 N^(1/3))") << "\n";
  text << "# assignment = " << mesh::toString(params.assignment) << "\n";
  text << "# interlace = " << (params.interlace ? "yes" : "no") << "\n";
  text << "# shot_noise = " << number(spectrum.shotNoise, 10) << "  (L^3 sum m^2 / (sum m)^2)\n";
  text << "# shot_noise_subtracted = " << (spectrum.shotNoiseSubtracted ? "yes" : "no") << "\n";
  text << "# k_fundamental = " << number(spectrum.fundamental, 10) << "  (2 pi / L)\n";
  text << "# k_nyquist = " << number(spectrum.nyquist, 10) << "  (pi grid / L)\n";
  if (params.binning == cosmology::PowerBinning::linear) {
    text << "# bins = linear, width " << number(params.binWidth) << " k_fundamental, from k_fundamental to k_nyquist\n";
  } else {
    text << "# bins = logarithmic, " << params.binsPerDecade << " per decade, from k_fundamental to k_nyquist\n";
  }
  text << "# units: k in inverse length units of the snapshot (h/Mpc for positions in Mpc/h); P(k) and shot_noise in "
          "length^3\n";
  text << "# P(k) = L^3 <|delta_k|^2> / W(k)^2 over the bin's independent modes (k and -k count once), "
          "delta_k = (1/grid^3) sum_x delta(x) exp(-i k.x); k is the mean |k| of those modes\n";
  if (cosmo) {
    const char* given = cosmo->fromOptions ? "  (--omega-m, --omega-lambda, --h)" : "  (/Header)";
    text << "# scale_factor = " << number(cosmo->scaleFactor, 17)
         << (cosmo->fromOptions ? "  (--scale-factor or --redshift)" : "  (/Header Time)") << "\n";
    text << "# redshift = " << number(1.0 / cosmo->scaleFactor - 1.0, 17) << "  (1/a - 1)\n";
    text << "# omega_m = " << number(cosmo->params.omegaMatter, 17) << given << "\n";
    text << "# omega_lambda = " << number(cosmo->params.omegaLambda, 17) << given << "\n";
    text << "# hubble_param = " << number(cosmo->params.hubbleParam, 17) << given << "\n";
    text << "# growth_factor_ratio = " << number(cosmo->growthRatio, 17)
         << "  (D1(a)/D1(1), linear growing mode of Lambda-CDM with curvature, radiation neglected)\n";
  }
  if (linear) {
    text << "# linear = " << linear->description << "\n";
    text << "# linear_column = P_lin(k) D1(a)^2/D1(1)^2: the linear spectrum at z = 0 scaled to the snapshot's a by "
            "growth_factor_ratio^2, at the bin's mean k (0 outside a table's k range)\n";
  }
  text << (linear ? "# k  P(k)  modes  shot_noise  P_lin(k)\n" : "# k  P(k)  modes  shot_noise\n");
  char line[200];
  for (std::size_t b = 0; b < spectrum.bins.size(); ++b) {
    const cosmology::PowerBin& bin = spectrum.bins[b];
    std::snprintf(line, sizeof line, "%.9e %.9e %llu %.9e", bin.k, bin.power,
                  static_cast<unsigned long long>(bin.numModes), spectrum.shotNoise);
    text << line;
    if (linear) {
      std::snprintf(line, sizeof line, " %.9e", linear->power[b]);
      text << line;
    }
    text << "\n";
  }
  return text.str();
}

constexpr const char* kCosmologyOptions = "--omega-m, --omega-lambda, --h and --redshift (or --scale-factor)";

/// Checks, before the snapshot is read, that the cosmology options come as a whole and the linear-theory options only
/// with --linear. Returns whether the cosmology options were given.
bool checkCosmologyOptions(const CLI::App& command, const PowerOptions& options) {
  const bool any =
      options.omegaMatter || options.omegaLambda || options.hubbleParam || options.redshift || options.scaleFactor;
  if (any) {
    for (const auto& [given, name] : {std::pair{options.omegaMatter.has_value(), "--omega-m"},
                                      std::pair{options.omegaLambda.has_value(), "--omega-lambda"},
                                      std::pair{options.hubbleParam.has_value(), "--h"},
                                      std::pair{options.redshift || options.scaleFactor, "--redshift"}}) {
      if (!given) throw InputError(std::string(kCosmologyOptions) + " come together (" + name + " is missing)");
    }
  }
  if (command.count("--linear") > 0) {
    checkLinearPowerOptions(command, options.linear, "--linear");
  } else {
    for (const char* name : {"--sigma8", "--ns", "--omega-b"}) {
      if (command.count(name) > 0) throw InputError(std::string(name) + " applies only with --linear");
    }
  }
  return any;
}

/// The cosmology and scale factor of the file's header lines: the snapshot's (/Header Omega0 > 0: Time is a), or the
/// options' for a snapshot without one; none when neither (then --linear is refused). Throws InputError (one line).
std::optional<CosmologyAtTime> resolveCosmology(const PowerOptions& options, bool fromOptions,
                                                const io::SnapshotInfo& info, const fs::path& snapshotPath,
                                                bool wantsLinear) {
  CosmologyAtTime cosmo;
  cosmo.fromOptions = fromOptions;
  if (info.cosmology) {
    // Two sources of the same numbers could disagree; the snapshot's are those its bodies evolved under.
    if (fromOptions) {
      throw InputError("snapshot " + snapshotPath.string() +
                       " records its cosmology (/Header Omega0 = " + number(info.cosmology->omega0) + "); " +
                       kCosmologyOptions + " are only for snapshots without one");
    }
    cosmo.params.omegaMatter = info.cosmology->omega0;
    cosmo.params.omegaLambda = info.cosmology->omegaLambda;
    cosmo.params.hubbleParam = info.cosmology->hubbleParam;
    cosmo.scaleFactor = info.time;
    if (!(std::isfinite(cosmo.scaleFactor) && cosmo.scaleFactor > 0)) {
      throw InputError("snapshot " + snapshotPath.string() +
                       " records a cosmology but its /Header Time, the scale factor, is " + number(info.time) +
                       " (need a finite a > 0)");
    }
  } else if (fromOptions) {
    cosmo.params.omegaMatter = *options.omegaMatter;
    cosmo.params.omegaLambda = *options.omegaLambda;
    cosmo.params.hubbleParam = *options.hubbleParam;
    cosmo.scaleFactor =
        options.scaleFactor ? *options.scaleFactor : cosmology::scaleFactorFromRedshift(*options.redshift);
    if (!(std::isfinite(cosmo.scaleFactor) && cosmo.scaleFactor > 0)) {
      throw InputError("--scale-factor must be a finite number > 0 (got " + number(cosmo.scaleFactor) + ")");
    }
  } else {
    if (wantsLinear) {
      throw InputError("snapshot " + snapshotPath.string() +
                       " records no cosmology (/Header Omega0 = 0); --linear needs " + kCosmologyOptions);
    }
    return std::nullopt;
  }
  // The background serves a in (0, maxScaleFactor]: a snapshot past today (a > 1) needs the range widened.
  cosmo.params.maxScaleFactor = std::max(1.0, cosmo.scaleFactor);
  // H0 only sets the unit of time-like results; D1(a)/D1(1) does not depend on it.
  const cosmology::Background background(cosmo.params, cosmology::hubbleTodayPerSecond(cosmo.params.hubbleParam));
  cosmo.growthRatio = background.growthFactorRatio(cosmo.scaleFactor);
  return cosmo;
}

int analyzePower(const CLI::App& command, const PowerOptions& options) {
  // Every option is checked before the snapshot is read.
  cosmology::PowerSpectrumParams params;
  params.assignment = options.assignment == "cic" ? mesh::MassAssignment::cic : mesh::MassAssignment::tsc;
  params.interlace = options.interlace;
  params.subtractShotNoise = options.subtractShotNoise;
  params.binWidth = options.binWidth;
  if (options.logBins) {
    params.binning = cosmology::PowerBinning::logarithmic;
    params.binsPerDecade = *options.logBins;
  }
  if (options.grid) params.grid = *options.grid;
  if (options.box) {
    if (!(std::isfinite(*options.box) && *options.box > 0)) {
      throw InputError("--box must be a finite box side > 0 (got " + number(*options.box) + ")");
    }
    params.boxSize = *options.box;
  }
  params.validate();  // the grid (when given), the bins and --box; the snapshot's own box below
  const bool cosmologyFromOptions = checkCosmologyOptions(command, options);
  const bool wantsLinear = command.count("--linear") > 0;

  const fs::path snapshotPath = options.snapshot;
  const fs::path out =
      options.outPath ? fs::path(*options.outPath) : fs::path(snapshotPath).replace_extension(".power.txt");
  std::error_code ec;
  if (fs::status(snapshotPath, ec).type() == fs::file_type::not_found) {
    throw InputError("snapshot " + snapshotPath.string() + ": no such file");
  }
  checkOutputFile(out, snapshotPath, options.overwrite, isPowerSpectrumFile,
                  "a power spectrum of matcha analyze power");
  const io::SnapshotInfo info = asBadInput([&] { return io::inspectSnapshot(snapshotPath); });
  if (!options.box) params.boxSize = info.boxSize;
  if (!(params.boxSize > 0)) {
    throw InputError("snapshot " + snapshotPath.string() +
                     " records no periodic box (no BoxSize > 0 with MatchaPeriodic 1); give its side with --box L");
  }
  if (!options.grid) params.grid = cosmology::defaultPowerSpectrumGrid(info.numBodies);
  params.validate();
  const std::optional<CosmologyAtTime> cosmo =
      resolveCosmology(options, cosmologyFromOptions, info, snapshotPath, wantsLinear);
  // Built (a table read, or sigma_8 integrated) before the bodies are read, so a bad table costs nothing.
  std::optional<cosmology::LinearPowerSpectrum> linearSpectrum;
  if (wantsLinear) linearSpectrum = makeLinearPowerSpectrum(command, options.linear, "--linear", cosmo->params);
  requireBodiesFit(info.numBodies, false);
  const std::uint64_t needed =
      info.numBodies * kBytesPerBody + cosmology::powerSpectrumMemoryBytes(params, info.numBodies);
  const std::uint64_t available = availableHostBytes();
  if (available != 0 && needed > available) {
    throw InputError("the power spectrum of " + std::to_string(info.numBodies) + " bodies on a " +
                     std::to_string(params.grid) + "^3 grid" + (params.interlace ? ", interlaced," : "") + " needs ~" +
                     formatBytes(needed) + " of host memory (" + formatBytes(available) +
                     " available); choose a smaller --grid");
  }
  if (out.has_parent_path()) io::ensureWritableDirectory(out.parent_path());

  std::cout << "reading snapshot " << snapshotPath.string() << " (" << info.numBodies << " bodies, box "
            << number(params.boxSize) << ")..." << std::endl;
  Stopwatch clock;
  const io::Snapshot snapshot = asBadInput([&] { return io::readSnapshot(snapshotPath); });
  const double readSeconds = clock.seconds();
  const SourceView bodies = snapshot.particles.sources();
  std::size_t outside = 0;
  for (std::size_t i = 0; i < bodies.count; ++i) {
    for (const double coordinate : {bodies.x[i], bodies.y[i], bodies.z[i]}) {
      if (!(coordinate >= 0.0 && coordinate < params.boxSize)) {
        ++outside;
        break;
      }
    }
  }
  if (outside > 0) {
    std::cout << "note: " << outside << " bodies lie outside [0, " << number(params.boxSize)
              << ")^3; they are folded into the box periodically" << std::endl;
  }
  std::cout << "power spectrum: grid " << params.grid << "^3, " << mesh::toString(params.assignment)
            << (params.interlace ? ", interlaced" : "") << "..." << std::endl;
  clock.restart();
  const cosmology::PowerSpectrum spectrum = cosmology::measurePowerSpectrum(bodies, params);
  const double measureSeconds = clock.seconds();
  std::optional<LinearColumn> linear;
  if (linearSpectrum) {
    linear.emplace();
    linear->description = describeLinearPower(command, options.linear, *linearSpectrum);
    const double growth2 = cosmo->growthRatio * cosmo->growthRatio;
    for (const cosmology::PowerBin& bin : spectrum.bins)
      linear->power.push_back(linearSpectrum->power(bin.k) * growth2);
  }
  io::writeTextFile(out, powerFileText(options, info, params, spectrum, cosmo, linear));
  char timings[96];
  std::snprintf(timings, sizeof timings, "read %.2f s, measure %.2f s", readSeconds, measureSeconds);
  std::cout << "wrote " << out.string() << ": " << spectrum.bins.size() << " bins, k = " << number(spectrum.fundamental)
            << " to " << number(spectrum.nyquist) << ", shot noise " << number(spectrum.shotNoise)
            << (spectrum.shotNoiseSubtracted ? " (subtracted)" : "")
            << (cosmo ? "; a = " + number(cosmo->scaleFactor) + ", D1(a)/D1(1) = " + number(cosmo->growthRatio) : "")
            << (linear ? ", linear theory " + options.linear.source : "") << "; " << timings << std::endl;
  return 0;
}

/// The options of `analyze pancake`.
struct PancakeOptions {
  std::string snapshot;
  std::optional<double> causticRedshift;  ///< --z-caustic: required for the pancake
  bool unperturbed = false;               ///< --unperturbed: the constant comoving volume test instead
  bool json = false;
};

/// The pancake's (or the grid's) parameters of a snapshot: box from BoxSize, n from the body count, z_c from the
/// options. Throws InputError (one line) when the file is not a periodic Einstein-de Sitter box of n^3 bodies.
cosmology::ZeldovichPancakeParams pancakeParams(const PancakeOptions& options, const io::SnapshotInfo& info,
                                                const fs::path& snapshotPath) {
  const std::string name = "snapshot " + snapshotPath.string();
  if (!(info.boxSize > 0)) throw InputError(name + " records no periodic box (no BoxSize > 0 with MatchaPeriodic 1)");
  if (!info.cosmology) {
    throw InputError(name + " records no cosmology (/Header Omega0 = 0), so its Time is no scale factor");
  }
  // The solution is Einstein-de Sitter's: another background grows the wave at another rate.
  if (std::abs(info.cosmology->omega0 - 1.0) > 1e-9 || std::abs(info.cosmology->omegaLambda) > 1e-9) {
    throw InputError(name + " records Omega0 = " + number(info.cosmology->omega0) +
                     ", OmegaLambda = " + number(info.cosmology->omegaLambda) +
                     "; the pancake's solution is for Omega_m = 1, Omega_Lambda = 0");
  }
  const std::size_t side = ic::exactCubeRoot(info.numBodies);
  if (side == 0 || side > static_cast<std::size_t>(cosmology::kMaxPancakeGrid)) {
    throw InputError(name + " holds " + std::to_string(info.numBodies) + " bodies, not n^3 for a grid of n = 2 to " +
                     std::to_string(cosmology::kMaxPancakeGrid) + " as ic pancake writes");
  }
  cosmology::ZeldovichPancakeParams params;
  params.boxSize = info.boxSize;
  params.grid = static_cast<int>(side);
  params.unperturbed = options.unperturbed;
  if (options.causticRedshift) params.causticRedshift = *options.causticRedshift;
  if (!(std::isfinite(info.time) && info.time > 0)) {
    throw InputError(name + " records a cosmology but its /Header Time, the scale factor, is " + number(info.time) +
                     " (need a finite a > 0)");
  }
  // Checks z_c and a against the caustic before the bodies are read.
  cosmology::pancakeSolution(params, 0.0, info.time);
  return params;
}

nlohmann::json toJson(const cosmology::ErrorSummary& summary) {
  return {{"max", summary.max}, {"p99", summary.percentile99}};
}

int analyzePancake(const PancakeOptions& options) {
  if (!options.unperturbed && !options.causticRedshift) {
    throw InputError(
        "--z-caustic is required: the redshift of the pancake's caustic (as given to ic pancake); or "
        "--unperturbed for an unperturbed grid");
  }
  const fs::path snapshotPath = options.snapshot;
  std::error_code ec;
  if (fs::status(snapshotPath, ec).type() == fs::file_type::not_found) {
    throw InputError("snapshot " + snapshotPath.string() + ": no such file");
  }
  const io::SnapshotInfo info = asBadInput([&] { return io::inspectSnapshot(snapshotPath); });
  const cosmology::ZeldovichPancakeParams params = pancakeParams(options, info, snapshotPath);
  requireBodiesFit(info.numBodies, false);
  std::ostream& progress = options.json ? std::cerr : std::cout;
  progress << "reading snapshot " << snapshotPath.string() << " (" << info.numBodies << " bodies, box "
           << number(params.boxSize) << ", a = " << number(info.time) << ")..." << std::endl;
  const io::Snapshot snapshot = asBadInput([&] { return io::readSnapshot(snapshotPath); });
  const cosmology::PancakeErrors errors = cosmology::comparePancake(snapshot.particles, info.time, params);

  const char* positionUnit = errors.unperturbed ? "grid spacing" : "wavelength";
  const char* velocityUnit = errors.unperturbed ? "km/s" : "peak |u|";
  if (options.json) {
    nlohmann::json json = {
        {"snapshot", snapshotPath.string()},
        {"problem", errors.unperturbed ? "unperturbed" : "pancake"},
        {"bodies", errors.numBodies},
        {"grid", params.grid},
        {"box", params.boxSize},
        {"scale_factor", errors.scaleFactor},
        {"redshift", 1.0 / errors.scaleFactor - 1.0},
        {"z_caustic", errors.unperturbed ? nlohmann::json(nullptr) : nlohmann::json(params.causticRedshift)},
        {"growth_ratio", errors.growthRatio},
        {"spacing", errors.spacing},
        {"position_unit", positionUnit},
        {"position_scale", errors.positionScale},
        {"velocity_unit", velocityUnit},
        {"velocity_scale", errors.velocityScale},
        {"position_error", toJson(errors.position)},
        {"velocity_error", toJson(errors.velocity)},
        {"transverse_displacement", toJson(errors.transverse)},
        {"transverse_velocity", errors.transverseVelocity}};
    std::cout << json.dump(2) << std::endl;
    return 0;
  }
  if (errors.unperturbed) {
    std::printf("\nunperturbed %d^3 grid at a = %.9g (z = %.6g), box %g Mpc/h: errors against the grid at rest\n",
                params.grid, errors.scaleFactor, 1.0 / errors.scaleFactor - 1.0, params.boxSize);
  } else {
    std::printf("\npancake of %d^3 bodies at a = %.9g (z = %.6g), a/a_c = %.6g (caustic at z = %g), box %g Mpc/h\n",
                params.grid, errors.scaleFactor, 1.0 / errors.scaleFactor - 1.0, errors.growthRatio,
                params.causticRedshift, params.boxSize);
  }
  std::printf("%-22s %12s %12s  %s\n", "error", "max", "99%", "unit");
  std::printf("%-22s %12.4e %12.4e  %s (%g Mpc/h)\n", "|x - x_exact|", errors.position.max,
              errors.position.percentile99, positionUnit, errors.positionScale);
  const std::string velocityNote = errors.unperturbed
                                       ? std::string(velocityUnit)
                                       : std::string(velocityUnit) + " (" + number(errors.velocityScale) + " km/s)";
  std::printf("%-22s %12.4e %12.4e  %s\n", "|u_x - u_exact|", errors.velocity.max, errors.velocity.percentile99,
              velocityNote.c_str());
  std::printf("%-22s %12.4e %12.4e  grid spacing (%g Mpc/h)\n", "|y, z - grid point|", errors.transverse.max,
              errors.transverse.percentile99, errors.spacing);
  std::printf("%-22s %12.4e %12s  %s\n", "|u_y|, |u_z|", errors.transverseVelocity, "", velocityUnit);
  std::printf("(u = v / sqrt(a), GADGET's velocities; x the shorter way round the box)\n");
  return 0;
}

}  // namespace

std::function<int()> addAnalyzeCommand(CLI::App& parent) {
  CLI::App* group = parent.add_subcommand("analyze", "measurements on snapshots");
  group->require_subcommand(1);
  CLI::App* command = group->add_subcommand(
      "power",
      "the power spectrum P(k) of a periodic snapshot's mass density, as a text file (k, P(k), modes, shot noise)");
  auto options = std::make_shared<PowerOptions>();
  command->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  command->add_option("--config", "parameter file: `key = value` lines with the long option names");
  command->add_option("snapshot", options->snapshot, "HDF5 snapshot of a periodic box (GADGET layout, PartType1)")
      ->required();
  command->add_option("--grid", options->grid,
                      "mesh points per side, " + std::to_string(mesh::kMinGrid) + " to " +
                          std::to_string(mesh::kMaxGrid) +
                          " with no prime factor but 2, 3, 5 and 7 (default: the first such size >= 2 N^(1/3))");
  command->add_option("--assignment", options->assignment, "mass-assignment window, divided out: cic or tsc")
      ->check(CLI::IsMember({"cic", "tsc"}))
      ->capture_default_str();
  command->add_flag("--interlace", options->interlace,
                    "average with a second deposit shifted by half a cell along each axis: cancels the odd aliases "
                    "(twice the time and the mesh memory)");
  command->add_flag("--subtract-shot-noise", options->subtractShotNoise,
                    "write P(k) less the shot noise L^3 sum m^2 / (sum m)^2");
  CLI::Option* width =
      command->add_option("--bin-width", options->binWidth, "width of the linear bins in units of k_F = 2 pi / L")
          ->capture_default_str();
  command
      ->add_option("--log-bins", options->logBins,
                   "logarithmic bins instead, this many per decade of k (1 to " +
                       std::to_string(cosmology::kMaxBinsPerDecade) + ")")
      ->excludes(width);
  command->add_option("--box", options->box,
                      "side L of the periodic box, > 0 (default: the snapshot's BoxSize, which a periodic snapshot "
                      "records)");
  command->add_option("-o,--out", options->outPath,
                      "output text file (default: SNAPSHOT with the extension .power.txt)");
  command->add_flag("--overwrite", options->overwrite, "replace an earlier power spectrum at --out");
  addLinearPowerOptions(*command, options->linear, "--linear",
                        "add a column P_lin(k) D1(a)^2/D1(1)^2, linear theory at the snapshot's time: eh (Eisenstein "
                        "& Hu 1998 with wiggles), eh-nowiggle, or a two-column file k [h/Mpc] P [(Mpc/h)^3] at z = 0; "
                        "defaults as ic cosmo's");
  command->add_option("--omega-m", options->omegaMatter,
                      "Omega_m today, for a snapshot without a cosmology (with --omega-lambda, --h and --redshift)");
  command->add_option("--omega-lambda", options->omegaLambda, "Omega_Lambda today, as --omega-m");
  command->add_option("--h", options->hubbleParam, "h = H0 / (100 km/s/Mpc), as --omega-m");
  CLI::Option* redshift = command->add_option("--redshift", options->redshift, "the snapshot's redshift, as --omega-m");
  command->add_option("--scale-factor", options->scaleFactor, "the snapshot's scale factor, instead of --redshift")
      ->excludes(redshift);

  CLI::App* pancake = group->add_subcommand(
      "pancake",
      "a snapshot of a run from ic pancake against the exact Zel'dovich solution (or, with --unperturbed, against the "
      "grid at rest): position and velocity errors along the wave, displacements across it");
  auto pancakeOptions = std::make_shared<PancakeOptions>();
  pancake->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  pancake->add_option("--config", "parameter file: `key = value` lines with the long option names");
  pancake
      ->add_option("snapshot", pancakeOptions->snapshot,
                   "HDF5 snapshot of an Einstein-de Sitter periodic box of n^3 bodies, /Header Time the scale factor")
      ->required();
  CLI::Option* caustic =
      pancake->add_option("--z-caustic", pancakeOptions->causticRedshift,
                          "redshift of the pancake's caustic, as given to ic pancake (required unless --unperturbed)");
  pancake
      ->add_flag("--unperturbed", pancakeOptions->unperturbed,
                 "the constant comoving volume test: errors against the grid at rest, in grid spacings and km/s")
      ->excludes(caustic);
  pancake->add_flag("--json", pancakeOptions->json, "print the errors as JSON on stdout");
  return [command, options, pancake, pancakeOptions] {
    if (pancake->parsed()) return analyzePancake(*pancakeOptions);
    return analyzePower(*command, *options);
  };
}

}  // namespace matcha::app
