// SPDX-License-Identifier: MIT
// The restart check shared by the CPU and CUDA engines' tests: a run that is stopped at one of its checkpoints and
// continued by a fresh solver and engine from what the checkpoint saved ends with the same bodies, bit for bit, as
// the run that went on.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>

#include "matcha/core/checkpoint_state.hpp"
#include "matcha/core/near_field_engine.hpp"
#include "matcha/integrator/run_loop.hpp"
#include "matcha/testing/generators.hpp"
#include "matcha/testing/same_bodies.hpp"
#include "matcha/tree/tree_solver.hpp"

namespace matcha::testing {

/// Runs `steps` leapfrog steps of a Plummer sphere of n bodies (seed `seed`) with a tree solver of `params` on an
/// engine from `makeEngine`, checkpointing as often as the solver allows; picks one checkpoint at random (from
/// `seed`), keeps its state in memory as `matcha run` keeps it in a file, continues it with a new engine and solver,
/// and expects every body's position, velocity and acceleration at the end to equal the uninterrupted run's.
inline void expectBitIdenticalRestart(const std::function<std::unique_ptr<NearFieldEngine>()>& makeEngine,
                                      const TreeParams& params, std::size_t n, int steps, std::uint64_t seed) {
  const GravityParams gravity;
  IntegratorParams run;
  run.dt = 1.0 / 128.0;
  run.tEnd = steps * run.dt;
  run.outputInterval = run.tEnd;
  run.checkpointInterval = 0.0;

  // Which checkpoint to stop at: counted in a first run, then one of them at random.
  int numCheckpoints = 0;
  {
    Particles p = plummer(n, seed);
    const auto engine = makeEngine();
    tree::TreeSolver solver(*engine, params, gravity);
    integrator::RunCallbacks count;
    count.onCheckpoint = [&](const Particles&, double, const integrator::RunPosition&) { ++numCheckpoints; };
    integrator::runLeapfrog(p, solver, run, count);
  }
  ASSERT_GE(numCheckpoints, 3) << "too few checkpoints to choose from";
  std::mt19937_64 random(seed);
  const int stopAt = static_cast<int>(random() % static_cast<std::uint64_t>(numCheckpoints - 1)) + 1;

  Particles full = plummer(n, seed);
  Particles saved;
  CheckpointState savedSolver;
  integrator::RunPosition position;
  {
    const auto engine = makeEngine();
    tree::TreeSolver solver(*engine, params, gravity);
    int seen = 0;
    integrator::RunCallbacks callbacks;
    callbacks.onCheckpoint = [&](const Particles& state, double, const integrator::RunPosition& at) {
      if (++seen != stopAt) return;
      saved = state;
      solver.saveState(savedSolver);
      position = at;
    };
    integrator::runLeapfrog(full, solver, run, callbacks);
  }
  ASSERT_GT(position.step, 0u);
  SCOPED_TRACE("restarted after step " + std::to_string(position.step) + " of " + std::to_string(steps));

  const auto engine = makeEngine();
  tree::TreeSolver solver(*engine, params, gravity);
  solver.restoreState(savedSolver, saved);
  integrator::runLeapfrog(saved, solver, run, {}, &position);

  expectSameBodiesBitForBit(full, saved, "after the restart", /*withPotentials=*/false);
}

}  // namespace matcha::testing
