// SPDX-License-Identifier: MIT
// The particle mesh split over the ranks of a distributed run (issue 19), in slabs of x planes: each rank owns the
// planes FFTW's MPI interface gives it (fftw_mpi_local_size_3d_transposed) and no rank holds the whole grid. As in
// GADGET-4's default periodic PM, the bodies travel, not the mesh. Per pass (two when interlaced):
//  1. each rank sends each of its bodies (position and mass) to the ranks whose slabs its window reaches: one rank
//     for most bodies, two for those within a window of a slab's edge (MPI_Alltoallv, in an order fixed by the input);
//  2. each rank deposits the bodies it received on its own planes (the parts of their windows there), FFTW-MPI
//     transforms (its output transposed: y split over the ranks, which saves the transpose back), the Green's
//     function and the gradient in Fourier space (or, for finite differences, the potential alone) act on its modes,
//     and the inverse transforms bring each field back to its slab;
//  3. each rank interpolates every field at the bodies it received, over its own planes (its share of each body's
//     window sum; finite differences read two planes more on each side, which step 1 counted in), and sends the
//     shares back; each body's rank adds them, slab by slab in rank order.
// The arithmetic is ParticleMesh's (mesh_kernels.hpp: the same window, Green's function, differences and self term,
// restricted to a slab's planes by PlaneRange), so the forces are ParticleMesh's on all the ranks' bodies to the
// rounding of the deposit's and the window sums' order and of the distributed transforms (tests/parallel:
// test_slab_mesh.cpp). A one-rank SlabMesh gives ParticleMesh's bits.
//
// Memory per rank (slabMeshMemoryBytes, particle_mesh.hpp): the slab, 8 n^2 2 (n/2 + 1) / K bytes (FFTW's allocation;
// twice with the Fourier gradient), and ~100 bytes per body: 36 for each record it sends (position and mass out, the
// share back in the same place, and its index) and 68 for each it receives (the record, the body again as the deposit's
// arrays, the deposit's order). A body near a slab's edge goes to two slabs. Traffic per pass: 32 bytes each way per
// record. Built only with MATCHA_MPI.
//
// Two backends, by params.backend: FFTW-MPI on the hosts' cores (above), or cuFFT on each rank's GPU (params.device;
// mesh/src/gpu_slab.hpp): the same routing and split, each rank's slab on its device, the distributed transform as
// 2-d transforms of the planes, an all-to-all transpose (device to device between the ranks of one host, else through
// page-locked host memory) and 1-d transforms along x. Its bodies are routed once a call for both interlaced passes
// (to the slabs either window reaches) and go up once; both passes' shares are summed on the device and come down
// once, in page-locked records. Device memory per rank: about five
// times the slab's complex values (16 n^2 (n/2 + 1) / K bytes each) and 64 bytes per received body; host memory: twice
// the slab (the transposes' buffers, none on one rank) and the records.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <memory>

#include "matcha/core/params.hpp"
#include "matcha/core/particles.hpp"
#include "matcha/mesh/particle_mesh.hpp"

namespace matcha::mesh {

/// How the cuFFT backend's transposes travel between the ranks (gpu_slab.hpp): `automatic`, from device to device
/// where every rank is on one host and CUDA maps the ranks' buffers into each other (CUDA IPC), else through the
/// hosts' memory and MPI; `throughHost`, always the latter (a test's or a benchmark's comparison).
enum class SlabTransposes { automatic, throughHost };

/// What the last SlabMesh::addLongRange did on this rank.
struct SlabMeshStats {
  int slabPlanes = 0;              ///< x planes of the mesh this rank owns
  std::size_t bodiesSent = 0;      ///< bodies sent to slabs (this rank's own included), all passes
  std::size_t bodiesReceived = 0;  ///< bodies received for this rank's slab (its own included), all passes
  std::size_t bytesSent = 0;       ///< bodies and shares, all passes
  std::size_t bytesReceived = 0;   ///< the same, received
  std::size_t heldBytes = 0;       ///< the mesh's host memory on this rank after the call: slabs, bodies, shares
  std::size_t deviceBytes = 0;     ///< the cuFFT backend's device memory on this rank (0 on FFTW's)
  double depositSeconds = 0;       ///< the received bodies onto the slab
  double exchangeSeconds = 0;      ///< routing the bodies and their shares (MPI and packing)
  double fftSeconds = 0;           ///< the transforms (FFTW-MPI's include their own all-to-all transposes)
  double transposeSeconds = 0;     ///< cuFFT backend: the transposes (packing, the bus both ways, MPI)
  double transposeMpiSeconds = 0;  ///< cuFFT backend: the transposes' MPI calls alone (exchange, or barriers)
  double greenSeconds = 0;         ///< the Green's function and the Fourier gradient's multiplications
  double interpolateSeconds = 0;   ///< the received bodies' shares of each field
  double totalSeconds = 0;
};

/// ParticleMesh over the ranks of `comm`, the FFTW backend's arithmetic on a slab-decomposed grid. Not thread-safe:
/// one call at a time per object; every call is collective over the communicator.
class SlabMesh {
 public:
  /// Collective. Validates params (InputError on every rank, alike), duplicates `comm` (MPI_Comm_dup: its messages
  /// never meet the caller's), allocates this rank's slab and plans its transforms: FFTW-MPI's (FFTW_ESTIMATE,
  /// kFftJobs jobs on TBB's threads as ParticleMesh plans them), or cuFFT's on params.device (MeshBackend::cufft;
  /// InputError where there is no such device, the build has no CUDA or the slab does not fit).
  SlabMesh(const MeshParams& params, MPI_Comm comm, SlabTransposes transposes = SlabTransposes::automatic);
  ~SlabMesh();
  SlabMesh(const SlabMesh&) = delete;
  SlabMesh& operator=(const SlabMesh&) = delete;

  const MeshParams& params() const;
  int numRanks() const;

  /// Collective: adds the long-range periodic acceleration (and potential with its self-energy correction, where
  /// out.pot is non-null on every rank) from the bodies of all ranks at this rank's bodies, as
  /// ParticleMesh::addLongRange does for all of them at once. A rank without bodies takes part.
  /// @param sources  in: this rank's bodies, positions anywhere (reduced into the box), masses
  /// @param gravity  in: G, alike on every rank
  /// @param out      in/out: out.count == sources.count; ADDED to
  /// Throws InputError on every rank, one line, when a rank holds a body with a non-finite position (naming the first
  /// such rank and body); InvariantError for a size mismatch.
  void addLongRange(const SourceView& sources, const GravityParams& gravity, const ForceView& out);

  SlabMeshStats lastStats() const;
  /// Whether the cuFFT backend's transposes go from device to device (false on FFTW's, which transposes itself).
  bool directTransposes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace matcha::mesh
