// SPDX-License-Identifier: MIT
// A real n^3 grid with its in-place Fourier transforms, for fields built in Fourier space outside mesh/ (cosmology/'s
// initial conditions): the FFTW set-up of ParticleMesh and MassMesh (FFTW's threads run on TBB's workers, plans made
// once for kFftJobs jobs with FFTW_ESTIMATE), so the same input gives the same bits whatever the number of threads.
// No FFTW header appears here.
#pragma once

#include <complex>
#include <cstddef>
#include <memory>

namespace matcha::mesh {

/// Bytes a FourierGrid of n points per side holds: 8 n^2 * 2 (n/2 + 1) (plus FFTW's plans, a few kilobytes).
std::size_t fourierGridBytes(int n);

/// n^3 real values at grid points p = (px, py, pz), stored in FFTW's padded in-place layout: value p at index
/// (px n + py) * 2 (n/2 + 1) + pz (realIndex). The same memory holds the transform: n x n x (n/2 + 1) complex values,
/// mode m = (mx, my, mz), mx, my in [0, n), mz in [0, n/2], at index (mx n + my) (n/2 + 1) + mz (spectrumIndex);
/// index i stands for the signed mode i or i - n (mesh_kernels.hpp's signedMode). Transforms are unnormalised:
///   forward:  F(m) = sum_p f(p) exp(-2 pi i m.p / n)
///   inverse:  f(p) = sum_m F(m) exp(+2 pi i m.p / n)   (over all n^3 modes, F(-m) = conj F(m) for the missing half)
/// so inverse(forward(f)) = n^3 f. Not thread-safe: one call at a time per object.
class FourierGrid {
 public:
  /// n in [kMinGrid, kMaxGrid] (particle_mesh.hpp); InputError otherwise. Allocates fourierGridBytes(n) and plans.
  explicit FourierGrid(int n);
  ~FourierGrid();
  FourierGrid(FourierGrid&&) noexcept;
  FourierGrid& operator=(FourierGrid&&) noexcept;
  FourierGrid(const FourierGrid&) = delete;
  FourierGrid& operator=(const FourierGrid&) = delete;

  int grid() const;  ///< n
  // The whole grid, in SlabFourierGrid's terms (slab_fourier_grid.hpp), for code written for both.
  int firstPlane() const { return 0; }
  int planes() const { return grid(); }
  int firstModeRow() const { return 0; }
  int modeRows() const { return grid(); }
  double* real();
  const double* real() const;
  std::complex<double>* spectrum();
  const std::complex<double>* spectrum() const;

  /// Index of grid point (px, py, pz) in real().
  std::size_t realIndex(int px, int py, int pz) const;
  /// Index of mode (mx, my, mz), mz in [0, n/2], in spectrum().
  std::size_t spectrumIndex(int mx, int my, int mz) const;

  void forward();  ///< real -> spectrum, in place
  void inverse();  ///< spectrum -> real, in place (FFTW's multi-dimensional c2r overwrites its input: it is in place)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace matcha::mesh
