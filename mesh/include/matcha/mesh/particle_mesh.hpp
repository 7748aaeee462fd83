// SPDX-License-Identifier: MIT
// Long-range periodic gravity on a mesh (the PM half of TreePM, as GADGET-2/3/4 do it): the bodies' masses are
// deposited on an n^3 mesh with a CIC or TSC window, Fourier transformed (FFTW on the CPU), multiplied by the
// long-range Green's function -4 pi G exp(-k^2 r_s^2) / k^2 deconvolved by the window, transformed back, differentiated
// (in Fourier space or by finite differences) and interpolated at the bodies with the same window. The short range,
// erfc-truncated pair forces within r_cut (pair_interaction.hpp: accumulateTruncatedPairInteraction), is the tree's;
// the two add up to the periodic force of gpu/ewald.hpp.
//
// Conventions (README "Particle mesh (long range)"), those of gpu/ewald.hpp:
//  - A cube of side L, periodic; bodies may lie anywhere (positions are reduced into [0, L) here, not changed).
//  - The k = 0 mode is dropped (a neutralising background): no force from the mean density, and the potential is
//    Ewald's: the mesh adds the self-energy correction (mesh_kernels.hpp: selfPotentialCorrection), so that mesh +
//    short range gives a lone body +2.8372975 G m / L.
//  - The mesh part is Newtonian: softening acts in the short range only (in the truncated pair), as in GADGET.
//  - a_i = -grad phi at x_i, phi_i as the pair law signs it (negative near mass), G included.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "matcha/core/params.hpp"
#include "matcha/core/particles.hpp"

namespace matcha::mesh {

/// The window that deposits masses on the mesh and interpolates back from it (the same window both ways, which makes
/// the mesh's pair forces antisymmetric: momentum is conserved and a body does not pull itself).
enum class MassAssignment {
  cic,  ///< cloud in cell: linear, 2 points per axis (8 per body)
  tsc,  ///< triangular shaped cloud: quadratic, 3 points per axis (27 per body)
};

/// How the mesh potential becomes a pull.
enum class MeshGradient {
  fourier,           ///< i k in Fourier space: three more inverse transforms (four with potentials), exact per mode
  finiteDifference,  ///< four-point central differences of the potential on the mesh: one inverse transform in all
};

/// Where the mesh runs, chosen with the engine (apps/: the CUDA engine takes cuFFT). Both compute in double, with the
/// same arithmetic (mesh_kernels.hpp); they differ by the transforms' and the deposit's rounding only.
enum class MeshBackend {
  fftw,   ///< the CPU: TBB threads and FFTW3
  cufft,  ///< CUDA device 0: atomics for the deposit, cuFFT (D2Z/Z2D) for the transforms (mesh/cuda/)
};

std::string toString(MassAssignment assignment);  ///< "cic" or "tsc"
std::string toString(MeshGradient gradient);      ///< "fourier" or "fd4"
std::string toString(MeshBackend backend);        ///< "fftw" or "cufft"

/// True when this binary contains the cuFFT backend (built with CUDA); a device may still be missing.
bool cufftMeshBuilt();

inline constexpr int kMinGrid = 8;     ///< fewest mesh points per side
inline constexpr int kMaxGrid = 4096;  ///< most mesh points per side (16 n^3 bytes: 1 TiB for the Fourier gradient)

/// The mesh and the force split. Defaults meet GADGET's force-law test (|F / F_Ewald - 1| <= 0.5% beyond 3 softening
/// lengths) on their own; see the README for the measurements behind them.
struct MeshParams {
  double boxSize = 1.0;  ///< L, side of the periodic cube (length units), finite and > 0
  /// Mesh points per side, in [kMinGrid, kMaxGrid]; any size works, fftFriendlyGridSize gives fast ones. The command
  /// line's default (--pm-grid) is defaultPmGrid(N).
  int grid = 64;
  MassAssignment assignment = MassAssignment::tsc;  ///< window of deposit and interpolation
  MeshGradient gradient = MeshGradient::fourier;    ///< how the potential becomes a pull
  /// Interlacing: a second solution on the mesh moved by h/2 along each axis, averaged with the first, cancels the
  /// leading aliasing error (the mesh's anisotropy) for twice the time and no more memory.
  bool interlace = true;
  MeshBackend backend = MeshBackend::fftw;  ///< where it runs (apps/ choose it with the engine)
  /// The CUDA device of the cuFFT backend, >= 0: each rank of a distributed run takes its engine's (the mesh selects
  /// it at each call, as the CUDA engine selects its own).
  int device = 0;
  /// On cuFFT, TreePM (mesh/treepm_solver.hpp) starts the mesh on the GPU as soon as the short range has sorted the
  /// bodies and adds its results once the short range is done, so that it runs beside the tree's build, walk and
  /// kernels (ParticleMesh::runsBeside); the same forces as after the short range. false: after the short range (the
  /// sequential call). The FFTW mesh always runs after the short range: beside the tree it would compete for the cores.
  bool overlap = true;
  /// r_s / h, the split radius in mesh cells (GADGET's ASMTH), finite and in [0.5, 8]: larger moves more of the force
  /// to the short range (r_cut^3 more pairs) and leaves the mesh smoother, so more accurate.
  double aSmooth = 1.25;
  /// r_cut / r_s, where the short range is cut (GADGET's RCUT), finite and in [3, 8]. The cut drops f(r_cut) of the
  /// Newtonian pull (pair_interaction.hpp: shortRangeFactors): 1.75% at GADGET's 4.5, 0.17% at 5.5, 0.044% at 6.
  double cutoffFactor = 5.5;

