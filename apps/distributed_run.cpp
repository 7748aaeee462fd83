// SPDX-License-Identifier: MIT
#include "distributed_run.hpp"

#include <iostream>

#include "matcha/core/errors.hpp"

#if MATCHA_HAVE_MPI

#include <mpi.h>
#include <tbb/global_control.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <span>
#include <sstream>
#include <streambuf>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "comoving_setup.hpp"
#include "cosmological_ics.hpp"
#include "force_reference.hpp"
#include "matcha/core/stopwatch.hpp"
#include "matcha/core/version.hpp"
#include "matcha/cosmology/initial_conditions_on_ranks.hpp"
#include "matcha/gpu/engine_factory.hpp"
#include "matcha/ic/plummer.hpp"
#include "matcha/integrator/hermite.hpp"
#include "matcha/integrator/hermite_run.hpp"
#include "matcha/integrator/run_loop.hpp"
#include "matcha/io/run_folder.hpp"
#include "matcha/io/snapshot.hpp"
#include "matcha/mesh/slab_mesh.hpp"
#include "matcha/mesh/treepm_solver.hpp"
#include "matcha/parallel/collective.hpp"
#include "matcha/parallel/distributed_direct_solver.hpp"
#include "matcha/parallel/distributed_hermite_engine.hpp"
#include "matcha/parallel/distributed_tree_solver.hpp"
#include "memory_check.hpp"
#include "output_file.hpp"
#include "rank_bodies.hpp"
#include "restart_support.hpp"
#include "timings.hpp"

namespace matcha::app {

namespace {

/// How long a failing rank waits for the others to fail too (an error every rank meets, e.g. a bad option) before it
/// decides that it failed alone and aborts the job.
constexpr double kFailureAgreementSeconds = 5.0;

/// The checkpoint's per-body solver array of the split's weights (DistributedTreeSolver::nextWorkWeights).
constexpr const char* kWorkWeightsName = "distributed_work";

/// A stream buffer that drops what it is given: std::cout on the ranks other than 0.
class DiscardBuffer : public std::streambuf {
 protected:
  int overflow(int c) override { return traits_type::not_eof(c); }
  std::streamsize xsputn(const char*, std::streamsize count) override { return count; }
};

}  // namespace

struct MpiSession::State {
  int rank = 0;
  int size = 1;
  MPI_Comm failures = MPI_COMM_NULL;  ///< a copy of the world for failureAgreement alone
  /// Rank 0: the other ranks wait in endRankZeroWork's broadcast for the outcome of rank 0's work.
  bool othersWaiting = false;
  DiscardBuffer discard;
  std::streambuf* coutBuffer = nullptr;
  std::optional<tbb::global_control> threads;
};

namespace {

MpiSession::State* session = nullptr;

/// Collective: TreePM over the ranks with every rank's mesh the whole box, solved from the deposits of all ranks
/// summed over them (the CUDA engine's: cuFFT on each rank's GPU).
std::unique_ptr<ForceSolver> replicatedTreePm(std::unique_ptr<ForceSolver> shortRange, const mesh::MeshParams& params,
                                              const GravityParams& gravity, MPI_Comm comm) {
  auto treePm = std::make_unique<mesh::TreePmSolver>(std::move(shortRange), params, gravity);
  treePm->setDensityReduction([comm](std::span<double> grid) { parallel::sumOverRanks(grid, comm); });
  return treePm;
}

/// Collective: TreePM over the ranks with the mesh in slabs (mesh::SlabMesh: FFTW's MPI interface on the hosts' cores,
/// or cuFFT on each rank's GPU, as params.backend says): each rank holds 1/K of the grid and the bodies that reach it.
std::unique_ptr<ForceSolver> slabTreePm(std::unique_ptr<ForceSolver> shortRange, const mesh::MeshParams& params,
                                        const GravityParams& gravity, MPI_Comm comm) {
  auto slabs = std::make_shared<mesh::SlabMesh>(params, comm);
  const std::string where = std::string(params.backend == mesh::MeshBackend::cufft ? "cuFFT" : "FFTW") +
                            " slabs over " + std::to_string(slabs->numRanks()) + " ranks";
  return std::make_unique<mesh::TreePmSolver>(
      std::move(shortRange), params, gravity,
      [slabs](const SourceView& sources, const GravityParams& g, const ForceView& out) {
        slabs->addLongRange(sources, g, out);
      },
      where);
}

/// Whether the ranks' particle mesh is the whole grid on every rank (else in slabs), as --pm-ranks says: only when
/// asked for (auto takes slabs: options.hpp, MeshOnRanks).
bool replicatesMesh(MeshOnRanks choice) { return choice == MeshOnRanks::replicated; }

/// Collective: TreePM over the ranks, the distributed short range and the mesh as --pm-ranks says, on each rank's
/// engine's side (cuFFT beside the CUDA engine, FFTW beside the CPU's): replicated, or in slabs.
std::unique_ptr<ForceSolver> treePmOnRanks(std::unique_ptr<ForceSolver> shortRange, const Options& options, bool onGpu,
                                           int device, MPI_Comm comm) {
  mesh::MeshParams meshParams = options.mesh;
  meshParams.device = device;
  if (replicatesMesh(options.meshOnRanks)) {
    meshParams.backend = onGpu ? mesh::MeshBackend::cufft : mesh::MeshBackend::fftw;
    return replicatedTreePm(std::move(shortRange), meshParams, options.gravity, comm);
  }
  meshParams.backend = onGpu ? mesh::MeshBackend::cufft : mesh::MeshBackend::fftw;
  return slabTreePm(std::move(shortRange), meshParams, options.gravity, comm);
}

/// Rank 0's outcome, broadcast to the ranks waiting for it: 0 done, else the exit code of its failure.
void broadcastRankZeroOutcome(int& exitCode) { MPI_Bcast(&exitCode, 1, MPI_INT, 0, MPI_COMM_WORLD); }

/// Rank 0 alone does what follows (reads, checks, writes) while the others wait: they return when it calls
/// endRankZeroWork, and throw RankZeroFailed when it fails first (reportFailure tells them). Every rank calls it at the
/// same point.
void beginRankZeroWork() {
  if (session->rank == 0) {
    session->othersWaiting = true;
    return;
  }
  int exitCode = 0;
  broadcastRankZeroOutcome(exitCode);
  if (exitCode != 0) throw RankZeroFailed(exitCode);
}

/// Rank 0: its work went well; the others go on.
void endRankZeroWork() {
  MATCHA_ASSERT(session->rank == 0 && session->othersWaiting, "endRankZeroWork without beginRankZeroWork");
  session->othersWaiting = false;
  int exitCode = 0;
  broadcastRankZeroOutcome(exitCode);
}

/// Whether every rank reached here within kFailureAgreementSeconds (all of them failed).
bool everyRankFailed() {
  MPI_Request request;
  MPI_Ibarrier(session->failures, &request);
  const auto start = std::chrono::steady_clock::now();
  int done = 0;
  while (true) {
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done != 0) return true;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > kFailureAgreementSeconds) {
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

/// Collective: the whole system's diagnostics from this rank's: sums of the sums, and the ratios of the totals.
integrator::Diagnostics sumDiagnostics(const integrator::Diagnostics& local, MPI_Comm comm) {
  double sums[12] = {local.mass, local.kinetic, local.potential};
  for (int k = 0; k < 3; ++k) {
    sums[3 + k] = local.momentum[k];
    sums[6 + k] = local.angularMomentum[k];
    sums[9 + k] = local.centreOfMass[k] * local.mass;
  }
  MPI_Allreduce(MPI_IN_PLACE, sums, 12, MPI_DOUBLE, MPI_SUM, comm);
  integrator::Diagnostics d;
  d.time = local.time;
  d.mass = sums[0];
  d.kinetic = sums[1];
  d.potential = sums[2];
  d.total = d.kinetic + d.potential;
  d.virialRatio =
      d.potential != 0.0 ? 2.0 * d.kinetic / std::abs(d.potential) : std::numeric_limits<double>::quiet_NaN();
  for (int k = 0; k < 3; ++k) {
    d.momentum[k] = sums[3 + k];
    d.angularMomentum[k] = sums[6 + k];
    d.centreOfMass[k] = d.mass > 0.0 ? sums[9 + k] / d.mass : 0.0;
  }
  return d;
}

/// Collective: --diagnostic-potential direct over the ranks: every rank's bodies gathered to rank 0, their potentials
/// summed there directly on its engine over all of them, and sent back in each rank's order (only pot changes, as
/// RunCallbacks::outputPotentials requires). O(N^2) on rank 0: what `auto` picks for small runs only.
class DirectPotentialsOnRanks {
 public:
  DirectPotentialsOnRanks(NearFieldEngine& engine, const GravityParams& gravity, MPI_Comm comm)
      : engine_(engine), gravity_(gravity), comm_(comm) {}

  void operator()(Particles& p) {
    const Stopwatch clock;
    const bool root = parallel::rankOf(comm_) == 0;
    const int count = static_cast<int>(p.size());
    const Shares shares = sharesOnRanks(p.size(), comm_);
    const std::vector<int>& counts = shares.counts;
    const std::vector<int>& offsets = shares.offsets;
    Particles all;
    if (root) all.resize(shares.total());
    const std::vector<double>* mine[4] = {&p.x, &p.y, &p.z, &p.mass};
    std::vector<double>* whole[4] = {&all.x, &all.y, &all.z, &all.mass};
    for (int k = 0; k < 4; ++k) {
      MPI_Gatherv(mine[k]->data(), count, MPI_DOUBLE, root ? whole[k]->data() : nullptr, counts.data(), offsets.data(),
                  MPI_DOUBLE, 0, comm_);
    }
    if (root) {
      engine_.evaluateDirect(all.sources(), gravity_,
                             {all.ax.data(), all.ay.data(), all.az.data(), all.pot.data(), all.size()});
    }
    MPI_Scatterv(root ? all.pot.data() : nullptr, counts.data(), offsets.data(), MPI_DOUBLE, p.pot.data(), count,
                 MPI_DOUBLE, 0, comm_);
    seconds_ += clock.seconds();
  }
  double seconds() const { return seconds_; }

 private:
  NearFieldEngine& engine_;
  GravityParams gravity_;
  MPI_Comm comm_;
  double seconds_ = 0.0;
};

/// Collective: every rank's totals (parallel::DistributedTotals, plain numbers), on rank 0 (empty elsewhere), in rank
/// order.
std::vector<parallel::DistributedTotals> gatherRankTotals(const parallel::DistributedTotals& totals, MPI_Comm comm) {
  static_assert(std::is_trivially_copyable_v<parallel::DistributedTotals>);
  const int rank = parallel::rankOf(comm);
  std::vector<parallel::DistributedTotals> all(rank == 0 ? static_cast<std::size_t>(parallel::numRanksOf(comm)) : 0);
  MPI_Gather(&totals, sizeof totals, MPI_BYTE, all.data(), sizeof totals, MPI_BYTE, 0, comm);
  return all;
}

/// The steady calls' main-thread path (parallel::DistributedStats::MainThreadPath) with the phases it holds, in the
/// order they follow one another, and what lies between them: together the steady calls' seconds.
std::vector<std::pair<std::string, double>> steadyPath(const parallel::DistributedTotals& t) {
  const parallel::DistributedStats::MainThreadPath& p = t.steadyPath;
  // The local build's seconds hold its sort and permutation, spans of their own here.
  std::vector<std::pair<std::string, double>> path = {{"arrival_wait", t.steadyArrivalWaitSeconds},
                                                      {"body_checks", p.bodyChecks},
                                                      {"decomposition", t.steadyDecompositionSeconds},
                                                      {"sort", p.sort},
                                                      {"permute", p.permute},
                                                      {"local_build", t.steadyLocalBuildSeconds - p.sort - p.permute},
                                                      {"relative_test", p.relativeTest},
                                                      {"exchange", p.exchange},
                                                      {"local_walk_wait", p.localWalkWait},
                                                      {"lists_and_kernels", p.listsAndKernels},
                                                      {"outputs", p.outputs},
                                                      {"balance", p.balance}};
  double timed = 0.0;
  for (const auto& span : path) timed += span.second;
  path.emplace_back("other", t.steadyCallSeconds - timed);
  return path;
}

nlohmann::json steadyPathJson(const parallel::DistributedTotals& t) {
  nlohmann::json spans = nlohmann::json::object();
  for (const auto& [name, seconds] : steadyPath(t)) spans[name] = seconds;
  return spans;
}

nlohmann::json rankTotalsJson(const std::vector<parallel::DistributedTotals>& ranks) {
  nlohmann::json rows = nlohmann::json::array();
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const parallel::DistributedTotals& t = ranks[r];
    rows.push_back({{"rank", r},
                    {"bodies", t.lastBodies},
                    {"force_calls", t.calls},
                    {"arrival_wait_seconds", t.arrivalWaitSeconds},
                    {"decomposition_seconds", t.decompositionSeconds},
                    {"local_build_seconds", t.localBuildSeconds},
                    {"let_build_seconds", t.letBuildSeconds},
                    {"communication_seconds", t.communicationSeconds},
                    {"walk_seconds", t.walkSeconds},
                    {"kernel_seconds", t.kernelSeconds},
                    {"call_seconds", t.callSeconds},
                    {"steady_calls", t.steadyCalls},
                    {"steady_call_seconds", t.steadyCallSeconds},
                    {"steady_decomposition_seconds", t.steadyDecompositionSeconds},
                    {"steady_phase_seconds",
                     {{"arrival_wait", t.steadyArrivalWaitSeconds},
                      {"decomposition", t.steadyDecompositionSeconds},
                      {"local_build", t.steadyLocalBuildSeconds},
                      {"let_build", t.steadyLetBuildSeconds},
                      {"communication", t.steadyCommunicationSeconds},
                      {"let_assembly", t.steadyLetAssemblySeconds},
                      {"walk", t.steadyWalkSeconds},
                      {"kernels", t.steadyKernelSeconds}}},
                    {"steady_decomposition_stages_seconds",
                     {{"checks", t.steadyCheckSeconds},
                      {"keys", t.steadyKeySeconds},
                      {"splitters", t.steadySplitSeconds},
                      {"moves", t.steadyMoveSeconds}}},
                    {"steady_path_seconds", steadyPathJson(t)},
                    {"steady_moves_exchange_seconds", t.steadyMoveExchangeSeconds},
                    {"steady_bodies_sent", t.steadyBodiesSent},
                    {"kept_tree_calls", t.keptTrees},
                    {"kept_list_calls", t.keptLists},
                    {"kept_list_call_seconds", t.keptListSeconds},
                    {"interactions", t.work}});
  }
  return rows;
}

/// The per-rank table of `--timings`: each rank's phases in ms per force call, and its share of the interactions
/// against the mean (the imbalance the split by the last call's work leaves).
std::string formatRankTotals(const std::vector<parallel::DistributedTotals>& ranks) {
  double meanWork = 0.0;
  for (const parallel::DistributedTotals& t : ranks) meanWork += t.work / double(ranks.size());
  std::string text =
      "per rank, ms per force call (wait: for the other ranks at the call's start; work: interactions / the ranks' "
      "mean; steady: the calls after the first " +
      std::to_string(parallel::DistributedTotals::kWarmUpCalls) +
      ", which move the scattered bodies into their domains; the steady decomposition's checks, cube and keys, "
      "splitter search and moves, the moves' MPI exchanges, and the bodies sent to other ranks a call; kept: the calls "
      "that kept the last call's split and tree (block time steps, --reuse), lists: of those, the calls that kept the "
      "lists too (--reuse K > 1 with fixed steps), and ms per such call, against the others' ms per call)\n  rank     "
      "bodies     wait   decomp    build  LET build     comm     walk  kernels     call   work   steady: call   decomp "
      " "
      "checks    keys   split   moves     MPI     sent    kept   lists  kept ms  other ms\n";
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const parallel::DistributedTotals& t = ranks[r];
    const double perCall = t.calls > 0 ? 1e3 / double(t.calls) : 0.0;
    const double perSteadyCall = t.steadyCalls > 0 ? 1e3 / double(t.steadyCalls) : 0.0;
    char line[320];
    std::snprintf(
        line, sizeof line,
        "  %4zu %10.0f %8.2f %8.2f %8.2f %10.2f %8.2f %8.2f %8.2f %8.2f %6.3f %14.2f %8.2f %7.2f %7.2f %7.2f "
        "%7.2f %7.2f %8.0f %7llu %7llu %8.2f %9.2f\n",
        r, double(t.lastBodies), t.arrivalWaitSeconds * perCall, t.decompositionSeconds * perCall,
        t.localBuildSeconds * perCall, t.letBuildSeconds * perCall, t.communicationSeconds * perCall,
        t.walkSeconds * perCall, t.kernelSeconds * perCall, t.callSeconds * perCall,
        meanWork > 0.0 ? t.work / meanWork : 1.0, t.steadyCallSeconds * perSteadyCall,
        t.steadyDecompositionSeconds * perSteadyCall, t.steadyCheckSeconds * perSteadyCall,
        t.steadyKeySeconds * perSteadyCall, t.steadySplitSeconds * perSteadyCall, t.steadyMoveSeconds * perSteadyCall,
        t.steadyMoveExchangeSeconds * perSteadyCall,
        t.steadyCalls > 0 ? double(t.steadyBodiesSent) / double(t.steadyCalls) : 0.0,
        static_cast<unsigned long long>(t.keptTrees), static_cast<unsigned long long>(t.keptLists),
        t.keptLists > 0 ? 1e3 * t.keptListSeconds / double(t.keptLists) : 0.0,
        t.calls > t.keptLists ? 1e3 * (t.callSeconds - t.keptListSeconds) / double(t.calls - t.keptLists) : 0.0);
    text += line;
  }
  // The steady calls' phases, as the columns above: the call a long run repeats, without the first calls' moves of
  // every body and first-touch of every buffer (at 2^22 bodies a rank on an H100's host a 10-call mean was 1.7x the
  // steady call).
  text +=
      "per rank, the steady calls' phases (ms a call)\n  rank     wait   decomp    build  LET build     comm     walk  "
      "kernels     call\n";
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const parallel::DistributedTotals& t = ranks[r];
    const double perSteadyCall = t.steadyCalls > 0 ? 1e3 / double(t.steadyCalls) : 0.0;
    char line[160];
    std::snprintf(line, sizeof line, "  %4zu %8.2f %8.2f %8.2f %10.2f %8.2f %8.2f %8.2f %8.2f\n", r,
                  t.steadyArrivalWaitSeconds * perSteadyCall, t.steadyDecompositionSeconds * perSteadyCall,
                  t.steadyLocalBuildSeconds * perSteadyCall, t.steadyLetBuildSeconds * perSteadyCall,
                  t.steadyCommunicationSeconds * perSteadyCall, t.steadyWalkSeconds * perSteadyCall,
                  t.steadyKernelSeconds * perSteadyCall, t.steadyCallSeconds * perSteadyCall);
    text += line;
  }
  // Where the steady call's wall time goes: the spans of its main thread, which follow one another (the phases above
  // overlap: the local walk runs beside the exchange, the engine beside the merge of the lists).
  text +=
      "per rank, the steady call's main thread (ms a call, adding up to the call: the local walk runs beside the "
      "exchange "
      "and the engine beside the lists' merge; sort: the keys'; permute: the bodies' into the tree's order; rel test: "
      "the "
      "|a| summed over the ranks; outputs: the forces copied to the bodies; balance: the work's sums over the ranks, a "
      "wait for the slowest)\n  rank"
      "     wait   checks   decomp     sort  permute    build  rel test  exchange  walk wait  lists+kernels  outputs  "
      "balance    "
      "other     call\n";
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const parallel::DistributedTotals& t = ranks[r];
    const double perSteadyCall = t.steadyCalls > 0 ? 1e3 / double(t.steadyCalls) : 0.0;
    // Each span in its column's width (the header's), then the call.
    constexpr int kWidths[] = {8, 8, 8, 8, 8, 8, 9, 9, 10, 14, 8, 8, 8};
    const auto path = steadyPath(t);
    MATCHA_ASSERT(path.size() == std::size(kWidths), "one column a span of the path");
    char cell[32];
    std::snprintf(cell, sizeof cell, "  %4zu", r);
    text += cell;
    for (std::size_t k = 0; k < path.size(); ++k) {
      std::snprintf(cell, sizeof cell, " %*.2f", kWidths[k], path[k].second * perSteadyCall);
      text += cell;
    }
    std::snprintf(cell, sizeof cell, " %8.2f\n", t.steadyCallSeconds * perSteadyCall);
    text += cell;
  }
  return text;
}

