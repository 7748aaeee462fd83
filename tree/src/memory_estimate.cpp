// SPDX-License-Identifier: MIT
#include "matcha/tree/memory_estimate.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_reduce.h>
#include <tbb/parallel_sort.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "matcha/core/errors.hpp"
#include "matcha/core/force_error.hpp"
#include "matcha/core/interaction_plan.hpp"
#include "matcha/core/tree_topology.hpp"
#include "matcha/tree/groups.hpp"
#include "matcha/tree/octree.hpp"
#include "matcha/tree/space_filling_curve.hpp"
#include "matcha/tree/tree_solver.hpp"
#include "matcha/tree/walk.hpp"
#include "parallel_arrays.hpp"

namespace matcha::tree {

namespace {

// The sample of groups walked for the lists' lengths (measureTreeSizes): one group in kSampleFraction, within
// [kMinSampleGroups, kMaxSampleGroups]. 512 groups in 64 runs put the totals within 3% on the inputs of
// tests/tree/test_memory_estimate.cpp; 8192 keep the sample's lists (15-30 KB per group) within ~250 MB.
constexpr std::uint64_t kSampleFraction = 64;
constexpr std::uint64_t kMinSampleGroups = 512;
constexpr std::uint64_t kMaxSampleGroups = 8192;

bool anyNonZero(const std::vector<double>& values) {
  return tbb::parallel_reduce(
      tbb::blocked_range<std::size_t>(0, values.size(), 8192), false,
      [&](const tbb::blocked_range<std::size_t>& r, bool found) {
        for (std::size_t i = r.begin(); i != r.end() && !found; ++i) found = values[i] != 0.0;
        return found;
      },
      [](bool a, bool b) { return a || b; });
}

/// |a| of every body (in the order of `particles`): its own acceleration where `particles` holds any, else that of
/// the mass inside its distance r from the centre of mass, G M(<r) / (r^2 + eps^2) (exact for a spherical system, a
/// rough guide for others).
std::vector<double> accelerationMagnitudes(const Particles& particles, const GravityParams& gravity) {
  const std::size_t n = particles.size();
  std::vector<double> accel(n);
  if (anyNonZero(particles.ax) || anyNonZero(particles.ay) || anyNonZero(particles.az)) {
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n, 8192), [&](const tbb::blocked_range<std::size_t>& r) {
      for (std::size_t i = r.begin(); i != r.end(); ++i) {
        accel[i] = std::sqrt(particles.ax[i] * particles.ax[i] + particles.ay[i] * particles.ay[i] +
                             particles.az[i] * particles.az[i]);
      }
    });
    return accel;
  }
  double com[3] = {0, 0, 0}, total = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    com[0] += particles.mass[i] * particles.x[i];
    com[1] += particles.mass[i] * particles.y[i];
    com[2] += particles.mass[i] * particles.z[i];
    total += particles.mass[i];
  }
  for (double& c : com) c /= total;
  // accel holds r^2 until the masses inside are summed in order of radius.
  for (std::size_t i = 0; i < n; ++i) {
    const double dx = particles.x[i] - com[0], dy = particles.y[i] - com[1], dz = particles.z[i] - com[2];
    accel[i] = dx * dx + dy * dy + dz * dz;
  }
  std::vector<std::uint32_t> byRadius(n);
  std::iota(byRadius.begin(), byRadius.end(), 0u);
  tbb::parallel_sort(byRadius.begin(), byRadius.end(),
                     [&](std::uint32_t a, std::uint32_t b) { return accel[a] < accel[b]; });
  double inside = 0.0;
  for (const std::uint32_t i : byRadius) {
    inside += particles.mass[i];
    accel[i] = gravity.G * inside / (accel[i] + gravity.eps2());
  }
  return accel;
}