  double cellSize() const { return boxSize / grid; }                    ///< h = L / n
  double splitRadius() const { return aSmooth * cellSize(); }           ///< r_s
  double cutoffRadius() const { return cutoffFactor * splitRadius(); }  ///< r_cut

  /// Throws InputError, one line, for a bad box, grid, aSmooth or cutoffFactor, or an r_cut beyond L/2 (the short range
  /// takes each source's nearest image only, so only one image may lie within r_cut).
  void validate() const;
};

/// The smallest m >= n (and >= 1) whose only prime factors are 2, 3, 5 and 7: sizes FFTW and cuFFT transform fastest.
/// Throws InputError when that would exceed kMaxGrid.
int fftFriendlyGridSize(int n);

/// Throws InputError, one line starting with `what` (e.g. "--grid"), unless n is in [kMinGrid, kMaxGrid] and
/// FFT-friendly (fftFriendlyGridSize(n) == n); the message names the next friendly size.
void requireFftFriendlyGrid(int n, const std::string& what);

/// The smallest g >= 1 with g^3 >= pointsPerSpacing^3 N: ceil(pointsPerSpacing N^(1/3)) in exact integers (the cube
/// root of a cube need not round to it), pointsPerSpacing mesh points per mean interparticle spacing. May exceed
/// kMaxGrid; N = 0 gives 1.
long long meshPointsForSpacing(std::size_t numBodies, int pointsPerSpacing);

/// The default mesh for N bodies: fftFriendlyGridSize of the larger of ceil(2 N^(1/3)) (GADGET's rule of thumb, two
/// mesh cells per mean interparticle spacing) and the smallest grid that keeps params' r_cut within L/2 (and of
/// kMinGrid). Only params.aSmooth and params.cutoffFactor are read. Throws InputError beyond kMaxGrid.
int defaultPmGrid(std::size_t numBodies, const MeshParams& params = {});

/// Bytes ParticleMesh holds for `params` and `numBodies` bodies: the padded grids (one for the finite-difference
/// gradient, two for the Fourier gradient, 8 n^2 * 2 (n/2 + 1) bytes each) and 4 bytes per body for the deposit
/// order, for a dry-run memory check. FFTW's plans add a few kilobytes. Host memory of the FFTW backend.
std::size_t meshMemoryBytes(const MeshParams& params, std::size_t numBodies);

/// A rank's bytes for a SlabMesh (slab_mesh.hpp, built with MPI) of `params` over `numRanks` ranks holding `numBodies`
/// bodies, for memory checks: its share of the grid (ceil(n / K) planes; twice with the Fourier gradient) and the
/// records of its bodies, counted as 1.5 records a body (a body near a slab's edge reaches two slabs; a rank receives
/// about as many as it sends).
std::size_t slabMeshMemoryBytes(const MeshParams& params, int numRanks, std::size_t numBodies);

/// A rank's bytes for a SlabMesh on cuFFT (MeshBackend::cufft) of `params` over `numRanks` ranks holding `numBodies`
/// bodies: on the device five buffers of ceil(n / K) planes of complex values (the slab, the columns, the pull and
/// the transposes' two) and cuFFT's work area (taken as one more), and 64 bytes a record (the bodies and their
/// shares); on the host, page-locked, two such buffers for the transposes (none on one rank) and 32 bytes a record,
/// plus 36 bytes a record sent. 1.5 records a body, as slabMeshMemoryBytes counts them.
struct SlabMeshBytes {
  std::size_t host = 0;
  std::size_t device = 0;
};
SlabMeshBytes gpuSlabMeshMemoryBytes(const MeshParams& params, int numRanks, std::size_t numBodies);

/// Device bytes the cuFFT backend holds: the same grids, cuFFT's work area (taken as one more grid: its in-place 3-d
/// D2Z/Z2D plans need at most about that, and the backend checks the real size before it allocates) and 68 bytes per
/// body (positions, masses, the four outputs, double; the order its results are gathered in). Its host side adds 64
/// bytes per body, pinned: the results and the bodies' staging.
std::size_t meshDeviceMemoryBytes(const MeshParams& params, std::size_t numBodies);

/// Seconds of each stage of the last addLongRange call on the cuFFT backend, from CUDA events on its stream (both
/// passes when interlaced); all 0 on the FFTW backend.
struct MeshStageSeconds {
  double upload = 0;       ///< positions and masses to the device
  double assignment = 0;   ///< zeroing the grid and depositing the masses
  double fft = 0;          ///< forward and inverse transforms
  double green = 0;        ///< the Green's function (and the Fourier gradient's multiplications by -i k)
  double interpolate = 0;  ///< back to the bodies
  double download = 0;     ///< the results to the host
  double total = 0;        ///< first event to last, the host's final additions excluded
};

/// What ParticleMesh::finishLongRange reports of a long range started beside the caller.
struct LongRangeTiming {
  /// The whole long range: from startLongRange to its results in host memory (the device's events), then the host's
  /// additions; it overlaps whatever the caller did meanwhile.
  double seconds = 0;
  double waitSeconds = 0;  ///< of which finishLongRange waited for the device
};

/// What ParticleMesh::collectLongRange gives: the long range's forces, for the caller to add, and its timing.
struct LongRangeForces {
  ForceAddend forces;  ///< in the order reorderLongRange gave (else the start's); valid until the mesh's next start
  LongRangeTiming timing;
};

namespace detail {
class GpuMesh;
}

/// The particle mesh on its backend. On FFTW (the CPU): TBB threads for deposit, Green's function and interpolation;
/// FFTW3 (double, in place, FFTW_ESTIMATE) for the transforms, run on TBB's threads through fftw_threads_set_callback.
/// Memory: meshMemoryBytes.
///
/// Reproducibility: the same input gives the same bits whatever the thread count (tbb::global_control). The deposit
/// adds each mesh point's contributions in an order fixed by the input alone (bodies binned by mesh plane, chunks of
/// planes in two phases, each chunk serially in body order). FFTW's threaded transforms are bit-reproducible for a
/// given plan whatever threads run its jobs, but plans made for different numbers of jobs can differ (measured with
/// FFTW 3.3.10: 48^3 planned for 16 jobs and 96^3 for 64 jobs gave other bits than 1 job; 32^3, 64^3 and 128^3 did
/// not), so every plan is made for kFftJobs jobs, whatever the machine. FFTW_ESTIMATE chooses plans without timing
/// them (FFTW_MEASURE could choose differently from run to run). FFTW picks codelets by the CPU's SIMD, so another
/// CPU may give other bits. tests/mesh checks the bits at 1, 2 and 4 threads.
///
/// Speed: bodies in space-filling-curve order (as the tree solver keeps them) deposit and interpolate faster than
/// bodies in random order (1.5x at 128^3): each body touches 8-27 mesh points, cache misses in random order.
///
/// On cuFFT (mesh/cuda/gpu_mesh.cu): the same steps on CUDA device 0 in double, the deposit by atomic adds (so the
/// grid's bits depend on the order the atomics land in, a rounding of 1e-16 relative), cuFFT's in-place D2Z/Z2D
/// transforms; the host uploads the bodies, and adds the results and the self-potential correction. It agrees with
/// FFTW to double rounding of the transforms (tests/gpu: CufftMesh*), far inside "float rounding".
///
/// Not thread-safe: one call at a time per object (the grids are the object's). Several objects may run at once.
class ParticleMesh {
 public:
  /// Validates params, allocates the grids and makes the FFTW plans (once; calls do not allocate except the deposit
  /// order, which grows with the number of bodies). Throws InputError for bad params.
  /// params.backend == cufft: throws InputError (one line) when the binary has no CUDA, there is no device, or the
  /// grids do not fit in the device's free memory.
  explicit ParticleMesh(const MeshParams& params);
  ~ParticleMesh();
  ParticleMesh(ParticleMesh&&) noexcept;
  ParticleMesh& operator=(ParticleMesh&&) noexcept;
  ParticleMesh(const ParticleMesh&) = delete;
  ParticleMesh& operator=(const ParticleMesh&) = delete;

