// SPDX-License-Identifier: MIT
// The device's free memory, for the check that refuses a run that will not fit (gpu/memory_model.hpp). Compiled only
// when CUDA is enabled.
#include <cuda_runtime.h>

#include "matcha/gpu/detail/memory_bridge.hpp"

namespace matcha::gpu::detail {

CudaMemoryInfo queryCudaMemoryImpl() {
  CudaMemoryInfo info;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();  // clear the sticky error so later calls start clean
    return info;
  }
  std::size_t freeBytes = 0, totalBytes = 0;
  // The engine works on device 0 (engine_factory.cpp), whose context this creates if the engine has not yet.
  if (cudaSetDevice(0) != cudaSuccess || cudaMemGetInfo(&freeBytes, &totalBytes) != cudaSuccess) {
    cudaGetLastError();
    return info;
  }
  info.available = true;
  info.freeBytes = freeBytes;
  info.totalBytes = totalBytes;
  return info;
}

}  // namespace matcha::gpu::detail
