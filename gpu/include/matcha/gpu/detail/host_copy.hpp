// SPDX-License-Identifier: MIT
// Host-side copies on all cores, for the CUDA engine's staging through page-locked buffers (gpu/cuda/*.cu has no
// thread pool of its own; this plain C++ seam gives it TBB's).
#pragma once

#include <cstddef>

namespace matcha::gpu::detail {

/// memcpy(destination, source, bytes) split over the TBB threads; falls back to one memcpy below a few MB.
void parallelCopy(void* destination, const void* source, std::size_t bytes);

}  // namespace matcha::gpu::detail
