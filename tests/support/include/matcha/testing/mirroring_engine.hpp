// SPDX-License-Identifier: MIT
// An engine that keeps its own copy of the bodies, as the CUDA engine does (near_field_engine.hpp: BodyUpdate), over
// an engine that reads the caller's arrays: so that the CPU tests run the tree solver's advance on the device and its
// launches made ahead (TreeParams::advanceOnDevice) on a machine without a GPU.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <memory_resource>
#include <span>
#include <string>
#include <vector>

#include "matcha/core/near_field_engine.hpp"

namespace matcha::testing {

/// Launches with BodyMotion::moved copy the caller's positions (and velocities, when given); BodyMotion::advanced
/// moves the copy as the BodyAdvance says, rounded as the host's leapfrog rounds it; BodyMotion::drifted takes the
/// kicked bodies' velocities, drifts and wraps the copy as the BodyDrift says and evaluates each body where its path
/// continues from the last launch (the placed bodies where they are placed), as the CUDA engine does. Every launch
/// evaluates `inner` on the copy (or the paths), into outputs of its own that reach the caller's `out` only at
/// finishResident, as a GPU's do; there the copy is compared with the caller's bodies, every body bit for bit (the
/// CUDA engine compares a sample), and a difference is reported as ResidentResult::advanceMismatch. Where asked, it
/// keeps the balls a launch gives and finds the bodies outside them (driftResident), as the CUDA engine does. A test
/// that includes this header builds with -ffp-contract=off, as the integrator does.
class MirroringEngine final : public NearFieldEngine {
 public:
  /// `periodicKernels`: offer the inner engine's periodic short range (false: none, an engine the periodic solvers
  /// refuse).
  /// `checksBalls`: keep the balls a launch gives (BodyUpdate::ballRadius) and offer driftResident, as the CUDA engine
  /// does (false: the periodic solver checks the balls on the host).
  explicit MirroringEngine(NearFieldEngine& inner, bool periodicKernels = false, bool checksBalls = false)
      : inner_(inner), periodicKernels_(periodicKernels), checksBalls_(checksBalls) {}
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
    ballR_.clear();  // balls are a tree's: its first launch gives them
    driftedBefore_ = false;
    topology_ = topology;
    inner_.setTree(topology, bodies);
  }
  void setLists(const InteractionPlan& plan) override { inner_.setLists(plan); }
  void dropLists() override { inner_.dropLists(); }
  bool advancesBodies() const override { return true; }
  bool checksBalls() const override { return checksBalls_; }

  /// The drift of a drifted launch on the copy, then the copy against the caller's bodies (every body) and the balls.
  DriftCheck driftResident(const SourceView& bodies, const BodyUpdate& update, std::uint32_t maxOutside) override {
    EXPECT_TRUE(checksBalls_ && !launched_ && !driftedBefore_) << "driftResident out of turn";
    EXPECT_TRUE(held_ && ballR_.size() == x_.size() && x_.size() == bodies.count) << "driftResident without balls";
    drift(update, false);
    ++numDriftChecks_;
    DriftCheck check;
    // With positionsPending the caller drifts its positions later: the launch that follows compares them at its finish.
    numPendingChecks_ += update.positionsPending ? 1 : 0;
    if (!update.positionsPending && differsFrom(bodies)) {
      check.mismatch = true;
      held_ = false;
      ballR_.clear();
      ++numMismatches_;
      return check;
    }
    const double box = update.drift.boxSize, half = 0.5 * box;
    for (std::size_t i = 0; i < x_.size(); ++i) {
      const double position[3] = {x_[i], y_[i], z_[i]}, centre[3] = {ballX_[i], ballY_[i], ballZ_[i]};
      double moved[3];
      for (int d = 0; d < 3; ++d) {
        moved[d] = position[d] - centre[d];
        if (moved[d] > half) {
          moved[d] -= box;
        } else if (moved[d] < -half) {
          moved[d] += box;
        }
      }
      const double radius = ballR_[i];
      if (!(moved[0] * moved[0] + moved[1] * moved[1] + moved[2] * moved[2] <= radius * radius)) {
        ++check.numOutside;
        check.outside.push_back(static_cast<std::uint32_t>(i));
      }
    }
    if (check.numOutside > maxOutside) check.outside.clear();
    driftedBefore_ = true;
    return check;
  }
  bool periodicShortRange() const override { return periodicKernels_ && inner_.periodicShortRange(); }
  /// Offers `memory` as the engine's transfer memory (NearFieldEngine::transferMemory; none by default).
  void setTransferMemory(std::pmr::memory_resource* memory) { transferMemory_ = memory; }
  std::pmr::memory_resource* transferMemory() override { return transferMemory_; }

