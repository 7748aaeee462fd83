// SPDX-License-Identifier: MIT
// How much of the periodic short range's list work lies within r_cut: the plan of a `matcha ic clumps` box (seed 7,
// the CUDA engine's periodic tree defaults at alpha 0, walked on the CPU engine), every list body against every body
// of its group at the nearest image. Prints the list bodies a body, the share of those pairs within r_cut and the
// share a cull of whole (task, tile) blocks would keep: `rows` group bodies (a warp task) against `tile` consecutive
// list entries, dropped where their bounding boxes lie r_cut apart. bench/RESULTS.md, 2026-12-03 (26th session).
// Args: N (default 2^21), mesh points per side (default: the default for N), rows (128), tile (64).
#include <tbb/parallel_for.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "matcha/gpu/cpu_engine.hpp"
#include "matcha/ic/periodic_boxes.hpp"
#include "matcha/mesh/particle_mesh.hpp"
#include "matcha/mesh/treepm_solver.hpp"
#include "matcha/tree/periodic_tree_solver.hpp"

using namespace matcha;

namespace {

using Point = std::array<double, 3>;

struct Box {
  Point lo{1e300, 1e300, 1e300}, hi{-1e300, -1e300, -1e300};
  void add(const Point& p) {
    for (int a = 0; a < 3; ++a) {
      lo[a] = std::min(lo[a], p[a]);
      hi[a] = std::max(hi[a], p[a]);
    }
  }
  double distance2(const Box& other) const {
    double d2 = 0.0;
    for (int a = 0; a < 3; ++a) {
      const double gap = std::max({0.0, other.lo[a] - hi[a], lo[a] - other.hi[a]});
      d2 += gap * gap;
    }
    return d2;
  }
};

}  // namespace

int main(int argc, char** argv) {
  const std::size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : std::size_t{1} << 21;
  ic::ClumpsParams clumps;
  clumps.numBodies = n;
  clumps.seed = 7;
  Particles p = ic::makeClumps(clumps);
  const double L = clumps.boxSize;
  mesh::MeshParams mesh;
  mesh.boxSize = L;
  mesh.grid = argc > 2 ? std::atoi(argv[2]) : mesh::defaultPmGrid(n, mesh);
  const std::uint32_t rows = argc > 3 ? static_cast<std::uint32_t>(std::atoi(argv[3])) : 128;
  const std::size_t tile = argc > 4 ? std::strtoull(argv[4], nullptr, 10) : 64;
  GravityParams gravity;
  gravity.periodic = mesh::periodicSplit(mesh);
  const double cut2 = gravity.periodic.cutoffRadius * gravity.periodic.cutoffRadius;
  gpu::CpuEngine engine(gpu::Precision::float32);
  TreeParams params = tree::periodicDefaultTreeParams();
  params.alpha = 0.0;  // theta alone: the relative test needs the accelerations of an earlier call
  tree::PeriodicTreeSolver solver(engine, params, gravity);
  solver.computeForces(p);  // sorts the bodies; the plan indexes them in that order
  const InteractionPlan& plan = solver.lastPlan();

  std::atomic<unsigned long long> pairs{0}, within{0}, kept{0};
  tbb::parallel_for(std::size_t{0}, plan.numGroups(), [&](std::size_t g) {
    const double* c = &plan.groupCentres[3 * g];
    const auto image = [&](std::uint32_t i) {
      const double x[3] = {p.x[i], p.y[i], p.z[i]};
      Point d;
      for (int a = 0; a < 3; ++a) d[a] = x[a] - c[a] - L * std::round((x[a] - c[a]) / L);
      return d;
    };
    std::vector<Point> sources;
    for (std::uint32_t k = plan.bodyListOffsets[g]; k < plan.bodyListOffsets[g + 1]; ++k) {
      for (std::uint32_t j = plan.bodyList[k].first; j < plan.bodyList[k].last; ++j) sources.push_back(image(j));
    }
    unsigned long long groupPairs = 0, groupWithin = 0, groupKept = 0;
    const BodyRange group = plan.groups[g];
    for (std::uint32_t first = group.first; first < group.last; first += rows) {
      std::vector<Point> targets;
      Box targetBox;
      for (std::uint32_t i = first; i < std::min(group.last, first + rows); ++i) {
        targets.push_back(image(i));
        targetBox.add(targets.back());
      }
      for (std::size_t s0 = 0; s0 < sources.size(); s0 += tile) {
        const std::size_t s1 = std::min(sources.size(), s0 + tile);
        Box tileBox;
        for (std::size_t s = s0; s < s1; ++s) tileBox.add(sources[s]);
        const unsigned long long blockPairs = (s1 - s0) * targets.size();
        groupPairs += blockPairs;
        if (targetBox.distance2(tileBox) < cut2) groupKept += blockPairs;
        for (const Point& t : targets) {
          for (std::size_t s = s0; s < s1; ++s) {
            const double dx = sources[s][0] - t[0], dy = sources[s][1] - t[1], dz = sources[s][2] - t[2];
            groupWithin += dx * dx + dy * dy + dz * dz < cut2 ? 1 : 0;
          }
        }
      }
    }
    pairs += groupPairs;
    within += groupWithin;
    kept += groupKept;
  });
  std::printf(
      "N %zu, mesh %d^3, r_cut %.4f L, %zu groups: %.1f list bodies a body, %.1f%% of the pairs within r_cut, "
      "%.1f%% in the blocks of %u rows x %zu entries a cull would keep\n",
      n, mesh.grid, gravity.periodic.cutoffRadius / L, plan.numGroups(), double(pairs) / double(n),
      100.0 * double(within) / double(pairs), 100.0 * double(kept) / double(pairs), rows, tile);
  return 0;
}
