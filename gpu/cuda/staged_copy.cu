// SPDX-License-Identifier: MIT
#include <algorithm>

#include "cuda_check.cuh"
#include "matcha/gpu/detail/host_copy.hpp"
#include "staged_copy.cuh"

namespace matcha::gpu::detail {

bool isPageLocked(const void* host, std::size_t bytes) {
  const auto locked = [](const void* address) {
    cudaPointerAttributes attributes{};
    if (cudaPointerGetAttributes(&attributes, address) != cudaSuccess) {
      cudaGetLastError();  // not the next launch's error
      return false;
    }
    return attributes.type == cudaMemoryTypeHost;
  };
  // Both ends: a range that starts in one locked allocation and runs past its end is not locked throughout.
  return bytes > 0 && locked(host) && locked(static_cast<const char*>(host) + bytes - 1);
}

void StagedCopier::upload(void* device, const void* host, std::size_t bytes, cudaStream_t stream) {
  auto* to = static_cast<char*>(device);
  const auto* from = static_cast<const char*>(host);
  for (std::size_t done = 0; done < bytes; done += pieceBytes_) {
    const int b = next_;
    next_ ^= 1;
    const std::size_t size = std::min(pieceBytes_, bytes - done);
    free_[b].synchronize();  // its last DMA is done (a never-recorded event counts as done)
    buffers_[b].reserve(pieceBytes_);
    parallelCopy(buffers_[b].data(), from + done, size);
    MATCHA_CUDA_CHECK(cudaMemcpyAsync(to + done, buffers_[b].data(), size, cudaMemcpyHostToDevice, stream));
    free_[b].record(stream);
  }
}

void StagedCopier::download(void* host, const void* device, std::size_t bytes, cudaStream_t stream,
                            std::size_t pieceBytes) {
  pieceBytes = std::clamp<std::size_t>(pieceBytes, 1, pieceBytes_);
  auto* to = static_cast<char*>(host);
  const auto* from = static_cast<const char*>(device);
  const std::size_t numPieces = (bytes + pieceBytes - 1) / pieceBytes;
  const int first = next_;
  const auto buffer = [&](std::size_t piece) { return (first + static_cast<int>(piece % 2)) % 2; };
  const auto copyOut = [&](std::size_t piece) {
    const int b = buffer(piece);
    const std::size_t done = piece * pieceBytes;
    free_[b].synchronize();  // the piece has landed
    parallelCopy(to + done, buffers_[b].data(), std::min(pieceBytes, bytes - done));
  };
  for (std::size_t piece = 0; piece < numPieces; ++piece) {
    const int b = buffer(piece);
    const std::size_t done = piece * pieceBytes;
    free_[b].synchronize();  // an earlier DMA through this buffer is done
    buffers_[b].reserve(pieceBytes_);
    MATCHA_CUDA_CHECK(cudaMemcpyAsync(buffers_[b].data(), from + done, std::min(pieceBytes, bytes - done),
                                      cudaMemcpyDeviceToHost, stream));
    free_[b].record(stream);
    if (piece > 0) copyOut(piece - 1);
  }
  if (numPieces > 0) copyOut(numPieces - 1);
  next_ = buffer(numPieces);
}

}  // namespace matcha::gpu::detail
