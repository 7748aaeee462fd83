// SPDX-License-Identifier: MIT
#include "matcha/mesh/fourier_grid.hpp"

#include <string>

#include "fftw_grid.hpp"
#include "matcha/core/errors.hpp"
#include "matcha/mesh/particle_mesh.hpp"

namespace matcha::mesh {

std::size_t fourierGridBytes(int n) { return detail::FftwGrid::paddedSize(n) * sizeof(double); }

struct FourierGrid::Impl {
  int n;
  detail::FftwGrid grid;
  Impl(int points) : n(points), grid(points, kFftJobs) {}
};

FourierGrid::FourierGrid(int n) {
  if (n < kMinGrid || n > kMaxGrid) {
    throw InputError("Fourier grid: the grid must be " + std::to_string(kMinGrid) + " to " + std::to_string(kMaxGrid) +
                     " points per side (got " + std::to_string(n) + ")");
  }
  impl_ = std::make_unique<Impl>(n);
}
FourierGrid::~FourierGrid() = default;
FourierGrid::FourierGrid(FourierGrid&&) noexcept = default;
FourierGrid& FourierGrid::operator=(FourierGrid&&) noexcept = default;

int FourierGrid::grid() const { return impl_->n; }
double* FourierGrid::real() { return impl_->grid.real(); }
const double* FourierGrid::real() const { return impl_->grid.real(); }
std::complex<double>* FourierGrid::spectrum() { return impl_->grid.spectrum(); }
const std::complex<double>* FourierGrid::spectrum() const {
  return reinterpret_cast<const std::complex<double>*>(impl_->grid.real());
}

std::size_t FourierGrid::realIndex(int px, int py, int pz) const {
  const auto n = static_cast<std::size_t>(impl_->n);
  return (static_cast<std::size_t>(px) * n + static_cast<std::size_t>(py)) * 2 * (n / 2 + 1) +
         static_cast<std::size_t>(pz);
}
std::size_t FourierGrid::spectrumIndex(int mx, int my, int mz) const {
  const auto n = static_cast<std::size_t>(impl_->n);
  return (static_cast<std::size_t>(mx) * n + static_cast<std::size_t>(my)) * (n / 2 + 1) + static_cast<std::size_t>(mz);
}

void FourierGrid::forward() { impl_->grid.forward(); }
void FourierGrid::inverse() { impl_->grid.inverse(); }

}  // namespace matcha::mesh
