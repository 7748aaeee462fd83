// SPDX-License-Identifier: MIT
#include "matcha/mesh/slab_mesh.hpp"

#include <fftw3-mpi.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <complex>
#include <cstdint>
#include <limits>
#include <mutex>
#include <new>
#include <numeric>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "fftw_grid.hpp"
#include "gpu_slab.hpp"
#include "matcha/core/errors.hpp"
#include "matcha/core/stopwatch.hpp"
#include "matcha/mesh/mesh_kernels.hpp"
#include "matcha/mesh/slab_fourier_grid.hpp"
#include "mesh_modes.hpp"
#include "ordered_deposit.hpp"

namespace matcha::mesh {
namespace {

constexpr int support(MassAssignment assignment) { return assignment == MassAssignment::cic ? 2 : 3; }

/// Throws InvariantError naming the MPI call that failed (MPI's default handler aborts first; this is for a
/// communicator whose handler returns).
void check(int status, const char* call) {
  if (status != MPI_SUCCESS) throw InvariantError(std::string("slab mesh: ") + call + " failed");
}

/// Most distinct slabs one body's windows (with the finite-difference gradient's two planes on each side) can reach:
/// one pass's, or both interlaced passes' together (the second window half a cell on).
constexpr int kMaxOwnersPerBody = kMaxGradientSupport + 1;

/// One body's record in the exchanges, in one buffer for both directions: on the way to a slab its position and
/// mass, on the way back that slab's share of its pull and potential.
struct BodyRecord {
  double v[4];
};
enum RecordField { kX = 0, kY = 1, kZ = 2, kMass = 3 };   ///< going
enum ShareField { kAx = 0, kAy = 1, kAz = 2, kPot = 3 };  ///< coming back

}  // namespace

struct SlabMesh::Impl {
  MeshParams params;
  SlabTransposes transposes = SlabTransposes::automatic;
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, ranks = 1;
  int n = 0;
  std::size_t padded = 0;  ///< P = 2 (n/2 + 1) doubles per row of the real grid
  std::size_t half = 0;    ///< n/2 + 1 complex values per row of the spectrum
  double invBox = 0, invCell = 0;
  SlabShare ownShare;             ///< the x planes this rank owns (real layout), the y rows of the transposed spectrum
  std::vector<int> ownerOfPlane;  ///< the rank owning each x plane
  MPI_Datatype recordType = MPI_DATATYPE_NULL;   ///< a BodyRecord (4 doubles)
  MPI_Datatype complexType = MPI_DATATYPE_NULL;  ///< 2 doubles: the cuFFT backend's transposes
  std::unique_ptr<detail::GpuSlabMesh> gpu;      ///< the cuFFT backend's slab on this rank's GPU (null: FFTW's)
  std::unique_ptr<SlabFourierGrid> grid;         ///< the FFTW backend's slab: deposit, spectrum, potential
  double* slab = nullptr;                        ///< grid's values
  double* work = nullptr;                        ///< one component of the pull (Fourier gradient only)
  fftw_plan workInversePlan = nullptr;           ///< work's own inverse transform (grid has the slab's)
  detail::ModeTables modes;                      ///< the Green's function and derivative per axis index
  detail::OrderedDeposit depositor;              ///< the received bodies onto the slab

  // One pass's traffic. Sent: each body once per slab its window reaches, grouped by destination rank (in rank order,
  // each rank's in body order). Received: the same from every rank, in rank order.
  std::vector<int> sendCounts, sendDispls, recvCounts, recvDispls;
  std::vector<int> otherSendCounts, otherRecvCounts;  ///< the same without this rank's own, which MPI does not move
  std::vector<std::uint32_t> sentBody;                ///< the local body of each sent entry
  std::vector<BodyRecord> sent;                       ///< this rank's bodies, then the slabs' shares of them
  std::vector<BodyRecord> received;                   ///< the FFTW backend's `records`
  /// The bodies that reach this slab, then this slab's shares of them: `received`'s, or the cuFFT backend's
  /// page-locked records (the exchange lands where the upload starts, and the shares leave from where they came down).
  BodyRecord* records = nullptr;
  std::size_t numReceived = 0;
  std::vector<double> rx, ry, rz, rm;    ///< the received bodies, as a SourceView
  std::vector<std::size_t> blockCounts;  ///< routing: entries per (block, destination)

