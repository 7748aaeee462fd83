// SPDX-License-Identifier: MIT
// CUDA engine rates against the FP32 issue floor (DESIGN.md §4): the tiled all-pairs kernel over N and its shapes
// (tile size p, i-bodies per thread I, threads per body q), the double direct kernel (the comparison reference), and
// the group x list kernel on real plans (Plummer, theta 0.5, ncrit 16 ... 4096). Time is the engine's CUDA-event
// kernel time (manual time); interactions/s is a rate counter over it; floor% and issue% compare it with the floor
// for DESIGN.md's 13 instructions per interaction and for the count in the kernel's SASS. Names carry every
// parameter. The bare loop (bare_direct_loop.hpp) gives the ceiling the issue rate allows. No CUDA header here: timing
// comes through CudaEngine::lastKernelMilliseconds. Without a GPU the binary says so and exits 0 (it is also a ctest
// smoke run). Run by scripts/bench.sh.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <memory_resource>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "matcha/core/pair_interaction.hpp"
#include "matcha/gpu/bare_direct_loop.hpp"
#include "matcha/gpu/cpu_engine.hpp"
#include "matcha/gpu/cuda_engine.hpp"
#include "matcha/gpu/engine_factory.hpp"
#include "matcha/gpu/hermite_cuda_engine.hpp"
#include "matcha/ic/plummer.hpp"
#include "matcha/mesh/particle_mesh.hpp"
#include "matcha/mesh/treepm_solver.hpp"
#include "matcha/tree/periodic_tree_solver.hpp"
#include "matcha/tree/space_filling_curve.hpp"
#include "matcha/tree/tree_solver.hpp"
#include "matcha_force.h"