/// What `run` and `compare` do on one rank only, refused on several (every rank the same, from the options alone):
/// compare on the GPU (whose references and sweeps are one rank's).
void requireSupportedOnRanks(const Options& options, const std::string& subcommand) {
  const std::string ranks = std::to_string(worldSize()) + " ranks";
  if (subcommand == "compare" && options.engine == EngineKind::cuda) {
    throw InputError("matcha compare --engine cuda on " + ranks +
                     " is not supported yet: use --engine cpu, or one rank (matcha run takes a GPU per rank)");
  }
}

/// This rank's engine: `--engine` as on one rank, the CUDA engine on one of its host's devices, the ranks of a host
/// taking them in turns (local rank modulo the devices: one rank per GPU, or several sharing one where there are more
/// ranks than GPUs), which `device` is set to (0 without a GPU). Every rank must end with the same kind: `auto`
/// finding a GPU on some hosts and not on others is refused on every rank, as is a rank whose engine fails to start.
gpu::EngineChoice makeRankEngine(const Options& options, MPI_Comm comm, int& device) {
  MPI_Comm host = MPI_COMM_NULL;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host);
  int hostRank = 0, hostRanks = 1;
  MPI_Comm_rank(host, &hostRank);
  MPI_Comm_size(host, &hostRanks);
  MPI_Comm_free(&host);
  gpu::EngineChoice engine;
  parallel::checkOnEveryRank(
      [&] {
        const int devices = options.engine == EngineKind::cpu ? 0 : gpu::queryCudaDevice().deviceCount;
        device = devices > 0 ? hostRank % devices : 0;
        engine = gpu::makeEngine(options.engine, device);
        if (engine.onGpu) {
          engine.reason += " (" + std::to_string(hostRanks) + (hostRanks == 1 ? " rank" : " ranks") +
                           " on this host, " + std::to_string(devices) + (devices == 1 ? " GPU" : " GPUs") + ")";
        }
      },
      comm);
  int onGpu[2] = {engine.onGpu ? 1 : 0, engine.onGpu ? 1 : 0};
  MPI_Allreduce(MPI_IN_PLACE, &onGpu[0], 1, MPI_INT, MPI_MIN, comm);
  MPI_Allreduce(MPI_IN_PLACE, &onGpu[1], 1, MPI_INT, MPI_MAX, comm);
  if (onGpu[0] != onGpu[1]) {
    throw InputError(
        "--engine auto chose the CUDA engine on some ranks and the CPU engine on others (hosts without a "
        "GPU): give --engine cpu or --engine cuda");
  }
  return engine;
}

/// Collective: every rank's value, in rank order, on every rank.
std::vector<double> gatherFromRanks(double local, MPI_Comm comm) {
  std::vector<double> values(static_cast<std::size_t>(parallel::numRanksOf(comm)));
  MPI_Allgather(&local, 1, MPI_DOUBLE, values.data(), 1, MPI_DOUBLE, comm);
  return values;
}

