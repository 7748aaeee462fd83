// SPDX-License-Identifier: MIT
#include "matcha/integrator/step_schedule.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "matcha/core/errors.hpp"

namespace matcha::integrator {

namespace {

/// Largest step count accepted: beyond 2^53, step numbers are no longer exact in double and time = steps * dt lies.
constexpr double kMaxSteps = 0x1p53;

}  // namespace

std::uint64_t checkedStepCount(double tEnd, double dt) {
  const double ratio = tEnd / dt;
  if (!(ratio <= kMaxSteps)) throw InputError("t-end / dt is more than 2^53 steps");
  const double nearest = std::round(ratio);
  if (std::abs(ratio - nearest) > 1e-9 * std::max(1.0, ratio)) {
    char message[160];
    std::snprintf(message, sizeof message, "t-end must be a multiple of dt (t-end = %.17g, dt = %.17g, ratio %.17g)",
                  tEnd, dt, ratio);
    throw InputError(message);
  }
  return static_cast<std::uint64_t>(nearest);
}

OutputSchedule::OutputSchedule(double outputInterval, double dt) : stepsPerOutput_(outputInterval / dt) {
  nextK_ = firstAfter(0.0);
}

bool OutputSchedule::isDueAndAdvance(std::uint64_t step) {
  const double s = static_cast<double>(step);
  if (stepsPerOutput_ <= 1.0) return true;  // consecutive outputs are at most one step apart: every step is hit
  if (stepOf(nextK_) > s) return false;
  nextK_ = firstAfter(s);
  return true;
}

bool OutputSchedule::isDue(std::uint64_t step) const {
  if (stepsPerOutput_ <= 1.0) return true;
  const double s = static_cast<double>(step);
  return step > 0 && stepOf(firstAfter(s - 1.0)) == s;
}

double OutputSchedule::stepOf(double k) const { return std::round(k * stepsPerOutput_); }

/// Smallest k >= 1 whose step lies after `s`. Only used with stepsPerOutput_ > 1, where k - 1 != k in double for every
/// k reached (k <= 2^53 / stepsPerOutput_ + 1), so the adjusting loops end after a step or two.
double OutputSchedule::firstAfter(double s) const {
  double k = std::max(1.0, std::ceil((s + 0.5) / stepsPerOutput_));
  while (k > 1.0 && stepOf(k - 1.0) > s) k -= 1.0;
  while (stepOf(k) <= s) k += 1.0;
  return k;
}

FixedSteps::FixedSteps(const IntegratorParams& params)
    : params_((params.validate(), params)),
      numSteps_(checkedStepCount(params.tEnd - params.tStart, params.dt)),
      outputs_(params.outputInterval, params.dt) {}

PlannedStep FixedSteps::plan(std::uint64_t stepsTaken, double /*time*/, const Particles& /*p*/) {
  const std::uint64_t step = stepsTaken + 1;
  PlannedStep planned;
  planned.factors = KdkStep{0.5 * params_.dt, params_.dt, 0.5 * params_.dt};
  planned.endTime = timeAfter(step);
  planned.last = step == numSteps_;
  // Evaluated for every step so the schedule advances even when the final step forces an output anyway.
  planned.output = outputs_.isDueAndAdvance(step) || planned.last;
  return planned;
}

bool FixedSteps::mayEndAtOutput(std::uint64_t stepsTaken, double /*time*/) const {
  const std::uint64_t step = stepsTaken + 1;
  return outputs_.isDue(step) || step == numSteps_;
}

double FixedSteps::fractionDone(double time) const {
  const double span = params_.tEnd - params_.tStart;
  return span > 0.0 ? std::clamp((time - params_.tStart) / span, 0.0, 1.0) : 1.0;
}

void FixedSteps::resume(std::uint64_t stepsTaken, double /*time*/) {
  if (stepsTaken >= numSteps_) throw InputError("the run to resume has no step left before t-end");
  outputs_.isDueAndAdvance(stepsTaken);  // past the outputs before the checkpoint
}

}  // namespace matcha::integrator
