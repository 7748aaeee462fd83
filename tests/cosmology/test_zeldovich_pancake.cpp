// SPDX-License-Identifier: MIT
// The Zel'dovich pancake and the unperturbed grid (cosmology/zeldovich_pancake.hpp): the initial conditions are the
// analytic solution at the start, bit for bit, and the same bodies as makeCosmologicalIcs makes from one cosine mode;
// the stored velocity is the time derivative of the position (a finite difference in cosmic time); the caustic forms at
// q = 0 at z_c; the comparison of a snapshot finds no error in the solution itself and exactly the error put into a
// perturbed copy; every refusal.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdint>
#include <limits>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "matcha/core/errors.hpp"
#include "matcha/cosmology/background.hpp"
#include "matcha/cosmology/initial_conditions.hpp"
#include "matcha/cosmology/zeldovich_pancake.hpp"

namespace matcha::cosmology {
namespace {

constexpr double kPi = std::numbers::pi;
constexpr double kInfinity = std::numeric_limits<double>::infinity();

/// The issue's pancake: 64 Mpc/h, z = 100 to the caustic at z = 1, 32^3 bodies.
ZeldovichPancakeParams issuePancake() { return ZeldovichPancakeParams{}; }

/// x(q) - x(q') the shorter way round the box.
double periodicDifference(double x, double y, double box) {
  const double d = x - y;
  return d - box * std::round(d / box);
}

TEST(ZeldovichPancake, InitialConditionsAreTheSolutionAtTheStartBitForBit) {
  const ZeldovichPancakeParams params = issuePancake();
  const Particles bodies = makeZeldovichPancake(params);
  const int n = params.grid;
  ASSERT_EQ(bodies.size(), static_cast<std::size_t>(n) * n * n);
  const double spacing = params.boxSize / n;
  const double mass = kCriticalDensity * spacing * spacing * spacing;  // Omega_m = 1
  for (int px = 0; px < n; ++px) {
    const PancakeState exact = pancakeSolution(params, px * spacing, params.startScaleFactor());
    for (int py = 0; py < n; ++py) {
      for (int pz = 0; pz < n; ++pz) {
        const std::size_t b = (static_cast<std::size_t>(px) * n + py) * n + pz;
        ASSERT_EQ(bodies.id[b], b);
        ASSERT_EQ(bodies.x[b], exact.x);
        ASSERT_EQ(bodies.vx[b], exact.u);
        ASSERT_EQ(bodies.y[b], py * spacing);
        ASSERT_EQ(bodies.z[b], pz * spacing);
        ASSERT_EQ(bodies.vy[b], 0.0);
        ASSERT_EQ(bodies.vz[b], 0.0);
        ASSERT_DOUBLE_EQ(bodies.mass[b], mass);
        ASSERT_TRUE(bodies.x[b] >= 0 && bodies.x[b] < params.boxSize) << bodies.x[b];
      }
    }
  }
}

TEST(ZeldovichPancake, SolutionIsTheClosedForm) {
  // x = q - (a / a_c) sin(k q) / k, u = -100 (1 + z_c) sin(k q) / k, written out here.
  const ZeldovichPancakeParams params = issuePancake();
  const double k = 2 * kPi / 64.0;
  for (const double a : {1.0 / 101, 1.0 / 3, 0.4, 0.5}) {
    for (const double q : {0.0, 3.0, 16.0, 31.9, 48.0, 63.5}) {
      const PancakeState state = pancakeSolution(params, q, a);
      const double x = q - (a / 0.5) * std::sin(k * q) / k;
      EXPECT_NEAR(periodicDifference(state.x, x, 64.0), 0.0, 1e-12) << a << " " << q;
      EXPECT_TRUE(state.x >= 0 && state.x < 64.0) << state.x;
      EXPECT_NEAR(state.u, -200.0 * std::sin(k * q) / k, 1e-10) << a << " " << q;
    }
  }
}

TEST(ZeldovichPancake, IsOneCosineModeOfTheCosmologicalInitialConditions) {
  // Zel'dovich with delta_0 = A cos(k q) gives Psi = -D1(a) A sin(k q) / k (laplacian phi = delta_0, Psi = -D1 grad
  // phi, D1 = a and D1(1) = 1 in Einstein-de Sitter): A = 1 / a_c is the pancake. Another code path (FFTs, Background's
  // growth) to the same bodies.
  const ZeldovichPancakeParams pancake = issuePancake();
  CosmologicalIcParams cosmo;
  cosmo.grid = pancake.grid;
  cosmo.boxSize = pancake.boxSize;
  cosmo.startRedshift = pancake.startRedshift;
  cosmo.lptOrder = 1;
  cosmo.cosmology.omegaMatter = 1.0;
  cosmo.cosmology.omegaLambda = 0.0;
  const auto n = static_cast<std::size_t>(cosmo.grid);
  DensityModes modes{cosmo.grid, cosmo.boxSize, std::vector<std::complex<double>>(n * n * (n / 2 + 1))};
  const double amplitude = 1.0 / pancake.causticScaleFactor();
  for (const std::size_t mx : {std::size_t{1}, n - 1}) modes.values[mx * n * (n / 2 + 1)] = amplitude / 2;  // m, -m
  const CosmologicalIcs ics = makeCosmologicalIcs(cosmo, modes);
  const Particles bodies = makeZeldovichPancake(pancake);
  const double peak = pancakePeakVelocity(pancake);
  for (std::size_t b = 0; b < bodies.size(); ++b) {
    ASSERT_EQ(ics.particles.id[b], bodies.id[b]);
    ASSERT_NEAR(periodicDifference(ics.particles.x[b], bodies.x[b], 64.0), 0.0, 1e-12);
    ASSERT_NEAR(periodicDifference(ics.particles.y[b], bodies.y[b], 64.0), 0.0, 1e-12);
    ASSERT_NEAR(ics.particles.vx[b], bodies.vx[b], 1e-10 * peak);
    ASSERT_NEAR(ics.particles.vy[b], 0.0, 1e-10 * peak);
    ASSERT_DOUBLE_EQ(ics.particles.mass[b], bodies.mass[b]);
  }
}

TEST(ZeldovichPancake, StoredVelocityIsTheCosmicTimeDerivativeOverRootA) {
  // u = v / sqrt(a), v = a dx/dt: dx/dt by a central difference of x(q, a(t)) in cosmic time t, Einstein-de Sitter
  // t = (2/3) a^(3/2) / H0 (Background's cosmicTime, H0 = 100 km/s per Mpc/h, so t is in (Mpc/h) / (km/s)).
  const ZeldovichPancakeParams params = issuePancake();
  CosmologyParams eds;
  eds.omegaMatter = 1.0;
  eds.omegaLambda = 0.0;
  const Background background(eds, kHubbleKmPerSPerMpcOverH);
  const auto scaleFactorAt = [](double t) { return std::pow(1.5 * kHubbleKmPerSPerMpcOverH * t, 2.0 / 3.0); };
  const double peak = pancakePeakVelocity(params);
  for (const double a : {0.05, 1.0 / 3, 0.4}) {
    const double t = background.cosmicTime(a);
    EXPECT_NEAR(scaleFactorAt(t) / a, 1.0, 1e-12);
    const double dt = 1e-4 * t;
    for (const double q : {5.0, 16.0, 40.0, 60.0}) {
      const double ahead = pancakeSolution(params, q, scaleFactorAt(t + dt)).x;
      const double behind = pancakeSolution(params, q, scaleFactorAt(t - dt)).x;
      const double dxdt = periodicDifference(ahead, behind, params.boxSize) / (2 * dt);
      const double u = a * dxdt / std::sqrt(a);
      EXPECT_NEAR(u, pancakeSolution(params, q, a).u, 1e-7 * peak) << "a " << a << " q " << q;
    }
  }
}

TEST(ZeldovichPancake, CausticFormsAtQZeroAtTheCausticRedshift) {
  // dx/dq = 1 - (a / a_c) cos(k q): 0 at q = 0 at a_c, positive before it and everywhere else.
  const ZeldovichPancakeParams params = issuePancake();
  const double ac = params.causticScaleFactor();
  const auto slope = [&](double q, double a) {
    const double h = 1e-3;
    return periodicDifference(pancakeSolution(params, q + h, a).x, pancakeSolution(params, q - h, a).x, 64.0) / (2 * h);
  };
  EXPECT_NEAR(slope(0.0, ac), 0.0, 1e-6);  // the difference's error is k^2 h^2 / 6 ~ 2e-9
  EXPECT_NEAR(slope(0.0, 0.9 * ac), 0.1, 1e-6);
  for (const double q : {0.5, 8.0, 32.0, 63.5}) EXPECT_GT(slope(q, ac), 1e-4) << q;
  // Bodies either side of q = 0 meet at x = 0 only at the caustic.
  const double left = pancakeSolution(params, -0.01, ac).x;
  const double right = pancakeSolution(params, 0.01, ac).x;
  EXPECT_LT(std::abs(periodicDifference(right, left, 64.0)), 1e-6);
  EXPECT_NO_THROW(pancakeSolution(params, 0.0, ac));
  EXPECT_THROW(pancakeSolution(params, 0.0, 1.001 * ac), InputError);
}

TEST(ZeldovichPancake, PeakVelocityIsTheLargestStoredSpeed) {
  const ZeldovichPancakeParams params = issuePancake();
  const double peak = pancakePeakVelocity(params);
  EXPECT_NEAR(peak, 100.0 * 2.0 * 64.0 / (2 * kPi), 1e-9);  // 100 (1 + z_c) / k = 2037.18 km/s
  const Particles bodies = makeZeldovichPancake(params);
  double largest = 0;
  for (const double u : bodies.vx) largest = std::max(largest, std::abs(u));
  EXPECT_NEAR(largest, peak, 1e-9 * peak);  // n = 32 puts grid planes at q = L/4 and 3L/4
}

TEST(ZeldovichPancake, UnperturbedIsThePlainGridAtRest) {
  ZeldovichPancakeParams params;
  params.unperturbed = true;
  params.grid = 8;
  params.startRedshift = 49;
  params.causticRedshift = std::nan("");  // not used
  const Particles bodies = makeZeldovichPancake(params);
  ASSERT_EQ(bodies.size(), 512u);
  for (std::size_t b = 0; b < bodies.size(); ++b) {
    EXPECT_EQ(bodies.x[b], static_cast<double>(b / 64) * 8.0);
    EXPECT_EQ(bodies.y[b], static_cast<double>((b / 8) % 8) * 8.0);
    EXPECT_EQ(bodies.z[b], static_cast<double>(b % 8) * 8.0);
    EXPECT_EQ(bodies.vx[b], 0.0);
    EXPECT_EQ(bodies.vy[b], 0.0);
    EXPECT_EQ(bodies.vz[b], 0.0);
  }
  EXPECT_EQ(pancakePeakVelocity(params), 0.0);
  EXPECT_EQ(pancakeSolution(params, 70.0, 1.0).x, 6.0);  // any a, q wrapped
}

TEST(PancakeComparison, TheInitialConditionsInAnyOrderHaveNoError) {
  const ZeldovichPancakeParams params = issuePancake();
  Particles bodies = makeZeldovichPancake(params);
  std::vector<std::uint32_t> order(bodies.size());
  for (std::uint32_t b = 0; b < order.size(); ++b) order[b] = b;
  std::mt19937 random(7);
  std::shuffle(order.begin(), order.end(), random);
  bodies.permute(order);
  const PancakeErrors errors = comparePancake(bodies, params.startScaleFactor(), params);
  EXPECT_FALSE(errors.unperturbed);
  EXPECT_EQ(errors.numBodies, 32768u);
  EXPECT_NEAR(errors.growthRatio, 2.0 / 101, 1e-15);
  EXPECT_EQ(errors.positionScale, 64.0);
  EXPECT_EQ(errors.spacing, 2.0);
  EXPECT_EQ(errors.velocityScale, pancakePeakVelocity(params));
  EXPECT_EQ(errors.position.max, 0.0);
  EXPECT_EQ(errors.velocity.max, 0.0);
  EXPECT_EQ(errors.transverse.max, 0.0);
  EXPECT_EQ(errors.transverseVelocity, 0.0);
}

TEST(PancakeComparison, MeasuresThePerturbationPutIntoACopy) {
  const ZeldovichPancakeParams params = issuePancake();
  const double a = 0.4;  // z = 1.5
  Particles bodies = makeZeldovichPancake(params);
  for (std::size_t b = 0; b < bodies.size(); ++b) bodies.x[b] = pancakeSolution(params, (b / 1024) * 2.0, a).x;
  const double peak = pancakePeakVelocity(params);
  // Every body: u_x off by 0.5% of the peak. 2% of them (every 50th): x off by 0.3% of L. One: 1% of L, across the
  // box's edge (x = 0 moved to just below L, compared the short way round), y off by 0.3 spacings, u_z of 10 km/s.
  for (std::size_t b = 0; b < bodies.size(); ++b) {
    bodies.vx[b] += 0.005 * peak;
    if (b % 50 == 1) bodies.x[b] = wrapIntoBox(bodies.x[b] + 0.003 * 64.0, 64.0);
  }
  ASSERT_EQ(bodies.x[0], 0.0);
  bodies.x[0] = 64.0 - 0.01 * 64.0;
  bodies.y[0] += 0.3 * 2.0;
  bodies.vz[0] = 10.0;
  const PancakeErrors errors = comparePancake(bodies, a, params);
  EXPECT_NEAR(errors.growthRatio, 0.8, 1e-15);
  EXPECT_NEAR(errors.position.max, 0.01, 1e-12);
  EXPECT_NEAR(errors.position.percentile99, 0.003, 1e-12);
  EXPECT_NEAR(errors.velocity.max, 0.005, 1e-12);
  EXPECT_NEAR(errors.velocity.percentile99, 0.005, 1e-12);
  EXPECT_NEAR(errors.transverse.max, 0.3, 1e-12);
  EXPECT_EQ(errors.transverse.percentile99, 0.0);
  EXPECT_NEAR(errors.transverseVelocity, 10.0 / peak, 1e-15);
}

TEST(PancakeComparison, InitialConditionsLagTheSolutionAtALaterTimeByTheGrowth) {
  // At a = 0.4 the wave's amplitude is a / a_c = 0.8 of the caustic's, the ICs' 2/101 of it: they miss by
  // (0.8 - 2/101) / k on the planes q = L/4 and 3L/4, (0.8 - 2/101) / (2 pi) of L. u does not change in Einstein-de
  // Sitter: no velocity error.
  const ZeldovichPancakeParams params = issuePancake();
  const PancakeErrors errors = comparePancake(makeZeldovichPancake(params), 0.4, params);
  EXPECT_NEAR(errors.position.max, (0.8 - 2.0 / 101) / (2 * kPi), 1e-12);
  EXPECT_EQ(errors.velocity.max, 0.0);
}

TEST(PancakeComparison, UnperturbedErrorsAreInGridSpacingsAndKmPerS) {
  ZeldovichPancakeParams params;
  params.unperturbed = true;
  params.grid = 16;
  params.boxSize = 32;
  Particles bodies = makeZeldovichPancake(params);
  bodies.x[5] += 2e-4 * 2.0;
  bodies.z[7] = wrapIntoBox(bodies.z[7] - 3e-4 * 2.0, 32.0);
  bodies.vx[9] = -0.25;
  bodies.vy[11] = 0.5;
  const PancakeErrors errors = comparePancake(bodies, 1.0, params);
  EXPECT_TRUE(errors.unperturbed);
  EXPECT_EQ(errors.positionScale, 2.0);
  EXPECT_EQ(errors.velocityScale, 1.0);
  EXPECT_EQ(errors.growthRatio, 0.0);
  EXPECT_NEAR(errors.position.max, 2e-4, 1e-12);
  EXPECT_NEAR(errors.transverse.max, 3e-4, 1e-12);
  EXPECT_EQ(errors.velocity.max, 0.25);
  EXPECT_EQ(errors.transverseVelocity, 0.5);
}

/// Runs `call` and expects an InputError of one line containing `part`.
template <typename Call>
void expectRefused(Call call, const std::string& part) {
  try {
    call();
    ADD_FAILURE() << "accepted: " << part;
  } catch (const InputError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find(part), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

TEST(ZeldovichPancake, BadParametersAreRefusedWithOneLine) {
  const auto refused = [](auto change, const std::string& part) {
    ZeldovichPancakeParams params;
    change(params);
    expectRefused([&] { params.validate(); }, part);
    expectRefused([&] { makeZeldovichPancake(params); }, part);
  };
  for (const double box : {0.0, -1.0, std::nan(""), kInfinity}) {
    refused([box](ZeldovichPancakeParams& p) { p.boxSize = box; }, "--box must be a finite number > 0");
  }
  for (const int grid : {1, 0, -4, 1025}) {
    refused([grid](ZeldovichPancakeParams& p) { p.grid = grid; }, "--grid must be 2 to 1024 bodies per side");
  }
  for (const double z : {-1.0, -2.0, std::nan(""), kInfinity}) {
    refused([z](ZeldovichPancakeParams& p) { p.startRedshift = z; }, "--z-start must be a finite number > -1");
    refused([z](ZeldovichPancakeParams& p) { p.causticRedshift = z; }, "--z-caustic must be a finite number > -1");
  }
  refused([](ZeldovichPancakeParams& p) { p.causticRedshift = 100; }, "--z-start must be above --z-caustic");
  refused([](ZeldovichPancakeParams& p) { p.startRedshift = 0.5; }, "(got 0.5 <= 1)");
  refused([](ZeldovichPancakeParams& p) { p.hubbleParam = 0; }, "--h must be a finite number > 0");
  // Unperturbed: z_c plays no part.
  ZeldovichPancakeParams grid;
  grid.unperturbed = true;
  grid.startRedshift = 0.5;
  grid.causticRedshift = std::nan("");
  EXPECT_NO_THROW(grid.validate());
}

TEST(PancakeComparison, BadInputIsRefusedWithOneLine) {
  ZeldovichPancakeParams params;
  params.grid = 4;
  const Particles good = makeZeldovichPancake(params);
  const double a = 0.25;
  Particles bodies = good;
  bodies.resize(63);
  expectRefused([&] { comparePancake(bodies, a, params); }, "63 bodies, but a grid of 4^3 has 64");
  bodies = good;
  bodies.id[3] = 64;
  expectRefused([&] { comparePancake(bodies, a, params); }, "body 3 has id 64, outside the grid's 0 to 63");
  bodies = good;
  bodies.id[3] = 9;
  expectRefused([&] { comparePancake(bodies, a, params); }, "id 9 appears twice");
  bodies = good;
  bodies.vy[2] = std::nan("");
  expectRefused([&] { comparePancake(bodies, a, params); }, "body 2 (id 2) has a position or velocity that is not");
  expectRefused([&] { comparePancake(good, 0.51, params); }, "past the caustic's 0.5 (--z-caustic 1)");
  for (const double bad : {0.0, -0.5, std::nan("")}) {
    expectRefused([&] { comparePancake(good, bad, params); }, "the scale factor must be a finite number > 0");
  }
  EXPECT_NO_THROW(comparePancake(good, 0.5, params));  // at the caustic itself
  // The comparison does not need a start redshift (a snapshot's measurement knows none).
  params.startRedshift = std::nan("");
  EXPECT_NO_THROW(comparePancake(good, 0.5, params));
}

}  // namespace
}  // namespace matcha::cosmology
