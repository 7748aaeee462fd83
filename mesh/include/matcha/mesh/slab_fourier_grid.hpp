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

/// One rank's share of an n^3 real grid split as FFTW's MPI interface splits it over a communicator
/// (fftw_mpi_local_size_3d_transposed: blocks of ceil(n/K) x planes in rank order, and of the transposed modes' y rows
/// alike), with the layout above. What a SlabFourierGrid holds, and what a caller needs to know of one before making
/// it (the modes to draw, the planes to own).
struct SlabShare {
  int n = 0;
  int firstPlane = 0;    ///< this rank's first x plane of the real grid
  int planes = 0;        ///< how many (0 on a rank past the last block)
  int firstModeRow = 0;  ///< this rank's first y index of the modes
  int modeRows = 0;      ///< how many
  /// Complex values FFTW asks this rank to allocate: at least its planes' and its rows', room for the transposes.
  std::size_t allocatedComplex = 0;

  /// Index of grid point (px, py, pz), px in this rank's planes, in the real grid.
  std::size_t realIndex(int px, int py, int pz) const;
  /// Index of mode (mx, my, mz), my in this rank's rows, mz in [0, n/2], in the spectrum.
  std::size_t spectrumIndex(int mx, int my, int mz) const;
  /// Values this rank holds of the spectrum: modeRows n (n/2 + 1).
  std::size_t localModes() const;
};

/// This rank's share of an n^3 grid over `comm` (n in [kMinGrid, kMaxGrid], InputError otherwise): what FFTW's MPI
/// interface computes for the ranks of `comm`, with no messages. Every grid of one n over one communicator splits
/// alike.
SlabShare slabShareOf(int n, MPI_Comm comm);

class SlabFourierGrid {
 public:
  /// Collective over `comm` (which must outlive the grid; it is not duplicated: the transforms' messages are FFTW's
  /// own, matched in order). n in [kMinGrid, kMaxGrid] (particle_mesh.hpp), InputError otherwise, alike on every rank.
  /// Allocates this rank's share and plans (FFTW_ESTIMATE, kFftJobs jobs on TBB's threads).
  SlabFourierGrid(int n, MPI_Comm comm);
  ~SlabFourierGrid();
  SlabFourierGrid(const SlabFourierGrid&) = delete;
  SlabFourierGrid& operator=(const SlabFourierGrid&) = delete;

  const SlabShare& share() const;  ///< this rank's planes and rows
  // The share's, as FourierGrid has them (the initial conditions' templates take either grid).
  int grid() const { return share().n; }
  int firstPlane() const { return share().firstPlane; }
  int planes() const { return share().planes; }
  int firstModeRow() const { return share().firstModeRow; }
  int modeRows() const { return share().modeRows; }
  std::size_t realIndex(int px, int py, int pz) const { return share().realIndex(px, py, pz); }
  std::size_t spectrumIndex(int mx, int my, int mz) const { return share().spectrumIndex(mx, my, mz); }
  std::size_t localModes() const { return share().localModes(); }

  double* real();
  const double* real() const;
  std::complex<double>* spectrum();
  const std::complex<double>* spectrum() const;

  void forward();  ///< collective: real -> spectrum, in place
  void inverse();  ///< collective: spectrum -> real, in place (overwrites the spectrum)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace matcha::mesh
