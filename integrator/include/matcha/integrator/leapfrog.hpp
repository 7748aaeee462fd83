// SPDX-License-Identifier: MIT
// Fixed-step kick-drift-kick leapfrog, built from two tiny helpers (STYLE.md habit 8). Gravity comes only through
// core's ForceSolver; this module never sees a tree or an engine.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "matcha/core/force_solver.hpp"
#include "matcha/core/particles.hpp"

namespace matcha::integrator {

/// Kick: v += a dt for every body, with a from the last force call. Threaded with TBB over blocks of bodies; each body
/// is updated on its own, so the result is bit-identical to a serial loop whatever the threads.
/// @param p   in/out: velocities updated in place; positions and accelerations read
/// @param dt  in: time interval (any sign; no checks); does not reorder, allocates no per-body storage
void kick(Particles& p, double dt);

/// Drift: x += v dt for every body. Threaded and elementwise as kick().
/// @param p   in/out: positions updated in place; velocities read
/// @param dt  in: time interval (any sign; no checks); does not reorder, allocates no per-body storage
void drift(Particles& p, double dt);

/// The largest |a| over the bodies (0 for none): a comoving step's limit (Power et al. 2003). One parallel pass over
/// the accelerations; a NaN acceleration gives NaN.
double maxAcceleration(const Particles& p);

/// The first value of a state that is not finite (NaN or inf).
struct NonFiniteValue {
  std::size_t index = 0;  ///< the body, in the order of the state checked
  std::uint64_t id = 0;   ///< its id
  std::string quantity;   ///< "x", "vy", "az", "pot", ...
  double value = 0.0;     ///< NaN, inf or -inf
};

/// The body of lowest index with a non-finite position, velocity, acceleration or (checkPotential) potential, and the
/// first such quantity of it in the order x, y, z, ax, ay, az, pot, vx, vy, vz (the order a step computes them, so
/// the cause comes before its consequences); nothing when every value is finite.
/// One parallel pass; allocates nothing when all is finite.
std::optional<NonFiniteValue> findNonFinite(const Particles& p, bool checkPotential);

/// What one step cost, beside its force call's own report.
struct StepReport {
  ForceReport force;                ///< the solver's report for the step's force call
  double integrationSeconds = 0.0;  ///< wall time of the two kicks and the drift
  /// Of it, the drift the leapfrog left to the force call (ForceSolver::setPendingDrift): made while the engine
  /// evaluated on a reused tree's call, first on the others (a build's).
  double driftInCallSeconds = 0.0;
  double wallSeconds = 0.0;  ///< wall time of the whole step: kick, drift, force call, kick
  double cpuSeconds = 0.0;   ///< CPU time the process used over that wall time, all threads (background builds)
  /// The first value of the new state that is not finite: positions, velocities, accelerations and, when the solver
  /// computes them (ForceSolver::potentialsWanted), potentials. Checked within the step's last kick, which reads the
  /// state anyway. Set: the state is unusable and the run must stop.
  std::optional<NonFiniteValue> nonFinite;
  /// The bodies whose steps ended with this one (every body but within a long-range step of block time steps).
  std::uint64_t bodiesStepped = 0;
};

/// Block time steps (GADGET-2's hierarchy of power-of-two steps, Springel 2005 §5) inside a long-range step: body i
/// takes steps of the long-range step / 2^b_i, b_i its bin (Particles::timeBin), so that only the few bodies whose
/// accelerations need short steps take them and every force call computes the forces of the bodies whose steps end
/// there (ForceSolver::setLowestActiveBin). Times inside the long-range step count in ticks, kTicksPerLongStep of
/// them: a step of bin b spans 2^(kDeepestTimeBin - b) ticks and starts and ends on multiples of that, so the bodies
/// whose steps end at tick T are those of bins >= alignedTimeBin(T).
inline constexpr std::uint8_t kDeepestTimeBin = 40;
inline constexpr std::uint64_t kTicksPerLongStep = std::uint64_t{1} << kDeepestTimeBin;
inline constexpr std::size_t kNumTimeBins = kDeepestTimeBin + 1;

/// The coarsest bin whose steps end at `tick` (0 at tick 0 and at kTicksPerLongStep: every body's).
std::uint8_t alignedTimeBin(std::uint64_t tick);

/// The bin of a body with acceleration |a|: the coarsest whose step is within its limit, with `binScale` the
/// long-range step over the limit at |a| = 1 (a limit ~ 1 / sqrt(|a|), Power et al.'s):
/// max(0, ceil(log2(binScale sqrt(|a|)))) exactly (a ratio one ulp above 2^b is in bin b + 1), at most
/// kDeepestTimeBin. Monotone in |a|, so the finest bin of a set of bodies is that of the largest |a|.
std::uint8_t timeBinFor(double acceleration, double binScale);

/// The finest bin among the bodies (0 for none, or without bins).
std::uint8_t finestTimeBin(const Particles& p);

/// One step of the hierarchy, from tick `tick` to `nextTick` (a LeapfrogKDK step whose KdkStep carries it):
///   for the bodies whose steps start at tick (bins >= alignedTimeBin(tick); at tick 0 every body, its bin set first
///   from its acceleration with openingBinScale): v += a openingKick[bin];
///   every body: x += v drift;   forces of the bodies whose steps end at nextTick;
///   for those: v += a closingKick[bin], then (before the long-range step's end) a new bin from the new |a| with
///   closingBinScale, no coarser than the coarsest aligned with nextTick.
/// With openingKick[b] = kick(T, T + half of b's step) and closingKick[b] = kick(T' - half of b's step, T'), each body
/// takes a KDK leapfrog of its own step, split at its midpoint, while all drift together. The long range's kicks at
/// the long-range step's ends are KdkStep's (longRangeOpeningKick at tick 0, longRangeClosingKick at the end).
struct BinnedStep {
  std::uint64_t tick = 0;
  std::uint64_t nextTick = 0;
  double openingBinScale = 0.0;  ///< timeBinFor's scale at tick 0 (the long-range step's start)
  double closingBinScale = 0.0;  ///< timeBinFor's scale at nextTick
  std::array<double, kNumTimeBins> openingKick{};
  std::array<double, kNumTimeBins> closingKick{};
  bool endsLongStep() const { return nextTick == kTicksPerLongStep; }
};

/// The factors of one KDK step: v += a openingKick; x += v drift; forces at the new positions; v += a closingKick. A
/// fixed step dt has dt/2, dt, dt/2. A comoving step's velocities are momenta p = a^2 dx/dt, and its factors the
/// integrals of dt/a (kicks) and dt/a^2 (drift) over the step's halves (cosmology/comoving_steps.hpp: KdkFactors).
///
/// Long-range steps (GADGET's PM steps; ForceSolver::splitsLongRange with setLongRangeSteps on): the long range of a
/// TreePM force kicks over a long-range step that spans several of these steps, at its two ends only (a RESPA-style
/// splitting, second order and symplectic as the leapfrog itself), and is computed only at its ends:
///   long-range step A0 -> A1, midpoint Am:  p += gL(A0) kick(A0, Am); [these steps with the short range]; forces;
///   p += gL(A1) kick(Am, A1)
/// A call that computes the long range leaves acc = short + long, so each end's long kick is made as the short range's
/// kick with acc plus the long range alone (ForceSolver::lastLongRange) times the difference of the two factors.
struct KdkStep {
  double openingKick = 0.0;
  double drift = 0.0;
  double closingKick = 0.0;
  /// > 0 on a long-range step's first step: kick(A0, Am), the long range's opening kick, made with the long range of
  /// the call before the step. 0: the long range kicks with openingKick (no long-range steps, or the last call did
  /// not compute it).
  double longRangeOpeningKick = 0.0;
  /// Whether this step's force call computes the long range: false on the steps inside a long-range step (their
  /// calls give the short range alone), true on its last step and everywhere without long-range steps.
  bool longRangeAtEnd = true;
  /// > 0 on a long-range step's last step (with longRangeAtEnd): kick(Am, A1), the long range's closing kick. 0: the
  /// long range kicks with closingKick.
  double longRangeClosingKick = 0.0;
  /// Set: a step of block time steps (BinnedStep), whose kicks differ by bin; openingKick and closingKick unused, drift
  /// the same for every body. Its closing kicks are always made within the step.
  std::optional<BinnedStep> block = std::nullopt;
  /// Whether positions and velocities are at the same time for every body after the step (not inside a long-range
  /// step of block time steps, where each body's velocity is at its own step's middle).
  bool endsSynchronized() const { return !block || block->endsLongStep(); }
};

/// When a step makes its closing half kick (LeapfrogKDK::step).
enum class ClosingKick {
  now,       ///< within the step: positions and velocities are synchronised when it returns
  deferred,  ///< at the next step's opening kick, in the same pass, or at LeapfrogKDK::synchronize()
};

/// Second-order symplectic KDK leapfrog, with a fixed step or with steps given one by one (KdkStep). One force call per
/// step; velocities and positions are synchronised (both at time()) between steps, so diagnostics and outputs can be
/// taken there, unless a step deferred its closing kick (ClosingKick::deferred: runLeapfrog synchronises before
/// anything reads the state).
///
/// The solver may reorder the bodies inside computeForces (all arrays together); the integrator keeps no per-body
/// state and no indices across force calls, so that is safe. Time is computed as stepsTaken() * dt, not summed,
/// so output times that are multiples of dt come out exact.
class LeapfrogKDK {
 public:
  /// @param solver   in: used for every force call; must outlive this object
  /// @param dt       in: time step, finite and > 0
  /// @param boxSize  in: side L of a periodic box (0: open boundaries): every drift then folds the positions back
  ///                 into [0, L)^3 (wrapIntoBox); the open-boundary step is not changed by a single operation
  /// @throws InputError when dt is not finite or not > 0, or boxSize is negative or not finite
  LeapfrogKDK(ForceSolver& solver, double dt, double boxSize = 0.0);
  /// A leapfrog whose every step comes with its factors (step(p, KdkStep, ...)): a comoving run's, whose steps vary.
  /// It has no dt (dt() and time() are 0) and gives the solver no word on the motion (expectAdvance: nullopt).
  struct VariableSteps {};
  LeapfrogKDK(ForceSolver& solver, VariableSteps, double boxSize = 0.0);
  /// Takes back the word given to the solver (ForceSolver::expectAdvance).
  ~LeapfrogKDK();
  LeapfrogKDK(const LeapfrogKDK&) = delete;
  LeapfrogKDK& operator=(const LeapfrogKDK&) = delete;

