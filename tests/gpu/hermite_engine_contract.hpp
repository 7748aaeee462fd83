// SPDX-License-Identifier: MIT
// What every Hermite engine (core/hermite_engine.hpp) promises, as a typed GoogleTest suite that the CPU engine's test
// and the CUDA engine's test instantiate (STYLE.md habit 11: the same test over both engines). TypeParam provides
//   static std::unique_ptr<HermiteEngine> make(std::string* whyNot)  (null, with the reason, where it cannot run)
//   static constexpr double kTolerance                                (relative: 1e-14 double, a few 1e-7 float)
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "matcha/core/errors.hpp"
#include "matcha/core/hermite_engine.hpp"
#include "matcha/gpu/hermite_cpu_engine.hpp"
#include "matcha/testing/floating_point_traps.hpp"
#include "matcha/testing/hermite_inputs.hpp"

namespace matcha::gpu {

template <class EngineType>
class HermiteEngineContract : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string whyNot;
    engine_ = EngineType::make(&whyNot);
    if (engine_ == nullptr) GTEST_SKIP() << "Hermite engine not available, test skipped: " << whyNot;
  }
  /// |value - expected| within the engine's relative tolerance of `scale`.
  static void expectClose(double value, double expected, double scale, const char* what) {
    EXPECT_NEAR(value, expected, EngineType::kTolerance * std::abs(scale)) << what;
  }
  std::unique_ptr<HermiteEngine> engine_;
};

TYPED_TEST_SUITE_P(HermiteEngineContract);

using testing::forcesOn;
using testing::HermiteResults;
using testing::IBlock;
using testing::jParticleAt;
using testing::loadSlots;

TYPED_TEST_P(HermiteEngineContract, TwoBodiesMatchClosedForms) {
  // m = 2 at (0, 3, 0) moving at (1, 2, 0) relative to i at the origin, eps = 4: s^2 = 25, r.v = 6.
  HermiteEngine& engine = *this->engine_;
  loadSlots(engine, {jParticleAt(1, 2.0, {0, 3, 0}, {1, 2, 0})});
  const HermiteResults r = forcesOn(engine, IBlock{{0}, {0, 0, 0}, {0, 0, 0}}, 16.0);
  const double accScale = 6.0 / 125.0;
  this->expectClose(r.acc[0], 0.0, accScale, "acc x");
  this->expectClose(r.acc[1], 6.0 / 125.0, accScale, "acc y");
  this->expectClose(r.acc[2], 0.0, accScale, "acc z");
  this->expectClose(r.pot[0], -0.4, 0.4, "pot");
  // jerk = m (v / s^3 - 3 (r.v) r / s^5); the y terms cancel to 16% of the first, hence its scale.
  const double jerkScale = 4.0 / 125.0;
  this->expectClose(r.jerk[0], 2.0 / 125.0, jerkScale, "jerk x");
  this->expectClose(r.jerk[1], 2.0 * (2.0 / 125.0 - 3.0 * 6.0 * 3.0 / 3125.0), jerkScale, "jerk y");
  this->expectClose(r.jerk[2], 0.0, jerkScale, "jerk z");
  EXPECT_EQ(r.nearestId[0], 1);
  this->expectClose(r.nearestDistance2[0], 9.0, 9.0, "nearest distance^2");
}

TYPED_TEST_P(HermiteEngineContract, ForcesComeFromThePredictedParticle) {
  // One j of unit mass with every derivative set, predicted from its own time 0.5 to 0.75; an i at rest at the origin
  // reads back its predicted position from the pull (r = a |r|^3, |r| = -1/phi) and its velocity from the jerk
  // (u = jerk |r|^3 = v - 3 (r^.v) r^, so v = u - 1.5 (r^.u) r^), against the Taylor series.
  JParticle p = jParticleAt(5, 1.0, {2.0, -1.0, 0.5}, {0.25, 0.5, -0.75});
  p.time = 0.5;
  const double acc[3] = {0.1, -0.2, 0.3}, jerk[3] = {-1.0, 0.5, 2.0}, snap[3] = {4.0, -3.0, 1.0};
  for (int d = 0; d < 3; ++d) {
    p.acc[d] = acc[d];
    p.jerk[d] = jerk[d];
    p.snap[d] = snap[d];
  }
  HermiteEngine& engine = *this->engine_;
  loadSlots(engine, {p}, 0.75);
  const HermiteResults r = forcesOn(engine, IBlock{{0}, {0, 0, 0}, {0, 0, 0}}, 0.0);
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
    // Recovered through |r|^3 (three roundings of the engine's error), so ten times the tolerance.
    this->expectClose(position[d], taylorX, 10.0 * distance, "predicted position");
    this->expectClose(u[d] - 1.5 * unitDotU * unit[d], taylorV, 10.0, "predicted velocity");
  }
}

