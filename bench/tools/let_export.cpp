// SPDX-License-Identifier: MIT
// What the local essential tree's pruning costs against the walk it serves, without MPI: a Plummer sphere split in two
// at its median Morton key (as two ranks hold it), each half's tree, groups and relative tolerances built as
// DistributedTreeSolver builds them, then the first half's tree pruned for the second half's groups
// (parallel::exportSubtree) beside the first half's own walk (tree::PlanBuilder), the larger of a rank's two
// host phases it sits beside, each on all of this machine's cores. Prints the median of `repeats` of each.
// bench/RESULTS.md, 2026-12-06 (39th session).
// Args: N (default 2^21), ncrit (1024), nleaf (16), theta (1.0), alpha (1.5e-3), repeats (5).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "matcha/core/stopwatch.hpp"
#include "matcha/ic/plummer.hpp"
#include "matcha/parallel/local_essential_tree.hpp"
#include "matcha/tree/groups.hpp"
#include "matcha/tree/octree.hpp"
#include "matcha/tree/space_filling_curve.hpp"
#include "matcha/tree/walk.hpp"

using namespace matcha;

namespace {

/// One rank's half: its bodies in key order, tree, groups (with the whole sphere's tolerances) and walk tree.
struct Half {
  Particles bodies;
  tree::Octree octree;
  tree::Groups groups;
  tree::WalkTree walkTree;
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : std::size_t{1} << 21;
  const auto ncrit = static_cast<std::uint32_t>(argc > 2 ? std::atoi(argv[2]) : 1024);
  const auto nleaf = static_cast<std::uint32_t>(argc > 3 ? std::atoi(argv[3]) : 16);
  const double theta = argc > 4 ? std::atof(argv[4]) : 1.0;
  const double alpha = argc > 5 ? std::atof(argv[5]) : 1.5e-3;
  const int repeats = std::max(1, argc > 6 ? std::atoi(argv[6]) : 5);

  ic::PlummerParams plummer;
  plummer.numBodies = n;
  plummer.seed = 12345;
  Particles all = ic::makePlummer(plummer);
  // The Plummer sphere's own field (G = M = 1, scale a = 3 pi / 16) for the relative test: what a run's last call
  // would bring, without a force pass.
  const double a2 = std::pow(3.0 * M_PI / 16.0, 2.0);
  for (std::size_t i = 0; i < n; ++i) {
    const double r2 = all.x[i] * all.x[i] + all.y[i] * all.y[i] + all.z[i] * all.z[i];
    const double scale = -1.0 / std::pow(r2 + a2, 1.5);
    all.ax[i] = scale * all.x[i];
    all.ay[i] = scale * all.y[i];
    all.az[i] = scale * all.z[i];
  }
  const Cube cube = tree::computeBoundingCube(all.sources());
  std::vector<std::uint64_t> keys;
  tree::computeMortonKeys(all.sources(), cube, keys);
  all.permute(tree::sortByKey(keys));
  const AccelerationSet accelerations{all.ax, all.ay, all.az};
  const double sumOfMagnitudes = tree::sumOfAccelerationMagnitudes(accelerations);

  Half halves[2];
  for (int h = 0; h < 2; ++h) {
    const std::size_t first = h == 0 ? 0 : n / 2, last = h == 0 ? n / 2 : n;
    Half& half = halves[h];
    half.bodies.resize(last - first);
    for (std::size_t i = first; i < last; ++i) {
      const std::size_t k = i - first;
      half.bodies.x[k] = all.x[i], half.bodies.y[k] = all.y[i], half.bodies.z[k] = all.z[i];
      half.bodies.ax[k] = all.ax[i], half.bodies.ay[k] = all.ay[i], half.bodies.az[k] = all.az[i];
      half.bodies.mass[k] = all.mass[i];
      half.bodies.id[k] = all.id[i];
    }
    const std::vector<std::uint64_t> halfKeys(keys.begin() + std::ptrdiff_t(first),
                                              keys.begin() + std::ptrdiff_t(last));
    tree::buildOctree(halfKeys, cube, nleaf, half.octree);
    tree::computeMultipoles(half.bodies.sources(), theta, MultipoleOrder::quadrupole, half.octree);
    tree::makeGroups(half.octree, half.bodies.sources(), ncrit, half.groups);
    tree::setRelativeTolerancesWithTotal({half.bodies.ax, half.bodies.ay, half.bodies.az}, sumOfMagnitudes, double(n),
                                         alpha, 1.0, half.groups);
    tree::buildWalkTree(half.octree, half.walkTree);
  }

  const Half& sender = halves[0];
  const tree::Groups& theirs = halves[1].groups;
  const parallel::RemoteGroups remote{parallel::domainOf(theirs), theirs.centre, theirs.halfExtent,
                                      theirs.relativeTolerance};
  std::vector<parallel::ExportedCell> cells;
  std::vector<parallel::ExportedBody> bodies;
  std::vector<double> exportSeconds, walkSeconds;
  tree::PlanBuilder builder;
  InteractionPlan plan;
  for (int r = 0; r < repeats; ++r) {
    const Stopwatch pruning;
    parallel::exportSubtree(sender.octree, sender.bodies.sources(), sender.bodies.id, remote, cells, bodies);
    exportSeconds.push_back(pruning.seconds());
    const Stopwatch walking;
    builder.build(sender.walkTree, sender.groups, 0, static_cast<std::uint32_t>(sender.groups.size()), plan);
    walkSeconds.push_back(walking.seconds());
  }
  std::printf("N %zu, ncrit %u, nleaf %u, theta %g, alpha %g: %zu bodies, %zu cells and %zu groups a half\n", n, ncrit,
              nleaf, theta, alpha, sender.bodies.size(), sender.octree.numCells(), sender.groups.size());
  std::printf("sent for the other half's %zu groups: %zu cells, %zu bodies\n", theirs.size(), cells.size(),
              bodies.size());
  std::printf("median of %d, ms: export %.2f, the local walk %.2f (export / walk %.2f)\n", repeats,
              1e3 * median(exportSeconds), 1e3 * median(walkSeconds), median(exportSeconds) / median(walkSeconds));
  return 0;
}
