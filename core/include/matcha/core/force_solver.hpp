// SPDX-License-Identifier: MIT
// What the integrator and the apps see of gravity: one call that fills accelerations and potentials.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "matcha/core/checkpoint_state.hpp"
#include "matcha/core/interaction_plan.hpp"
#include "matcha/core/particles.hpp"

namespace matcha {

/// The phases of a force call (DESIGN.md §4), in the order a call runs them. `matcha run --timings`, summary.json and
/// `matcha compare --json` report each one.
enum class Phase : int {
  estimate,  ///< first call only: the cheap pass that gives the relative opening test its |a| (TreeStats::estimatePass)
  keys,      ///< bounding cube and space-filling-curve keys
  sort,      ///< key sort and the bodies' new order
  octree,    ///< cells from the sorted keys
  multipoles,  ///< upward pass on the host: masses, centres of mass, sizes (and quadrupoles where the host needs them)
  groups,      ///< groups and their boxes
  walk,        ///< tree walks: the interaction lists
  upload,      ///< bodies, cells and lists to the device
  kernels,     ///< near-field evaluation: GPU kernel time (CUDA events), or the CPU engine's evaluation
  download,    ///< accelerations and potentials back to the host
  repair,      ///< groups whose lists failed the opening test at this step, walked and evaluated again
  motion,      ///< the host's record of the bodies' motion for reuse: the last calls' positions and accelerations,
               ///< the next tree's predicted positions and the inputs its background build copies; a reused periodic
               ///< tree's check of the balls (the engine's drift and check, where it keeps the bodies)
  mesh,        ///< periodic TreePM: the particle mesh's long range (deposit, FFTs, interpolation)
  decomposition,  ///< several ranks: the split along the curve and the bodies' moves to their owners (parallel/)
  exchange,       ///< several ranks: the local essential trees, pruned for and exchanged with the other ranks
  count
};
inline constexpr int kNumPhases = static_cast<int>(Phase::count);

/// "estimate", "keys", ..., the spelling of the reports.
const char* phaseName(Phase phase);

/// Wall-clock seconds of a force call by phase. Phases that run at the same time (a rebuild on the CPU cores beside
/// the GPU's steps, the next tree's walk beside the current call's kernels) are each timed on their own, so their
/// sum can exceed totalSeconds. A rebuild that ran in the background over earlier calls is reported by the call
/// that put it to use.
struct ForceTimings {
  std::array<double, kNumPhases> seconds{};
  double totalSeconds = 0.0;  ///< the whole call, wall clock
  /// Wall time the call waited on a rebuild still running on the CPU cores (the GPU idle meanwhile).
  double rebuildWaitSeconds = 0.0;
  /// Wall time the call's host thread was held in NearFieldEngine::finishResident: the device's work not hidden
  /// behind the host's (a tree built within the call walks its next batch while the engine evaluates the last), and
  /// the copy of the outputs into the caller's arrays. The periodic tree solver's overlapped walk counts here the
  /// time its walk waited for the engine's evaluation of the batch before (on its second host thread).
  double engineWaitSeconds = 0.0;
  /// Wall time the call's host thread waited, once the rest of the call was done, for a particle mesh started beside
  /// it (TreePM with the mesh on the GPU: mesh/treepm_solver.hpp); the mesh's whole time is Phase::mesh.
  double meshWaitSeconds = 0.0;

