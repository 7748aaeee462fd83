// SPDX-License-Identifier: MIT
// An engine that keeps its own copy of the bodies, as the CUDA engine does (near_field_engine.hpp: BodyUpdate), over
// an engine that reads the caller's arrays: so that the CPU tests run the tree solver's advance on the device and its
// launches made ahead (TreeParams::advanceOnDevice) on a machine without a GPU.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "matcha/core/near_field_engine.hpp"

namespace matcha::testing {

/// Launches with BodyMotion::moved copy the caller's positions (and velocities, when given); BodyMotion::advanced
/// moves the copy as the BodyAdvance says, rounded as the host's leapfrog rounds it. Every launch evaluates `inner`
/// on the copy, into outputs of its own that reach the caller's `out` only at finishResident, as a GPU's do; there
/// the copy is compared with the caller's bodies, every body bit for bit (the CUDA engine compares a sample), and a
/// difference is reported as ResidentResult::advanceMismatch.
class MirroringEngine final : public NearFieldEngine {
 public:
  explicit MirroringEngine(NearFieldEngine& inner) : inner_(inner) {}
  explicit MirroringEngine(std::unique_ptr<NearFieldEngine> inner) : owned_(std::move(inner)), inner_(*owned_) {}

  std::string name() const override { return "mirroring " + inner_.name(); }
  InteractionCounts evaluatePlan(const SourceView& sources, const CellMultipoles& cells, const InteractionPlan& plan,
                                 const GravityParams& gravity, const ForceView& out) override {
    return inner_.evaluatePlan(sources, cells, plan, gravity, out);
  }
  InteractionCounts evaluateDirect(const SourceView& sources, const GravityParams& gravity,
                                   const ForceView& out) override {
    return inner_.evaluateDirect(sources, gravity, out);
  }
  EngineTimings lastTimings() const override { return inner_.lastTimings(); }
  void setTree(const TreeTopology& topology, const SourceView& bodies) override {
    EXPECT_FALSE(launched_) << "setTree while a launch is in flight";
    if (bodies.count != x_.size()) held_ = false;
    topology_ = topology;
    inner_.setTree(topology, bodies);
  }
  void setLists(const InteractionPlan& plan) override { inner_.setLists(plan); }
  void dropLists() override { inner_.dropLists(); }
  bool advancesBodies() const override { return true; }

  void launchResident(const SourceView& bodies, const GravityParams& gravity, const ForceView& out,
                      std::span<const std::uint32_t> groups, const BodyUpdate& update) override {
    EXPECT_FALSE(launched_) << "a launch while another is in flight";
    const std::size_t n = bodies.count;
    if (update.motion == BodyMotion::moved || x_.size() != n) {
      x_.assign(bodies.x, bodies.x + n);
      y_.assign(bodies.y, bodies.y + n);
      z_.assign(bodies.z, bodies.z + n);
      held_ = update.vx != nullptr;
      if (held_) {
        vx_.assign(update.vx, update.vx + n);
        vy_.assign(update.vy, update.vy + n);
        vz_.assign(update.vz, update.vz + n);
      }
      for (auto* array : {&ax_, &ay_, &az_, &pot_}) array->assign(n, 0.0);
      ++numMoved_;
    } else if (update.motion == BodyMotion::advanced) {
      EXPECT_TRUE(held_) << "BodyMotion::advanced without the velocities";
      advance(update.advance);
      ++numAdvanced_;
    }
    checkAgainst_ = update.motion == BodyMotion::advanced ? bodies : SourceView{};
    inner_.launchResident({x_.data(), y_.data(), z_.data(), bodies.mass, n}, gravity,
                          {ax_.data(), ay_.data(), az_.data(), out.pot != nullptr ? pot_.data() : nullptr, n}, groups,
                          update.motion == BodyMotion::unchanged ? BodyMotion::unchanged : BodyMotion::moved);
    result_ = inner_.finishResident();
    out_ = out;
    groups_.assign(groups.begin(), groups.end());
    launched_ = true;
  }

  ResidentResult finishResident() override {
    EXPECT_TRUE(launched_) << "finishResident without a launch";
    launched_ = false;
    ResidentResult result = std::move(result_);
    if (checkAgainst_.x != nullptr) {
      for (std::size_t i = 0; i < x_.size(); ++i) {
        if (x_[i] != checkAgainst_.x[i] || y_[i] != checkAgainst_.y[i] || z_[i] != checkAgainst_.z[i]) {
          result.advanceMismatch = true;
          held_ = false;
          break;
        }
      }
    }
    // Only the launched groups' bodies: the others keep what the caller's arrays hold.
    const auto copyOut = [&](std::uint32_t first, std::uint32_t last) {
      for (std::uint32_t k = first; k < last; ++k) {
        const std::uint32_t i = topology_.order.empty() ? k : topology_.order[k];
        out_.ax[i] = ax_[i];
        out_.ay[i] = ay_[i];
        out_.az[i] = az_[i];
        if (out_.pot != nullptr) out_.pot[i] = pot_[i];
      }
    };
    if (groups_.empty()) {
      copyOut(0, static_cast<std::uint32_t>(x_.size()));
    } else {
      for (const std::uint32_t g : groups_) copyOut(topology_.groups[g].first, topology_.groups[g].last);
    }
    return result;
  }

  void discardResident() override {
    launched_ = false;
    held_ = false;
    ++numDiscarded_;
  }

  std::uint64_t numMoved() const { return numMoved_; }
  std::uint64_t numAdvanced() const { return numAdvanced_; }
  std::uint64_t numDiscarded() const { return numDiscarded_; }

 private:
  /// The host's leapfrog (integrator/leapfrog.cpp: kick, drift), with the accelerations of the last launches.
  void advance(const BodyAdvance& step) {
    for (std::size_t i = 0; i < x_.size(); ++i) {
      double* position[3] = {&x_[i], &y_[i], &z_[i]};
      double* velocity[3] = {&vx_[i], &vy_[i], &vz_[i]};
      const double acceleration[3] = {ax_[i], ay_[i], az_[i]};
      for (int d = 0; d < 3; ++d) {
        if (step.firstKick != 0.0) *velocity[d] += acceleration[d] * step.firstKick;
        if (step.secondKick != 0.0) *velocity[d] += acceleration[d] * step.secondKick;
        *position[d] += *velocity[d] * step.drift;
      }
    }
  }

  std::unique_ptr<NearFieldEngine> owned_;
  NearFieldEngine& inner_;
  TreeTopology topology_;
  std::vector<double> x_, y_, z_, vx_, vy_, vz_, ax_, ay_, az_, pot_;  ///< the copy, in the caller's order
  bool held_ = false;                                                  ///< the copy has velocities
  bool launched_ = false;
  ResidentResult result_;
  ForceView out_;
  std::vector<std::uint32_t> groups_;
  SourceView checkAgainst_;
  std::uint64_t numMoved_ = 0, numAdvanced_ = 0, numDiscarded_ = 0;
};

}  // namespace matcha::testing
