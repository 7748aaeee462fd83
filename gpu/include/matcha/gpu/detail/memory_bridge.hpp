// SPDX-License-Identifier: MIT
// The CUDA seam of gpu/memory_model.hpp: declared here without CUDA types, defined in gpu/cuda/memory_query.cu when
// CUDA is built and in gpu/src/no_cuda_memory.cpp otherwise (STYLE.md habit 6).
#pragma once

#include "matcha/gpu/memory_model.hpp"

namespace matcha::gpu::detail {

/// Free and total memory of `device`; `available` false without CUDA or such a device. Never throws.
CudaMemoryInfo queryCudaMemoryImpl(int device);

}  // namespace matcha::gpu::detail
