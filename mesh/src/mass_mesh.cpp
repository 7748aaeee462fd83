// SPDX-License-Identifier: MIT
#include "matcha/mesh/mass_mesh.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "fftw_grid.hpp"
#include "matcha/core/errors.hpp"
#include "matcha/core/params.hpp"
#include "ordered_deposit.hpp"

namespace matcha::mesh {

std::size_t massMeshBytes(int n) { return detail::FftwGrid::paddedSize(n) * sizeof(double); }

struct MassMesh::Impl {
  int n;
  double boxSize;
  detail::FftwGrid grid;
  detail::OrderedDeposit depositor;

  Impl(int points, double side)
      : n(points), boxSize(side), grid(points, kFftJobs), depositor(points, side, "mass mesh") {}
};

namespace {

void validateMesh(int n, double boxSize) {
  requireFinite(boxSize, "mass mesh: box size");
  if (!(boxSize > 0)) throw InputError("mass mesh: box size must be > 0 (got " + std::to_string(boxSize) + ")");
  if (n < kMinGrid || n > kMaxGrid) {
    throw InputError("mass mesh: the grid must be " + std::to_string(kMinGrid) + " to " + std::to_string(kMaxGrid) +
                     " points per side (got " + std::to_string(n) + ")");
  }
}

}  // namespace

MassMesh::MassMesh(int n, double boxSize) {
  validateMesh(n, boxSize);
  impl_ = std::make_unique<Impl>(n, boxSize);
}
MassMesh::~MassMesh() = default;
MassMesh::MassMesh(MassMesh&&) noexcept = default;
MassMesh& MassMesh::operator=(MassMesh&&) noexcept = default;

int MassMesh::grid() const { return impl_->n; }
double MassMesh::boxSize() const { return impl_->boxSize; }

double MassMesh::depositAndTransform(const SourceView& bodies, MassAssignment assignment, double offset) {
  if (bodies.count == 0) throw InputError("mass mesh: no bodies to deposit");
  if (bodies.count > std::numeric_limits<std::uint32_t>::max()) {
    throw InputError("mass mesh: at most 2^32 - 1 bodies (got " + std::to_string(bodies.count) + ")");
  }
  if (!(offset >= 0.0 && offset < 1.0)) {
    throw InputError("mass mesh: the deposit offset must be in [0, 1) mesh cells (got " + std::to_string(offset) + ")");
  }
  impl_->depositor.deposit(bodies, assignment, offset, impl_->grid.real());
  impl_->grid.forward();
  return impl_->grid.spectrum()[0].real();
}

const std::complex<double>* MassMesh::spectrum() const { return impl_->grid.spectrum(); }

}  // namespace matcha::mesh
