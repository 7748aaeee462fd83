// SPDX-License-Identifier: MIT
#include "matcha/mesh/particle_mesh.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdint>
#include <limits>
#include <span>
#include <sstream>
#include <utility>
#include <vector>

#include "fftw_grid.hpp"
#include "gpu_mesh.hpp"
#include "matcha/core/errors.hpp"
#include "matcha/core/stopwatch.hpp"
#include "matcha/mesh/mesh_kernels.hpp"
#include "mesh_modes.hpp"
#include "ordered_deposit.hpp"

namespace matcha::mesh {
namespace {

constexpr int support(MassAssignment assignment) { return assignment == MassAssignment::cic ? 2 : 3; }

/// The shared window (mesh_kernels.hpp) of a deposit window A, in double, for body i of s.
template <MassAssignment A>
using Window = BodyWindow<support(A), double>;

template <MassAssignment A>
Window<A> bodyWindow(const SourceView& s, std::size_t i, double invBox, int n, double offset) {
  return Window<A>(s.x[i], s.y[i], s.z[i], invBox, n, offset);
}

std::string shortest(double value) {
  std::ostringstream text;
  text.precision(17);
  text << value;
  return text.str();
}

}  // namespace

std::string toString(MassAssignment assignment) { return assignment == MassAssignment::cic ? "cic" : "tsc"; }
std::string toString(MeshGradient gradient) { return gradient == MeshGradient::fourier ? "fourier" : "fd4"; }
std::string toString(MeshBackend backend) { return backend == MeshBackend::fftw ? "fftw" : "cufft"; }

void MeshParams::validate() const {
  requireFinite(boxSize, "box size");
  if (!(boxSize > 0)) throw InputError("box size must be > 0 (got " + shortest(boxSize) + ")");
  if (grid < kMinGrid || grid > kMaxGrid) {
    throw InputError("PM grid must be " + std::to_string(kMinGrid) + " to " + std::to_string(kMaxGrid) +
                     " points per side (got " + std::to_string(grid) + ")");
  }
  if (device < 0) throw InputError("the PM mesh's CUDA device must be >= 0 (got " + std::to_string(device) + ")");
  requireFinite(aSmooth, "PM a_smooth");
  if (!(aSmooth >= 0.5 && aSmooth <= 8)) {
    throw InputError("PM a_smooth (r_s in mesh cells) must be in [0.5, 8] (got " + shortest(aSmooth) + ")");
  }
  requireFinite(cutoffFactor, "PM cutoff factor");
  if (!(cutoffFactor >= 3 && cutoffFactor <= 8)) {
    throw InputError("PM cutoff factor (r_cut / r_s) must be in [3, 8] (got " + shortest(cutoffFactor) + ")");
  }
  // r_cut <= L / 2, in mesh units so that the test is exact for the usual values: 2 r_cut / h <= n.
  const double cutoffDiameterCells = 2.0 * cutoffFactor * aSmooth;
  if (cutoffDiameterCells > grid) {
    throw InputError("the short-range cutoff r_cut = " + shortest(cutoffFactor) + " x " + shortest(aSmooth) +
                     " mesh cells exceeds half the box for a PM grid of " + std::to_string(grid) +
                     ": use a grid of at least " + std::to_string(static_cast<int>(std::ceil(cutoffDiameterCells))));
  }
}

int fftFriendlyGridSize(int n) {
  for (int m = std::max(n, 1); m <= kMaxGrid; ++m) {
    int rest = m;
    for (const int prime : {2, 3, 5, 7}) {
      while (rest % prime == 0) rest /= prime;
    }
    if (rest == 1) return m;
  }
  throw InputError("no FFT-friendly PM grid of at least " + std::to_string(n) +
                   " points per side within the limit of " + std::to_string(kMaxGrid));
}

void requireFftFriendlyGrid(int n, const std::string& what) {
  if (n < kMinGrid || n > kMaxGrid) {
    throw InputError(what + " must be " + std::to_string(kMinGrid) + " to " + std::to_string(kMaxGrid) +
                     " points per side (got " + std::to_string(n) + ")");
  }
  const int friendly = fftFriendlyGridSize(n);
  if (friendly != n) {
    throw InputError(what + " " + std::to_string(n) +
                     " is not FFT-friendly (it has a prime factor other than 2, 3, 5 and 7); the next friendly size "
                     "is " +
                     std::to_string(friendly));
  }
}

long long meshPointsForSpacing(std::size_t numBodies, int pointsPerSpacing) {
  const long double factor = pointsPerSpacing;
  const long double wanted = static_cast<long double>(numBodies) * factor * factor * factor;
  auto g = static_cast<long long>(std::ceil(pointsPerSpacing * std::cbrt(static_cast<double>(numBodies))));
  while (g > 1 && static_cast<long double>(g - 1) * (g - 1) * (g - 1) >= wanted) --g;
  while (static_cast<long double>(g) * g * g < wanted) ++g;
  return std::max(g, 1LL);
}

int defaultPmGrid(std::size_t numBodies, const MeshParams& params) {
  const long long g = meshPointsForSpacing(numBodies, 2);  // GADGET's two mesh cells per mean spacing
  const auto forCutoff = static_cast<long long>(std::ceil(2.0 * params.cutoffFactor * params.aSmooth));
  const long long wanted = std::max({g, forCutoff, static_cast<long long>(kMinGrid)});
  if (wanted > kMaxGrid) {
    throw InputError("the default PM grid for " + std::to_string(numBodies) + " bodies would exceed " +
                     std::to_string(kMaxGrid) + " points per side");
  }
  return fftFriendlyGridSize(static_cast<int>(wanted));
}

std::size_t meshMemoryBytes(const MeshParams& params, std::size_t numBodies) {
  const std::size_t grids = params.gradient == MeshGradient::fourier ? 2 : 1;
  return grids * detail::FftwGrid::paddedSize(params.grid) * sizeof(double) + numBodies * sizeof(std::uint32_t);
}

std::size_t slabMeshMemoryBytes(const MeshParams& params, int numRanks, std::size_t numBodies) {
  const auto n = static_cast<std::size_t>(params.grid);
  const std::size_t planes = (n + static_cast<std::size_t>(numRanks) - 1) / static_cast<std::size_t>(numRanks);
  const std::size_t grids = params.gradient == MeshGradient::fourier ? 2 : 1;
  // Per record: 36 bytes sent (the record and its body's index), 68 received (the record, the body as the deposit's
  // arrays, its place in the deposit's order).
  constexpr std::size_t kRecordBytes = 36 + 68;
  return grids * planes * n * 2 * (n / 2 + 1) * sizeof(double) + numBodies * kRecordBytes * 3 / 2;
}

SlabMeshBytes gpuSlabMeshMemoryBytes(const MeshParams& params, int numRanks, std::size_t numBodies) {
  const auto n = static_cast<std::size_t>(params.grid);
  const auto ranks = static_cast<std::size_t>(numRanks);
  const std::size_t buffer = (n + ranks - 1) / ranks * n * (n / 2 + 1) * 2 * sizeof(double);
  const std::size_t records = numBodies * 3 / 2;
  return {(ranks > 1 ? 2 * buffer : 0) + records * (4 * sizeof(double) + 36),
          6 * buffer + records * 8 * sizeof(double)};
}

std::size_t meshDeviceMemoryBytes(const MeshParams& params, std::size_t numBodies) {
  const std::size_t grids = params.gradient == MeshGradient::fourier ? 2 : 1;
  return (grids + 1) * detail::FftwGrid::paddedSize(params.grid) * sizeof(double) +
         numBodies * (8 * sizeof(double) + sizeof(std::uint32_t));
}

struct ParticleMesh::Impl {
  static const MeshParams& validated(const MeshParams& p) {
    p.validate();
    return p;
  }

