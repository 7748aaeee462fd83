// SPDX-License-Identifier: MIT
// Tests of the KDK leapfrog, the diagnostics and the run loop against the analytic two-body (Kepler) problem. The
// test solver below is the exact two-body force, not a general N-body oracle: Plummer energy tests with the real
// solvers live with those solvers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfenv>
#include <chrono>
#include <cmath>
#include <limits>
#include <numbers>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "matcha/core/errors.hpp"
#include "matcha/core/force_solver.hpp"
#include "matcha/core/params.hpp"
#include "matcha/core/stopwatch.hpp"
#include "matcha/integrator/diagnostics.hpp"
#include "matcha/integrator/leapfrog.hpp"
#include "matcha/integrator/run_loop.hpp"
#include "matcha/testing/generators.hpp"
#include "matcha/testing/test_environment.hpp"

namespace {

using matcha::ForceReport;
using matcha::InputError;
using matcha::Particles;
namespace mi = matcha::integrator;

[[maybe_unused]] const auto* const kTraps = matcha::testing::trapFloatingPointInEveryTest();

constexpr double kPi = std::numbers::pi;

/// Exact Newtonian force between exactly two bodies (G = 1, no softening). With `reverseOrder`, it first reverses the
/// order of the bodies (all arrays together, as a tree solver's sort does), to prove the integrator keeps no indices.
/// Each body's force is computed from (x_other - x_self), so the values do not depend on the order.
class KeplerSolver : public matcha::ForceSolver {
 public:
  explicit KeplerSolver(bool reverseOrder = false) : reverseOrder_(reverseOrder) {}

  ForceReport computeForces(Particles& p) override {
    MATCHA_ASSERT(p.size() == 2, "KeplerSolver handles exactly two bodies");
    if (reverseOrder_) {
      const std::vector<std::uint32_t> reversed{1, 0};
      p.permute(reversed);
    }
    for (std::size_t i = 0; i < 2; ++i) {
      const std::size_t j = 1 - i;
      const double dx = p.x[j] - p.x[i];
      const double dy = p.y[j] - p.y[i];
      const double dz = p.z[j] - p.z[i];
      const double invR = 1.0 / std::sqrt(dx * dx + dy * dy + dz * dz);
      const double massInvR3 = p.mass[j] * invR * invR * invR;
      p.ax[i] = massInvR3 * dx;
      p.ay[i] = massInvR3 * dy;
      p.az[i] = massInvR3 * dz;
      p.pot[i] = -p.mass[j] * invR;
    }
    ++calls_;
    if (potentialsWanted()) ++callsWithPotentials_;
    wanted_.push_back(potentialsWanted());
    expectedNext_.push_back(nextPotentialsWanted());
    ForceReport report;
    report.counts.bodyBody = 2;
    // A fixed, fake duration so that the run summary's sum can be checked without timing anything.
    report.timings.totalSeconds = 0.5;
    return report;
  }

  std::string describe() const override { return "exact two-body test solver"; }
  int calls() const { return calls_; }
  int callsWithPotentials() const { return callsWithPotentials_; }
  /// Per call: whether it wanted potentials, and what the caller said the next call would want.
  const std::vector<bool>& wanted() const { return wanted_; }
  const std::vector<bool>& expectedNext() const { return expectedNext_; }

 private:
  bool reverseOrder_;
  int calls_ = 0;
  int callsWithPotentials_ = 0;
  std::vector<bool> wanted_, expectedNext_;
};

/// Bodies of masses m1 (id 0) and m2 (id 1) at pericentre of a Kepler orbit with semi-major axis 1 and eccentricity
/// e, centre of mass at `centre` moving with `drift`, orbital plane tilted by `tilt` about the x axis. G = 1.
struct TwoBody {
  double m1 = 0.5, m2 = 0.5, e = 0.0, tilt = 0.0;
  Eigen::Vector3d centre = Eigen::Vector3d::Zero();
  Eigen::Vector3d drift = Eigen::Vector3d::Zero();

  double period() const { return 2.0 * kPi / std::sqrt(m1 + m2); }

  Particles make() const {
    const double totalMass = m1 + m2;
    const double rPeri = 1.0 - e;
    const double vPeri = std::sqrt(totalMass * (1.0 + e) / (1.0 - e));  // vis-viva at pericentre, a = 1
    const Eigen::Vector3d axisY(0.0, std::cos(tilt), std::sin(tilt));
    const Eigen::Vector3d separation = rPeri * Eigen::Vector3d::UnitX();  // x2 - x1
    const Eigen::Vector3d relativeVelocity = vPeri * axisY;               // v2 - v1
    Particles p(2);
    const Eigen::Vector3d x[2] = {centre - (m2 / totalMass) * separation, centre + (m1 / totalMass) * separation};
    const Eigen::Vector3d v[2] = {drift - (m2 / totalMass) * relativeVelocity,
                                  drift + (m1 / totalMass) * relativeVelocity};
    const double mass[2] = {m1, m2};
    for (std::size_t i = 0; i < 2; ++i) {
      p.x[i] = x[i].x();
      p.y[i] = x[i].y();
      p.z[i] = x[i].z();
      p.vx[i] = v[i].x();
      p.vy[i] = v[i].y();
      p.vz[i] = v[i].z();
      p.mass[i] = mass[i];
      p.id[i] = i;
    }
    return p;
  }
};

std::size_t indexOfId(const Particles& p, std::uint64_t id) {
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (p.id[i] == id) return i;
  }
  ADD_FAILURE() << "id " << id << " not found";
  return 0;
}

Eigen::Vector3d positionOf(const Particles& p, std::uint64_t id) {
  const std::size_t i = indexOfId(p, id);
  return {p.x[i], p.y[i], p.z[i]};
}

/// Largest distance of any body from where it started, after `numSteps` steps of dt = period / numSteps.
double closureErrorAfterOnePeriod(const TwoBody& setup, int numSteps) {
  Particles p = setup.make();
  const Particles start = p;
  KeplerSolver solver;
  mi::LeapfrogKDK leapfrog(solver, setup.period() / numSteps);
  leapfrog.initialize(p);
  for (int s = 0; s < numSteps; ++s) leapfrog.step(p);
  double error = 0.0;
  for (std::uint64_t id = 0; id < 2; ++id) error = std::max(error, (positionOf(p, id) - positionOf(start, id)).norm());
  return error;
}

// ---------------------------------------------------------------------------------------------- kick and drift

TEST(KickDrift, UpdateEveryBodyElementwise) {
  Particles p(3);
  for (std::size_t i = 0; i < 3; ++i) {
    const double k = static_cast<double>(i + 1);
    p.x[i] = k;
    p.vx[i] = 2 * k;
    p.vy[i] = -k;
    p.ax[i] = 4 * k;
    p.az[i] = 8 * k;
  }
  mi::kick(p, 0.25);  // v += a dt; values chosen to be exact in binary
  mi::drift(p, 0.5);  // x += v dt with the kicked v
  for (std::size_t i = 0; i < 3; ++i) {
    const double k = static_cast<double>(i + 1);
    EXPECT_EQ(p.vx[i], 3 * k);
    EXPECT_EQ(p.vy[i], -k);
    EXPECT_EQ(p.vz[i], 2 * k);
    EXPECT_EQ(p.x[i], k + 1.5 * k);
    EXPECT_EQ(p.y[i], -0.5 * k);
    EXPECT_EQ(p.z[i], k);
  }
}

TEST(KickDrift, ThreadedUpdateIsElementwiseExactOnManyBodies) {
  // 10,007 bodies are several TBB blocks: each body must still get exactly v + a dt and x + v dt, with no body left
  // out or done twice at a block edge, and the arrays kick and drift only read must stay as they were.
  const std::uint64_t seed = matcha::testing::freshSeed();
  SCOPED_TRACE(matcha::testing::seedTrace(seed));
  std::mt19937_64 engine(seed);
  auto draw = [&engine] { return static_cast<double>(engine() >> 11) * 0x1.0p-53 - 0.5; };
  const std::size_t n = 10007;
  Particles p(n);
  for (auto* array : {&p.x, &p.y, &p.z, &p.vx, &p.vy, &p.vz, &p.ax, &p.ay, &p.az}) {
    for (double& value : *array) value = draw();
  }
  const Particles before = p;
  const double kickDt = 0.3, driftDt = -0.7;
  mi::kick(p, kickDt);
  mi::drift(p, driftDt);
  for (std::size_t i = 0; i < n; ++i) {
    const double vx = before.vx[i] + before.ax[i] * kickDt;
    const double vy = before.vy[i] + before.ay[i] * kickDt;
    const double vz = before.vz[i] + before.az[i] * kickDt;
    ASSERT_EQ(p.vx[i], vx) << "body " << i;
    ASSERT_EQ(p.vy[i], vy) << "body " << i;
    ASSERT_EQ(p.vz[i], vz) << "body " << i;
    ASSERT_EQ(p.x[i], before.x[i] + vx * driftDt) << "body " << i;
    ASSERT_EQ(p.y[i], before.y[i] + vy * driftDt) << "body " << i;
    ASSERT_EQ(p.z[i], before.z[i] + vz * driftDt) << "body " << i;
  }
  EXPECT_EQ(p.ax, before.ax);
  EXPECT_EQ(p.ay, before.ay);
  EXPECT_EQ(p.az, before.az);
  EXPECT_EQ(p.mass, before.mass);
  EXPECT_EQ(p.id, before.id);
}

/// Fixed accelerations, whatever the positions: the step's arithmetic alone.
class FixedAccelerations : public matcha::ForceSolver {
 public:
  explicit FixedAccelerations(const Particles& from) : ax_(from.ax), ay_(from.ay), az_(from.az) {}
  ForceReport computeForces(Particles& p) override {
    p.ax = ax_;
    p.ay = ay_;
    p.az = az_;
    std::fill(p.pot.begin(), p.pot.end(), 0.0);
    return {};
  }
  std::string describe() const override { return "fixed accelerations"; }

 private:
  std::vector<double> ax_, ay_, az_;
};

