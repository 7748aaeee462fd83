// SPDX-License-Identifier: MIT
#include "matcha/parallel/distributed_hermite_engine.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>

#include "matcha/core/errors.hpp"
#include "matcha/parallel/collective.hpp"

namespace matcha::parallel {

namespace {

/// The number of global slots below numJ that rank `rank` of `numRanks` holds: rank, rank + K, ... < numJ.
std::size_t slotsOfRank(std::size_t numJ, int rank, int numRanks) {
  const auto r = static_cast<std::size_t>(rank);
  return numJ > r ? (numJ - 1 - r) / static_cast<std::size_t>(numRanks) + 1 : 0;
}

}  // namespace

DistributedHermiteEngine::DistributedHermiteEngine(HermiteEngine& local, MPI_Comm comm)
    : local_(local), comm_(comm), rank_(rankOf(comm)), numRanks_(numRanksOf(comm)) {
  static_assert(std::is_trivially_copyable_v<PartialResult> && sizeof(PartialResult) == 72,
                "the gather sends PartialResult as raw bytes");
  recordsPerMessage_ = std::max<std::size_t>(1, kGatherBytes / (sizeof(PartialResult) * std::size_t(numRanks_)));
}

std::string DistributedHermiteEngine::name() const {
  if (numRanks_ == 1) return local_.name();
  return local_.name() + " over " + std::to_string(numRanks_) + " ranks (j-parallel)";
}

std::size_t DistributedHermiteEngine::capacity() const { return numRanks_ == 1 ? local_.capacity() : capacity_; }

void DistributedHermiteEngine::setRecordsPerMessage(std::size_t records) {
  // The status record rides along in the first message; the bytes per rank must fit MPI's int count.
  if (records == 0 || records >= std::size_t{INT_MAX} / sizeof(PartialResult) - 1) {
    throw InputError("setRecordsPerMessage: " + std::to_string(records) + " records per message is not in [1, " +
                     std::to_string(std::size_t{INT_MAX} / sizeof(PartialResult) - 2) + "]");
  }
  recordsPerMessage_ = records;
}

template <class Call>
void DistributedHermiteEngine::onLocalEngine(Call&& call) {
  // After an error the rank's engine is in no known state: nothing more goes to it until the error is reported.
  if (heldError_) return;
  try {
    call();
  } catch (const Error&) {
    heldError_ = std::current_exception();
  }
}

void DistributedHermiteEngine::reserve(std::size_t capacity) {
  if (numRanks_ == 1) {
    local_.reserve(capacity);
    return;
  }
  const auto numRanks = static_cast<std::size_t>(numRanks_);
  const std::size_t localCapacity = (capacity + numRanks - 1) / numRanks;
  checkOnEveryRank([&] { local_.reserve(localCapacity); }, comm_);
  capacity_ = capacity;
  // The rank's last local slot may lie beyond the global capacity and still hold what an earlier, larger capacity put
  // there; a later growth would bring it back. Zero it, as the CPU engine's grown slots are.
  if (localCapacity > 0) {
    const std::uint32_t last = static_cast<std::uint32_t>(localCapacity - 1);
    if (static_cast<std::size_t>(last) * numRanks + static_cast<std::size_t>(rank_) >= capacity) {
      const JParticle zero{};
      onLocalEngine([&] { local_.setJParticles({&last, 1}, {&zero, 1}); });
    }
  }
}

void DistributedHermiteEngine::setJParticles(std::span<const std::uint32_t> addresses,
                                             std::span<const JParticle> particles) {
  if (numRanks_ == 1) {
    local_.setJParticles(addresses, particles);
    return;
  }
  // Checked here on the global addresses, so that every rank refuses the same call.
  if (addresses.size() != particles.size()) {
    throw InputError("setJParticles: " + std::to_string(addresses.size()) + " addresses for " +
                     std::to_string(particles.size()) + " particles");
  }
  localAddresses_.clear();
  localParticles_.clear();
  const auto numRanks = static_cast<std::uint32_t>(numRanks_);
  const auto rank = static_cast<std::uint32_t>(rank_);
  for (std::size_t k = 0; k < addresses.size(); ++k) {
    const std::uint32_t address = addresses[k];
    if (address >= capacity_) {
      throw InputError("setJParticles: address " + std::to_string(address) + " outside the j-memory of " +
                       std::to_string(capacity_) + " slots");
    }
    if (address % numRanks == rank) {
      localAddresses_.push_back(address / numRanks);
      localParticles_.push_back(particles[k]);
    }
  }
  if (!localAddresses_.empty()) onLocalEngine([&] { local_.setJParticles(localAddresses_, localParticles_); });
}

void DistributedHermiteEngine::predict(double time, std::size_t numJ) {
  if (numRanks_ == 1) {
    local_.predict(time, numJ);
    return;
  }
  if (numJ > capacity_) {
    throw InputError("predict: " + std::to_string(numJ) + " j-particles asked for, the j-memory holds " +
                     std::to_string(capacity_));
  }
  if (!std::isfinite(time)) throw InputError("predict: the time is not finite");
  onLocalEngine([&] { local_.predict(time, slotsOfRank(numJ, rank_, numRanks_)); });
}

void DistributedHermiteEngine::launchForces(const IBlockView& block, double eps2, const HermiteForceView& out) {
  if (numRanks_ == 1) {
    local_.launchForces(block, eps2, out);
    return;
  }
  // The rank's engine would refuse the same, but only after the others had gone on to the gather.
  if (!(eps2 >= 0.0) || !std::isfinite(eps2)) throw InputError("launchForces: eps2 must be finite and >= 0");
  if (block.count != out.count) {
    throw InputError("launchForces: " + std::to_string(block.count) + " i-particles but room for " +
                     std::to_string(out.count) + " results");
  }
  if (block.count > 0 && block.pos == nullptr) throw InputError("launchForces: no i-particle positions");
  if (block.count > 0 && block.vel == nullptr && out.jerk != nullptr) {
    throw InputError("launchForces: jerks asked for without i-particle velocities");
  }
  if (block.count >= (std::size_t{1} << 31)) throw InputError("launchForces: more than 2^31 i-particles");
  if (launched_) throw InputError("launchForces: the previous launch was not finished");

  const std::size_t n = block.count;
  partialAcc_.resize(3 * n);
  partialJerk_.resize(3 * n);
  partialPot_.resize(n);
  partialNearestId_.resize(n);
  partialNearest2_.resize(n);
  IBlockView localBlock = block;
  if (block.vel == nullptr) {
    // The partial jerks are computed whatever `out` asks for; without velocities they are those of resting bodies.
    zeroVelocities_.assign(3 * n, 0.0);
    localBlock.vel = zeroVelocities_.data();
  }
  const HermiteForceView partial{partialAcc_.data(),       partialJerk_.data(),     partialPot_.data(),
                                 partialNearestId_.data(), partialNearest2_.data(), n};
  out_ = out;
  launched_ = true;
  localLaunched_ = false;
  onLocalEngine([&] {
    local_.launchForces(localBlock, eps2, partial);
    localLaunched_ = true;
  });
}

void DistributedHermiteEngine::finishForces() {
  if (numRanks_ == 1) {
    local_.finishForces();
    return;
  }
  if (!launched_) throw InputError("finishForces without a launchForces");
  launched_ = false;
  if (localLaunched_) {
    localLaunched_ = false;
    onLocalEngine([&] { local_.finishForces(); });
  }
  combinePartials();
}

void DistributedHermiteEngine::combinePartials() {
  const std::size_t n = out_.count;
  const auto numRanks = static_cast<std::size_t>(numRanks_);
  std::size_t first = 0;
  bool firstMessage = true;
  do {
    const std::size_t count = std::min(recordsPerMessage_, n - first);
    // Each rank's first message opens with its status: whether its engine failed since the last finishForces.
    const std::size_t header = firstMessage ? 1 : 0;
    const std::size_t perRank = header + count;
    sendRecords_.resize(perRank);
    if (firstMessage) sendRecords_[0] = PartialResult{{}, {}, 0.0, 0.0, heldError_ ? 1 : 0};
    for (std::size_t k = 0; k < count; ++k) {
      const std::size_t i = first + k;
      PartialResult& record = sendRecords_[header + k];
      for (int d = 0; d < 3; ++d) {
        record.acc[d] = partialAcc_[3 * i + d];
        record.jerk[d] = partialJerk_[3 * i + d];
      }
      record.pot = partialPot_[i];
      record.nearestDistance2 = partialNearest2_[i];
      record.nearestId = partialNearestId_[i];
    }
    receivedRecords_.resize(perRank * numRanks);
    const int bytes = static_cast<int>(perRank * sizeof(PartialResult));
    MPI_Allgather(sendRecords_.data(), bytes, MPI_BYTE, receivedRecords_.data(), bytes, MPI_BYTE, comm_);

    if (firstMessage) {
      bool anyFailed = false;
      for (std::size_t r = 0; r < numRanks; ++r) anyFailed = anyFailed || receivedRecords_[r * perRank].nearestId != 0;
      if (anyFailed) {
        // Every rank saw the same statuses and comes here together: the failing ranks' messages are exchanged once.
        checkOnEveryRank(
            [&] {
              if (heldError_) std::rethrow_exception(std::exchange(heldError_, nullptr));
            },
            comm_);
        throw InvariantError("finishForces: a rank reported an engine error that it did not hold");
      }
    }

    // Rank 0's partial first, then each rank's in turn: the same order, so the same bits, on every rank.
    for (std::size_t k = 0; k < count; ++k) {
      const PartialResult* const ofRank0 = &receivedRecords_[header + k];
      PartialResult sum = *ofRank0;
      for (std::size_t r = 1; r < numRanks; ++r) {
        const PartialResult& part = ofRank0[r * perRank];
        for (int d = 0; d < 3; ++d) {
          sum.acc[d] += part.acc[d];
          sum.jerk[d] += part.jerk[d];
        }
        sum.pot += part.pot;
        // Strictly nearer: of equal distances the lowest rank's stays. A rank without a neighbour offers +inf.
        if (part.nearestDistance2 < sum.nearestDistance2) {
          sum.nearestDistance2 = part.nearestDistance2;
          sum.nearestId = part.nearestId;
        }
      }
      const std::size_t i = first + k;
      for (int d = 0; d < 3; ++d) {
        if (out_.acc != nullptr) out_.acc[3 * i + d] = sum.acc[d];
        if (out_.jerk != nullptr) out_.jerk[3 * i + d] = sum.jerk[d];
      }
      if (out_.pot != nullptr) out_.pot[i] = sum.pot;
      if (out_.nearestId != nullptr) out_.nearestId[i] = sum.nearestId;
      if (out_.nearestDistance2 != nullptr) out_.nearestDistance2[i] = sum.nearestDistance2;
    }
    first += count;
    firstMessage = false;
  } while (first < n);
}

}  // namespace matcha::parallel
