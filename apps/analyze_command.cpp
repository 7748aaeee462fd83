// SPDX-License-Identifier: MIT
// `matcha analyze power SNAPSHOT`: the power spectrum of a periodic snapshot's mass density
// (cosmology/power_spectrum.hpp) as a text file: a commented header, then one line per bin, `k P(k) modes shot_noise`.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>

#include "commands.hpp"
#include "matcha/core/errors.hpp"
#include "matcha/core/memory_estimate.hpp"
#include "matcha/core/stopwatch.hpp"
#include "matcha/cosmology/power_spectrum.hpp"
#include "matcha/io/run_folder.hpp"
#include "matcha/io/snapshot.hpp"
#include "memory_check.hpp"
#include "options.hpp"

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
};

std::string number(double value, int digits = 6) {
  std::ostringstream text;
  text.precision(digits);
  text << value;
  return text.str();
}

/// Refuses, before the snapshot is read, an output that would replace the snapshot, a folder, an existing file
/// without --overwrite, or, even with --overwrite, a file that is not an earlier power spectrum.
void checkOutput(const fs::path& out, const fs::path& snapshot, bool overwrite) {
  if (out.filename().empty()) throw InputError("--out: the output file must be named (got '" + out.string() + "')");
  std::error_code ec;
  if (fs::exists(snapshot, ec) && fs::equivalent(out, snapshot, ec)) {
    throw InputError("--out " + out.string() + " is the snapshot itself; name another file");
  }
  const fs::file_status status = fs::status(out, ec);
  if (status.type() == fs::file_type::not_found) return;
  if (status.type() == fs::file_type::directory)
    throw InputError("--out " + out.string() + " is a folder; name a file");
  if (!overwrite) throw InputError("--out " + out.string() + " already exists; pass --overwrite to replace it");
  std::ifstream file(out);
  std::string firstLine;
  std::getline(file, firstLine);
  if (firstLine.rfind(kPowerFileTitle, 0) != 0) {
    throw InputError("--out " + out.string() +
                     " exists and is not a power spectrum of matcha analyze power; --overwrite replaces only those");
  }
}

/// The file: `# key = value` header lines, then the column names and one line per bin.
std::string powerFileText(const PowerOptions& options, const io::SnapshotInfo& info,
                          const cosmology::PowerSpectrumParams& params, const cosmology::PowerSpectrum& spectrum) {
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
  text << "# k  P(k)  modes  shot_noise\n";
  char line[160];
  for (const cosmology::PowerBin& bin : spectrum.bins) {
    std::snprintf(line, sizeof line, "%.9e %.9e %llu %.9e\n", bin.k, bin.power,
                  static_cast<unsigned long long>(bin.numModes), spectrum.shotNoise);
    text << line;
  }
  return text.str();
}

int analyzePower(const PowerOptions& options) {
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

  const fs::path snapshotPath = options.snapshot;
  const fs::path out =
      options.outPath ? fs::path(*options.outPath) : fs::path(snapshotPath).replace_extension(".power.txt");
  std::error_code ec;
  if (fs::status(snapshotPath, ec).type() == fs::file_type::not_found) {
    throw InputError("snapshot " + snapshotPath.string() + ": no such file");
  }
  checkOutput(out, snapshotPath, options.overwrite);
  const io::SnapshotInfo info = asBadInput([&] { return io::inspectSnapshot(snapshotPath); });
  if (!options.box) params.boxSize = info.boxSize;
  if (!(params.boxSize > 0)) {
    throw InputError("snapshot " + snapshotPath.string() +
                     " records no periodic box (no BoxSize > 0 with MatchaPeriodic 1); give its side with --box L");
  }
  if (!options.grid) params.grid = cosmology::defaultPowerSpectrumGrid(info.numBodies);
  params.validate();
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
  io::writeTextFile(out, powerFileText(options, info, params, spectrum));
  char timings[96];
  std::snprintf(timings, sizeof timings, "read %.2f s, measure %.2f s", readSeconds, measureSeconds);
  std::cout << "wrote " << out.string() << ": " << spectrum.bins.size() << " bins, k = " << number(spectrum.fundamental)
            << " to " << number(spectrum.nyquist) << ", shot noise " << number(spectrum.shotNoise)
            << (spectrum.shotNoiseSubtracted ? " (subtracted)" : "") << "; " << timings << std::endl;
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
  return [options] { return analyzePower(*options); };
}

}  // namespace matcha::app