TEST(KickDrift, PeriodicStepWrapsEveryBodyAsWrapIntoBoxBitForBit) {
  // A box's step wraps the positions within its one pass over the bodies: bit for bit the kick, the drift and then
  // wrapIntoBox of each coordinate, over 50,001 bodies in many TBB blocks, most of them with no body leaving the box
  // (body 40001 drifts to -0.0 in one of those) and some with bodies crossing a face or rounding onto L.
  const std::uint64_t seed = matcha::testing::freshSeed();
  SCOPED_TRACE(matcha::testing::seedTrace(seed));
  std::mt19937_64 engine(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const double L = 3.0, dt = 0.01;
  const std::size_t n = 50001;
  Particles p(n);
  for (std::size_t i = 0; i < n; ++i) {
    p.x[i] = L * (0.1 + 0.8 * unit(engine));  // away from the faces: only the bodies set below cross them
    p.y[i] = L * (0.1 + 0.8 * unit(engine));
    p.z[i] = L * (0.1 + 0.8 * unit(engine));
    p.vx[i] = unit(engine) - 0.5;
    p.vy[i] = unit(engine) - 0.5;
    p.vz[i] = unit(engine) - 0.5;
    p.ax[i] = unit(engine) - 0.5;
    p.ay[i] = unit(engine) - 0.5;
    p.az[i] = unit(engine) - 0.5;
    p.mass[i] = 1.0 / double(n);
  }
  for (std::size_t i = 30000; i < 30100; ++i) p.vx[i] = 40.0 * (p.vx[i] > 0 ? 1.0 : -1.0);  // cross a face
  p.x[40000] = 0.0;  // stays on 0 (no velocity along x)
  p.vx[40000] = 0.0;
  p.ax[40000] = 0.0;
  p.y[40001] = -0.0;  // drifts to -0.0 + (-0.0) dt = -0.0, which wrapIntoBox makes +0.0
  p.vy[40001] = -0.0;
  p.ay[40001] = -0.0;
  p.x[45000] = L - 1e-17;  // rounds onto L
  p.vx[45000] = 1e-16;
  p.ax[45000] = 0.0;
  FixedAccelerations solver(p);
  mi::LeapfrogKDK leapfrog(solver, dt, L);
  leapfrog.initialize(p);
  Particles expected = p;
  for (int step = 0; step < 3; ++step) {
    mi::kick(expected, 0.5 * dt);
    mi::drift(expected, dt);
    matcha::wrapIntoBox(expected, L);
    mi::kick(expected, 0.5 * dt);
    leapfrog.step(p);
  }
  std::size_t outside = 0;
  for (std::size_t i = 0; i < n; ++i) {
    for (const auto& [got, want] :
         {std::pair{p.x[i], expected.x[i]}, std::pair{p.y[i], expected.y[i]}, std::pair{p.z[i], expected.z[i]}}) {
      ASSERT_EQ(std::signbit(got), std::signbit(want)) << "body " << i;
      ASSERT_EQ(got, want) << "body " << i;
      outside += got >= 0.0 && got < L ? 0 : 1;
    }
    ASSERT_EQ(p.vx[i], expected.vx[i]) << "body " << i;
  }
  EXPECT_EQ(outside, 0u);
}

// ------------------------------------------------------------------------------------------ (a) circular orbit

TEST(LeapfrogKepler, CircularOrbitClosesWithSecondOrderError) {
  // After one period the bodies should be back where they started; KDK leapfrog's phase error is O(dt^2), so halving
  // dt divides the closure error by 4 (the O(dt^4) remainder shifts the ratio by ~2e-4 here; a first-order scheme
  // would give 2).
  const TwoBody circular;
  const double error500 = closureErrorAfterOnePeriod(circular, 500);
  const double error1000 = closureErrorAfterOnePeriod(circular, 1000);
  const double error2000 = closureErrorAfterOnePeriod(circular, 2000);
  EXPECT_NEAR(error500 / error1000, 4.0, 0.02);
  EXPECT_NEAR(error1000 / error2000, 4.0, 0.02);
  // And small in absolute terms: measured 4.1e-5 at dt = P / 1000, a phase lag of ~(2 pi / 3) (omega dt)^2 rad per
  // period for bodies at radius 0.5.
  EXPECT_LT(error1000, 1e-4);
}

TEST(LeapfrogKepler, CircularOrbitEnergyErrorIsBounded) {
  // KDK conserves the modified Hamiltonian H~ = H + dt^2 (|grad Phi|^2 / 12 - v.Hess(Phi).v / 24) + O(dt^4). On a
  // circular orbit of angular frequency omega both terms equal omega^4 r^2 (per unit reduced mass), so the dt^2 term
  // is (omega dt)^2 / 12 of |E| = omega^2 r^2 / 2, and the energy error cannot exceed the variation of that term
  // along the orbit: |dE / E| <= (omega dt)^2 / 12 = 3.3e-6 for dt = P / 1000 (a first-order scheme gives ~omega dt).
  // On a circle the term is constant, and the numerical orbit departs from a circle only by O((omega dt)^2), so its
  // variation is O((omega dt)^4): measured 0.25 (omega dt)^4 = 3.9e-10; assert (omega dt)^4 as the sharper bound.
  const TwoBody circular;
  const int numSteps = 1000;
  const double omega = 2.0 * kPi / circular.period();
  const double dt = circular.period() / numSteps;
  Particles p = circular.make();
  KeplerSolver solver;
  mi::LeapfrogKDK leapfrog(solver, dt);
  leapfrog.initialize(p);
  const double initialEnergy = mi::measureDiagnostics(p, 0.0).total;
  EXPECT_NEAR(initialEnergy, -0.125, 1e-15);  // E = -G m1 m2 / (2 a) = -1/8
  double worst = 0.0;
  for (int s = 0; s < numSteps; ++s) {
    leapfrog.step(p);
    worst = std::max(worst, mi::relativeEnergyError(mi::measureDiagnostics(p, leapfrog.time()).total, initialEnergy));
  }
  const double phaseStepSquared = (omega * dt) * (omega * dt);
  EXPECT_LT(worst, phaseStepSquared / 12.0);
  EXPECT_LT(worst, phaseStepSquared * phaseStepSquared);
  EXPECT_EQ(leapfrog.stepsTaken(), 1000u);
  EXPECT_DOUBLE_EQ(leapfrog.time(), circular.period());
}

// ------------------------------------------------------------------------------------ (b) reordering solvers

TEST(LeapfrogKepler, SolverThatReordersGivesTheSameTrajectory) {
  TwoBody eccentric;
  eccentric.m1 = 0.75;
  eccentric.m2 = 0.25;
  eccentric.e = 0.6;
  eccentric.tilt = 0.3;
  eccentric.drift = {0.1, -0.05, 0.02};
  const double dt = eccentric.period() / 400;

  Particles plain = eccentric.make();
  Particles shuffled = eccentric.make();
  KeplerSolver plainSolver(false);
  KeplerSolver reversingSolver(true);
  mi::LeapfrogKDK plainLeapfrog(plainSolver, dt);
  mi::LeapfrogKDK reversingLeapfrog(reversingSolver, dt);
  plainLeapfrog.initialize(plain);
  reversingLeapfrog.initialize(shuffled);
  for (int s = 0; s < 1000; ++s) {  // 1001 force calls (odd): the reversed run ends reversed
    plainLeapfrog.step(plain);
    reversingLeapfrog.step(shuffled);
  }
  ASSERT_EQ(shuffled.id[0], 1u);
  ASSERT_EQ(plain.id[0], 0u);
  // Bit-identical per id: every operation on a body is the same whatever its index.
  for (std::uint64_t id = 0; id < 2; ++id) {
    const std::size_t i = indexOfId(plain, id);
    const std::size_t k = indexOfId(shuffled, id);
    EXPECT_EQ(plain.x[i], shuffled.x[k]);
    EXPECT_EQ(plain.y[i], shuffled.y[k]);
    EXPECT_EQ(plain.z[i], shuffled.z[k]);
    EXPECT_EQ(plain.vx[i], shuffled.vx[k]);
    EXPECT_EQ(plain.vy[i], shuffled.vy[k]);
    EXPECT_EQ(plain.vz[i], shuffled.vz[k]);
    EXPECT_EQ(plain.mass[i], shuffled.mass[k]);
  }
  // Sums of two terms are commutative in IEEE arithmetic, so the diagnostics agree exactly too.
  EXPECT_EQ(mi::measureDiagnostics(plain, 0.0).total, mi::measureDiagnostics(shuffled, 0.0).total);
}

// A step that leaves its closing kick to the next step's pass (ClosingKick::deferred) rounds it as the step that
// makes it: synchronised wherever, the state is that of a run that kicked within every step, bit for bit. Between
// steps the deferred run's velocities are half a step behind (the kick is really left), and its positions already
// the same.
TEST(LeapfrogKepler, DeferredClosingKicksGiveTheSameTrajectoryBitForBit) {
  TwoBody eccentric;
  eccentric.m1 = 0.7;
  eccentric.m2 = 0.3;
  eccentric.e = 0.5;
  eccentric.tilt = 0.2;
  eccentric.drift = {0.03, -0.02, 0.01};
  const double dt = eccentric.period() / 300;
  Particles kicked = eccentric.make();
  Particles deferred = eccentric.make();
  KeplerSolver kickedSolver(false), deferredSolver(true);
  mi::LeapfrogKDK kickedRun(kickedSolver, dt), deferredRun(deferredSolver, dt);
  kickedRun.initialize(kicked);
  deferredRun.initialize(deferred);
  int synchronisations = 0;
  for (int s = 1; s <= 400; ++s) {
    kickedRun.step(kicked);
    deferredRun.step(deferred, mi::ClosingKick::deferred);
    ASSERT_FALSE(deferredRun.synchronized());
    const std::size_t k = indexOfId(deferred, 0), i = indexOfId(kicked, 0);
    ASSERT_EQ(deferred.x[k], kicked.x[i]) << "step " << s;
    ASSERT_NE(deferred.vx[k], kicked.vx[i]) << "step " << s << ": the closing kick was made";
    if (s % 7 == 0 || s % 11 == 0 || s == 400) {
      deferredRun.synchronize(deferred);
      ++synchronisations;
      ASSERT_TRUE(deferredRun.synchronized());
      for (std::uint64_t id = 0; id < 2; ++id) {
        const std::size_t a = indexOfId(kicked, id), b = indexOfId(deferred, id);
        for (const auto member : {&Particles::x, &Particles::y, &Particles::z, &Particles::vx, &Particles::vy,
                                  &Particles::vz, &Particles::ax, &Particles::ay, &Particles::az, &Particles::pot}) {
          ASSERT_EQ((deferred.*member)[b], (kicked.*member)[a]) << "step " << s << ", id " << id;
        }
      }
    }
  }
  EXPECT_EQ(synchronisations, 400 / 7 + 400 / 11 - 400 / 77 + 1);
  EXPECT_EQ(deferredRun.synchronize(deferred), 0.0) << "nothing left to kick";
}

// runLeapfrog leaves closing kicks to the next step between outputs and synchronises before it measures: its final
// state and energies are those of a loop of steps that kick within each step.
TEST(RunLeapfrog, DeferredClosingKicksLeaveTheRunAsAStepLoopWouldBitForBit) {
  TwoBody eccentric;
  eccentric.e = 0.4;
  matcha::IntegratorParams params;
  params.dt = 1.0 / 64.0;
  params.tEnd = 100.0 / 64.0;
  params.outputInterval = 25.0 / 64.0;
  Particles run = eccentric.make();
  KeplerSolver runSolver;
  const mi::RunSummary summary = mi::runLeapfrog(run, runSolver, params, {});

  Particles looped = eccentric.make();
  KeplerSolver loopSolver;
  mi::LeapfrogKDK leapfrog(loopSolver, params.dt);
  leapfrog.initialize(looped);
  for (int s = 0; s < 100; ++s) leapfrog.step(looped);
  for (const auto member : {&Particles::x, &Particles::y, &Particles::z, &Particles::vx, &Particles::vy, &Particles::vz,
                            &Particles::ax, &Particles::ay, &Particles::az}) {
    EXPECT_EQ(run.*member, looped.*member);
  }
  EXPECT_EQ(summary.final.total, mi::measureDiagnostics(looped, leapfrog.time()).total);
}

TEST(RunLeapfrog, SolverThatReordersGivesTheSameRun) {
  TwoBody eccentric;
  eccentric.m1 = 0.6;
  eccentric.m2 = 0.4;
  eccentric.e = 0.3;
  Particles plain = eccentric.make();
  Particles shuffled = eccentric.make();
  KeplerSolver plainSolver(false);
  KeplerSolver reversingSolver(true);
  matcha::IntegratorParams params;
  params.dt = 1.0 / 64.0;
  params.tEnd = 4.0;
  params.outputInterval = 0.5;
  const mi::RunSummary a = mi::runLeapfrog(plain, plainSolver, params, {});
  const mi::RunSummary b = mi::runLeapfrog(shuffled, reversingSolver, params, {});
  EXPECT_EQ(a.finalEnergy, b.finalEnergy);
  EXPECT_EQ(a.final.angularMomentum, b.final.angularMomentum);
  EXPECT_EQ(positionOf(plain, 0), positionOf(shuffled, 0));
  EXPECT_EQ(positionOf(plain, 1), positionOf(shuffled, 1));
}

// ------------------------------------------------------------------------------ (c) momentum, angular momentum

TEST(LeapfrogKepler, ConservesMomentumAndAngularMomentum) {
  // Kicks change P by sum m a dt = 0 (pair forces are equal and opposite) and L by sum x x F dt = 0 (central forces);
  // drifts change L by sum m v x v dt = 0. Only rounding remains: ~1e-16 per step, a random walk over 4000 steps.
  // Orbits with random masses, eccentricities, orientations and centre-of-mass motion, from a traced seed.
  const std::uint64_t seed = matcha::testing::freshSeed();
  SCOPED_TRACE(matcha::testing::seedTrace(seed));
  RecordProperty("seed", std::to_string(seed));
  std::mt19937_64 engine(seed);
  // Raw draws to [0, 1) (no implementation-defined distributions, so a seed replays anywhere).
  auto uniform = [&engine](double low, double high) {
    return low + (high - low) * static_cast<double>(engine() >> 11) * 0x1.0p-53;
  };
  for (int trial = 0; trial < 4; ++trial) {
    TwoBody orbit;
    orbit.m1 = uniform(0.05, 0.95);
    orbit.m2 = 1.0 - orbit.m1;
    orbit.e = uniform(0.0, 0.8);
    orbit.tilt = uniform(0.0, kPi);
    orbit.centre = {uniform(-1, 1), uniform(-1, 1), uniform(-1, 1)};
    orbit.drift = {uniform(-0.2, 0.2), uniform(-0.2, 0.2), uniform(-0.2, 0.2)};
    SCOPED_TRACE("trial " + std::to_string(trial) + ": m1 = " + std::to_string(orbit.m1) +
                 ", e = " + std::to_string(orbit.e));
    Particles p = orbit.make();
    KeplerSolver solver;
    mi::LeapfrogKDK leapfrog(solver, orbit.period() / 1000);
    leapfrog.initialize(p);
    const mi::Diagnostics start = mi::measureDiagnostics(p, 0.0);
    double momentumScale = 0.0;  // sum m |v|: the size of the terms whose cancellation gives P
    for (std::size_t i = 0; i < 2; ++i) momentumScale += p.mass[i] * std::hypot(p.vx[i], p.vy[i], p.vz[i]);
    for (int s = 0; s < 4000; ++s) leapfrog.step(p);
    const mi::Diagnostics end = mi::measureDiagnostics(p, leapfrog.time());
    EXPECT_LT((end.momentum - start.momentum).norm() / momentumScale, 1e-12);
    EXPECT_LT((end.angularMomentum - start.angularMomentum).norm() / start.angularMomentum.norm(), 1e-12);
    EXPECT_NEAR(end.mass, 1.0, 1e-15);
  }
}

// ----------------------------------------------------------------------------------------- (d) diagnostics

/// A state whose diagnostics are checked by hand: masses 1 and 3 at x = (1,0,0) and (-1,0,0), distance 2, with the
/// potentials a force call would give (G = 1): pot = -m_other / 2.
Particles handCheckedState() {
  Particles p(2);
  p.mass = {1.0, 3.0};
  p.x = {1.0, -1.0};
  p.vy = {1.0, -1.0};
  p.vz = {0.0, 1.0};
  p.pot = {-1.5, -0.5};
  p.id = {0, 1};
  return p;
}

TEST(Diagnostics, HandCheckedTwoBodyState) {
  const mi::Diagnostics d = mi::measureDiagnostics(handCheckedState(), 2.5);
  EXPECT_EQ(d.time, 2.5);
  EXPECT_EQ(d.mass, 4.0);
  EXPECT_EQ(d.kinetic, 3.5);     // 1/2 (1 * 1 + 3 * 2)
  EXPECT_EQ(d.potential, -1.5);  // 1/2 (1 * -1.5 + 3 * -0.5) = -G m1 m2 / r
  EXPECT_EQ(d.total, 2.0);
  EXPECT_DOUBLE_EQ(d.virialRatio, 7.0 / 1.5);
  EXPECT_EQ(d.momentum, Eigen::Vector3d(0.0, -2.0, 3.0));        // (0,1,0) + 3 (0,-1,1)
  EXPECT_EQ(d.angularMomentum, Eigen::Vector3d(0.0, 3.0, 4.0));  // (0,0,1) + 3 (0,1,1); |L| = 5
  EXPECT_EQ(d.centreOfMass, Eigen::Vector3d(-0.5, 0.0, 0.0));    // (1 - 3) / 4
}

TEST(Diagnostics, IndependentOfBodyOrder) {
  Particles p = handCheckedState();
  const mi::Diagnostics before = mi::measureDiagnostics(p, 0.0);
  const std::vector<std::uint32_t> reversed{1, 0};
  p.permute(reversed);
  const mi::Diagnostics after = mi::measureDiagnostics(p, 0.0);
  EXPECT_EQ(before.total, after.total);
  EXPECT_EQ(before.angularMomentum, after.angularMomentum);
  EXPECT_EQ(before.centreOfMass, after.centreOfMass);
}

TEST(Diagnostics, VirialRatioIsNaNWithoutPotential) {
  Particles p = handCheckedState();
  p.pot = {0.0, 0.0};
  EXPECT_TRUE(std::isnan(mi::measureDiagnostics(p, 0.0).virialRatio));
  EXPECT_EQ(mi::measureDiagnostics(Particles{}, 0.0).mass, 0.0);
}

TEST(Diagnostics, RelativeEnergyError) {
  EXPECT_EQ(mi::relativeEnergyError(-0.375, -0.5), 0.25);
  EXPECT_EQ(mi::relativeEnergyError(-0.625, -0.5), 0.25);
  EXPECT_DOUBLE_EQ(mi::relativeEnergyError(0.5, 0.0), 0.5);  // absolute when E0 = 0
}

std::vector<std::string> splitColumns(const std::string& line) {
  std::istringstream stream(line);
  std::vector<std::string> columns;
  for (std::string word; stream >> word;) columns.push_back(word);
  return columns;
}

TEST(Diagnostics, FormattedLineMatchesHeader) {
  const std::string header = mi::diagnosticsHeader();
  ASSERT_FALSE(header.empty());
  EXPECT_EQ(header.front(), '#');
  EXPECT_EQ(header.find('\n'), std::string::npos);

  const mi::Diagnostics initial = mi::measureDiagnostics(handCheckedState(), 0.0);
  mi::Diagnostics later = initial;
  later.time = 0.75;
  later.total = 2.5;                        // |dE/E| = 0.25
  later.angularMomentum = {0.0, 3.0, 5.0};  // |dL| / |L0| = 1 / 5
  const std::string line = mi::formatDiagnostics(later, initial);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_EQ(line.size(), header.size());  // fixed-width columns line up with the header

  const std::vector<std::string> names = splitColumns(header.substr(1));
  const std::vector<std::string> values = splitColumns(line);
  ASSERT_EQ(names.size(), values.size());
  const std::vector<std::pair<std::string, double>> expected{{"time", 0.75},
                                                             {"E", 2.5},
                                                             {"|dE/E|", 0.25},
                                                             {"T", 3.5},
                                                             {"W", -1.5},
                                                             {"2T/|W|", 7.0 / 1.5},
                                                             {"|P|", std::sqrt(13.0)},
                                                             {"|L|", std::sqrt(34.0)},
                                                             {"|dL/L|", 0.2},
                                                             {"|x_cm|", 0.5}};
  ASSERT_EQ(names.size(), expected.size());
  for (std::size_t c = 0; c < expected.size(); ++c) {
    EXPECT_EQ(names[c], expected[c].first);
    EXPECT_NE(values[c].find('e'), std::string::npos) << "scientific notation: " << values[c];
    EXPECT_NEAR(std::stod(values[c]), expected[c].second, 1e-9 * std::abs(expected[c].second)) << names[c];
  }
}

// -------------------------------------------------------------------------------------- (e) the run loop

struct RecordedRun {
  std::vector<double> outputTimes;
  std::vector<std::uint64_t> outputIndices;
  std::vector<mi::ProgressInfo> progress;
  mi::RunSummary summary;
  int forceCalls = 0;
};

RecordedRun recordRun(double dt, double tEnd, double outputInterval) {
  Particles p = TwoBody{}.make();
  KeplerSolver solver;
  matcha::IntegratorParams params;
  params.dt = dt;
  params.tEnd = tEnd;
  params.outputInterval = outputInterval;
  RecordedRun run;
  mi::RunCallbacks callbacks;
  callbacks.onOutput = [&run](const Particles& bodies, const mi::Diagnostics& d, std::uint64_t index) {
    EXPECT_EQ(bodies.size(), 2u);
    run.outputTimes.push_back(d.time);
    run.outputIndices.push_back(index);
  };
  callbacks.onProgress = [&run](const mi::ProgressInfo& info) { run.progress.push_back(info); };
  run.summary = mi::runLeapfrog(p, solver, params, callbacks);
  run.forceCalls = solver.calls();
  return run;
}

TEST(RunLeapfrog, OutputsAtEveryIntervalExactlyOnce) {
  const RecordedRun run = recordRun(1.0 / 8.0, 1.0, 0.25);
  EXPECT_EQ(run.outputTimes, (std::vector<double>{0.0, 0.25, 0.5, 0.75, 1.0}));
  EXPECT_EQ(run.outputIndices, (std::vector<std::uint64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(run.summary.steps, 8u);
  EXPECT_EQ(run.forceCalls, 9);  // the initial call plus one per step
  EXPECT_EQ(run.summary.interactions.bodyBody, 18u);
  EXPECT_EQ(run.summary.forceSeconds, 4.5);  // 9 calls of the fake 0.5 s
  EXPECT_EQ(run.summary.initial.time, 0.0);
  EXPECT_EQ(run.summary.final.time, 1.0);
  EXPECT_EQ(run.summary.initialEnergy, run.summary.initial.total);
  EXPECT_EQ(run.summary.finalEnergy, run.summary.final.total);
  EXPECT_DOUBLE_EQ(run.summary.relativeEnergyError,
                   mi::relativeEnergyError(run.summary.finalEnergy, run.summary.initialEnergy));
  EXPECT_GE(run.summary.wallSeconds, 0.0);
}

TEST(RunLeapfrog, OutputsAtTheNearestStepAndAtTheEnd) {
  // Interval 0.3 with dt = 1/8: output k at step round(2.4 k) = 2, 5, 7 (10 is past the end), then the final step.
  const RecordedRun run = recordRun(1.0 / 8.0, 1.0, 0.3);
  EXPECT_EQ(run.outputTimes, (std::vector<double>{0.0, 0.25, 0.625, 0.875, 1.0}));
}

TEST(RunLeapfrog, IntervalShorterThanTheStepOutputsEveryStepOnce) {
  const RecordedRun run = recordRun(1.0 / 4.0, 1.0, 0.1);
  EXPECT_EQ(run.outputTimes, (std::vector<double>{0.0, 0.25, 0.5, 0.75, 1.0}));
}

TEST(RunLeapfrog, IntervalLongerThanTheRunOutputsStartAndEnd) {
  const RecordedRun run = recordRun(1.0 / 4.0, 1.0, 10.0);
  EXPECT_EQ(run.outputTimes, (std::vector<double>{0.0, 1.0}));
}

TEST(RunLeapfrog, ZeroLengthRunOutputsOnce) {
  const RecordedRun run = recordRun(1.0 / 4.0, 0.0, 0.25);
  EXPECT_EQ(run.outputTimes, (std::vector<double>{0.0}));
  EXPECT_EQ(run.summary.steps, 0u);
  EXPECT_EQ(run.forceCalls, 1);
  EXPECT_TRUE(run.progress.empty());
  EXPECT_EQ(run.summary.relativeEnergyError, 0.0);
}

TEST(RunLeapfrog, ProgressAfterEveryStep) {
  const RecordedRun run = recordRun(1.0 / 8.0, 1.0, 0.25);
  ASSERT_EQ(run.progress.size(), 8u);
  for (std::size_t k = 0; k < run.progress.size(); ++k) {
    const mi::ProgressInfo& info = run.progress[k];
    EXPECT_EQ(info.step, k + 1);
    EXPECT_EQ(info.totalSteps, 8u);
    EXPECT_EQ(info.time, static_cast<double>(k + 1) / 8.0);
    EXPECT_EQ(info.tEnd, 1.0);
    EXPECT_GE(info.elapsedSeconds, 0.0);
    if (k == 0) {
      EXPECT_EQ(info.etaSeconds, -1.0) << "not known after the first step alone";
    } else {
      EXPECT_GE(info.etaSeconds, 0.0);
    }
    EXPECT_TRUE(std::isfinite(info.relativeEnergyError));
  }
  EXPECT_EQ(run.progress.back().etaSeconds, 0.0);
  EXPECT_EQ(run.progress.back().relativeEnergyError, run.summary.relativeEnergyError);
  // The energy is measured at most once a second besides the outputs, planned a step ahead: step 2 (the first so
  // planned, and an output) is measured, step 3, microseconds later, reports step 2's error again; a run that
  // measured every step would not.
  EXPECT_NE(run.progress[1].relativeEnergyError, run.progress[0].relativeEnergyError);
  EXPECT_EQ(run.progress[2].relativeEnergyError, run.progress[1].relativeEnergyError);
  EXPECT_NE(run.progress[3].relativeEnergyError, run.progress[2].relativeEnergyError) << "step 4 is an output";
}

// The ETA leaves out the run's first step, whose time is its warm-up (a restarted run's first tree, the device's first
// launches): with a first step of 1 s and then steps of ~1 ms the ETA at step 3 of 20 is ~17 ms, not the ~6 s
// (1 s x 17 / 3) the pace since the start gives.
TEST(RunLeapfrog, TheEtaLeavesTheFirstStepsWarmUpOut) {
  class SlowFirstStepSolver : public KeplerSolver {
   public:
    ForceReport computeForces(Particles& p) override {
      // Call 1 is the initial force call, call 2 the first step's.
      std::this_thread::sleep_for(calls() == 1 ? std::chrono::milliseconds(1000) : std::chrono::milliseconds(1));
      return KeplerSolver::computeForces(p);
    }
  };
  matcha::IntegratorParams params;
  params.dt = 1.0 / 64.0;
  params.tEnd = 20.0 / 64.0;
  params.outputInterval = params.tEnd;
  Particles p = TwoBody{}.make();
  SlowFirstStepSolver solver;
  std::vector<mi::ProgressInfo> progress;
  mi::RunCallbacks callbacks;
  callbacks.onProgress = [&](const mi::ProgressInfo& info) { progress.push_back(info); };
  mi::runLeapfrog(p, solver, params, callbacks);
  ASSERT_EQ(progress.size(), 20u);
  EXPECT_GE(progress[0].elapsedSeconds, 1.0);
  EXPECT_EQ(progress[0].etaSeconds, -1.0) << "not known after the first step";
  EXPECT_GE(progress[2].etaSeconds, 0.0);
  EXPECT_LT(progress[2].etaSeconds, 0.5) << "the first step's second left out of the pace";
}

// A run that takes its potentials from the solver asks for them only where it measures energies: the initial call,
// the outputs, the last step and the progress line's steps (the first planned before step 1, for step 2; later ones
// a second of wall time apart, none in this run), and says so a call ahead, rightly, so that a solver may start the
// next call's work early. The trajectory is the same bit for bit as that of a solver that always computes them.
TEST(RunLeapfrog, SolverPotentialsOnlyWhereEnergiesAreMeasuredAndAnnouncedACallAhead) {
  matcha::IntegratorParams params;
  params.dt = 1.0 / 16.0;
  params.tEnd = 19.0 / 16.0;
  params.outputInterval = 0.5;  // steps 8 and 16, then the last, 19
  Particles p = TwoBody{}.make();
  KeplerSolver solver;
  std::vector<double> progressErrors;
  mi::RunCallbacks callbacks;
  callbacks.onProgress = [&](const mi::ProgressInfo& info) { progressErrors.push_back(info.relativeEnergyError); };
  mi::runLeapfrog(p, solver, params, callbacks);

  ASSERT_EQ(solver.calls(), 20);
  std::vector<bool> expected(20, false);
  for (const int step : {0, 2, 8, 16, 19}) expected[step] = true;  // call k + 1 is step k's
  EXPECT_EQ(solver.wanted(), expected);
  for (std::size_t call = 0; call + 1 < expected.size(); ++call) {
    EXPECT_EQ(solver.expectedNext()[call], expected[call + 1]) << "the word given at call " << call + 1;
  }
  EXPECT_TRUE(solver.potentialsWanted()) << "the run gives the solver back as it found it";
  EXPECT_EQ(solver.nextPotentialsWanted(), true) << "and takes its word back";
  ASSERT_EQ(progressErrors.size(), 19u);
  EXPECT_EQ(progressErrors[0], 0.0) << "step 1 repeats the initial energy";
  EXPECT_NE(progressErrors[1], 0.0) << "step 2 is measured";
  for (std::size_t k = 2; k < 7; ++k) EXPECT_EQ(progressErrors[k], progressErrors[1]) << "step " << k + 1;

  Particles always = TwoBody{}.make();
  KeplerSolver alwaysSolver;
  mi::LeapfrogKDK leapfrog(alwaysSolver, params.dt);
  leapfrog.initialize(always);
  for (int s = 0; s < 19; ++s) leapfrog.step(always);
  EXPECT_EQ(p.x, always.x);
  EXPECT_EQ(p.vy, always.vy);
}

TEST(RunLeapfrog, OutputPotentialsReplaceTheSolversAtOutputsOnly) {
  // The hook writes a potential the solver never gives (-(1 + number of calls so far) per body), so every diagnostic
  // shows which potentials it used; the trajectory must be the one without the hook, bit for bit.
  matcha::IntegratorParams params;
  params.dt = 1.0 / 8.0;
  params.tEnd = 1.0;
  params.outputInterval = 0.25;

  Particles plain = TwoBody{}.make();
  KeplerSolver plainSolver;
  const mi::RunSummary reference = mi::runLeapfrog(plain, plainSolver, params, {});

  Particles p = TwoBody{}.make();
  KeplerSolver solver;
  int hookCalls = 0;
  std::vector<double> outputPotentialEnergies;
  std::vector<double> progressErrors;
  mi::RunCallbacks callbacks;
  callbacks.outputPotentials = [&hookCalls](Particles& bodies) {
    ++hookCalls;
    for (double& pot : bodies.pot) pot = -double(hookCalls);
  };
  callbacks.onOutput = [&](const Particles& bodies, const mi::Diagnostics& d, std::uint64_t) {
    EXPECT_EQ(bodies.pot[0], -double(hookCalls)) << "the snapshot carries the hook's potentials";
    outputPotentialEnergies.push_back(d.potential);
  };
  callbacks.onProgress = [&progressErrors](const mi::ProgressInfo& info) {
    progressErrors.push_back(info.relativeEnergyError);
  };
  const mi::RunSummary summary = mi::runLeapfrog(p, solver, params, callbacks);

  EXPECT_EQ(hookCalls, 5);  // t = 0, 0.25, 0.5, 0.75, 1
  // No diagnostic reads the solver's potentials, so it was asked for accelerations only, and is asked for
  // potentials again after the run; without the hook every call computes them.
  EXPECT_EQ(solver.calls(), 9);
  EXPECT_EQ(solver.callsWithPotentials(), 0);
  EXPECT_TRUE(solver.potentialsWanted());
  EXPECT_EQ(plainSolver.callsWithPotentials(), 5) << "without the hook, the initial call and the outputs' compute them";
  const double totalMass = p.mass[0] + p.mass[1];
  ASSERT_EQ(outputPotentialEnergies.size(), 5u);
  for (std::size_t k = 0; k < outputPotentialEnergies.size(); ++k) {
    EXPECT_DOUBLE_EQ(outputPotentialEnergies[k], -0.5 * totalMass * double(k + 1));
  }
  EXPECT_DOUBLE_EQ(summary.initial.potential, -0.5 * totalMass);
  EXPECT_DOUBLE_EQ(summary.final.potential, -2.5 * totalMass);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(p.x[i], plain.x[i]);
    EXPECT_EQ(p.y[i], plain.y[i]);
    EXPECT_EQ(p.vx[i], plain.vx[i]);
    EXPECT_EQ(p.vy[i], plain.vy[i]);
    EXPECT_EQ(p.ax[i], plain.ax[i]);
  }
  EXPECT_EQ(summary.initial.kinetic, reference.initial.kinetic);
  EXPECT_EQ(summary.final.kinetic, reference.final.kinetic);
  // Progress reports the latest output's error: unchanged between outputs (steps 1, 3, 5, 7 repeat the previous).
  ASSERT_EQ(progressErrors.size(), 8u);
  EXPECT_EQ(progressErrors[0], 0.0);
  EXPECT_EQ(progressErrors[2], progressErrors[1]);
  EXPECT_NE(progressErrors[3], progressErrors[2]);
  EXPECT_EQ(progressErrors[7], summary.relativeEnergyError);
}

/// The two-body force with made-up phase timings, all exact in binary, so the run's sums can be checked exactly
/// without timing anything. The initial call runs the estimate pass and builds a tree; every even-numbered step
/// rebuilds.
class ScriptedTimingsSolver : public KeplerSolver {
 public:
  ForceReport computeForces(Particles& p) override {
    ForceReport report = KeplerSolver::computeForces(p);
    const bool initial = calls() == 1;
    report.timings = initial ? initialTimings() : stepTimings();
    report.rebuilt = initial || calls() % 2 == 1;  // call k + 1 is step k: steps 2, 4, ...
    report.numGroupsWalked = report.rebuilt ? 8 : 2;
    report.numGroupsRepaired = initial ? 0 : 1;
    return report;
  }

  static matcha::ForceTimings initialTimings() {
    matcha::ForceTimings t;
    t[matcha::Phase::estimate] = 1.0;
    t[matcha::Phase::keys] = 0.25;
    t[matcha::Phase::kernels] = 0.5;
    t.totalSeconds = 2.0;
    return t;
  }
  static matcha::ForceTimings stepTimings() {
    matcha::ForceTimings t;
    t[matcha::Phase::keys] = 0.125;
    t[matcha::Phase::walk] = 0.25;
    t[matcha::Phase::kernels] = 0.5;
    t[matcha::Phase::repair] = 0.0625;
    t.totalSeconds = 1.0;
    t.rebuildWaitSeconds = 0.03125;
    t.engineWaitSeconds = 0.015625;
    t.meshWaitSeconds = 0.0078125;
    return t;
  }
};

/// Every phase, the total and the waits of `timings`, each as `times` calls of `one`.
void expectTimesCalls(const matcha::ForceTimings& timings, const matcha::ForceTimings& one, double times) {
  for (int k = 0; k < matcha::kNumPhases; ++k) {
    const auto phase = static_cast<matcha::Phase>(k);
    EXPECT_EQ(timings[phase], times * one[phase]) << matcha::phaseName(phase);
  }
  EXPECT_EQ(timings.totalSeconds, times * one.totalSeconds);
  EXPECT_EQ(timings.rebuildWaitSeconds, times * one.rebuildWaitSeconds);
  EXPECT_EQ(timings.engineWaitSeconds, times * one.engineWaitSeconds);
  EXPECT_EQ(timings.meshWaitSeconds, times * one.meshWaitSeconds);
}

TEST(RunLeapfrog, SumsTheForceCallsTimingsWithTheInitialCallApart) {
  Particles p = TwoBody{}.make();
  ScriptedTimingsSolver solver;
  matcha::IntegratorParams params;
  params.dt = 1.0 / 8.0;
  params.tEnd = 1.0;
  params.outputInterval = 0.25;  // outputs after steps 2, 4, 6 and 8
  std::vector<mi::OutputTimings> intervals;
  std::vector<std::uint64_t> outputsSeen;
  mi::RunCallbacks callbacks;
  callbacks.onOutput = [&outputsSeen](const Particles&, const mi::Diagnostics&, std::uint64_t index) {
    outputsSeen.push_back(index);
  };
  callbacks.onTimings = [&](const mi::OutputTimings& timings) {
    ASSERT_FALSE(outputsSeen.empty());
    EXPECT_EQ(timings.outputIndex, outputsSeen.back()) << "called right after its output";
    intervals.push_back(timings);
  };
  callbacks.onProgress = [](const mi::ProgressInfo&) {};  // the progress energy, when measured, is output work
  const mi::RunSummary summary = mi::runLeapfrog(p, solver, params, callbacks);

  const matcha::ForceTimings initial = ScriptedTimingsSolver::initialTimings();
  const matcha::ForceTimings step = ScriptedTimingsSolver::stepTimings();
  expectTimesCalls(summary.initialForceTimings, initial, 1.0);
  expectTimesCalls(summary.stepForceTimings, step, 8.0);
  EXPECT_EQ(summary.forceSeconds, 2.0 + 8 * 1.0);  // every call, the initial one included
  EXPECT_EQ(summary.rebuilds, 4u) << "steps 2, 4, 6, 8; the initial call's tree is not a step's rebuild";
  EXPECT_EQ(summary.groupsWalked, 4u * 8 + 4u * 2);
  EXPECT_EQ(summary.groupsRepaired, 8u);
  EXPECT_GE(summary.stepWallSeconds, summary.integrationSeconds);
  EXPECT_LE(summary.stepWallSeconds + summary.outputSeconds, summary.wallSeconds);

  // One report per output; output 0 is the initial call, the others two steps each, and they add up to the totals.
  ASSERT_EQ(intervals.size(), 5u);
  EXPECT_EQ(intervals[0].steps, 0u);
  expectTimesCalls(intervals[0].force, initial, 1.0);
  EXPECT_EQ(intervals[0].rebuilds, 1u);
  EXPECT_EQ(intervals[0].groupsWalked, 8u);
  EXPECT_EQ(intervals[0].stepWallSeconds, 0.0);
  EXPECT_EQ(intervals[0].integrationSeconds, 0.0);
  double stepWall = 0.0, integration = 0.0, output = intervals[0].outputSeconds;
  for (std::size_t k = 1; k < intervals.size(); ++k) {
    SCOPED_TRACE("output " + std::to_string(k));
    const mi::OutputTimings& interval = intervals[k];
    EXPECT_EQ(interval.outputIndex, k);
    EXPECT_EQ(interval.steps, 2u);
    expectTimesCalls(interval.force, step, 2.0);
    EXPECT_EQ(interval.rebuilds, 1u);
    EXPECT_EQ(interval.groupsWalked, 10u);
    EXPECT_EQ(interval.groupsRepaired, 2u);
    EXPECT_GE(interval.stepWallSeconds, interval.integrationSeconds);
    stepWall += interval.stepWallSeconds;
    integration += interval.integrationSeconds;
    output += interval.outputSeconds;
  }
  EXPECT_DOUBLE_EQ(summary.stepWallSeconds, stepWall);
  EXPECT_DOUBLE_EQ(summary.integrationSeconds, integration);
  EXPECT_DOUBLE_EQ(summary.outputSeconds, output);
}

// Output 0's seconds are its diagnostics and its snapshot, not the initial force call before them (which its line
// reports as the first force call): a slow first call leaves output 0 short.
TEST(RunLeapfrog, OutputZeroLeavesTheInitialForceCallOut) {
  class SlowFirstCall : public KeplerSolver {
   public:
    ForceReport computeForces(Particles& p) override {
      if (calls() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
      return KeplerSolver::computeForces(p);
    }
  };
  Particles p = TwoBody{}.make();
  SlowFirstCall solver;
  matcha::IntegratorParams params;
  params.dt = 1.0 / 8.0;
  params.tEnd = 0.25;
  params.outputInterval = 0.25;
  std::vector<mi::OutputTimings> intervals;
  mi::RunCallbacks callbacks;
  callbacks.onTimings = [&](const mi::OutputTimings& timings) { intervals.push_back(timings); };
  const mi::RunSummary summary = mi::runLeapfrog(p, solver, params, callbacks);
  ASSERT_EQ(intervals.size(), 2u);
  EXPECT_LT(intervals[0].outputSeconds, 0.1);
  EXPECT_GE(summary.wallSeconds, 0.3);
}

TEST(RunLeapfrog, ZeroLengthRunReportsTheInitialCallOnly) {
  Particles p = TwoBody{}.make();
  ScriptedTimingsSolver solver;
  matcha::IntegratorParams params;
  params.dt = 1.0 / 8.0;
  params.tEnd = 0.0;
  int reports = 0;
  mi::RunCallbacks callbacks;
  callbacks.onTimings = [&reports](const mi::OutputTimings& timings) {
    ++reports;
    EXPECT_EQ(timings.steps, 0u);
    EXPECT_EQ(timings.force.totalSeconds, 2.0);
  };
  const mi::RunSummary summary = mi::runLeapfrog(p, solver, params, callbacks);
  EXPECT_EQ(reports, 1);
  expectTimesCalls(summary.stepForceTimings, ScriptedTimingsSolver::stepTimings(), 0.0);
  EXPECT_EQ(summary.initialForceTimings.totalSeconds, 2.0);
  EXPECT_EQ(summary.rebuilds, 0u);
  EXPECT_EQ(summary.stepWallSeconds, 0.0);
  EXPECT_EQ(summary.integrationSeconds, 0.0);
}

TEST(RunLeapfrog, AcceptsEndTimesThatAreMultiplesUpToRounding) {
  // 0.3 / 0.1 = 2.9999999999999996 in double: three steps, not an error.
  const RecordedRun run = recordRun(0.1, 0.3, 0.1);
  EXPECT_EQ(run.summary.steps, 3u);
  EXPECT_EQ(run.outputTimes.size(), 4u);
}

TEST(RunLeapfrog, StartsTheClockAtTheInitialConditionsTime) {
  // From tStart = 0.5 to the absolute tEnd = 1: four steps of 1/8, outputs every 0.25 from the start, and the same
  // trajectory as a run from 0 to 0.5 (the force does not depend on time).
  const auto run = [](double tStart, double tEnd, std::vector<double>& times) {
    Particles p = TwoBody{}.make();
    KeplerSolver solver;
    matcha::IntegratorParams params;
    params.dt = 1.0 / 8.0;
    params.tStart = tStart;
    params.tEnd = tEnd;
    params.outputInterval = 0.25;
    mi::RunCallbacks callbacks;
    callbacks.onOutput = [&times](const Particles&, const mi::Diagnostics& d, std::uint64_t) {
      times.push_back(d.time);
    };
    callbacks.onProgress = [tEnd](const mi::ProgressInfo& info) { EXPECT_EQ(info.tEnd, tEnd); };
    const mi::RunSummary summary = mi::runLeapfrog(p, solver, params, callbacks);
    EXPECT_EQ(summary.steps, 4u);
    return p;
  };
  std::vector<double> later, fromZero;
  const Particles a = run(0.5, 1.0, later);
  const Particles b = run(0.0, 0.5, fromZero);
  EXPECT_EQ(later, (std::vector<double>{0.5, 0.75, 1.0}));
  EXPECT_EQ(fromZero, (std::vector<double>{0.0, 0.25, 0.5}));
  EXPECT_EQ(a.x, b.x);
  EXPECT_EQ(a.vy, b.vy);

  // t-end is absolute: before the start, or not a whole number of steps after it, is refused before any force call.
  for (const double tEnd : {0.25, 1.1}) {
    Particles p = TwoBody{}.make();
    KeplerSolver solver;
    matcha::IntegratorParams params;
    params.dt = 1.0 / 8.0;
    params.tStart = 0.5;
    params.tEnd = tEnd;
    EXPECT_THROW(mi::runLeapfrog(p, solver, params, {}), InputError) << tEnd;
    EXPECT_EQ(solver.calls(), 0);
  }
}

TEST(RunLeapfrog, RejectsBadParameters) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  struct Case {
    double dt, tEnd, outputInterval;
    const char* what;
  };
  const Case cases[] = {
      {0.3, 1.0, 0.25, "t-end not a multiple of dt"},
      {1.0 / 8.0, 1.0 + 1e-6, 0.25, "t-end off a multiple by 1e-6"},
      {0.0, 1.0, 0.25, "dt = 0"},
      {-0.125, 1.0, 0.25, "dt < 0"},
      {nan, 1.0, 0.25, "dt NaN"},
      {inf, 1.0, 0.25, "dt inf"},
      {0.125, nan, 0.25, "t-end NaN"},
      {0.125, -1.0, 0.25, "t-end < 0"},
      {0.125, 1.0, 0.0, "output interval 0"},
      {0.125, 1.0, nan, "output interval NaN"},
      {1e-300, 1.0, 0.25, "more than 2^53 steps"},
  };
  for (const Case& c : cases) {
    Particles p = TwoBody{}.make();
    KeplerSolver solver;
    matcha::IntegratorParams params;
    params.dt = c.dt;
    params.tEnd = c.tEnd;
    params.outputInterval = c.outputInterval;
    EXPECT_THROW(mi::runLeapfrog(p, solver, params, {}), InputError) << c.what;
    EXPECT_EQ(solver.calls(), 0) << c.what << ": validation must come before any force call";
  }
  try {
    Particles p = TwoBody{}.make();
    KeplerSolver solver;
    matcha::IntegratorParams params;
    params.dt = 0.3;
    mi::runLeapfrog(p, solver, params, {});
    FAIL() << "no exception";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("t-end must be a multiple of dt"), std::string::npos) << error.what();
  }
}

TEST(LeapfrogKDK, RejectsBadStepAndStepBeforeInitialize) {
  KeplerSolver solver;
  for (double dt : {0.0, -1.0, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    EXPECT_THROW({ mi::LeapfrogKDK leapfrog(solver, dt); }, InputError) << "dt " << dt;
  }
  mi::LeapfrogKDK leapfrog(solver, 0.01);
  Particles p = TwoBody{}.make();
  EXPECT_THROW(leapfrog.step(p), matcha::InvariantError);
  leapfrog.initialize(p);
  mi::StepReport report;
  EXPECT_NO_THROW(report = leapfrog.step(p));
  EXPECT_EQ(leapfrog.stepsTaken(), 1u);
  EXPECT_EQ(report.force.timings.totalSeconds, 0.5);  // the solver's report, passed on
  EXPECT_GE(report.integrationSeconds, 0.0);
  EXPECT_GE(report.wallSeconds, report.integrationSeconds);
  EXPECT_EQ(leapfrog.time(), 0.01);
}

}  // namespace

namespace {

// KeplerSolver whose force call number `poisonedCall` (0: the initial call) plants a NaN in body `body`'s ay: the
// test hook of the run's finiteness check.
class PoisonedSolver : public KeplerSolver {
 public:
  PoisonedSolver(int poisonedCall, std::size_t body, bool reverseOrder)
      : KeplerSolver(reverseOrder), poisonedCall_(poisonedCall), body_(body) {}
  ForceReport computeForces(Particles& p) override {
    const ForceReport report = KeplerSolver::computeForces(p);
    if (calls() - 1 == poisonedCall_) p.ay[body_] = std::numeric_limits<double>::quiet_NaN();
    return report;
  }

 private:
  int poisonedCall_;
  std::size_t body_;
};

}  // namespace

// A NaN planted in the accelerations of step 21 stops the run there with one line naming the step, the time, the body
// (id and index) and the quantity; onNonFinite gets the last state kept, step 16 (kLastGoodEverySteps), bit for bit
// that of an unpoisoned run stopped at step 16 (the solver reorders the bodies at every call, so the saved state's
// order is checked too). A NaN from the initial force call leaves the initial conditions as the last good state.
TEST(RunLeapfrog, NonFiniteValueStopsTheRunAndHandsOverTheLastGoodState) {
  TwoBody orbit;
  matcha::IntegratorParams params;
  params.dt = 1.0 / 64.0;
  params.tEnd = 1.0;
  params.outputInterval = 0.5;  // step 16, the state kept, is not an output

  Particles reference = orbit.make();
  KeplerSolver clean(true);
  matcha::IntegratorParams shorter = params;
  shorter.tEnd = 16.0 / 64.0;
  shorter.outputInterval = shorter.tEnd;
  mi::runLeapfrog(reference, clean, shorter, {});

  Particles p = orbit.make();
  PoisonedSolver poisoned(21, 1, true);
  Particles saved;
  double savedTime = -1.0;
  std::uint64_t savedStep = 99;
  int outputs = 0;
  mi::RunCallbacks callbacks;
  callbacks.onOutput = [&](const Particles&, const mi::Diagnostics&, std::uint64_t) { ++outputs; };
  callbacks.onNonFinite = [&](const Particles& state, double time, std::uint64_t step) {
    saved = state;
    savedTime = time;
    savedStep = step;
  };
  try {
    mi::runLeapfrog(p, poisoned, params, callbacks);
    FAIL() << "the run went on past a NaN";
  } catch (const matcha::NumericalError& error) {
    const std::string message = error.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_NE(message.find("step 21, t = 0.328125"), std::string::npos) << message;
    EXPECT_NE(message.find("body id " + std::to_string(p.id[1]) + " (index 1): ay = nan"), std::string::npos)
        << message;
  }
  EXPECT_EQ(outputs, 1) << "only the output at t = 0 precedes the NaN";
  EXPECT_EQ(savedStep, 16u);
  EXPECT_EQ(savedTime, 16.0 / 64.0);
  EXPECT_EQ(saved.id, reference.id);
  for (const auto member : {&Particles::x, &Particles::y, &Particles::z, &Particles::vx, &Particles::vy, &Particles::vz,
                            &Particles::ax, &Particles::ay, &Particles::az, &Particles::pot}) {
    EXPECT_EQ(saved.*member, reference.*member);
  }

  Particles initial = orbit.make();
  Particles fresh = initial;
  PoisonedSolver atOnce(0, 0, false);
  mi::RunCallbacks first;
  first.onNonFinite = [&](const Particles& state, double time, std::uint64_t step) {
    saved = state;
    savedTime = time;
    savedStep = step;
  };
  EXPECT_THROW(mi::runLeapfrog(fresh, atOnce, params, first), matcha::NumericalError);
  EXPECT_EQ(savedStep, 0u);
  EXPECT_EQ(savedTime, 0.0);
  EXPECT_EQ(saved.x, initial.x);
  EXPECT_EQ(saved.vy, initial.vy);
}

namespace {

// KeplerSolver that can save its state only at every third call (like a tree reused over three steps).
class EveryThirdCallSolver : public KeplerSolver {
 public:
  bool atCheckpointBoundary() const override { return calls() % 3 == 1; }
};

}  // namespace

// Checkpoints: with interval 0 after every step where the solver can save its state (never after the last); with a
// long interval only after the first output (the next output within a minute does not repeat it), at the first
// boundary at or after it; each with the step, the next output and the run's first diagnostics.
TEST(RunLeapfrog, CheckpointsFollowTheIntervalTheFirstOutputAndTheSolversBoundaries) {
  matcha::IntegratorParams params;
  params.dt = 1.0 / 64.0;
  params.tEnd = 32.0 / 64.0;
  params.outputInterval = 8.0 / 64.0;
  for (const double interval : {0.0, 900.0}) {
    params.checkpointInterval = interval;
    Particles p = TwoBody{}.make();
    EveryThirdCallSolver solver;
    std::vector<std::uint64_t> steps;
    double initialEnergy = 0.0;
    mi::RunCallbacks callbacks;
    callbacks.onOutput = [&](const Particles&, const mi::Diagnostics& d, std::uint64_t index) {
      if (index == 0) initialEnergy = d.total;
    };
    callbacks.onCheckpoint = [&](const Particles&, double time, const mi::RunPosition& position) {
      EXPECT_EQ(time, double(position.step) * params.dt);
      EXPECT_EQ(position.nextOutputIndex, position.step / 8 + 1);
      EXPECT_EQ(position.initial.total, initialEnergy);
      steps.push_back(position.step);
    };
    mi::runLeapfrog(p, solver, params, callbacks);
    // Call k + 1 is step k's force call: boundaries after steps 3, 6, 9, ...
    if (interval == 0.0) {
      EXPECT_EQ(steps, (std::vector<std::uint64_t>{3, 6, 9, 12, 15, 18, 21, 24, 27, 30}));
    } else {
      EXPECT_EQ(steps, (std::vector<std::uint64_t>{9}));  // the first boundary at or after the output at step 8
    }
  }
}

namespace {

// KeplerSolver whose trees always end before their plan (a periodic tree ended by its bodies' motion): never at a
// boundary unless the run ends its tree for a checkpoint, which makes the call just made a boundary.
class NeverAtABoundarySolver : public KeplerSolver {
 public:
  ForceReport computeForces(Particles& p) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    ended_ = false;
    return KeplerSolver::computeForces(p);
  }
  bool atCheckpointBoundary() const override { return ended_; }
  bool endTreeForCheckpoint() override {
    ended_ = true;
    endedAtCall_.push_back(calls());
    return true;
  }
  const std::vector<int>& endedAtCall() const { return endedAtCall_; }

 private:
  bool ended_ = false;
  std::vector<int> endedAtCall_;
};

/// What a run on NeverAtABoundarySolver did for its checkpoints: each one's step and wall seconds since the run's
/// start, and the calls at which the run ended the solver's tree.
struct CheckpointsTaken {
  std::vector<std::uint64_t> steps;
  std::vector<double> seconds;
  std::vector<int> endedAtCall;
};

CheckpointsTaken runWithoutBoundaries(const matcha::IntegratorParams& params) {
  Particles p = TwoBody{}.make();
  NeverAtABoundarySolver solver;
  CheckpointsTaken taken;
  mi::RunCallbacks callbacks;
  const matcha::Stopwatch clock;
  callbacks.onCheckpoint = [&](const Particles&, double, const mi::RunPosition& position) {
    EXPECT_TRUE(solver.atCheckpointBoundary());
    taken.steps.push_back(position.step);
    taken.seconds.push_back(clock.seconds());
  };
  mi::runLeapfrog(p, solver, params, callbacks);
  taken.endedAtCall = solver.endedAtCall();
  return taken;
}

}  // namespace

