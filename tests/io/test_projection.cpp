// SPDX-License-Identifier: MIT
// Projected density maps: the plane of each axis, cloud-in-cell weights on hand-checkable bodies, mass conservation
// against an independent count of what lies in the field, the parallel deposit against a plain serial one
// (bit-identical whatever the threads), the centre of mass and the framing width.
#include <gtest/gtest.h>
#include <tbb/global_control.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "matcha/core/errors.hpp"
#include "matcha/io/projection.hpp"
#include "matcha/testing/generators.hpp"

namespace {

using matcha::InputError;
using matcha::Particles;
using matcha::io::ProjectionAxis;
using matcha::io::ProjectionView;
using matcha::io::SurfaceDensityMap;

Particles bodiesAt(const std::vector<std::array<double, 4>>& xyzm) {
  Particles p(xyzm.size());
  for (std::size_t i = 0; i < xyzm.size(); ++i) {
    p.x[i] = xyzm[i][0];
    p.y[i] = xyzm[i][1];
    p.z[i] = xyzm[i][2];
    p.mass[i] = xyzm[i][3];
    p.id[i] = i;
  }
  return p;
}

ProjectionView view(ProjectionAxis axis, std::array<double, 3> centre, double width, int pixels) {
  ProjectionView v;
  v.axis = axis;
  v.centre = centre;
  v.width = width;
  v.pixels = pixels;
  return v;
}

double mapMass(const SurfaceDensityMap& map) {
  double sum = 0.0;
  for (const double s : map.sigma) sum += s;
  return sum * map.pixelSide() * map.pixelSide();
}

/// The plainest CIC deposit: one body after another, serially, straight from the definition (each body a square of
/// one pixel's side; a pixel gets the mass of the square's part that covers it). The oracle for the parallel one.
std::vector<double> serialCic(const Particles& p, const ProjectionView& v) {
  const auto [a, b] = matcha::io::planeAxes(v.axis);
  const std::array<const std::vector<double>*, 3> coordinates{&p.x, &p.y, &p.z};
  const double h = v.width / v.pixels;
  const double u0 = v.centre[a] - v.width / 2, v0 = v.centre[b] - v.width / 2;
  std::vector<double> sigma(static_cast<std::size_t>(v.pixels) * v.pixels, 0.0);
  auto overlap = [](double lo1, double hi1, double lo2, double hi2) {
    return std::max(0.0, std::min(hi1, hi2) - std::max(lo1, lo2));
  };
  for (std::size_t i = 0; i < p.size(); ++i) {
    const double u = (*coordinates[a])[i], w = (*coordinates[b])[i];
    const int column = static_cast<int>(std::floor((u - u0) / h)), row = static_cast<int>(std::floor((w - v0) / h));
    for (int r = row - 1; r <= row + 1; ++r) {
      for (int c = column - 1; c <= column + 1; ++c) {
        if (r < 0 || c < 0 || r >= v.pixels || c >= v.pixels) continue;
        const double ox = overlap(u - h / 2, u + h / 2, u0 + c * h, u0 + (c + 1) * h);
        const double oy = overlap(w - h / 2, w + h / 2, v0 + r * h, v0 + (r + 1) * h);
        sigma[static_cast<std::size_t>(r) * v.pixels + c] += p.mass[i] * ox * oy / (h * h) / (h * h);
      }
    }
  }
  return sigma;
}

TEST(Projection, PlaneAxesAreRightHandedAndNamed) {
  // (u, v, axis) is a cyclic permutation of (x, y, z): u x v points along the axis, out of the picture.
  for (const auto& [axis, u, v, name] :
       {std::tuple{ProjectionAxis::x, 1, 2, "x"}, std::tuple{ProjectionAxis::y, 2, 0, "y"},
        std::tuple{ProjectionAxis::z, 0, 1, "z"}}) {
    EXPECT_EQ(matcha::io::planeAxes(axis), (std::array<int, 2>{u, v}));
    EXPECT_EQ(matcha::io::toString(axis), name);
  }
}

TEST(Projection, ABodyAtAPixelCentreFillsThatPixelAlone) {
  // Width 16 over 16 pixels: h = 1, the field [-8, 8)^2; pixel (3, 5) has its centre at (-4.5, -2.5).
  const Particles p = bodiesAt({{-4.5, -2.5, 0.3, 2.0}});
  const SurfaceDensityMap map = matcha::io::depositSurfaceDensity(p.sources(), view(ProjectionAxis::z, {}, 16.0, 16));
  EXPECT_EQ(map.numBodiesInField, 1u);
  for (int row = 0; row < 16; ++row) {
    for (int column = 0; column < 16; ++column) {
      EXPECT_EQ(map.at(column, row), column == 3 && row == 5 ? 2.0 : 0.0) << column << ", " << row;
    }
  }
}

TEST(Projection, CloudInCellSharesABodyByOverlap) {
  // A body a quarter pixel right of and half a pixel above the centre of pixel (3, 5): columns 3 and 4 get 3/4 and
  // 1/4, rows 5 and 6 one half each. Pixel side 0.5 (width 8 over 16 pixels): Sigma = mass share / 0.25.
  const Particles p = bodiesAt({{-4.0 + 3.5 * 0.5 + 0.125, -4.0 + 5.5 * 0.5 + 0.25, 0.0, 1.0}});
  const SurfaceDensityMap map = matcha::io::depositSurfaceDensity(p.sources(), view(ProjectionAxis::z, {}, 8.0, 16));
  EXPECT_DOUBLE_EQ(map.at(3, 5), 0.75 * 0.5 / 0.25);
  EXPECT_DOUBLE_EQ(map.at(4, 5), 0.25 * 0.5 / 0.25);
  EXPECT_DOUBLE_EQ(map.at(3, 6), 0.75 * 0.5 / 0.25);
  EXPECT_DOUBLE_EQ(map.at(4, 6), 0.25 * 0.5 / 0.25);
  EXPECT_DOUBLE_EQ(mapMass(map), 1.0);
}

TEST(Projection, EachAxisShowsItsOwnPlane) {
  // One body at (0.33, -0.47, 0.73) on a 20-pixel map of width 2 around the origin (h = 0.1, pixel k covers
  // [-1 + 0.1 k, -1 + 0.1 (k + 1))): in each coordinate it lies 0.02 from the centre of the pixel that contains it,
  // which therefore gets the largest share.
  const Particles p = bodiesAt({{0.33, -0.47, 0.73, 1.0}});
  auto pixelOf = [](double coordinate) { return static_cast<int>(std::floor((coordinate + 1.0) / 0.1)); };
  for (const auto& [axis, u, v] :
       {std::tuple{ProjectionAxis::z, 0.33, -0.47}, std::tuple{ProjectionAxis::x, -0.47, 0.73},
        std::tuple{ProjectionAxis::y, 0.73, 0.33}}) {
    SCOPED_TRACE(matcha::io::toString(axis));
    const SurfaceDensityMap map = matcha::io::depositSurfaceDensity(p.sources(), view(axis, {}, 2.0, 20));
    const auto peak = std::max_element(map.sigma.begin(), map.sigma.end()) - map.sigma.begin();
    EXPECT_EQ(peak % 20, pixelOf(u));
    EXPECT_EQ(peak / 20, pixelOf(v));
    EXPECT_NEAR(mapMass(map), 1.0, 1e-12);
  }
}

TEST(Projection, DepositHoldsExactlyTheMassOfTheCloudsInsideTheField) {
  const std::uint64_t seed = matcha::testing::freshSeed();
  SCOPED_TRACE(matcha::testing::seedTrace(seed));
  // Bodies in a cube wider than the field, with unequal masses; an odd pixel count and an off-centre field.
  Particles p = matcha::testing::uniformCube(20000, seed, 1.5);
  std::mt19937_64 random(seed);
  for (double& m : p.mass) m = 0.5 + std::uniform_real_distribution<double>(0.0, 1.0)(random);
  const ProjectionView v = view(ProjectionAxis::y, {0.1, -0.2, 0.3}, 2.0, 37);
  const SurfaceDensityMap map = matcha::io::depositSurfaceDensity(p.sources(), v);
  // Independently: each body's square of side h, clipped to the field [c - 1, c + 1)^2 in (z, x).
  const double h = 2.0 / 37;
  double expected = 0.0;
  std::size_t touching = 0;
  auto inside = [h](double coordinate, double centre) {
    return std::max(0.0, std::min(coordinate + h / 2, centre + 1.0) - std::max(coordinate - h / 2, centre - 1.0)) / h;
  };
  for (std::size_t i = 0; i < p.size(); ++i) {
    const double share = inside(p.z[i], 0.3) * inside(p.x[i], 0.1);
    expected += p.mass[i] * share;
    touching += share > 0.0 ? 1 : 0;
  }
  EXPECT_NEAR(mapMass(map), expected, 1e-12 * expected);
  EXPECT_EQ(map.numBodiesInField, touching);
  // Fully inside (the cube [-0.5, 0.5]^3 is more than a pixel from the edges): every bit of mass is on the map.
  const Particles inner = matcha::testing::uniformCube(5000, seed + 1, 0.5);
  const SurfaceDensityMap all =
      matcha::io::depositSurfaceDensity(inner.sources(), view(ProjectionAxis::x, {}, 2.0, 64));
  EXPECT_NEAR(mapMass(all), 1.0, 1e-12);
  EXPECT_EQ(all.numBodiesInField, inner.size());
}

TEST(Projection, ParallelDepositMatchesTheSerialDefinitionAndIgnoresTheThreadCount) {
  const std::uint64_t seed = matcha::testing::freshSeed();
  SCOPED_TRACE(matcha::testing::seedTrace(seed));
  // 300,000 bodies: nine slabs of 2^15 and more, each with its own map. A clump whose core falls in a few pixels, a
  // halo that spills over every edge, and bodies exactly on the field's edges and corners.
  Particles p = matcha::testing::clumpInHalo(300000, seed);
  const std::size_t n = p.size();
  p.resize(n + 4);
  const std::array<std::array<double, 2>, 4> edges{
      {{-1.0, -1.0}, {1.0, 1.0}, {-1.0 - 1.0 / 128, 0.0}, {0.0, 1.0 - 1e-12}}};
  for (std::size_t k = 0; k < 4; ++k) {
    p.x[n + k] = edges[k][0];
    p.y[n + k] = edges[k][1];
    p.mass[n + k] = 1e-3;
  }
  const ProjectionView v = view(ProjectionAxis::z, {0.0, 0.0, 0.0}, 2.0, 64);
  const SurfaceDensityMap parallel = matcha::io::depositSurfaceDensity(p.sources(), v);
  const std::vector<double> reference = serialCic(p, v);
  double peak = 0.0;
  for (const double s : reference) peak = std::max(peak, s);
  for (std::size_t k = 0; k < reference.size(); ++k) {
    ASSERT_NEAR(parallel.sigma[k], reference[k], 1e-12 * peak) << "pixel " << k % 64 << ", " << k / 64;
  }
  // One thread: the same bits (the slabs are set by N and the pixels, not by the threads).
  tbb::global_control one(tbb::global_control::max_allowed_parallelism, 1);
  const SurfaceDensityMap serial = matcha::io::depositSurfaceDensity(p.sources(), v);
  EXPECT_TRUE(serial.sigma == parallel.sigma);
}

TEST(Projection, BodiesFarAwayOrNotFiniteDepositNothing) {
  const double inf = std::numeric_limits<double>::infinity();
  const Particles p = bodiesAt({{1e300, 0.0, 0.0, 1.0},
                                {-1e300, 1e300, 0.0, 1.0},
                                {inf, 0.0, 0.0, 1.0},
                                {std::nan(""), 0.0, 0.0, 1.0},
                                {0.0, 0.0, 0.0, 1.0}});
  const SurfaceDensityMap map = matcha::io::depositSurfaceDensity(p.sources(), view(ProjectionAxis::z, {}, 1.0, 16));
  EXPECT_EQ(map.numBodiesInField, 1u);
  EXPECT_NEAR(mapMass(map), 1.0, 1e-12);
}

TEST(Projection, BadViewsAreInputErrors) {
  const Particles p = bodiesAt({{0.0, 0.0, 0.0, 1.0}});
  EXPECT_THROW(matcha::io::depositSurfaceDensity(p.sources(), view(ProjectionAxis::z, {}, 1.0, 15)), InputError);
  EXPECT_THROW(matcha::io::depositSurfaceDensity(p.sources(), view(ProjectionAxis::z, {}, 1.0, 16385)), InputError);
  EXPECT_THROW(matcha::io::depositSurfaceDensity(p.sources(), view(ProjectionAxis::z, {}, 0.0, 64)), InputError);
  EXPECT_THROW(matcha::io::depositSurfaceDensity(p.sources(), view(ProjectionAxis::z, {}, std::nan(""), 64)),
               InputError);
  EXPECT_THROW(matcha::io::depositSurfaceDensity(p.sources(), view(ProjectionAxis::z, {0.0, std::nan(""), 0.0}, 1, 64)),
               InputError);
  // Pixels whose area is no normal double (1e-160 / 1024: it was a segfault, the inverse area infinite), or finer
  // than the centre's coordinates resolve.
  EXPECT_THROW(matcha::io::depositSurfaceDensity(p.sources(), view(ProjectionAxis::z, {}, 1e-160, 1024)), InputError);
  EXPECT_THROW(matcha::io::depositSurfaceDensity(p.sources(), view(ProjectionAxis::z, {1e6, 0.0, 0.0}, 1e-8, 64)),
               InputError);
  EXPECT_NO_THROW(matcha::io::depositSurfaceDensity(p.sources(), view(ProjectionAxis::z, {1e6, 0.0, 0.0}, 1e-4, 64)));
  // Pixels so large that a mass over their area underflows to 0 (it said "no mass falls in the field").
  EXPECT_THROW(matcha::io::depositSurfaceDensity(p.sources(), view(ProjectionAxis::z, {}, 1e300, 64)), InputError);
  // Masses whose surface density exceeds a double.
  const Particles heavy = bodiesAt({{0.0, 0.0, 0.0, 1e300}});
  EXPECT_THROW(matcha::io::depositSurfaceDensity(heavy.sources(), view(ProjectionAxis::z, {}, 1e-3, 64)), InputError);
}

TEST(Projection, CentreOfMassWeighsByMass) {
  const Particles p = bodiesAt({{1.0, 0.0, 0.0, 3.0}, {-1.0, 2.0, 4.0, 1.0}});
  const std::array<double, 3> centre = matcha::io::centreOfMass(p.sources());
  EXPECT_DOUBLE_EQ(centre[0], 0.5);
  EXPECT_DOUBLE_EQ(centre[1], 0.5);
  EXPECT_DOUBLE_EQ(centre[2], 1.0);
  EXPECT_THROW(matcha::io::centreOfMass(Particles().sources()), InputError);
}

TEST(Projection, EnclosingWidthIsTheMassQuantileOfTheSquareReach) {
  // 100 equal bodies at reach 1, 2, ..., 100 (alternating between u and v, signs mixed) plus one escaper of tiny mass
  // at 1e6: 98.5% of the mass needs 99 bodies, the square of half side 99, whatever the escaper.
  std::vector<std::array<double, 4>> bodies;
  for (int k = 1; k <= 100; ++k) {
    const double r = k * (k % 3 == 0 ? -1.0 : 1.0);
    bodies.push_back(k % 2 == 0 ? std::array<double, 4>{r, 0.5 * r, 7.0, 1.0}
                                : std::array<double, 4>{0.0, r, -7.0, 1.0});
  }
  bodies.push_back({1e6, 0.0, 0.0, 1e-9});
  const Particles p = bodiesAt(bodies);
  const double width = matcha::io::enclosingWidth(p.sources(), ProjectionAxis::z, {0.0, 0.0, 0.0}, 0.985);
  EXPECT_GE(width, 2.0 * 99.0);
  EXPECT_LE(width, 2.0 * 99.0 * (1.0 + 2e-6));
  EXPECT_DOUBLE_EQ(matcha::io::enclosingWidth(p.sources(), ProjectionAxis::z, {0.0, 0.0, 0.0}, 1.0), 2e6);
  // Along x the plane is (y, z): the z = +-7 offsets now count.
  EXPECT_GE(matcha::io::enclosingWidth(p.sources(), ProjectionAxis::x, {0.0, 0.0, 0.0}, 0.99), 2.0 * 7.0);
  // All bodies at the centre: 0.
  const Particles point = bodiesAt({{1.0, 1.0, 1.0, 1.0}, {1.0, 1.0, 1.0, 1.0}});
  EXPECT_EQ(matcha::io::enclosingWidth(point.sources(), ProjectionAxis::z, {1.0, 1.0, 1.0}, 0.99), 0.0);
  // 200 bodies at the centre and two at reach 1 (this search halved its bins forever once they underflowed), and one
  // body that holds nearly all the mass: widths below any map's resolution, found in finite time.
  std::vector<std::array<double, 4>> clump(200, {0.0, 0.0, 0.0, 1.0});
  clump.push_back({1.0, 0.0, 0.0, 1.0});
  clump.push_back({-1.0, 0.0, 0.0, 1.0});
  EXPECT_LT(matcha::io::enclosingWidth(bodiesAt(clump).sources(), ProjectionAxis::z, {}, 0.99),
            matcha::io::smallestResolvableWidth(16, {}));
  const Particles dominant = bodiesAt({{0.25, 0.5, 0.0, 1e20}, {1.0, 0.0, 0.0, 1.0}, {0.0, 2.0, 0.0, 1.0}});
  EXPECT_LT(matcha::io::enclosingWidth(dominant.sources(), ProjectionAxis::z, {0.25, 0.5, 0.0}, 0.99),
            matcha::io::smallestResolvableWidth(16, {0.25, 0.5, 0.0}));
  EXPECT_THROW(matcha::io::enclosingWidth(p.sources(), ProjectionAxis::z, {}, 0.0), InputError);
  EXPECT_THROW(matcha::io::enclosingWidth(p.sources(), ProjectionAxis::z, {}, 1.5), InputError);
}

}  // namespace