TYPED_TEST_P(HermiteEngineContract, SkipsTheOwnIdAndCoincidentPairsWithoutSoftening) {
  testing::ScopedFloatingPointTraps traps;
  // i (id 3) at (1, 1, 1); its own j-copy one ulp away (predictions differ in the last bits), a distinct j exactly on
  // top of it, and one more j at distance 2 along x.
  const double ulp = std::nextafter(1.0, 2.0) - 1.0;
  HermiteEngine& engine = *this->engine_;
  loadSlots(engine, {jParticleAt(3, 0.5, {1.0 + ulp, 1.0, 1.0}), jParticleAt(8, 0.25, {1.0, 1.0, 1.0}, {1, 0, 0}),
                     jParticleAt(9, 4.0, {3.0, 1.0, 1.0})});
  const HermiteResults r = forcesOn(engine, IBlock{{3}, {1, 1, 1}, {0, 0, 0}}, 0.0);
  this->expectClose(r.acc[0], 1.0, 1.0, "acc x");  // 4 / 2^2 from j 9 alone
  this->expectClose(r.acc[1], 0.0, 1.0, "acc y");
  this->expectClose(r.pot[0], -2.0, 2.0, "pot");
  for (double value : r.jerk) EXPECT_TRUE(std::isfinite(value));
  EXPECT_EQ(r.nearestId[0], 8);  // the coincident distinct particle is the nearest other one
  EXPECT_EQ(r.nearestDistance2[0], 0.0);

  // With softening the coincident distinct particle counts (-m/eps), the own copy still does not.
  const HermiteResults soft = forcesOn(engine, IBlock{{3}, {1, 1, 1}, {0, 0, 0}}, 0.25);
  this->expectClose(soft.pot[0], -0.25 / 0.5 - 4.0 / std::sqrt(4.25), 2.5, "softened pot");
  this->expectClose(soft.acc[0], 4.0 * 2.0 / std::pow(4.25, 1.5), 1.0, "softened acc x");
}

TYPED_TEST_P(HermiteEngineContract, WithoutIdsNothingIsSkippedAndUnaskedOutputsStayUntouched) {
  HermiteEngine& engine = *this->engine_;
  loadSlots(engine, {jParticleAt(0, 1.0, {0, 0, 0}), jParticleAt(1, 1.0, {2, 0, 0})});
  HermiteResults r(1);
  const double pos[3] = {0, 0, 0};
  engine.launchForces({nullptr, pos, nullptr, 1}, 1.0, {r.acc.data(), nullptr, r.pot.data(), nullptr, nullptr, 1});
  engine.finishForces();
  this->expectClose(r.pot[0], -1.0 - 1.0 / std::sqrt(5.0), 1.5, "pot");  // the j at the same point counts, -m/eps
  EXPECT_TRUE(std::isnan(r.jerk[0]));
  EXPECT_EQ(r.nearestId[0], -7);
}

TYPED_TEST_P(HermiteEngineContract, ASlotSetBetweenTwoCallsIsSeenAfterThePredict) {
  HermiteEngine& engine = *this->engine_;
  loadSlots(engine, {jParticleAt(0, 1.0, {1, 0, 0}), jParticleAt(1, 1.0, {-1, 0, 0})});
  this->expectClose(forcesOn(engine, IBlock{{9}, {0, 0, 0}, {0, 0, 0}}, 0.0).acc[0], 0.0, 1.0, "balanced");
  const std::uint32_t address = 1;
  const JParticle moved = jParticleAt(1, 1.0, {-2, 0, 0});
  engine.setJParticles({&address, 1}, {&moved, 1});
  engine.predict(0.0, 2);
  this->expectClose(forcesOn(engine, IBlock{{9}, {0, 0, 0}, {0, 0, 0}}, 0.0).acc[0], 0.75, 1.0, "after the update");
  // Two writes to one slot before a predict: the last one counts.
  const JParticle first = jParticleAt(1, 1.0, {-4, 0, 0}), second = jParticleAt(1, 1.0, {-0.5, 0, 0});
  engine.setJParticles({&address, 1}, {&first, 1});
  engine.setJParticles({&address, 1}, {&second, 1});
  engine.predict(0.0, 2);
  this->expectClose(forcesOn(engine, IBlock{{9}, {0, 0, 0}, {0, 0, 0}}, 0.0).acc[0], -3.0, 4.0, "last write wins");
}