// A checkpoint that waits longer than min(interval, a minute) for the solver's boundary is overdue: the run has the
// solver end its tree (ForceSolver::endTreeForCheckpoint) and takes it there. With interval 0 the checkpoints take
// the solver's boundaries as they come: none here, and no tree is ended for them.
TEST(RunLeapfrog, AnOverdueCheckpointEndsTheSolversTree) {
  matcha::IntegratorParams params;
  params.dt = 1.0 / 64.0;
  params.tEnd = 48.0 / 64.0;  // 48 steps of >= 2 ms
  params.outputInterval = params.tEnd;
  for (const double interval : {0.0, 0.02}) {
    SCOPED_TRACE("interval " + std::to_string(interval));
    params.checkpointInterval = interval;
    const CheckpointsTaken taken = runWithoutBoundaries(params);
    if (interval == 0.0) {
      EXPECT_TRUE(taken.steps.empty());
      EXPECT_TRUE(taken.endedAtCall.empty());
    } else {
      // Due after 0.02 s (~10 steps), overdue 0.02 s later: a checkpoint every ~20 steps, each at a tree the run ended.
      EXPECT_GE(taken.steps.size(), 1u);
      EXPECT_LE(taken.steps.size(), 4u);
      ASSERT_EQ(taken.endedAtCall.size(), taken.steps.size());
      for (std::size_t k = 0; k < taken.steps.size(); ++k) {
        EXPECT_EQ(std::uint64_t(taken.endedAtCall[k]), taken.steps[k] + 1) << "call k + 1 is step k's";
      }
      EXPECT_GE(taken.seconds.front(), 0.04)
          << "not before the checkpoint was due (0.02 s) and then overdue (0.02 s more)";
    }
  }
}

