// SPDX-License-Identifier: MIT
// Masses on a periodic mesh and their Fourier transform: the first half of the particle mesh (particle_mesh.hpp),
// deposit and forward transform, for measurements on the mesh (cosmology/'s power spectrum). The same window
// (mesh_kernels.hpp), the same ordered deposit and the same FFTW set-up as ParticleMesh's FFTW backend; no FFTW header
// appears here.
#pragma once

#include <complex>
#include <cstddef>
#include <memory>

#include "matcha/core/particles.hpp"
#include "matcha/mesh/particle_mesh.hpp"

namespace matcha::mesh {

/// Bytes a MassMesh of n points per side holds: its padded grid, 8 n^2 * 2 (n/2 + 1) bytes (plus 4 bytes per body for
/// the deposit order while it deposits, and FFTW's plans, a few kilobytes).
std::size_t massMeshBytes(int n);

/// An n^3 mesh over the periodic cube [0, L)^3 that takes bodies' masses and transforms them.
///
/// Layout (mesh_kernels.hpp): mesh point p = (px, py, pz) sits at p h, h = L / n. After depositAndTransform the
/// spectrum holds the unnormalised forward transform
///   F(m) = sum_p rho_p exp(-2 pi i m.p / n),   rho_p = the mass the window gave point p,
/// for mx, my in [0, n) and mz in [0, n/2] (F(-m) = conj F(m) gives the rest), at index (mx n + my) (n/2 + 1) + mz;
/// index i stands for the signed mode signedMode(i, n), wavevector k = 2 pi m / L. F(0) is the deposited mass.
///
/// Reproducibility: the same bodies give the same bits whatever the number of TBB threads (the ordered deposit of
/// ParticleMesh, FFTW plans made for kFftJobs jobs; see ParticleMesh). Not thread-safe: one call at a time per object.
class MassMesh {
 public:
  /// n in [kMinGrid, kMaxGrid] (any size; fftFriendlyGridSize gives fast ones), boxSize L finite and > 0. Allocates the
  /// grid (massMeshBytes(n)) and makes the FFTW plans. Throws InputError (one line) for a bad n or L.
  MassMesh(int n, double boxSize);
  ~MassMesh();
  MassMesh(MassMesh&&) noexcept;
  MassMesh& operator=(MassMesh&&) noexcept;
  MassMesh(const MassMesh&) = delete;
  MassMesh& operator=(const MassMesh&) = delete;

  int grid() const;        ///< n
  double boxSize() const;  ///< L

  /// Replaces the mesh's contents by the masses of `bodies` deposited with `assignment`'s window, every body moved by
  /// `offset` mesh cells along each axis (0; 1/2 for the interlaced copy of Hockney & Eastwood, whose spectrum is the
  /// unshifted one's times exp(-i k.(1,1,1) h/2) for the modes, with the opposite sign on the odd aliases), then
  /// transforms in place. Returns the deposited mass, F(0) (sum of the masses to rounding).
  /// @param bodies      in: positions (anywhere: reduced into [0, L)) and masses; 1 <= count < 2^32
  /// @param assignment  in: CIC or TSC
  /// @param offset      in: in [0, 1)
  /// Throws InputError for a body with a non-finite position (naming it), no bodies, too many, or a bad offset.
  /// Parallel (TBB); allocates the deposit order (4 bytes per body) when the bodies outnumber every earlier call's.
  double depositAndTransform(const SourceView& bodies, MassAssignment assignment, double offset = 0.0);

  /// The transform of the last depositAndTransform: n * n * (n/2 + 1) values (layout above). Unspecified before it.
  const std::complex<double>* spectrum() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace matcha::mesh
