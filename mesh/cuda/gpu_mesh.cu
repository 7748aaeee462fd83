// SPDX-License-Identifier: MIT
// The particle mesh on the GPU: ParticleMesh's cuFFT backend (mesh/src/gpu_mesh.hpp), the CUDA twin of the FFTW
// backend in particle_mesh.cpp. Every per-body and per-mode formula is mesh_kernels.hpp's, in double as on the CPU, so
// the two differ only by rounding: the transforms' (cuFFT's and FFTW's algorithms sum in other orders) and the
// deposit's (atomic adds land in whatever order the warps reach them).
//
// Mass assignment by atomics: one thread per body adds its 8 (CIC) or 27 (TSC) weighted masses with atomicAdd on
// doubles, native on sm_60 and later and resolved in L2. A sort-based scheme (bodies binned by cell, then a segmented
// reduction) is reproducible bit for bit, but costs a key sort of every body per pass; with bodies in the tree's
// space-filling-curve order neighbouring threads already hit neighbouring cells, so atomics stay cheap on uniform and
// clustered boxes (bench_cuda's pm/ rows time the stage), and their order only moves the last bit of a point's sum.
#include <cuda_runtime.h>
#include <cufft.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "../src/gpu_mesh.hpp"
#include "matcha/core/errors.hpp"
#include "matcha/core/stopwatch.hpp"
#include "matcha/mesh/mesh_kernels.hpp"
#include "mesh_cuda.cuh"