// A checkpoint that follows an output is written at the output's step: the run ends the solver's tree there rather
// than wait for a boundary that may not come before the run ends (late in a comoving run, or a run stopped a few
// steps after its output). With interval 0 it waits for a boundary, as every checkpoint does.
TEST(RunLeapfrog, ACheckpointAfterAnOutputIsTakenAtTheOutput) {
  matcha::IntegratorParams params;
  params.dt = 1.0 / 64.0;
  params.tEnd = 12.0 / 64.0;
  params.outputInterval = 8.0 / 64.0;
  for (const double interval : {0.0, 900.0}) {
    SCOPED_TRACE("interval " + std::to_string(interval));
    params.checkpointInterval = interval;
    const CheckpointsTaken taken = runWithoutBoundaries(params);
    if (interval == 0.0) {
      EXPECT_TRUE(taken.steps.empty());
      EXPECT_TRUE(taken.endedAtCall.empty());
    } else {
      EXPECT_EQ(taken.steps, (std::vector<std::uint64_t>{8})) << "at the output of step 8, once";
      EXPECT_EQ(taken.endedAtCall, (std::vector<int>{9})) << "call k + 1 is step k's";
    }
  }
}

// The last step on each tree: after every step whose call ends a tree (here every third), the last step included,
// with the state after the step; its time is output time, and the forces it sees are the step's own.
TEST(RunLeapfrog, TheLastCallOnEachTreeIsReportedWithTheStateAfterIt) {
  matcha::IntegratorParams params;
  params.dt = 1.0 / 64.0;
  params.tEnd = 33.0 / 64.0;
  params.outputInterval = 11.0 / 64.0;
  Particles p = TwoBody{}.make();
  EveryThirdCallSolver solver;
  std::vector<std::uint64_t> steps;
  mi::RunCallbacks callbacks;
  callbacks.onLastCallOnTree = [&](const Particles& state, double time, std::uint64_t step) {
    EXPECT_EQ(time, double(step) * params.dt);
    EXPECT_EQ(state.ax, p.ax);
    steps.push_back(step);
  };
  const mi::RunSummary summary = mi::runLeapfrog(p, solver, params, callbacks);
  EXPECT_EQ(steps, (std::vector<std::uint64_t>{3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 33}));
  EXPECT_GE(summary.outputSeconds, 0.0);
}

