// SPDX-License-Identifier: MIT
// Domain decomposition along the Morton curve: every body on exactly one rank, in that rank's key range, with all its
// data; weights balanced; bodies that cross a boundary migrate; ranks left without bodies; too many ranks refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "matcha/core/errors.hpp"
#include "matcha/parallel/domain_decomposition.hpp"
#include "mpi_testing.hpp"

namespace matcha::parallel {
namespace {

using testing::dealOut;
using testing::gatherById;
using testing::worldRank;
using testing::worldSize;

/// Checks, on this rank, that every body lies in this rank's key range, and across ranks that the ids are 0 .. N-1,
/// each once, and that each body carries the data of `reference`'s body of that id.
void expectCoveredOnce(const Particles& local, const Domain& domain, const Particles& reference) {
  ASSERT_EQ(domain.numRanks(), worldSize());
  EXPECT_EQ(domain.splitters.front(), 0u);
  EXPECT_EQ(domain.splitters.back(), kKeyEnd);
  EXPECT_TRUE(std::is_sorted(domain.splitters.begin(), domain.splitters.end()));
  std::vector<std::uint64_t> keys;
  domainKeys(local, domain, keys);
  const int rank = worldRank();
  for (std::size_t i = 0; i < local.size(); ++i) {
    ASSERT_GE(keys[i], domain.splitters[rank]) << "body " << local.id[i];
    ASSERT_LT(keys[i], domain.splitters[rank + 1]) << "body " << local.id[i];
  }
  std::vector<std::uint64_t> ids = testing::allGather(local.id, MPI_UINT64_T);
  std::sort(ids.begin(), ids.end());
  ASSERT_EQ(ids.size(), reference.size());
  for (std::size_t k = 0; k < ids.size(); ++k) ASSERT_EQ(ids[k], k) << "an id lost or duplicated";
  for (std::size_t i = 0; i < local.size(); ++i) {
    const std::uint64_t id = local.id[i];
    ASSERT_EQ(local.x[i], reference.x[id]);
    ASSERT_EQ(local.y[i], reference.y[id]);
    ASSERT_EQ(local.z[i], reference.z[id]);
    ASSERT_EQ(local.vx[i], reference.vx[id]);
    ASSERT_EQ(local.vz[i], reference.vz[id]);
    ASSERT_EQ(local.mass[i], reference.mass[id]);
    ASSERT_EQ(local.ay[i], reference.ay[id]);
    ASSERT_EQ(local.pot[i], reference.pot[id]);
  }
}

/// Each splitter is the smallest key s with W(key < s) >= r W / K, by brute force over every rank's keys.
void expectSmallestBalancedSplitters(const Particles& local, const std::vector<double>& weights, const Domain& domain) {
  std::vector<std::uint64_t> keys;
  domainKeys(local, domain, keys);
  const std::vector<std::uint64_t> allKeys = testing::allGather(keys, MPI_UINT64_T);
  const std::vector<double> allWeights = testing::allGather(weights, MPI_DOUBLE);
  double total = 0.0;
  for (const double w : allWeights) total += w;
  const auto weightBelow = [&](std::uint64_t key) {
    double below = 0.0;
    for (std::size_t k = 0; k < allKeys.size(); ++k) below += allKeys[k] < key ? allWeights[k] : 0.0;
    return below;
  };
  for (int r = 1; r < worldSize(); ++r) {
    const double target = total * double(r) / double(worldSize());
    const std::uint64_t s = domain.splitters[r];
    EXPECT_GE(weightBelow(s), target) << "splitter " << r;
    EXPECT_LT(weightBelow(s - 1), target) << "splitter " << r << " is not the smallest";
  }
}

/// A body's weight from its id alone, so that every rank agrees: 1 .. 97.
double weightOf(std::uint64_t id) { return 1.0 + double((id * 2654435761u) % 97u); }

/// weightOf for each of `bodies`, in their order.
std::vector<double> weightsOf(const Particles& bodies) {
  std::vector<double> weights(bodies.size());
  for (std::size_t i = 0; i < bodies.size(); ++i) weights[i] = weightOf(bodies.id[i]);
  return weights;
}

Particles plummerWithData(std::size_t n, std::uint64_t seed) {
  Particles all = matcha::testing::plummer(n, seed);
  for (std::size_t i = 0; i < n; ++i) {  // accelerations and potentials must travel too
    all.ax[i] = 1.0 + double(i);
    all.ay[i] = -2.0 * double(i);
    all.az[i] = 0.5;
    all.pot[i] = -double(i);
  }
  return all;
}

TEST(DomainDecomposition, CoversEveryBodyOnceInItsKeyRange) {
  const std::uint64_t seed = testing::sharedSeed();
  SCOPED_TRACE(matcha::testing::seedTrace(seed));
  const std::size_t n = 5000;
  const Particles all = plummerWithData(n, seed);
  Particles local = dealOut(all, worldRank(), worldSize());
  DecompositionStats stats;
  const Domain domain = decompose(local, nullptr, MPI_COMM_WORLD, &stats);
  expectCoveredOnce(local, domain, all);
  EXPECT_EQ(stats.numBodies, n);
  // Unit weights and distinct keys: every rank holds floor(N/K) or ceil(N/K) bodies.
  const std::size_t fewest = n / worldSize(), most = (n + worldSize() - 1) / worldSize();
  EXPECT_GE(local.size(), fewest);
  EXPECT_LE(local.size(), most);
  EXPECT_LE(stats.imbalance(), double(most) / (double(n) / worldSize()) + 1e-12);
}

/// The extent a caller takes in a pass of its own (DistributedTreeSolver's checks) gives the cube and the split that
/// decompose's own pass gives, bit for bit, and the same bodies on each rank.
TEST(DomainDecomposition, AGivenExtentGivesTheSameCubeAndSplit) {
  const std::uint64_t seed = testing::sharedSeed();
  SCOPED_TRACE(matcha::testing::seedTrace(seed));
  const Particles all = plummerWithData(5000, seed);
  Particles own = dealOut(all, worldRank(), worldSize());
  Particles given = own;
  const Domain byItself = decompose(own, nullptr, MPI_COMM_WORLD);
  const tree::Extent extent = tree::computeExtent(given.sources());
  const Domain fromExtent = decompose(given, nullptr, MPI_COMM_WORLD, nullptr, nullptr, nullptr, &extent);
  EXPECT_EQ(fromExtent.cube.side, byItself.cube.side);
  for (int d = 0; d < 3; ++d) EXPECT_EQ(fromExtent.cube.lo[d], byItself.cube.lo[d]);
  EXPECT_EQ(fromExtent.splitters, byItself.splitters);
  EXPECT_EQ(given.id, own.id);
}

TEST(DomainDecomposition, BalancesWeightsAndCarriesThem) {
  const std::uint64_t seed = testing::sharedSeed();
  SCOPED_TRACE(matcha::testing::seedTrace(seed));
  const std::size_t n = 6000;
  const Particles all = plummerWithData(n, seed);
  Particles local = dealOut(all, worldRank(), worldSize());
  std::vector<double> weights = weightsOf(local);
  DecompositionStats stats;
  const Domain domain = decompose(local, &weights, MPI_COMM_WORLD, &stats);
  expectCoveredOnce(local, domain, all);
  ASSERT_EQ(weights.size(), local.size());
  double work = 0.0, total = 0.0;
  for (std::size_t i = 0; i < local.size(); ++i) {
    ASSERT_EQ(weights[i], weightOf(local.id[i])) << "weights must travel with their bodies";
    work += weights[i];
  }
  for (std::size_t id = 0; id < n; ++id) total += weightOf(id);
  EXPECT_DOUBLE_EQ(stats.work, work);
  // Each split lies within one body's weight (at most 97) of its target.
  const double mean = total / worldSize();
  EXPECT_NEAR(work, mean, 2 * 97.0) << "rank " << worldRank();
  EXPECT_LE(stats.imbalance(), 1.0 + 2 * 97.0 / mean);
  expectSmallestBalancedSplitters(local, weights, domain);
}

TEST(DomainDecomposition, MigratesBodiesThatCrossDomains) {
  const std::uint64_t seed = testing::sharedSeed();
  SCOPED_TRACE(matcha::testing::seedTrace(seed));
  const std::size_t n = 4000;
  Particles all = plummerWithData(n, seed);
  Particles local = dealOut(all, worldRank(), worldSize());
  const Domain first = decompose(local, nullptr, MPI_COMM_WORLD);
  // Body i takes the place of body (i + N/2) mod N: the same set of positions (so the same cube and, with unit
  // weights, the same splitters), but each body now lies where another did, in another rank's range for about a
  // fraction 1 - 1/K of them (Plummer ids are in random order).
  const Particles before = all;
  const auto move = [&](Particles& p) {
    for (std::size_t i = 0; i < p.size(); ++i) {
      const std::size_t from = (p.id[i] + n / 2) % n;
      p.x[i] = before.x[from];
      p.y[i] = before.y[from];
      p.z[i] = before.z[from];
    }
  };
  move(local);
  move(all);
  DecompositionStats stats;
  DecompositionBuffers buffers;
  const Domain domain = decompose(local, nullptr, MPI_COMM_WORLD, &stats, nullptr, &buffers);
  expectCoveredOnce(local, domain, all);
  EXPECT_EQ(domain.splitters, first.splitters);
  // The keys followed the bodies, those that filled the leavers' places and those received too: the caller's tree
  // takes them instead of computing them again.
  std::vector<std::uint64_t> keys;
  domainKeys(local, domain, keys);
  EXPECT_EQ(buffers.keys, keys);
  std::uint64_t moved = stats.bodiesSent, arrived = stats.bodiesReceived;
  MPI_Allreduce(MPI_IN_PLACE, &moved, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &arrived, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(moved, arrived);
  if (worldSize() > 1) {
    EXPECT_GT(moved, n / 4) << "the exchange of places should move many bodies to other ranks";
  }
  // A second call on bodies that did not move moves nothing.
  const Domain again = decompose(local, nullptr, MPI_COMM_WORLD, &stats);
  EXPECT_EQ(again.splitters, domain.splitters);
  EXPECT_EQ(stats.bodiesSent, 0u);
  EXPECT_EQ(stats.bodiesReceived, 0u);
}

// A search that starts from the last call's splitters (the buffers kept) ends where one from scratch does, after the
// bodies drifted and grew apart (a new bounding cube) and their weights changed, and after they were shuffled across
// the whole sphere (a guess far off); after the drift it reads few keys again.
TEST(DomainDecomposition, StartsFromTheLastSplittersAndEndsWhereAFreshSearchDoes) {
  const std::uint64_t seed = testing::sharedSeed();
  SCOPED_TRACE(matcha::testing::seedTrace(seed));
  const std::size_t n = 20000;
  const Particles all = plummerWithData(n, seed);
  Particles local = dealOut(all, worldRank(), worldSize());
  std::vector<double> weights = weightsOf(local);
  DecompositionBuffers buffers;
  DecompositionStats stats;
  decompose(local, &weights, MPI_COMM_WORLD, &stats, nullptr, &buffers);
  EXPECT_FALSE(stats.splitFromLast) << "the first call has no last splitters";
  const auto check = [&](const char* what, std::uint64_t* revisitedFromLast) {
    SCOPED_TRACE(what);
    Particles fresh = local;
    std::vector<double> freshWeights = weights;
    DecompositionStats warm, cold;
    const Domain fromLast = decompose(local, &weights, MPI_COMM_WORLD, &warm, nullptr, &buffers);
    const Domain fromScratch = decompose(fresh, &freshWeights, MPI_COMM_WORLD, &cold);
    EXPECT_EQ(warm.splitFromLast, worldSize() > 1);
    EXPECT_FALSE(cold.splitFromLast);
    EXPECT_EQ(fromLast.splitters, fromScratch.splitters);
    EXPECT_EQ(buffers.last.splitters, fromLast.splitters);
    expectSmallestBalancedSplitters(local, weights, fromLast);
    std::uint64_t revisited[2] = {warm.splitKeysRevisited, cold.splitKeysRevisited};
    MPI_Allreduce(MPI_IN_PLACE, revisited, 2, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    if (revisitedFromLast != nullptr) {
      revisitedFromLast[0] = revisited[0];
      revisitedFromLast[1] = revisited[1];
    }
  };
  // A drift: every body a little out (the cube grows 0.1%) and a random step of 1e-4 of the cube, weights changed.
  for (std::size_t i = 0; i < local.size(); ++i) {
    const double wobble = 1e-4 * std::sin(double(local.id[i]));
    local.x[i] = 1.001 * local.x[i] + wobble;
    local.y[i] = 1.001 * local.y[i] - wobble;
    local.z[i] = 1.001 * local.z[i] + 0.5 * wobble;
    weights[i] += local.id[i] % 5 == 0 ? 3.0 : 0.0;
  }
  std::uint64_t revisited[2] = {0, 0};
  check("after a drift", revisited);
  if (worldSize() > 1) {
    EXPECT_LT(revisited[0] * 10, revisited[1]) << "from the last splitters the search should read few keys again";
  }
  // The bodies change places across the sphere: the guess says little, the answer is the same.
  for (std::size_t i = 0; i < local.size(); ++i) {
    const std::size_t from = (local.id[i] * 7919 + 13) % n;
    local.x[i] = all.x[from];
    local.y[i] = all.y[from];
    local.z[i] = all.z[from];
  }
  check("after a shuffle", nullptr);
  // Unit weights (none given) from the last weighted split.
  std::vector<double> none;
  Particles fresh = local;
  const Domain fromLast = decompose(local, &none, MPI_COMM_WORLD, nullptr, nullptr, &buffers);
  const Domain fromScratch = decompose(fresh, nullptr, MPI_COMM_WORLD);
  EXPECT_EQ(fromLast.splitters, fromScratch.splitters);
}

// Block time steps keep each body's bin in Particles::timeBin: it travels with the body, also to a rank that started
// with no bodies (and so no bins), and bodies without bins get none.
TEST(DomainDecomposition, CarriesTimeBinsWithTheirBodies) {
  const std::uint64_t seed = testing::sharedSeed();
  SCOPED_TRACE(matcha::testing::seedTrace(seed));
  const std::size_t n = 3000;
  Particles all = plummerWithData(n, seed);
  const auto binOf = [](std::uint64_t id) { return static_cast<std::uint8_t>((id * 2654435761u) % 23u); };
  Particles plain = worldRank() == 0 ? all : Particles{};  // every body on rank 0 first
  all.timeBin.resize(n);
  for (std::size_t i = 0; i < n; ++i) all.timeBin[i] = binOf(all.id[i]);
  Particles local = worldRank() == 0 ? all : Particles{};
  decompose(local, nullptr, MPI_COMM_WORLD);
  const auto expectBins = [&](const Particles& p) {
    ASSERT_EQ(p.timeBin.size(), p.size()) << "rank " << worldRank();
    for (std::size_t i = 0; i < p.size(); ++i) ASSERT_EQ(p.timeBin[i], binOf(p.id[i])) << "body " << p.id[i];
  };
  expectBins(local);
  // Moved as in MigratesBodiesThatCrossDomains: most bodies change rank, and some fill the places of those that left.
  const Particles before = all;
  for (Particles* p : {&local, &all}) {
    for (std::size_t i = 0; i < p->size(); ++i) {
      const std::size_t from = (p->id[i] + n / 2) % n;
      p->x[i] = before.x[from];
      p->y[i] = before.y[from];
      p->z[i] = before.z[from];
    }
  }
  const Domain domain = decompose(local, nullptr, MPI_COMM_WORLD);
  expectCoveredOnce(local, domain, all);
  expectBins(local);
  decompose(plain, nullptr, MPI_COMM_WORLD);
  EXPECT_TRUE(plain.timeBin.empty()) << "bodies without bins came back with some";
}

TEST(DomainDecomposition, LeavesRanksEmptyWhenOneBodyHoldsTheWork) {
  const std::uint64_t seed = testing::sharedSeed();
  SCOPED_TRACE(matcha::testing::seedTrace(seed));
  const std::size_t n = 1000;
  const Particles all = plummerWithData(n, seed);
  Particles local = dealOut(all, worldRank(), worldSize());
  // Body 0 weighs as much as a million others: every split but the outer ones falls right after it.
  std::vector<double> weights(local.size(), 1.0);
  for (std::size_t i = 0; i < local.size(); ++i) weights[i] = local.id[i] == 0 ? 1e6 : 1.0;
  const Domain domain = decompose(local, &weights, MPI_COMM_WORLD);
  expectCoveredOnce(local, domain, all);
  int empty = local.empty() ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &empty, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(empty, std::max(0, worldSize() - 2)) << "ranks between the first and the last get nothing";
  // And a decomposition from there (empty ranks bring no bodies) still covers every body once.
  Particles again = local;
  const Domain second = decompose(again, nullptr, MPI_COMM_WORLD);
  expectCoveredOnce(again, second, all);
}

TEST(DomainDecomposition, RefusesMoreRanksThanBodies) {
  // K - 1 bodies, all on rank 0: every rank throws the same InputError.
  const std::size_t n = static_cast<std::size_t>(worldSize() - 1);
  Particles local = worldRank() == 0 && n > 0 ? matcha::testing::plummer(n, 1) : Particles{};
  std::string message;
  try {
    decompose(local, nullptr, MPI_COMM_WORLD);
  } catch (const InputError& error) {
    message = error.what();
  }
  EXPECT_NE(message.find("ranks: run with at most " + std::to_string(n) + " ranks"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos);
}

TEST(DomainDecomposition, RefusesNegativeWeightsOnEveryRank) {
  const Particles all = matcha::testing::plummer(64, 3);
  Particles local = dealOut(all, worldRank(), worldSize());
  std::vector<double> weights(local.size(), 1.0);
  if (worldRank() == worldSize() - 1 && !weights.empty()) weights[0] = -1.0;
  EXPECT_THROW(decompose(local, &weights, MPI_COMM_WORLD), InputError);
}

}  // namespace
}  // namespace matcha::parallel
