// SPDX-License-Identifier: MIT
// Direct summation as a ForceSolver: the accuracy oracle and the user's baseline (DESIGN.md §1).
#pragma once

#include "matcha/core/force_solver.hpp"
#include "matcha/core/near_field_engine.hpp"
#include "matcha/core/params.hpp"

namespace matcha::gpu {

class DirectSolver final : public ForceSolver {
 public:
  /// `engine` must outlive the solver.
  DirectSolver(NearFieldEngine& engine, const GravityParams& gravity);

  /// O(N^2): overwrites acc and pot of every body; never reorders.
  ForceReport computeForces(Particles& particles) override;
  std::string describe() const override;

 private:
  NearFieldEngine& engine_;
  GravityParams gravity_;
};

}  // namespace matcha::gpu
