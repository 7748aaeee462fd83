// SPDX-License-Identifier: MIT
// Domain decomposition along the space-filling curve (issue 19): every rank owns one contiguous range of Morton keys
// in a cube around all ranks' bodies, the ranges chosen so that each holds about the same work.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "matcha/core/particles.hpp"
#include "matcha/core/tree_prediction.hpp"
#include "matcha/tree/space_filling_curve.hpp"

namespace matcha::parallel {

/// One past the largest Morton key (keys have 3 kMaxLevel = 63 bits): the end of the last rank's range.
inline constexpr std::uint64_t kKeyEnd = std::uint64_t{1} << (3 * kMaxLevel);

/// Who owns which bodies: rank r holds every body whose Morton key in `cube` (tree/space_filling_curve.hpp:
/// computeMortonKeys) lies in [splitters[r], splitters[r + 1]). splitters[0] = 0 and splitters[numRanks] = kKeyEnd; a
/// range may be empty (a rank with no bodies).
struct Domain {
  Cube cube;
  std::vector<std::uint64_t> splitters;

  int numRanks() const { return static_cast<int>(splitters.size()) - 1; }
  /// The rank whose range holds `key`.
  int ownerOf(std::uint64_t key) const;
};

/// What a decomposition found and moved, seen from one rank.
struct DecompositionStats {
  std::uint64_t numBodies = 0;       ///< all ranks together
  double work = 0.0;                 ///< this rank's work (the sum of its bodies' weights) after the exchange
  double maxWork = 0.0;              ///< the largest rank's
  double meanWork = 0.0;             ///< all ranks' work over the number of ranks
  std::uint64_t bodiesSent = 0;      ///< bodies this rank gave to others
  std::uint64_t bodiesReceived = 0;  ///< bodies this rank took from others
  bool splitFromLast = false;        ///< whether the splitter search started from the last call's splitters
  /// Keys the splitter search's rounds read again after the first pass over all of this rank's keys.
  std::uint64_t splitKeysRevisited = 0;
  // This rank's wall-clock seconds by stage (each with the collectives in it, so a rank's wait for the others too).
  double checkSeconds = 0.0;         ///< counts, the weights' checks and sum
  double keySeconds = 0.0;           ///< the bounding cube and the keys
  double splitSeconds = 0.0;         ///< the splitter search
  double moveSeconds = 0.0;          ///< owners, packing, the exchange, unpacking and the balance's sums
  double moveExchangeSeconds = 0.0;  ///< of moveSeconds: the MPI_Alltoall of the counts and the records' MPI_Alltoallv

  /// max / mean of the ranks' work: 1 for a perfect balance (1 too when there is no work).
  double imbalance() const { return meanWork > 0.0 ? maxWork / meanWork : 1.0; }
};

/// What decompose() keeps from call to call when the caller holds it (optional): its arrays of one entry per body
/// (keys, owners, the exchange's records), so that a distributed run's calls neither allocate nor first-touch them
/// once the ranks' sizes settle (the splitter search's smaller arrays are made each call). The contents between calls
/// mean nothing, but for `keys` and `last`.
struct DecompositionBuffers {
  /// On return from decompose(): the Morton keys in the domain's cube of the bodies as they now lie, one per body
  /// (domainKeys' keys, without a second pass over the positions).
  std::vector<std::uint64_t> keys;
  /// The domain decompose() last returned: where every rank holds one of as many ranks, the next call's splitter
  /// search starts from its splitters (rank 0's), which after a drift lie near the new ones, and looks again at the
  /// few keys between, not at most of them for several rounds. The splitters come out the same either way.
  Domain last;
  std::vector<int> destination;
  /// {place freed by a leaving body, staying body moved there}
  std::vector<std::pair<std::size_t, std::size_t>> moves;
  std::vector<double> sendBuffer, receiveBuffer;
};

/// The cube around every rank's bodies: cubeAroundExtent (core/tree_prediction.hpp) of the global extent, so that on
/// one rank it is tree::computeBoundingCube's cube, bit for bit. A rank may hold no bodies; all ranks together must
/// hold some (InvariantError otherwise). Collective.
Cube globalBoundingCube(const Particles& particles, MPI_Comm comm);
/// The same cube from this rank's extent, taken by the caller (tree::computeExtent's, or a pass of its own over the
/// same positions: minima and maxima are exact in any order). Collective.
Cube globalBoundingCube(const tree::Extent& local, MPI_Comm comm);

/// Splits the curve among the ranks of `comm` and moves every body to its owner (MPI_Alltoallv of every array of
/// Particles, Particles::timeBin too where any rank's bodies have bins: block time steps): on return `particles` holds
/// the bodies of this rank's range, those it kept first (each in its place, but for those that fill the places of the
/// bodies that left, the k-th of them taking the k-th such place), then those received, by sending rank. `weights`
/// (in/out, optional): one work weight per body, finite and >= 0 (the tree's interactions per body from the last force
/// call), moved with the bodies; empty: every body weighs 1. The splitters put about total / numRanks of the weight
/// before each (the smallest key at which the weight below reaches r total / numRanks), so each rank's work is within
/// one body's weight of the mean. Calling it again on the current bodies rebalances and migrates the bodies that
/// crossed a boundary since. Collective.
///
/// `keyCube` (optional): the cube the keys are taken in instead of globalBoundingCube's, the same on every rank, with
/// every body inside it (the periodic box [0, L)^3, which is then every rank's tree root, as one rank's periodic tree
/// has it).
///
/// Every pass over the rank's bodies (bounding cube, keys, the splitter search's sums, owners, packing) runs on its
/// cores (TBB), in fixed blocks where it sums, so that the splitters do not depend on the number of threads; no pass
/// sorts them. `buffers` (optional):
/// kept by the caller from call to call. `localExtent` (optional, without `keyCube`): the extent of this rank's
/// bodies as they come, from a pass the caller makes over them anyway, so that the cube costs no pass of its own.
///
/// Throws InputError, on every rank, when all ranks together hold fewer bodies than there are ranks (run with fewer
/// ranks), when a weight is negative or not finite, or when `weights` is neither empty nor one per body.
Domain decompose(Particles& particles, std::vector<double>* weights, MPI_Comm comm, DecompositionStats* stats = nullptr,
                 const Cube* keyCube = nullptr, DecompositionBuffers* buffers = nullptr,
                 const tree::Extent* localExtent = nullptr);

/// The Morton keys of `particles` in domain.cube, one per body (resized). Parallel.
void domainKeys(const Particles& particles, const Domain& domain, std::vector<std::uint64_t>& keys);

}  // namespace matcha::parallel
