// SPDX-License-Identifier: MIT
// One rank's slab of the particle mesh on its GPU: SlabMesh's cuFFT backend (../src/gpu_slab.hpp has the scheme).
// Every per-body and per-mode formula is mesh_kernels.hpp's, in double, as in the FFTW slabs and the whole-grid
// meshes; the deposit adds with atomics (gpu_mesh.cu says why), so a run is reproducible to rounding only.
//
// Layouts, in complex values (the real slab is the in-place padded layout, P = 2 half reals a row):
//  - slab: this rank's planes xl of [0, localPlanes), every y and kz: (xl n + y) half + kz;
//  - columns: every x, this rank's rows yl of [0, localRows): (x localRows + yl) half + kz, so that one strided 1-d
//    transform along x covers them all (stride localRows half, batch localRows half);
//  - blocks: the transposes' buffers, one block per rank in rank order. The slab's block for rank r holds its rows y
//    of [yFirst[r], yFirst[r] + yCount[r]) as (xl yCount[r] + y - yFirst[r]) half + kz; the columns' block for rank s
//    its planes as ((x - xFirst[s]) localRows + yl) half + kz. What rank r packs from its slab for rank s is what
//    rank s unpacks into its columns from rank r, value for value, and back again.
#include <cuda_runtime.h>
#include <cufft.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "../src/gpu_slab.hpp"
#include "matcha/core/stopwatch.hpp"
#include "mesh_cuda.cuh"

