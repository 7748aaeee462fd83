// SPDX-License-Identifier: MIT
// Copies between pageable host memory and the device through two page-locked buffers taken in turns: the host copies
// one piece (on all cores) while the DMA of the other runs. A DMA from or into pageable memory runs at 6-10 GB/s on
// the H200's host, a fifth of the bus, and blocks the host until it is done. Included only by .cu files.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstddef>

#include "device_memory.cuh"

namespace matcha::gpu::detail {

/// Whether [host, host + bytes) lies in page-locked memory (cudaHostAlloc's, or registered: NearFieldEngine::
/// transferMemory), which the device copies to and from at the bus's speed without staging. False for no bytes.
bool isPageLocked(const void* host, std::size_t bytes);

class StagedCopier {
 public:
  /// Pieces of at most `pieceBytes`, the size of each buffer (allocated at the first copy).
  explicit StagedCopier(std::size_t pieceBytes) : pieceBytes_(pieceBytes) {}

  /// Queues the copy of `bytes` from `host` to `device` on `stream`; returns when the last piece is queued, with
  /// `host` no longer read.
  void upload(void* device, const void* host, std::size_t bytes, cudaStream_t stream);

  /// Copies `bytes` from `device` to `host` on `stream`, in pieces of at most `pieceBytes` (at most the buffers'):
  /// smaller pieces shorten the host copy of the last one, which nothing overlaps. Returns when every byte is in
  /// host memory.
  void download(void* host, const void* device, std::size_t bytes, cudaStream_t stream, std::size_t pieceBytes);
  void download(void* host, const void* device, std::size_t bytes, cudaStream_t stream) {
    download(host, device, bytes, stream, pieceBytes_);
  }

 private:
  std::size_t pieceBytes_;
  std::array<PinnedBuffer<char>, 2> buffers_;
  std::array<CudaEvent, 2> free_;  ///< recorded after each DMA through the buffer
  int next_ = 0;                   ///< the buffer the next piece takes
};

}  // namespace matcha::gpu::detail
