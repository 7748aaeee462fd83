// SPDX-License-Identifier: MIT
// The bodies of a run on several MPI ranks (issue 19): how they are split into shares, moved between rank 0 and the
// others where one process must see them all (a generated start, a gathered snapshot), and read and written by every
// rank at once where none needs to (an initial-condition file, a checkpoint): a run of 2^30 bodies must not pass
// through one process's memory. Built with MATCHA_MPI only; distributed_run.cpp is its one user.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "matcha/core/checkpoint_state.hpp"
#include "matcha/core/params.hpp"
#include "matcha/core/particles.hpp"
#include "matcha/io/snapshot.hpp"

namespace matcha::app {

/// Contiguous shares of a system in rank order: counts[r] bodies from offsets[r] (MPI's int counts, as Scatterv and
/// Gatherv take them; a run holds fewer than 2^31 bodies, kMaxBodies).
struct Shares {
  std::vector<int> counts, offsets;
  /// The bodies of all the shares.
  std::uint64_t total() const {
    return counts.empty() ? 0 : static_cast<std::uint64_t>(offsets.back()) + static_cast<std::uint64_t>(counts.back());
  }
};

/// `numBodies` split into contiguous, nearly equal shares, one per rank.
Shares evenShares(std::uint64_t numBodies, int numRanks);

/// The shares of the given sizes, in rank order.
Shares sharesOf(std::vector<int> counts);

/// Collective: rank 0's `all` (null elsewhere) split into `shares` (the same on every rank), each rank its own.
Particles scatterBodies(const Particles* all, const Shares& shares, MPI_Comm comm);

/// Collective: rank 0's `bodies`, whole, on every rank (replacing what the others held): a run whose every rank
/// integrates all bodies (a Hermite run on several ranks).
void broadcastBodies(Particles& bodies, MPI_Comm comm);

/// Collective: rank 0's `state` (scalars and arrays) on every rank, replacing what the others held.
void broadcastState(CheckpointState& state, MPI_Comm comm);

/// Collective: every rank's bodies on rank 0, in rank order (each rank's in its own order); elsewhere an empty set.
/// `sharesOut` (meaningful on rank 0): where each rank's went.
Particles gatherBodies(const Particles& mine, MPI_Comm comm, Shares* sharesOut = nullptr);

/// Collective: every rank's body count, on every rank, in rank order.
Shares sharesOnRanks(std::size_t count, MPI_Comm comm);

/// Collective: throws InputError on every rank, with one message, when a ParticleID is held twice over the ranks
/// (by two ranks, or twice by one). Each id goes to rank id mod K, which sorts what it receives: O(N/K) memory and
/// time a rank, no rank holding all the ids. `source` begins the message ("--ic FILE").
void requireDistinctIdsOnRanks(const Particles& mine, const std::string& source, MPI_Comm comm);

/// Collective: gpu::requireFloatRange of the whole system (its extent and total mass over the ranks), on every rank.
void requireFloatRangeOnRanks(const Particles& mine, const GravityParams& gravity, MPI_Comm comm);

/// Collective: this rank's share of the bodies of the snapshot or initial-condition file `path` (one file or a
/// multi-file set), read by every rank at once (io::readSnapshotRange: each rank opens only the files of its rows),
/// with the checks one rank's read makes of the whole: finite values and valid masses in every share, no id held
/// twice over the ranks, and inside the periodic box `boxSize` (> 0; 0: open boundaries). An error on any rank stops
/// every rank with its one line (parallel::checkOnEveryRank).
Particles readShareOfSnapshot(const std::filesystem::path& path, const Shares& shares, double boxSize, MPI_Comm comm);

/// Collective: this rank's share of the checkpoint at `path` (one file, or in parts: io::readCheckpointRange), with
/// the run's state and the solver's, its per-body arrays cut to the share. An error stops every rank.
io::Checkpoint readShareOfCheckpoint(const std::filesystem::path& path, const Shares& shares, MPI_Comm comm);

/// What one rank writes of a checkpoint in parts.
struct CheckpointOnRanks {
  io::SnapshotMetadata meta;   ///< the state's header (its time, step, box, cosmology, units, parameters)
  CheckpointState run;         ///< rank 0's: where the run stands (written to the parts file)
  CheckpointState partSolver;  ///< this rank's per-body solver arrays, one entry per body of `state`
};

/// Collective: the checkpoint at `path` replaced by one in parts, every rank writing its own bodies at once
/// (io::prepareCheckpointParts on rank 0, io::writeCheckpointPart on every rank, io::commitCheckpointParts on rank 0
/// once every part is on disk): a failure on any rank leaves the previous checkpoint whole and stops every rank with
/// its message. Potentials are written when every body's is finite.
void writeCheckpointOnRanks(const std::filesystem::path& path, const Particles& state, const CheckpointOnRanks& what,
                            MPI_Comm comm);

}  // namespace matcha::app
