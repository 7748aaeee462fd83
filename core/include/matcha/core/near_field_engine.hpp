// SPDX-License-Identifier: MIT
// The engine interface: what a force back-end (CPU or CUDA, in gpu/) offers to the solvers. Declared in core so
// that tree/ can hand plans to an engine without knowing which one (DESIGN.md §2).
#pragma once

#include <cstdint>
#include <memory_resource>
#include <span>
#include <string>
#include <vector>

#include "matcha/core/errors.hpp"
#include "matcha/core/interaction_plan.hpp"
#include "matcha/core/params.hpp"
#include "matcha/core/particles.hpp"
#include "matcha/core/tree_prediction.hpp"
#include "matcha/core/tree_topology.hpp"

namespace matcha {

/// Where an engine's last evaluate call spent its time. The CPU engine reports its whole evaluation as kernels.
struct EngineTimings {
  double uploadSeconds = 0.0;    ///< bodies, cells and lists to the device
  double kernelSeconds = 0.0;    ///< the kernels (CUDA events), or the CPU evaluation
  double downloadSeconds = 0.0;  ///< outputs back to the host
};

/// What an evaluation of resident lists found (NearFieldEngine::finishResident).
struct ResidentResult {
  InteractionCounts counts;
  EngineTimings timings;  ///< refit included in kernels
  /// Groups whose list held a cell that failed the opening criterion at these positions (ascending). Their forces
  /// were computed, but from a list that no longer meets the criterion: the solver walks them again and evaluates
  /// them once more.
  std::vector<std::uint32_t> failedGroups;
  /// A launch with BodyMotion::advanced found the engine's copy of the bodies different from the caller's (a sample of
  /// them, compared bit for bit): its forces are not the caller's. The caller launches again with the positions.
  bool advanceMismatch = false;
};

/// Whether the bodies moved since the engine's last launch on its current tree (NearFieldEngine::launchResident).
enum class BodyMotion {
  moved,      ///< upload the positions, refit the cells and the group boxes
  unchanged,  ///< the positions of the last launch on this tree: its refit serves (a call's later batches, a repair)
  /// The engine's own copy of the bodies (BodyUpdate), moved by BodyUpdate::advance: no upload, then the refit
  /// (engines for which advancesBodies() is true).
  advanced,
  /// A periodic box's bodies: the engine's own copy, the kicked bodies' velocities replaced and then drifted by
  /// BodyUpdate::drift (BodyDrift); each body's path continued from the last launch's positions; then the refit
  /// (engines for which advancesBodies() is true). See BodyUpdate.
  drifted,
};

/// A tree for later calls, predicted on the engine's device from its copy of the bodies
/// (NearFieldEngine::predictsTrees), asked of a BodyMotion::advanced launch beside its forces: from the positions and
/// velocities the launch moves the copy to and the accelerations of the launches before it (those the kicks into this
/// call used), each body's ball over `window` (predictBall of its announcedDisplacements under `motion`) and its
/// lowestAcceleration over `age` calls; the root cube around the balls' centres (cubeAroundExtent), their Morton keys,
/// the keys' stable sort, and the centres, masses, lowest |a| and radii gathered into the keys' order. All of it as
/// tree::TreeSolver's passes on the host make it from the caller's bodies, bit for bit (core/tree_prediction.hpp).
struct TreePredictionRequest {
  PredictionWindow window;
  AnnouncedMotion motion;
  double age = 0.0;
  /// The accelerations of the call before the last, as floats in the caller's order: with the last ones (as floats)
  /// the rate at which each body's acceleration changes. Null: no rate known (lowestAcceleration takes |a| itself).
  /// Read within launchResident only.
  const float* earlierAx = nullptr;
  const float* earlierAy = nullptr;
  const float* earlierAz = nullptr;
};

/// Where NearFieldEngine::takeTreePrediction writes, on the host: every array resized to the bodies' number and in the
/// tree's order (the keys' ascending order), sortedKeys[k] being the key of the caller's body order[k].
struct PredictedTreeView {
  Cube& cube;
  std::vector<std::uint64_t>& sortedKeys;
  std::vector<std::uint32_t>& order;
  std::vector<double>& x;  ///< the balls' centres
  std::vector<double>& y;
  std::vector<double>& z;
  std::vector<double>& mass;
  std::vector<float>& acceleration;  ///< lowest |a|
  std::vector<float>& radius;        ///< the balls' radii
};

/// How the bodies of a launchResident relate to what the engine holds. Converts from a BodyMotion.
///
/// An engine that advancesBodies() keeps a copy of the caller's bodies, in the caller's order and whatever the tree:
/// positions and velocities given with a BodyMotion::moved launch (velocities non-null), and the accelerations it
/// writes at every launch. A BodyMotion::advanced launch vouches that the caller's bodies are that copy moved by
/// `advance` (particles.hpp: BodyAdvance), the accelerations being those of the engine's last launches, which wrote
/// every body (a whole launch, or a call's batches, and any repairs after them); the engine moves its copy the same
/// way, bit for bit, and checks a sample of it against the caller's positions when the launch is finished. The copy
/// survives setTree, so long as the caller's order does not change (a tree built within a call sorts the caller's
/// bodies: the launches after it give the positions again).
struct BodyUpdate {
  BodyUpdate(BodyMotion m) : motion(m) {}  // NOLINT(google-explicit-constructor): a plain motion is the common case
  BodyMotion motion;
  /// BodyMotion::moved: the bodies' velocities (caller's order), kept for later BodyMotion::advanced launches; null:
  /// none kept (and no advanced launch may follow until a launch gives them).
  const double* vx = nullptr;
  const double* vy = nullptr;
  const double* vz = nullptr;
  BodyAdvance advance;  ///< BodyMotion::advanced: what the caller did to its bodies since the last launch
  /// BodyMotion::drifted: since the last launch, the bodies `kicked` (caller's indices; every body where kickedAll)
  /// took the velocities vx, vy, vz hold for them, then every body drifted and was folded into the box as `drift`
  /// says. The engine repeats that on its copy (positions in the box, velocities), bit for bit, and evaluates each
  /// body where its path continues: its copy's position, moved by a box length along any axis where that puts it
  /// within half a box of its position at the last launch (as the periodic solver continues paths across the faces),
  /// except the bodies `placed`, which go to placedPoints (x, y, z each, in the order of `placed`: the periodic
  /// solver's bodies outside their balls, clamped onto them). The copy must have been given by a BodyMotion::moved
  /// launch with velocities (positions in the box) and moved by drifted launches alone since. The launch's `bodies`
  /// are the caller's positions, in the box: the engine checks a sample of its copy against them
  /// (ResidentResult::advanceMismatch), and evaluates the paths, which the caller need not compute.
  BodyDrift drift;
  std::span<const std::uint32_t> kicked;
  bool kickedAll = false;
  std::span<const std::uint32_t> placed;
  const double* placedPoints = nullptr;
  /// NearFieldEngine::driftResident: the caller's positions are not drifted yet (ForceSolver::setPendingDrift); they
  /// are before the launch that follows is finished, and finishResident compares the copy with them then.
  bool positionsPending = false;
  /// BodyMotion::drifted after NearFieldEngine::driftResident with this update: the copy is drifted and its paths
  /// continued already; the launch places the `placed` bodies, refits and evaluates.
  bool driftedBefore = false;
  /// A launch of some groups (block time steps): where set, only the bodies with timeBin[i] >= lowestActiveBin (the
  /// caller's order) need their forces; an engine may leave the others' outputs as they come (stale, not read before a
  /// later launch computes them). The CUDA engine skips the warp tasks that hold none of them where the tree's order
  /// is the caller's.
  const std::uint8_t* timeBin = nullptr;
  std::uint8_t lowestActiveBin = 0;
  /// BodyMotion::moved with velocities, on an engine that checksBalls(): each body's ball radius (caller's order)
  /// about its position at this launch, which the engine keeps with the radii for driftResident until the next such
  /// launch. Null: no balls kept (driftResident may not follow).
  const float* ballRadius = nullptr;
  /// BodyMotion::advanced on an engine that predictsTrees(): also predict a tree's inputs from the moved copy
  /// (takeTreePrediction hands them over). Read within launchResident only.
  const TreePredictionRequest* prediction = nullptr;
};

/// What NearFieldEngine::driftResident found.
struct DriftCheck {
  /// The drifted copy differs from the caller's positions (a sample, bit for bit, as ResidentResult::advanceMismatch):
  /// the engine keeps no copy since, and `outside` says nothing.
  bool mismatch = false;
  /// The bodies outside their balls (caller's order, ascending), all of them where numOutside <= the call's
  /// maxOutside, else none.
  std::vector<std::uint32_t> outside;
  std::uint64_t numOutside = 0;  ///< how many bodies are outside their balls
};

/// Where a plan handed to NearFieldEngine::evaluatePlanBatch lies among its force call's batches.
struct PlanBatch {
  bool first = true;  ///< the call's first batch: its sources and cells are new to the engine
  bool last = true;   ///< the call's last batch: every group of the call is evaluated when it returns
  /// With the last batch only, and only to an engine that addsForceAddend(): forces the engine adds onto the outputs
  /// of every group of the call's batches (out + addend, each component rounded once, as a separate pass's
  /// `out += addend` would round it) by the time the batch returns. It must cover the call's bodies, carry a potential
  /// where `out` does, and stay valid and unchanged until the batch returns.
  const ForceAddend* addend = nullptr;
};

class NearFieldEngine {
 public:
  virtual ~NearFieldEngine() = default;