// A periodic box: every drift folds the bodies back into [0, L)^3, so a body that leaves through a face comes back
// through the opposite one, with its velocity; without a box (0) the same step leaves the positions where the drift
// put them, bit for bit.
namespace {
class NoForce : public matcha::ForceSolver {
 public:
  matcha::ForceReport computeForces(matcha::Particles& p) override {
    for (auto* a : {&p.ax, &p.ay, &p.az, &p.pot}) std::fill(a->begin(), a->end(), 0.0);
    return {};
  }
  std::string describe() const override { return "no force"; }
};
}  // namespace

TEST(LeapfrogPeriodic, DriftFoldsBodiesIntoTheBox) {
  const double L = 2.0, dt = 0.25;
  matcha::Particles p(4);
  const double x0[4] = {1.9, 0.05, 1.0, 0.0};
  const double vx[4] = {1.0, -1.0, 12.0, -0.0};
  for (std::size_t i = 0; i < 4; ++i) {
    p.x[i] = x0[i];
    p.y[i] = 0.5;
    p.z[i] = 1.5;
    p.vx[i] = vx[i];
    p.vz[i] = 2.0;  // z: 1.5 + 0.5 = 2.0 = L, which must fold to 0
    p.mass[i] = 1.0;
    p.id[i] = i;
  }
  matcha::Particles open = p;
  NoForce solver;
  matcha::integrator::LeapfrogKDK periodic(solver, dt, L), unbounded(solver, dt);
  EXPECT_THROW(matcha::integrator::LeapfrogKDK(solver, dt, -1.0), matcha::InputError);
  EXPECT_THROW(matcha::integrator::LeapfrogKDK(solver, dt, NAN), matcha::InputError);
  periodic.initialize(p);
  unbounded.initialize(open);
  periodic.step(p);
  unbounded.step(open);
  const double expected[4] = {0.15, 1.8, 0.0, 0.0};  // 2.15 - L, -0.2 + L, 4.0 - 2 L, and 0 stays
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_TRUE(p.x[i] >= 0.0 && p.x[i] < L) << i << " " << p.x[i];
    EXPECT_NEAR(p.x[i], expected[i], 1e-12) << i;
    EXPECT_EQ(p.z[i], 0.0) << i;
    EXPECT_EQ(p.vx[i], vx[i]);
    EXPECT_EQ(open.x[i], x0[i] + vx[i] * dt) << "open boundaries: the drift alone";
    EXPECT_EQ(open.z[i], 2.0);
  }
}

