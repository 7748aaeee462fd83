// SPDX-License-Identifier: MIT
// libmatcha_g6 through its C and Fortran API (lib/include/matcha_g6.h) against the CPU Hermite engine in double:
// GRAPE-6's scaled derivatives, i-blocks of 1, of the pipe count and larger than a thread block, a j-particle updated
// between two calcs, the self term skipped by index, eps = 0 with coincident particles, nearest neighbours, and every
// documented error code. The engine is MATCHA_ENGINE's (tests/lib/CMakeLists.txt).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "lib_test_support.hpp"
#include "matcha/core/hermite_predictor.hpp"
#include "matcha/gpu/hermite_cpu_engine.hpp"
#include "matcha/testing/generators.hpp"
#include "matcha/testing/hermite_comparison.hpp"
#include "matcha/testing/hermite_inputs.hpp"
#include "matcha_g6.h"

namespace matcha {
namespace {

using testing::HermiteResults;
using testing::IBlock;
constexpr int kCluster = 3;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

bool cpuEngine() {
  const char* engine = std::getenv("MATCHA_ENGINE");
  return engine != nullptr && std::string(engine) == "cpu";
}

class MatchaG6 : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (testing::engineUnavailable(why)) GTEST_SKIP() << why;
    ASSERT_EQ(g6_open(kCluster), MATCHA_G6_OK) << matcha_g6_last_error();
  }
  void TearDown() override { g6_close(kCluster); }
};

/// Sends `js` to addresses 0..n-1 with GRAPE-6's scaling of the derivatives.
void sendAll(int cluster, const std::vector<JParticle>& js) {
  for (std::size_t k = 0; k < js.size(); ++k) {
    JParticle p = js[k];
    double a2by18[3], a1by6[3], aby2[3];
    for (int d = 0; d < 3; ++d) {
      a2by18[d] = p.snap[d] / 18.0;
      a1by6[d] = p.jerk[d] / 6.0;
      aby2[d] = p.acc[d] / 2.0;
    }
    ASSERT_EQ(g6_set_j_particle(cluster, static_cast<int>(k), static_cast<int>(p.id), p.time, 1.0 / 64, p.mass, a2by18,
                                a1by6, aby2, p.vel, p.pos),
              MATCHA_G6_OK)
        << matcha_g6_last_error();
  }
}

/// j-particles of a Plummer sphere with their own times in [0, 1/64) and made-up derivatives, ids 100 + k.
std::vector<JParticle> plummerAtOwnTimes(std::size_t n, std::uint64_t seed) {
  std::vector<JParticle> js = testing::jParticlesOf(testing::plummer(n, seed), 100);
  std::mt19937_64 random(seed);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  for (JParticle& p : js) {
    p.time = (uniform(random) + 1.0) / 128.0;
    for (int d = 0; d < 3; ++d) {
      p.acc[d] = uniform(random);
      p.jerk[d] = 10.0 * uniform(random);
      p.snap[d] = 100.0 * uniform(random);
    }
  }
  return js;
}

/// The j-particles predicted to `time`, at time 0 (what the host hands firsthalf as i-particles, and what a tie
/// between two neighbours is judged on).
std::vector<JParticle> predicted(const std::vector<JParticle>& js, double time) {
  std::vector<JParticle> out = js;
  for (JParticle& p : out) {
    for (int d = 0; d < 3; ++d)
      predictCoordinate(time - p.time, p.pos[d], p.vel[d], p.acc[d], p.jerk[d], p.snap[d], p.pos[d], p.vel[d]);
    p.time = 0.0;
  }
  return out;
}