  /// Short human-readable name including the device and precision, e.g. "cpu-float (2 threads)".
  virtual std::string name() const = 0;

  /// Evaluates every group of `plan`: for each i-body of each group, overwrites out.{ax,ay,az,pot}[i] with the sum
  /// over its group's list (bodies from `sources`, cells from `cells`), times G. Bodies outside the plan's groups
  /// are untouched. Does not reorder anything. With out.pot null the engine computes accelerations only, which the
  /// CUDA kernels do faster (one instruction fewer of the ~14 per monopole pair); the accelerations are the same.
  /// @return the interactions evaluated
  virtual InteractionCounts evaluatePlan(const SourceView& sources, const CellMultipoles& cells,
                                         const InteractionPlan& plan, const GravityParams& gravity,
                                         const ForceView& out) = 0;

  /// Whether evaluatePlan evaluates the periodic TreePM short range when gravity.periodic is enabled (the CPU engine,
  /// the CUDA engine in float). Engines without it (the CUDA engine in double) must not be given periodic gravity:
  /// the periodic solver refuses them with an InputError before any work.
  virtual bool periodicShortRange() const { return false; }

  /// evaluatePlan for one force call's groups handed over in batches, for a caller that walks the next batch while
  /// the engine evaluates this one (tree/periodic_tree_solver.hpp). A call's batches hold consecutive runs of its
  /// groups in order (PlanBuilder's plans of groups [first, last)), all with the same sources, cells, gravity and out,
  /// and no other evaluation runs on the engine between them; a batch may hold no groups (with `first`: the engine
  /// takes the sources and cells ahead of the first lists). Each group's outputs are those evaluatePlan gives for the
  /// one plan of all the batches' groups, bit for bit, and are written by the time the call's last batch returns (an
  /// engine may write some in a later batch's call than their own: the CUDA engine, whose warp tasks depend on the
  /// whole call's cost). Returns the interactions evaluated in this call; the batch may be discarded once it returns.
  /// The default evaluates each batch with evaluatePlan, right for an engine whose groups' sums depend on nothing but
  /// their own lists (the CPU engine).
  virtual InteractionCounts evaluatePlanBatch(const SourceView& sources, const CellMultipoles& cells,
                                              const InteractionPlan& batch, const GravityParams& gravity,
                                              const ForceView& out, PlanBatch /*where*/) {
    return evaluatePlan(sources, cells, batch, gravity, out);
  }

