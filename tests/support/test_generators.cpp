// SPDX-License-Identifier: MIT
// Tests of the shared input generators and, through them, of ic::makePlummer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfenv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numbers>
#include <optional>
#include <string>
#include <vector>

#include "matcha/core/errors.hpp"
#include "matcha/ic/plummer.hpp"
#include "matcha/testing/generators.hpp"
#include "matcha/testing/test_environment.hpp"

namespace {

using matcha::InputError;
using matcha::Particles;
namespace testing_ = matcha::testing;

[[maybe_unused]] const auto* const kTraps = matcha::testing::trapFloatingPointInEveryTest();

constexpr double kPi = std::numbers::pi;

double radius(const Particles& p, std::size_t i, double cx = 0.0, double cy = 0.0, double cz = 0.0) {
  return std::hypot(p.x[i] - cx, p.y[i] - cy, p.z[i] - cz);
}

double totalMass(const Particles& p) {
  double sum = 0.0;
  for (double m : p.mass) sum += m;
  return sum;
}

bool allFinite(const Particles& p) {
  for (const auto* array : {&p.x, &p.y, &p.z, &p.vx, &p.vy, &p.vz, &p.mass, &p.ax, &p.ay, &p.az, &p.pot}) {
    for (double value : *array) {
      if (!std::isfinite(value)) return false;
    }
  }
  return true;
}

/// Bit-identical comparison of every array (EXPECT_EQ on doubles compares exactly).
void expectIdentical(const Particles& a, const Particles& b) {
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(a.x, b.x);
  EXPECT_EQ(a.y, b.y);
  EXPECT_EQ(a.z, b.z);
  EXPECT_EQ(a.vx, b.vx);
  EXPECT_EQ(a.vy, b.vy);
  EXPECT_EQ(a.vz, b.vz);
  EXPECT_EQ(a.mass, b.mass);
  EXPECT_EQ(a.id, b.id);
}

void expectBasicLayout(const Particles& p, std::size_t n) {
  ASSERT_EQ(p.size(), n);
  EXPECT_TRUE(allFinite(p));
  EXPECT_NEAR(totalMass(p), 1.0, 1e-12);
  for (std::size_t i = 0; i < n; ++i) {
    EXPECT_EQ(p.id[i], i);
    EXPECT_EQ(p.mass[i], 1.0 / static_cast<double>(n));
    EXPECT_EQ(p.ax[i], 0.0);
    EXPECT_EQ(p.ay[i], 0.0);
    EXPECT_EQ(p.az[i], 0.0);
    EXPECT_EQ(p.pot[i], 0.0);
  }
  EXPECT_NO_THROW(p.validate());
}

/// Restores (or unsets) an environment variable when it goes out of scope.
class ScopedEnvironment {
 public:
  ScopedEnvironment(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnvironment() {
    if (old_) {
      ::setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// ---------------------------------------------------------------------------------------------------------- seeds

TEST(FreshSeed, HonoursTheEnvironmentOverride) {
  {
    const ScopedEnvironment pinned(testing_::kSeedEnvironmentVariable, "18446744073709551615");
    EXPECT_EQ(testing_::freshSeed(), 18446744073709551615ULL);
  }
  for (const char* bad : {"", "abc", "12x", "-1", "18446744073709551616"}) {
    const ScopedEnvironment pinned(testing_::kSeedEnvironmentVariable, bad);
    EXPECT_THROW(testing_::freshSeed(), InputError) << "value \"" << bad << "\"";
  }
}

TEST(FreshSeed, TraceNamesTheReplayVariable) {
  EXPECT_EQ(testing_::seedTrace(42), "seed = 42 (replay with MATCHA_TEST_SEED=42)");
}

// -------------------------------------------------------------------------------------------------------- Plummer

TEST(Plummer, LayoutForSeveralSizes) {
  const std::uint64_t seed = testing_::freshSeed();
  MATCHA_TRACE_SEED(seed);
  for (std::size_t n : {1u, 2u, 7u, 1000u}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    expectBasicLayout(testing_::plummer(n, seed), n);
  }
}

TEST(Plummer, SingleBodySitsAtTheOriginAtRest) {
  // Centring a one-body system subtracts the body from itself: exactly zero.
  const Particles p = testing_::plummer(1, 7);
  EXPECT_EQ(p.x[0], 0.0);
  EXPECT_EQ(p.y[0], 0.0);
  EXPECT_EQ(p.z[0], 0.0);
  EXPECT_EQ(p.vx[0], 0.0);
  EXPECT_EQ(p.vy[0], 0.0);
  EXPECT_EQ(p.vz[0], 0.0);
}

TEST(Plummer, SameSeedSameBodiesOtherSeedOtherBodies) {
  const std::uint64_t seed = testing_::freshSeed();
  MATCHA_TRACE_SEED(seed);
  const Particles a = testing_::plummer(2000, seed);
  expectIdentical(a, testing_::plummer(2000, seed));
  const Particles b = testing_::plummer(2000, seed + 1);
  EXPECT_NE(a.x, b.x);
  EXPECT_NE(a.vx, b.vx);
}

TEST(Plummer, PrefixDoesNotDependOnN) {
  // Bodies are drawn one after another from one stream, so the first bodies of a larger sample are the same draws;
  // only the centring shift differs. Removing it, positions agree to rounding.
  const std::uint64_t seed = testing_::freshSeed();
  MATCHA_TRACE_SEED(seed);
  const Particles small = testing_::plummer(100, seed);
  const Particles large = testing_::plummer(200, seed);
  const double shift = large.x[0] - small.x[0];
  for (std::size_t i = 1; i < small.size(); ++i) EXPECT_NEAR(large.x[i] - small.x[i], shift, 1e-12);
}

TEST(Plummer, CentreOfMassAtRestAtTheOrigin) {
  const std::uint64_t seed = testing_::freshSeed();
  MATCHA_TRACE_SEED(seed);
  const Particles p = testing_::plummer(20000, seed);
  double mx = 0, my = 0, mz = 0, px = 0, py = 0, pz = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    mx += p.mass[i] * p.x[i];
    my += p.mass[i] * p.y[i];
    mz += p.mass[i] * p.z[i];
    px += p.mass[i] * p.vx[i];
    py += p.mass[i] * p.vy[i];
    pz += p.mass[i] * p.vz[i];
  }
  // Each centred coordinate carries a rounding error of ~eps |x|, so the sums are ~eps rms(x) / sqrt(N) ~ 1e-18;
  // measured at most 6e-17 over 200 seeds. 1e-15 leaves a margin of 15 (without centring the sums are ~1e-2).
  EXPECT_LT(std::hypot(mx, my, mz), 1e-15);
  EXPECT_LT(std::hypot(px, py, pz), 1e-15);
}

TEST(Plummer, HalfMassRadius) {
  // The median radius estimates the half-mass radius of the truncated sphere: r(X = massCut / 2) in units of a,
  // times 3 pi / 16 (0.7679 for massCut = 0.999; 0.7686 without a cut). Its standard deviation is
  // sqrt(1/4 / N) * dr/dX at X = 1/2, i.e. 0.00354 * 1.385 = 0.0049 for N = 20000; the centring shift (~0.01 length
  // units) moves radii by less than that on average. 0.025 is ~5 standard deviations.
  const std::uint64_t seed = testing_::freshSeed();
  MATCHA_TRACE_SEED(seed);
  const std::size_t n = 20000;
  const Particles p = testing_::plummer(n, seed);
  std::vector<double> radii(n);
  for (std::size_t i = 0; i < n; ++i) radii[i] = radius(p, i);
  std::nth_element(radii.begin(), radii.begin() + n / 2, radii.end());
  const double median = radii[n / 2];
  const double massCut = matcha::ic::PlummerParams{}.massCut;
  const double expected = (3.0 * kPi / 16.0) / std::sqrt(std::pow(0.5 * massCut, -2.0 / 3.0) - 1.0);
  EXPECT_NEAR(expected, 0.7679, 1e-4);
  EXPECT_NEAR(median, expected, 0.025);
}

TEST(Plummer, KineticEnergyIsAQuarter) {
  // Virial equilibrium in N-body units: T = -E = 1/4. Integrating <v^2 | r> = v_esc^2 <q^2> = 2 (1 + r^2)^(-1/2) / 4
  // over the truncated mass (X < 0.999) gives T = 0.25024: the cut drops the slowest, outermost 0.1% and raises T by
  // 0.1%. The spread of v^2 is 0.402, so the sampling standard deviation of T is 0.402 / (2 sqrt(N)) = 0.0014
  // (0.57%) for N = 20000 (measured over 200 seeds: mean 0.25035, sd 0.0016); centring removes only M v_cm^2 / 2 ~
  // T / N. A 3% tolerance is ~5 standard deviations and still fails for a wrong velocity scale (sqrt(16 / (3 pi))
  // off by 2% moves T by 4%) or a wrong q sampler (g(q) = q^2 (1 - q^2)^(5/2) instead gives T = 0.30).
  const std::uint64_t seed = testing_::freshSeed();
  MATCHA_TRACE_SEED(seed);
  const Particles p = testing_::plummer(20000, seed);
  double kinetic = 0.0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    kinetic += 0.5 * p.mass[i] * (p.vx[i] * p.vx[i] + p.vy[i] * p.vy[i] + p.vz[i] * p.vz[i]);
  }
  EXPECT_NEAR(kinetic, 0.25024, 0.03 * 0.25);
}

TEST(Plummer, VelocitiesAreIsotropic) {
  // Each velocity component carries a third of the kinetic energy; position z / r is uniform in [-1, 1] (mean 0,
  // standard deviation 1/sqrt(3 N) = 0.0041 for N = 20000, tolerance 0.025 ~ 6 sigma).
  const std::uint64_t seed = testing_::freshSeed();
  MATCHA_TRACE_SEED(seed);
  const Particles p = testing_::plummer(20000, seed);
  double vx2 = 0, vy2 = 0, vz2 = 0, cosine = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    vx2 += p.vx[i] * p.vx[i];
    vy2 += p.vy[i] * p.vy[i];
    vz2 += p.vz[i] * p.vz[i];
    cosine += p.z[i] / radius(p, i);
  }
  const double mean = (vx2 + vy2 + vz2) / 3.0;
  // Each ratio has a standard deviation of 0.7% here (measured over 200 seeds); 4% is > 5 sigma.
  EXPECT_NEAR(vx2 / mean, 1.0, 0.04);
  EXPECT_NEAR(vy2 / mean, 1.0, 0.04);
  EXPECT_NEAR(vz2 / mean, 1.0, 0.04);
  EXPECT_NEAR(cosine / static_cast<double>(p.size()), 0.0, 0.025);
}

TEST(Plummer, CutRadiusValues) {
  const double a = 3.0 * kPi / 16.0;
  EXPECT_DOUBLE_EQ(matcha::ic::kPlummerScaleRadius, a);
  // 0.999^(-2/3) - 1 = 6.6726e-4, so r = 38.71 a = 22.80 N-body length units.
  EXPECT_NEAR(matcha::ic::plummerCutRadius(0.999), 22.804, 1e-3);
  EXPECT_NEAR(matcha::ic::plummerCutRadius(0.5), 1.30477 * a, 1e-5);
  EXPECT_EQ(matcha::ic::plummerCutRadius(1.0), std::numeric_limits<double>::infinity());
}

TEST(Plummer, AllBodiesWithinTheCutRadius) {
  // Before centring every body lies within plummerCutRadius(massCut); centring shifts all bodies by one vector of
  // length ~ rms(r) / sqrt(N) (1.77 / sqrt(20000) = 0.013 for massCut = 0.999, 0.003 for 0.5), so allow 0.05.
  const std::uint64_t seed = testing_::freshSeed();
  MATCHA_TRACE_SEED(seed);
  for (double massCut : {0.999, 0.5}) {
    SCOPED_TRACE("massCut = " + std::to_string(massCut));
    matcha::ic::PlummerParams params;
    params.numBodies = 20000;
    params.seed = seed;
    params.massCut = massCut;
    const Particles p = matcha::ic::makePlummer(params);
    const double cut = matcha::ic::plummerCutRadius(massCut);
    double largest = 0.0;
    for (std::size_t i = 0; i < p.size(); ++i) largest = std::max(largest, radius(p, i));
    EXPECT_LE(largest, cut + 0.05);
    // And the cut is approached: with 20000 draws the outermost lies beyond half of it.
    EXPECT_GT(largest, 0.5 * cut);
  }
}

TEST(Plummer, UntruncatedSamplingStaysFinite) {
  const std::uint64_t seed = testing_::freshSeed();
  MATCHA_TRACE_SEED(seed);
  matcha::ic::PlummerParams params;
  params.numBodies = 5000;
  params.seed = seed;
  params.massCut = 1.0;
  const Particles p = matcha::ic::makePlummer(params);
  EXPECT_TRUE(allFinite(p));
  EXPECT_NO_THROW(p.validate());
}

TEST(Plummer, RejectsBadParameters) {
  matcha::ic::PlummerParams params;
  params.numBodies = 0;
  EXPECT_THROW(matcha::ic::makePlummer(params), InputError);
  params.numBodies = 10;
  for (double massCut :
       {0.0, -0.1, 1.0000001, 2.0, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    params.massCut = massCut;
    EXPECT_THROW(matcha::ic::makePlummer(params), InputError) << "massCut " << massCut;
    EXPECT_THROW(matcha::ic::plummerCutRadius(massCut), InputError) << "massCut " << massCut;
  }
  EXPECT_THROW(testing_::plummer(0, 1), InputError);
}

// --------------------------------------------------------------------------------------------------- uniform cube

TEST(UniformCube, LayoutBoundsAndRest) {
  const std::uint64_t seed = testing_::freshSeed();
  MATCHA_TRACE_SEED(seed);
  for (double halfSide : {1.0, 0.25, 1000.0}) {
    SCOPED_TRACE("halfSide = " + std::to_string(halfSide));
    const std::size_t n = 5000;
    const Particles p = testing_::uniformCube(n, seed, halfSide);
    expectBasicLayout(p, n);
    double meanX = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      for (double c : {p.x[i], p.y[i], p.z[i]}) {
        EXPECT_GT(c, -halfSide);
        EXPECT_LT(c, halfSide);
      }
      EXPECT_EQ(p.vx[i], 0.0);
      EXPECT_EQ(p.vy[i], 0.0);
      EXPECT_EQ(p.vz[i], 0.0);
      meanX += p.x[i] / static_cast<double>(n);
    }
    // Uniform on [-h, h): standard deviation of the mean is h / sqrt(3 n) = 0.0082 h; 0.05 h is 6 sigma.
    EXPECT_NEAR(meanX, 0.0, 0.05 * halfSide);
  }
}

TEST(UniformCube, SameSeedSameBodiesOtherSeedOtherBodies) {
  const std::uint64_t seed = testing_::freshSeed();
  MATCHA_TRACE_SEED(seed);
  const Particles a = testing_::uniformCube(1000, seed);
  expectIdentical(a, testing_::uniformCube(1000, seed));
  EXPECT_NE(a.x, testing_::uniformCube(1000, seed + 1).x);
}

TEST(UniformCube, RejectsBadParameters) {
  EXPECT_THROW(testing_::uniformCube(0, 1), InputError);
  for (double halfSide :
       {0.0, -1.0, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    EXPECT_THROW(testing_::uniformCube(10, 1, halfSide), InputError) << "halfSide " << halfSide;
  }
}

// -------------------------------------------------------------------------------------------------- clump in halo

TEST(ClumpInHalo, LayoutForSeveralSizes) {
  const std::uint64_t seed = testing_::freshSeed();
  MATCHA_TRACE_SEED(seed);
  for (std::size_t n : {1u, 2u, 3u, 4u, 10u, 1001u}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    expectBasicLayout(testing_::clumpInHalo(n, seed), n);
  }
  EXPECT_EQ(testing_::numClumpBodies(1), 0u);
  EXPECT_EQ(testing_::numClumpBodies(4), 1u);
  EXPECT_EQ(testing_::numClumpBodies(1000), 300u);
  EXPECT_THROW(testing_::clumpInHalo(0, seed), InputError);
}

TEST(ClumpInHalo, SameSeedSameBodiesOtherSeedOtherBodies) {
  const std::uint64_t seed = testing_::freshSeed();
  MATCHA_TRACE_SEED(seed);
  const Particles a = testing_::clumpInHalo(1000, seed);
  expectIdentical(a, testing_::clumpInHalo(1000, seed));
  const Particles b = testing_::clumpInHalo(1000, seed + 1);
  EXPECT_NE(a.x, b.x);
  // The clump uses its own stream: its bodies differ as well, not only the halo's.
  const std::size_t firstClump = 1000 - testing_::numClumpBodies(1000);
  EXPECT_NE(std::vector<double>(a.x.begin() + firstClump, a.x.end()),
            std::vector<double>(b.x.begin() + firstClump, b.x.end()));
}

TEST(ClumpInHalo, ClumpIsDenseAndHaloIsWide) {
  const std::uint64_t seed = testing_::freshSeed();
  MATCHA_TRACE_SEED(seed);
  const std::size_t n = 20000;
  const Particles p = testing_::clumpInHalo(n, seed);
  const auto& c = testing_::kClumpCentre;
  const std::size_t firstClump = n - testing_::numClumpBodies(n);

  // 30% of the bodies in a Plummer sphere of a = 0.01: m(5 a) = (1 + 1/25)^(-3/2) = 94% of them within 0.05, i.e.
  // 28% of all bodies (sampling sd 0.2%), plus the few halo bodies that happen to lie there.
  std::size_t nearClump = 0;
  for (std::size_t i = 0; i < n; ++i) nearClump += radius(p, i, c[0], c[1], c[2]) < 0.05 ? 1 : 0;
  EXPECT_GE(static_cast<double>(nearClump), 0.25 * static_cast<double>(n));

  // The clump's centre of mass is at kClumpCentre (its own sphere was centred before shifting).
  double sx = 0, sy = 0, sz = 0;
  for (std::size_t i = firstClump; i < n; ++i) {
    sx += p.x[i];
    sy += p.y[i];
    sz += p.z[i];
  }
  const double numClump = static_cast<double>(n - firstClump);
  EXPECT_NEAR(sx / numClump, c[0], 1e-12);
  EXPECT_NEAR(sy / numClump, c[1], 1e-12);
  EXPECT_NEAR(sz / numClump, c[2], 1e-12);

  // The halo (scale radius 1) has its median radius at 1.30 a; with 14000 bodies the sd is ~0.02.
  std::vector<double> haloRadii;
  for (std::size_t i = 0; i < firstClump; ++i) haloRadii.push_back(radius(p, i));
  std::nth_element(haloRadii.begin(), haloRadii.begin() + haloRadii.size() / 2, haloRadii.end());
  EXPECT_NEAR(haloRadii[haloRadii.size() / 2], 1.3035 * testing_::kHaloScaleRadius, 0.1);
}

// ---------------------------------------------------------------------------------------------- untruncated Plummer

TEST(UntruncatedPlummer, IsPlummerWithoutTheCut) {
  // The same draws as makePlummer with massCut = 1. The default cut (0.999) drops the outermost 0.1% of the mass, so
  // without it some body lies beyond the cut radius (22.8) except with probability 0.999^20000 ~ 2e-9; the
  // outermost of N lies near a sqrt(1.5 N) ~ 100 for N = 20000.
  const std::uint64_t seed = testing_::freshSeed();
  MATCHA_TRACE_SEED(seed);
  const std::size_t n = 20000;
  const Particles p = testing_::untruncatedPlummer(n, seed);
  expectBasicLayout(p, n);
  matcha::ic::PlummerParams params;
  params.numBodies = n;
  params.seed = seed;
  params.massCut = 1.0;
  expectIdentical(p, matcha::ic::makePlummer(params));
  double largest = 0.0;
  for (std::size_t i = 0; i < n; ++i) largest = std::max(largest, radius(p, i));
  EXPECT_GT(largest, matcha::ic::plummerCutRadius(0.999));
  EXPECT_THROW(testing_::untruncatedPlummer(0, seed), InputError);
}

// --------------------------------------------------------------------------------------------------- corner clump

TEST(CornerClump, HalfTheBodiesInABallInTheCorner) {
  const std::uint64_t seed = testing_::freshSeed();
  MATCHA_TRACE_SEED(seed);
  for (std::size_t n : {1u, 2u, 3u, 1001u}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    expectBasicLayout(testing_::cornerClump(n, seed), n);
  }
  EXPECT_EQ(testing_::numCornerClumpBodies(1001), 500u);
  const std::size_t n = 10000;
  const Particles p = testing_::cornerClump(n, seed);
  const auto& c = testing_::kCornerClumpCentre;
  const std::size_t firstBall = n - testing_::numCornerClumpBodies(n);
  for (std::size_t i = 0; i < n; ++i) {
    EXPECT_EQ(p.vx[i], 0.0);
    if (i < firstBall) {
      for (double coordinate : {p.x[i], p.y[i], p.z[i]}) {
        EXPECT_GT(coordinate, -1.0);
        EXPECT_LT(coordinate, 1.0);
      }
    } else {
      EXPECT_LT(radius(p, i, c[0], c[1], c[2]), testing_::kCornerClumpRadius) << "body " << i;
      // Inside the octant [0, 1]^3, clear of its corner at the origin.
      EXPECT_GT(std::min({p.x[i], p.y[i], p.z[i]}), 0.0) << "body " << i;
    }
  }
  // The ball's bodies are uniform in it: a fraction (1/2)^3 of them within half its radius (sd 0.0047 for 5000).
  std::size_t inner = 0;
  for (std::size_t i = firstBall; i < n; ++i) {
    inner += radius(p, i, c[0], c[1], c[2]) < 0.5 * testing_::kCornerClumpRadius ? 1 : 0;
  }
  EXPECT_NEAR(static_cast<double>(inner) / static_cast<double>(n - firstBall), 0.125, 0.03);
  expectIdentical(p, testing_::cornerClump(n, seed));
  EXPECT_THROW(testing_::cornerClump(0, seed), InputError);
}

// ---------------------------------------------------------------------------------------------------- sliced cube

TEST(SlicedCube, ThinSliceAcrossTheOriginAndTwoAnchors) {
  const std::uint64_t seed = testing_::freshSeed();
  MATCHA_TRACE_SEED(seed);
  for (std::size_t n : {3u, 4u, 1001u}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    expectBasicLayout(testing_::slicedCube(n, seed), n);
  }
  EXPECT_THROW(testing_::slicedCube(2, seed), InputError);
  EXPECT_THROW(testing_::sliceThickness(2), InputError);
  const std::size_t n = 1 << 16;
  const Particles p = testing_::slicedCube(n, seed);
  const double t = testing_::sliceThickness(n);
  EXPECT_DOUBLE_EQ(t, 80.0 / static_cast<double>(n - 2));
  for (std::size_t k = 0; k < 2; ++k) {
    const double anchor = k == 0 ? -testing_::kSliceAnchor : testing_::kSliceAnchor;
    EXPECT_EQ(p.x[k], anchor);
    EXPECT_EQ(p.y[k], anchor);
    EXPECT_EQ(p.z[k], anchor);
  }
  std::size_t inSlice = 0;
  for (std::size_t i = 2; i < n; ++i) {
    EXPECT_GE(p.x[i], t - 2.0);
    EXPECT_LT(p.x[i], t);
    EXPECT_GE(p.y[i], 0.5);
    EXPECT_LT(p.y[i], 2.5);
    EXPECT_GE(p.z[i], 0.5);
    EXPECT_LT(p.z[i], 2.5);
    inSlice += p.x[i] >= 0.0 ? 1 : 0;
  }
  // Binomial(n - 2, t / 2): mean 40, sd 6.3; [15, 70] is 4 sd either side.
  EXPECT_GE(inSlice, 15u);
  EXPECT_LE(inSlice, 70u);
  expectIdentical(p, testing_::slicedCube(n, seed));
}

}  // namespace
