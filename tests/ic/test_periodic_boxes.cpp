// SPDX-License-Identifier: MIT
// Tests of ic::makeClumps and ic::makeLattice, the periodic boxes of issue 15: counts, masses, the box, seeds and
// threads, and, per clump, the profile (half-mass radius, truncation), the velocities (mean v^2 in radial shells
// against the distribution function's) and the equilibrium (virial ratio on the clump's own bodies).
#include <gtest/gtest.h>
#include <tbb/blocked_range.h>
#include <tbb/global_control.h>
#include <tbb/parallel_reduce.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "matcha/core/errors.hpp"
#include "matcha/ic/periodic_boxes.hpp"
#include "matcha/testing/generators.hpp"
#include "matcha/testing/test_environment.hpp"

namespace {

using matcha::InputError;
using matcha::Particles;
using matcha::ic::Clump;
using matcha::ic::ClumpProfile;
using matcha::ic::ClumpsLayout;
using matcha::ic::ClumpsParams;
using matcha::ic::LatticeParams;
namespace testing_ = matcha::testing;

[[maybe_unused]] const auto* const kTraps = matcha::testing::trapFloatingPointInEveryTest();

/// The separation x - c folded to its nearest image, in [-L/2, L/2].
double nearestImage(double x, double c, double box) {
  const double d = x - c;
  return d - box * std::round(d / box);
}

void expectInsideBox(const Particles& p, double box) {
  for (std::size_t i = 0; i < p.size(); ++i) {
    for (const double coordinate : {p.x[i], p.y[i], p.z[i]}) {
      ASSERT_TRUE(coordinate >= 0.0 && coordinate < box) << "body " << i << " at " << coordinate << ", box " << box;
      ASSERT_FALSE(std::signbit(coordinate)) << "body " << i << " at -0";
    }
  }
}

/// N bodies, ids 0..N-1, masses 1/N summing to 1, finite, accelerations and potentials zero.
void expectBasicLayout(const Particles& p, std::size_t n) {
  ASSERT_EQ(p.size(), n);
  double mass = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(p.id[i], i);
    ASSERT_EQ(p.mass[i], 1.0 / static_cast<double>(n));
    mass += p.mass[i];
    for (const double value : {p.vx[i], p.vy[i], p.vz[i], p.ax[i], p.pot[i]}) ASSERT_TRUE(std::isfinite(value));
    ASSERT_EQ(p.ax[i], 0.0);
    ASSERT_EQ(p.pot[i], 0.0);
  }
  EXPECT_NEAR(mass, 1.0, 1e-10);  // N roundings of ~1e-16 each
}

void expectIdentical(const Particles& a, const Particles& b) {
  EXPECT_EQ(a.x, b.x);
  EXPECT_EQ(a.y, b.y);
  EXPECT_EQ(a.z, b.z);
  EXPECT_EQ(a.vx, b.vx);
  EXPECT_EQ(a.vy, b.vy);
  EXPECT_EQ(a.vz, b.vz);
  EXPECT_EQ(a.mass, b.mass);
  EXPECT_EQ(a.id, b.id);
}

/// A clump's bodies as offsets from its centre (nearest image) and velocities, in units of a and sqrt(G M_p / a),
/// M_p the untruncated profile's mass.
struct ClumpBodies {
  std::vector<std::array<double, 3>> offset, velocity;
  std::vector<double> radius;
};

ClumpBodies clumpBodies(const Particles& p, const Clump& clump, double box) {
  ClumpBodies bodies;
  const double a = clump.scaleRadius;
  const double velocityUnit = std::sqrt(clump.mass / matcha::ic::clumpTruncatedMassFraction(clump.profile) / a);
  for (std::size_t i = clump.begin; i < clump.begin + clump.count; ++i) {
    const std::array<double, 3> d{nearestImage(p.x[i], clump.centre[0], box) / a,
                                  nearestImage(p.y[i], clump.centre[1], box) / a,
                                  nearestImage(p.z[i], clump.centre[2], box) / a};
    bodies.offset.push_back(d);
    bodies.velocity.push_back({p.vx[i] / velocityUnit, p.vy[i] / velocityUnit, p.vz[i] / velocityUnit});
    bodies.radius.push_back(std::hypot(d[0], d[1], d[2]));
  }
  return bodies;
}