  /// Whether evaluatePlanBatch honours PlanBatch::addend. The CUDA engine adds it as it copies each batch's landed
  /// outputs from its staging, while the GPU runs the batches after: the add no longer waits for the last kernels.
  virtual bool addsForceAddend() const { return false; }

  /// Whether evaluatePlan's work runs on a device rather than on the host's cores: a caller then gains by evaluating
  /// one batch on a second host thread while its own threads walk the next (the CUDA engine); the CPU engine's
  /// evaluation would only compete with the walk for the cores.
  virtual bool evaluatesOnDevice() const { return false; }

  /// Phases of the last evaluatePlan, evaluatePlanBatch or evaluateDirect call.
  virtual EngineTimings lastTimings() const = 0;

  // Resident lists: the tree solver's reuse of a tree over several steps (DESIGN.md §4). The engine keeps the tree
  // and each group's list; every evaluation refits the cells to the bodies' current positions (masses, centres of
  // mass, quadrupoles, sizes, group boxes), evaluates the lists, and checks that every accepted cell still passes
  // the opening criterion (core/opening_criterion.hpp) for its group at these positions.
  //
  // With periodic gravity (engines with periodicShortRange(), the periodic solver's reuse:
  // tree/periodic_tree_solver.hpp) the lists are evaluated as evaluatePlan evaluates a periodic plan (the truncated
  // pairs, each source at its nearest image to the group) and not checked: no group fails. The open-boundary test does
  // not hold for cells taken at an image, and the periodic solver's lists are valid by construction while each body
  // stays in the ball the tree was built over, which the solver checks on the host. Positions may then lie outside the
  // box (a body's path continued across a face since the build), so that no cell is torn across the box.