/// What a comoving schedule reads of the bodies, over the ranks (ComovingSchedule::setRankReductions): the ranks'
/// largest value, NaN where any rank's is (as integrator::maxAcceleration's NaN wins, which MPI_MAX does not promise),
/// and their sum added in rank order: the same bits on every rank and at every call (an MPI_Allreduce's order is the
/// library's), so that every rank plans the same step.
RankReductions comovingRankReductions(MPI_Comm comm) {
  RankReductions reductions;
  reductions.maximum = [comm](double local) {
    double largest = -std::numeric_limits<double>::infinity();
    for (const double value : gatherFromRanks(local, comm)) {
      if (std::isnan(value) || value > largest) largest = value;
      if (std::isnan(largest)) break;
    }
    return largest;
  };
  reductions.sum = [comm](double local) {
    double sum = 0.0;
    for (const double value : gatherFromRanks(local, comm)) sum += value;
    return sum;
  };
  return reductions;
}

/// Rank 0: what the other ranks need to set up the same comoving run (comovingOnRanks): where its time line starts
/// and where the run now stands (scale factors), the cosmology and the units of its file.
void describeComovingOnRanks(double aStart, double aNow, const io::CosmologyHeader& cosmology,
                             const std::optional<UnitSystem>& units, CheckpointState& state) {
  state.set("comoving", 1.0);
  state.set("a_start", aStart);
  state.set("a_now", aNow);
  state.set("redshift", cosmology.redshift);
  state.set("omega0", cosmology.omega0);
  state.set("omega_lambda", cosmology.omegaLambda);
  state.set("hubble_param", cosmology.hubbleParam);
  if (units) {
    state.set("unit_length_in_cm", units->lengthInCm);
    state.set("unit_mass_in_g", units->massInGram);
    state.set("unit_velocity_in_cm_per_s", units->velocityInCmPerS);
    state.set("gravitational_constant", units->gravitationalConstant);
  }
}

/// Every rank: the comoving run rank 0 described (describeComovingOnRanks), from the softening given; sets G and the
/// softening of its a in options.gravity as on one rank (prepareComovingRun).
ComovingRun comovingOnRanks(Options& options, const CheckpointState& state) {
  io::CosmologyHeader cosmology;
  cosmology.redshift = state.scalar("redshift");
  cosmology.omega0 = state.scalar("omega0");
  cosmology.omegaLambda = state.scalar("omega_lambda");
  cosmology.hubbleParam = state.scalar("hubble_param");
  std::optional<UnitSystem> units;
  if (state.scalars.count("gravitational_constant") != 0) {
    units.emplace();
    units->lengthInCm = state.scalar("unit_length_in_cm");
    units->massInGram = state.scalar("unit_mass_in_g");
    units->velocityInCmPerS = state.scalar("unit_velocity_in_cm_per_s");
    units->gravitationalConstant = state.scalar("gravitational_constant");
  }
  return prepareComovingRun(options, state.scalar("a_start"), state.scalar("a_now"), cosmology, units,
                            options.integrator.boxSize, "the run's cosmology");
}

/// The memory of a run over several ranks: this rank's own, and what the ranks that share its host (its memory) and
/// its GPU need together.
struct MemoryOnRanks {
  RunMemory mine;
  std::uint64_t hostBytes = 0;    ///< over the ranks of this rank's host
  std::uint64_t deviceBytes = 0;  ///< over the ranks on this rank's GPU (0 on the CPU engine)
  int hostRanks = 1;
  int deviceRanks = 1;
  int device = 0;  ///< this rank's GPU
  /// Of hostBytes, the whole system that rank 0 gathers for each snapshot alone (0 where it also needs it for
  /// something else, or gathers nothing): what --snapshot-files ranks would save.
  std::uint64_t gatheredSnapshotBytes = 0;
};

/// Collective: one rank's estimate of its own share (estimateRunMemory on `mine`, sized as the distributed solver
/// works: a tree a call, no reuse; outputs written in place), with what ranks add: the local essential tree's received
/// bodies (counted as many as the rank's own: a periodic test's domain of 2048 bodies receives ~1.5 times its own, a
/// large domain's shell within r_cut a few percent), the decomposition's exchange records, and on rank 0, when
/// `gathersSnapshots` or `wholeForOther` (direct potentials it sums, forces it checks), the whole system. Summed over
/// the ranks of each host and of each GPU.
MemoryOnRanks estimateMemoryOnRanks(const Options& options, const Particles& mine, std::uint64_t numBodies, bool onGpu,
                                    int device, bool directPotentials, bool gathersSnapshots, bool wholeForOther,
                                    std::uint64_t numSteps, MPI_Comm comm) {
  Options sized = options;
  sized.tree.reuse = 1;
  sized.backgroundOutput = false;
  MemoryOnRanks memory;
  memory.device = device;
  // The mesh lies in slabs over the ranks (slabTreePm) unless --pm-ranks replicated: a rank holds its share.
  int ranks = 1;
  MPI_Comm_size(comm, &ranks);
  const bool replicated = options.gravity.periodic.enabled() && replicatesMesh(options.meshOnRanks);
  memory.mine = estimateRunMemory(sized, mine, onGpu, directPotentials, numSteps, replicated ? 1 : ranks);
  if (replicated && ranks > 1) {
    // The whole grid's deposits in double on the host, summed over the ranks (replicatedTreePm).
    const auto grid = static_cast<std::uint64_t>(options.mesh.grid);
    memory.mine.estimate.add("mesh deposits summed over the ranks", grid * grid * grid * sizeof(double));
  }
  MemoryEstimate& estimate = memory.mine.estimate;
  const std::uint64_t n = mine.size();
  if (options.solver == SolverKind::direct) {
    // Every rank's bodies on every rank: the gathered records (x, y, z, G m, id) and the j-particles made of them, and
    // the engine's copy of those (on the GPU for the CUDA engine).
    const std::uint64_t sources = numBodies * sizeof(JParticle);
    estimate.add("every rank's bodies (direct sum's sources)", numBodies * 5 * sizeof(double) + sources);
    estimate.add("Hermite engine's j-particles", onGpu ? 0 : sources, onGpu ? sources : 0);
  } else {
    estimate.add("received bodies (LET)", n * kBytesPerBody);
    estimate.add("domain exchange", 2 * n * 14 * sizeof(double));
  }
  std::uint64_t gathered = 0;  // what only the gathered snapshots need
  if ((gathersSnapshots || wholeForOther) && parallel::rankOf(comm) == 0) {
    estimate.add("whole system (rank 0)", numBodies * kBytesPerBody);
    if (!wholeForOther) gathered = numBodies * kBytesPerBody;
  }
  MPI_Comm host = MPI_COMM_NULL, gpu = MPI_COMM_NULL;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host);
  MPI_Comm_split(host, onGpu ? device : 0, 0, &gpu);
  std::uint64_t hostSums[2] = {estimate.hostBytes, gathered};
  std::uint64_t deviceBytes = estimate.deviceBytes;
  MPI_Allreduce(MPI_IN_PLACE, hostSums, 2, MPI_UINT64_T, MPI_SUM, host);
  MPI_Allreduce(MPI_IN_PLACE, &deviceBytes, 1, MPI_UINT64_T, MPI_SUM, gpu);
  memory.hostBytes = hostSums[0];
  memory.gatheredSnapshotBytes = hostSums[1];
  memory.deviceBytes = onGpu ? deviceBytes : 0;
  MPI_Comm_size(host, &memory.hostRanks);
  MPI_Comm_size(gpu, &memory.deviceRanks);
  MPI_Comm_free(&gpu);
  MPI_Comm_free(&host);
  return memory;
}

/// Throws InputError (one line) when this rank's host or GPU cannot hold what its ranks need together.
void requireRunFitsOnRanks(const MemoryOnRanks& memory) {
  const std::uint64_t host = availableHostBytes();
  if (host != 0 && memory.hostBytes > host) {
    const std::string needs = "this run needs ~" + formatBytes(memory.hostBytes) + " of host memory on a host of " +
                              std::to_string(memory.hostRanks) + " ranks (" + formatBytes(host) + " available)";
    const std::uint64_t perRank = memory.hostBytes - memory.gatheredSnapshotBytes;
    if (perRank <= host) {
      // Only rank 0's copy of the whole system for each snapshot is too much: the way out is to gather nothing.
      throw InputError(needs + ", ~" + formatBytes(memory.gatheredSnapshotBytes) +
                       " of it for the whole system rank 0 gathers for each snapshot: with --snapshot-files ranks (a "
                       "file a rank, read as one set) it needs ~" +
                       formatBytes(perRank));
    }
    throw InputError(needs + "; use more hosts, fewer ranks a host or fewer bodies (--dry-run shows where it goes)");
  }
  if (memory.mine.onGpu) {
    const std::uint64_t device = deviceFreeBytes(memory.device);
    if (device != 0 && memory.deviceBytes > device) {
      throw InputError("this run needs ~" + formatBytes(memory.deviceBytes) + " of GPU memory on GPU " +
                       std::to_string(memory.device) + " for its " + std::to_string(memory.deviceRanks) + " ranks (" +
                       formatBytes(device) + " free); use more GPUs or fewer bodies (--dry-run shows where it goes)");
    }
  }
}

/// --dry-run's lines after rank 0's table: what this rank's host and GPU hold for all their ranks.
std::string formatMemoryOnRanks(const MemoryOnRanks& memory) {
  const std::uint64_t host = availableHostBytes();
  std::string text =
      "rank 0's host, its " + std::to_string(memory.hostRanks) + " ranks: needs ~" + formatBytes(memory.hostBytes) +
      ", " +
      (host != 0 ? formatBytes(host) + " available: " + (memory.hostBytes <= host ? "fits" : "does NOT fit")
                 : std::string("available memory unknown")) +
      "\n";
  if (memory.mine.onGpu) {
    const std::uint64_t device = deviceFreeBytes(memory.device);
    text += "rank 0's GPU " + std::to_string(memory.device) + ", its " + std::to_string(memory.deviceRanks) +
            " ranks: needs ~" + formatBytes(memory.deviceBytes) + ", " +
            (device != 0 ? formatBytes(device) + " free: " + (memory.deviceBytes <= device ? "fits" : "does NOT fit")
                         : std::string("free memory unknown")) +
            "\n";
  }
  return text;
}

/// --dry-run --json: rank 0's estimate (runMemoryJson) with the totals of its host and GPU.
std::string memoryOnRanksJson(const MemoryOnRanks& memory) {
  nlohmann::json json = nlohmann::json::parse(runMemoryJson(memory.mine));
  const std::uint64_t host = availableHostBytes();
  json["ranks"] = worldSize();
  json["host_ranks"] = memory.hostRanks;
  json["host_total_bytes"] = memory.hostBytes;
  json["fits"] = host == 0 || memory.hostBytes <= host;
  if (memory.mine.onGpu) {
    const std::uint64_t device = deviceFreeBytes(memory.device);
    json["device_ranks"] = memory.deviceRanks;
    json["device_total_bytes"] = memory.deviceBytes;
    json["fits"] = json["fits"].get<bool>() && (device == 0 || memory.deviceBytes <= device);
  }
  return json.dump(2);
}

void requireBodiesPerRank(std::uint64_t numBodies) {
  const int numRanks = worldSize();
  if (numBodies < std::uint64_t(numRanks)) {
    throw InputError(std::to_string(numBodies) + " bodies on " + std::to_string(numRanks) +
                     " ranks: every rank needs at least one body (mpirun -np " + std::to_string(numBodies) +
                     " or fewer)");
  }
}

/// `matcha run --restart DIR` on several ranks, as rank 0 finds it without reading the bodies (every rank reads its
/// share after): where the run stands, and, when it was written on as many ranks as now, each rank's share (so that
/// the restarted run splits, and computes, as the stopped one would have).
struct RestartOnRanks {
  std::uint64_t numBodies = 0;
  integrator::RunPosition position;
  std::vector<int> rankBodies;  ///< each rank's bodies at the checkpoint, in rank order; empty: another K
  double boxSize = 0.0;         ///< the checkpoint's periodic box (0: open boundaries)
  /// "comoving" 0, or 1 and what the other ranks need of the comoving run (describeComovingOnRanks) with its
  /// Layzer-Irvine check as it stood.
  CheckpointState comoving;
};

