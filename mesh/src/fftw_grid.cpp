// SPDX-License-Identifier: MIT
#include "fftw_grid.hpp"

#include <fftw3.h>
#include <tbb/parallel_for.h>

#include <mutex>
#include <new>
#include <string>

#include "matcha/core/errors.hpp"

namespace matcha::mesh::detail {
namespace {

/// FFTW's threaded loops, run on TBB's workers: one thread pool for the whole process instead of FFTW's own
/// pthreads beside TBB's (DESIGN.md: two runtimes spin against each other). Jobs are independent slices of the
/// transform, so which thread runs one does not change its bits.
void tbbParallelLoop(void* (*work)(char*), char* jobData, std::size_t jobSize, int numJobs, void* /*data*/) {
  tbb::parallel_for(0, numJobs, [&](int job) { work(jobData + jobSize * static_cast<std::size_t>(job)); });
}

}  // namespace

std::mutex& plannerMutex() {
  static std::mutex mutex;
  return mutex;
}

void setUpThreadsOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (fftw_init_threads() == 0) throw InvariantError("fftw_init_threads failed");
    fftw_threads_set_callback(tbbParallelLoop, nullptr);
  });
}

std::size_t FftwGrid::paddedSize(int n) {
  const auto side = static_cast<std::size_t>(n);
  return side * side * 2 * (side / 2 + 1);
}

FftwGrid::FftwGrid(int n, int jobs) {
  setUpThreadsOnce();
  data_ = fftw_alloc_real(paddedSize(n));
  if (data_ == nullptr) {
    throw std::bad_alloc();
  }
  auto* spectrumData = reinterpret_cast<fftw_complex*>(data_);
  {
    std::lock_guard<std::mutex> lock(plannerMutex());
    fftw_plan_with_nthreads(jobs);
    forwardPlan_ = fftw_plan_dft_r2c_3d(n, n, n, data_, spectrumData, FFTW_ESTIMATE);
    inversePlan_ = fftw_plan_dft_c2r_3d(n, n, n, spectrumData, data_, FFTW_ESTIMATE);
  }
  if (forwardPlan_ == nullptr || inversePlan_ == nullptr) {
    release();
    throw InvariantError("FFTW could not plan a " + std::to_string(n) + "^3 transform");
  }
}

FftwGrid::~FftwGrid() { release(); }

void FftwGrid::release() {
  std::lock_guard<std::mutex> lock(plannerMutex());  // fftw_destroy_plan touches the planner's state too
  if (forwardPlan_ != nullptr) fftw_destroy_plan(static_cast<fftw_plan>(forwardPlan_));
  if (inversePlan_ != nullptr) fftw_destroy_plan(static_cast<fftw_plan>(inversePlan_));
  if (data_ != nullptr) fftw_free(data_);
  forwardPlan_ = inversePlan_ = nullptr;
  data_ = nullptr;
}

void FftwGrid::forward() { fftw_execute(static_cast<fftw_plan>(forwardPlan_)); }
void FftwGrid::inverse() { fftw_execute(static_cast<fftw_plan>(inversePlan_)); }

}  // namespace matcha::mesh::detail