TYPED_TEST_P(HermiteEngineContract, EmptySetsGiveZerosAndNoNeighbour) {
  HermiteEngine& engine = *this->engine_;
  engine.reserve(4);
  engine.predict(0.0, 0);
  const HermiteResults r = forcesOn(engine, IBlock{{1}, {0, 0, 0}, {0, 0, 0}}, 0.0);
  EXPECT_EQ(r.acc[0], 0.0);
  EXPECT_EQ(r.jerk[0], 0.0);
  EXPECT_EQ(r.pot[0], 0.0);
  EXPECT_EQ(r.nearestId[0], -1);
  EXPECT_EQ(r.nearestDistance2[0], std::numeric_limits<double>::infinity());
  engine.launchForces({}, 0.0, {});  // no i-particles at all
  engine.finishForces();
  // A lone j that is the i-particle itself: nothing, and no neighbour.
  loadSlots(engine, {jParticleAt(1, 1.0, {0, 0, 0})});
  const HermiteResults self = forcesOn(engine, IBlock{{1}, {0, 0, 0}, {0, 0, 0}}, 0.0);
  EXPECT_EQ(self.acc[0], 0.0);
  EXPECT_EQ(self.pot[0], 0.0);
  EXPECT_EQ(self.nearestId[0], -1);
}

TYPED_TEST_P(HermiteEngineContract, ReserveKeepsTheSlots) {
  HermiteEngine& engine = *this->engine_;
  loadSlots(engine, {jParticleAt(4, 2.0, {1, 0, 0})});
  engine.reserve(100000);
  EXPECT_EQ(engine.capacity(), 100000u);
  engine.predict(0.0, 1);
  this->expectClose(forcesOn(engine, IBlock{{0}, {0, 0, 0}, {0, 0, 0}}, 0.0).acc[0], 2.0, 2.0, "after growing");
  engine.reserve(1);
  engine.predict(0.0, 1);
  this->expectClose(forcesOn(engine, IBlock{{0}, {0, 0, 0}, {0, 0, 0}}, 0.0).acc[0], 2.0, 2.0, "after shrinking");
}

TYPED_TEST_P(HermiteEngineContract, RefusesBadInputWithOneLine) {
  HermiteEngine& engine = *this->engine_;
  engine.reserve(2);
  const std::uint32_t outside = 2;
  const JParticle p;
  EXPECT_THROW(engine.setJParticles({&outside, 1}, {&p, 1}), InputError);
  EXPECT_THROW(engine.setJParticles({}, {&p, 1}), InputError);
  EXPECT_THROW(engine.predict(0.0, 3), InputError);
  EXPECT_THROW(engine.predict(std::nan(""), 1), InputError);
  EXPECT_THROW(engine.reserve(kMaxHermiteSlots + 1), InputError);
  engine.predict(0.0, 2);
  HermiteResults r(1);
  const double pos[3] = {0, 0, 0};
  EXPECT_THROW(engine.launchForces({nullptr, pos, nullptr, 1}, -1.0, r.view()), InputError);
  EXPECT_THROW(engine.launchForces({nullptr, pos, nullptr, 1}, 0.0, r.view()), InputError);  // jerk without vel
  EXPECT_THROW(engine.launchForces({nullptr, nullptr, pos, 1}, 0.0, r.view()), InputError);  // no positions
  EXPECT_THROW(engine.launchForces({nullptr, pos, pos, 2}, 0.0, r.view()), InputError);      // count mismatch
  EXPECT_THROW(engine.finishForces(), InputError);
  engine.launchForces({nullptr, pos, pos, 1}, 0.0, r.view());
  EXPECT_THROW(engine.launchForces({nullptr, pos, pos, 1}, 0.0, r.view()), InputError);  // one call at a time
  engine.finishForces();
  try {
    engine.setJParticles({&outside, 1}, {&p, 1});
    ADD_FAILURE() << "no error";
  } catch (const InputError& error) {
    EXPECT_EQ(std::string(error.what()).find('\n'), std::string::npos);
  }
}

REGISTER_TYPED_TEST_SUITE_P(HermiteEngineContract, TwoBodiesMatchClosedForms, ForcesComeFromThePredictedParticle,
                            SkipsTheOwnIdAndCoincidentPairsWithoutSoftening,
                            WithoutIdsNothingIsSkippedAndUnaskedOutputsStayUntouched,
                            ASlotSetBetweenTwoCallsIsSeenAfterThePredict, EmptySetsGiveZerosAndNoNeighbour,
                            ReserveKeepsTheSlots, RefusesBadInputWithOneLine);

}  // namespace matcha::gpu
