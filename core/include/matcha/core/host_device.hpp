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
