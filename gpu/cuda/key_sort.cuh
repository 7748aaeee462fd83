// SPDX-License-Identifier: MIT
// The tree's space-filling-curve key sort on the device (NearFieldEngine::sortKeys): CUB's radix sort of (key, index)
// pairs on a stream of its own, so that a tree built on the CPU cores in the background can sort its keys while the
// engine's stream evaluates the current tree. Included only by .cu files.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <span>

#include "device_memory.cuh"
#include "staged_copy.cuh"

namespace matcha::gpu::detail {

class DeviceKeySorter {
 public:
  /// On `device`, which must be the calling thread's current device; the stream is created now (at the device's highest
  /// priority, so that the sort's blocks go ahead of a long group x list kernel's waiting blocks), the buffers at the
  /// first sort.
  explicit DeviceKeySorter(int device);
  ~DeviceKeySorter();
  DeviceKeySorter(const DeviceKeySorter&) = delete;
  DeviceKeySorter& operator=(const DeviceKeySorter&) = delete;

  /// As NearFieldEngine::sortKeys. Thread-safe: calls are serialised, and touch nothing but this object's stream and
  /// buffers (a buffer's growth, at the first sorts, frees and allocates device memory, which waits for the whole
  /// device once). Synchronous: returns when `sorted` and `order` are written.
  void sort(std::span<const std::uint64_t> keys, int keyBits, std::span<std::uint64_t> sorted,
            std::span<std::uint32_t> order);

 private:
  int device_;
  std::mutex mutex_;
  cudaStream_t stream_ = nullptr;
  DeviceBuffer<std::uint64_t> keys_[2];
  DeviceBuffer<std::uint32_t> indices_[2];
  DeviceBuffer<unsigned char> scratch_;
  /// Pieces large enough that a piece's DMA runs at the bus's speed, small enough that the copy of the last one,
  /// which nothing overlaps, is short.
  StagedCopier staging_{std::size_t{8} << 20};
};

}  // namespace matcha::gpu::detail
