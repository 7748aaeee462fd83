// SPDX-License-Identifier: MIT
// The tree solver's share of a run's memory (core/memory_estimate.hpp): the sizes of the tree and its lists,
// measured on the run's bodies with the solver's own code, and the host arrays TreeSolver keeps for them.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "matcha/core/memory_estimate.hpp"
#include "matcha/core/params.hpp"
#include "matcha/core/particles.hpp"
#include "matcha/tree/tree_solver.hpp"

namespace matcha::tree {

/// Groups are sampled for the lists' sizes in runs of this many consecutive groups, as PlanBuilder walks them together.
inline constexpr std::uint32_t kSampleRunGroups = 8;

/// Builds the tree and groups over `particles` as TreeSolver does (keys, sort, octree, multipoles, groups, walk tree)
/// and walks a sample of the groups (PlanBuilder, the solver's walk) to estimate the lengths of all lists: about one
/// group in 64, at least 512 and at most 8192, in runs of kSampleRunGroups consecutive groups, one run drawn at random
/// (seed `sampleSeed`) from each of equal stretches of the space-filling curve, so that the core and the halo of a
/// system are both represented; every group when there are no more than 512. The sums are scaled up by groups.
///
/// The relative opening test (TreeParams::alpha) is scaled by the accelerations `particles` holds or, when they are
/// all zero (fresh initial conditions, which the run's first call evaluates cheaply first), by those of the mass
/// inside each body's distance from the centre of mass (predictedBallRadii); it makes the lists a few percent longer
/// (README: 2.3% more interactions on a Plummer sphere of 2^22 bodies).
///
/// `radius` (one per body, in the order of `particles`, or empty): each body becomes a ball of that radius, as in a
/// tree TreeSolver builds for predicted positions (reuse), whose lists are longer.
///
/// Leaves `particles` untouched; allocates about 130 bytes per body (keys, sort, tree-order copies) and the sample's
/// lists, all released on return. Throws InputError for no bodies or 2^31 or more.
TreeSizes measureTreeSizes(const Particles& particles, const TreeParams& params, const GravityParams& gravity,
                           std::span<const float> radius = {}, std::uint64_t sampleSeed = 1);

/// Radii of the balls TreeSolver would give the bodies for a tree that serves `reuseSteps` calls `dt` apart, the
/// first of them `firstCall` calls from now (tree_solver.hpp: 0 for a tree built within its first call, 1 for one
/// built in the background a call ahead): a body's path over those calls, with room for its acceleration to change.
/// From the velocities `particles` holds and, for the path's curvature, the accelerations it holds or, where those
/// are all zero, the acceleration G M(<r) / (r^2 + eps^2) of the mass inside the body's distance r from the centre of
/// mass (exact for a spherical system, a rough guide for others). One per body, in the order of `particles`.
std::vector<float> predictedBallRadii(const Particles& particles, std::uint32_t reuseSteps, double dt,
                                      const GravityParams& gravity, std::uint32_t firstCall = 1);

/// What a tree run does, as far as its memory goes.
struct TreeRunShape {
  std::uint64_t numForceCalls = 1;  ///< the initial call and one per step
  /// K the trees are sized for: from the third call on they serve K calls each, built for predicted positions
  /// (balls) and, with TreeParams::pipeline, from the fourth in the background; 1: every tree for exact positions.
  std::uint32_t reuseSteps = 1;
  double dt = 0.0;  ///< the time step (the balls' size)
  /// With K = 1: each tree is built a call ahead, in the background, for predicted positions (tree_solver.hpp:
  /// buildsFreshTreesAhead), and needs what trees for K >= 2 calls need.
  bool freshTreesAhead = false;

  bool reachesReuse() const { return (reuseSteps > 1 || freshTreesAhead) && numForceCalls >= 3; }
  bool buildsInBackground(const TreeParams& params) const {
    return reachesReuse() && params.pipeline && numForceCalls >= 4;
  }
};

/// K a run with TreeParams::reuse 0 (auto) is sized for: the search of K (tree_solver.hpp: chooseReuseSteps) starts
/// at kAutoReuseStart and moves one step at a time while calls get cheaper, up to kMaxAutoReuse, where the lists are
/// several times longer; on a Plummer sphere it settles at 2 or 3. A run that must stay within a bound sets --reuse.
inline constexpr std::uint32_t kAutoReuseSizing = kMaxAutoReuse / 2;

/// The shape of a run of `numSteps` steps of `dt` with `params`, on an engine that keeps and advances its own copy of
/// the bodies or not (NearFieldEngine::advancesBodies: the CUDA engine).
TreeRunShape treeRunShape(const TreeParams& params, std::uint64_t numSteps, double dt, bool engineAdvancesBodies);

/// Adds the bodies (Particles) and the host arrays a TreeSolver keeps over a run of `shape` to `estimate`, for trees
/// of `sizes` (measureTreeSizes: for runs that reach reuse, the sizes of a tree of balls): two trees with their keys,
/// sort buffers, octree, groups, walk tree, topology, lists and walk buffers (the next tree is built while the
/// current one is in use: from the second call on), the body permutation's buffers, the positions of earlier calls
/// and the predicted ones, background builds' tree-order copies, and a repair's tree. Sets estimate.listEntries and
/// listBodies. Mirrors tree_solver.cpp and walk.cpp, which it must follow when they change
/// (tests/tree/test_memory_estimate.cpp checks the sampled list sizes; tests/apps/test_cli.cpp the total against a
/// measured peak).
void addTreeSolverMemory(const TreeSizes& sizes, const TreeParams& params, const TreeRunShape& shape,
                         MemoryEstimate& estimate);

/// Both for a run: measures the trees its peak is sized by over `particles` (trees of balls, predictedBallRadii, for
/// runs that reach reuse; their TreeSizes::gathered set for background builds) and adds the solver's memory to
/// `estimate`. Returns the sizes, for the engine's share (gpu/memory_model.hpp).
TreeSizes estimateTreeSolverMemory(const Particles& particles, const TreeParams& params, const GravityParams& gravity,
                                   const TreeRunShape& shape, MemoryEstimate& estimate);

}  // namespace matcha::tree
