// SPDX-License-Identifier: MIT
// What the CPU meshes share beyond mesh_kernels.hpp: the per-axis tables of the Green's function and the spectral
// derivative, and the loops over one spectrum row (x, y) that use them, so that the whole-grid mesh
// (particle_mesh.cpp) and the slabs over ranks (slab_mesh.cpp, whose spectrum is transposed) run the same code per row;
// the first body with a non-finite position; the self-potential correction of every body.
#pragma once

#include <complex>
#include <cstddef>
#include <vector>

#include "matcha/core/particles.hpp"
#include "matcha/mesh/particle_mesh.hpp"

namespace matcha::mesh::detail {

/// Per mesh index 0..n-1: greenAxisFactor, signedMode^2 and 2 pi derivativeMode / L (mesh_kernels.hpp).
class ModeTables {
 public:
  explicit ModeTables(const MeshParams& params);

  /// The spectrum's row (x, y), `half` = n/2 + 1 values, times the Green's function (greenScale `scale` included).
  void applyGreen(std::complex<double>* row, std::size_t half, int x, int y, double scale) const;
  /// pull = -i k_d phi along `axis` (0 x, 1 y, 2 z) for the row (x, y).
  void differentiate(const std::complex<double>* phi, std::complex<double>* pull, std::size_t half, int x, int y,
                     int axis) const;

 private:
  std::vector<double> greenAxis_, modeSquared_, derivativeWavenumber_;
};

/// The first body of `s` whose position is not finite, or s.count (on every core).
std::size_t firstNonFinitePosition(const SourceView& s);

/// pot[i] += selfPotentialCorrection for every body of `s` (mesh_kernels.hpp), totalMass the mesh's k = 0 mode.
void addSelfPotentials(const SourceView& s, const MeshParams& params, double G, double totalMass, double* pot);

}  // namespace matcha::mesh::detail
