// SPDX-License-Identifier: MIT
#include "rank_bodies.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>

#include "matcha/core/errors.hpp"
#include "matcha/gpu/engine_factory.hpp"
#include "matcha/parallel/collective.hpp"
#include "matcha/tree/periodic_tree_solver.hpp"
#include "options.hpp"

namespace matcha::app {

namespace {

template <class T>
MPI_Datatype mpiType() {
  if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
  return MPI_UINT64_T;
}

/// Every array of Particles, the same way on every rank.
template <class Visit>
void forEachArray(Particles& p, const Particles* other, Visit&& visit) {
  visit(p.x, other ? &other->x : nullptr);
  visit(p.y, other ? &other->y : nullptr);
  visit(p.z, other ? &other->z : nullptr);
  visit(p.vx, other ? &other->vx : nullptr);
  visit(p.vy, other ? &other->vy : nullptr);
  visit(p.vz, other ? &other->vz : nullptr);
  visit(p.mass, other ? &other->mass : nullptr);
  visit(p.ax, other ? &other->ax : nullptr);
  visit(p.ay, other ? &other->ay : nullptr);
  visit(p.az, other ? &other->az : nullptr);
  visit(p.pot, other ? &other->pot : nullptr);
  visit(p.id, other ? &other->id : nullptr);
}

}  // namespace

Shares evenShares(std::uint64_t numBodies, int numRanks) {
  Shares shares;
  shares.counts.assign(numRanks, 0);
  shares.offsets.assign(numRanks, 0);
  for (int r = 0; r < numRanks; ++r) {
    const std::uint64_t first = numBodies * std::uint64_t(r) / std::uint64_t(numRanks);
    const std::uint64_t last = numBodies * std::uint64_t(r + 1) / std::uint64_t(numRanks);
    shares.offsets[r] = static_cast<int>(first);
    shares.counts[r] = static_cast<int>(last - first);
  }
  return shares;
}

Shares sharesOf(std::vector<int> counts) {
  Shares shares;
  shares.offsets.assign(counts.size(), 0);
  for (std::size_t r = 1; r < counts.size(); ++r) shares.offsets[r] = shares.offsets[r - 1] + counts[r - 1];
  shares.counts = std::move(counts);
  return shares;
}

Particles scatterBodies(const Particles* all, const Shares& shares, MPI_Comm comm) {
  Particles mine;
  mine.resize(static_cast<std::size_t>(shares.counts[parallel::rankOf(comm)]));
  const Particles empty;
  forEachArray(mine, all != nullptr ? all : &empty, [&](auto& local, const auto* whole) {
    using T = typename std::decay_t<decltype(local)>::value_type;
    MPI_Scatterv(all != nullptr ? whole->data() : nullptr, shares.counts.data(), shares.offsets.data(), mpiType<T>(),
                 local.data(), static_cast<int>(local.size()), mpiType<T>(), 0, comm);
  });
  return mine;
}

void broadcastBodies(Particles& bodies, MPI_Comm comm) {
  std::uint64_t count = bodies.size();
  MPI_Bcast(&count, 1, MPI_UINT64_T, 0, comm);
  if (parallel::rankOf(comm) != 0) bodies.resize(static_cast<std::size_t>(count));
  // In pieces of at most 2^30 values: MPI's counts are int.
  constexpr std::size_t kPiece = std::size_t{1} << 30;
  forEachArray(bodies, nullptr, [&](auto& values, const auto*) {
    using T = typename std::decay_t<decltype(values)>::value_type;
    for (std::size_t first = 0; first < values.size(); first += kPiece) {
      MPI_Bcast(values.data() + first, static_cast<int>(std::min(kPiece, values.size() - first)), mpiType<T>(), 0,
                comm);
    }
  });
}

void broadcastState(CheckpointState& state, MPI_Comm comm) {
  // Names (each ended by a newline) and sizes first, then the values of each kind in name order.
  std::string names;
  std::vector<std::uint64_t> sizes;  // scalars, then each double array's length, then each float array's
  std::vector<double> doubles;
  std::vector<float> floats;
  const bool root = parallel::rankOf(comm) == 0;
  if (root) {
    sizes.push_back(state.scalars.size());
    sizes.push_back(state.doubles.size());
    sizes.push_back(state.floats.size());
    for (const auto& [name, value] : state.scalars) {
      names += name + "\n";
      doubles.push_back(value);
    }
    for (const auto& [name, values] : state.doubles) {
      names += name + "\n";
      sizes.push_back(values.size());
      doubles.insert(doubles.end(), values.begin(), values.end());
    }
    for (const auto& [name, values] : state.floats) {
      names += name + "\n";
      sizes.push_back(values.size());
      floats.insert(floats.end(), values.begin(), values.end());
    }
  }
  std::uint64_t lengths[4] = {names.size(), sizes.size(), doubles.size(), floats.size()};
  MPI_Bcast(lengths, 4, MPI_UINT64_T, 0, comm);
  names.resize(lengths[0]);
  sizes.resize(lengths[1]);
  doubles.resize(lengths[2]);
  floats.resize(lengths[3]);
  MPI_Bcast(names.data(), static_cast<int>(lengths[0]), MPI_CHAR, 0, comm);
  MPI_Bcast(sizes.data(), static_cast<int>(lengths[1]), MPI_UINT64_T, 0, comm);
  MPI_Bcast(doubles.data(), static_cast<int>(lengths[2]), MPI_DOUBLE, 0, comm);
  MPI_Bcast(floats.data(), static_cast<int>(lengths[3]), MPI_FLOAT, 0, comm);
  if (root) return;
  state = CheckpointState{};
  std::size_t start = 0;
  const auto nextName = [&] {
    const std::size_t end = names.find('\n', start);
    std::string name = names.substr(start, end - start);
    start = end + 1;
    return name;
  };
  auto nextDouble = doubles.begin();
  auto nextFloat = floats.begin();
  for (std::uint64_t k = 0; k < sizes[0]; ++k) state.scalars[nextName()] = *nextDouble++;
  std::size_t nextSize = 3;
  for (std::uint64_t k = 0; k < sizes[1]; ++k) {
    const auto length = static_cast<std::ptrdiff_t>(sizes[nextSize++]);
    state.doubles[nextName()].assign(nextDouble, nextDouble + length);
    nextDouble += length;
  }
  for (std::uint64_t k = 0; k < sizes[2]; ++k) {
    const auto length = static_cast<std::ptrdiff_t>(sizes[nextSize++]);
    state.floats[nextName()].assign(nextFloat, nextFloat + length);
    nextFloat += length;
  }
}

Shares sharesOnRanks(std::size_t count, MPI_Comm comm) {
  std::vector<int> counts(static_cast<std::size_t>(parallel::numRanksOf(comm)));
  const int mine = static_cast<int>(count);
  MPI_Allgather(&mine, 1, MPI_INT, counts.data(), 1, MPI_INT, comm);
  return sharesOf(std::move(counts));
}

Particles gatherBodies(const Particles& mine, MPI_Comm comm, Shares* sharesOut) {
  const bool root = parallel::rankOf(comm) == 0;
  const int count = static_cast<int>(mine.size());
  Shares shares = sharesOnRanks(mine.size(), comm);
  Particles all;
  if (root) all.resize(shares.total());
  forEachArray(all, &mine, [&](auto& whole, const auto* local) {
    using T = typename std::decay_t<decltype(whole)>::value_type;
    MPI_Gatherv(local->data(), count, mpiType<T>(), root ? whole.data() : nullptr, shares.counts.data(),
                shares.offsets.data(), mpiType<T>(), 0, comm);
  });
  if (sharesOut != nullptr) *sharesOut = std::move(shares);
  return all;
}

void requireDistinctIdsOnRanks(const Particles& mine, const std::string& source, MPI_Comm comm) {
  const int numRanks = parallel::numRanksOf(comm);
  // Bucket the ids by their owner (id mod K), send each bucket to its owner, and look for a repeat there.
  std::vector<int> sendCounts(numRanks, 0), receiveCounts(numRanks, 0);
  for (const std::uint64_t id : mine.id) ++sendCounts[id % std::uint64_t(numRanks)];
  MPI_Alltoall(sendCounts.data(), 1, MPI_INT, receiveCounts.data(), 1, MPI_INT, comm);
  std::vector<int> sendOffsets(numRanks, 0), receiveOffsets(numRanks, 0);
  for (int r = 1; r < numRanks; ++r) {
    sendOffsets[r] = sendOffsets[r - 1] + sendCounts[r - 1];
    receiveOffsets[r] = receiveOffsets[r - 1] + receiveCounts[r - 1];
  }
  std::vector<std::uint64_t> outgoing(mine.id.size());
  std::vector<int> cursor = sendOffsets;
  for (const std::uint64_t id : mine.id) outgoing[cursor[id % std::uint64_t(numRanks)]++] = id;
  std::vector<std::uint64_t> owned(static_cast<std::size_t>(receiveOffsets.back() + receiveCounts.back()));
  MPI_Alltoallv(outgoing.data(), sendCounts.data(), sendOffsets.data(), MPI_UINT64_T, owned.data(),
                receiveCounts.data(), receiveOffsets.data(), MPI_UINT64_T, comm);
  std::sort(owned.begin(), owned.end());
  const auto repeated = std::adjacent_find(owned.begin(), owned.end());
  // The smallest repeated id over the ranks, so that every rank gives the same message.
  std::uint64_t smallest = repeated != owned.end() ? *repeated : std::numeric_limits<std::uint64_t>::max();
  MPI_Allreduce(MPI_IN_PLACE, &smallest, 1, MPI_UINT64_T, MPI_MIN, comm);
  if (smallest != std::numeric_limits<std::uint64_t>::max()) {
    throw InputError(source + " repeats ParticleID " + std::to_string(smallest));
  }
}

void requireFloatRangeOnRanks(const Particles& mine, const GravityParams& gravity, MPI_Comm comm) {
  // Per axis: -min and max of the coordinates (one MPI_MAX for both), then the total mass.
  std::array<double, 6> bounds;
  bounds.fill(-std::numeric_limits<double>::infinity());
  const std::vector<double>* coordinates[3] = {&mine.x, &mine.y, &mine.z};
  for (int k = 0; k < 3; ++k) {
    if (coordinates[k]->empty()) continue;
    const auto [lo, hi] = std::minmax_element(coordinates[k]->begin(), coordinates[k]->end());
    bounds[2 * k] = -*lo;
    bounds[2 * k + 1] = *hi;
  }
  MPI_Allreduce(MPI_IN_PLACE, bounds.data(), 6, MPI_DOUBLE, MPI_MAX, comm);
  double extent = 0.0;
  for (int k = 0; k < 3; ++k) {
    if (std::isfinite(bounds[2 * k])) extent = std::max(extent, bounds[2 * k + 1] + bounds[2 * k]);
  }
  double mass = 0.0;
  for (const double m : mine.mass) mass += m;
  MPI_Allreduce(MPI_IN_PLACE, &mass, 1, MPI_DOUBLE, MPI_SUM, comm);
  gpu::requireFloatRange(extent, mass, gravity);
}

Particles readShareOfSnapshot(const std::filesystem::path& path, const Shares& shares, double boxSize, MPI_Comm comm) {
  const int rank = parallel::rankOf(comm);
  const std::string source = "--ic " + path.string();
  Particles mine;
  parallel::checkOnEveryRank(
      [&] {
        const auto first = static_cast<std::uint64_t>(shares.offsets[rank]);
        const auto count = static_cast<std::uint64_t>(shares.counts[rank]);
        mine = asBadInput([&] { return io::readSnapshotRange(path, first, count); }).particles;
        mine.validate();
        if (boxSize > 0.0) {
          try {
            tree::requireInsideBox(mine, boxSize);
          } catch (const InputError& error) {
            throw InputError(source + ": " + error.what());
          }
        }
      },
      comm);
  requireDistinctIdsOnRanks(mine, source, comm);
  return mine;
}

io::Checkpoint readShareOfCheckpoint(const std::filesystem::path& path, const Shares& shares, MPI_Comm comm) {
  const int rank = parallel::rankOf(comm);
  io::Checkpoint mine;
  parallel::checkOnEveryRank(
      [&] {
        mine = asBadInput([&] {
          return io::readCheckpointRange(path, static_cast<std::uint64_t>(shares.offsets[rank]),
                                         static_cast<std::uint64_t>(shares.counts[rank]));
        });
        mine.snapshot.particles.validate();
      },
      comm);
  requireDistinctIdsOnRanks(mine.snapshot.particles, "the checkpoint " + path.string(), comm);
  return mine;
}

void writeCheckpointOnRanks(const std::filesystem::path& path, const Particles& state, const CheckpointOnRanks& what,
                            MPI_Comm comm) {
  const int rank = parallel::rankOf(comm);
  const int numRanks = parallel::numRanksOf(comm);
  // What every part's header needs of the whole: its bodies, the cube around them, whether every potential is known.
  std::uint64_t total = state.size();
  MPI_Allreduce(MPI_IN_PLACE, &total, 1, MPI_UINT64_T, MPI_SUM, comm);
  double largest = io::largestCoordinate(state);
  MPI_Allreduce(MPI_IN_PLACE, &largest, 1, MPI_DOUBLE, MPI_MAX, comm);
  int potentials = std::all_of(state.pot.begin(), state.pot.end(), [](double v) { return std::isfinite(v); }) ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &potentials, 1, MPI_INT, MPI_MIN, comm);

  // Rank 0 makes the new parts' folder and tells the others its name.
  std::string folder;
  parallel::checkOnEveryRank(
      [&] {
        if (rank == 0) folder = io::prepareCheckpointParts(path, what.meta.step.value_or(0)).string();
      },
      comm);
  int length = static_cast<int>(folder.size());
  MPI_Bcast(&length, 1, MPI_INT, 0, comm);
  folder.resize(static_cast<std::size_t>(length));
  MPI_Bcast(folder.data(), length, MPI_CHAR, 0, comm);

  parallel::checkOnEveryRank(
      [&] {
        const io::SnapshotWriteOptions::FilePart part{rank, numRanks, total, largest};
        io::writeCheckpointPart(folder, path, state, what.meta, part, what.partSolver, potentials != 0);
      },
      comm);
  // Every part is on disk: only now does the checkpoint name them.
  parallel::checkOnEveryRank(
      [&] {
        if (rank == 0) io::commitCheckpointParts(path, folder, numRanks, total, what.meta, what.run, CheckpointState{});
      },
      comm);
}

}  // namespace matcha::app