  SlabMeshStats stats;
  bool potentials = false;  ///< this call's: some rank asked for potentials

  Impl(const MeshParams& p, MPI_Comm parent, SlabTransposes t)
      : params(p),
        transposes(t),
        n(p.grid),
        padded(2 * (static_cast<std::size_t>(p.grid) / 2 + 1)),
        half(static_cast<std::size_t>(p.grid) / 2 + 1),
        invBox(1.0 / p.boxSize),
        invCell(p.grid / p.boxSize),
        modes(p),
        depositor(p.grid, p.boxSize, "particle mesh") {
    check(MPI_Comm_dup(parent, &comm), "MPI_Comm_dup");
    try {
      setUp();
    } catch (...) {
      release();
      throw;
    }
  }

  ~Impl() { release(); }

  void setUp() {
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &ranks);
    ownShare = slabShareOf(n, comm);
    static_assert(sizeof(BodyRecord) == 4 * sizeof(double));
    check(MPI_Type_contiguous(4, MPI_DOUBLE, &recordType), "MPI_Type_contiguous");
    check(MPI_Type_commit(&recordType), "MPI_Type_commit");
    detail::SlabSplit split = gatherSplit();
    setUpOwners(split);
    if (params.backend == MeshBackend::cufft) {
      setUpGpu(std::move(split));
      return;
    }
    grid = std::make_unique<SlabFourierGrid>(n, comm);
    slab = grid->real();
    if (params.gradient == MeshGradient::fourier) {
      // The pull's components, each transformed back from the potential's spectrum while that stays in the slab.
      work = fftw_alloc_real(slabReals());
      if (work == nullptr) throw std::bad_alloc();
      const auto side = static_cast<ptrdiff_t>(n);
      std::lock_guard<std::mutex> lock(detail::plannerMutex());
      fftw_plan_with_nthreads(kFftJobs);
      auto* pull = reinterpret_cast<fftw_complex*>(work);
      workInversePlan =
          fftw_mpi_plan_dft_c2r_3d(side, side, side, pull, work, comm, FFTW_ESTIMATE | FFTW_MPI_TRANSPOSED_IN);
      if (workInversePlan == nullptr) {
        throw InvariantError("FFTW-MPI could not plan a " + std::to_string(n) + "^3 transform over " +
                             std::to_string(ranks) + " ranks");
      }
    }
  }

  /// Doubles FFTW asks for a slab (room for its transposes); at least a little, so that a rank without planes still
  /// has a buffer to plan on.
  std::size_t slabReals() const { return std::max<std::size_t>(2 * ownShare.allocatedComplex, 2); }

  /// Every rank's planes and rows (FFTW-MPI's split), and the owner of each plane.
  detail::SlabSplit gatherSplit() const {
    detail::SlabSplit split;
    split.rank = rank;
    const int mine[4] = {ownShare.firstPlane, ownShare.planes, ownShare.firstModeRow, ownShare.modeRows};
    std::vector<int> all(4 * static_cast<std::size_t>(ranks));
    check(MPI_Allgather(mine, 4, MPI_INT, all.data(), 4, MPI_INT, comm), "MPI_Allgather");
    for (int r = 0; r < ranks; ++r) {
      split.xFirst.push_back(all[4 * r]);
      split.xCount.push_back(all[4 * r + 1]);
      split.yFirst.push_back(all[4 * r + 2]);
      split.yCount.push_back(all[4 * r + 3]);
    }
    return split;
  }

