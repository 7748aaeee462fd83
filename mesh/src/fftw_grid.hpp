// SPDX-License-Identifier: MIT
// The FFT backend of the CPU particle mesh: one padded grid with its in-place FFTW plans. The mesh arithmetic
// (particle_mesh.cpp, mesh_kernels.hpp) sees only the two pointers and the two transforms, so that a cuFFT twin can
// replace this class without touching it. Private to mesh/: no FFTW header leaves src/.
#pragma once

#include <complex>
#include <cstddef>
#include <mutex>

namespace matcha::mesh::detail {

/// FFTW's thread set-up is process-wide: its threaded loops run on TBB's workers (fftw_threads_set_callback), set up
/// once by the first grid (or the slab mesh, slab_mesh.cpp) before it plans.
void setUpThreadsOnce();
/// FFTW's planner is not reentrant and fftw_plan_with_nthreads is a global that the next plan reads: every plan is
/// made, and destroyed, holding this.
std::mutex& plannerMutex();
/// FFTW-MPI's set-up, once per process, after the threads' (fftw_mpi_init must follow fftw_init_threads). MATCHA_MPI
/// builds only: defined in slab_fourier_grid.cpp, used there and by slab_mesh.cpp.
void setUpMpiOnce();

/// n^3 real values in FFTW's padded in-place layout (n x n x 2 (n/2 + 1) doubles), which also hold their transform
/// (n x n x (n/2 + 1) complex values), and the forward (real to complex) and inverse (complex to real) plans.
/// Transforms are unnormalised, forward with exp(-i k.x). The plans are made once, FFTW_ESTIMATE (no timing: the
/// same plan every time, and the grid is not overwritten while planning), for `jobs` jobs that FFTW hands to TBB.
class FftwGrid {
 public:
  FftwGrid(int n, int jobs);
  ~FftwGrid();
  FftwGrid(const FftwGrid&) = delete;
  FftwGrid& operator=(const FftwGrid&) = delete;

  double* real() { return data_; }
  const double* real() const { return data_; }
  std::complex<double>* spectrum() { return reinterpret_cast<std::complex<double>*>(data_); }
  /// Doubles in the padded grid: n * n * 2 (n/2 + 1).
  static std::size_t paddedSize(int n);

  void forward();  ///< real -> spectrum, in place
  void inverse();  ///< spectrum -> real, in place (overwrites the spectrum: FFTW's multi-dimensional c2r does)

 private:
  void release();

  double* data_ = nullptr;
  void* forwardPlan_ = nullptr;  // fftw_plan
  void* inversePlan_ = nullptr;
};

}  // namespace matcha::mesh::detail
