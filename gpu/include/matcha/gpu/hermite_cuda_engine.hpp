// SPDX-License-Identifier: MIT
// The CUDA Hermite engine (issue 18): the HermiteCpuEngine's twin on the GPU, in the shape of the GRAPE-6 library
// (kirin, seeds/). No CUDA type appears here (STYLE.md habit 6): the kernels and the device buffers live in
// gpu/cuda/hermite_cuda_engine.cu behind a pimpl, and this header is only usable in a build with CUDA
// (MATCHA_HAVE_CUDA). Code that merely wants "the GPU if there is one" calls makeHermiteEngine() instead.
//
// What lives where:
//  - j-memory: every slot's state at its own time (JParticle, doubles) stays on the device; setJParticles collects
//    the changed slots on the host (the last write to a slot wins) and predict uploads them, scatters them into the
//    slots and runs the predictor kernel (core/hermite_predictor.hpp, in double) over slots [0, numJ);
//  - the predictor writes each slot as the force kernel reads it: the position as two floats, hi = float(x) and
//    lo = float(x - hi) ("double-single"), the velocity and the mass as floats, and a 32-bit key of the slot's id;
//  - the force kernel (GPU Gems 3 ch. 31 tiles in shared memory) forms r = x_j - x_i as (hi_j - hi_i) + (lo_j - lo_i):
//    ~2^-48 of the coordinates' size absolute, so a close pair far from the origin keeps float precision in its
//    separation (with eps = 0 a binary at 1e-5 of a cluster of size 1 would lose 2 of float's 7 digits with plain
//    float coordinates and all of them at 1e-7), without a double subtraction or a conversion per pair. The pair itself
//    (pair_interaction.hpp: accumulateJerkPairInteraction) is float; each thread sums at most 64 pairs in float
//    before it adds the partial sums into double accumulators (the Chamomile scheme);
//  - small i-blocks: kirin split the j-range over several thread blocks and added the partial results on the host;
//    here the partial sums stay on the device and a second kernel adds them (in j order, so the result does not
//    depend on timing) before the one copy back. Blocks of fewer than ~17000 i-particles give each i-particle 4
//    threads (each a quarter of every tile, combined with warp shuffles), so that an i-block of 48 (GRAPE-6's pipes)
//    does not leave most of a thread block idle;
//  - launchForces enqueues the i-particles' upload (pinned staging), the kernels and the results' download on the
//    engine's stream and returns; finishForces waits and unpacks.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "matcha/core/hermite_engine.hpp"

namespace matcha::gpu {

/// Engine settings; the defaults choose everything per call.
struct HermiteCudaConfig {
  int device = 0;                 ///< CUDA device ordinal
  std::uint32_t numSplits = 0;    ///< thread blocks the j-range is split over per i-block; 0 = chosen to fill the GPU
  std::uint32_t threadsPerI = 0;  ///< 1 or 4 threads per i-particle; 0 = chosen by the block size
  bool poisonDeviceOutputs = false;     ///< tests: fill the device's result buffers with NaN before each call
  bool synchronizeAfterLaunch = false;  ///< debug: wait for and check every kernel right after its launch
};

/// What the last finished force call did.
struct HermiteCudaCallStats {
  double kernelMilliseconds = 0.0;  ///< CUDA-event time of the force and combine kernels
  std::uint32_t numSplits = 0;      ///< thread blocks per i-block along j
  std::uint32_t threadsPerI = 0;
  std::uint64_t interactions = 0;  ///< i-particles x j-slots
};

class HermiteCudaEngine final : public HermiteEngine {
 public:
  /// Selects `config.device` and creates a stream and events; device memory grows with reserve and the calls.
  /// @throws CudaError when the device cannot be used; InputError for threadsPerI other than 0, 1 or 4
  explicit HermiteCudaEngine(const HermiteCudaConfig& config = {});
  ~HermiteCudaEngine() override;
  HermiteCudaEngine(const HermiteCudaEngine&) = delete;
  HermiteCudaEngine& operator=(const HermiteCudaEngine&) = delete;

  /// "cuda-hermite (NVIDIA H200 ..., float pairs on double-single coordinates, double sums)".
  std::string name() const override;

  /// Resizes the j-memory to `capacity` slots, keeping the slots below both sizes (new slots hold zero-mass particles
  /// at the origin). Synchronous when the device memory grows.
  /// @throws InputError above kMaxHermiteSlots or when the device's free memory cannot hold them
  void reserve(std::size_t capacity) override;
  std::size_t capacity() const override;

  /// Collects the slots on the host; predict uploads them. @throws InputError as HermiteCpuEngine::setJParticles
  void setJParticles(std::span<const std::uint32_t> addresses, std::span<const JParticle> particles) override;

  /// Uploads the collected slots and predicts slots [0, numJ) on the device; returns without waiting.
  /// @throws InputError as HermiteCpuEngine::predict
  void predict(double time, std::size_t numJ) override;

  /// Enqueues the forces of `block` and returns; `block` is copied before the call returns (the caller may reuse it),
  /// `out` is written by finishForces. Null arrays of `out` are not written; the jerk is always computed, the nearest
  /// neighbour only when out.nearestId or out.nearestDistance2 is asked for (a kernel without the search).
  /// @throws InputError as HermiteCpuEngine::launchForces
  void launchForces(const IBlockView& block, double eps2, const HermiteForceView& out) override;
  void finishForces() override;

  /// The last finished force call.
  const HermiteCudaCallStats& lastCallStats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace matcha::gpu