namespace {

using namespace matcha;
using gpu::CudaEngine;
using gpu::Precision;

gpu::CudaDeviceInfo gDevice;

const Particles& plummer(std::size_t n) {
  static std::map<std::size_t, Particles> cache;
  auto found = cache.find(n);
  if (found == cache.end()) {
    ic::PlummerParams params;
    params.numBodies = n;
    params.seed = 12345;
    // In Hilbert order, as `matcha run --solver direct` hands bodies to the direct sum.
    Particles bodies = ic::makePlummer(params);
    std::vector<std::uint64_t> keys;
    tree::computeHilbertKeys(bodies.sources(), tree::computeBoundingCube(bodies.sources()), keys);
    bodies.permute(tree::sortByKey(keys));
    found = cache.emplace(n, std::move(bodies)).first;
  }
  return found->second;
}

CudaEngine& engine(Precision precision) {
  static std::unique_ptr<CudaEngine> engines[2];
  auto& slot = engines[precision == Precision::float32 ? 0 : 1];
  if (!slot) slot = std::make_unique<CudaEngine>(precision);
  return *slot;
}

/// A Plummer sphere sorted along the tree's curve and its plan, built once per (N, theta, ncrit).
struct PlanCase {
  Particles particles;
  std::unique_ptr<tree::TreeSolver> solver;
  InteractionPlan plan;
};

PlanCase& planCase(std::size_t n, double theta, std::uint32_t ncrit, MultipoleOrder multipole) {
  static gpu::CpuEngine unused(Precision::float64);
  static std::map<std::tuple<std::size_t, double, std::uint32_t, MultipoleOrder>, std::unique_ptr<PlanCase>> cache;
  auto& slot = cache[{n, theta, ncrit, multipole}];
  if (!slot) {
    slot = std::make_unique<PlanCase>();
    slot->particles = plummer(n);
    TreeParams params;
    params.theta = theta;
    params.ncrit = ncrit;
    params.multipole = multipole;
    slot->solver = std::make_unique<tree::TreeSolver>(unused, params, GravityParams{});
    slot->plan = slot->solver->buildPlanOnly(slot->particles);
  }
  return *slot;
}

/// Common counters: interactions/s (rate over kernel time), GFLOP/s in both conventions, and the fractions of the
/// FP32 floor (float) or FP64 floor (double).
void reportRates(benchmark::State& state, const InteractionCounts& counts, double kernelSeconds, Precision precision) {
  const double interactions = double(counts.total()) * double(state.iterations());
  state.counters["interactions/s"] = benchmark::Counter(interactions, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s(20)"] =
      benchmark::Counter(interactions * kFlopsPerInteractionGpuGems * 1e-9, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s(38)"] =
      benchmark::Counter(interactions * kFlopsPerInteractionChamomile * 1e-9, benchmark::Counter::kIsRate);
  const double rate = kernelSeconds > 0 ? interactions / kernelSeconds : 0.0;
  if (precision == Precision::float32) {
    state.counters["floor%"] = 100.0 * rate / gpu::fp32FloorInteractionsPerSecond(gDevice);
    state.counters["issue%"] =
        100.0 * rate / gpu::fp32FloorInteractionsPerSecond(gDevice, gpu::kSassInstructionsPerInteraction);
  } else {
    state.counters["fp64floor%"] = 100.0 * rate / gpu::fp64FloorInteractionsPerSecond(gDevice);
  }
}

/// The forces a benchmark asks for: with the potential, or accelerations only (ForceView::pot null).
ForceView forcesOf(Particles& p, bool potential) {
  ForceView view = p.forces();
  if (!potential) view.pot = nullptr;
  return view;
}

void runDirect(benchmark::State& state, Precision precision, std::size_t n, gpu::CudaDirectConfig shape,
               bool potential) {
  CudaEngine& cuda = engine(precision);
  gpu::CudaKernelConfig config;
  config.autoDirect = false;
  config.direct = shape;
  cuda.setConfig(config);
  Particles p = plummer(n);
  {
    Particles warm = plummer(1024);  // loads this variant's module outside the timing
    cuda.evaluateDirect(warm.sources(), GravityParams{}, forcesOf(warm, potential));
  }
  InteractionCounts counts;
  double kernelSeconds = 0.0;
  for (auto _ : state) {
    counts = cuda.evaluateDirect(p.sources(), GravityParams{}, forcesOf(p, potential));
    const double seconds = cuda.lastKernelMilliseconds() * 1e-3;
    kernelSeconds += seconds;
    state.SetIterationTime(seconds);
  }
  reportRates(state, counts, kernelSeconds, precision);
  state.counters["splits"] = cuda.lastCallStats().numSplits;
  state.counters["blocks"] = double(cuda.lastCallStats().numTasks);
}

void runPlan(benchmark::State& state, Precision precision, std::size_t n, double theta, std::uint32_t ncrit,
             MultipoleOrder multipole, std::uint32_t tile, bool potential) {
  CudaEngine& cuda = engine(precision);
  gpu::CudaKernelConfig config;
  config.planTileSize = tile;
  cuda.setConfig(config);
  PlanCase& c = planCase(n, theta, ncrit, multipole);
  const CellMultipoles& cells = c.solver->octree().multipoles;
  cuda.evaluatePlan(c.particles.sources(), cells, c.plan, GravityParams{}, forcesOf(c.particles, potential));
  InteractionCounts counts;
  double kernelSeconds = 0.0, totalMilliseconds = 0.0;
  for (auto _ : state) {
    counts = cuda.evaluatePlan(c.particles.sources(), cells, c.plan, GravityParams{}, forcesOf(c.particles, potential));
    const double seconds = cuda.lastKernelMilliseconds() * 1e-3;
    kernelSeconds += seconds;
    totalMilliseconds += cuda.lastCallStats().totalMilliseconds;
    state.SetIterationTime(seconds);
  }
  reportRates(state, counts, kernelSeconds, precision);
  const gpu::CudaCallStats& stats = cuda.lastCallStats();
  state.counters["bb/body"] = double(counts.bodyBody) / double(n);
  state.counters["bc/body"] = double(counts.bodyCell) / double(n);
  state.counters["groups"] = double(c.plan.numGroups());
  state.counters["tasks"] = double(stats.numTasks);
  state.counters["call_ms"] = totalMilliseconds / double(state.iterations());  // uploads + kernels + downloads
  state.counters["MB_up"] = double(stats.bytesToDevice) * 1e-6;                // index lists + bodies + cells
  state.counters["MB_packed"] = double(stats.packedListBytes) * 1e-6;          // float4 lists instead
}

/// Issue slots per Hermite interaction (acceleration, jerk, potential, nearest neighbour) of the CUDA Hermite engine's
/// force kernel (gpu/cuda/hermite_cuda_engine.cu, hermiteForceKernel<1, true>), counted in its PTX (nvcc 13.0, sm_90;
/// cuobjdump was not at hand to count the SASS): 3 LDS.128 (the slot's hi, lo and velocity), 9 FP32 for the
/// double-single separation, 3 for |r|^2, 1 for + eps^2, a compare, a branch and the MUFU.RSQ (the s^2 >= FLT_MIN
/// rule; ptxas may predicate the branch away), 3 for
/// the velocity difference, 2 for the id test (compare, mass select), 3 for m/s and m/s^3, 5 for 3 (r.v) / s^2, 3 FFMA
/// for the pull, 9 for the jerk, 1 for the potential, 6 for the nearest neighbour (two compares, their and, two
/// selects, the slot index) = 51. kirin counts the same interaction as 60 flops (its Table 4); this is the FP32 floor
/// restated for it: 13/51 of DESIGN.md's monopole floor.
constexpr double kHermiteInstructionsPerInteraction = 51.0;

/// The Hermite engine on a Plummer sphere of nj bodies (in Hilbert order) with its first ni bodies as the i-block:
/// kirin's Table 4 (ni = nj = N, force + potential + jerk, kernel time) and the block-step case (small ni, large nj).
/// Time is the force and combine kernels' (CUDA events); call_ms adds the i-block's upload and the results' download
/// (the prediction of the j-particles is outside: once per block step, not per i-block).
void runHermite(benchmark::State& state, std::size_t ni, std::size_t nj, bool nearest) {
  gpu::HermiteCudaEngine engine;
  const Particles& bodies = plummer(nj);
  std::vector<JParticle> js(nj);
  std::vector<std::uint32_t> addresses(nj);
  for (std::size_t k = 0; k < nj; ++k) {
    js[k].mass = bodies.mass[k];
    js[k].id = static_cast<std::int64_t>(k);
    js[k].pos[0] = bodies.x[k], js[k].pos[1] = bodies.y[k], js[k].pos[2] = bodies.z[k];
    js[k].vel[0] = bodies.vx[k], js[k].vel[1] = bodies.vy[k], js[k].vel[2] = bodies.vz[k];
    addresses[k] = static_cast<std::uint32_t>(k);
  }
  engine.reserve(nj);
  engine.setJParticles(addresses, js);
  engine.predict(0.0, nj);
  std::vector<std::int64_t> ids(ni);
  std::vector<double> pos(3 * ni), vel(3 * ni), acc(3 * ni), jerk(3 * ni), pot(ni), distance2(ni);
  std::vector<std::int64_t> nearestId(ni);
  for (std::size_t i = 0; i < ni; ++i) {
    ids[i] = js[i].id;
    for (int d = 0; d < 3; ++d) {
      pos[3 * i + d] = js[i].pos[d];
      vel[3 * i + d] = js[i].vel[d];
    }
  }
  const IBlockView block{ids.data(), pos.data(), vel.data(), ni};
  const HermiteForceView out{
      acc.data(), jerk.data(), pot.data(), nearest ? nearestId.data() : nullptr, nearest ? distance2.data() : nullptr,
      ni};
  engine.launchForces(block, 0.0, out);  // warm-up: device buffers
  engine.finishForces();
  double kernelSeconds = 0.0, callSeconds = 0.0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    engine.launchForces(block, 1.0 / 65536, out);
    engine.finishForces();
    callSeconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double seconds = engine.lastCallStats().kernelMilliseconds * 1e-3;
    kernelSeconds += seconds;
    state.SetIterationTime(seconds);
  }
  const double interactions = double(ni) * double(nj) * double(state.iterations());
  state.counters["interactions/s"] = benchmark::Counter(interactions, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s(60)"] = benchmark::Counter(interactions * 60e-9, benchmark::Counter::kIsRate);
  state.counters["floor%"] = 100.0 * (interactions / kernelSeconds) /
                             gpu::fp32FloorInteractionsPerSecond(gDevice, kHermiteInstructionsPerInteraction);
  state.counters["call_ms"] = 1e3 * callSeconds / double(state.iterations());
  state.counters["splits"] = engine.lastCallStats().numSplits;
  state.counters["threads/i"] = engine.lastCallStats().threadsPerI;
}

void registerHermite(std::size_t ni, std::size_t nj, bool nearest = true) {
  const std::string name = "hermite/ni:" + std::to_string(ni) + "/nj:" + std::to_string(nj) + (nearest ? "" : "/no-nn");
  benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& state) { runHermite(state, ni, nj, nearest); })
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond)
      ->MinTime(0.05);
}