namespace matcha::mesh::detail {
namespace {

/// The split on the device: the owner of each plane x and row y, and each rank's first plane and row and their counts.
struct DeviceSplit {
  const int* xOwner;
  const int* xFirst;
  const int* yOwner;
  const int* yFirst;
  const int* yCount;
};

__device__ unsigned long long threadIndex() {
  return blockIdx.x * static_cast<unsigned long long>(blockDim.x) + threadIdx.x;
}

/// The slab to its blocks (ToBlocks) or back: a transpose's packing on the way forward, its unpacking on the way back.
template <bool ToBlocks>
__global__ void slabBlocksKernel(double2* slab, double2* blocks, const unsigned long long* blockOffset,
                                 DeviceSplit split, int n, int half, unsigned long long total) {
  const unsigned long long t = threadIndex();
  if (t >= total) return;
  const unsigned long long kz = t % half, q = t / half;
  const int y = static_cast<int>(q % n);
  const unsigned long long xl = q / n;
  const int r = split.yOwner[y];
  const unsigned long long b =
      blockOffset[r] + (xl * split.yCount[r] + static_cast<unsigned long long>(y - split.yFirst[r])) * half + kz;
  if constexpr (ToBlocks) {
    blocks[b] = slab[t];
  } else {
    slab[t] = blocks[b];
  }
}

/// The columns to their blocks (ToBlocks: the way back) or from them (the way forward).
template <bool ToBlocks>
__global__ void columnBlocksKernel(double2* columns, double2* blocks, const unsigned long long* blockOffset,
                                   DeviceSplit split, int localRows, int half, unsigned long long total) {
  const unsigned long long t = threadIndex();
  if (t >= total) return;
  const unsigned long long kz = t % half, q = t / half;
  const unsigned long long yl = q % localRows;
  const int x = static_cast<int>(q / localRows);
  const int s = split.xOwner[x];
  const unsigned long long b =
      blockOffset[s] + (static_cast<unsigned long long>(x - split.xFirst[s]) * localRows + yl) * half + kz;
  if constexpr (ToBlocks) {
    blocks[b] = columns[t];
  } else {
    columns[t] = blocks[b];
  }
}

/// The mass spectrum becomes the potential's, on the columns (mode x, rowFirst + yl, kz).
__global__ void greenColumnsKernel(double2* spectrum, int localRows, int rowFirst, int half, double scale,
                                   const double* greenAxis, const double* modeSquared, unsigned long long total) {
  const unsigned long long t = threadIndex();
  if (t >= total) return;
  const int kz = static_cast<int>(t % half);
  const unsigned long long q = t / half;
  const int y = rowFirst + static_cast<int>(q % localRows);
  const int x = static_cast<int>(q / localRows);
  const double factor = greenMultiplier(scale * greenAxis[x] * greenAxis[y], modeSquared[x] + modeSquared[y],
                                        greenAxis[kz], modeSquared[kz]);
  spectrum[t].x *= factor;
  spectrum[t].y *= factor;
}

/// pull = -i k phi, k the wavenumber of `index`.
__device__ void multiplyByMinusIk(const double2* phi, double2* pull, unsigned long long t, double k) {
  const double2 value = phi[t];
  pull[t] = make_double2(k * value.y, -k * value.x);
}

/// The pull along x in Fourier space, on the columns (the whole x axis is there).
__global__ void differentiateColumnsAlongX(const double2* phi, double2* pull, int localRows, int half,
                                           const double* wavenumber, unsigned long long total) {
  const unsigned long long t = threadIndex();
  if (t >= total) return;
  multiplyByMinusIk(phi, pull, t, wavenumber[t / half / localRows]);
}

/// The pull along y (axis 1) or z (axis 2) on the slab, whose planes hold the potential as a function of k_y, k_z.
__global__ void differentiateSlab(const double2* phi, double2* pull, int n, int half, int axis,
                                  const double* wavenumber, unsigned long long total) {
  const unsigned long long t = threadIndex();
  if (t >= total) return;
  const int index = axis == 1 ? static_cast<int>((t / half) % n) : static_cast<int>(t % half);
  multiplyByMinusIk(phi, pull, t, wavenumber[index]);
}

/// The records' bodies (x, y, z, mass) onto this rank's planes.
template <int S>
__global__ void depositRecordsKernel(const double* records, unsigned long long count, MeshLayout layout, double invBox,
                                     double offset, PlaneRange planes, double* rho) {
  const unsigned long long i = threadIndex();
  if (i >= count) return;
  const double* r = records + 4 * i;
  const BodyWindow<S, double> window(r[0], r[1], r[2], invBox, layout.n, offset);
  depositBody(rho, layout, window, r[3], AtomicAdd{}, planes);
}

/// This slab's share of `field` at each record's body, times `weight`, added to component `component` of its shares.
template <int S>
__global__ void shareKernel(const double* records, unsigned long long count, MeshLayout layout, double invBox,
                            double offset, PlaneRange planes, const double* field, int component, double weight,
                            double* shares) {
  const unsigned long long i = threadIndex();
  if (i >= count) return;
  const double* r = records + 4 * i;
  const BodyWindow<S, double> window(r[0], r[1], r[2], invBox, layout.n, offset);
  shares[4 * i + component] += weight * gatherBody(field, layout, window, planes);
}

/// The finite-difference variant: all four shares from the potential's slab, times `weight`, added.
template <int S>
__global__ void finiteDifferenceShareKernel(const double* records, unsigned long long count, MeshLayout layout,
                                            double invBox, double offset, PlaneRange planes, double invCell,
                                            const double* phi, bool potentials, double weight, double* shares) {
  const unsigned long long i = threadIndex();
  if (i >= count) return;
  const double* r = records + 4 * i;
  const BodyWindow<S, double> window(r[0], r[1], r[2], invBox, layout.n, offset);
  double gradient[3], potential;
  gatherFiniteDifference(phi, layout, window, invCell, gradient, potential, planes);
  shares[4 * i + 0] -= weight * gradient[0];
  shares[4 * i + 1] -= weight * gradient[1];
  shares[4 * i + 2] -= weight * gradient[2];
  if (potentials) shares[4 * i + 3] += weight * potential;  // unwanted: left 0, as the FFTW backend leaves it
}

/// A plan that is destroyed with its owner.
struct Plan {
  cufftHandle handle = 0;
  bool made = false;
  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (made) cufftDestroy(handle);
  }
  /// cufftMakePlanMany without its own work area; returns the work area it needs.
  std::size_t make(int rank, int* dims, int* inembed, int istride, int idist, int* onembed, int ostride, int odist,
                   cufftType type, int batch) {
    MESH_CUFFT_CHECK(cufftCreate(&handle));
    made = true;
    MESH_CUFFT_CHECK(cufftSetAutoAllocation(handle, 0));
    std::size_t work = 0;
    MESH_CUFFT_CHECK(
        cufftMakePlanMany(handle, rank, dims, inembed, istride, idist, onembed, ostride, odist, type, batch, &work));
    return work;
  }
};

/// One side of a transpose: each rank's block, its size and place in the buffer, in complex values.
struct Blocks {
  std::vector<std::size_t> counts, displs;
  std::size_t total = 0;
};

}  // namespace

