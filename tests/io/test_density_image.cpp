// SPDX-License-Identifier: MIT
// Density images: the test (a known input's density peak is the brightest pixel of the PNG, which has the
// documented size), read back through Cairo; the map part holds colour-map colours only; the colour scale, the scale
// bar's round lengths, the labels' units; atomic writes.
#include <cairo.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "matcha/core/errors.hpp"
#include "matcha/io/density_image.hpp"
#include "matcha/io/projection.hpp"
#include "matcha/testing/generators.hpp"
#include "matcha/testing/scratch_dir.hpp"

namespace {

namespace fs = std::filesystem;
using matcha::InputError;
using matcha::IoError;
using matcha::Particles;
using matcha::io::ProjectionAxis;
using matcha::io::ProjectionView;
using matcha::io::SurfaceDensityMap;
using matcha::testing::ScratchDir;

/// A PNG read back with Cairo: 8-bit red, green, blue per pixel.
struct Png {
  int width = 0, height = 0;
  std::vector<std::array<int, 3>> rgb;  // row by row from the top
  std::array<int, 3> at(int x, int y) const { return rgb[static_cast<std::size_t>(y) * width + x]; }
};

Png readPng(const fs::path& path) {
  cairo_surface_t* surface = cairo_image_surface_create_from_png(path.c_str());
  Png png;
  if (cairo_surface_status(surface) != CAIRO_STATUS_SUCCESS) {
    ADD_FAILURE() << "cannot read " << path << ": " << cairo_status_to_string(cairo_surface_status(surface));
    cairo_surface_destroy(surface);
    return png;
  }
  png.width = cairo_image_surface_get_width(surface);
  png.height = cairo_image_surface_get_height(surface);
  const unsigned char* data = cairo_image_surface_get_data(surface);
  const int stride = cairo_image_surface_get_stride(surface);
  for (int y = 0; y < png.height; ++y) {
    const auto* line = reinterpret_cast<const std::uint32_t*>(data + static_cast<std::ptrdiff_t>(y) * stride);
    for (int x = 0; x < png.width; ++x) {
      png.rgb.push_back({static_cast<int>((line[x] >> 16) & 255), static_cast<int>((line[x] >> 8) & 255),
                         static_cast<int>(line[x] & 255)});
    }
  }
  cairo_surface_destroy(surface);
  return png;
}

double luma(const std::array<int, 3>& rgb) { return 0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2]; }

/// The known input: testing::clumpInHalo (a Plummer clump of scale radius 0.01 holding 30% of the mass at
/// (0.7, -0.3, 0.2) inside a Plummer halo of scale radius 1 around the origin) plus a uniform background of as many
/// bodies again in [-1, 1)^3.
Particles clumpHaloAndBackground(std::size_t n, std::uint64_t seed) {
  Particles p = matcha::testing::clumpInHalo(n, seed);
  const Particles background = matcha::testing::uniformCube(n, seed + 1, 1.0);
  const std::size_t first = p.size();
  p.resize(first + background.size());
  for (std::size_t i = 0; i < background.size(); ++i) {
    p.x[first + i] = background.x[i];
    p.y[first + i] = background.y[i];
    p.z[first + i] = background.z[i];
    p.mass[first + i] = background.mass[i];
  }
  return p;
}

ProjectionView view(ProjectionAxis axis, double width, int pixels) {
  ProjectionView v;
  v.axis = axis;
  v.width = width;
  v.pixels = pixels;
  return v;
}

TEST(DensityImage, SizeFollowsTheDocumentedLayout) {
  EXPECT_EQ(matcha::io::annotationFontSize(1024), 26);
  EXPECT_EQ(matcha::io::annotationFontSize(16), 11);
  const auto expectSize = [](int pixels, int width, int height) {
    const matcha::io::ImageSize size = matcha::io::densityImageSize(pixels);
    EXPECT_EQ(size.width, width) << pixels;
    EXPECT_EQ(size.height, height) << pixels;
  };
  expectSize(1024, 1219, 1097);  // the numbers the header and README give
  expectSize(512, 610, 549);
  expectSize(16, 16 + 83, 16 + 31);
  expectSize(16384, 16384 + 3075, 16384 + 1148);  // f = 410
}

