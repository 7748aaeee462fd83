// SPDX-License-Identifier: MIT
// The near-field engines' share of a run's memory (core/memory_estimate.hpp), and the device's free memory. The
// models mirror the buffers of cpu_engine.cpp (CpuEngine::Resident) and cuda_engine.cu (CudaEngine::Impl and its
// ResidentTree): they must follow them when those change.
#pragma once

#include <cstdint>

#include "matcha/core/memory_estimate.hpp"

namespace matcha::gpu {

/// Adds what the engine keeps for a tree run whose trees have `sizes` (tree/memory_estimate.hpp): the topology, the
/// positions and outputs in the tree's order, the refitted cells and the resident lists. The CPU engine (onGpu
/// false) keeps them in host memory. The CUDA engine (onGpu true) keeps them on the device, each buffer with its
/// 1/8 growth room, the lists in two arenas that grow by a further quarter and are copied into a bigger one as they
/// grow (the old and the new arena both exist for a moment), each list's j-body ranges expanded into one index per
/// j-body; on the host it keeps page-locked staging for positions, outputs and lists.
void addEngineTreeMemory(const TreeSizes& sizes, bool onGpu, MemoryEstimate& estimate);

/// Adds what the CUDA engine keeps to sort the keys of a tree of `numBodies` bodies on the device
/// (CudaEngine::sortKeys, from CudaEngine::kMinSortKeys bodies on): the keys and their indices twice each (CUB's double
/// buffers) and CUB's scratch. Nothing on the CPU engine, which leaves the sort to the host.
void addEngineKeySortMemory(std::uint64_t numBodies, bool onGpu, MemoryEstimate& estimate);

/// Adds what the CUDA engine keeps to predict the trees of a run with reuse on its device (TreeParams::predictOnDevice,
/// CudaEngine::takeTreePrediction) for `numBodies` bodies. Nothing on the CPU engine, whose trees the host predicts.
void addEngineTreePredictionMemory(std::uint64_t numBodies, bool onGpu, MemoryEstimate& estimate);

/// Adds what a direct sum over `numBodies` bodies keeps on the engine (the direct solver, or direct potentials at a
/// run's outputs): on the CUDA engine its own source, output and partial-sum buffers on the device; on the CPU
/// engine nothing that grows with the bodies.
void addEngineDirectMemory(std::uint64_t numBodies, bool onGpu, MemoryEstimate& estimate);

/// Free and total memory of CUDA device `device` (cudaMemGetInfo; makes it the current device and creates the
/// runtime's context on it when there is none yet): device 0 is one rank's engine's, a rank of a distributed run
/// asks for its own. `available` is false in a build without CUDA or on a machine without that device. Never throws.
struct CudaMemoryInfo {
  bool available = false;
  std::uint64_t freeBytes = 0;
  std::uint64_t totalBytes = 0;
};
CudaMemoryInfo queryCudaMemory(int device = 0);

}  // namespace matcha::gpu
