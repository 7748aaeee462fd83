// SPDX-License-Identifier: MIT
#include <algorithm>
#include <cub/device/device_radix_sort.cuh>
#include <limits>

#include "cuda_check.cuh"
#include "matcha/core/errors.hpp"
#include "matcha/core/tree_prediction.hpp"
#include "tree_prediction.cuh"

namespace matcha::gpu::detail {

namespace {

constexpr unsigned kThreads = 256;
/// Blocks of the prediction kernel at most: each reduces its bodies' extent to 6 numbers, which one block then folds.
constexpr unsigned kMaxPredictionBlocks = 2048;

unsigned blocksFor(std::size_t count, unsigned cap) {
  return static_cast<unsigned>(std::max<std::size_t>(1, std::min<std::size_t>((count + kThreads - 1) / kThreads, cap)));
}

/// The parameters of a prediction the kernels read (the request's host pointers stay on the host).
struct PredictionParams {
  PredictionWindow window;
  AnnouncedMotion motion;
  double age;
  bool rateKnown;
};

/// Min over a block of `value` (lo) or max (hi): a shuffle within each warp, then across the warps in shared memory.
template <bool kMax>
__device__ double blockExtreme(double value, double* shared) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const double other = __shfl_down_sync(0xffffffffu, value, offset);
    value = kMax ? fmax(value, other) : fmin(value, other);
  }
  const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // the shared slots' last use is done
  if (lane == 0) shared[warp] = value;
  __syncthreads();
  if (warp == 0) {
    value = lane < blockDim.x / 32 ? shared[lane] : (kMax ? -INFINITY : INFINITY);
    for (int offset = 16; offset > 0; offset /= 2) {
      const double other = __shfl_down_sync(0xffffffffu, value, offset);
      value = kMax ? fmax(value, other) : fmin(value, other);
    }
  }
  return value;  // thread 0's is the block's
}

/// Each body's ball and lowest |a| (core/tree_prediction.hpp, as tree::TreeSolver's Motion makes them on the host), and
/// each block's extent of the balls' centres.
__global__ void predictBodiesKernel(PredictionBodies bodies, const float* earlierX, const float* earlierY,
                                    const float* earlierZ, PredictionParams params, double* centreX, double* centreY,
                                    double* centreZ, float* radius, float* lowest, double* blockExtents) {
  __shared__ double shared[kThreads / 32];
  double lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
  for (std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < bodies.count; i += gridDim.x * blockDim.x) {
    const double x[3] = {bodies.x[i], bodies.y[i], bodies.z[i]};
    const double v[3] = {bodies.vx[i], bodies.vy[i], bodies.vz[i]};
    const double a[3] = {bodies.ax[i], bodies.ay[i], bodies.az[i]};
    double displacement[3], displacementBefore[3], centre[3];
    announcedDisplacements(v, a, params.motion, displacement, displacementBefore);
    radius[i] = predictBall(x, displacement, displacementBefore, params.window, centre);
    centreX[i] = centre[0];
    centreY[i] = centre[1];
    centreZ[i] = centre[2];
    // The host keeps the last call's accelerations as floats: the same rounding of the same doubles.
    const float previous[3] = {__double2float_rn(a[0]), __double2float_rn(a[1]), __double2float_rn(a[2])};
    const float earlier[3] = {params.rateKnown ? earlierX[i] : 0.0f, params.rateKnown ? earlierY[i] : 0.0f,
                              params.rateKnown ? earlierZ[i] : 0.0f};
    lowest[i] = lowestAcceleration(a, previous, earlier, params.rateKnown, params.age);
    for (int d = 0; d < 3; ++d) {
      lo[d] = fmin(lo[d], centre[d]);
      hi[d] = fmax(hi[d], centre[d]);
    }
  }
  for (int d = 0; d < 3; ++d) {
    const double blockLo = blockExtreme<false>(lo[d], shared);
    const double blockHi = blockExtreme<true>(hi[d], shared);
    if (threadIdx.x == 0) {
      blockExtents[6 * blockIdx.x + d] = blockLo;
      blockExtents[6 * blockIdx.x + 3 + d] = blockHi;
    }
  }
}