namespace matcha::mesh {

bool cufftMeshBuilt() { return true; }

namespace detail {
namespace {

template <int S>
__global__ void depositKernel(DeviceBodies bodies, MeshLayout layout, double invBox, double offset, double* rho) {
  const unsigned long long i = blockIdx.x * static_cast<unsigned long long>(blockDim.x) + threadIdx.x;
  if (i >= bodies.count) return;
  const BodyWindow<S, double> window(bodies.x[i], bodies.y[i], bodies.z[i], invBox, layout.n, offset);
  depositBody(rho, layout, window, bodies.mass[i], AtomicAdd{});
}

/// The spectrum's mode t (row-major, z fastest over n/2 + 1) as its three indices.
struct ModeIndex {
  int x, y, z;
};
__device__ ModeIndex modeIndex(unsigned long long t, int n, int half) {
  const auto xy = t / static_cast<unsigned long long>(half);
  return {static_cast<int>(xy / n), static_cast<int>(xy % n), static_cast<int>(t % half)};
}

/// The mass spectrum becomes the potential's (the FFTW backend's applyGreen, mode by mode).
__global__ void greenKernel(double2* spectrum, int n, int half, double scale, const double* greenAxis,
                            const double* modeSquared) {
  const unsigned long long t = blockIdx.x * static_cast<unsigned long long>(blockDim.x) + threadIdx.x;
  if (t >= static_cast<unsigned long long>(n) * n * half) return;
  const ModeIndex m = modeIndex(t, n, half);
  const double gxy = scale * greenAxis[m.x] * greenAxis[m.y];
  const double m2xy = modeSquared[m.x] + modeSquared[m.y];
  const double factor = greenMultiplier(gxy, m2xy, greenAxis[m.z], modeSquared[m.z]);
  spectrum[t].x *= factor;
  spectrum[t].y *= factor;
}

/// pull = -i k_d phi_k: one component of the pull in Fourier space (the FFTW backend's differentiate).
__global__ void differentiateKernel(const double2* phi, double2* pull, int n, int half, int axis,
                                    const double* derivativeWavenumber) {
  const unsigned long long t = blockIdx.x * static_cast<unsigned long long>(blockDim.x) + threadIdx.x;
  if (t >= static_cast<unsigned long long>(n) * n * half) return;
  const ModeIndex m = modeIndex(t, n, half);
  const double k = derivativeWavenumber[axis == 0 ? m.x : (axis == 1 ? m.y : m.z)];
  const double2 value = phi[t];
  pull[t] = make_double2(k * value.y, -k * value.x);  // -i k (re + i im)
}

template <int S>
__global__ void interpolateKernel(DeviceBodies bodies, MeshLayout layout, double invBox, double offset, double weight,
                                  const double* field, double* out) {
  const unsigned long long i = blockIdx.x * static_cast<unsigned long long>(blockDim.x) + threadIdx.x;
  if (i >= bodies.count) return;
  const BodyWindow<S, double> window(bodies.x[i], bodies.y[i], bodies.z[i], invBox, layout.n, offset);
  out[i] += weight * gatherBody(field, layout, window);
}

template <int S>
__global__ void interpolateFiniteDifferenceKernel(DeviceBodies bodies, MeshLayout layout, double invBox, double offset,
                                                  double weight, double invCell, const double* phi, double* ax,
                                                  double* ay, double* az, double* pot) {
  const unsigned long long i = blockIdx.x * static_cast<unsigned long long>(blockDim.x) + threadIdx.x;
  if (i >= bodies.count) return;
  const BodyWindow<S, double> window(bodies.x[i], bodies.y[i], bodies.z[i], invBox, layout.n, offset);
  double gradient[3], potential;
  gatherFiniteDifference(phi, layout, window, invCell, gradient, potential);
  ax[i] -= weight * gradient[0];
  ay[i] -= weight * gradient[1];
  az[i] -= weight * gradient[2];
  if (pot != nullptr) pot[i] += weight * potential;
}

/// to[c][k] = results[c][order[k]] for each of the `outputs` arrays (capacity apart): the results in the bodies' new
/// order (GpuMesh::orderResults).
__global__ void gatherResultsKernel(const double* results, std::size_t capacity, const std::uint32_t* order,
                                    std::size_t count, int outputs, double* to) {
  const unsigned long long k = blockIdx.x * static_cast<unsigned long long>(blockDim.x) + threadIdx.x;
  if (k >= count) return;
  const std::size_t from = order[k];
  for (int c = 0; c < outputs; ++c) to[c * capacity + k] = results[c * capacity + from];
}

/// The stream and the two plans, released even when the mesh's constructor throws half way.
struct StreamAndPlans {
  cudaStream_t stream = nullptr;
  cufftHandle forward = 0, inverse = 0;
  bool havePlans = false;
  StreamAndPlans() {
    MESH_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    MESH_CUFFT_CHECK(cufftCreate(&forward));
    if (cufftCreate(&inverse) != CUFFT_SUCCESS) {
      cufftDestroy(forward);
      throwCuda("cufftCreate failed", __FILE__, __LINE__);
    }
    havePlans = true;
  }
  StreamAndPlans(const StreamAndPlans&) = delete;
  StreamAndPlans& operator=(const StreamAndPlans&) = delete;
  ~StreamAndPlans() {
    if (havePlans) {
      cufftDestroy(forward);
      cufftDestroy(inverse);
    }
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

/// kWait: the stream idle between the interpolation and the download, which waits for the bodies' new order
/// (GpuMesh::orderResults); counted in the total, in no stage.
enum Stage { kUpload, kAssignment, kFft, kGreen, kInterpolate, kDownload, kNumStages, kWait };

}  // namespace

struct GpuMesh::Impl {
  MeshParams params;
  int n = 0;
  int half = 0;
  std::size_t paddedReals = 0;
  double invBox = 0, invCell = 0;
  std::unique_ptr<StreamAndPlans> handles;
  cudaStream_t stream = nullptr;
  cufftHandle forwardPlan = 0, inversePlan = 0;
  DeviceArray<double> grid, work;  ///< work: one component of the pull (Fourier gradient only)
  DeviceArray<char> fftWorkArea;
  DeviceModeTables tables;
  DeviceArray<double> bodies;        ///< x, y, z, mass: 4 capacity doubles
  DeviceArray<double> results;       ///< ax, ay, az, pot: 4 capacity doubles
  DeviceArray<std::uint32_t> order;  ///< orderResults' order (the results go to `bodies`, free by then, in it)
  std::size_t capacity = 0;
  double* hostResults = nullptr;  ///< pinned, 4 capacity doubles
  /// Pinned, 4 capacity doubles: the bodies are copied in on all cores and sent at the bus's speed (from the caller's
  /// pageable arrays the upload ran at ~6 GB/s: 85 of the 134 ms of a 512^3 mesh's call at 2^24 bodies on the H200).
  double* hostBodies = nullptr;
  /// Pinned: the first pass's k = 0 mode (the deposited mass), which the host reads once the launch is done.
  double* hostMass = nullptr;
  /// setDensityReduction's: the sum over the system's parts, and the grid's page-locked copy it sums in.
  std::function<void(std::span<double>)> reduce;
  double* hostGrid = nullptr;
  bool inFlight = false;  ///< a launch whose results collect has not taken yet
  bool launchedPotentials = false;
  bool downloadQueued = false;
  std::size_t launchedCount = 0;     ///< the launch's results are on their way to hostResults (orderResults or collect)
  cudaEvent_t bodiesSent = nullptr;  ///< after the bodies' upload: hostBodies may be written again
  std::vector<cudaEvent_t> events;
  std::vector<Stage> eventStage;  ///< the stage that ends at each event (after the first)
  MeshStageSeconds last;