  void launchResident(const SourceView& bodies, const GravityParams& gravity, const ForceView& out,
                      std::span<const std::uint32_t> groups, const BodyUpdate& update) override {
    EXPECT_FALSE(launched_) << "a launch while another is in flight";
    const std::size_t n = bodies.count;
    const bool drifted = update.motion == BodyMotion::drifted;
    EXPECT_EQ(drifted && update.driftedBefore, driftedBefore_) << "driftedBefore without driftResident, or not after";
    driftedBefore_ = false;
    if (drifted) {
      EXPECT_TRUE(held_ && x_.size() == n) << "BodyMotion::drifted without the bodies' copy";
      if (update.driftedBefore) {
        place(update);
      } else {
        drift(update, true);
      }
      ++numDrifted_;
    } else if (update.motion == BodyMotion::moved || x_.size() != n) {
      x_.assign(bodies.x, bodies.x + n);
      y_.assign(bodies.y, bodies.y + n);
      z_.assign(bodies.z, bodies.z + n);
      held_ = update.vx != nullptr;
      if (held_) {
        vx_.assign(update.vx, update.vx + n);
        vy_.assign(update.vy, update.vy + n);
        vz_.assign(update.vz, update.vz + n);
      }
      ballR_.clear();
      if (held_ && checksBalls_ && update.ballRadius != nullptr) {
        ballX_ = x_;
        ballY_ = y_;
        ballZ_ = z_;
        ballR_.assign(update.ballRadius, update.ballRadius + n);
      }
      for (auto* array : {&ax_, &ay_, &az_, &pot_}) array->assign(n, 0.0);
      ++numMoved_;
    } else if (update.motion == BodyMotion::advanced) {
      EXPECT_TRUE(held_) << "BodyMotion::advanced without the velocities";
      advance(update.advance);
      ++numAdvanced_;
    }
    if (!drifted) {
      pathX_ = x_;
      pathY_ = y_;
      pathZ_ = z_;
    }
    checkAgainst_ = update.motion == BodyMotion::advanced || drifted ? bodies : SourceView{};
    inner_.launchResident({pathX_.data(), pathY_.data(), pathZ_.data(), bodies.mass, n}, gravity,
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
    if (checkAgainst_.x != nullptr && differsFrom(checkAgainst_)) {
      result.advanceMismatch = true;
      held_ = false;
      ballR_.clear();
      ++numMismatches_;
    } else {
      numPlacedServed_ += placedAtLaunch_;
    }
    placedAtLaunch_ = 0;
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
    placedAtLaunch_ = 0;
    held_ = false;
    driftedBefore_ = false;
    ++numDiscarded_;
  }

  std::uint64_t numMoved() const { return numMoved_; }
  std::uint64_t numAdvanced() const { return numAdvanced_; }
  std::uint64_t numDiscarded() const { return numDiscarded_; }
  std::uint64_t numDrifted() const { return numDrifted_; }
  std::uint64_t numMismatches() const { return numMismatches_; }
  std::uint64_t numKicked() const { return numKicked_; }  ///< over the drifted launches
  std::uint64_t numPlaced() const { return numPlaced_; }  ///< over the drifted launches
  /// over the drifted launches whose copy was the caller's bodies (finishResident found no difference)
  std::uint64_t numPlacedServed() const { return numPlacedServed_; }
  std::uint64_t numDriftChecks() const { return numDriftChecks_; }  ///< driftResident calls
  /// driftResident calls made before the caller drifted its positions (BodyUpdate::positionsPending)
  std::uint64_t numPendingChecks() const { return numPendingChecks_; }

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

  /// Whether the copy's positions differ from `bodies`' anywhere.
  bool differsFrom(const SourceView& bodies) const {
    for (std::size_t i = 0; i < x_.size(); ++i) {
      if (x_[i] != bodies.x[i] || y_[i] != bodies.y[i] || z_[i] != bodies.z[i]) return true;
    }
    return false;
  }

  /// The placed bodies put in their places.
  void place(const BodyUpdate& update) {
    for (std::size_t k = 0; k < update.placed.size(); ++k) {
      const std::uint32_t i = update.placed[k];
      pathX_[i] = update.placedPoints[3 * k];
      pathY_[i] = update.placedPoints[3 * k + 1];
      pathZ_[i] = update.placedPoints[3 * k + 2];
    }
    numPlaced_ += update.placed.size();
    placedAtLaunch_ = update.placed.size();
  }

  /// BodyDrift on the copy (core/particles.hpp), then each path continued from the last launch's place across the
  /// faces (tree/periodic_tree_solver.cpp: continuedPath) and, with `placing`, the placed bodies put in their places.
  void drift(const BodyUpdate& update, bool placing) {
    const auto kick = [&](std::size_t i) {
      vx_[i] = update.vx[i];
      vy_[i] = update.vy[i];
      vz_[i] = update.vz[i];
    };
    if (update.kickedAll) {
      for (std::size_t i = 0; i < x_.size(); ++i) kick(i);
      numKicked_ += x_.size();
    } else {
      for (const std::uint32_t i : update.kicked) kick(i);
      numKicked_ += update.kicked.size();
    }
    const double box = update.drift.boxSize, half = 0.5 * box;
    const auto move = [&](double& x, double v, double& path) {
      x += v * update.drift.drift;
      x += 0.0;
      if (!(x >= 0.0 && x < box)) x = wrapIntoBox(x, box);
      const double moved = x - path;
      path = moved > half ? x - box : (moved < -half ? x + box : x);
    };
    for (std::size_t i = 0; i < x_.size(); ++i) {
      move(x_[i], vx_[i], pathX_[i]);
      move(y_[i], vy_[i], pathY_[i]);
      move(z_[i], vz_[i], pathZ_[i]);
    }
    if (placing) place(update);
  }

  std::unique_ptr<NearFieldEngine> owned_;
  NearFieldEngine& inner_;
  bool periodicKernels_ = false;
  bool checksBalls_ = false;
  std::pmr::memory_resource* transferMemory_ = nullptr;
  bool driftedBefore_ = false;                 ///< driftResident drifted the copy for the next launch
  std::vector<double> ballX_, ballY_, ballZ_;  ///< the balls' centres (checksBalls_)
  std::vector<float> ballR_;                   ///< and radii; empty: none kept
  TreeTopology topology_;
  std::vector<double> x_, y_, z_, vx_, vy_, vz_, ax_, ay_, az_, pot_;  ///< the copy, in the caller's order
  std::vector<double> pathX_, pathY_, pathZ_;                          ///< where the last launch evaluated the bodies
  bool held_ = false;                                                  ///< the copy has velocities
  bool launched_ = false;
  ResidentResult result_;
  ForceView out_;
  std::vector<std::uint32_t> groups_;
  SourceView checkAgainst_;
  std::uint64_t numMoved_ = 0, numAdvanced_ = 0, numDiscarded_ = 0, numDrifted_ = 0, numMismatches_ = 0;
  std::uint64_t numKicked_ = 0, numPlaced_ = 0, numDriftChecks_ = 0, numPendingChecks_ = 0;
  std::uint64_t numPlacedServed_ = 0, placedAtLaunch_ = 0;  ///< placedAtLaunch_: place()'s, at the launch in flight
};

}  // namespace matcha::testing