/// The box the statistical tests share: four clumps of ~29,500 bodies (two Plummer, two Hernquist) with scale radii
/// 0.01-0.02 L, 10% background. Made once per seed.
const std::tuple<ClumpsParams, ClumpsLayout, Particles>& bigClumps(std::uint64_t seed) {
  static std::map<std::uint64_t, std::tuple<ClumpsParams, ClumpsLayout, Particles>> cache;
  auto found = cache.find(seed);
  if (found == cache.end()) {
    ClumpsParams params;
    params.numBodies = 131072;
    params.seed = seed;
    params.boxSize = 3.0;
    params.numClumps = 4;
    params.backgroundFraction = 0.1;
    params.scaleMin = 0.01;
    params.scaleMax = 0.02;
    found = cache.emplace(seed, std::make_tuple(params, matcha::ic::planClumps(params), matcha::ic::makeClumps(params)))
                .first;
  }
  return found->second;
}

/// Cumulative mass of the untruncated profile within r scale radii, in units of its mass.
double profileMass(ClumpProfile profile, double r) {
  return profile == ClumpProfile::plummer ? r * r * r / std::pow(1.0 + r * r, 1.5) : r * r / ((1.0 + r) * (1.0 + r));
}

// ------------------------------------------------------------------------------------------------------------ clumps

TEST(Clumps, TruncatedMassFractions) {
  EXPECT_DOUBLE_EQ(matcha::ic::clumpTruncatedMassFraction(ClumpProfile::plummer), 8000.0 / std::pow(401.0, 1.5));
  EXPECT_DOUBLE_EQ(matcha::ic::clumpTruncatedMassFraction(ClumpProfile::hernquist), 400.0 / 441.0);
  EXPECT_DOUBLE_EQ(matcha::ic::kMaxClumpScaleRadius, 0.025);
}

TEST(Clumps, LayoutCountsAndBackgroundAreExact) {
  // floor(F N), the rest shared out with the remainder on the first clumps, profiles alternating.
  struct Case {
    std::size_t n, clumps;
    double fraction;
    std::size_t background;
  };
  for (const Case c : {Case{1000, 32, 0.2, 200}, Case{1001, 7, 0.25, 250}, Case{7, 2, 0.5, 3}, Case{1, 1, 0.0, 0},
                       Case{100, 99, 0.01, 1}, Case{65536, 32, 0.2, 13107}, Case{12345, 5, 0.999, 12332}}) {
    SCOPED_TRACE("N = " + std::to_string(c.n) + ", K = " + std::to_string(c.clumps));
    ClumpsParams params;
    params.numBodies = c.n;
    params.numClumps = c.clumps;
    params.backgroundFraction = c.fraction;
    params.seed = 5;
    params.boxSize = 2.5;
    EXPECT_EQ(matcha::ic::numBackgroundBodies(params), c.background);
    const ClumpsLayout layout = matcha::ic::planClumps(params);
    ASSERT_EQ(layout.clumps.size(), c.clumps);
    EXPECT_EQ(layout.backgroundCount, c.background);
    EXPECT_EQ(layout.backgroundBegin + layout.backgroundCount, c.n);
    const std::size_t clumpBodies = c.n - c.background;
    std::size_t begin = 0;
    for (std::size_t k = 0; k < c.clumps; ++k) {
      const Clump& clump = layout.clumps[k];
      EXPECT_EQ(clump.begin, begin);
      EXPECT_EQ(clump.count, clumpBodies / c.clumps + (k < clumpBodies % c.clumps ? 1 : 0));
      EXPECT_EQ(clump.mass, static_cast<double>(clump.count) / static_cast<double>(c.n));
      EXPECT_EQ(clump.profile, k % 2 == 0 ? ClumpProfile::plummer : ClumpProfile::hernquist);
      for (const double coordinate : clump.centre) EXPECT_TRUE(coordinate >= 0.0 && coordinate < params.boxSize);
      EXPECT_GE(clump.scaleRadius, params.scaleMin * params.boxSize * (1.0 - 1e-15));
      EXPECT_LE(clump.scaleRadius, params.scaleMax * params.boxSize * (1.0 + 1e-15));
      begin += clump.count;
    }
    EXPECT_EQ(begin, layout.backgroundBegin);

    const Particles p = matcha::ic::makeClumps(params);
    expectBasicLayout(p, c.n);
    expectInsideBox(p, params.boxSize);
    for (std::size_t i = layout.backgroundBegin; i < c.n; ++i) {
      ASSERT_EQ(p.vx[i], 0.0);
      ASSERT_EQ(p.vy[i], 0.0);
      ASSERT_EQ(p.vz[i], 0.0);
    }
  }
}