  explicit Impl(const MeshParams& p) : params(p), n(p.grid), half(p.grid / 2 + 1) {
    paddedReals = static_cast<std::size_t>(n) * n * 2 * half;
    invBox = 1.0 / p.boxSize;
    invCell = p.grid / p.boxSize;
    requireMeshDevice(p.device);
    selectDevice();
    // The grids first (a 4096^3 mesh is refused before cuFFT is asked to plan it), then the plans without their work
    // areas, so that the check knows cuFFT's real need before anything big is allocated.
    const std::size_t grids = p.gradient == MeshGradient::fourier ? 2 : 1;
    const std::size_t gridBytes = grids * paddedReals * sizeof(double);
    requireFits(gridBytes, "grids");
    handles = std::make_unique<StreamAndPlans>();
    stream = handles->stream;
    forwardPlan = handles->forward;
    inversePlan = handles->inverse;
    MESH_CUFFT_CHECK(cufftSetAutoAllocation(forwardPlan, 0));
    MESH_CUFFT_CHECK(cufftSetAutoAllocation(inversePlan, 0));
    std::size_t forwardWork = 0, inverseWork = 0;
    MESH_CUFFT_CHECK(cufftMakePlan3d(forwardPlan, n, n, n, CUFFT_D2Z, &forwardWork));
    MESH_CUFFT_CHECK(cufftMakePlan3d(inversePlan, n, n, n, CUFFT_Z2D, &inverseWork));
    const std::size_t workBytes = std::max(forwardWork, inverseWork);
    requireFits(gridBytes + workBytes, "grids and cuFFT's work area");
    grid.allocate(paddedReals);
    if (p.gradient == MeshGradient::fourier) work.allocate(paddedReals);
    fftWorkArea.allocate(std::max<std::size_t>(workBytes, 1));
    MESH_CUFFT_CHECK(cufftSetWorkArea(forwardPlan, fftWorkArea.data));
    MESH_CUFFT_CHECK(cufftSetWorkArea(inversePlan, fftWorkArea.data));
    MESH_CUFFT_CHECK(cufftSetStream(forwardPlan, stream));
    MESH_CUFFT_CHECK(cufftSetStream(inversePlan, stream));
    tables.upload(p);
    MESH_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&hostMass), sizeof(double)));
  }

  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl() {
    // Work still queued (a caller that started the mesh and then failed) would write into the buffers freed below.
    if (inFlight && stream != nullptr) cudaStreamSynchronize(stream);
    for (cudaEvent_t event : events) cudaEventDestroy(event);
    if (bodiesSent != nullptr) cudaEventDestroy(bodiesSent);
    if (hostMass != nullptr) cudaFreeHost(hostMass);
    if (hostResults != nullptr) cudaFreeHost(hostResults);
    if (hostBodies != nullptr) cudaFreeHost(hostBodies);
    if (hostGrid != nullptr) cudaFreeHost(hostGrid);
  }

