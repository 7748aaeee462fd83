// SPDX-License-Identifier: MIT
#include "matcha/io/projection.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_reduce.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <sstream>

#include "matcha/core/errors.hpp"

namespace matcha::io {
namespace {

/// How many slabs of bodies deposit in parallel, each into a map of its own: at most 16 (enough for a 16-core host),
/// at most what 512 MiB of slab maps allow (16 up to 2048 pixels, 4 at 4096, 1 from 5793 on: larger maps are
/// deposited by one task), and none with fewer than 2^15 bodies (a map costs more to clear than they cost to add).
/// A function of N and the pixels only, never of the threads, so that the sums are the same on any machine.
std::size_t slabCount(std::size_t numBodies, std::size_t pixels) {
  constexpr std::size_t kMaxSlabs = 16;
  constexpr std::size_t kSlabMemory = std::size_t{512} << 20;
  constexpr std::size_t kMinBodiesPerSlab = std::size_t{1} << 15;
  const std::size_t byMemory = std::max<std::size_t>(1, kSlabMemory / (pixels * pixels * sizeof(double)));
  const std::size_t byBodies = std::max<std::size_t>(1, numBodies / kMinBodiesPerSlab);
  return std::min({kMaxSlabs, byMemory, byBodies});
}

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

double smallestResolvableWidth(int pixels, const std::array<double, 3>& centre) {
  double largestCoordinate = 0.0;
  for (const double c : centre) largestCoordinate = std::max(largestCoordinate, std::abs(c));
  return pixels * std::max(1e-150, 1e-12 * largestCoordinate);
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
  // The other side: pixels whose area's inverse underflows (masses over it would all read 0).
  if (view.width / view.pixels > 1e150) {
    throw InputError("the width " + shortest(view.width) + " is too large for " + std::to_string(view.pixels) +
                     " pixels (pixels of at most 1e150)");
  }
  if (view.width < smallestResolvableWidth(view.pixels, view.centre)) {
    throw InputError("the width " + shortest(view.width) + " is too small to resolve in " +
                     std::to_string(view.pixels) + " pixels around this centre (at least " +
                     shortest(smallestResolvableWidth(view.pixels, view.centre)) + ")");
  }
}

SurfaceDensityMap depositSurfaceDensity(const SourceView& bodies, const ProjectionView& view) {
  validateView(view);
  const auto pixels = static_cast<std::size_t>(view.pixels);
  const std::size_t numPixels = pixels * pixels;
  SurfaceDensityMap map;
  map.view = view;
  map.sigma.assign(numPixels, 0.0);
  if (bodies.count == 0) return map;
  const Grid grid(bodies, view);

  // Slab s deposits bodies [s N / S, (s + 1) N / S) into a map of its own (slab 0 into the result), serially; the
  // slabs' maps are then added pixel by pixel in slab order. No two tasks write one pixel (no atomics), every slab has
  // the same number of bodies wherever they are (a dense clump costs no imbalance), and the summation order depends
  // on N and the pixels alone: the same bits on any number of threads.
  const std::size_t numSlabs = slabCount(bodies.count, pixels);
  std::vector<std::vector<double>> slabMaps(numSlabs - 1);
  std::vector<std::size_t> inField(numSlabs, 0);
  const double inversePixelArea = 1.0 / (map.pixelSide() * map.pixelSide());
  tbb::parallel_for(std::size_t{0}, numSlabs, [&](std::size_t s) {
    if (s > 0) slabMaps[s - 1].assign(numPixels, 0.0);
    double* sigma = s == 0 ? map.sigma.data() : slabMaps[s - 1].data();
    const std::size_t first = bodies.count * s / numSlabs, last = bodies.count * (s + 1) / numSlabs;
    const int maxIndex = view.pixels - 1;
    std::size_t count = 0;
    for (std::size_t i = first; i < last; ++i) {
      const GridPosition g = grid.at(i);
      if (!grid.inField(g)) continue;
      ++count;
      const double floorX = std::floor(g.gx), floorY = std::floor(g.gy);
      const int column = static_cast<int>(floorX), row = static_cast<int>(floorY);
      const double fx = g.gx - floorX, fy = g.gy - floorY;
      // Mass per area: the pixel area is divided out here, once per body, rather than in a pass over the map.
      const double m = bodies.mass[i] * inversePixelArea;
      const double w00 = (1.0 - fx) * (1.0 - fy) * m, w10 = fx * (1.0 - fy) * m;
      const double w01 = (1.0 - fx) * fy * m, w11 = fx * fy * m;
      if (column >= 0 && column < maxIndex && row >= 0 && row < maxIndex) {  // all four pixels in the map
        double* lower = sigma + static_cast<std::size_t>(row) * pixels + static_cast<std::size_t>(column);
        lower[0] += w00;
        lower[1] += w10;
        lower[pixels] += w01;
        lower[pixels + 1] += w11;
        continue;
      }
      auto add = [&](int c, int r, double w) {
        if (c >= 0 && c <= maxIndex && r >= 0 && r <= maxIndex) {
          sigma[static_cast<std::size_t>(r) * pixels + static_cast<std::size_t>(c)] += w;
        }
      };
      add(column, row, w00);
      add(column + 1, row, w10);
      add(column, row + 1, w01);
      add(column + 1, row + 1, w11);
    }
    inField[s] = count;
  });
  if (numSlabs > 1) {
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, numPixels, 16384),
                      [&](const tbb::blocked_range<std::size_t>& block) {
                        for (const std::vector<double>& slab : slabMaps) {
                          for (std::size_t k = block.begin(); k != block.end(); ++k) map.sigma[k] += slab[k];
                        }
                      });
  }
  map.numBodiesInField = std::accumulate(inField.begin(), inField.end(), std::size_t{0});
  // Finite masses over a normal pixel area can still exceed a double (masses near 1e300, pixels far below 1).
  if (!std::all_of(map.sigma.begin(), map.sigma.end(), [](double sigma) { return std::isfinite(sigma); })) {
    throw InputError("the surface density overflows a double: the masses are too large for pixels of side " +
                     shortest(map.pixelSide()));
  }
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
  // Until the bin holding the quantile is 1e-6 of its reach wide, or too narrow to split further in double: mass at
  // one point (reach 0 for the bulk, or below the smallest normal number) would otherwise halve the bins forever.
  while (high - low > 1e-6 * high && (high - low) / kBins >= std::numeric_limits<double>::min()) {
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
