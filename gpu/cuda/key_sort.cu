// SPDX-License-Identifier: MIT
#include <algorithm>
#include <cub/device/device_radix_sort.cuh>
#include <limits>

#include "cuda_check.cuh"
#include "key_sort.cuh"
#include "matcha/core/errors.hpp"

namespace matcha::gpu::detail {

namespace {

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
  // Keys, sorted keys and order in page-locked memory (NearFieldEngine::transferMemory: the periodic tree solver's)
  // go straight over the bus, leaving the host's cores free; others through the staging buffers, on all cores.
  const std::size_t keyBytes = n * sizeof(std::uint64_t), orderBytes = n * sizeof(std::uint32_t);
  bool direct = false;
  if (isPageLocked(keys.data(), keyBytes)) {
    MATCHA_CUDA_CHECK(cudaMemcpyAsync(keys_[0].data(), keys.data(), keyBytes, cudaMemcpyHostToDevice, stream_));
    direct = true;
  } else {
    staging_.upload(keys_[0].data(), keys.data(), keyBytes, stream_);
  }
  identityKernel<<<static_cast<unsigned>(std::min<std::size_t>((n + 255) / 256, 4096)), 256, 0, stream_>>>(
      indices_[0].data(), static_cast<std::uint32_t>(n));
  MATCHA_CUDA_CHECK_LAUNCH("identityKernel", false);
  // A stable sort of the keys with their indices: equal keys keep the order of their indices, as KeySorter's ties.
  MATCHA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(scratch_.data(), scratchBytes, keyBuffers, indexBuffers, count, 0,
                                                    keyBits, stream_));
  if (isPageLocked(sorted.data(), keyBytes)) {
    MATCHA_CUDA_CHECK(cudaMemcpyAsync(sorted.data(), keyBuffers.Current(), keyBytes, cudaMemcpyDeviceToHost, stream_));
    direct = true;
  } else {
    staging_.download(sorted.data(), keyBuffers.Current(), keyBytes, stream_);
  }
  if (isPageLocked(order.data(), orderBytes)) {
    MATCHA_CUDA_CHECK(
        cudaMemcpyAsync(order.data(), indexBuffers.Current(), orderBytes, cudaMemcpyDeviceToHost, stream_));
    direct = true;
  } else {
    staging_.download(order.data(), indexBuffers.Current(), orderBytes, stream_);
  }
  if (direct) MATCHA_CUDA_CHECK(cudaStreamSynchronize(stream_));  // synchronous, as the staged copies are
}

}  // namespace matcha::gpu::detail
