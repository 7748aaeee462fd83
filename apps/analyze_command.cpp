// SPDX-License-Identifier: MIT
// `matcha analyze power SNAPSHOT`: the power spectrum of a periodic snapshot's mass density
// (cosmology/power_spectrum.hpp) as a text file: a commented header, then one line per bin, `k P(k) modes shot_noise`,
// and with --linear a fifth column, the linear spectrum at the snapshot's time (cosmology/linear_power.hpp scaled by
// Background's growth factor), so that a measurement is compared with linear theory without any outside file.
// `matcha analyze growth START END`: the growth of each mode of the density between two snapshots of one box, on the
// same mesh, window and shells as analyze power (cosmology/power_spectrum.hpp's measureGrowth), against the linear
// growth factor of the snapshots' cosmology: cosmic variance cancels mode by mode.
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

/// The mesh and bins of a measurement on the density (analyze power, analyze growth).
struct MeshOptions {
  std::optional<int> grid;  ///< --grid; default: cosmology::defaultPowerSpectrumGrid(N)
  std::string assignment = mesh::toString(cosmology::PowerSpectrumParams{}.assignment);
  bool interlace = false;
  double binWidth = cosmology::PowerSpectrumParams{}.binWidth;
  std::optional<int> logBins;  ///< --log-bins B: logarithmic bins, B per decade
};

struct PowerOptions {
  std::string snapshot;
  MeshOptions mesh;
  bool subtractShotNoise = false;
  std::optional<double> box;  ///< --box; default: the snapshot's BoxSize
  std::optional<std::string> outPath;
  bool overwrite = false;
  LinearPowerOptions linear;  ///< --linear (no default: without it no fifth column), --sigma8, --ns, --omega-b
  // A snapshot without a cosmology (Omega0 = 0) gets one only from all of these: matcha does not guess a cosmology.
  std::optional<double> omegaMatter, omegaLambda, hubbleParam, redshift, scaleFactor;
};