/// libmatcha_force's matcha_force (CUNBODY-1's force call) on a Plummer sphere, i = j = all N bodies, eps2 = 0.01 (the
/// paper's program): the call's wall time (uploads and the plan included), interactions/s over it with the paper's 38
/// flops, and E_max = max_i |a_i - a_ref,i| / |a_ref,i| against the CUDA engine's double direct sum (double precision
/// like the paper's host, computed once per N).
void runMatchaForce(benchmark::State& state, std::size_t n) {
  const Particles& bodies = plummer(n);
  std::vector<double> x(3 * n), m(bodies.mass), a(3 * n);
  for (std::size_t k = 0; k < n; ++k) {
    x[3 * k] = bodies.x[k], x[3 * k + 1] = bodies.y[k], x[3 * k + 2] = bodies.z[k];
  }
  const auto* xs = reinterpret_cast<const double(*)[3]>(x.data());
  auto* as = reinterpret_cast<double(*)[3]>(a.data());
  const int count = static_cast<int>(n);
  if (matcha_force(xs, m.data(), xs, 0.01, as, count, count) != MATCHA_FORCE_OK) {
    state.SkipWithError(matcha_force_last_error());
    return;
  }
  double seconds = 0.0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    matcha_force(xs, m.data(), xs, 0.01, as, count, count);
    const double call = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    seconds += call;
    state.SetIterationTime(call);
  }
  Particles reference = bodies;
  GravityParams gravity;
  gravity.eps = 0.1;
  engine(Precision::float64).evaluateDirect(reference.sources(), gravity, reference.forces());
  double eMax = 0.0;
  for (std::size_t k = 0; k < n; ++k) {
    const double error =
        std::hypot(a[3 * k] - reference.ax[k], a[3 * k + 1] - reference.ay[k], a[3 * k + 2] - reference.az[k]);
    eMax = std::max(eMax, error / std::hypot(reference.ax[k], reference.ay[k], reference.az[k]));
  }
  const double interactions = double(n) * double(n) * double(state.iterations());
  state.counters["interactions/s"] = benchmark::Counter(interactions, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s(38)"] = benchmark::Counter(interactions * 38e-9, benchmark::Counter::kIsRate);
  state.counters["E_max"] = eMax;
}