  MeshParams params;
  int n = 0;
  std::size_t padded = 0;  ///< P = 2 (n/2 + 1): doubles per row of the real grid
  std::size_t half = 0;    ///< n/2 + 1: complex values per row of the spectrum
  double invBox = 0, invCell = 0;
  detail::FftwGrid grid;                   ///< deposit, then spectrum, then potential
  std::unique_ptr<detail::FftwGrid> work;  ///< one component of the pull (Fourier gradient only)
  detail::ModeTables modes;                ///< the Green's function and derivative per axis index
  detail::OrderedDeposit depositor;        ///< masses onto grid, in an order fixed by the input

  explicit Impl(const MeshParams& p)
      : params(validated(p)),
        n(p.grid),
        padded(2 * (static_cast<std::size_t>(p.grid) / 2 + 1)),
        half(static_cast<std::size_t>(p.grid) / 2 + 1),
        invBox(1.0 / p.boxSize),
        invCell(p.grid / p.boxSize),
        grid(p.grid, kFftJobs),
        modes(p),
        depositor(p.grid, p.boxSize, "particle mesh") {
    if (p.gradient == MeshGradient::fourier) work = std::make_unique<detail::FftwGrid>(n, kFftJobs);
  }

  MeshLayout layout() const { return {n, padded}; }

