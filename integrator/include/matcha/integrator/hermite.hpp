// SPDX-License-Identifier: MIT
// 4th-order Hermite integration with individual block time steps (Makino & Aarseth 1992, PASJ 44, 141; Makino 1991,
// PASJ 43, 859), driving a HermiteEngine (core/hermite_engine.hpp) as a GRAPE-6 code (starlab's kira, NBODY4) drives
// the g6 library: the bodies due at the next block time are predicted on the host, the engine predicts every
// j-particle to that time and returns force, jerk and potential for the block, the host corrects the block and
// hands its new state back to the engine as j-particles. The integrator sees only the engine interface (STYLE.md 8).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "matcha/core/checkpoint_state.hpp"
#include "matcha/core/hermite_engine.hpp"
#include "matcha/core/particles.hpp"

namespace matcha::integrator {

/// The Hermite integrator's parameters (`matcha run --integrator hermite`). Defaults here and nowhere else.
struct HermiteParams {
  /// Aarseth's accuracy parameter, > 0: each body's step is the power of two at or below
  ///   dt = sqrt(eta (|a| |a2| + |j|^2) / (|j| |a3| + |a2|^2))
  /// (a: acceleration, j: jerk, a2: snap, a3: crackle, all at the end of its last step). The step scales as
  /// sqrt(eta) and the error of the 4th-order scheme as dt^4, so as eta^2. 0.02 is NBODY4's and kira's usual value.
  double eta = 0.02;
  /// The first step's accuracy parameter, > 0: dt0 = etaStart |a| / |j| (no snap or crackle exists before a step has
  /// been taken), as the GRAPE codes start (NBODY4, phiGRAPE: 0.01). Smaller than eta: |a|/|j| is a cruder time
  /// scale than Aarseth's, and the step is linear in the parameter, not its square root; with the defaults the first
  /// steps are ~1/14 of the steady ones (0.01 against sqrt(0.02) = 0.14), and they grow by doubling. A body whose
  /// jerk happens to vanish at the start would get a far too long first step from |a|/|j|: each first step is
  /// therefore tried, and cut to Aarseth's criterion from that trial where it is shorter (HermiteIntegrator).
  double etaStart = 0.01;
  /// The largest step, a power of two, > 0; every body is synchronised at its multiples (resolveMaxStep gives the
  /// run's default from the output interval).
  double maxStep = 0.25;
  /// The smallest step allowed, > 0: a body whose step falls below it stops the run (NumericalError naming the body,
  /// its nearest neighbour and their distance): a close encounter with eps = 0 that would otherwise crawl for ever.
  /// 2^-40 (9.1e-13 time units) is ~10^-12 of a crossing time in N-body units.
  double minStep = 0x1p-40;

  /// Throws InputError (one line) unless eta and etaStart are finite and > 0, maxStep is a power of two, minStep is
  /// finite and > 0 and not above maxStep.
  void validate() const;
};

/// The largest step of a run whose outputs fall every `outputInterval` (> 0, finite): `requested` when it is set
/// (> 0), checked to be a power of two that divides the interval, else the largest power of two that divides the
/// interval (to 1e-9 relative): the interval itself when it is a power of two. Outputs then fall on synchronisation
/// times.
/// @throws InputError (one line, naming values that would do) when no power of two from the interval down to 2^-20 of
///         it divides it, or `requested` is not a power of two or does not divide the interval
double resolveMaxStep(double outputInterval, double requested);

/// The largest power of two at or below `value` (> 0, finite; below 2^-1022 the smallest normal is returned). Exact.
double powerOfTwoFloor(double value);

/// Whether `value` is a finite power of two (2^k for an integer k, normal).
bool isPowerOfTwo(double value);

/// The snap a2 and crackle a3 at the start of a step of length dt (> 0) from the accelerations and jerks at both
/// ends: the cubic Hermite interpolation through them (Makino & Aarseth 1992, eq. 9-10),
///   a2 = (-6 (a0 - a1) - dt (4 j0 + 2 j1)) / dt^2,   a3 = (12 (a0 - a1) + 6 dt (j0 + j1)) / dt^3.
/// All arrays 3 components; snap and crackle are overwritten.
void hermiteDerivatives(const double a0[3], const double j0[3], const double a1[3], const double j1[3], double dt,
                        double snap[3], double crackle[3]);

/// Aarseth's criterion (HermiteParams::eta) for one body from its acceleration a, jerk j, snap a2 and crackle a3
/// (3 components each). +inf when the denominator vanishes (a body with no force on it), which the caller caps.
double aarsethStep(double eta, const double a[3], const double j[3], const double a2[3], const double a3[3]);

/// The power-of-two step a body takes next (Makino 1991): below its current step `current` as many halvings as
/// needed to reach `criterion` (freely); up by one doubling when `criterion` allows twice the step and `time` is a
/// multiple of the doubled step (so that the body stays on the block grid); never above `maxStep`.
double nextBlockStep(double current, double criterion, double time, double maxStep);

/// Work done by a Hermite run, for summary.json and the progress line.
struct HermiteCounters {
  std::uint64_t blockSteps = 0;  ///< block steps taken (force calls on a block; initialize()'s not included)
  std::uint64_t bodySteps = 0;   ///< bodies advanced, summed over the block steps
  /// i-j pairs of the force calls of the steps and of initialize()'s (the first call and the first steps' trials):
  /// n_block * N each, the self pair included, as GRAPE counts it
  std::uint64_t interactions = 0;
  std::uint64_t diagnosticInteractions = 0;  ///< pairs of the potential calls at outputs (measurePotentials)
  double smallestStep = 0.0;                 ///< the smallest step any body took (0 before the first)
  double largestStep = 0.0;                  ///< the largest step any body took
  double forceSeconds = 0.0;                 ///< wall time in the engine for the steps: predict, launch, finish, set j
  double integrationSeconds = 0.0;  ///< wall time of the host's part of the steps: block search, predictor, corrector
  double diagnosticSeconds = 0.0;   ///< wall time of measurePotentials

