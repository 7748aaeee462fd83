// SPDX-License-Identifier: MIT
// A test double of core's HermiteEngine for the integrator's tests: the interface's contract written out in double
// precision, serially, with no device. It stands in for gpu/'s CPU engine, which integrator/ must not link.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "matcha/core/errors.hpp"
#include "matcha/core/hermite_engine.hpp"

namespace matcha::testing {

class DirectHermiteEngine : public HermiteEngine {
 public:
  std::string name() const override { return "test direct-hermite (double)"; }
  void reserve(std::size_t capacity) override { slots_.resize(capacity); }
  std::size_t capacity() const override { return slots_.size(); }

  void setJParticles(std::span<const std::uint32_t> addresses, std::span<const JParticle> particles) override {
    MATCHA_ASSERT(addresses.size() == particles.size(), "addresses and particles differ in length");
    for (std::size_t k = 0; k < addresses.size(); ++k) {
      MATCHA_ASSERT(addresses[k] < slots_.size(), "j address beyond capacity");
      slots_[addresses[k]] = particles[k];
    }
    ++setCalls_;
  }

  void predict(double time, std::size_t numJ) override {
    MATCHA_ASSERT(numJ <= slots_.size(), "numJ beyond capacity");
    predicted_.resize(numJ);
    for (std::size_t s = 0; s < numJ; ++s) {
      const JParticle& j = slots_[s];
      const double dt = time - j.time;
      Predicted& q = predicted_[s];
      for (int c = 0; c < 3; ++c) {
        q.pos[c] = j.pos[c] + dt * (j.vel[c] + dt * (j.acc[c] / 2 + dt * (j.jerk[c] / 6 + dt * j.snap[c] / 24)));
        q.vel[c] = j.vel[c] + dt * (j.acc[c] + dt * (j.jerk[c] / 2 + dt * j.snap[c] / 6));
      }
      q.mass = j.mass;
      q.id = j.id;
    }
  }

  void launchForces(const IBlockView& block, double eps2, const HermiteForceView& out) override {
    MATCHA_ASSERT(block.count == out.count, "block and output differ in count");
    for (std::size_t i = 0; i < block.count; ++i) {
      double acc[3] = {0, 0, 0}, jerk[3] = {0, 0, 0}, pot = 0;
      std::int64_t nearest = -1;
      double nearest2 = std::numeric_limits<double>::infinity();
      for (const Predicted& q : predicted_) {
        if (block.id != nullptr && q.id == block.id[i]) continue;
        double r[3], v[3];
        for (int c = 0; c < 3; ++c) {
          r[c] = q.pos[c] - block.pos[3 * i + c];
          v[c] = q.vel[c] - block.vel[3 * i + c];
        }
        const double r2 = r[0] * r[0] + r[1] * r[1] + r[2] * r[2];
        const double s2 = r2 + eps2;
        if (s2 == 0.0) continue;
        if (r2 < nearest2) {
          nearest2 = r2;
          nearest = q.id;
        }
        const double inv = 1.0 / std::sqrt(s2);
        const double inv3 = inv * inv * inv;
        const double rv = r[0] * v[0] + r[1] * v[1] + r[2] * v[2];
        for (int c = 0; c < 3; ++c) {
          acc[c] += q.mass * r[c] * inv3;
          jerk[c] += q.mass * (v[c] * inv3 - 3.0 * rv * r[c] * inv3 * inv * inv);
        }
        pot -= q.mass * inv;
      }
      for (int c = 0; c < 3; ++c) {
        if (out.acc != nullptr) out.acc[3 * i + c] = acc[c];
        if (out.jerk != nullptr) out.jerk[3 * i + c] = jerk[c];
      }
      if (out.pot != nullptr) out.pot[i] = pot;
      if (out.nearestId != nullptr) out.nearestId[i] = nearest;
      if (out.nearestDistance2 != nullptr) out.nearestDistance2[i] = nearest2;
    }
    ++forceCalls_;
  }

  void finishForces() override {}

  int forceCalls() const { return forceCalls_; }
  int setCalls() const { return setCalls_; }
  const JParticle& slot(std::size_t s) const { return slots_[s]; }

 private:
  struct Predicted {
    double pos[3];
    double vel[3];
    double mass;
    std::int64_t id;
  };
  std::vector<JParticle> slots_;
  std::vector<Predicted> predicted_;
  int forceCalls_ = 0;
  int setCalls_ = 0;
};

}  // namespace matcha::testing
