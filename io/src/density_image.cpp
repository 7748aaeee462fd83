// SPDX-License-Identifier: MIT
// Density images through Cairo: the map's pixels are written straight into an image surface, the annotations are
// drawn with Cairo's text and path calls, and the PNG is encoded in memory and then written atomically.
#include "matcha/io/density_image.hpp"

#include <cairo.h>
#include <fcntl.h>
#include <tbb/parallel_for.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <numbers>
#include <system_error>
#include <vector>

#include "matcha/core/errors.hpp"
#include "viridis_table.hpp"

namespace matcha::io {
namespace {

constexpr double kParsecInCm = kKiloparsecInCm / 1e3;
constexpr double kYearInS = 365.25 * 86400.0;  // Julian year, as astronomers' Myr and Gyr use

std::string quoted(const std::filesystem::path& path) {
  std::string text = path.string();
  std::replace(text.begin(), text.end(), '\n', ' ');
  std::replace(text.begin(), text.end(), '\r', ' ');
  return "'" + text + "'";
}

/// printf-style "%.{digits}g", with U+2212 for a leading minus: a typeset minus is as wide as a plus, a hyphen is not.
std::string number(double value, int digits = 6) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*g", digits, value);
  std::string text = buffer;
  if (!text.empty() && text[0] == '-') text = "\u2212" + text.substr(1);
  return text;
}

/// A length in pc, kpc or Mpc, the largest that keeps its number >= 1 (pc below 1 pc too).
std::string physicalLength(double lengthInCm) {
  const double parsecs = lengthInCm / kParsecInCm;
  // A hair below 1 still counts as 1: a round code length times a unit that is a round number of pc.
  constexpr double kSlack = 1.0 - 1e-9;
  if (parsecs >= 1e6 * kSlack) return number(parsecs / 1e6, 4) + " Mpc";
  if (parsecs >= 1e3 * kSlack) return number(parsecs / 1e3, 4) + " kpc";
  return number(parsecs, 4) + " pc";
}

/// A time in kyr, Myr or Gyr, whichever puts its number in [1, 1000) (kyr below that too).
std::string physicalTime(double seconds) {
  const double myr = seconds / (1e6 * kYearInS);
  if (myr == 0.0) return "0 Myr";
  if (std::abs(myr) >= 1e3) return number(myr / 1e3, 4) + " Gyr";
  if (std::abs(myr) >= 1.0) return number(myr, 4) + " Myr";
  return number(myr * 1e3, 4) + " kyr";
}

/// Tick spacing in decades: the smallest of 0.5, 1, 2, 5, 10 that leaves at most 7 ticks on the bar.
double tickStep(double decades) {
  for (const double step : {0.5, 1.0, 2.0, 5.0, 10.0}) {
    if (decades / step <= 7.0) return step;
  }
  return 10.0;
}

/// Owns a Cairo object and releases it with its destroy function.
template <class T, void (*Destroy)(T*)>
struct CairoDeleter {
  void operator()(T* object) const { Destroy(object); }
};
using Surface = std::unique_ptr<cairo_surface_t, CairoDeleter<cairo_surface_t, cairo_surface_destroy>>;
using Context = std::unique_ptr<cairo_t, CairoDeleter<cairo_t, cairo_destroy>>;

/// The map's pixels, colour-mapped, into the top-left corner of `surface` (RGB24). Rows are flipped: the map's row 0
/// is its bottom, the image's row 0 its top.
void paintMap(cairo_surface_t* surface, const SurfaceDensityMap& map, const ColourScale& scale) {
  cairo_surface_flush(surface);
  unsigned char* data = cairo_image_surface_get_data(surface);
  const int stride = cairo_image_surface_get_stride(surface);
  const int pixels = map.view.pixels;
  const double inverseRange = 1.0 / (scale.logMax - scale.logMin);
  // The 256 colours as Cairo's native RGB24 words (0x00RRGGBB in host byte order).
  std::array<std::uint32_t, 256> words{};
  for (std::size_t k = 0; k < words.size(); ++k) {
    const auto rgb = viridisColour((static_cast<double>(k) + 0.5) / 256.0);
    words[k] = (std::uint32_t{rgb[0]} << 16) | (std::uint32_t{rgb[1]} << 8) | std::uint32_t{rgb[2]};
  }
  tbb::parallel_for(0, pixels, [&](int row) {
    auto* line = reinterpret_cast<std::uint32_t*>(data + static_cast<std::ptrdiff_t>(pixels - 1 - row) * stride);
    for (int column = 0; column < pixels; ++column) {
      const double sigma = map.at(column, row);
      int index = 0;
      if (sigma > 0.0) {
        // NaN (a degenerate scale) takes the first colour: static_cast<int> of NaN is undefined.
        const double level = (std::log10(sigma) - scale.logMin) * inverseRange * 256.0;
        index = level >= 255.0 ? 255 : (level > 0.0 ? static_cast<int>(level) : 0);
      }
      line[column] = words[static_cast<std::size_t>(index)];
    }
  });
  cairo_surface_mark_dirty(surface);
}

/// Where the colour bar's colours lie in the image: whole pixels, so that its bands have no seams.
struct ColourBarBox {
  int left, right, top, bottom;  // [left, right) x [top, bottom)
};
ColourBarBox colourBarBox(int pixels) {
  const double f = annotationFontSize(pixels);
  return {pixels + static_cast<int>(std::lround(0.6 * f)), pixels + static_cast<int>(std::lround(1.6 * f)),
          static_cast<int>(std::lround(0.5 * f)), pixels - static_cast<int>(std::lround(0.5 * f))};
}

/// The colour bar's pixels: the lowest colour at the bottom, the highest at the top, each row the colour of the
/// fraction at its middle.
void paintColourBar(cairo_surface_t* surface, int pixels) {
  cairo_surface_flush(surface);
  unsigned char* data = cairo_image_surface_get_data(surface);
  const int stride = cairo_image_surface_get_stride(surface);
  const ColourBarBox box = colourBarBox(pixels);
  const double height = box.bottom - box.top;
  for (int y = box.top; y < box.bottom; ++y) {
    const auto rgb = viridisColour((box.bottom - y - 0.5) / height);
    const std::uint32_t word = (std::uint32_t{rgb[0]} << 16) | (std::uint32_t{rgb[1]} << 8) | std::uint32_t{rgb[2]};
    auto* line = reinterpret_cast<std::uint32_t*>(data + static_cast<std::ptrdiff_t>(y) * stride);
    std::fill(line + box.left, line + box.right, word);
  }
  cairo_surface_mark_dirty(surface);
}

/// The width of `text` in the current font, in pixels.
double textWidth(cairo_t* cr, const std::string& text) {
  cairo_text_extents_t extents;
  cairo_text_extents(cr, text.c_str(), &extents);
  return extents.x_advance;
}

void showText(cairo_t* cr, double x, double y, const std::string& text) {
  cairo_move_to(cr, x, y);
  cairo_show_text(cr, text.c_str());
}

/// The annotations in the two strips (never inside the map).
void drawAnnotations(cairo_t* cr, const SurfaceDensityMap& map, const ColourScale& scale,
                     const DensityImageLabels& labels) {
  const int pixels = map.view.pixels;
  const ImageSize size = densityImageSize(pixels);
  const double f = annotationFontSize(pixels);
  cairo_select_font_face(cr, "DejaVu Sans", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_source_rgb(cr, 0.0, 0.0, 0.0);
  cairo_set_line_width(cr, std::max(1.0, 0.08 * f));

  // Colour bar (its colours are painted by paintColourBar) with a thin frame.
  const ColourBarBox box = colourBarBox(pixels);
  const double barLeft = box.left, barWidth = box.right - box.left;
  const double barTop = box.top, barBottom = box.bottom, barHeight = barBottom - barTop;
  cairo_rectangle(cr, barLeft, barTop, barWidth, barHeight);
  cairo_stroke(cr);

  // Ticks at whole multiples of the step in the labels' units (log10 Sigma plus the unit offset).
  cairo_set_font_size(cr, 0.9 * f);
  const double shown0 = scale.logMin + labels.logSigmaOffset, shown1 = scale.logMax + labels.logSigmaOffset;
  const double step = tickStep(shown1 - shown0);
  for (double tick = std::ceil(shown0 / step - 1e-9) * step; tick <= shown1 + 1e-9 * step; tick += step) {
    const double y = barBottom - barHeight * (tick - shown0) / (shown1 - shown0);
    cairo_move_to(cr, barLeft + barWidth, y);
    cairo_line_to(cr, barLeft + barWidth + 0.3 * f, y);
    cairo_stroke(cr);
    showText(cr, barLeft + barWidth + 0.45 * f, y + 0.32 * f, number(std::abs(tick) < 1e-9 ? 0.0 : tick, 3));
  }
  // The quantity, rotated along the outer edge, shrunk to fit the bar's length when it would not.
  cairo_set_font_size(cr, f);
  const double labelWidth = textWidth(cr, labels.colourBar);
  if (labelWidth > barHeight) cairo_set_font_size(cr, f * barHeight / labelWidth);
  const double fitted = std::min(labelWidth, barHeight);
  cairo_save(cr);
  cairo_translate(cr, size.width - 0.55 * f, barTop + 0.5 * (barHeight + fitted));
  cairo_rotate(cr, -0.5 * std::numbers::pi);
  showText(cr, 0.0, 0.0, labels.colourBar);
  cairo_restore(cr);

  // Bottom strip, two rows: the scale bar under the map's left edge with its length beside it; below, the
  // projection on the left and the time in the bottom-right corner (in a smaller font when they would not fit side
  // by side: small maps).
  const double barLength = scaleBarLength(map.view.width) / map.pixelSide();  // in pixels
  const double x0 = 0.6 * f, barY = pixels + 0.75 * f, cap = 0.25 * f;
  cairo_set_line_width(cr, std::max(1.0, 0.12 * f));
  cairo_move_to(cr, x0, barY);
  cairo_line_to(cr, x0 + barLength, barY);
  cairo_move_to(cr, x0, barY - cap);
  cairo_line_to(cr, x0, barY + cap);
  cairo_move_to(cr, x0 + barLength, barY - cap);
  cairo_line_to(cr, x0 + barLength, barY + cap);
  cairo_stroke(cr);
  cairo_set_font_size(cr, 0.9 * f);
  showText(cr, x0 + barLength + 0.4 * f, barY + 0.32 * f, labels.scaleBar);

  cairo_set_font_size(cr, f);
  const double gap = 1.0 * f, margin = 0.6 * f;
  const double needed = textWidth(cr, labels.projection) + textWidth(cr, labels.time) + gap + 2.0 * margin;
  if (needed > size.width) cairo_set_font_size(cr, f * size.width / needed);
  const double baseline = pixels + 2.1 * f;
  showText(cr, x0, baseline, labels.projection);
  showText(cr, size.width - margin - textWidth(cr, labels.time), baseline, labels.time);
}

/// Writes `bytes` to `path` atomically (see writeDensityImage). Throws IoError naming `path`.
void writeFileAtomically(const std::filesystem::path& path, const std::string& bytes) {
  static std::atomic<unsigned> counter{0};  // tells apart concurrent writes of one process
  // Appended piece by piece: GCC 12 warns, wrongly, on a chain of operator+ here (as in run_folder.cpp).
  std::string name = ".";
  name.append(path.filename().string()).append(".tmp-").append(std::to_string(::getpid()));
  name.append("-").append(std::to_string(counter.fetch_add(1)));
  const std::filesystem::path temporary = path.parent_path() / name;
  auto fail = [&](const std::string& what, int code) {
    ::unlink(temporary.c_str());
    throw IoError("cannot write " + quoted(path) + ": " + what + ": " +
                  std::error_code(code, std::generic_category()).message());
  };
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int code = errno;  // before anything else can change it
    throw IoError("cannot write " + quoted(path) +
                  ": creating a temporary file beside it: " + std::error_code(code, std::generic_category()).message());
  }
  std::size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int code = n < 0 ? errno : ENOSPC;
      ::close(fd);
      fail("writing", code);
    }
    written += static_cast<std::size_t>(n);
  }
  // Synced before the rename, so that the name never points at data that are only in the page cache.
  if (::fsync(fd) != 0) {
    const int code = errno;
    ::close(fd);
    fail("syncing", code);
  }
  if (::close(fd) != 0) fail("closing", errno);
  if (::rename(temporary.c_str(), path.c_str()) != 0) fail("renaming the temporary file", errno);
  const std::filesystem::path dir = path.parent_path().empty() ? std::filesystem::path(".") : path.parent_path();
  if (const int dirFd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dirFd >= 0) {
    ::fsync(dirFd);  // best effort: makes the rename durable where the file system allows it
    ::close(dirFd);
  }
}

}  // namespace

