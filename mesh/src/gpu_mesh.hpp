// SPDX-License-Identifier: MIT
// The cuFFT backend of ParticleMesh, seen from plain C++ (no CUDA header): mesh/cuda/gpu_mesh.cu implements it when
// CUDA is enabled, mesh/src/no_gpu_mesh.cpp (which refuses with an InputError) otherwise. particle_mesh.cpp owns the
// parts the backends share: validation, the host-side additions and the self-potential correction.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "matcha/core/errors.hpp"
#include "matcha/core/particles.hpp"
#include "matcha/mesh/particle_mesh.hpp"

namespace matcha::mesh::detail {

/// What one GpuMesh::compute leaves: the long-range accelerations (and potentials) of every body, both interlaced
/// passes averaged, without the self-potential correction; in host memory the object owns, valid until the next call.
struct GpuMeshResult {
  const double* ax = nullptr;
  const double* ay = nullptr;
  const double* az = nullptr;
  double* pot = nullptr;     ///< null when no potentials were asked for; the caller may add its self term in place
  double depositedMass = 0;  ///< the first pass's k = 0 mode: sum m_i to rounding, as the FFTW backend takes it
};

class GpuMesh {
 public:
  /// Validated params. Picks params.device (0 by default, the CUDA engine's default), makes the cuFFT plans and
  /// allocates the grids; every call selects that device again.
  /// Throws InputError (one line) when there is no device or the grids and cuFFT's work area exceed its free memory.
  explicit GpuMesh(const MeshParams& params);
  ~GpuMesh();
  GpuMesh(const GpuMesh&) = delete;
  GpuMesh& operator=(const GpuMesh&) = delete;

  /// Every step of the mesh for `sources` (finite positions, checked by the caller) with constant G: copies the
  /// bodies into page-locked memory (on all cores), queues the uploads, kernels and transforms on the mesh's stream,
  /// and returns; `sources` is not read after it returns. The results' download is queued by orderResults or, without
  /// it, by collect. Returns sources.count, or the index of a body with a non-finite position (found while copying;
  /// then nothing is queued). A launch still in flight is waited for and
  /// dropped first. Throws InputError when the bodies' buffers would not fit in the free device memory, CudaError for
  /// a failed call.
  std::size_t launch(const SourceView& sources, double G, bool wantPotentials);
  /// Queues the download of the launch in flight's results (before collect), in the launch's order of the bodies
  /// (`newOrder` empty) or in a new one: result k is then that of the launch's body newOrder[k] (a permutation of
  /// [0, n)), gathered on the device. A second call supersedes the first (its download lands last). `newOrder` is
  /// copied before this returns.
  void orderResults(std::span<const std::uint32_t> newOrder);
  /// Waits for the last launch and hands over its results (`waitSeconds`: the host's wait for the device). Throws
  /// InvariantError without a launch in flight.
  GpuMeshResult collect(double* waitSeconds = nullptr);
  /// Waits for a launch in flight, if any, and drops it.
  void drop();
  /// launch, then collect: the same stream of work, so the same results.
  GpuMeshResult compute(const SourceView& sources, double G, bool wantPotentials) {
    MATCHA_ASSERT(launch(sources, G, wantPotentials) == sources.count, "GpuMesh::compute: a non-finite position");
    return collect();
  }

  MeshStageSeconds lastStageSeconds() const;

  /// ParticleMesh::setDensityReduction on this backend: each pass's deposited grid goes to page-locked host memory,
  /// through `reduce`, and back before the transforms (the launch then waits for the device at each pass). With one,
  /// a launch of no bodies still deposits nothing, sums and solves. Allocates the host copy (8 n^3 bytes, pinned).
  void setDensityReduction(std::function<void(std::span<double>)> reduce);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace matcha::mesh::detail