  double& operator[](Phase phase) { return seconds[static_cast<int>(phase)]; }
  double operator[](Phase phase) const { return seconds[static_cast<int>(phase)]; }
  /// keys + sort + octree + multipoles + groups: the tree build.
  double treeSeconds() const;
  /// upload + kernels + download: the engine's part.
  double engineSeconds() const;
  ForceTimings& operator+=(const ForceTimings& other);
};

/// Why a call built a new tree (ForceReport::treeEnd), reported by `matcha run --timings`. A periodic tree serves the
/// calls its build planned (TreeParams::reuse, fewer where the bodies move fast: tree/periodic_tree_solver.hpp)
/// unless its bodies' motion ends it sooner.
enum class TreeEnd : int {
  none,        ///< no new tree, or a solver that does not say
  planned,     ///< the calls the last tree was built for were served (or there was none)
  escaped,     ///< more bodies had left their balls than the solver repairs (escapedMaxBodies)
  crowded,     ///< too many bodies near those out of their balls for the repair's budget (kEscapedBudget)
  other,       ///< the bodies were not the tree's (reordered, others, one outside the box)
  checkpoint,  ///< ended by the run for a checkpoint, overdue or after an output (ForceSolver::endTreeForCheckpoint)
  count
};
inline constexpr int kNumTreeEnds = static_cast<int>(TreeEnd::count);

struct ForceReport {
  InteractionCounts counts;
  ForceTimings timings;
  bool rebuilt = false;                 ///< this call put a new tree (and all new lists) to use
  TreeEnd treeEnd = TreeEnd::none;      ///< why, where the solver says (a periodic tree)
  std::uint32_t plannedCalls = 0;       ///< the calls the new tree was built to serve, where the solver says
  std::uint64_t numGroupsWalked = 0;    ///< groups whose lists were walked for this call
  std::uint64_t numGroupsRepaired = 0;  ///< groups whose lists failed the opening test at this call (Phase::repair)
  /// Bodies outside the balls of the tree that served this call, whose pulls a periodic solver added exactly instead
  /// of building anew (Phase::repair; tree/periodic_tree_solver.hpp).
  std::uint64_t numBodiesEscaped = 0;
  /// The engine moved its own copy of the bodies for this call (BodyMotion::advanced or drifted) instead of receiving
  /// the positions.
  bool advancedOnDevice = false;
  /// The engine's copy differed from the caller's bodies at this call: the positions were sent after all (the forces
  /// are right; the call took longer).
  bool advanceMismatch = false;
  /// The solver called the caller's ForceAddendProvider, and its forces include the addend.
  bool addendTaken = false;
};

class ForceSolver {
 public:
  virtual ~ForceSolver() = default;

  /// Overwrites particles.{ax,ay,az,pot} for every body (pot with NaN when potentials are not wanted). May reorder
  /// the bodies (all arrays together, see Particles); callers must not keep indices across the call, only ids.
  virtual ForceReport computeForces(Particles& particles) = 0;

  /// Whether computeForces must compute potentials (the default). A caller that takes them from elsewhere, such as
  /// a run whose energy diagnostics use direct-sum potentials (integrator::RunCallbacks::outputPotentials), turns
  /// them off: the engines then compute accelerations only (ForceView::pot null), the same accelerations faster, and
  /// pot is set to NaN, so that no stale potential passes for a current one.
  void setPotentialsWanted(bool wanted) { potentialsWanted_ = wanted; }
  bool potentialsWanted() const { return potentialsWanted_; }

  /// The caller's word on what the next call will want (setPotentialsWanted before it), for a solver that starts the
  /// next call's work as this call ends (the tree solver's launch ahead); nullopt: the same as this call. A run that
  /// wants potentials only at its outputs (integrator::runLeapfrog) says so one step ahead. A call that comes wanting
  /// otherwise is still served right, with its work started anew.
  void expectPotentials(std::optional<bool> nextCall) { potentialsNext_ = nextCall; }
  bool nextPotentialsWanted() const { return potentialsNext_.value_or(potentialsWanted_); }

  /// The integrator's word that from the end of each call to the next it moves the bodies by `advance` and nothing
  /// else (particles.hpp: BodyAdvance, rounded as it says), or nullopt to take it back. A word given during a call's
  /// gap applies from the end of the next call (the motion to the next call was fixed as the last one ended); nullopt
  /// applies at once. A solver whose engine keeps its own copy of the bodies may then advance that copy instead of
  /// sending the positions, and start a call's work before the call (the tree solver with the CUDA engine:
  /// TreeParams::advanceOnDevice). Ignored by default.
  virtual void expectAdvance(const std::optional<BodyAdvance>& /*advance*/) {}

  /// What a solver that orders the bodies calls, once per call, as soon as they are in the order they keep until the
  /// call returns (the periodic tree solver: right after its sort, or at once on a call that expects to keep the
  /// order), before the rest of its work: the caller may start work on them that runs beside that rest, or map work it
  /// started on them before the call (TreePM's particle mesh on the GPU). `order` says how the call has reordered them
  /// since it began: body k now is the one that was at order[k] (empty: none moved). A call may call it a second time,
  /// after a sort it did not expect (the periodic solver's tree did not hold): the second call supersedes the first,
  /// whose work the caller drops. The hook sees the bodies' positions and masses, which after its last call the
  /// solver changes neither in value nor in order, nor `order`, until it returns. (Their other arrays, velocities and
  /// ids, may reach the new order only later in the call: the periodic solver moves them while the GPU finishes.)
  using SortedBodiesHook = std::function<void(const SourceView& bodies, std::span<const std::uint32_t> order)>;
  /// Sets the hook for the calls that follow (an empty function: none). Returns false, keeping none, where the solver
  /// has no such point (the default): the caller then works on the bodies after the call.
  virtual bool setSortedBodiesHook(SortedBodiesHook /*hook*/) { return false; }

