// SPDX-License-Identifier: MIT
// The bare tiled all-pairs loop (bare_direct_loop.hpp): the measuring stick for the engine's direct kernel.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <vector>

#include "cuda_check.cuh"
#include "device_memory.cuh"
#include "matcha/core/errors.hpp"
#include "matcha/core/pair_interaction.hpp"
#include "matcha/gpu/bare_direct_loop.hpp"
#include "nbody_kernels.cuh"

namespace matcha::gpu {
namespace detail {
namespace {

/// Block (x, y): i-bodies [x * kThreads * kBodies, + kThreads * kBodies) against tiles [y * tilesPerSplit, + tiles).
/// `sums` (4 floats per body, zeroed by the caller) receives each split's float sums by atomic adds.
template <int kThreads, int kBodies, int kTile, bool kPotential>
__global__ void __launch_bounds__(kThreads, 1)
    bareDirectKernel(const float4* __restrict__ positions, int numTiles, int tilesPerSplit, float eps2, float* sums) {
  static_assert(kTile % kThreads == 0, "each thread stages whole sources");
  // Unroll depths of the fastest bare loops in a sweep on an H100 (I8: 4, I2 and I4: 8). The launch bound's explicit
  // 1 block per SM matters: without it ptxas aims at a higher occupancy (71 instead of ~119 registers for I8, 40
  // instead of 56 for I2), and those builds ran 2-7% slower (H100, N = 2^20).
  constexpr int kUnroll = kBodies >= 8 ? 4 : 8;
  __shared__ float4 tile[kTile];
  const int firstRow = blockIdx.x * kThreads * kBodies;
  float xi[kBodies], yi[kBodies], zi[kBodies];
#pragma unroll
  for (int k = 0; k < kBodies; ++k) {
    const float4 body = positions[firstRow + threadIdx.x + k * kThreads];
    xi[k] = body.x;
    yi[k] = body.y;
    zi[k] = body.z;
  }
  float ax[kBodies], ay[kBodies], az[kBodies], pot[kBodies];
#pragma unroll
  for (int k = 0; k < kBodies; ++k) ax[k] = ay[k] = az[k] = pot[k] = 0.0f;
  const int firstTile = blockIdx.y * tilesPerSplit;
  const int lastTile = min(numTiles, firstTile + tilesPerSplit);
  for (int t = firstTile; t < lastTile; ++t) {
    __syncthreads();  // everyone is done reading the previous tile
#pragma unroll
    for (int l = 0; l < kTile / kThreads; ++l) {
      const int slot = threadIdx.x + l * kThreads;
      tile[slot] = positions[t * kTile + slot];
    }
    __syncthreads();
#pragma unroll kUnroll
    for (int j = 0; j < kTile; ++j) {
      const float4 source = tile[j];
#pragma unroll
      for (int k = 0; k < kBodies; ++k) {
        accumulatePairInteractionUnchecked<float>(source.x - xi[k], source.y - yi[k], source.z - zi[k], source.w, eps2,
                                                  ax[k], ay[k], az[k], pot[k]);
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kBodies; ++k) {
    float* out = sums + 4 * std::size_t(firstRow + threadIdx.x + k * kThreads);
    atomicAdd(out + 0, ax[k]);
    atomicAdd(out + 1, ay[k]);
    atomicAdd(out + 2, az[k]);
    if constexpr (kPotential) atomicAdd(out + 3, pot[k]);
  }
}

struct BareVariant {
  BareLoopShape shape;
  bool potential;
  const void* kernel;  ///< for the occupancy query
  void (*launch)(dim3 grid, cudaStream_t stream, const float4* positions, std::uint32_t numTiles,
                 std::uint32_t tilesPerSplit, float eps2, float* sums);
};

template <int kThreads, int kBodies, int kTile, bool kPotential>
BareVariant makeBareVariant() {
  return {{kThreads, kBodies, kTile},
          kPotential,
          reinterpret_cast<const void*>(&bareDirectKernel<kThreads, kBodies, kTile, kPotential>),
          [](dim3 grid, cudaStream_t stream, const float4* positions, std::uint32_t numTiles,
             std::uint32_t tilesPerSplit, float eps2, float* sums) {
            bareDirectKernel<kThreads, kBodies, kTile, kPotential>
                <<<grid, kThreads, 0, stream>>>(positions, int(numTiles), int(tilesPerSplit), eps2, sums);
          }};
}

/// The four fastest shapes of a sweep of 20 on an H100 (T 128-512, I 1-16, p 128-512, unroll 1-16), each with and
/// without the potential.
const std::vector<BareVariant>& bareVariants() {
  static const std::vector<BareVariant> variants = {
      makeBareVariant<128, 2, 256, true>(), makeBareVariant<128, 2, 256, false>(),
      makeBareVariant<128, 4, 256, true>(), makeBareVariant<128, 4, 256, false>(),
      makeBareVariant<128, 8, 256, true>(), makeBareVariant<128, 8, 256, false>(),
      makeBareVariant<256, 4, 256, true>(), makeBareVariant<256, 4, 256, false>(),
  };
  return variants;
}

}  // namespace
}  // namespace detail

std::string BareLoopShape::label() const {
  char text[48];
  std::snprintf(text, sizeof text, "T%u/I%u/p%u", threadsPerBlock, bodiesPerThread, tileSize);
  return text;
}

struct BareDirectLoop::Impl {
  explicit Impl(int device) {
    MATCHA_CUDA_CHECK(cudaSetDevice(device));
    MATCHA_CUDA_CHECK(cudaDeviceGetAttribute(&numSMs, cudaDevAttrMultiProcessorCount, device));
  }
  int numSMs = 0;
  detail::CudaStream stream;
  detail::CudaEvent start, stop;
  detail::DeviceBuffer<float4> positions;
  detail::DeviceBuffer<float> sums;
  std::vector<float4> hostPositions;
  std::vector<float> hostSums;
};

BareDirectLoop::BareDirectLoop(int device) : impl_(std::make_unique<Impl>(device)) {}
BareDirectLoop::~BareDirectLoop() = default;

std::vector<BareLoopShape> BareDirectLoop::supportedShapes() {
  std::vector<BareLoopShape> shapes;
  for (const auto& variant : detail::bareVariants()) {
    if (variant.potential) shapes.push_back(variant.shape);
  }
  return shapes;
}

namespace {

/// j-range splits: enough blocks for at least 32 rounds of resident blocks per SM (the last, partial round then
/// costs at most ~3%), and, where one exists nearby, a count that gives every SM the same number of blocks.
std::uint32_t chooseBareSplits(std::uint32_t rowBlocks, std::uint32_t numTiles, int numSMs, int blocksPerSM) {
  const std::uint64_t capacity = std::uint64_t(numSMs) * std::uint64_t(std::max(1, blocksPerSM));
  const std::uint64_t atLeast = std::max<std::uint64_t>(1, (32 * capacity + rowBlocks - 1) / rowBlocks);
  std::uint64_t splits = atLeast;
  for (std::uint64_t s = atLeast; s < atLeast + std::uint64_t(numSMs); ++s) {
    if ((std::uint64_t(rowBlocks) * s) % std::uint64_t(numSMs) == 0) {
      splits = s;
      break;
    }
  }
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(splits, numTiles));
}

}  // namespace

BareLoopStats BareDirectLoop::evaluate(const BareLoopShape& shape, const SourceView& sources,
                                       const GravityParams& gravity, const ForceView& out) {
  gravity.validate();
  if (!(gravity.eps > 0.0)) {
    throw InputError("the bare direct loop keeps the self pair in its sums, so it needs a softening eps > 0");
  }
  if (out.count != sources.count) throw InputError("bare direct loop: output and source counts differ");
  const bool potential = out.pot != nullptr;
  const auto& variants = detail::bareVariants();
  const auto variant = std::find_if(variants.begin(), variants.end(), [&](const detail::BareVariant& v) {
    return v.potential == potential && v.shape.threadsPerBlock == shape.threadsPerBlock &&
           v.shape.bodiesPerThread == shape.bodiesPerThread && v.shape.tileSize == shape.tileSize;
  });
  if (variant == variants.end()) throw InputError("bare direct loop: shape " + shape.label() + " is not compiled in");
  BareLoopStats stats;
  const std::size_t n = sources.count;
  if (n == 0) return stats;

  // Padded so that every block has whole rows and every tile whole sources.
  const std::size_t rows = std::size_t(shape.threadsPerBlock) * shape.bodiesPerThread;
  const std::size_t unit = std::lcm(rows, std::size_t(shape.tileSize));
  const std::size_t padded = (n + unit - 1) / unit * unit;
  if (padded >= (std::size_t{1} << 31)) throw InputError("bare direct loop: at most 2^31 bodies (int indices)");
  const auto rowBlocks = static_cast<std::uint32_t>(padded / rows);
  const auto numTiles = static_cast<std::uint32_t>(padded / shape.tileSize);

  // Float positions relative to the mean position (taken in double).
  double centre[3] = {0.0, 0.0, 0.0};
  for (std::size_t i = 0; i < n; ++i) {
    centre[0] += sources.x[i];
    centre[1] += sources.y[i];
    centre[2] += sources.z[i];
  }
  for (double& c : centre) c /= double(n);
  impl_->hostPositions.resize(padded);
  for (std::size_t i = 0; i < padded; ++i) {
    impl_->hostPositions[i] =
        i < n ? make_float4(static_cast<float>(sources.x[i] - centre[0]), static_cast<float>(sources.y[i] - centre[1]),
                            static_cast<float>(sources.z[i] - centre[2]), static_cast<float>(sources.mass[i]))
              : make_float4(detail::kPadCoordinate, detail::kPadCoordinate, detail::kPadCoordinate, 0.0f);
  }
  impl_->positions.reserve(padded);
  impl_->sums.reserve(4 * padded);
  cudaStream_t stream = impl_->stream.get();
  MATCHA_CUDA_CHECK(cudaMemcpyAsync(impl_->positions.data(), impl_->hostPositions.data(), padded * sizeof(float4),
                                    cudaMemcpyHostToDevice, stream));
  MATCHA_CUDA_CHECK(cudaMemsetAsync(impl_->sums.data(), 0, 4 * padded * sizeof(float), stream));

  int blocksPerSM = 0;
  MATCHA_CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocksPerSM, variant->kernel, int(shape.threadsPerBlock), 0));
  std::uint32_t splits = chooseBareSplits(rowBlocks, numTiles, impl_->numSMs, blocksPerSM);
  const std::uint32_t tilesPerSplit = (numTiles + splits - 1) / splits;
  splits = (numTiles + tilesPerSplit - 1) / tilesPerSplit;