/// FP32 instructions per truncated (periodic short-range) body-body interaction, counted from the source
/// (pair_interaction.hpp; to be checked against the SASS): the nearest image, 7 per axis (a subtraction, then two
/// compare-add-select folds) = 21; r^2, r^2 + eps^2, the cut and zero-distance tests and their selects ~11 (with the
/// MUFU.RSQ and MUFU.SQRT); the factors ~16 (x and x^2, __expf = FMUL + MUFU.EX2, t = MUFU.RCP of an FFMA, the
/// degree-6 polynomial in 6 FFMA, two products for erfc, an FMUL and an FFMA for f); the pull ~9 (m/r, 1/r^3, times f,
/// three FFMA, the potential times g). About 57 against the open pair's 13: the floor falls 4.4x. Four MUFU per pair
/// (16 per SM and clock) stay under the FP32 pipe's limit (128 per SM and clock over 57).
constexpr double kTruncatedInstructionsPerInteraction = 57.0;

/// A periodic box and its short-range plan, built once per (N, multipole): a Plummer sphere (scale 1) centred in a box
/// of side 8, folded into it (a clustered box: the halo's outskirts wrap around), the command line's default split.
struct PeriodicCase : NearFieldEngine {
  Particles particles;
  CellMultipoles cells;
  GravityParams gravity;
  InteractionPlan plan;

  // Only to capture the solver's cells and plan: evaluatePlan copies the cells and evaluates nothing.
  std::string name() const override { return "plan capture"; }
  bool periodicShortRange() const override { return true; }
  InteractionCounts evaluatePlan(const SourceView&, const CellMultipoles& c, const InteractionPlan&,
                                 const GravityParams&, const ForceView&) override {
    cells = c;
    return {};
  }
  EngineTimings lastTimings() const override { return {}; }
  void setTree(const TreeTopology&, const SourceView&) override {}
  void setLists(const InteractionPlan&) override {}
  void dropLists() override {}
  void launchResident(const SourceView&, const GravityParams&, const ForceView&, std::span<const std::uint32_t>,
                      const BodyUpdate&) override {}
  ResidentResult finishResident() override { return {}; }
  void discardResident() override {}
  InteractionCounts evaluateDirect(const SourceView&, const GravityParams&, const ForceView&) override { return {}; }
};

PeriodicCase& periodicCase(std::size_t n, MultipoleOrder multipole) {
  static std::map<std::tuple<std::size_t, MultipoleOrder>, std::unique_ptr<PeriodicCase>> cache;
  auto& slot = cache[{n, multipole}];
  if (!slot) {
    slot = std::make_unique<PeriodicCase>();
    const double L = 8.0;
    slot->particles = plummer(n);
    Particles& p = slot->particles;
    for (std::size_t i = 0; i < p.size(); ++i) {
      p.x[i] += 0.5 * L;
      p.y[i] += 0.5 * L;
      p.z[i] += 0.5 * L;
    }
    wrapIntoBox(p, L);
    mesh::MeshParams mesh;
    mesh.boxSize = L;
    mesh.grid = mesh::defaultPmGrid(n, mesh);
    slot->gravity.eps = 1e-3 * L;
    slot->gravity.periodic = mesh::periodicSplit(mesh);
    TreeParams params;
    params.multipole = multipole;
    params.alpha = 0.0;  // theta alone: one pass, no accelerations needed
    tree::PeriodicTreeSolver solver(*slot, params, slot->gravity);
    solver.computeForces(p);  // sorts the bodies; the plan indexes them in that order
    slot->plan = solver.lastPlan();
  }
  return *slot;
}

