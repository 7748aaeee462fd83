// SPDX-License-Identifier: MIT
#include "matcha/gpu/engine_factory.hpp"

#include "matcha/core/errors.hpp"
#include "matcha/gpu/cpu_engine.hpp"
#include "matcha/gpu/detail/cuda_bridge.hpp"

namespace matcha::gpu {

CudaDeviceInfo queryCudaDevice() { return detail::queryCudaDeviceImpl(); }

bool cudaEngineBuilt() { return detail::cudaEngineCompiledIn(); }

EngineChoice makeEngine(EngineKind kind) {
  if (kind == EngineKind::cpu) return {std::make_unique<CpuEngine>(Precision::float32), "CPU engine (as asked)"};
  const CudaDeviceInfo device = queryCudaDevice();
  if (kind == EngineKind::cuda) {
    if (!detail::cudaEngineCompiledIn()) {
      throw InputError("--engine cuda: this build has no CUDA engine (" + device.description + ")");
    }
    if (!device.available) throw InputError("--engine cuda: no usable CUDA device (" + device.description + ")");
    return {detail::makeCudaEngineImpl(), "CUDA engine on " + device.description};
  }
  if (detail::cudaEngineCompiledIn() && device.available) {
    return {detail::makeCudaEngineImpl(), "CUDA engine on " + device.description + " (auto)"};
  }
  return {std::make_unique<CpuEngine>(Precision::float32), "CPU engine (auto: " + device.description + ")"};
}

}  // namespace matcha::gpu