  /// The mass spectrum becomes the potential's: mode m times greenScale W(mx) W(my) W(mz) / |m|^2, 0 for m = 0.
  void applyGreen(double G) {
    const double scale = greenScale(G, params.boxSize);
    std::complex<double>* spectrum = grid.spectrum();
    tbb::parallel_for(0, n, [&](int x) {
      for (int y = 0; y < n; ++y)
        modes.applyGreen(spectrum + (static_cast<std::size_t>(x) * n + y) * half, half, x, y, scale);
    });
  }

  /// work = -i k_d phi_k: one component of the pull, in Fourier space.
  void differentiate(int axis) {
    const std::complex<double>* phi = grid.spectrum();
    std::complex<double>* pull = work->spectrum();
    tbb::parallel_for(0, n, [&](int x) {
      for (int y = 0; y < n; ++y) {
        const std::size_t base = (static_cast<std::size_t>(x) * n + y) * half;
        modes.differentiate(phi + base, pull + base, half, x, y, axis);
      }
    });
  }

  /// out[i] += weight times the window-weighted sum of `field` at body i. Bodies go in the deposit's order (by mesh
  /// plane), so that neighbouring tasks read neighbouring planes rather than the whole grid: in random order each
  /// body's 8-27 points are cache misses once the grid outgrows the cache.
  template <MassAssignment A>
  void interpolate(const SourceView& s, double offset, double weight, const double* field, double* out) const {
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, s.count, 1024), [&](const tbb::blocked_range<std::size_t>& r) {
      for (std::size_t slot = r.begin(); slot != r.end(); ++slot) {
        const std::size_t i = depositor.order()[slot];
        const double sum = gatherBody(field, layout(), bodyWindow<A>(s, i, invBox, n, offset));
        out[i] += weight * sum;
      }
    });
  }

  /// The finite-difference variant: pull (and potential, unless null) from the potential on the mesh, in one pass.
  template <MassAssignment A>
  void interpolateFiniteDifference(const SourceView& s, double offset, double weight, const ForceView& out) const {
    const double* phi = grid.real();
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, s.count, 1024), [&](const tbb::blocked_range<std::size_t>& r) {
      for (std::size_t slot = r.begin(); slot != r.end(); ++slot) {
        const std::size_t i = depositor.order()[slot];
        double gradient[3], pot;
        gatherFiniteDifference(phi, layout(), bodyWindow<A>(s, i, invBox, n, offset), invCell, gradient, pot);
        out.ax[i] -= weight * gradient[0];
        out.ay[i] -= weight * gradient[1];
        out.az[i] -= weight * gradient[2];
        if (out.pot != nullptr) out.pot[i] += weight * pot;
      }
    });
  }

  /// One mesh solution with the bodies moved by `offset` cells along each axis, added to out times `weight`.
  /// Returns the deposited mass.
  template <MassAssignment A>
  double addPass(const SourceView& s, const GravityParams& gravity, double offset, double weight, const ForceView& out,
                 const DensityReduction& reduce) {
    depositor.deposit(s, A, offset, grid.real());
    if (reduce) reduce(std::span<double>(grid.real(), detail::FftwGrid::paddedSize(n)));
    grid.forward();
    const double totalMass = grid.spectrum()[0].real();  // the k = 0 mode: the deposited mass, sum m_i to rounding
    applyGreen(gravity.G);
    if (params.gradient == MeshGradient::fourier) {
      double* const components[3] = {out.ax, out.ay, out.az};
      for (int d = 0; d < 3; ++d) {
        differentiate(d);
        work->inverse();
        interpolate<A>(s, offset, weight, work->real(), components[d]);
      }
      if (out.pot != nullptr) {
        grid.inverse();
        interpolate<A>(s, offset, weight, grid.real(), out.pot);
      }
    } else {
      grid.inverse();
      interpolateFiniteDifference<A>(s, offset, weight, out);
    }
    return totalMass;
  }

  template <MassAssignment A>
  void run(const SourceView& s, const GravityParams& gravity, const ForceView& out, const DensityReduction& reduce) {
    // Interlacing (Hockney & Eastwood 1981 sec. 7-8): a second solution on a mesh moved by half a cell along each
    // axis, averaged with the first. Their leading aliasing errors have opposite signs and cancel; the grids are
    // reused, so it costs time (twice the transforms, deposits and interpolations), no memory.
    const int passes = params.interlace ? 2 : 1;
    const double weight = 1.0 / passes;
    double totalMass = 0;
    for (int pass = 0; pass < passes; ++pass) {
      const double mass = addPass<A>(s, gravity, 0.5 * pass, weight, out, reduce);
      if (pass == 0) totalMass = mass;
    }
    if (out.pot != nullptr) detail::addSelfPotentials(s, params, gravity.G, totalMass, out.pot);
  }
};