/// Rank 0: checks the checkpoint of options.restartDir as one rank's restart does (a leapfrog run, its dt or its
/// cosmology, a later end, its box; a Hermite run's checkpoint continues in runHermiteOnRanks) from its header and
/// states, and sets options.integrator.tStart and the box (resolvePeriodicBox). Reads no body; writes nothing.
RestartOnRanks inspectRestartOnRankZero(Options& options, int numRanks) {
  const std::filesystem::path dir = options.restartDir;
  io::CheckpointInfo checkpoint = asBadInput([&] { return io::inspectCheckpoint(dir / io::kCheckpointName); });
  const CheckpointState& run = checkpoint.run;
  // A Hermite run's options (from its used_parameters.toml) take runHermiteOnRanks; here --integrator said otherwise.
  if (run.scalars.count("hermite") != 0) {
    throw InputError("--restart " + dir.string() +
                     ": the checkpoint is a hermite run's; --integrator leapfrog cannot continue it");
  }
  const bool comovingCheckpoint = run.scalars.count("comoving") != 0;
  if (!comovingCheckpoint) refuseComovingOptions(options);
  prepareLeapfrogRun(options, comovingCheckpoint);
  RestartOnRanks restart;
  restart.numBodies = checkpoint.snapshot.numBodies;
  restart.boxSize = checkpoint.snapshot.boxSize;
  resolvePeriodicBox(options, restart.boxSize, restart.numBodies);
  restart.position.step = run.count("step");
  restart.position.nextOutputIndex = run.count("next_output_index");
  restart.position.initial = loadDiagnostics(run);
  restart.position.time = run.scalar("time");
  if (run.count("bodies") != restart.numBodies) throw InputError("--restart: the checkpoint's body count is corrupt");
  requireBodiesPerRank(restart.numBodies);
  options.integrator.tStart = run.scalar("t_start");
  if (comovingCheckpoint) {
    io::Checkpoint header;  // what resuming a comoving run reads of a checkpoint: its states and header, no body
    header.run = checkpoint.run;
    header.solver = checkpoint.solver;
    header.snapshot.time = checkpoint.snapshot.time;
    header.snapshot.boxSize = checkpoint.snapshot.boxSize;
    header.snapshot.cosmology = checkpoint.snapshot.cosmology;
    header.snapshot.units = checkpoint.snapshot.units;
    const ComovingResume resumed = resumeComovingRun(options, header, restart.position, runIsComplete(dir), dir);
    describeComovingOnRanks(options.integrator.tStart, restart.position.time, *checkpoint.snapshot.cosmology,
                            checkpoint.snapshot.units, restart.comoving);
    resumed.layzerIrvine.save(restart.comoving);
  } else {
    restart.comoving.set("comoving", 0.0);
    requireLeapfrogContinues(dir, options, run, restart.position.step, runIsComplete(dir));
  }
  // The shares of a checkpoint written on as many ranks, with the split's weights; another K starts from even shares.
  const auto shares = run.doubles.find("rank_bodies");
  const std::vector<std::string>& perBody = checkpoint.perBodyArrays;
  if (shares != run.doubles.end() && std::find(perBody.begin(), perBody.end(), kWorkWeightsName) != perBody.end() &&
      shares->second.size() == std::size_t(numRanks)) {
    const std::string sharesMeaning =
        "each rank's bodies, whole numbers adding up to the checkpoint's " + std::to_string(restart.numBodies);
    double total = 0.0;
    for (const double count : shares->second) {
      if (!(count >= 0.0 && count == std::floor(count))) {  // a rank may hold no bodies
        throw InputError("--restart " + dir.string() + ": the checkpoint's rank_bodies are corrupt (" + sharesMeaning +
                         ")");
      }
      total += count;
      restart.rankBodies.push_back(static_cast<int>(count));
    }
    if (total != double(restart.numBodies))
      throw InputError("--restart " + dir.string() + ": the checkpoint's rank_bodies are corrupt (" + sharesMeaning +
                       ")");
  }
  return restart;
}

/// Collective: the ranks' interaction counts summed.
InteractionCounts sumCounts(InteractionCounts counts, MPI_Comm comm) {
  std::uint64_t values[2] = {counts.bodyBody, counts.bodyCell};
  MPI_Allreduce(MPI_IN_PLACE, values, 2, MPI_UINT64_T, MPI_SUM, comm);
  counts.bodyBody = values[0];
  counts.bodyCell = values[1];
  return counts;
}

/// One line on stderr in one write: under mpirun, the pieces of a line written in several would interleave with
/// other ranks' output and mpirun's own.
void printErrorLine(const std::string& message) {
  const std::string line = "matcha: error: " + message + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace

MpiSession::MpiSession(int& argc, char**& argv) {
  // Without a launcher, a world of one rank without MPI at all: MPI_Init as a singleton costs ~0.5 s a process
  // (Open MPI 4 here), which every plain `matcha` would pay. Open MPI's mpirun sets OMPI_COMM_WORLD_SIZE; MPICH's
  // Hydra and Slurm's srun set PMI_SIZE or PMIX_RANK.
  if (std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr && std::getenv("PMI_SIZE") == nullptr &&
      std::getenv("PMIX_RANK") == nullptr) {
    return;
  }
  state_ = std::make_unique<State>();
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &state_->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &state_->size);
  MPI_Comm_dup(MPI_COMM_WORLD, &state_->failures);
  session = state_.get();
  if (state_->size > 1) {
    // The ranks of a host share its cores: each its share for TBB, as tests/parallel does. The ranks of this host, not
    // of the run: on several hosts a rank would otherwise get its host's cores over all the ranks.
    MPI_Comm host = MPI_COMM_NULL;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, state_->rank, MPI_INFO_NULL, &host);
    int hostRanks = 1;
    MPI_Comm_size(host, &hostRanks);
    MPI_Comm_free(&host);
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    state_->threads.emplace(tbb::global_control::max_allowed_parallelism,
                            static_cast<std::size_t>(std::max(1, cores / hostRanks)));
    if (state_->rank != 0) state_->coutBuffer = std::cout.rdbuf(&state_->discard);
  }
}

MpiSession::~MpiSession() {
  if (state_ == nullptr) return;
  std::cout.flush();
  if (state_->coutBuffer != nullptr) std::cout.rdbuf(state_->coutBuffer);
  state_->threads.reset();
  MPI_Comm_free(&state_->failures);
  session = nullptr;
  MPI_Finalize();
}

int worldRank() { return session != nullptr ? session->rank : 0; }
int worldSize() { return session != nullptr ? session->size : 1; }

int reportFailure(int exitCode, const std::string& message) {
  if (session == nullptr || session->size == 1) {
    std::cerr << "matcha: error: " << message << "\n";
    return exitCode;
  }
  // The line is out before the other ranks may end: mpirun ends the job once a rank exits with a non-zero status.
  if (session->rank == 0 && session->othersWaiting) {
    session->othersWaiting = false;
    printErrorLine(message);
    broadcastRankZeroOutcome(exitCode);
    return exitCode;
  }
  if (everyRankFailed()) {
    if (session->rank == 0) printErrorLine(message);
    MPI_Barrier(session->failures);
    return exitCode;
  }
  // This rank failed alone (or with some): the others may wait for it in a collective call forever.
  const std::string prefix = "rank " + std::to_string(session->rank) + ": ";
  printErrorLine((message.rfind(prefix, 0) == 0 ? "" : prefix) + message);
  MPI_Abort(MPI_COMM_WORLD, exitCode);
  return exitCode;
}

void requireRunsOnRanks(const CLI::App& command) {
  std::string name = command.get_name();
  if (worldSize() == 1 || name == "run" || name == "compare") return;
  const std::vector<CLI::App*> chosen = command.get_subcommands();
  if (!chosen.empty()) name += " " + chosen.front()->get_name();
  if (name == "ic cosmo") return;
  throw InputError("matcha " + name + " runs on one rank (only run, compare and ic cosmo run on several); got " +
                   std::to_string(worldSize()) + " ranks");
}

namespace {

/// This rank's GPU for `options.engine`: its host's ranks take the host's devices in turns (local rank modulo the
/// devices; 0 without one), as makeRankEngine's.
int rankDevice(const Options& options, MPI_Comm comm) {
  MPI_Comm host = MPI_COMM_NULL;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host);
  const int hostRank = parallel::rankOf(host);
  MPI_Comm_free(&host);
  const int devices = options.engine == EngineKind::cpu ? 0 : gpu::queryCudaDevice().deviceCount;
  return devices > 0 ? hostRank % devices : 0;
}

/// The Hermite engine that spans the ranks, owning this rank's own (the j-particles its share).
class RankHermiteEngine final : public HermiteEngine {
 public:
  RankHermiteEngine(std::unique_ptr<HermiteEngine> local, MPI_Comm comm)
      : local_(std::move(local)), spanning_(*local_, comm) {}
  std::string name() const override { return spanning_.name(); }
  void reserve(std::size_t capacity) override { spanning_.reserve(capacity); }
  std::size_t capacity() const override { return spanning_.capacity(); }
  void setJParticles(std::span<const std::uint32_t> addresses, std::span<const JParticle> particles) override {
    spanning_.setJParticles(addresses, particles);
  }
  void predict(double time, std::size_t numJ) override { spanning_.predict(time, numJ); }
  void launchForces(const IBlockView& block, double eps2, const HermiteForceView& out) override {
    spanning_.launchForces(block, eps2, out);
  }
  void finishForces() override { spanning_.finishForces(); }

 private:
  std::unique_ptr<HermiteEngine> local_;
  parallel::DistributedHermiteEngine spanning_;
};

/// What the ranks other than 0 need to integrate a Hermite run alike: rank 0's parameters once it has checked them
/// (its start, end and output times, G, the softening and the block steps' parameters).
struct HermiteRunOnRanks {
  IntegratorParams integrator;
  integrator::HermiteParams hermite;
  double G = 1.0;
  double eps = 0.0;
  int dryRun = 0;
  int restart = 0;
};
static_assert(std::is_trivially_copyable_v<HermiteRunOnRanks>, "broadcast as bytes");

/// `matcha run --integrator hermite` on several ranks (HermiteSharing): rank 0 runs the one-rank command with its
/// checks, its folder and outputs; every rank integrates all the bodies alike, from rank 0's, and the force sums are
/// split over the ranks' engines by j-particle (parallel::DistributedHermiteEngine, whose sums every rank gets
/// bit for bit, so that the ranks' integrations never part). The ranks other than 0 write nothing.
int runHermiteOnRanks(CLI::App& command, const Options& given) {
  const MPI_Comm comm = MPI_COMM_WORLD;
  const int device = rankDevice(given, comm);
  // Every rank but 0 makes its engine once rank 0's checks passed; a failure on any stops all.
  const auto spanRanks = [&](std::unique_ptr<HermiteEngine> engine) -> std::unique_ptr<HermiteEngine> {
    parallel::checkOnEveryRank(
        [&] {
          if (!engine) engine = gpu::makeHermiteEngine(given.engine, nullptr, device);
        },
        comm);
    return std::make_unique<RankHermiteEngine>(std::move(engine), comm);
  };
  HermiteRunOnRanks run;
  Particles bodies;
  CheckpointState integratorState;
  if (worldRank() == 0) {
    HermiteSharing sharing;
    sharing.share = [&](const Options& options, const Particles& checked, const CheckpointState* state,
                        std::unique_ptr<HermiteEngine> engine) {
      endRankZeroWork();
      run.integrator = options.integrator;
      run.hermite = options.hermite;
      run.G = options.gravity.G;
      run.eps = options.gravity.eps;
      run.dryRun = options.dryRun ? 1 : 0;
      run.restart = state != nullptr ? 1 : 0;
      MPI_Bcast(&run, sizeof run, MPI_BYTE, 0, comm);
      if (options.dryRun) return engine;
      bodies = checked;
      broadcastBodies(bodies, comm);
      if (state != nullptr) integratorState = *state;
      broadcastState(integratorState, comm);
      return spanRanks(std::move(engine));
    };
    beginRankZeroWork();
    return runHermiteOnRankZero(command, given, sharing);
  }
  beginRankZeroWork();  // throws RankZeroFailed when rank 0's checks fail (it says why)
  MPI_Bcast(&run, sizeof run, MPI_BYTE, 0, comm);
  if (run.dryRun != 0) return 0;
  broadcastBodies(bodies, comm);
  broadcastState(integratorState, comm);
  const std::unique_ptr<HermiteEngine> engine = spanRanks(nullptr);
  integrator::HermiteIntegrator hermite(*engine, run.hermite, run.G, run.eps, run.integrator.tStart);
  integrator::RunPosition position;  // where a restart resumes: only rank 0's outputs need more of it
  if (run.restart != 0) hermite.restore(bodies, integratorState);
  integrator::runHermite(bodies, hermite, run.integrator, integrator::RunCallbacks{},
                         run.restart != 0 ? &position : nullptr);
  return 0;
}

