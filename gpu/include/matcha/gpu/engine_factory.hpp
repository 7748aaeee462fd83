// SPDX-License-Identifier: MIT
// Chooses a near-field engine at run time (DESIGN.md §2): CUDA when asked for or when `auto` finds a device,
// otherwise the CPU engine.
#pragma once

#include <memory>
#include <string>

#include "matcha/core/near_field_engine.hpp"
#include "matcha/core/params.hpp"

namespace matcha::gpu {

/// What the CUDA runtime reports; `available` is false in a build without CUDA or on a machine without a device.
struct CudaDeviceInfo {
  bool available = false;
  std::string description;  ///< "NVIDIA H100 PCIe (132 SMs, 1755 MHz, 79 GiB)" or why there is none
};

/// Queries device 0. Never throws; a missing driver or device is reported in `description`.
CudaDeviceInfo queryCudaDevice();

/// True when this binary contains the CUDA engine.
bool cudaEngineBuilt();

struct EngineChoice {
  std::unique_ptr<NearFieldEngine> engine;
  std::string reason;  ///< one line saying what was chosen and why, for the run log
};

/// `cpu`: the float CPU engine. `cuda`: the CUDA engine, or InputError when none can be used. `automatic`: CUDA when
/// built and a device is present, else CPU.
EngineChoice makeEngine(EngineKind kind);

}  // namespace matcha::gpu