  /// bodySteps / blockSteps (0 before the first step).
  double meanBlockSize() const {
    return blockSteps > 0 ? static_cast<double>(bodySteps) / static_cast<double>(blockSteps) : 0.0;
  }
};

/// One block step's bodies (indices into the Particles, ascending) and the time they were advanced to.
struct BlockStep {
  double time = 0.0;  ///< the block time (relative to the run's start, as HermiteIntegrator::time)
  std::span<const std::uint32_t> bodies;
};

/// The Hermite integrator. Body i of the Particles handed to initialize() is j-particle i of the engine (address i,
/// id i) for the whole run: the bodies are never reordered. Times are counted from the run's start (0), so that every
/// block time is a multiple of its step exactly in double; callers add the start time.
///
/// Between steps, body i's position, velocity and acceleration (in the Particles), jerk (jerk()), time (bodyTime)
/// and step (bodyStep) are the state at bodyTime(i), which may lie behind time(): only at a synchronisation time
/// (synchronized(): a multiple of maxStep) are all bodies at time(). pot holds each body's potential from its last
/// force call (at predicted positions of the others) until measurePotentials() replaces it.
class HermiteIntegrator {
 public:
  /// @param engine  in: the force back-end; must outlive this object; its j-memory is this integrator's
  /// @param params  in: validated here (InputError)
  /// @param G       in: gravitational constant, > 0 (the engine sums masses that include it, as GRAPE does)
  /// @param eps     in: Plummer softening length, >= 0 (0: the engine skips coincident pairs)
  /// @param timeOrigin  in: the absolute time of time 0, for error messages only
  /// @throws InputError for bad params, G or eps
  HermiteIntegrator(HermiteEngine& engine, const HermiteParams& params, double G, double eps, double timeOrigin = 0.0);

  /// The first force call, on every body at time 0: accelerations, jerks and potentials, then every body's first
  /// step: etaStart |a| / |j| to a power of two, capped at maxStep, and tried: a force call at the step's end (from
  /// every body predicted from the start) gives the snap and crackle, and while Aarseth's criterion with them is
  /// shorter than the step, the step is cut to the power of two at or below it and tried again. About one more force
  /// call on every body; its results are dropped. Loads the engine's j-memory (reserves room for p.size() bodies).
  /// @param p  in/out: positions, velocities and masses read; accelerations and potentials overwritten
  /// @throws InputError when p is empty or holds more than 2^31 bodies; NumericalError when a first step is below
  ///         minStep or a value is not finite
  void initialize(Particles& p);

  /// One block step: the bodies whose time plus step is smallest are advanced to that time (predicted, forces on
  /// them from every body predicted by the engine, corrected, new steps), and handed back to the engine.
  /// @param p  in/out: the block's positions, velocities, accelerations and potentials updated in place
  /// @return the block (valid until the next call)
  /// @throws InvariantError before initialize() or restore(); NumericalError (one line: time, body id and index,
  ///         quantity) when a corrected value is not finite, or when a body's step falls below minStep (naming its
  ///         nearest neighbour and their distance)
  BlockStep step(Particles& p);

  /// Replaces p.pot with the potentials of the synchronised state: one force call on every body at the corrected
  /// positions (the block calls' potentials were taken at predicted ones, a difference of the order of one step's
  /// truncation error). The trajectory is not touched: accelerations and jerks stay those of the steps.
  /// @throws InvariantError unless synchronized()
  void measurePotentials(Particles& p);

