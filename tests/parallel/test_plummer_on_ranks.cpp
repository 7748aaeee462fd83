// SPDX-License-Identifier: MIT
// A Plummer sphere made in shares over the ranks, as `matcha run` on K ranks makes its generated start: each rank
// samples its own bodies (ic::makePlummerRange) and the centring's sums run through the ranks in body order
// (parallel::sumInRankOrder with ic::PlummerCentring), which must give the one-process ic::makePlummer's bodies bit for
// bit; and sumInRankOrder's sums round as one loop over every rank's terms in rank order.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "matcha/core/errors.hpp"
#include "matcha/ic/plummer.hpp"
#include "matcha/parallel/collective.hpp"
#include "mpi_testing.hpp"

namespace matcha::parallel {
namespace {

using testing::sharedSeed;
using testing::worldRank;
using testing::worldSize;

// Terms whose sum depends on the order they are added in (1e16 absorbs a 1 added after it, not the 1s added before),
// three a rank: the chained sums equal one loop over them in rank order, on every rank.
TEST(SumInRankOrder, RoundsAsOneLoopOverTheRanksInOrder) {
  const auto termsOf = [](int rank) {
    return std::vector<double>{rank % 2 == 0 ? 1.0 : 1e16, 1.0 + rank, rank % 3 == 0 ? -1e16 : 0.5};
  };
  double loop[2] = {0.0, 0.0};
  for (int r = 0; r < worldSize(); ++r) {
    for (const double term : termsOf(r)) {
      loop[0] += term;
      loop[1] += term * term;
    }
  }
  double running[2] = {0.0, 0.0};
  const std::vector<double> mine = termsOf(worldRank());
  sumInRankOrder(
      running,
      [&mine](std::span<double> sums) {
        for (const double term : mine) {
          sums[0] += term;
          sums[1] += term * term;
        }
      },
      MPI_COMM_WORLD);
  EXPECT_EQ(running[0], loop[0]);
  EXPECT_EQ(running[1], loop[1]);
}

// Uneven shares (1001 bodies; with 4 ranks 251, 250, 250, 250), with and without a mass cut: every rank's centred
// share is the one-process sphere's bodies of its range, bit for bit.
TEST(PlummerOnRanks, SharesCentredInRankOrderAreTheWholeSphereBitForBit) {
  const std::uint64_t seed = sharedSeed();
  for (const double massCut : {0.999, 1.0}) {
    ic::PlummerParams params;
    params.numBodies = 1001;
    params.seed = seed;
    params.massCut = massCut;
    const auto ranks = static_cast<std::size_t>(worldSize());
    const auto rank = static_cast<std::size_t>(worldRank());
    const std::size_t first = rank * params.numBodies / ranks;
    const std::size_t count = (rank + 1) * params.numBodies / ranks - first;
    Particles mine = ic::makePlummerRange(params, first, count);
    for (int pass = 0; pass < 2; ++pass) {
      ic::PlummerCentring::Sums sums{};
      sumInRankOrder(
          sums, [&mine](std::span<double> running) { ic::PlummerCentring::add(mine, running.data()); }, MPI_COMM_WORLD);
      ic::PlummerCentring::subtract(sums, mine);
    }
    const Particles whole = ic::makePlummer(params);
    ASSERT_EQ(mine.size(), count);
    for (std::size_t i = 0; i < count; ++i) {
      const std::size_t k = first + i;
      ASSERT_EQ(mine.id[i], whole.id[k]);
      ASSERT_EQ(mine.mass[i], whole.mass[k]);
      ASSERT_EQ(mine.x[i], whole.x[k]) << "body " << k << ", mass cut " << massCut;
      ASSERT_EQ(mine.y[i], whole.y[k]);
      ASSERT_EQ(mine.z[i], whole.z[k]);
      ASSERT_EQ(mine.vx[i], whole.vx[k]);
      ASSERT_EQ(mine.vy[i], whole.vy[k]);
      ASSERT_EQ(mine.vz[i], whole.vz[k]);
    }
  }
}

TEST(PlummerOnRanks, ARangeBeyondTheSphereIsRefused) {
  ic::PlummerParams params;
  params.numBodies = 10;
  EXPECT_THROW(ic::makePlummerRange(params, 8, 3), InputError);
  EXPECT_THROW(ic::makePlummerRange(params, 11, 0), InputError);
  EXPECT_EQ(ic::makePlummerRange(params, 10, 0).size(), 0u);
}

}  // namespace
}  // namespace matcha::parallel