/// Bytes the walk's per-task buffers (PlanBuilder::Fragment, walk.cpp) hold for one run of groups walked together
/// with lists of `cells` and `ranges` entries: each group's own lists, grown one entry at a time (to the next power of
/// two).
double fragmentBytes(std::span<const std::uint64_t> cells, std::span<const std::uint64_t> ranges) {
  const auto pushed = [](std::uint64_t count) { return count == 0 ? 0.0 : double(std::bit_ceil(count)); };
  double bytes = 0.0;
  for (std::size_t k = 0; k < cells.size(); ++k) {
    bytes += pushed(cells[k]) * sizeof(std::uint32_t) + pushed(ranges[k]) * sizeof(BodyRange);
  }
  return bytes;
}

/// The walk's batches (tree_solver.cpp: walkAllGroups) for lists of `entriesPerGroup` cells + j-bodies on average,
/// up to where their entries exceed `maxEntries` (from there on the lists stream: sizes.residentGroups).
void planBatches(double entriesPerGroup, std::uint64_t maxEntries, TreeSizes& sizes) {
  const std::uint64_t numGroups = sizes.numGroups;
  sizes.batchGroups.clear();
  sizes.largestBatchGroups = 0;
  sizes.residentGroups = numGroups;
  if (numGroups == 0) return;
  const double perGroup = std::max(1.0, entriesPerGroup);
  const std::uint64_t batchEntries = std::min(kPlanEntries, maxEntries);
  std::uint64_t first = 0, previous = 0;
  bool streaming = false;
  while (first < numGroups) {
    // As a background build walks: its batches are the largest, and so are its walk buffers.
    const std::uint64_t batch =
        std::min(numGroups - first, walkBatchGroups(numGroups, previous, perGroup, batchEntries, false));
    previous = batch;
    if (!streaming && double(first + batch) * perGroup > double(maxEntries)) {
      streaming = true;
      sizes.residentGroups = first;
    }
    sizes.batchGroups.push_back(batch);
    sizes.largestBatchGroups = std::max(sizes.largestBatchGroups, batch);
    first += batch;
  }
}

}  // namespace