struct GpuSlabMesh::Impl {
  MeshParams params;
  SlabSplit split;
  SlabComm comm;
  int n = 0, half = 0;
  int rank = 0, ranks = 1;
  int localPlanes = 0, localRows = 0, rowFirst = 0;
  double invBox = 0, invCell = 0;
  std::size_t slabComplex = 0, columnComplex = 0, bufferComplex = 0;
  cudaStream_t stream = nullptr;
  Plan planesForward, planesInverse, columnsTransform;
  DeviceArray<char> fftWorkArea;
  DeviceArray<double2> slab, columns, pull, packed, unpacked;  ///< pull: the columns' or the slab's -i k phi
  DeviceArray<int> splitTables;                                ///< xOwner, xFirst, yOwner, yFirst, yCount
  DeviceArray<unsigned long long> blockOffsets;                ///< the slab's blocks, then the columns'
  DeviceModeTables tables;
  Blocks slabBlocks, columnBlocks;  ///< the slab's blocks for each rank; the columns' blocks from each
  PinnedArray<double> sendHost, recvHost, hostRecords;
  DeviceArray<double> deviceRecords, deviceShares;
  std::size_t recordCapacity = 0;
  std::size_t callCount = 0;  ///< the records of the call begun
  /// Direct transposes: every other rank's `packed`, mapped here (CUDA IPC; null for this rank's own).
  bool direct = false;
  std::vector<double2*> peerPacked;

