// SPDX-License-Identifier: MIT
#include "matcha/parallel/domain_decomposition.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>

#include "matcha/core/errors.hpp"
#include "matcha/parallel/collective.hpp"
#include "matcha/tree/space_filling_curve.hpp"

namespace matcha::parallel {

int Domain::ownerOf(std::uint64_t key) const {
  // The last splitter <= key; splitters[0] = 0 holds every key, and equal splitters (empty ranges) are skipped.
  const auto it = std::upper_bound(splitters.begin(), splitters.end() - 1, key);
  return static_cast<int>(it - splitters.begin()) - 1;
}

Cube globalBoundingCube(const Particles& particles, MPI_Comm comm) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  // lo and -hi in one MPI_MIN reduction.
  double bounds[6] = {kInf, kInf, kInf, kInf, kInf, kInf};
  const std::vector<double>* axes[3] = {&particles.x, &particles.y, &particles.z};
  for (int d = 0; d < 3; ++d) {
    for (const double value : *axes[d]) {
      bounds[d] = std::min(bounds[d], value);
      bounds[3 + d] = std::min(bounds[3 + d], -value);
    }
  }
  MPI_Allreduce(MPI_IN_PLACE, bounds, 6, MPI_DOUBLE, MPI_MIN, comm);
  MATCHA_ASSERT(bounds[0] <= -bounds[3], "bounding cube of no bodies");
  const double lo[3] = {bounds[0], bounds[1], bounds[2]};
  const double hi[3] = {-bounds[3], -bounds[4], -bounds[5]};
  return cubeAroundExtent(lo, hi);
}

void domainKeys(const Particles& particles, const Domain& domain, std::vector<std::uint64_t>& keys) {
  if (particles.empty()) {
    keys.clear();
    return;
  }
  tree::computeMortonKeys(particles.sources(), domain.cube, keys);
}

namespace {

/// One body as it travels between ranks: every array of Particles, the id's bits in a double, and its weight.
constexpr int kRecordDoubles = 13;

void packBody(const Particles& p, std::size_t i, double weight, double* record) {
  const double values[11] = {p.x[i],    p.y[i],  p.z[i],  p.vx[i], p.vy[i], p.vz[i],
                             p.mass[i], p.ax[i], p.ay[i], p.az[i], p.pot[i]};
  std::copy(values, values + 11, record);
  std::memcpy(&record[11], &p.id[i], sizeof(double));
  record[12] = weight;
}

void unpackBody(const double* record, Particles& p, std::size_t i, double& weight) {
  std::vector<double>* arrays[11] = {&p.x, &p.y, &p.z, &p.vx, &p.vy, &p.vz, &p.mass, &p.ax, &p.ay, &p.az, &p.pot};
  for (int k = 0; k < 11; ++k) (*arrays[k])[i] = record[k];
  std::memcpy(&p.id[i], &record[11], sizeof(double));
  weight = record[12];
}

/// Candidate keys per target and round of balancedSplitters' search: each round cuts a target's interval 64-fold.
constexpr int kSections = 64;
/// Rounds that take an interval of kKeyEnd = 2^63 keys down to one key at kSections per round (the interval's width
/// w becomes at most ceil(w / 64): 2^63, 2^57, ..., 2^3 after 10 rounds, and one more round holds every key of a width
/// of 64 or less), with one to spare. A fixed number: every rank runs the same collectives, whatever its sums.
constexpr int kSplitterRounds = 12;

/// The splitters that balance the weights: for r = 1 .. numRanks - 1 the smallest key s with W(key < s) >= r W /
/// numRanks, W summed over all ranks, found by multisection of the key space: each round asks W(key < c) at 63 keys c
/// spread evenly over each target's interval, in one small MPI_Allreduce (`sortedKeys` and `prefix`, prefix[k] = weight
/// of the first k sorted keys, answer each rank's share), and keeps the piece where W crosses the target: 12 rounds,
/// each a point where every rank waits for the slowest, where halving the interval took 63 (2^20 bodies on 2 ranks
/// oversubscribing 2 cores: 325 against 418 ms a call for the decomposition).
std::vector<std::uint64_t> balancedSplitters(std::span<const std::uint64_t> sortedKeys, std::span<const double> prefix,
                                             double totalWeight, int numRanks, MPI_Comm comm) {
  static_assert(kKeyEnd == std::uint64_t{1} << 63, "kSplitterRounds counts rounds for 63-bit keys");
  std::vector<std::uint64_t> splitters(numRanks + 1, 0);
  splitters[numRanks] = kKeyEnd;
  const int numTargets = numRanks - 1;
  if (numTargets == 0) return splitters;
  std::vector<std::uint64_t> lo(numTargets, 0), hi(numTargets, kKeyEnd);
  constexpr int kCandidates = kSections - 1;
  std::vector<std::uint64_t> candidate(std::size_t(numTargets) * kCandidates);
  std::vector<double> below(candidate.size());
  const auto weightBelow = [&](std::uint64_t key) {
    return prefix[std::lower_bound(sortedKeys.begin(), sortedKeys.end(), key) - sortedKeys.begin()];
  };
  // Invariant: W(< lo) < target <= W(< hi); W(< 0) = 0 < target and W(< kKeyEnd) = W.
  for (int round = 0; round < kSplitterRounds; ++round) {
    for (int t = 0; t < numTargets; ++t) {
      const std::uint64_t width = hi[t] - lo[t];
      for (int j = 0; j < kCandidates; ++j) {
        // lo + floor(width (j + 1) / 64), without overflow (width = 64 q + r): increasing, and every key of the
        // interval when width <= 64.
        const std::uint64_t q = width / kSections, r = width % kSections;
        const std::uint64_t offset = q * std::uint64_t(j + 1) + r * std::uint64_t(j + 1) / kSections;
        const std::size_t slot = std::size_t(t) * kCandidates + j;
        candidate[slot] = lo[t] + offset;
        below[slot] = width > 1 ? weightBelow(candidate[slot]) : 0.0;
      }
    }
    MPI_Allreduce(MPI_IN_PLACE, below.data(), static_cast<int>(below.size()), MPI_DOUBLE, MPI_SUM, comm);
    for (int t = 0; t < numTargets; ++t) {
      if (hi[t] - lo[t] <= 1) continue;
      const double target = totalWeight * double(t + 1) / double(numRanks);
      // The first candidate at or past the target is the new hi, the one before it (or lo) the new lo.
      std::uint64_t newLo = lo[t], newHi = hi[t];
      for (int j = 0; j < kCandidates; ++j) {
        const std::size_t slot = std::size_t(t) * kCandidates + j;
        if (below[slot] >= target) {
          newHi = candidate[slot];
          break;
        }
        newLo = candidate[slot];
      }
      lo[t] = newLo;
      hi[t] = newHi;
    }
  }
  for (int t = 0; t < numTargets; ++t) {
    MATCHA_ASSERT(hi[t] - lo[t] <= 1, "the splitter search did not converge");
    splitters[t + 1] = hi[t];
  }
  // Every rank computed the same search, but MPI does not promise that a floating-point reduction rounds alike on
  // every rank: rank 0's splitters are the ones.
  MPI_Bcast(splitters.data(), numRanks + 1, MPI_UINT64_T, 0, comm);
  return splitters;
}

}  // namespace