TreeSizes measureTreeSizes(const Particles& particles, const TreeParams& params, const GravityParams& gravity,
                           std::span<const float> radius, std::uint64_t sampleSeed) {
  params.validate();
  gravity.validate();
  const std::size_t n = particles.size();
  if (n == 0) throw InputError("no bodies to estimate the memory for");
  if (n >= (std::size_t{1} << 31)) throw InputError("at most 2^31 - 1 bodies are supported");
  MATCHA_ASSERT(radius.empty() || radius.size() == n, "one ball radius per body");

  // The solver's build (tree_solver.cpp: buildTree), over tree-order copies so that `particles` stays as it is.
  const SourceView input = particles.sources();
  const Cube cube = computeBoundingCube(input);
  std::vector<std::uint64_t> keys, sortedKeys;
  std::vector<std::uint32_t> order;
  computeMortonKeys(input, cube, keys);
  {
    KeySorter sorter;
    sorter.sort(keys, sortedKeys, order);
  }
  std::vector<std::uint64_t>().swap(keys);
  std::vector<double> x, y, z, mass;
  gatherInto(particles.x.data(), order, x);
  gatherInto(particles.y.data(), order, y);
  gatherInto(particles.z.data(), order, z);
  gatherInto(particles.mass.data(), order, mass);
  std::vector<float> sortedRadius;
  if (!radius.empty()) gatherInto(radius.data(), order, sortedRadius);
  const SourceView sorted{x.data(), y.data(), z.data(), mass.data(), n};

  Octree tree;
  buildOctree(sortedKeys, cube, params.nleaf, tree);
  std::vector<std::uint64_t>().swap(sortedKeys);
  computeMultipoles(sorted, params.theta, params.multipole, tree, radius.empty() ? nullptr : sortedRadius.data());
  Groups groups;
  makeGroups(tree, sorted, params.ncrit, groups);
  if (!radius.empty()) setGroupBoxesOfBalls(sorted, sortedRadius.data(), groups);
  if (params.alpha > 0.0) {
    // The run's lists are walked with the relative test scaled by the bodies' accelerations, or, for bodies that
    // come without, by those of its first call's estimate pass: here a spherical stand-in for those.
    std::vector<double> accel;
    {
      const std::vector<double> magnitudes = accelerationMagnitudes(particles, gravity);
      gatherInto(magnitudes.data(), order, accel);
    }
    const std::vector<double> zeros(n, 0.0);
    setRelativeTolerances(AccelerationSet{accel, zeros, zeros}, params.alpha, gravity.G, groups);
  }
  WalkTree walkTree;
  buildWalkTree(tree, walkTree);

  TreeSizes sizes;
  sizes.numBodies = n;
  sizes.numCells = tree.numCells();
  sizes.numBlocks = walkTree.blocks.size();
  sizes.numGroups = groups.size();
  sizes.quadrupole = params.multipole == MultipoleOrder::quadrupole;

  // The sample: runs of kSampleRunGroups consecutive groups (PlanBuilder walks such runs together), one from each of
  // numRuns equal stretches of the runs.
  const std::uint64_t numGroups = groups.size();
  const std::uint64_t numRunsTotal = (numGroups + kSampleRunGroups - 1) / kSampleRunGroups;
  const std::uint64_t wantedGroups = std::clamp(numGroups / kSampleFraction, kMinSampleGroups, kMaxSampleGroups);
  const std::uint64_t numRuns = std::min(numRunsTotal, (wantedGroups + kSampleRunGroups - 1) / kSampleRunGroups);
  std::vector<std::uint32_t> sample;
  sample.reserve(numRuns * kSampleRunGroups);
  std::mt19937_64 random(sampleSeed);
  for (std::uint64_t s = 0; s < numRuns; ++s) {
    const std::uint64_t lo = s * numRunsTotal / numRuns;
    const std::uint64_t hi = (s + 1) * numRunsTotal / numRuns;
    const std::uint64_t run =
        numRuns == numRunsTotal ? s : std::uniform_int_distribution<std::uint64_t>(lo, hi - 1)(random);
    const std::uint64_t last = std::min(numGroups, (run + 1) * kSampleRunGroups);
    for (std::uint64_t g = run * kSampleRunGroups; g < last; ++g) sample.push_back(static_cast<std::uint32_t>(g));
  }
  InteractionPlan plan;
  {
    PlanBuilder builder;
    builder.build(walkTree, groups, sample, plan);
  }
  std::uint64_t sampleBodies = 0;
  for (const std::uint32_t count : plan.listBodyCounts) sampleBodies += count;
  sizes.numSampledGroups = sample.size();
  double sampleFragmentBytes = 0.0;
  for (std::size_t first = 0; first < sample.size(); first += kSampleRunGroups) {
    std::uint64_t cells[kSampleRunGroups], ranges[kSampleRunGroups];
    const std::size_t count = std::min<std::size_t>(kSampleRunGroups, sample.size() - first);
    for (std::size_t k = 0; k < count; ++k) {
      cells[k] = plan.numListCells(first + k);
      ranges[k] = plan.bodyListOffsets[first + k + 1] - plan.bodyListOffsets[first + k];
    }
    sampleFragmentBytes += fragmentBytes({cells, count}, {ranges, count});
  }
  sizes.walkBufferBytesPerGroup = sampleFragmentBytes / double(sample.size());
  // Each stretch holds the same number of runs (to one), so the sample's mean is the mean over all groups.
  const double scale = double(numGroups) / double(sample.size());
  sizes.listCells = static_cast<std::uint64_t>(std::llround(double(plan.cellList.size()) * scale));
  sizes.listRanges = static_cast<std::uint64_t>(std::llround(double(plan.bodyList.size()) * scale));
  sizes.listBodies = static_cast<std::uint64_t>(std::llround(double(sampleBodies) * scale));
  planBatches(sizes.cellsPerGroup() + sizes.bodiesPerGroup(), params.maxBatchEntries, sizes);
  return sizes;
}