/// One firsthalf/lasthalf2 on `block` (ids must fit int).
HermiteResults calc(int cluster, int nj, const IBlock& block, double eps2, bool fortran = false) {
  const int ni = static_cast<int>(block.id.size());
  std::vector<int> index(block.id.begin(), block.id.end());
  std::vector<double> xi = block.pos, vi = block.vel;
  auto* x = reinterpret_cast<double(*)[3]>(xi.data());
  auto* v = reinterpret_cast<double(*)[3]>(vi.data());
  HermiteResults r(block.id.size());
  std::vector<int> nearest(block.id.size(), -7);
  auto* acc = reinterpret_cast<double(*)[3]>(r.acc.data());
  auto* jerk = reinterpret_cast<double(*)[3]>(r.jerk.data());
  int status = 0;
  if (fortran) {
    int id = cluster, n = nj, count = ni;
    double e = eps2;
    status = g6calc_firsthalf_(&id, &n, &count, index.data(), x, v, nullptr, nullptr, nullptr, &e, nullptr);
    EXPECT_EQ(status, MATCHA_G6_OK) << matcha_g6_last_error();
    status =
        g6calc_lasthalf2_(&id, &n, &count, index.data(), x, v, &e, nullptr, acc, jerk, r.pot.data(), nearest.data());
  } else {
    status = g6calc_firsthalf(cluster, nj, ni, index.data(), x, v, nullptr, nullptr, nullptr, eps2, nullptr);
    EXPECT_EQ(status, MATCHA_G6_OK) << matcha_g6_last_error();
    status =
        g6calc_lasthalf2(cluster, nj, ni, index.data(), x, v, eps2, nullptr, acc, jerk, r.pot.data(), nearest.data());
  }
  EXPECT_EQ(status, MATCHA_G6_OK) << matcha_g6_last_error();
  for (std::size_t i = 0; i < nearest.size(); ++i) {
    r.nearestId[i] = nearest[i];
    r.nearestDistance2[i] = kNaN;  // GRAPE-6 returns no distance
  }
  return r;
}

/// The oracle: the CPU Hermite engine on the same j-particles, predicted to `time`.
HermiteResults oracle(const std::vector<JParticle>& js, double time, const IBlock& block, double eps2) {
  gpu::HermiteCpuEngine engine;
  testing::loadSlots(engine, js, time);
  return testing::forcesOn(engine, block, eps2);
}

void expectMatchesOracle(const HermiteResults& r, const HermiteResults& expected, const std::vector<JParticle>& now,
                         const IBlock& block, const std::string& what) {
  SCOPED_TRACE(what);
  const testing::HermiteComparison c = testing::compareHermite(r, expected, now, block);
  EXPECT_EQ(c.unwritten, 0u);
  EXPECT_EQ(c.neighbourMismatches, 0u);
  // The CPU engine is the oracle itself (the derivatives only pass through GRAPE-6's scaling); the GPU's float pairs
  // err as tests/gpu/test_hermite_cuda_engine.cpp measures.
  const double accBound = cpuEngine() ? 1e-12 : 2e-5, jerkBound = cpuEngine() ? 1e-11 : 1e-4;
  EXPECT_LT(percentile(c.acc, 1.0), accBound);
  EXPECT_LT(percentile(c.jerk, 1.0), jerkBound);
  EXPECT_LT(percentile(c.pot, 1.0), cpuEngine() ? 1e-13 : 1e-6);
}

IBlock blockOf(const std::vector<JParticle>& now, std::size_t first, std::size_t count) {
  std::vector<std::size_t> indices;
  for (std::size_t k = first; k < first + count; ++k) indices.push_back(k);
  return testing::iBlockOf(now, indices);
}

TEST_F(MatchaG6, BlocksOfOneOfThePipesAndBeyondMatchTheCpuEngine) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const std::vector<JParticle> js = plummerAtOwnTimes(1500, seed);
  sendAll(kCluster, js);
  const double ti = 1.0 / 64;
  ASSERT_EQ(g6_set_ti(kCluster, ti), MATCHA_G6_OK);
  const std::vector<JParticle> now = predicted(js, ti);
  const int pipes = g6_npipes();
  ASSERT_GE(pipes, 1);
  const std::vector<std::pair<std::size_t, std::size_t>> blocks = {
      {7, 1}, {0, std::size_t(pipes)}, {200, 300}, {1100, 400}};
  for (const double eps2 : {1.0 / 65536, 0.0}) {
    for (const auto& [first, count] : blocks) {
      const IBlock block = blockOf(now, first, count);
      expectMatchesOracle(calc(kCluster, 1500, block, eps2), oracle(js, ti, block, eps2), now, block,
                          "ni " + std::to_string(count) + ", eps2 " + std::to_string(eps2));
    }
  }
  // nj below the j-particles set: the rest is not seen.
  const IBlock block = blockOf(now, 0, 50);
  const std::vector<JParticle> lowerHalf(js.begin(), js.begin() + 750);
  expectMatchesOracle(calc(kCluster, 750, block, 0.0), oracle(lowerHalf, ti, block, 0.0), now, block, "nj 750");
}