/// The options of `analyze growth`.
struct GrowthOptions {
  std::string start, end;  ///< the two snapshots
  MeshOptions mesh;
  std::optional<double> kMax;  ///< --k-max: only the bins whose mean k is below it
  LinearPowerOptions linear;   ///< --linear: P_lin at each bin at the end's a (for scripts/spt_growth.py)
  bool json = false;
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
bool isPowerSpectrumFile(const fs::path& path) { return fileStartsWith(path, kPowerFileTitle); }

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
  text << "# grid = " << params.grid << (options.mesh.grid ? "" : "  (default: FFT-friendly, >= 2 N^(1/3))") << "\n";
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

/// The measurement's mesh and bins from the options (the grid when given; the box is the caller's).
cosmology::PowerSpectrumParams meshParams(const MeshOptions& options) {
  cosmology::PowerSpectrumParams params;
  params.assignment = options.assignment == "cic" ? mesh::MassAssignment::cic : mesh::MassAssignment::tsc;
  params.interlace = options.interlace;
  params.binWidth = options.binWidth;
  if (options.logBins) {
    params.binning = cosmology::PowerBinning::logarithmic;
    params.binsPerDecade = *options.logBins;
  }
  if (options.grid) params.grid = *options.grid;
  return params;
}

/// Registers --grid, --assignment, --interlace, --bin-width and --log-bins, bound to `options`.
void addMeshOptions(CLI::App& command, MeshOptions& options) {
  command.add_option("--grid", options.grid,
                     "mesh points per side, " + std::to_string(mesh::kMinGrid) + " to " +
                         std::to_string(mesh::kMaxGrid) +
                         " with no prime factor but 2, 3, 5 and 7 (default: the first such size >= 2 N^(1/3))");
  command.add_option("--assignment", options.assignment, "mass-assignment window, divided out: cic or tsc")
      ->check(CLI::IsMember({"cic", "tsc"}))
      ->capture_default_str();
  command.add_flag("--interlace", options.interlace,
                   "average with a second deposit shifted by half a cell along each axis: cancels the odd aliases "
                   "(twice the time and the mesh memory)");
  CLI::Option* width =
      command.add_option("--bin-width", options.binWidth, "width of the linear bins in units of k_F = 2 pi / L")
          ->capture_default_str();
  command
      .add_option("--log-bins", options.logBins,
                  "logarithmic bins instead, this many per decade of k (1 to " +
                      std::to_string(cosmology::kMaxBinsPerDecade) + ")")
      ->excludes(width);
}

/// Throws InputError unless `snapshot` names something: a missing file is refused before any other work.
void requireSnapshotExists(const fs::path& snapshot) {
  std::error_code ec;
  if (fs::status(snapshot, ec).type() == fs::file_type::not_found) {
    throw InputError("snapshot " + snapshot.string() + ": no such file");
  }
}

/// Refuses (one line: `what` needs ~X) a measurement whose bodies and meshes exceed the available host memory.
void requireMeasurementFits(std::uint64_t needed, const std::string& what) {
  const std::uint64_t available = availableHostBytes();
  if (available != 0 && needed > available) {
    throw InputError(what + " needs ~" + formatBytes(needed) + " of host memory (" + formatBytes(available) +
                     " available); choose a smaller --grid");
  }
}

/// Reads a snapshot's bodies, saying so on `info` first and noting the bodies outside [0, L)^3 (the mesh folds
/// them in). Throws InputError for a file that cannot be read.
io::Snapshot readMeasuredSnapshot(const fs::path& path, std::uint64_t numBodies, double boxSize, std::ostream& info) {
  info << "reading snapshot " << path.string() << " (" << numBodies << " bodies, box " << number(boxSize) << ")..."
       << std::endl;
  io::Snapshot snapshot = asBadInput([&] { return io::readSnapshot(path); });
  const SourceView bodies = snapshot.particles.sources();
  std::size_t outside = 0;
  for (std::size_t i = 0; i < bodies.count; ++i) {
    for (const double coordinate : {bodies.x[i], bodies.y[i], bodies.z[i]}) {
      if (!(coordinate >= 0.0 && coordinate < boxSize)) {
        ++outside;
        break;
      }
    }
  }
  if (outside > 0) {
    info << "note: " << outside << " bodies lie outside [0, " << number(boxSize)
         << ")^3; they are folded into the box periodically" << std::endl;
  }
  return snapshot;
}

/// D1(a) / D1(1) of `params` (its range widened for a > 1). H0 only sets the unit of time-like results; the ratio
/// does not depend on it.
double growthRatioAt(cosmology::CosmologyParams params, double scaleFactor) {
  params.maxScaleFactor = std::max(1.0, scaleFactor);
  const cosmology::Background background(params, cosmology::hubbleTodayPerSecond(params.hubbleParam));
  return background.growthFactorRatio(scaleFactor);
}

/// The cosmology a snapshot's /Header records (Omega0 > 0), with Time as its scale factor. Throws InputError (one
/// line naming the snapshot) for a Time that is no scale factor.
CosmologyAtTime headerCosmology(const io::CosmologyHeader& header, double time, const fs::path& snapshotPath) {
  CosmologyAtTime cosmo;
  cosmo.params.omegaMatter = header.omega0;
  cosmo.params.omegaLambda = header.omegaLambda;
  cosmo.params.hubbleParam = header.hubbleParam;
  cosmo.scaleFactor = time;
  if (!(std::isfinite(cosmo.scaleFactor) && cosmo.scaleFactor > 0)) {
    throw InputError("snapshot " + snapshotPath.string() +
                     " records a cosmology but its /Header Time, the scale factor, is " + number(time) +
                     " (need a finite a > 0)");
  }
  cosmo.growthRatio = growthRatioAt(cosmo.params, cosmo.scaleFactor);
  return cosmo;
}

/// Checks the linear-theory options before any work: with --linear, what needs no file (checkLinearPowerOptions);
/// without it, none of --sigma8, --ns, --omega-b. Returns whether --linear was given.
bool checkLinearColumnOptions(const CLI::App& command, const LinearPowerOptions& linear) {
  if (command.count("--linear") > 0) {
    checkLinearPowerOptions(command, linear, "--linear");
    return true;
  }
  for (const char* name : {"--sigma8", "--ns", "--omega-b"}) {
    if (command.count(name) > 0) throw InputError(std::string(name) + " applies only with --linear");
  }
  return false;
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
  checkLinearColumnOptions(command, options.linear);
  return any;
}

/// The cosmology and scale factor of the file's header lines: the snapshot's (/Header Omega0 > 0: Time is a), or the
/// options' for a snapshot without one; none when neither (then --linear is refused). Throws InputError (one line).
std::optional<CosmologyAtTime> resolveCosmology(const PowerOptions& options, bool fromOptions,
                                                const io::SnapshotInfo& info, const fs::path& snapshotPath,
                                                bool wantsLinear) {
  if (info.cosmology) {
    // Two sources of the same numbers could disagree; the snapshot's are those its bodies evolved under.
    if (fromOptions) {
      throw InputError("snapshot " + snapshotPath.string() +
                       " records its cosmology (/Header Omega0 = " + number(info.cosmology->omega0) + "); " +
                       kCosmologyOptions + " are only for snapshots without one");
    }
    return headerCosmology(*info.cosmology, info.time, snapshotPath);
  }
  if (!fromOptions) {
    if (wantsLinear) {
      throw InputError("snapshot " + snapshotPath.string() +
                       " records no cosmology (/Header Omega0 = 0); --linear needs " + kCosmologyOptions);
    }
    return std::nullopt;
  }
  CosmologyAtTime cosmo;
  cosmo.fromOptions = true;
  cosmo.params.omegaMatter = *options.omegaMatter;
  cosmo.params.omegaLambda = *options.omegaLambda;
  cosmo.params.hubbleParam = *options.hubbleParam;
  cosmo.scaleFactor =
      options.scaleFactor ? *options.scaleFactor : cosmology::scaleFactorFromRedshift(*options.redshift);
  if (!(std::isfinite(cosmo.scaleFactor) && cosmo.scaleFactor > 0)) {
    throw InputError("--scale-factor must be a finite number > 0 (got " + number(cosmo.scaleFactor) + ")");
  }
  cosmo.growthRatio = growthRatioAt(cosmo.params, cosmo.scaleFactor);
  return cosmo;
}

int analyzePower(const CLI::App& command, const PowerOptions& options) {
  // Every option is checked before the snapshot is read.
  cosmology::PowerSpectrumParams params = meshParams(options.mesh);
  params.subtractShotNoise = options.subtractShotNoise;
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
  requireSnapshotExists(snapshotPath);
  checkOutputFile(out, snapshotPath, options.overwrite, isPowerSpectrumFile,
                  "a power spectrum of matcha analyze power");
  const io::SnapshotInfo info = asBadInput([&] { return io::inspectSnapshot(snapshotPath); });
  if (!options.box) params.boxSize = info.boxSize;
  if (!(params.boxSize > 0)) {
    throw InputError("snapshot " + snapshotPath.string() +
                     " records no periodic box (no BoxSize > 0 with MatchaPeriodic 1); give its side with --box L");
  }
  if (!options.mesh.grid) params.grid = cosmology::defaultPowerSpectrumGrid(info.numBodies);
  params.validate();
  const std::optional<CosmologyAtTime> cosmo =
      resolveCosmology(options, cosmologyFromOptions, info, snapshotPath, wantsLinear);
  // Built (a table read, or sigma_8 integrated) before the bodies are read, so a bad table costs nothing.
  std::optional<cosmology::LinearPowerSpectrum> linearSpectrum;
  if (wantsLinear) linearSpectrum = makeLinearPowerSpectrum(command, options.linear, "--linear", cosmo->params);
  requireBodiesFit(info.numBodies, false);
  requireMeasurementFits(info.numBodies * kBytesPerBody + cosmology::powerSpectrumMemoryBytes(params, info.numBodies),
                         "the power spectrum of " + std::to_string(info.numBodies) + " bodies on a " +
                             std::to_string(params.grid) + "^3 grid" + (params.interlace ? ", interlaced," : ""));
  if (out.has_parent_path()) io::ensureWritableDirectory(out.parent_path());

  Stopwatch clock;
  const io::Snapshot snapshot = readMeasuredSnapshot(snapshotPath, info.numBodies, params.boxSize, std::cout);
  const double readSeconds = clock.seconds();
  const SourceView bodies = snapshot.particles.sources();
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
  // A box or a linear theory beyond a double (--box 1e300, --scale-factor 1e300, --sigma8 1e300) gave columns of inf
  // or NaN with exit 0: nothing is written then.
  bool finite = std::isfinite(spectrum.shotNoise) && (!cosmo || std::isfinite(cosmo->growthRatio));
  for (const cosmology::PowerBin& bin : spectrum.bins)
    finite = finite && std::isfinite(bin.k) && std::isfinite(bin.power);
  if (linear) {
    for (const double power : linear->power) finite = finite && std::isfinite(power);
  }
  if (!finite) {
    throw InputError("analyze power: the box (" + number(params.boxSize) +
                     ") or the linear theory's parameters give a spectrum beyond a double; nothing was written");
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

/// One snapshot of a growth measurement, from its header: its cosmology and time, and its box.
struct GrowthSnapshot {
  fs::path path;
  io::SnapshotInfo info;
  CosmologyAtTime cosmo;
};

/// Checks a snapshot for `analyze growth` from its header alone: a periodic box and a cosmology (Time its a).
GrowthSnapshot inspectGrowthSnapshot(const std::string& path) {
  GrowthSnapshot snapshot{path, {}, {}};
  requireSnapshotExists(snapshot.path);
  snapshot.info = asBadInput([&] { return io::inspectSnapshot(snapshot.path); });
  const std::string name = "snapshot " + path;
  if (!(snapshot.info.boxSize > 0)) throw InputError(name + " records no periodic box (no BoxSize > 0)");
  if (!snapshot.info.cosmology) {
    throw InputError(name + " records no cosmology (/Header Omega0 = 0): the growth is measured against D1(a)");
  }
  snapshot.cosmo = headerCosmology(*snapshot.info.cosmology, snapshot.info.time, snapshot.path);
  return snapshot;
}

/// Whether two of a header's numbers are the same to rounding (a run writes every snapshot's from the same values).
bool sameValue(double a, double b) { return std::abs(a - b) <= 1e-12 * std::max(std::abs(a), std::abs(b)); }

int analyzeGrowth(const CLI::App& command, const GrowthOptions& options) {
  // Every option and both headers are checked before any body is read.
  cosmology::PowerSpectrumParams params = meshParams(options.mesh);
  params.validate();
  if (options.kMax && !(std::isfinite(*options.kMax) && *options.kMax > 0)) {
    throw InputError("--k-max must be a finite wavenumber > 0 (got " + number(*options.kMax) + ")");
  }
  const bool wantsLinear = checkLinearColumnOptions(command, options.linear);
  const GrowthSnapshot start = inspectGrowthSnapshot(options.start);
  const GrowthSnapshot end = inspectGrowthSnapshot(options.end);
  // The same modes at both times need the same box, and D1 the same cosmology.
  if (!sameValue(start.info.boxSize, end.info.boxSize)) {
    throw InputError("the snapshots' boxes differ (" + number(start.info.boxSize, 17) + " and " +
                     number(end.info.boxSize, 17) + "): the growth of a mode compares one box at two times");
  }
  const io::CosmologyHeader& a = *start.info.cosmology;
  const io::CosmologyHeader& b = *end.info.cosmology;
  if (!sameValue(a.omega0, b.omega0) || !sameValue(a.omegaLambda, b.omegaLambda) ||
      !sameValue(a.hubbleParam, b.hubbleParam)) {
    throw InputError("the snapshots' cosmologies differ (Omega0, OmegaLambda, HubbleParam " + number(a.omega0) + ", " +
                     number(a.omegaLambda) + ", " + number(a.hubbleParam) + " and " + number(b.omega0) + ", " +
                     number(b.omegaLambda) + ", " + number(b.hubbleParam) + ")");
  }
  params.boxSize = start.info.boxSize;
  if (!options.mesh.grid) params.grid = cosmology::defaultPowerSpectrumGrid(start.info.numBodies);
  params.validate();
  std::optional<cosmology::LinearPowerSpectrum> linearSpectrum;
  if (wantsLinear) linearSpectrum = makeLinearPowerSpectrum(command, options.linear, "--linear", end.cosmo.params);
  const std::uint64_t numBodies = std::max(start.info.numBodies, end.info.numBodies);
  requireBodiesFit(numBodies, false);
  requireMeasurementFits(numBodies * kBytesPerBody + cosmology::powerSpectrumMemoryBytes(params, start.info.numBodies) +
                             cosmology::powerSpectrumMemoryBytes(params, end.info.numBodies),
                         "the growth of two snapshots' modes on a " + std::to_string(params.grid) + "^3 grid" +
                             (params.interlace ? ", interlaced," : ""));

  // Each snapshot's bodies are read, deposited and let go before the next is read: two meshes, one set of bodies.
  std::ostream& info = options.json ? std::cerr : std::cout;
  const auto density = [&](const GrowthSnapshot& snapshot) {
    const io::Snapshot bodies = readMeasuredSnapshot(snapshot.path, snapshot.info.numBodies, params.boxSize, info);
    return cosmology::MeshDensity(bodies.particles.sources(), params);
  };
  const cosmology::MeshDensity startDensity = density(start);
  const cosmology::MeshDensity endDensity = density(end);
  const cosmology::GrowthSpectrum growth = cosmology::measureGrowth(startDensity, endDensity);
  const double linearGrowth = end.cosmo.growthRatio / start.cosmo.growthRatio;  // D1(a) / D1(a_start)

  nlohmann::json bins = nlohmann::json::array();
  std::vector<const cosmology::GrowthBin*> shown;
  for (const cosmology::GrowthBin& bin : growth.bins) {
    if (options.kMax && !(bin.k < *options.kMax)) break;
    shown.push_back(&bin);
    nlohmann::json row = {{"k_low", bin.kLow},
                          {"k_high", bin.kHigh},
                          {"k", bin.k},
                          {"modes", bin.numModes},
                          {"start_power", bin.startPower},
                          {"end_power", bin.endPower},
                          {"cross_power", bin.crossPower},
                          {"cross_ratio", bin.crossRatio()},
                          {"auto_ratio", bin.autoRatio()},
                          {"correlation", bin.correlation()},
                          {"cross_error", bin.crossRatio() / linearGrowth - 1.0},
                          {"auto_error", bin.autoRatio() / (linearGrowth * linearGrowth) - 1.0}};
    if (linearSpectrum) {
      row["linear_power"] = linearSpectrum->power(bin.k) * end.cosmo.growthRatio * end.cosmo.growthRatio;
    }
    bins.push_back(row);
  }
  if (options.json) {
    nlohmann::json json = {
        {"start", options.start},
        {"end", options.end},
        {"matcha", versionText()},
        {"cosmology",
         {{"omega_m", start.cosmo.params.omegaMatter},
          {"omega_lambda", start.cosmo.params.omegaLambda},
          {"hubble_param", start.cosmo.params.hubbleParam},
          {"scale_factor_start", start.cosmo.scaleFactor},
          {"scale_factor_end", end.cosmo.scaleFactor}}},
        {"linear_growth", linearGrowth},
        {"bodies", start.info.numBodies},
        {"box", params.boxSize},
        {"grid", params.grid},
        {"assignment", mesh::toString(params.assignment)},
        {"interlace", params.interlace},
        {"k_fundamental", growth.fundamental},
        {"k_nyquist", growth.nyquist},
        {"k_max", options.kMax ? nlohmann::json(*options.kMax) : nlohmann::json(nullptr)},
        {"linear", linearSpectrum ? nlohmann::json(describeLinearPower(command, options.linear, *linearSpectrum))
                                  : nlohmann::json(nullptr)},
        {"bins", bins}};
    std::cout << json.dump(2) << std::endl;
    return 0;
  }
  std::printf("\ngrowth from a = %.9g (z = %.6g) to a = %.9g (z = %.6g): D1(a)/D1(a_start) = %.9g, squared %.9g\n",
              start.cosmo.scaleFactor, 1.0 / start.cosmo.scaleFactor - 1.0, end.cosmo.scaleFactor,
              1.0 / end.cosmo.scaleFactor - 1.0, linearGrowth, linearGrowth * linearGrowth);
  std::printf("(Omega_m %g, Omega_Lambda %g, h %g; box %g, grid %d^3 %s%s)\n", start.cosmo.params.omegaMatter,
              start.cosmo.params.omegaLambda, start.cosmo.params.hubbleParam, params.boxSize, params.grid,
              mesh::toString(params.assignment).c_str(), params.interlace ? " interlaced" : "");
  std::printf("%12s %8s %14s %14s %12s\n", "k", "modes", "cross/D-1", "auto/D^2-1", "correlation");
  for (const cosmology::GrowthBin* bin : shown) {
    std::printf("%12.6g %8llu %+13.4f%% %+13.4f%% %12.8f\n", bin->k, static_cast<unsigned long long>(bin->numModes),
                100.0 * (bin->crossRatio() / linearGrowth - 1.0),
                100.0 * (bin->autoRatio() / (linearGrowth * linearGrowth) - 1.0), bin->correlation());
  }
  std::printf(
      "(cross: Re sum d_end conj(d_start) / sum |d_start|^2, each mode's growth; auto: sum |d_end|^2 / sum "
      "|d_start|^2; both against D = D1(a)/D1(a_start), D^2)\n");
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
  requireSnapshotExists(snapshotPath);
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

/// A measurement's subcommand with what every one takes first: the last of repeated options wins, and --config.
CLI::App* addMeasurementCommand(CLI::App& group, const std::string& name, const std::string& description) {
  CLI::App* command = group.add_subcommand(name, description);
  command->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  command->add_option("--config", "parameter file: `key = value` lines with the long option names");
  return command;
}

std::function<int()> addAnalyzeCommand(CLI::App& parent) {
  CLI::App* group = parent.add_subcommand("analyze", "measurements on snapshots");
  group->require_subcommand(1);
  CLI::App* command = addMeasurementCommand(
      *group, "power",
      "the power spectrum P(k) of a periodic snapshot's mass density, as a text file (k, P(k), modes, shot noise)");
  auto options = std::make_shared<PowerOptions>();
  command->add_option("snapshot", options->snapshot, "HDF5 snapshot of a periodic box (GADGET layout, PartType1)")
      ->required();
  addMeshOptions(*command, options->mesh);
  command->add_flag("--subtract-shot-noise", options->subtractShotNoise,
                    "write P(k) less the shot noise L^3 sum m^2 / (sum m)^2");
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

  CLI::App* growth = addMeasurementCommand(
      *group, "growth",
      "the growth of each density mode between two snapshots of one box (the same mesh and window), bin by bin, "
      "against the linear growth factor D1(a)/D1(a_start) of their cosmology: cosmic variance cancels");
  auto growthOptions = std::make_shared<GrowthOptions>();
  growth->add_option("start", growthOptions->start, "HDF5 snapshot at the earlier time (a cosmological periodic box)")
      ->required();
  growth->add_option("end", growthOptions->end, "HDF5 snapshot of the same box at the later time")->required();
  addMeshOptions(*growth, growthOptions->mesh);
  growth->add_option("--k-max", growthOptions->kMax,
                     "only the bins whose mean k is below this (inverse length units; default: all bins)");
  addLinearPowerOptions(*growth, growthOptions->linear, "--linear",
                        "add P_lin(k) D1(a)^2/D1(1)^2 at the end's a to each bin (JSON linear_power): eh, "
                        "eh-nowiggle, or a two-column file k P(k) at z = 0; defaults as ic cosmo's");
  growth->add_flag("--json", growthOptions->json, "print the bins as JSON on stdout");

  CLI::App* pancake = addMeasurementCommand(
      *group, "pancake",
      "a snapshot of a run from ic pancake against the exact Zel'dovich solution (or, with --unperturbed, against the "
      "grid at rest): position and velocity errors along the wave, displacements across it");
  auto pancakeOptions = std::make_shared<PancakeOptions>();
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
  return [command, options, growth, growthOptions, pancake, pancakeOptions] {
    if (pancake->parsed()) return analyzePancake(*pancakeOptions);
    if (growth->parsed()) return analyzeGrowth(*growth, *growthOptions);
    return analyzePower(*command, *options);
  };
}

}  // namespace matcha::app
