// SPDX-License-Identifier: MIT
// The particle store: structure of arrays in double precision, owned by core (DESIGN.md §2, STYLE.md habit 5).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace matcha {

/// Read-only view of the sources an engine needs: positions and masses, `count` entries each.
struct SourceView {
  const double* x = nullptr;
  const double* y = nullptr;
  const double* z = nullptr;
  const double* mass = nullptr;
  std::size_t count = 0;
};

/// Where an engine writes: accelerations and potentials, `count` entries each (index space of the SourceView).
struct ForceView {
  double* ax = nullptr;
  double* ay = nullptr;
  double* az = nullptr;
  double* pot = nullptr;  ///< null: accelerations only (ForceSolver::setPotentialsWanted)
  std::size_t count = 0;
};

/// Another part of the force, for an engine to add onto its own outputs as it writes them (PlanBatch::addend: TreePM's
/// long range onto the short range's pairs, the add then runs inside the copy of the outputs the engine makes anyway,
/// instead of as a pass of its own after the call), in the same index space; pot null where the call computes no
/// potentials.
struct ForceAddend {
  const double* ax = nullptr;
  const double* ay = nullptr;
  const double* az = nullptr;
  const double* pot = nullptr;
  std::size_t count = 0;
};

/// out += addend over bodies [first, last): the accelerations, and the potentials where out takes them.
inline void addForceAddend(const ForceAddend& addend, const ForceView& out, std::size_t first, std::size_t last) {
  for (std::size_t i = first; i < last; ++i) {
    out.ax[i] += addend.ax[i];
    out.ay[i] += addend.ay[i];
    out.az[i] += addend.az[i];
  }
  if (out.pot == nullptr) return;
  for (std::size_t i = first; i < last; ++i) out.pot[i] += addend.pot[i];
}

/// Accelerations to read, e.g. a force's long-range part (ForceSolver::lastLongRange); empty: count 0, null arrays.
struct AccelerationView {
  const double* ax = nullptr;
  const double* ay = nullptr;
  const double* az = nullptr;
  std::size_t count = 0;
};

/// How an integrator moves its bodies between two force calls, when it says so beforehand (ForceSolver::expectAdvance):
/// the leapfrog's closing half kick, the next step's opening half kick and its drift, body by body, each product and
/// each sum rounded on its own (no fused multiply-add):
///   v = v + a * firstKick;  v = v + a * secondKick;  x = x + v * drift
/// with a the accelerations of the first call; a kick of zero is none. An engine that keeps its own copy of the bodies
/// (the CUDA engine) repeats this arithmetic instead of receiving the positions again: the same bits, without the
/// upload.
struct BodyAdvance {
  double firstKick = 0.0;
  double secondKick = 0.0;
  double drift = 0.0;
};

/// How a run with block time steps moved its bodies in a periodic box since the last force call, as the leapfrog says
/// before each call (ForceSolver::setBodyDrift): the bodies of bin >= kickedFrom (Particles::timeBin; every body where
/// kickedFrom is 0) took kicks, and their velocities are the caller's now; the others' velocities are as they were.
/// Then every body drifted and was folded into the box, each product and each sum rounded on its own:
///   x = x + v * drift;  x = x + 0.0;  x = wrapIntoBox(x, boxSize) where x lies outside [0, boxSize)
/// An engine that keeps its own copy of the bodies (the CUDA engine) repeats the drift instead of receiving the
/// positions again, and receives the kicked bodies' velocities alone.
struct BodyDrift {
  double drift = 0.0;
  double boxSize = 0.0;
  std::uint8_t kickedFrom = 0;
};

/// One coordinate x of a body with velocity v, drifted and folded into the box as BodyDrift says, rounded as the
/// leapfrog's pass over the bodies rounds it (the same bits): for the few bodies a solver needs drifted before the
/// caller's pass has run (ForceSolver::setPendingDrift).
double driftedCoordinate(double x, double v, const BodyDrift& drift);

/// All bodies of a simulation. Index i is the same body in every array. Solvers may reorder the bodies (the tree
/// solver sorts them along a space-filling curve); they then permute every array together, so `id` always names
/// the body.
class Particles {
 public:
  Particles() = default;
  explicit Particles(std::size_t count) { resize(count); }

  std::size_t size() const { return mass.size(); }
  bool empty() const { return mass.empty(); }

  /// Resizes every array; new entries are zero.
  void resize(std::size_t count);
  /// resize, but an array that must grow past its capacity takes an eighth more room: for a count that wanders by a
  /// few percent from call to call (a rank's bodies in a distributed run), which would otherwise reallocate, copy and
  /// first-touch every array each time it reaches a new high. timeBin is the caller's.
  void resizeWithRoom(std::size_t count);

  /// Reorders all arrays so that new[i] = old[order[i]] (timeBin too when it holds one entry per body). `order` must be
  /// a permutation of [0, size()).
  /// Allocates one scratch array of size() doubles.
  void permute(std::span<const std::uint32_t> order);

  /// Throws InputError naming the first body whose position, velocity or mass is NaN/inf, or whose mass is <= 0.
  void validate() const;

  SourceView sources() const { return {x.data(), y.data(), z.data(), mass.data(), size()}; }
  ForceView forces() { return {ax.data(), ay.data(), az.data(), pot.data(), size()}; }

  std::vector<double> x, y, z;     ///< position
  std::vector<double> vx, vy, vz;  ///< velocity
  std::vector<double> mass;        ///< mass, > 0
  std::vector<double> ax, ay, az;  ///< acceleration from the last force call (G included)
  std::vector<double> pot;         ///< gravitational potential per unit mass from the last force call
  std::vector<std::uint64_t> id;   ///< stable identifier, survives reordering
  /// Block time steps (integrator/leapfrog.hpp: BinnedStep): each body's bin, its step the long-range step / 2^bin;
  /// empty while a run takes one step for every body. Permuted with the rest when it holds one entry per body.
  std::vector<std::uint8_t> timeBin;
};

/// A coordinate x folded into the periodic interval [0, L): unchanged when it lies there already (but -0.0 becomes
/// +0.0), else moved by whole boxes; a result that rounds up to L (x just below 0, or just below a multiple of L) is 0.
/// Non-finite x is returned as it is, for the caller's check to name.
double wrapIntoBox(double x, double boxSize);

/// Folds every body's position into [0, L)^3 (wrapIntoBox per coordinate): what a periodic run does at every drift.
/// Serial (core has no thread pool; it costs ~1 ns a body); allocates nothing.
void wrapIntoBox(Particles& particles, double boxSize);

}  // namespace matcha