  /// First force call: fills accelerations and potentials at the current positions, as step() needs. May reorder p
  /// (through the solver). Calling it again recomputes forces without advancing time.
  /// @param p  in/out: accelerations and potentials overwritten
  /// @return the solver's report for the call
  ForceReport initialize(Particles& p);

  /// After initialize(): the first non-finite value of p (findNonFinite, potentials when the solver computes them).
  std::optional<NonFiniteValue> findNonFiniteForces(const Particles& p) const;

  /// One step: kick dt/2, drift dt, forces, kick dt/2; advances time() by dt. May reorder p (through the solver).
  /// With ClosingKick::deferred the last kick waits: the velocities stay half a step behind until synchronize() or
  /// the next step, whose pass over the bodies makes it before its own kick and drift, rounded as if made here (each
  /// sum stored as a double), so a run's trajectory is the same bit for bit wherever it synchronises. That saves a
  /// pass over the bodies a step (the host's share of a step is memory bound at 2^22 bodies and up); the step's
  /// check then reads its new accelerations (and potentials) alone, the next step's pass its new positions and
  /// velocities.
  /// @param p        in/out: the state at time(), advanced to time() + dt
  /// @param closing  in: make the closing kick now (the state is synchronised on return) or leave it to the next step
  /// @return the solver's report for the step's force call and the step's wall times
  /// @throws InvariantError when initialize() was not called first
  StepReport step(Particles& p, ClosingKick closing = ClosingKick::now);