  /// The time of the last block step (0 after initialize()), counted from the start.
  double time() const { return time_; }
  /// The time of the next block step.
  double nextBlockTime() const;
  /// Whether every body is at time(): after initialize(), and after every step to a multiple of maxStep.
  bool synchronized() const;

  double bodyTime(std::size_t i) const { return bodyTime_[i]; }
  double bodyStep(std::size_t i) const { return bodyStep_[i]; }
  /// Body i's jerk, xyz at 3i.
  std::span<const double> jerk() const { return jerk_; }

  const HermiteParams& params() const { return params_; }
  const HermiteCounters& counters() const { return counters_; }

  /// Writes what the steps after a synchronisation time depend on beyond the Particles (positions, velocities,
  /// accelerations): each body's jerk and step, the time and the counters. Arrays "hermite_jerk" (3N) and
  /// "hermite_step" (N), scalars "hermite_*".
  /// @throws InvariantError unless synchronized()
  void saveState(CheckpointState& state) const;

  /// Instead of initialize(): continues from a state saved by saveState() at a synchronisation time, with `p` as it
  /// was then (positions, velocities, accelerations). Loads the engine's j-memory. The steps that follow are those the
  /// saved run took, bit for bit (the engine's sums being deterministic).
  /// @throws InputError when the state is malformed or does not match p (count, steps not powers of two, a time that
  ///         is not a multiple of maxStep, a maxStep other than this run's)
  void restore(const Particles& p, const CheckpointState& state);

 private:
  /// A value that is not finite: the body, the quantity ("x", "ax", "jz", "pot", ...) and the value.
  struct BadValue {
    std::uint32_t index = 0;
    const char* quantity = "";
    double value = 0.0;
  };

  /// Sizes the per-body arrays for p and reserves the engine's j-memory.
  void prepare(const Particles& p);
  /// Hands bodies `indices` (their state in p at their own times) to the engine.
  void loadJParticles(const Particles& p, std::span<const std::uint32_t> indices);
  /// One force call on bodies `indices` from the j-particles of the last predict: at the positions and velocities
  /// already in predictedPos_/predictedVel_ (fromBodies false: the predicted block) or at those in p (true). Results
  /// into newAcc_, newJerk_ and newPot_, or, with `potentialsOnly` set, potentials alone into it.
  void computeForces(const Particles& p, std::span<const std::uint32_t> indices, bool fromBodies,
                     double* potentialsOnly = nullptr);
  /// Predicts bodies `indices` by their steps (bodyStep_) into predictedPos_/predictedVel_ with their ids.
  void predictBodies(const Particles& p, std::span<const std::uint32_t> indices);
  /// Tries every first step (initialize()): cuts those longer than Aarseth's criterion from the trial.
  void checkFirstSteps(const Particles& p);
  /// Finds the next block (the smallest bodyTime + bodyStep and every body that has it) into block_ and blockTime_.
  void findBlock();
  /// The first non-finite value of bodies `indices`, in their order and the order a, jerk, pot, x, v (a force call's
  /// results before the corrected state computed from them).
  std::optional<BadValue> firstNonFinite(const Particles& p, std::span<const std::uint32_t> indices) const;
  [[noreturn]] void throwNonFinite(const Particles& p, const BadValue& bad, double at) const;
  /// Throws NumericalError for body i whose step fell below minStep (`criterion` is what Aarseth's gave), naming its
  /// nearest neighbour (one more force call, on it alone).
  [[noreturn]] void throwStepUnderflow(const Particles& p, std::uint32_t i, double criterion, double at);

  HermiteEngine& engine_;
  HermiteParams params_;
  double G_;
  double eps_;
  double eps2_;
  double timeOrigin_;
  bool initialized_ = false;
  double time_ = 0.0;
  std::size_t numBodies_ = 0;
  std::vector<double> bodyTime_, bodyStep_, nextTime_;   ///< N each; nextTime_ = bodyTime_ + bodyStep_
  std::vector<double> jerk_;                             ///< 3N
  std::vector<std::uint32_t> block_;                     ///< the next block, ascending
  std::vector<std::uint32_t> lastBlock_;                 ///< the block of the last step (step()'s return)
  double blockTime_ = 0.0;                               ///< the next block's time
  std::vector<double> chunkMin_;                         ///< findBlock: per chunk of bodies, its smallest next time
  std::vector<std::vector<std::uint32_t>> chunkBodies_;  ///< and its bodies that have it
  // Scratch for a block (3 n or n entries for its n bodies): ids, predicted state and the engine's results.
  std::vector<std::int64_t> blockIds_;
  std::vector<double> predictedPos_, predictedVel_, newAcc_, newJerk_, newPot_;
  std::vector<double> blockStepScratch_;  ///< the block's criteria
  std::vector<JParticle> jScratch_;
  std::vector<std::uint32_t> allBodies_;  ///< 0..N-1
  HermiteCounters counters_;
};

}  // namespace matcha::integrator
