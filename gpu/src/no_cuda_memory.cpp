// SPDX-License-Identifier: MIT
// The stand-in for gpu/cuda/memory_query.cu in a build without a CUDA compiler: no device, no memory to report.
#include "matcha/gpu/detail/memory_bridge.hpp"

namespace matcha::gpu::detail {

CudaMemoryInfo queryCudaMemoryImpl(int /*device*/) { return {}; }

}  // namespace matcha::gpu::detail