  void setUpOwners(const detail::SlabSplit& split) {
    ownerOfPlane.assign(n, -1);
    for (int r = 0; r < ranks; ++r) {
      for (int plane = split.xFirst[r]; plane < split.xFirst[r] + split.xCount[r]; ++plane) ownerOfPlane[plane] = r;
    }
    MATCHA_ASSERT(std::find(ownerOfPlane.begin(), ownerOfPlane.end(), -1) == ownerOfPlane.end(),
                  "slab mesh: FFTW-MPI left a plane without an owner");
  }

  /// The cuFFT backend: FFTW-MPI's split (the bodies are routed alike), the transposes' exchange over MPI.
  void setUpGpu(detail::SlabSplit split) {
    check(MPI_Type_contiguous(2, MPI_DOUBLE, &complexType), "MPI_Type_contiguous");
    check(MPI_Type_commit(&complexType), "MPI_Type_commit");
    detail::SlabComm slabComm;
    slabComm.alltoallv = [this](const double* send, const std::vector<std::size_t>& blocksOut,
                                const std::vector<std::size_t>& blocksOutAt, double* recv,
                                const std::vector<std::size_t>& blocksIn, const std::vector<std::size_t>& blocksInAt) {
      // GpuSlabMesh keeps every count and displacement within MPI's ints.
      const auto ints = [](const std::vector<std::size_t>& v) { return std::vector<int>(v.begin(), v.end()); };
      const std::vector<int> sc = ints(blocksOut), sd = ints(blocksOutAt), rc = ints(blocksIn), rd = ints(blocksInAt);
      const Stopwatch clock;
      check(MPI_Alltoallv(send, sc.data(), sd.data(), complexType, recv, rc.data(), rd.data(), complexType, comm),
            "MPI_Alltoallv");
      stats.transposeMpiSeconds += clock.seconds();
      constexpr std::size_t kComplexBytes = 2 * sizeof(double);
      stats.bytesSent += kComplexBytes * std::accumulate(blocksOut.begin(), blocksOut.end(), std::size_t{0});
      stats.bytesReceived += kComplexBytes * std::accumulate(blocksIn.begin(), blocksIn.end(), std::size_t{0});
    };
    slabComm.barrier = [this] {
      const Stopwatch clock;
      check(MPI_Barrier(comm), "MPI_Barrier");
      stats.transposeMpiSeconds += clock.seconds();
    };
    slabComm.allgather = [this](const void* mine, std::size_t bytes, void* all) {
      check(MPI_Allgather(mine, static_cast<int>(bytes), MPI_BYTE, all, static_cast<int>(bytes), MPI_BYTE, comm),
            "MPI_Allgather");
    };
    slabComm.everyRank = [this](bool mine) {
      int all = mine ? 1 : 0;
      check(MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce");
      return all == 1;
    };
    MPI_Comm host = MPI_COMM_NULL;
    check(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &host), "MPI_Comm_split_type");
    int hostRanks = 0;
    MPI_Comm_size(host, &hostRanks);
    MPI_Comm_free(&host);
    slabComm.sameHost = hostRanks == ranks;
    slabComm.allowDirect = transposes == SlabTransposes::automatic;
    gpu = std::make_unique<detail::GpuSlabMesh>(params, std::move(split), std::move(slabComm));
  }

  void release() noexcept {
    {
      std::lock_guard<std::mutex> lock(detail::plannerMutex());
      if (workInversePlan != nullptr) fftw_destroy_plan(workInversePlan);
      workInversePlan = nullptr;
    }
    if (work != nullptr) fftw_free(work);
    work = nullptr;
    grid.reset();
    slab = nullptr;
    gpu.reset();
    if (recordType != MPI_DATATYPE_NULL) MPI_Type_free(&recordType);
    if (complexType != MPI_DATATYPE_NULL) MPI_Type_free(&complexType);
    if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
  }

  MeshLayout layout() const { return {n, padded}; }
  PlaneRange ownPlanes() const { return {ownShare.firstPlane, ownShare.planes}; }