/// Collective: cosmological initial conditions on several ranks (`run --cosmology`, `ic cosmo`). Every rank makes the
/// bodies of its own x planes of the grid (cosmology::makeCosmologicalIcShare, on FFTW-MPI's slabs), so that no process
/// holds the whole start. Rank 0 brings the spectrum it made while checking the options; the others make theirs from
/// the same options (a table is read by each). The memory each host needs for its ranks' shares is checked first, on
/// every rank alike. Velocities are GADGET's stored u, as the one-process start's.
cosmology::CosmologicalIcs makeCosmologicalIcsOnRanks(const CLI::App& command, const CosmologicalIcOptions& options,
                                                      std::optional<cosmology::LinearPowerSpectrum>& spectrum,
                                                      std::ostream& info, MPI_Comm comm) {
  const cosmology::CosmologicalIcParams& params = options.ic;
  int numRanks = 1;
  MPI_Comm_size(comm, &numRanks);
  std::uint64_t hostBytes = cosmology::cosmologicalIcShareBytes(params, numRanks);
  int hostRanks = 1;
  MPI_Comm host = MPI_COMM_NULL;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host);
  MPI_Comm_size(host, &hostRanks);
  MPI_Allreduce(MPI_IN_PLACE, &hostBytes, 1, MPI_UINT64_T, MPI_SUM, host);
  MPI_Comm_free(&host);
  parallel::checkOnEveryRank(
      [&] {
        const std::uint64_t available = availableHostBytes();
        if (available != 0 && hostBytes > available) {
          throw InputError("initial conditions on a " + std::to_string(params.grid) + "^3 grid need ~" +
                           formatBytes(hostBytes) + " of host memory on a host of " + std::to_string(hostRanks) +
                           " ranks (" + formatBytes(available) +
                           " available); use more hosts, fewer ranks a host or a smaller --grid");
        }
        std::ostream quiet(nullptr);  // rank 0 warned of the table's range already
        if (!spectrum) spectrum = cosmologicalIcSpectrum(command, options, quiet);
      },
      comm);
  info << describeCosmologicalIcs(options, *spectrum) << " on " << numRanks
       << " ranks, each the bodies of its planes of the grid..." << std::endl;
  const cosmology::LinearPowerSpectrum& power = *spectrum;
  const Stopwatch making;
  cosmology::CosmologicalIcs mine = cosmology::makeCosmologicalIcShare(
      params, [&power](double k) { return power.power(k); }, comm);
  // The slowest rank's time: the start is made when every share is.
  double seconds = making.seconds();
  MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, comm);
  char took[32];
  std::snprintf(took, sizeof took, "%.2f", seconds);
  info << "  made in " << took << " s (~" << formatBytes(hostBytes) << " of memory at the peak on rank 0's host, its "
       << hostRanks << (hostRanks == 1 ? " rank)" : " ranks)") << std::endl;
  return mine;
}

/// Collective: a generated Plummer sphere (-n, --seed; centred in --box's box where given) made in `shares`: each rank
/// samples its own bodies (ic::makePlummerRange, drawing and dropping the deviates of the bodies before its share), and
/// the centring's sums run through the ranks in body order (parallel::sumInRankOrder), so that every rank holds its
/// share of the one-process sphere bit for bit and none holds the whole.
Particles makePlummerStartOnRanks(const Options& options, const Shares& shares, std::ostream& info, MPI_Comm comm) {
  const int rank = parallel::rankOf(comm);
  ic::PlummerParams plummer;
  plummer.numBodies = static_cast<std::size_t>(options.numBodies);
  plummer.seed = options.seed;
  const double box = options.integrator.boxSize;
  info << "generating a " << options.numBodies << "-body Plummer sphere (seed " << options.seed << ")"
       << (box > 0.0 ? ", centred in the periodic box" : "") << " on " << shares.counts.size()
       << " ranks, each its share..." << std::endl;
  Particles mine = ic::makePlummerRange(plummer, static_cast<std::size_t>(shares.offsets[rank]),
                                        static_cast<std::size_t>(shares.counts[rank]));
  for (int pass = 0; pass < 2; ++pass) {  // makePlummer's two passes
    ic::PlummerCentring::Sums sums{};
    parallel::sumInRankOrder(
        sums, [&mine](std::span<double> running) { ic::PlummerCentring::add(mine, running.data()); }, comm);
    ic::PlummerCentring::subtract(sums, mine);
  }
  if (box > 0.0) centrePlummerInBox(mine, box);
  return mine;
}

/// `run --cosmology` on several ranks: its options taken into the initial conditions', then made in shares.
Particles makeCosmologicalStartOnRanks(const CLI::App& command, Options& options,
                                       std::optional<cosmology::LinearPowerSpectrum>& spectrum, std::ostream& info,
                                       MPI_Comm comm) {
  takeRunOptionsIntoCosmologicalIcs(options);
  return makeCosmologicalIcsOnRanks(command, options.cosmologicalIcs, spectrum, info, comm).particles;
}

}  // namespace