/// The periodic short range (the truncated kernels) on periodicCase's plan; floor% against
/// kTruncatedInstructionsPerInteraction per interaction (the FP32 floor restated for the truncated pair).
void runPeriodicPlan(benchmark::State& state, std::size_t n, MultipoleOrder multipole) {
  CudaEngine& cuda = engine(Precision::float32);
  cuda.setConfig(gpu::CudaKernelConfig{});
  PeriodicCase& c = periodicCase(n, multipole);
  cuda.evaluatePlan(c.particles.sources(), c.cells, c.plan, c.gravity, c.particles.forces());
  InteractionCounts counts;
  double kernelSeconds = 0.0;
  for (auto _ : state) {
    counts = cuda.evaluatePlan(c.particles.sources(), c.cells, c.plan, c.gravity, c.particles.forces());
    const double seconds = cuda.lastKernelMilliseconds() * 1e-3;
    kernelSeconds += seconds;
    state.SetIterationTime(seconds);
  }
  const double interactions = double(counts.total()) * double(state.iterations());
  state.counters["interactions/s"] = benchmark::Counter(interactions, benchmark::Counter::kIsRate);
  const double rate = kernelSeconds > 0 ? interactions / kernelSeconds : 0.0;
  state.counters["floor%"] =
      100.0 * rate / gpu::fp32FloorInteractionsPerSecond(gDevice, kTruncatedInstructionsPerInteraction);
  state.counters["open_floor%"] = 100.0 * rate / gpu::fp32FloorInteractionsPerSecond(gDevice);
  state.counters["bb/body"] = double(counts.bodyBody) / double(n);
  state.counters["bc/body"] = double(counts.bodyCell) / double(n);
  state.counters["tasks"] = double(cuda.lastCallStats().numTasks);
}

void registerPeriodicPlan(std::size_t n, MultipoleOrder multipole) {
  char name[160];
  std::snprintf(name, sizeof name, "plan/float/periodic/PlummerInBox/N:%zu/%s/p64", n, toString(multipole).c_str());
  benchmark::RegisterBenchmark(name, [=](benchmark::State& state) { runPeriodicPlan(state, n, multipole); })
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond)
      ->MinTime(0.05);
}

/// The bodies of a PM row, in Morton order as the tree solver leaves them (bench_cpu's BM_ParticleMesh): uniform in
/// the unit box, or a Plummer sphere of scale 0.05 centred in it (clustered: the deposit's atomics collide most).
const Particles& meshBodies(std::size_t n, bool clustered) {
  static std::map<std::pair<std::size_t, bool>, Particles> cache;
  auto found = cache.find({n, clustered});
  if (found == cache.end()) {
    Particles p(n);
    if (clustered) {
      ic::PlummerParams params;
      params.numBodies = n;
      params.seed = 12345;
      p = ic::makePlummer(params);
      for (auto* coordinate : {&p.x, &p.y, &p.z}) {
        for (double& value : *coordinate) value = 0.5 + 0.05 * value;
      }
    } else {
      std::mt19937_64 random(12345);
      for (std::size_t i = 0; i < n; ++i) {
        p.x[i] = std::generate_canonical<double, 64>(random);
        p.y[i] = std::generate_canonical<double, 64>(random);
        p.z[i] = std::generate_canonical<double, 64>(random);
        p.mass[i] = 1.0 / double(n);
      }
    }
    std::vector<std::uint64_t> keys;
    tree::computeMortonKeys(p.sources(), tree::computeBoundingCube(p.sources()), keys);
    p.permute(tree::sortByKey(keys));
    found = cache.emplace(std::make_pair(n, clustered), std::move(p)).first;
  }
  return found->second;
}

/// The particle mesh alone on the GPU (ParticleMesh's cuFFT backend, double): one addLongRange with accelerations and
/// potentials, timed by its CUDA events from the upload of the bodies to the download of the results (the manual
/// time); each stage in ms as a counter, and wall_ms, the whole call as the host sees it (the host's final additions
/// included). bench_cpu's BM_ParticleMesh is the FFTW backend on the same bodies (uniform, N = grid^3 / 8) for the
/// ratio.
void runParticleMesh(benchmark::State& state, int grid, std::size_t n, bool clustered, mesh::MeshGradient gradient,
                     bool interlace) {
  mesh::MeshParams params;
  params.grid = grid;
  params.gradient = gradient;
  params.interlace = interlace;
  params.backend = mesh::MeshBackend::cufft;
  Particles p = meshBodies(n, clustered);
  mesh::ParticleMesh pm(params);
  pm.addLongRange(p.sources(), GravityParams{}, p.forces());  // untimed: allocations, cuFFT's first launches
  mesh::MeshStageSeconds sum;
  double wall = 0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    pm.addLongRange(p.sources(), GravityParams{}, p.forces());
    wall += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const mesh::MeshStageSeconds stages = pm.lastStageSeconds();
    for (auto [total, part] : {std::pair{&sum.upload, stages.upload}, std::pair{&sum.assignment, stages.assignment},
                               std::pair{&sum.fft, stages.fft}, std::pair{&sum.green, stages.green},
                               std::pair{&sum.interpolate, stages.interpolate},
                               std::pair{&sum.download, stages.download}, std::pair{&sum.total, stages.total}}) {
      *total += part;
    }
    state.SetIterationTime(stages.total);
  }
  const double perCall = 1e3 / double(state.iterations());
  state.counters["upload_ms"] = sum.upload * perCall;
  state.counters["assign_ms"] = sum.assignment * perCall;
  state.counters["fft_ms"] = sum.fft * perCall;
  state.counters["green_ms"] = sum.green * perCall;
  state.counters["interp_ms"] = sum.interpolate * perCall;
  state.counters["download_ms"] = sum.download * perCall;
  state.counters["gpu_ms"] = (sum.total - sum.upload - sum.download) * perCall;
  state.counters["wall_ms"] = wall * perCall;
  state.counters["bodies/s"] = benchmark::Counter(double(n) * double(state.iterations()), benchmark::Counter::kIsRate);
}