  /// Collective: InputError on every rank when any rank holds a body with a non-finite position (the first such
  /// rank's first such body), before anything else is exchanged.
  void requireFinitePositions(const SourceView& s) const {
    const std::size_t bad = detail::firstNonFinitePosition(s);
    const long long mine = bad < s.count ? static_cast<long long>(bad) : -1;
    std::vector<long long> all(ranks);
    check(MPI_Allgather(&mine, 1, MPI_LONG_LONG, all.data(), 1, MPI_LONG_LONG, comm), "MPI_Allgather");
    for (int r = 0; r < ranks; ++r) {
      if (all[r] >= 0) {
        throw InputError("particle mesh: body " + std::to_string(all[r]) + " of rank " + std::to_string(r) +
                         " has a non-finite position");
      }
    }
  }

  /// The ranks whose slabs body i's windows reach (their deposit's planes, and with finite differences the two more
  /// on each side that the pull reads) for each offset of `offsets`, each rank once, in the order of the planes.
  /// Returns how many.
  template <MassAssignment A>
  int ownersOf(const SourceView& s, std::size_t i, std::span<const double> offsets,
               int (&owners)[kMaxOwnersPerBody]) const {
    const int margin = params.gradient == MeshGradient::finiteDifference ? 2 : 0;
    int count = 0;
    for (const double offset : offsets) {
      const AxisWeights<double> w = windowWeights<support(A)>(shiftedMeshCoordinate(s.x[i], invBox, n, offset));
      for (int plane = w.first - margin; plane < w.first + support(A) + margin; ++plane) {
        const int owner = ownerOfPlane[wrapMeshIndex(plane, n)];
        if (std::find(owners, owners + count, owner) == owners + count) owners[count++] = owner;
      }
    }
    return count;
  }

