// SPDX-License-Identifier: MIT
// Qualifiers that let one function serve the CPU engines and the CUDA kernels. Expands to nothing outside nvcc.
#pragma once

#if defined(__CUDACC__)
#define MATCHA_HOST_DEVICE __host__ __device__
#define MATCHA_FORCEINLINE __forceinline__
#else
#define MATCHA_HOST_DEVICE
#define MATCHA_FORCEINLINE inline __attribute__((always_inline))
#endif

namespace matcha {

/// The larger and the smaller of two numbers that are never NaN (coordinates, extents, distances). std::fmax and
/// std::fmin honour a NaN operand, which the host's baseline instruction set (x86-64 SSE2, built without
/// -ffinite-math-only) can only do in a libm call: four calls a body in a leaf's refit. Here they are one MAXSD or
/// MINSD on the host and fmax/fmin on the device, the same value for any operands but NaN (a tie of +0 and -0 may
/// keep either sign, which no caller's square or comparison sees).
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE double largerOf(double a, double b) {
#if defined(__CUDA_ARCH__)
  return fmax(a, b);
#else
  return a > b ? a : b;
#endif
}
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE double smallerOf(double a, double b) {
#if defined(__CUDA_ARCH__)
  return fmin(a, b);
#else
  return a < b ? a : b;
#endif
}

}  // namespace matcha
