// SPDX-License-Identifier: MIT
// Instantiations of the direct (all-pairs) kernel: the shapes the engine and the benchmarks can choose from.
#include <algorithm>
#include <array>

#include "kernel_variants.cuh"

namespace matcha::gpu::detail {

__global__ void combineSplitsKernel(const double4_16a* partial, const float* partialMagnitude, std::uint32_t numSplits,
                                    std::uint32_t numBodies, double G, DeviceForces out,
                                    std::uint32_t* cancelledBodies) {
  allowDependentLaunch();
  waitForPreviousKernel();  // directKernel's partial sums
  const std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= numBodies) return;
  double sum[4] = {0.0, 0.0, 0.0, 0.0};
  double magnitude = 0.0;
  for (std::uint32_t s = 0; s < numSplits; ++s) {
    const double4_16a p = partial[std::size_t(s) * numBodies + i];
    sum[0] += p.x;
    sum[1] += p.y;
    sum[2] += p.z;
    sum[3] += p.w;
    if (partialMagnitude != nullptr) magnitude += partialMagnitude[std::size_t(s) * numBodies + i];
  }
  out.ax[i] = G * sum[0];
  out.ay[i] = G * sum[1];
  out.az[i] = G * sum[2];
  if (out.pot != nullptr) out.pot[i] = G * sum[3];
  if (partialMagnitude != nullptr && floatSumCancelled(sum[0], sum[1], sum[2], magnitude)) {
    appendToBodyList(cancelledBodies, i);
  }
}

__global__ void __launch_bounds__(kCancelledSumThreads)
    sumCancelledBodiesInDoubleKernel(DeviceSoA sources, std::uint32_t numBodies, const std::uint32_t* cancelledBodies,
                                     double eps2, double G, DeviceForces out) {
  __shared__ double warpSums[kCancelledSumThreads / 32][4];
  waitForPreviousKernel();  // the list, and the outputs this overwrites
  const std::uint32_t count = cancelledBodies[0];
  for (std::uint32_t entry = blockIdx.x; entry < count; entry += gridDim.x) {
    const std::uint32_t i = cancelledBodies[1 + entry];
    const double xi = sources.x[i], yi = sources.y[i], zi = sources.z[i];
    double sum[4] = {0.0, 0.0, 0.0, 0.0};
    for (std::uint32_t j = threadIdx.x; j < numBodies; j += blockDim.x) {
      accumulatePairInteraction<double>(sources.x[j] - xi, sources.y[j] - yi, sources.z[j] - zi, sources.mass[j], eps2,
                                        sum[0], sum[1], sum[2], sum[3]);
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
#pragma unroll
      for (int c = 0; c < 4; ++c) sum[c] += __shfl_xor_sync(0xffffffffu, sum[c], offset);
    }
    if (threadIdx.x % 32 == 0) {
#pragma unroll
      for (int c = 0; c < 4; ++c) warpSums[threadIdx.x / 32][c] = sum[c];
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      double total[4] = {0.0, 0.0, 0.0, 0.0};
      for (int w = 0; w < kCancelledSumThreads / 32; ++w) {
#pragma unroll
        for (int c = 0; c < 4; ++c) total[c] += warpSums[w][c];
      }
      out.ax[i] = G * total[0];
      out.ay[i] = G * total[1];
      out.az[i] = G * total[2];
      // Every source includes body i itself: its pair, counted when eps > 0, comes out once.
      if (out.pot != nullptr) out.pot[i] = G * (total[3] - selfPairPotential(sources.mass[i], eps2));
    }
    __syncthreads();  // warpSums is reused by the next entry
  }
}

__global__ void tileBoxesKernel(DeviceSoA sources, std::uint32_t numBodies, std::uint32_t tile, double* boxes) {
  allowDependentLaunch();
  const std::uint32_t lane = threadIdx.x % 32;
  const std::uint32_t numWarps = gridDim.x * (blockDim.x / 32);
  const std::uint32_t numTiles = (numBodies + tile - 1) / tile;
  for (std::uint32_t t = (blockIdx.x * blockDim.x + threadIdx.x) / 32; t < numTiles; t += numWarps) {
    double lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
    const std::uint32_t end = min(numBodies, (t + 1) * tile);
    for (std::uint32_t j = t * tile + lane; j < end; j += 32) {
      const double position[3] = {sources.x[j], sources.y[j], sources.z[j]};
#pragma unroll
      for (int d = 0; d < 3; ++d) {
        lo[d] = fmin(lo[d], position[d]);
        hi[d] = fmax(hi[d], position[d]);
      }
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
#pragma unroll
      for (int d = 0; d < 3; ++d) {
        lo[d] = fmin(lo[d], __shfl_xor_sync(0xffffffffu, lo[d], offset));
        hi[d] = fmax(hi[d], __shfl_xor_sync(0xffffffffu, hi[d], offset));
      }
    }
    if (lane < 6) {
      const double value = lane == 0   ? lo[0]
                           : lane == 1 ? lo[1]
                           : lane == 2 ? lo[2]
                           : lane == 3 ? hi[0]
                           : lane == 4 ? hi[1]
                                       : hi[2];
      boxes[6 * std::size_t(t) + lane] = value;
    }
  }
}

