// SPDX-License-Identifier: MIT
// The time-stepping core of comoving runs (issue 16): where each global KDK step of a cosmological run ends, its kick
// and drift factors, and the Layzer-Irvine cosmic-energy check that replaces energy conservation. The run loop
// (integrator/ and apps/) calls these; it lives here because cosmology/ owns the background's drift and kick factors
// and integrator/ must not depend on cosmology/ (DESIGN.md §2). Nothing here touches bodies: the caller passes the
// largest acceleration and the energies it summed.
//
// Conventions (GADGET-2, Springel 2005): positions x comoving, momenta per unit mass p = a^2 dx/dt, g = -grad(phi)
// the comoving peculiar acceleration computed from comoving positions with G and the mean density subtracted (what a
// periodic TreePM solver returns). Then dp/dt = g / a and dx/dt = p / a^2, so a KDK step from a0 to a1 is
//   p += g kick(a0, am);   x += p drift(a0, a1);   (forces at a1)   p += g kick(am, a1)
// with kick = integral dt / a and drift = integral dt / a^2 (Background::kickFactor, driftFactor). The split point am
// is the step's midpoint in ln a, am = sqrt(a0 a1), as GADGET-2 does: any am keeps the scheme second order, and the
// midpoint in the variable the steps are uniform in makes the two half kicks equal when the integrand is a power of a
// (and the split symmetric under time reversal of the step).
//
// Physical quantities follow from r = a x: the peculiar velocity is v = a dx/dt = p / a; the peculiar potential
// Phi solves lap_r Phi = 4 pi G (rho - rho_mean) with lap_r = lap_x / a^2 and rho = rho_comoving / a^3, so
// Phi = phi / a; and dv/dt = g / a^2 - H v, whose gravitational part is g / a^2.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include "matcha/cosmology/background.hpp"

namespace matcha::cosmology {

/// Steps that land on a long-range step's end (ComovingTimeline::nextStep's extra stop) may be this many times the
/// limit: a long-range step spans a whole number of the short range's steps as they were at its start, and the limit
/// drifts by a few percent over those (|g| and a change), which would otherwise cost one more, shorter step in most
/// long-range steps (a 16^3 box to z = 0: 564 steps against 513 without long-range steps).
inline constexpr double kLongRangeLandingStretch = 1.1;

/// The parameters of a comoving run's time line. Redshifts rather than scale factors because the CLI takes them so.
struct ComovingTimelineParams {
  double redshiftStart = 49.0;  ///< z of the initial conditions: finite, > z_end (the `matcha ic cosmo` default)
  double redshiftEnd = 0.0;     ///< z where the run stops: finite, > -1 and 1/(1 + z) <= the background's max a
  /// --output-z: redshifts of the snapshots, in any order, each in [z_end, z_start] (an output at z_start is the
  /// initial state's). Two that fall within 1e-9 in ln a of each other are refused as duplicates; one within 1e-9 of
  /// a_start or a_end is taken as exactly that scale factor (z = 0 and a_end = 1 agree whatever the rounding).
  std::vector<double> outputRedshifts;
  /// Largest step in ln a, > 0. Default 0.025, GADGET-2's MaxSizeTimestep in its cosmological examples: ~160 steps
  /// from z = 49 to 0 when nothing else limits them, enough that the background's change over a step
  /// (the leapfrog's error in a free expansion) stays ~ 1e-4 relative.
  double maxDlnA = 0.025;
  /// Power et al. (2003) accuracy parameter, > 0: dt <= sqrt(2 eta eps / |a|) in physical units. Default 0.025,
  /// GADGET-2's ErrTolIntAccuracy, the same as Power et al.'s eta_P = 0.2 in dt <= eta_P sqrt(eps / |a|)
  /// (sqrt(2 * 0.025) = 0.22).
  double eta = 0.025;
  /// Comoving softening length eps_com, > 0, the eps the force uses (its Plummer-equivalent length), comoving units.
  double softening = 0.0;
  /// Largest physical softening eps_phys,max, > 0 when set: the force and the criterion then use the comoving
  /// eps_eff(a) = min(eps_com, eps_phys,max / a) (GADGET's SofteningMaxPhys), so the softening is fixed in comoving
  /// units early on and in physical units once a eps_com exceeds eps_phys,max. Unset: eps_eff = eps_com throughout.
  std::optional<double> maxPhysicalSoftening;
  /// Long-range (PM) steps, GADGET's MaxRMSDisplacementFac, > 0: a long-range step may move the bodies by at most this
  /// fraction of the long-range length (the smaller of the split radius r_s and the mean spacing) at their rms speed
  /// (longRangeStepLimit). Default 0.2, GADGET-2's.
  double maxRmsDisplacement = 0.2;
};

/// The factors of one KDK step from a0 to a1 (see the file comment): p += g firstKick; x += p drift; forces;
/// p += g secondKick. Times in the Background's unit of time.
struct KdkFactors {
  double firstKick = 0.0;       ///< kick(a0, am) = integral_a0^am dt / a
  double drift = 0.0;           ///< drift(a0, a1) = integral_a0^a1 dt / a^2
  double secondKick = 0.0;      ///< kick(am, a1)
  double midScaleFactor = 0.0;  ///< am = sqrt(a0 a1), the step's midpoint in ln a
};

/// Where the global steps of a comoving run end. Immutable and thread-safe once built; holds its own copy of the
/// background (a few doubles).
///
/// Step rule (nextStep): the step's limit in ln a is
///   L(a, g) = min(maxDlnA, H(a) sqrt(2 eta eps_eff(a) a^3 / |g|))
/// where the second term is Power et al.'s criterion in comoving variables, evaluated at the step's start (explicit,
/// as GADGET-2 does). Derivation: the criterion limits the physical time step by the physical softening and the
/// physical gravitational acceleration, dt <= sqrt(2 eta eps_phys / |a_phys|), with eps_phys = a eps_eff(a) and
/// |a_phys| = |g| / a^2 (the file comment: dv/dt = g / a^2 - H v, and the Hubble drag -H v is no gravitational
/// acceleration). So dt <= sqrt(2 eta eps_eff a^3 / |g|), and the step in ln a is d ln a = (da/dt) dt / a = H(a) dt.
/// g = 0 sets no acceleration limit.
///
/// The run stops at the next output scale factor above a_now, or at a_end after the last: with G the gap in ln a to
/// that stop, the step is G / n with n = ceil(G / L), the fewest equal steps within the limit that reach it. So steps
/// land exactly on every output and on a_end (the value returned is the stored scale factor itself, bit for bit),
/// never overshoot, and are never slivers: each is at least half the limit of its start (G / n > L (n-1) / n).
/// Steps stay near L far from a stop (L (1 - 1/n)) and even out before it; the limit is recomputed every step.
class ComovingTimeline {
 public:
  /// @throws InputError (one line, naming the parameter) when a parameter is out of range (ComovingTimelineParams),
  ///   a_end is beyond the background's largest scale factor, an output lies outside [z_end, z_start] or two
  ///   outputs coincide
  ComovingTimeline(const Background& background, const ComovingTimelineParams& params);

