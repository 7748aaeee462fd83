// SPDX-License-Identifier: MIT
#include "matcha/gpu/ewald.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <numeric>
#include <string>
#include <vector>

#include "matcha/core/errors.hpp"
#include "matcha/core/pair_interaction.hpp"
#include "matcha/gpu/detail/ewald_terms.hpp"

namespace matcha::gpu {

namespace {

constexpr double kPi = std::numbers::pi;

using detail::EwaldSetup;
using detail::ImageShift;
using detail::TargetSums;
using detail::WaveVector;

}  // namespace

namespace detail {

EwaldSetup makeEwaldSetup(const EwaldParams& params) {
  params.validate();
  EwaldSetup setup;
  const double L = params.boxSize;
  setup.boxSize = L;
  setup.invBoxSize = 1.0 / L;
  setup.alpha = params.alphaTimesBox / L;
  const double rcOverL = params.cutoff / params.alphaTimesBox;
  setup.realCutoff2 = (rcOverL * L) * (rcOverL * L);
  setup.backgroundPsi = -kPi / (setup.alpha * setup.alpha * L * L * L);

  // Shifts: the nearest image r lies in [-L/2, L/2]^3, so |r + nL| >= L |(max(0, |n_d| - 1/2))_d|.
  const int maxN = static_cast<int>(std::ceil(rcOverL + 0.5));
  for (int nx = -maxN; nx <= maxN; ++nx) {
    for (int ny = -maxN; ny <= maxN; ++ny) {
      for (int nz = -maxN; nz <= maxN; ++nz) {
        if (nx == 0 && ny == 0 && nz == 0) continue;
        double gap2 = 0;
        for (const int n : {nx, ny, nz}) {
          const double gap = std::max(0.0, std::abs(n) - 0.5);
          gap2 += gap * gap;
        }
        if (gap2 < rcOverL * rcOverL) setup.shifts.push_back({nx * L, ny * L, nz * L});
      }
    }
  }

  // Wave vectors |h| < alpha L X / pi, i.e. |k| < 2 alpha X, of the half space hx > 0, or hx = 0 and hy > 0, or
  // hx = hy = 0 and hz > 0.
  const double maxHReal = params.alphaTimesBox * params.cutoff / kPi;
  const int maxH = static_cast<int>(std::floor(maxHReal));
  const double twoPiOverL = 2.0 * kPi / L;
  for (int hx = 0; hx <= maxH; ++hx) {
    for (int hy = -maxH; hy <= maxH; ++hy) {
      for (int hz = -maxH; hz <= maxH; ++hz) {
        const bool upper = hx > 0 || (hx == 0 && (hy > 0 || (hy == 0 && hz > 0)));
        const int h2 = hx * hx + hy * hy + hz * hz;
        if (!upper || h2 >= maxHReal * maxHReal) continue;
        WaveVector wave;
        wave.hx = hx;
        wave.hy = hy;
        wave.hz = hz;
        wave.kx = twoPiOverL * hx;
        wave.ky = twoPiOverL * hy;
        wave.kz = twoPiOverL * hz;
        const double k2 = twoPiOverL * twoPiOverL * h2;
        wave.weight = 2.0 * (4.0 * kPi / (L * L * L)) * std::exp(-k2 / (4.0 * setup.alpha * setup.alpha)) / k2;
        setup.waves.push_back(wave);
        setup.maxH = std::max({setup.maxH, hx, std::abs(hy), std::abs(hz)});
      }
    }
  }
  // Smallest terms first: a target's Fourier sum adds ~10^5 positive terms for its own potential, and added to a
  // running sum already near its total (largest first) those below half an ulp of it were dropped, ~1e-11 of G m / L
  // at alpha L = 24 (LoneBodyHasTheLatticeConstant). Ties in |h| keep their order, so the table is the same everywhere.
  std::stable_sort(setup.waves.begin(), setup.waves.end(), [](const WaveVector& a, const WaveVector& b) {
    return a.hx * a.hx + a.hy * a.hy + a.hz * a.hz > b.hx * b.hx + b.hy * b.hy + b.hz * b.hz;
  });
  return setup;
}

}  // namespace detail

namespace {

/// exp(2 pi i h u) for h = 0..maxH, each from its own sincos (no recurrence: h u stays exact to rounding).
void fillPhases(double u, int maxH, double* cosines, double* sines, std::size_t stride) {
  for (int h = 0; h <= maxH; ++h) {
    const double angle = 2.0 * kPi * h * u;
    cosines[h * stride] = std::cos(angle);
    sines[h * stride] = std::sin(angle);
  }
}

/// x / L reduced into [0, 1): phases of positions far outside the box keep their digits.
double reduced(double x, double invL) { return x * invL - std::floor(x * invL); }

/// The sources' structure factors S(k) = sum_j m_j exp(i k.x_j), one per wave vector. Sources go in fixed blocks, in
/// order, and within a block each wave vector sums its sources in order, so the sums do not depend on the threads.
void computeStructureFactors(const SourceView& sources, const EwaldSetup& setup, std::vector<double>& reS,
                             std::vector<double>& imS) {
  constexpr std::size_t kBlock = 2048;
  const std::size_t numWaves = setup.waves.size();
  const int maxH = setup.maxH;
  const std::size_t rows = static_cast<std::size_t>(maxH) + 1;
  reS.assign(numWaves, 0.0);
  imS.assign(numWaves, 0.0);
  // Per axis, [h][j] for h = 0..maxH, so the inner loop over the block's sources reads contiguously.
  std::vector<double> cosX(rows * kBlock), sinX(rows * kBlock), cosY(rows * kBlock), sinY(rows * kBlock),
      cosZ(rows * kBlock), sinZ(rows * kBlock), mass(kBlock);
  for (std::size_t first = 0; first < sources.count; first += kBlock) {
    const std::size_t count = std::min(kBlock, sources.count - first);
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, count, 64), [&](const tbb::blocked_range<std::size_t>& range) {
      for (std::size_t j = range.begin(); j != range.end(); ++j) {
        const std::size_t body = first + j;
        fillPhases(reduced(sources.x[body], setup.invBoxSize), maxH, &cosX[j], &sinX[j], kBlock);
        fillPhases(reduced(sources.y[body], setup.invBoxSize), maxH, &cosY[j], &sinY[j], kBlock);
        fillPhases(reduced(sources.z[body], setup.invBoxSize), maxH, &cosZ[j], &sinZ[j], kBlock);
        mass[j] = sources.mass[body];
      }
    });
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, numWaves, 16),
                      [&](const tbb::blocked_range<std::size_t>& range) {
                        for (std::size_t w = range.begin(); w != range.end(); ++w) {
                          const WaveVector& wave = setup.waves[w];
                          const double* cx = &cosX[wave.hx * kBlock];
                          const double* sx = &sinX[wave.hx * kBlock];
                          const double* cy = &cosY[std::abs(wave.hy) * kBlock];
                          const double* sy = &sinY[std::abs(wave.hy) * kBlock];
                          const double* cz = &cosZ[std::abs(wave.hz) * kBlock];
                          const double* sz = &sinZ[std::abs(wave.hz) * kBlock];
                          const double signY = wave.hy < 0 ? -1.0 : 1.0;  // exp(-i theta) = conj(exp(i theta))
                          const double signZ = wave.hz < 0 ? -1.0 : 1.0;
                          double re = 0, im = 0;
#pragma omp simd reduction(+ : re, im)
                          for (std::size_t j = 0; j < count; ++j) {
                            const double syj = signY * sy[j], szj = signZ * sz[j];
                            const double cxy = cx[j] * cy[j] - sx[j] * syj;
                            const double sxy = sx[j] * cy[j] + cx[j] * syj;
                            re += mass[j] * (cxy * cz[j] - sxy * szj);
                            im += mass[j] * (sxy * cz[j] + cxy * szj);
                          }
                          reS[w] += re;
                          imS[w] += im;
                        }
                      });
  }
}