  Impl(const MeshParams& p, SlabSplit s, SlabComm c)
      : params(p), split(std::move(s)), comm(std::move(c)), n(p.grid), half(p.grid / 2 + 1) {
    rank = split.rank;
    ranks = split.ranks();
    localPlanes = split.xCount[rank];
    localRows = split.yCount[rank];
    rowFirst = split.yFirst[rank];
    invBox = 1.0 / p.boxSize;
    invCell = p.grid / p.boxSize;
    const auto rowsOf = [&](int r) { return static_cast<std::size_t>(split.yCount[r]); };
    const auto planesOf = [&](int r) { return static_cast<std::size_t>(split.xCount[r]); };
    slabComplex = static_cast<std::size_t>(localPlanes) * n * half;
    columnComplex = static_cast<std::size_t>(n) * localRows * half;
    bufferComplex = std::max<std::size_t>({slabComplex, columnComplex, 1});
    for (int r = 0; r < ranks; ++r) {
      slabBlocks.counts.push_back(static_cast<std::size_t>(localPlanes) * rowsOf(r) * half);
      columnBlocks.counts.push_back(planesOf(r) * static_cast<std::size_t>(localRows) * half);
    }
    for (Blocks* b : {&slabBlocks, &columnBlocks}) {
      for (std::size_t count : b->counts) {
        b->displs.push_back(b->total);
        b->total += count;
      }
      // MPI counts and displacements are ints (in complex values).
      if (b->total > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
        throw InputError("the cuFFT slab mesh of " + std::to_string(n) + "^3 over " + std::to_string(ranks) +
                         " ranks moves more than 2^31 - 1 complex values a rank in a transpose; use more ranks");
      }
    }

    requireMeshDevice(p.device);
    MESH_CUDA_CHECK(cudaSetDevice(p.device));
    const std::size_t buffers = slabComplex + columnComplex + 3 * bufferComplex;
    requireDeviceFits(buffers * sizeof(double2), "a " + std::to_string(n) + "^3 slab's buffers");
    MESH_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    std::size_t work = 0;
    if (localPlanes > 0) {
      int dims[2] = {n, n}, real[2] = {n, 2 * half}, complex[2] = {n, half};
      work = std::max(work,
                      planesForward.make(2, dims, real, 1, n * 2 * half, complex, 1, n * half, CUFFT_D2Z, localPlanes));
      work = std::max(work,
                      planesInverse.make(2, dims, complex, 1, n * half, real, 1, n * 2 * half, CUFFT_Z2D, localPlanes));
    }
    if (localRows > 0) {
      int dims[1] = {n}, embed[1] = {n};
      const int stride = localRows * half;
      work = std::max(work, columnsTransform.make(1, dims, embed, stride, 1, embed, stride, 1, CUFFT_Z2Z, stride));
    }
    requireDeviceFits(buffers * sizeof(double2) + work,
                      "a " + std::to_string(n) + "^3 slab's buffers and cuFFT's work area");
    fftWorkArea.allocate(std::max<std::size_t>(work, 1));
    for (Plan* plan : {&planesForward, &planesInverse, &columnsTransform}) {
      if (!plan->made) continue;
      MESH_CUFFT_CHECK(cufftSetWorkArea(plan->handle, fftWorkArea.data));
      MESH_CUFFT_CHECK(cufftSetStream(plan->handle, stream));
    }
    slab.allocate(std::max<std::size_t>(slabComplex, 1));
    columns.allocate(std::max<std::size_t>(columnComplex, 1));
    pull.allocate(bufferComplex);
    packed.allocate(bufferComplex);
    unpacked.allocate(bufferComplex);
    tables.upload(p);
    uploadSplit();
    openPeers();
    if (ranks > 1 && !direct) {
      sendHost.allocate(2 * bufferComplex);
      recvHost.allocate(2 * bufferComplex);
    }
  }

  /// Collective: maps every other rank's packing buffer here where all ranks share a host and CUDA lets each rank open
  /// the others' (else no rank takes the direct way).
  void openPeers() {
    if (ranks == 1 || !comm.sameHost || !comm.allowDirect) return;
    cudaIpcMemHandle_t mine{};
    bool ok = cudaIpcGetMemHandle(&mine, packed.data) == cudaSuccess;
    std::vector<cudaIpcMemHandle_t> all(ranks);
    comm.allgather(&mine, sizeof mine, all.data());
    peerPacked.assign(ranks, nullptr);
    for (int r = 0; r < ranks && ok; ++r) {
      if (r == rank) continue;
      void* mapped = nullptr;
      ok = cudaIpcOpenMemHandle(&mapped, all[r], cudaIpcMemLazyEnablePeerAccess) == cudaSuccess;
      peerPacked[r] = static_cast<double2*>(mapped);
    }
    cudaGetLastError();  // a failure above is answered by the host's way, not carried into the next check
    direct = comm.everyRank(ok);
    if (!direct) closePeers();
  }

  void closePeers() noexcept {
    for (double2*& mapped : peerPacked) {
      if (mapped != nullptr) cudaIpcCloseMemHandle(mapped);
      mapped = nullptr;
    }
  }

  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl() {
    if (stream != nullptr) {
      cudaStreamSynchronize(stream);
      cudaStreamDestroy(stream);
    }
    closePeers();
  }

