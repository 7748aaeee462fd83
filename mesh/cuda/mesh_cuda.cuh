// SPDX-License-Identifier: MIT
// What the particle mesh's CUDA files share (gpu_mesh.cu, the whole grid on one device; gpu_slab_mesh.cu, a slab of
// it per rank): error checks that name the call, device arrays that free themselves, the deposit's atomic add, the
// kernels' launch shape, the bodies as four device arrays, and the per-axis tables of the Green's function and the
// derivative, computed on the host by the FFTW backend's formulas so that every backend multiplies by the same bits.
#pragma once

#include <cuda_runtime.h>
#include <cufft.h>

#include <cstdio>
#include <numbers>
#include <string>
#include <utility>
#include <vector>

#include "matcha/core/errors.hpp"
#include "matcha/mesh/mesh_kernels.hpp"
#include "matcha/mesh/particle_mesh.hpp"

namespace matcha::mesh::detail {
[[noreturn]] inline void throwCuda(const std::string& what, const char* file, int line) {
  throw CudaError("CUDA error in the particle mesh: " + what + " at " + file + ":" + std::to_string(line));
}

inline void checkCuda(cudaError_t status, const char* expression, const char* file, int line) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // a non-sticky error must not resurface in the next, unrelated check
  throwCuda(std::string(expression) + " failed: " + cudaGetErrorName(status) + ": " + cudaGetErrorString(status), file,
            line);
}

inline void checkCufft(cufftResult status, const char* expression, const char* file, int line) {
  if (status != CUFFT_SUCCESS)
    throwCuda(std::string(expression) + " failed: cufftResult " + std::to_string(status), file, line);
}

#define MESH_CUDA_CHECK(expression) checkCuda((expression), #expression, __FILE__, __LINE__)
#define MESH_CUFFT_CHECK(expression) checkCufft((expression), #expression, __FILE__, __LINE__)
#define MESH_LAUNCH_CHECK() checkCuda(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

inline std::string gibibytes(std::size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", double(bytes) / double(1ull << 30));
  return text;
}

/// Where an OwnedArray lives: device memory (cudaMalloc) or page-locked host memory (cudaMallocHost).
struct OnDevice {
  static cudaError_t allocate(void** p, std::size_t bytes) { return cudaMalloc(p, bytes); }
  static void free(void* p) { cudaFree(p); }
};
struct PageLocked {
  static cudaError_t allocate(void** p, std::size_t bytes) { return cudaMallocHost(p, bytes); }
  static void free(void* p) { cudaFreeHost(p); }
};

/// Memory that is freed on destruction and never grows by itself.
template <class T, class Where>
struct OwnedArray {
  T* data = nullptr;
  std::size_t count = 0;
  OwnedArray() = default;
  OwnedArray(const OwnedArray&) = delete;
  OwnedArray& operator=(const OwnedArray&) = delete;
  ~OwnedArray() { release(); }
  void release() {
    if (data != nullptr) Where::free(data);
    data = nullptr;
    count = 0;
  }
  void allocate(std::size_t n) {
    release();
    MESH_CUDA_CHECK(Where::allocate(reinterpret_cast<void**>(&data), n * sizeof(T)));
    count = n;
  }
};
template <class T>
using DeviceArray = OwnedArray<T, OnDevice>;
template <class T>
using PinnedArray = OwnedArray<T, PageLocked>;

struct AtomicAdd {
  __device__ void operator()(double* point, double value) const { atomicAdd(point, value); }
};

constexpr int kBlock = 256;

inline unsigned blocksFor(std::size_t count) { return static_cast<unsigned>((count + kBlock - 1) / kBlock); }

/// The bodies' positions and masses on the device, as the SourceView's four arrays.
struct DeviceBodies {
  const double* x;
  const double* y;
  const double* z;
  const double* mass;
  unsigned long long count;
};

/// The device's free memory, InputError (one line, naming `what`) unless `bytes` fit in it.
inline void requireDeviceFits(std::size_t bytes, const std::string& what) {
  std::size_t freeBytes = 0, totalBytes = 0;
  MESH_CUDA_CHECK(cudaMemGetInfo(&freeBytes, &totalBytes));
  if (bytes > freeBytes) {
    throw InputError("the cuFFT particle mesh needs " + gibibytes(bytes) + " of device memory (" + what + "), only " +
                     gibibytes(freeBytes) + " free of " + gibibytes(totalBytes) +
                     ": use a smaller --pm-grid, more ranks or the CPU engine");
  }
}

/// InputError unless CUDA device `device` exists.
inline void requireMeshDevice(int device) {
  int devices = 0;
  const cudaError_t status = cudaGetDeviceCount(&devices);
  if (status != cudaSuccess || devices == 0) {
    cudaGetLastError();
    throw InputError(std::string("the cuFFT particle mesh needs a CUDA device: ") +
                     (status != cudaSuccess ? cudaGetErrorString(status) : "none found"));
  }
  if (device >= devices) {
    throw InputError("the cuFFT particle mesh was asked for CUDA device " + std::to_string(device) + " of " +
                     std::to_string(devices));
  }
}

/// Per mesh index 0..n-1 on the device: greenAxisFactor, signedMode^2 and 2 pi derivativeMode / L (mesh_kernels.hpp).
struct DeviceModeTables {
  DeviceArray<double> greenAxis, modeSquared, derivativeWavenumber;

  void upload(const MeshParams& p) {
    const int n = p.grid;
    const int windowOrder = p.assignment == MassAssignment::cic ? 2 : 3;
    std::vector<double> g(n), m2(n), k(n);
    for (int i = 0; i < n; ++i) {
      const int m = signedMode(i, n);
      g[i] = greenAxisFactor(m, n, p.aSmooth, windowOrder);
      m2[i] = static_cast<double>(m) * m;
      k[i] = 2.0 * std::numbers::pi * derivativeMode(i, n) / p.boxSize;
    }
    for (auto [table, values] :
         {std::pair{&greenAxis, &g}, std::pair{&modeSquared, &m2}, std::pair{&derivativeWavenumber, &k}}) {
      table->allocate(n);
      MESH_CUDA_CHECK(cudaMemcpy(table->data, values->data(), n * sizeof(double), cudaMemcpyHostToDevice));
    }
  }
};

}  // namespace matcha::mesh::detail