  /// A new tree: keeps `topology` and the bodies' masses (`bodies` in the caller's order; positions are ignored) and
  /// forgets every list. An engine keeps one tree, the last setTree's: solvers that share an engine (tests do) must
  /// not launch lists another solver's setTree has replaced.
  virtual void setTree(const TreeTopology& topology, const SourceView& bodies) = 0;

  /// Replaces the lists of the groups plan.groupIds[k] (ids into TreeTopology::groups) with the plan's k-th list;
  /// body ranges are in tree order. plan.groups and plan.groupCentres are ignored (the refit sets them). The plan
  /// may be discarded or reused once the call returns. Allowed between launchResident and finishResident: it then
  /// applies from the next launch.
  virtual void setLists(const InteractionPlan& plan) = 0;

  /// Forgets every list, keeping the tree (lists evaluated in batches, when all of them would not fit).
  virtual void dropLists() = 0;

  /// Starts evaluating the resident lists of `groups` (all groups when empty) at the positions of `bodies` (the
  /// caller's order, as in setTree), writing out[i] for every body i of those groups; may return before the work is
  /// done. Until finishResident returns, the caller must leave `bodies` and `out` alone. With BodyMotion::unchanged
  /// the caller vouches that `bodies` holds the positions of the last launch since setTree, and the engine skips their
  /// upload and the refit (at 2^28 bodies in 70 streamed batches that was 16 s of uploads per call); without such a
  /// launch it does both anyway.
  virtual void launchResident(const SourceView& bodies, const GravityParams& gravity, const ForceView& out,
                              std::span<const std::uint32_t> groups, const BodyUpdate& update) = 0;

  /// Waits for the evaluation launched last and reports it.
  virtual ResidentResult finishResident() = 0;

  /// Waits for the evaluation launched last and drops its results (a launch made ahead for a call that did not come as
  /// announced): an engine that works within launchResident (the CPU engine) wrote `out` already; one that works in
  /// the background (the CUDA engine) writes nothing more to it.
  virtual void discardResident() = 0;

  /// Whether the engine keeps its own copy of the bodies and can advance it (BodyMotion::advanced), which pays where
  /// the positions would cross a bus: the CUDA engine. An engine that reads the caller's arrays does not.
  virtual bool advancesBodies() const { return false; }

