// SPDX-License-Identifier: MIT
// The power-spectrum measurement (cosmology/power_spectrum.hpp) against inputs whose spectrum is known: a plane wave
// made by displacing a lattice (all its power in one bin, L^3 A^2 / 4), a few bodies (their direct Fourier sum),
// Poisson bodies (the shot noise with the window's aliases, Jing 2005, with and without interlacing); mode counts
// against a brute-force count; the same bits at 1, 2 and 4 threads; the growth of each mode between two snapshots
// (measureGrowth) of waves whose amplitudes are known; and bad input.
#include <gtest/gtest.h>
#include <tbb/global_control.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <complex>
#include <cstdint>
#include <limits>
#include <map>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "matcha/core/errors.hpp"
#include "matcha/cosmology/power_spectrum.hpp"
#include "matcha/mesh/mass_mesh.hpp"
#include "matcha/mesh/mesh_kernels.hpp"
#include "matcha/testing/floating_point_traps.hpp"
#include "matcha/testing/generators.hpp"

namespace matcha::cosmology {
namespace {

using FloatingPointTraps = testing::ScopedFloatingPointTraps;
using mesh::MassAssignment;
constexpr double kPi = std::numbers::pi;

struct Bodies {
  std::vector<double> x, y, z, mass;
  SourceView view() const { return {x.data(), y.data(), z.data(), mass.data(), x.size()}; }
  void add(double bx, double by, double bz, double m) {
    x.push_back(bx);
    y.push_back(by);
    z.push_back(bz);
    mass.push_back(m);
  }
};

PowerSpectrumParams paramsFor(int grid, double boxSize, MassAssignment assignment, bool interlace) {
  PowerSpectrumParams params;
  params.grid = grid;
  params.boxSize = boxSize;
  params.assignment = assignment;
  params.interlace = interlace;
  return params;
}

std::string describe(const PowerSpectrumParams& params) {
  return "grid " + std::to_string(params.grid) + ", " + mesh::toString(params.assignment) +
         (params.interlace ? ", interlaced" : "");
}

/// One plane wave of the density contrast, delta = amplitude cos(k.q + phase), k = 2 pi mode / L.
struct Wave {
  std::array<int, 3> mode;
  double amplitude, phase;
};

/// side^3 bodies of mass 1 on the lattice q = (i + 1/2) L / side, moved by the Zel'dovich displacements
/// psi = -(A / k^2) k sin(k.q + phase) of the plane waves delta = A cos(k.q + phase), k = 2 pi mode / L: to first order
/// in A their density contrast is the sum of the waves (second order: harmonics and beats at k1 +- k2).
Bodies zeldovichWaves(int side, double L, const std::vector<Wave>& waves) {
  const double kF = 2 * kPi / L;
  Bodies bodies;
  const double spacing = L / side;
  for (int i = 0; i < side; ++i) {
    for (int j = 0; j < side; ++j) {
      for (int l = 0; l < side; ++l) {
        const double q[3] = {(i + 0.5) * spacing, (j + 0.5) * spacing, (l + 0.5) * spacing};
        double x[3] = {q[0], q[1], q[2]};
        for (const Wave& wave : waves) {
          const double k[3] = {kF * wave.mode[0], kF * wave.mode[1], kF * wave.mode[2]};
          const double k2 = k[0] * k[0] + k[1] * k[1] + k[2] * k[2];
          const double s = std::sin(k[0] * q[0] + k[1] * q[1] + k[2] * q[2] + wave.phase);
          for (int a = 0; a < 3; ++a) x[a] -= wave.amplitude / k2 * k[a] * s;
        }
        bodies.add(x[0], x[1], x[2], 1.0);
      }
    }
  }
  return bodies;
}

/// One plane wave (zeldovichWaves).
Bodies zeldovichPlaneWave(int side, double L, std::array<int, 3> mode, double A, double phase) {
  return zeldovichWaves(side, L, {Wave{mode, A, phase}});
}

/// n bodies uniform in [0, L)^3 with masses uniform in [0.5, 1.5) (a Poisson sample: its spectrum is the shot noise).
Bodies poissonBodies(std::size_t n, double L, std::uint64_t seed) {
  std::mt19937_64 engine(seed);
  auto uniform = [&engine] { return std::generate_canonical<double, 64>(engine); };
  Bodies bodies;
  for (std::size_t i = 0; i < n; ++i) {
    const double bx = L * uniform(), by = L * uniform(), bz = L * uniform();
    bodies.add(bx, by, bz, 0.5 + uniform());
  }
  return bodies;
}

/// The bin whose edges hold |k| (k in inverse length), or null.
const PowerBin* binHolding(const PowerSpectrum& spectrum, double k) {
  for (const PowerBin& bin : spectrum.bins) {
    if (bin.kLow <= k && k < bin.kHigh) return &bin;
  }
  return nullptr;
}

int windowOrder(MassAssignment assignment) { return assignment == MassAssignment::cic ? 2 : 3; }

/// The bin of width k_F, counted from 1, of a mode with |m|^2 = m2 > 0: floor(|m|), in integers; on an even mesh the
/// last bin, [n/2 - 1, n/2], takes |m| = n/2 too.
int shellOf(int m2, int n) {
  int shell = 1;
  while ((shell + 1) * (shell + 1) <= m2) ++shell;
  return n % 2 == 0 ? std::min(shell, n / 2 - 1) : shell;
}

/// The shell of a reported bin of width k_F.
int shellOf(const PowerBin& bin, double fundamental) { return static_cast<int>(std::lround(bin.kLow / fundamental)); }

// ---------------------------------------------------------------------------------------------------------------------
// Known inputs.

// A plane wave delta = A cos(k.x) made by displacing 96^3 bodies puts L^3 A^2 / 4 in its bin (one independent mode,
// k and -k), to 1e-3 after the window is divided out (it lowers the power by 2.5% to 11% at these modes), and nothing
// elsewhere. What remains is the lattice's own alias at k + 2 pi 96 / L, (pi^2 / 3) (|m| / 96)^2 = 3.6e-4 at |m| = 1.
TEST(PowerSpectrum, PlaneWavePutsLCubedASquaredOverFourInItsBin) {
  FloatingPointTraps traps;
  const double L = 2.0, A = 0.005;
  const int grid = 16, side = 96;
  const double expected = L * L * L * A * A / 4;
  for (const std::array<int, 3> mode : {std::array{1, 0, 0}, std::array{0, 1, 1}, std::array{1, 1, 1}}) {
    const Bodies bodies = zeldovichPlaneWave(side, L, mode, A, 0.7);
    const double modeNorm = std::sqrt(double(mode[0] * mode[0] + mode[1] * mode[1] + mode[2] * mode[2]));
    for (const MassAssignment assignment : {MassAssignment::cic, MassAssignment::tsc}) {
      const PowerSpectrumParams params = paramsFor(grid, L, assignment, false);
      SCOPED_TRACE(describe(params) + ", mode |m| = " + std::to_string(modeNorm));
      double window2 = 1;
      for (const int m : mode) window2 *= mesh::windowSquared<double>(m, grid, windowOrder(assignment));
      ASSERT_GT(1 - window2, 0.02);  // the deconvolution matters here 20-fold more than the tolerance

      const PowerSpectrum spectrum = measurePowerSpectrum(bodies.view(), params);
      EXPECT_DOUBLE_EQ(spectrum.fundamental, kPi);
      EXPECT_DOUBLE_EQ(spectrum.nyquist, kPi * grid / L);
      EXPECT_DOUBLE_EQ(spectrum.shotNoise, L * L * L / bodies.x.size());
      const PowerBin* bin = binHolding(spectrum, spectrum.fundamental * modeNorm);
      ASSERT_NE(bin, nullptr);
      EXPECT_DOUBLE_EQ(bin->kLow, spectrum.fundamental);  // the first bin, [k_F, 2 k_F)
      EXPECT_EQ(bin->numModes, 13u);                      // (1,0,0) x 3, (1,1,0) x 6, (1,1,1) x 4
      EXPECT_NEAR(bin->power * static_cast<double>(bin->numModes) / expected, 1.0, 1e-3);
      double elsewhere = 0;
      for (const PowerBin& other : spectrum.bins) {
        if (&other != bin) elsewhere += other.power * static_cast<double>(other.numModes);
      }
      EXPECT_LT(elsewhere, 1e-4 * expected);  // the second harmonic: (A / 2)^2 of it

      // The same bodies in other images of the box measure the same spectrum.
      Bodies moved = bodies;
      for (std::size_t i = 0; i < moved.x.size(); ++i) {
        moved.x[i] += 3 * L;
        moved.y[i] -= L;
      }
      const PowerSpectrum again = measurePowerSpectrum(moved.view(), params);
      ASSERT_EQ(again.bins.size(), spectrum.bins.size());
      EXPECT_NEAR(binHolding(again, bin->k)->power / bin->power, 1.0, 1e-9);
    }
  }
}

// The window divided out, CIC and TSC agree on a displaced lattice at k < k_N / 2, each within 3% of the input (the
// lattice's aliases, +-(pi^2 / 3) (|m| / side)^2: +-0.9% at |m| = 5), though their windows differ there by up to 16%.
// Waves one at a time: two waves at once would feed each other's bins at second order.
TEST(PowerSpectrum, CicAndTscAgreeBelowHalfTheNyquistOnceDeconvolved) {
  FloatingPointTraps traps;
  const double L = 1.0, A = 0.004;
  const int grid = 24, side = 96;  // k_N / 2 = 6 k_F
  for (const std::array<int, 3> mode :
       {std::array{2, 0, 0}, std::array{0, 2, 1}, std::array{3, 0, 0}, std::array{2, 2, 3}, std::array{0, 5, 0}}) {
    const Bodies bodies = zeldovichPlaneWave(side, L, mode, A, 1.9);
    const double modeNorm = std::sqrt(double(mode[0] * mode[0] + mode[1] * mode[1] + mode[2] * mode[2]));
    SCOPED_TRACE("mode |m| = " + std::to_string(modeNorm));
    double measured[2] = {0, 0}, window2[2] = {1, 1};
    for (const MassAssignment assignment : {MassAssignment::cic, MassAssignment::tsc}) {
      const int a = assignment == MassAssignment::cic ? 0 : 1;
      const PowerSpectrum spectrum = measurePowerSpectrum(bodies.view(), paramsFor(grid, L, assignment, false));
      const PowerBin* bin = binHolding(spectrum, spectrum.fundamental * modeNorm);
      ASSERT_NE(bin, nullptr);
      measured[a] = bin->power * static_cast<double>(bin->numModes) / (L * L * L * A * A / 4);
      for (const int m : mode) window2[a] *= mesh::windowSquared<double>(m, grid, windowOrder(assignment));
      EXPECT_NEAR(measured[a], 1.0, 0.03) << mesh::toString(assignment);
    }
    EXPECT_NEAR(measured[0] / measured[1], 1.0, 0.03);
    if (modeNorm >= 5) {
      EXPECT_GT(window2[0] / window2[1] - 1, 0.15);  // what the deconvolution took out
    }
  }
}

/// The spectrum of a few bodies computed without the FFT: their window weights on the mesh (mesh_kernels.hpp's
/// BodyWindow), Fourier summed point by point, the shifted copy combined, divided by the window, each stored mode of
/// the half space weighted by the share of an independent mode it stands for, per bin of width k_F.
std::map<int, double> directSumSpectrum(const Bodies& bodies, const PowerSpectrumParams& params) {
  const int n = params.grid;
  const double L = params.boxSize;
  struct Point {
    std::array<int, 3> p;
    double mass;
  };
  auto deposit = [&](double offset) {
    std::vector<Point> points;
    for (std::size_t i = 0; i < bodies.x.size(); ++i) {
      auto add = [&](const auto& window, int support) {
        for (int a = 0; a < support; ++a) {
          for (int b = 0; b < support; ++b) {
            for (int c = 0; c < support; ++c) {
              points.push_back({{window.index[0][a], window.index[1][b], window.index[2][c]},
                                bodies.mass[i] * window.w[0].w[a] * window.w[1].w[b] * window.w[2].w[c]});
            }
          }
        }
      };
      if (params.assignment == MassAssignment::cic) {
        add(mesh::BodyWindow<2, double>(bodies.x[i], bodies.y[i], bodies.z[i], 1 / L, n, offset), 2);
      } else {
        add(mesh::BodyWindow<3, double>(bodies.x[i], bodies.y[i], bodies.z[i], 1 / L, n, offset), 3);
      }
    }
    return points;
  };
  const std::vector<Point> plain = deposit(0.0), shifted = deposit(0.5);
  auto transform = [n](const std::vector<Point>& points, const std::array<int, 3>& m) {
    std::complex<double> sum = 0;
    for (const Point& point : points) {
      const double phase =
          -2 * kPi * (double(m[0]) * point.p[0] + double(m[1]) * point.p[1] + double(m[2]) * point.p[2]) / n;
      sum += point.mass * std::polar(1.0, phase);
    }
    return sum;
  };
  double totalMass = 0;
  for (const double m : bodies.mass) totalMass += m;
  std::map<int, double> weightedPower, weights;
  for (int ix = 0; ix < n; ++ix) {
    for (int iy = 0; iy < n; ++iy) {
      for (int iz = 0; iz <= n / 2; ++iz) {
        const std::array<int, 3> m = {mesh::signedMode(ix, n), mesh::signedMode(iy, n), iz};
        const int m2 = m[0] * m[0] + m[1] * m[1] + m[2] * m[2];
        if (m2 == 0 || 4 * m2 > n * n) continue;
        // The partner -m is stored too when its z index, (n - iz) mod n, is in the half space: then each is half of the
        // independent mode, unless -m is m itself.
        const int partnerZ = (n - iz) % n;
        const bool partnerStored = 2 * partnerZ <= n;
        const bool selfPartner = (n - ix) % n == ix && (n - iy) % n == iy && partnerZ == iz;
        const double weight = partnerStored && !selfPartner ? 0.5 : 1.0;
        std::complex<double> value = transform(plain, m);
        if (params.interlace) {
          value = 0.5 * (value + transform(shifted, m) * std::polar(1.0, kPi * (m[0] + m[1] + m[2]) / n));
        }
        double window2 = 1;
        for (const int mi : m) window2 *= mesh::windowSquared<double>(mi, n, windowOrder(params.assignment));
        const int shell = shellOf(m2, n);
        weightedPower[shell] += weight * std::norm(value / totalMass) / window2 * L * L * L;
        weights[shell] += weight;
      }
    }
  }
  for (auto& [shell, power] : weightedPower) power /= weights[shell];
  return weightedPower;
}

// Five bodies of different masses anywhere (outside the box too), on an even and an odd mesh: every bin is the direct
// Fourier sum of their window weights, with and without interlacing, to rounding. Checks the transform's layout and
// normalisation, the interlacing's phase and the modes' weights without the FFT.
TEST(PowerSpectrum, AFewBodiesGiveTheirDirectFourierSum) {
  FloatingPointTraps traps;
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  std::mt19937_64 engine(seed);
  auto uniform = [&engine] { return std::generate_canonical<double, 64>(engine); };
  const double L = 1.7;
  Bodies bodies;
  for (int i = 0; i < 5; ++i)
    bodies.add(L * (3 * uniform() - 1), L * (3 * uniform() - 1), L * uniform(), 0.1 + uniform());
  for (const int grid : {12, 15}) {
    for (const MassAssignment assignment : {MassAssignment::cic, MassAssignment::tsc}) {
      for (const bool interlace : {false, true}) {
        const PowerSpectrumParams params = paramsFor(grid, L, assignment, interlace);
        SCOPED_TRACE(describe(params));
        const PowerSpectrum spectrum = measurePowerSpectrum(bodies.view(), params);
        const std::map<int, double> expected = directSumSpectrum(bodies, params);
        ASSERT_EQ(spectrum.bins.size(), expected.size());
        for (const PowerBin& bin : spectrum.bins) {
          const int shell = shellOf(bin, spectrum.fundamental);
          ASSERT_TRUE(expected.count(shell)) << "shell " << shell;
          EXPECT_NEAR(bin.power / expected.at(shell), 1.0, 1e-10) << "shell " << shell;
        }
      }
    }
  }
}

/// Per shell of width k_F, the mean over its modes of the deconvolved noise's aliases, sum_G W^2(k + G) / W^2(k) (Jing
/// 2005), over the images G of even order only when interlaced (the odd ones cancel): per axis A = sum_l W1^2(x + l)
/// and B = sum_l (-1)^l W1^2(x + l), x = m / n, W1 = sinc(pi x)^p; plain prod A, interlaced (prod A + prod B) / 2.
std::map<int, double> aliasedNoise(int n, MassAssignment assignment, bool interlace) {
  const int p = windowOrder(assignment);
  std::vector<double> plainAxis(n), alternatingAxis(n), windowAxis(n);
  for (int i = 0; i < n; ++i) {
    const int m = mesh::signedMode(i, n);
    for (int l = -300; l <= 300; ++l) {
      const double x = double(m) / n + l;
      const double w2 = x == 0 ? 1.0 : std::pow(std::sin(kPi * x) / (kPi * x), 2 * p);
      plainAxis[i] += w2;
      alternatingAxis[i] += l % 2 == 0 ? w2 : -w2;
    }
    windowAxis[i] = mesh::windowSquared<double>(m, n, p);
  }
  std::map<int, double> sum, count;
  for (int ix = 0; ix < n; ++ix) {
    for (int iy = 0; iy < n; ++iy) {
      for (int iz = 0; iz < n; ++iz) {
        const int mx = mesh::signedMode(ix, n), my = mesh::signedMode(iy, n), mz = mesh::signedMode(iz, n);
        const int m2 = mx * mx + my * my + mz * mz;
        if (m2 == 0 || 4 * m2 > n * n) continue;
        const double plain = plainAxis[ix] * plainAxis[iy] * plainAxis[iz];
        const double alternating = alternatingAxis[ix] * alternatingAxis[iy] * alternatingAxis[iz];
        const int shell = shellOf(m2, n);
        sum[shell] +=
            (interlace ? 0.5 * (plain + alternating) : plain) / (windowAxis[ix] * windowAxis[iy] * windowAxis[iz]);
        count[shell] += 1;
      }
    }
  }
  for (auto& [shell, value] : sum) value /= count[shell];
  return sum;
}

// 2^17 Poisson bodies of unequal masses: the shot noise is L^3 sum m^2 / (sum m)^2 (8% above L^3 / N here). P(k) is
// that noise within the scatter of the bin's modes (sigma / P = 1 / sqrt(modes); 6 sigma allowed per bin) below k_N /
// 2, and everywhere that noise times its mean aliases (Jing 2005), which grow towards k_N (4 sigma allowed pooled over
// the outer quarter). Interlacing cancels the odd aliases: the outer quarter's excess falls from 19% (CIC) and 9% (TSC)
// to 0.6% and 0.03% (expected; measured 18.6%, 8.5%, 0.07% and -0.5%, sigma 0.8%).
TEST(PowerSpectrum, PoissonBodiesGiveTheShotNoiseAndItsAliases) {
  FloatingPointTraps traps;
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const double L = 3.0;
  const int grid = 48;
  const Bodies bodies = poissonBodies(std::size_t{1} << 17, L, seed);
  double sum = 0, sumSquares = 0;
  for (const double m : bodies.mass) {
    sum += m;
    sumSquares += m * m;
  }
  const double shotNoise = L * L * L * sumSquares / (sum * sum);
  for (const MassAssignment assignment : {MassAssignment::cic, MassAssignment::tsc}) {
    for (const bool interlace : {false, true}) {
      const PowerSpectrumParams params = paramsFor(grid, L, assignment, interlace);
      SCOPED_TRACE(describe(params));
      const PowerSpectrum spectrum = measurePowerSpectrum(bodies.view(), params);
      const std::map<int, double> aliasesByShell = aliasedNoise(grid, assignment, interlace);
      EXPECT_NEAR(spectrum.shotNoise / shotNoise, 1.0, 1e-12);
      EXPECT_GT(spectrum.shotNoise * static_cast<double>(bodies.x.size()) / (L * L * L), 1.05);
      double outerMeasured = 0, outerExpected = 0, outerFlat = 0;
      std::uint64_t outerModes = 0;
      for (const PowerBin& bin : spectrum.bins) {
        const double modes = static_cast<double>(bin.numModes);
        const double ratio = bin.power / shotNoise;
        const double aliases = aliasesByShell.at(shellOf(bin, spectrum.fundamental));
        EXPECT_NEAR(ratio / aliases, 1.0, 6 / std::sqrt(modes)) << "k = " << bin.k << ", " << bin.numModes << " modes";
        if (bin.kHigh <= spectrum.nyquist / 2) {
          EXPECT_NEAR(ratio, 1.0, 6 / std::sqrt(modes)) << "k = " << bin.k;
        }
        if (bin.kLow >= 0.75 * spectrum.nyquist) {
          outerMeasured += modes * ratio;
          outerExpected += modes * aliases;
          outerFlat += modes;
          outerModes += bin.numModes;
        }
      }
      ASSERT_GT(outerModes, 10000u);
      EXPECT_NEAR(outerMeasured / outerExpected, 1.0, 4 / std::sqrt(static_cast<double>(outerModes)));
      const double expectedExcess = outerExpected / outerFlat - 1, measuredExcess = outerMeasured / outerFlat - 1;
      if (interlace) {
        EXPECT_LT(expectedExcess, 0.01);
        EXPECT_LT(std::abs(measuredExcess), 0.03);
      } else {
        EXPECT_GT(expectedExcess, assignment == MassAssignment::cic ? 0.15 : 0.07);
        EXPECT_GT(measuredExcess, assignment == MassAssignment::cic ? 0.1 : 0.05);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------------
// Modes and bins.

/// The independent modes with 0 < |m| <= n/2, by brute force over the whole cube of modes: a mode and its partner -m
/// (mod n) count once.
struct ModeCount {
  std::uint64_t total = 0;
  std::map<int, std::uint64_t> perShell;  ///< shells [j, j + 1) of |m|, j >= 1, the last closed at n/2
  std::map<int, double> sumNorm;
};
ModeCount countModes(int n) {
  ModeCount count;
  auto key = [n](int ix, int iy, int iz) { return (static_cast<long>(ix) * n + iy) * n + iz; };
  for (int ix = 0; ix < n; ++ix) {
    for (int iy = 0; iy < n; ++iy) {
      for (int iz = 0; iz < n; ++iz) {
        if (key(ix, iy, iz) > key((n - ix) % n, (n - iy) % n, (n - iz) % n)) continue;  // the partner counts this one
        const int mx = ix <= n / 2 ? ix : ix - n, my = iy <= n / 2 ? iy : iy - n, mz = iz <= n / 2 ? iz : iz - n;
        const int m2 = mx * mx + my * my + mz * mz;
        if (m2 == 0 || 4 * m2 > n * n) continue;
        const int shell = shellOf(m2, n);
        ++count.total;
        ++count.perShell[shell];
        count.sumNorm[shell] += std::sqrt(double(m2));
      }
    }
  }
  return count;
}

// The modes of every bin, and their mean |k|, are the brute-force count's, on even and odd meshes; all bins together
// hold every independent mode of the sphere |k| <= k_N, whatever the bins (linear of width 1 or 2.5, logarithmic).
TEST(PowerSpectrum, BinsHoldEveryIndependentModeOfTheSphereOnce) {
  FloatingPointTraps traps;
  Bodies bodies;
  bodies.add(0.1, 0.2, 0.3, 1.0);
  bodies.add(0.7, 0.4, 0.9, 2.0);
  for (const int grid : {8, 15, 16, 24, 27}) {
    SCOPED_TRACE("grid " + std::to_string(grid));
    const ModeCount brute = countModes(grid);
    PowerSpectrumParams params = paramsFor(grid, 1.0, MassAssignment::tsc, false);
    const PowerSpectrum spectrum = measurePowerSpectrum(bodies.view(), params);
    ASSERT_EQ(spectrum.bins.size(), brute.perShell.size());
    std::uint64_t total = 0;
    for (const PowerBin& bin : spectrum.bins) {
      const int shell = shellOf(bin, spectrum.fundamental);
      ASSERT_TRUE(brute.perShell.count(shell)) << "shell " << shell;
      EXPECT_EQ(bin.numModes, brute.perShell.at(shell)) << "shell " << shell;
      EXPECT_NEAR(bin.k / spectrum.fundamental, brute.sumNorm.at(shell) / double(brute.perShell.at(shell)), 1e-12);
      EXPECT_GE(bin.k, bin.kLow);
      EXPECT_LE(bin.k, bin.kHigh);
      total += bin.numModes;
    }
    EXPECT_EQ(total, brute.total);
    EXPECT_DOUBLE_EQ(spectrum.bins.back().kHigh, spectrum.nyquist);
    EXPECT_DOUBLE_EQ(spectrum.bins.front().kLow, spectrum.fundamental);

    for (const bool logarithmic : {false, true}) {
      params.binning = logarithmic ? PowerBinning::logarithmic : PowerBinning::linear;
      params.binWidth = 2.5;
      params.binsPerDecade = 17;
      const PowerSpectrum other = measurePowerSpectrum(bodies.view(), params);
      std::uint64_t otherTotal = 0;
      for (std::size_t b = 0; b < other.bins.size(); ++b) {
        const PowerBin& bin = other.bins[b];
        otherTotal += bin.numModes;
        EXPECT_GT(bin.numModes, 0u);
        if (b > 0) {
          EXPECT_GE(bin.kLow, other.bins[b - 1].kHigh);
        }
        if (logarithmic && b + 1 < other.bins.size()) {
          EXPECT_NEAR(bin.kHigh / bin.kLow, std::pow(10.0, 1.0 / 17), 1e-12);
        }
        if (!logarithmic && b + 1 < other.bins.size()) {
          EXPECT_NEAR((bin.kHigh - bin.kLow) / other.fundamental, 2.5, 1e-12);
        }
      }
      EXPECT_EQ(otherTotal, brute.total) << (logarithmic ? "logarithmic" : "width 2.5");
    }
  }
}

// The same bits at 1, 2 and 4 threads: ordered deposits, FFT plans for a fixed number of jobs, shells summed in fixed
// blocks. 48^3 is a size whose FFTW plans differ with the number of jobs they are made for.
TEST(PowerSpectrum, SameBitsWhateverTheThreads) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const Bodies bodies = poissonBodies(60000, 1.0, seed);
  for (const MassAssignment assignment : {MassAssignment::cic, MassAssignment::tsc}) {
    const PowerSpectrumParams params = paramsFor(48, 1.0, assignment, true);
    SCOPED_TRACE(describe(params));
    std::vector<PowerSpectrum> results;
    for (const int threads : {1, 2, 4}) {
      tbb::global_control control(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(threads));
      results.push_back(measurePowerSpectrum(bodies.view(), params));
    }
    for (std::size_t r = 1; r < results.size(); ++r) {
      ASSERT_EQ(results[r].bins.size(), results[0].bins.size());
      EXPECT_EQ(results[r].shotNoise, results[0].shotNoise);
      std::size_t differing = 0;
      for (std::size_t b = 0; b < results[0].bins.size(); ++b) {
        const PowerBin &one = results[0].bins[b], &other = results[r].bins[b];
        differing += one.power != other.power || one.k != other.k || one.numModes != other.numModes;
      }
      EXPECT_EQ(differing, 0u) << "threads run " << r;
    }
  }
}

TEST(PowerSpectrum, SubtractsTheShotNoiseWhenAsked) {
  const Bodies bodies = poissonBodies(5000, 2.0, 7);
  PowerSpectrumParams params = paramsFor(16, 2.0, MassAssignment::cic, false);
  const PowerSpectrum raw = measurePowerSpectrum(bodies.view(), params);
  params.subtractShotNoise = true;
  const PowerSpectrum subtracted = measurePowerSpectrum(bodies.view(), params);
  EXPECT_FALSE(raw.shotNoiseSubtracted);
  EXPECT_TRUE(subtracted.shotNoiseSubtracted);
  ASSERT_EQ(raw.bins.size(), subtracted.bins.size());
  for (std::size_t b = 0; b < raw.bins.size(); ++b) {
    EXPECT_EQ(subtracted.bins[b].power, raw.bins[b].power - raw.shotNoise);
  }
}

TEST(PowerSpectrum, DefaultGridIsTheFftFriendlySizeAboveTwoCubeRootsOfN) {
  EXPECT_EQ(defaultPowerSpectrumGrid(1), mesh::kMinGrid);
  EXPECT_EQ(defaultPowerSpectrumGrid(1000), 20);                  // 2 x 10
  EXPECT_EQ(defaultPowerSpectrumGrid(std::size_t{1} << 15), 64);  // 2 x 32, exactly
  EXPECT_EQ(defaultPowerSpectrumGrid(32769), 70);  // just above: 65 = 5 x 13, 66 = 2 x 3 x 11 ... 70 = 2 x 5 x 7
  EXPECT_EQ(defaultPowerSpectrumGrid(1331), 24);   // 2 x 11 = 22 is not friendly either
  EXPECT_THROW(defaultPowerSpectrumGrid(std::size_t{1} << 34), InputError);  // 2 x 2^(34/3) > 4096
  // Memory: one grid of 8 n^2 2 (n/2 + 1) bytes (two interlaced), and 4 bytes per body per grid.
  PowerSpectrumParams params = paramsFor(64, 1.0, MassAssignment::tsc, false);
  EXPECT_EQ(powerSpectrumMemoryBytes(params, 1000), 8u * 64 * 64 * 66 + 4000u);
  params.interlace = true;
  EXPECT_EQ(powerSpectrumMemoryBytes(params, 1000), 2 * (8u * 64 * 64 * 66 + 4000u));
}

// ---------------------------------------------------------------------------------------------------------------------
// The growth of each mode between two snapshots (measureGrowth).

/// Waves in three shells of width k_F (|m| = 1, 2, 3 and sqrt 2, sqrt 5), one with two waves, at the given scale.
std::vector<Wave> growthWaves(double scale, double phaseShift) {
  return {Wave{{1, 0, 0}, 1.0e-3 * scale, 0.3 + phaseShift}, Wave{{0, 1, 1}, 0.8e-3 * scale, 1.1 + phaseShift},
          Wave{{0, 2, 0}, 0.6e-3 * scale, 2.0 + phaseShift}, Wave{{1, 0, 2}, 0.4e-3 * scale, 0.5 + phaseShift},
          Wave{{3, 0, 0}, 0.3e-3 * scale, 2.9 + phaseShift}};
}

// The same waves at g times their amplitude grow by g mode by mode: the cross ratio of every bin is g, the auto ratio
// g^2, the correlation 1, to the second order of the displacements (at most 1.7e-3 here); whatever the amplitudes
// within the bin (two waves of different amplitude share a shell), as the growth of each mode. The inverted field
// (every phase + pi) grows by -g; shifted phases decorrelate. The start's power is measurePowerSpectrum's, on the same
// mesh.
TEST(Growth, EachModeGrowsByTheRatioOfItsAmplitudes) {
  FloatingPointTraps traps;
  const double L = 100.0, g = 3.0;
  const int side = 32;
  for (const bool interlace : {false, true}) {
    const PowerSpectrumParams params = paramsFor(32, L, MassAssignment::tsc, interlace);
    SCOPED_TRACE(describe(params));
    const Bodies startBodies = zeldovichWaves(side, L, growthWaves(1.0, 0.0));
    const MeshDensity start(startBodies.view(), params);
    const MeshDensity end(zeldovichWaves(side, L, growthWaves(g, 0.0)).view(), params);
    const GrowthSpectrum growth = measureGrowth(start, end);
    const PowerSpectrum power = measurePowerSpectrum(startBodies.view(), params);
    ASSERT_EQ(growth.bins.size(), power.bins.size());
    EXPECT_DOUBLE_EQ(growth.fundamental, power.fundamental);
    int checked = 0;
    for (std::size_t b = 0; b < growth.bins.size(); ++b) {
      const GrowthBin& bin = growth.bins[b];
      EXPECT_EQ(bin.numModes, power.bins[b].numModes);
      EXPECT_DOUBLE_EQ(bin.k, power.bins[b].k);
      EXPECT_NEAR(bin.startPower, power.bins[b].power, 1e-12 * power.bins[b].power);
      if (bin.kHigh > 4 * growth.fundamental) continue;  // the waves' own shells: |m| < 4
      SCOPED_TRACE("shell from " + std::to_string(bin.kLow / growth.fundamental) + " k_F");
      EXPECT_NEAR(bin.crossRatio(), g, 3e-3 * g);
      EXPECT_NEAR(bin.autoRatio(), g * g, 6e-3 * g * g);
      EXPECT_NEAR(bin.correlation(), 1.0, 1e-4);
      ++checked;
    }
    EXPECT_EQ(checked, 3);
    const GrowthSpectrum inverted =
        measureGrowth(start, MeshDensity(zeldovichWaves(side, L, growthWaves(g, kPi)).view(), params));
    const GrowthSpectrum shifted =
        measureGrowth(start, MeshDensity(zeldovichWaves(side, L, growthWaves(g, 0.5 * kPi)).view(), params));
    for (int b = 0; b < 3; ++b) {
      EXPECT_NEAR(inverted.bins[b].crossRatio(), -g, 3e-3 * g);
      EXPECT_NEAR(inverted.bins[b].autoRatio(), g * g, 6e-3 * g * g);
      EXPECT_LT(std::abs(shifted.bins[b].correlation()), 0.05);  // a quarter period: cos(pi / 2) = 0
    }
  }
}

// Two densities compare only on the same mesh and shells.
TEST(Growth, RefusesDensitiesOfDifferentMeshes) {
  const Bodies bodies = zeldovichPlaneWave(8, 1.0, {1, 0, 0}, 0.01, 0.0);
  const PowerSpectrumParams params = paramsFor(16, 1.0, MassAssignment::tsc, false);
  const MeshDensity density(bodies.view(), params);
  auto with = [&params](auto change) {
    PowerSpectrumParams other = params;
    change(other);
    return other;
  };
  for (const PowerSpectrumParams& other :
       {with([](auto& p) { p.grid = 32; }), with([](auto& p) { p.boxSize = 2.0; }),
        with([](auto& p) { p.assignment = MassAssignment::cic; }), with([](auto& p) { p.interlace = true; }),
        with([](auto& p) { p.binWidth = 2.0; })}) {
    try {
      measureGrowth(density, MeshDensity(bodies.view(), other));
      ADD_FAILURE() << "no error for " << describe(other);
    } catch (const InputError& error) {
      EXPECT_NE(std::string(error.what()).find("the same mesh"), std::string::npos) << error.what();
    }
  }
  EXPECT_NO_THROW(measureGrowth(density, MeshDensity(bodies.view(), params)));
}

// ---------------------------------------------------------------------------------------------------------------------
// Bad input: one line, InputError, before any work.

void expectInputError(const PowerSpectrumParams& params, const SourceView& bodies, const std::string& mentions) {
  try {
    measurePowerSpectrum(bodies, params);
    ADD_FAILURE() << "no error; expected one mentioning '" << mentions << "'";
  } catch (const InputError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find(mentions), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

TEST(PowerSpectrum, RefusesBadInputWithOneLine) {
  Bodies bodies;
  bodies.add(0.1, 0.2, 0.3, 1.0);
  bodies.add(0.5, 0.5, 0.5, 1.0);
  const PowerSpectrumParams good = paramsFor(16, 1.0, MassAssignment::cic, false);
  auto with = [&good](auto change) {
    PowerSpectrumParams params = good;
    change(params);
    return params;
  };
  expectInputError(
      with([](auto& p) { p.grid = 11; }), bodies.view(),
      "the grid 11 is not FFT-friendly (it has a prime factor other than 2, 3, 5 and 7); the next friendly "
      "size is 12");
  expectInputError(with([](auto& p) { p.grid = 4097; }), bodies.view(), "the grid must be 8 to 4096 points per side");
  expectInputError(with([](auto& p) { p.grid = 4; }), bodies.view(), "(got 4)");
  expectInputError(with([](auto& p) { p.boxSize = 0; }), bodies.view(), "box size must be > 0");
  expectInputError(with([](auto& p) { p.boxSize = -2; }), bodies.view(), "box size must be > 0");
  expectInputError(with([](auto& p) { p.boxSize = std::numeric_limits<double>::quiet_NaN(); }), bodies.view(),
                   "box size");
  expectInputError(with([](auto& p) { p.binWidth = 0; }), bodies.view(), "bin width");
  expectInputError(with([](auto& p) { p.binWidth = std::numeric_limits<double>::infinity(); }), bodies.view(),
                   "bin width");
  expectInputError(with([](auto& p) { p.binWidth = 1e-4; }), bodies.view(),
                   "a bin width of 0.0001 k_F makes more than 65536 bins on a grid of 16; widen the bins");
  expectInputError(with([](auto& p) {
                     p.binning = PowerBinning::logarithmic;
                     p.binsPerDecade = 0;
                   }),
                   bodies.view(), "1 to 1000 per decade");
  expectInputError(good, SourceView{}, "no bodies");
  Bodies bad = bodies;
  bad.y[1] = std::numeric_limits<double>::quiet_NaN();
  expectInputError(good, bad.view(), "body 1 has a non-finite position");
  bad = bodies;
  bad.mass[0] = 0;
  expectInputError(good, bad.view(), "body 0 has a mass that is not a finite number > 0 (got 0)");
  bad.mass[0] = -1;
  expectInputError(good, bad.view(), "(got -1)");
  EXPECT_NO_THROW(measurePowerSpectrum(bodies.view(), good));
  // The mass mesh under it says the same in its own words.
  EXPECT_THROW(mesh::MassMesh(7, 1.0), InputError);
  EXPECT_THROW(mesh::MassMesh(16, 0.0), InputError);
}

}  // namespace
}  // namespace matcha::cosmology
