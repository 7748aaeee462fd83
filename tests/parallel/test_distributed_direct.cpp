// SPDX-License-Identifier: MIT
// Direct summation over the ranks (parallel/distributed_direct_solver.hpp) against the double direct sum of the CPU
// engine on one process: the same sums in another order, so agreement to double rounding; on clustered bodies with
// G and softening that are not 1, with potentials wanted or not, bodies coincident across ranks, and ranks with no
// bodies.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "matcha/core/errors.hpp"
#include "matcha/gpu/cpu_engine.hpp"
#include "matcha/gpu/hermite_cpu_engine.hpp"
#include "matcha/parallel/distributed_direct_solver.hpp"
#include "mpi_testing.hpp"

namespace matcha::parallel {
namespace {

using testing::worldRank;
using testing::worldSize;

/// Rank 0: the largest |a_K - a_1| / |a_1| and |pot_K - pot_1| / |pot_1| of the gathered K-rank forces against the
/// one-process double direct sum of the same bodies (id order), and NaN counts.
struct Agreement {
  double acc = 0.0;
  double pot = 0.0;
};

Agreement compareWithOneProcess(const Particles& mine, const GravityParams& gravity, bool potentials) {
  const Particles gathered = testing::gatherById(mine);
  Agreement worst;
  if (worldRank() != 0) return worst;
  Particles reference = gathered;
  gpu::CpuEngine exact(gpu::Precision::float64);
  exact.evaluateDirect(reference.sources(), gravity, reference.forces());
  for (std::size_t i = 0; i < gathered.size(); ++i) {
    const double norm = std::hypot(reference.ax[i], reference.ay[i], reference.az[i]);
    const double diff = std::hypot(gathered.ax[i] - reference.ax[i], gathered.ay[i] - reference.ay[i],
                                   gathered.az[i] - reference.az[i]);
    worst.acc = std::max(worst.acc, std::isfinite(diff) ? diff / norm : INFINITY);
    if (potentials) {
      const double d = std::abs(gathered.pot[i] - reference.pot[i]) / std::abs(reference.pot[i]);
      worst.pot = std::max(worst.pot, std::isfinite(d) ? d : INFINITY);
    }
  }
  return worst;
}

TEST(DistributedDirect, MatchesOneProcessDoubleDirectSum) {
  const std::uint64_t seed = testing::sharedSeed();
  const Particles all = matcha::testing::clumpInHalo(2000, seed);
  for (const bool potentials : {true, false}) {
    GravityParams gravity;
    gravity.G = 4.3;
    gravity.eps = 0.02;
    Particles mine = testing::dealOut(all, worldRank(), worldSize());
    gpu::HermiteCpuEngine engine;
    DistributedDirectSolver solver(engine, gravity, MPI_COMM_WORLD);
    solver.setPotentialsWanted(potentials);
    const ForceReport report = solver.computeForces(mine);
    EXPECT_EQ(report.counts.bodyBody, mine.size() * all.size());
    if (!potentials) {
      for (const double p : mine.pot) EXPECT_TRUE(std::isnan(p)) << "an unwanted potential was left set";
    }
    const Agreement worst = compareWithOneProcess(mine, gravity, potentials);
    if (worldRank() == 0) {
      std::printf("[ direct   ] %d ranks, N 2000, seed %llu: largest relative difference |a| %.2e, pot %.2e\n",
                  worldSize(), static_cast<unsigned long long>(seed), worst.acc, worst.pot);
      // Double sums of ~2000 terms in two orders: ~1e-13 of the sum of |terms|, which a clumped body's pull, with
      // terms that cancel, can exceed relative to itself; a lost or doubled rank's share is ~1e-1.
      EXPECT_LT(worst.acc, 1e-10);
      if (potentials) {
        EXPECT_LT(worst.pot, 1e-12);
      }
    }
  }
}

TEST(DistributedDirect, RanksWithoutBodiesAndCoincidentBodiesOnTwoRanks) {
  // Fewer bodies than ranks on 4 ranks (some hold none), two of them at the same place (no NaN: with eps > 0 the
  // pair's pull is zero, and a body's own pull is skipped by id, not by place). Ids 0 .. 2, as gatherById needs.
  Particles all(3);
  for (std::size_t i = 0; i < 3; ++i) {
    all.x[i] = double(i == 2 ? 0 : i);
    all.y[i] = 0.5 * double(i);
    all.z[i] = 0.0;
    all.mass[i] = 1.0 + double(i);
    all.id[i] = i;
  }
  all.y[2] = 0.0;  // body 2 on body 0
  Particles mine = testing::dealOut(all, worldRank(), worldSize());
  GravityParams gravity;
  gravity.eps = 0.1;
  gpu::HermiteCpuEngine engine;
  DistributedDirectSolver solver(engine, gravity, MPI_COMM_WORLD);
  solver.computeForces(mine);
  const Agreement worst = compareWithOneProcess(mine, gravity, true);
  if (worldRank() == 0) {
    EXPECT_LT(worst.acc, 1e-14);
    EXPECT_LT(worst.pot, 1e-14);
  }
}

TEST(DistributedDirect, APeriodicBoxIsRefused) {
  GravityParams gravity;
  gravity.periodic.boxSize = 1.0;
  gravity.periodic.splitRadius = 0.01;
  gravity.periodic.cutoffRadius = 0.045;
  gpu::HermiteCpuEngine engine;
  EXPECT_THROW(DistributedDirectSolver(engine, gravity, MPI_COMM_WORLD), InputError);
}

}  // namespace
}  // namespace matcha::parallel