  /// Sends every body to the slabs its windows reach (for each offset of `offsets`) and receives the bodies that
  /// reach this one, in an order fixed by the input: by destination, then by block of bodies, then in body order. The
  /// other ranks' through MPI_Alltoallv; this rank's own straight into its place among the received.
  template <MassAssignment A>
  void route(const SourceView& s, std::span<const double> offsets) {
    const std::size_t count = s.count;
    const std::size_t numBlocks = std::clamp<std::size_t>((count + (1 << 14) - 1) >> 14, 1, 256);
    const std::size_t blockSize = (count + numBlocks - 1) / numBlocks;
    const auto K = static_cast<std::size_t>(ranks);
    blockCounts.assign(numBlocks * K, 0);
    tbb::parallel_for(std::size_t{0}, numBlocks, [&](std::size_t b) {
      int owners[kMaxOwnersPerBody];
      for (std::size_t i = b * blockSize; i < std::min(count, (b + 1) * blockSize); ++i) {
        const int reached = ownersOf<A>(s, i, offsets, owners);
        for (int k = 0; k < reached; ++k) ++blockCounts[b * K + static_cast<std::size_t>(owners[k])];
      }
    });
    // Counts go as 64-bit integers, so that every rank sees an overflow of MPI's int counts and all stop alike.
    std::vector<long long> sendTotals(K, 0), recvTotals(K, 0);
    std::size_t position = 0;
    for (std::size_t r = 0; r < K; ++r) {
      const std::size_t first = position;
      for (std::size_t b = 0; b < numBlocks; ++b) {
        const std::size_t entries = blockCounts[b * K + r];
        blockCounts[b * K + r] = position;
        position += entries;
      }
      sendTotals[r] = static_cast<long long>(position - first);
    }
    check(MPI_Alltoall(sendTotals.data(), 1, MPI_LONG_LONG, recvTotals.data(), 1, MPI_LONG_LONG, comm), "MPI_Alltoall");
    constexpr auto kMaxCount = static_cast<long long>(std::numeric_limits<int>::max());
    int overflow = (static_cast<long long>(position) > kMaxCount ||
                    std::accumulate(recvTotals.begin(), recvTotals.end(), 0LL) > kMaxCount)
                       ? 1
                       : 0;
    check(MPI_Allreduce(MPI_IN_PLACE, &overflow, 1, MPI_INT, MPI_MAX, comm), "MPI_Allreduce");
    if (overflow != 0) {
      throw InputError("particle mesh: more than 2^31 - 1 bodies a rank reach the slabs or one slab; use more ranks");
    }
    sendCounts.assign(ranks, 0);
    sendDispls.assign(ranks, 0);
    recvCounts.assign(ranks, 0);
    recvDispls.assign(ranks, 0);
    for (int r = 0, sentBefore = 0, receivedBefore = 0; r < ranks; ++r) {
      sendCounts[r] = static_cast<int>(sendTotals[r]);
      recvCounts[r] = static_cast<int>(recvTotals[r]);
      sendDispls[r] = sentBefore;
      recvDispls[r] = receivedBefore;
      sentBefore += sendCounts[r];
      receivedBefore += recvCounts[r];
    }
    const auto total = static_cast<std::size_t>(recvDispls[ranks - 1] + recvCounts[ranks - 1]);
    otherSendCounts = sendCounts;
    otherRecvCounts = recvCounts;
    otherSendCounts[rank] = otherRecvCounts[rank] = 0;
    if (gpu) {
      records = reinterpret_cast<BodyRecord*>(gpu->records(total));
    } else {
      received.resize(total);
      records = received.data();
    }
    numReceived = total;
    // This rank's own entries: sent slot e is received slot e + ownShift.
    const std::size_t ownFirst = static_cast<std::size_t>(sendDispls[rank]);
    const std::size_t ownEnd = ownFirst + static_cast<std::size_t>(sendCounts[rank]);
    const std::size_t ownShift = static_cast<std::size_t>(recvDispls[rank]) - ownFirst;
    sent.resize(position);
    sentBody.resize(position);
    tbb::parallel_for(std::size_t{0}, numBlocks, [&](std::size_t b) {
      int owners[kMaxOwnersPerBody];
      for (std::size_t i = b * blockSize; i < std::min(count, (b + 1) * blockSize); ++i) {
        const int reached = ownersOf<A>(s, i, offsets, owners);
        for (int k = 0; k < reached; ++k) {
          const std::size_t slot = blockCounts[b * K + static_cast<std::size_t>(owners[k])]++;
          const bool own = slot >= ownFirst && slot < ownEnd;
          (own ? records[slot + ownShift] : sent[slot]) = {{s.x[i], s.y[i], s.z[i], s.mass[i]}};
          sentBody[slot] = static_cast<std::uint32_t>(i);
        }
      }
    });
    check(MPI_Alltoallv(sent.data(), otherSendCounts.data(), sendDispls.data(), recordType, records,
                        otherRecvCounts.data(), recvDispls.data(), recordType, comm),
          "MPI_Alltoallv");
    stats.bodiesSent += sent.size();
    stats.bodiesReceived += total;
    stats.bytesSent += sent.size() * sizeof(BodyRecord);
    stats.bytesReceived += total * sizeof(BodyRecord);
    if (gpu) return;  // the records go up as they are
    rx.resize(total);
    ry.resize(total);
    rz.resize(total);
    rm.resize(total);
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, total, 1 << 14),
                      [&](const tbb::blocked_range<std::size_t>& r) {
                        for (std::size_t k = r.begin(); k != r.end(); ++k) {
                          rx[k] = received[k].v[kX];
                          ry[k] = received[k].v[kY];
                          rz[k] = received[k].v[kZ];
                          rm[k] = received[k].v[kMass];
                          received[k] = {{0, 0, 0, 0}};  // from here on this slab's shares of the body
                        }
                      });
  }

  SourceView receivedBodies() const { return {rx.data(), ry.data(), rz.data(), rm.data(), rx.size()}; }

  /// The transposed spectrum's mode (x, y, z) at ((y - firstModeRow) n + x) (n/2 + 1) + z: each rank holds rows y of
  /// [firstModeRow, firstModeRow + modeRows) (SlabShare::spectrumIndex).
  template <class Visit>
  void forEachOwnedRow(Visit visit) const {
    tbb::parallel_for(0, ownShare.modeRows, [&](int yl) {
      const int y = ownShare.firstModeRow + yl;
      for (int x = 0; x < n; ++x) visit(x, y, (static_cast<std::size_t>(yl) * n + x) * half);
    });
  }

  /// The mass spectrum becomes the potential's, as ParticleMesh's applyGreen.
  void applyGreen(double G) {
    const double scale = greenScale(G, params.boxSize);
    auto* spectrum = reinterpret_cast<std::complex<double>*>(slab);
    forEachOwnedRow([&](int x, int y, std::size_t base) { modes.applyGreen(spectrum + base, half, x, y, scale); });
  }

  /// work = -i k_d phi_k, as ParticleMesh's differentiate.
  void differentiate(int axis) {
    const auto* phi = reinterpret_cast<const std::complex<double>*>(slab);
    auto* pull = reinterpret_cast<std::complex<double>*>(work);
    forEachOwnedRow(
        [&](int x, int y, std::size_t base) { modes.differentiate(phi + base, pull + base, half, x, y, axis); });
  }

  /// visit(k, window) for every received body k with its window, on all cores, in the deposit's order (by plane),
  /// as ParticleMesh interpolates: neighbouring tasks read neighbouring planes.
  template <MassAssignment A, class Visit>
  void forEachReceived(double offset, Visit visit) {
    const SourceView r = receivedBodies();
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, r.count, 1024),
                      [&](const tbb::blocked_range<std::size_t>& range) {
                        for (std::size_t slot = range.begin(); slot != range.end(); ++slot) {
                          const std::size_t k = depositor.order()[slot];
                          visit(k, BodyWindow<support(A), double>(r.x[k], r.y[k], r.z[k], invBox, n, offset));
                        }
                      });
  }

  /// Each received body's share of `field` from this slab's planes, into `component` of its record.
  template <MassAssignment A>
  void shareOf(const double* field, double offset, ShareField component) {
    forEachReceived<A>(offset, [&](std::size_t k, const BodyWindow<support(A), double>& window) {
      received[k].v[component] = gatherBody(field, layout(), window, ownPlanes());
    });
  }

  /// The finite-difference variant: the pull and potential shares in one pass over the potential's slab.
  template <MassAssignment A>
  void finiteDifferenceShares(double offset) {
    forEachReceived<A>(offset, [&](std::size_t k, const BodyWindow<support(A), double>& window) {
      double gradient[3], pot;
      gatherFiniteDifference(slab, layout(), window, invCell, gradient, pot, ownPlanes());
      received[k] = {{-gradient[0], -gradient[1], -gradient[2], pot}};
    });
  }

  /// The shares go back to the bodies' ranks, which add them times `weight`, slab by slab in rank order.
  void collectShares(double weight, const ForceView& out) {
    check(MPI_Alltoallv(records, otherRecvCounts.data(), recvDispls.data(), recordType, sent.data(),
                        otherSendCounts.data(), sendDispls.data(), recordType, comm),
          "MPI_Alltoallv");
    // This rank's own shares never left: read them where they are.
    const auto ownShift = static_cast<std::ptrdiff_t>(recvDispls[rank]) - sendDispls[rank];
    stats.bytesSent += numReceived * sizeof(BodyRecord);
    stats.bytesReceived += sent.size() * sizeof(BodyRecord);
    for (int r = 0; r < ranks; ++r) {  // a body has at most one entry per slab: no two threads add to one body
      const auto first = static_cast<std::size_t>(sendDispls[r]);
      tbb::parallel_for(tbb::blocked_range<std::size_t>(first, first + static_cast<std::size_t>(sendCounts[r]), 4096),
                        [&](const tbb::blocked_range<std::size_t>& range) {
                          for (std::size_t e = range.begin(); e != range.end(); ++e) {
                            const std::size_t i = sentBody[e];
                            const double* share =
                                r == rank ? records[static_cast<std::ptrdiff_t>(e) + ownShift].v : sent[e].v;
                            out.ax[i] += weight * share[kAx];
                            out.ay[i] += weight * share[kAy];
                            out.az[i] += weight * share[kAz];
                            if (out.pot != nullptr) out.pot[i] += weight * share[kPot];
                          }
                        });
    }
  }

  /// One pass (ParticleMesh::Impl::addPass over the ranks). Returns the mass deposited by all ranks.
  template <MassAssignment A>
  double addPass(const SourceView& s, const GravityParams& gravity, double offset, double weight,
                 const ForceView& out) {
    Stopwatch clock;
    route<A>(s, std::span<const double>(&offset, 1));
    stats.exchangeSeconds += clock.seconds();

    clock.restart();
    depositor.deposit(receivedBodies(), A, offset, slab, ownPlanes());
    stats.depositSeconds += clock.seconds();

    clock.restart();
    grid->forward();
    stats.fftSeconds += clock.seconds();

    clock.restart();
    // The k = 0 mode (the deposited mass) lies on the rank holding row y = 0 of the transposed spectrum.
    const double mine = (ownShare.modeRows > 0 && ownShare.firstModeRow == 0) ? slab[0] : 0.0;
    double totalMass = 0;
    check(MPI_Allreduce(&mine, &totalMass, 1, MPI_DOUBLE, MPI_SUM, comm), "MPI_Allreduce");
    applyGreen(gravity.G);
    stats.greenSeconds += clock.seconds();

    if (params.gradient == MeshGradient::fourier) {
      constexpr ShareField components[3] = {kAx, kAy, kAz};
      for (int d = 0; d < 3; ++d) {
        clock.restart();
        differentiate(d);
        stats.greenSeconds += clock.seconds();
        clock.restart();
        fftw_mpi_execute_dft_c2r(workInversePlan, reinterpret_cast<fftw_complex*>(work), work);
        stats.fftSeconds += clock.seconds();
        clock.restart();
        shareOf<A>(work, offset, components[d]);
        stats.interpolateSeconds += clock.seconds();
      }
      if (potentials) {  // collective: a rank without bodies has no potentials to write but takes part
        clock.restart();
        grid->inverse();
        stats.fftSeconds += clock.seconds();
        clock.restart();
        shareOf<A>(slab, offset, kPot);
        stats.interpolateSeconds += clock.seconds();
      }
    } else {
      clock.restart();
      grid->inverse();
      stats.fftSeconds += clock.seconds();
      clock.restart();
      finiteDifferenceShares<A>(offset);
      stats.interpolateSeconds += clock.seconds();
    }
    clock.restart();
    collectShares(weight, out);
    stats.exchangeSeconds += clock.seconds();
    return totalMass;
  }

  /// The cuFFT backend's call: the bodies routed once for both passes (to the slabs either window reaches), both
  /// passes' weighted shares summed on the device, and sent back once. Returns the mass deposited by all ranks.
  template <MassAssignment A>
  double runOnGpu(const SourceView& s, const GravityParams& gravity, const ForceView& out) {
    const int passes = params.interlace ? 2 : 1;
    const double offsets[2] = {0.0, 0.5};
    Stopwatch clock;
    route<A>(s, std::span<const double>(offsets, static_cast<std::size_t>(passes)));
    stats.exchangeSeconds += clock.seconds();
    detail::GpuSlabSeconds seconds;
    gpu->beginCall(numReceived, seconds);
    double mine = 0;
    for (int pass = 0; pass < passes; ++pass) {
      const double mass = gpu->pass(offsets[pass], gravity.G, potentials, 1.0 / passes, seconds);
      if (pass == 0) mine = mass;
    }
    gpu->endCall(seconds);
    stats.depositSeconds += seconds.deposit;
    stats.fftSeconds += seconds.fft;
    stats.greenSeconds += seconds.green;
    stats.transposeSeconds += seconds.transpose;
    stats.interpolateSeconds += seconds.interpolate;
    double totalMass = 0;
    check(MPI_Allreduce(&mine, &totalMass, 1, MPI_DOUBLE, MPI_SUM, comm), "MPI_Allreduce");
    clock.restart();
    collectShares(1.0, out);
    stats.exchangeSeconds += clock.seconds();
    return totalMass;
  }

  template <MassAssignment A>
  void run(const SourceView& s, const GravityParams& gravity, const ForceView& out) {
    // Interlacing as ParticleMesh: a second pass on the mesh moved by half a cell, averaged with the first.
    const int passes = params.interlace ? 2 : 1;
    const double weight = 1.0 / passes;
    double totalMass = 0;
    if (gpu) {
      totalMass = runOnGpu<A>(s, gravity, out);
      if (out.pot != nullptr) detail::addSelfPotentials(s, params, gravity.G, totalMass, out.pot);
      return;
    }
    for (int pass = 0; pass < passes; ++pass) {
      const double mass = addPass<A>(s, gravity, 0.5 * pass, weight, out);
      if (pass == 0) totalMass = mass;
    }
    if (out.pot != nullptr) detail::addSelfPotentials(s, params, gravity.G, totalMass, out.pot);
  }

  /// What this rank holds for the mesh after a call: the slab (twice with the Fourier gradient) and the last pass's
  /// records, sent and received, with their indices.
  std::size_t heldBytes() const {
    if (gpu) {
      return gpu->hostBytes() + sent.capacity() * sizeof(BodyRecord) + sentBody.capacity() * sizeof(std::uint32_t);
    }
    const std::size_t slabs = (work != nullptr ? 2 : 1) * slabReals() * sizeof(double);
    const std::size_t bodies = (sent.capacity() + received.capacity()) * sizeof(BodyRecord) +
                               sentBody.capacity() * sizeof(std::uint32_t) + 4 * rx.capacity() * sizeof(double) +
                               depositor.order().capacity() * sizeof(std::uint32_t);
    return slabs + bodies;
  }
};

