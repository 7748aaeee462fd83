// SPDX-License-Identifier: MIT
// libmatcha_force through its C API (lib/include/matcha_force.h, cunbody1.h): accelerations against a direct sum in
// double (the paper's E_max), i- and j-sets of any size, eps = 0 with coincident particles, the jerk variant, the
// paper's names, and every documented error code. The engine is MATCHA_ENGINE's (tests/lib/CMakeLists.txt).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cunbody1.h"
#include "lib_test_support.hpp"
#include "matcha/gpu/engine_factory.hpp"
#include "matcha/testing/generators.hpp"
#include "matcha_force.h"

extern "C" void cunbody1_force_jerk_from_c(double x[][3], double v[][3], double m[], double p[], double a[][3],
                                           double jk[][3], int n);

namespace matcha {
namespace {

using Vectors = std::vector<std::array<double, 3>>;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

class MatchaForce : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (testing::engineUnavailable(why)) GTEST_SKIP() << why;
  }
};

struct Set {
  Vectors x, v;
  std::vector<double> m;
  int size() const { return static_cast<int>(m.size()); }
};

Set setOf(const Particles& bodies) {
  Set s;
  for (std::size_t k = 0; k < bodies.size(); ++k) {
    s.x.push_back({bodies.x[k], bodies.y[k], bodies.z[k]});
    s.v.push_back({bodies.vx[k], bodies.vy[k], bodies.vz[k]});
    s.m.push_back(bodies.mass[k]);
  }
  return s;
}

const double (*data(const Vectors& v))[3] { return reinterpret_cast<const double(*)[3]>(v.data()); }
double (*data(Vectors& v))[3] { return reinterpret_cast<double(*)[3]>(v.data()); }

/// The oracle: direct sums in double, a pair at s^2 = 0 skipped.
struct Oracle {
  Vectors acc, jerk;
  std::vector<double> pot;
};
Oracle directSum(const Set& j, const Set& i, double eps2) {
  Oracle o{Vectors(i.m.size(), {0, 0, 0}), Vectors(i.m.size(), {0, 0, 0}), std::vector<double>(i.m.size(), 0.0)};
  for (std::size_t a = 0; a < i.m.size(); ++a) {
    for (std::size_t b = 0; b < j.m.size(); ++b) {
      double r[3], v[3];
      for (int d = 0; d < 3; ++d) {
        r[d] = j.x[b][d] - i.x[a][d];
        v[d] = j.v[b][d] - i.v[a][d];
      }
      const double s2 = r[0] * r[0] + r[1] * r[1] + r[2] * r[2] + eps2;
      if (s2 == 0.0) continue;
      const double s = std::sqrt(s2), rv = r[0] * v[0] + r[1] * v[1] + r[2] * v[2];
      for (int d = 0; d < 3; ++d) {
        o.acc[a][d] += j.m[b] * r[d] / (s2 * s);
        o.jerk[a][d] += j.m[b] * (v[d] / (s2 * s) - 3.0 * rv * r[d] / (s2 * s2 * s));
      }
      o.pot[a] -= j.m[b] / s;
    }
  }
  return o;
}

double relativeError(const std::array<double, 3>& value, const std::array<double, 3>& reference) {
  const double scale = std::hypot(reference[0], reference[1], reference[2]);
  const double error = std::hypot(value[0] - reference[0], value[1] - reference[1], value[2] - reference[2]);
  return scale > 0.0 ? error / scale : error;
}

/// The paper's E_max = max_i |a_i - a_host,i| / |a_host,i|.
double maxRelativeError(const Vectors& values, const Vectors& reference) {
  double worst = 0.0;
  for (std::size_t i = 0; i < values.size(); ++i) worst = std::max(worst, relativeError(values[i], reference[i]));
  return worst;
}

Vectors forcesOf(const Set& j, const Set& i, double eps2) {
  Vectors a(i.m.size(), {kNaN, kNaN, kNaN});
  EXPECT_EQ(matcha_force(data(j.x), j.m.data(), data(i.x), eps2, data(a), i.size(), j.size()), MATCHA_FORCE_OK)
      << matcha_force_last_error();
  EXPECT_STREQ(matcha_force_last_error(), "");
  return a;
}

