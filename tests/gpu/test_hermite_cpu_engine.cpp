// SPDX-License-Identifier: MIT
// The CPU Hermite engine (issue 18): the engines' contract (hermite_engine_contract.hpp: closed forms, skips, updates,
// bad input), then a finite difference, the Taylor series and brute force.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "hermite_engine_contract.hpp"
#include "matcha/core/errors.hpp"
#include "matcha/core/hermite_predictor.hpp"
#include "matcha/gpu/engine_factory.hpp"
#include "matcha/gpu/hermite_cpu_engine.hpp"
#include "matcha/testing/generators.hpp"
#include "matcha/testing/hermite_inputs.hpp"

namespace matcha::gpu {
namespace {

using testing::forcesOn;
using testing::HermiteResults;
using testing::IBlock;
using testing::jParticleAt;
using testing::loadSlots;

struct CpuHermite {
  static std::unique_ptr<HermiteEngine> make(std::string*) { return std::make_unique<HermiteCpuEngine>(); }
  static constexpr double kTolerance = 1e-14;
};
INSTANTIATE_TYPED_TEST_SUITE_P(Cpu, HermiteEngineContract, CpuHermite);

TEST(HermiteCpuEngine, JerkIsTheTimeDerivativeOfTheAcceleration) {
  // Bodies on straight lines: the engine's jerk at t = 0 against the central difference of its accelerations at
  // t = +-h (j predicted by the engine with a = j = s = 0, i moved by hand), which errs by O(h^2).
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const Particles bodies = testing::plummer(64, seed);
  std::vector<JParticle> js;
  for (std::size_t k = 1; k < bodies.size(); ++k) {
    js.push_back(jParticleAt(static_cast<std::int64_t>(k), bodies.mass[k], {bodies.x[k], bodies.y[k], bodies.z[k]},
                             {bodies.vx[k], bodies.vy[k], bodies.vz[k]}));
  }
  const std::array<double, 3> xi{bodies.x[0], bodies.y[0], bodies.z[0]};
  const std::array<double, 3> vi{bodies.vx[0], bodies.vy[0], bodies.vz[0]};
  const double eps2 = 1e-2, h = 1e-5;
  HermiteCpuEngine engine;
  const auto accAt = [&](double t) {
    loadSlots(engine, js, t);
    return forcesOn(
        engine, IBlock{{0}, {xi[0] + vi[0] * t, xi[1] + vi[1] * t, xi[2] + vi[2] * t}, {vi[0], vi[1], vi[2]}}, eps2);
  };
  const HermiteResults now = accAt(0.0), later = accAt(h), earlier = accAt(-h);
  const double jerkNorm = std::hypot(now.jerk[0], now.jerk[1], now.jerk[2]);
  ASSERT_GT(jerkNorm, 0.0);
  for (int d = 0; d < 3; ++d) {
    const double difference = (later.acc[d] - earlier.acc[d]) / (2 * h);
    EXPECT_NEAR(now.jerk[d], difference, 1e-6 * jerkNorm) << "component " << d;
  }
}

TEST(HermiteCpuEngine, PredictorIsTheTaylorSeries) {
  // Taylor series written with powers, against predictCoordinate's Horner form.
  const double x = 0.3, v = -1.1, a = 2.5, j = -7.0, s = 40.0;
  for (const double dt : {-0.125, 1.0 / 1024, 0.0, 0.25}) {
    double px = 0, pv = 0;
    predictCoordinate(dt, x, v, a, j, s, px, pv);
    EXPECT_NEAR(px, x + v * dt + a * dt * dt / 2 + j * dt * dt * dt / 6 + s * dt * dt * dt * dt / 24, 1e-15);
    EXPECT_NEAR(pv, v + a * dt + j * dt * dt / 2 + s * dt * dt * dt / 6, 1e-14);
  }
}

TEST(HermiteCpuEngine, MatchesBruteForceOnAPlummerSphere) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const Particles bodies = testing::plummer(700, seed);
  const std::vector<JParticle> js = testing::jParticlesOf(bodies, 1000);
  // i-particles: every 7th body (its own j-copy skipped by id) and a few strangers at random places.
  std::vector<std::size_t> members;
  for (std::size_t k = 0; k < bodies.size(); k += 7) members.push_back(k);
  IBlock block = testing::iBlockOf(js, members);
  std::mt19937_64 random(seed);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  for (int k = 0; k < 5; ++k) {
    block.add(-1 - k, {uniform(random), uniform(random), uniform(random)},
              {uniform(random), uniform(random), uniform(random)});
  }
  const std::vector<std::int64_t>& ids = block.id;
  const std::vector<double>&pos = block.pos, &vel = block.vel;
  const double eps2 = 1.0 / 65536;
  HermiteCpuEngine engine;
  loadSlots(engine, js);
  const HermiteResults r = forcesOn(engine, block, eps2);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    double acc[3] = {0, 0, 0}, jerk[3] = {0, 0, 0}, pot = 0, best = std::numeric_limits<double>::infinity();
    std::int64_t nearest = -1;
    for (const JParticle& j : js) {
      if (j.id == ids[i]) continue;
      double rv[3], vv[3];
      for (int d = 0; d < 3; ++d) {
        rv[d] = j.pos[d] - pos[3 * i + d];
        vv[d] = j.vel[d] - vel[3 * i + d];
      }
      const double r2 = rv[0] * rv[0] + rv[1] * rv[1] + rv[2] * rv[2];
      const double s = std::sqrt(r2 + eps2);
      const double rdotv = rv[0] * vv[0] + rv[1] * vv[1] + rv[2] * vv[2];
      for (int d = 0; d < 3; ++d) {
        acc[d] += j.mass * rv[d] / (s * s * s);
        jerk[d] += j.mass * (vv[d] / (s * s * s) - 3 * rdotv * rv[d] / std::pow(s, 5));
      }
      pot -= j.mass / s;
      if (r2 < best) {
        best = r2;
        nearest = j.id;
      }
    }
    const double accNorm = std::hypot(acc[0], acc[1], acc[2]), jerkNorm = std::hypot(jerk[0], jerk[1], jerk[2]);
    for (int d = 0; d < 3; ++d) {
      EXPECT_NEAR(r.acc[3 * i + d], acc[d], 1e-12 * accNorm) << "i " << i;
      EXPECT_NEAR(r.jerk[3 * i + d], jerk[d], 1e-12 * jerkNorm) << "i " << i;
    }
    EXPECT_NEAR(r.pot[i], pot, 1e-13 * std::abs(pot)) << "i " << i;
    EXPECT_EQ(r.nearestId[i], nearest) << "i " << i;
    EXPECT_DOUBLE_EQ(r.nearestDistance2[i], best) << "i " << i;
  }
}

TEST(HermiteEngineFactory, CpuWhenAskedCudaOnlyWithADevice) {
  std::string reason;
  const auto cpu = makeHermiteEngine(EngineKind::cpu, &reason);
  EXPECT_NE(cpu->name().find("cpu-hermite"), std::string::npos);
  EXPECT_NE(reason.find("CPU"), std::string::npos);
  const auto automatic = makeHermiteEngine(EngineKind::automatic, &reason);
  ASSERT_NE(automatic, nullptr);
  if (!queryCudaDevice().available) {
    EXPECT_NE(automatic->name().find("cpu-hermite"), std::string::npos) << reason;
    EXPECT_THROW(makeHermiteEngine(EngineKind::cuda), InputError);
  }
}

}  // namespace
}  // namespace matcha::gpu
