// SPDX-License-Identifier: MIT
// The CPU side of a force call: the tree build and the walk of every group (TreeSolver::buildPlanOnly), with the
// relative test scaled by accelerations from a cheap tree; the median of six calls after a first that takes the page
// faults. Plain enough to compile against the library of commit 0af218b as well as today's:
// scripts/cpu-side-vs-0af218b.sh builds both and runs them side by side. Args: N (default 2^18), ncrit (default:
// the library's).
#include <algorithm>
#include <cstdio>
#include <vector>

#include "matcha/core/stopwatch.hpp"
#include "matcha/gpu/cpu_engine.hpp"
#include "matcha/ic/plummer.hpp"
#include "matcha/tree/tree_solver.hpp"
using namespace matcha;
int main(int argc, char** argv) {
  const std::size_t n = argc > 1 ? atol(argv[1]) : (1u << 18);
  ic::PlummerParams pp;
  pp.numBodies = n;
  pp.seed = 7;
  Particles p = ic::makePlummer(pp);
  gpu::CpuEngine engine(gpu::Precision::float32);
  {
    TreeParams rough;
    rough.theta = 0.8;
    rough.alpha = 0.0;
    rough.multipole = MultipoleOrder::monopole;
    tree::TreeSolver(engine, rough, GravityParams{}).computeForces(p);
  }
  TreeParams params;
  if (argc > 2) params.ncrit = atoi(argv[2]);
  tree::TreeSolver solver(engine, params, GravityParams{});
  std::vector<double> times;
  std::size_t entries = 0;
  for (int rep = 0; rep < 7; ++rep) {
    Stopwatch clock;
    const InteractionPlan& plan = solver.buildPlanOnly(p);
    times.push_back(clock.seconds());
    entries = plan.cellList.size() + plan.bodyList.size();
  }
  std::sort(times.begin() + 1, times.end());  // the first call takes the page faults
  std::printf("N %zu: tree build + walk median %.1f ms (min %.1f), %zu groups, %zu list entries\n", n, 1e3 * times[3],
              1e3 * times[1], solver.groups().size(), entries);
}