// ---------------------------------------------------------------------------------------------- steps that vary

namespace {

/// A schedule of steps that vary (dt_k = base (1 + 0.5 sin k)), outputs at fixed steps, diagnostics after every
/// `diagnosticsEvery`-th step and, at step 5, a softening the step asks the solver to take: what a comoving run's
/// schedule does, with times the Kepler problem can check.
class WobblingSteps final : public mi::StepSchedule {
 public:
  WobblingSteps(double base, std::uint64_t numSteps, std::vector<std::uint64_t> outputSteps,
                std::uint64_t diagnosticsEvery = 1)
      : base_(base), numSteps_(numSteps), outputSteps_(std::move(outputSteps)), diagnosticsEvery_(diagnosticsEvery) {}

  double dtOf(std::uint64_t step) const { return base_ * (1.0 + 0.5 * std::sin(double(step))); }
  double startTime() const override { return 0.0; }
  double endTime() const override {
    double t = 0.0;
    for (std::uint64_t s = 1; s <= numSteps_; ++s) t += dtOf(s);
    return t;
  }
  mi::PlannedStep plan(std::uint64_t stepsTaken, double time, const Particles& /*p*/) override {
    EXPECT_EQ(stepsTaken, planned_) << "plan is called once per step, in order";
    const std::uint64_t step = ++planned_;
    const double dt = dtOf(step);
    mi::PlannedStep next;
    next.factors = {0.5 * dt, dt, 0.5 * dt};
    next.endTime = time + dt;
    next.last = step == numSteps_;
    next.output = std::find(outputSteps_.begin(), outputSteps_.end(), step) != outputSteps_.end();
    next.diagnostics = step % diagnosticsEvery_ == 0;
    if (step == 5) next.softening = 0.01;
    return next;
  }
  bool mayEndAtOutput(std::uint64_t stepsTaken, double) const override {
    const std::uint64_t step = stepsTaken + 1;
    return step == numSteps_ || std::find(outputSteps_.begin(), outputSteps_.end(), step) != outputSteps_.end();
  }
  bool plansDiagnostics() const override { return true; }
  bool mayPlanDiagnostics(std::uint64_t stepsTaken, double) const override {
    return (stepsTaken + 1) % diagnosticsEvery_ == 0;
  }
  bool done(std::uint64_t stepsTaken, double) const override { return stepsTaken >= numSteps_; }
  double fractionDone(double time) const override { return time / endTime(); }
  std::uint64_t estimatedSteps(std::uint64_t, double) const override { return numSteps_; }
  void resume(std::uint64_t stepsTaken, double) override { planned_ = stepsTaken; }

 private:
  double base_;
  std::uint64_t numSteps_;
  std::vector<std::uint64_t> outputSteps_;
  std::uint64_t diagnosticsEvery_;
  std::uint64_t planned_ = 0;
};

/// KeplerSolver that records the softenings it is asked to take (it computes the exact force regardless).
class SofteningKeplerSolver : public KeplerSolver {
 public:
  void setSoftening(double eps) override { softenings.push_back(eps); }
  std::vector<double> softenings;
};

}  // namespace

