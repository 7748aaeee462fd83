// SPDX-License-Identifier: MIT
#include "matcha/io/projection.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_reduce.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <sstream>

#include "matcha/core/errors.hpp"

namespace matcha::io {
namespace {

/// Bodies per chunk in the bucketing passes. Fixed by N alone (never by the thread count), so that the order in which
/// a pixel's contributions are added, and hence the map, is the same on any machine. At least 2^16 bodies, and at
/// most 1024 chunks, which bounds the per-chunk row counts to 1024 x (pixels + 1) integers.
std::size_t chunkSize(std::size_t numBodies) {
  return std::max<std::size_t>(std::size_t{1} << 16, (numBodies + 1023) / 1024);
}

/// Bands of rows the deposit aims for: enough to keep 16 cores busy when the bodies crowd into a few rows (a band is
/// one task; bands are balanced by body counts, so the densest band is about 1/256 of the work unless a single row
/// holds more).
constexpr std::size_t kTargetBands = 256;

/// Where a body falls on the pixel grid, in pixel units with pixel centres at whole numbers: the body's square
/// spans [gx - 0.5, gx + 0.5] and overlaps the columns floor(gx) and floor(gx) + 1 with weights 1 - frac and frac.
struct GridPosition {
  double gx, gy;
};

/// Maps bodies onto the grid of a view: the plane's coordinates, the field's corner and 1 / pixel side.
class Grid {
 public:
  Grid(const SourceView& bodies, const ProjectionView& view) : pixels_(view.pixels) {
    const std::array<const double*, 3> coordinates{bodies.x, bodies.y, bodies.z};
    const auto [a, b] = planeAxes(view.axis);
    u_ = coordinates[static_cast<std::size_t>(a)];
    v_ = coordinates[static_cast<std::size_t>(b)];
    inversePixel_ = view.pixels / view.width;
    // Shifted by half a pixel so that pixel centres sit at whole numbers.
    u0_ = view.centre[static_cast<std::size_t>(a)] - 0.5 * view.width + 0.5 / inversePixel_;
    v0_ = view.centre[static_cast<std::size_t>(b)] - 0.5 * view.width + 0.5 / inversePixel_;
  }

  GridPosition at(std::size_t i) const { return {(u_[i] - u0_) * inversePixel_, (v_[i] - v0_) * inversePixel_}; }

  /// Whether the body's square overlaps the field: gx in [-1, pixels), gy likewise. Written so that NaN is outside
  /// and no huge value reaches an integer conversion.
  bool inField(const GridPosition& g) const { return g.gx >= -1.0 && g.gx < pixels_ && g.gy >= -1.0 && g.gy < pixels_; }

