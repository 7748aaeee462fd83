// SPDX-License-Identifier: MIT
// What makes `matcha run` comoving (issue 16): cosmology/'s time line as the run loop's step schedule, the units and
// background of a cosmological initial-conditions file, the conversion between GADGET's stored velocities and the
// run's momenta, and the Layzer-Irvine check that stands in for energy conservation. apps/ is where the integrator
// and the cosmology meet (DESIGN.md §2: neither depends on the other).
//
// The run's state in a comoving run: positions x comoving (in [0, L)), "velocities" the momenta per unit mass
// p = a^2 dx/dt, accelerations g = -grad(phi) from the periodic TreePM solver with the file's G, potentials phi
// comoving (cosmology/comoving_steps.hpp). Files store GADGET's u = v / sqrt(a) with v = a dx/dt = p / a, so
// p = a^(3/2) u.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "matcha/core/particles.hpp"
#include "matcha/core/units.hpp"
#include "matcha/cosmology/background.hpp"
#include "matcha/cosmology/comoving_steps.hpp"
#include "matcha/integrator/diagnostics.hpp"
#include "matcha/integrator/step_schedule.hpp"
#include "matcha/io/snapshot.hpp"

namespace matcha::app {

/// GADGET's units for cosmological files when a file has no /Units: lengths in Mpc/h, masses in 1e10 M_sun/h,
/// velocities in km/s (h implicit in lengths and masses, so G needs none: 43.0071).
UnitSystem gadgetCosmologicalUnits();

/// H0 = 100 h km/s/Mpc in the code units of `units`, whose length unit is h^-1 times its stated value (GADGET's
/// convention: UnitLength_in_cm 3.085678e24 means 1 Mpc/h): 100 (km/s)/(Mpc/h) times the time unit L/v. GADGET's
/// Mpc/h and km/s give 100; its kpc/h 0.1.
double hubbleTodayInCodeUnits(const UnitSystem& units);

/// u = p / a^(3/2): the factor a comoving run's snapshots write their momenta with (io::SnapshotWriteOptions).
double storedVelocityPerMomentum(double scaleFactor);

/// p = a^(3/2) u for every body: an initial-conditions file's stored velocities into the run's momenta.
void storedVelocitiesToMomenta(Particles& p, double scaleFactor);

/// The background of a comoving run, from a file's cosmology header (Omega0, OmegaLambda, HubbleParam) and units.
/// @throws InputError (one line naming `source`) for a cosmology CosmologyParams::validate refuses
cosmology::Background comovingBackground(const io::CosmologyHeader& header, const UnitSystem& units,
                                         const std::string& source);

/// Checks that the bodies' total mass is the mean matter density of the box, Omega_m rho_crit L^3 with rho_crit = 3
/// H0^2 / (8 pi G) in the file's units, to 1e-3: TreePM subtracts the mean density and the comoving equations assume
/// it, so a file in other units would run silently wrong. @throws InputError (one line, the two masses)
void requireMeanMatterDensity(double totalMass, double boxSize, const cosmology::Background& background, double G,
                              const std::string& source);

/// Checks that a file's Time (the scale factor) and its Redshift agree to 1e-6 relative, and returns a.
/// @throws InputError naming `source`
double startScaleFactor(double time, const io::CosmologyHeader& header, const std::string& source);

/// --output-z: "3,1,0.5,0" into redshifts (any order; each a finite number). @throws InputError naming the bad entry
std::vector<double> parseRedshiftList(const std::string& text);

/// A schedule over several ranks, each holding some of the bodies, must plan the same steps on every rank: what it
/// reads of the bodies (the largest |a|, the sum of |p|^2 and the bodies' number, the finest time bin) goes through
/// these, which give the ranks' maximum or sum of each rank's value, the same number on every rank (the sum in an
/// order that does not change from call to call). Unset: one rank, its own bodies.
struct RankReductions {
  std::function<double(double)> maximum;
  std::function<double(double)> sum;
};

/// cosmology::ComovingTimeline as the run loop's schedule. Each step's limit reads the largest |g| of the state it
/// starts from (Power et al.'s criterion); its end, factors and output flag are the time line's. The run's clock is
/// the scale factor. With a maximum physical softening the solver's softening follows eps_eff(a) of the step's end
/// (the force computed there): the solver must start with eps_eff(a_start) (or, resumed, eps_eff of the checkpoint's
/// a).
///
/// Long-range steps (GADGET's PM steps), with a long-range length: the solver's long range (TreePM's mesh) kicks over
/// steps of ComovingTimeline::longRangeStepLimit (the bodies' rms displacement within a fraction of that length), each
/// landing on the outputs and spanning a whole number of the short range's steps, which land on its end
/// (integrator::KdkStep's long-range kicks). The diagnostics (the Layzer-Irvine samples) then follow each long-range
/// step, where the force call gives the whole force and potential; without them, every step.
class ComovingSchedule final : public integrator::StepSchedule {
 public:
  /// @param timeline         in: copied (it holds its own background)
  /// @param longRangeLength  in, optional: long-range steps with this length (the smaller of the split radius r_s and
  ///                         the mean spacing, comoving, > 0); unset: none
  /// @param blockSteps       in: block time steps within each long-range step (integrator::BinnedStep; needs
  ///                         longRangeLength): each body steps by its own limit, not the fastest body's
  explicit ComovingSchedule(const cosmology::ComovingTimeline& timeline,
                            std::optional<double> longRangeLength = std::nullopt, bool blockSteps = false);

