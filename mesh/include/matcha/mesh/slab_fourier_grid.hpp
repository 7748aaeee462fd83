// SPDX-License-Identifier: MIT
// FourierGrid split over the ranks of a distributed run (issue 19): a real n^3 grid in slabs of x planes, as FFTW's
// MPI interface splits it (fftw_mpi_local_size_3d_transposed), with its in-place transforms. No rank holds the whole
// grid: what cosmology/'s initial conditions need to make a 1024^3 start on ranks whose hosts could not hold it whole.
// The transform is left transposed (FFTW_MPI_TRANSPOSED_OUT/IN, as SlabMesh's): the modes are split by their y index,
// which saves the all-to-all back. Built only with MATCHA_MPI.
//
// Layout on a rank with planes [firstPlane, firstPlane + planes) and mode rows [firstModeRow, firstModeRow +
// modeRows):
//   real value p = (px, py, pz), px in the planes:  ((px - firstPlane) n + py) 2 (n/2 + 1) + pz   (realIndex)
//   mode m = (mx, my, mz), my in the rows:           ((my - firstModeRow) n + mx) (n/2 + 1) + mz  (spectrumIndex)
// Transforms are unnormalised, with FourierGrid's signs: inverse(forward(f)) = n^3 f. They give FourierGrid's values to
// the rounding of another order of the same sums. A rank may own no planes or no rows (FFTW's blocks are ceil(n/K)).
#pragma once

#include <mpi.h>

#include <complex>
#include <cstddef>
#include <memory>

namespace matcha::mesh {

/// Bytes one rank's SlabFourierGrid holds, at most: FFTW's allocation for ceil(n/K) planes or rows.
std::size_t slabFourierGridBytes(int n, int numRanks);

class SlabFourierGrid {
 public:
  /// Collective over `comm` (which must outlive the grid; it is not duplicated: the transforms' messages are FFTW's
  /// own, matched in order). n in [kMinGrid, kMaxGrid] (particle_mesh.hpp), InputError otherwise, alike on every rank.
  /// Allocates this rank's share and plans (FFTW_ESTIMATE, kFftJobs jobs on TBB's threads).
  SlabFourierGrid(int n, MPI_Comm comm);
  ~SlabFourierGrid();
  SlabFourierGrid(const SlabFourierGrid&) = delete;
  SlabFourierGrid& operator=(const SlabFourierGrid&) = delete;

  int grid() const;          ///< n
  int firstPlane() const;    ///< this rank's first x plane of the real grid
  int planes() const;        ///< how many (0 on a rank past the last block)
  int firstModeRow() const;  ///< this rank's first y index of the modes
  int modeRows() const;      ///< how many

  double* real();
  const double* real() const;
  std::complex<double>* spectrum();
  const std::complex<double>* spectrum() const;

  /// Index of grid point (px, py, pz) in real(); px in this rank's planes.
  std::size_t realIndex(int px, int py, int pz) const;
  /// Index of mode (mx, my, mz), my in this rank's rows, mz in [0, n/2], in spectrum().
  std::size_t spectrumIndex(int mx, int my, int mz) const;
  /// Values in spectrum() this rank holds: modeRows() n (n/2 + 1).
  std::size_t localModes() const;

  void forward();  ///< collective: real -> spectrum, in place
  void inverse();  ///< collective: spectrum -> real, in place (overwrites the spectrum)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace matcha::mesh
