// SPDX-License-Identifier: MIT
// Instantiations of the direct (all-pairs) kernel: the shapes the engine and the benchmarks can choose from.
#include <array>

#include "kernel_variants.cuh"

namespace matcha::gpu::detail {

__global__ void combineSplitsKernel(const double4_16a* partial, std::uint32_t numSplits, std::uint32_t numBodies,
                                    double G, DeviceForces out) {
  const std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= numBodies) return;
  double sum[4] = {0.0, 0.0, 0.0, 0.0};
  for (std::uint32_t s = 0; s < numSplits; ++s) {
    const double4_16a p = partial[std::size_t(s) * numBodies + i];
    sum[0] += p.x;
    sum[1] += p.y;
    sum[2] += p.z;
    sum[3] += p.w;
  }
  out.ax[i] = G * sum[0];
  out.ay[i] = G * sum[1];
  out.az[i] = G * sum[2];
  out.pot[i] = G * sum[3];
}

void launchCombineSplits(const double4_16a* partial, std::uint32_t numSplits, std::uint32_t numBodies, double G,
                         DeviceForces out, cudaStream_t stream) {
  constexpr unsigned kThreads = 256;
  combineSplitsKernel<<<(numBodies + kThreads - 1) / kThreads, kThreads, 0, stream>>>(partial, numSplits, numBodies, G,
                                                                                      out);
}

namespace {

template <class Real, int kThreads, int kBodiesPerThread, int kThreadsPerBody, int kTile>
DirectVariant<Real> makeDirectVariant() {
  using Shape = DirectShape<kThreads, kBodiesPerThread, kThreadsPerBody, kTile>;
  return {kThreads,
          kBodiesPerThread,
          kThreadsPerBody,
          kTile,
          Shape::rows,
          reinterpret_cast<const void*>(&directKernel<Real, Shape>),
          [](dim3 grid, cudaStream_t stream, const DirectArgs<Real>& args) {
            directKernel<Real, Shape><<<grid, kThreads, 0, stream>>>(args);
          }};
}

}  // namespace

template <>
std::span<const DirectVariant<float>> directVariants<float>() {
  // p in {64, 128, 256} x i-bodies per thread in {1, 2, 4, 8} at q = 1 (large N), and q in {2, 4, 8} for small N.
  static const std::array variants{
      makeDirectVariant<float, 128, 1, 1, 64>(),  makeDirectVariant<float, 128, 2, 1, 64>(),
      makeDirectVariant<float, 128, 4, 1, 64>(),  makeDirectVariant<float, 128, 8, 1, 64>(),
      makeDirectVariant<float, 128, 1, 1, 128>(), makeDirectVariant<float, 128, 2, 1, 128>(),
      makeDirectVariant<float, 128, 4, 1, 128>(), makeDirectVariant<float, 128, 8, 1, 128>(),
      makeDirectVariant<float, 128, 1, 1, 256>(), makeDirectVariant<float, 128, 2, 1, 256>(),
      makeDirectVariant<float, 128, 4, 1, 256>(), makeDirectVariant<float, 128, 8, 1, 256>(),
      makeDirectVariant<float, 256, 2, 1, 256>(), makeDirectVariant<float, 256, 4, 1, 256>(),
      makeDirectVariant<float, 128, 1, 2, 128>(), makeDirectVariant<float, 128, 2, 2, 128>(),
      makeDirectVariant<float, 128, 4, 2, 128>(), makeDirectVariant<float, 128, 1, 4, 128>(),
      makeDirectVariant<float, 128, 2, 4, 128>(), makeDirectVariant<float, 128, 4, 4, 128>(),
      makeDirectVariant<float, 128, 1, 8, 128>(), makeDirectVariant<float, 128, 2, 8, 128>(),
      makeDirectVariant<float, 128, 4, 8, 128>(),
  };
  return variants;
}

template <>
std::span<const DirectVariant<double>> directVariants<double>() {
  static const std::array variants{
      makeDirectVariant<double, 128, 1, 1, 128>(),
      makeDirectVariant<double, 128, 2, 1, 128>(),
      makeDirectVariant<double, 128, 4, 1, 128>(),
      makeDirectVariant<double, 128, 2, 1, 64>(),
  };
  return variants;
}

}  // namespace matcha::gpu::detail
