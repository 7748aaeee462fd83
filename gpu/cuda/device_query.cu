// SPDX-License-Identifier: MIT
// Device discovery for `--engine auto|cuda` and the benchmarks' FP32 floor. Compiled only when CUDA is enabled.
#include <cuda_runtime.h>

#include <cstdio>
#include <string>

#include "matcha/core/errors.hpp"
#include "matcha/gpu/detail/cuda_bridge.hpp"

namespace matcha::gpu::detail {

namespace {

// CUDA C++ Programming Guide, "Arithmetic Instructions": fused multiply-adds per clock per SM.
int lanesPerSM(int computeCapability, bool fp64) {
  if (fp64) {
    if (computeCapability == 90 || computeCapability == 100) return 64;
    if (computeCapability == 60 || computeCapability == 70 || computeCapability == 80) return 32;
    return 2;
  }
  if (computeCapability == 60 || computeCapability == 70 || computeCapability == 75 || computeCapability == 80) {
    return 64;
  }
  return 128;
}

}  // namespace

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
  int clockKHz = 0, memoryClockKHz = 0;
  if (cudaDeviceGetAttribute(&clockKHz, cudaDevAttrClockRate, 0) != cudaSuccess ||
      cudaDeviceGetAttribute(&memoryClockKHz, cudaDevAttrMemoryClockRate, 0) != cudaSuccess) {
    cudaGetLastError();
  }
  info.available = true;
  info.deviceCount = count;
  info.name = props.name;
  info.computeCapability = 10 * props.major + props.minor;
  info.numSMs = props.multiProcessorCount;
  info.clockMHz = clockKHz / 1000;
  info.memoryClockMHz = memoryClockKHz / 1000;
  info.memoryGiB = static_cast<double>(props.totalGlobalMem) / double(1 << 30);
  info.fp32LanesPerSM = lanesPerSM(info.computeCapability, false);
  info.fp64LanesPerSM = lanesPerSM(info.computeCapability, true);
  char text[256];
  std::snprintf(text, sizeof text, "%s (sm_%d%d, %d SMs, %d MHz, %.0f GiB)", props.name, props.major, props.minor,
                info.numSMs, info.clockMHz, info.memoryGiB);
  info.description = text;
  return info;
}

}  // namespace matcha::gpu::detail