// The test: the render of a known input writes a PNG of the right size whose brightest pixel is at the
// density peak, here along each axis. The field [-1, 1)^2 over 64 pixels (h = 1/32) puts the clump's centre 0.4 of
// a pixel into its pixel in every coordinate (0.7 -> 54.4, -0.3 -> 22.4, 0.2 -> 38.4), 0.1 from that pixel's
// centre: CIC gives that pixel the most.
TEST(DensityImage, TheBrightestPixelIsTheDensityPeakOfAKnownInput) {
  const std::uint64_t seed = matcha::testing::freshSeed();
  SCOPED_TRACE(matcha::testing::seedTrace(seed));
  const Particles p = clumpHaloAndBackground(20000, seed);
  ScratchDir dir;
  constexpr int kPixels = 64;
  auto pixelOf = [](double coordinate) { return static_cast<int>(std::floor((coordinate + 1.0) * 32.0)); };
  const auto& c = matcha::testing::kClumpCentre;
  for (const auto& [axis, u, v] : {std::tuple{ProjectionAxis::z, c[0], c[1]}, std::tuple{ProjectionAxis::x, c[1], c[2]},
                                   std::tuple{ProjectionAxis::y, c[2], c[0]}}) {
    SCOPED_TRACE("along " + matcha::io::toString(axis));
    const SurfaceDensityMap map = matcha::io::depositSurfaceDensity(p.sources(), view(axis, 2.0, kPixels));
    const fs::path path = dir / ("along-" + matcha::io::toString(axis) + ".png");
    matcha::io::DensityImageOptions options;
    options.time = 0.25;
    const matcha::io::ImageSize size = matcha::io::writeDensityImage(path, map, options);
    const Png png = readPng(path);
    ASSERT_EQ(png.width, matcha::io::densityImageSize(kPixels).width);
    ASSERT_EQ(png.height, matcha::io::densityImageSize(kPixels).height);
    EXPECT_EQ(size.width, png.width);
    EXPECT_EQ(size.height, png.height);
    // The brightest pixel of the map part, and that it is the only one that bright. The image's rows run from the top,
    // the map's from the bottom.
    double brightest = -1.0;
    std::vector<std::array<int, 2>> at;
    for (int y = 0; y < kPixels; ++y) {
      for (int x = 0; x < kPixels; ++x) {
        const double l = luma(png.at(x, y));
        if (l > brightest) at.clear();
        if (l >= brightest) {
          brightest = l;
          at.push_back({x, y});
        }
      }
    }
    ASSERT_EQ(at.size(), 1u) << "the peak is not a single pixel";
    EXPECT_EQ(at[0][0], pixelOf(u));
    EXPECT_EQ(at[0][1], kPixels - 1 - pixelOf(v));
    EXPECT_EQ(png.at(at[0][0], at[0][1]), (std::array<int, 3>{253, 231, 37})) << "viridis' top colour";
  }
}

TEST(DensityImage, TheMapPartHoldsColourMapColoursOnlyAndTheStripsAreWhite) {
  const std::uint64_t seed = matcha::testing::freshSeed();
  SCOPED_TRACE(matcha::testing::seedTrace(seed));
  const Particles p = matcha::testing::plummer(5000, seed);
  const SurfaceDensityMap map = matcha::io::depositSurfaceDensity(p.sources(), view(ProjectionAxis::z, 6.0, 100));
  ScratchDir dir;
  matcha::io::writeDensityImage(dir / "plummer.png", map, {});
  const Png png = readPng(dir / "plummer.png");
  std::set<std::array<int, 3>> palette;
  for (int k = 0; k < 256; ++k) {
    const auto rgb = matcha::io::viridisColour((k + 0.5) / 256.0);
    palette.insert({rgb[0], rgb[1], rgb[2]});
  }
  for (int y = 0; y < 100; ++y) {
    for (int x = 0; x < 100; ++x) ASSERT_TRUE(palette.count(png.at(x, y))) << x << ", " << y << " is not a map colour";
  }
  const std::array<int, 3> white{255, 255, 255};
  EXPECT_EQ(png.at(100, 0), white) << "the colour-bar strip starts right of the map";
  EXPECT_EQ(png.at(0, 100), white) << "the label strip starts below the map";
  EXPECT_EQ(png.at(png.width - 1, png.height - 1), white);
  // Empty pixels take the lowest colour. The corners of a 6-wide field around 5000 Plummer bodies are mostly empty, but
  // not always (seed 11392496168707004736 put a halo body's square into the top-left one): every pixel the deposit
  // left empty is checked (the image's row 0 is the map's top row).
  const auto lowest = matcha::io::viridisColour(0.0);
  int empty = 0;
  for (int row = 0; row < 100; ++row) {
    for (int column = 0; column < 100; ++column) {
      if (map.at(column, row) != 0.0) continue;
      ++empty;
      ASSERT_EQ(png.at(column, 99 - row), (std::array<int, 3>{lowest[0], lowest[1], lowest[2]}))
          << "empty pixel " << column << ", " << row << " of the map";
    }
  }
  EXPECT_GT(empty, 0) << "no empty pixel to check";
}

TEST(DensityImage, ColourScaleSpansTheDecadesBelowTheDensestPixel) {
  SurfaceDensityMap map;
  map.view = view(ProjectionAxis::z, 1.0, 16);
  map.sigma.assign(256, 0.0);
  map.sigma[17] = 1e3;
  map.sigma[40] = 2.0;
  const matcha::io::ColourScale scale = matcha::io::colourScale(map, 4.0);
  EXPECT_DOUBLE_EQ(scale.logMax, 3.0);
  EXPECT_DOUBLE_EQ(scale.logMin, -1.0);
  EXPECT_THROW(matcha::io::colourScale(map, 0.1), InputError);
  EXPECT_THROW(matcha::io::colourScale(map, std::nan("")), InputError);
  map.sigma.assign(256, 0.0);
  EXPECT_THROW(matcha::io::colourScale(map, 4.0), InputError) << "an empty field has no scale";
}