/// The blocks' extents folded, and the root cube around them (cubeAroundExtent): one block.
__global__ void rootCubeKernel(const double* blockExtents, unsigned numBlocks, double* cube) {
  __shared__ double shared[kThreads / 32];
  double lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
  for (unsigned b = threadIdx.x; b < numBlocks; b += blockDim.x) {
    for (int d = 0; d < 3; ++d) {
      lo[d] = fmin(lo[d], blockExtents[6 * b + d]);
      hi[d] = fmax(hi[d], blockExtents[6 * b + 3 + d]);
    }
  }
  for (int d = 0; d < 3; ++d) {
    lo[d] = blockExtreme<false>(lo[d], shared);
    hi[d] = blockExtreme<true>(hi[d], shared);
  }
  if (threadIdx.x == 0) {
    const Cube root = cubeAroundExtent(lo, hi);
    for (int d = 0; d < 3; ++d) cube[d] = root.lo[d];
    cube[3] = root.side;
  }
}

/// The low 21 bits of v spread so that bit k lands at bit 3k (the host's table lookup, tree/space_filling_curve.cpp,
/// computes the same function).
__device__ std::uint64_t spreadBits(std::uint32_t v) {
  std::uint64_t x = v & 0x1fffffu;
  x = (x | x << 32) & 0x1f00000000ffffull;
  x = (x | x << 16) & 0x1f0000ff0000ffull;
  x = (x | x << 8) & 0x100f00f00f00f00full;
  x = (x | x << 4) & 0x10c30c30c30c30c3ull;
  x = (x | x << 2) & 0x1249249249249249ull;
  return x;
}

/// Morton keys of the balls' centres in the root cube (tree::computeMortonKeys), with each body's index beside it.
__global__ void mortonKeysKernel(const double* centreX, const double* centreY, const double* centreZ, std::uint32_t n,
                                 const double* cube, std::uint64_t* keys, std::uint32_t* indices) {
  Cube root;
  for (int d = 0; d < 3; ++d) root.lo[d] = cube[d];
  root.side = cube[3];
  const double scale = keyScale(root);
  for (std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    keys[i] = spreadBits(keyCell(centreX[i], root.lo[0], scale)) |
              spreadBits(keyCell(centreY[i], root.lo[1], scale)) << 1 |
              spreadBits(keyCell(centreZ[i], root.lo[2], scale)) << 2;
    indices[i] = i;
  }
}

/// Everything a tree build reads of its bodies, into the keys' order.
__global__ void gatherTreeInputsKernel(const std::uint32_t* order, std::uint32_t n, const double* centreX,
                                       const double* centreY, const double* centreZ, const double* mass,
                                       const float* lowest, const float* radius, double* treeX, double* treeY,
                                       double* treeZ, double* treeMass, float* treeAcceleration, float* treeRadius) {
  for (std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const std::uint32_t j = order[i];
    treeX[i] = centreX[j];
    treeY[i] = centreY[j];
    treeZ[i] = centreZ[j];
    treeMass[i] = mass[j];
    treeAcceleration[i] = lowest[j];
    treeRadius[i] = radius[j];
  }
}

}  // namespace

TreePredictor::TreePredictor(int device) : device_(device) {
  MATCHA_CUDA_CHECK(cudaSetDevice(device_));
  MATCHA_CUDA_CHECK(cudaStreamCreateWithFlags(&copyStream_, cudaStreamNonBlocking));
}

TreePredictor::~TreePredictor() {
  if (copyStream_ != nullptr) cudaStreamDestroy(copyStream_);
}

float* TreePredictor::earlierAcceleration(int axis, std::uint32_t count) {
  earlier_[axis].reserve(std::max<std::uint32_t>(count, 1));
  return earlier_[axis].data();
}

