// SPDX-License-Identifier: MIT
#include "comoving_run.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_reduce.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <functional>
#include <sstream>

#include "matcha/core/errors.hpp"
#include "matcha/cosmology/initial_conditions.hpp"
#include "matcha/integrator/leapfrog.hpp"

namespace matcha::app {

namespace {

/// One megaparsec in cm (1e3 kpc of core/units.hpp).
constexpr double kMegaparsecInCm = 1e3 * kKiloparsecInCm;

/// A file's total mass may differ from Omega_m rho_crit L^3 by this much (relative) before the run refuses it: the
/// critical density's digits (kCriticalDensity's 9) and float-written masses stay far below it, other units far above.
constexpr double kMeanDensityTolerance = 1e-3;

std::string formatNumber(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.10g", value);
  return text;
}

}  // namespace

UnitSystem gadgetCosmologicalUnits() {
  UnitSystem units;
  units.lengthInCm = kMegaparsecInCm;
  units.massInGram = 1e10 * kSolarMassInGram;
  units.velocityInCmPerS = 1e5;
  units.gravitationalConstant = kGravitationalConstantCgs * units.massInGram /
                                (units.lengthInCm * units.velocityInCmPerS * units.velocityInCmPerS);
  return units;
}

double hubbleTodayInCodeUnits(const UnitSystem& units) {
  // 100 km/s per Mpc/h, times the time unit (L / v) with L in Mpc/h: 1e7 cm/s / Mpc * L / v.
  return 1e7 / kMegaparsecInCm * units.lengthInCm / units.velocityInCmPerS;
}

double storedVelocityPerMomentum(double scaleFactor) { return 1.0 / (scaleFactor * std::sqrt(scaleFactor)); }

void storedVelocitiesToMomenta(Particles& p, double scaleFactor) {
  const double factor = scaleFactor * std::sqrt(scaleFactor);
  for (auto* v : {&p.vx, &p.vy, &p.vz}) {
    for (double& value : *v) value *= factor;
  }
}

cosmology::Background comovingBackground(const io::CosmologyHeader& header, const UnitSystem& units,
                                         const std::string& source) {
  cosmology::CosmologyParams params;
  params.omegaMatter = header.omega0;
  params.omegaLambda = header.omegaLambda;
  params.hubbleParam = header.hubbleParam;
  try {
    return cosmology::Background(params, hubbleTodayInCodeUnits(units));
  } catch (const InputError& error) {
    throw InputError(source + ": its cosmology (Omega0, OmegaLambda, HubbleParam in /Header): " + error.what());
  }
}

void requireMeanMatterDensity(double totalMass, double boxSize, const cosmology::Background& background, double G,
                              const std::string& source) {
  const double hubble = background.hubbleToday();
  const double criticalDensity = 3.0 * hubble * hubble / (8.0 * M_PI * G);
  const double expected = background.params().omegaMatter * criticalDensity * boxSize * boxSize * boxSize;
  if (!(std::abs(totalMass - expected) <= kMeanDensityTolerance * expected)) {
    throw InputError(source + ": the bodies' total mass " + formatNumber(totalMass) +
                     " is not the box's mean matter density Omega_m rho_crit L^3 = " + formatNumber(expected) +
                     " in the file's units (G = " + formatNumber(G) + ", H0 = " + formatNumber(hubble) +
                     "): a comoving run needs them to agree");
  }
}

double startScaleFactor(double time, const io::CosmologyHeader& header, const std::string& source) {
  if (!(std::isfinite(time) && time > 0.0 && time <= 1.0)) {
    throw InputError(source + ": /Header Time " + formatNumber(time) +
                     " is not a scale factor in (0, 1] (a cosmological file's Time is a)");
  }
  const double fromRedshift = cosmology::scaleFactorFromRedshift(header.redshift);
  if (!(std::abs(fromRedshift - time) <= 1e-6 * time)) {
    throw InputError(source + ": /Header Time " + formatNumber(time) + " and Redshift " +
                     formatNumber(header.redshift) + " disagree (a = 1/(1+z) = " + formatNumber(fromRedshift) + ")");
  }
  return time;
}

std::vector<double> parseRedshiftList(const std::string& text) {
  std::vector<double> redshifts;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string entry = text.substr(start, comma - start);
    std::size_t used = 0;
    double value = 0.0;
    try {
      value = std::stod(entry, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (entry.empty() || used != entry.size() || !std::isfinite(value)) {
      throw InputError("--output-z: '" + entry + "' is not a redshift (give a comma-separated list, e.g. 3,1,0.5,0)");
    }
    redshifts.push_back(value);
    start = comma + 1;
  }
  return redshifts;
}

namespace {

/// Block time steps: a long-range step is this fraction of a power of two of the fastest body's step at its start.
/// Exactly the power, the fastest body would take a step of half its limit (the next bin) as soon as its |a| grew at
/// all within the long-range step; with 0.9 it may grow by 23% (1 / 0.9^2) first, for 11% more steps while it does
/// not. (The first 256^3 run to z = 1.5 on the H200 took 1,674 steps with the exact power against ~1,300 global ones.)
constexpr double kBinRoom = 0.9;

/// sum |p|^2 over the bodies, on every core; 0 for none. Summed in the same order whatever the threads do (a
/// deterministic reduction): it sets the long-range steps' lengths, so a plain reduction's order, which follows the
/// work stealing, made two runs of the same inputs step differently (in its last bits, then in the step count).
double sumOfSquaredMomenta(const Particles& p) {
  if (p.size() == 0) return 0.0;
  return tbb::parallel_deterministic_reduce(
      tbb::blocked_range<std::size_t>(0, p.size(), 1 << 14), 0.0,
      [&](const tbb::blocked_range<std::size_t>& r, double partial) {
        for (std::size_t i = r.begin(); i != r.end(); ++i) {
          partial += p.vx[i] * p.vx[i] + p.vy[i] * p.vy[i] + p.vz[i] * p.vz[i];
        }
        return partial;
      },
      std::plus<>());
}

}  // namespace

ComovingSchedule::ComovingSchedule(const cosmology::ComovingTimeline& timeline, std::optional<double> longRangeLength,
                                   bool blockSteps)
    : timeline_(timeline),
      appliedSoftening_(timeline.comovingSoftening(timeline.startScaleFactor())),
      longRangeLength_(longRangeLength),
      blockSteps_(blockSteps) {
  if (blockSteps_ && !longRangeLength_) {
    throw InputError("block time steps need long-range steps (--pm-steps on, a periodic TreePM run)");
  }
  if (longRangeLength_ && !(std::isfinite(*longRangeLength_) && *longRangeLength_ > 0.0)) {
    throw InputError("comoving steps: the long-range length must be finite and > 0 (got " +
                     formatNumber(*longRangeLength_) + ")");
  }
}

double ComovingSchedule::largestAcceleration(const Particles& p) const {
  const double local = integrator::maxAcceleration(p);
  return reductions_.maximum ? reductions_.maximum(local) : local;
}

double ComovingSchedule::rmsMomentum(const Particles& p) const {
  double sum = sumOfSquaredMomenta(p), count = double(p.size());
  if (reductions_.sum) {
    sum = reductions_.sum(sum);
    count = reductions_.sum(count);
  }
  return count > 0.0 ? std::sqrt(sum / count) : 0.0;
}

std::uint8_t ComovingSchedule::finestTimeBin(const Particles& p) const {
  const std::uint8_t local = integrator::finestTimeBin(p);
  return reductions_.maximum ? static_cast<std::uint8_t>(reductions_.maximum(double(local))) : local;
}

bool ComovingSchedule::readsVelocities(std::uint64_t /*stepsTaken*/, double scaleFactor) const {
  return longRangeLength_.has_value() && !(scaleFactor < longRangeEnd_);
}

double ComovingSchedule::scaleFactorAtTick(double tick) const {
  if (tick == 0.0) return longRangeStart_;
  if (tick == double(integrator::kTicksPerLongStep)) return longRangeEnd_;
  return std::exp(longRangeStartLnA_ + longRangeLengthLnA_ * (tick / double(integrator::kTicksPerLongStep)));
}

integrator::PlannedStep ComovingSchedule::planBlockStep(const Particles& p, double largest) {
  using integrator::kDeepestTimeBin;
  using integrator::kTicksPerLongStep;
  integrator::PlannedStep planned;
  integrator::BinnedStep block;
  block.tick = tick_;
  const double aNow = scaleFactorAtTick(double(tick_));
  // The bins' scale: the long-range step over Power et al.'s limit at |g| = 1 (timeBinFor), at the step's two ends.
  block.openingBinScale = longRangeLengthLnA_ / timeline_.accelerationStepScale(aNow);
  // At the long-range step's start every body takes a bin (the leapfrog's opening pass, by the same rule): the finest
  // is that of the largest acceleration. Inside it the bins are the bodies'.
  const std::uint8_t finest = tick_ == 0 ? integrator::timeBinFor(largest, block.openingBinScale) : finestTimeBin(p);
  block.nextTick = tick_ + (std::uint64_t{1} << (kDeepestTimeBin - finest));
  const double aNext = scaleFactorAtTick(double(block.nextTick));
  block.closingBinScale = longRangeLengthLnA_ / timeline_.accelerationStepScale(aNext);
  const cosmology::Background& background = timeline_.background();
  // Half a step of bin b in ticks (a fraction at the deepest bin).
  const auto halfStep = [](std::uint8_t bin) { return std::ldexp(1.0, kDeepestTimeBin - bin - 1); };
  for (std::uint8_t bin = integrator::alignedTimeBin(tick_); bin <= finest; ++bin) {
    block.openingKick[bin] = background.kickFactor(aNow, scaleFactorAtTick(double(tick_) + halfStep(bin)));
  }
  for (std::uint8_t bin = integrator::alignedTimeBin(block.nextTick); bin <= finest; ++bin) {
    block.closingKick[bin] = background.kickFactor(scaleFactorAtTick(double(block.nextTick) - halfStep(bin)), aNext);
  }
  planned.factors.drift = background.driftFactor(aNow, aNext);
  planned.factors.longRangeAtEnd = block.endsLongStep();
  if (tick_ == 0) planned.factors.longRangeOpeningKick = longRangeOpeningKick_;
  if (block.endsLongStep()) planned.factors.longRangeClosingKick = longRangeClosingKick_;
  planned.factors.block = block;
  tick_ = block.nextTick;
  endStep(aNow, aNext, planned);
  return planned;
}

void ComovingSchedule::endStep(double aNow, double aNext, integrator::PlannedStep& planned) {
  planned.diagnostics = planned.factors.longRangeAtEnd;
  planned.endTime = aNext;
  planned.last = aNext == timeline_.endScaleFactor();
  planned.output = planned.last || timeline_.outputIndexAt(aNext).has_value();
  // The step's force is computed at its end, with the softening of that scale factor.
  if (const double softening = timeline_.comovingSoftening(aNext); softening != appliedSoftening_) {
    planned.softening = softening;
    appliedSoftening_ = softening;
  }
  lastStepDlnA_ = std::log(aNext / aNow);
}

integrator::PlannedStep ComovingSchedule::plan(std::uint64_t /*stepsTaken*/, double scaleFactor, const Particles& p) {
  if (blockSteps_) {
    double largest = 0.0;
    if (readsVelocities(0, scaleFactor)) {
      // A long-range step begins: its length from the bodies' rms momentum alone (the bins divide it), its kicks.
      largest = largestAcceleration(p);
      // A power of two of the fastest body's step with room to spare (kBinRoom), so that the finest bin's step is
      // near that step, not up to half of it, and stays its bin while its |a| grows within the long-range step.
      double limit = timeline_.longRangeStepLimit(scaleFactor, rmsMomentum(p), *longRangeLength_);
      const double shortLimit = timeline_.maxStep(scaleFactor, largest);  // names a non-finite |a|
      requireFeasibleSteps(scaleFactor, shortLimit);
      if (shortLimit < limit) {
        const double room = kBinRoom * shortLimit;
        limit = std::ldexp(room, std::ilogb(limit / room));
      }
      longRangeEnd_ = timeline_.longRangeStepEnd(scaleFactor, limit);
      const cosmology::KdkFactors longRange = timeline_.kdkFactors(scaleFactor, longRangeEnd_);
      longRangeOpeningKick_ = longRange.firstKick;
      longRangeClosingKick_ = longRange.secondKick;
      longRangeStart_ = scaleFactor;
      longRangeStartLnA_ = std::log(scaleFactor);
      longRangeLengthLnA_ = std::log(longRangeEnd_ / scaleFactor);
      tick_ = 0;
      ++longRangeStepsBegun_;
    }
    return planBlockStep(p, largest);
  }
  integrator::PlannedStep planned;
  const double largest = largestAcceleration(p);
  if (readsVelocities(0, scaleFactor)) {
    // A long-range step begins: its end, landing on the outputs, and its kicks (the opening one made now, by the
    // leapfrog, with the long range of the call before). Its length is a whole number of the short range's steps as
    // they are now, so that these land on its end without one more, shorter step (the limits change little within a
    // long-range step).
    const double limit = timeline_.longRangeStepLimit(scaleFactor, rmsMomentum(p), *longRangeLength_);
    const double shortLimit = timeline_.maxStep(scaleFactor, largest);
    requireFeasibleSteps(scaleFactor, shortLimit);
    const double whole = shortLimit < limit ? std::floor(limit / shortLimit) * shortLimit : limit;
    longRangeEnd_ = timeline_.longRangeStepEnd(scaleFactor, whole);
    const cosmology::KdkFactors longRange = timeline_.kdkFactors(scaleFactor, longRangeEnd_);
    planned.factors.longRangeOpeningKick = longRange.firstKick;
    longRangeClosingKick_ = longRange.secondKick;
    ++longRangeStepsBegun_;
  }
  const double next =
      timeline_.nextStep(scaleFactor, largest, longRangeLength_ ? std::optional<double>(longRangeEnd_) : std::nullopt);
  const cosmology::KdkFactors factors = timeline_.kdkFactors(scaleFactor, next);
  planned.factors.openingKick = factors.firstKick;
  planned.factors.drift = factors.drift;
  planned.factors.closingKick = factors.secondKick;
  if (longRangeLength_) {
    planned.factors.longRangeAtEnd = next == longRangeEnd_;
    if (planned.factors.longRangeAtEnd) planned.factors.longRangeClosingKick = longRangeClosingKick_;
  }
  endStep(scaleFactor, next, planned);
  return planned;
}

bool ComovingSchedule::mayEndAtOutput(std::uint64_t /*stepsTaken*/, double scaleFactor) const {
  // The next stop: the first output after a, or the end. A step reaches it only when the gap is within one step's
  // limit, which is at most maxDlnA.
  double stop = timeline_.endScaleFactor();
  for (const double output : timeline_.outputScaleFactors()) {
    if (output > scaleFactor) {
      stop = std::min(stop, output);
      break;
    }
  }
  return std::log(stop / scaleFactor) <= timeline_.maxStep(scaleFactor, 0.0) * (1.0 + 1e-12);
}

bool ComovingSchedule::mayPlanDiagnostics(std::uint64_t /*stepsTaken*/, double scaleFactor) const {
  if (blockSteps_) {
    // The next block step can end the long-range step only if the ticks left fit the coarsest step aligned here.
    const std::uint64_t left = integrator::kTicksPerLongStep - tick_;
    return tick_ == 0 || left <= (std::uint64_t{1} << std::countr_zero(tick_));
  }
  if (!longRangeLength_ || !(scaleFactor < longRangeEnd_) || !(lastStepDlnA_ > 0.0)) return true;
  return std::log(longRangeEnd_ / scaleFactor) <= 1.5 * lastStepDlnA_;
}

double ComovingSchedule::fractionDone(double scaleFactor) const {
  const double span = std::log(timeline_.endScaleFactor() / timeline_.startScaleFactor());
  return std::clamp(std::log(scaleFactor / timeline_.startScaleFactor()) / span, 0.0, 1.0);
}

void ComovingSchedule::requireFeasibleSteps(double scaleFactor, double shortLimit) const {
  const double steps = std::log(timeline_.endScaleFactor() / scaleFactor) / shortLimit;
  if (steps > kMaxComovingSteps) {
    std::ostringstream message;
    message << "comoving steps: at a = " << scaleFactor << " the step limit d ln a = " << shortLimit
            << " (Power et al.'s, from --eta and the softening) leaves ~" << steps << " steps to z-end, more than "
            << kMaxComovingSteps << "; raise --eta or the softening";
    throw InputError(message.str());
  }
}

std::uint64_t ComovingSchedule::estimatedSteps(std::uint64_t stepsTaken, double scaleFactor) const {
  if (!(lastStepDlnA_ > 0.0)) return stepsTaken + 1;
  const double left = std::log(timeline_.endScaleFactor() / scaleFactor) / lastStepDlnA_;
  return stepsTaken + static_cast<std::uint64_t>(std::ceil(std::min(left, 1e15)));
}

void ComovingSchedule::resume(std::uint64_t /*stepsTaken*/, double scaleFactor) {
  if (!(scaleFactor < timeline_.endScaleFactor())) {
    throw InputError("the run to resume has no step left before z-end");
  }
  appliedSoftening_ = timeline_.comovingSoftening(scaleFactor);
  longRangeEnd_ = scaleFactor;  // a long-range step begins at the checkpoint
}

LayzerIrvineCheck::LayzerIrvineCheck(const integrator::Diagnostics& initial)
    : check_(initial.time, cosmology::LayzerIrvine::kineticEnergy(2.0 * initial.kinetic, initial.time),
             cosmology::LayzerIrvine::potentialEnergy(initial.potential, initial.time)) {}

void LayzerIrvineCheck::add(const integrator::Diagnostics& d) {
  if (!(d.time > check_.scaleFactor())) return;  // the same state again (an output right after a step's sample)
  check_.add(d.time, cosmology::LayzerIrvine::kineticEnergy(2.0 * d.kinetic, d.time),
             cosmology::LayzerIrvine::potentialEnergy(d.potential, d.time));
}

void LayzerIrvineCheck::save(CheckpointState& state) const {
  state.set("layzer_irvine_initial_energy", check_.initialEnergy());
  state.set("layzer_irvine_integral", check_.integral());
  state.set("layzer_irvine_scale_factor", check_.scaleFactor());
  state.set("layzer_irvine_kinetic", check_.kinetic());
  state.set("layzer_irvine_potential", check_.potential());
}

LayzerIrvineCheck LayzerIrvineCheck::restore(const CheckpointState& state) {
  return LayzerIrvineCheck(cosmology::LayzerIrvine::resume(
      state.scalar("layzer_irvine_initial_energy"), state.scalar("layzer_irvine_integral"),
      state.scalar("layzer_irvine_scale_factor"), state.scalar("layzer_irvine_kinetic"),
      state.scalar("layzer_irvine_potential")));
}

std::string comovingDiagnosticsHeader() {
  return "#              a                z          K (phys)          W (phys)             K + W  "
         "int (2K+W) dln a       dE_LI / |W|            2K/|W|               |P|            |x_cm|";
}

std::string formatComovingDiagnostics(const integrator::Diagnostics& d, const LayzerIrvineCheck& check) {
  const cosmology::LayzerIrvine& li = check.check();
  const double a = d.time;
  const double kinetic = cosmology::LayzerIrvine::kineticEnergy(2.0 * d.kinetic, a);
  const double potential = cosmology::LayzerIrvine::potentialEnergy(d.potential, a);
  // The integral and violation are the check's at its latest sample, which is this state's when it was added.
  const bool current = li.scaleFactor() == a;
  char line[512];
  std::snprintf(line, sizeof line, "%17.10e %16.9e %17.9e %17.9e %17.9e %17.9e %17.9e %17.9e %17.9e %17.9e", a,
                cosmology::redshiftFromScaleFactor(a), kinetic, potential, kinetic + potential,
                current ? li.integral() : NAN, current ? li.relativeViolation() : NAN,
                potential != 0.0 ? 2.0 * kinetic / std::abs(potential) : NAN, d.momentum.norm(), d.centreOfMass.norm());
  return line;
}

}  // namespace matcha::app
