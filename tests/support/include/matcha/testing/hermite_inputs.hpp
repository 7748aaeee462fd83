// SPDX-License-Identifier: MIT
// Inputs and result buffers for tests of the Hermite engines (core/hermite_engine.hpp), shared by the CPU and CUDA
// engine tests and the C libraries' tests.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <vector>

#include "matcha/core/hermite_engine.hpp"
#include "matcha/core/particles.hpp"

namespace matcha::testing {

/// A j-particle at its time 0 with position and velocity only (acceleration, jerk and snap zero).
inline JParticle jParticleAt(std::int64_t id, double mass, std::array<double, 3> pos,
                             std::array<double, 3> vel = {0, 0, 0}) {
  JParticle p;
  p.id = id;
  p.mass = mass;
  for (int d = 0; d < 3; ++d) {
    p.pos[d] = pos[d];
    p.vel[d] = vel[d];
  }
  return p;
}

/// The bodies as j-particles at time 0, body k with id firstId + k.
inline std::vector<JParticle> jParticlesOf(const Particles& bodies, std::int64_t firstId = 0) {
  std::vector<JParticle> js;
  js.reserve(bodies.size());
  for (std::size_t k = 0; k < bodies.size(); ++k) {
    js.push_back(jParticleAt(firstId + static_cast<std::int64_t>(k), bodies.mass[k],
                             {bodies.x[k], bodies.y[k], bodies.z[k]}, {bodies.vx[k], bodies.vy[k], bodies.vz[k]}));
  }
  return js;
}

/// Stores `particles` in slots 0..n-1 (growing the j-memory when needed) and predicts them to `time`.
inline void loadSlots(HermiteEngine& engine, const std::vector<JParticle>& particles, double time = 0.0) {
  std::vector<std::uint32_t> addresses(particles.size());
  for (std::size_t k = 0; k < particles.size(); ++k) addresses[k] = static_cast<std::uint32_t>(k);
  if (engine.capacity() < particles.size()) engine.reserve(particles.size());
  engine.setJParticles(addresses, particles);
  engine.predict(time, particles.size());
}

/// An i-block in the interface's interleaved layout.
struct IBlock {
  std::vector<std::int64_t> id;
  std::vector<double> pos, vel;
  void add(std::int64_t particleId, std::array<double, 3> x, std::array<double, 3> v) {
    id.push_back(particleId);
    pos.insert(pos.end(), x.begin(), x.end());
    vel.insert(vel.end(), v.begin(), v.end());
  }
  IBlockView view() const { return {id.data(), pos.data(), vel.data(), id.size()}; }
};

/// The i-particles `ids` of `js` (by index), each with its own id, as an i-block.
inline IBlock iBlockOf(const std::vector<JParticle>& js, const std::vector<std::size_t>& indices) {
  IBlock block;
  for (const std::size_t k : indices) {
    block.add(js[k].id, {js[k].pos[0], js[k].pos[1], js[k].pos[2]}, {js[k].vel[0], js[k].vel[1], js[k].vel[2]});
  }
  return block;
}

/// Everything one force call returns, poisoned before the call (NaN, and -7 for the neighbour ids).
struct HermiteResults {
  explicit HermiteResults(std::size_t n)
      : acc(3 * n, kPoison), jerk(3 * n, kPoison), pot(n, kPoison), nearestId(n, -7), nearestDistance2(n, kPoison) {}
  static constexpr double kPoison = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> acc, jerk, pot;
  std::vector<std::int64_t> nearestId;
  std::vector<double> nearestDistance2;
  std::size_t size() const { return pot.size(); }
  HermiteForceView view() {
    return {acc.data(), jerk.data(), pot.data(), nearestId.data(), nearestDistance2.data(), pot.size()};
  }
};

/// One whole force call (launch and finish) on `block`.
inline HermiteResults forcesOn(HermiteEngine& engine, const IBlock& block, double eps2) {
  HermiteResults results(block.id.size());
  engine.launchForces(block.view(), eps2, results.view());
  engine.finishForces();
  return results;
}

}  // namespace matcha::testing