  impl_->start.record(stream);
  variant->launch(dim3(rowBlocks, splits), stream, impl_->positions.data(), numTiles, tilesPerSplit,
                  static_cast<float>(gravity.eps2()), impl_->sums.data());
  MATCHA_CUDA_CHECK_LAUNCH("bareDirectKernel", false);
  impl_->stop.record(stream);
  impl_->hostSums.resize(4 * n);
  MATCHA_CUDA_CHECK(cudaMemcpyAsync(impl_->hostSums.data(), impl_->sums.data(), 4 * n * sizeof(float),
                                    cudaMemcpyDeviceToHost, stream));
  impl_->stream.synchronize();

  const double selfPotential = 1.0 / gravity.eps;  // per unit mass: the self pair's -m_i/eps, taken out here
  for (std::size_t i = 0; i < n; ++i) {
    out.ax[i] = gravity.G * double(impl_->hostSums[4 * i + 0]);
    out.ay[i] = gravity.G * double(impl_->hostSums[4 * i + 1]);
    out.az[i] = gravity.G * double(impl_->hostSums[4 * i + 2]);
    if (potential) out.pot[i] = gravity.G * (double(impl_->hostSums[4 * i + 3]) + sources.mass[i] * selfPotential);
  }
  stats.kernelMilliseconds = impl_->stop.millisecondsSince(impl_->start);
  stats.numSplits = splits;
  stats.interactions = std::uint64_t(n) * std::uint64_t(n);
  return stats;
}

}  // namespace matcha::gpu