TEST_F(MatchaG6, TheFortranCallsGiveTheSameResults) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const std::vector<JParticle> js = plummerAtOwnTimes(400, seed);
  sendAll(kCluster, js);
  double ti = 0.0078125;
  int id = kCluster;
  ASSERT_EQ(g6_set_ti_(&id, &ti), MATCHA_G6_OK);
  const IBlock block = blockOf(predicted(js, ti), 0, 100);
  const HermiteResults viaC = calc(kCluster, 400, block, 1e-4), viaFortran = calc(kCluster, 400, block, 1e-4, true);
  EXPECT_EQ(viaC.acc, viaFortran.acc);
  EXPECT_EQ(viaC.jerk, viaFortran.jerk);
  EXPECT_EQ(viaC.pot, viaFortran.pot);
  EXPECT_EQ(viaC.nearestId, viaFortran.nearestId);
  EXPECT_EQ(g6_npipes_(), g6_npipes());
  EXPECT_EQ(g6_getnjmax_(&id), g6_getnjmax(kCluster));
  int unit = 30;
  EXPECT_EQ(g6_set_tunit_(&unit), MATCHA_G6_OK);
  EXPECT_EQ(g6_set_xunit_(&unit), MATCHA_G6_OK);
  int size = 64;
  EXPECT_EQ(g6_initialize_jp_buffer_(&id, &size), MATCHA_G6_OK);
  EXPECT_EQ(g6_flush_jp_buffer_(&id), MATCHA_G6_OK);
  EXPECT_EQ(g6_reset_(&id), MATCHA_G6_OK);
  EXPECT_EQ(g6_reset_fofpga_(&id), MATCHA_G6_OK);
  EXPECT_EQ(g6_close_(&id), MATCHA_G6_OK);
  EXPECT_EQ(g6_open_(&id), MATCHA_G6_OK);
  EXPECT_EQ(g6_open_(nullptr), MATCHA_G6_ERROR_ARGUMENT);
}

TEST_F(MatchaG6, TheScaledDerivativesAreGrape6s) {
  // One j of unit mass: aby2 = a/2, a1by6 = jerk/6, a2by18 = snap/18 (GRAPE-6's scaling); an i at rest at the
  // origin reads back the predicted position (r = a |r|^3, |r| = -1/phi) against the Taylor series with a, jerk, snap.
  double x[3] = {2.0, -1.0, 0.5}, v[3] = {0.25, 0.5, -0.75};
  const double acc[3] = {0.1, -0.2, 0.3}, jerk[3] = {-1.0, 0.5, 2.0}, snap[3] = {4.0, -3.0, 1.0};
  double aby2[3], a1by6[3], a2by18[3];
  for (int d = 0; d < 3; ++d) {
    aby2[d] = acc[d] / 2;
    a1by6[d] = jerk[d] / 6;
    a2by18[d] = snap[d] / 18;
  }
  ASSERT_EQ(g6_set_j_particle(kCluster, 0, 5, 0.5, 0.125, 1.0, a2by18, a1by6, aby2, v, x), MATCHA_G6_OK);
  ASSERT_EQ(g6_set_ti(kCluster, 0.75), MATCHA_G6_OK);
  const HermiteResults r = calc(kCluster, 1, IBlock{{0}, {0, 0, 0}, {0, 0, 0}}, 0.0);
  const double distance = -1.0 / r.pot[0], dt = 0.25;
  const double tolerance = cpuEngine() ? 1e-13 : 1e-5;
  for (int d = 0; d < 3; ++d) {
    const double taylor =
        x[d] + v[d] * dt + acc[d] * dt * dt / 2 + jerk[d] * std::pow(dt, 3) / 6 + snap[d] * std::pow(dt, 4) / 24;
    EXPECT_NEAR(r.acc[d] * std::pow(distance, 3), taylor, tolerance * distance) << d;
  }
}