int annotationFontSize(int pixels) { return std::max(11, static_cast<int>(std::lround(pixels / 40.0))); }

ImageSize densityImageSize(int pixels) {
  const int f = annotationFontSize(pixels);
  return {pixels + static_cast<int>(std::ceil(7.5 * f)), pixels + static_cast<int>(std::ceil(2.8 * f))};
}

ColourScale colourScale(const SurfaceDensityMap& map, double decades) {
  if (!(decades >= kMinDecades && decades <= kMaxDecades)) {
    throw InputError("decades must be " + number(kMinDecades) + " to " + number(kMaxDecades) + " (got " +
                     number(decades) + ")");
  }
  const double peak = map.sigma.empty() ? 0.0 : *std::max_element(map.sigma.begin(), map.sigma.end());
  if (!(peak > 0.0)) throw InputError("no mass falls in the field of view: nothing to draw");
  const double top = std::log10(peak);
  return {top - decades, top};
}

std::array<std::uint8_t, 3> viridisColour(double fraction) {
  const double clamped = std::isnan(fraction) ? 0.0 : std::clamp(fraction, 0.0, 1.0);
  const auto index = std::min<std::size_t>(255, static_cast<std::size_t>(clamped * 256.0));
  std::array<std::uint8_t, 3> rgb{};
  for (std::size_t c = 0; c < 3; ++c) {
    rgb[c] = static_cast<std::uint8_t>(std::lround(255.0 * detail::kViridis[index][c]));
  }
  return rgb;
}

