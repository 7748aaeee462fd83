// SPDX-License-Identifier: MIT
// The CPU Hermite engine (issue 18): the reference twin of the CUDA Hermite engine (STYLE.md habit 3), in double
// precision, TBB threads over the i-particles. It is the oracle the CUDA engine and the C libraries (lib/) are tested
// against, and the engine those libraries use where there is no GPU.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "matcha/core/hermite_engine.hpp"

namespace matcha::gpu {

class HermiteCpuEngine final : public HermiteEngine {
 public:
  HermiteCpuEngine() = default;
  HermiteCpuEngine(const HermiteCpuEngine&) = delete;
  HermiteCpuEngine& operator=(const HermiteCpuEngine&) = delete;

  /// "cpu-hermite (2 threads, double)".
  std::string name() const override;

  /// Resizes the j-memory to exactly `capacity` slots (new slots hold zero-mass particles at the origin, time 0).
  /// @throws InputError above kMaxHermiteSlots or when the host cannot allocate them
  void reserve(std::size_t capacity) override;
  std::size_t capacity() const override { return slots_.size(); }

  /// Writes the slots at once (the CPU has nothing to upload); they reach the force calls at the next predict, as the
  /// interface promises. @throws InputError for an address >= capacity() or spans of different lengths
  void setJParticles(std::span<const std::uint32_t> addresses, std::span<const JParticle> particles) override;

  /// Predicts slots [0, numJ) to `time` (hermite_predictor.hpp), in parallel.
  /// @throws InputError for numJ > capacity() or a time that is not finite
  void predict(double time, std::size_t numJ) override;

  /// Computes everything within the call (TBB over the i-particles; each i sums the j-slots in order, so the results
  /// do not depend on the thread count); finishForces only closes the call. block.id may be null (no particle is
  /// skipped by id); block.vel may be null when out.jerk is (velocities then count as zero).
  /// @throws InputError for eps2 < 0 or not finite, block.count != out.count, or missing positions/velocities
  void launchForces(const IBlockView& block, double eps2, const HermiteForceView& out) override;
  void finishForces() override;

 private:
  std::vector<JParticle> slots_;
  // The prediction of the last predict, structure of arrays over slots [0, numPredicted_).
  std::vector<double> x_, y_, z_, vx_, vy_, vz_, mass_;
  std::vector<std::int64_t> id_;
  std::size_t numPredicted_ = 0;
  bool launched_ = false;
};

/// The largest j-memory a Hermite engine accepts: 2^31 slots, so that addresses fit the GRAPE-6 API's int.
inline constexpr std::size_t kMaxHermiteSlots = std::size_t{1} << 31;

}  // namespace matcha::gpu
