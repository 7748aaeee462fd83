// SPDX-License-Identifier: MIT
// Stand-ins for the CUDA seam in a build without a CUDA compiler.
#include "matcha/core/errors.hpp"
#include "matcha/gpu/detail/cuda_bridge.hpp"

namespace matcha::gpu::detail {

CudaDeviceInfo queryCudaDeviceImpl() {
  CudaDeviceInfo info;
  info.description = "this build has no CUDA support (no nvcc at configure time)";
  return info;
}

bool cudaEngineCompiledIn() { return false; }

std::unique_ptr<NearFieldEngine> makeCudaEngineImpl(Precision) {
  throw InputError("this build has no CUDA support (no nvcc at configure time)");
}

}  // namespace matcha::gpu::detail
