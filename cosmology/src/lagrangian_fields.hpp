// SPDX-License-Identifier: MIT
// The arithmetic of the initial conditions (initial_conditions.hpp's conventions), written once for a grid held whole
// (mesh::FourierGrid: initial_conditions.cpp) and for one split over MPI ranks (mesh::SlabFourierGrid:
// initial_conditions_on_ranks.cpp). A Grid has grid(), firstPlane(), planes(), firstModeRow(), modeRows(), real(),
// spectrum(), realIndex(px, py, pz), spectrumIndex(mx, my, mz), forward() and inverse(); every loop below visits the
// planes (real space) or the mode rows (Fourier space) the grid holds, and computes each value alone, so the values do
// not depend on the thread count, nor on how the grid is split. Private to cosmology/src.
#pragma once

#include <tbb/parallel_for.h>

#include <array>
#include <complex>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <numbers>

#include "matcha/core/particles.hpp"
#include "matcha/cosmology/initial_conditions.hpp"
#include "matcha/mesh/mesh_kernels.hpp"

namespace matcha::cosmology::detail {

using Complex = std::complex<double>;
inline constexpr double kTwoPi = 2.0 * std::numbers::pi;

/// SplitMix64's finaliser (Steele, Lea & Flood 2014): a bijection of 64-bit words whose outputs pass BigCrush as a
/// counter-based generator. Hashing (seed, mode, draw) through it gives every mode its own numbers, independent of
/// the order in which modes are visited and of which rank visits them.
constexpr std::uint64_t mix(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// A uniform deviate in (0, 1] from a 64-bit word: 53 bits, never 0 (log(u) stays finite).
inline double unitInterval(std::uint64_t word) { return (static_cast<double>(word >> 11) + 1.0) * 0x1.0p-53; }

/// The two uniform deviates of signed mode (sx, sy, sz): the seed and each wavenumber hashed in turn (wavenumbers
/// offset to be non-negative; |s| <= kMaxGrid / 2 < 2^20).
inline std::array<double, 2> modeDeviates(std::uint64_t seed, int sx, int sy, int sz) {
  constexpr std::int64_t kOffset = std::int64_t{1} << 20;
  std::uint64_t h = mix(seed);
  h = mix(h ^ static_cast<std::uint64_t>(sx + kOffset));
  h = mix(h ^ static_cast<std::uint64_t>(sy + kOffset));
  h = mix(h ^ static_cast<std::uint64_t>(sz + kOffset));
  return {unitInterval(mix(h ^ 1u)), unitInterval(mix(h ^ 2u))};
}

/// True for the modes every field here leaves out: k = 0, and any component at the Nyquist index of an even n.
inline bool excludedMode(int mx, int my, int mz, int n) {
  const bool even = n % 2 == 0;
  if (even && (2 * mx == n || 2 * my == n || 2 * mz == n)) return true;
  return mx == 0 && my == 0 && mz == 0;
}

inline int halfModes(int n) { return n / 2 + 1; }

/// The k component of axis `axis`.
inline double component(int axis, double kx, double ky, double kz) { return axis == 0 ? kx : (axis == 1 ? ky : kz); }

/// The growth, the bodies' mass and the displacement and velocity factors at params' start (initial_conditions.cpp).
struct StartFactors {
  IcGrowth growth;
  double firstFactor = 0;     ///< on Psi1 of the z = 0 field: D1(a) / D1(1)
  double secondFactor = 0;    ///< on Psi2: D2(a) / D1(1)^2
  double velocityFactor = 0;  ///< u = velocityFactor (f1 Psi1 + f2 Psi2)
};
StartFactors startFactors(const CosmologicalIcParams& params);

/// Writes delta_m of params' Gaussian field for the mode rows my in [firstRow, firstRow + rows) (every mx, mz) at
/// values[index(mx, my, mz)]; excluded modes are left as they are (the caller's zeros).
template <class Index, class Power>
void fillDensityModes(Complex* values, int firstRow, int rows, const CosmologicalIcParams& params, Index index,
                      Power&& power) {
  const int n = params.grid;
  const double boxSize = params.boxSize;
  const double fundamental = kTwoPi / boxSize;
  const double volume = boxSize * boxSize * boxSize;
  const double sign = params.invertPhases ? -1.0 : 1.0;
  tbb::parallel_for(firstRow, firstRow + rows, [&](int my) {
    const int sy = mesh::signedMode(my, n);
    for (int mx = 0; mx < n; ++mx) {
      const int sx = mesh::signedMode(mx, n);
      for (int mz = 0; mz < halfModes(n); ++mz) {
        if (excludedMode(mx, my, mz, n)) continue;
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
        values[index(mx, my, mz)] = mirrored ? std::conj(value) : value;
      }
    }
  });
}

/// Fills `target`'s spectrum with modes times op(kx, ky, kz, k^2) (k in h/Mpc; excluded modes zero) over its rows,
/// and transforms it to its planes. `modes` is in target's spectrum layout.
template <class Grid, class Operator>
void fieldFromModes(Grid& target, const Complex* modes, double boxSize, Operator op) {
  const int n = target.grid();
  const double fundamental = kTwoPi / boxSize;
  Complex* spectrum = target.spectrum();
  tbb::parallel_for(target.firstModeRow(), target.firstModeRow() + target.modeRows(), [&](int my) {
    const double ky = fundamental * mesh::signedMode(my, n);
    for (int mx = 0; mx < n; ++mx) {
      const double kx = fundamental * mesh::signedMode(mx, n);
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

/// Calls body(p) for the real index p of every grid point on the grid's planes.
template <class Grid, class Body>
void forEachPoint(const Grid& grid, Body&& body) {
  const int n = grid.grid();
  tbb::parallel_for(grid.firstPlane(), grid.firstPlane() + grid.planes(), [&](int px) {
    for (int py = 0; py < n; ++py) {
      for (int pz = 0; pz < n; ++pz) body(grid.realIndex(px, py, pz));
    }
  });
}

/// The second-order source sum_{i<j} (phi,ii phi,jj - phi,ij^2) of phi1 (laplacian phi1 = delta), on `source`'s
/// grid, then forward transformed and divided by n^3: its modes in DensityModes' convention. Uses three more grids,
/// each from makeGrid() (a std::unique_ptr<Grid>).
template <class Grid, class MakeGrid>
void secondOrderSource(Grid& source, const Complex* modes, double boxSize, MakeGrid makeGrid) {
  const int n = source.grid();
  // phi1,ij = (i k_i)(i k_j) phi1_k = k_i k_j delta_k / k^2.
  const auto derivative = [&](Grid& grid, int i, int j) {
    fieldFromModes(grid, modes, boxSize, [i, j](double kx, double ky, double kz, double k2) {
      return Complex(component(i, kx, ky, kz) * component(j, kx, ky, kz) / k2, 0.0);
    });
  };
  std::array<std::unique_ptr<Grid>, 3> diagonal{makeGrid(), makeGrid(), makeGrid()};
  for (int axis = 0; axis < 3; ++axis) derivative(*diagonal[static_cast<std::size_t>(axis)], axis, axis);
  double* s = source.real();
  const double* xx = diagonal[0]->real();
  const double* yy = diagonal[1]->real();
  const double* zz = diagonal[2]->real();
  forEachPoint(source, [&](std::size_t p) { s[p] = xx[p] * yy[p] + xx[p] * zz[p] + yy[p] * zz[p]; });
  const std::array<std::array<int, 2>, 3> offDiagonal{{{0, 1}, {0, 2}, {1, 2}}};
  for (const auto& [i, j] : offDiagonal) {
    derivative(*diagonal[0], i, j);
    const double* ij = diagonal[0]->real();
    forEachPoint(source, [&](std::size_t p) { s[p] -= ij[p] * ij[p]; });
  }
  source.forward();
  const double norm = 1.0 / (static_cast<double>(n) * n * n);
  Complex* spectrum = source.spectrum();
  // Both layouts keep a grid's modes contiguous from index 0.
  const std::size_t count = static_cast<std::size_t>(source.modeRows()) * n * halfModes(n);
  tbb::parallel_for(std::size_t{0}, count, [&](std::size_t k) { spectrum[k] *= norm; });
}

/// The bodies of the grid points on the grid's planes (grid point (px, py, pz) at local index ((px - firstPlane) n +
/// py) n + pz, id (px n + py) n + pz), displaced and set moving by `modes` (in the grids' spectrum layout): Zel'dovich,
/// and with lptOrder 2 the second-order term. Holds one grid (1LPT) or four at its peak (2LPT).
template <class Grid, class MakeGrid>
CosmologicalIcs lagrangianBodies(const CosmologicalIcParams& params, const Complex* modes, MakeGrid makeGrid) {
  const int n = params.grid;
  const double boxSize = params.boxSize;
  const StartFactors factors = startFactors(params);
  const IcGrowth& growth = factors.growth;

  std::unique_ptr<Grid> source;
  if (params.lptOrder == 2) {
    source = makeGrid();
    secondOrderSource(*source, modes, boxSize, makeGrid);
  }
  std::unique_ptr<Grid> first = makeGrid();
  std::unique_ptr<Grid> second;
  if (source) second = makeGrid();

  const int firstPlane = first->firstPlane();
  const std::size_t count = static_cast<std::size_t>(first->planes()) * n * n;
  CosmologicalIcs result;
  result.growth = growth;
  Particles& bodies = result.particles;
  bodies.resize(count);
  const double spacing = boxSize / n;
  const std::array<std::vector<double>*, 3> positions{&bodies.x, &bodies.y, &bodies.z};
  const std::array<std::vector<double>*, 3> velocities{&bodies.vx, &bodies.vy, &bodies.vz};
  for (int axis = 0; axis < 3; ++axis) {
    // Psi1_k = -i k phi1_k = i k delta_k / k^2 (laplacian phi1 = delta), times D1(a) / D1(1).
    fieldFromModes(*first, modes, boxSize, [&](double kx, double ky, double kz, double k2) {
      return Complex(0.0, factors.firstFactor * component(axis, kx, ky, kz) / k2);
    });
    if (second) {
      // Psi2_k = +i k phi2_k = -i k S_k / k^2 (laplacian phi2 = S), times D2(a) / D1(1)^2.
      const Complex* sourceModes = source->spectrum();
      fieldFromModes(*second, sourceModes, boxSize, [&](double kx, double ky, double kz, double k2) {
        return Complex(0.0, -factors.secondFactor * component(axis, kx, ky, kz) / k2);
      });
    }
    std::vector<double>& position = *positions[static_cast<std::size_t>(axis)];
    std::vector<double>& velocity = *velocities[static_cast<std::size_t>(axis)];
    tbb::parallel_for(firstPlane, firstPlane + first->planes(), [&](int px) {
      for (int py = 0; py < n; ++py) {
        for (int pz = 0; pz < n; ++pz) {
          const std::size_t body = (static_cast<std::size_t>(px - firstPlane) * n + py) * n + pz;
          const std::size_t point = first->realIndex(px, py, pz);
          const std::array<int, 3> cell{px, py, pz};
          const double psi1 = first->real()[point];
          const double psi2 = second ? second->real()[point] : 0.0;
          position[body] = wrapIntoBox(cell[static_cast<std::size_t>(axis)] * spacing + psi1 + psi2, boxSize);
          velocity[body] = factors.velocityFactor * (growth.growthRate * psi1 + growth.secondOrderRate * psi2);
        }
      }
    });
  }
  const std::uint64_t firstId = static_cast<std::uint64_t>(firstPlane) * n * n;
  tbb::parallel_for(std::size_t{0}, count, [&](std::size_t body) {
    bodies.mass[body] = growth.particleMass;
    bodies.id[body] = firstId + body;
  });
  return result;
}

}  // namespace matcha::cosmology::detail
