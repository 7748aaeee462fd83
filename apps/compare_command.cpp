// SPDX-License-Identifier: MIT
// `matcha compare`: tree forces against direct summation on the same bodies, with error percentiles, interaction
// counts and tree statistics (STYLE.md habit 4).
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.hpp"
#include "matcha/core/errors.hpp"
#include "matcha/core/force_error.hpp"
#include "matcha/core/stopwatch.hpp"
#include "matcha/gpu/cpu_engine.hpp"
#include "matcha/gpu/engine_factory.hpp"
#include "matcha/tree/tree_solver.hpp"

namespace matcha::app {

namespace {

AccelerationSet accelerations(const Particles& p) { return {p.ax, p.ay, p.az}; }

nlohmann::json toJson(const ForceErrorStats& e) {
  return {{"median", e.median}, {"p90", e.p90}, {"p99", e.p99}, {"max", e.max}, {"rms", e.rms}};
}

/// The double-precision direct-summation engine the errors are measured against: `cpu-double` (the CPU oracle),
/// `gpu-double` (the CUDA engine in double, far faster at large N; InputError where there is none) or `auto`
/// (gpu-double when the CUDA engine is built and a device is present, else cpu-double).
std::unique_ptr<NearFieldEngine> makeReferenceEngine(const std::string& choice, std::string& used) {
  if (choice == "cpu-double") {
    used = "cpu-double";
    return std::make_unique<gpu::CpuEngine>(gpu::Precision::float64);
  }
  if (choice == "gpu-double" || (gpu::cudaEngineBuilt() && gpu::queryCudaDevice().available)) {
    used = "gpu-double";
    try {
      return gpu::makeCudaEngine(gpu::Precision::float64);
    } catch (const InputError& error) {
      throw InputError(std::string("--reference gpu-double: ") + error.what());
    }
  }
  used = "cpu-double";
  return std::make_unique<gpu::CpuEngine>(gpu::Precision::float64);
}

int compareSolvers(const Options& options, const std::string& referenceChoice) {
  validateOptions(options, kBodies | kTree | kGravity);
  std::ostream& info = options.json ? std::cerr : std::cout;
  Particles tree = loadInitialConditions(options);
  const double n = double(tree.size());
  gpu::EngineChoice engine = gpu::makeEngine(options.engine);
  std::string referenceKind;  // made first, so that an unusable --reference fails before the long runs
  const std::unique_ptr<NearFieldEngine> oraclePointer = makeReferenceEngine(referenceChoice, referenceKind);
  NearFieldEngine& oracle = *oraclePointer;
  info << "matcha compare: " << tree.size() << " bodies; engine: " << engine.reason << std::endl;

  tree::TreeSolver treeSolver(*engine.engine, options.tree, options.gravity);
  treeSolver.computeForces(tree);  // warm-up: first-touch allocation and sorting happen here, not in the timing
  Stopwatch clock;
  const ForceReport treeReport = treeSolver.computeForces(tree);
  const double treeSeconds = clock.seconds();

  // Same (now sorted) bodies for the direct sums.
  Particles direct = tree;
  info << "direct summation on " << engine.engine->name() << " (N^2 = " << n * n << " interactions)..." << std::endl;
  clock.restart();
  engine.engine->evaluateDirect(direct.sources(), options.gravity, direct.forces());
  const double directSeconds = clock.seconds();

  Particles reference = tree;
  info << "reference (" << referenceKind << "): direct summation in double on " << oracle.name() << "..." << std::endl;
  clock.restart();
  oracle.evaluateDirect(reference.sources(), options.gravity, reference.forces());
  const double referenceSeconds = clock.seconds();

  const ForceErrorStats treeError = summariseForceErrors(accelerations(tree), accelerations(reference));
  const ForceErrorStats directError = summariseForceErrors(accelerations(direct), accelerations(reference));
  const tree::TreeStats& stats = treeSolver.lastStats();
  const double bodyBodyPerBody = double(treeReport.counts.bodyBody) / n;
  const double bodyCellPerBody = double(treeReport.counts.bodyCell) / n;

  if (options.json) {
    const nlohmann::json json = {
        {"bodies", tree.size()},
        {"theta", options.tree.theta},
        {"ncrit", options.tree.ncrit},
        {"nleaf", options.tree.nleaf},
        {"eps", options.gravity.eps},
        {"engine", engine.engine->name()},
        {"reference", "direct summation, double precision, " + oracle.name()},
        {"reference_kind", referenceKind},
        {"multipole", "monopole"},
        {"tree_error", toJson(treeError)},
        {"direct_error", toJson(directError)},
        {"e_max", treeError.max},
        {"interactions_per_body", {{"body_body", bodyBodyPerBody}, {"body_cell", bodyCellPerBody}}},
        {"tree",
         {{"cells", stats.numCells},
          {"leaves", stats.numLeaves},
          {"depth", stats.depth},
          {"groups", stats.numGroups},
          {"mean_group_size", stats.meanGroupSize},
          {"mean_list_bodies", stats.meanListBodies},
          {"max_list_bodies", stats.maxListBodies},
          {"mean_list_cells", stats.meanListCells},
          {"max_list_cells", stats.maxListCells}}},
        {"seconds",
         {{"tree_total", treeSeconds},
          {"tree_build", treeReport.timings.treeSeconds},
          {"tree_walk", treeReport.timings.walkSeconds},
          {"tree_engine", treeReport.timings.engineSeconds},
          {"direct", directSeconds},
          {"reference", referenceSeconds}}},
        {"speedup_tree_vs_direct", directSeconds / treeSeconds}};
    std::cout << json.dump(2) << std::endl;
    return 0;
  }
  std::printf("\nN %zu  theta %g  ncrit %u  nleaf %u  eps %g  multipole: monopole\n", tree.size(), options.tree.theta,
              options.tree.ncrit, options.tree.nleaf, options.gravity.eps);
  std::printf("reference (%s): direct summation in double (%s)\n\n", referenceKind.c_str(), oracle.name().c_str());
  std::printf("relative force error |a - a_ref| / |a_ref|\n");
  std::printf("  %-22s %10s %10s %10s %10s\n", "", "median", "90%", "99%", "max");
  std::printf("  %-22s %10.3e %10.3e %10.3e %10.3e\n", "tree", treeError.median, treeError.p90, treeError.p99,
              treeError.max);
  std::printf("  %-22s %10.3e %10.3e %10.3e %10.3e   (E_max, Chamomile)\n", "direct (same engine)", directError.median,
              directError.p90, directError.p99, directError.max);
  std::printf("\ninteractions per body: %.0f body-body + %.0f body-cell = %.0f (direct: %.0f)\n", bodyBodyPerBody,
              bodyCellPerBody, bodyBodyPerBody + bodyCellPerBody, n);
  std::printf("tree: %llu cells (%llu leaves), depth %d, %llu groups of %.1f bodies (max %llu)\n",
              static_cast<unsigned long long>(stats.numCells), static_cast<unsigned long long>(stats.numLeaves),
              stats.depth, static_cast<unsigned long long>(stats.numGroups), stats.meanGroupSize,
              static_cast<unsigned long long>(stats.maxGroupSize));
  std::printf("lists per group: bodies mean %.0f max %llu; cells mean %.0f max %llu\n", stats.meanListBodies,
              static_cast<unsigned long long>(stats.maxListBodies), stats.meanListCells,
              static_cast<unsigned long long>(stats.maxListCells));
  std::printf(
      "\ntime: tree %.3f s (build %.3f, walk %.3f, engine %.3f); direct %.3f s (%.1fx the tree); "
      "double reference %.3f s\n",
      treeSeconds, treeReport.timings.treeSeconds, treeReport.timings.walkSeconds, treeReport.timings.engineSeconds,
      directSeconds, directSeconds / treeSeconds, referenceSeconds);
  return 0;
}

}  // namespace

std::function<int()> addCompareCommand(CLI::App& parent, Options& options) {
  CLI::App* command = parent.add_subcommand("compare", "tree forces vs direct summation on the same bodies");
  addOptions(*command, options, kBodies | kTree | kGravity | kEngine | kJson);
  auto referenceChoice = std::make_shared<std::string>("auto");
  command
      ->add_option("--reference", *referenceChoice,
                   "direct summation in double the errors are measured against: auto (the GPU when there is one), "
                   "cpu-double or gpu-double")
      ->check(CLI::IsMember({"auto", "cpu-double", "gpu-double"}))
      ->capture_default_str();
  return [&options, referenceChoice] { return compareSolvers(options, *referenceChoice); };
}

}  // namespace matcha::app