void registerParticleMesh(int grid, std::size_t n, bool clustered, mesh::MeshGradient gradient, bool interlace) {
  char name[160];
  std::snprintf(name, sizeof name, "pm/cufft/%s/grid:%d/N:%zu/tsc/%s/interlace:%d",
                clustered ? "PlummerInBox" : "uniform", grid, n, mesh::toString(gradient).c_str(), interlace ? 1 : 0);
  benchmark::RegisterBenchmark(
      name, [=](benchmark::State& state) { runParticleMesh(state, grid, n, clustered, gradient, interlace); })
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond)
      ->MinTime(0.2);
}

/// The bare GPU Gems loop (bare_direct_loop.hpp) on the same bodies: what this GPU's issue rate allows a float
/// interaction, the ceiling the direct kernel is measured against (its accuracy work costs the difference).
void runBareLoop(benchmark::State& state, std::size_t n, gpu::BareLoopShape shape, bool potential) {
  static gpu::BareDirectLoop loop;
  Particles p = plummer(n);
  {
    Particles warm = plummer(1024);  // loads the variant's module outside the timing
    loop.evaluate(shape, warm.sources(), GravityParams{}, forcesOf(warm, potential));
  }
  gpu::BareLoopStats stats;
  double kernelSeconds = 0.0;
  for (auto _ : state) {
    stats = loop.evaluate(shape, p.sources(), GravityParams{}, forcesOf(p, potential));
    const double seconds = stats.kernelMilliseconds * 1e-3;
    kernelSeconds += seconds;
    state.SetIterationTime(seconds);
  }
  reportRates(state, InteractionCounts{stats.interactions, 0}, kernelSeconds, Precision::float32);
  state.counters["splits"] = stats.numSplits;
}

void registerBareLoop(std::size_t n, const gpu::BareLoopShape& shape, bool potential) {
  const std::string name =
      "bare/float/N:" + std::to_string(n) + "/" + shape.label() + (potential ? std::string() : std::string("/acc"));
  benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& state) { runBareLoop(state, n, shape, potential); })
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond)
      ->MinTime(0.05);
}

/// Accelerations-only benchmarks end in /acc (what a leapfrog step needs, and what GPU Gems and the CUDA SDK sample
/// compute).
std::string directName(Precision precision, std::size_t n, const gpu::CudaDirectConfig& shape, bool potential) {
  const std::string splits = shape.numSplits != 0 ? "/s:" + std::to_string(shape.numSplits) : "";
  return std::string("direct/") + (precision == Precision::float32 ? "float" : "double") + "/N:" + std::to_string(n) +
         "/" + shape.label() + splits + (potential ? "" : "/acc");
}

void registerDirect(Precision precision, std::size_t n, const gpu::CudaDirectConfig& shape, bool potential = true) {
  benchmark::RegisterBenchmark(directName(precision, n, shape, potential).c_str(),
                               [=](benchmark::State& state) { runDirect(state, precision, n, shape, potential); })
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond)
      ->MinTime(0.05);
}

/// Monopole plans measure the kernel against the FP32 floor (issue 3's target is for monopole interactions);
/// quadrupole plans, the default, cost ~2.3x per body-cell interaction and count one interaction per cell.
void registerPlan(Precision precision, std::size_t n, double theta, std::uint32_t ncrit, MultipoleOrder multipole,
                  std::uint32_t tile, bool potential = true) {
  char name[160];
  std::snprintf(name, sizeof name, "plan/%s/Plummer/N:%zu/theta:%.2f/ncrit:%u/%s/p%u%s",
                precision == Precision::float32 ? "float" : "double", n, theta, ncrit, toString(multipole).c_str(),
                tile, potential ? "" : "/acc");
  benchmark::RegisterBenchmark(
      name, [=](benchmark::State& state) { runPlan(state, precision, n, theta, ncrit, multipole, tile, potential); })
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond)
      ->MinTime(0.05);
}

/// Where runKeySort sorts: on the host's cores, on the device from ordinary (pageable) memory through the engine's
/// staging buffers, or on the device from and into the engine's page-locked transfer memory (the periodic solver's).
enum class KeySortPlace { host, device, deviceLocked };

