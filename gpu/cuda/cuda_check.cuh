// SPDX-License-Identifier: MIT
// The one place CUDA status codes become matcha::CudaError (STYLE.md habit 9). Every runtime call goes through
// MATCHA_CUDA_CHECK, every launch is followed by MATCHA_CUDA_CHECK_LAUNCH; the message names the call, the file and
// the line, on one line. Nothing here exits: the error propagates to apps/'s main like any other.
#pragma once

#include <cuda_runtime.h>

namespace matcha::gpu::detail {

/// Throws CudaError("CUDA error: <expression> failed at <file>:<line>: <name>: <description>"). Clears the
/// runtime's last-error slot first, so that a non-sticky error does not resurface in the next, unrelated check.
[[noreturn]] void throwCudaError(cudaError_t status, const char* expression, const char* file, int line);

inline void checkCuda(cudaError_t status, const char* expression, const char* file, int line) {
  if (status != cudaSuccess) throwCudaError(status, expression, file, line);
}

/// After a launch: the launch-configuration error, if any, and (when `synchronize` is set, a debug option) the
/// kernel's own execution error.
void checkLaunch(const char* kernelName, bool synchronize, const char* file, int line);

}  // namespace matcha::gpu::detail

#define MATCHA_CUDA_CHECK(expression) ::matcha::gpu::detail::checkCuda((expression), #expression, __FILE__, __LINE__)
#define MATCHA_CUDA_CHECK_LAUNCH(kernelName, synchronize) \
  ::matcha::gpu::detail::checkLaunch((kernelName), (synchronize), __FILE__, __LINE__)