  /// What a solver that sorts the bodies calls, at most once per call and before the sorted-bodies hook, while its
  /// sort runs (the periodic tree solver: once its keys are made, on a second host thread, while the GPU sorts them and
  /// the host's cores mostly wait): the caller may read the bodies, in the order the call found them, for work of its
  /// own. The solver changes the bodies neither in value nor in order until the hook returns, and waits for it before
  /// it moves them. TreePM starts its GPU mesh here (copying the bodies to page-locked memory, ~15 ms of a 2^24 call on
  /// the H200's host, that the cores then did before the call). A call that does not sort (a reused tree's) does not
  /// call it.
  using UnsortedBodiesHook = std::function<void(const SourceView& bodies)>;
  /// Sets the hook for the calls that follow (an empty function: none). Returns false, keeping none, where the solver
  /// has no such point (the default).
  virtual bool setUnsortedBodiesHook(UnsortedBodiesHook /*hook*/) { return false; }

  /// Another part of the force that the caller computed beside the call (TreePM's mesh on the GPU), handed to the
  /// solver to add onto every body's forces as its engine writes them (PlanBatch::addend). The solver calls the
  /// provider at most once per call, where its engine can take the addend and once the bodies are in the order the
  /// call leaves them (after the sorted-bodies hook's last call), and the provider returns the addend in that order;
  /// it may wait for the caller's work. A call that called it returns forces that include it (ForceReport::
  /// addendTaken); a call that did not leaves the caller to add it. Only calls in which every body gets new forces
  /// take one.
  using ForceAddendProvider = std::function<ForceAddend()>;
  /// Sets the provider for the calls that follow (an empty function: none). Returns false, keeping none, where the
  /// solver never takes an addend (the default).
  virtual bool setForceAddendProvider(ForceAddendProvider /*provider*/) { return false; }

  // Long-range steps (GADGET's PM steps): where the force is a short range plus a smooth long range (periodic TreePM),
  // the integrator may kick with the long range over longer steps than with the short range, and so compute it less
  // often (integrator/leapfrog.hpp: KdkStep's long-range kicks).

  /// Whether the solver can leave the long range out of a call (setLongRangeDue). By default false: every call
  /// computes the whole force.
  virtual bool splitsLongRange() const { return false; }
  /// Whether the next calls compute the long range: true (the default) gives the whole force in acc and pot, and keeps
  /// the long range's accelerations alone for lastLongRange; false (only where splitsLongRange) gives the short range
  /// alone, potentials included, and lastLongRange nothing.
  void setLongRangeDue(bool due) { longRangeDue_ = due; }
  bool longRangeDue() const { return longRangeDue_; }
  /// The long range's accelerations at the bodies of the last call, in that call's order, when it computed the long
  /// range with long-range steps on (setLongRangeSteps); an empty view otherwise. Valid until the next call.
  virtual AccelerationView lastLongRange() const { return {}; }
  /// Long-range steps on or off (off by default): only while on does a call keep the long range apart for
  /// lastLongRange (it costs a pass over the bodies) and honour setLongRangeDue(false). InvariantError where the
  /// solver cannot split (splitsLongRange false).
  virtual void setLongRangeSteps(bool on);
  bool longRangeStepsOn() const { return longRangeSteps_; }
  /// Computes the long range alone for `particles` as they are (order unchanged, acc and pot untouched) and keeps it
  /// for lastLongRange: a run resumed from a checkpoint taken where a long-range step ended, whose next kick needs that
  /// long range. InvariantError where the solver cannot split.
  virtual void computeLongRange(Particles& particles);

  // Block time steps (integrator/leapfrog.hpp: BinnedStep): a call then needs the forces of the bodies whose steps end
  // at it only, those with particles.timeBin >= the lowest active bin; the others' accelerations are not read before a
  // later call computes them again.

  /// The lowest bin whose bodies need forces from the next calls (0, the default: every body; an empty timeBin is
  /// every body too). A solver may then compute fewer bodies' forces (the periodic tree solver evaluates only the
  /// groups that hold an active body); the others' acc and pot are left as they were or computed anyway. Every call
  /// that computes the long range (longRangeDue) must be asked with 0: the long range goes to every body.
  void setLowestActiveBin(std::uint8_t bin) { lowestActiveBin_ = bin; }
  std::uint8_t lowestActiveBin() const { return lowestActiveBin_; }

