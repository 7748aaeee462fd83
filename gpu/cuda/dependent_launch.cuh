// SPDX-License-Identifier: MIT
// Programmatic dependent launch (Hopper): a chain of kernels on one stream whose launches overlap.
//
// A force call runs a short chain (direct summation: tile boxes, the all-pairs kernel, the split combination and the
// double pass over cancelled bodies). Launched plainly, each kernel starts only after the previous one has finished
// and its launch has been processed: a few microseconds per link, which at N = 2^14 is several percent of a 0.2 ms
// call. Launched with launchDependent, a kernel's blocks may be scheduled as soon as every block of the previous
// kernel has called allowDependentLaunch(); they do what does not depend on it, then waitForPreviousKernel(), which
// returns once the previous kernel has completed and its writes are visible. Without the launch attribute (or on a
// GPU older than sm_90) the wait is a no-op and the stream orders the kernels as usual.
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <utility>

#include "cuda_check.cuh"

namespace matcha::gpu::detail {

/// Lets the stream's next kernel, if launched with launchDependent, start scheduling its blocks; it still waits for
/// this kernel's completion in waitForPreviousKernel. Call it early: the dependent's blocks take SM slots only once
/// every block of this kernel has called it (or exited), so they never crowd this kernel's own blocks out.
__device__ __forceinline__ void allowDependentLaunch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

/// Returns once the previous kernel of the stream has completed and its memory writes are visible. Every read of
/// its outputs (and every write of what it still reads) must come after this.
__device__ __forceinline__ void waitForPreviousKernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/// kernel<<<grid, block, 0, stream>>>(args...), allowed to overlap the stream's previous kernel as described above.
/// A launch the runtime refuses throws CudaError naming `kernelName`.
template <class... Params, class... Args>
void launchDependent(const char* kernelName, void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream,
                     Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  const cudaError_t status = cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
  if (status != cudaSuccess)
    throwCudaError(status, (std::string("launch of ") + kernelName).c_str(), __FILE__, __LINE__);
}

}  // namespace matcha::gpu::detail