 private:
  const double* u_ = nullptr;
  const double* v_ = nullptr;
  double u0_ = 0.0, v0_ = 0.0, inversePixel_ = 1.0;
  int pixels_ = 0;
};

/// The lower row a body in the field touches: -1 to pixels - 1.
int lowerRow(const GridPosition& g) { return static_cast<int>(std::floor(g.gy)); }

std::string shortest(double value) {
  std::ostringstream text;
  text.precision(17);
  text << value;
  return text.str();
}

}  // namespace

std::string toString(ProjectionAxis axis) {
  switch (axis) {
    case ProjectionAxis::x:
      return "x";
    case ProjectionAxis::y:
      return "y";
    case ProjectionAxis::z:
      return "z";
  }
  return "?";
}

std::array<int, 2> planeAxes(ProjectionAxis axis) {
  switch (axis) {
    case ProjectionAxis::x:
      return {1, 2};
    case ProjectionAxis::y:
      return {2, 0};
    case ProjectionAxis::z:
      return {0, 1};
  }
  return {0, 1};
}

void validateView(const ProjectionView& view) {
  if (view.pixels < kMinPixels || view.pixels > kMaxPixels) {
    throw InputError("pixels must be " + std::to_string(kMinPixels) + " to " + std::to_string(kMaxPixels) + " (got " +
                     std::to_string(view.pixels) + ")");
  }
  if (!(std::isfinite(view.width) && view.width > 0.0)) {
    throw InputError("the width must be a finite length > 0 (got " + shortest(view.width) + ")");
  }
  for (const double c : view.centre) {
    if (!std::isfinite(c)) throw InputError("the centre must be three finite numbers (got " + shortest(c) + ")");
  }
}

SurfaceDensityMap depositSurfaceDensity(const SourceView& bodies, const ProjectionView& view) {
  validateView(view);
  const auto pixels = static_cast<std::size_t>(view.pixels);
  SurfaceDensityMap map;
  map.view = view;
  map.sigma.assign(pixels * pixels, 0.0);
  if (bodies.count == 0) return map;
  const Grid grid(bodies, view);

  // Pass 1: per chunk, how many bodies have each lower row (index lowerRow + 1: 0 .. pixels).
  const std::size_t chunk = chunkSize(bodies.count);
  const std::size_t numChunks = (bodies.count + chunk - 1) / chunk;
  const std::size_t numRowBins = pixels + 1;
  std::vector<std::uint32_t> rowCounts(numChunks * numRowBins, 0);
  tbb::parallel_for(std::size_t{0}, numChunks, [&](std::size_t c) {
    std::uint32_t* counts = rowCounts.data() + c * numRowBins;
    const std::size_t last = std::min(bodies.count, (c + 1) * chunk);
    for (std::size_t i = c * chunk; i < last; ++i) {
      const GridPosition g = grid.at(i);
      if (grid.inField(g)) ++counts[static_cast<std::size_t>(lowerRow(g) + 1)];
    }
  });
  std::vector<std::uint64_t> bodiesByLowerRow(numRowBins, 0);
  for (std::size_t c = 0; c < numChunks; ++c) {
    for (std::size_t r = 0; r < numRowBins; ++r) bodiesByLowerRow[r] += rowCounts[c * numRowBins + r];
  }
  map.numBodiesInField =
      static_cast<std::size_t>(std::accumulate(bodiesByLowerRow.begin(), bodiesByLowerRow.end(), std::uint64_t{0}));
  if (map.numBodiesInField == 0) return map;

  // Bands of whole rows, each holding about 1/kTargetBands of the bodies that touch them. A body touches its lower
  // row and the next; it is listed in the band of each (once when both are in one band), and each band adds only
  // into its own rows: no two tasks write one pixel, so no atomics and no per-thread maps are needed.
  std::vector<std::size_t> bandStart;  // first row of each band; a last entry `pixels` closes the list
  {
    std::uint64_t total = 0;
    for (std::size_t row = 0; row < pixels; ++row) total += bodiesByLowerRow[row + 1] + bodiesByLowerRow[row];
    const std::uint64_t target = std::max<std::uint64_t>(1, total / kTargetBands);
    std::uint64_t load = 0;
    bandStart.push_back(0);
    for (std::size_t row = 0; row < pixels; ++row) {
      load += bodiesByLowerRow[row + 1] + bodiesByLowerRow[row];
      if (load >= target && row + 1 < pixels) {
        bandStart.push_back(row + 1);
        load = 0;
      }
    }
    bandStart.push_back(pixels);
  }
  const std::size_t numBands = bandStart.size() - 1;
  std::vector<std::uint32_t> bandOfRow(pixels);
  for (std::size_t b = 0; b < numBands; ++b) {
    std::fill(bandOfRow.begin() + static_cast<std::ptrdiff_t>(bandStart[b]),
              bandOfRow.begin() + static_cast<std::ptrdiff_t>(bandStart[b + 1]), static_cast<std::uint32_t>(b));
  }

  // Bucket sizes per (chunk, band), from the row counts: band b lists the bodies whose lower row lies in
  // [first - 1, last], i.e. row bins [first, last + 1].
  std::vector<std::uint64_t> offsets(numChunks * numBands);  // [c * numBands + b]: where chunk c writes into band b
  tbb::parallel_for(std::size_t{0}, numChunks, [&](std::size_t c) {
    const std::uint32_t* counts = rowCounts.data() + c * numRowBins;
    for (std::size_t b = 0; b < numBands; ++b) {
      std::uint64_t n = 0;
      for (std::size_t bin = bandStart[b]; bin <= bandStart[b + 1]; ++bin) n += counts[bin];
      offsets[c * numBands + b] = n;
    }
  });
  // Exclusive prefix sum in (band, chunk) order: each band's bodies are contiguous, chunk by chunk, in body order.
  std::vector<std::uint64_t> bandBegin(numBands + 1, 0);
  {
    std::uint64_t running = 0;
    for (std::size_t b = 0; b < numBands; ++b) {
      bandBegin[b] = running;
      for (std::size_t c = 0; c < numChunks; ++c) {
        const std::uint64_t n = offsets[c * numBands + b];
        offsets[c * numBands + b] = running;
        running += n;
      }
    }
    bandBegin[numBands] = running;
  }

  // Pass 2: scatter each body's grid position and mass into its band(s).
  struct Deposit {
    double gx, gy, mass;
  };
  std::vector<Deposit> buckets(static_cast<std::size_t>(bandBegin[numBands]));
  tbb::parallel_for(std::size_t{0}, numChunks, [&](std::size_t c) {
    std::uint64_t* cursor = offsets.data() + c * numBands;  // this chunk's own slots: no other task touches them
    const std::size_t last = std::min(bodies.count, (c + 1) * chunk);
    for (std::size_t i = c * chunk; i < last; ++i) {
      const GridPosition g = grid.at(i);
      if (!grid.inField(g)) continue;
      const Deposit d{g.gx, g.gy, bodies.mass[i]};
      const int row = lowerRow(g);
      std::uint32_t band = ~std::uint32_t{0};
      if (row >= 0) {
        band = bandOfRow[static_cast<std::size_t>(row)];
        buckets[cursor[band]++] = d;
      }
      if (row + 1 < view.pixels && bandOfRow[static_cast<std::size_t>(row + 1)] != band) {
        buckets[cursor[bandOfRow[static_cast<std::size_t>(row + 1)]]++] = d;
      }
    }
  });

  // Pass 3: each band adds its bodies into its own rows, then turns mass per pixel into mass per area.
  const double inversePixelArea = 1.0 / (map.pixelSide() * map.pixelSide());
  const int columns = view.pixels;
  tbb::parallel_for(std::size_t{0}, numBands, [&](std::size_t b) {
    const int firstRow = static_cast<int>(bandStart[b]);
    const int endRow = static_cast<int>(bandStart[b + 1]);
    double* sigma = map.sigma.data();
    for (std::uint64_t k = bandBegin[b]; k < bandBegin[b + 1]; ++k) {
      const Deposit& d = buckets[k];
      const double floorX = std::floor(d.gx), floorY = std::floor(d.gy);
      const int column = static_cast<int>(floorX), row = static_cast<int>(floorY);
      const double fx = d.gx - floorX, fy = d.gy - floorY;
      const double weightX[2] = {1.0 - fx, fx};
      const double weightY[2] = {(1.0 - fy) * d.mass, fy * d.mass};
      for (int dy = 0; dy < 2; ++dy) {
        const int r = row + dy;
        if (r < firstRow || r >= endRow) continue;
        double* line = sigma + static_cast<std::size_t>(r) * pixels;
        for (int dx = 0; dx < 2; ++dx) {
          const int col = column + dx;
          if (col >= 0 && col < columns) line[col] += weightX[dx] * weightY[dy];
        }
      }
    }
    for (std::size_t k = static_cast<std::size_t>(firstRow) * pixels; k < static_cast<std::size_t>(endRow) * pixels;
         ++k) {
      sigma[k] *= inversePixelArea;
    }
  });
  return map;
}

std::array<double, 3> centreOfMass(const SourceView& bodies) {
  if (bodies.count == 0) throw InputError("the centre of mass of no bodies is undefined");
  struct Sums {
    double mass = 0.0, x = 0.0, y = 0.0, z = 0.0;
  };
  // Fixed blocks combined in a fixed tree: the same centre whatever the number of threads.
  const Sums sums = tbb::parallel_deterministic_reduce(
      tbb::blocked_range<std::size_t>(0, bodies.count, 16384), Sums{},
      [&](const tbb::blocked_range<std::size_t>& block, Sums s) {
        for (std::size_t i = block.begin(); i != block.end(); ++i) {
          const double m = bodies.mass[i];
          s.mass += m;
          s.x += m * bodies.x[i];
          s.y += m * bodies.y[i];
          s.z += m * bodies.z[i];
        }
        return s;
      },
      [](Sums a, const Sums& b) {
        a.mass += b.mass;
        a.x += b.x;
        a.y += b.y;
        a.z += b.z;
        return a;
      });
  if (!(sums.mass > 0.0)) throw InputError("the total mass is " + shortest(sums.mass) + ", not > 0");
  return {sums.x / sums.mass, sums.y / sums.mass, sums.z / sums.mass};
}

double enclosingWidth(const SourceView& bodies, ProjectionAxis axis, const std::array<double, 3>& centre,
                      double massFraction) {
  if (!(massFraction > 0.0 && massFraction <= 1.0)) {
    throw InputError("the enclosed mass fraction must be in (0, 1] (got " + shortest(massFraction) + ")");
  }
  if (bodies.count == 0) throw InputError("no bodies to frame");
  const std::array<const double*, 3> coordinates{bodies.x, bodies.y, bodies.z};
  const auto [a, b] = planeAxes(axis);
  const double* u = coordinates[static_cast<std::size_t>(a)];
  const double* v = coordinates[static_cast<std::size_t>(b)];
  const double uc = centre[static_cast<std::size_t>(a)], vc = centre[static_cast<std::size_t>(b)];
  // Half side of the smallest centred square that holds body i.
  auto reach = [&](std::size_t i) { return std::max(std::abs(u[i] - uc), std::abs(v[i] - vc)); };
  const tbb::blocked_range<std::size_t> all(0, bodies.count, 16384);

  struct Extent {
    double mass = 0.0, maxReach = 0.0;
  };
  const Extent extent = tbb::parallel_deterministic_reduce(
      all, Extent{},
      [&](const tbb::blocked_range<std::size_t>& block, Extent e) {
        for (std::size_t i = block.begin(); i != block.end(); ++i) {
          e.mass += bodies.mass[i];
          e.maxReach = std::max(e.maxReach, reach(i));
        }
        return e;
      },
      [](Extent x, const Extent& y) {
        return Extent{x.mass + y.mass, std::max(x.maxReach, y.maxReach)};
      });
  if (!(extent.mass > 0.0)) throw InputError("the total mass is " + shortest(extent.mass) + ", not > 0");
  if (massFraction == 1.0 || extent.maxReach == 0.0) return 2.0 * extent.maxReach;

  // The mass-weighted quantile of the reach, by refining one histogram bin at a time: each pass splits [low, high]
  // into kBins and keeps the bin where the enclosed mass crosses the target. Three or four passes reach 1e-6 even
  // when a few escapers sit 10^4 times farther out than the bulk.
  constexpr std::size_t kBins = 4096;
  const double target = massFraction * extent.mass;
  double low = 0.0, high = extent.maxReach;
  double massBelowLow = 0.0;  // mass with reach < low
  while (high - low > 1e-6 * high) {
    const double binWidth = (high - low) / kBins;
    using Histogram = std::vector<double>;
    const Histogram histogram = tbb::parallel_deterministic_reduce(
        all, Histogram(kBins, 0.0),
        [&](const tbb::blocked_range<std::size_t>& block, Histogram h) {
          for (std::size_t i = block.begin(); i != block.end(); ++i) {
            const double r = reach(i);
            if (r < low || r > high) continue;
            const auto bin = std::min(kBins - 1, static_cast<std::size_t>((r - low) / binWidth));
            h[bin] += bodies.mass[i];
          }
          return h;
        },
        [](Histogram x, const Histogram& y) {
          for (std::size_t k = 0; k < kBins; ++k) x[k] += y[k];
          return x;
        });
    std::size_t bin = 0;
    double enclosed = massBelowLow;
    for (; bin + 1 < kBins; ++bin) {
      if (enclosed + histogram[bin] >= target) break;
      enclosed += histogram[bin];
    }
    massBelowLow = enclosed;
    const double newLow = low + static_cast<double>(bin) * binWidth;
    high = bin + 1 < kBins ? low + static_cast<double>(bin + 1) * binWidth : high;
    low = newLow;
  }
  return 2.0 * high;
}

}  // namespace matcha::io