  const MeshParams& params() const;

  /// Adds the long-range periodic acceleration (and potential, with its self-energy correction) at every body from
  /// every body. The short range is the caller's: erfc-truncated pairs within params().cutoffRadius() (and the body's
  /// self pair removed as for the open-boundary sums).
  ///
  /// @param sources  in: positions (anywhere) and masses of sources.count bodies
  /// @param gravity  in: G (eps is not used: the mesh part is Newtonian)
  /// @param out      in/out: out.count == sources.count; ax, ay, az (and pot unless null) ADDED to, never overwritten,
  ///                 so that the short range may come first or after
  /// Throws InputError for a body with a non-finite position (naming it) or invalid gravity, InvariantError for a size
  /// mismatch. Parallel (TBB); allocates only when the number of bodies exceeds every earlier call's.
  /// On the cuFFT backend also an InputError when the bodies' buffers do not fit in the device's free memory; the call
  /// synchronises with the device.
  void addLongRange(const SourceView& sources, const GravityParams& gravity, const ForceView& out);

  /// Whether a caller should run the mesh beside its other work (startLongRange): the cuFFT backend with
  /// params().overlap. The FFTW backend's work is on the host's cores, which the caller's work needs.
  bool runsBeside() const;

  /// addLongRange in two halves, for a caller with other work to do meanwhile (TreePM: the tree's short range).
  /// cuFFT backend only (InvariantError otherwise). Checks the bodies as addLongRange does, copies them into
  /// page-locked memory (on all cores), queues every stage on the GPU and returns; `sources` is not read again until
  /// finishLongRange. A long range started and not finished is waited for and dropped first.
  /// @param sources     in: positions and masses of sources.count bodies
  /// @param gravity     in: G
  /// @param potentials  in: whether the potentials are wanted (finishLongRange's out.pot then non-null)
  void startLongRange(const SourceView& sources, const GravityParams& gravity, bool potentials);