// A leapfrog of variable steps given the fixed step's factors takes the fixed step's trajectory, bit for bit, with its
// closing kicks deferred or not.
TEST(LeapfrogKDK, StepsGivenOneByOneWithTheFixedFactorsAreTheFixedStep) {
  TwoBody eccentric;
  eccentric.e = 0.6;
  const double dt = eccentric.period() / 200;
  Particles fixed = eccentric.make(), given = eccentric.make();
  KeplerSolver fixedSolver, givenSolver;
  mi::LeapfrogKDK fixedRun(fixedSolver, dt), givenRun(givenSolver, mi::LeapfrogKDK::VariableSteps{});
  EXPECT_TRUE(givenRun.variableSteps());
  EXPECT_FALSE(fixedRun.variableSteps());
  fixedRun.initialize(fixed);
  givenRun.initialize(given);
  for (int s = 1; s <= 250; ++s) {
    const mi::ClosingKick closing = s % 3 == 0 ? mi::ClosingKick::now : mi::ClosingKick::deferred;
    fixedRun.step(fixed, closing);
    givenRun.step(given, mi::KdkStep{0.5 * dt, dt, 0.5 * dt}, closing);
  }
  fixedRun.synchronize(fixed);
  givenRun.synchronize(given);
  for (const auto member :
       {&Particles::x, &Particles::y, &Particles::z, &Particles::vx, &Particles::vy, &Particles::vz}) {
    EXPECT_EQ(fixed.*member, given.*member);
  }
}

namespace {

/// KeplerSolver plus a long range of its own, a harmonic pull -k x towards the origin (potential k |x|^2 / 2), which
/// it leaves out of the calls that are not due while long-range steps are on: what TreePM does with its mesh.
class SplitKeplerSolver final : public KeplerSolver {
 public:
  static constexpr double kSpring = 0.05;
  explicit SplitKeplerSolver(bool reverseOrder = false) : KeplerSolver(reverseOrder) {}

  ForceReport computeForces(Particles& p) override {
    const ForceReport report = KeplerSolver::computeForces(p);
    kept_ = false;
    if (longRangeStepsOn() && !longRangeDue()) return report;
    ++longRangeCalls;
    fill(p);
    for (std::size_t i = 0; i < p.size(); ++i) {
      p.ax[i] += gx_[i];
      p.ay[i] += gy_[i];
      p.az[i] += gz_[i];
      p.pot[i] += 0.5 * kSpring * (p.x[i] * p.x[i] + p.y[i] * p.y[i] + p.z[i] * p.z[i]);
    }
    kept_ = longRangeStepsOn();
    return report;
  }
  bool splitsLongRange() const override { return true; }
  void setLongRangeSteps(bool on) override {
    longRangeSteps_ = on;
    kept_ = false;
  }
  matcha::AccelerationView lastLongRange() const override {
    if (!kept_) return {};
    return {gx_.data(), gy_.data(), gz_.data(), gx_.size()};
  }
  void computeLongRange(Particles& p) override {
    ++recomputed;
    fill(p);
    kept_ = true;
  }
  int longRangeCalls = 0;  ///< calls that computed the long range
  int recomputed = 0;      ///< computeLongRange calls

 private:
  void fill(const Particles& p) {
    gx_.resize(p.size());
    gy_.resize(p.size());
    gz_.resize(p.size());
    for (std::size_t i = 0; i < p.size(); ++i) {
      gx_[i] = -kSpring * p.x[i];
      gy_[i] = -kSpring * p.y[i];
      gz_[i] = -kSpring * p.z[i];
    }
  }
  std::vector<double> gx_, gy_, gz_;
  bool kept_ = false;
};

/// The factors of step s (1-based) of a run of fixed steps dt within long-range steps of `inner` steps.
mi::KdkStep longRangeStepFactors(double dt, int inner, int s) {
  mi::KdkStep factors{0.5 * dt, dt, 0.5 * dt};
  const double half = 0.5 * inner * dt;
  if ((s - 1) % inner == 0) factors.longRangeOpeningKick = half;
  factors.longRangeAtEnd = s % inner == 0;
  if (factors.longRangeAtEnd) factors.longRangeClosingKick = half;
  return factors;
}

double keplerWithSpringEnergy(const Particles& p) {
  const double dx = p.x[1] - p.x[0], dy = p.y[1] - p.y[0], dz = p.z[1] - p.z[0];
  double energy = -p.mass[0] * p.mass[1] / std::sqrt(dx * dx + dy * dy + dz * dz);
  for (std::size_t i = 0; i < 2; ++i) {
    energy += 0.5 * p.mass[i] * (p.vx[i] * p.vx[i] + p.vy[i] * p.vy[i] + p.vz[i] * p.vz[i]);
    energy += 0.5 * p.mass[i] * SplitKeplerSolver::kSpring * (p.x[i] * p.x[i] + p.y[i] * p.y[i] + p.z[i] * p.z[i]);
  }
  return energy;
}

}  // namespace

// Long-range steps one step long give long-range kicks equal to the short range's: the whole force every call, the
// same trajectory bit for bit as without long-range steps.
TEST(LeapfrogKDK, LongRangeStepsOfOneStepAreTheWholeForceEveryStep) {
  TwoBody orbit;
  orbit.e = 0.4;
  orbit.centre = Eigen::Vector3d(0.3, -0.2, 0.1);
  const double dt = orbit.period() / 300;
  Particles plain = orbit.make(), split = orbit.make();
  SplitKeplerSolver plainSolver(true), splitSolver(true);
  splitSolver.setLongRangeSteps(true);
  mi::LeapfrogKDK plainRun(plainSolver, mi::LeapfrogKDK::VariableSteps{});
  mi::LeapfrogKDK splitRun(splitSolver, mi::LeapfrogKDK::VariableSteps{});
  plainRun.initialize(plain);
  splitRun.initialize(split);
  for (int s = 1; s <= 400; ++s) {
    plainRun.step(plain, mi::KdkStep{0.5 * dt, dt, 0.5 * dt}, mi::ClosingKick::deferred);
    splitRun.step(split, longRangeStepFactors(dt, 1, s), mi::ClosingKick::deferred);
  }
  plainRun.synchronize(plain);
  splitRun.synchronize(split);
  for (const auto member :
       {&Particles::x, &Particles::y, &Particles::z, &Particles::vx, &Particles::vy, &Particles::vz}) {
    EXPECT_EQ(plain.*member, split.*member);
  }
  EXPECT_EQ(splitSolver.longRangeCalls, 401);
}

// Long-range steps of four steps: the long range is computed at their ends only and kicks there by half a long-range
// step (RESPA): the trajectory is that of the splitting written out by hand (to rounding), the same bit for bit
// whether the closing kicks wait or not and whatever the bodies' order, and a run resumed at a long-range step's end
// (the solver computing the long range again) continues it bit for bit; the energy stays bounded.
TEST(LeapfrogKDK, LongRangeStepsKickTheLongRangeAtTheirEnds) {
  TwoBody orbit;
  orbit.e = 0.3;
  orbit.centre = Eigen::Vector3d(0.5, 0.2, -0.3);
  const double dt = orbit.period() / 400;
  const int inner = 4, steps = 800;
  const auto run = [&](bool reverse, mi::ClosingKick closing, int stopAt, Particles& p, int& longRangeCalls) {
    SplitKeplerSolver solver(reverse);
    solver.setLongRangeSteps(true);
    mi::LeapfrogKDK leapfrog(solver, mi::LeapfrogKDK::VariableSteps{});
    leapfrog.initialize(p);
    for (int s = 1; s <= stopAt; ++s) leapfrog.step(p, longRangeStepFactors(dt, inner, s), closing);
    leapfrog.synchronize(p);
    longRangeCalls = solver.longRangeCalls;
    return keplerWithSpringEnergy(p);
  };
  Particles deferred = orbit.make(), now = orbit.make(), sorted = orbit.make();
  int calls = 0, unused = 0;
  const double e0 = keplerWithSpringEnergy(deferred);
  const double e1 = run(true, mi::ClosingKick::deferred, steps, deferred, calls);
  run(true, mi::ClosingKick::now, steps, now, unused);
  run(false, mi::ClosingKick::deferred, steps, sorted, unused);
  EXPECT_EQ(calls, 1 + steps / inner) << "the long range at the start and at each long-range step's end";
  EXPECT_LT(std::abs((e1 - e0) / e0), 1e-3);
  for (const auto member : {&Particles::x, &Particles::vx, &Particles::y, &Particles::vy}) {
    EXPECT_EQ(deferred.*member, now.*member) << "the closing kick's deferral changes no bit";
  }
  // The splitting by hand: v += gL H/2 at each long-range step's ends, KDK with the Kepler force inside.
  Particles hand = orbit.make();
  SplitKeplerSolver kepler;
  const auto spring = [&](double factor) {
    for (std::size_t i = 0; i < 2; ++i) {
      hand.vx[i] -= SplitKeplerSolver::kSpring * hand.x[i] * factor;
      hand.vy[i] -= SplitKeplerSolver::kSpring * hand.y[i] * factor;
      hand.vz[i] -= SplitKeplerSolver::kSpring * hand.z[i] * factor;
    }
  };
  kepler.setLongRangeSteps(true);
  kepler.setLongRangeDue(false);
  kepler.computeForces(hand);
  for (int s = 1; s <= steps; ++s) {
    if ((s - 1) % inner == 0) spring(0.5 * inner * dt);
    mi::kick(hand, 0.5 * dt);
    mi::drift(hand, dt);
    kepler.computeForces(hand);
    mi::kick(hand, 0.5 * dt);
    if (s % inner == 0) spring(0.5 * inner * dt);
  }
  std::vector<std::uint32_t> byId(2);
  for (std::size_t i = 0; i < 2; ++i) byId[sorted.id[i]] = static_cast<std::uint32_t>(i);
  sorted.permute(byId);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_NEAR(sorted.x[i], hand.x[i], 1e-11);
    EXPECT_NEAR(sorted.vy[i], hand.vy[i], 1e-11);
  }
  // Resumed at step 400 (a long-range step's end) with a solver that keeps nothing: the same bits at step 800.
  Particles first = orbit.make();
  run(true, mi::ClosingKick::deferred, 400, first, unused);
  SplitKeplerSolver resumedSolver(true);
  resumedSolver.setLongRangeSteps(true);
  resumedSolver.setLongRangeDue(true);
  resumedSolver.computeForces(first);     // the checkpoint's forces, as the run computed them at step 400
  resumedSolver.setLongRangeSteps(true);  // and nothing kept, as after a restart
  mi::LeapfrogKDK resumed(resumedSolver, mi::LeapfrogKDK::VariableSteps{});
  resumed.resume(400);
  for (int s = 401; s <= steps; ++s) resumed.step(first, longRangeStepFactors(dt, inner, s), mi::ClosingKick::deferred);
  resumed.synchronize(first);
  EXPECT_EQ(resumedSolver.recomputed, 1);
  for (Particles* state : {&first, &deferred}) {
    for (std::size_t i = 0; i < 2; ++i) byId[state->id[i]] = static_cast<std::uint32_t>(i);
    state->permute(byId);
  }
  for (const auto member : {&Particles::x, &Particles::vx, &Particles::z, &Particles::vz}) {
    EXPECT_EQ(first.*member, deferred.*member);
  }
}