  void uploadSplit() {
    std::vector<int> t(2 * static_cast<std::size_t>(n) + 3 * static_cast<std::size_t>(ranks));
    int* xOwner = t.data();
    int* yOwner = xOwner + n;
    int* xFirst = yOwner + n;
    int* yFirst = xFirst + ranks;
    int* yCount = yFirst + ranks;
    // Planes past the last owner's belong to no rank; the split covers all of them (SlabMesh checks).
    for (int r = 0; r < ranks; ++r) {
      for (int x = split.xFirst[r]; x < split.xFirst[r] + split.xCount[r]; ++x) xOwner[x] = r;
      for (int y = split.yFirst[r]; y < split.yFirst[r] + split.yCount[r]; ++y) yOwner[y] = r;
      xFirst[r] = split.xFirst[r];
      yFirst[r] = split.yFirst[r];
      yCount[r] = split.yCount[r];
    }
    splitTables.allocate(t.size());
    MESH_CUDA_CHECK(cudaMemcpy(splitTables.data, t.data(), t.size() * sizeof(int), cudaMemcpyHostToDevice));
    std::vector<unsigned long long> offsets;
    for (const Blocks* b : {&slabBlocks, &columnBlocks}) {
      for (std::size_t d : b->displs) offsets.push_back(d);
    }
    blockOffsets.allocate(offsets.size());
    MESH_CUDA_CHECK(cudaMemcpy(blockOffsets.data, offsets.data(), offsets.size() * sizeof(unsigned long long),
                               cudaMemcpyHostToDevice));
  }

  DeviceSplit deviceSplit() const {
    const int* t = splitTables.data;
    return {t, t + 2 * n, t + n, t + 2 * n + ranks, t + 2 * n + 2 * ranks};
  }
  const unsigned long long* slabOffsets() const { return blockOffsets.data; }
  const unsigned long long* columnOffsets() const { return blockOffsets.data + ranks; }
  MeshLayout layout() const { return {n, static_cast<unsigned long long>(2 * half)}; }
  PlaneRange planes() const { return {split.xFirst[rank], localPlanes}; }

  /// Where rank s's packing buffer holds its block for this rank: the slab's blocks (`forward`) or the columns'.
  std::size_t peerDisplacement(int s, bool forward) const {
    std::size_t displacement = 0;
    for (int r = 0; r < rank; ++r) {
      displacement += forward ? static_cast<std::size_t>(split.xCount[s]) * split.yCount[r] * half
                              : static_cast<std::size_t>(split.xCount[r]) * split.yCount[s] * half;
    }
    return displacement;
  }

  /// `packed` (blocks `from`) to `unpacked` (blocks `to`): this rank's own block on the device, the others directly
  /// from the other ranks' devices or through the host and the exchange. `forward`: from the slab's blocks.
  void exchangeBlocks(const Blocks& from, const Blocks& to, bool forward) {
    constexpr std::size_t kBytes = sizeof(double2);
    if (from.counts[rank] > 0) {
      MESH_CUDA_CHECK(cudaMemcpyAsync(unpacked.data + to.displs[rank], packed.data + from.displs[rank],
                                      from.counts[rank] * kBytes, cudaMemcpyDeviceToDevice, stream));
    }
    if (ranks == 1) return;
    if (direct) {
      MESH_CUDA_CHECK(cudaStreamSynchronize(stream));  // this rank's blocks are packed,
      comm.barrier();                                  // and every rank's
      for (int s = 0; s < ranks; ++s) {
        if (s == rank || to.counts[s] == 0) continue;
        MESH_CUDA_CHECK(cudaMemcpyAsync(unpacked.data + to.displs[s], peerPacked[s] + peerDisplacement(s, forward),
                                        to.counts[s] * kBytes, cudaMemcpyDefault, stream));
      }
      MESH_CUDA_CHECK(cudaStreamSynchronize(stream));
      comm.barrier();  // no rank packs again before every rank has taken its blocks
      return;
    }
    // The other ranks' blocks lie before and after this rank's own.
    const std::size_t ownFirst = from.displs[rank], ownEnd = ownFirst + from.counts[rank];
    auto* sendComplex = reinterpret_cast<double2*>(sendHost.data);
    if (ownFirst > 0) {
      MESH_CUDA_CHECK(cudaMemcpyAsync(sendComplex, packed.data, ownFirst * kBytes, cudaMemcpyDeviceToHost, stream));
    }
    if (from.total > ownEnd) {
      MESH_CUDA_CHECK(cudaMemcpyAsync(sendComplex + ownEnd, packed.data + ownEnd, (from.total - ownEnd) * kBytes,
                                      cudaMemcpyDeviceToHost, stream));
    }
    MESH_CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<std::size_t> sendCounts = from.counts, recvCounts = to.counts;
    sendCounts[rank] = recvCounts[rank] = 0;
    comm.alltoallv(sendHost.data, sendCounts, from.displs, recvHost.data, recvCounts, to.displs);
    const auto* recvComplex = reinterpret_cast<const double2*>(recvHost.data);
    const std::size_t toOwnFirst = to.displs[rank], toOwnEnd = toOwnFirst + to.counts[rank];
    if (toOwnFirst > 0) {
      MESH_CUDA_CHECK(cudaMemcpyAsync(unpacked.data, recvComplex, toOwnFirst * kBytes, cudaMemcpyHostToDevice, stream));
    }
    if (to.total > toOwnEnd) {
      MESH_CUDA_CHECK(cudaMemcpyAsync(unpacked.data + toOwnEnd, recvComplex + toOwnEnd, (to.total - toOwnEnd) * kBytes,
                                      cudaMemcpyHostToDevice, stream));
    }
  }

