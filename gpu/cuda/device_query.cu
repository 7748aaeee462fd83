// SPDX-License-Identifier: MIT
// Device discovery for `--engine auto|cuda`. Compiled only when CUDA is enabled.
#include <cuda_runtime.h>

#include <cstdio>
#include <string>

#include "matcha/core/errors.hpp"
#include "matcha/gpu/detail/cuda_bridge.hpp"

namespace matcha::gpu::detail {

CudaDeviceInfo queryCudaDeviceImpl() {
  CudaDeviceInfo info;
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    info.description = std::string("no CUDA device: ") + cudaGetErrorString(status);
    cudaGetLastError();  // clear the sticky "no device" error so later calls start clean
    return info;
  }
  if (count == 0) {
    info.description = "no CUDA device found";
    return info;
  }
  cudaDeviceProp props{};
  if (cudaGetDeviceProperties(&props, 0) != cudaSuccess) {
    info.description = "CUDA device 0 could not be queried";
    cudaGetLastError();
    return info;
  }
  int clockKHz = 0;
  cudaDeviceGetAttribute(&clockKHz, cudaDevAttrClockRate, 0);
  char text[256];
  std::snprintf(text, sizeof text, "%s (sm_%d%d, %d SMs, %d MHz, %.0f GiB)", props.name, props.major, props.minor,
                props.multiProcessorCount, clockKHz / 1000, static_cast<double>(props.totalGlobalMem) / (1 << 30));
  info.available = true;
  info.description = text;
  return info;
}

bool cudaEngineCompiledIn() { return false; }

std::unique_ptr<NearFieldEngine> makeCudaEngineImpl() {
  throw InputError("the CUDA near-field engine is not part of this build yet");
}

}  // namespace matcha::gpu::detail