// runSteps takes the schedule's steps: its clock is theirs, outputs where it says and at the end, diagnostics after
// every step in time order, potentials at every call, the softening asked for before the step's call; and the
// leapfrog with steps that vary stays second order (energy error bounded, not drifting).
TEST(RunSteps, TakesTheSchedulesStepsOutputsDiagnosticsAndSoftening) {
  TwoBody eccentric;
  eccentric.e = 0.3;
  Particles p = eccentric.make();
  SofteningKeplerSolver solver;
  WobblingSteps schedule(eccentric.period() / 400, 800, {100, 333, 800});
  std::vector<double> outputTimes, diagnosticTimes;
  std::vector<std::uint64_t> outputIndices;
  mi::RunCallbacks callbacks;
  callbacks.onOutput = [&](const Particles&, const mi::Diagnostics& d, std::uint64_t index) {
    outputTimes.push_back(d.time);
    outputIndices.push_back(index);
  };
  callbacks.onDiagnostics = [&](const mi::Diagnostics& d) { diagnosticTimes.push_back(d.time); };
  std::uint64_t lastProgressTotal = 0;
  callbacks.onProgress = [&](const mi::ProgressInfo& info) { lastProgressTotal = info.totalSteps; };
  matcha::IntegratorParams settings;
  const mi::RunSummary summary = mi::runSteps(p, solver, schedule, settings, callbacks);
  EXPECT_EQ(summary.steps, 800u);
  EXPECT_EQ(lastProgressTotal, 800u);
  ASSERT_EQ(outputIndices, (std::vector<std::uint64_t>{0, 1, 2, 3}));
  double t = 0.0;
  std::vector<double> expectedOutputTimes{0.0};
  for (std::uint64_t s = 1; s <= 800; ++s) {
    t += schedule.dtOf(s);
    if (s == 100 || s == 333 || s == 800) expectedOutputTimes.push_back(t);
  }
  EXPECT_EQ(outputTimes, expectedOutputTimes);
  EXPECT_EQ(diagnosticTimes.size(), 801u) << "the start and every step, once each";
  EXPECT_TRUE(std::is_sorted(diagnosticTimes.begin(), diagnosticTimes.end()));
  EXPECT_EQ(solver.callsWithPotentials(), solver.calls()) << "potentials at every call";
  EXPECT_EQ(solver.softenings, std::vector<double>{0.01});
  EXPECT_LT(summary.relativeEnergyError, 1e-3);
}

// A schedule that plans its diagnostics every few steps has them measured there and at the outputs only, in time
// order, with potentials computed for exactly those calls (and the first), whatever the progress line's clock says;
// the trajectory is the one measured every step, bit for bit: measuring makes the deferred closing kick at once,
// rounded the same.
TEST(RunSteps, DiagnosticsOnlyWhereTheSchedulePlansThem) {
  TwoBody eccentric;
  eccentric.e = 0.3;
  const auto run = [&](std::uint64_t every, std::vector<double>& diagnosticTimes, std::uint64_t& potentialCalls) {
    Particles p = eccentric.make();
    SofteningKeplerSolver solver;
    WobblingSteps schedule(eccentric.period() / 400, 200, {50, 123, 200}, every);
    mi::RunCallbacks callbacks;
    callbacks.onDiagnostics = [&](const mi::Diagnostics& d) { diagnosticTimes.push_back(d.time); };
    callbacks.onProgress = [](const mi::ProgressInfo&) {};  // would measure energies once a second of its own
    mi::runSteps(p, solver, schedule, matcha::IntegratorParams{}, callbacks);
    potentialCalls = static_cast<std::uint64_t>(solver.callsWithPotentials());
    return p;
  };
  std::vector<double> everyStep, everySeventh;
  std::uint64_t everyStepPotentials = 0, everySeventhPotentials = 0;
  const Particles a = run(1, everyStep, everyStepPotentials);
  const Particles b = run(7, everySeventh, everySeventhPotentials);
  ASSERT_EQ(everyStep.size(), 201u);
  // The start, steps 7, 14, ..., 196 (28 of them), and the outputs 50, 123 and 200 that are not multiples of 7.
  std::vector<double> expected{everyStep[0]};
  for (std::uint64_t step = 1; step <= 200; ++step) {
    if (step % 7 == 0 || step == 50 || step == 123 || step == 200) expected.push_back(everyStep[step]);
  }
  EXPECT_EQ(everySeventh, expected);
  EXPECT_EQ(everySeventhPotentials, expected.size());
  EXPECT_EQ(everyStepPotentials, 201u);
  for (const auto member :
       {&Particles::x, &Particles::y, &Particles::z, &Particles::vx, &Particles::vy, &Particles::vz}) {
    EXPECT_EQ(a.*member, b.*member);
  }
}

TEST(MaxAcceleration, LargestMagnitudeAndNaNWins) {
  Particles p(5000);
  for (std::size_t i = 0; i < p.size(); ++i) {
    p.ax[i] = std::sin(double(i));
    p.ay[i] = std::cos(double(i));
  }
  p.az[4321] = 3.0;
  EXPECT_DOUBLE_EQ(mi::maxAcceleration(p),
                   std::sqrt(9.0 + std::sin(4321.0) * std::sin(4321.0) + std::cos(4321.0) * std::cos(4321.0)));
  EXPECT_EQ(mi::maxAcceleration(Particles{}), 0.0);
  p.ax[17] = NAN;  // under this binary's floating-point traps: no comparison may touch it
  EXPECT_TRUE(std::isnan(mi::maxAcceleration(p)));
  p.ax[17] = 0.0;
  p.ay[4000] = INFINITY;
  EXPECT_EQ(mi::maxAcceleration(p), INFINITY);
}

namespace {

/// Independent bodies (no pairs): body k (by id) feels a spring -kSpring x along x and a constant pull pull[k] along
/// z, which fixes its bin under timeBinFor's scale 1 (sqrt(pull) halfway between powers of two, the spring far
/// smaller). The bodies whose bins are below the lowest active one get NaN accelerations, so that any use of them
/// shows; each call reverses the bodies' order (bins with them) and records its lowest active bin. No long range.
class BinnedSpringSolver final : public matcha::ForceSolver {
 public:
  static constexpr double kSpring = 0.01;
  explicit BinnedSpringSolver(std::vector<double> pull) : pull_(std::move(pull)) {}

  ForceReport computeForces(Particles& p) override {
    std::vector<std::uint32_t> reversed(p.size());
    for (std::size_t i = 0; i < p.size(); ++i) reversed[i] = static_cast<std::uint32_t>(p.size() - 1 - i);
    p.permute(reversed);
    const std::uint8_t lowest = lowestActiveBin();
    lowestActiveBins.push_back(lowest);
    for (std::size_t i = 0; i < p.size(); ++i) {
      if (p.timeBin.size() == p.size() && p.timeBin[i] < lowest) {
        p.ax[i] = p.ay[i] = p.az[i] = std::numeric_limits<double>::quiet_NaN();
        continue;
      }
      p.ax[i] = -kSpring * p.x[i];
      p.ay[i] = 0.0;
      p.az[i] = pull_[p.id[i]];
      p.pot[i] = 0.0;
    }
    zeros_.assign(p.size(), 0.0);
    return {};
  }
  bool splitsLongRange() const override { return true; }
  void setLongRangeSteps(bool on) override { longRangeSteps_ = on; }
  matcha::AccelerationView lastLongRange() const override {
    return {zeros_.data(), zeros_.data(), zeros_.data(), zeros_.size()};
  }
  std::string describe() const override { return "binned springs"; }
  std::vector<std::uint8_t> lowestActiveBins;

 private:
  std::vector<double> pull_;
  std::vector<double> zeros_;
};

}  // namespace

// Block time steps (BinnedStep) over one long step T: each body takes 2^bin KDK steps of its own, T / 2^bin, while all
// drift together, and ends where a plain leapfrog of that step puts it; the force calls come at every step of the
// finest bin, each asking for the bins whose steps end there, and no body's acceleration is read while stale.
TEST(LeapfrogKDK, BinnedStepsGiveEachBodyTheLeapfrogOfItsOwnStep) {
  const std::vector<int> bins = {0, 3, 1, 2, 3, 0};
  std::vector<double> pull;
  for (const int bin : bins) pull.push_back(std::ldexp(1.0, 2 * bin - 1));  // sqrt(pull) = 2^(bin - 1/2)
  const std::size_t n = bins.size();
  Particles p(n);
  for (std::size_t k = 0; k < n; ++k) {
    p.id[k] = k;
    p.mass[k] = 1.0;
    p.x[k] = 0.3 + 0.1 * double(k);
    p.vx[k] = 0.05 * double(k) - 0.1;
    p.vz[k] = -0.2;
  }
  const Particles start = p;
  BinnedSpringSolver solver(pull);
  solver.setLongRangeSteps(true);
  mi::LeapfrogKDK leapfrog(solver, mi::LeapfrogKDK::VariableSteps{});
  leapfrog.initialize(p);
  const double longStep = 0.8;
  const double perTick = longStep / double(mi::kTicksPerLongStep);
  std::uint64_t tick = 0;
  int calls = 0;
  while (tick < mi::kTicksPerLongStep) {
    mi::BinnedStep block;
    block.tick = tick;
    block.openingBinScale = block.closingBinScale = 1.0;
    const std::uint8_t finest = tick == 0 ? mi::timeBinFor(mi::maxAcceleration(p), 1.0) : mi::finestTimeBin(p);
    block.nextTick = tick + (std::uint64_t{1} << (mi::kDeepestTimeBin - finest));
    for (std::size_t bin = 0; bin < mi::kNumTimeBins; ++bin) {
      const double half = 0.5 * longStep * std::ldexp(1.0, -int(bin));
      block.openingKick[bin] = block.closingKick[bin] = half;
    }
    mi::KdkStep factors;
    factors.drift = double(block.nextTick - tick) * perTick;
    factors.longRangeAtEnd = block.endsLongStep();
    factors.block = block;
    const mi::StepReport report = leapfrog.step(p, factors);
    ASSERT_FALSE(report.nonFinite.has_value()) << "a stale acceleration was read at tick " << tick;
    tick = block.nextTick;
    ++calls;
  }
  EXPECT_EQ(calls, 8);
  const std::vector<std::uint8_t> expected = {0, 3, 2, 3, 1, 3, 2, 3, 0};  // initialize, then the ticks' bins
  EXPECT_EQ(solver.lowestActiveBins, expected);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t k = p.id[i];
    EXPECT_EQ(p.timeBin[i], bins[k]) << "body " << k;
    // The plain leapfrog of the body's own step.
    const int steps = 1 << bins[k];
    const double h = longStep / steps;
    double x = start.x[k], vx = start.vx[k], z = start.z[k], vz = start.vz[k];
    for (int s = 0; s < steps; ++s) {
      vx += -BinnedSpringSolver::kSpring * x * 0.5 * h;
      vz += pull[k] * 0.5 * h;
      x += vx * h;
      z += vz * h;
      vx += -BinnedSpringSolver::kSpring * x * 0.5 * h;
      vz += pull[k] * 0.5 * h;
    }
    EXPECT_NEAR(p.x[i], x, 1e-14) << "body " << k;
    EXPECT_NEAR(p.vx[i], vx, 1e-14) << "body " << k;
    EXPECT_NEAR(p.z[i], z, 1e-13) << "body " << k;
    EXPECT_NEAR(p.vz[i], vz, 1e-13) << "body " << k;
  }
}

TEST(TimeBins, AlignmentAndTheBinOfAnAcceleration) {
  EXPECT_EQ(mi::alignedTimeBin(0), 0);
  EXPECT_EQ(mi::alignedTimeBin(mi::kTicksPerLongStep), 0);
  EXPECT_EQ(mi::alignedTimeBin(mi::kTicksPerLongStep / 2), 1);
  EXPECT_EQ(mi::alignedTimeBin(3 * (mi::kTicksPerLongStep / 4)), 2);
  EXPECT_EQ(mi::alignedTimeBin(1), mi::kDeepestTimeBin);
  EXPECT_EQ(mi::timeBinFor(0.0, 1.0), 0);
  EXPECT_EQ(mi::timeBinFor(1.0, 1.0), 0);     // exactly at its limit: the long step itself
  EXPECT_EQ(mi::timeBinFor(1.0001, 1.0), 1);  // just beyond: half of it
  EXPECT_EQ(mi::timeBinFor(16.0, 1.0), 2);
  EXPECT_EQ(mi::timeBinFor(17.0, 1.0), 3);
  // The exact ceiling of log2 at powers of two and one ulp beyond them (log2 in double rounds 2^8 (1 + 2^-52) to 8).
  for (int b = 1; b <= 30; ++b) {
    const double power = std::ldexp(1.0, b);
    EXPECT_EQ(mi::timeBinFor(1.0, power), b);
    EXPECT_EQ(mi::timeBinFor(1.0, std::nextafter(power, 2.0 * power)), b + 1);
    EXPECT_EQ(mi::timeBinFor(1.0, std::nextafter(power, 0.0)), b);
  }
  EXPECT_EQ(mi::timeBinFor(std::numeric_limits<double>::infinity(), 1.0), mi::kDeepestTimeBin);
  EXPECT_EQ(mi::timeBinFor(1e300, 1.0), mi::kDeepestTimeBin);
  Particles p(3);
  EXPECT_EQ(mi::finestTimeBin(p), 0);  // no bins
  p.timeBin = {2, 7, 1};
  EXPECT_EQ(mi::finestTimeBin(p), 7);
}
