// SPDX-License-Identifier: MIT
#include "matcha/gpu/engine_factory.hpp"

#include "matcha/core/errors.hpp"
#include "matcha/gpu/cpu_engine.hpp"
#include "matcha/gpu/detail/cuda_bridge.hpp"

namespace matcha::gpu {

CudaDeviceInfo queryCudaDevice() { return detail::queryCudaDeviceImpl(); }

bool cudaEngineBuilt() { return detail::cudaEngineCompiledIn(); }

double fp32FloorInteractionsPerSecond(const CudaDeviceInfo& device, double instructionsPerInteraction) {
  if (!device.available || instructionsPerInteraction <= 0.0) return 0.0;
  return double(device.numSMs) * double(device.fp32LanesPerSM) * double(device.clockMHz) * 1e6 /
         instructionsPerInteraction;
}

double fp64FloorInteractionsPerSecond(const CudaDeviceInfo& device, double fp64InstructionsPerInteraction) {
  if (!device.available || fp64InstructionsPerInteraction <= 0.0) return 0.0;
  return double(device.numSMs) * double(device.fp64LanesPerSM) * double(device.clockMHz) * 1e6 /
         fp64InstructionsPerInteraction;
}

std::unique_ptr<NearFieldEngine> makeCudaEngine(Precision precision) {
  if (!detail::cudaEngineCompiledIn()) {
    throw InputError("this build has no CUDA engine (" + queryCudaDevice().description + ")");
  }
  const CudaDeviceInfo device = queryCudaDevice();
  if (!device.available) throw InputError("no usable CUDA device (" + device.description + ")");
  return detail::makeCudaEngineImpl(precision);
}

EngineChoice makeEngine(EngineKind kind) {
  if (kind == EngineKind::cpu) return {std::make_unique<CpuEngine>(Precision::float32), "CPU engine (as asked)"};
  const CudaDeviceInfo device = queryCudaDevice();
  if (kind == EngineKind::cuda) {
    if (!detail::cudaEngineCompiledIn()) {
      throw InputError("--engine cuda: this build has no CUDA engine (" + device.description + ")");
    }
    if (!device.available) throw InputError("--engine cuda: no usable CUDA device (" + device.description + ")");
    return {detail::makeCudaEngineImpl(Precision::float32), "CUDA engine on " + device.description, true};
  }
  if (detail::cudaEngineCompiledIn() && device.available) {
    try {
      return {detail::makeCudaEngineImpl(Precision::float32), "CUDA engine on " + device.description + " (auto)", true};
    } catch (const CudaError& error) {
      return {std::make_unique<CpuEngine>(Precision::float32),
              std::string("CPU engine (auto: the CUDA engine failed to start: ") + error.what() + ")"};
    }
  }
  return {std::make_unique<CpuEngine>(Precision::float32), "CPU engine (auto: " + device.description + ")"};
}

}  // namespace matcha::gpu
