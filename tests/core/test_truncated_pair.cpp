// SPDX-License-Identifier: MIT
// The short-range (TreePM) pair of pair_interaction.hpp: the split against a Gaussian cloud integrated numerically,
// the softening, the cut, the zero-distance rules and float against double.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numbers>
#include <random>
#include <string>

#include "matcha/core/pair_interaction.hpp"
#include "matcha/testing/floating_point_traps.hpp"

namespace matcha {
namespace {

using FloatingPointTraps = testing::ScopedFloatingPointTraps;

std::string scientific(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2e", value);
  return text;
}

double norm(double x, double y, double z) { return std::sqrt(x * x + y * y + z * z); }

/// The Gaussian cloud whose potential is erf(r / 2 r_s) / r, rho = (4 pi r_s^2)^(-3/2) exp(-r^2 / 4 r_s^2), integrated
/// numerically (composite Simpson, 4000 intervals per range): the mass within r and the potential at r (per unit mass
/// of the cloud, positive).
struct GaussianCloud {
  double splitRadius;
  double density(double s) const {
    const double norm = std::pow(4.0 * std::numbers::pi * splitRadius * splitRadius, -1.5);
    return norm * std::exp(-s * s / (4.0 * splitRadius * splitRadius));
  }
  template <class F>
  static double simpson(F f, double a, double b) {
    constexpr int kIntervals = 4000;
    const double h = (b - a) / kIntervals;
    double sum = f(a) + f(b);
    for (int k = 1; k < kIntervals; ++k) sum += (k % 2 == 1 ? 4.0 : 2.0) * f(a + k * h);
    return sum * h / 3.0;
  }
  double massWithin(double r) const {
    return simpson([&](double s) { return 4.0 * std::numbers::pi * s * s * density(s); }, 0.0, r);
  }
  double potential(double r) const {  // M(<r) / r + int_r^inf 4 pi s rho(s) ds; the tail beyond 40 r_s is < 1e-300
    return massWithin(r) / r +
           simpson([&](double s) { return 4.0 * std::numbers::pi * s * density(s); }, r, 40.0 * splitRadius);
  }
};

// The split is exact: the truncated pair plus the pull and potential of the Gaussian cloud (computed by quadrature,
// not from erf) give Newton's r / r^3 and 1 / r at every separation.
TEST(TruncatedPair, PlusGaussianCloudIsNewtonian) {
  FloatingPointTraps traps;
  const double rs = 0.037, m = 1.7;
  const GaussianCloud cloud{rs};
  const std::array<double, 3> direction{0.48, -0.6, 0.64};  // unit
  double worstForce = 0, worstPotential = 0;
  for (double x = 0.01; x <= 8.0; x *= 1.25) {
    const double r = x * rs;
    double ax = 0, ay = 0, az = 0, pot = 0;
    accumulateTruncatedPairInteraction<double>(r * direction[0], r * direction[1], r * direction[2], m, 0.0, 0.5 / rs,
                                               1e300, ax, ay, az, pot);
    const double newtonForce = m / (r * r);
    const double radial = (ax * direction[0] + ay * direction[1] + az * direction[2]);
    worstForce =
        std::max(worstForce, std::fabs(radial + m * cloud.massWithin(r) / (r * r) - newtonForce) / newtonForce);
    worstPotential = std::max(worstPotential, std::fabs(-pot + m * cloud.potential(r) - m / r) / (m / r));
    // The pull is radial.
    EXPECT_NEAR(norm(ax, ay, az), std::fabs(radial), 1e-14 * newtonForce);
  }
  EXPECT_LT(worstForce, 1e-10);
  EXPECT_LT(worstPotential, 1e-10);
  RecordProperty("split_force", scientific(worstForce));
  // The quoted factors: f = 1.75e-2, g = 1.46e-3 at 4.5 r_s; f = 1.71e-3 at 5.5 r_s, 4.4e-4 at 6 r_s.
  EXPECT_NEAR(shortRangeFactors(4.5, 0.5).force, 1.753e-2, 1e-5);
  EXPECT_NEAR(shortRangeFactors(4.5, 0.5).potential, 1.463e-3, 1e-6);
  EXPECT_NEAR(shortRangeFactors(5.5, 0.5).force, 1.71e-3, 1e-5);
  EXPECT_NEAR(shortRangeFactors(6.0, 0.5).force, 4.4e-4, 1e-5);
}

// Softening multiplies in as for the open-boundary pair; the cut adds exactly nothing; zero distance follows the
// open-boundary rules (skipped for eps = 0, -m/eps with no pull for eps > 0: selfPairPotential removes it); float
// agrees with double.
TEST(TruncatedPair, SofteningCutAndZeroDistance) {
  FloatingPointTraps traps;
  const double rs = 0.05, cut = 5.5 * rs, m = 0.8, eps = 0.01;
  const double d[3] = {0.03, -0.02, 0.05};
  const double r = norm(d[0], d[1], d[2]);
  double plummer[4] = {0, 0, 0, 0}, truncated[4] = {0, 0, 0, 0};
  accumulatePairInteraction<double>(d[0], d[1], d[2], m, eps * eps, plummer[0], plummer[1], plummer[2], plummer[3]);
  accumulateTruncatedPairInteraction<double>(d[0], d[1], d[2], m, eps * eps, 0.5 / rs, cut * cut, truncated[0],
                                             truncated[1], truncated[2], truncated[3]);
  const ShortRangeFactors<double> f = shortRangeFactors(r, 0.5 / rs);
  for (int c = 0; c < 3; ++c) EXPECT_NEAR(truncated[c], f.force * plummer[c], 1e-14 * std::fabs(plummer[c]));
  EXPECT_NEAR(truncated[3], f.potential * plummer[3], 1e-14 * std::fabs(plummer[3]));

  float fl[4] = {0, 0, 0, 0};
  accumulateTruncatedPairInteraction<float>(0.03f, -0.02f, 0.05f, 0.8f, float(eps * eps), float(0.5 / rs),
                                            float(cut * cut), fl[0], fl[1], fl[2], fl[3]);
  for (int c = 0; c < 4; ++c) EXPECT_NEAR(fl[c], truncated[c], 2e-6 * std::fabs(truncated[c]));

  // Just inside the cut the pair counts; at and beyond it, exactly nothing is added.
  for (const double scale : {0.999, 1.0, 1.001, 3.0}) {
    double out[4] = {1, 2, 3, 4};
    accumulateTruncatedPairInteraction<double>(cut * scale, 0.0, 0.0, m, eps * eps, 0.5 / rs, cut * cut, out[0], out[1],
                                               out[2], out[3]);
    if (scale < 1) {
      EXPECT_GT(out[0], 1.0);
    } else {
      EXPECT_EQ(out[0], 1.0);
      EXPECT_EQ(out[3], 4.0);
    }
  }
  // Zero distance.
  double self[4] = {0, 0, 0, 0};
  accumulateTruncatedPairInteraction<double>(0, 0, 0, m, 0.0, 0.5 / rs, cut * cut, self[0], self[1], self[2], self[3]);
  for (const double v : self) EXPECT_EQ(v, 0.0);
  accumulateTruncatedPairInteraction<double>(0, 0, 0, m, eps * eps, 0.5 / rs, cut * cut, self[0], self[1], self[2],
                                             self[3]);
  EXPECT_EQ(self[0], 0.0);
  EXPECT_DOUBLE_EQ(self[3], selfPairPotential(m, eps * eps));
}

/// A cloud of 24 bodies of radius b around its centre of mass, target at distance d in the directions below.
struct Cloud {
  std::array<std::array<double, 3>, 24> offset;  // from the centre of mass
  std::array<double, 24> mass;
  Quadrupole<double> q{};
  double totalMass = 0;
};

Cloud makeCloud(double b, std::uint64_t seed) {
  std::mt19937_64 engine(seed);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  Cloud cloud;
  double com[3] = {0, 0, 0};
  for (std::size_t k = 0; k < cloud.mass.size(); ++k) {
    double y[3];
    do {
      for (double& c : y) c = uniform(engine);
    } while (norm(y[0], y[1], y[2]) > 1.0);
    cloud.mass[k] = 0.5 + 0.5 * (uniform(engine) + 1.0);
    for (int c = 0; c < 3; ++c) {
      cloud.offset[k][c] = b * y[c];
      com[c] += cloud.mass[k] * b * y[c];
    }
    cloud.totalMass += cloud.mass[k];
  }
  for (std::size_t k = 0; k < cloud.mass.size(); ++k) {
    auto& y = cloud.offset[k];
    for (int c = 0; c < 3; ++c) y[c] -= com[c] / cloud.totalMass;
    const double m = cloud.mass[k], y2 = y[0] * y[0] + y[1] * y[1] + y[2] * y[2];
    cloud.q.xx += m * (3 * y[0] * y[0] - y2);
    cloud.q.yy += m * (3 * y[1] * y[1] - y2);
    cloud.q.zz += m * (3 * y[2] * y[2] - y2);
    cloud.q.xy += m * 3 * y[0] * y[1];
    cloud.q.xz += m * 3 * y[0] * y[2];
    cloud.q.yz += m * 3 * y[1] * y[2];
    cloud.q.trace += m * y2;
  }
  return cloud;
}

// The truncated quadrupole cell is the expansion of the truncated pair to second order: its error against the exact
// sum of the cloud's truncated pairs falls as (b / d)^3 (8x per halving of b), at separations from inside the split
// radius to beyond the cut and with softening, in float as in double up to float rounding. (f times the Newtonian
// quadrupole, the earlier approximation, fell as (b / d)^2 at d ~ r_s..4 r_s.) Errors in units of the cell's Newtonian
// pull M / d^2 (and potential M / d), as the walk's relative test bounds them.
TEST(TruncatedPair, QuadrupoleCellIsThirdOrder) {
  FloatingPointTraps traps;
  const double rs = 0.05;
  for (const double eps : {0.0, 0.004}) {
    for (const double distanceInSplits : {0.3, 1.0, 2.0, 3.0, 4.5, 6.0}) {
      const double d = distanceInSplits * rs;
      const double direction[3] = {0.48, -0.6, 0.64};
      double previousError = 0, previousPotentialError = 0;
      for (const double ratio : {0.2, 0.1, 0.05}) {
        const Cloud cloud = makeCloud(ratio * d, 17);
        double exact[4] = {0, 0, 0, 0}, cell[4] = {0, 0, 0, 0};
        for (std::size_t k = 0; k < cloud.mass.size(); ++k) {
          double y[3];
          for (int c = 0; c < 3; ++c) y[c] = d * direction[c] + cloud.offset[k][c];
          accumulateTruncatedPairInteraction<double>(y[0], y[1], y[2], cloud.mass[k], eps * eps, 0.5 / rs, 1e300,
                                                     exact[0], exact[1], exact[2], exact[3]);
        }
        accumulateTruncatedQuadrupoleInteraction<double>(d * direction[0], d * direction[1], d * direction[2],
                                                         cloud.totalMass, cloud.q, eps * eps, 0.5 / rs, cell[0],
                                                         cell[1], cell[2], cell[3]);
        const double pull = cloud.totalMass / (d * d);
        const double error = norm(cell[0] - exact[0], cell[1] - exact[1], cell[2] - exact[2]) / pull;
        const double potentialError = std::fabs(cell[3] - exact[3]) / (pull * d);
        SCOPED_TRACE("d = " + std::to_string(distanceInSplits) + " r_s, b / d = " + std::to_string(ratio) +
                     ", eps = " + std::to_string(eps));
        // The third-order remainder: (b / d)^3 times a factor of order one.
        EXPECT_LT(error, 2.0 * ratio * ratio * ratio);
        EXPECT_LT(potentialError, 2.0 * ratio * ratio * ratio);
        if (previousError > 0 && error > 1e-12) {
          EXPECT_GT(previousError / error, 5.0);
        }
        if (previousPotentialError > 0 && potentialError > 1e-12) {
          EXPECT_GT(previousPotentialError / potentialError, 5.0);
        }
        previousError = error;
        previousPotentialError = potentialError;
        std::printf("d %.1f r_s eps %.3f b/d %.2f: force %.2e potential %.2e\n", distanceInSplits, eps, ratio, error,
                    potentialError);

        float fl[4] = {0, 0, 0, 0};
        const Quadrupole<float> qf{float(cloud.q.xx), float(cloud.q.yy), float(cloud.q.zz),   float(cloud.q.xy),
                                   float(cloud.q.xz), float(cloud.q.yz), float(cloud.q.trace)};
        accumulateTruncatedQuadrupoleInteraction<float>(float(d * direction[0]), float(d * direction[1]),
                                                        float(d * direction[2]), float(cloud.totalMass), qf,
                                                        float(eps * eps), float(0.5 / rs), fl[0], fl[1], fl[2], fl[3]);
        EXPECT_LT(norm(fl[0] - cell[0], fl[1] - cell[1], fl[2] - cell[2]) / pull, 1e-5);
        EXPECT_LT(std::fabs(fl[3] - cell[3]) / (pull * d), 1e-5);
      }
    }
  }
}

// The polynomial erfc the CUDA kernels use in float (shortRangeFactorsPolynomial), evaluated in float on the host,
// against erfc in double: its documented error. The GPU's __fdividef and __expf add up to ~4e-7 more at the cut
// (the CUDA engine's periodic tests compare it with the CPU engine's).
TEST(TruncatedPair, PolynomialFactorsWithinOneMillionth) {
  constexpr double kTwoOverSqrtPi = 1.1283791670955126;
  double worstForce = 0.0, worstPotential = 0.0, worstX = 0.0;
  for (int k = 0; k <= 30000; ++k) {
    const auto x = static_cast<float>(2.25 * k / 30000.0);  // up to r_cut = 4.5 r_s
    const ShortRangeFactors<float> fast = shortRangeFactorsPolynomial(x, 1.0f);
    const double xd = x;
    const double g = std::erfc(xd);
    const double f = g + kTwoOverSqrtPi * xd * std::exp(-xd * xd);
    const double forceError = std::fabs(fast.force / f - 1.0);
    if (forceError > worstForce) worstX = xd;
    worstForce = std::max(worstForce, forceError);
    worstPotential = std::max(worstPotential, std::fabs(fast.potential / g - 1.0));
  }
  std::printf("polynomial erfc in float, 0 <= x <= 2.25: worst relative error f %.2e (x = %.3f), g %.2e\n", worstForce,
              worstX, worstPotential);
  EXPECT_LT(worstForce, 7e-7);
  EXPECT_LT(worstPotential, 9e-7);
  // A little past the cut (cells are not cut): still small against f itself.
  for (double x = 2.25; x <= 3.0; x += 0.01) {
    const ShortRangeFactors<float> fast = shortRangeFactorsPolynomial(static_cast<float>(x), 1.0f);
    const double g = std::erfc(static_cast<double>(static_cast<float>(x)));
    EXPECT_NEAR(fast.potential / g, 1.0, 2e-6) << "x = " << x;
  }
}

}  // namespace
}  // namespace matcha