  /// The caller's word on how the bodies moved since the last call (BodyDrift), for the next call only: block time
  /// steps in a periodic box say it before each call (integrator/leapfrog.hpp). A solver whose engine keeps its own
  /// copy of the bodies may then drift that copy instead of sending the positions (the periodic tree solver with the
  /// CUDA engine), checking a sample of it against the caller's. nullopt (the default): no word; the positions are
  /// sent.
  void setBodyDrift(const std::optional<BodyDrift>& drift) { bodyDrift_ = drift; }
  const std::optional<BodyDrift>& bodyDrift() const { return bodyDrift_; }

  /// Whether the solver takes the caller's drift of the positions into its next call (setPendingDrift): the periodic
  /// tree solver whose engine drifts its own copy of the bodies and checks their balls (the CUDA engine), which makes
  /// the host's pass over every body (~20 ms a step at 2^24 bodies on the H200's host) while the GPU evaluates.
  virtual bool takesPendingDrift() const { return false; }
  /// With setBodyDrift: the caller made the kicks but left the drift of every body's position (as the BodyDrift says)
  /// to `drift`, for the next call only. The call runs it (runPendingDrift) before it reads a position, at once where
  /// nothing else overlaps it; the caller runs it after the call where the call did not.
  void setPendingDrift(std::function<void()> drift) { pendingDrift_ = std::move(drift); }
  bool driftPending() const { return static_cast<bool>(pendingDrift_); }
  /// Runs the pending drift, once; nothing where none is pending.
  void runPendingDrift() {
    if (const std::function<void()> drift = takePendingDrift()) drift();
  }
  /// The pending drift, handed over (TreePM to its short range), none pending since.
  std::function<void()> takePendingDrift() { return std::exchange(pendingDrift_, nullptr); }

  /// Changes the Plummer softening length eps (>= 0, finite) from the next call on: a comoving run whose softening is
  /// fixed in physical units once the expansion has grown it to its maximum (ComovingTimelineParams in cosmology/).
  /// The periodic solvers and the direct solver can; by default (the open-boundary tree solver, whose work for the
  /// next call may already be under way) InputError.
  virtual void setSoftening(double eps);

  /// Describes the solver and its engine, e.g. "tree (theta 0.5, ncrit 64, nleaf 16) on cpu-float".
  virtual std::string describe() const = 0;

  // Checkpoints (`matcha run --restart`): a solver that keeps state between calls (the tree solver's reused trees)
  // saves what its next calls depend on, so that a restarted run computes the same forces, bit for bit, as the run
  // that went on. A checkpoint is taken only between calls where the solver says it can be.

  /// Whether the state between this call and the next can be saved (the tree solver: when the next call needs a new
  /// tree). A solver without state: always.
  virtual bool atCheckpointBoundary() const { return true; }
  /// Makes the state between this call and the next savable where the solver can: a solver whose tree still has
  /// calls planned ends it here, so that its next call builds a new tree, in this run and in a run restarted from the
  /// state alike (the restart stays bit for bit). For a checkpoint after an output, or one overdue because the trees
  /// keep ending sooner than planned: a periodic tree ended by its bodies' motion is never at a boundary. Returns
  /// atCheckpointBoundary() afterwards; by default (a solver that cannot end its tree early) it only asks.
  virtual bool endTreeForCheckpoint() { return atCheckpointBoundary(); }
  /// Adds the solver's state to `state` (names prefixed with the solver's kind). May wait for background work.
  virtual void saveState(CheckpointState& /*state*/) {}
  /// Takes up a state saved by the same kind of solver with the same parameters, for `particles` as they were saved
  /// (same bodies, same order). Throws InputError when `state` lacks what it needs.
  virtual void restoreState(const CheckpointState& /*state*/, const Particles& /*particles*/) {}

 protected:
  /// Where an engine writes for `particles`: its forces, without the potential when it is not wanted (`potentials`:
  /// this call's wish, or another call's for work started ahead).
  ForceView forcesToWrite(Particles& particles) const { return forcesToWrite(particles, potentialsWanted_); }
  static ForceView forcesToWrite(Particles& particles, bool potentials) {
    ForceView view = particles.forces();
    if (!potentials) view.pot = nullptr;
    return view;
  }
  /// Ends a call: pot = NaN for every body when potentials were not wanted. On every core: on one, the fill took
  /// ~15 ms of each call at 2^24 bodies, twice in a TreePM call (the short range's and TreePM's).
  void clearUnwantedPotentials(Particles& particles) const;

 private:
  bool potentialsWanted_ = true;
  std::optional<bool> potentialsNext_;
  bool longRangeDue_ = true;
  std::uint8_t lowestActiveBin_ = 0;
  std::optional<BodyDrift> bodyDrift_;
  std::function<void()> pendingDrift_;

 protected:
  bool longRangeSteps_ = false;  ///< setLongRangeSteps': a splitting solver's override sets it
};

}  // namespace matcha