ParticleMesh::ParticleMesh(const MeshParams& params) : params_(params) {
  params.validate();
  if (params.backend == MeshBackend::cufft) {
    gpu_ = std::make_unique<detail::GpuMesh>(params);
  } else {
    impl_ = std::make_unique<Impl>(params);
  }
}
ParticleMesh::~ParticleMesh() = default;
ParticleMesh::ParticleMesh(ParticleMesh&&) noexcept = default;
ParticleMesh& ParticleMesh::operator=(ParticleMesh&&) noexcept = default;

const MeshParams& ParticleMesh::params() const { return params_; }

MeshStageSeconds ParticleMesh::lastStageSeconds() const { return gpu_ ? gpu_->lastStageSeconds() : MeshStageSeconds{}; }

namespace {

/// InputError for more bodies than the deposit order's 32-bit indices hold.
void requireIndexableCount(std::size_t count) {
  if (count > std::numeric_limits<std::uint32_t>::max()) {
    throw InputError("particle mesh: at most 2^32 - 1 bodies (got " + std::to_string(count) + ")");
  }
}

}  // namespace

bool ParticleMesh::runsBeside() const { return gpu_ != nullptr && params_.overlap && !reduceDensity_; }

void ParticleMesh::setDensityReduction(DensityReduction reduce) {
  abandonLongRange();
  if (gpu_) gpu_->setDensityReduction(reduce);
  reduceDensity_ = std::move(reduce);
}

void ParticleMesh::addLongRange(const SourceView& sources, const GravityParams& gravity, const ForceView& out) {
  gravity.validate();
  MATCHA_ASSERT(out.count == sources.count, "ParticleMesh::addLongRange: the output size differs from the sources'");
  if (sources.count == 0 && !reduceDensity_) return;  // with a reduction, a part without bodies still takes part
  requireIndexableCount(sources.count);
  if (impl_) {
    if (params_.assignment == MassAssignment::cic) {
      impl_->run<MassAssignment::cic>(sources, gravity, out, reduceDensity_);
    } else {
      impl_->run<MassAssignment::tsc>(sources, gravity, out, reduceDensity_);
    }
    return;
  }
  startLongRange(sources, gravity, out.pot != nullptr);
  finishLongRange(sources, gravity, out);
}

