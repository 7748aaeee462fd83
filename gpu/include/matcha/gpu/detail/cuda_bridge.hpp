// SPDX-License-Identifier: MIT
// The seam between plain C++ and the CUDA translation units: declared here without CUDA types, defined in
// gpu/cuda/*.cu when CUDA is built and in gpu/src/no_cuda.cpp otherwise (STYLE.md habit 6).
#pragma once

#include <memory>

#include "matcha/core/near_field_engine.hpp"
#include "matcha/gpu/engine_factory.hpp"

namespace matcha::gpu::detail {

CudaDeviceInfo queryCudaDeviceImpl();
bool cudaEngineCompiledIn();
/// The CUDA engine on device `device`. @throws CudaError when it cannot start, InputError in a build without CUDA
std::unique_ptr<NearFieldEngine> makeCudaEngineImpl(Precision precision, int device = 0);
/// The CUDA Hermite engine on device 0. @throws CudaError when it cannot start, InputError in a build without CUDA
std::unique_ptr<HermiteEngine> makeHermiteCudaEngineImpl(int device);

}  // namespace matcha::gpu::detail
