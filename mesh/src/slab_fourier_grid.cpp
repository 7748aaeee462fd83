// SPDX-License-Identifier: MIT
#include "matcha/mesh/slab_fourier_grid.hpp"

#include <fftw3-mpi.h>

#include <algorithm>
#include <mutex>
#include <new>
#include <string>

#include "fftw_grid.hpp"
#include "matcha/core/errors.hpp"
#include "matcha/mesh/particle_mesh.hpp"

namespace matcha::mesh {

namespace detail {
void setUpMpiOnce() {
  setUpThreadsOnce();
  static std::once_flag once;
  std::call_once(once, [] { fftw_mpi_init(); });
}
}  // namespace detail

std::size_t slabFourierGridBytes(int n, int numRanks) {
  const auto side = static_cast<std::size_t>(n);
  const auto ranks = static_cast<std::size_t>(std::max(numRanks, 1));
  const std::size_t block = (side + ranks - 1) / ranks;  // FFTW-MPI's default block: ceil(n / K) planes or rows
  return block * side * (side / 2 + 1) * sizeof(fftw_complex);
}

std::size_t SlabShare::realIndex(int px, int py, int pz) const {
  const auto side = static_cast<std::size_t>(n);
  return (static_cast<std::size_t>(px - firstPlane) * side + static_cast<std::size_t>(py)) * 2 * (side / 2 + 1) +
         static_cast<std::size_t>(pz);
}

std::size_t SlabShare::spectrumIndex(int mx, int my, int mz) const {
  const auto side = static_cast<std::size_t>(n);
  return (static_cast<std::size_t>(my - firstModeRow) * side + static_cast<std::size_t>(mx)) * (side / 2 + 1) +
         static_cast<std::size_t>(mz);
}

std::size_t SlabShare::localModes() const {
  const auto side = static_cast<std::size_t>(n);
  return static_cast<std::size_t>(modeRows) * side * (side / 2 + 1);
}

SlabShare slabShareOf(int n, MPI_Comm comm) {
  if (n < kMinGrid || n > kMaxGrid) {
    throw InputError("Fourier grid: the grid must be " + std::to_string(kMinGrid) + " to " + std::to_string(kMaxGrid) +
                     " points per side (got " + std::to_string(n) + ")");
  }
  detail::setUpMpiOnce();
  const auto side = static_cast<ptrdiff_t>(n);
  ptrdiff_t planes = 0, firstPlane = 0, rows = 0, firstRow = 0;
  const ptrdiff_t allocated =
      fftw_mpi_local_size_3d_transposed(side, side, side / 2 + 1, comm, &planes, &firstPlane, &rows, &firstRow);
  SlabShare share;
  share.n = n;
  share.firstPlane = static_cast<int>(firstPlane);
  share.planes = static_cast<int>(planes);
  share.firstModeRow = static_cast<int>(firstRow);
  share.modeRows = static_cast<int>(rows);
  share.allocatedComplex = static_cast<std::size_t>(allocated);
  return share;
}

struct SlabFourierGrid::Impl {
  SlabShare share;
  double* data = nullptr;
  fftw_plan forwardPlan = nullptr, inversePlan = nullptr;

  Impl(int n, MPI_Comm comm) : share(slabShareOf(n, comm)) {
    const auto side = static_cast<ptrdiff_t>(n);
    // At least one value, so that a rank without planes still has a buffer to plan on.
    data = fftw_alloc_real(std::max<std::size_t>(2 * share.allocatedComplex, 2));
    if (data == nullptr) throw std::bad_alloc();
    {
      std::lock_guard<std::mutex> lock(detail::plannerMutex());
      fftw_plan_with_nthreads(kFftJobs);
      auto* spectrum = reinterpret_cast<fftw_complex*>(data);
      forwardPlan =
          fftw_mpi_plan_dft_r2c_3d(side, side, side, data, spectrum, comm, FFTW_ESTIMATE | FFTW_MPI_TRANSPOSED_OUT);
      inversePlan =
          fftw_mpi_plan_dft_c2r_3d(side, side, side, spectrum, data, comm, FFTW_ESTIMATE | FFTW_MPI_TRANSPOSED_IN);
    }
    if (forwardPlan == nullptr || inversePlan == nullptr) {
      release();
      throw InvariantError("FFTW-MPI could not plan a " + std::to_string(n) + "^3 transform");
    }
  }
  ~Impl() { release(); }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  void release() noexcept {
    {
      std::lock_guard<std::mutex> lock(detail::plannerMutex());
      for (fftw_plan* plan : {&forwardPlan, &inversePlan}) {
        if (*plan != nullptr) fftw_destroy_plan(*plan);
        *plan = nullptr;
      }
    }
    if (data != nullptr) fftw_free(data);
    data = nullptr;
  }
};

SlabFourierGrid::SlabFourierGrid(int n, MPI_Comm comm) : impl_(std::make_unique<Impl>(n, comm)) {}
SlabFourierGrid::~SlabFourierGrid() = default;

const SlabShare& SlabFourierGrid::share() const { return impl_->share; }
double* SlabFourierGrid::real() { return impl_->data; }
const double* SlabFourierGrid::real() const { return impl_->data; }
std::complex<double>* SlabFourierGrid::spectrum() { return reinterpret_cast<std::complex<double>*>(impl_->data); }
const std::complex<double>* SlabFourierGrid::spectrum() const {
  return reinterpret_cast<const std::complex<double>*>(impl_->data);
}

void SlabFourierGrid::forward() {
  fftw_mpi_execute_dft_r2c(impl_->forwardPlan, impl_->data, reinterpret_cast<fftw_complex*>(impl_->data));
}
void SlabFourierGrid::inverse() {
  fftw_mpi_execute_dft_c2r(impl_->inversePlan, reinterpret_cast<fftw_complex*>(impl_->data), impl_->data);
}

}  // namespace matcha::mesh