Domain decompose(Particles& particles, std::vector<double>* weights, MPI_Comm comm, DecompositionStats* stats,
                 const Cube* keyCube) {
  const int numRanks = numRanksOf(comm);
  const std::size_t n = particles.size();
  std::uint64_t numBodies = n;
  MPI_Allreduce(MPI_IN_PLACE, &numBodies, 1, MPI_UINT64_T, MPI_SUM, comm);
  checkOnEveryRank(
      [&] {
        if (numBodies < static_cast<std::uint64_t>(numRanks)) {
          throw InputError(std::to_string(numBodies) + " bodies cannot be spread over " + std::to_string(numRanks) +
                           " ranks: run with at most " + std::to_string(numBodies) + " ranks");
        }
        if (weights == nullptr || weights->empty()) return;
        if (weights->size() != n) throw InputError("decomposition: one weight per body needed");
        for (std::size_t i = 0; i < n; ++i) {
          if (!((*weights)[i] >= 0.0) || !std::isfinite((*weights)[i])) {
            throw InputError("decomposition: body " + std::to_string(particles.id[i]) +
                             " has a negative or non-finite work weight");
          }
        }
      },
      comm);
  // Weights of one for everyone when none are given, or when every given weight is zero.
  std::vector<double> unit;
  std::vector<double>& weight = weights != nullptr && !weights->empty() ? *weights : unit;
  if (&weight == &unit) weight.assign(n, 1.0);
  double totalWeight = std::accumulate(weight.begin(), weight.end(), 0.0);
  MPI_Allreduce(MPI_IN_PLACE, &totalWeight, 1, MPI_DOUBLE, MPI_SUM, comm);
  if (!(totalWeight > 0.0)) {
    std::fill(weight.begin(), weight.end(), 1.0);
    totalWeight = double(numBodies);
  }

  Domain domain;
  domain.cube = keyCube != nullptr ? *keyCube : globalBoundingCube(particles, comm);
  std::vector<std::uint64_t> keys;
  domainKeys(particles, domain, keys);
  tree::KeySorter sorter;
  std::vector<std::uint64_t> sortedKeys;
  std::vector<std::uint32_t> order;
  std::vector<double> prefix(1, 0.0);
  if (numRanks > 1 && n > 0) {  // one rank owns the whole curve: no splitters to find
    sorter.sort(keys, sortedKeys, order);
    prefix.resize(n + 1);
    for (std::size_t k = 0; k < n; ++k) prefix[k + 1] = prefix[k] + weight[order[k]];
  }
  domain.splitters = balancedSplitters(sortedKeys, prefix, totalWeight, numRanks, comm);

  // Only the bodies that change owner travel (after a drift, a few near the boundaries): those that stay are
  // compacted in place, in their order, and the others' are packed by destination rank (a counting sort that keeps
  // each rank's bodies in their order) for one exchange.
  const int rank = rankOf(comm);
  std::vector<int> destination(n);
  std::vector<int> sendCounts(numRanks, 0), receiveCounts(numRanks, 0);
  for (std::size_t i = 0; i < n; ++i) {
    destination[i] = domain.ownerOf(keys[i]);
    if (destination[i] != rank) ++sendCounts[destination[i]];
  }
  MPI_Alltoall(sendCounts.data(), 1, MPI_INT, receiveCounts.data(), 1, MPI_INT, comm);
  std::vector<int> sendOffsets(numRanks + 1, 0), receiveOffsets(numRanks + 1, 0);
  for (int r = 0; r < numRanks; ++r) {
    sendOffsets[r + 1] = sendOffsets[r] + sendCounts[r];
    receiveOffsets[r + 1] = receiveOffsets[r] + receiveCounts[r];
  }
  const auto numSent = static_cast<std::size_t>(sendOffsets[numRanks]);
  const auto numReceived = static_cast<std::size_t>(receiveOffsets[numRanks]);
  std::vector<double> sendBuffer(std::size_t(kRecordDoubles) * numSent);
  std::size_t kept = 0;
  {
    std::vector<int> cursor(sendOffsets.begin(), sendOffsets.end() - 1);
    std::vector<double>* arrays[11] = {&particles.x,  &particles.y,  &particles.z,    &particles.vx,
                                       &particles.vy, &particles.vz, &particles.mass, &particles.ax,
                                       &particles.ay, &particles.az, &particles.pot};
    for (std::size_t i = 0; i < n; ++i) {
      if (destination[i] != rank) {
        packBody(particles, i, weight[i], &sendBuffer[std::size_t(kRecordDoubles) * cursor[destination[i]]++]);
        continue;
      }
      if (kept != i) {  // kept < i: body `kept` was packed already, or moved down itself
        for (std::vector<double>* array : arrays) (*array)[kept] = (*array)[i];
        particles.id[kept] = particles.id[i];
        weight[kept] = weight[i];
      }
      ++kept;
    }
  }
  std::vector<double> receiveBuffer(std::size_t(kRecordDoubles) * numReceived);
  MPI_Datatype record;
  MPI_Type_contiguous(kRecordDoubles, MPI_DOUBLE, &record);
  MPI_Type_commit(&record);
  MPI_Alltoallv(sendBuffer.data(), sendCounts.data(), sendOffsets.data(), record, receiveBuffer.data(),
                receiveCounts.data(), receiveOffsets.data(), record, comm);
  MPI_Type_free(&record);

  // The kept bodies first, then the others' by sending rank.
  particles.resize(kept + numReceived);
  weight.resize(kept + numReceived);
  for (std::size_t k = 0; k < numReceived; ++k) {
    unpackBody(&receiveBuffer[std::size_t(kRecordDoubles) * k], particles, kept + k, weight[kept + k]);
  }

  if (stats != nullptr) {
    stats->numBodies = numBodies;
    stats->work = std::accumulate(weight.begin(), weight.end(), 0.0);
    stats->bodiesSent = numSent;
    stats->bodiesReceived = numReceived;
    double sumAndMax[2] = {stats->work, stats->work};
    MPI_Allreduce(MPI_IN_PLACE, &sumAndMax[0], 1, MPI_DOUBLE, MPI_SUM, comm);
    MPI_Allreduce(MPI_IN_PLACE, &sumAndMax[1], 1, MPI_DOUBLE, MPI_MAX, comm);
    stats->meanWork = sumAndMax[0] / double(numRanks);
    stats->maxWork = sumAndMax[1];
  }
  if (&weight == &unit && weights != nullptr) weights->clear();
  return domain;
}

}  // namespace matcha::parallel