  double startTime() const override { return timeline_.startScaleFactor(); }
  double endTime() const override { return timeline_.endScaleFactor(); }
  bool done(std::uint64_t, double scaleFactor) const override { return scaleFactor >= timeline_.endScaleFactor(); }
  integrator::PlannedStep plan(std::uint64_t stepsTaken, double scaleFactor, const Particles& p) override;
  bool mayEndAtOutput(std::uint64_t stepsTaken, double scaleFactor) const override;
  /// After every step, or with long-range steps after each long-range step.
  bool plansDiagnostics() const override { return true; }
  /// Whether the next step may end a long-range step (always without long-range steps).
  bool mayPlanDiagnostics(std::uint64_t stepsTaken, double scaleFactor) const override;
  bool longRangeSteps() const override { return longRangeLength_.has_value(); }
  /// Where a long-range step starts: plan() reads the bodies' velocities for its limit.
  bool readsVelocities(std::uint64_t stepsTaken, double scaleFactor) const override;
  /// ln(a / a_start) / ln(a_end / a_start): the steps are nearly uniform in ln a.
  double fractionDone(double scaleFactor) const override;
  /// Steps taken plus ln(a_end / a) over the last step's length in ln a.
  std::uint64_t estimatedSteps(std::uint64_t stepsTaken, double scaleFactor) const override;
  /// Continues at a checkpoint's a, which with long-range steps is a long-range step's end (the solver's checkpoints
  /// are: ForceSolver::atCheckpointBoundary).
  void resume(std::uint64_t stepsTaken, double scaleFactor) override;

  const cosmology::ComovingTimeline& timeline() const { return timeline_; }
  /// Long-range steps begun so far (0 without them).
  std::uint64_t longRangeStepsBegun() const { return longRangeStepsBegun_; }
  /// Plans from every rank's bodies (before the first step): a run over several ranks.
  void setRankReductions(RankReductions reductions) { reductions_ = std::move(reductions); }

 private:
  cosmology::ComovingTimeline timeline_;
  RankReductions reductions_;
  double lastStepDlnA_ = 0.0;  ///< the last step's length in ln a (estimatedSteps)
  double appliedSoftening_;    ///< the softening the solver has now
  std::optional<double> longRangeLength_;
  double longRangeEnd_ = 0.0;          ///< where the current long-range step ends (<= a: it ended; a new one begins)
  double longRangeClosingKick_ = 0.0;  ///< its closing kick, kick(Am, A1)
  double longRangeOpeningKick_ = 0.0;  ///< its opening kick, kick(A0, Am) (block time steps)
  std::uint64_t longRangeStepsBegun_ = 0;
  bool blockSteps_ = false;
  // Block time steps: the current long-range step's start (ln a) and length in ln a, and the tick reached in it.
  double longRangeStartLnA_ = 0.0;
  double longRangeLengthLnA_ = 0.0;
  double longRangeStart_ = 0.0;  ///< its start's scale factor, as stored
  std::uint64_t tick_ = 0;

  /// The scale factor at `tick` of the current long-range step (its ends exactly as stored).
  double scaleFactorAtTick(double tick) const;
  /// The block step from tick_ (the bodies' bins as `p` holds them, or from `largest`, the bodies' largest |a|, at tick
  /// 0).
  integrator::PlannedStep planBlockStep(const Particles& p, double largest);
  /// What every step from aNow to aNext plans alike: its end, outputs, diagnostics, softening (and lastStepDlnA_).
  void endStep(double aNow, double aNext, integrator::PlannedStep& planned);
  /// The largest |a|, the rms momentum and the finest time bin of the run's bodies (of every rank's).
  double largestAcceleration(const Particles& p) const;
  double rmsMomentum(const Particles& p) const;
  std::uint8_t finestTimeBin(const Particles& p) const;
  /// InputError (one line) where the short range's step limit `shortLimit` (in ln a) at `scaleFactor` leaves more than
  /// kMaxComovingSteps steps to z-end: a run that could not finish (`--eta 1e-300` ran at an ETA above a year).
  void requireFeasibleSteps(double scaleFactor, double shortLimit) const;
};

/// The most steps a comoving run may need at its step limits (a 1024^3 box needs ~1e4 - 1e5).
inline constexpr double kMaxComovingSteps = 1e9;

/// The Layzer-Irvine check of a comoving run, fed the run's diagnostics (integrator::Diagnostics of the run's state:
/// kinetic = (1/2) sum m |p|^2 and potential = (1/2) sum m phi, both comoving, time = a) after every step.
class LayzerIrvineCheck {
 public:
  /// Starts at the initial state's diagnostics.
  explicit LayzerIrvineCheck(const integrator::Diagnostics& initial);
  /// Continues a check saved at a checkpoint (names as save() writes them).
  static LayzerIrvineCheck restore(const CheckpointState& state);

  /// Adds the state after a step (a later scale factor; a repeated one is ignored).
  void add(const integrator::Diagnostics& d);
  /// (K + W + integral (2K + W) dln a - E_LI(a0)) / |W| at the latest state.
  double relativeViolation() const { return check_.relativeViolation(); }
  const cosmology::LayzerIrvine& check() const { return check_; }
  void save(CheckpointState& state) const;

 private:
  explicit LayzerIrvineCheck(const cosmology::LayzerIrvine& check) : check_(check) {}
  cosmology::LayzerIrvine check_;
};

/// The diagnostics log's columns in a comoving run, one line starting with '#'.
std::string comovingDiagnosticsHeader();
/// One line of them: a, z, the physical K = sum m |p|^2 / (2 a^2) and W = W_com / a, K + W, the Layzer-Irvine
/// integral, its relative violation, 2K/|W|, |P| (sum of the momenta) and the centre of mass.
std::string formatComovingDiagnostics(const integrator::Diagnostics& d, const LayzerIrvineCheck& check);

}  // namespace matcha::app