TEST(Clumps, EveryBodyInsideTheBoxForAnySide) {
  // Clumps of 20 a = L/2 cross the faces; sides that are not powers of two round differently at the faces.
  const std::uint64_t seed = testing_::freshSeed();
  MATCHA_TRACE_SEED(seed);
  for (const double box : {1.0, 3.0, 0.1, 7e-3, 1e5}) {
    SCOPED_TRACE("L = " + std::to_string(box));
    ClumpsParams params;
    params.numBodies = 40000;
    params.seed = seed;
    params.boxSize = box;
    params.scaleMin = 0.02;
    params.scaleMax = matcha::ic::kMaxClumpScaleRadius;
    const Particles p = matcha::ic::makeClumps(params);
    expectBasicLayout(p, params.numBodies);
    expectInsideBox(p, box);
  }
}

TEST(Clumps, SameSeedSameBitsOtherSeedOtherBodies) {
  const std::uint64_t seed = testing_::freshSeed();
  MATCHA_TRACE_SEED(seed);
  ClumpsParams params;
  params.numBodies = 50000;  // several streams per clump and for the background
  params.numClumps = 3;
  params.seed = seed;
  const Particles a = matcha::ic::makeClumps(params);
  expectIdentical(a, matcha::ic::makeClumps(params));
  params.seed = seed + 1;
  const Particles b = matcha::ic::makeClumps(params);
  std::size_t same = 0;
  for (std::size_t i = 0; i < a.size(); ++i) same += a.x[i] == b.x[i] ? 1 : 0;
  EXPECT_EQ(same, 0u);
  EXPECT_NE(matcha::ic::planClumps(params).clumps[0].centre, matcha::ic::planClumps(ClumpsParams{}).clumps[0].centre);
}

TEST(Clumps, BitsDoNotDependOnTheThreadCount) {
  const std::uint64_t seed = testing_::freshSeed();
  MATCHA_TRACE_SEED(seed);
  ClumpsParams params;
  params.numBodies = 100000;
  params.numClumps = 5;
  params.seed = seed;
  Particles serial;
  {
    tbb::global_control one(tbb::global_control::max_allowed_parallelism, 1);
    serial = matcha::ic::makeClumps(params);
  }
  expectIdentical(serial, matcha::ic::makeClumps(params));
}

TEST(Clumps, OneBodyOneClumpSitsAtItsCentreAtRest) {
  ClumpsParams params;
  params.numBodies = 1;
  params.numClumps = 1;
  params.backgroundFraction = 0.0;
  const Particles p = matcha::ic::makeClumps(params);
  const Clump clump = matcha::ic::planClumps(params).clumps[0];
  expectBasicLayout(p, 1);
  EXPECT_EQ(p.x[0], clump.centre[0]);
  EXPECT_EQ(p.y[0], clump.centre[1]);
  EXPECT_EQ(p.z[0], clump.centre[2]);
  EXPECT_EQ(p.vx[0], 0.0);
}