  /// The slab's spectrum (planes of k_y, k_z) to the columns (every x of this rank's rows).
  void slabToColumns() {
    if (slabComplex > 0) {
      slabBlocksKernel<true><<<blocksFor(slabComplex), kBlock, 0, stream>>>(slab.data, packed.data, slabOffsets(),
                                                                            deviceSplit(), n, half, slabComplex);
      MESH_LAUNCH_CHECK();
    }
    exchangeBlocks(slabBlocks, columnBlocks, true);
    if (columnComplex > 0) {
      columnBlocksKernel<false><<<blocksFor(columnComplex), kBlock, 0, stream>>>(
          columns.data, unpacked.data, columnOffsets(), deviceSplit(), localRows, half, columnComplex);
      MESH_LAUNCH_CHECK();
    }
  }

  /// `from` (columns) back to the slab.
  void columnsToSlab(double2* from) {
    if (columnComplex > 0) {
      columnBlocksKernel<true><<<blocksFor(columnComplex), kBlock, 0, stream>>>(
          from, packed.data, columnOffsets(), deviceSplit(), localRows, half, columnComplex);
      MESH_LAUNCH_CHECK();
    }
    exchangeBlocks(columnBlocks, slabBlocks, false);
    if (slabComplex > 0) {
      slabBlocksKernel<false><<<blocksFor(slabComplex), kBlock, 0, stream>>>(slab.data, unpacked.data, slabOffsets(),
                                                                             deviceSplit(), n, half, slabComplex);
      MESH_LAUNCH_CHECK();
    }
  }

  void transformColumns(double2* data, int direction) {
    if (columnsTransform.made) MESH_CUFFT_CHECK(cufftExecZ2Z(columnsTransform.handle, data, data, direction));
  }
  void inversePlanes(double2* data) {
    if (planesInverse.made) {
      MESH_CUFFT_CHECK(cufftExecZ2D(planesInverse.handle, data, reinterpret_cast<double*>(data)));
    }
  }

  double* records(std::size_t count) {
    if (count > recordCapacity) {
      const std::size_t wanted = count + count / 8;
      MESH_CUDA_CHECK(cudaSetDevice(params.device));
      hostRecords.release();
      deviceRecords.release();
      deviceShares.release();
      recordCapacity = 0;
      requireDeviceFits(8 * wanted * sizeof(double), std::to_string(count) + " bodies' records and shares");
      hostRecords.allocate(4 * wanted);
      deviceRecords.allocate(4 * wanted);
      deviceShares.allocate(4 * wanted);
      recordCapacity = wanted;
    }
    return hostRecords.data;
  }

