// SPDX-License-Identifier: MIT
#include "matcha/cosmology/initial_conditions.hpp"

#include <tbb/parallel_for.h>

#include <array>
#include <cmath>
#include <numbers>
#include <optional>
#include <string>
#include <utility>

#include "matcha/core/errors.hpp"
#include "matcha/mesh/fourier_grid.hpp"
#include "matcha/mesh/mesh_kernels.hpp"
#include "matcha/mesh/particle_mesh.hpp"
#include "quadrature.hpp"

namespace matcha::cosmology {

namespace {

using detail::formatNumber;
using Complex = std::complex<double>;
constexpr double kTwoPi = 2.0 * std::numbers::pi;

/// SplitMix64's finaliser (Steele, Lea & Flood 2014): a bijection of 64-bit words whose outputs pass BigCrush as a
/// counter-based generator. Hashing (seed, mode, draw) through it gives every mode its own numbers, independent of
/// the order in which modes are visited.
constexpr std::uint64_t mix(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// A uniform deviate in (0, 1] from a 64-bit word: 53 bits, never 0 (log(u) stays finite).
double unitInterval(std::uint64_t word) { return (static_cast<double>(word >> 11) + 1.0) * 0x1.0p-53; }

/// The two uniform deviates of signed mode (sx, sy, sz): the seed and each wavenumber hashed in turn (wavenumbers
/// offset to be non-negative; |s| <= kMaxGrid / 2 < 2^20).
std::array<double, 2> modeDeviates(std::uint64_t seed, int sx, int sy, int sz) {
  constexpr std::int64_t kOffset = std::int64_t{1} << 20;
  std::uint64_t h = mix(seed);
  h = mix(h ^ static_cast<std::uint64_t>(sx + kOffset));
  h = mix(h ^ static_cast<std::uint64_t>(sy + kOffset));
  h = mix(h ^ static_cast<std::uint64_t>(sz + kOffset));
  return {unitInterval(mix(h ^ 1u)), unitInterval(mix(h ^ 2u))};
}

/// True for the modes every field here leaves out: k = 0, and any component at the Nyquist index of an even n.
bool excludedMode(int mx, int my, int mz, int n) {
  const bool even = n % 2 == 0;
  if (even && (2 * mx == n || 2 * my == n || 2 * mz == n)) return true;
  return mx == 0 && my == 0 && mz == 0;
}

int halfModes(int n) { return n / 2 + 1; }

/// Fills `target`'s spectrum with modes times operator(kx, ky, kz, k^2) (k in h/Mpc; excluded modes zero) and
/// transforms it to the grid. Parallel over x planes; each value is computed alone, so the bits do not depend on the
/// threads.
template <typename Operator>
void fieldFromModes(mesh::FourierGrid& target, const Complex* modes, int n, double boxSize, Operator op) {
  const double fundamental = kTwoPi / boxSize;
  Complex* spectrum = target.spectrum();
  tbb::parallel_for(0, n, [&](int mx) {
    const double kx = fundamental * mesh::signedMode(mx, n);
    for (int my = 0; my < n; ++my) {
      const double ky = fundamental * mesh::signedMode(my, n);
      for (int mz = 0; mz < halfModes(n); ++mz) {
        const std::size_t index = target.spectrumIndex(mx, my, mz);
        if (excludedMode(mx, my, mz, n)) {
          spectrum[index] = 0.0;
          continue;
        }
        const double kz = fundamental * mz;
        spectrum[index] = modes[index] * op(kx, ky, kz, kx * kx + ky * ky + kz * kz);
      }
    }
  });
  target.inverse();
}

/// The k component of axis `axis`.
double component(int axis, double kx, double ky, double kz) { return axis == 0 ? kx : (axis == 1 ? ky : kz); }

/// The second-order source sum_{i<j} (phi,ii phi,jj - phi,ij^2) of phi1 (laplacian phi1 = delta), on `source`'s
/// grid, then forward transformed and divided by n^3: its modes in DensityModes' convention. Uses three more grids.
void secondOrderSource(mesh::FourierGrid& source, const Complex* modes, int n, double boxSize) {
  // phi1,ij = (i k_i)(i k_j) phi1_k = k_i k_j delta_k / k^2.
  const auto derivative = [&](mesh::FourierGrid& grid, int i, int j) {
    fieldFromModes(grid, modes, n, boxSize, [i, j](double kx, double ky, double kz, double k2) {
      return Complex(component(i, kx, ky, kz) * component(j, kx, ky, kz) / k2, 0.0);
    });
  };
  std::array<mesh::FourierGrid, 3> diagonal{mesh::FourierGrid(n), mesh::FourierGrid(n), mesh::FourierGrid(n)};
  for (int axis = 0; axis < 3; ++axis) derivative(diagonal[static_cast<std::size_t>(axis)], axis, axis);
  double* s = source.real();
  const double* xx = diagonal[0].real();
  const double* yy = diagonal[1].real();
  const double* zz = diagonal[2].real();
  const auto forEachPoint = [&](auto&& body) {
    tbb::parallel_for(0, n, [&](int px) {
      for (int py = 0; py < n; ++py) {
        for (int pz = 0; pz < n; ++pz) body(source.realIndex(px, py, pz));
      }
    });
  };
  forEachPoint([&](std::size_t p) { s[p] = xx[p] * yy[p] + xx[p] * zz[p] + yy[p] * zz[p]; });
  const std::array<std::array<int, 2>, 3> offDiagonal{{{0, 1}, {0, 2}, {1, 2}}};
  for (const auto& [i, j] : offDiagonal) {
    derivative(diagonal[0], i, j);
    const double* ij = diagonal[0].real();
    forEachPoint([&](std::size_t p) { s[p] -= ij[p] * ij[p]; });
  }
  source.forward();
  const double norm = 1.0 / (static_cast<double>(n) * n * n);
  Complex* spectrum = source.spectrum();
  const std::size_t count = static_cast<std::size_t>(n) * n * halfModes(n);
  tbb::parallel_for(std::size_t{0}, count, [&](std::size_t k) { spectrum[k] *= norm; });
}

}  // namespace

void CosmologicalIcParams::validate() const {
  if (!(std::isfinite(boxSize) && boxSize > 0)) {
    throw InputError("--box must be a finite number > 0 (Mpc/h) (got " + formatNumber(boxSize) + ")");
  }
  mesh::requireFftFriendlyGrid(grid, "--grid");
  if (!(std::isfinite(startRedshift) && startRedshift > 0)) {
    throw InputError("--z-start must be a finite number > 0 (got " + formatNumber(startRedshift) + ")");
  }
  if (lptOrder != 1 && lptOrder != 2) {
    throw InputError("--lpt must be 1 (Zel'dovich) or 2 (2LPT) (got " + std::to_string(lptOrder) + ")");
  }
  cosmology.validate();
}

DensityModes gaussianDensityModes(const CosmologicalIcParams& params, const std::function<double(double)>& power) {
  params.validate();
  const int n = params.grid;
  const double boxSize = params.boxSize;
  DensityModes modes{n, boxSize, std::vector<Complex>(static_cast<std::size_t>(n) * n * halfModes(n))};
  const double fundamental = kTwoPi / boxSize;
  const double volume = boxSize * boxSize * boxSize;
  const double sign = params.invertPhases ? -1.0 : 1.0;
  tbb::parallel_for(0, n, [&](int mx) {
    const int sx = mesh::signedMode(mx, n);
    for (int my = 0; my < n; ++my) {
      const int sy = mesh::signedMode(my, n);
      for (int mz = 0; mz < halfModes(n); ++mz) {
        const std::size_t index = (static_cast<std::size_t>(mx) * n + my) * halfModes(n) + mz;
        if (excludedMode(mx, my, mz, n)) continue;  // stays 0
        // On the mz = 0 plane, m and -m are both stored: one draws, the other is its conjugate (a real field).
        const bool mirrored = mz == 0 && (sx < 0 || (sx == 0 && sy < 0));
        const auto [u1, u2] = mirrored ? modeDeviates(params.seed, -sx, -sy, 0) : modeDeviates(params.seed, sx, sy, mz);
        const double k = fundamental * std::sqrt(static_cast<double>(sx) * sx + static_cast<double>(sy) * sy +
                                                 static_cast<double>(mz) * mz);
        // Rayleigh with <r^2> = 1: the modulus of a complex Gaussian whose real and imaginary parts have variance 1/2.
        const double r = params.fixedAmplitude ? 1.0 : std::sqrt(-std::log(u1));
        const double amplitude = sign * std::sqrt(power(k) / volume) * r;
        const double phase = kTwoPi * u2;
        const Complex value = amplitude * Complex(std::cos(phase), std::sin(phase));
        modes.values[index] = mirrored ? std::conj(value) : value;
      }
    }
  });
  return modes;
}

CosmologicalIcs makeCosmologicalIcs(const CosmologicalIcParams& params, const DensityModes& modes) {
  params.validate();
  const int n = params.grid;
  const double boxSize = params.boxSize;
  if (modes.grid != n || modes.boxSize != boxSize ||
      modes.values.size() != static_cast<std::size_t>(n) * n * halfModes(n)) {
    throw InputError("cosmological initial conditions: the density modes are for another grid or box");
  }

  // The growth at the start, H0 = 100 km/s per Mpc/h so that H comes out in GADGET's velocity per length.
  const Background background(params.cosmology, kHubbleKmPerSPerMpcOverH);
  IcGrowth growth;
  const double a = params.scaleFactor();
  growth.scaleFactor = a;
  growth.growthRatio = background.growthFactorRatio(a);
  growth.growthFactor = background.growthFactor(a);
  growth.growthRate = background.growthRate(a);
  growth.hubble = background.hubble(a);
  const double todayGrowth = background.growthFactor(1.0);
  if (params.lptOrder == 2) {
    growth.secondOrder = background.secondOrderGrowthFactor(a);
    growth.secondOrderRate = background.secondOrderGrowthRate(a);
  }
  const double cellVolume = std::pow(boxSize / n, 3);
  growth.particleMass = params.cosmology.omegaMatter * kCriticalDensity * cellVolume;

  // modes are the z = 0 field; phi1 belongs to delta / D1(1), so Psi1 = -D1(a) grad phi1 = -(D1(a)/D1(1)) grad
  // phi1[delta_0], and phi2, quadratic in phi1, carries 1 / D1(1)^2.
  const double firstFactor = growth.growthRatio;
  const double secondFactor = growth.secondOrder / (todayGrowth * todayGrowth);
  // u = v / sqrt(a), v = a H f Psi.
  const double velocityFactor = a * growth.hubble / std::sqrt(a);

  std::optional<mesh::FourierGrid> source;
  if (params.lptOrder == 2) {
    source.emplace(n);
    secondOrderSource(*source, modes.values.data(), n, boxSize);
  }

  const std::size_t count = static_cast<std::size_t>(n) * n * n;
  CosmologicalIcs result;
  result.growth = growth;
  Particles& bodies = result.particles;
  bodies.resize(count);
  const double spacing = boxSize / n;
  mesh::FourierGrid first(n);
  std::optional<mesh::FourierGrid> second;
  if (source) second.emplace(n);
  const std::array<std::vector<double>*, 3> positions{&bodies.x, &bodies.y, &bodies.z};
  const std::array<std::vector<double>*, 3> velocities{&bodies.vx, &bodies.vy, &bodies.vz};
  for (int axis = 0; axis < 3; ++axis) {
    // Psi1_k = -i k phi1_k = i k delta_k / k^2 (laplacian phi1 = delta), times D1(a) / D1(1).
    fieldFromModes(first, modes.values.data(), n, boxSize, [&](double kx, double ky, double kz, double k2) {
      return Complex(0.0, firstFactor * component(axis, kx, ky, kz) / k2);
    });
    if (second) {
      // Psi2_k = +i k phi2_k = -i k S_k / k^2 (laplacian phi2 = S), times D2(a) / D1(1)^2.
      fieldFromModes(*second, std::as_const(*source).spectrum(), n, boxSize,
                     [&](double kx, double ky, double kz, double k2) {
                       return Complex(0.0, -secondFactor * component(axis, kx, ky, kz) / k2);
                     });
    }
    std::vector<double>& position = *positions[static_cast<std::size_t>(axis)];
    std::vector<double>& velocity = *velocities[static_cast<std::size_t>(axis)];
    tbb::parallel_for(0, n, [&](int px) {
      for (int py = 0; py < n; ++py) {
        for (int pz = 0; pz < n; ++pz) {
          const std::size_t body = (static_cast<std::size_t>(px) * n + py) * n + pz;
          const std::size_t point = first.realIndex(px, py, pz);
          const std::array<int, 3> cell{px, py, pz};
          const double psi1 = first.real()[point];
          const double psi2 = second ? second->real()[point] : 0.0;
          position[body] = wrapIntoBox(cell[static_cast<std::size_t>(axis)] * spacing + psi1 + psi2, boxSize);
          velocity[body] = velocityFactor * (growth.growthRate * psi1 + growth.secondOrderRate * psi2);
        }
      }
    });
  }
  for (std::size_t body = 0; body < count; ++body) {
    bodies.mass[body] = growth.particleMass;
    bodies.id[body] = body;
  }
  return result;
}

CosmologicalIcs makeCosmologicalIcs(const CosmologicalIcParams& params, const std::function<double(double)>& power) {
  return makeCosmologicalIcs(params, gaussianDensityModes(params, power));
}

std::size_t cosmologicalIcBytes(const CosmologicalIcParams& params) {
  const auto n = static_cast<std::size_t>(params.grid);
  const std::size_t bodies = n * n * n * (13 * sizeof(double) + sizeof(std::uint64_t));
  const std::size_t modes = n * n * (n / 2 + 1) * sizeof(Complex);
  const std::size_t grids = (params.lptOrder == 2 ? 4 : 1) * mesh::fourierGridBytes(params.grid);
  return bodies + modes + grids;
}

}  // namespace matcha::cosmology
