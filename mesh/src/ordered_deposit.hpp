// SPDX-License-Identifier: MIT
// The CPU deposit of masses on the mesh in an order fixed by the input alone, shared by the particle mesh
// (particle_mesh.cpp) and the public mass mesh (mass_mesh.cpp). Private to mesh/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "matcha/core/particles.hpp"
#include "matcha/mesh/mesh_kernels.hpp"
#include "matcha/mesh/particle_mesh.hpp"

namespace matcha::mesh::detail {

/// Deposits bodies' masses on an n^3 periodic mesh (mesh_kernels.hpp: BodyWindow, depositBody) with TBB threads and
/// the same bits whatever their number: bodies are binned by the mesh plane of their window's first point into an even
/// number of chunks of >= 2 planes, the chunks of even index deposit in parallel, then the odd ones, each chunk its
/// bodies in body order. A mesh point therefore sums the bodies of the (at most two) chunks that reach it in a fixed
/// order. Not thread-safe: one call at a time per object.
class OrderedDeposit {
 public:
  /// n: mesh points per side (>= 1); boxSize: L > 0; owner: what errors name first ("particle mesh"). Allocates the
  /// plane-to-chunk table only.
  OrderedDeposit(int n, double boxSize, std::string owner);

  /// Bins `bodies` (positions anywhere, reduced into the box; moved by `offset` mesh cells along each axis, in [0, 1))
  /// and writes their masses with `assignment`'s window into `rho`, the padded real grid of `layout` (n x n x P), which
  /// is zeroed first. Throws InputError ("<owner>: body i has a non-finite position") for the first such body (rho is
  /// then unspecified). Allocates the order (4 bytes per body) when the bodies outnumber every earlier call's.
  /// bodies.count < 2^32.
  void deposit(const SourceView& bodies, MassAssignment assignment, double offset, double* rho);

  /// The same deposit on a slab of the mesh: rho holds planes.count x n x P values (zeroed first), the mesh's plane
  /// planes.first + j at plane j, and gets the parts of the bodies' windows on those planes (a body's other planes are
  /// some other slab's). The bits at a point of the slab are those of the whole-mesh deposit of the same bodies.
  void deposit(const SourceView& bodies, MassAssignment assignment, double offset, double* rho, PlaneRange planes);

  /// The bodies' indices in the order of the last deposit (grouped by chunk, in body order within one): an
  /// interpolation that visits them in this order reads neighbouring planes together. The first bodies.count entries.
  const std::vector<std::uint32_t>& order() const { return order_; }

  /// The layout of the padded grid `deposit` writes.
  MeshLayout layout() const { return {n_, 2 * (static_cast<unsigned long long>(n_) / 2 + 1)}; }

 private:
  template <MassAssignment A>
  int homeChunk(const SourceView& s, std::size_t i, double offset) const;
  template <MassAssignment A>
  void bin(const SourceView& s, double offset);
  template <MassAssignment A>
  void depositBinned(const SourceView& s, double offset, double* rho, PlaneRange planes) const;

  int n_;
  double invBox_;
  std::string owner_;
  std::vector<int> chunkOfPlane_;  ///< deposit chunk of each x plane
  int numChunks_ = 0;
  std::vector<std::uint32_t> order_;     ///< body indices grouped by chunk, in body order within a chunk
  std::vector<std::size_t> chunkStart_;  ///< numChunks + 1 offsets into order
  std::vector<std::size_t> binCursor_;   ///< blocks x chunks counts, then cursors
  std::vector<std::size_t> firstBad_;    ///< per block, the first body with a non-finite position (count if none)
};

}  // namespace matcha::mesh::detail