int runDistributed(CLI::App& command, const Options& given) {
  if (given.integratorKind == IntegratorKind::hermite) return runHermiteOnRanks(command, given);
  const MPI_Comm comm = MPI_COMM_WORLD;
  const int rank = worldRank();
  const int numRanks = worldSize();
  Options options = given;
  const bool perRankSnapshots = options.snapshotPerRank && numRanks > 1;  // --snapshot-files ranks
  const bool restart = !options.restartDir.empty();
  if (restart) {
    options.outPath = options.restartDir;
    options.icFile.clear();  // the bodies come from the checkpoint
  }
  validateOptions(options, kRunOptions);
  // The softening given: every rank sets up the run from it (resolvePeriodicBox, then prepareComovingRun, which
  // replaces it with the softening of the run's a), rank 0 first while it checks.
  const double givenSoftening = options.gravity.eps;
  std::ostream quiet(nullptr);  // the other ranks' lines: rank 0 speaks for the run
  std::ostream& info = rank != 0 ? quiet : (options.json ? std::cerr : std::cout);
  const std::filesystem::path outDir = options.outPath;
  // Before anything is written: an engine that cannot be is refused by every rank alike.
  int device = 0;
  gpu::EngineChoice engine = makeRankEngine(options, comm, device);

  // Rank 0 checks everything before anything is written: the checkpoint's header and states, the IC file's header, or
  // --cosmology's options and spectrum. A checkpoint and an IC file are read by every rank at once, each its share
  // (readShareOfCheckpoint, readShareOfSnapshot), and a generated start, --cosmology's or a Plummer sphere, is made by
  // every rank, each its share (makeCosmologicalStartOnRanks, makePlummerStartOnRanks): no process holds the whole
  // system.
  const bool startFromFile = !restart && !options.cosmology && !options.icFile.empty();
  const bool cosmologicalStart = !restart && options.cosmology;
  std::optional<cosmology::LinearPowerSpectrum> spectrum;  // --cosmology's: rank 0's from its checks
  RestartOnRanks resumed;
  // bodies, start time, a restart's step, next output, time and the shares' count (0: even shares)
  // and the box of the IC file or the checkpoint (0: none)
  double header[7] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
  CheckpointState comovingState;  ///< what every rank needs of a comoving run (comovingOnRanks), from rank 0
  std::string source;             ///< where the bodies come from, for the start line (rank 0)
  std::optional<io::RunFolderRequest> folderRequest;  ///< rank 0: the folder, taken over once the run is known to fit
  beginRankZeroWork();
  if (rank == 0) {
    if (restart) {
      const io::RunFolderRequest folder{outDir, io::RunFolderMode::resume, {}};
      io::checkRunFolder(folder);
      resumed = inspectRestartOnRankZero(options, numRanks);
      comovingState = std::move(resumed.comoving);
      requireBodiesFit(resumed.numBodies);
      header[0] = double(resumed.numBodies);
      info << "reading the checkpoint " << (outDir / io::kCheckpointName).string() << " on " << numRanks
           << " ranks, each its share..." << std::endl;
      folderRequest = folder;
      header[2] = double(resumed.position.step);
      header[3] = double(resumed.position.nextOutputIndex);
      header[4] = resumed.position.time;
      header[5] = double(resumed.rankBodies.size());
      header[6] = resumed.boxSize;
      source = "the checkpoint of " + outDir.string();
    } else {
      const io::RunFolderRequest folder{
          outDir, options.overwrite ? io::RunFolderMode::overwrite : io::RunFolderMode::fresh, options.icFile};
      io::checkRunFolder(folder);
      // As on one rank: the bodies' count and start from the IC file's header, or with --cosmology from the options
      // (the linear spectrum made, a table read, before any body is).
      const InitialConditionsInfo ic =
          options.cosmology ? planCosmologicalIcs(command, options, true) : inspectInitialConditions(options);
      if (options.cosmology) spectrum = cosmologicalIcSpectrum(command, options.cosmologicalIcs, std::cerr);
      if (!ic.cosmology) refuseComovingOptions(options);
      prepareLeapfrogRun(options, ic.cosmology.has_value());
      requireBodiesPerRank(ic.numBodies);
      header[6] = ic.boxSize;
      resolvePeriodicBox(options, ic.boxSize, ic.numBodies);  // every rank again below, from the broadcast
      if (const std::string warning = periodicSofteningWarning(options, ic.numBodies); !warning.empty()) {
        std::cerr << warning << '\n';
      }
      const std::optional<ComovingRun> comoving = comovingRunOfInitialConditions(options, ic);
      if (comoving) {
        describeComovingOnRanks(comoving->timeline.startScaleFactor(), comoving->timeline.startScaleFactor(),
                                *ic.cosmology, ic.units, comovingState);
      } else {
        comovingState.set("comoving", 0.0);
        options.integrator.tStart = ic.time;
        options.integrator.validate();
        integrator::checkedStepCount(options.integrator.tEnd - options.integrator.tStart, options.integrator.dt);
      }
      requireBodiesFit(ic.numBodies);
      header[0] = double(ic.numBodies);
      if (startFromFile) {
        info << "reading initial conditions from " << options.icFile << " on " << numRanks
             << " ranks, each its share..." << std::endl;
      }
      folderRequest = folder;
      source = options.cosmology
                   ? cosmologicalIcSource(options.cosmologicalIcs.ic)
                   : (options.icFile.empty() ? "a Plummer sphere (seed " + std::to_string(options.seed) + ")"
                                             : options.icFile);
    }
    header[1] = options.integrator.tStart;
    endRankZeroWork();
  }
  MPI_Bcast(header, 7, MPI_DOUBLE, 0, comm);
  broadcastState(comovingState, comm);
  const auto numBodies = static_cast<std::uint64_t>(header[0]);
  options.integrator.tStart = header[1];
  // The box, its mesh, split and opening settings (--eps auto's softening too), alike on every rank.
  options.gravity.eps = givenSoftening;
  resolvePeriodicBox(options, header[6], numBodies);
  // The kind of run, its options and, for a comoving run, its time line, alike on every rank: what rank 0 checked.
  const bool isComoving = comovingState.scalar("comoving") != 0.0;
  if (!isComoving) refuseComovingOptions(options);
  prepareLeapfrogRun(options, isComoving);
  if (isComoving && !options.eta) echoDefault(command, "--eta", options.comoving.eta);
  std::optional<ComovingRun> comoving;
  std::optional<LayzerIrvineCheck> layzerIrvine;
  if (isComoving) {
    comoving.emplace(comovingOnRanks(options, comovingState));
    if (restart) layzerIrvine = LayzerIrvineCheck::restore(comovingState);
  }
  std::unique_ptr<ForceSolver> forces;
  parallel::DistributedTreeSolver* treeSolver = nullptr;  ///< the tree's work weights and statistics (null: direct)
  std::unique_ptr<HermiteEngine> directEngine;            ///< --solver direct: the i-block x j sums of each rank
  if (options.solver == SolverKind::direct) {
    // Direct summation over the ranks: each rank's bodies pulled by all, as one i-block of its Hermite engine (the
    // near-field engines' direct sum takes its targets from its sources). Open boundaries (resolvePeriodicBox).
    parallel::checkOnEveryRank([&] { directEngine = gpu::makeHermiteEngine(options.engine, nullptr, device); }, comm);
    forces = std::make_unique<parallel::DistributedDirectSolver>(*directEngine, options.gravity, comm);
  } else {
    auto distributed =
        std::make_unique<parallel::DistributedTreeSolver>(*engine.engine, options.tree, options.gravity, comm);
    treeSolver = distributed.get();
    if (options.gravity.periodic.enabled()) {
      // TreePM: the distributed tree's short range, and the mesh as --pm-ranks says (auto: in slabs over the ranks,
      // cuFFT on each rank's GPU or FFTW-MPI on the cores, no rank holding the whole grid).
      forces = treePmOnRanks(std::move(distributed), options, engine.onGpu, device, comm);
    } else {
      forces = std::move(distributed);
    }
  }
  std::optional<integrator::RunPosition> position;
  if (restart) {
    // The run's first diagnostics (dE/E's reference), as rank 0 read them.
    integrator::Diagnostics& first = resumed.position.initial;
    double* fields[15] = {&first.time, &first.mass, &first.kinetic, &first.potential, &first.total, &first.virialRatio};
    for (int k = 0; k < 3; ++k) {
      fields[6 + k] = &first.momentum[k];
      fields[9 + k] = &first.angularMomentum[k];
      fields[12 + k] = &first.centreOfMass[k];
    }
    double values[15];
    for (int k = 0; k < 15; ++k) values[k] = *fields[k];
    MPI_Bcast(values, 15, MPI_DOUBLE, 0, comm);
    for (int k = 0; k < 15; ++k) *fields[k] = values[k];
    position.emplace();
    position->step = static_cast<std::uint64_t>(header[2]);
    position->nextOutputIndex = static_cast<std::uint64_t>(header[3]);
    position->time = header[4];
    position->initial = first;
  }
  Particles mine;
  if (restart) {
    // Written on as many ranks: each rank takes back its share and the split's weights, as the stopped run had them;
    // another K reads even shares.
    Shares shares = evenShares(numBodies, numRanks);
    if (header[5] > 0.0) {
      std::vector<int> counts = resumed.rankBodies;
      counts.resize(static_cast<std::size_t>(numRanks));
      MPI_Bcast(counts.data(), numRanks, MPI_INT, 0, comm);
      shares = sharesOf(std::move(counts));
    }
    io::Checkpoint share = readShareOfCheckpoint(outDir / io::kCheckpointName, shares, comm);
    mine = std::move(share.snapshot.particles);
    if (header[5] > 0.0 && treeSolver != nullptr) {
      treeSolver->setWorkWeights(std::move(share.solver.doubles[kWorkWeightsName]));
    }
  } else if (startFromFile || cosmologicalStart) {
    mine = startFromFile
               ? readShareOfSnapshot(options.icFile, evenShares(numBodies, numRanks), options.integrator.boxSize, comm)
               : makeCosmologicalStartOnRanks(command, options, spectrum, info, comm);
    if (comoving) {
      // As one rank's start checks the whole file's mean density, and holds momenta from here on.
      double totalMass = std::accumulate(mine.mass.begin(), mine.mass.end(), 0.0);
      MPI_Allreduce(MPI_IN_PLACE, &totalMass, 1, MPI_DOUBLE, MPI_SUM, comm);
      checkComovingStart(*comoving, options, totalMass, initialConditionsSource(options));
      storedVelocitiesToMomenta(mine, comoving->timeline.startScaleFactor());
    }
  } else {
    mine = makePlummerStartOnRanks(options, evenShares(numBodies, numRanks), info, comm);
  }
  requireFloatRangeOnRanks(mine, options.gravity, comm);  // the whole system's, read or made in shares
  resumed = RestartOnRanks{};
  const bool directPotentials = directOutputPotentials(options, numBodies, false);
  requireForceCheckSample(options, numBodies);

  // The memory of each host and GPU over the ranks that share it, before anything is written: a run that will not fit
  // is refused on every rank with one line; --dry-run shows the estimate and stops.
  const std::uint64_t sizedSteps =
      comoving
          ? fewestComovingSteps(*comoving, options, position ? position->time : options.integrator.tStart)
          : integrator::checkedStepCount(options.integrator.tEnd - options.integrator.tStart, options.integrator.dt);
  // Rank 0 holds the whole system where it gathers the snapshots, sums direct potentials or checks the forces; never
  // for the start, which every rank reads or makes its share of, nor for a checkpoint, which every rank writes its
  // part of.
  const MemoryOnRanks memory =
      estimateMemoryOnRanks(options, mine, numBodies, engine.onGpu, device, directPotentials, !perRankSnapshots,
                            directPotentials || options.forceCheck > 0, sizedSteps, comm);
  if (options.dryRun) {
    if (rank == 0) {
      info << "matcha run --dry-run: " << numBodies << " bodies from " << source << " on " << numRanks << " ranks, ~"
           << sizedSteps << " steps\nsolver: " << forces->describe() << "\nengine: " << engine.reason
           << "\nrank 0's share (" << mine.size() << " bodies):\n"
           << formatRunMemory(memory.mine) << formatMemoryOnRanks(memory) << std::flush;
      if (options.json) std::cout << memoryOnRanksJson(memory) << std::endl;
    }
    return 0;
  }
  parallel::checkOnEveryRank([&] { requireRunFitsOnRanks(memory); }, comm);
  const std::string potentialSource = directPotentials
                                          ? "direct summation at each output on rank 0 (the solver computes "
                                            "accelerations only)"
                                          : "the tree's (its force error enters W)";

  // Rank 0 writes the run folder; a failure there stops every rank with its message (checkOnEveryRank).
  const auto onRankZero = [&](const std::function<void()>& work) {
    parallel::checkOnEveryRank(
        [&] {
          if (rank == 0) work();
        },
        comm);
  };
  std::ofstream log;
  integrator::RunSummary summary;
  std::uint64_t longRangeSteps = 0;  ///< a comoving run's long-range steps begun (summary.json)
  std::optional<DirectPotentialsOnRanks> outputPotentials;
  std::optional<ForceCheck> forceCheck;  ///< rank 0's, with --force-check
  onRankZero([&] {
    io::prepareRunFolder(*folderRequest, io::markerForThisProcess(options.commandLine));
    if (position) {
      // The log's lines start with their time: a fixed-step run's lines more than half a step after the checkpoint's,
      // a comoving run's (a, printed to 11 digits) any later, belong to the stopped run's later steps.
      rewindRunFolder(outDir, *position, position->time,
                      comoving ? 1e-9 * position->time : 0.5 * options.integrator.dt);
    }
  });
  try {
    onRankZero([&] {
      info << "matcha run: " << numBodies << " bodies from " << source << " on " << numRanks
           << " ranks\nsolver: " << forces->describe() << "\nengine: " << engine.reason
           << ", on every rank\nenergy diagnostics: potentials from " << potentialSource
           << "\noutput: " << outDir.string()
           << (perRankSnapshots ? "/ (snapshot_NNN.R.hdf5 from every rank R, "
                                : "/ (snapshot_NNN.hdf5 gathered to rank 0, ")
           << "checkpoint.hdf5 naming checkpoint.parts-STEP/checkpoint.R.hdf5 from every rank R, "
           << "diagnostics.log, used_parameters.toml, summary.json; RUNNING until the end)\n";
      if (position) {
        info << "restart: step " << position->step << " of the run, " << (comoving ? "a = " : "t = ") << position->time
             << ", from " << (outDir / io::kCheckpointName).string()
             << (header[5] > 0.0 ? " (its ranks' shares and split)" : " (written on another number of ranks)") << "\n";
      } else if (comoving) {
        info << describeComovingRun(*comoving, options,
                                    fewestComovingSteps(*comoving, options, options.integrator.tStart))
             << "\n";
      }
      const std::string columns = comoving ? comovingDiagnosticsHeader() : integrator::diagnosticsHeader();
      io::writeTextFile(outDir / "used_parameters.toml", usedParameters(command));
      log.open(outDir / "diagnostics.log", position ? std::ios::app : std::ios::trunc);
      if (!log) throw IoError("cannot write " + (outDir / "diagnostics.log").string());
      if (position) {
        log << "# restarted at step " << position->step << " by " << versionText() << " on " << numRanks << " ranks\n";
      } else {
        log << "# " << versionText() << "\n# " << forces->describe() << "; potentials from " << potentialSource << "\n"
            << columns << "\n";
      }
      info << columns << "\n";
    });

    io::SnapshotMetadata metadata;
    metadata.parameters = usedParameterList(command);
    metadata.boxSize = options.integrator.boxSize;
    if (comoving) {
      metadata.units = comoving->units;
      metadata.cosmology = comoving->header;
    }
    // A state's metadata at its time (a comoving state's: a, its Redshift, the momenta written as GADGET's u).
    const auto stateAt = [&](double time, io::SnapshotMetadata& meta, io::SnapshotWriteOptions& write) {
      meta.time = time;
      if (comoving) setComovingSnapshotState(time, meta, write);
    };
    integrator::Diagnostics initial = position ? position->initial : integrator::Diagnostics{};
    ProgressLine progress;
    integrator::RunCallbacks callbacks;
    callbacks.combineDiagnostics = [&](const integrator::Diagnostics& local) { return sumDiagnostics(local, comm); };
    if (comoving) {
      // The whole system's diagnostics (combined), the same on every rank: each keeps the check.
      callbacks.onDiagnostics = [&](const integrator::Diagnostics& diagnostics) {
        if (layzerIrvine) {
          layzerIrvine->add(diagnostics);
        } else {
          layzerIrvine.emplace(diagnostics);
        }
      };
    }
    callbacks.onOutput = [&](const Particles& state, const integrator::Diagnostics& diagnostics, std::uint64_t index) {
      if (index == 0) initial = diagnostics;
      char name[32];
      std::snprintf(name, sizeof name, "snapshot_%03llu.hdf5", static_cast<unsigned long long>(index));
      if (perRankSnapshots) {
        // Every rank its own bodies, at once, as file `rank` of a GADGET multi-file snapshot; a failure on any rank
        // stops every rank with its message. Open boundaries: every file the same BoxSize, the cube around all.
        std::uint64_t total = state.size();
        MPI_Allreduce(MPI_IN_PLACE, &total, 1, MPI_UINT64_T, MPI_SUM, comm);
        double largest = io::largestCoordinate(state);
        MPI_Allreduce(MPI_IN_PLACE, &largest, 1, MPI_DOUBLE, MPI_MAX, comm);
        parallel::checkOnEveryRank(
            [&] {
              io::SnapshotWriteOptions write;
              io::SnapshotMetadata meta = metadata;
              stateAt(diagnostics.time, meta, write);
              write.filePart = io::SnapshotWriteOptions::FilePart{rank, numRanks, total, largest};
              io::writeSnapshot(io::multiFilePath(outDir / name, rank), state, meta, write);
            },
            comm);
      }
      const Particles whole = perRankSnapshots ? Particles{} : gatherBodies(state, comm);
      onRankZero([&] {
        const std::string row = comoving ? formatComovingDiagnostics(diagnostics, *layzerIrvine)
                                         : integrator::formatDiagnostics(diagnostics, initial);
        log << row << std::endl;
        info << row << std::endl;
        if (perRankSnapshots) return;
        io::SnapshotWriteOptions write;
        stateAt(diagnostics.time, metadata, write);
        io::writeSnapshot(outDir / name, whole, metadata, write);
      });
    };
    // Checkpoints (on rank 0's clock, as the progress line's energies: every rank takes them after the same steps), in
    // parts: every rank writes its own bodies, in the order it holds them, with the split's weights beside them, at
    // once; rank 0 then writes the checkpoint that names the parts, with each rank's share, so that a restart on as
    // many ranks gives each rank its bodies back and splits them as this run would have. No rank gathers the system.
    callbacks.onCheckpoint = [&](const Particles& state, double time, const integrator::RunPosition& at) {
      const Shares shares = sharesOnRanks(state.size(), comm);
      static const std::vector<double> none;
      const std::vector<double>& work = treeSolver != nullptr ? treeSolver->nextWorkWeights() : none;
      int allKnown = work.size() == state.size() ? 1 : 0;
      MPI_Allreduce(MPI_IN_PLACE, &allKnown, 1, MPI_INT, MPI_MIN, comm);
      CheckpointOnRanks checkpoint;
      CheckpointState& run = checkpoint.run;
      run.set("step", double(at.step));
      run.set("next_output_index", double(at.nextOutputIndex));
      run.set("time", time);
      run.set("t_start", options.integrator.tStart);
      run.set("dt", options.integrator.dt);
      run.set("t_end", options.integrator.tEnd);
      run.set("bodies", double(shares.total()));
      run.set("ranks", double(numRanks));
      run.doubles["rank_bodies"].assign(shares.counts.begin(), shares.counts.end());
      saveDiagnostics(at.initial, run);
      if (comoving) saveComovingCheckpoint(*comoving, *layzerIrvine, run);
      if (allKnown != 0) checkpoint.partSolver.doubles[kWorkWeightsName] = work;
      checkpoint.meta = metadata;
      io::SnapshotWriteOptions unused;  // the checkpoint keeps the momenta as held
      stateAt(time, checkpoint.meta, unused);
      checkpoint.meta.step = at.step;
      writeCheckpointOnRanks(outDir / io::kCheckpointName, state, checkpoint, comm);
    };
    // The progress line's energies, at most once a second of rank 0's clock: every rank measures on those steps.
    callbacks.onProgress = [&](const integrator::ProgressInfo& step) {
      if (rank != 0) return;
      progress.update(step, comoving ? std::optional<double>(layzerIrvine ? layzerIrvine->relativeViolation() : 0.0)
                                     : std::nullopt);
    };
    callbacks.sharedSeconds = [&](double local) {
      MPI_Bcast(&local, 1, MPI_DOUBLE, 0, comm);
      return local;
    };
    if (options.timings && rank == 0) {
      callbacks.onTimings = [&](const integrator::OutputTimings& timings) {
        const std::string line = formatOutputTimings(timings) + " (rank 0)";
        log << line << std::endl;
        info << line << std::endl;
      };
    }
    if (directPotentials) {
      outputPotentials.emplace(*engine.engine, options.gravity, comm);
      callbacks.outputPotentials = std::ref(*outputPotentials);
    }
    if (options.forceCheck > 0) {
      // --force-check K: after each tree's last call, the bodies gathered to rank 0, which measures K of them against
      // its exact reference as one rank does (a diagnostic: rank 0 holds the whole system for it).
      onRankZero([&] {
        forceCheck.emplace(static_cast<std::size_t>(options.forceCheck), options.gravity, options.integrator.boxSize,
                           options.seed);
      });
      callbacks.onLastCallOnTree = [&](const Particles& state, double time, std::uint64_t step) {
        const Particles whole = gatherBodies(state, comm);
        onRankZero([&] {
          const std::string line = (*forceCheck)(whole, time, step);
          log << line << std::endl;
          info << line << std::endl;
        });
      };
    }
    // Fault injection for the tests (tests/parallel/matcha_ranks_test.sh fail): MATCHA_TEST_FAIL_RANK=r makes rank r
    // fail alone after step 2, as a rank whose bodies went non-finite would.
    if (const char* failing = std::getenv("MATCHA_TEST_FAIL_RANK"); failing != nullptr && std::atoi(failing) == rank) {
      callbacks.onProgress = [progress = callbacks.onProgress](const integrator::ProgressInfo& step) {
        if (progress) progress(step);
        if (step.step == 2) throw NumericalError("step 2: a failure injected by MATCHA_TEST_FAIL_RANK");
      };
    }
    if (comoving) {
      ComovingSchedule schedule = makeComovingSchedule(*comoving, options, numBodies, *forces);
      schedule.setRankReductions(comovingRankReductions(comm));
      summary =
          integrator::runSteps(mine, *forces, schedule, options.integrator, callbacks, position ? &*position : nullptr);
      longRangeSteps = schedule.longRangeStepsBegun();
    } else {
      summary = integrator::runLeapfrog(mine, *forces, options.integrator, callbacks, position ? &*position : nullptr);
    }
  } catch (const std::exception& error) {
    // As runGuarded: on rank 0, summary.json says the run failed and the marker goes (best effort). A rank that fails
    // alone ends the job (reportFailure) before rank 0 can write it: the folder then keeps its RUNNING marker.
    if (rank == 0) {
      try {
        log << "# failed: " << error.what() << "\n";
        log.close();
        nlohmann::json failed = {{"status", "failed"},
                                 {"error", error.what()},
                                 {"matcha", buildJson()},
                                 {"ranks", numRanks},
                                 {"output_dir", outDir.string()}};
        io::writeTextFile(outDir / "summary.json", failed.dump(2) + "\n");
        io::removeRunningMarker(outDir);
      } catch (const std::exception&) {
      }
    }
    throw;
  }

  // The run's totals: interactions over every rank; times are rank 0's (each step waits for the slowest rank).
  summary.interactions = sumCounts(summary.interactions, comm);
  const std::vector<parallel::DistributedTotals> ranksTotals =
      gatherRankTotals(treeSolver != nullptr ? treeSolver->totals() : parallel::DistributedTotals{}, comm);
  beginRankZeroWork();
  if (rank == 0) {
    const double interactionsPerSecond =
        summary.forceSeconds > 0 ? double(summary.interactions.total()) / summary.forceSeconds : 0.0;
    const double diagnosticSeconds = outputPotentials ? outputPotentials->seconds() : 0.0;
    const parallel::DistributedStats stats =
        treeSolver != nullptr ? treeSolver->lastStats() : parallel::DistributedStats{};
    nlohmann::json json = {
        {"bodies", numBodies},
        {"status", "complete"},
        {"matcha", buildJson()},
        {"integrator", toString(options.integratorKind)},
        {"solver", forces->describe()},
        {"engine", engine.engine->name()},
        {"ranks", numRanks},
        {"steps", summary.steps},
        {"t_start", options.integrator.tStart},
        {"t_end", options.integrator.tEnd},
        {"dt", options.integrator.dt},
        {"initial_energy", summary.initialEnergy},
        {"final_energy", summary.finalEnergy},
        {"relative_energy_error", summary.relativeEnergyError},
        {"diagnostic_potential", directPotentials ? "direct" : "solver"},
        {"diagnostic_seconds", diagnosticSeconds},
        {"wall_seconds", summary.wallSeconds},
        {"force_seconds", summary.forceSeconds},
        {"interactions", {{"body_body", summary.interactions.bodyBody}, {"body_cell", summary.interactions.bodyCell}}},
        {"interactions_per_second", interactionsPerSecond},
        {"last_call_imbalance", stats.imbalance()},
        {"timings", timingsJson(summary, engine.onGpu)},
        {"rank_timings", rankTotalsJson(ranksTotals)},
        {"force_checks", forceCheck ? forceCheck->json() : nlohmann::json(nullptr)},
        {"output_dir", outDir.string()}};
    if (comoving) {
      addComovingSummary(json, *comoving, options, summary, longRangeSteps, *layzerIrvine);
      log << comovingLogSummary(summary, *layzerIrvine) << "\n";
    } else {
      log << "# |dE/E| = " << summary.relativeEnergyError << " after " << summary.steps << " steps\n";
    }
    log.close();
    io::writeTextFile(outDir / "summary.json", json.dump(2) + "\n");
    io::removeRunningMarker(outDir);
    if (options.json) {
      std::cout << json.dump(2) << std::endl;
    } else if (comoving) {
      std::printf("%s on %d ranks (last call's imbalance %.2f)\n",
                  comovingSummaryLine(*comoving, summary, *layzerIrvine).c_str(), numRanks, stats.imbalance());
    } else {
      std::printf(
          "summary: |dE/E| = %.3e after %llu steps to t = %g; wall %.2f s (force %.2f s, diagnostic potentials %.2f "
          "s); %.3e interactions/s (%.0f body-body + %.0f body-cell per body per step) on %d ranks (last call's "
          "imbalance %.2f)\n",
          summary.relativeEnergyError, static_cast<unsigned long long>(summary.steps), options.integrator.tEnd,
          summary.wallSeconds, summary.forceSeconds, diagnosticSeconds, interactionsPerSecond,
          double(summary.interactions.bodyBody) / double(numBodies) /
              double(std::max<std::uint64_t>(summary.forceCalls, 1)),
          double(summary.interactions.bodyCell) / double(numBodies) /
              double(std::max<std::uint64_t>(summary.forceCalls, 1)),
          numRanks, stats.imbalance());
    }
    if (options.timings)
      info << formatTimingsTable(summary, engine.onGpu) << formatRankTotals(ranksTotals) << std::flush;
    endRankZeroWork();
  }
  return 0;
}