TEST(Clumps, EachClumpCentredAtRestAndTruncated) {
  // Centre of mass on the stated centre (nearest image, to rounding of the box's coordinates), no bulk motion, no
  // body beyond 20 a, but the Hernquist clumps reach it (~1% of their bodies lie beyond 18 a).
  const std::uint64_t seed = testing_::freshSeed();
  MATCHA_TRACE_SEED(seed);
  const auto& [params, layout, p] = bigClumps(seed);
  for (const Clump& clump : layout.clumps) {
    SCOPED_TRACE("clump at " + std::to_string(clump.begin));
    const ClumpBodies bodies = clumpBodies(p, clump, params.boxSize);
    std::array<double, 3> meanOffset{}, meanVelocity{};
    for (std::size_t i = 0; i < clump.count; ++i) {
      for (int c = 0; c < 3; ++c) {
        meanOffset[c] += bodies.offset[i][c] / static_cast<double>(clump.count);
        meanVelocity[c] += bodies.velocity[i][c] / static_cast<double>(clump.count);
      }
    }
    for (int c = 0; c < 3; ++c) {
      // Offsets of ~1 a rounded at the box's coordinates (~3 L): ulp(3) / (0.01 * 3) ~ 1.5e-14 a each.
      EXPECT_LT(std::abs(meanOffset[c]), 1e-12);
      EXPECT_LT(std::abs(meanVelocity[c]), 1e-12);
    }
    const double farthest = *std::max_element(bodies.radius.begin(), bodies.radius.end());
    // Centring shifts the bodies by ~rms(r) / sqrt(n) (<= 6 a / 170 for Hernquist): well inside 0.5 a.
    EXPECT_LT(farthest, matcha::ic::kClumpTruncationRadius + 0.5);
    if (clump.profile == ClumpProfile::hernquist) {
      EXPECT_GT(farthest, 19.0);
    }
  }
}

TEST(Clumps, HalfMassRadiiMatchTheTruncatedProfiles) {
  // The median distance from the clump's centre (nearest image) estimates the half-mass radius of the truncated
  // profile: m(r) = fraction / 2 of the untruncated mass, 1.30038 a for Plummer (1.3048 a untruncated) and
  // s / (1 - s) a with s = sqrt(200/441), 2.06218 a, for Hernquist (1 + sqrt 2 = 2.414 a untruncated). The sample
  // median's relative standard deviation is sqrt(1/4 / n) / (dF / d ln r) at r_half, F the truncated cumulative mass:
  // 0.52% (Plummer) and 0.89% (Hernquist) for n = 29,491 (measured over 24 seeds: 0.48% and 0.82%, no bias beyond
  // 0.2%); the tolerance is 5 of them.
  const std::uint64_t seed = testing_::freshSeed();
  MATCHA_TRACE_SEED(seed);
  const auto& [params, layout, p] = bigClumps(seed);
  for (const Clump& clump : layout.clumps) {
    const bool plummer = clump.profile == ClumpProfile::plummer;
    SCOPED_TRACE(std::string(plummer ? "Plummer" : "Hernquist") + " clump at " + std::to_string(clump.begin));
    ClumpBodies bodies = clumpBodies(p, clump, params.boxSize);
    const std::size_t n = clump.count;
    std::nth_element(bodies.radius.begin(), bodies.radius.begin() + n / 2, bodies.radius.end());
    const double median = bodies.radius[n / 2];
    const double fraction = matcha::ic::clumpTruncatedMassFraction(clump.profile);
    double expected = 0.0;
    if (plummer) {
      expected = 1.0 / std::sqrt(std::pow(0.5 * fraction, -2.0 / 3.0) - 1.0);
      EXPECT_NEAR(expected, 1.30038, 1e-5);
    } else {
      const double s = std::sqrt(0.5 * fraction);
      expected = s / (1.0 - s);
      EXPECT_NEAR(expected, 2.06218, 1e-5);
    }
    const double h = 1e-6 * expected;
    const double slope = expected *
                         (profileMass(clump.profile, expected + h) - profileMass(clump.profile, expected - h)) /
                         (2.0 * h) / fraction;
    const double sigma = std::sqrt(0.25 / static_cast<double>(n)) / slope;
    EXPECT_LT(sigma, plummer ? 0.006 : 0.01);
    EXPECT_NEAR(median / expected, 1.0, 5.0 * sigma) << "median " << median << " a, expected " << expected << " a";
  }
}

