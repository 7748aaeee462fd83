// SPDX-License-Identifier: MIT
// Ewald summation in double on the GPU (matcha/gpu/ewald.hpp: evaluateEwaldOnGpu): the CPU reference's sums
// (gpu/src/ewald.cpp) for large N. Three kernels, each sum in a fixed order so that a call's bits do not depend on
// the scheduling:
//  1. the structure factors S(k) = sum_j m_j exp(i k.x_j): a thread per wave vector and a block row per chunk of
//     sources (the per-axis phases exp(2 pi i h u) from sincospi, combined as the CPU combines its tables), written as
//     partial sums per chunk;
//  2. the partial sums added over the chunks, in chunk order;
//  3. a block per target: the real-space sum over every source (detail::addRealSpaceSource, the CPU's own function)
//     and the Fourier sum over the wave vectors, each thread over a strided share, then a tree reduction in shared
//     memory.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "cuda_check.cuh"
#include "device_memory.cuh"
#include "matcha/core/errors.hpp"
#include "matcha/gpu/detail/cuda_bridge.hpp"
#include "matcha/gpu/detail/ewald_terms.hpp"
#include "matcha/gpu/ewald.hpp"

namespace matcha::gpu {

namespace {

using detail::DeviceBuffer;
using detail::ImageShift;
using detail::TargetSums;
using detail::WaveVector;

constexpr int kWaveThreads = 128;    ///< wave vectors per block of the structure factors (and sources per tile)
constexpr int kTargetThreads = 256;  ///< threads per target
constexpr int kNumSums = 8;          ///< the doubles of a TargetSums
/// |h| < alpha L X / pi <= 32 x 8 / pi (EwaldParams::validate): at most 81 per axis.
constexpr int kMaxPhaseRows = 82;

__device__ double reducedCoordinate(double x, double invL) { return x * invL - floor(x * invL); }

/// exp(i k.x) for one wave vector from a body's reduced coordinates, combined from the three axes' phases as the CPU
/// combines its tables: exp(-i theta) = conj(exp(i theta)) for negative h.
__device__ void wavePhase(const WaveVector& wave, double ux, double uy, double uz, double& c, double& s) {
  double cx, sx, cy, sy, cz, sz;
  sincospi(2.0 * wave.hx * ux, &sx, &cx);
  sincospi(2.0 * abs(wave.hy) * uy, &sy, &cy);
  sincospi(2.0 * abs(wave.hz) * uz, &sz, &cz);
  if (wave.hy < 0) sy = -sy;
  if (wave.hz < 0) sz = -sz;
  const double cxy = cx * cy - sx * sy;
  const double sxy = sx * cy + cx * sy;
  c = cxy * cz - sxy * sz;
  s = sxy * cz + cxy * sz;
}

__global__ void __launch_bounds__(kWaveThreads)
    structureFactorPartialsKernel(const double* x, const double* y, const double* z, const double* mass,
                                  std::uint64_t numSources, std::uint64_t chunkSize, double invL,
                                  const WaveVector* waves, std::uint32_t numWaves, double* partialRe,
                                  double* partialIm) {
  __shared__ double tile[4][kWaveThreads];
  const std::uint32_t w = blockIdx.x * kWaveThreads + threadIdx.x;
  const std::uint64_t first = std::uint64_t(blockIdx.y) * chunkSize;
  const std::uint64_t last = first + chunkSize < numSources ? first + chunkSize : numSources;
  WaveVector wave{};
  if (w < numWaves) wave = waves[w];
  double re = 0.0, im = 0.0;
  for (std::uint64_t start = first; start < last; start += kWaveThreads) {
    const std::uint64_t j = start + threadIdx.x;
    __syncthreads();
    if (j < last) {
      tile[0][threadIdx.x] = reducedCoordinate(x[j], invL);
      tile[1][threadIdx.x] = reducedCoordinate(y[j], invL);
      tile[2][threadIdx.x] = reducedCoordinate(z[j], invL);
      tile[3][threadIdx.x] = mass[j];
    }
    __syncthreads();
    const int count = last - start < kWaveThreads ? static_cast<int>(last - start) : kWaveThreads;
    if (w < numWaves) {
      for (int k = 0; k < count; ++k) {
        double c, s;
        wavePhase(wave, tile[0][k], tile[1][k], tile[2][k], c, s);
        re += tile[3][k] * c;
        im += tile[3][k] * s;
      }
    }
  }
  if (w < numWaves) {
    partialRe[std::uint64_t(blockIdx.y) * numWaves + w] = re;
    partialIm[std::uint64_t(blockIdx.y) * numWaves + w] = im;
  }
}

__global__ void sumPartialsKernel(const double* partialRe, const double* partialIm, std::uint32_t numWaves,
                                  std::uint32_t numChunks, double* reS, double* imS) {
  for (std::uint32_t w = blockIdx.x * blockDim.x + threadIdx.x; w < numWaves; w += gridDim.x * blockDim.x) {
    double re = 0.0, im = 0.0;
    for (std::uint32_t c = 0; c < numChunks; ++c) {
      re += partialRe[std::uint64_t(c) * numWaves + w];
      im += partialIm[std::uint64_t(c) * numWaves + w];
    }
    reS[w] = re;
    imS[w] = im;
  }
}

struct TargetArgs {
  const double *x, *y, *z, *mass;
  std::uint64_t numSources;
  const std::uint32_t* targets;
  std::uint32_t numTargets;
  double boxSize, invBoxSize, alpha, realCutoff2, eps2;
  const ImageShift* shifts;
  std::uint32_t numShifts;
  const WaveVector* waves;
  std::uint32_t numWaves;
  int maxH;
  const double *reS, *imS;
  double* sums;  ///< kNumSums per target: gx, gy, gz, psi, nearAx, nearAy, nearAz, nearPot
};

__global__ void __launch_bounds__(kTargetThreads) ewaldTargetsKernel(const TargetArgs args) {
  __shared__ double phases[6][kMaxPhaseRows];  // cos x, sin x, cos y, sin y, cos z, sin z of the target, per h
  __shared__ double reduction[kNumSums][kTargetThreads];
  const unsigned t = threadIdx.x;
  for (std::uint32_t k = blockIdx.x; k < args.numTargets; k += gridDim.x) {
    const std::uint32_t i = args.targets[k];
    const double xi = args.x[i], yi = args.y[i], zi = args.z[i];
    TargetSums sums;
    const double L = args.boxSize, invL = args.invBoxSize;
    for (std::uint64_t j = t; j < args.numSources; j += kTargetThreads) {
      double rx = xi - args.x[j], ry = yi - args.y[j], rz = zi - args.z[j];
      rx -= L * nearbyint(rx * invL);
      ry -= L * nearbyint(ry * invL);
      rz -= L * nearbyint(rz * invL);
      detail::addRealSpaceSource(rx, ry, rz, args.mass[j], j == i, args.alpha, args.realCutoff2, args.eps2, args.shifts,
                                 args.numShifts, sums);
    }
    __syncthreads();  // the last target's phases are read
    if (t <= static_cast<unsigned>(args.maxH)) {
      sincospi(2.0 * t * reducedCoordinate(xi, invL), &phases[1][t], &phases[0][t]);
      sincospi(2.0 * t * reducedCoordinate(yi, invL), &phases[3][t], &phases[2][t]);
      sincospi(2.0 * t * reducedCoordinate(zi, invL), &phases[5][t], &phases[4][t]);
    }
    __syncthreads();
    // psi += w_k Re(exp(i k.x_i) conj S(k)), grad psi -= w_k k Im(exp(i k.x_i) conj S(k)).
    for (std::uint32_t w = t; w < args.numWaves; w += kTargetThreads) {
      const WaveVector wave = args.waves[w];
      const int ay = abs(wave.hy), az = abs(wave.hz);
      const double cy = phases[2][ay], sy = (wave.hy < 0 ? -1.0 : 1.0) * phases[3][ay];
      const double cz = phases[4][az], sz = (wave.hz < 0 ? -1.0 : 1.0) * phases[5][az];
      const double cxy = phases[0][wave.hx] * cy - phases[1][wave.hx] * sy;
      const double sxy = phases[1][wave.hx] * cy + phases[0][wave.hx] * sy;
      const double c = cxy * cz - sxy * sz;
      const double s = sxy * cz + cxy * sz;
      sums.psi += wave.weight * (c * args.reS[w] + s * args.imS[w]);
      const double sine = wave.weight * (s * args.reS[w] - c * args.imS[w]);
      sums.gx -= sine * wave.kx;
      sums.gy -= sine * wave.ky;
      sums.gz -= sine * wave.kz;
    }
    const double mine[kNumSums] = {sums.gx,     sums.gy,     sums.gz,     sums.psi,
                                   sums.nearAx, sums.nearAy, sums.nearAz, sums.nearPot};
    for (int c = 0; c < kNumSums; ++c) reduction[c][t] = mine[c];
    for (unsigned half = kTargetThreads / 2; half > 0; half /= 2) {
      __syncthreads();
      if (t < half) {
        for (int c = 0; c < kNumSums; ++c) reduction[c][t] += reduction[c][t + half];
      }
    }
    __syncthreads();
    if (t < kNumSums) args.sums[std::uint64_t(k) * kNumSums + t] = reduction[t][0];
  }
}

template <class T>
void upload(DeviceBuffer<T>& buffer, const T* data, std::size_t count) {
  buffer.reserve(std::max<std::size_t>(count, 1));
  if (count > 0) MATCHA_CUDA_CHECK(cudaMemcpy(buffer.data(), data, count * sizeof(T), cudaMemcpyHostToDevice));
}

}  // namespace

void evaluateEwaldOnGpu(const SourceView& sources, const GravityParams& gravity, const EwaldParams& ewald,
                        std::span<const std::uint32_t> targets, const ForceView& out) {
  gravity.validate();
  const detail::EwaldSetup setup = detail::makeEwaldSetup(ewald);
  MATCHA_ASSERT(out.count == targets.size(), "evaluateEwaldOnGpu: the output size differs from the number of targets");
  for (const std::uint32_t i : targets) {
    if (i >= sources.count) {
      throw InputError("evaluateEwaldOnGpu: target " + std::to_string(i) + " is not one of the " +
                       std::to_string(sources.count) + " sources");
    }
  }
  const CudaDeviceInfo device = detail::queryCudaDeviceImpl();
  if (!device.available)
    throw InputError("Ewald summation on the GPU: no usable CUDA device (" + device.description + ")");
  if (targets.empty()) return;
  MATCHA_ASSERT(setup.maxH < kMaxPhaseRows,
                "evaluateEwaldOnGpu: more wave numbers per axis than the phase table holds");

  const std::uint64_t n = sources.count;
  const auto numWaves = static_cast<std::uint32_t>(setup.waves.size());
  DeviceBuffer<double> x, y, z, mass;
  upload(x, sources.x, n);
  upload(y, sources.y, n);
  upload(z, sources.z, n);
  upload(mass, sources.mass, n);
  DeviceBuffer<WaveVector> waves;
  DeviceBuffer<ImageShift> shifts;
  upload(waves, setup.waves.data(), setup.waves.size());
  upload(shifts, setup.shifts.data(), setup.shifts.size());
  DeviceBuffer<std::uint32_t> targetIndices;
  upload(targetIndices, targets.data(), targets.size());

  // Chunks of sources: enough block rows to fill the GPU when there are few wave vectors, each chunk long enough
  // that its partial sums stay a small part of the work (at most 1024 chunks: 1024 x 25,270 x 16 bytes = 414 MB).
  constexpr std::uint64_t kMinChunk = 4096;
  constexpr std::uint64_t kMaxChunks = 1024;
  const std::uint64_t chunkSize = std::max(kMinChunk, (n + kMaxChunks - 1) / kMaxChunks);
  const auto numChunks = static_cast<std::uint32_t>(std::max<std::uint64_t>(1, (n + chunkSize - 1) / chunkSize));
  DeviceBuffer<double> partialRe, partialIm, reS, imS;
  partialRe.reserve(std::uint64_t(numChunks) * numWaves + 1);
  partialIm.reserve(std::uint64_t(numChunks) * numWaves + 1);
  reS.reserve(numWaves + 1);
  imS.reserve(numWaves + 1);
  if (numWaves > 0) {
    const dim3 grid((numWaves + kWaveThreads - 1) / kWaveThreads, numChunks);
    structureFactorPartialsKernel<<<grid, kWaveThreads>>>(x.data(), y.data(), z.data(), mass.data(), n, chunkSize,
                                                          setup.invBoxSize, waves.data(), numWaves, partialRe.data(),
                                                          partialIm.data());
    MATCHA_CUDA_CHECK_LAUNCH("structureFactorPartialsKernel", false);
    sumPartialsKernel<<<(numWaves + 255) / 256, 256>>>(partialRe.data(), partialIm.data(), numWaves, numChunks,
                                                       reS.data(), imS.data());
    MATCHA_CUDA_CHECK_LAUNCH("sumPartialsKernel", false);
  }

  DeviceBuffer<double> sums;
  sums.reserve(targets.size() * kNumSums);
  TargetArgs args{x.data(),
                  y.data(),
                  z.data(),
                  mass.data(),
                  n,
                  targetIndices.data(),
                  static_cast<std::uint32_t>(targets.size()),
                  setup.boxSize,
                  setup.invBoxSize,
                  setup.alpha,
                  setup.realCutoff2,
                  gravity.eps2(),
                  shifts.data(),
                  static_cast<std::uint32_t>(setup.shifts.size()),
                  waves.data(),
                  numWaves,
                  setup.maxH,
                  reS.data(),
                  imS.data(),
                  sums.data()};
  const auto numBlocks = static_cast<unsigned>(std::min<std::size_t>(targets.size(), 1u << 20));
  ewaldTargetsKernel<<<numBlocks, kTargetThreads>>>(args);
  MATCHA_CUDA_CHECK_LAUNCH("ewaldTargetsKernel", false);
  std::vector<double> hostSums(targets.size() * kNumSums);
  MATCHA_CUDA_CHECK(cudaMemcpy(hostSums.data(), sums.data(), hostSums.size() * sizeof(double), cudaMemcpyDeviceToHost));

  // As the CPU: the background's constant from the total mass summed in order, then G.
  const double totalMass = std::accumulate(sources.mass, sources.mass + n, 0.0);
  const double G = gravity.G;
  for (std::size_t k = 0; k < targets.size(); ++k) {
    const double* s = &hostSums[k * kNumSums];
    out.ax[k] = G * (s[0] + s[4]);
    out.ay[k] = G * (s[1] + s[5]);
    out.az[k] = G * (s[2] + s[6]);
    if (out.pot != nullptr) out.pot[k] = G * (s[7] - (s[3] + setup.backgroundPsi * totalMass));
  }
}

}  // namespace matcha::gpu
