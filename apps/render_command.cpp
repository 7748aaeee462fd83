// SPDX-License-Identifier: MIT
// `matcha render SNAPSHOT`: a projected density image of a snapshot as a PNG (io/projection.hpp, io/density_image.hpp).
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>

#include "commands.hpp"
#include "matcha/core/errors.hpp"
#include "matcha/core/stopwatch.hpp"
#include "matcha/io/density_image.hpp"
#include "matcha/io/projection.hpp"
#include "matcha/io/snapshot.hpp"
#include "output_file.hpp"

namespace matcha::app {
namespace {

namespace fs = std::filesystem;

/// The default field holds this share of the mass in projection (a few escapers must not shrink the system to a dot).
constexpr double kFramedMassFraction = 0.99;

struct RenderOptions {
  std::string snapshot;  ///< SNAPSHOT: the HDF5 snapshot to draw
  std::string axis = "z";
  std::optional<double> width;        ///< --width; default: the square holding kFramedMassFraction of the mass
  std::optional<std::string> centre;  ///< --centre X,Y,Z; default: the centre of mass
  int pixels = 1024;
  double decades = io::kDefaultDecades;
  std::optional<std::string> outPath;  ///< --out; default: SNAPSHOT with the extension .png
  bool overwrite = false;
};

std::string text(double value) {
  std::ostringstream out;
  out.precision(6);
  out << value;
  return out.str();
}

io::ProjectionAxis parseAxis(const std::string& word) {
  if (word == "x") return io::ProjectionAxis::x;
  if (word == "y") return io::ProjectionAxis::y;
  if (word == "z") return io::ProjectionAxis::z;
  throw InputError("--axis must be x, y or z (got '" + word + "')");
}

/// "X,Y,Z": three finite numbers, nothing else.
std::array<double, 3> parseCentre(const std::string& spec) {
  std::array<double, 3> centre{};
  const char* at = spec.data();
  const char* end = spec.data() + spec.size();
  for (std::size_t k = 0; k < 3; ++k) {
    const auto [next, error] = std::from_chars(at, end, centre[k]);
    const bool separated = k < 2 ? (next != end && *next == ',') : next == end;
    if (error != std::errc() || !separated || !std::isfinite(centre[k])) {
      throw InputError("--centre must be three finite numbers X,Y,Z (got '" + spec + "')");
    }
    at = next + (k < 2 ? 1 : 0);
  }
  return centre;
}

int render(const RenderOptions& options) {
  // Every option is checked before any file is touched.
  io::ProjectionView view;
  view.axis = parseAxis(options.axis);
  if (options.pixels < io::kMinPixels || options.pixels > io::kMaxPixels) {
    throw InputError("--pixels must be " + std::to_string(io::kMinPixels) + " to " + std::to_string(io::kMaxPixels) +
                     " (got " + std::to_string(options.pixels) + ")");
  }
  view.pixels = options.pixels;
  if (options.width) {
    if (!(std::isfinite(*options.width) && *options.width > 0.0)) {
      throw InputError("--width must be a finite length > 0 (got " + text(*options.width) + ")");
    }
    view.width = *options.width;
  }
  const std::optional<std::array<double, 3>> centre =
      options.centre ? std::optional(parseCentre(*options.centre)) : std::nullopt;
  if (!(options.decades >= io::kMinDecades && options.decades <= io::kMaxDecades)) {
    throw InputError("--decades must be " + text(io::kMinDecades) + " to " + text(io::kMaxDecades) + " (got " +
                     text(options.decades) + ")");
  }
  const fs::path snapshotPath = options.snapshot;
  const fs::path out = options.outPath ? fs::path(*options.outPath) : fs::path(snapshotPath).replace_extension(".png");
  // A missing snapshot is bad input (README's exit-code table), said before anything else happens.
  std::error_code ec;
  if (fs::status(snapshotPath, ec).type() == fs::file_type::not_found) {
    throw InputError("snapshot " + snapshotPath.string() + ": no such file");
  }
  // --overwrite replaces an earlier image, never data (as `matcha run` refuses a folder with another run's files).
  checkOutputFile(out, snapshotPath, options.overwrite, io::isPngFile, "a PNG image");
  if (out.has_parent_path()) io::ensureWritableDirectory(out.parent_path());

  std::cout << "reading snapshot " << snapshotPath.string() << "..." << std::endl;
  Stopwatch clock;
  // A truncated or corrupt snapshot, or a folder, is bad input (exit 2) as for every command that reads one.
  const io::Snapshot snapshot = asBadInput([&] { return io::readSnapshot(snapshotPath); });
  const double readSeconds = clock.seconds();
  const SourceView bodies = snapshot.particles.sources();

  clock.restart();
  view.centre = centre ? *centre : io::centreOfMass(bodies);
  std::string widthSource = "--width";
  if (!options.width) {
    view.width = io::enclosingWidth(bodies, view.axis, view.centre, kFramedMassFraction);
    widthSource = "holds 99% of the mass";
    // That much mass at one point (a width of 0, or below what a map resolves): frame every body, or one length unit
    // if all coincide.
    const double smallest = io::smallestResolvableWidth(view.pixels, view.centre);
    if (view.width < smallest) {
      view.width = io::enclosingWidth(bodies, view.axis, view.centre, 1.0);
      widthSource = "holds every body";
      if (view.width < smallest) {
        view.width = 1.0;
        widthSource = "every body at one point";
      }
    }
  }
  const io::SurfaceDensityMap map = io::depositSurfaceDensity(bodies, view);
  const double mapSeconds = clock.seconds();
  if (map.numBodiesInField == 0) {
    throw InputError("no body falls in the field of view (width " + text(view.width) + " around (" +
                     text(view.centre[0]) + ", " + text(view.centre[1]) + ", " + text(view.centre[2]) +
                     ")); check --centre and --width");
  }
  std::cout << "render: " << bodies.count << " bodies at t = " << text(snapshot.time) << ", " << map.numBodiesInField
            << " in the field; along " << io::toString(view.axis) << ", centre (" << text(view.centre[0]) << ", "
            << text(view.centre[1]) << ", " << text(view.centre[2]) << ") (" << (centre ? "--centre" : "centre of mass")
            << "), width " << text(view.width) << " (" << widthSource << "), " << view.pixels << " x " << view.pixels
            << " pixels of " << text(map.pixelSide()) << std::endl;

  clock.restart();
  io::DensityImageOptions image;
  image.time = snapshot.time;
  image.units = snapshot.units;
  image.decades = options.decades;
  const io::ImageSize size = io::writeDensityImage(out, map, image);
  const double imageSeconds = clock.seconds();
  const io::ColourScale scale = io::colourScale(map, options.decades);
  const io::DensityImageLabels labels = io::densityImageLabels(map, image);
  char timings[160];
  std::snprintf(timings, sizeof timings, "read %.2f s, map %.3f s (centre, width, deposit), image %.2f s", readSeconds,
                mapSeconds, imageSeconds);
  std::cout << "wrote " << out.string() << " (" << size.width << " x " << size.height << ": the " << view.pixels
            << "-pixel map, colour bar and labels); log10 Sigma " << text(scale.logMin + labels.logSigmaOffset)
            << " to " << text(scale.logMax + labels.logSigmaOffset) << (image.units ? " Msun/pc^2" : " (N-body units)")
            << "; " << timings << std::endl;
  return 0;
}

}  // namespace

std::function<int()> addRenderCommand(CLI::App& parent) {
  CLI::App* command = parent.add_subcommand(
      "render", "a projected density image of a snapshot (PNG: log Sigma, colour bar, scale bar, time)");
  auto options = std::make_shared<RenderOptions>();
  command->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  command->add_option("--config", "parameter file: `key = value` lines with the long option names");
  command->add_option("snapshot", options->snapshot, "HDF5 snapshot (GADGET layout, PartType1)")->required();
  command->add_option("--axis", options->axis, "projection axis: x (map y-z), y (z-x) or z (x-y)")
      ->capture_default_str();
  command->add_option("--width", options->width,
                      "side of the square field of view, in length units (default: the square around the centre "
                      "that holds 99% of the mass in projection)");
  command->add_option("--centre,--center", options->centre,
                      "centre of the field, X,Y,Z in length units (default: the centre of mass)");
  command
      ->add_option("--pixels", options->pixels,
                   "pixels along each side of the map, " + std::to_string(io::kMinPixels) + " to " +
                       std::to_string(io::kMaxPixels) + " (the PNG adds a colour-bar strip and a label strip)")
      ->capture_default_str();
  command->add_option("--decades", options->decades, "decades of surface density below the densest pixel to colour")
      ->capture_default_str();
  command->add_option("--out", options->outPath, "output PNG (default: SNAPSHOT with the extension .png)");
  command->add_flag("--overwrite", options->overwrite, "replace an existing PNG at --out");
  return [options] { return render(*options); };
}

}  // namespace matcha::app
