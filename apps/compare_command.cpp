// SPDX-License-Identifier: MIT
// `matcha compare`: tree forces against direct summation, for a sweep of tree configurations (--theta list x
// --multipole orders) measured against ONE reference computation, on every body or on a random sample of them;
// error percentiles, interaction counts and list lengths per configuration (STYLE.md habit 4).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "commands.hpp"
#include "distributed_run.hpp"
#include "force_reference.hpp"
#include "matcha/core/errors.hpp"
#include "matcha/core/force_error.hpp"
#include "matcha/core/stopwatch.hpp"
#include "matcha/gpu/cpu_engine.hpp"
#include "matcha/gpu/engine_factory.hpp"
#include "matcha/gpu/ewald.hpp"
#include "matcha/io/run_folder.hpp"
#include "matcha/mesh/treepm_solver.hpp"
#include "matcha/tree/periodic_tree_solver.hpp"
#include "matcha/tree/tree_solver.hpp"
#include "memory_check.hpp"
#include "output_file.hpp"
#include "timings.hpp"

namespace matcha::app {

namespace {

/// One tree configuration's results.
struct Row {
  TreeParams params;
  ForceErrorStats error;
  ForceReport report;
  tree::TreeStats stats;
  double seconds = 0.0;  ///< wall time of the (second) tree force call
};

/// What a compared solver's tree looked like: the open-boundary tree solver's, or TreePM's short range's.
tree::TreeStats treeStatsOf(ForceSolver& solver) {
  if (auto* open = dynamic_cast<tree::TreeSolver*>(&solver)) return open->lastStats();
  auto& treePm = dynamic_cast<mesh::TreePmSolver&>(solver);
  return dynamic_cast<tree::PeriodicTreeSolver&>(treePm.shortRange()).lastStats();
}

nlohmann::json toJson(const ForceErrorStats& e) {
  return {{"median", e.median}, {"p90", e.p90}, {"p99", e.p99}, {"max", e.max}, {"rms", e.rms}};
}

double perBody(std::uint64_t count, std::size_t numBodies) { return double(count) / double(numBodies); }

nlohmann::json toJson(const Row& row, std::size_t numBodies) {
  const InteractionCounts& counts = row.report.counts;
  return {{"multipole", toString(row.params.multipole)},
          {"theta", row.params.theta},
          {"alpha", row.params.alpha},
          {"ncrit", row.params.ncrit},
          {"error", toJson(row.error)},
          {"interactions_per_body",
           {{"body_body", perBody(counts.bodyBody, numBodies)},
            {"body_cell", perBody(counts.bodyCell, numBodies)},
            {"total", perBody(counts.total(), numBodies)}}},
          {"lists",
           {{"mean_bodies", row.stats.meanListBodies},
            {"max_bodies", row.stats.maxListBodies},
            {"mean_cells", row.stats.meanListCells},
            {"max_cells", row.stats.maxListCells},
            {"batches", row.stats.numBatches}}},
          {"seconds",
           {{"tree_total", row.seconds},
            {"tree_build", row.report.timings.treeSeconds()},
            {"tree_walk", row.report.timings[Phase::walk]},
            {"tree_engine", row.report.timings.engineSeconds()}}},
          {"phases", phasesJson(row.report.timings)},
          {"waits", {{"engine", row.report.timings.engineWaitSeconds}, {"mesh", row.report.timings.meshWaitSeconds}}}};
}

/// The first line of every CSV `compare --csv` writes: an existing file is replaced only if it starts with it.
constexpr const char* kCsvHeader =
    "n,sample,multipole,theta,alpha,ncrit,nleaf,eps,reference,median,p90,p99,max,bb_per_body,bc_per_body,"
    "interactions_per_body,mean_list_bodies,max_list_bodies,mean_list_cells,max_list_cells,tree_seconds\n";

std::string csvTable(const std::vector<Row>& rows, std::size_t numBodies, std::size_t numTargets,
                     const GravityParams& gravity, const std::string& referenceKind) {
  std::ostringstream csv;
  csv << kCsvHeader;
  csv.precision(9);
  for (const Row& row : rows) {
    const InteractionCounts& counts = row.report.counts;
    csv << numBodies << ',' << numTargets << ',' << toString(row.params.multipole) << ',' << row.params.theta << ','
        << row.params.alpha << ',' << row.params.ncrit << ',' << row.params.nleaf << ',' << gravity.eps << ','
        << referenceKind << ',' << row.error.median << ',' << row.error.p90 << ',' << row.error.p99 << ','
        << row.error.max << ',' << perBody(counts.bodyBody, numBodies) << ',' << perBody(counts.bodyCell, numBodies)
        << ',' << perBody(counts.total(), numBodies) << ',' << row.stats.meanListBodies << ','
        << row.stats.maxListBodies << ',' << row.stats.meanListCells << ',' << row.stats.maxListCells << ','
        << row.seconds << '\n';
  }
  return csv.str();
}

void printTable(const std::vector<Row>& rows, const ForceErrorStats& directError, std::size_t numBodies,
                bool directRow) {
  std::printf("relative force error |a - a_ref| / |a_ref|; interactions per body; list lengths per group\n");
  std::printf("  %-9s %5s %5s  %10s %10s %10s %10s %10s %10s %10s %14s %14s %8s\n", "multipole", "theta", "ncrit",
              "median", "90%", "99%", "max", "body-body", "body-cell", "total", "bodies mn/max", "cells mn/max",
              "tree s");
  for (const Row& row : rows) {
    const InteractionCounts& counts = row.report.counts;
    char bodies[32], cells[32];
    std::snprintf(bodies, sizeof bodies, "%.0f/%llu", row.stats.meanListBodies,
                  static_cast<unsigned long long>(row.stats.maxListBodies));
    std::snprintf(cells, sizeof cells, "%.0f/%llu", row.stats.meanListCells,
                  static_cast<unsigned long long>(row.stats.maxListCells));
    std::printf("  %-9s %5g %5u  %10.3e %10.3e %10.3e %10.3e %10.0f %10.0f %10.0f %14s %14s %8.3f\n",
                toString(row.params.multipole).c_str(), row.params.theta, row.params.ncrit, row.error.median,
                row.error.p90, row.error.p99, row.error.max, perBody(counts.bodyBody, numBodies),
                perBody(counts.bodyCell, numBodies), perBody(counts.total(), numBodies), bodies, cells, row.seconds);
  }
  if (!directRow) return;
  std::printf("  %-22s %10.3e %10.3e %10.3e %10.3e %10.0f   (E_max, Chamomile)\n", "direct (same engine)",
              directError.median, directError.p90, directError.p99, directError.max, double(numBodies));
}

}  // namespace

int compareSolvers(const Options& given, const CompareOptions& compare, const CompareSharing* sharing) {
  Options options = given;
  validateOptions(options, kCompareOptions);
  std::vector<TreeParams> sweep = treeSweep(options);  // its errors before any work; again once the box is known
  if (compare.sample < 0) throw InputError("--sample must be >= 0 (got " + std::to_string(compare.sample) + ")");
  if (!compare.csvPath.empty()) {
    const std::filesystem::path folder = std::filesystem::absolute(compare.csvPath).parent_path();
    if (!std::filesystem::is_directory(folder)) {
      throw InputError("--csv " + compare.csvPath + ": the folder " + folder.string() + " does not exist");
    }
    // An earlier compare's table is replaced (sweeps are rerun); any other file is the user's.
    std::error_code ec;
    if (std::filesystem::symlink_status(compare.csvPath, ec).type() != std::filesystem::file_type::not_found &&
        !fileStartsWith(compare.csvPath, kCsvHeader)) {
      throw InputError("--csv " + compare.csvPath +
                       " exists and is not a table `matcha compare --csv` wrote; name another file");
    }
  }
  std::ostream& info = options.json ? std::cerr : std::cout;
  // The count is known before the bodies are allocated: a sample or a size that cannot work is refused first.
  const InitialConditionsInfo ic = inspectInitialConditions(options);
  if (std::uint64_t(compare.sample) > ic.numBodies) {
    throw InputError("--sample " + std::to_string(compare.sample) + " is more than the " +
                     std::to_string(ic.numBodies) + " bodies");
  }
  // With a periodic box (--box, or the --ic file's): TreePM against Ewald instead of the tree against direct sums.
  const double box = resolvePeriodicBox(options, ic.boxSize, ic.numBodies);
  sweep = treeSweep(options);  // the opening settings left at auto are the box's now
  if (const std::string warning = periodicSofteningWarning(options, ic.numBodies); !warning.empty()) {
    std::cerr << warning << '\n';
  }
  const bool periodic = box > 0.0;
  requireBodiesFit(ic.numBodies);
  Particles bodies = loadInitialConditions(options, info);
  gpu::requireFloatRange(bodies, options.gravity);  // as `matcha run`: huge eps or coordinates are refused up front
  const std::size_t n = bodies.size();
  std::iota(bodies.id.begin(), bodies.id.end(), std::uint64_t{0});  // see Sample
  const Sample sample = drawSample(n, static_cast<std::size_t>(compare.sample), compare.sampleSeed);
  gpu::EngineChoice engine = makeRunEngine(options);
  // Made first, so that an unusable --reference fails before the long runs.
  std::string referenceKind = periodic ? ewaldReferenceKind(compare.reference) : "";
  const std::unique_ptr<NearFieldEngine> oracle =
      periodic ? nullptr : makeReferenceEngine(compare.reference, referenceKind);
  info << "matcha compare: " << n << " bodies, errors on "
       << (sample.all() ? "all of them" : std::to_string(sample.numTargets) + " drawn at random") << ", "
       << sweep.size() << " tree configuration(s); engine: " << engine.reason << std::endl;
  if (sharing != nullptr) sharing->shareBodies(bodies);

  std::vector<Row> rows;
  std::vector<TargetForces> treeForces;
  for (const TreeParams& params : sweep) {
    Options configuration = options;
    configuration.tree = params;
    // Each call here is a fresh force evaluation on the same bodies: a tree per call, and no record of the bodies'
    // motion for trees to come (with reuse on, that record took 24 ms of the timed call at 2^20 bodies and 80 at 2^22
    // on the H200's host, its buffers touched for the first time).
    configuration.tree.reuse = 1;
    if (sharing != nullptr) {
      TreeMeasurement measured = sharing->measure(configuration, sample);
      Row row;
      row.params = params;
      row.report = measured.report;
      row.seconds = measured.seconds;
      row.stats = measured.stats;
      treeForces.push_back(std::move(measured.forces));
      rows.push_back(row);
      info << measured.description << ": " << row.seconds << " s" << std::endl;
      continue;
    }
    const std::unique_ptr<ForceSolver> solver = makeSolver(configuration, engine);
    // Accelerations alone, as a run's steps between outputs ask for them (integrator::runLeapfrog): compare measures
    // no potentials, and computing them would time work that no user step does.
    solver->setPotentialsWanted(false);
    // The untimed first call takes the first-touch allocations, and sorts `bodies` along the Morton curve (the same
    // order for every configuration), which the direct sums below rely on for compact blocks.
    solver->computeForces(bodies);
    Row row;
    row.params = params;
    Stopwatch clock;
    row.report = solver->computeForces(bodies);
    row.seconds = clock.seconds();
    row.stats = treeStatsOf(*solver);
    treeForces.push_back(gatherTargets(bodies, targetIndices(bodies, sample)));
    rows.push_back(row);
    info << solver->describe() << ": " << row.seconds << " s" << std::endl;
  }

  const std::string targets = sample.all() ? "all " + std::to_string(n) + " bodies"
                                           : std::to_string(sample.numTargets) + " bodies drawn at random (seed " +
                                                 std::to_string(compare.sampleSeed) + ") from all " +
                                                 std::to_string(n) + " sources";
  Stopwatch clock;
  TargetForces direct, reference;
  double directSeconds = 0.0;
  std::string referenceText;
  if (periodic) {
    char boxText[32];
    std::snprintf(boxText, sizeof boxText, "%.9g", box);
    referenceText = std::string("Ewald summation in double on the ") +
                    (referenceKind == "ewald-gpu-double" ? "GPU" : "CPU") + " (alpha L 6, sums cut at exp(-20)), box " +
                    boxText + ", onto " + targets;
    info << "reference: " << referenceText << "..." << std::endl;
    reference = ewaldOnTargets(bodies, targetIndices(bodies, sample), options.gravity, box, referenceKind);
    direct = reference;  // no periodic direct sum: its row reads 0
  } else {
    info << "direct summation on " << engine.engine->name() << " onto " << targets << "..." << std::endl;
    direct = directOnTargets(*engine.engine, bodies, targetIndices(bodies, sample), options.gravity);
    directSeconds = clock.seconds();
    referenceText = "direct summation, double precision, " + oracle->name() + ", onto " + targets;
    info << "reference (" << referenceKind << "): direct summation in double on " << oracle->name() << "..."
         << std::endl;
    clock.restart();
    reference = directOnTargets(*oracle, bodies, targetIndices(bodies, sample), options.gravity);
  }
  const double referenceSeconds = clock.seconds();

  for (std::size_t k = 0; k < rows.size(); ++k) {
    rows[k].error = summariseForceErrors(treeForces[k].view(), reference.view());
  }
  const ForceErrorStats directError = summariseForceErrors(direct.view(), reference.view());
  // Errors that are not numbers are no measurement: say so (exit 3) rather than print them with exit 0. The inputs'
  // range is checked up front (requireFloatRange); this is the guard behind it.
  std::vector<ForceErrorStats> measured{directError};
  for (const Row& row : rows) measured.push_back(row.error);
  for (const ForceErrorStats& error : measured) {
    if (!(std::isfinite(error.median) && std::isfinite(error.max))) {
      throw NumericalError("compare: the force errors are not finite (median " + std::to_string(error.median) +
                           ", max " + std::to_string(error.max) + "): a force of the tree, the direct sum or the " +
                           "reference overflowed; nothing was written");
    }
  }
  const tree::TreeStats& stats = rows.back().stats;  // cells and groups depend on ncrit and nleaf alone
  if (!compare.csvPath.empty()) {
    io::writeTextFile(compare.csvPath, csvTable(rows, n, sample.numTargets, options.gravity, referenceKind));
  }

  if (options.json) {
    nlohmann::json json = {{"bodies", n},
                           {"sample", sample.numTargets},
                           {"sample_seed", compare.sampleSeed},
                           {"ncrit", options.tree.ncrit},
                           {"nleaf", options.tree.nleaf},
                           {"alpha", options.tree.alpha},
                           {"eps", options.gravity.eps},
                           {"engine", engine.engine->name()},
                           {"reference", referenceText},
                           {"box", box},
                           {"reference_kind", referenceKind},
                           {"direct_error", periodic ? nlohmann::json(nullptr) : toJson(directError)},
                           {"tree",
                            {{"cells", stats.numCells},
                             {"leaves", stats.numLeaves},
                             {"depth", stats.depth},
                             {"groups", stats.numGroups},
                             {"mean_group_size", stats.meanGroupSize},
                             {"max_group_size", stats.maxGroupSize}}},
                           {"seconds", {{"direct", directSeconds}, {"reference", referenceSeconds}}},
                           {"rows", nlohmann::json::array()}};
    for (const Row& row : rows) json["rows"].push_back(toJson(row, n));
    std::cout << json.dump(2) << std::endl;
    return 0;
  }
  std::printf("\nN %zu  ncrit %u  nleaf %u  alpha %g%s  eps %g  engine %s\n", n, options.tree.ncrit, options.tree.nleaf,
              options.tree.alpha, options.tree.alpha > 0.0 ? "" : " (theta alone)", options.gravity.eps,
              engine.engine->name().c_str());
  std::printf("reference (%s): %s\n", referenceKind.c_str(), referenceText.c_str());
  if (periodic) {
    std::printf("periodic: %s\n", makeSolver(options, engine)->describe().c_str());
  }
  std::printf("\n");
  printTable(rows, directError, n, !periodic);
  std::printf("\ntree: %llu cells (%llu leaves), depth %d, %llu groups of %.1f bodies (max %llu)\n",
              static_cast<unsigned long long>(stats.numCells), static_cast<unsigned long long>(stats.numLeaves),
              stats.depth, static_cast<unsigned long long>(stats.numGroups), stats.meanGroupSize,
              static_cast<unsigned long long>(stats.maxGroupSize));
  std::printf("time: direct %.3f s, %s reference %.3f s (onto %zu bodies); tree per row, the second of two calls\n",
              directSeconds, periodic ? "Ewald" : "double", referenceSeconds, sample.numTargets);
  if (!compare.csvPath.empty()) std::printf("rows written to %s\n", compare.csvPath.c_str());
  return 0;
}

std::function<int()> addCompareCommand(CLI::App& parent, Options& options) {
  CLI::App* command =
      parent.add_subcommand("compare",
                            "tree forces vs direct summation (TreePM vs Ewald with a periodic box): error "
                            "percentiles per tree configuration");
  addOptions(*command, options, kCompareOptions);
  auto compare = std::make_shared<CompareOptions>();
  command
      ->add_option("--reference", compare->reference,
                   "direct summation in double the errors are measured against (Ewald summation with a periodic "
                   "box): auto (the GPU when there is one), cpu-double or gpu-double")
      ->check(CLI::IsMember({"auto", "cpu-double", "gpu-double"}))
      ->capture_default_str();
  command
      ->add_option("--sample", compare->sample,
                   "measure the errors on this many bodies drawn at random, against a direct sum onto them alone "
                   "(0: every body)")
      ->capture_default_str();
  addSeedOption(*command, "--sample-seed", compare->sampleSeed, "random seed of --sample, 0 to 2^64 - 1");
  command->add_option("--csv", compare->csvPath, "write the rows, one per configuration, to this CSV file");
  return [&options, compare] {
    return worldSize() > 1 ? compareDistributed(options, *compare) : compareSolvers(options, *compare, nullptr);
  };
}

}  // namespace matcha::app