  void beginCall(std::size_t count, GpuSlabSeconds& seconds) {
    MATCHA_ASSERT(count <= recordCapacity, "GpuSlabMesh::beginCall: more records than records() made room for");
    MESH_CUDA_CHECK(cudaSetDevice(params.device));
    const Stopwatch clock;
    callCount = count;
    if (count > 0) {
      MESH_CUDA_CHECK(cudaMemcpyAsync(deviceRecords.data, hostRecords.data, 4 * count * sizeof(double),
                                      cudaMemcpyHostToDevice, stream));
      MESH_CUDA_CHECK(cudaMemsetAsync(deviceShares.data, 0, 4 * count * sizeof(double), stream));
    }
    MESH_CUDA_CHECK(cudaStreamSynchronize(stream));
    seconds.deposit += clock.seconds();
  }

  void endCall(GpuSlabSeconds& seconds) {
    MESH_CUDA_CHECK(cudaSetDevice(params.device));
    const Stopwatch clock;
    if (callCount > 0) {
      MESH_CUDA_CHECK(cudaMemcpyAsync(hostRecords.data, deviceShares.data, 4 * callCount * sizeof(double),
                                      cudaMemcpyDeviceToHost, stream));
    }
    MESH_CUDA_CHECK(cudaStreamSynchronize(stream));
    seconds.interpolate += clock.seconds();
  }

  template <int S>
  double pass(double offset, double G, bool potentials, double weight, GpuSlabSeconds& seconds) {
    MESH_CUDA_CHECK(cudaSetDevice(params.device));
    const std::size_t count = callCount;
    Stopwatch clock;
    const auto lap = [&](double& into) {
      MESH_CUDA_CHECK(cudaStreamSynchronize(stream));
      into += clock.seconds();
      clock.restart();
    };
    const MeshLayout grid = layout();
    MESH_CUDA_CHECK(cudaMemsetAsync(slab.data, 0, std::max<std::size_t>(slabComplex, 1) * sizeof(double2), stream));
    if (count > 0 && localPlanes > 0) {
      depositRecordsKernel<S><<<blocksFor(count), kBlock, 0, stream>>>(deviceRecords.data, count, grid, invBox, offset,
                                                                       planes(), reinterpret_cast<double*>(slab.data));
      MESH_LAUNCH_CHECK();
    }
    lap(seconds.deposit);
    if (planesForward.made) {
      MESH_CUFFT_CHECK(cufftExecD2Z(planesForward.handle, reinterpret_cast<double*>(slab.data), slab.data));
    }
    lap(seconds.fft);
    slabToColumns();
    lap(seconds.transpose);
    transformColumns(columns.data, CUFFT_FORWARD);
    double mass = 0;
    if (localRows > 0 && rowFirst == 0) {
      MESH_CUDA_CHECK(cudaMemcpyAsync(&mass, columns.data, sizeof(double), cudaMemcpyDeviceToHost, stream));
    }
    lap(seconds.fft);
    if (columnComplex > 0) {
      greenColumnsKernel<<<blocksFor(columnComplex), kBlock, 0, stream>>>(
          columns.data, localRows, rowFirst, half, greenScale(G, params.boxSize), tables.greenAxis.data,
          tables.modeSquared.data, columnComplex);
      MESH_LAUNCH_CHECK();
    }
    lap(seconds.green);

    const auto share = [&](const double2* field, int component) {
      if (count == 0 || localPlanes == 0) return;
      shareKernel<S><<<blocksFor(count), kBlock, 0, stream>>>(deviceRecords.data, count, grid, invBox, offset, planes(),
                                                              reinterpret_cast<const double*>(field), component, weight,
                                                              deviceShares.data);
      MESH_LAUNCH_CHECK();
    };
    if (params.gradient == MeshGradient::fourier) {
      // The pull along x: -i k_x on the columns, its own way back.
      if (columnComplex > 0) {
        differentiateColumnsAlongX<<<blocksFor(columnComplex), kBlock, 0, stream>>>(
            columns.data, pull.data, localRows, half, tables.derivativeWavenumber.data, columnComplex);
        MESH_LAUNCH_CHECK();
      }
      lap(seconds.green);
      transformColumns(pull.data, CUFFT_INVERSE);
      lap(seconds.fft);
      columnsToSlab(pull.data);
      lap(seconds.transpose);
      inversePlanes(slab.data);
      lap(seconds.fft);
      share(slab.data, 0);
      lap(seconds.interpolate);
    }
    // The potential's spectrum back to the slab, as a function of (x, k_y, k_z).
    transformColumns(columns.data, CUFFT_INVERSE);
    lap(seconds.fft);
    columnsToSlab(columns.data);
    lap(seconds.transpose);
    if (params.gradient == MeshGradient::fourier) {
      for (int axis = 1; axis <= 2; ++axis) {
        if (slabComplex > 0) {
          differentiateSlab<<<blocksFor(slabComplex), kBlock, 0, stream>>>(
              slab.data, pull.data, n, half, axis, tables.derivativeWavenumber.data, slabComplex);
          MESH_LAUNCH_CHECK();
        }
        lap(seconds.green);
        inversePlanes(pull.data);
        lap(seconds.fft);
        share(pull.data, axis);
        lap(seconds.interpolate);
      }
      if (potentials) {
        inversePlanes(slab.data);
        lap(seconds.fft);
        share(slab.data, 3);
      }
    } else {
      inversePlanes(slab.data);
      lap(seconds.fft);
      if (count > 0 && localPlanes > 0) {
        finiteDifferenceShareKernel<S><<<blocksFor(count), kBlock, 0, stream>>>(
            deviceRecords.data, count, grid, invBox, offset, planes(), invCell, reinterpret_cast<double*>(slab.data),
            potentials, weight, deviceShares.data);
        MESH_LAUNCH_CHECK();
      }
    }
    lap(seconds.interpolate);
    return mass;
  }
};