  const Background& background() const { return background_; }
  double startScaleFactor() const { return aStart_; }
  double endScaleFactor() const { return aEnd_; }
  /// The output scale factors, ascending, without duplicates; an output at z_start is a_start exactly, at z_end a_end.
  const std::vector<double>& outputScaleFactors() const { return outputs_; }
  /// The index in outputScaleFactors() of an output at exactly a (a value nextStep returned), if there is one.
  std::optional<std::size_t> outputIndexAt(double scaleFactor) const;

  /// eps_eff(a) = min(eps_com, eps_phys,max / a), comoving (see ComovingTimelineParams::maxPhysicalSoftening).
  double comovingSoftening(double scaleFactor) const;

  /// L(a, g): the largest step in ln a that maxDlnA and Power et al.'s criterion allow at a (see the class comment).
  /// @param maxAccelerationComoving  in: the largest |g| over the bodies, comoving (a, g as the force solver returns
  ///                                 them, in the Background's time unit), finite and >= 0
  /// @throws InputError for a outside [a_start, a_end] or a negative |g|; NumericalError for a non-finite |g|
  double maxStep(double scaleFactor, double maxAccelerationComoving) const;

  /// Power et al.'s limit in ln a at |g| = 1, H(a) sqrt(2 eta eps_eff(a) a^3) (maxStep without maxDlnA): a body's
  /// limit is this over sqrt(|g|) (block time steps give each body its own).
  /// @throws InputError for a outside [a_start, a_end]
  double accelerationStepScale(double scaleFactor) const;

  /// The scale factor the step from aNow ends at (see the class comment), > aNow and <= a_end.
  /// @param aNow  in: the scale factor of the state, in [a_start, a_end): a_start or a value nextStep returned (a
  ///              value a rounding below an output would make a sliver step to it)
  /// @param maxAccelerationComoving  in: as maxStep
  /// @param stop  in, optional: one more stop (a long-range step's end, a value longRangeStepEnd returned), landed on
  ///              as the outputs are where it comes first, with steps of up to kLongRangeLandingStretch times the
  ///              limit
  /// @throws InputError for aNow outside [a_start, a_end) and as maxStep; NumericalError when the limit is so small
  ///   that the step rounds away (a_next == aNow)
  double nextStep(double aNow, double maxAccelerationComoving, std::optional<double> stop = std::nullopt) const;

  /// The limit of a long-range (PM) step at a, in ln a: min(maxDlnA, f a^2 H(a) length / p_rms) with f the
  /// maxRmsDisplacement, p_rms the bodies' rms momentum (p = a^2 dx/dt; the comoving displacement over d ln a is p d ln
  /// a / (a^2 H)) and length the smaller of the split radius and the mean spacing (GADGET-2's
  /// find_dt_displacement_constraint). p_rms = 0: maxDlnA.
  /// @throws InputError for a outside the run, a negative or non-finite p_rms or a length that is not > 0
  double longRangeStepLimit(double scaleFactor, double rmsMomentum, double length) const;

