// SPDX-License-Identifier: MIT
// Stand-ins for the CUDA seam in a build without a CUDA compiler.
#include "matcha/core/errors.hpp"
#include "matcha/gpu/detail/cuda_bridge.hpp"

namespace matcha::gpu::detail {

CudaDeviceInfo queryCudaDeviceImpl() { return {false, "this build has no CUDA support (no nvcc at configure time)"}; }

bool cudaEngineCompiledIn() { return false; }

std::unique_ptr<NearFieldEngine> makeCudaEngineImpl() {
  throw InputError("this build has no CUDA support (no nvcc at configure time)");
}

}  // namespace matcha::gpu::detail
