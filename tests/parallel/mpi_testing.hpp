// SPDX-License-Identifier: MIT
// Helpers of the MPI tests: the world's ranks, a seed shared by every rank, bodies dealt out among the ranks, and
// bodies gathered back by id.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "matcha/core/params.hpp"
#include "matcha/core/particles.hpp"
#include "matcha/testing/generators.hpp"

namespace matcha::parallel::testing {

inline int worldRank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

inline int worldSize() {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

/// A fresh seed (matcha::testing::freshSeed, MATCHA_TEST_SEED to replay) drawn on rank 0, the same on every rank.
inline std::uint64_t sharedSeed() {
  std::uint64_t seed = worldRank() == 0 ? matcha::testing::freshSeed() : 0;
  MPI_Bcast(&seed, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  return seed;
}

/// Body i of `all` goes to rank i % numRanks: every rank starts with bodies from all over the system, so that the
/// first decomposition moves most of them.
inline Particles dealOut(const Particles& all, int rank, int numRanks) {
  std::vector<std::uint32_t> mine;
  for (std::size_t i = rank; i < all.size(); i += numRanks) mine.push_back(static_cast<std::uint32_t>(i));
  Particles part(mine.size());
  for (std::size_t k = 0; k < mine.size(); ++k) {
    const std::size_t i = mine[k];
    part.x[k] = all.x[i], part.y[k] = all.y[i], part.z[k] = all.z[i];
    part.vx[k] = all.vx[i], part.vy[k] = all.vy[i], part.vz[k] = all.vz[i];
    part.mass[k] = all.mass[i];
    part.ax[k] = all.ax[i], part.ay[k] = all.ay[i], part.az[k] = all.az[i];
    part.pot[k] = all.pot[i];
    part.id[k] = all.id[i];
  }
  return part;
}

/// Every rank's values of one array, concatenated by rank (MPI_Allgatherv).
template <class T>
std::vector<T> allGather(const std::vector<T>& local, MPI_Datatype type) {
  const int numRanks = worldSize();
  int count = static_cast<int>(local.size());
  std::vector<int> counts(numRanks), offsets(numRanks + 1, 0);
  MPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD);
  for (int r = 0; r < numRanks; ++r) offsets[r + 1] = offsets[r] + counts[r];
  std::vector<T> all(static_cast<std::size_t>(offsets[numRanks]));
  MPI_Allgatherv(local.data(), count, type, all.data(), counts.data(), offsets.data(), type, MPI_COMM_WORLD);
  return all;
}

/// All ranks' bodies on every rank, body k being the one with id k (ids must be 0 .. N-1, each on one rank).
inline Particles gatherById(const Particles& local) {
  std::vector<double> arrays[11];
  const std::vector<double>* from[11] = {&local.x,    &local.y,  &local.z,  &local.vx, &local.vy, &local.vz,
                                         &local.mass, &local.ax, &local.ay, &local.az, &local.pot};
  for (int k = 0; k < 11; ++k) arrays[k] = allGather(*from[k], MPI_DOUBLE);
  const std::vector<std::uint64_t> ids = allGather(local.id, MPI_UINT64_T);
  Particles all(ids.size());
  std::vector<double>* to[11] = {&all.x,    &all.y,  &all.z,  &all.vx, &all.vy, &all.vz,
                                 &all.mass, &all.ax, &all.ay, &all.az, &all.pot};
  for (std::size_t j = 0; j < ids.size(); ++j) {
    const std::uint64_t i = ids[j];
    if (i >= all.size()) continue;  // the callers check ids themselves
    for (int k = 0; k < 11; ++k) (*to[k])[i] = arrays[k][j];
    all.id[i] = i;
  }
  return all;
}

/// The tree settings a parameterised list-coverage test runs with.
struct TreeCase {
  double theta;
  MultipoleOrder order;
  double alpha;
  std::uint32_t ncrit;
};

}  // namespace matcha::parallel::testing