  /// The same step with the given factors (a closing kick deferred by the last step is made first, with that step's
  /// factor). The fixed-step step() is step(p, {dt/2, dt, dt/2}, closing).
  StepReport step(Particles& p, const KdkStep& factors, ClosingKick closing = ClosingKick::now);

  /// Makes the closing kick a deferred step left, so that positions and velocities are both at time(); nothing when
  /// none is left. Returns its wall seconds.
  double synchronize(Particles& p);

  /// Whether positions and velocities are both at time() (no closing kick left).
  bool synchronized() const { return !closingKickPending_; }

  /// Instead of initialize(): continues a run at step `stepsTaken` from a state that carries that step's forces (a
  /// checkpoint), as if the steps had been taken here.
  void resume(std::uint64_t stepsTaken) {
    stepsTaken_ = stepsTaken;
    initialized_ = true;
    closingKickPending_ = false;
    pendingLongRangeClosing_ = 0.0;
    announceAdvance();
  }

  /// Whether the steps come with their own factors (the VariableSteps constructor).
  bool variableSteps() const { return dt_ == 0.0; }

  double time() const { return static_cast<double>(stepsTaken_) * dt_; }
  std::uint64_t stepsTaken() const { return stepsTaken_; }
  double dt() const { return dt_; }

 private:
  ForceSolver& solver_;
  double dt_;  ///< the fixed step; 0 for VariableSteps
  double boxSize_;
  std::uint64_t stepsTaken_ = 0;
  bool initialized_ = false;
  bool closingKickPending_ = false;  ///< the last step's closing kick is left to synchronize() or the next step
  double pendingClosingKick_ = 0.0;  ///< its factor
  /// With it, the long range's share of that kick: longRangeClosingKick - closingKick, times the last call's long
  /// range (0: none).
  double pendingLongRangeClosing_ = 0.0;

  /// v += (the last call's long range) * factor on every body (a long-range step's end: KdkStep). The solver computes
  /// the long range first where it has none kept (a run resumed at a long-range step's end).
  void kickWithLongRange(Particles& p, double factor);

  /// The last call's long range (ForceSolver::lastLongRange), computed first where the solver keeps none (a run
  /// resumed at a long-range step's end).
  AccelerationView longRangeOf(Particles& p);

  /// A step of block time steps (KdkStep::block), into `report`.
  void blockStep(Particles& p, const KdkStep& factors, StepReport& report);

  /// Tells the solver how the bodies move between its calls (ForceSolver::expectAdvance), rounded as kick() and
  /// drift() round it: a step's closing half kick (none after initialize()), the next step's opening half kick and
  /// its drift (a zero kick is none).
  void announceAdvance(bool afterInitialize = false) {
    if (boxSize_ > 0.0 || variableSteps()) {
      // The wrap into the box is not a kick or a drift, and steps given one by one are not known ahead: no word.
      solver_.expectAdvance(std::nullopt);
      return;
    }
    solver_.expectAdvance(BodyAdvance{afterInitialize ? 0.0 : 0.5 * dt_, 0.5 * dt_, dt_});
  }
};

}  // namespace matcha::integrator
