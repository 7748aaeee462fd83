// SPDX-License-Identifier: MIT
// Hermite direct summation over MPI ranks, j-parallel as phiGPU (Harfst et al. 2007) and NBODY6++GPU (Wang et al.
// 2015) split it: every rank integrates all bodies (the same Hermite integrator on every rank, replicated), holds a
// share of the j-particles on its own engine, and sums the forces of its share on the whole i-block; the partial sums
// are then combined on every rank. The force call, O(n_block N), is divided by the number of ranks; the integrator's
// host work, O(n_block), is repeated on each. A HermiteEngine itself, so integrator/ drives it as it drives one
// device, and it takes the rank's engine through core's interface (parallel/ never depends on gpu/, DESIGN.md §2).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <span>
#include <string>
#include <vector>

#include "matcha/core/hermite_engine.hpp"

namespace matcha::parallel {

/// A HermiteEngine whose j-particles are dealt out over the ranks of `comm`. Collective: every rank must make the same
/// calls with the same arguments (a replicated, deterministic integrator does), and every rank then gets the same
/// results, bit for bit, so that the replicated integrators never drift apart.
///
/// Global slot s lives on rank s mod K at local slot s / K (K ranks): round-robin keeps the ranks' shares within one
/// slot of each other for any numJ and any order the caller gives its slots, where blocks of slots would leave the
/// last ranks idle whenever numJ is below the capacity.
///
/// Combining: MPI_Allreduce does not promise the same bits on every rank (the reduction tree may differ by rank), so
/// each rank's partial sums are gathered to all ranks (MPI_Allgather) and summed there in rank order. The nearest
/// neighbour is the nearest of the ranks' nearest ones; of equal distances the lowest rank's, which need not be the
/// lowest slot that the one-process engines name.
///
/// An error on one rank's engine (a device that cannot reserve the memory, a kernel that failed) stops every rank with
/// that rank's message rather than leaving the others waiting in the gather: reserve checks on every rank at once
/// (checkOnEveryRank); an error of setJParticles, predict or launchForces on the rank's engine is held until the next
/// finishForces, where every rank learns of it with the partial sums and throws it (the lowest failing rank's
/// message, "rank r: ..."). Errors in the arguments are found before anything is sent, the same on every rank.
///
/// With one rank every call goes straight to `local`: the results are its own, bit for bit.
class DistributedHermiteEngine final : public HermiteEngine {
 public:
  /// What one gather message brings to each rank at most, by default (all ranks' records together): a block of any
  /// size is gathered in pieces, so that the receive buffer stays at 256 MiB however many ranks there are, and each
  /// rank's part stays far below MPI's int counts (2^31 - 1 bytes).
  static constexpr std::size_t kGatherBytes = std::size_t{1} << 28;

  /// @param local  in: this rank's engine; must outlive this object; its j-memory becomes this rank's share
  /// @param comm   in: the ranks that share the j-particles (not duplicated: collective calls on it keep their order)
  DistributedHermiteEngine(HermiteEngine& local, MPI_Comm comm);
  DistributedHermiteEngine(const DistributedHermiteEngine&) = delete;
  DistributedHermiteEngine& operator=(const DistributedHermiteEngine&) = delete;

  /// `local`'s name and " over K ranks (j-parallel)"; with one rank `local`'s name alone (nothing is split).
  std::string name() const override;

  /// Reserves ceil(capacity / K) slots on every rank's engine; a rank that cannot throws on every rank (InputError
  /// with that rank's message when it threw one). Slots beyond the new capacity that a rank still holds are zeroed,
  /// so that a later growth finds zero-mass particles there, as the CPU engine's new slots are.
  void reserve(std::size_t capacity) override;
  /// The global capacity (`local`'s with one rank).
  std::size_t capacity() const override;

  /// Stores the particles whose slots are this rank's in `local`.
  /// @throws InputError (on every rank alike) for spans of different lengths or an address >= capacity()
  void setJParticles(std::span<const std::uint32_t> addresses, std::span<const JParticle> particles) override;

  /// Predicts this rank's slots below numJ (there are none on ranks >= numJ).
  /// @throws InputError for numJ > capacity() or a time that is not finite
  void predict(double time, std::size_t numJ) override;

  /// Starts this rank's partial sums of the whole block over its slots, always with jerks, potentials and nearest
  /// neighbours (they cost the combination little, and every rank then does the same work whatever `out` asks for).
  /// block.vel may be null when out.jerk is (velocities then count as zero).
  /// @throws InputError for eps2 < 0 or not finite, block.count != out.count, missing positions/velocities, or a
  ///         launch while the last one is not finished
  void launchForces(const IBlockView& block, double eps2, const HermiteForceView& out) override;

  /// Waits for this rank's engine, gathers every rank's partial sums and combines them in rank order; writes the
  /// non-null arrays of the last launch's `out`. Collective.
  /// @throws InputError without a launchForces before it; the error of any rank's engine since the last finishForces
  void finishForces() override;

  /// The most i-particles per gather message (>= 1; by default kGatherBytes / (72 K)); blocks above it are gathered
  /// in several. Tests set a small one to cover the split; every rank must set the same.
  /// @throws InputError for 0, or a number whose bytes would not fit MPI's int count
  void setRecordsPerMessage(std::size_t records);

 private:
  /// One rank's partial results for one i-particle, as they travel: 9 doubles and the nearest id.
  struct PartialResult {
    double acc[3];
    double jerk[3];
    double pot;
    double nearestDistance2;
    std::int64_t nearestId;  ///< in the status record heading each rank's first message: 0 ok, 1 failed
  };

  /// Runs `call` on `local_` unless an error is already held, and holds the matcha::Error it throws.
  template <class Call>
  void onLocalEngine(Call&& call);
  /// Gathers and combines the partial sums into out_ (or, when any rank holds an error, throws it on every rank).
  void combinePartials();

  HermiteEngine& local_;
  MPI_Comm comm_;
  int rank_ = 0;
  int numRanks_ = 1;
  std::size_t capacity_ = 0;
  std::size_t recordsPerMessage_ = 1;  ///< set by the constructor from kGatherBytes
  bool launched_ = false;              ///< launchForces called, finishForces not yet
  bool localLaunched_ = false;         ///< and `local_` took the launch without an error
  std::exception_ptr heldError_;

  // The last launch's output, and this rank's partial sums over its slots (the whole block each).
  HermiteForceView out_;
  std::vector<double> partialAcc_, partialJerk_, partialPot_, partialNearest2_, zeroVelocities_;
  std::vector<std::int64_t> partialNearestId_;
  // This rank's slots of a setJParticles call, at their local addresses.
  std::vector<std::uint32_t> localAddresses_;
  std::vector<JParticle> localParticles_;
  // The gather's messages: this rank's records, and every rank's, rank after rank.
  std::vector<PartialResult> sendRecords_, receivedRecords_;
};

}  // namespace matcha::parallel