TEST(Clumps, MeanSquareSpeedsInShellsMatchTheDistributionFunctions) {
  // <v^2> in the shells r/a in [0, 0.5), [0.5, 2), [2, 20] against 3 int rho sigma^2 dV / int rho dV of the
  // untruncated profile (G = M_p = a = 1; sigma^2 from the isotropic Jeans equation; computed with mpmath): the shape
  // of the sampled distribution function, not just its scale. v^2 has a relative spread of ~sqrt(2/3) per body, so
  // the shell mean's standard deviation is ~0.82 / sqrt(n_shell) (1.6% for the Plummer core's ~2,700 bodies); measured
  // over 24 seeds it is 0.64-1.19 times that (the most in Hernquist's outer shell). The tolerance is 6 times it.
  const std::uint64_t seed = testing_::freshSeed();
  MATCHA_TRACE_SEED(seed);
  const std::array<double, 4> edges{0.0, 0.5, 2.0, 20.5};
  const std::array<double, 3> plummerExpected{0.468836, 0.336459, 0.149158};
  const std::array<double, 3> hernquistExpected{0.305211, 0.249477, 0.104381};
  const auto& [params, layout, p] = bigClumps(seed);
  for (const Clump& clump : layout.clumps) {
    const bool plummer = clump.profile == ClumpProfile::plummer;
    SCOPED_TRACE(std::string(plummer ? "Plummer" : "Hernquist") + " clump at " + std::to_string(clump.begin));
    const ClumpBodies bodies = clumpBodies(p, clump, params.boxSize);
    std::array<double, 3> sum{}, count{};
    for (std::size_t i = 0; i < clump.count; ++i) {
      const auto& v = bodies.velocity[i];
      for (std::size_t s = 0; s < 3; ++s) {
        if (bodies.radius[i] >= edges[s] && bodies.radius[i] < edges[s + 1]) {
          sum[s] += v[0] * v[0] + v[1] * v[1] + v[2] * v[2];
          count[s] += 1.0;
        }
      }
    }
    for (std::size_t s = 0; s < 3; ++s) {
      ASSERT_GT(count[s], 1000.0) << "shell " << s;
      const double expected = (plummer ? plummerExpected : hernquistExpected)[s];
      EXPECT_NEAR(sum[s] / count[s] / expected, 1.0, 6.0 * 0.82 / std::sqrt(count[s]))
          << "shell " << s << ": " << count[s] << " bodies";
    }
  }
}

