// SPDX-License-Identifier: MIT
// CPU engine and solver rates: direct summation (float and double) and the treecode at the same N, so the tree's
// speed-up over direct is a ratio measured in one run. Rates are counters (interactions/s); names carry N, theta
// and ncrit. Run by scripts/bench.sh; a tiny-size smoke run is a ctest.
#include <benchmark/benchmark.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "matcha/core/pair_interaction.hpp"
#include "matcha/core/stopwatch.hpp"
#include "matcha/gpu/cpu_engine.hpp"
#include "matcha/gpu/hermite_cpu_engine.hpp"
#include "matcha/ic/periodic_boxes.hpp"
#include "matcha/ic/plummer.hpp"
#include "matcha/mesh/particle_mesh.hpp"
#include "matcha/mesh/treepm_solver.hpp"
#include "matcha/tree/periodic_tree_solver.hpp"
#include "matcha/tree/space_filling_curve.hpp"
#include "matcha/tree/tree_solver.hpp"
#include "matcha/tree/walk.hpp"

namespace {

using namespace matcha;

Particles plummer(std::int64_t n) {
  ic::PlummerParams params;
  params.numBodies = static_cast<std::size_t>(n);
  params.seed = 12345;
  return ic::makePlummer(params);
}

/// Accelerations for the relative test to scale by, from a cheap tree (monopoles at theta 0.8): close enough for
/// the test's tolerances, as the solver's own estimate pass.
void setRoughAccelerations(Particles& p) {
  gpu::CpuEngine engine(gpu::Precision::float32);
  TreeParams rough;
  rough.theta = 0.8;
  rough.alpha = 0.0;
  rough.multipole = MultipoleOrder::monopole;
  tree::TreeSolver(engine, rough, GravityParams{}).computeForces(p);
}

void reportRates(benchmark::State& state, const InteractionCounts& counts) {
  const double interactions = double(counts.total()) * double(state.iterations());
  state.counters["interactions/s"] = benchmark::Counter(interactions, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s(20)"] =
      benchmark::Counter(interactions * kFlopsPerInteractionGpuGems * 1e-9, benchmark::Counter::kIsRate);
  state.counters["bb/body"] = double(counts.bodyBody) / double(state.range(0));
  state.counters["bc/body"] = double(counts.bodyCell) / double(state.range(0));
}

void BM_DirectCpu(benchmark::State& state, gpu::Precision precision) {
  Particles p = plummer(state.range(0));
  gpu::CpuEngine engine(precision);
  InteractionCounts counts;
  for (auto _ : state) counts = engine.evaluateDirect(p.sources(), GravityParams{}, p.forces());
  reportRates(state, counts);
}

/// The CPU Hermite engine (double, TBB over the i-particles): acceleration, jerk, potential and nearest neighbour of
/// all N bodies of a Plummer sphere from all N (kirin's Table 4 set-up, 60 flops an interaction in its convention).
void BM_HermiteCpu(benchmark::State& state) {
  const Particles p = plummer(state.range(0));
  const std::size_t n = p.size();
  std::vector<JParticle> js(n);
  std::vector<std::uint32_t> addresses(n);
  std::vector<std::int64_t> ids(n), nearestId(n);
  std::vector<double> pos(3 * n), vel(3 * n), acc(3 * n), jerk(3 * n), pot(n), distance2(n);
  for (std::size_t k = 0; k < n; ++k) {
    const double x[3] = {p.x[k], p.y[k], p.z[k]}, v[3] = {p.vx[k], p.vy[k], p.vz[k]};
    js[k].mass = p.mass[k];
    js[k].id = ids[k] = static_cast<std::int64_t>(k);
    addresses[k] = static_cast<std::uint32_t>(k);
    for (int d = 0; d < 3; ++d) {
      js[k].pos[d] = pos[3 * k + d] = x[d];
      js[k].vel[d] = vel[3 * k + d] = v[d];
    }
  }
  gpu::HermiteCpuEngine engine;
  engine.reserve(n);
  engine.setJParticles(addresses, js);
  engine.predict(0.0, n);
  for (auto _ : state) {
    engine.launchForces({ids.data(), pos.data(), vel.data(), n}, 1.0 / 65536,
                        {acc.data(), jerk.data(), pot.data(), nearestId.data(), distance2.data(), n});
    engine.finishForces();
  }
  const double interactions = double(n) * double(n) * double(state.iterations());
  state.counters["interactions/s"] = benchmark::Counter(interactions, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s(60)"] = benchmark::Counter(interactions * 60e-9, benchmark::Counter::kIsRate);
}

// Args: N, theta * 100, ncrit.
void BM_TreeCpu(benchmark::State& state) {
  Particles p = plummer(state.range(0));
  gpu::CpuEngine engine(gpu::Precision::float32);
  TreeParams params;
  params.theta = double(state.range(1)) / 100.0;
  params.ncrit = static_cast<std::uint32_t>(state.range(2));
  tree::TreeSolver solver(engine, params, GravityParams{});
  ForceReport report;
  double treeSeconds = 0, walkSeconds = 0, engineSeconds = 0;
  for (auto _ : state) {
    report = solver.computeForces(p);
    treeSeconds += report.timings.treeSeconds();
    walkSeconds += report.timings[Phase::walk];
    engineSeconds += report.timings.engineSeconds();
  }
  reportRates(state, report.counts);
  const double total = treeSeconds + walkSeconds + engineSeconds;
  state.counters["build%"] = 100.0 * treeSeconds / total;
  state.counters["walk%"] = 100.0 * walkSeconds / total;
  state.counters["engine%"] = 100.0 * engineSeconds / total;
}

// The CPU side of a GPU force call, which dominates it at large N: sort, tree, groups and the walk of every group into
// one plan (TreeSolver::buildPlanOnly), with theta alone and with the relative opening test. Args: N, alpha * 1e4.
void BM_TreeBuildAndWalk(benchmark::State& state) {
  Particles p = plummer(state.range(0));
  TreeParams params;
  params.alpha = double(state.range(1)) * 1e-4;
  setRoughAccelerations(p);
  gpu::CpuEngine unused(gpu::Precision::float32);
  tree::TreeSolver solver(unused, params, GravityParams{});
  std::uint64_t entries = 0;
  for (auto _ : state) {
    const InteractionPlan& plan = solver.buildPlanOnly(p);
    entries = plan.cellList.size() + plan.bodyList.size();
    benchmark::DoNotOptimize(plan.cellList.data());
  }
  state.counters["bodies/s"] =
      benchmark::Counter(double(state.range(0)) * double(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["entries/group"] = double(entries) / double(solver.groups().size());
}

/// The tree phases' milliseconds of a benchmark's repeated builds (BM_TreePhases, BM_PeriodicTreePhases): lap(k)
/// adds the time since the build's start or its last lap to phase k; report() sets the counters per iteration.
// Each phase's mean over the iterations, and its fastest lap (`best_` counters): on a shared machine other tenants
// only ever add time, so the fastest of a dozen laps is the steadier measure of one phase's own cost (two runs of the
// same binary minutes apart on the 2-core build machine: means 20-60% apart per phase, fastest laps 5-10%).
struct TreePhaseLaps {
  static constexpr int kPhases = 6;
  std::array<double, kPhases> seconds{};
  std::array<double, kPhases> fastest{1e300, 1e300, 1e300, 1e300, 1e300, 1e300};
  Stopwatch clock;
  void start() { clock.restart(); }
  void lap(int phase) {
    const double lapSeconds = clock.seconds();
    seconds[phase] += lapSeconds;
    fastest[phase] = std::min(fastest[phase], lapSeconds);
    clock.restart();
  }
  void report(benchmark::State& state, const InteractionPlan& plan, std::size_t numBodies,
              std::size_t numGroups) const {
    const char* names[kPhases] = {"keys_ms", "sort_ms", "octree_ms", "multipoles_ms", "groups_ms", "walk_ms"};
    for (int phase = 0; phase < kPhases; ++phase) {
      state.counters[names[phase]] = 1e3 * seconds[phase] / double(state.iterations());
      state.counters[std::string("best_") + names[phase]] = 1e3 * fastest[phase];
    }
    state.counters["entries/group"] = double(plan.cellList.size() + plan.bodyList.size()) / double(numGroups);
    state.counters["bodies/group"] = double(numBodies) / double(numGroups);
  }
};

// The CPU side of a tree build, phase by phase, on 1, 2, 4, ... threads (tbb::global_control): how each phase scales
// from one core to all of them (the Speed issue). Plummer N, theta 0.5, quadrupole cells, the default ncrit and nleaf,
// the relative test scaled by accelerations from a cheap tree. Counters: milliseconds per phase (keys, sort = the key
// sort and the bodies' permutation, octree, multipoles, groups = groups and the walk tree, walk = every group's
// list). The bodies are perturbed a little before each build, as one step moves them. Args: N, threads.
void BM_TreePhases(benchmark::State& state) {
  const auto numThreads = static_cast<std::size_t>(state.range(1));
  tbb::global_control threads(tbb::global_control::max_allowed_parallelism, numThreads);
  Particles p = plummer(state.range(0));
  setRoughAccelerations(p);
  const TreeParams params;
  tree::KeySorter sorter;
  tree::BodyPermuter permuter;
  std::vector<std::uint64_t> keys, sorted;
  std::vector<std::uint32_t> order;
  tree::Octree octree;
  tree::Groups groups;
  tree::WalkTree walkTree;
  tree::PlanBuilder builder;
  InteractionPlan plan;
  TreePhaseLaps laps;
  const auto build = [&] {
    for (std::size_t i = 0; i < p.size(); ++i) {
      p.x[i] += p.vx[i] / 128.0;
      p.y[i] += p.vy[i] / 128.0;
      p.z[i] += p.vz[i] / 128.0;
    }
    laps.start();
    const tree::Cube cube = tree::computeBoundingCube(p.sources());
    tree::computeMortonKeys(p.sources(), cube, keys);
    laps.lap(0);
    sorter.sort(keys, sorted, order);
    permuter.permute(p, order);
    laps.lap(1);
    tree::buildOctree(sorted, cube, params.nleaf, octree);
    laps.lap(2);
    tree::computeMultipoles(p.sources(), params.theta, params.multipole, octree);
    laps.lap(3);
    tree::makeGroups(octree, p.sources(), params.ncrit, groups);
    tree::setRelativeTolerances(p, params.alpha, GravityParams{}.G, groups);
    tree::buildWalkTree(octree, walkTree);
    laps.lap(4);
    builder.build(walkTree, groups, 0, static_cast<std::uint32_t>(groups.size()), plan);
    laps.lap(5);
  };
  build();  // untimed: the first build takes the first-touch page faults of every buffer
  laps = TreePhaseLaps{};
  for (auto _ : state) build();
  laps.report(state, plan, p.size(), groups.size());
}

// The periodic short range's tree as a step that builds makes it (tree/periodic_tree_solver.cpp, buildAndEvaluate),
// engine aside: keys over the box, the sort, the octree, multipoles over bodies as balls (each body's ball 1% of r_cut,
// as a reused tree's of a comoving box early on), the groups (boxes of the balls, relative tolerances, the periodic
// walk tree) and the walk of every group. On `matcha ic clumps`' box of N bodies, r_cut for a 2 N^(1/3) mesh, a
// periodic run's opening defaults (tree::periodicDefaultTreeParams); the bodies drift between builds. Counters: ms per
// phase. Args: N, threads.
void BM_PeriodicTreePhases(benchmark::State& state) {
  const auto numThreads = static_cast<std::size_t>(state.range(1));
  tbb::global_control threads(tbb::global_control::max_allowed_parallelism, numThreads);
  ic::ClumpsParams clumps;
  clumps.numBodies = static_cast<std::size_t>(state.range(0));
  clumps.seed = 7;
  Particles p = ic::makeClumps(clumps);
  setRoughAccelerations(p);
  wrapIntoBox(p, clumps.boxSize);
  mesh::MeshParams meshParams;
  meshParams.boxSize = clumps.boxSize;
  meshParams.grid = mesh::defaultPmGrid(p.size(), meshParams);
  GravityParams gravity;
  gravity.periodic = mesh::periodicSplit(meshParams);
  const TreeParams params = tree::periodicDefaultTreeParams();
  const std::vector<float> radius(p.size(), static_cast<float>(0.01 * gravity.periodic.cutoffRadius));
  std::vector<float> sortedRadius(p.size());
  std::vector<double> sortedMagnitudes;
  tree::KeySorter sorter;
  tree::BodyPermuter permuter;
  std::vector<std::uint64_t> keys, sorted;
  std::vector<std::uint32_t> order;
  tree::Octree octree;
  tree::Groups groups;
  tree::WalkTree walkTree;
  tree::PlanBuilder builder;
  InteractionPlan plan;
  TreePhaseLaps laps;
  bool firstBuild = true;
  const auto build = [&] {
    for (std::size_t i = 0; i < p.size(); ++i) {
      p.x[i] = wrapIntoBox(p.x[i] + 1e-4 * p.vx[i], clumps.boxSize);
      p.y[i] = wrapIntoBox(p.y[i] + 1e-4 * p.vy[i], clumps.boxSize);
      p.z[i] = wrapIntoBox(p.z[i] + 1e-4 * p.vz[i], clumps.boxSize);
      if (!firstBuild) {
        // The engine's new forces, in the last build's order: the magnitudes as they were (untimed).
        p.ax[i] = sortedMagnitudes[i];
        p.ay[i] = p.az[i] = 0.0;
      }
    }
    firstBuild = false;
    laps.start();
    tree::Cube cube;
    cube.side = clumps.boxSize;
    tree::computeMortonKeys(p.sources(), cube, keys);
    laps.lap(0);
    sorter.sort(keys, sorted, order);
    // As the solver permutes where every body gets new forces (periodic_tree_solver.cpp, buildAndEvaluate).
    permuter.permuteAllButForces(p, order, sortedMagnitudes);
    laps.lap(1);
    tbb::parallel_for(std::size_t{0}, p.size(), [&](std::size_t k) { sortedRadius[k] = radius[order[k]]; });
    tree::buildOctree(sorted, cube, params.nleaf, octree);
    laps.lap(2);
    tree::computeMultipoles(p.sources(), params.theta, params.multipole, octree, sortedRadius.data());
    laps.lap(3);
    tree::makeGroups(octree, p.sources(), params.ncrit, groups);
    tree::setGroupBoxesOfBalls(p.sources(), sortedRadius.data(), groups);
    tree::setRelativeTolerances(std::span<const double>(sortedMagnitudes), params.alpha, gravity.G, groups);
    tree::buildWalkTree(octree, walkTree, gravity.periodic);
    laps.lap(4);
    builder.build(walkTree, groups, 0, static_cast<std::uint32_t>(groups.size()), plan);
    laps.lap(5);
  };
  build();  // untimed: the first build takes the first-touch page faults of every buffer
  laps = TreePhaseLaps{};
  for (auto _ : state) build();
  laps.report(state, plan, p.size(), groups.size());
}

// What the host's cores deliver together: each of 64 x threads independent chunks runs eight dependent chains of
// multiply-adds in registers (no memory traffic), so the rate over threads says how many cores really run in
// parallel (a virtual machine's cores may be shared). Counter: multiply-adds per second. Args: threads.
void BM_ParallelArithmetic(benchmark::State& state) {
  const auto numThreads = static_cast<std::size_t>(state.range(0));
  tbb::global_control threads(tbb::global_control::max_allowed_parallelism, numThreads);
  constexpr int kSteps = 1 << 20;
  const std::size_t numChunks = 64 * numThreads;
  std::vector<double> sinks(numChunks);
  for (auto _ : state) {
    tbb::parallel_for(std::size_t{0}, numChunks, [&](std::size_t chunk) {
      double a[8];
      for (int k = 0; k < 8; ++k) a[k] = 1.0 + 1e-9 * double(chunk + k);
      for (int step = 0; step < kSteps; ++step) {
        for (double& value : a) value = value * 0.999999999 + 1e-9;
      }
      double sum = 0.0;
      for (const double value : a) sum += value;
      sinks[chunk] = sum;
    });
    benchmark::DoNotOptimize(sinks.data());
  }
  state.counters["fma/s"] =
      benchmark::Counter(double(numChunks) * 8.0 * kSteps * double(state.iterations()), benchmark::Counter::kIsRate);
}

// One particle-mesh evaluation (mesh/particle_mesh.hpp: long-range accelerations and potentials, the transforms
// included) with N = grid^3 / 8 bodies (defaultPmGrid's two mesh cells per mean spacing), uniform in the box and in
// Morton order, as the tree solver keeps them (random order is ~1.5x slower at 128^3: cache misses of the deposit and
// the interpolation). Args: grid, fd (0: Fourier gradient, 1: four-point differences), interlace (0 or 1).
void BM_ParticleMesh(benchmark::State& state) {
  mesh::MeshParams params;
  params.grid = static_cast<int>(state.range(0));
  params.gradient = state.range(1) == 0 ? mesh::MeshGradient::fourier : mesh::MeshGradient::finiteDifference;
  params.interlace = state.range(2) != 0;
  const auto n = static_cast<std::size_t>(state.range(0) * state.range(0) * state.range(0) / 8);
  Particles p(n);
  std::mt19937_64 engine(12345);
  for (std::size_t i = 0; i < n; ++i) {
    p.x[i] = std::generate_canonical<double, 64>(engine);
    p.y[i] = std::generate_canonical<double, 64>(engine);
    p.z[i] = std::generate_canonical<double, 64>(engine);
    p.mass[i] = 1.0 / double(n);
  }
  std::vector<std::uint64_t> keys;
  tree::computeMortonKeys(p.sources(), tree::computeBoundingCube(p.sources()), keys);
  p.permute(tree::sortByKey(keys));
  mesh::ParticleMesh pm(params);
  pm.addLongRange(p.sources(), GravityParams{}, p.forces());  // untimed: first touch of the grids
  for (auto _ : state) pm.addLongRange(p.sources(), GravityParams{}, p.forces());
  state.counters["bodies/s"] = benchmark::Counter(double(n) * double(state.iterations()), benchmark::Counter::kIsRate);
}

/// 1, 2, 4, ... up to this machine's cores.
void threadCounts(benchmark::internal::Benchmark* benchmark) {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  for (const int n : {1 << 18, 1 << 20, 1 << 22}) {
    for (int t = 1; t < cores; t *= 2) benchmark->Args({n, t});
    benchmark->Args({n, cores});
  }
}

// The periodic tree also at 2^24 (issue 15's force call), on 1, 4 and all cores: where its phases stop scaling.
void periodicThreadCounts(benchmark::internal::Benchmark* benchmark) {
  threadCounts(benchmark);
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  for (const int t : {1, 4, cores}) benchmark->Args({1 << 24, t});
}

}  // namespace

BENCHMARK(BM_TreePhases)->ArgNames({"N", "threads"})->Apply(threadCounts)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_PeriodicTreePhases)
    ->ArgNames({"N", "threads"})
    ->Apply(periodicThreadCounts)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_ParallelArithmetic)
    ->ArgName("threads")
    ->Apply([](benchmark::internal::Benchmark* benchmark) {
      const int cores = static_cast<int>(std::thread::hardware_concurrency());
      for (int t = 1; t < cores; t *= 2) benchmark->Arg(t);
      benchmark->Arg(cores);
    })
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

BENCHMARK_CAPTURE(BM_DirectCpu, float, matcha::gpu::Precision::float32)
    ->ArgName("N")
    ->RangeMultiplier(4)
    ->Range(1 << 10, 1 << 16)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_DirectCpu, double, matcha::gpu::Precision::float64)
    ->ArgName("N")
    ->RangeMultiplier(4)
    ->Range(1 << 10, 1 << 14)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_HermiteCpu)
    ->ArgName("N")
    ->RangeMultiplier(4)
    ->Range(1 << 10, 1 << 14)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_TreeCpu)
    ->ArgNames({"N", "theta100", "ncrit"})
    ->ArgsProduct({{1 << 14, 1 << 16, 1 << 18}, {30, 50, 70}, {16, 64, 256}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_TreeBuildAndWalk)
    ->ArgNames({"N", "alpha1e4"})
    ->ArgsProduct({{1 << 16, 1 << 20}, {0, 10}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_ParticleMesh)
    ->ArgNames({"grid", "fd", "interlace"})
    ->ArgsProduct({{64, 128}, {0, 1}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
// The FFTW side of bench_cuda's pm/cufft rows (same bodies: uniform, N = grid^3 / 8), the defaults only: 512^3 takes
// seconds per call.
BENCHMARK(BM_ParticleMesh)
    ->ArgNames({"grid", "fd", "interlace"})
    ->Args({256, 0, 1})
    ->Args({512, 0, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(2);

BENCHMARK_MAIN();