Set uniformSet(std::size_t n, std::uint64_t seed, double mass) {
  Set s;
  std::mt19937_64 random(seed);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  for (std::size_t k = 0; k < n; ++k) {
    s.x.push_back({uniform(random), uniform(random), uniform(random)});
    s.v.push_back({uniform(random), uniform(random), uniform(random)});
    s.m.push_back(mass * (1.0 + 0.5 * uniform(random)));
  }
  return s;
}

TEST_F(MatchaForce, ThePapersTestOnAPlummerSphere) {
  // Fig. 10's program: the same N bodies as i and j, eps2 = 0.01, E_max against the host's double sum; and eps2 = 0,
  // where each body's own pair is the skipped coincident one. Chamomile's Table 2 column is 5.4e-7 at N = 2048.
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const Set bodies = setOf(testing::plummer(2048, seed));
  for (const double eps2 : {0.01, 0.0}) {
    const double eMax = maxRelativeError(forcesOf(bodies, bodies, eps2), directSum(bodies, bodies, eps2).acc);
    std::printf("matcha_force on %s, Plummer N = 2048, eps2 = %g: E_max = %.2e\n", matcha_force_engine(), eps2, eMax);
    EXPECT_LT(eMax, 3e-6) << "eps2 " << eps2;
  }
}

TEST_F(MatchaForce, IndependentSetsOfAnySize) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  // ni = 1 and nj = 1: one pull, closed form.
  const Set one{{{0.0, 3.0, 0.0}}, {{0, 0, 0}}, {2.0}};
  const Set origin{{{0.0, 0.0, 0.0}}, {{0, 0, 0}}, {1.0}};
  const Vectors single = forcesOf(one, origin, 16.0);
  EXPECT_NEAR(single[0][1], 6.0 / 125.0, 1e-7 * 6.0 / 125.0);
  EXPECT_NEAR(single[0][0], 0.0, 1e-12);
  // Many j on one i, one j on many i, and two unrelated sets, in a box and in a Plummer sphere.
  const Set cube = uniformSet(3000, seed, 1.0 / 3000), few = uniformSet(7, seed + 1, 0.1);
  const Set plummer = setOf(testing::plummer(1500, seed + 2));
  const std::vector<std::pair<const Set*, const Set*>> cases = {{&cube, &origin},  {&origin, &cube}, {&plummer, &cube},
                                                                {&cube, &plummer}, {&few, &plummer}, {&plummer, &few}};
  for (const auto& [j, i] : cases) {
    for (const double eps2 : {1.0 / 65536, 0.0}) {
      const double eMax = maxRelativeError(forcesOf(*j, *i, eps2), directSum(*j, *i, eps2).acc);
      EXPECT_LT(eMax, 3e-6) << "ni " << i->size() << ", nj " << j->size() << ", eps2 " << eps2;
    }
  }
}

TEST_F(MatchaForce, CoincidentParticlesWithoutSofteningAreSkipped) {
  // i-particles on top of j-particles (and of each other), eps2 = 0: those pairs are skipped, never NaN.
  const Set j{{{0, 0, 0}, {1, 0, 0}, {1, 0, 0}, {0, 2, 0}}, Vectors(4, {0, 0, 0}), {1.0, 2.0, 0.5, 4.0}};
  const Set i{{{1, 0, 0}, {1, 0, 0}, {0, 0, 0}}, Vectors(3, {0, 0, 0}), {1.0, 1.0, 1.0}};
  const Vectors a = forcesOf(j, i, 0.0);
  const Oracle o = directSum(j, i, 0.0);
  for (int k = 0; k < 3; ++k) {
    for (int d = 0; d < 3; ++d) ASSERT_TRUE(std::isfinite(a[k][d]));
    EXPECT_LT(relativeError(a[k], o.acc[k]), 1e-6) << k;
  }
  // With softening the coincident j counts, with a pull of exactly 0: the same result.
  const Vectors soft = forcesOf(j, i, 1e-4);
  EXPECT_LT(relativeError(soft[2], directSum(j, i, 1e-4).acc[2]), 1e-6);
}