TEST(Clumps, VirialRatioOfEachClumpOnItsOwnBodies) {
  // 2T / |W| on the clump's own bodies (direct sum, G = 1, its own potential only). The truncated clumps carry the
  // untruncated profiles' velocities, whose boundary pressure at 20 a makes 2T / |W| = 1 + 4 pi r_t^3 rho sigma^2 /
  // |W| = 1.00021 (Plummer) and 1.00496 (Hernquist) in expectation (mpmath). Measured over 24 seeds at n = 29,491:
  // Plummer mean 1.0001, standard deviation 0.0035; Hernquist 1.0063, 0.0056. The tolerance, 2.5% (4.5 standard
  // deviations), still fails for velocities scaled by the clump's mass rather than the untruncated profile's
  // (Hernquist: 0.911).
  const std::uint64_t seed = testing_::freshSeed();
  MATCHA_TRACE_SEED(seed);
  const auto& [params, layout, p] = bigClumps(seed);
  for (const Clump& clump : {layout.clumps[0], layout.clumps[1]}) {  // one of each profile: ~0.6 s each
    const bool plummer = clump.profile == ClumpProfile::plummer;
    SCOPED_TRACE(std::string(plummer ? "Plummer" : "Hernquist") + " clump at " + std::to_string(clump.begin));
    const std::size_t n = clump.count;
    // Physical offsets and velocities, unwrapped about the centre.
    std::vector<double> x(n), y(n), z(n);
    double kinetic = 0.0;
    const double m = 1.0 / static_cast<double>(params.numBodies);
    for (std::size_t k = 0; k < n; ++k) {
      const std::size_t i = clump.begin + k;
      x[k] = nearestImage(p.x[i], clump.centre[0], params.boxSize);
      y[k] = nearestImage(p.y[i], clump.centre[1], params.boxSize);
      z[k] = nearestImage(p.z[i], clump.centre[2], params.boxSize);
      kinetic += 0.5 * m * (p.vx[i] * p.vx[i] + p.vy[i] * p.vy[i] + p.vz[i] * p.vz[i]);
    }
    const double inverseSum = tbb::parallel_reduce(
        tbb::blocked_range<std::size_t>(0, n, 256), 0.0,
        [&](const tbb::blocked_range<std::size_t>& r, double sum) {
          for (std::size_t i = r.begin(); i != r.end(); ++i) {
            double row = 0.0;
            for (std::size_t j = i + 1; j < n; ++j) {
              const double dx = x[i] - x[j], dy = y[i] - y[j], dz = z[i] - z[j];
              row += 1.0 / std::sqrt(dx * dx + dy * dy + dz * dz);
            }
            sum += row;
          }
          return sum;
        },
        [](double a, double b) { return a + b; });
    const double potential = -m * m * inverseSum;
    const double ratio = 2.0 * kinetic / std::abs(potential);
    RecordProperty(plummer ? "virial_plummer" : "virial_hernquist", std::to_string(ratio));
    EXPECT_NEAR(ratio, plummer ? 1.00021 : 1.00496, 0.025) << "2T/|W| = " << ratio;
  }
}

TEST(Clumps, RefusesBadParameters) {
  const auto refuses = [](const ClumpsParams& params, const std::string& mentions) {
    SCOPED_TRACE(mentions);
    try {
      params.validate();
      ADD_FAILURE() << "validate() accepted it";
    } catch (const InputError& error) {
      EXPECT_NE(std::string(error.what()).find(mentions), std::string::npos) << error.what();
      EXPECT_EQ(std::string(error.what()).find('\n'), std::string::npos) << error.what();
    }
    EXPECT_THROW(matcha::ic::planClumps(params), InputError);
    EXPECT_THROW(matcha::ic::makeClumps(params), InputError);
  };
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  ClumpsParams params;
  params.numBodies = 0;
  refuses(params, "at least one body");
  for (const double box : {0.0, -1.0, nan, inf}) {
    params = {};
    params.boxSize = box;
    refuses(params, "--box");
  }
  params = {};
  params.numClumps = 0;
  refuses(params, "--clumps must be at least 1");
  params = {};
  params.numBodies = 40;  // floor(0.2 * 40) = 8 in the background: 32 clump bodies
  params.numClumps = 33;
  refuses(params, "--clumps 33 exceeds the 32 clump bodies");
  for (const double fraction : {-0.1, 1.0, 1.5, nan, inf}) {
    params = {};
    params.backgroundFraction = fraction;
    refuses(params, "--background");
    EXPECT_THROW(matcha::ic::numBackgroundBodies(params), InputError);
  }
  for (const double scale : {0.0, -0.01, nan, inf}) {
    params = {};
    params.scaleMin = scale;
    refuses(params, "--scale-min");
  }
  params = {};
  params.scaleMin = 0.02;
  params.scaleMax = 0.01;
  refuses(params, "--scale-max must be at least --scale-min");
  params = {};
  params.scaleMax = 0.03;
  refuses(params, "at most 0.025");
  for (const double scale : {0.0, -0.01, nan, inf}) {
    params = {};
    params.scaleMax = scale;
    refuses(params, "--scale-max must be > 0");
  }

  // The edges that are allowed.
  params = {};
  params.numBodies = 40;
  params.numClumps = 32;
  EXPECT_NO_THROW(params.validate());
  params = {};
  params.scaleMin = params.scaleMax = matcha::ic::kMaxClumpScaleRadius;
  params.backgroundFraction = 0.0;
  EXPECT_NO_THROW(params.validate());
}