double scaleBarLength(double width) {
  const double limit = 0.25 * width;
  const double decade = std::pow(10.0, std::floor(std::log10(limit)));
  for (const double mantissa : {5.0, 2.0, 1.0}) {
    // A hair of tolerance: 0.25 * 4 must give 1, not 0.5, when log10 and pow round the wrong way.
    if (mantissa * decade <= limit * (1.0 + 1e-12)) return mantissa * decade;
  }
  return 0.5 * decade;  // limit just under a power of ten that floor(log10) rounded up
}

DensityImageLabels densityImageLabels(const SurfaceDensityMap& map, const DensityImageOptions& options) {
  DensityImageLabels labels;
  const double bar = scaleBarLength(map.view.width);
  const std::string axis = toString(map.view.axis);
  const auto [u, v] = planeAxes(map.view.axis);
  const char* names[] = {"x", "y", "z"};
  labels.projection = "along " + axis + ": " + names[u] + " right, " + names[v] + " up";
  labels.time = "t = " + number(options.time);
  if (options.units) {
    const UnitSystem& units = *options.units;
    labels.scaleBar = physicalLength(bar * units.lengthInCm);
    labels.colourBar = "log\u2081\u2080 \u03a3  [M\u2609 pc\u207b\u00b2]";
    const double parsecs = units.lengthInCm / kParsecInCm;
    labels.logSigmaOffset = std::log10(units.massInGram / kSolarMassInGram) - 2.0 * std::log10(parsecs);
    labels.time += " (" + physicalTime(options.time * units.lengthInCm / units.velocityInCmPerS) + ")";
  } else {
    labels.scaleBar = number(bar);
    labels.colourBar = "log\u2081\u2080 \u03a3  (N-body units: mass / length\u00b2)";
  }
  return labels;
}

