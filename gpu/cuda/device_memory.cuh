// SPDX-License-Identifier: MIT
// RAII owners for device buffers, pinned host buffers, streams and events (STYLE.md habit 6). Buffers grow and never
// shrink: an engine allocates on its first calls and then reuses the same memory for every later call of the same
// or smaller size. Destructors never throw (a failing cudaFree at exit is ignored on purpose).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <memory_resource>
#include <mutex>
#include <unordered_set>
#include <utility>

#include "cuda_check.cuh"

namespace matcha::gpu::detail {

/// Device memory for `capacity()` elements of T. Contents are undefined after a growth (nothing is copied).
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept { swap(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    swap(other);
    return *this;
  }
  ~DeviceBuffer() {
    if (data_ != nullptr) cudaFree(data_);
  }

  /// Makes room for `count` elements; allocates only when `count` exceeds the capacity (then with 1/8 slack, so a
  /// slowly growing size does not reallocate every call). Synchronous when it allocates.
  void reserve(std::size_t count) {
    if (count <= capacity_) return;
    const std::size_t newCapacity = count + count / 8;
    if (data_ != nullptr) {
      MATCHA_CUDA_CHECK(cudaFree(data_));
      data_ = nullptr;
      capacity_ = 0;
    }
    MATCHA_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&data_), newCapacity * sizeof(T)));
    capacity_ = newCapacity;
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t capacity() const { return capacity_; }
  std::size_t bytes() const { return capacity_ * sizeof(T); }

 private:
  void swap(DeviceBuffer& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(capacity_, other.capacity_);
  }
  T* data_ = nullptr;
  std::size_t capacity_ = 0;
};

/// Page-locked host memory (cudaMallocHost), so that copies from it run asynchronously at full PCIe speed.
template <class T>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() {
    if (data_ != nullptr) cudaFreeHost(data_);
  }

  /// As DeviceBuffer::reserve. The caller must make sure no copy from the old memory is still in flight.
  void reserve(std::size_t count) {
    if (count <= capacity_) return;
    const std::size_t newCapacity = count + count / 8;
    if (data_ != nullptr) {
      MATCHA_CUDA_CHECK(cudaFreeHost(data_));
      data_ = nullptr;
      capacity_ = 0;
    }
    MATCHA_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&data_), newCapacity * sizeof(T)));
    capacity_ = newCapacity;
  }

  T* data() { return data_; }
  T& operator[](std::size_t k) { return data_[k]; }
  std::size_t capacity() const { return capacity_; }

 private:
  T* data_ = nullptr;
  std::size_t capacity_ = 0;
};

/// Page-locked host memory for std::pmr containers (NearFieldEngine::transferMemory): the device copies to and from it
/// at the bus's speed without staging. Where the host will not lock more (cudaHostAlloc fails), ordinary memory from
/// `fallback`, which copies still handle (staged). Thread-safe.
class PageLockedMemoryResource final : public std::pmr::memory_resource {
 public:
  explicit PageLockedMemoryResource(std::pmr::memory_resource* fallback = std::pmr::new_delete_resource())
      : fallback_(fallback) {}

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment) override {
    void* memory = nullptr;
    // cudaHostAlloc aligns to at least 256 bytes; portable: locked for every device's context, not just the current.
    if (alignment <= 256 &&
        cudaHostAlloc(&memory, std::max<std::size_t>(bytes, 1), cudaHostAllocPortable) == cudaSuccess) {
      return memory;
    }
    cudaGetLastError();  // the failed allocation is not the next launch's error
    memory = fallback_->allocate(bytes, alignment);
    const std::lock_guard<std::mutex> lock(mutex_);
    ordinary_.insert(memory);
    return memory;
  }
  void do_deallocate(void* memory, std::size_t bytes, std::size_t alignment) override {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (ordinary_.erase(memory) == 0) {
        cudaFreeHost(memory);  // never throws: a failing free at exit is ignored, as the buffers' destructors do
        return;
      }
    }
    fallback_->deallocate(memory, bytes, alignment);
  }
  bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override { return this == &other; }

  std::pmr::memory_resource* fallback_;
  std::mutex mutex_;
  std::unordered_set<void*> ordinary_;  ///< what came from fallback_
};

/// A non-blocking stream (does not synchronise with the legacy default stream).
class CudaStream {
 public:
  CudaStream() { MATCHA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  ~CudaStream() {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  cudaStream_t get() const { return stream_; }
  void synchronize() const { MATCHA_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

 private:
  cudaStream_t stream_ = nullptr;
};

/// A timing event.
class CudaEvent {
 public:
  CudaEvent() { MATCHA_CUDA_CHECK(cudaEventCreate(&event_)); }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  ~CudaEvent() {
    if (event_ != nullptr) cudaEventDestroy(event_);
  }
  void record(cudaStream_t stream) { MATCHA_CUDA_CHECK(cudaEventRecord(event_, stream)); }
  void synchronize() const { MATCHA_CUDA_CHECK(cudaEventSynchronize(event_)); }
  cudaEvent_t get() const { return event_; }

  /// Milliseconds from `start` to this event; both must have completed.
  float millisecondsSince(const CudaEvent& start) const {
    float ms = 0.0f;
    MATCHA_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, event_));
    return ms;
  }

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace matcha::gpu::detail
