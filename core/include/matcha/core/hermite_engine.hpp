// SPDX-License-Identifier: MIT
// The Hermite engine interface (issue 18): what a 4th-order Hermite integrator with block time steps asks of a force
// back-end, in the shape of the GRAPE-6 library (kirin, seeds/): j-particles held by the engine with their state at
// their own times, predicted to a common time on the device, and forces, potentials, jerks and nearest neighbours of
// an i-block from all of them. Declared in core so that integrator/ and the C libraries (lib/) drive the CPU and CUDA
// engines (gpu/) without knowing which one (DESIGN.md §2).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace matcha {

/// One j-particle as the predictor reads it: its state at its own time `time`. `mass` includes G (the engine sums
/// m_j, not G m_j, as GRAPE does). `snap` (the second derivative of the acceleration) may be zero: the predictor is
/// then of 3rd order in the position and 2nd in the velocity, as Makino & Aarseth (1992) predict.
struct JParticle {
  double time = 0.0;
  double mass = 0.0;
  double pos[3] = {0.0, 0.0, 0.0};
  double vel[3] = {0.0, 0.0, 0.0};
  double acc[3] = {0.0, 0.0, 0.0};
  double jerk[3] = {0.0, 0.0, 0.0};
  double snap[3] = {0.0, 0.0, 0.0};
  std::int64_t id = 0;  ///< the caller's name for the particle: an i-particle with the same id is not its own source
};

/// The i-block of a force call: `count` particles with positions and velocities already predicted by the caller to
/// the engine's prediction time (HermiteEngine::predict), interleaved xyz (3 * count doubles each).
struct IBlockView {
  const std::int64_t* id = nullptr;  ///< the j-particle with this id (if any) is skipped for this i-particle
  const double* pos = nullptr;
  const double* vel = nullptr;
  std::size_t count = 0;
};

/// Where the engine writes the i-block's results, `count` entries each (xyz interleaved for acc and jerk). Every
/// non-null array is overwritten for every i-particle. `nearestId` is the id of the nearest other j-particle (-1 when
/// there is none) and `nearestDistance2` its squared distance (unsoftened; +inf when there is none). Null arrays are
/// not computed where the engine can skip them (kirin: jerk and neighbours cost ~2x when a treecode needs neither).
struct HermiteForceView {
  double* acc = nullptr;
  double* jerk = nullptr;
  double* pot = nullptr;
  std::int64_t* nearestId = nullptr;
  double* nearestDistance2 = nullptr;
  std::size_t count = 0;
};

/// A Hermite force back-end: j-memory of `capacity` slots, a predictor, and i-block force calls. Sums are over the j
/// slots [0, numJ) of the last predict; for each pair r = x_j - x_i, v = v_j - v_i, s2 = |r|^2 + eps2:
///   acc  += m_j r / s2^(3/2)
///   jerk += m_j (v / s2^(3/2) - 3 (r.v) r / s2^(5/2))
///   pot  -= m_j / s2^(1/2)
/// skipping a j with the i-particle's id, and any pair with s2 = 0 (eps2 = 0 and coincident particles: never NaN).
/// Not thread-safe: one caller at a time.
class HermiteEngine {
 public:
  virtual ~HermiteEngine() = default;

  /// Short human-readable name with the device and the precision, e.g. "cuda-hermite (NVIDIA H200, float pairs,
  /// double sums)".
  virtual std::string name() const = 0;

  /// Makes room for `capacity` j-particles (GRAPE's njmax); earlier contents are kept up to the smaller size.
  /// Throws InputError when the device cannot hold them.
  virtual void reserve(std::size_t capacity) = 0;
  virtual std::size_t capacity() const = 0;

  /// Stores particles[k] in slot addresses[k] (each < capacity()), replacing what was there. May buffer on the host:
  /// takes effect at the next predict. addresses and particles have the same length.
  virtual void setJParticles(std::span<const std::uint32_t> addresses, std::span<const JParticle> particles) = 0;

  /// Predicts the j-particles in slots [0, numJ) to `time` (on the device, for the CUDA engine): every following force
  /// call uses those predicted positions and velocities.
  virtual void predict(double time, std::size_t numJ) = 0;

  /// Starts the forces on `block` from the predicted j-particles [0, numJ) of the last predict, with softening eps2
  /// (>= 0); may return before the work is done (GRAPE's calc_firsthalf). The caller leaves `block` and `out` alone
  /// until finishForces returns.
  virtual void launchForces(const IBlockView& block, double eps2, const HermiteForceView& out) = 0;

  /// Waits for the last launchForces and completes `out` (GRAPE's calc_lasthalf).
  virtual void finishForces() = 0;
};

}  // namespace matcha