bool isPngFile(const std::filesystem::path& path) {
  static constexpr unsigned char kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  std::ifstream file(path, std::ios::binary);
  char head[8] = {};
  if (!file.read(head, sizeof head)) return false;
  return std::memcmp(head, kSignature, sizeof kSignature) == 0;
}

ImageSize writeDensityImage(const std::filesystem::path& path, const SurfaceDensityMap& map,
                            const DensityImageOptions& options) {
  validateView(map.view);
  const ColourScale scale = colourScale(map, options.decades);
  const DensityImageLabels labels = densityImageLabels(map, options);
  const ImageSize size = densityImageSize(map.view.pixels);

  Surface surface(cairo_image_surface_create(CAIRO_FORMAT_RGB24, size.width, size.height));
  if (cairo_surface_status(surface.get()) != CAIRO_STATUS_SUCCESS) {
    throw IoError("cannot write " + quoted(path) + ": cannot make a " + std::to_string(size.width) + " x " +
                  std::to_string(size.height) +
                  " image: " + cairo_status_to_string(cairo_surface_status(surface.get())));
  }
  {
    Context cr(cairo_create(surface.get()));
    cairo_set_source_rgb(cr.get(), 1.0, 1.0, 1.0);
    cairo_paint(cr.get());
  }
  paintMap(surface.get(), map, scale);
  paintColourBar(surface.get(), map.view.pixels);
  {
    Context cr(cairo_create(surface.get()));
    drawAnnotations(cr.get(), map, scale, labels);
    if (cairo_status(cr.get()) != CAIRO_STATUS_SUCCESS) {
      throw IoError("cannot write " + quoted(path) +
                    ": drawing the annotations failed: " + cairo_status_to_string(cairo_status(cr.get())));
    }
  }
  std::string bytes;
  auto append = [](void* closure, const unsigned char* data, unsigned int length) -> cairo_status_t {
    try {
      static_cast<std::string*>(closure)->append(reinterpret_cast<const char*>(data), length);
    } catch (...) {
      return CAIRO_STATUS_WRITE_ERROR;  // never let an exception cross the C library
    }
    return CAIRO_STATUS_SUCCESS;
  };
  const cairo_status_t status = cairo_surface_write_to_png_stream(surface.get(), append, &bytes);
  if (status != CAIRO_STATUS_SUCCESS) {
    throw IoError("cannot write " + quoted(path) + ": encoding the PNG failed: " + cairo_status_to_string(status));
  }
  writeFileAtomically(path, bytes);
  return size;
}

}  // namespace matcha::io