/// The tree's key sort (NearFieldEngine::sortKeys) on the device, transfers included, against the host's KeySorter on
/// all cores: Plummer Morton keys as a tree built from the last tree's order sees them (sorted, then every body moved
/// by v dt, dt = 1/128). Wall time per sort; counter: keys per second.
void runKeySort(benchmark::State& state, std::size_t n, KeySortPlace place) {
  Particles p = plummer(n);
  const auto mortonKeys = [&] {
    std::vector<std::uint64_t> keys;
    tree::computeMortonKeys(p.sources(), tree::computeBoundingCube(p.sources()), keys);
    return keys;
  };
  std::vector<std::uint64_t> initialKeys = mortonKeys();
  p.permute(tree::sortByKey(initialKeys));
  for (std::size_t i = 0; i < n; ++i) {
    p.x[i] += p.vx[i] / 128.0;
    p.y[i] += p.vy[i] / 128.0;
    p.z[i] += p.vz[i] / 128.0;
  }
  CudaEngine& cuda = engine(Precision::float32);
  std::pmr::memory_resource* memory =
      place == KeySortPlace::deviceLocked ? cuda.transferMemory() : std::pmr::new_delete_resource();
  const std::vector<std::uint64_t> computed = mortonKeys();
  const std::pmr::vector<std::uint64_t> keys(computed.begin(), computed.end(), memory);
  std::pmr::vector<std::uint64_t> sorted(n, memory);
  std::pmr::vector<std::uint32_t> order(n, memory);
  tree::KeySorter host;
  const auto sort = [&] {
    if (place == KeySortPlace::host) {
      host.sort(keys, std::span<std::uint64_t>(sorted), std::span<std::uint32_t>(order));
    } else if (!cuda.sortKeys(keys, 3 * tree::kMaxLevel, sorted, order)) {
      state.SkipWithError("the engine did not sort");
    }
  };
  sort();  // the first sort allocates
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    sort();
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  state.counters["keys/s"] = benchmark::Counter(double(n) * double(state.iterations()), benchmark::Counter::kIsRate);
}

void registerAll() {
  for (int log2n = 16; log2n <= 24; log2n += 2) {
    for (const KeySortPlace place : {KeySortPlace::device, KeySortPlace::deviceLocked, KeySortPlace::host}) {
      const std::size_t n = std::size_t{1} << log2n;
      const char* where = place == KeySortPlace::host     ? "host"
                          : place == KeySortPlace::device ? "device"
                                                          : "device-locked";
      const std::string name = std::string("keysort/") + where + "/N:" + std::to_string(n);
      benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& state) { runKeySort(state, n, place); })
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond)
          ->MinTime(0.1);
    }
  }
  // The Hermite engine (issue 18): kirin's Table 4 (ni = nj = N, 2^10 ... 2^20), the block-step case (small i-blocks
  // on 2^16 and 2^20 j-particles: GRAPE-6's 48 pipes, the libraries' 256, 1024), the nearest-neighbour search's cost.
  for (int log2n = 10; log2n <= 20; log2n += 2) registerHermite(std::size_t{1} << log2n, std::size_t{1} << log2n);
  for (const std::size_t nj : {std::size_t{1} << 16, std::size_t{1} << 20}) {
    for (const std::size_t ni : {std::size_t{1}, std::size_t{48}, std::size_t{256}, std::size_t{1024}}) {
      registerHermite(ni, nj);
    }
  }
  registerHermite(std::size_t{1} << 16, std::size_t{1} << 16, false);
  // libmatcha_force's E_max and speed beside CUNBODY-1's Table 2 and 3 (N = 2048 ... 131072) and the force-only
  // throughput beside kirin's Table 3 (N = 1024 ... 2^20, the paper's 38 flops).
  for (int log2n = 10; log2n <= 20; ++log2n) {
    const std::size_t n = std::size_t{1} << log2n;
    benchmark::RegisterBenchmark(("cunbody/matcha_force/N:" + std::to_string(n)).c_str(),
                                 [=](benchmark::State& state) { runMatchaForce(state, n); })
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond)
        ->MinTime(0.05);
  }
  // Direct, float: every shape for N = 2^12 ... 2^20, the engine's own choice at 2^22 (9 s a call on an H100).
  const auto floatShapes = CudaEngine::supportedDirectConfigs(Precision::float32);
  for (int log2n = 12; log2n <= 20; log2n += 2) {
    for (const auto& shape : floatShapes) {
      if (log2n == 20 && shape.threadsPerBody != 1) continue;  // q > 1 is for small N
      for (const bool potential : {true, false})
        registerDirect(Precision::float32, std::size_t{1} << log2n, shape, potential);
    }
  }
  // The engine's shape at 2^14 with the j-range split by hand (s:), against its own choice of splits.
  for (const std::uint32_t splits : {4u, 8u, 16u, 32u}) {
    gpu::CudaDirectConfig shape = engine(Precision::float32).directConfigFor(std::size_t{1} << 14);
    shape.numSplits = splits;
    registerDirect(Precision::float32, std::size_t{1} << 14, shape);
  }
  for (const bool potential : {true, false}) {
    registerDirect(Precision::float32, std::size_t{1} << 22,
                   engine(Precision::float32).directConfigFor(std::size_t{1} << 22), potential);
  }
  // The bare loop's ceiling at 2^20, every compiled shape.
  for (const auto& shape : gpu::BareDirectLoop::supportedShapes()) {
    for (const bool potential : {true, false}) registerBareLoop(std::size_t{1} << 20, shape, potential);
  }
  // Direct, double: every shape at 2^16 and 2^18, the auto shape at 2^20.
  for (int log2n = 16; log2n <= 18; log2n += 2) {
    for (const auto& shape : CudaEngine::supportedDirectConfigs(Precision::float64)) {
      registerDirect(Precision::float64, std::size_t{1} << log2n, shape);
    }
  }
  CudaEngine& reference = engine(Precision::float64);
  registerDirect(Precision::float64, std::size_t{1} << 20, reference.directConfigFor(std::size_t{1} << 20));
  // Group x list on the Plummer 2^20 plans (and a 2^14 one, small enough for the smoke test).
  registerPlan(Precision::float32, std::size_t{1} << 14, 0.5, 64, MultipoleOrder::quadrupole, 64);
  for (const MultipoleOrder multipole : {MultipoleOrder::monopole, MultipoleOrder::quadrupole}) {
    for (std::uint32_t ncrit = 16; ncrit <= 4096; ncrit *= 2) {
      for (const std::uint32_t tile : CudaEngine::supportedPlanTileSizes(Precision::float32)) {
        if (tile != 64 && ncrit != 64 && ncrit != 256 && ncrit != 1024) continue;
        registerPlan(Precision::float32, std::size_t{1} << 20, 0.5, ncrit, multipole, tile);
        if (tile == 64) registerPlan(Precision::float32, std::size_t{1} << 20, 0.5, ncrit, multipole, tile, false);
      }
    }
  }
  // The PM part on its own (issue 15): 256^3 and 512^3 meshes with N = grid^3 / 8 (2^21, 2^24), uniform and clustered,
  // the defaults (TSC, Fourier gradient, interlaced) and the cheaper four-point gradient; 64^3 for the smoke test.
  registerParticleMesh(64, std::size_t{1} << 15, false, mesh::MeshGradient::fourier, true);
  for (const auto& [grid, n] : {std::pair{256, std::size_t{1} << 21}, std::pair{512, std::size_t{1} << 24}}) {
    for (const bool clustered : {false, true})
      registerParticleMesh(grid, n, clustered, mesh::MeshGradient::fourier, true);
    registerParticleMesh(grid, n, false, mesh::MeshGradient::finiteDifference, true);
    registerParticleMesh(grid, n, false, mesh::MeshGradient::fourier, false);
  }
  // The periodic short range (TreePM's tree part) with the defaults (theta 0.5, ncrit 64), at 2^14 for the smoke test.
  registerPeriodicPlan(std::size_t{1} << 14, MultipoleOrder::quadrupole);
  for (const MultipoleOrder multipole : {MultipoleOrder::monopole, MultipoleOrder::quadrupole}) {
    registerPeriodicPlan(std::size_t{1} << 20, multipole);
  }
}

}  // namespace

