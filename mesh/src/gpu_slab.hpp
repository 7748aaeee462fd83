// SPDX-License-Identifier: MIT
// The cuFFT backend of SlabMesh (slab_mesh.hpp), seen from plain C++ (no CUDA or MPI header): one rank's slab of the
// grid on its GPU. mesh/cuda/gpu_slab_mesh.cu implements it when CUDA is enabled, no_gpu_mesh.cpp (which refuses with
// an InputError) otherwise. SlabMesh keeps what both backends share: routing the bodies to the slabs their windows
// reach and their shares back, the deposited mass's sum over the ranks, the self-potential correction.
//
// The distributed transform, cuFFT's in pieces (the layout FFTW-MPI's transposed transform uses, done by hand):
//  - forward: a 2-d real-to-complex transform of each of the rank's x planes (over y and z); an all-to-all transpose
//    that leaves each rank every x of its rows of y; a 1-d transform along x. The Green's function acts there.
//  - back: the pull along x is -i k_x times the spectrum, which needs the whole x axis: it gets its own 1-d inverse
//    along x and its own transpose back. The potential's spectrum takes one 1-d inverse along x and one transpose
//    back; on the slab (each plane a function of k_y and k_z) the pulls along y and z are -i k_y and -i k_z times it,
//    each then a 2-d inverse, and so is the potential. Two transposes back instead of the four a transposed 3-d
//    transform per field would take; the same operators, so the same forces to the transforms' rounding.
//  - finite differences: the potential alone, one transpose back.
// Each transpose packs the rank's data into one block per rank on the device and unpacks what the other ranks packed
// for it; the rank's own block stays on the device. The other blocks travel one of two ways:
//  - direct, when every rank is on one host (SlabComm::sameHost) and CUDA maps each rank's packing buffer into the
//    others' (CUDA IPC, opened once): each rank copies its blocks out of the others' buffers, device to device (over
//    NVLink between GPUs, or within one GPU that the ranks share), between two barriers;
//  - through page-locked host memory and the caller's MPI_Alltoallv (ranks on several hosts, or where IPC fails on
//    any rank: every rank then takes this way).
// A call: beginCall uploads the records (each body that reaches the slab, once for all passes), each pass adds its
// weighted share into the records' shares on the device, and endCall brings the shares down into the records.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "matcha/mesh/particle_mesh.hpp"

namespace matcha::mesh::detail {

/// How the grid is split over the ranks: rank r owns x planes [xFirst[r], xFirst[r] + xCount[r]) of the real grid and
/// rows y of [yFirst[r], yFirst[r] + yCount[r]) of the transposed spectrum (FFTW-MPI's split, so that both backends
/// route the bodies alike). Every plane and row has one owner; a rank may own none.
struct SlabSplit {
  int rank = 0;
  std::vector<int> xFirst, xCount, yFirst, yCount;
  int ranks() const { return static_cast<int>(xFirst.size()); }
};

/// What the slab needs of the ranks' communicator (SlabMesh wraps MPI in it); every function is collective.
struct SlabComm {
  /// A transpose through the host: this rank's block for rank r, sendCounts[r] complex values (2 doubles each) at
  /// sendDispls[r] of `send`, goes to rank r, and rank r's block for this rank lands at recvDispls[r] of `recv`. The
  /// rank's own counts are 0 (its block stays on the device). Counts and displacements in complex values.
  std::function<void(const double* send, const std::vector<std::size_t>& sendCounts,
                     const std::vector<std::size_t>& sendDispls, double* recv,
                     const std::vector<std::size_t>& recvCounts, const std::vector<std::size_t>& recvDispls)>
      alltoallv;
  std::function<void()> barrier;
  /// Every rank's `bytes` bytes at `mine`, in rank order, into `all`.
  std::function<void(const void* mine, std::size_t bytes, void* all)> allgather;
  /// true on every rank when `mine` is true on every rank.
  std::function<bool(bool mine)> everyRank;
  bool sameHost = false;    ///< every rank on one host: the direct transposes may be tried
  bool allowDirect = true;  ///< false: the transposes go through the host whatever the ranks (tests, benchmarks)
};

/// Seconds of one pass's stages on the host's clock (the stream is waited for at each stage's end).
struct GpuSlabSeconds {
  double deposit = 0;      ///< the bodies' upload, zeroing the slab and the deposit
  double fft = 0;          ///< cuFFT's 2-d and 1-d transforms
  double green = 0;        ///< the Green's function and the multiplications by -i k
  double transpose = 0;    ///< packing, the bus both ways and the exchange
  double interpolate = 0;  ///< the bodies' shares and their download
};

class GpuSlabMesh {
 public:
  /// Collective. Validated params (params.device the GPU). Plans cuFFT's transforms, allocates the slab's buffers on
  /// the device and opens the other ranks' packing buffers (direct transposes), or else allocates the transposes'
  /// page-locked host buffers (none on one rank). Throws InputError (one line) when there is no device or the buffers
  /// do not fit in its free memory, or when a transpose's block would exceed MPI's int counts.
  GpuSlabMesh(const MeshParams& params, SlabSplit split, SlabComm comm);
  ~GpuSlabMesh();
  GpuSlabMesh(const GpuSlabMesh&) = delete;
  GpuSlabMesh& operator=(const GpuSlabMesh&) = delete;

  /// Page-locked room for `count` records of 4 doubles (x, y, z, mass of a body that reaches this slab), kept from
  /// call to call and grown by an eighth beyond the need; valid until the next call of records.
  double* records(std::size_t count);

  /// Uploads the first `count` records of records() and clears their shares.
  void beginCall(std::size_t count, GpuSlabSeconds& seconds);
  /// One pass over the call's records: deposits them on this rank's planes (their mesh coordinates moved by `offset`
  /// cells), transforms over the ranks (collective: every rank calls it, with or without bodies), applies the Green's
  /// function and adds `weight` times this slab's share of each body's pull (ax, ay, az) and, when `potentials`,
  /// potential to its shares. Returns this rank's part of the k = 0 mode (the deposited mass, on the rank holding row
  /// y = 0; 0 elsewhere).
  double pass(double offset, double G, bool potentials, double weight, GpuSlabSeconds& seconds);
  /// Writes each record's shares (ax, ay, az, potential; 0 where not asked for) over it.
  void endCall(GpuSlabSeconds& seconds);

  bool directTransposes() const;  ///< whether the transposes copy between the ranks' devices

  std::size_t deviceBytes() const;  ///< held on the device: buffers, cuFFT's work area, the records
  std::size_t hostBytes() const;    ///< page-locked: the transposes' buffers and the records

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace matcha::mesh::detail