void addRealSpace(const SourceView& sources, const EwaldSetup& setup, double eps2, std::uint32_t target,
                  TargetSums& sums) {
  const double L = setup.boxSize, invL = setup.invBoxSize;
  const double xi = sources.x[target], yi = sources.y[target], zi = sources.z[target];
  for (std::size_t j = 0; j < sources.count; ++j) {
    // The nearest image: r = x_i - x_j wrapped into [-L/2, L/2] (nearbyint rounds halves to even, so r_ji = -r_ij).
    double rx = xi - sources.x[j], ry = yi - sources.y[j], rz = zi - sources.z[j];
    rx -= L * std::nearbyint(rx * invL);
    ry -= L * std::nearbyint(ry * invL);
    rz -= L * std::nearbyint(rz * invL);
    detail::addRealSpaceSource(rx, ry, rz, sources.mass[j], j == target, setup.alpha, setup.realCutoff2, eps2,
                               setup.shifts.data(), setup.shifts.size(), sums);
  }
}

/// psi += sum_k w_k Re(exp(i k.x_i) conj S(k)), grad psi += -sum_k w_k k Im(exp(i k.x_i) conj S(k)).
/// The target's own term is in S: the Fourier part of its own psi(0).
void addFourierSpace(const SourceView& sources, const EwaldSetup& setup, const std::vector<double>& reS,
                     const std::vector<double>& imS, std::uint32_t target, std::vector<double>& phases,
                     TargetSums& sums) {
  const int maxH = setup.maxH;
  const std::size_t rows = static_cast<std::size_t>(maxH) + 1;
  phases.resize(6 * rows);
  double* cosX = phases.data();
  double* sinX = cosX + rows;
  double* cosY = sinX + rows;
  double* sinY = cosY + rows;
  double* cosZ = sinY + rows;
  double* sinZ = cosZ + rows;
  fillPhases(reduced(sources.x[target], setup.invBoxSize), maxH, cosX, sinX, 1);
  fillPhases(reduced(sources.y[target], setup.invBoxSize), maxH, cosY, sinY, 1);
  fillPhases(reduced(sources.z[target], setup.invBoxSize), maxH, cosZ, sinZ, 1);
  double psi = 0, gx = 0, gy = 0, gz = 0;
  for (std::size_t w = 0; w < setup.waves.size(); ++w) {
    const WaveVector& wave = setup.waves[w];
    const double cy = cosY[std::abs(wave.hy)], sy = (wave.hy < 0 ? -1.0 : 1.0) * sinY[std::abs(wave.hy)];
    const double cz = cosZ[std::abs(wave.hz)], sz = (wave.hz < 0 ? -1.0 : 1.0) * sinZ[std::abs(wave.hz)];
    const double cxy = cosX[wave.hx] * cy - sinX[wave.hx] * sy;
    const double sxy = sinX[wave.hx] * cy + cosX[wave.hx] * sy;
    const double c = cxy * cz - sxy * sz;  // cos(k.x_i)
    const double s = sxy * cz + cxy * sz;  // sin(k.x_i)
    psi += wave.weight * (c * reS[w] + s * imS[w]);
    const double sine = wave.weight * (s * reS[w] - c * imS[w]);  // w_k sum_j m_j sin(k.(x_i - x_j))
    gx -= sine * wave.kx;
    gy -= sine * wave.ky;
    gz -= sine * wave.kz;
  }
  sums.psi += psi;
  sums.gx += gx;
  sums.gy += gy;
  sums.gz += gz;
}