  /// Whether the engine keeps the bodies' balls given with a launch (BodyUpdate::ballRadius) and offers driftResident:
  /// the CUDA engine, where the periodic solver's pass over every body to find those outside their balls would read
  /// ~1 GB of host memory a call at 2^24 bodies.
  virtual bool checksBalls() const { return false; }

  /// On an engine that checksBalls(), with nothing in flight, before a BodyMotion::drifted launch on its copy: moves
  /// the copy as that launch would (`update`: the kicked velocities, the drift and wrap, each path continued), compares
  /// a sample of it with the caller's positions `bodies`, and finds the bodies outside the balls the last launch with
  /// BodyUpdate::ballRadius gave: |d|^2 > r^2 in double, d = the copy's position less the ball's centre, by a box
  /// length along each axis where it exceeds half the box, each product and sum rounded on its own (the periodic
  /// solver's treeHolds on the host). The launch that follows takes the same update with driftedBefore set. With
  /// update.positionsPending the sample is compared at that launch's finishResident instead (advanceMismatch), once
  /// the caller has drifted its positions.
  virtual DriftCheck driftResident(const SourceView& /*bodies*/, const BodyUpdate& /*update*/,
                                   std::uint32_t /*maxOutside*/) {
    MATCHA_ASSERT(checksBalls(), "driftResident on an engine that keeps no balls");
    return {};
  }

  /// Whether a BodyMotion::advanced launch can predict a tree's inputs on the engine's device (BodyUpdate::prediction):
  /// the CUDA engine, whose copy of the bodies spares the host its passes over them (at 2^24 bodies: the prediction,
  /// the keys, and a gather of 670 MB into the tree's order).
  virtual bool predictsTrees() const { return false; }

  /// Waits for the tree prediction of the last launch that was asked for one and copies it into `out`. Returns false,
  /// writing nothing, when there is none to take (taken already, or never asked for). Whether the prediction is of the
  /// caller's bodies is the launch's to say (ResidentResult::advanceMismatch). Safe to call from another thread while
  /// the engine evaluates, once launchResident has returned (a tree built in the background): it touches only the
  /// prediction's own stream and buffers, which the next launch asked for a prediction reuses.
  virtual bool takeTreePrediction(const PredictedTreeView& /*out*/) { return false; }

  /// Sorts a tree's space-filling-curve keys where the engine's device does it faster than the host (the tree solver
  /// sorts on the host otherwise): ascending, equal keys in the order of their indices, sorted[k] = keys[order[k]];
  /// only the low `keyBits` bits of each key are compared (the tree's Morton keys have none above 3 kMaxLevel = 63),
  /// so for keys without higher bits the result is tree::KeySorter's, bit for bit. Returns
  /// false, writing nothing, where the engine does not sort (the CPU engine) or would not be faster (few keys). Safe to
  /// call from another thread while the engine evaluates (a tree built in the background): the CUDA engine sorts on
  /// a stream and in buffers of its own. Synchronous.
  virtual bool sortKeys(std::span<const std::uint64_t> /*keys*/, int /*keyBits*/, std::span<std::uint64_t> /*sorted*/,
                        std::span<std::uint32_t> /*order*/) {
    return false;
  }

  /// Host memory that the engine copies to and from its device directly, for arrays a caller hands it whole and often
  /// (the periodic tree solver's keys and their sort's results: sortKeys then neither stages them nor keeps the host's
  /// cores copying, which leaves them to TreePM's mesh start); nullptr (the default) where ordinary memory serves as
  /// well. The CUDA engine's is page-locked where the host can lock it (ordinary memory else). Memory from it must be
  /// given back before the engine is destroyed. Thread-safe.
  virtual std::pmr::memory_resource* transferMemory() { return nullptr; }

  /// Direct summation: overwrites out[i] for every i with the sum over all sources j != i, times G: a distinct
  /// body at the same point counts with its softened -m_j/eps when eps > 0 and is skipped when eps = 0 (singular).
  /// `out.count` must equal `sources.count`. out.pot may be null, as for evaluatePlan.
  virtual InteractionCounts evaluateDirect(const SourceView& sources, const GravityParams& gravity,
                                           const ForceView& out) = 0;
};

}  // namespace matcha