GpuSlabMesh::GpuSlabMesh(const MeshParams& params, SlabSplit split, SlabComm comm) {
  params.validate();
  MATCHA_ASSERT(split.ranks() > 0 && split.rank >= 0 && split.rank < split.ranks() &&
                    split.xCount.size() == split.xFirst.size() && split.yFirst.size() == split.xFirst.size() &&
                    split.yCount.size() == split.xFirst.size(),
                "GpuSlabMesh: a malformed split");
  impl_ = std::make_unique<Impl>(params, std::move(split), std::move(comm));
}

GpuSlabMesh::~GpuSlabMesh() = default;

double* GpuSlabMesh::records(std::size_t count) { return impl_->records(count); }

void GpuSlabMesh::beginCall(std::size_t count, GpuSlabSeconds& seconds) { impl_->beginCall(count, seconds); }

double GpuSlabMesh::pass(double offset, double G, bool potentials, double weight, GpuSlabSeconds& seconds) {
  return impl_->params.assignment == MassAssignment::cic ? impl_->pass<2>(offset, G, potentials, weight, seconds)
                                                         : impl_->pass<3>(offset, G, potentials, weight, seconds);
}

void GpuSlabMesh::endCall(GpuSlabSeconds& seconds) { impl_->endCall(seconds); }

bool GpuSlabMesh::directTransposes() const { return impl_->direct; }

std::size_t GpuSlabMesh::deviceBytes() const {
  const Impl& m = *impl_;
  return (m.slab.count + m.columns.count + m.pull.count + m.packed.count + m.unpacked.count) * sizeof(double2) +
         m.fftWorkArea.count + (m.deviceRecords.count + m.deviceShares.count) * sizeof(double);
}

std::size_t GpuSlabMesh::hostBytes() const {
  const Impl& m = *impl_;
  return (m.sendHost.count + m.recvHost.count + m.hostRecords.count) * sizeof(double);
}

}  // namespace matcha::mesh::detail
