// SPDX-License-Identifier: MIT
#include <algorithm>
#include <cub/device/device_radix_sort.cuh>
#include <limits>

#include "cuda_check.cuh"
#include "key_sort.cuh"
#include "matcha/core/errors.hpp"
#include "matcha/gpu/detail/host_copy.hpp"

namespace matcha::gpu::detail {

namespace {

/// The staging pieces: large enough that a piece's DMA runs at the bus's speed, small enough that the copy of the last
/// one, which nothing overlaps, is short.
constexpr std::size_t kStagingPiece = std::size_t{8} << 20;

__global__ void identityKernel(std::uint32_t* indices, std::uint32_t n) {
  for (std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) indices[i] = i;
}

}  // namespace

DeviceKeySorter::DeviceKeySorter(int device) : device_(device) {
  MATCHA_CUDA_CHECK(cudaSetDevice(device_));
  int lowest = 0, highest = 0;
  MATCHA_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lowest, &highest));
  MATCHA_CUDA_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, highest));
}

DeviceKeySorter::~DeviceKeySorter() {
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

void DeviceKeySorter::upload(void* device, const void* host, std::size_t bytes) {
  auto* to = static_cast<char*>(device);
  const auto* from = static_cast<const char*>(host);
  for (std::size_t done = 0, piece = 0; done < bytes; done += kStagingPiece, ++piece) {
    const std::size_t b = piece % 2, size = std::min(kStagingPiece, bytes - done);
    stagingFree_[b].synchronize();  // its last DMA is done (a never-recorded event counts as done)
    parallelCopy(staging_[b].data(), from + done, size);
    MATCHA_CUDA_CHECK(cudaMemcpyAsync(to + done, staging_[b].data(), size, cudaMemcpyHostToDevice, stream_));
    stagingFree_[b].record(stream_);
  }
}

void DeviceKeySorter::download(void* host, const void* device, std::size_t bytes) {
  auto* to = static_cast<char*>(host);
  const auto* from = static_cast<const char*>(device);
  const std::size_t numPieces = (bytes + kStagingPiece - 1) / kStagingPiece;
  const auto copyOut = [&](std::size_t piece) {
    const std::size_t b = piece % 2, done = piece * kStagingPiece;
    stagingFree_[b].synchronize();  // the piece has landed
    parallelCopy(to + done, staging_[b].data(), std::min(kStagingPiece, bytes - done));
  };
  for (std::size_t piece = 0; piece < numPieces; ++piece) {
    const std::size_t b = piece % 2, done = piece * kStagingPiece;
    stagingFree_[b].synchronize();  // the DMA before through this buffer is done
    MATCHA_CUDA_CHECK(cudaMemcpyAsync(staging_[b].data(), from + done, std::min(kStagingPiece, bytes - done),
                                      cudaMemcpyDeviceToHost, stream_));
    stagingFree_[b].record(stream_);
    if (piece > 0) copyOut(piece - 1);
  }
  if (numPieces > 0) copyOut(numPieces - 1);
}

void DeviceKeySorter::sort(std::span<const std::uint64_t> keys, int keyBits, std::span<std::uint64_t> sorted,
                           std::span<std::uint32_t> order) {
  const std::size_t n = keys.size();
  MATCHA_ASSERT(sorted.size() == n && order.size() == n, "key sort outputs sized unlike the keys");
  MATCHA_ASSERT(n <= std::size_t{std::numeric_limits<int>::max()}, "too many keys for the device sort");
  MATCHA_ASSERT(keyBits >= 1 && keyBits <= 64, "key bits out of range");
  if (n == 0) return;
  const std::lock_guard<std::mutex> lock(mutex_);
  // The calling thread may be a background build's, whose current device is the runtime's default.
  MATCHA_CUDA_CHECK(cudaSetDevice(device_));
  for (auto& buffer : keys_) buffer.reserve(n);
  for (auto& buffer : indices_) buffer.reserve(n);
  // Double buffers: CUB ping-pongs between the two halves instead of allocating a copy of each in its scratch.
  cub::DoubleBuffer<std::uint64_t> keyBuffers(keys_[0].data(), keys_[1].data());
  cub::DoubleBuffer<std::uint32_t> indexBuffers(indices_[0].data(), indices_[1].data());
  const int count = static_cast<int>(n);
  std::size_t scratchBytes = 0;
  MATCHA_CUDA_CHECK(
      cub::DeviceRadixSort::SortPairs(nullptr, scratchBytes, keyBuffers, indexBuffers, count, 0, keyBits, stream_));
  scratch_.reserve(scratchBytes);
  for (auto& buffer : staging_) buffer.reserve(kStagingPiece);
  upload(keys_[0].data(), keys.data(), n * sizeof(std::uint64_t));
  identityKernel<<<static_cast<unsigned>(std::min<std::size_t>((n + 255) / 256, 4096)), 256, 0, stream_>>>(
      indices_[0].data(), static_cast<std::uint32_t>(n));
  MATCHA_CUDA_CHECK_LAUNCH("identityKernel", false);
  // A stable sort of the keys with their indices: equal keys keep the order of their indices, as KeySorter's ties.
  MATCHA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(scratch_.data(), scratchBytes, keyBuffers, indexBuffers, count, 0,
                                                    keyBits, stream_));
  download(sorted.data(), keyBuffers.Current(), n * sizeof(std::uint64_t));
  download(order.data(), indexBuffers.Current(), n * sizeof(std::uint32_t));
}

}  // namespace matcha::gpu::detail