// ----------------------------------------------------------------------------------------------------------- lattice

TEST(Lattice, ExactCubeRoots) {
  EXPECT_EQ(matcha::ic::exactCubeRoot(1), 1u);
  EXPECT_EQ(matcha::ic::exactCubeRoot(8), 2u);
  EXPECT_EQ(matcha::ic::exactCubeRoot(262144), 64u);
  EXPECT_EQ(matcha::ic::exactCubeRoot(1290ull * 1290 * 1290), 1290u);  // the largest below 2^31
  EXPECT_EQ(matcha::ic::exactCubeRoot(1290ull * 1290 * 1290 - 1), 0u);
  EXPECT_EQ(matcha::ic::exactCubeRoot(1290ull * 1290 * 1290 + 1), 0u);
  EXPECT_EQ(matcha::ic::exactCubeRoot(2), 0u);
  EXPECT_EQ(matcha::ic::exactCubeRoot(65536), 0u);
  EXPECT_EQ(matcha::ic::exactCubeRoot(0), 0u);
}

TEST(Lattice, WithoutPerturbationBodiesSitExactlyAtTheCellCentres) {
  for (const std::size_t side : {1, 2, 5, 16, 33}) {
    for (const double box : {1.0, 3.0, 0.7}) {
      SCOPED_TRACE("n = " + std::to_string(side) + ", L = " + std::to_string(box));
      LatticeParams params;
      params.numBodies = side * side * side;
      params.boxSize = box;
      params.perturbation = 0.0;
      const Particles p = matcha::ic::makeLattice(params);
      expectBasicLayout(p, params.numBodies);
      expectInsideBox(p, box);
      const double spacing = box / static_cast<double>(side);
      for (std::size_t i = 0; i < side; ++i) {
        for (std::size_t j = 0; j < side; ++j) {
          for (std::size_t k = 0; k < side; ++k) {
            const std::size_t b = (i * side + j) * side + k;
            ASSERT_EQ(p.x[b], (static_cast<double>(i) + 0.5) * spacing) << "body " << b;
            ASSERT_EQ(p.y[b], (static_cast<double>(j) + 0.5) * spacing) << "body " << b;
            ASSERT_EQ(p.z[b], (static_cast<double>(k) + 0.5) * spacing) << "body " << b;
            ASSERT_EQ(p.vx[b], 0.0);
            ASSERT_EQ(p.vy[b], 0.0);
            ASSERT_EQ(p.vz[b], 0.0);
          }
        }
      }
    }
  }
}

