// SPDX-License-Identifier: MIT
// A surface density map as a PNG image: what `matcha render` writes. Cairo stays private to io: no Cairo header
// appears here.
//
// Layout. The map occupies the top-left pixels x pixels of the image, one image pixel per map pixel, untouched by
// any annotation (so the image can be measured: its map part is the data, colour-mapped). Two white strips hold the
// annotations, sized from one font size f = max(11, round(pixels / 40)) pixels:
//   - on the right, ceil(7.5 f) wide: the colour bar, the height of the map less f/2 at each end, with its
//     log10(Sigma) ticks and labels and, along its outer edge, the quantity and its unit;
//   - below, ceil(2.8 f) tall across the whole width, two rows: the scale bar (a round length, 1, 2 or 5 x 10^k, of
//     at most a quarter of the field, drawn to the map's scale under its left edge) with its length beside it; then
//     the projection ("along z: x right, y up") on the left and the time in the bottom-right corner.
// So a map of P pixels gives an image of (P + ceil(7.5 f)) x (P + ceil(2.8 f)): 1219 x 1097 for P = 1024, 610 x 549
// for P = 512 (densityImageSize).
//
// Colours. log10(Sigma) from `decades` below the densest pixel up to it, mapped linearly onto viridis (matplotlib's
// 256-entry table, CC0), perceptually uniform and rising in lightness: the densest pixel is the brightest. Pixels
// with less (empty ones included) take the lowest colour.
//
// Units. Without units (a snapshot with no /Units) the labels say N-body units: lengths and Sigma as the numbers in
// the file. With units the labels are physical: Sigma in Msun / pc^2, the scale bar in pc, kpc or Mpc, the time
// also in kyr, Myr or Gyr (matcha's own snapshots read their N-body units as 1 kpc and 1e10 Msun: core/units.hpp).
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "matcha/core/units.hpp"
#include "matcha/io/projection.hpp"

namespace matcha::io {

/// The colour scale spans 4 decades of Sigma by default: a 2^24-body Plummer sphere at 1024 pixels shows single
/// bodies in its halo about 3.5 decades below its centre, so 4 keeps the halo visible without the floor's noise.
inline constexpr double kDefaultDecades = 4.0;
inline constexpr double kMinDecades = 0.5;  ///< fewer leave too few ticks to read the bar
inline constexpr double kMaxDecades = 30.0;

struct DensityImageOptions {
  double time = 0.0;                 ///< simulation time (code units), shown as "t = ..."
  std::optional<UnitSystem> units;   ///< what the code units are (a snapshot's /Units); nullopt: N-body units
  double decades = kDefaultDecades;  ///< log10(Sigma) range of the colours, below the densest pixel
};

struct ImageSize {
  int width = 0;
  int height = 0;
};

/// The annotations' font size in pixels for a map of `pixels`: max(11, round(pixels / 40)).
int annotationFontSize(int pixels);

/// The size of the PNG for a map of `pixels` (see the layout above).
ImageSize densityImageSize(int pixels);

/// log10 of Sigma (code units) at the bottom and the top of the colour bar.
struct ColourScale {
  double logMin = 0.0;
  double logMax = 0.0;
};

/// The top is log10 of the densest pixel, the bottom `decades` below. Throws InputError when no pixel holds mass
/// (the field is empty: nothing to scale) or decades is outside [kMinDecades, kMaxDecades].
ColourScale colourScale(const SurfaceDensityMap& map, double decades);

/// The viridis colour of `fraction` in [0, 1] (clamped; NaN gives the lowest): 8-bit red, green, blue.
std::array<std::uint8_t, 3> viridisColour(double fraction);

/// The scale bar's length: the largest 1, 2 or 5 x 10^k that is at most a quarter of `width` (> 0, finite).
double scaleBarLength(double width);

/// The texts the image carries (the tests read them here; the PNG shows them).
struct DensityImageLabels {
  std::string scaleBar;    ///< "0.5" (N-body units) or "500 pc"
  std::string colourBar;   ///< "log₁₀ Σ  [M☉ pc⁻²]", or "log₁₀ Σ  (N-body units: mass / length²)"
  std::string projection;  ///< "along z: x right, y up"
  std::string time;        ///< "t = 0.25" or "t = 0.25 (1.18 Myr)"
  /// What the colour bar's numbers add to log10 of Sigma in code units: log10 of the unit conversion to Msun / pc^2
  /// (0 without units).
  double logSigmaOffset = 0.0;
};
DensityImageLabels densityImageLabels(const SurfaceDensityMap& map, const DensityImageOptions& options);

/// Whether `path` starts with the 8-byte PNG signature (false when it cannot be read).
bool isPngFile(const std::filesystem::path& path);

/// Draws `map` with its annotations and writes it to `path` as a PNG (8-bit RGB), atomically: the bytes go to a
/// temporary file ".<name>.tmp-<pid>-<k>" in the same directory, which is synced and renamed over `path`; on any
/// failure the temporary file is removed and an existing `path` is untouched. Replaces `path` if it exists (the
/// caller decides whether it may).
/// In: map (as depositSurfaceDensity makes it), options. Allocates the image (4 bytes per pixel) and its PNG bytes.
/// Returns the image's size.
/// Throws InputError as colourScale does; IoError (one line naming `path`) when the image cannot be made or the file
/// cannot be written.
ImageSize writeDensityImage(const std::filesystem::path& path, const SurfaceDensityMap& map,
                            const DensityImageOptions& options);

}  // namespace matcha::io