TEST_F(MatchaForce, NoJParticlesGiveZeroAndNoIParticlesNothing) {
  const Set none;
  const Set i = uniformSet(5, 1, 1.0);
  const Vectors a = forcesOf(none, i, 0.0);
  for (const auto& v : a) EXPECT_EQ(v, (std::array<double, 3>{0, 0, 0}));
  EXPECT_EQ(matcha_force(nullptr, nullptr, nullptr, 0.0, nullptr, 0, 0), MATCHA_FORCE_OK);
}

TEST_F(MatchaForce, JerkVariantMatchesDoubleSums) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const Set j = setOf(testing::plummer(1200, seed)), i = uniformSet(300, seed + 3, 1.0);
  for (const double eps2 : {1.0 / 65536, 0.0}) {
    Vectors a(i.m.size(), {kNaN, kNaN, kNaN}), jerk = a;
    std::vector<double> pot(i.m.size(), kNaN);
    ASSERT_EQ(matcha_force_jerk(data(j.x), data(j.v), j.m.data(), data(i.x), data(i.v), eps2, data(a), data(jerk),
                                pot.data(), i.size(), j.size()),
              MATCHA_FORCE_OK)
        << matcha_force_last_error();
    const Oracle o = directSum(j, i, eps2);
    EXPECT_LT(maxRelativeError(a, o.acc), 2e-5);
    EXPECT_LT(maxRelativeError(jerk, o.jerk), 1e-4);
    for (std::size_t k = 0; k < pot.size(); ++k) EXPECT_NEAR(pot[k], o.pot[k], 1e-6 * std::abs(o.pot[k])) << k;
    // pot may be null.
    Vectors again(i.m.size());
    ASSERT_EQ(matcha_force_jerk(data(j.x), data(j.v), j.m.data(), data(i.x), data(i.v), eps2, data(again), data(jerk),
                                nullptr, i.size(), j.size()),
              MATCHA_FORCE_OK);
    EXPECT_LT(maxRelativeError(again, a), 1e-12);
  }
}

TEST_F(MatchaForce, ThePapersNamesMapOntoMatchas) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  Set bodies = setOf(testing::plummer(500, seed));
  // Fig. 9's force(xj, mj, xi, eps2, a, ni, nj) is matcha_force.
  Vectors viaPaper(bodies.m.size()), viaMatcha = forcesOf(bodies, bodies, 0.01);
  force(data(bodies.x), bodies.m.data(), data(bodies.x), 0.01, data(viaPaper), bodies.size(), bodies.size());
  EXPECT_LT(maxRelativeError(viaPaper, viaMatcha), 1e-12);
  // Fig. A.2's force(x, v, m, p, a, jk, n) (compiled as C with CUNBODY1_FORCE_JERK) is matcha_force_jerk with
  // eps = 0 on one set.
  Vectors a(bodies.m.size()), jerk(bodies.m.size());
  std::vector<double> pot(bodies.m.size());
  cunbody1_force_jerk_from_c(data(bodies.x), data(bodies.v), bodies.m.data(), pot.data(), data(a), data(jerk),
                             bodies.size());
  const Oracle o = directSum(bodies, bodies, 0.0);
  EXPECT_LT(maxRelativeError(a, o.acc), 2e-5);
  EXPECT_LT(maxRelativeError(jerk, o.jerk), 1e-4);
  EXPECT_NEAR(pot[0], o.pot[0], 1e-6 * std::abs(o.pot[0]));
}