TEST(Lattice, PerturbedBodiesStayWithinAOfTheirGridPoints) {
  // Each coordinate's displacement (nearest image) is uniform in (-A, A) grid spacings: within A (to rounding), its
  // mean |d| is A / 2 (standard deviation A / sqrt(12 * 3N)), and the extremes come within 1% of A.
  const std::uint64_t seed = testing_::freshSeed();
  MATCHA_TRACE_SEED(seed);
  for (const double amplitude : {0.1, 0.3, 0.4999}) {
    SCOPED_TRACE("A = " + std::to_string(amplitude));
    LatticeParams params;
    params.numBodies = 40 * 40 * 40;
    params.boxSize = 3.0;
    params.seed = seed;
    params.perturbation = amplitude;
    const std::size_t side = 40;
    const double spacing = params.boxSize / static_cast<double>(side);
    const Particles p = matcha::ic::makeLattice(params);
    expectBasicLayout(p, params.numBodies);
    expectInsideBox(p, params.boxSize);
    double largest = 0.0, sumAbs = 0.0;
    for (std::size_t b = 0; b < p.size(); ++b) {
      const std::size_t cell[3] = {b / (side * side), (b / side) % side, b % side};
      const double position[3] = {p.x[b], p.y[b], p.z[b]};
      for (int c = 0; c < 3; ++c) {
        const double grid = (static_cast<double>(cell[c]) + 0.5) * spacing;
        const double d = std::abs(nearestImage(position[c], grid, params.boxSize)) / spacing;
        ASSERT_LE(d, amplitude * (1.0 + 1e-12) + 1e-12) << "body " << b;
        largest = std::max(largest, d);
        sumAbs += d;
      }
      ASSERT_EQ(p.vx[b], 0.0);
    }
    EXPECT_GT(largest, 0.99 * amplitude);
    const double samples = 3.0 * static_cast<double>(p.size());
    EXPECT_NEAR(sumAbs / samples, amplitude / 2.0, 6.0 * amplitude / std::sqrt(12.0 * samples));
  }
}

TEST(Lattice, SameSeedSameBitsOtherSeedOtherBodiesAnyThreadCount) {
  const std::uint64_t seed = testing_::freshSeed();
  MATCHA_TRACE_SEED(seed);
  LatticeParams params;
  params.numBodies = 50 * 50 * 50;  // several streams
  params.seed = seed;
  Particles serial;
  {
    tbb::global_control one(tbb::global_control::max_allowed_parallelism, 1);
    serial = matcha::ic::makeLattice(params);
  }
  const Particles a = matcha::ic::makeLattice(params);
  expectIdentical(serial, a);
  params.seed = seed + 1;
  const Particles b = matcha::ic::makeLattice(params);
  std::size_t same = 0;
  for (std::size_t i = 0; i < a.size(); ++i) same += a.x[i] == b.x[i] ? 1 : 0;
  EXPECT_EQ(same, 0u);
}

TEST(Lattice, RefusesBadParameters) {
  const auto refuses = [](const LatticeParams& params, const std::string& mentions) {
    SCOPED_TRACE(mentions);
    try {
      params.validate();
      ADD_FAILURE() << "validate() accepted it";
    } catch (const InputError& error) {
      EXPECT_NE(std::string(error.what()).find(mentions), std::string::npos) << error.what();
      EXPECT_EQ(std::string(error.what()).find('\n'), std::string::npos) << error.what();
    }
    EXPECT_THROW(matcha::ic::makeLattice(params), InputError);
  };
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  LatticeParams params;
  params.numBodies = 0;
  refuses(params, "at least one body");
  params.numBodies = 1001;
  refuses(params,
          "-n 1001 is not a perfect cube, as a lattice needs; the nearest cubes are 1000 (10^3) and 1331 (11^3)");
  params.numBodies = 2;
  refuses(params, "the nearest cubes are 1 (1^3) and 8 (2^3)");
  params.numBodies = 2147483647;
  refuses(params, "2146689000 (1290^3) and 2151685171 (1291^3)");
  for (const double box : {0.0, -2.0, nan, inf}) {
    params = {};
    params.boxSize = box;
    refuses(params, "--box");
  }
  for (const double amplitude : {-0.1, 0.5, 0.7, nan, inf}) {
    params = {};
    params.perturbation = amplitude;
    refuses(params, "--perturbation");
  }
}

}  // namespace