TEST(DensityImage, ViridisRunsFromDarkPurpleToTheBrightestYellow) {
  EXPECT_EQ(matcha::io::viridisColour(0.0), (std::array<std::uint8_t, 3>{68, 1, 84}));
  EXPECT_EQ(matcha::io::viridisColour(1.0), (std::array<std::uint8_t, 3>{253, 231, 37}));
  EXPECT_EQ(matcha::io::viridisColour(std::nan("")), matcha::io::viridisColour(0.0));
  const auto top = matcha::io::viridisColour(1.0);
  for (int k = 0; k < 255; ++k) {
    const auto rgb = matcha::io::viridisColour((k + 0.5) / 256.0);
    EXPECT_LT(luma({rgb[0], rgb[1], rgb[2]}), luma({top[0], top[1], top[2]})) << k;
  }
}

TEST(DensityImage, ScaleBarIsARoundLengthOfAtMostAQuarterOfTheField) {
  EXPECT_DOUBLE_EQ(matcha::io::scaleBarLength(4.0), 1.0);
  EXPECT_DOUBLE_EQ(matcha::io::scaleBarLength(10.0), 2.0);
  EXPECT_DOUBLE_EQ(matcha::io::scaleBarLength(13.15), 2.0);
  EXPECT_DOUBLE_EQ(matcha::io::scaleBarLength(2.0), 0.5);
  EXPECT_DOUBLE_EQ(matcha::io::scaleBarLength(0.3), 0.05);
  EXPECT_DOUBLE_EQ(matcha::io::scaleBarLength(40.0), 10.0);
  EXPECT_DOUBLE_EQ(matcha::io::scaleBarLength(7.9e5), 1e5);
}

TEST(DensityImage, LabelsSayNBodyUnitsOrWhatTheUnitsAre) {
  SurfaceDensityMap map;
  map.view = view(ProjectionAxis::y, 2.0, 64);
  matcha::io::DensityImageOptions options;
  options.time = 0.25;
  const matcha::io::DensityImageLabels plain = matcha::io::densityImageLabels(map, options);
  EXPECT_EQ(plain.scaleBar, "0.5");
  EXPECT_EQ(plain.time, "t = 0.25");
  EXPECT_EQ(plain.projection, "along y: z right, x up");
  EXPECT_NE(plain.colourBar.find("N-body units"), std::string::npos) << plain.colourBar;
  EXPECT_EQ(plain.logSigmaOffset, 0.0);
  // matcha's own /Units: 1 kpc, 1e10 Msun, G = 1 (time unit 4.7148 Myr).
  options.units = matcha::UnitSystem{};
  const matcha::io::DensityImageLabels physical = matcha::io::densityImageLabels(map, options);
  EXPECT_EQ(physical.scaleBar, "500 pc");
  EXPECT_EQ(physical.time, "t = 0.25 (1.179 Myr)");
  EXPECT_NE(physical.colourBar.find("pc\u207b\u00b2"), std::string::npos) << physical.colourBar;
  EXPECT_NEAR(physical.logSigmaOffset, 4.0, 1e-9) << "1e10 Msun / kpc^2 = 1e4 Msun / pc^2";
  map.view.width = 40.0;
  options.time = -2e4;  // a time unit of 4.7 Myr: 94 Gyr before
  const matcha::io::DensityImageLabels wide = matcha::io::densityImageLabels(map, options);
  EXPECT_EQ(wide.scaleBar, "10 kpc");
  EXPECT_EQ(wide.time, "t = \u221220000 (\u221294.3 Gyr)");
}

TEST(DensityImage, WritesAtomicallyReplacesAndFailsCleanly) {
  const Particles p = matcha::testing::plummer(500, 3);
  const SurfaceDensityMap map = matcha::io::depositSurfaceDensity(p.sources(), view(ProjectionAxis::z, 4.0, 32));
  ScratchDir dir;
  std::ofstream(dir / "old.png") << "not yet an image";
  EXPECT_FALSE(matcha::io::isPngFile(dir / "old.png"));
  matcha::io::writeDensityImage(dir / "old.png", map, {});
  EXPECT_TRUE(matcha::io::isPngFile(dir / "old.png"));
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"old.png"}) << "no temporary file is left behind";
  EXPECT_THROW(matcha::io::writeDensityImage(dir / "missing" / "a.png", map, {}), IoError);
  EXPECT_FALSE(fs::exists(dir / "missing"));
  SurfaceDensityMap empty = map;
  std::fill(empty.sigma.begin(), empty.sigma.end(), 0.0);
  EXPECT_THROW(matcha::io::writeDensityImage(dir / "empty.png", empty, {}), InputError);
  EXPECT_FALSE(fs::exists(dir / "empty.png"));
}

}  // namespace
