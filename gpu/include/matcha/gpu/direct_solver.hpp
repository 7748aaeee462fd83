// SPDX-License-Identifier: MIT
// Direct summation as a ForceSolver: the accuracy oracle and the user's baseline (DESIGN.md §1).
#pragma once

#include <functional>

#include "matcha/core/force_solver.hpp"
#include "matcha/core/near_field_engine.hpp"
#include "matcha/core/params.hpp"

namespace matcha::gpu {

class DirectSolver final : public ForceSolver {
 public:
  /// Puts bodies in a spatially coherent order (permuting every array), so that each block of consecutive bodies the
  /// engines use as a float origin is compact: the float engines' accuracy and speed depend on it (E_max ~1e-6 and
  /// few pairs evaluated again in double in space-filling-curve order; random order costs both). gpu/ has no sort
  /// of its own (keys and sort belong to tree/, DESIGN.md §2): apps/ passes tree's Hilbert sort.
  using BodyOrdering = std::function<void(Particles&)>;

  /// `engine` must outlive the solver. Without `ordering` the bodies keep their order.
  DirectSolver(NearFieldEngine& engine, const GravityParams& gravity, BodyOrdering ordering = {});

  /// O(N^2): overwrites acc and pot of every body; reorders the bodies only through `ordering`.
  ForceReport computeForces(Particles& particles) override;
  void setSoftening(double eps) override;
  std::string describe() const override;

 private:
  NearFieldEngine& engine_;
  GravityParams gravity_;
  BodyOrdering ordering_;
};

}  // namespace matcha::gpu