std::vector<float> predictedBallRadii(const Particles& particles, std::uint32_t reuseSteps, double dt,
                                      const GravityParams& gravity, std::uint32_t firstCall) {
  const std::size_t n = particles.size();
  std::vector<float> radius(n, 0.0f);
  if (n == 0 || reuseSteps == 0) return radius;
  const std::vector<double> accel = accelerationMagnitudes(particles, gravity);
  // tree_solver.cpp (Motion::predict) for the calls firstCall .. firstCall + K - 1 from now: half the chord of the
  // path plus `room` times the second difference |a| dt^2.
  const double k0 = firstCall, k1 = firstCall + reuseSteps - 1;
  const double room = predictionRoom(k0, k1);
  for (std::size_t i = 0; i < n; ++i) {
    const double speed = std::sqrt(particles.vx[i] * particles.vx[i] + particles.vy[i] * particles.vy[i] +
                                   particles.vz[i] * particles.vz[i]);
    radius[i] = static_cast<float>(0.5 * (k1 - k0) * speed * dt + room * accel[i] * dt * dt);
  }
  return radius;
}

void addTreeSolverMemory(const TreeSizes& sizes, const TreeParams& params, const TreeRunShape& shape,
                         MemoryEstimate& estimate) {
  const std::uint64_t n = sizes.numBodies;
  const std::uint64_t cells = sizes.numCells;
  const std::uint64_t numGroups = sizes.numGroups;
  const bool reuse = shape.reachesReuse();
  const bool background = shape.buildsInBackground(params);
  // From the second call on the next tree is built while the current one (and its lists) stays: two trees.
  const std::uint64_t numTrees = shape.numForceCalls >= 2 ? 2 : 1;
  const std::uint64_t quadrupoleDoubles = sizes.quadrupole ? 7 : 0;

  estimate.numBodies = n;
  const double resident = sizes.residentFraction();
  const auto residentLists = [&](double perEntry, std::uint64_t count) {
    return static_cast<std::uint64_t>(perEntry * double(count) * resident);
  };
  estimate.listEntries = static_cast<std::uint64_t>(double(sizes.listCells + sizes.listRanges) * resident);
  estimate.listBodies = static_cast<std::uint64_t>(double(sizes.listBodies) * resident);

  estimate.add("bodies", n * kBytesPerBody);

  // Per tree (TreeSolver::TreeBuild): keys and sorted keys, the order, the sorter's two (key, index) buffers.
  std::uint64_t keys = n * (2 * sizeof(std::uint64_t) + sizeof(std::uint32_t) + 2 * 16);
  // A background build's inputs (masses, |a| as floats) and tree-order copies (x, y, z, mass; |a| and radius).
  if (background) keys += n * (sizeof(double) + sizeof(float) + 4 * sizeof(double) + 2 * sizeof(float));
  estimate.add("tree keys, sort and copies", numTrees * keys);

  // Octree: bodies, firstChild, numChildren, level, centre, halfSide; multipoles, opening radius, b_max, half extent;
  // the spread of the centre of mass in trees of balls. Groups: range, box centre and half extent, tolerance.
  // Walk tree: a 384-byte block per cell with children, the block of each cell.
  const std::uint64_t octreeCell = sizeof(BodyRange) + sizeof(std::uint32_t) + 2 + 4 * sizeof(double) +
                                   (4 + quadrupoleDoubles + 3 + (reuse ? 1 : 0)) * sizeof(double);
  const std::uint64_t groupBytes = sizeof(BodyRange) + 7 * sizeof(double);
  const std::uint64_t walkTree = sizes.numBlocks * sizeof(WalkTree::Block) + cells * sizeof(std::uint32_t);
  // The topology handed to the engine: cell ranges, first child, child count, centre, half side; group ranges and
  // tolerances; the order of the caller's bodies when the tree was built in the background.
  const std::uint64_t topology = cells * (sizeof(BodyRange) + sizeof(std::uint32_t) + 1 + 4 * sizeof(double)) +
                                 numGroups * (sizeof(BodyRange) + sizeof(double)) +
                                 (background ? n * sizeof(std::uint32_t) : 0);
  estimate.add("octree, groups, walk tree, topology",
               numTrees * (cells * octreeCell + numGroups * groupBytes + walkTree + topology));

  // The lists (InteractionPlan per batch): per group its range, id, j-body count, centre and two offsets; a cell id
  // per accepted cell, a range per j-body range. When they stream, the batches that fit stay, plus the one walked.
  const std::uint64_t planGroup = sizeof(BodyRange) + 4 * sizeof(std::uint32_t) + 3 * sizeof(double);
  std::uint64_t plans = numGroups * planGroup + residentLists(sizeof(std::uint32_t), sizes.listCells) +
                        residentLists(sizeof(BodyRange), sizes.listRanges);
  if (sizes.residentGroups < numGroups) {
    plans +=
        static_cast<std::uint64_t>(double(sizes.largestBatchGroups) * (sizes.cellsPerGroup() * sizeof(std::uint32_t) +
                                                                       sizes.rangesPerGroup() * sizeof(BodyRange)));
  }
  estimate.add("interaction lists", numTrees * plans);

  // The walk's per-task buffers (PlanBuilder::Fragment) keep each group's list of the largest batch as it was walked
  // (walk.cpp), with their capacity between batches. Plus per group its list lengths and id.
  estimate.add("walk buffers",
               numTrees * static_cast<std::uint64_t>(double(sizes.largestBatchGroups) *
                                                     (sizes.walkBufferBytesPerGroup + 4 * sizeof(std::uint32_t))));

  // Solver-wide: the body permutation's scratch (a double and an id per body, and the periodic solver's |a| in the
  // new order: BodyPermuter::permuteAllButForces); with reuse the positions of the last two calls and their
  // permutation scratch, the predicted positions and balls, and a repair's tree (the current tree's geometry refitted
  // to exact positions, its walk tree and groups).
  estimate.add("body permutation", n * (2 * sizeof(double) + sizeof(std::uint64_t)));
  if (params.reuse != 1 || shape.freshTreesAhead) {
    // The positions (where the motion between calls is not announced: the worst case) and accelerations (floats) of
    // the last call from the first call on; from the second, those of the call before and the scratch of their
    // permutation.
    std::uint64_t motion = n * (3 * sizeof(double) + 3 * sizeof(float));
    if (shape.numForceCalls >= 2) motion += n * (4 * sizeof(double) + 4 * sizeof(float));
    if (reuse) motion += n * (3 * sizeof(double) + sizeof(float));
    estimate.add("motion history", motion);
  }
  if (reuse) {
    const std::uint64_t exactCell = octreeCell - sizeof(double);
    estimate.add("repair tree", cells * exactCell + numGroups * groupBytes + walkTree);
  }
}

TreeRunShape treeRunShape(const TreeParams& params, std::uint64_t numSteps, double dt, bool engineAdvancesBodies) {
  TreeRunShape shape;
  shape.freshTreesAhead = buildsFreshTreesAhead(params, engineAdvancesBodies);
  shape.numForceCalls = numSteps + 1;
  shape.reuseSteps = params.reuse == 0 ? kAutoReuseSizing : params.reuse;
  shape.dt = dt;
  return shape;
}

TreeSizes estimateTreeSolverMemory(const Particles& particles, const TreeParams& params, const GravityParams& gravity,
                                   const TreeRunShape& shape, MemoryEstimate& estimate) {
  std::vector<float> radius;
  // A background build serves the calls from the next one on (tree_solver.cpp: startBackgroundBuild, a call ahead at
  // least); one built within its call, from that call on.
  if (shape.reachesReuse()) {
    radius = predictedBallRadii(particles, shape.reuseSteps, shape.dt, gravity, params.pipeline ? 1 : 0);
  }
  TreeSizes sizes = measureTreeSizes(particles, params, gravity, radius);
  sizes.gathered = shape.buildsInBackground(params);
  addTreeSolverMemory(sizes, params, shape, estimate);
  return sizes;
}

}  // namespace matcha::tree