namespace {

/// Collective: one tree configuration on the ranks' bodies, as compare measures it on one rank (an untimed call,
/// then the timed one), with the sample's forces gathered to rank 0 by slot and the trees' statistics over all ranks.
TreeMeasurement measureOnRanks(const Options& configuration, const Sample& sample, Particles& mine,
                               NearFieldEngine& engine, MPI_Comm comm) {
  auto distributed =
      std::make_unique<parallel::DistributedTreeSolver>(engine, configuration.tree, configuration.gravity, comm);
  const parallel::DistributedTreeSolver& solver = *distributed;  // the short range: its trees and lists
  std::unique_ptr<ForceSolver> forceSolver;                      // TreePM in a box, else the tree alone
  if (configuration.gravity.periodic.enabled()) {
    // TreePM as `run` takes it on ranks of the CPU engine: the distributed short range and the mesh (auto: in slabs).
    forceSolver = treePmOnRanks(std::move(distributed), configuration, false, 0, comm);
  } else {
    forceSolver = std::move(distributed);
  }
  forceSolver->setPotentialsWanted(false);  // accelerations alone, as compare on one rank measures them
  forceSolver->computeForces(mine);
  TreeMeasurement measured;
  MPI_Barrier(comm);
  const Stopwatch clock;
  measured.report = forceSolver->computeForces(mine);
  MPI_Barrier(comm);
  measured.seconds = clock.seconds();
  measured.report.counts = sumCounts(measured.report.counts, comm);
  measured.description = forceSolver->describe();

  // Cells, leaves and groups summed over the ranks' trees (each over its own bodies), the deepest tree, the lists.
  const tree::Octree& octree = solver.octree();
  const tree::Groups& groups = solver.groups();
  const InteractionPlan& plan = solver.lastPlan();
  std::uint64_t sums[5] = {octree.numCells(), 0, groups.size(), 0, 0};  // cells, leaves, groups, list bodies, cells
  std::uint64_t maxima[4] = {std::uint64_t(std::max(0, octree.numLevels() - 1)), 0, 0, 0};  // depth, group, lists
  for (std::uint32_t c = 0; c < octree.numCells(); ++c) sums[1] += octree.isLeaf(c) ? 1 : 0;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    maxima[1] = std::max<std::uint64_t>(maxima[1], groups.ranges[g].last - groups.ranges[g].first);
    sums[3] += plan.numListBodies(g);
    sums[4] += plan.numListCells(g);
    maxima[2] = std::max(maxima[2], plan.numListBodies(g));
    maxima[3] = std::max(maxima[3], plan.numListCells(g));
  }
  MPI_Allreduce(MPI_IN_PLACE, sums, 5, MPI_UINT64_T, MPI_SUM, comm);
  MPI_Allreduce(MPI_IN_PLACE, maxima, 4, MPI_UINT64_T, MPI_MAX, comm);
  tree::TreeStats& stats = measured.stats;
  stats.numBodies = sample.slotOfId.size();
  stats.numCells = sums[0];
  stats.numLeaves = sums[1];
  stats.numGroups = sums[2];
  stats.depth = static_cast<int>(maxima[0]);
  stats.maxGroupSize = maxima[1];
  stats.meanGroupSize = sums[2] > 0 ? double(stats.numBodies) / double(sums[2]) : 0.0;
  stats.meanListBodies = sums[2] > 0 ? double(sums[3]) / double(sums[2]) : 0.0;
  stats.meanListCells = sums[2] > 0 ? double(sums[4]) / double(sums[2]) : 0.0;
  stats.maxListBodies = maxima[2];
  stats.maxListCells = maxima[3];

