// SPDX-License-Identifier: MIT
#include "matcha/gpu/engine_factory.hpp"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "matcha/core/errors.hpp"
#include "matcha/gpu/cpu_engine.hpp"
#include "matcha/gpu/detail/cuda_bridge.hpp"
#include "matcha/gpu/hermite_cpu_engine.hpp"

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

EngineChoice makeEngine(EngineKind kind, int ordinal) {
  if (kind == EngineKind::cpu) return {std::make_unique<CpuEngine>(Precision::float32), "CPU engine (as asked)"};
  const CudaDeviceInfo device = queryCudaDevice();
  // Device 0's description stands for the others (the GPUs of one host are alike); which one, where it is not 0.
  const std::string which =
      ordinal == 0 ? std::string()
                   : "device " + std::to_string(ordinal) + " of " + std::to_string(device.deviceCount) + ", ";
  if (kind == EngineKind::cuda) {
    if (!detail::cudaEngineCompiledIn()) {
      throw InputError("--engine cuda: this build has no CUDA engine (" + device.description + ")");
    }
    if (!device.available) throw InputError("--engine cuda: no usable CUDA device (" + device.description + ")");
    return {detail::makeCudaEngineImpl(Precision::float32, ordinal), "CUDA engine on " + which + device.description,
            true};
  }
  if (detail::cudaEngineCompiledIn() && device.available) {
    try {
      return {detail::makeCudaEngineImpl(Precision::float32, ordinal),
              "CUDA engine on " + which + device.description + " (auto)", true};
    } catch (const CudaError& error) {
      return {std::make_unique<CpuEngine>(Precision::float32),
              std::string("CPU engine (auto: the CUDA engine failed to start: ") + error.what() + ")"};
    }
  }
  return {std::make_unique<CpuEngine>(Precision::float32), "CPU engine (auto: " + device.description + ")"};
}

std::unique_ptr<HermiteEngine> makeHermiteEngine(EngineKind kind, std::string* reason, int deviceOrdinal) {
  const auto say = [&](const std::string& line) {
    if (reason != nullptr) *reason = line;
  };
  if (kind == EngineKind::cpu) {
    say("CPU Hermite engine (as asked)");
    return std::make_unique<HermiteCpuEngine>();
  }
  const CudaDeviceInfo device = queryCudaDevice();
  if (kind == EngineKind::cuda) {
    if (!detail::cudaEngineCompiledIn()) {
      throw InputError("engine cuda: this build has no CUDA engine (" + device.description + ")");
    }
    if (!device.available) throw InputError("engine cuda: no usable CUDA device (" + device.description + ")");
    auto engine = detail::makeHermiteCudaEngineImpl(deviceOrdinal);
    say("CUDA Hermite engine on " + device.description);
    return engine;
  }
  if (detail::cudaEngineCompiledIn() && device.available) {
    try {
      auto engine = detail::makeHermiteCudaEngineImpl(deviceOrdinal);
      say("CUDA Hermite engine on " + device.description + " (auto)");
      return engine;
    } catch (const CudaError& error) {
      say(std::string("CPU Hermite engine (auto: the CUDA engine failed to start: ") + error.what() + ")");
      return std::make_unique<HermiteCpuEngine>();
    }
  }
  say("CPU Hermite engine (auto: " + device.description + ")");
  return std::make_unique<HermiteCpuEngine>();
}

void requireFloatRange(double extent, double mass, const GravityParams& gravity) {
  const auto refuse = [](const std::string& what, double value) {
    char message[400];
    std::snprintf(message, sizeof message,
                  "%s = %.6g exceeds %.6g (2^30) length units, the largest the float engines evaluate (eps^2 and "
                  "quadrupole terms would overflow float); gravity is scale-free: rescale lengths by s, velocities by "
                  "1/sqrt(s) and times by s^1.5",
                  what.c_str(), value, kMaxFloatLength);
    throw InputError(message);
  };
  if (gravity.eps > kMaxFloatLength) refuse("eps", gravity.eps);
  if (extent > kMaxFloatLength) refuse("the bodies' extent (largest side of their bounding box)", extent);
  // The small side: a periodic box whose side is below 2^-30 leaves the float kernels' offsets and r_s^2 near the
  // bottom of float's normal range (a box of 1e-15 gave NaN errors in compare with exit 0).
  if (gravity.periodic.enabled() && gravity.periodic.boxSize < 1.0 / kMaxFloatLength) {
    char message[300];
    std::snprintf(message, sizeof message,
                  "the box side %.6g is below %.6g (2^-30) length units, the smallest the float engines evaluate; "
                  "gravity is scale-free: rescale lengths by s, velocities by 1/sqrt(s) and times by s^1.5",
                  gravity.periodic.boxSize, 1.0 / kMaxFloatLength);
    throw InputError(message);
  }
  // G M: a pull G m / r^2 and a cell's G M b^2 terms in float stay far below 3.4e38 up to kMaxFloatMass (a 3 Gpc/h box
  // in GADGET's units has G M ~ 1e16).
  if (!(std::abs(gravity.G * mass) <= kMaxFloatMass)) {
    char message[300];
    std::snprintf(message, sizeof message,
                  "G times the total mass, %.6g, exceeds %.6g (2^60), the largest the float engines evaluate; gravity "
                  "is scale-free: rescale masses by s and velocities by sqrt(s)",
                  gravity.G * mass, kMaxFloatMass);
    throw InputError(message);
  }
}

void requireFloatRange(const Particles& bodies, const GravityParams& gravity) {
  double extent = 0.0;
  for (const std::vector<double>* coordinate : {&bodies.x, &bodies.y, &bodies.z}) {
    if (coordinate->empty()) continue;
    const auto [lo, hi] = std::minmax_element(coordinate->begin(), coordinate->end());
    extent = std::max(extent, *hi - *lo);
  }
  double mass = 0.0;
  for (const double m : bodies.mass) mass += m;
  requireFloatRange(extent, mass, gravity);
}

}  // namespace matcha::gpu