TEST_F(MatchaG6, AJParticleUpdatedBetweenTwoCallsIsSeenByTheNext) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  std::vector<JParticle> js = plummerAtOwnTimes(300, seed);
  sendAll(kCluster, js);
  ASSERT_EQ(g6_set_ti(kCluster, 1.0 / 64), MATCHA_G6_OK);
  const IBlock block = blockOf(predicted(js, 1.0 / 64), 0, 20);
  const HermiteResults before = calc(kCluster, 300, block, 1e-4);
  // Particle 150 corrected at t = 1/64 (a new state at a new time), as a block step does.
  JParticle& p = js[150];
  p = predicted({p}, 1.0 / 64)[0];
  p.time = 1.0 / 64;
  p.pos[0] += 0.01;
  p.acc[1] = 3.0;
  double a2by18[3], a1by6[3], aby2[3];
  for (int d = 0; d < 3; ++d) {
    a2by18[d] = p.snap[d] / 18;
    a1by6[d] = p.jerk[d] / 6;
    aby2[d] = p.acc[d] / 2;
  }
  ASSERT_EQ(g6_set_j_particle(kCluster, 150, static_cast<int>(p.id), p.time, 1.0 / 64, p.mass, a2by18, a1by6, aby2,
                              p.vel, p.pos),
            MATCHA_G6_OK);
  ASSERT_EQ(g6_set_ti(kCluster, 1.0 / 32), MATCHA_G6_OK);
  const std::vector<JParticle> now = predicted(js, 1.0 / 32);
  const IBlock later = blockOf(now, 0, 20);
  const HermiteResults after = calc(kCluster, 300, later, 1e-4);
  expectMatchesOracle(after, oracle(js, 1.0 / 32, later, 1e-4), now, later, "after the update");
  EXPECT_NE(after.acc, before.acc);
}

TEST_F(MatchaG6, TheSelfTermIsSkippedByIndexAndCoincidentPairsGiveNoNaN) {
  // The i-particle with index 7 at (1, 1, 1), its own j-copy a hair off (the host's prediction and the engine's differ
  // in the last bits), index 8 exactly on top of the i-particle, index 9 at distance 2; eps2 = 0.
  double zero[3] = {0, 0, 0};
  double own[3] = {std::nextafter(1.0, 2.0), 1.0, 1.0}, x8[3] = {1.0, 1.0, 1.0}, x9[3] = {3.0, 1.0, 1.0};
  ASSERT_EQ(g6_set_j_particle(kCluster, 0, 7, 0.0, 0.1, 0.5, zero, zero, zero, zero, own), MATCHA_G6_OK);
  ASSERT_EQ(g6_set_j_particle(kCluster, 1, 8, 0.0, 0.1, 0.25, zero, zero, zero, zero, x8), MATCHA_G6_OK);
  ASSERT_EQ(g6_set_j_particle(kCluster, 2, 9, 0.0, 0.1, 4.0, zero, zero, zero, zero, x9), MATCHA_G6_OK);
  ASSERT_EQ(g6_set_ti(kCluster, 0.0), MATCHA_G6_OK);
  const HermiteResults r = calc(kCluster, 3, IBlock{{7}, {1.0, 1.0, 1.0}, {0, 0, 0}}, 0.0);
  EXPECT_NEAR(r.acc[0], 1.0, 1e-6);  // 4 / 2^2 from index 9 alone
  EXPECT_NEAR(r.pot[0], -2.0, 1e-6);
  for (double value : r.jerk) EXPECT_TRUE(std::isfinite(value));
  EXPECT_EQ(r.nearestId[0], 8);
  // An i-particle with an index no j has: every j counts, and the nearest is the closest of all.
  const HermiteResults stranger = calc(kCluster, 3, IBlock{{42}, {1.0, 1.0, 1.5}, {0, 0, 0}}, 1e-4);
  EXPECT_TRUE(stranger.nearestId[0] == 7 || stranger.nearestId[0] == 8);
}

TEST_F(MatchaG6, ClustersAreIndependent) {
  double zero[3] = {0, 0, 0}, near[3] = {1, 0, 0}, far[3] = {-2, 0, 0};
  ASSERT_EQ(g6_open(kCluster + 1), MATCHA_G6_OK);
  ASSERT_EQ(g6_set_j_particle(kCluster, 0, 1, 0.0, 0.1, 1.0, zero, zero, zero, zero, near), MATCHA_G6_OK);
  ASSERT_EQ(g6_set_j_particle(kCluster + 1, 0, 1, 0.0, 0.1, 1.0, zero, zero, zero, zero, far), MATCHA_G6_OK);
  const IBlock origin{{0}, {0, 0, 0}, {0, 0, 0}};
  EXPECT_NEAR(calc(kCluster, 1, origin, 0.0).acc[0], 1.0, 1e-6);
  EXPECT_NEAR(calc(kCluster + 1, 1, origin, 0.0).acc[0], -0.25, 1e-6);
  EXPECT_EQ(g6_close(kCluster + 1), MATCHA_G6_OK);
  EXPECT_NEAR(calc(kCluster, 1, origin, 0.0).acc[0], 1.0, 1e-6);
  ASSERT_NE(matcha_g6_engine(kCluster), nullptr);
  if (cpuEngine()) {
    EXPECT_NE(std::string(matcha_g6_engine(kCluster)).find("cpu-hermite"), std::string::npos);
  }
  EXPECT_STREQ(matcha_g6_version(), MATCHA_G6_VERSION);
}