SlabMesh::SlabMesh(const MeshParams& params, MPI_Comm comm, SlabTransposes transposes) {
  params.validate();
  impl_ = std::make_unique<Impl>(params, comm, transposes);
}

SlabMesh::~SlabMesh() = default;

const MeshParams& SlabMesh::params() const { return impl_->params; }
int SlabMesh::numRanks() const { return impl_->ranks; }
SlabMeshStats SlabMesh::lastStats() const { return impl_->stats; }
bool SlabMesh::directTransposes() const { return impl_->gpu != nullptr && impl_->gpu->directTransposes(); }

void SlabMesh::addLongRange(const SourceView& sources, const GravityParams& gravity, const ForceView& out) {
  gravity.validate();
  MATCHA_ASSERT(out.count == sources.count, "SlabMesh::addLongRange: the output size differs from the sources'");
  MATCHA_ASSERT(sources.count <= std::numeric_limits<std::uint32_t>::max(),
                "SlabMesh::addLongRange: at most 2^32 - 1 bodies a rank");
  const Stopwatch total;
  Impl& m = *impl_;
  m.stats = SlabMeshStats{};
  m.stats.slabPlanes = m.ownShare.planes;
  m.requireFinitePositions(sources);
  // Potentials are asked for alike on every rank that has bodies (a rank without has nowhere to write them): the
  // potential's transform and exchange run when any rank wants them.
  const int mine = out.pot != nullptr ? 1 : 0;
  int any = 0;
  check(MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, m.comm), "MPI_Allreduce");
  MATCHA_ASSERT(sources.count == 0 || any == mine, "SlabMesh::addLongRange: potentials asked for on some ranks only");
  m.potentials = any != 0;
  if (m.params.assignment == MassAssignment::cic) {
    m.run<MassAssignment::cic>(sources, gravity, out);
  } else {
    m.run<MassAssignment::tsc>(sources, gravity, out);
  }
  m.stats.heldBytes = m.heldBytes();
  m.stats.deviceBytes = m.gpu ? m.gpu->deviceBytes() : 0;
  m.stats.totalSeconds = total.seconds();
}

}  // namespace matcha::mesh
