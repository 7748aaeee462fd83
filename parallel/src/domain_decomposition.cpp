// SPDX-License-Identifier: MIT
#include "matcha/parallel/domain_decomposition.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "matcha/core/errors.hpp"
#include "matcha/core/stopwatch.hpp"
#include "matcha/parallel/collective.hpp"
#include "matcha/tree/space_filling_curve.hpp"

namespace matcha::parallel {

int Domain::ownerOf(std::uint64_t key) const {
  // The last splitter <= key; splitters[0] = 0 holds every key, and equal splitters (empty ranges) are skipped.
  const auto it = std::upper_bound(splitters.begin(), splitters.end() - 1, key);
  return static_cast<int>(it - splitters.begin()) - 1;
}

Cube globalBoundingCube(const Particles& particles, MPI_Comm comm) {
  return globalBoundingCube(tree::computeExtent(particles.sources()), comm);
}

Cube globalBoundingCube(const tree::Extent& extent, MPI_Comm comm) {
  // lo and -hi in one MPI_MIN reduction (minima are exact in any order: the cube does not depend on the threads).
  std::array<double, 6> bounds;
  for (int d = 0; d < 3; ++d) {
    bounds[d] = extent.lo[d];
    bounds[3 + d] = -extent.hi[d];
  }
  MPI_Allreduce(MPI_IN_PLACE, bounds.data(), 6, MPI_DOUBLE, MPI_MIN, comm);
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

/// One body as it travels between ranks: every array of Particles, the id's bits in a double, its weight and its time
/// bin (0 where the bodies have none).
constexpr int kRecordDoubles = 14;

void packBody(const Particles& p, std::size_t i, double weight, bool bins, double* record) {
  const double values[11] = {p.x[i],    p.y[i],  p.z[i],  p.vx[i], p.vy[i], p.vz[i],
                             p.mass[i], p.ax[i], p.ay[i], p.az[i], p.pot[i]};
  std::copy(values, values + 11, record);
  std::memcpy(&record[11], &p.id[i], sizeof(double));
  record[12] = weight;
  record[13] = bins ? double(p.timeBin[i]) : 0.0;
}

void unpackBody(const double* record, Particles& p, std::size_t i, bool bins, double& weight) {
  std::vector<double>* arrays[11] = {&p.x, &p.y, &p.z, &p.vx, &p.vy, &p.vz, &p.mass, &p.ax, &p.ay, &p.az, &p.pot};
  for (int k = 0; k < 11; ++k) (*arrays[k])[i] = record[k];
  std::memcpy(&p.id[i], &record[11], sizeof(double));
  weight = record[12];
  if (bins) p.timeBin[i] = static_cast<std::uint8_t>(record[13]);
}

void copyBody(const Particles& from, std::size_t i, Particles& to, std::size_t k) {
  to.x[k] = from.x[i];
  to.y[k] = from.y[i];
  to.z[k] = from.z[i];
  to.vx[k] = from.vx[i];
  to.vy[k] = from.vy[i];
  to.vz[k] = from.vz[i];
  to.mass[k] = from.mass[i];
  to.ax[k] = from.ax[i];
  to.ay[k] = from.ay[i];
  to.az[k] = from.az[i];
  to.pot[k] = from.pot[i];
  to.id[k] = from.id[i];
  if (!to.timeBin.empty()) to.timeBin[k] = from.timeBin[i];
}

/// Bodies per block of the passes that sum or count: fixed, so that sums round alike whatever the number of threads
/// (a K-rank restart continues bit for bit only if the splitters come out the same).
constexpr std::size_t kBodyBlock = 16384;

/// Candidate keys per target and round of balancedSplitters' search: each round cuts a target's interval 64-fold.
constexpr int kSections = 64;
constexpr int kCandidates = kSections - 1;
/// Rounds that take an interval of kKeyEnd = 2^63 keys down to one key at kSections per round (the interval's width
/// w becomes at most ceil(w / 64): 2^63, 2^57, ..., 2^3 after 10 rounds, and one more round holds every key of a width
/// of 64 or less), with one to spare. A fixed number: every rank runs the same collectives, whatever its sums. A
/// search that starts from the last call's splitters takes one round more (its first may leave an interval of 2^63).
constexpr int kSplitterRounds = 12;

/// How many of an interval's candidates (its kCandidates keys lo + floor(width (j + 1) / 64), nondecreasing) are <=
/// key, for a key in [lo, lo + width): std::upper_bound's answer, but from the candidates' even spacing, a guess that
/// is off by at most one either way, then put right against the candidates themselves. The binary search's branches
/// went either way at random: most of a 56 ms search at 2^23 bodies a rank on 8 cores of the H200 machine's host.
inline std::size_t candidatesAtOrBelow(const std::uint64_t* candidates, std::uint64_t lo, std::uint64_t width,
                                       std::uint64_t key) {
  const double guess = double(key - lo) * (double(kSections) / double(width));
  auto b = static_cast<std::size_t>(std::min(guess, double(kSections - 1)));
  while (b < std::size_t(kSections - 1) && candidates[b] <= key) ++b;
  while (b > 0 && candidates[b - 1] > key) --b;
  return b;
}

/// The first round of a search that starts from a guess g (the last call's splitters): target t's candidates are a
/// ladder around g_t, g_t - 4^30, ..., g_t - 4, g_t - 1, g_t, g_t + 1, g_t + 4, ..., g_t + 4^30, clamped into
/// [g_(t-1), g_(t+1)], so that a key of the guessed range r, [g_r, g_(r+1)), lies on two ladders only: above g_r's
/// middle and below g_(r+1)'s. Its place on each is a bit count, not a search.
constexpr int kLadderSteps = 31;  // on each side of g_t: 4^0 .. 4^30
static_assert(2 * kLadderSteps + 1 == kCandidates, "a ladder is one round's candidates");

/// 4^m, a ladder step (m <= 30).
constexpr std::uint64_t ladderStep(int m) { return std::uint64_t{1} << (2 * m); }

/// How many of g + 4^0, ..., g + 4^30 are <= g + d.
inline std::size_t laddersAboveAtOrBelow(std::uint64_t d) {
  if (d == 0) return 0;
  return std::min<std::size_t>(kLadderSteps, std::size_t(std::bit_width(d) - 1) / 2 + 1);
}
/// How many of g - 4^30, ..., g - 4^0 are <= g - d, for d >= 1: those with 4^m >= d.
inline std::size_t laddersBelowAtOrBelow(std::uint64_t d) {
  const std::uint64_t smaller = d - 1;  // the steps 4^m < d are those 4^m <= d - 1
  const std::size_t below =
      smaller == 0 ? 0 : std::min<std::size_t>(kLadderSteps, (std::bit_width(smaller) - 1) / 2 + 1);
  return kLadderSteps - below;
}

/// A key and its body's weight, for the keys a round of the splitter search still looks at.
struct WeightedKey {
  std::uint64_t key;
  double weight;
};

/// The splitters that balance the weights: for r = 1 .. numRanks - 1 the smallest key s with W(key < s) >= r W /
/// numRanks, W summed over all ranks, found by multisection of the key space: each round asks W(key < c) at 63 keys c
/// of each target's interval, in one small MPI_Allreduce, and keeps the piece where W crosses the target: 12 rounds,
/// each a point where every rank waits for the slowest, where halving the interval took 63 (2^20 bodies on 2 ranks
/// oversubscribing 2 cores: 325 against 418 ms a call for the decomposition).
///
/// Each rank answers from its keys without sorting them (the sort of 2^24 keys was most of a 405 ms decomposition on
/// the 2-GPU H200 machine's host): a round drops each key into its target interval's 64 buckets, in blocks of bodies
/// on the rank's cores, and W(key < c) is the weight below the interval plus the buckets' sums up to c. Only the keys
/// inside some target's new interval go on to the next round.
///
/// Spread evenly over the whole curve, the first rounds' candidates cut a clustered system's keys badly: a Plummer
/// sphere's core lies in the corners of the octants around the cube's centre, so each of the first rounds kept ~1/8 of
/// the keys per target (92 of a 138 ms decomposition on 4 ranks of 2^22 bodies). `guess` (optional, the same on every
/// rank): splitters near the answer, the last call's, in this call's keys; the first round then asks at the ladders
/// around them, and the keys left after it are those between a guess and a ladder step past the answer.
///
/// The answer is the smallest key that reaches each target whichever candidates led there; the weights are list
/// lengths, whole numbers, whose sums are exact in any order, so a search from a guess ends where one from scratch
/// does. `revisited` grows by the keys the rounds read after the first pass over all of them.
std::vector<std::uint64_t> balancedSplitters(std::span<const std::uint64_t> keys, std::span<const double> weight,
                                             double totalWeight, int numRanks, MPI_Comm comm,
                                             const std::vector<std::uint64_t>* guess, std::uint64_t& revisited) {
  static_assert(kKeyEnd == std::uint64_t{1} << 63, "kSplitterRounds counts rounds for 63-bit keys");
  std::vector<std::uint64_t> splitters(numRanks + 1, 0);
  splitters[numRanks] = kKeyEnd;
  const int numTargets = numRanks - 1;
  if (numTargets == 0) return splitters;
  MATCHA_ASSERT(
      guess == nullptr || (guess->size() == std::size_t(numRanks) + 1 && std::is_sorted(guess->begin(), guess->end()) &&
                           guess->front() == 0 && guess->back() == kKeyEnd),
      "a splitter guess of one range per rank, in order");
  std::vector<std::uint64_t> lo(numTargets, 0), hi(numTargets, kKeyEnd);
  std::vector<std::uint64_t> candidate(std::size_t(numTargets) * kCandidates);
  std::vector<double> below(candidate.size()), localBelow(candidate.size());
  // This rank's weight of its keys below each target's lo, and its keys that lie in some target's open interval.
  std::vector<double> base(numTargets, 0.0);
  std::vector<WeightedKey> active, next;
  bool activeIsAll = true;  // the first round reads `keys` and `weight` themselves
  const auto numActive = [&] { return activeIsAll ? keys.size() : active.size(); };
  const auto activeAt = [&](std::size_t i) { return activeIsAll ? WeightedKey{keys[i], weight[i]} : active[i]; };
  const auto isOpen = [&](int t) { return hi[t] - lo[t] > 1; };
  // The targets' open intervals are pieces of earlier rounds' cuts: two are the same piece or do not overlap. Each
  // piece once, by lo (a target standing for each); a key's piece is the last whose lo is <= key, if the key is below
  // its hi.
  std::vector<int> pieces;
  const auto findPieces = [&] {
    pieces.clear();
    for (int t = 0; t < numTargets; ++t) {
      if (isOpen(t) && std::none_of(pieces.begin(), pieces.end(), [&](int u) { return lo[u] == lo[t]; })) {
        pieces.push_back(t);
      }
    }
    std::sort(pieces.begin(), pieces.end(), [&](int u, int v) { return lo[u] < lo[v]; });
  };
  const auto pieceOf = [&](std::uint64_t key) -> int {  // -1: in no piece
    const auto it =
        std::upper_bound(pieces.begin(), pieces.end(), key, [&](std::uint64_t k, int u) { return k < lo[u]; });
    if (it == pieces.begin() || key >= hi[*(it - 1)]) return -1;
    return static_cast<int>(it - 1 - pieces.begin());
  };
  // Keeps, for each target, the last candidate below its target as lo and the first at or past it as hi (lo's local
  // weight its base), from the candidates' summed weights below.
  const auto narrow = [&] {
    for (int t = 0; t < numTargets; ++t) {
      if (!isOpen(t)) continue;
      const double target = totalWeight * double(t + 1) / double(numRanks);
      for (int j = 0; j < kCandidates; ++j) {
        const std::size_t slot = std::size_t(t) * kCandidates + j;
        if (below[slot] >= target) {
          hi[t] = candidate[slot];
          break;
        }
        lo[t] = candidate[slot];
        base[t] = localBelow[slot];
      }
    }
  };
  // Sums this rank's `localBelow` over the ranks into `below`.
  const auto sumOverRanks = [&] {
    below = localBelow;
    MPI_Allreduce(MPI_IN_PLACE, below.data(), static_cast<int>(below.size()), MPI_DOUBLE, MPI_SUM, comm);
  };
  // The keys inside some open interval go on, in their order (so that the sums round alike from call to call): each
  // block's in one pass over the keys, then the blocks' end to end. Few go on after a search's first round from the
  // last splitters, so a count pass before the copies would be most of the filter's time.
  std::vector<std::vector<WeightedKey>> blockKept;
  const auto keepKeysStillLookedAt = [&] {
    findPieces();
    const std::size_t n = numActive();
    const std::size_t numBlocks = (n + kBodyBlock - 1) / kBodyBlock;
    blockKept.resize(numBlocks);
    tbb::parallel_for(std::size_t{0}, numBlocks, [&](std::size_t block) {
      std::vector<WeightedKey>& kept = blockKept[block];
      kept.clear();
      for (std::size_t i = block * kBodyBlock; i < std::min(n, (block + 1) * kBodyBlock); ++i) {
        const WeightedKey k = activeAt(i);
        if (pieceOf(k.key) >= 0) kept.push_back(k);
      }
    });
    std::vector<std::size_t> goOn(numBlocks + 1, 0);
    for (std::size_t block = 0; block < numBlocks; ++block) goOn[block + 1] = goOn[block] + blockKept[block].size();
    next.resize(goOn[numBlocks]);
    tbb::parallel_for(std::size_t{0}, numBlocks, [&](std::size_t block) {
      std::copy(blockKept[block].begin(), blockKept[block].end(), next.begin() + std::ptrdiff_t(goOn[block]));
    });
    active.swap(next);
    activeIsAll = false;
  };

  // Invariant: W(< lo) < target <= W(< hi); W(< 0) = 0 < target and W(< kKeyEnd) = W.
  int rounds = kSplitterRounds;
  if (guess != nullptr) {
    ++rounds;
    const std::vector<std::uint64_t>& g = *guess;
    for (int t = 0; t < numTargets; ++t) {
      const std::uint64_t middle = g[t + 1], floor = g[t], ceiling = g[t + 2];
      std::uint64_t* ladder = &candidate[std::size_t(t) * kCandidates];
      for (int m = 0; m < kLadderSteps; ++m) {
        const std::uint64_t step = ladderStep(m);
        ladder[kLadderSteps - 1 - m] = middle - floor > step ? middle - step : floor;
        ladder[kLadderSteps + 1 + m] = ceiling - middle > step ? middle + step : ceiling;
      }
      ladder[kLadderSteps] = middle;
    }
    // Per block, for each guessed range r: its weight, and its keys' weights by their place on the ladder above g_r
    // and on the one below g_(r+1).
    constexpr std::size_t kPerRange = 1 + 2 * kLadderSteps + 2;  // weight, 32 buckets above, 32 below
    const std::size_t perBlock = std::size_t(numRanks) * kPerRange;
    const std::size_t n = keys.size();
    const std::size_t numBlocks = (n + kBodyBlock - 1) / kBodyBlock;
    std::vector<double> blockSums(numBlocks * perBlock, 0.0);
    tbb::parallel_for(std::size_t{0}, numBlocks, [&](std::size_t block) {
      double* sums = &blockSums[block * perBlock];
      for (std::size_t i = block * kBodyBlock; i < std::min(n, (block + 1) * kBodyBlock); ++i) {
        const std::uint64_t key = keys[i];
        const auto r = std::size_t(std::upper_bound(g.begin() + 1, g.end() - 1, key) - g.begin()) - 1;
        double* range = &sums[r * kPerRange];
        range[0] += weight[i];
        range[1 + laddersAboveAtOrBelow(key - g[r])] += weight[i];
        range[1 + (kLadderSteps + 1) + laddersBelowAtOrBelow(g[r + 1] - key)] += weight[i];
      }
    });
    std::vector<double> sums(perBlock, 0.0);
    for (std::size_t block = 0; block < numBlocks; ++block) {
      for (std::size_t k = 0; k < perBlock; ++k) sums[k] += blockSums[block * perBlock + k];
    }
    double rangeStart = 0.0;  // this rank's weight below g_t
    for (int t = 0; t < numTargets; ++t) {
      const double* lower = &sums[std::size_t(t) * kPerRange];  // range t: [g_t, g_(t+1)), below target t's g_(t+1)
      const double* upper = &sums[std::size_t(t + 1) * kPerRange];
      double* slots = &localBelow[std::size_t(t) * kCandidates];
      // Below g_(t+1): candidate j is passed by the keys of range t with at most j ladder steps at or below them.
      double sum = rangeStart;
      for (int j = 0; j < kLadderSteps; ++j) {
        sum += lower[1 + (kLadderSteps + 1) + j];
        slots[j] = sum;
      }
      rangeStart += lower[0];
      slots[kLadderSteps] = rangeStart;
      sum = rangeStart;
      for (int m = 0; m < kLadderSteps; ++m) {
        sum += upper[1 + m];
        slots[kLadderSteps + 1 + m] = sum;
      }
    }
    sumOverRanks();
    narrow();
    // Each target's interval lies between two steps of its own ladder, so two targets' may overlap without being the
    // same: the union of overlapping ones holds each one's answer (its lo is no higher and its hi no lower), and makes
    // the pieces the later rounds share their candidates over.
    std::vector<int> byLo;
    for (int t = 0; t < numTargets; ++t) {
      if (isOpen(t)) byLo.push_back(t);
    }
    std::sort(byLo.begin(), byLo.end(), [&](int u, int v) { return lo[u] < lo[v] || (lo[u] == lo[v] && u < v); });
    for (std::size_t first = 0; first < byLo.size();) {
      std::size_t last = first + 1;
      std::uint64_t end = hi[byLo[first]];
      while (last < byLo.size() && lo[byLo[last]] < end) end = std::max(end, hi[byLo[last++]]);
      for (std::size_t k = first; k < last; ++k) {
        lo[byLo[k]] = lo[byLo[first]];
        base[byLo[k]] = base[byLo[first]];
        hi[byLo[k]] = end;
      }
      first = last;
    }
    keepKeysStillLookedAt();
  }
  for (int round = guess != nullptr ? 1 : 0; round < rounds; ++round) {
    for (int t = 0; t < numTargets; ++t) {
      const std::uint64_t width = hi[t] - lo[t];
      for (int j = 0; j < kCandidates; ++j) {
        // lo + floor(width (j + 1) / 64), without overflow (width = 64 q + r): increasing, and every key of the
        // interval when width <= 64.
        const std::uint64_t q = width / kSections, r = width % kSections;
        const std::uint64_t offset = q * std::uint64_t(j + 1) + r * std::uint64_t(j + 1) / kSections;
        candidate[std::size_t(t) * kCandidates + j] = lo[t] + offset;
      }
    }
    findPieces();
    const std::size_t numPieces = pieces.size();
    const auto pieceOfTarget = [&](int t) {
      return std::size_t(std::find_if(pieces.begin(), pieces.end(), [&](int u) { return lo[u] == lo[t]; }) -
                         pieces.begin());
    };
    // Bucket b of a piece: the weight of this rank's keys in it with exactly b of its candidates <= key. Summed per
    // block, then the blocks in order.
    const std::size_t n = numActive();
    revisited += activeIsAll ? 0 : n;
    const std::size_t numBlocks = (n + kBodyBlock - 1) / kBodyBlock;
    const std::size_t bucketsPerBlock = numPieces * kSections;
    std::vector<double> blockBuckets(numBlocks * bucketsPerBlock, 0.0);
    tbb::parallel_for(std::size_t{0}, numBlocks, [&](std::size_t block) {
      double* buckets = &blockBuckets[block * bucketsPerBlock];
      for (std::size_t i = block * kBodyBlock; i < std::min(n, (block + 1) * kBodyBlock); ++i) {
        const WeightedKey k = activeAt(i);
        const int p = pieceOf(k.key);
        if (p < 0) continue;
        const int t = pieces[p];
        const std::size_t b =
            candidatesAtOrBelow(&candidate[std::size_t(t) * kCandidates], lo[t], hi[t] - lo[t], k.key);
        buckets[std::size_t(p) * kSections + b] += k.weight;
      }
    });
    std::vector<double> buckets(bucketsPerBlock, 0.0);
    for (std::size_t block = 0; block < numBlocks; ++block) {
      for (std::size_t k = 0; k < bucketsPerBlock; ++k) buckets[k] += blockBuckets[block * bucketsPerBlock + k];
    }
    for (int t = 0; t < numTargets; ++t) {
      double* slots = &localBelow[std::size_t(t) * kCandidates];
      if (!isOpen(t)) {
        std::fill_n(slots, kCandidates, 0.0);
        continue;
      }
      const double* pieceBuckets = &buckets[pieceOfTarget(t) * kSections];
      double sum = base[t];
      for (int j = 0; j < kCandidates; ++j) {  // the keys below candidate j: buckets 0 .. j
        sum += pieceBuckets[j];
        slots[j] = sum;
      }
    }
    sumOverRanks();
    narrow();
    if (round + 1 == rounds) break;
    keepKeysStillLookedAt();
  }
  for (int t = 0; t < numTargets; ++t) {
    MATCHA_ASSERT(!isOpen(t), "the splitter search did not converge");
    splitters[t + 1] = hi[t];
  }
  // Every rank computed the same search, but MPI does not promise that a floating-point reduction rounds alike on
  // every rank: rank 0's splitters are the ones.
  MPI_Bcast(splitters.data(), numRanks + 1, MPI_UINT64_T, 0, comm);
  return splitters;
}

/// The last call's splitters, in this call's keys: each splitter's cell, at its centre, taken into `cube` (the same
/// cell where the cube did not change, as in a periodic box; one nearby where the bounding cube grew or moved), kept in
/// order.
std::vector<std::uint64_t> splittersIn(const Domain& last, const Cube& cube) {
  std::vector<std::uint64_t> moved = last.splitters;
  const double lastCell = last.cube.side / double(1u << kMaxLevel), scale = keyScale(cube);
  for (std::size_t r = 1; r + 1 < moved.size(); ++r) {
    if (moved[r] >= kKeyEnd) {
      moved[r] = kKeyEnd;
      continue;
    }
    const std::array<std::uint32_t, 3> cell = tree::mortonCell(moved[r]);
    std::uint32_t now[3];
    for (int d = 0; d < 3; ++d) {
      now[d] = keyCell(last.cube.lo[d] + (double(cell[d]) + 0.5) * lastCell, cube.lo[d], scale);
    }
    moved[r] = std::max(moved[r - 1], tree::mortonKey(now[0], now[1], now[2]));
  }
  return moved;
}

/// `values` resized to `size`, with an eighth more room where it must grow, as Particles::resizeWithRoom for the
/// decomposition's own per-body arrays.
template <class T>
void resizeWithRoom(std::vector<T>& values, std::size_t size) {
  if (size > values.capacity()) values.reserve(size + size / 8);
  values.resize(size);
}

}  // namespace

Domain decompose(Particles& particles, std::vector<double>* weights, MPI_Comm comm, DecompositionStats* stats,
                 const Cube* keyCube, DecompositionBuffers* buffers, const tree::Extent* localExtent) {
  const int numRanks = numRanksOf(comm);
  const std::size_t n = particles.size();
  Stopwatch clock;
  DecompositionStats stages;  // the stages' seconds, whether or not the caller asked for stats
  const auto endStage = [&clock](double& seconds) {
    seconds = clock.seconds();
    clock.restart();
  };
  DecompositionBuffers local;
  DecompositionBuffers& b = buffers != nullptr ? *buffers : local;
  // The bodies, the ranks whose bodies have time bins (block time steps: then every rank's travel with them), and the
  // ranks that hold a last domain of as many ranks to start the splitter search from.
  std::uint64_t counts[3] = {n, particles.timeBin.empty() ? 0u : 1u,
                             b.last.splitters.size() == std::size_t(numRanks) + 1 ? 1u : 0u};
  MPI_Allreduce(MPI_IN_PLACE, counts, 3, MPI_UINT64_T, MPI_SUM, comm);
  const std::uint64_t numBodies = counts[0];
  const bool bins = counts[1] > 0;
  const bool fromLast = counts[2] == std::uint64_t(numRanks) && numRanks > 1;
  MATCHA_ASSERT(particles.timeBin.empty() || particles.timeBin.size() == n, "time bins of some bodies only");
  MATCHA_ASSERT(!bins || n == 0 || particles.timeBin.size() == n, "time bins on some ranks' bodies only");
  if (bins) particles.timeBin.resize(n);
  const bool weightsGiven = weights != nullptr && !weights->empty();
  double localWeight = double(n);  // unit weights unless given
  checkOnEveryRank(
      [&] {
        if (numBodies < static_cast<std::uint64_t>(numRanks)) {
          throw InputError(std::to_string(numBodies) + " bodies cannot be spread over " + std::to_string(numRanks) +
                           " ranks: run with at most " + std::to_string(numBodies) + " ranks");
        }
        if (!weightsGiven) return;
        if (weights->size() != n) throw InputError("decomposition: one weight per body needed");
        // The first bad weight and the weights' sum in one pass (each block summed in order on some core, then the
        // blocks' sums in order: the same bits on any number of threads), on the rank's cores (one core took 16 ms of a
        // call at 2^23 bodies a rank).
        const std::vector<double>& w = *weights;
        const std::size_t numBlocks = (n + kBodyBlock - 1) / kBodyBlock;
        std::vector<double> blockSums(numBlocks, 0.0);
        std::vector<std::size_t> firstBad(numBlocks, n);
        tbb::parallel_for(std::size_t{0}, numBlocks, [&](std::size_t block) {
          double sum = 0.0;
          for (std::size_t i = block * kBodyBlock; i < std::min(n, (block + 1) * kBodyBlock); ++i) {
            if (!(w[i] >= 0.0) || !std::isfinite(w[i])) {
              firstBad[block] = i;
              return;
            }
            sum += w[i];
          }
          blockSums[block] = sum;
        });
        const std::size_t bad = numBlocks > 0 ? *std::min_element(firstBad.begin(), firstBad.end()) : n;
        if (bad < n) {
          throw InputError("decomposition: body " + std::to_string(particles.id[bad]) +
                           " has a negative or non-finite work weight");
        }
        localWeight = 0.0;
        for (const double sum : blockSums) localWeight += sum;
      },
      comm);
  // Weights of one for everyone when none are given, or when every given weight is zero.
  std::vector<double> unit;
  std::vector<double>& weight = weightsGiven ? *weights : unit;
  if (&weight == &unit) weight.assign(n, 1.0);
  double totalWeight = localWeight;
  MPI_Allreduce(MPI_IN_PLACE, &totalWeight, 1, MPI_DOUBLE, MPI_SUM, comm);
  if (!(totalWeight > 0.0)) {
    std::fill(weight.begin(), weight.end(), 1.0);
    totalWeight = double(numBodies);
    localWeight = double(n);
  }

  endStage(stages.checkSeconds);

  Domain domain;
  if (keyCube != nullptr) {
    domain.cube = *keyCube;
  } else {
    domain.cube = localExtent != nullptr ? globalBoundingCube(*localExtent, comm) : globalBoundingCube(particles, comm);
  }
  domainKeys(particles, domain, b.keys);
  endStage(stages.keySeconds);
  std::vector<std::uint64_t> guess;
  if (fromLast) {
    // Rank 0's, so that every rank asks at the same candidates whatever its buffers went through.
    MPI_Bcast(b.last.splitters.data(), numRanks + 1, MPI_UINT64_T, 0, comm);
    double lastCube[4] = {b.last.cube.lo[0], b.last.cube.lo[1], b.last.cube.lo[2], b.last.cube.side};
    MPI_Bcast(lastCube, 4, MPI_DOUBLE, 0, comm);
    for (int d = 0; d < 3; ++d) b.last.cube.lo[d] = lastCube[d];
    b.last.cube.side = lastCube[3];
    guess = splittersIn(b.last, domain.cube);
  }
  std::uint64_t revisited = 0;
  domain.splitters =
      balancedSplitters(b.keys, weight, totalWeight, numRanks, comm, fromLast ? &guess : nullptr, revisited);
  b.last = domain;
  endStage(stages.splitSeconds);

  // Only the bodies that change owner travel (after a drift, a few near the boundaries). A counting sort by owner in
  // blocks of bodies, each block on a core, packs the leaving bodies' records by destination rank (each rank's in
  // their order) for one exchange; the bodies that stay keep their places, but for those beyond the first numKept
  // places, which fill the places of the bodies that left: the copies are as many as the bodies that move.
  const int rank = rankOf(comm);
  b.destination.resize(n);
  const std::size_t numBlocks = (n + kBodyBlock - 1) / kBodyBlock;
  const auto blockEnd = [n](std::size_t block) { return std::min(n, (block + 1) * kBodyBlock); };
  // slot[block * numRanks + r]: how many of the block's bodies go to rank r, then where the first of them goes.
  std::vector<std::uint64_t> slot(numBlocks * std::size_t(numRanks), 0);
  // Whether all of a block's bodies stay: after a drift most blocks, which the passes below then skip or fill without
  // reading the destinations again.
  std::vector<std::uint8_t> allStay(numBlocks, 0);
  tbb::parallel_for(std::size_t{0}, numBlocks, [&](std::size_t block) {
    std::uint64_t* count = &slot[block * std::size_t(numRanks)];
    for (std::size_t i = block * kBodyBlock; i < blockEnd(block); ++i) {
      b.destination[i] = domain.ownerOf(b.keys[i]);
      ++count[b.destination[i]];
    }
    allStay[block] = count[rank] == blockEnd(block) - block * kBodyBlock ? 1 : 0;
  });
  std::vector<int> sendCounts(numRanks, 0), receiveCounts(numRanks, 0);
  std::size_t kept = 0;
  for (int r = 0; r < numRanks; ++r) {
    std::uint64_t position = 0;  // within rank r's bodies
    for (std::size_t block = 0; block < numBlocks; ++block) {
      const std::uint64_t count = slot[block * std::size_t(numRanks) + r];
      slot[block * std::size_t(numRanks) + r] = position;
      position += count;
    }
    if (r == rank) {
      kept = static_cast<std::size_t>(position);
    } else {
      sendCounts[r] = static_cast<int>(position);
    }
  }
  Stopwatch exchangeClock;
  MPI_Alltoall(sendCounts.data(), 1, MPI_INT, receiveCounts.data(), 1, MPI_INT, comm);
  double exchangeSeconds = exchangeClock.seconds();
  std::vector<int> sendOffsets(numRanks + 1, 0), receiveOffsets(numRanks + 1, 0);
  for (int r = 0; r < numRanks; ++r) {
    sendOffsets[r + 1] = sendOffsets[r] + sendCounts[r];
    receiveOffsets[r + 1] = receiveOffsets[r] + receiveCounts[r];
  }
  const auto numSent = static_cast<std::size_t>(sendOffsets[numRanks]);
  const auto numReceived = static_cast<std::size_t>(receiveOffsets[numRanks]);
  b.sendBuffer.resize(std::size_t(kRecordDoubles) * numSent);
  // The places below `kept` that leaving bodies free (holes) and the staying bodies at or beyond it (fillers) are
  // equally many: the k-th filler moves into the k-th hole. Per block: its holes and fillers, then their offsets.
  // The weight sent, summed per block in order, for this rank's work after the exchange (the stats).
  std::vector<std::size_t> holesBefore(numBlocks + 1, 0), fillersBefore(numBlocks + 1, 0);
  std::vector<double> sentWeight(numBlocks, 0.0);
  tbb::parallel_for(std::size_t{0}, numBlocks, [&](std::size_t block) {
    const std::size_t first = block * kBodyBlock, end = blockEnd(block);
    if (allStay[block] != 0) {
      fillersBefore[block + 1] = end - std::clamp(kept, first, end);
      return;
    }
    std::uint64_t* next = &slot[block * std::size_t(numRanks)];
    std::size_t holes = 0, fillers = 0;
    double sent = 0.0;
    for (std::size_t i = first; i < end; ++i) {
      const int to = b.destination[i];
      if (to == rank) {
        fillers += i >= kept ? 1 : 0;
        continue;
      }
      holes += i < kept ? 1 : 0;
      sent += weight[i];
      const std::size_t k = sendOffsets[to] + next[to]++;
      packBody(particles, i, weight[i], bins, &b.sendBuffer[std::size_t(kRecordDoubles) * k]);
    }
    holesBefore[block + 1] = holes;
    fillersBefore[block + 1] = fillers;
    sentWeight[block] = sent;
  });
  for (std::size_t block = 0; block < numBlocks; ++block) {
    holesBefore[block + 1] += holesBefore[block];
    fillersBefore[block + 1] += fillersBefore[block];
  }
  MATCHA_ASSERT(holesBefore[numBlocks] == fillersBefore[numBlocks], "as many holes as bodies to fill them");
  b.moves.resize(holesBefore[numBlocks]);  // {hole, filler} pairs
  tbb::parallel_for(std::size_t{0}, numBlocks, [&](std::size_t block) {
    std::size_t hole = holesBefore[block], filler = fillersBefore[block];
    const std::size_t first = block * kBodyBlock, end = blockEnd(block);
    if (allStay[block] != 0) {
      for (std::size_t i = std::clamp(kept, first, end); i < end; ++i) b.moves[filler++].second = i;
      return;
    }
    for (std::size_t i = first; i < end; ++i) {
      const bool stays = b.destination[i] == rank;
      if (!stays && i < kept) b.moves[hole++].first = i;
      if (stays && i >= kept) b.moves[filler++].second = i;
    }
  });
  tbb::parallel_for(std::size_t{0}, b.moves.size(), [&](std::size_t k) {
    const auto [hole, filler] = b.moves[k];
    copyBody(particles, filler, particles, hole);
    weight[hole] = weight[filler];
    b.keys[hole] = b.keys[filler];
  });
  b.receiveBuffer.resize(std::size_t(kRecordDoubles) * numReceived);
  MPI_Datatype record;
  MPI_Type_contiguous(kRecordDoubles, MPI_DOUBLE, &record);
  MPI_Type_commit(&record);
  exchangeClock.restart();
  MPI_Alltoallv(b.sendBuffer.data(), sendCounts.data(), sendOffsets.data(), record, b.receiveBuffer.data(),
                receiveCounts.data(), receiveOffsets.data(), record, comm);
  exchangeSeconds += exchangeClock.seconds();
  MPI_Type_free(&record);

  // The kept bodies first, then the others' by sending rank.
  const std::size_t now = kept + numReceived;
  particles.resizeWithRoom(now);
  if (bins) resizeWithRoom(particles.timeBin, now);
  resizeWithRoom(weight, now);
  tbb::parallel_for(
      tbb::blocked_range<std::size_t>(0, numReceived, 4096), [&](const tbb::blocked_range<std::size_t>& r) {
        for (std::size_t k = r.begin(); k < r.end(); ++k) {
          unpackBody(&b.receiveBuffer[std::size_t(kRecordDoubles) * k], particles, kept + k, bins, weight[kept + k]);
        }
      });
  // The keys follow the bodies (the kept ones' moved with them above): the caller's tree takes them as they are, so
  // that a call computes each body's key once (a pass over the positions, 23-38 ms a call at 2^23 bodies a rank).
  resizeWithRoom(b.keys, now);
  if (numReceived > 0) {
    const SourceView received{particles.x.data() + kept, particles.y.data() + kept, particles.z.data() + kept,
                              particles.mass.data() + kept, numReceived};
    tree::computeMortonKeys(received, domain.cube, std::span<std::uint64_t>(b.keys.data() + kept, numReceived));
  }

  if (stats != nullptr) {
    stats->numBodies = numBodies;
    // The rank's weight before, less what it sent, plus what it received: no pass over the bodies, and exact for the
    // whole-number weights a run gives (list lengths; ones); within rounding of a sum over the bodies otherwise.
    double work = localWeight;
    for (const double sent : sentWeight) work -= sent;
    for (std::size_t k = 0; k < numReceived; ++k) work += weight[kept + k];
    stats->work = work;
    stats->bodiesSent = numSent;
    stats->bodiesReceived = numReceived;
    stats->splitFromLast = fromLast;
    stats->splitKeysRevisited = revisited;
    std::vector<double> everyWork(numRanks);
    MPI_Allgather(&work, 1, MPI_DOUBLE, everyWork.data(), 1, MPI_DOUBLE, comm);
    double sum = 0.0;
    for (const double w : everyWork) sum += w;
    stats->meanWork = sum / double(numRanks);
    stats->maxWork = *std::max_element(everyWork.begin(), everyWork.end());
    endStage(stages.moveSeconds);
    stats->checkSeconds = stages.checkSeconds;
    stats->keySeconds = stages.keySeconds;
    stats->splitSeconds = stages.splitSeconds;
    stats->moveSeconds = stages.moveSeconds;
    stats->moveExchangeSeconds = exchangeSeconds;
  }
  if (&weight == &unit && weights != nullptr) weights->clear();
  return domain;
}

}  // namespace matcha::parallel