TEST_F(MatchaG6, BadCallsReturnTheDocumentedCodes) {
  double zero[3] = {0, 0, 0}, x[3] = {1, 0, 0};
  int index[2] = {1, 2};
  double xi[2][3] = {{0, 0, 0}, {0, 1, 0}}, vi[2][3] = {}, acc[2][3], jerk[2][3], pot[2];
  int nnb[2];
  const auto expectCode = [](int status, int expected, const char* what) {
    EXPECT_EQ(status, expected) << what;
    const std::string message = matcha_g6_last_error();
    EXPECT_FALSE(message.empty()) << what;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  };
  // A cluster never opened.
  const int closed = kCluster + 2;
  expectCode(g6_set_ti(closed, 0.0), MATCHA_G6_ERROR_NOT_OPEN, "set_ti before open");
  expectCode(g6_set_j_particle(closed, 0, 1, 0, 0, 1, zero, zero, zero, zero, x), MATCHA_G6_ERROR_NOT_OPEN,
             "set_j_particle before open");
  expectCode(g6calc_firsthalf(closed, 1, 1, index, xi, vi, nullptr, nullptr, nullptr, 0.0, nullptr),
             MATCHA_G6_ERROR_NOT_OPEN, "firsthalf before open");
  expectCode(g6calc_lasthalf(closed, 1, 1, index, xi, vi, 0.0, nullptr, acc, jerk, pot), MATCHA_G6_ERROR_NOT_OPEN,
             "lasthalf before open");
  expectCode(g6_getnjmax(closed), MATCHA_G6_ERROR_NOT_OPEN, "getnjmax before open");
  expectCode(g6_reset(closed), MATCHA_G6_ERROR_NOT_OPEN, "reset before open");
  expectCode(g6_close(closed), MATCHA_G6_ERROR_NOT_OPEN, "close before open");
  EXPECT_EQ(matcha_g6_engine(closed), nullptr);
  expectCode(g6_open(-1), MATCHA_G6_ERROR_ARGUMENT, "clusterid -1");
  expectCode(g6_open(64), MATCHA_G6_ERROR_ARGUMENT, "clusterid 64");

  // The open cluster.
  expectCode(g6calc_lasthalf(kCluster, 0, 1, index, xi, vi, 0.0, nullptr, acc, jerk, pot), MATCHA_G6_ERROR_NO_CALC,
             "lasthalf without firsthalf");
  expectCode(g6_set_j_particle(kCluster, -1, 1, 0, 0, 1, zero, zero, zero, zero, x), MATCHA_G6_ERROR_ARGUMENT,
             "address -1");
  expectCode(g6_set_j_particle(kCluster, g6_getnjmax(kCluster), 1, 0, 0, 1, zero, zero, zero, zero, x),
             MATCHA_G6_ERROR_ARGUMENT, "address njmax");
  expectCode(g6_set_j_particle(kCluster, 0, 1, 0, 0, 1, zero, nullptr, zero, zero, x), MATCHA_G6_ERROR_ARGUMENT,
             "a1by6 null");
  double bad[3] = {0, kNaN, 0};
  expectCode(g6_set_j_particle(kCluster, 0, 1, 0, 0, 1, zero, zero, zero, zero, bad), MATCHA_G6_ERROR_ARGUMENT,
             "x NaN");
  expectCode(g6_set_ti(kCluster, kNaN), MATCHA_G6_ERROR_ARGUMENT, "ti NaN");
  ASSERT_EQ(g6_set_j_particle(kCluster, 0, 1, 0, 0, 1, zero, zero, zero, zero, x), MATCHA_G6_OK);
  EXPECT_STREQ(matcha_g6_last_error(), "");
  expectCode(g6calc_firsthalf(kCluster, 2, 1, index, xi, vi, nullptr, nullptr, nullptr, 0.0, nullptr),
             MATCHA_G6_ERROR_ARGUMENT, "nj above the particles set");
  expectCode(g6calc_firsthalf(kCluster, 1, -1, index, xi, vi, nullptr, nullptr, nullptr, 0.0, nullptr),
             MATCHA_G6_ERROR_ARGUMENT, "ni < 0");
  expectCode(g6calc_firsthalf(kCluster, 1, 1, nullptr, xi, vi, nullptr, nullptr, nullptr, 0.0, nullptr),
             MATCHA_G6_ERROR_ARGUMENT, "index null");
  expectCode(g6calc_firsthalf(kCluster, 1, 1, index, xi, vi, nullptr, nullptr, nullptr, -1.0, nullptr),
             MATCHA_G6_ERROR_ARGUMENT, "eps2 < 0");
  ASSERT_EQ(g6calc_firsthalf(kCluster, 1, 2, index, xi, vi, nullptr, nullptr, nullptr, 0.0, nullptr), MATCHA_G6_OK);
  expectCode(g6calc_lasthalf(kCluster, 1, 1, index, xi, vi, 0.0, nullptr, acc, jerk, pot), MATCHA_G6_ERROR_NO_CALC,
             "lasthalf with another ni");
  ASSERT_EQ(g6calc_firsthalf(kCluster, 1, 2, index, xi, vi, nullptr, nullptr, nullptr, 0.0, nullptr), MATCHA_G6_OK);
  expectCode(g6calc_lasthalf2(kCluster, 1, 2, index, xi, vi, 0.0, nullptr, acc, jerk, pot, nullptr),
             MATCHA_G6_ERROR_ARGUMENT, "nnbindex null");
  ASSERT_EQ(g6calc_firsthalf(kCluster, 1, 2, index, xi, vi, nullptr, nullptr, nullptr, 0.0, nullptr), MATCHA_G6_OK);
  ASSERT_EQ(g6_reset(kCluster), MATCHA_G6_OK);  // drops the calc
  expectCode(g6calc_lasthalf(kCluster, 1, 2, index, xi, vi, 0.0, nullptr, acc, jerk, pot), MATCHA_G6_ERROR_NO_CALC,
             "lasthalf after reset");
  // And the calls still work after all that.
  ASSERT_EQ(g6calc_firsthalf(kCluster, 1, 2, index, xi, vi, nullptr, nullptr, nullptr, 0.0, nullptr), MATCHA_G6_OK);
  ASSERT_EQ(g6calc_lasthalf2(kCluster, 1, 2, index, xi, vi, 0.0, nullptr, acc, jerk, pot, nnb), MATCHA_G6_OK);
  EXPECT_EQ(nnb[0], -1);  // the only j is particle 1 itself
  EXPECT_EQ(nnb[1], 1);
  EXPECT_EQ(acc[0][0], 0.0);
  EXPECT_NEAR(acc[1][0], 1.0 / std::pow(2.0, 1.5), 1e-6);
}