int main(int argc, char** argv) {
  gDevice = gpu::queryCudaDevice();
  if (!gDevice.available) {
    std::printf("no CUDA device: skipping (%s)\n", gDevice.description.c_str());
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  char text[256];
  benchmark::AddCustomContext("gpu", gDevice.description);
  std::snprintf(text, sizeof text, "%.4g interactions/s (%.0f instructions each)",
                gpu::fp32FloorInteractionsPerSecond(gDevice), gpu::kDesignInstructionsPerInteraction);
  benchmark::AddCustomContext("fp32_floor_design", text);
  std::snprintf(text, sizeof text, "%.4g interactions/s (%.2f instructions each, SASS)",
                gpu::fp32FloorInteractionsPerSecond(gDevice, gpu::kSassInstructionsPerInteraction),
                gpu::kSassInstructionsPerInteraction);
  benchmark::AddCustomContext("fp32_floor_sass", text);
  std::snprintf(text, sizeof text, "%.4g interactions/s (%.1f FP64 instructions each)",
                gpu::fp64FloorInteractionsPerSecond(gDevice), gpu::kSassFp64InstructionsPerInteraction);
  benchmark::AddCustomContext("fp64_floor", text);
  std::snprintf(text, sizeof text, "%.4g interactions/s (%.0f instructions each, counted)",
                gpu::fp32FloorInteractionsPerSecond(gDevice, kTruncatedInstructionsPerInteraction),
                kTruncatedInstructionsPerInteraction);
  benchmark::AddCustomContext("fp32_floor_truncated", text);
  std::snprintf(text, sizeof text, "%.4g interactions/s (%.0f instructions each, PTX)",
                gpu::fp32FloorInteractionsPerSecond(gDevice, kHermiteInstructionsPerInteraction),
                kHermiteInstructionsPerInteraction);
  benchmark::AddCustomContext("fp32_floor_hermite", text);
  registerAll();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