void ParticleMesh::startLongRange(const SourceView& sources, const GravityParams& gravity, bool potentials) {
  MATCHA_ASSERT(gpu_ != nullptr, "ParticleMesh::startLongRange: the FFTW backend runs within addLongRange only");
  abandonLongRange();
  gravity.validate();
  requireIndexableCount(sources.count);
  // No bodies, no launch (finishLongRange then adds nothing), unless the grid is summed with other parts': this part
  // then takes part, depositing nothing. The launch finds a non-finite position while it copies the bodies (the
  // device would silently wrap it; the FFTW backend finds it while it bins).
  if (sources.count > 0 || reduceDensity_) {
    const std::size_t bad = gpu_->launch(sources, gravity.G, potentials);
    if (bad < sources.count) {
      throw InputError("particle mesh: body " + std::to_string(bad) + " has a non-finite position");
    }
  }
  started_ = Started{sources.count, potentials};
}

void ParticleMesh::reorderLongRange(std::span<const std::uint32_t> newOrder) {
  MATCHA_ASSERT(started_.has_value(), "ParticleMesh::reorderLongRange without startLongRange");
  MATCHA_ASSERT(newOrder.empty() || newOrder.size() == started_->count,
                "ParticleMesh::reorderLongRange: the order's size differs from the start's bodies");
  if (started_->count == 0 && !reduceDensity_) return;  // nothing was launched
  gpu_->orderResults(newOrder);
}

LongRangeTiming ParticleMesh::finishLongRange(const SourceView& sources, const GravityParams& gravity,
                                              const ForceView& out) {
  MATCHA_ASSERT(out.count == sources.count, "ParticleMesh::finishLongRange: the outputs differ from the bodies");
  MATCHA_ASSERT(!started_ || (out.pot != nullptr) == started_->potentials,
                "ParticleMesh::finishLongRange: potentials asked for differently from the start");
  LongRangeForces result = collectLongRange(sources, gravity);
  if (result.forces.count == 0) return result.timing;
  const Stopwatch adding;
  tbb::parallel_for(
      tbb::blocked_range<std::size_t>(0, sources.count, 4096),
      [&](const tbb::blocked_range<std::size_t>& r) { addForceAddend(result.forces, out, r.begin(), r.end()); });
  result.timing.seconds += adding.seconds();
  return result.timing;
}

LongRangeForces ParticleMesh::collectLongRange(const SourceView& sources, const GravityParams& gravity) {
  MATCHA_ASSERT(started_.has_value(), "ParticleMesh::collectLongRange without startLongRange");
  const Started started = *started_;
  started_.reset();
  MATCHA_ASSERT(sources.count == started.count, "ParticleMesh::collectLongRange: the bodies differ from the start's");
  LongRangeForces collected;
  if (started.count == 0 && !reduceDensity_) return collected;
  const detail::GpuMeshResult result = gpu_->collect(&collected.timing.waitSeconds);
  const Stopwatch correcting;
  if (started.potentials) {
    // The self term goes into the page-locked results themselves (rounded there once, as finishLongRange's sum of
    // the two rounded it), so that an add of the returned forces gives that sum's bits.
    const double rs = params_.splitRadius(), L = params_.boxSize, G = gravity.G;
    const double kernelIntegral = shortRangeKernelIntegral(rs, params_.cutoffRadius());
    tbb::parallel_for(
        tbb::blocked_range<std::size_t>(0, sources.count, 4096), [&](const tbb::blocked_range<std::size_t>& r) {
          for (std::size_t i = r.begin(); i != r.end(); ++i) {
            result.pot[i] += selfPotentialCorrection(G, sources.mass[i], result.depositedMass, rs, L, kernelIntegral);
          }
        });
  }
  collected.forces =
      ForceAddend{result.ax, result.ay, result.az, started.potentials ? result.pot : nullptr, sources.count};
  // The stages' total starts before the launch's copy of the bodies, and so counts it.
  collected.timing.seconds = gpu_->lastStageSeconds().total + correcting.seconds();
  return collected;
}

void ParticleMesh::abandonLongRange() noexcept {
  if (!started_) return;
  started_.reset();
  try {
    gpu_->drop();
  } catch (...) {  // a failed device: the caller is already on its way out with its own error
  }
}

}  // namespace matcha::mesh
