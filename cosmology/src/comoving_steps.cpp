// SPDX-License-Identifier: MIT
#include "matcha/cosmology/comoving_steps.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "matcha/core/errors.hpp"
#include "quadrature.hpp"

namespace matcha::cosmology {

namespace {

using detail::formatNumber;

/// Scale factors closer than this in ln a are one: far below any step (maxDlnA >= ~1e-6 in practice) and far above
/// the rounding of a redshift's conversion (~1e-16), so "z = 0" and a_end = 1 match whatever the arithmetic.
constexpr double kSameScaleFactorLn = 1e-9;

void requireFinite(double value, const char* name) {
  if (!std::isfinite(value)) {
    throw InputError(std::string("comoving steps: ") + name + " must be finite (got " + formatNumber(value) + ")");
  }
}

void requirePositive(double value, const char* name) {
  requireFinite(value, name);  // first: an ordered comparison with NaN raises FE_INVALID
  if (!(value > 0.0)) {
    throw InputError(std::string("comoving steps: ") + name + " must be > 0 (got " + formatNumber(value) + ")");
  }
}

void requireFiniteEnergy(double value, const char* name, double scaleFactor) {
  if (!std::isfinite(value)) {
    throw NumericalError(std::string("Layzer-Irvine: ") + name + " is not finite (" + formatNumber(value) +
                         ") at a = " + formatNumber(scaleFactor));
  }
}

}  // namespace

ComovingTimeline::ComovingTimeline(const Background& background, const ComovingTimelineParams& params)
    : background_(background), params_(params) {
  requireFinite(params.redshiftStart, "z_start");
  requireFinite(params.redshiftEnd, "z_end");
  if (!(params.redshiftEnd > -1.0)) {
    throw InputError("comoving steps: z_end must be > -1 (got " + formatNumber(params.redshiftEnd) + ")");
  }
  if (!(params.redshiftStart > params.redshiftEnd)) {
    throw InputError("comoving steps: z_start must be > z_end (got z_start = " + formatNumber(params.redshiftStart) +
                     ", z_end = " + formatNumber(params.redshiftEnd) + ")");
  }
  requirePositive(params.maxDlnA, "max-dlna");
  requirePositive(params.eta, "eta");
  requirePositive(params.softening, "the softening");
  if (params.maxPhysicalSoftening) requirePositive(*params.maxPhysicalSoftening, "the maximum physical softening");
  requirePositive(params.maxRmsDisplacement, "pm-displacement");

  aStart_ = scaleFactorFromRedshift(params.redshiftStart);
  aEnd_ = scaleFactorFromRedshift(params.redshiftEnd);
  const double aMax = background_.params().maxScaleFactor;
  if (aEnd_ > aMax) {
    throw InputError("comoving steps: z_end = " + formatNumber(params.redshiftEnd) +
                     " is beyond the cosmology's largest scale factor " + formatNumber(aMax));
  }
  if (!(std::log(aEnd_ / aStart_) > kSameScaleFactorLn)) {
    throw InputError("comoving steps: z_start and z_end are the same scale factor (got z_start = " +
                     formatNumber(params.redshiftStart) + ", z_end = " + formatNumber(params.redshiftEnd) + ")");
  }

  for (const double z : params.outputRedshifts) {
    requireFinite(z, "an output redshift");
    if (!(z > -1.0)) throw InputError("comoving steps: output redshift " + formatNumber(z) + " must be > -1");
    double a = scaleFactorFromRedshift(z);
    if (std::abs(std::log(a / aStart_)) <= kSameScaleFactorLn) a = aStart_;
    if (std::abs(std::log(a / aEnd_)) <= kSameScaleFactorLn) a = aEnd_;
    if (a < aStart_ || a > aEnd_) {
      throw InputError("comoving steps: output redshift " + formatNumber(z) + " is outside the run [z_end = " +
                       formatNumber(params.redshiftEnd) + ", z_start = " + formatNumber(params.redshiftStart) + "]");
    }
    outputs_.push_back(a);
  }
  std::sort(outputs_.begin(), outputs_.end());
  for (std::size_t i = 1; i < outputs_.size(); ++i) {
    if (std::log(outputs_[i] / outputs_[i - 1]) <= kSameScaleFactorLn) {
      throw InputError("comoving steps: output redshift " + formatNumber(redshiftFromScaleFactor(outputs_[i])) +
                       " is given twice");
    }
  }
}

std::optional<std::size_t> ComovingTimeline::outputIndexAt(double scaleFactor) const {
  const auto it = std::lower_bound(outputs_.begin(), outputs_.end(), scaleFactor);
  if (it == outputs_.end() || *it != scaleFactor) return std::nullopt;
  return static_cast<std::size_t>(it - outputs_.begin());
}

double ComovingTimeline::comovingSoftening(double scaleFactor) const {
  checkInRun(scaleFactor, "the softening");
  if (!params_.maxPhysicalSoftening) return params_.softening;
  return std::min(params_.softening, *params_.maxPhysicalSoftening / scaleFactor);
}

void ComovingTimeline::checkInRun(double scaleFactor, const char* what) const {
  if (!(std::isfinite(scaleFactor) && scaleFactor >= aStart_ && scaleFactor <= aEnd_)) {
    throw InputError(std::string("comoving steps: ") + what + ": the scale factor must be in [" +
                     formatNumber(aStart_) + ", " + formatNumber(aEnd_) + "] (got " + formatNumber(scaleFactor) + ")");
  }
}

double ComovingTimeline::maxStep(double scaleFactor, double maxAccelerationComoving) const {
  checkInRun(scaleFactor, "the step limit");
  if (!std::isfinite(maxAccelerationComoving)) {
    throw NumericalError("comoving steps: the largest acceleration is not finite (" +
                         formatNumber(maxAccelerationComoving) + ") at a = " + formatNumber(scaleFactor));
  }
  if (maxAccelerationComoving < 0.0) {
    throw InputError("comoving steps: the largest acceleration must be >= 0 (got " +
                     formatNumber(maxAccelerationComoving) + ")");
  }
  if (maxAccelerationComoving == 0.0) return params_.maxDlnA;
  // dt <= sqrt(2 eta eps_phys / |a_phys|), eps_phys = a eps_eff, |a_phys| = |g| / a^2; d ln a = H dt (header).
  const double a = scaleFactor;
  const double dt = std::sqrt(2.0 * params_.eta * comovingSoftening(a) * a * a * a / maxAccelerationComoving);
  return std::min(params_.maxDlnA, background_.hubble(a) * dt);
}

double ComovingTimeline::accelerationStepScale(double scaleFactor) const {
  checkInRun(scaleFactor, "the step limit");
  const double a = scaleFactor;
  return background_.hubble(a) * std::sqrt(2.0 * params_.eta * comovingSoftening(a) * a * a * a);
}

double ComovingTimeline::stepEnd(double aNow, double limit, std::optional<double> extraStop, const char* what) const {
  checkInRun(aNow, what);
  if (!(aNow < aEnd_)) {
    throw InputError("comoving steps: the run is already at its end a = " + formatNumber(aEnd_));
  }
  const auto next = std::upper_bound(outputs_.begin(), outputs_.end(), aNow);
  double stop = next == outputs_.end() ? aEnd_ : *next;
  if (extraStop) {
    if (!(*extraStop > aNow)) {
      throw InputError(std::string("comoving steps: ") + what + ": the stop " + formatNumber(*extraStop) +
                       " is not after a = " + formatNumber(aNow));
    }
    stop = std::min(stop, *extraStop);
  }
  const double gap = std::log(stop / aNow);
  // Steps that land on a long-range step's end may exceed the limit a little (kLongRangeLandingStretch).
  const bool stretched = extraStop && stop == *extraStop;
  const double steps = std::ceil(gap / (stretched ? kLongRangeLandingStretch * limit : limit));
  if (steps <= 1.0) return stop;  // the stored value itself: lands bit for bit
  const double aNext = aNow * std::exp(gap / steps);
  if (!(aNext > aNow)) {
    throw NumericalError(std::string("comoving steps: ") + what + " rounds away at a = " + formatNumber(aNow) +
                         " (limit d ln a = " + formatNumber(limit) + ")");
  }
  return std::min(aNext, stop);  // gap / steps <= gap / 2: below the stop unless rounding says otherwise
}

double ComovingTimeline::nextStep(double aNow, double maxAccelerationComoving, std::optional<double> stop) const {
  checkInRun(aNow, "the next step");
  return stepEnd(aNow, maxStep(aNow, maxAccelerationComoving), stop, "the next step");
}

double ComovingTimeline::longRangeStepLimit(double scaleFactor, double rmsMomentum, double length) const {
  checkInRun(scaleFactor, "the long-range step limit");
  if (!(std::isfinite(rmsMomentum) && rmsMomentum >= 0.0)) {
    throw InputError("comoving steps: the rms momentum must be finite and >= 0 (got " + formatNumber(rmsMomentum) +
                     ")");
  }
  requirePositive(length, "the long-range length");
  if (rmsMomentum == 0.0) return params_.maxDlnA;
  const double a = scaleFactor;
  return std::min(params_.maxDlnA, params_.maxRmsDisplacement * a * a * background_.hubble(a) * length / rmsMomentum);
}

double ComovingTimeline::longRangeStepEnd(double aNow, double limit) const {
  requirePositive(limit, "the long-range step limit");
  return stepEnd(aNow, limit, std::nullopt, "the long-range step");
}

KdkFactors ComovingTimeline::kdkFactors(double a0, double a1) const {
  checkInRun(a0, "the KDK factors");
  checkInRun(a1, "the KDK factors");
  if (!(a1 > a0)) {
    throw InputError("comoving steps: a step must end after it starts (got a0 = " + formatNumber(a0) +
                     ", a1 = " + formatNumber(a1) + ")");
  }
  KdkFactors f;
  // The midpoint in ln a; clamped so that rounding cannot put it outside [a0, a1].
  f.midScaleFactor = std::clamp(std::sqrt(a0) * std::sqrt(a1), a0, a1);
  f.firstKick = background_.kickFactor(a0, f.midScaleFactor);
  f.drift = background_.driftFactor(a0, a1);
  f.secondKick = background_.kickFactor(f.midScaleFactor, a1);
  return f;
}

double LayzerIrvine::kineticEnergy(double sumMassMomentumSquared, double scaleFactor) {
  return sumMassMomentumSquared / (2.0 * scaleFactor * scaleFactor);
}

double LayzerIrvine::potentialEnergy(double comovingPotentialEnergy, double scaleFactor) {
  return comovingPotentialEnergy / scaleFactor;
}

LayzerIrvine::LayzerIrvine(double scaleFactor, double kinetic, double potential)
    : scaleFactor_(scaleFactor), kinetic_(kinetic), potential_(potential), initialEnergy_(kinetic + potential) {
  requirePositive(scaleFactor, "the Layzer-Irvine start's scale factor");
  requireFiniteEnergy(kinetic, "K", scaleFactor);
  requireFiniteEnergy(potential, "W", scaleFactor);
}

void LayzerIrvine::add(double scaleFactor, double kinetic, double potential) {
  requireFinite(scaleFactor, "a Layzer-Irvine sample's scale factor");
  if (!(scaleFactor > scaleFactor_)) {
    throw InputError("Layzer-Irvine: samples must come in increasing a (got " + formatNumber(scaleFactor) + " after " +
                     formatNumber(scaleFactor_) + ")");
  }
  requireFiniteEnergy(kinetic, "K", scaleFactor);
  requireFiniteEnergy(potential, "W", scaleFactor);
  // Trapezoid in ln a of 2K + W.
  const double dlnA = std::log(scaleFactor / scaleFactor_);
  integral_ += 0.5 * dlnA * ((2.0 * kinetic_ + potential_) + (2.0 * kinetic + potential));
  scaleFactor_ = scaleFactor;
  kinetic_ = kinetic;
  potential_ = potential;
}

LayzerIrvine LayzerIrvine::resume(double initialEnergy, double integral, double scaleFactor, double kinetic,
                                  double potential) {
  LayzerIrvine check(scaleFactor, kinetic, potential);
  requireFiniteEnergy(initialEnergy, "the initial K + W", scaleFactor);
  requireFiniteEnergy(integral, "the integral of 2K + W", scaleFactor);
  check.initialEnergy_ = initialEnergy;
  check.integral_ = integral;
  return check;
}

double LayzerIrvine::relativeViolation() const {
  const double v = violation();
  if (potential_ != 0.0) return v / std::abs(potential_);
  if (v == 0.0) return 0.0;
  return v > 0.0 ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
}

}  // namespace matcha::cosmology