  /// Where a long-range step from aNow ends: the next output or a_end, reached in equal steps of at most `limit` in
  /// ln a (the rule of nextStep, with that limit).
  double longRangeStepEnd(double aNow, double limit) const;

  /// The KDK factors of the step from a0 to a1, from the Background's exact quadratures (~10 microseconds).
  /// Splitting the closing kick off into the next step's opening kick (a deferred closing kick) stays exact:
  /// kick(am, a1) + kick(a1, am') = kick(am, am').
  /// @throws InputError unless a_start <= a0 < a1 <= a_end
  KdkFactors kdkFactors(double a0, double a1) const;

 private:
  void checkInRun(double scaleFactor, const char* what) const;
  /// The end of the next of the fewest equal steps of at most `limit` in ln a from aNow to the next stop (the next
  /// output above aNow, a_end, or `stop` where it comes first).
  double stepEnd(double aNow, double limit, std::optional<double> stop, const char* what) const;

  Background background_;
  ComovingTimelineParams params_;
  double aStart_;
  double aEnd_;
  std::vector<double> outputs_;
};

/// The Layzer-Irvine (cosmic energy) equation's check, which replaces energy conservation in comoving runs.
///
/// With the physical peculiar kinetic energy K = sum m v^2 / 2 = sum m |p|^2 / (2 a^2) and the physical peculiar
/// potential energy W = (1/2) sum m Phi = (1/2) sum m phi / a = W_com / a (the file comment; W_com is the potential
/// energy the comoving force solver reports, mean density subtracted), Newtonian peculiar dynamics give
///   d(K + W)/dt + H (2K + W) = 0,   i.e. in ln a:   d(K + W)/d ln a = -(2K + W)
/// (Layzer 1963, Irvine 1961; Peebles 1980 §24). So
///   E_LI(a) = K(a) + W(a) + integral_a0^a (2K + W) d ln a'
/// stays at its initial value K(a0) + W(a0), and the run reports its change, relative to |W(a)|. (The equivalent
/// form d[a (K + W)]/da = -K is GADGET's; this one keeps the integrand's variable the one the steps are uniform in.)
/// Checks: a free body (W = 0) has K = m |p|^2 / (2 a^2) with p constant, so K + integral 2K d ln a is constant; the
/// linear growing mode of Einstein-de Sitter has K, W proportional to a and K = -(2/3) W.
///
/// The integral is the trapezoid rule in ln a over the samples given (each step's end): second order, error
/// ~ (d ln a)^2 / 12 of the integral, ~ 5e-5 of it for steps of 0.025. The samples need not be every step; fewer cost
/// accuracy only.
class LayzerIrvine {
 public:
  /// K and W of a state: K = sumMassMomentumSquared / (2 a^2) with sumMassMomentumSquared = sum m |p|^2 (p per unit
  /// mass, p = a^2 dx/dt), and W = comovingPotentialEnergy / a with comovingPotentialEnergy = (1/2) sum m phi.
  static double kineticEnergy(double sumMassMomentumSquared, double scaleFactor);
  static double potentialEnergy(double comovingPotentialEnergy, double scaleFactor);

  /// Starts at the initial state's K and W (physical, as kineticEnergy and potentialEnergy give them).
  /// @throws InputError for a not finite or <= 0; NumericalError for a non-finite K or W
  LayzerIrvine(double scaleFactor, double kinetic, double potential);

  /// Adds the state at scale factor a (the end of a step, after its closing kick: K and W at the same a).
  /// @throws InputError unless a is finite and > the last sample's; NumericalError for a non-finite K or W
  void add(double scaleFactor, double kinetic, double potential);

  /// E_LI(a) - E_LI(a0) = K + W - (K0 + W0) + integral (2K + W) d ln a, at the last sample.
  double violation() const { return kinetic_ + potential_ - initialEnergy_ + integral_; }
  /// violation() / |W| at the last sample; 0 when both are 0, +-inf when only W is (no self-gravity).
  double relativeViolation() const;
  /// integral_a0^a (2K + W) d ln a so far.
  double integral() const { return integral_; }
  double scaleFactor() const { return scaleFactor_; }
  double kinetic() const { return kinetic_; }
  double potential() const { return potential_; }
  /// K + W at the first sample.
  double initialEnergy() const { return initialEnergy_; }

  /// A check continued from its values at the last sample (a checkpoint's): the same as the check that went on.
  /// @throws as the constructor, and NumericalError for a non-finite initial energy or integral
  static LayzerIrvine resume(double initialEnergy, double integral, double scaleFactor, double kinetic,
                             double potential);

 private:
  double scaleFactor_;
  double kinetic_;
  double potential_;
  double initialEnergy_;
  double integral_ = 0.0;
};

}  // namespace matcha::cosmology
