// SPDX-License-Identifier: MIT
// The CPU Hermite engine (issue 18) against closed forms, a finite difference, the Taylor series and brute force.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "matcha/core/errors.hpp"
#include "matcha/core/hermite_predictor.hpp"
#include "matcha/gpu/engine_factory.hpp"
#include "matcha/gpu/hermite_cpu_engine.hpp"
#include "matcha/testing/floating_point_traps.hpp"
#include "matcha/testing/generators.hpp"

namespace matcha::gpu {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

JParticle particleAt(std::int64_t id, double mass, std::array<double, 3> pos, std::array<double, 3> vel = {0, 0, 0}) {
  JParticle p;
  p.id = id;
  p.mass = mass;
  for (int d = 0; d < 3; ++d) {
    p.pos[d] = pos[d];
    p.vel[d] = vel[d];
  }
  return p;
}

/// Loads `particles` into slots 0..n-1 and predicts them to `time`.
void load(HermiteEngine& engine, const std::vector<JParticle>& particles, double time = 0.0) {
  std::vector<std::uint32_t> addresses(particles.size());
  for (std::size_t k = 0; k < particles.size(); ++k) addresses[k] = static_cast<std::uint32_t>(k);
  if (engine.capacity() < particles.size()) engine.reserve(particles.size());
  engine.setJParticles(addresses, particles);
  engine.predict(time, particles.size());
}

/// Everything one force call returns, NaN-poisoned before the call.
struct Results {
  explicit Results(std::size_t n)
      : acc(3 * n, kNaN), jerk(3 * n, kNaN), pot(n, kNaN), nearestId(n, -7), nearestDistance2(n, kNaN) {}
  std::vector<double> acc, jerk, pot;
  std::vector<std::int64_t> nearestId;
  std::vector<double> nearestDistance2;
  HermiteForceView view() {
    return {acc.data(), jerk.data(), pot.data(), nearestId.data(), nearestDistance2.data(), pot.size()};
  }
};

Results forcesOn(HermiteEngine& engine, const std::vector<std::int64_t>& ids, const std::vector<double>& pos,
                 const std::vector<double>& vel, double eps2) {
  Results results(ids.size());
  engine.launchForces({ids.data(), pos.data(), vel.data(), ids.size()}, eps2, results.view());
  engine.finishForces();
  return results;
}

TEST(HermiteCpuEngine, TwoBodiesMatchClosedForms) {
  // m = 2 at (0, 3, 0) moving at (1, 2, 0) relative to i at the origin, eps = 4: s^2 = 25, r.v = 6.
  HermiteCpuEngine engine;
  load(engine, {particleAt(1, 2.0, {0, 3, 0}, {1, 2, 0})});
  const Results r = forcesOn(engine, {0}, {0, 0, 0}, {0, 0, 0}, 16.0);
  EXPECT_DOUBLE_EQ(r.acc[0], 0.0);
  EXPECT_DOUBLE_EQ(r.acc[1], 6.0 / 125.0);
  EXPECT_DOUBLE_EQ(r.acc[2], 0.0);
  EXPECT_DOUBLE_EQ(r.pot[0], -0.4);
  // jerk = m (v / s^3 - 3 (r.v) r / s^5)
  EXPECT_DOUBLE_EQ(r.jerk[0], 2.0 / 125.0);
  EXPECT_NEAR(r.jerk[1], 2.0 * (2.0 / 125.0 - 3.0 * 6.0 * 3.0 / 3125.0), 1e-16);  // two terms cancel to 16%
  EXPECT_DOUBLE_EQ(r.jerk[2], 0.0);
  EXPECT_EQ(r.nearestId[0], 1);
  EXPECT_DOUBLE_EQ(r.nearestDistance2[0], 9.0);
}

TEST(HermiteCpuEngine, JerkIsTheTimeDerivativeOfTheAcceleration) {
  // Bodies on straight lines: the engine's jerk at t = 0 against the central difference of its accelerations at
  // t = +-h (j predicted by the engine with a = j = s = 0, i moved by hand), which errs by O(h^2).
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const Particles bodies = testing::plummer(64, seed);
  std::vector<JParticle> js;
  for (std::size_t k = 1; k < bodies.size(); ++k) {
    js.push_back(particleAt(static_cast<std::int64_t>(k), bodies.mass[k], {bodies.x[k], bodies.y[k], bodies.z[k]},
                            {bodies.vx[k], bodies.vy[k], bodies.vz[k]}));
  }
  const std::array<double, 3> xi{bodies.x[0], bodies.y[0], bodies.z[0]};
  const std::array<double, 3> vi{bodies.vx[0], bodies.vy[0], bodies.vz[0]};
  const double eps2 = 1e-2, h = 1e-5;
  HermiteCpuEngine engine;
  const auto accAt = [&](double t) {
    load(engine, js, t);
    return forcesOn(engine, {0}, {xi[0] + vi[0] * t, xi[1] + vi[1] * t, xi[2] + vi[2] * t}, {vi[0], vi[1], vi[2]},
                    eps2);
  };
  const Results now = accAt(0.0), later = accAt(h), earlier = accAt(-h);
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

TEST(HermiteCpuEngine, ForcesComeFromThePredictedParticle) {
  // One j of unit mass with every derivative set, predicted from its own time 0.5 to 0.75; an i at rest at the origin
  // reads back its predicted position from the pull (r = a |r|^3, |r| = -1/phi) and its velocity from the jerk
  // (u = jerk |r|^3 = v - 3 (r^.v) r^, so v = u - 1.5 (r^.u) r^), against the Taylor series.
  JParticle p = particleAt(5, 1.0, {2.0, -1.0, 0.5}, {0.25, 0.5, -0.75});
  p.time = 0.5;
  const double acc[3] = {0.1, -0.2, 0.3}, jerk[3] = {-1.0, 0.5, 2.0}, snap[3] = {4.0, -3.0, 1.0};
  for (int d = 0; d < 3; ++d) {
    p.acc[d] = acc[d];
    p.jerk[d] = jerk[d];
    p.snap[d] = snap[d];
  }
  HermiteCpuEngine engine;
  load(engine, {p}, 0.75);
  const Results r = forcesOn(engine, {0}, {0, 0, 0}, {0, 0, 0}, 0.0);
  const double distance = -1.0 / r.pot[0];
  const double dt = 0.25;
  double position[3], unit[3], u[3];
  for (int d = 0; d < 3; ++d) {
    position[d] = r.acc[d] * distance * distance * distance;
    unit[d] = position[d] / distance;
    u[d] = r.jerk[d] * distance * distance * distance;
  }
  const double unitDotU = unit[0] * u[0] + unit[1] * u[1] + unit[2] * u[2];
  for (int d = 0; d < 3; ++d) {
    const double taylorX = p.pos[d] + p.vel[d] * dt + acc[d] * dt * dt / 2 + jerk[d] * std::pow(dt, 3) / 6 +
                           snap[d] * std::pow(dt, 4) / 24;
    const double taylorV = p.vel[d] + acc[d] * dt + jerk[d] * dt * dt / 2 + snap[d] * std::pow(dt, 3) / 6;
    EXPECT_NEAR(position[d], taylorX, 1e-13) << "component " << d;
    EXPECT_NEAR(u[d] - 1.5 * unitDotU * unit[d], taylorV, 1e-13) << "component " << d;
  }
}

TEST(HermiteCpuEngine, SkipsTheOwnIdAndCoincidentPairsWithoutSoftening) {
  testing::ScopedFloatingPointTraps traps;
  // i (id 3) at (1, 1, 1); its own j-copy a hair away (predictions differ in the last bits), a distinct j exactly on
  // top of it, and one more j at distance 2 along x.
  const double hair = std::nextafter(1.0, 2.0) - 1.0;
  HermiteCpuEngine engine;
  load(engine, {particleAt(3, 0.5, {1.0 + hair, 1.0, 1.0}), particleAt(8, 0.25, {1.0, 1.0, 1.0}, {1, 0, 0}),
                particleAt(9, 4.0, {3.0, 1.0, 1.0})});
  const Results r = forcesOn(engine, {3}, {1, 1, 1}, {0, 0, 0}, 0.0);
  EXPECT_DOUBLE_EQ(r.acc[0], 1.0);  // 4 / 2^2 from j 9 alone
  EXPECT_DOUBLE_EQ(r.acc[1], 0.0);
  EXPECT_DOUBLE_EQ(r.pot[0], -2.0);
  for (double value : r.jerk) EXPECT_TRUE(std::isfinite(value));
  EXPECT_EQ(r.nearestId[0], 8);  // the coincident distinct particle is the nearest other one
  EXPECT_EQ(r.nearestDistance2[0], 0.0);

  // With softening the coincident distinct particle counts (-m/eps), the own copy still does not.
  const Results soft = forcesOn(engine, {3}, {1, 1, 1}, {0, 0, 0}, 0.25);
  EXPECT_NEAR(soft.pot[0], -0.25 / 0.5 - 4.0 / std::sqrt(4.25), 1e-15);
  EXPECT_NEAR(soft.acc[0], 4.0 * 2.0 / std::pow(4.25, 1.5), 1e-15);
}

TEST(HermiteCpuEngine, WithoutIdsNothingIsSkipped) {
  HermiteCpuEngine engine;
  load(engine, {particleAt(0, 1.0, {0, 0, 0}), particleAt(1, 1.0, {2, 0, 0})});
  Results r(1);
  const double pos[3] = {0, 0, 0};
  engine.launchForces({nullptr, pos, nullptr, 1}, 1.0, {r.acc.data(), nullptr, r.pot.data(), nullptr, nullptr, 1});
  engine.finishForces();
  EXPECT_DOUBLE_EQ(r.pot[0], -1.0 - 1.0 / std::sqrt(5.0));  // the j at the same point counts with -m/eps
  EXPECT_TRUE(std::isnan(r.jerk[0]));                       // not asked for: untouched
}

TEST(HermiteCpuEngine, MatchesBruteForceOnAPlummerSphere) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const Particles bodies = testing::plummer(700, seed);
  std::vector<JParticle> js;
  for (std::size_t k = 0; k < bodies.size(); ++k) {
    js.push_back(particleAt(static_cast<std::int64_t>(1000 + k), bodies.mass[k],
                            {bodies.x[k], bodies.y[k], bodies.z[k]}, {bodies.vx[k], bodies.vy[k], bodies.vz[k]}));
  }
  // i-particles: every 7th body (its own j-copy skipped by id) and a few strangers at random places.
  std::mt19937_64 random(seed);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  std::vector<std::int64_t> ids;
  std::vector<double> pos, vel;
  for (std::size_t k = 0; k < bodies.size(); k += 7) {
    ids.push_back(js[k].id);
    pos.insert(pos.end(), {bodies.x[k], bodies.y[k], bodies.z[k]});
    vel.insert(vel.end(), {bodies.vx[k], bodies.vy[k], bodies.vz[k]});
  }
  for (int k = 0; k < 5; ++k) {
    ids.push_back(-1 - k);
    pos.insert(pos.end(), {uniform(random), uniform(random), uniform(random)});
    vel.insert(vel.end(), {uniform(random), uniform(random), uniform(random)});
  }
  const double eps2 = 1.0 / 65536;
  HermiteCpuEngine engine;
  load(engine, js);
  const Results r = forcesOn(engine, ids, pos, vel, eps2);
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

TEST(HermiteCpuEngine, ASlotSetBetweenTwoCallsIsSeenAfterThePredict) {
  HermiteCpuEngine engine;
  load(engine, {particleAt(0, 1.0, {1, 0, 0}), particleAt(1, 1.0, {-1, 0, 0})});
  EXPECT_NEAR(forcesOn(engine, {9}, {0, 0, 0}, {0, 0, 0}, 0.0).acc[0], 0.0, 1e-15);
  const std::uint32_t address = 1;
  const JParticle moved = particleAt(1, 1.0, {-2, 0, 0});
  engine.setJParticles({&address, 1}, {&moved, 1});
  EXPECT_NEAR(forcesOn(engine, {9}, {0, 0, 0}, {0, 0, 0}, 0.0).acc[0], 0.0, 1e-15);  // not predicted yet
  engine.predict(0.0, 2);
  EXPECT_DOUBLE_EQ(forcesOn(engine, {9}, {0, 0, 0}, {0, 0, 0}, 0.0).acc[0], 0.75);
}

TEST(HermiteCpuEngine, EmptySetsGiveZerosAndNoNeighbour) {
  HermiteCpuEngine engine;
  engine.reserve(4);
  engine.predict(0.0, 0);
  const Results r = forcesOn(engine, {1}, {0, 0, 0}, {0, 0, 0}, 0.0);
  EXPECT_EQ(r.acc[0], 0.0);
  EXPECT_EQ(r.pot[0], 0.0);
  EXPECT_EQ(r.nearestId[0], -1);
  EXPECT_EQ(r.nearestDistance2[0], std::numeric_limits<double>::infinity());
  engine.launchForces({}, 0.0, {});  // no i-particles at all
  engine.finishForces();
}

TEST(HermiteCpuEngine, ReserveKeepsTheSlots) {
  HermiteCpuEngine engine;
  load(engine, {particleAt(4, 2.0, {1, 0, 0})});
  engine.reserve(100);
  EXPECT_EQ(engine.capacity(), 100u);
  engine.predict(0.0, 1);
  EXPECT_DOUBLE_EQ(forcesOn(engine, {0}, {0, 0, 0}, {0, 0, 0}, 0.0).acc[0], 2.0);
}

TEST(HermiteCpuEngine, RefusesBadInputWithOneLine) {
  HermiteCpuEngine engine;
  engine.reserve(2);
  const std::uint32_t outside = 2;
  const JParticle p;
  EXPECT_THROW(engine.setJParticles({&outside, 1}, {&p, 1}), InputError);
  EXPECT_THROW(engine.setJParticles({}, {&p, 1}), InputError);
  EXPECT_THROW(engine.predict(0.0, 3), InputError);
  EXPECT_THROW(engine.predict(std::nan(""), 1), InputError);
  EXPECT_THROW(engine.reserve(kMaxHermiteSlots + 1), InputError);
  engine.predict(0.0, 2);
  Results r(1);
  const double pos[3] = {0, 0, 0};
  EXPECT_THROW(engine.launchForces({nullptr, pos, nullptr, 1}, -1.0, r.view()), InputError);
  EXPECT_THROW(engine.launchForces({nullptr, pos, nullptr, 1}, 0.0, r.view()), InputError);  // jerk without vel
  EXPECT_THROW(engine.launchForces({nullptr, nullptr, pos, 1}, 0.0, r.view()), InputError);  // no positions
  EXPECT_THROW(engine.launchForces({nullptr, pos, pos, 2}, 0.0, r.view()), InputError);      // count mismatch
  EXPECT_THROW(engine.finishForces(), InputError);
  try {
    engine.setJParticles({&outside, 1}, {&p, 1});
  } catch (const InputError& error) {
    EXPECT_EQ(std::string(error.what()).find('\n'), std::string::npos);
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
