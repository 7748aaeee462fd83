// SPDX-License-Identifier: MIT
// Direct summation over MPI ranks (`matcha run --solver direct` on K ranks): the user's baseline beside the
// distributed tree, at sizes where one process's O(N^2) is too slow. Each rank keeps its own bodies (nothing migrates:
// a direct sum has no domains); the sources, positions and masses, go to every rank (an allgather, 32 bytes a body),
// and each rank sums all of them on its own bodies as one i-block of its Hermite engine (core/hermite_engine.hpp),
// which takes targets apart from sources, in double on the CPU and in float pairs with double sums on the GPU. Work
// O(N^2 / K) a rank, memory O(N). parallel/ takes the engine through core's interface (never gpu/, DESIGN.md §2).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "matcha/core/force_solver.hpp"
#include "matcha/core/hermite_engine.hpp"
#include "matcha/core/params.hpp"

namespace matcha::parallel {

class DistributedDirectSolver final : public ForceSolver {
 public:
  /// `engine` (this rank's) must outlive the solver; `comm` is not duplicated. Collective: every rank of `comm`
  /// constructs one and calls computeForces together.
  DistributedDirectSolver(HermiteEngine& engine, const GravityParams& gravity, MPI_Comm comm);

  /// Collective: overwrites acc (and pot, where wanted) of this rank's bodies with the pull of every rank's bodies,
  /// G included, Plummer-softened, a body's own pull skipped by id (ids must be distinct over the ranks). The bodies
  /// keep their order and their rank.
  ForceReport computeForces(Particles& particles) override;
  void setSoftening(double eps) override;
  std::string describe() const override;

 private:
  HermiteEngine& engine_;
  GravityParams gravity_;
  MPI_Comm comm_;
  std::vector<JParticle> sources_;        ///< every rank's bodies, as j-particles (mass times G)
  std::vector<std::uint32_t> addresses_;  ///< 0 .. N-1
  std::vector<std::int64_t> targetIds_;   ///< this rank's bodies' ids, positions, velocities (zero: no jerk wanted)
  std::vector<double> targetPos_, targetVel_, acc_, pot_;
};

}  // namespace matcha::parallel
