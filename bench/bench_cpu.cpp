// SPDX-License-Identifier: MIT
// CPU engine and solver rates: direct summation (float and double) and the treecode at the same N, so the tree's
// speed-up over direct is a ratio measured in one run. Rates are counters (interactions/s); names carry N, theta
// and ncrit. Run by scripts/bench.sh; a tiny-size smoke run is a ctest.
#include <benchmark/benchmark.h>

#include "matcha/core/pair_interaction.hpp"
#include "matcha/gpu/cpu_engine.hpp"
#include "matcha/ic/plummer.hpp"
#include "matcha/tree/tree_solver.hpp"

namespace {

using namespace matcha;

Particles plummer(std::int64_t n) {
  ic::PlummerParams params;
  params.numBodies = static_cast<std::size_t>(n);
  params.seed = 12345;
  return ic::makePlummer(params);
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
  {
    // Accelerations for the relative test to scale by; a cheap tree is close enough for an estimate.
    gpu::CpuEngine engine(gpu::Precision::float32);
    TreeParams rough;
    rough.theta = 0.8;
    rough.alpha = 0.0;
    rough.multipole = MultipoleOrder::monopole;
    tree::TreeSolver(engine, rough, GravityParams{}).computeForces(p);
  }
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

}  // namespace

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

BENCHMARK_MAIN();
