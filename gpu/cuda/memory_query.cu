// SPDX-License-Identifier: MIT
// The device's free memory, for the check that refuses a run that will not fit (gpu/memory_model.hpp). Compiled only
// when CUDA is enabled.
#include <cuda_runtime.h>

#include "matcha/gpu/detail/memory_bridge.hpp"

namespace matcha::gpu::detail {

CudaMemoryInfo queryCudaMemoryImpl(int device) {
  CudaMemoryInfo info;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || device < 0 || device >= count) {
    cudaGetLastError();  // clear the sticky error so later calls start clean
    return info;
  }
  std::size_t freeBytes = 0, totalBytes = 0;
  // One rank's engine works on device 0 (engine_factory.cpp), a distributed run's rank on its own: this creates the
  // device's context if the engine has not yet.
  if (cudaSetDevice(device) != cudaSuccess || cudaMemGetInfo(&freeBytes, &totalBytes) != cudaSuccess) {
    cudaGetLastError();
    return info;
  }
  info.available = true;
  info.freeBytes = freeBytes;
  info.totalBytes = totalBytes;
  return info;
}

}  // namespace matcha::gpu::detail