  // The targets' accelerations: (slot, ax, ay, az) from each rank, placed by slot on rank 0.
  std::vector<double> mineTargets;
  for (std::size_t i = 0; i < mine.size(); ++i) {
    const std::uint32_t slot = sample.slotOfId[mine.id[i]];
    if (slot == Sample::kNone) continue;
    mineTargets.insert(mineTargets.end(), {double(slot), mine.ax[i], mine.ay[i], mine.az[i]});
  }
  const int numRanks = parallel::numRanksOf(comm);
  const bool root = parallel::rankOf(comm) == 0;
  int count = static_cast<int>(mineTargets.size());
  std::vector<int> counts(numRanks), offsets(numRanks, 0);
  MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, comm);
  int total = 0;
  for (int r = 0; r < numRanks; ++r) {
    offsets[r] = total;
    total += counts[r];
  }
  std::vector<double> targets(root ? static_cast<std::size_t>(total) : 0);
  MPI_Gatherv(mineTargets.data(), count, MPI_DOUBLE, targets.data(), counts.data(), offsets.data(), MPI_DOUBLE, 0,
              comm);
  if (root) {
    TargetForces& forces = measured.forces;
    for (auto* axis : {&forces.ax, &forces.ay, &forces.az}) axis->assign(sample.numTargets, 0.0);
    for (std::size_t k = 0; k + 3 < targets.size(); k += 4) {
      const auto slot = static_cast<std::size_t>(targets[k]);
      forces.ax[slot] = targets[k + 1];
      forces.ay[slot] = targets[k + 2];
      forces.az[slot] = targets[k + 3];
    }
  }
  return measured;
}

}  // namespace

int compareDistributed(const Options& given, const CompareOptions& compare) {
  const MPI_Comm comm = MPI_COMM_WORLD;
  const int rank = worldRank();
  Options options = given;
  requireSupportedOnRanks(options, "compare");
  validateOptions(options, kCompareOptions);
  const std::vector<TreeParams> sweep = treeSweep(options);
  options.engine = EngineKind::cpu;
  gpu::EngineChoice engine = makeRunEngine(options);

  Particles mine;
  std::uint64_t numBodies = 0;
  // The --ic file's periodic box (0: none), which only rank 0 reads: every rank resolves the box, its mesh and the
  // opening settings from it and --box alike (resolvePeriodicBox), as rank 0's compareSolvers does.
  double fileBoxSize = 0.0;
  std::size_t measuredConfigurations = 0;
  CompareSharing sharing;
  sharing.shareBodies = [&](const Particles& bodies) {
    endRankZeroWork();
    numBodies = bodies.size();
    MPI_Bcast(&numBodies, 1, MPI_UINT64_T, 0, comm);
    MPI_Bcast(&fileBoxSize, 1, MPI_DOUBLE, 0, comm);
    mine = scatterBodies(&bodies, evenShares(numBodies, parallel::numRanksOf(comm)), comm);
  };
  sharing.measure = [&](const Options& configuration, const Sample& sample) {
    TreeMeasurement measured = measureOnRanks(configuration, sample, mine, *engine.engine, comm);
    // After the last configuration the others wait while rank 0 computes the reference and prints.
    if (++measuredConfigurations == sweep.size()) beginRankZeroWork();
    return measured;
  };

  beginRankZeroWork();
  if (rank == 0) {
    // A cosmological file compares as any periodic box (compare reads positions and masses alone, as on one rank).
    const InitialConditionsInfo ic = inspectInitialConditions(options);
    requireBodiesPerRank(ic.numBodies);
    fileBoxSize = ic.boxSize;
    const int code = compareSolvers(options, compare, &sharing);
    endRankZeroWork();
    return code;
  }
  MPI_Bcast(&numBodies, 1, MPI_UINT64_T, 0, comm);
  MPI_Bcast(&fileBoxSize, 1, MPI_DOUBLE, 0, comm);
  mine = scatterBodies(nullptr, evenShares(numBodies, parallel::numRanksOf(comm)), comm);
  resolvePeriodicBox(options, fileBoxSize, numBodies);
  const std::vector<TreeParams> boxSweep = treeSweep(options);  // the opening settings left at auto are the box's
  const Sample sample = drawSample(numBodies, static_cast<std::size_t>(compare.sample), compare.sampleSeed);
  for (const TreeParams& params : boxSweep) {
    Options configuration = options;
    configuration.tree = params;
    configuration.tree.reuse = 1;
    measureOnRanks(configuration, sample, mine, *engine.engine, comm);
  }
  beginRankZeroWork();
  return 0;
}

int writeCosmologicalIcsOnRanks(const CLI::App& command, CosmologicalIcOptions& options,
                                const std::filesystem::path& out, bool overwrite) {
  namespace fs = std::filesystem;
  const MPI_Comm comm = MPI_COMM_WORLD;
  const int rank = worldRank();
  const int numRanks = worldSize();
  // Rank 0 checks the options, the spectrum (warning of a table's range) and the files before any work; the ranks
  // write into one folder, as a run's ranks write their parts of a checkpoint.
  std::optional<cosmology::LinearPowerSpectrum> spectrum;
  beginRankZeroWork();  // throws RankZeroFailed on the others when rank 0's checks fail (it says why)
  if (rank == 0) {
    checkCosmologicalIcOptions(command, options, false);
    checkOutputSet(out, numRanks, overwrite, isHdf5File, "an HDF5 file");
    spectrum = cosmologicalIcSpectrum(command, options, std::cerr);
    if (out.has_parent_path()) io::ensureWritableDirectory(out.parent_path());
    endRankZeroWork();
  }
  const cosmology::CosmologicalIcs mine = makeCosmologicalIcsOnRanks(command, options, spectrum, std::cout, comm);
  parallel::checkOnEveryRank([&] { requireUsableBodies("ic " + command.get_name(), mine.particles); }, comm);

  const auto side = static_cast<std::uint64_t>(options.ic.grid);
  const std::uint64_t total = side * side * side;
  io::SnapshotWriteOptions write;
  write.includeForces = false;
  write.filePart = io::SnapshotWriteOptions::FilePart{rank, numRanks, total, -1.0};
  const io::SnapshotMetadata metadata =
      cosmologicalIcMetadata(command, cosmologicalIcHeader(options), options.ic.boxSize);
  // Each rank's file goes beside its name first (atomically, as every snapshot), and into place only once every
  // rank's is written: a rank that fails leaves no set that would read as whole.
  const fs::path part = io::multiFilePath(out, rank);
  const fs::path staged = part.parent_path() / ("." + part.filename().string() + ".staged");
  const auto removeStaged = [&] {
    std::error_code ignored;
    fs::remove(staged, ignored);
  };
  try {
    parallel::checkOnEveryRank([&] { io::writeSnapshot(staged, mine.particles, metadata, write); }, comm);
  } catch (...) {
    removeStaged();
    throw;
  }
  // Readers start from part 0, whose header names the set's files: the set goes into place with an earlier set's part
  // 0 removed first and its own part 0 renamed last, so that a rank that dies between the renames (killed, the machine
  // down: nothing left to clean up) leaves no part 0, never a set of parts from this set and an earlier one of as many
  // files that would read as whole. MATCHA_TEST_CRASH_RANK=r (tests/parallel/matcha_ranks_test.sh bad) makes rank r
  // die there, before its own rename.
  const auto moveIntoPlace = [&] {
    if (const char* crashing = std::getenv("MATCHA_TEST_CRASH_RANK");
        crashing != nullptr && std::atoi(crashing) == rank) {
      std::_Exit(9);
    }
    std::error_code error;
    fs::rename(staged, part, error);
    if (error) throw IoError("cannot rename " + staged.string() + " to " + part.string() + ": " + error.message());
  };
  try {
    parallel::checkOnEveryRank(
        [&] {
          std::error_code error;
          if (rank == 0 && !fs::remove(part, error) && error) {
            throw IoError("cannot remove " + part.string() + " of the set it replaces: " + error.message());
          }
        },
        comm);
    parallel::checkOnEveryRank(
        [&] {
          if (rank != 0) moveIntoPlace();
        },
        comm);
    parallel::checkOnEveryRank(
        [&] {
          if (rank == 0) moveIntoPlace();
        },
        comm);
  } catch (...) {
    // Some ranks' files are in place: none stays, so that no mix of this set and an earlier one reads as a set.
    removeStaged();
    std::error_code ignored;
    fs::remove(part, ignored);
    throw;
  }
  // What the set replaces, once it is in place: `out` itself, which readers would take before the set, and the parts
  // of an earlier, larger set (checkOutputSet let them go only with --overwrite).
  parallel::checkOnEveryRank(
      [&] {
        if (rank != 0) return;
        std::vector<fs::path> replaced = staleParts(out, numRanks);
        std::error_code error;
        if (fs::is_regular_file(out, error)) replaced.push_back(out);
        for (const fs::path& old : replaced) {
          if (!fs::remove(old, error) && error) {
            throw IoError("the set is written, but " + old.string() + " could not be removed (" + error.message() +
                          "): readers would take it first");
          }
        }
      },
      comm);
  std::cout << "wrote " << total << " bodies (a = " << mine.growth.scaleFactor
            << ", D1/D1(1) = " << mine.growth.growthRatio << ", mass " << mine.growth.particleMass
            << " 1e10 Msun/h) to " << io::multiFilePath(out, 0).string() << " .. "
            << io::multiFilePath(out, numRanks - 1).string() << ", a file a rank (--ic " << out.string()
            << " reads them as one)\n";
  return 0;
}

}  // namespace matcha::app

#else  // without MPI: every process is a world of one rank

namespace matcha::app {

struct MpiSession::State {};
MpiSession::MpiSession(int&, char**&) {}
MpiSession::~MpiSession() = default;
int worldRank() { return 0; }
int worldSize() { return 1; }

int reportFailure(int exitCode, const std::string& message) {
  std::cerr << "matcha: error: " << message << "\n";
  return exitCode;
}

void requireRunsOnRanks(const CLI::App&) {}

int runDistributed(CLI::App&, const Options&) { throw InvariantError("runDistributed: built without MPI"); }
int compareDistributed(const Options&, const CompareOptions&) {
  throw InvariantError("compareDistributed: built without MPI");
}
int writeCosmologicalIcsOnRanks(const CLI::App&, CosmologicalIcOptions&, const std::filesystem::path&, bool) {
  throw InvariantError("writeCosmologicalIcsOnRanks: built without MPI");
}

}  // namespace matcha::app

#endif