void TreePredictor::enqueue(const PredictionBodies& bodies, const TreePredictionRequest& request, bool rateKnown,
                            cudaStream_t stream) {
  const std::uint32_t n = bodies.count;
  MATCHA_ASSERT(n > 0, "a tree prediction of no bodies");
  count_ = n;
  for (auto* buffer : {&centreX_, &centreY_, &centreZ_, &treeX_, &treeY_, &treeZ_, &treeMass_}) buffer->reserve(n);
  for (auto* buffer : {&radius_, &lowest_, &treeAcceleration_, &treeRadius_}) buffer->reserve(n);
  for (auto& buffer : keys_) buffer.reserve(n);
  for (auto& buffer : indices_) buffer.reserve(n);
  if (!rateKnown) {
    for (auto& buffer : earlier_) buffer.reserve(1);
  }
  const unsigned numBlocks = blocksFor(n, kMaxPredictionBlocks);
  blockExtents_.reserve(6 * std::size_t{numBlocks});
  cube_.reserve(4);
  hostCube_.reserve(4);

  const PredictionParams params{request.window, request.motion, request.age, rateKnown};
  predictBodiesKernel<<<numBlocks, kThreads, 0, stream>>>(
      bodies, earlier_[0].data(), earlier_[1].data(), earlier_[2].data(), params, centreX_.data(), centreY_.data(),
      centreZ_.data(), radius_.data(), lowest_.data(), blockExtents_.data());
  MATCHA_CUDA_CHECK_LAUNCH("predictBodiesKernel", false);
  rootCubeKernel<<<1, kThreads, 0, stream>>>(blockExtents_.data(), numBlocks, cube_.data());
  MATCHA_CUDA_CHECK_LAUNCH("rootCubeKernel", false);
  mortonKeysKernel<<<blocksFor(n, 1u << 16), kThreads, 0, stream>>>(
      centreX_.data(), centreY_.data(), centreZ_.data(), n, cube_.data(), keys_[0].data(), indices_[0].data());
  MATCHA_CUDA_CHECK_LAUNCH("mortonKeysKernel", false);
  // A stable sort of the keys with their indices: equal keys keep the order of their indices, as KeySorter's ties.
  cub::DoubleBuffer<std::uint64_t> keyBuffers(keys_[0].data(), keys_[1].data());
  cub::DoubleBuffer<std::uint32_t> indexBuffers(indices_[0].data(), indices_[1].data());
  std::size_t scratchBytes = 0;
  MATCHA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, scratchBytes, keyBuffers, indexBuffers,
                                                    static_cast<int>(n), 0, 3 * kMaxLevel, stream));
  scratch_.reserve(std::max<std::size_t>(scratchBytes, 1));
  MATCHA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(scratch_.data(), scratchBytes, keyBuffers, indexBuffers,
                                                    static_cast<int>(n), 0, 3 * kMaxLevel, stream));
  sortedKeys_ = keyBuffers.Current();
  order_ = indexBuffers.Current();
  gatherTreeInputsKernel<<<blocksFor(n, 1u << 16), kThreads, 0, stream>>>(
      order_, n, centreX_.data(), centreY_.data(), centreZ_.data(), bodies.mass, lowest_.data(), radius_.data(),
      treeX_.data(), treeY_.data(), treeZ_.data(), treeMass_.data(), treeAcceleration_.data(), treeRadius_.data());
  MATCHA_CUDA_CHECK_LAUNCH("gatherTreeInputsKernel", false);
  MATCHA_CUDA_CHECK(
      cudaMemcpyAsync(hostCube_.data(), cube_.data(), 4 * sizeof(double), cudaMemcpyDeviceToHost, stream));
  ready_.record(stream);
  pending_ = true;
}

bool TreePredictor::take(const PredictedTreeView& out) {
  if (!pending_.exchange(false)) return false;
  // The calling thread may be a background build's, whose current device is the runtime's default.
  MATCHA_CUDA_CHECK(cudaSetDevice(device_));
  const std::size_t n = count_;
  for (auto* array : {&out.x, &out.y, &out.z, &out.mass}) array->resize(n);
  for (auto* array : {&out.acceleration, &out.radius}) array->resize(n);
  out.sortedKeys.resize(n);
  out.order.resize(n);
  // The copies wait on the device for the prediction, not on the engine's stream, whose kernels run on after it.
  MATCHA_CUDA_CHECK(cudaStreamWaitEvent(copyStream_, ready_.get(), 0));
  staging_.download(out.sortedKeys.data(), sortedKeys_, n * sizeof(std::uint64_t), copyStream_);
  staging_.download(out.order.data(), order_, n * sizeof(std::uint32_t), copyStream_);
  staging_.download(out.x.data(), treeX_.data(), n * sizeof(double), copyStream_);
  staging_.download(out.y.data(), treeY_.data(), n * sizeof(double), copyStream_);
  staging_.download(out.z.data(), treeZ_.data(), n * sizeof(double), copyStream_);
  staging_.download(out.mass.data(), treeMass_.data(), n * sizeof(double), copyStream_);
  staging_.download(out.acceleration.data(), treeAcceleration_.data(), n * sizeof(float), copyStream_);
  staging_.download(out.radius.data(), treeRadius_.data(), n * sizeof(float), copyStream_);
  ready_.synchronize();  // the cube's copy into hostCube_ came before the event
  for (int d = 0; d < 3; ++d) out.cube.lo[d] = hostCube_.data()[d];
  out.cube.side = hostCube_.data()[3];
  return true;
}

}  // namespace matcha::gpu::detail