  /// Tells a started long range that its bodies have been put in a new order: body k now is the start's body
  /// newOrder[k] (a permutation of [0, n); empty: the start's order). finishLongRange then takes them, and adds their
  /// results, in the new order. Queues the results' download on the GPU at once (without it finishLongRange queues
  /// it); a second call supersedes the first (the order is always relative to the start's). `newOrder` is not read
  /// after this returns.
  void reorderLongRange(std::span<const std::uint32_t> newOrder);

  /// Waits for the started long range and adds it to `out` exactly as addLongRange adds (the same sums in the same
  /// order: addLongRange on cuFFT is start then finish).
  /// @param sources  in: the start's bodies, unchanged but for the order reorderLongRange gave (their masses give the
  ///                 potential's self term)
  /// @param gravity  in: the start's
  /// @param out      in/out: out.count == sources.count, out.pot non-null exactly when the start wanted potentials;
  ///                 ADDED to
  /// Throws InvariantError when nothing was started or the sizes differ from the start's.
  LongRangeTiming finishLongRange(const SourceView& sources, const GravityParams& gravity, const ForceView& out);

  /// finishLongRange without the add: waits for the started long range and returns its forces, the potential's self
  /// term included, for a caller that adds them where it writes its own forces anyway (TreePM: the short range's
  /// engine, ForceSolver::setForceAddendProvider). out + forces there is finishLongRange's sum, bit for bit. The same
  /// arguments and errors as finishLongRange; forces.pot is null unless the start wanted potentials.
  LongRangeForces collectLongRange(const SourceView& sources, const GravityParams& gravity);

  /// Drops a started long range, waiting for the device (a caller whose own work failed); never throws.
  void abandonLongRange() noexcept;

  /// Sums a deposited mass grid, in place, with the grids of the system's other parts (parallel/: an MPI_Allreduce
  /// over the ranks of a distributed run, each of which deposits its own bodies), so that every part's mesh solves for
  /// the whole system and interpolates at its own bodies: a mesh replicated on every rank. Given the whole padded real
  /// grid (FFTW's in-place layout, its padding included), once per pass (twice when interlaced).
  using DensityReduction = std::function<void(std::span<double> grid)>;
  /// Sets the reduction of the calls that follow (an empty function: none). With one, addLongRange is collective: every
  /// part must call it, a part without bodies too (it deposits nothing and still reduces and solves), and the mesh does
  /// not run beside (runsBeside: false). On cuFFT each pass's grid crosses to page-locked host memory for the sum and
  /// back (8 n^3 bytes each way; the pinned copy is allocated here).
  void setDensityReduction(DensityReduction reduce);

  /// The stages of the last call (cuFFT backend; zeros on FFTW).
  MeshStageSeconds lastStageSeconds() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;            ///< the FFTW backend (null on cuFFT)
  std::unique_ptr<detail::GpuMesh> gpu_;  ///< the cuFFT backend (null on FFTW)
  MeshParams params_;
  DensityReduction reduceDensity_;
  /// A long range started and not yet finished (startLongRange): its body count and potentials.
  struct Started {
    std::size_t count = 0;
    bool potentials = false;
  };
  std::optional<Started> started_;
};

/// Jobs each FFTW transform is split into (then run by TBB on however many threads there are): a constant, so that
/// the plans, and with them the bits, do not depend on the machine's thread count. 64 jobs cost nothing measurable
/// against 1 at 64^3 and 128^3 on 2 cores, and leave work for up to 64 threads.
inline constexpr int kFftJobs = 64;

}  // namespace matcha::mesh
