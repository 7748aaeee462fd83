// SPDX-License-Identifier: MIT
// Cosmological initial conditions (cosmology/initial_conditions.hpp): analytic Zel'dovich plane waves and the
// analytic second-order displacement of two crossed waves in Einstein-de Sitter, through the same code path as the
// random field; the measured P(k) of the bodies against the input spectrum times (D1/D1(1))^2 (cosmic variance for a
// Gaussian field, much less for --fixed-amplitude); reproducibility over thread counts, seeds and inverted phases;
// GADGET units; bad input.
#include <gtest/gtest.h>
#include <tbb/global_control.h>

#include <cmath>
#include <complex>
#include <cstdint>
#include <numbers>
#include <string>
#include <vector>

#include "matcha/core/errors.hpp"
#include "matcha/cosmology/initial_conditions.hpp"
#include "matcha/cosmology/linear_power.hpp"
#include "matcha/cosmology/power_spectrum.hpp"

namespace matcha::cosmology {
namespace {

constexpr double kPi = std::numbers::pi;

CosmologicalIcParams einsteinDeSitter(int grid, double box, double redshift, int lpt) {
  CosmologicalIcParams params;
  params.grid = grid;
  params.boxSize = box;
  params.startRedshift = redshift;
  params.lptOrder = lpt;
  params.cosmology.omegaMatter = 1.0;
  params.cosmology.omegaLambda = 0.0;
  return params;
}

DensityModes emptyModes(const CosmologicalIcParams& params) {
  const auto n = static_cast<std::size_t>(params.grid);
  return {params.grid, params.boxSize, std::vector<std::complex<double>>(n * n * (n / 2 + 1))};
}

std::size_t modeIndex(int n, int mx, int my, int mz) {
  return (static_cast<std::size_t>(mx) * n + static_cast<std::size_t>(my)) * (n / 2 + 1) + static_cast<std::size_t>(mz);
}

/// Adds delta(q) = amplitude cos(2 pi m q_axis / L) to the modes: amplitude / 2 on m and on -m (where stored).
void addCosine(DensityModes& modes, int axis, int m, double amplitude) {
  const int n = modes.grid;
  if (axis == 2) {
    modes.values[modeIndex(n, 0, 0, m)] += amplitude / 2;  // -m is the conjugate FFTW leaves implicit
    return;
  }
  for (const int signedM : {m, n - m}) {
    const int mx = axis == 0 ? signedM : 0;
    const int my = axis == 1 ? signedM : 0;
    modes.values[modeIndex(n, mx, my, 0)] += amplitude / 2;
  }
}

/// x - q folded into [-L/2, L/2): the displacement of body (px, py, pz) along `axis`.
double displacement(const Particles& bodies, int axis, int px, int py, int pz, int n, double box) {
  const std::size_t body = (static_cast<std::size_t>(px) * n + py) * n + pz;
  const int cell[3] = {px, py, pz};
  const double x = axis == 0 ? bodies.x[body] : (axis == 1 ? bodies.y[body] : bodies.z[body]);
  double d = x - cell[axis] * box / n;
  d -= box * std::floor(d / box + 0.5);
  return d;
}

double velocity(const Particles& bodies, int axis, std::size_t body) {
  return axis == 0 ? bodies.vx[body] : (axis == 1 ? bodies.vy[body] : bodies.vz[body]);
}

/// H(a) in km/s per Mpc/h for Einstein-de Sitter, written out here: 100 a^(-3/2).
double hubbleEds(double a) { return 100.0 * std::pow(a, -1.5); }

class ZeldovichPlaneWave : public ::testing::TestWithParam<int> {};

TEST_P(ZeldovichPlaneWave, ReproducesTheAnalyticDisplacementAndVelocity) {
  // delta_0 = -A k^2 cos(k q) is phi1 = A cos(k q): Psi = -D1 grad phi1 = D1 A k sin(k q) along the wave, nothing
  // across it; in EdS D1 = a and D1(1) = 1, f1 = 1.
  const int axis = GetParam();
  const int n = 16;
  const double box = 100.0;
  const int m = 3;
  const double a = 0.25;
  const CosmologicalIcParams params = einsteinDeSitter(n, box, 1.0 / a - 1.0, 1);
  const double k = 2 * kPi * m / box;
  const double potential = 20.0;  // A, (Mpc/h)^2: A k D1 = 0.94 Mpc/h, a sixth of a cell
  DensityModes modes = emptyModes(params);
  addCosine(modes, axis, m, -potential * k * k);
  const CosmologicalIcs ics = makeCosmologicalIcs(params, modes);
  EXPECT_NEAR(ics.growth.growthRatio, a, 1e-12);
  EXPECT_NEAR(ics.growth.growthRate, 1.0, 1e-12);
  const double amplitudeU = a * hubbleEds(a) / std::sqrt(a);  // u = a H f1 Psi / sqrt(a)
  double largest = 0;
  for (int px = 0; px < n; ++px) {
    for (int py = 0; py < n; ++py) {
      for (int pz = 0; pz < n; ++pz) {
        const int cell[3] = {px, py, pz};
        const double q = cell[axis] * box / n;
        const double expected = a * potential * k * std::sin(k * q);
        const std::size_t body = (static_cast<std::size_t>(px) * n + py) * n + pz;
        for (int c = 0; c < 3; ++c) {
          const double want = c == axis ? expected : 0.0;
          ASSERT_NEAR(displacement(ics.particles, c, px, py, pz, n, box), want, 1e-12) << px << py << pz << c;
          ASSERT_NEAR(velocity(ics.particles, c, body), amplitudeU * want, 1e-9);
        }
        largest = std::max(largest, std::abs(expected));
      }
    }
  }
  EXPECT_GT(largest, 0.9);
}

INSTANTIATE_TEST_SUITE_P(EachAxis, ZeldovichPlaneWave, ::testing::Values(0, 1, 2));

TEST(SecondOrderLpt, CrossedWavesGiveTheAnalyticSecondOrderDisplacement) {
  // phi1 = A cos(k1 x) + B cos(k2 z): delta_0 = -A k1^2 cos(k1 x) - B k2^2 cos(k2 z). The source
  // sum_{i<j} (phi,ii phi,jj - phi,ij^2) = phi,xx phi,zz = A B k1^2 k2^2 cos(k1 x) cos(k2 z), so
  // phi2 = -A B k1^2 k2^2 cos(k1 x) cos(k2 z) / (k1^2 + k2^2) and Psi2 = D2 grad phi2 with D2 = -3/7 a^2 in EdS.
  const int n = 16;
  const double box = 64.0;
  const double a = 0.5;
  const CosmologicalIcParams params = einsteinDeSitter(n, box, 1.0 / a - 1.0, 2);
  const double k1 = 2 * kPi * 2 / box;
  const double k2 = 2 * kPi * 3 / box;
  const double potentialA = 40.0;  // (Mpc/h)^2: D1 A k1 = 3.9 Mpc/h
  const double potentialB = -25.0;
  DensityModes modes = emptyModes(params);
  addCosine(modes, 0, 2, -potentialA * k1 * k1);
  addCosine(modes, 2, 3, -potentialB * k2 * k2);
  const CosmologicalIcs ics = makeCosmologicalIcs(params, modes);

  const double d1 = a;
  const double d2 = -3.0 / 7.0 * a * a;
  EXPECT_NEAR(ics.growth.growthFactor, d1, 1e-12);
  EXPECT_NEAR(ics.growth.secondOrder / d2, 1.0, 1e-9);
  EXPECT_NEAR(ics.growth.secondOrderRate, 2.0, 1e-8);
  const double velocityScale = a * hubbleEds(a) / std::sqrt(a);
  const double coupling = potentialA * potentialB * k1 * k1 * k2 * k2 / (k1 * k1 + k2 * k2);
  double largestSecond = 0;
  for (int px = 0; px < n; ++px) {
    for (int py = 0; py < n; ++py) {
      for (int pz = 0; pz < n; ++pz) {
        const double qx = px * box / n;
        const double qz = pz * box / n;
        const double first[3] = {d1 * potentialA * k1 * std::sin(k1 * qx), 0.0,
                                 d1 * potentialB * k2 * std::sin(k2 * qz)};
        const double second[3] = {d2 * coupling * k1 * std::sin(k1 * qx) * std::cos(k2 * qz), 0.0,
                                  d2 * coupling * k2 * std::cos(k1 * qx) * std::sin(k2 * qz)};
        const std::size_t body = (static_cast<std::size_t>(px) * n + py) * n + pz;
        for (int c = 0; c < 3; ++c) {
          ASSERT_NEAR(displacement(ics.particles, c, px, py, pz, n, box), first[c] + second[c], 1e-11)
              << px << " " << py << " " << pz << " axis " << c;
          // v = a H (f1 Psi1 + f2 Psi2), f1 = 1 and f2 = 2 in EdS, stored as v / sqrt(a).
          ASSERT_NEAR(velocity(ics.particles, c, body), velocityScale * (first[c] + 2.0 * second[c]), 1e-8);
        }
        largestSecond = std::max(largestSecond, std::abs(second[0]));
      }
    }
  }
  EXPECT_GT(largestSecond, 0.3) << "the second-order term must be large enough to test";
  // The Zel'dovich run of the same modes differs by exactly the second-order term: its sign is tested above.
}

TEST(SecondOrderLpt, SecondOrderGrowthInLcdmIsNearMinusThreeSeventhsD1Squared) {
  CosmologicalIcParams params;  // Planck-like defaults
  params.grid = 8;
  params.startRedshift = 0.0 + 1.0;
  const CosmologicalIcs ics = makeCosmologicalIcs(params, emptyModes(params));
  const double d1 = ics.growth.growthFactor;
  // Omega_m(a)^(-1/143) at z = 1 is within 0.5% of 1 (background.hpp).
  EXPECT_NEAR(ics.growth.secondOrder / (-3.0 / 7.0 * d1 * d1), 1.0, 5e-3);
  EXPECT_LT(ics.growth.secondOrder, 0.0);
  // No modes: the bodies sit on the grid, at rest.
  for (std::size_t b = 0; b < ics.particles.size(); ++b) ASSERT_EQ(ics.particles.vx[b], 0.0);
}

std::function<double(double)> powerOf(const LinearPowerSpectrum& spectrum) {
  return [&spectrum](double k) { return spectrum.power(k); };
}

/// The measured P(k) of 64^3 bodies against the mean of the input P(|k|) (D1/D1(1))^2 over each bin's modes,
/// counted here. Returns the per-bin ratios and their mode counts, for k <= 8 k_F.
struct BinRatio {
  double ratio;
  double modes;
};
std::vector<BinRatio> measuredOverExpected(const CosmologicalIcParams& params, const LinearPowerSpectrum& spectrum) {
  const CosmologicalIcs ics = makeCosmologicalIcs(params, powerOf(spectrum));
  PowerSpectrumParams measure;
  measure.boxSize = params.boxSize;
  // A mesh four times finer than the bodies' grid: the displaced lattice's density is then the point density, whose
  // modes below the bodies' Nyquist are exactly -i k.Psi_k to first order; the window's aliases are ~1e-3.
  measure.grid = 4 * params.grid;
  const PowerSpectrum measured = measurePowerSpectrum(ics.particles.sources(), measure);
  const double fundamental = 2 * kPi / params.boxSize;
  const double growth2 = ics.growth.growthRatio * ics.growth.growthRatio;
  std::vector<BinRatio> ratios;
  for (const PowerBin& bin : measured.bins) {
    if (bin.kHigh > 8.5 * fundamental) break;
    double sum = 0;
    double count = 0;
    for (int mx = -9; mx <= 9; ++mx) {
      for (int my = -9; my <= 9; ++my) {
        for (int mz = -9; mz <= 9; ++mz) {
          const double k = fundamental * std::sqrt(double(mx * mx + my * my + mz * mz));
          if (k < bin.kLow || k >= bin.kHigh || k == 0) continue;
          sum += spectrum.power(k) * growth2;
          count += 1;
        }
      }
    }
    EXPECT_EQ(bin.numModes * 2, static_cast<std::uint64_t>(count)) << "k = " << bin.k;
    ratios.push_back({bin.power / (sum / count), count / 2});
  }
  return ratios;
}

TEST(CosmologicalIcs, MeasuredPowerMatchesTheInputWithinCosmicVariance) {
  CosmologicalIcParams params;
  params.grid = 64;
  params.boxSize = 500.0;
  params.startRedshift = 49.0;
  params.lptOrder = 1;
  params.seed = 20;
  const LinearPowerSpectrum spectrum = LinearPowerSpectrum::eisensteinHu({});
  const std::vector<BinRatio> ratios = measuredOverExpected(params, spectrum);
  ASSERT_GE(ratios.size(), 7u);
  double chi2 = 0;
  double weighted = 0;
  double modes = 0;
  for (const BinRatio& r : ratios) {
    const double sigma = 1.0 / std::sqrt(r.modes);  // a bin of N modes of a Gaussian field
    EXPECT_LT(std::abs(r.ratio - 1.0), 4.5 * sigma + 0.01) << r.modes << " modes";
    chi2 += (r.ratio - 1) * (r.ratio - 1) / (sigma * sigma);
    weighted += r.ratio * r.modes;
    modes += r.modes;
  }
  // Across all bins: the mean ratio within 4 sigma of 1, and chi^2 per bin not absurd either way.
  EXPECT_NEAR(weighted / modes, 1.0, 4.0 / std::sqrt(modes));
  EXPECT_LT(chi2 / static_cast<double>(ratios.size()), 3.0);
  EXPECT_GT(chi2 / static_cast<double>(ratios.size()), 0.1) << "a Gaussian field scatters";
}

TEST(CosmologicalIcs, FixedAmplitudeRemovesTheScatter) {
  CosmologicalIcParams params;
  params.grid = 64;
  params.boxSize = 500.0;
  params.startRedshift = 49.0;
  params.lptOrder = 1;
  params.seed = 20;
  params.fixedAmplitude = true;
  const LinearPowerSpectrum spectrum = LinearPowerSpectrum::eisensteinHu({});
  for (const BinRatio& r : measuredOverExpected(params, spectrum)) {
    EXPECT_NEAR(r.ratio, 1.0, 3e-3) << r.modes << " modes";
  }
}

TEST(CosmologicalIcs, SameSeedSameBitsAtOneAndAllThreads) {
  CosmologicalIcParams params;
  params.grid = 32;
  params.seed = 7;
  const LinearPowerSpectrum spectrum = LinearPowerSpectrum::eisensteinHu({});
  const CosmologicalIcs all = makeCosmologicalIcs(params, powerOf(spectrum));
  CosmologicalIcs one;
  {
    tbb::global_control control(tbb::global_control::max_allowed_parallelism, 1);
    one = makeCosmologicalIcs(params, powerOf(spectrum));
  }
  EXPECT_EQ(all.particles.x, one.particles.x);
  EXPECT_EQ(all.particles.y, one.particles.y);
  EXPECT_EQ(all.particles.z, one.particles.z);
  EXPECT_EQ(all.particles.vx, one.particles.vx);
  EXPECT_EQ(all.particles.vy, one.particles.vy);
  EXPECT_EQ(all.particles.vz, one.particles.vz);

  params.seed = 8;
  const CosmologicalIcs other = makeCosmologicalIcs(params, powerOf(spectrum));
  std::size_t same = 0;
  for (std::size_t b = 0; b < other.particles.size(); ++b) same += other.particles.x[b] == all.particles.x[b];
  EXPECT_LT(same, other.particles.size() / 100) << "another seed, another field";
}

TEST(CosmologicalIcs, MeanDisplacementAndVelocityVanish) {
  CosmologicalIcParams params;
  params.grid = 32;
  params.seed = 3;
  params.startRedshift = 9.0;
  const LinearPowerSpectrum spectrum = LinearPowerSpectrum::eisensteinHu({});
  const CosmologicalIcs ics = makeCosmologicalIcs(params, powerOf(spectrum));
  const int n = params.grid;
  for (int c = 0; c < 3; ++c) {
    double sum = 0;
    double sumSquares = 0;
    double velocitySum = 0;
    double velocitySquares = 0;
    for (int px = 0; px < n; ++px) {
      for (int py = 0; py < n; ++py) {
        for (int pz = 0; pz < n; ++pz) {
          const double d = displacement(ics.particles, c, px, py, pz, n, params.boxSize);
          sum += d;
          sumSquares += d * d;
          const double v = velocity(ics.particles, c, (static_cast<std::size_t>(px) * n + py) * n + pz);
          velocitySum += v;
          velocitySquares += v * v;
        }
      }
    }
    const double count = static_cast<double>(ics.particles.size());
    const double rms = std::sqrt(sumSquares / count);
    EXPECT_GT(rms, 0.1) << "displacements of a fraction of a cell at z = 9";
    EXPECT_LT(std::abs(sum / count), 1e-12 * params.boxSize);
    EXPECT_LT(std::abs(velocitySum / count), 1e-12 * std::sqrt(velocitySquares / count));
  }
}

TEST(CosmologicalIcs, InvertedPhasesNegateTheFirstOrderAndKeepTheSecond) {
  CosmologicalIcParams params;
  params.grid = 16;
  params.boxSize = 50.0;
  params.startRedshift = 4.0;  // late enough for a visible second order
  params.seed = 11;
  const LinearPowerSpectrum spectrum = LinearPowerSpectrum::eisensteinHu({});
  const DensityModes plain = gaussianDensityModes(params, powerOf(spectrum));
  CosmologicalIcParams inverted = params;
  inverted.invertPhases = true;
  const DensityModes flipped = gaussianDensityModes(inverted, powerOf(spectrum));
  for (std::size_t i = 0; i < plain.values.size(); ++i) ASSERT_EQ(flipped.values[i], -plain.values[i]);

  // Velocities: u = c1 Psi1 + c2 Psi2, so (u+ - u-) / 2 is the first order and (u+ + u-) / 2 the second, which must
  // equal the 2LPT run minus the Zel'dovich run.
  const CosmologicalIcs up = makeCosmologicalIcs(params, plain);
  const CosmologicalIcs down = makeCosmologicalIcs(params, flipped);
  CosmologicalIcParams zeldovich = params;
  zeldovich.lptOrder = 1;
  const CosmologicalIcs firstOnly = makeCosmologicalIcs(zeldovich, plain);
  const CosmologicalIcs firstOnlyDown = makeCosmologicalIcs(zeldovich, flipped);
  double largestSecond = 0;
  double largestFirst = 0;
  for (std::size_t b = 0; b < up.particles.size(); ++b) {
    ASSERT_EQ(firstOnlyDown.particles.vx[b], -firstOnly.particles.vx[b]);
    const double first = 0.5 * (up.particles.vx[b] - down.particles.vx[b]);
    const double second = 0.5 * (up.particles.vx[b] + down.particles.vx[b]);
    ASSERT_NEAR(first, firstOnly.particles.vx[b], 1e-10 * (1 + std::abs(first)));
    ASSERT_NEAR(second, up.particles.vx[b] - firstOnly.particles.vx[b], 1e-10 * (1 + std::abs(first)));
    largestSecond = std::max(largestSecond, std::abs(second));
    largestFirst = std::max(largestFirst, std::abs(first));
  }
  EXPECT_GT(largestSecond, 1e-3 * largestFirst) << "the second order must be visible";
}

TEST(CosmologicalIcs, ParticleMassIsOmegaMTimesTheCriticalDensityPerCell) {
  CosmologicalIcParams params;
  params.grid = 32;
  params.boxSize = 100.0;
  params.cosmology.omegaMatter = 0.3;
  params.cosmology.omegaLambda = 0.7;
  params.lptOrder = 1;
  const CosmologicalIcs ics = makeCosmologicalIcs(params, emptyModes(params));
  // rho_crit = 3 H0^2 / (8 pi G) with H0 = 100 h km/s/Mpc, in 1e10 Msun/h per (Mpc/h)^3, from SI constants (CODATA
  // 2018 G, IAU 2015 solar mass parameter over G, the parsec): GADGET-4's 27.7536627 to its rounding of G.
  const double gravity = 6.67430e-11;               // m^3 kg^-1 s^-2
  const double solarMass = 1.988409870698051e30;    // kg
  const double megaparsec = 3.0856775814913673e22;  // m
  const double hubble = 100.0 * 1e3 / megaparsec;   // s^-1, per h
  const double rhoCrit =
      3 * hubble * hubble / (8 * kPi * gravity) * megaparsec * megaparsec * megaparsec / (1e10 * solarMass);
  EXPECT_NEAR(rhoCrit / kCriticalDensity, 1.0, 2e-4);
  const double expected = 0.3 * rhoCrit * std::pow(100.0 / 32.0, 3);
  EXPECT_NEAR(ics.growth.particleMass / expected, 1.0, 2e-4);
  for (std::size_t b = 0; b < ics.particles.size(); ++b) ASSERT_EQ(ics.particles.mass[b], ics.growth.particleMass);
  // The total is Omega_m rho_crit L^3.
  EXPECT_NEAR(ics.growth.particleMass * 32 * 32 * 32 / (0.3 * kCriticalDensity * 1e6), 1.0, 1e-12);
  // Ids name the grid points, positions in [0, L).
  EXPECT_EQ(ics.particles.id[33], 33u);
  EXPECT_DOUBLE_EQ(ics.particles.y[33], 100.0 / 32.0);
}

TEST(CosmologicalIcs, BadInputIsRefusedWithOneLine) {
  const auto expectRefused = [](CosmologicalIcParams params, const std::string& part) {
    try {
      params.validate();
      FAIL() << "accepted: " << part;
    } catch (const InputError& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find(part), std::string::npos) << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    }
  };
  CosmologicalIcParams p;
  p.boxSize = 0;
  expectRefused(p, "--box must be");
  p = {};
  p.boxSize = std::nan("");
  expectRefused(p, "--box must be");
  p = {};
  p.grid = 11;
  expectRefused(p, "the next friendly size is 12");
  p = {};
  p.grid = 4;
  expectRefused(p, "--grid must be 8 to 4096");
  p = {};
  p.startRedshift = 0;
  expectRefused(p, "--z-start");
  p = {};
  p.startRedshift = std::nan("");
  expectRefused(p, "--z-start");
  p = {};
  p.lptOrder = 3;
  expectRefused(p, "--lpt must be 1");
  p = {};
  p.cosmology.omegaMatter = 0;
  expectRefused(p, "Omega_m");

  CosmologicalIcParams params;
  params.grid = 16;
  DensityModes wrong = emptyModes(params);
  wrong.grid = 8;
  EXPECT_THROW(makeCosmologicalIcs(params, wrong), InputError);
}

}  // namespace
}  // namespace matcha::cosmology