void launchTileBoxes(DeviceSoA sources, std::uint32_t numBodies, std::uint32_t tile, double* boxes,
                     cudaStream_t stream) {
  constexpr unsigned kThreads = 256;
  const std::uint32_t numTiles = (numBodies + tile - 1) / tile;
  const unsigned numBlocks = std::max(1u, std::min(65535u, (numTiles + kThreads / 32 - 1) / (kThreads / 32)));
  tileBoxesKernel<<<numBlocks, kThreads, 0, stream>>>(sources, numBodies, tile, boxes);
}

void launchCombineSplits(const double4_16a* partial, const float* partialMagnitude, std::uint32_t numSplits,
                         std::uint32_t numBodies, double G, DeviceForces out, std::uint32_t* cancelledBodies,
                         cudaStream_t stream) {
  constexpr unsigned kThreads = 256;
  launchDependent("combineSplitsKernel", combineSplitsKernel, (numBodies + kThreads - 1) / kThreads, kThreads, stream,
                  partial, partialMagnitude, numSplits, numBodies, G, out, cancelledBodies);
}

void launchSumCancelledBodiesInDouble(DeviceSoA sources, std::uint32_t numBodies, const std::uint32_t* cancelledBodies,
                                      double eps2, double G, DeviceForces out, int numSMs, cudaStream_t stream) {
  // The count lives on the device: blocks without a listed body return at once.
  const unsigned numBlocks = std::max(1, 2 * numSMs);
  launchDependent("sumCancelledBodiesInDoubleKernel", sumCancelledBodiesInDoubleKernel, numBlocks, kCancelledSumThreads,
                  stream, sources, numBodies, cancelledBodies, eps2, G, out);
}

namespace {

template <class Real, int kThreads, int kBodiesPerThread, int kThreadsPerBody, int kTile, bool kPotential>
DirectVariant<Real> makeDirectVariant() {
  using Shape = DirectShape<kThreads, kBodiesPerThread, kThreadsPerBody, kTile>;
  return {kThreads,
          kBodiesPerThread,
          kThreadsPerBody,
          kTile,
          Shape::rows,
          kPotential,
          reinterpret_cast<const void*>(&directKernel<Real, Shape, kPotential>),
          [](dim3 grid, cudaStream_t stream, const DirectArgs<Real>& args) {
            launchDependent("directKernel", directKernel<Real, Shape, kPotential>, grid, kThreads, stream, args);
          }};
}

/// A shape with and without the potential.
template <class Real, int kThreads, int kBodiesPerThread, int kThreadsPerBody, int kTile>
std::array<DirectVariant<Real>, 2> makeDirectVariants() {
  return {makeDirectVariant<Real, kThreads, kBodiesPerThread, kThreadsPerBody, kTile, true>(),
          makeDirectVariant<Real, kThreads, kBodiesPerThread, kThreadsPerBody, kTile, false>()};
}

}  // namespace

template <>
std::span<const DirectVariant<float>> directVariants<float>() {
  // p in {64, 128, 256} x i-bodies per thread in {1, 2, 4, 8} at q = 1 (large N), and q in {2, 4, 8} for small N.
  static const std::vector variants = joinVariantPairs<DirectVariant<float>>({
      makeDirectVariants<float, 128, 1, 1, 64>(),  makeDirectVariants<float, 128, 2, 1, 64>(),
      makeDirectVariants<float, 128, 4, 1, 64>(),  makeDirectVariants<float, 128, 8, 1, 64>(),
      makeDirectVariants<float, 128, 1, 1, 128>(), makeDirectVariants<float, 128, 2, 1, 128>(),
      makeDirectVariants<float, 128, 4, 1, 128>(), makeDirectVariants<float, 128, 8, 1, 128>(),
      makeDirectVariants<float, 128, 1, 1, 256>(), makeDirectVariants<float, 128, 2, 1, 256>(),
      makeDirectVariants<float, 128, 4, 1, 256>(), makeDirectVariants<float, 128, 8, 1, 256>(),
      makeDirectVariants<float, 256, 2, 1, 256>(), makeDirectVariants<float, 256, 4, 1, 256>(),
      makeDirectVariants<float, 128, 1, 2, 128>(), makeDirectVariants<float, 128, 2, 2, 128>(),
      makeDirectVariants<float, 128, 4, 2, 128>(), makeDirectVariants<float, 128, 1, 4, 128>(),
      makeDirectVariants<float, 128, 2, 4, 128>(), makeDirectVariants<float, 128, 4, 4, 128>(),
      makeDirectVariants<float, 128, 1, 8, 128>(), makeDirectVariants<float, 128, 2, 8, 128>(),
      makeDirectVariants<float, 128, 4, 8, 128>(),
  });
  return variants;
}

template <>
std::span<const DirectVariant<double>> directVariants<double>() {
  static const std::vector variants = joinVariantPairs<DirectVariant<double>>({
      makeDirectVariants<double, 128, 1, 1, 128>(),
      makeDirectVariants<double, 128, 2, 1, 128>(),
      makeDirectVariants<double, 128, 4, 1, 128>(),
      makeDirectVariants<double, 128, 2, 1, 64>(),
  });
  return variants;
}

}  // namespace matcha::gpu::detail
