// SPDX-License-Identifier: MIT
// A tree's inputs predicted on the device (NearFieldEngine::predictsTrees, core/tree_prediction.hpp): from the engine's
// copy of the bodies, each body's ball and lowest |a|, the root cube, the Morton keys, their sort, and the gather into
// the keys' order; then, on another thread, the results back to the host. The host's tree::TreeSolver makes the same
// bits from the caller's bodies with its own passes: at 2^24 bodies on the H200's host they took ~200 ms of a
// background build (the prediction, the keys, the key sort waiting for the SMs, a gather of 670 MB), against a few ms
// of this device's time. Included only by .cu files.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "device_memory.cuh"
#include "matcha/core/near_field_engine.hpp"
#include "staged_copy.cuh"

namespace matcha::gpu::detail {

/// The bodies a prediction reads, in the caller's order, on the device: positions and velocities as the launch moved
/// them, the accelerations of the launches before it (those the kicks into this call used), the masses.
struct PredictionBodies {
  const double* x = nullptr;
  const double* y = nullptr;
  const double* z = nullptr;
  const double* vx = nullptr;
  const double* vy = nullptr;
  const double* vz = nullptr;
  const double* ax = nullptr;
  const double* ay = nullptr;
  const double* az = nullptr;
  const double* mass = nullptr;
  std::uint32_t count = 0;
};

class TreePredictor {
 public:
  /// On `device`, which must be the calling thread's current device; the copy stream is created now, the buffers at
  /// the first prediction.
  explicit TreePredictor(int device);
  ~TreePredictor();
  TreePredictor(const TreePredictor&) = delete;
  TreePredictor& operator=(const TreePredictor&) = delete;

  /// Device room for the accelerations of the call before the last (floats, caller's order) of `count` bodies, which
  /// the engine uploads before enqueue when the request gives them: x, y, z for axis 0, 1, 2.
  float* earlierAcceleration(int axis, std::uint32_t count);

  /// Queues the prediction on `stream` (the engine's, after the launch moved its copy of the bodies and before its
  /// kernels write new accelerations): its kernels, the CUB sort, and an event the results wait behind. `rateKnown`:
  /// earlierAcceleration holds the request's earlier accelerations. Allocates at the first call or when the bodies'
  /// number grows. A prediction not taken yet is replaced.
  void enqueue(const PredictionBodies& bodies, const TreePredictionRequest& request, bool rateKnown,
               cudaStream_t stream);

  /// NearFieldEngine::takeTreePrediction: waits for the last enqueued prediction and copies it to the host on a stream
  /// of its own (through page-locked staging, on all cores), once. Returns false when there is none to take.
  bool take(const PredictedTreeView& out);

 private:
  int device_;
  cudaStream_t copyStream_ = nullptr;
  std::atomic<bool> pending_{false};
  std::uint32_t count_ = 0;
  DeviceBuffer<double> centreX_, centreY_, centreZ_;
  DeviceBuffer<float> radius_, lowest_;
  std::array<DeviceBuffer<float>, 3> earlier_;
  DeviceBuffer<double> blockExtents_;  ///< 6 per block of the prediction kernel: lo and hi of each axis
  DeviceBuffer<double> cube_;          ///< lo[3], side
  DeviceBuffer<std::uint64_t> keys_[2];
  DeviceBuffer<std::uint32_t> indices_[2];
  DeviceBuffer<unsigned char> scratch_;
  const std::uint64_t* sortedKeys_ = nullptr;  ///< which of the double buffers the sort left its results in
  const std::uint32_t* order_ = nullptr;
  DeviceBuffer<double> treeX_, treeY_, treeZ_, treeMass_;
  DeviceBuffer<float> treeAcceleration_, treeRadius_;
  PinnedBuffer<double> hostCube_;
  CudaEvent ready_;
  StagedCopier staging_{std::size_t{16} << 20};
};

}  // namespace matcha::gpu::detail