void evaluate(const SourceView& sources, const GravityParams& gravity, const EwaldParams& params,
              const std::uint32_t* targets, std::size_t numTargets, const ForceView& out) {
  gravity.validate();
  const EwaldSetup setup = detail::makeEwaldSetup(params);
  MATCHA_ASSERT(out.count == numTargets, "evaluateEwald: the output size differs from the number of targets");
  for (std::size_t k = 0; k < numTargets; ++k) {
    const std::uint32_t i = targets == nullptr ? static_cast<std::uint32_t>(k) : targets[k];
    if (i >= sources.count) {
      throw InputError("evaluateEwald: target " + std::to_string(i) + " is not one of the " +
                       std::to_string(sources.count) + " sources");
    }
  }
  std::vector<double> reS, imS;
  computeStructureFactors(sources, setup, reS, imS);
  const double totalMass = std::accumulate(sources.mass, sources.mass + sources.count, 0.0);
  const double G = gravity.G;
  const double eps2 = gravity.eps2();
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, numTargets, 4),
                    [&](const tbb::blocked_range<std::size_t>& range) {
                      std::vector<double> phases;
                      for (std::size_t k = range.begin(); k != range.end(); ++k) {
                        const std::uint32_t i = targets == nullptr ? static_cast<std::uint32_t>(k) : targets[k];
                        TargetSums sums;
                        addRealSpace(sources, setup, eps2, i, sums);
                        addFourierSpace(sources, setup, reS, imS, i, phases, sums);
                        sums.psi += setup.backgroundPsi * totalMass;
                        out.ax[k] = G * (sums.gx + sums.nearAx);
                        out.ay[k] = G * (sums.gy + sums.nearAy);
                        out.az[k] = G * (sums.gz + sums.nearAz);
                        if (out.pot != nullptr) out.pot[k] = G * (sums.nearPot - sums.psi);
                      }
                    });
}

}  // namespace

void EwaldParams::validate() const {
  requireFinite(boxSize, "box size");
  requireFinite(alphaTimesBox, "Ewald alpha L");
  requireFinite(cutoff, "Ewald cutoff");
  if (!(boxSize > 0)) throw InputError("box size must be > 0, got " + std::to_string(boxSize));
  if (!(alphaTimesBox >= 1 && alphaTimesBox <= 32)) {
    throw InputError("Ewald alpha L must be in [1, 32], got " + std::to_string(alphaTimesBox));
  }
  if (!(cutoff >= 3 && cutoff <= 8)) throw InputError("Ewald cutoff must be in [3, 8], got " + std::to_string(cutoff));
}

EwaldTerms ewaldTerms(const EwaldParams& params) {
  const EwaldSetup setup = detail::makeEwaldSetup(params);
  EwaldTerms terms;
  terms.realCutoff = std::sqrt(setup.realCutoff2);
  terms.waveCutoff = 2.0 * setup.alpha * params.cutoff;
  terms.numImageShifts = setup.shifts.size();
  terms.numWaveVectors = setup.waves.size();
  return terms;
}

void evaluateEwald(const SourceView& sources, const GravityParams& gravity, const EwaldParams& ewald,
                   const ForceView& out) {
  evaluate(sources, gravity, ewald, nullptr, sources.count, out);
}

void evaluateEwald(const SourceView& sources, const GravityParams& gravity, const EwaldParams& ewald,
                   std::span<const std::uint32_t> targets, const ForceView& out) {
  evaluate(sources, gravity, ewald, targets.data(), targets.size(), out);
}

}  // namespace matcha::gpu