TEST_F(MatchaForce, BadInputReturnsTheDocumentedCodesAndLeavesTheOutputsAlone) {
  const Set j = uniformSet(10, 2, 0.1), i = uniformSet(4, 3, 0.1);
  Vectors a(4, {kNaN, kNaN, kNaN});
  const auto expectError = [&](int status, int expected, const char* what) {
    EXPECT_EQ(status, expected) << what;
    const std::string message = matcha_force_last_error();
    EXPECT_EQ(message.rfind("matcha_force", 0), 0u) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_TRUE(std::isnan(a[0][0])) << what << ": the output was written";
  };
  expectError(matcha_force(nullptr, j.m.data(), data(i.x), 0.0, data(a), 4, 10), MATCHA_FORCE_ERROR_ARGUMENT, "xj");
  expectError(matcha_force(data(j.x), nullptr, data(i.x), 0.0, data(a), 4, 10), MATCHA_FORCE_ERROR_ARGUMENT, "mj");
  expectError(matcha_force(data(j.x), j.m.data(), data(i.x), 0.0, nullptr, 4, 10), MATCHA_FORCE_ERROR_ARGUMENT, "a");
  expectError(matcha_force(data(j.x), j.m.data(), data(i.x), 0.0, data(a), -1, 10), MATCHA_FORCE_ERROR_ARGUMENT,
              "ni < 0");
  expectError(matcha_force(data(j.x), j.m.data(), data(i.x), 0.0, data(a), 4, -3), MATCHA_FORCE_ERROR_ARGUMENT,
              "nj < 0");
  expectError(matcha_force(data(j.x), j.m.data(), data(i.x), -1.0, data(a), 4, 10), MATCHA_FORCE_ERROR_ARGUMENT,
              "eps2 < 0");
  expectError(matcha_force(data(j.x), j.m.data(), data(i.x), kNaN, data(a), 4, 10), MATCHA_FORCE_ERROR_ARGUMENT,
              "eps2 NaN");
  Set bad = i;
  bad.x[2][1] = std::numeric_limits<double>::infinity();
  expectError(matcha_force(data(j.x), j.m.data(), data(bad.x), 0.0, data(a), 4, 10), MATCHA_FORCE_ERROR_ARGUMENT,
              "xi inf");
  bad.x[2][1] = 1e12;
  expectError(matcha_force(data(j.x), j.m.data(), data(bad.x), 0.0, data(a), 4, 10), MATCHA_FORCE_ERROR_ARGUMENT,
              "beyond float range");
  Vectors jerk(4);
  expectError(
      matcha_force_jerk(data(j.x), nullptr, j.m.data(), data(i.x), data(i.v), 0.0, data(a), data(jerk), nullptr, 4, 10),
      MATCHA_FORCE_ERROR_ARGUMENT, "vj");
  // A success clears the message.
  EXPECT_EQ(matcha_force(data(j.x), j.m.data(), data(i.x), 0.0, data(a), 4, 10), MATCHA_FORCE_OK);
  EXPECT_STREQ(matcha_force_last_error(), "");
}

TEST_F(MatchaForce, TheEngineComesFromMatchaEngine) {
  EXPECT_STREQ(matcha_force_version(), MATCHA_FORCE_VERSION);
  const char* engine = std::getenv("MATCHA_ENGINE");
  ASSERT_NE(matcha_force_engine(), nullptr) << matcha_force_last_error();
  if (engine != nullptr && std::string(engine) == "cpu") {
    EXPECT_NE(std::string(matcha_force_engine()).find("cpu-float"), std::string::npos) << matcha_force_engine();
  }
  const Set j = uniformSet(10, 2, 0.1), i = uniformSet(4, 3, 0.1);
  Vectors a(4);
  {
    const testing::ScopedEnvironment bogus("MATCHA_ENGINE", "gpu-please");
    EXPECT_EQ(matcha_force_close(), MATCHA_FORCE_OK);
    EXPECT_EQ(matcha_force(data(j.x), j.m.data(), data(i.x), 0.0, data(a), 4, 10), MATCHA_FORCE_ERROR_ENGINE);
    EXPECT_NE(std::string(matcha_force_last_error()).find("MATCHA_ENGINE"), std::string::npos);
    EXPECT_EQ(matcha_force_engine(), nullptr);
  }
  if (!gpu::queryCudaDevice().available) {
    const testing::ScopedEnvironment cuda("MATCHA_ENGINE", "cuda");
    EXPECT_EQ(matcha_force_close(), MATCHA_FORCE_OK);
    EXPECT_EQ(matcha_force(data(j.x), j.m.data(), data(i.x), 0.0, data(a), 4, 10), MATCHA_FORCE_ERROR_ENGINE);
  }
  EXPECT_EQ(matcha_force_close(), MATCHA_FORCE_OK);
  EXPECT_EQ(matcha_force(data(j.x), j.m.data(), data(i.x), 0.0, data(a), 4, 10), MATCHA_FORCE_OK);
}

}  // namespace
}  // namespace matcha
