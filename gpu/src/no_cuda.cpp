// SPDX-License-Identifier: MIT
// Stand-ins for the CUDA seam in a build without a CUDA compiler.
#include "matcha/core/errors.hpp"
#include "matcha/gpu/detail/cuda_bridge.hpp"
#include "matcha/gpu/ewald.hpp"

namespace matcha::gpu::detail {

CudaDeviceInfo queryCudaDeviceImpl() {
  CudaDeviceInfo info;
  info.description = "this build has no CUDA support (no nvcc at configure time)";
  return info;
}

bool cudaEngineCompiledIn() { return false; }

std::unique_ptr<NearFieldEngine> makeCudaEngineImpl(Precision, int) {
  throw InputError("this build has no CUDA support (no nvcc at configure time)");
}

std::unique_ptr<HermiteEngine> makeHermiteCudaEngineImpl(int) {
  throw InputError("this build has no CUDA support (no nvcc at configure time)");
}

}  // namespace matcha::gpu::detail

namespace matcha::gpu {

void evaluateEwaldOnGpu(const SourceView&, const GravityParams&, const EwaldParams&, std::span<const std::uint32_t>,
                        const ForceView&) {
  throw InputError("Ewald summation on the GPU: this build has no CUDA support (no nvcc at configure time)");
}

}  // namespace matcha::gpu
