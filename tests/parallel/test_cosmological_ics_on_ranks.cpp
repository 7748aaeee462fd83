// SPDX-License-Identifier: MIT
// cosmology::makeCosmologicalIcShare (initial_conditions_on_ranks.hpp): the K ranks' shares of a cosmological start
// against the one-process makeCosmologicalIcs, which every rank also makes whole here (the grids are small). The shares
// must cover the grid's bodies once, in FFTW-MPI's slabs, with the whole start's ids, masses and growth exactly and its
// positions and velocities to the rounding of the distributed transforms.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "matcha/core/errors.hpp"
#include "matcha/cosmology/initial_conditions.hpp"
#include "matcha/cosmology/initial_conditions_on_ranks.hpp"
#include "matcha/cosmology/linear_power.hpp"
#include "mpi_testing.hpp"

namespace matcha::cosmology {
namespace {

using parallel::testing::sharedSeed;
using parallel::testing::worldRank;
using parallel::testing::worldSize;

/// The difference a - b taken through the box's faces (positions are wrapped into [0, L)).
double periodicDifference(double a, double b, double boxSize) {
  const double d = a - b;
  return d - boxSize * std::round(d / boxSize);
}

double rms(const std::vector<double>& values) {
  double sum = 0.0;
  for (const double v : values) sum += v * v;
  return std::sqrt(sum / static_cast<double>(values.size()));
}

struct ShareCase {
  int grid;
  int lptOrder;
};

class CosmologicalIcShare : public ::testing::TestWithParam<ShareCase> {};

TEST_P(CosmologicalIcShare, EqualsTheWholeStartsPlanesOnEveryRank) {
  const auto [grid, lptOrder] = GetParam();
  CosmologicalIcParams params;
  params.grid = grid;
  params.boxSize = 50.0;
  params.startRedshift = 19.0;  // large displacements: a few cells' worth moves bodies across the faces
  params.lptOrder = lptOrder;
  params.seed = sharedSeed();
  SCOPED_TRACE("grid " + std::to_string(grid) + ", lpt " + std::to_string(lptOrder) + ", seed " +
               std::to_string(params.seed) + " (MATCHA_TEST_SEED replays it)");
  const LinearPowerSpectrum spectrum = LinearPowerSpectrum::eisensteinHu({});
  const auto power = [&spectrum](double k) { return spectrum.power(k); };

  const CosmologicalIcs whole = makeCosmologicalIcs(params, power);
  const CosmologicalIcs share = makeCosmologicalIcShare(params, power, MPI_COMM_WORLD);

  // FFTW-MPI's slabs: blocks of ceil(n / K) planes in rank order.
  const int numRanks = worldSize();
  const int block = (grid + numRanks - 1) / numRanks;
  const int firstPlane = std::min(grid, worldRank() * block);
  const int planes = std::min(grid, firstPlane + block) - firstPlane;
  const std::size_t perPlane = static_cast<std::size_t>(grid) * grid;
  const std::size_t offset = static_cast<std::size_t>(firstPlane) * perPlane;
  const Particles& mine = share.particles;
  ASSERT_EQ(mine.size(), static_cast<std::size_t>(planes) * perPlane);
  std::uint64_t count = mine.size();
  std::uint64_t total = 0;
  MPI_Allreduce(&count, &total, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(total, whole.particles.size());

  EXPECT_EQ(share.growth.growthFactor, whole.growth.growthFactor);
  EXPECT_EQ(share.growth.secondOrder, whole.growth.secondOrder);
  EXPECT_EQ(share.growth.particleMass, whole.growth.particleMass);

  const double rmsVelocity = rms(whole.particles.vx);
  ASSERT_GT(rmsVelocity, 0.0);
  double worstPosition = 0.0, worstVelocity = 0.0;
  std::size_t crossedFaces = 0;
  const double spacing = params.boxSize / grid;
  for (std::size_t body = 0; body < mine.size(); ++body) {
    const std::size_t i = offset + body;
    ASSERT_EQ(mine.id[body], whole.particles.id[i]);
    ASSERT_EQ(mine.mass[body], whole.particles.mass[i]);
    worstPosition = std::max({worstPosition, std::abs(periodicDifference(mine.x[body], whole.particles.x[i], 50.0)),
                              std::abs(periodicDifference(mine.y[body], whole.particles.y[i], 50.0)),
                              std::abs(periodicDifference(mine.z[body], whole.particles.z[i], 50.0))});
    worstVelocity =
        std::max({worstVelocity, std::abs(mine.vx[body] - whole.particles.vx[i]),
                  std::abs(mine.vy[body] - whole.particles.vy[i]), std::abs(mine.vz[body] - whole.particles.vz[i])});
    ASSERT_TRUE(mine.x[body] >= 0.0 && mine.x[body] < params.boxSize);
    const std::size_t px = i / perPlane;
    if (std::abs(mine.x[body] - (static_cast<double>(px) * spacing)) > 0.5 * params.boxSize) ++crossedFaces;
  }
  // Rounding of the transforms' other order: ~1e-16 of the displacements (a cell is 2.3 Mpc/h here, the rms
  // displacement ~1); 1e-12 of the box would still be far below anything a force could notice.
  EXPECT_LT(worstPosition, 1e-11) << "positions differ from the whole start's";
  EXPECT_LT(worstVelocity, 1e-11 * rmsVelocity) << "velocities differ from the whole start's";
  if (worldRank() == 0) {
    std::printf(
        "[ share    ] grid %d lpt %d on %d ranks: worst |dx| %.2e Mpc/h, worst |dv| %.2e of the rms velocity "
        "%.3g, %zu bodies of rank 0 across the x face\n",
        grid, lptOrder, numRanks, worstPosition, worstVelocity / rmsVelocity, rmsVelocity, crossedFaces);
  }
}

// 16 splits evenly on 1, 2 and 4 ranks; 18 leaves 4 ranks blocks of 5, 5, 5 and 3 planes; 9 leaves the fourth rank
// none (blocks of 3).
INSTANTIATE_TEST_SUITE_P(Grids, CosmologicalIcShare,
                         ::testing::Values(ShareCase{16, 1}, ShareCase{16, 2}, ShareCase{18, 2}, ShareCase{9, 2}),
                         [](const ::testing::TestParamInfo<ShareCase>& param) {
                           return "grid" + std::to_string(param.param.grid) + "_lpt" +
                                  std::to_string(param.param.lptOrder);
                         });

TEST(CosmologicalIcShareInput, BadParametersAreRefusedAlikeOnEveryRank) {
  CosmologicalIcParams params;
  params.grid = 11;  // prime factor 11
  const auto power = [](double) { return 1.0; };
  EXPECT_THROW(makeCosmologicalIcShare(params, power, MPI_COMM_WORLD), InputError);
  params.grid = 16;
  params.lptOrder = 3;
  EXPECT_THROW(makeCosmologicalIcShare(params, power, MPI_COMM_WORLD), InputError);
}

TEST(CosmologicalIcShareBytes, ShrinksWithTheRanksAndBoundsTheWholeStart) {
  CosmologicalIcParams params;
  params.grid = 1024;
  const std::size_t whole = cosmologicalIcBytes(params);
  const std::size_t one = cosmologicalIcShareBytes(params, 1);
  const std::size_t eight = cosmologicalIcShareBytes(params, 8);
  // One rank holds what the whole start does, less nothing but FFTW-MPI's complex layout of the same grid.
  EXPECT_NEAR(static_cast<double>(one), static_cast<double>(whole), 0.01 * static_cast<double>(whole));
  EXPECT_NEAR(static_cast<double>(eight), static_cast<double>(whole) / 8.0, 0.01 * static_cast<double>(whole) / 8.0);
}

}  // namespace
}  // namespace matcha::cosmology
