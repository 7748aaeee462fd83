// SPDX-License-Identifier: MIT
// What the two Ewald evaluations (gpu/src/ewald.cpp on the CPU, gpu/cuda/ewald_kernels.cu on the GPU) share: the
// tables made from EwaldParams (the lattice shifts of the real-space sum, the wave vectors of the Fourier sum) and
// each source's real-space term at a target, one function for both so that they evaluate the same formulas.
// Conventions in matcha/gpu/ewald.hpp.
#pragma once

#include <cmath>
#include <cstddef>
#include <vector>

#include "matcha/core/host_device.hpp"
#include "matcha/core/pair_interaction.hpp"
#include "matcha/gpu/ewald.hpp"

namespace matcha::gpu::detail {

inline constexpr double kEwaldPi = 3.141592653589793;
inline constexpr double kEwaldTwoOverSqrtPi = 1.1283791670955126;  ///< 2 / sqrt(pi)

/// A lattice shift nL, n != 0, that can bring an image within the real-space cutoff.
struct ImageShift {
  double x, y, z;
};

/// One wave vector of the half space (k and -k summed together): k = 2 pi h / L, and
///   weight = 2 (4 pi / L^3) exp(-k^2 / 4 alpha^2) / k^2,   the factor 2 for -k.
struct WaveVector {
  int hx, hy, hz;
  double kx, ky, kz;
  double weight;
};

/// Everything an evaluation precomputes from the params: cutoffs, image shifts, wave vectors (smallest terms first).
struct EwaldSetup {
  double boxSize = 0, invBoxSize = 0;
  double alpha = 0;
  double realCutoff2 = 0;    ///< (X / alpha)^2
  double backgroundPsi = 0;  ///< -pi / (alpha^2 L^3), psi's constant per unit source mass
  int maxH = 0;              ///< largest |h_d| of any wave vector
  std::vector<ImageShift> shifts;
  std::vector<WaveVector> waves;
};

/// The tables of `params` (validated: InputError when out of range).
EwaldSetup makeEwaldSetup(const EwaldParams& params);

/// Sums for one target: psi (sum_j m_j psi_j without the nearest images and the background), the gradient of that,
/// and the nearest images as pair_interaction.hpp writes them (pot negative), all without G.
struct TargetSums {
  double gx = 0, gy = 0, gz = 0, psi = 0;
  double nearAx = 0, nearAy = 0, nearAz = 0, nearPot = 0;
};

namespace ewald_math {
#if defined(__CUDA_ARCH__)
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE double exp(double x) { return ::exp(x); }
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE double erf(double x) { return ::erf(x); }
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE double erfc(double x) { return ::erfc(x); }
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE double sqrt(double x) { return ::sqrt(x); }
#else
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE double exp(double x) { return std::exp(x); }
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE double erf(double x) { return std::erf(x); }
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE double erfc(double x) { return std::erfc(x); }
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE double sqrt(double x) { return std::sqrt(x); }
#endif
}  // namespace ewald_math

/// f(x) = erf(x) - 2 x exp(-x^2) / sqrt(pi) = (4 / sqrt(pi)) int_0^x t^2 exp(-t^2) dt, the radial factor of the force
/// of -erf(alpha r) / r, given erfX = erf(x). Below x = 1/2 the two terms cancel (to ~x^2), so the series
/// (4 / sqrt(pi)) sum_n (-1)^n x^(2n+3) / (n! (2n+3)) takes over; 14 terms reach 1e-17 relative there.
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE double erfMinusGaussian(double x, double erfX) {
  if (x >= 0.5) return erfX - kEwaldTwoOverSqrtPi * x * ewald_math::exp(-x * x);
  const double x2 = x * x;
  double power = x2 * x;  // (-1)^n x^(2n+3) / n!
  double sum = 0;
  for (int n = 0; n < 14; ++n) {
    sum += power / (2 * n + 3);
    power *= -x2 / (n + 1);
  }
  return 2.0 * kEwaldTwoOverSqrtPi * sum;
}

/// Source j's real-space share at target i: r = x_i - x_j at its nearest image (in [-L/2, L/2]), `self` when j is
/// i. Adds the nearest image with its Newtonian part removed (-erf(alpha s) / s; past the cutoff erfc is dropped:
/// -1/s), the nearest image itself Plummer-softened with the direct sum's rules for zero separation, and the further
/// images within the cutoff (erfc(alpha t) / t). A body's own term, and a coincident body's, is the limit
/// lim_{r -> 0} (erfc(alpha r) - 1) / r = -2 alpha / sqrt(pi), with no force.
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE void addRealSpaceSource(double rx, double ry, double rz, double m, bool self,
                                                              double alpha, double realCutoff2, double eps2,
                                                              const ImageShift* shifts, std::size_t numShifts,
                                                              TargetSums& sums) {
  const double s2 = rx * rx + ry * ry + rz * rz;
  if (self) {
    sums.psi -= m * kEwaldTwoOverSqrtPi * alpha;
  } else {
    if (s2 == 0) {
      sums.psi -= m * kEwaldTwoOverSqrtPi * alpha;
    } else {
      const double s = ewald_math::sqrt(s2);
      const double invS = 1.0 / s;
      const double invS3 = invS * invS * invS;
      const bool inside = s2 < realCutoff2;
      const double erfX = inside ? ewald_math::erf(alpha * s) : 1.0;
      sums.psi -= m * erfX * invS;
      const double radial = m * (inside ? erfMinusGaussian(alpha * s, erfX) : 1.0) * invS3;
      sums.gx += radial * rx;
      sums.gy += radial * ry;
      sums.gz += radial * rz;
    }
    accumulatePairInteraction<double>(-rx, -ry, -rz, m, eps2, sums.nearAx, sums.nearAy, sums.nearAz, sums.nearPot);
  }
  // Further images: psi += erfc(alpha t) / t, grad = -(erfc(alpha t) + 2 alpha t exp(-alpha^2 t^2) / sqrt(pi))
  // t_vec / t^3.
  for (std::size_t k = 0; k < numShifts; ++k) {
    const double sx = rx + shifts[k].x, sy = ry + shifts[k].y, sz = rz + shifts[k].z;
    const double t2 = sx * sx + sy * sy + sz * sz;
    if (t2 >= realCutoff2) continue;
    const double t = ewald_math::sqrt(t2);
    const double invT = 1.0 / t;
    const double erfcTerm = ewald_math::erfc(alpha * t);
    sums.psi += m * erfcTerm * invT;
    const double radial =
        -m * (erfcTerm + kEwaldTwoOverSqrtPi * alpha * t * ewald_math::exp(-alpha * alpha * t2)) * invT * invT * invT;
    sums.gx += radial * sx;
    sums.gy += radial * sy;
    sums.gz += radial * sz;
  }
}

}  // namespace matcha::gpu::detail