  /// The mesh's device for this thread's next CUDA calls: a caller's CUDA engine may run on another.
  void selectDevice() const { MESH_CUDA_CHECK(cudaSetDevice(params.device)); }

  /// InputError, one line, unless `bytes` fit in the device's free memory.
  void requireFits(std::size_t bytes, const char* what) const {
    std::size_t freeBytes = 0, totalBytes = 0;
    MESH_CUDA_CHECK(cudaMemGetInfo(&freeBytes, &totalBytes));
    if (bytes > freeBytes) {
      throw InputError("the cuFFT particle mesh of " + std::to_string(n) + "^3 needs " + gibibytes(bytes) +
                       " of device memory (" + what + "), only " + gibibytes(freeBytes) + " free of " +
                       gibibytes(totalBytes) + ": use a smaller --pm-grid or the CPU engine");
    }
  }

  /// Room for `count` bodies on the device (and their results on the host), checked against the free memory first.
  void reserveBodies(std::size_t count) {
    if (count <= capacity) return;
    const std::size_t wanted = count + count / 8;
    std::size_t freeBytes = 0, totalBytes = 0;
    MESH_CUDA_CHECK(cudaMemGetInfo(&freeBytes, &totalBytes));
    const std::size_t needed = 8 * wanted * sizeof(double) + wanted * sizeof(std::uint32_t);
    if (needed > freeBytes + bodies.count * sizeof(double) + results.count * sizeof(double) +
                     order.count * sizeof(std::uint32_t)) {
      throw InputError("the cuFFT particle mesh needs " + gibibytes(needed) + " of device memory for " +
                       std::to_string(count) + " bodies beside its " + std::to_string(n) + "^3 grids, only " +
                       gibibytes(freeBytes) + " free");
    }
    bodies.release();
    results.release();
    order.release();
    if (hostResults != nullptr) MESH_CUDA_CHECK(cudaFreeHost(hostResults));
    hostResults = nullptr;
    if (hostBodies != nullptr) MESH_CUDA_CHECK(cudaFreeHost(hostBodies));
    hostBodies = nullptr;
    capacity = 0;
    bodies.allocate(4 * wanted);
    results.allocate(4 * wanted);
    order.allocate(wanted);
    MESH_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&hostResults), 4 * wanted * sizeof(double)));
    MESH_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&hostBodies), 4 * wanted * sizeof(double)));
    capacity = wanted;
  }

  /// Marks the end of `stage` on the stream (the first mark of a call only starts the clock).
  void mark(Stage stage) {
    const std::size_t k = eventStage.size();
    if (k == events.size()) {
      cudaEvent_t event;
      MESH_CUDA_CHECK(cudaEventCreate(&event));
      events.push_back(event);
    }
    MESH_CUDA_CHECK(cudaEventRecord(events[k], stream));
    eventStage.push_back(stage);
  }

  void forward() {
    MESH_CUFFT_CHECK(cufftExecD2Z(forwardPlan, grid.data, reinterpret_cast<cufftDoubleComplex*>(grid.data)));
  }
  void inverse(double* data) {
    MESH_CUFFT_CHECK(cufftExecZ2D(inversePlan, reinterpret_cast<cufftDoubleComplex*>(data), data));
  }

  template <int S>
  void addPass(const DeviceBodies& d, double G, double offset, double weight, bool wantPotentials, double* out,
               double* totalMass) {
    const MeshLayout layout{n, static_cast<unsigned long long>(2 * half)};
    const std::size_t count = d.count;
    const std::size_t modes = static_cast<std::size_t>(n) * n * half;
    auto* spectrum = reinterpret_cast<double2*>(grid.data);
    MESH_CUDA_CHECK(cudaMemsetAsync(grid.data, 0, paddedReals * sizeof(double), stream));
    if (count > 0) {  // a part of a distributed system may hold no bodies (setDensityReduction)
      depositKernel<S><<<blocksFor(count), kBlock, 0, stream>>>(d, layout, invBox, offset, grid.data);
      MESH_LAUNCH_CHECK();
    }
    if (reduce) {  // the sum over the system's parts, on the host (its transfers count as the assignment's time)
      MESH_CUDA_CHECK(
          cudaMemcpyAsync(hostGrid, grid.data, paddedReals * sizeof(double), cudaMemcpyDeviceToHost, stream));
      MESH_CUDA_CHECK(cudaStreamSynchronize(stream));
      reduce(std::span<double>(hostGrid, paddedReals));
      MESH_CUDA_CHECK(
          cudaMemcpyAsync(grid.data, hostGrid, paddedReals * sizeof(double), cudaMemcpyHostToDevice, stream));
    }
    mark(kAssignment);
    forward();
    mark(kFft);
    if (totalMass != nullptr) {
      MESH_CUDA_CHECK(cudaMemcpyAsync(totalMass, grid.data, sizeof(double), cudaMemcpyDeviceToHost, stream));
    }
    greenKernel<<<blocksFor(modes), kBlock, 0, stream>>>(spectrum, n, half, greenScale(G, params.boxSize),
                                                         tables.greenAxis.data, tables.modeSquared.data);
    MESH_LAUNCH_CHECK();
    mark(kGreen);
    double* ax = out;
    double* pot = wantPotentials ? out + 3 * capacity : nullptr;
    if (params.gradient == MeshGradient::fourier) {
      for (int axis = 0; axis < 3; ++axis) {
        differentiateKernel<<<blocksFor(modes), kBlock, 0, stream>>>(spectrum, reinterpret_cast<double2*>(work.data), n,
                                                                     half, axis, tables.derivativeWavenumber.data);
        MESH_LAUNCH_CHECK();
        mark(kGreen);
        inverse(work.data);
        mark(kFft);
        if (count > 0) {
          interpolateKernel<S><<<blocksFor(count), kBlock, 0, stream>>>(d, layout, invBox, offset, weight, work.data,
                                                                        ax + axis * capacity);
          MESH_LAUNCH_CHECK();
        }
        mark(kInterpolate);
      }
      if (pot != nullptr) {
        inverse(grid.data);
        mark(kFft);
        if (count > 0) {
          interpolateKernel<S>
              <<<blocksFor(count), kBlock, 0, stream>>>(d, layout, invBox, offset, weight, grid.data, pot);
          MESH_LAUNCH_CHECK();
        }
        mark(kInterpolate);
      }
    } else {
      inverse(grid.data);
      mark(kFft);
      if (count > 0) {
        interpolateFiniteDifferenceKernel<S><<<blocksFor(count), kBlock, 0, stream>>>(
            d, layout, invBox, offset, weight, invCell, grid.data, ax, ax + capacity, ax + 2 * capacity, pot);
        MESH_LAUNCH_CHECK();
      }
      mark(kInterpolate);
    }
  }

  std::size_t launch(const SourceView& s, double G, bool wantPotentials) {
    selectDevice();
    drop();
    reserveBodies(s.count);
    eventStage.clear();
    mark(kUpload);  // the start
    double* x = bodies.data;
    const double* source[4] = {s.x, s.y, s.z, s.mass};
    // The copy looks for non-finite positions as it goes (the device would silently wrap them): one pass over the
    // bodies instead of two, ~9 ms of a 2^24 call on the H200's host.
    std::atomic<std::size_t> firstBad{s.count};
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, s.count, std::size_t{1} << 16),
                      [&](const tbb::blocked_range<std::size_t>& r) {
                        for (int k = 0; k < 4; ++k) {
                          std::copy(source[k] + r.begin(), source[k] + r.end(), hostBodies + k * capacity + r.begin());
                        }
                        const double* px = hostBodies;
                        const double* py = hostBodies + capacity;
                        const double* pz = hostBodies + 2 * capacity;
                        bool finite = true;
                        for (std::size_t i = r.begin(); i != r.end(); ++i) {
                          finite = finite && std::isfinite(px[i]) && std::isfinite(py[i]) && std::isfinite(pz[i]);
                        }
                        if (finite) return;
                        for (std::size_t i = r.begin(); i != r.end(); ++i) {
                          if (std::isfinite(px[i]) && std::isfinite(py[i]) && std::isfinite(pz[i])) continue;
                          std::size_t seen = firstBad.load();
                          while (i < seen && !firstBad.compare_exchange_weak(seen, i)) {
                          }
                          break;
                        }
                      });
    if (firstBad.load() < s.count) return firstBad.load();  // nothing queued
    inFlight = true;  // from the first queued work on: an error half way leaves it for drop() to wait for
    for (int k = 0; k < 4 && s.count > 0; ++k) {
      MESH_CUDA_CHECK(cudaMemcpyAsync(x + k * capacity, hostBodies + k * capacity, s.count * sizeof(double),
                                      cudaMemcpyHostToDevice, stream));
    }
    if (bodiesSent == nullptr) MESH_CUDA_CHECK(cudaEventCreateWithFlags(&bodiesSent, cudaEventDisableTiming));
    MESH_CUDA_CHECK(cudaEventRecord(bodiesSent, stream));
    launchedCount = s.count;
    if (capacity > 0) MESH_CUDA_CHECK(cudaMemsetAsync(results.data, 0, 4 * capacity * sizeof(double), stream));
    mark(kUpload);
    const DeviceBodies d{x, x + capacity, x + 2 * capacity, x + 3 * capacity, s.count};
    // Interlacing as on the CPU: a second solution on the mesh moved by h/2 along each axis, averaged with the first.
    const int passes = params.interlace ? 2 : 1;
    const double weight = 1.0 / passes;
    for (int pass = 0; pass < passes; ++pass) {
      double* mass = pass == 0 ? hostMass : nullptr;  // the first pass's k = 0 mode, as the FFTW backend takes it
      if (params.assignment == MassAssignment::cic) {
        addPass<2>(d, G, 0.5 * pass, weight, wantPotentials, results.data, mass);
      } else {
        addPass<3>(d, G, 0.5 * pass, weight, wantPotentials, results.data, mass);
      }
    }
    launchedPotentials = wantPotentials;
    downloadQueued = false;  // orderResults or collect queues it
    return s.count;
  }

  /// Queues the results' download, in the launch's order of the bodies or, with `newOrder`, in that order: body k of
  /// the new order is the launch's body newOrder[k] (gathered on the device into the bodies' buffer, free by then).
  /// A second call queues the download again, in its order, which then lands last.
  void queueDownload(std::span<const std::uint32_t> newOrder) {
    MATCHA_ASSERT(inFlight, "GpuMesh: a download queued without a launch");
    const std::size_t count = launchedCount;
    MATCHA_ASSERT(newOrder.empty() || newOrder.size() == count, "GpuMesh::orderResults: the order's size differs");
    mark(kWait);
    const int outputs = launchedPotentials ? 4 : 3;
    const double* from = results.data;
    if (!newOrder.empty() && count > 0) {
      // hostBodies is free once the bodies' upload (and an earlier order's) is done: long before, at any real size.
      MESH_CUDA_CHECK(cudaEventSynchronize(bodiesSent));
      auto* hostOrder = reinterpret_cast<std::uint32_t*>(hostBodies);
      tbb::parallel_for(tbb::blocked_range<std::size_t>(0, count, std::size_t{1} << 16),
                        [&](const tbb::blocked_range<std::size_t>& r) {
                          std::copy(newOrder.begin() + r.begin(), newOrder.begin() + r.end(), hostOrder + r.begin());
                        });
      MESH_CUDA_CHECK(
          cudaMemcpyAsync(order.data, hostOrder, count * sizeof(std::uint32_t), cudaMemcpyHostToDevice, stream));
      MESH_CUDA_CHECK(cudaEventRecord(bodiesSent, stream));
      gatherResultsKernel<<<blocksFor(count), kBlock, 0, stream>>>(results.data, capacity, order.data, count, outputs,
                                                                   bodies.data);
      MESH_LAUNCH_CHECK();
      from = bodies.data;
    }
    for (int k = 0; k < outputs && count > 0; ++k) {
      MESH_CUDA_CHECK(cudaMemcpyAsync(hostResults + k * capacity, from + k * capacity, count * sizeof(double),
                                      cudaMemcpyDeviceToHost, stream));
    }
    mark(kDownload);
    downloadQueued = true;
  }

  void drop() {
    if (!inFlight) return;
    selectDevice();
    inFlight = false;
    MESH_CUDA_CHECK(cudaStreamSynchronize(stream));
  }

  GpuMeshResult collect(double* waitSeconds) {
    MATCHA_ASSERT(inFlight, "GpuMesh::collect without a launch in flight");
    selectDevice();
    if (!downloadQueued) queueDownload({});
    inFlight = false;
    const Stopwatch waiting;
    MESH_CUDA_CHECK(cudaStreamSynchronize(stream));
    if (waitSeconds != nullptr) *waitSeconds = waiting.seconds();
    last = {};
    double* stageSeconds[kNumStages] = {&last.upload, &last.assignment,  &last.fft,
                                        &last.green,  &last.interpolate, &last.download};
    for (std::size_t k = 1; k < eventStage.size(); ++k) {
      if (eventStage[k] == kWait) continue;
      float ms = 0;
      MESH_CUDA_CHECK(cudaEventElapsedTime(&ms, events[k - 1], events[k]));
      *stageSeconds[eventStage[k]] += 1e-3 * ms;
    }
    float totalMs = 0;
    MESH_CUDA_CHECK(cudaEventElapsedTime(&totalMs, events.front(), events[eventStage.size() - 1]));
    last.total = 1e-3 * totalMs;
    GpuMeshResult result;
    result.ax = hostResults;
    result.ay = hostResults + capacity;
    result.az = hostResults + 2 * capacity;
    result.pot = launchedPotentials ? hostResults + 3 * capacity : nullptr;
    result.depositedMass = *hostMass;
    return result;
  }
};

GpuMesh::GpuMesh(const MeshParams& params) : impl_(std::make_unique<Impl>(params)) {}
GpuMesh::~GpuMesh() = default;
std::size_t GpuMesh::launch(const SourceView& sources, double G, bool wantPotentials) {
  return impl_->launch(sources, G, wantPotentials);
}
void GpuMesh::orderResults(std::span<const std::uint32_t> newOrder) {
  impl_->selectDevice();
  impl_->queueDownload(newOrder);
}
GpuMeshResult GpuMesh::collect(double* waitSeconds) { return impl_->collect(waitSeconds); }
void GpuMesh::drop() { impl_->drop(); }
void GpuMesh::setDensityReduction(std::function<void(std::span<double>)> reduce) {
  impl_->drop();
  impl_->selectDevice();
  if (reduce && impl_->hostGrid == nullptr) {
    MESH_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&impl_->hostGrid), impl_->paddedReals * sizeof(double)));
  }
  impl_->reduce = std::move(reduce);
}

MeshStageSeconds GpuMesh::lastStageSeconds() const { return impl_->last; }

}  // namespace detail
}  // namespace matcha::mesh