TEST_F(MatchaG6, TheEnvironmentSetsPipesMemoryAndEngine) {
  {
    const testing::ScopedEnvironment pipes("MATCHA_G6_NPIPES", "48");
    EXPECT_EQ(g6_npipes(), 48);
    const testing::ScopedEnvironment njmax("MATCHA_G6_NJMAX", "1000");
    ASSERT_EQ(g6_open(kCluster), MATCHA_G6_OK);  // afresh, reading them
    EXPECT_EQ(g6_getnjmax(kCluster), 1000);
    double zero[3] = {0, 0, 0};
    EXPECT_EQ(g6_set_j_particle(kCluster, 1000, 1, 0, 0, 1, zero, zero, zero, zero, zero), MATCHA_G6_ERROR_ARGUMENT);
  }
  EXPECT_EQ(g6_npipes(), 256);
  EXPECT_EQ(g6_set_tunit(51), MATCHA_G6_OK);
  EXPECT_EQ(g6_set_xunit(40), MATCHA_G6_OK);
  {
    const testing::ScopedEnvironment bogus("MATCHA_G6_NPIPES", "lots");
    EXPECT_EQ(g6_open(kCluster), MATCHA_G6_ERROR_ENGINE);
    EXPECT_EQ(g6_npipes(), 256);
  }
  {
    const testing::ScopedEnvironment bogus("MATCHA_ENGINE", "abacus");
    EXPECT_EQ(g6_open(kCluster), MATCHA_G6_ERROR_ENGINE);
  }
  if (!gpu::queryCudaDevice().available) {
    const testing::ScopedEnvironment cuda("MATCHA_ENGINE", "cuda");
    EXPECT_EQ(g6_open(kCluster), MATCHA_G6_ERROR_ENGINE);
  }
}

}  // namespace
}  // namespace matcha
