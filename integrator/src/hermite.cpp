// SPDX-License-Identifier: MIT
#include "matcha/integrator/hermite.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <limits>
#include <sstream>

#include "matcha/core/errors.hpp"
#include "matcha/core/stopwatch.hpp"

namespace matcha::integrator {

namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

/// Blocks of at least this many bodies are predicted and corrected by TBB threads (elementwise: the same bits).
constexpr std::size_t kParallelGrain = 512;

/// The block search scans the bodies in chunks of this many, in parallel beyond one chunk.
constexpr std::size_t kSearchChunk = 16384;

double norm3(const double v[3]) { return std::sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]); }

/// Runs body(k) for k in [0, n), threaded when n is large enough to pay for it. Each k writes only its own entries.
template <class Body>
void forEachInBlock(std::size_t n, const Body& body) {
  if (n < 2 * kParallelGrain) {
    for (std::size_t k = 0; k < n; ++k) body(k);
    return;
  }
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n, kParallelGrain),
                    [&](const tbb::blocked_range<std::size_t>& range) {
                      for (std::size_t k = range.begin(); k != range.end(); ++k) body(k);
                    });
}

std::string formatNumber(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", value);
  return text;
}

}  // namespace

void HermiteParams::validate() const {
  // Named as `matcha run`'s options are, without their dashes, as core's params name theirs.
  if (!(std::isfinite(eta) && eta > 0.0))
    throw InputError("eta must be finite and > 0 (got " + formatNumber(eta) + ")");
  if (!(std::isfinite(etaStart) && etaStart > 0.0)) {
    throw InputError("eta-start must be finite and > 0 (got " + formatNumber(etaStart) + ")");
  }
  if (!isPowerOfTwo(maxStep)) {
    throw InputError("max-step must be a power of two such as 0.125 or 0.0625 (got " + formatNumber(maxStep) + ")");
  }
  if (!(std::isfinite(minStep) && minStep > 0.0 && minStep <= maxStep)) {
    throw InputError("min-step must be > 0 and at most max-step " + formatNumber(maxStep) + " (got " +
                     formatNumber(minStep) + ")");
  }
}

bool isPowerOfTwo(double value) {
  if (!(std::isfinite(value) && value > 0.0) || !std::isnormal(value)) return false;
  int exponent = 0;
  return std::frexp(value, &exponent) == 0.5;
}

double powerOfTwoFloor(double value) {
  if (!(value >= std::numeric_limits<double>::min())) return std::numeric_limits<double>::min();
  int exponent = 0;
  std::frexp(value, &exponent);  // value = m 2^exponent, m in [0.5, 1)
  return std::ldexp(0.5, exponent);
}

double resolveMaxStep(double outputInterval, double requested) {
  const auto divides = [outputInterval](double step) {
    const double ratio = outputInterval / step;
    return std::abs(ratio - std::round(ratio)) <= 1e-9 * ratio && std::round(ratio) >= 1.0;
  };
  std::ostringstream message;
  message.precision(12);
  if (requested > 0.0) {
    if (!isPowerOfTwo(requested)) {
      message << "--max-step " << requested << " must be a power of two such as " << powerOfTwoFloor(requested)
              << " (block steps are powers of two)";
      throw InputError(message.str());
    }
    if (!divides(requested)) {
      message << "--max-step " << requested << " must divide --output-interval " << outputInterval
              << " (every body is synchronised at the outputs, which fall on multiples of the largest step)";
      throw InputError(message.str());
    }
    return requested;
  }
  // The largest power of two at or below the interval, halved until it divides it; a dyadic interval (0.25, 0.375)
  // stops within a few halvings, a decimal one (0.1) never does, short of steps of 2^-50 that no one wants.
  double step = powerOfTwoFloor(outputInterval);
  for (int halvings = 0; halvings <= 20; ++halvings, step *= 0.5) {
    if (divides(step)) return step;
  }
  message << "--output-interval " << outputInterval
          << " is not a whole number of any power-of-two step (hermite runs synchronise every body at the outputs, "
             "on multiples of the largest step): give a dyadic interval such as "
          << powerOfTwoFloor(outputInterval) << " or " << 2.0 * powerOfTwoFloor(outputInterval);
  throw InputError(message.str());
}

void hermiteDerivatives(const double a0[3], const double j0[3], const double a1[3], const double j1[3], double dt,
                        double snap[3], double crackle[3]) {
  const double dt2 = dt * dt, dt3 = dt2 * dt;
  for (int c = 0; c < 3; ++c) {
    snap[c] = (-6.0 * (a0[c] - a1[c]) - dt * (4.0 * j0[c] + 2.0 * j1[c])) / dt2;
    crackle[c] = (12.0 * (a0[c] - a1[c]) + 6.0 * dt * (j0[c] + j1[c])) / dt3;
  }
}

double aarsethStep(double eta, const double a[3], const double j[3], const double a2[3], const double a3[3]) {
  const double numerator = norm3(a) * norm3(a2) + j[0] * j[0] + j[1] * j[1] + j[2] * j[2];
  const double denominator = norm3(j) * norm3(a3) + a2[0] * a2[0] + a2[1] * a2[1] + a2[2] * a2[2];
  // No division by zero, and no ratio beyond 1e300 (which a force-free body would give): either is "no limit".
  // Quiet comparisons: a NaN (which the caller reports) must not raise the invalid exception on the way.
  if (!std::isgreater(denominator, 0.0) || std::isgreater(numerator / 1e300, denominator)) return kInfinity;
  return std::sqrt(eta * numerator / denominator);
}

double nextBlockStep(double current, double criterion, double time, double maxStep) {
  double step = current;
  if (criterion < step) {
    // Halving keeps the body on the grid (time is a multiple of the step, so of its halves). The floor stops the
    // loop for a criterion of 0; the caller refuses any step below its minimum anyway.
    while (step > criterion && step > 0x1p-1000) step *= 0.5;
  } else if (criterion >= 2.0 * step && 2.0 * step <= maxStep && std::fmod(time, 2.0 * step) == 0.0) {
    step *= 2.0;  // one doubling per step, and only where the doubled step's grid passes
  }
  return std::min(step, maxStep);
}

HermiteIntegrator::HermiteIntegrator(HermiteEngine& engine, const HermiteParams& params, double G, double eps,
                                     double timeOrigin)
    : engine_(engine), params_(params), G_(G), eps_(eps), eps2_(eps * eps), timeOrigin_(timeOrigin) {
  params_.validate();
  if (!(std::isfinite(G) && G > 0.0)) throw InputError("hermite: G must be finite and > 0");
  if (!(std::isfinite(eps) && eps >= 0.0)) throw InputError("hermite: eps must be finite and >= 0");
}

void HermiteIntegrator::prepare(const Particles& p) {
  if (p.empty()) throw InputError("hermite: no bodies to integrate");
  if (p.size() > (std::size_t{1} << 31)) throw InputError("hermite: at most 2^31 bodies (the engine's addresses)");
  numBodies_ = p.size();
  engine_.reserve(numBodies_);
  bodyTime_.assign(numBodies_, 0.0);
  bodyStep_.assign(numBodies_, 0.0);
  nextTime_.assign(numBodies_, 0.0);
  jerk_.assign(3 * numBodies_, 0.0);
  allBodies_.resize(numBodies_);
  for (std::size_t i = 0; i < numBodies_; ++i) allBodies_[i] = static_cast<std::uint32_t>(i);
  const std::size_t numChunks = (numBodies_ + kSearchChunk - 1) / kSearchChunk;
  chunkMin_.assign(numChunks, 0.0);
  chunkBodies_.assign(numChunks, {});
  counters_ = HermiteCounters{};
}

void HermiteIntegrator::initialize(Particles& p) {
  prepare(p);
  time_ = 0.0;
  // The engine needs every body as a j-particle before the first force call; acceleration and jerk are not known yet,
  // which does not matter for a prediction over no time.
  loadJParticles(p, allBodies_);
  Stopwatch clock;
  engine_.predict(0.0, numBodies_);
  computeForces(p, allBodies_, true);
  counters_.forceSeconds += clock.seconds();
  counters_.interactions += static_cast<std::uint64_t>(numBodies_) * numBodies_;
  for (std::size_t i = 0; i < numBodies_; ++i) {
    p.ax[i] = newAcc_[3 * i];
    p.ay[i] = newAcc_[3 * i + 1];
    p.az[i] = newAcc_[3 * i + 2];
    p.pot[i] = newPot_[i];
    for (int c = 0; c < 3; ++c) jerk_[3 * i + c] = newJerk_[3 * i + c];
  }
  if (const auto bad = firstNonFinite(p, allBodies_)) throwNonFinite(p, *bad, 0.0);
  for (std::size_t i = 0; i < numBodies_; ++i) {
    const double a[3] = {p.ax[i], p.ay[i], p.az[i]};
    const double accel = norm3(a);
    const double jerk = norm3(&jerk_[3 * i]);
    // |a|/|j| is the time in which the force changes by itself; a body with no jerk takes the largest step.
    const double criterion = jerk > 0.0 && accel / 1e300 <= jerk ? params_.etaStart * accel / jerk : kInfinity;
    const double step = powerOfTwoFloor(std::min(criterion, params_.maxStep));
    if (step < params_.minStep) throwStepUnderflow(p, static_cast<std::uint32_t>(i), criterion, 0.0);
    bodyStep_[i] = step;
  }
  loadJParticles(p, allBodies_);
  checkFirstSteps(p);
  double smallest = kInfinity, largest = 0.0;
  for (std::size_t i = 0; i < numBodies_; ++i) {
    nextTime_[i] = bodyStep_[i];
    smallest = std::min(smallest, bodyStep_[i]);
    largest = std::max(largest, bodyStep_[i]);
  }
  counters_.smallestStep = smallest;
  counters_.largestStep = largest;
  initialized_ = true;
  findBlock();
}

void HermiteIntegrator::checkFirstSteps(const Particles& p) {
  // |a|/|j| misjudges a body whose jerk happens to be small at the start (released at rest, at a turning point of
  // its orbit): its force still changes, through the snap, and the first step would be far too long (on Plummer
  // spheres of 1024 bodies, 3 seeds in 22 lost |dE/E| ~ 1e-6 in that one step, whatever eta). So each first step is
  // tried before it is taken: the forces at its end, from every body predicted from the start, give the snap and
  // crackle (the corrector's interpolation), and a step longer than Aarseth's criterion with them is cut to the power
  // of two at or below the criterion and tried again. The trial's results are dropped: the bodies stay at time 0.
  // Longest steps first, each length in one force call on its bodies: about one extra force call on every body.
  std::vector<std::uint32_t> pending = allBodies_, level, retry;
  const Stopwatch clock;
  while (!pending.empty()) {
    double step = 0.0;
    for (const std::uint32_t i : pending) step = std::max(step, bodyStep_[i]);
    level.clear();
    retry.clear();
    for (const std::uint32_t i : pending) (bodyStep_[i] == step ? level : retry).push_back(i);
    engine_.predict(step, numBodies_);
    predictBodies(p, level);
    computeForces(p, level, false);
    counters_.interactions += static_cast<std::uint64_t>(level.size()) * numBodies_;
    for (std::size_t k = 0; k < level.size(); ++k) {
      const std::uint32_t i = level[k];
      const double a0[3] = {p.ax[i], p.ay[i], p.az[i]};
      double snap[3], crackle[3];
      hermiteDerivatives(a0, &jerk_[3 * i], &newAcc_[3 * k], &newJerk_[3 * k], step, snap, crackle);
      const double criterion = aarsethStep(params_.eta, a0, &jerk_[3 * i], snap, crackle);
      // A criterion that is not a number passes: the step itself then reports the value that is not finite.
      if (!std::isless(criterion, step)) continue;
      const double shorter = powerOfTwoFloor(criterion);
      if (shorter < params_.minStep) throwStepUnderflow(p, i, criterion, 0.0);
      bodyStep_[i] = shorter;
      retry.push_back(i);
    }
    std::sort(retry.begin(), retry.end());
    pending.swap(retry);
  }
  counters_.forceSeconds += clock.seconds();
}

void HermiteIntegrator::predictBodies(const Particles& p, std::span<const std::uint32_t> indices) {
  const std::size_t n = indices.size();
  blockIds_.resize(n);
  predictedPos_.resize(3 * n);
  predictedVel_.resize(3 * n);
  // Predictor (Makino & Aarseth 1992, eq. 7-8): x_p = x + v dt + a dt^2/2 + j dt^3/6, v_p = v + a dt + j dt^2/2, with
  // dt = the body's step (its time plus its step is the block time, exactly: both are dyadic and the guard on the
  // smallest step keeps every sum exact).
  forEachInBlock(n, [&](std::size_t k) {
    const std::uint32_t i = indices[k];
    const double dt = bodyStep_[i];
    const double x[3] = {p.x[i], p.y[i], p.z[i]};
    const double v[3] = {p.vx[i], p.vy[i], p.vz[i]};
    const double a[3] = {p.ax[i], p.ay[i], p.az[i]};
    const double* j = &jerk_[3 * i];
    blockIds_[k] = static_cast<std::int64_t>(i);
    for (int c = 0; c < 3; ++c) {
      predictedPos_[3 * k + c] = x[c] + dt * (v[c] + dt * (0.5 * a[c] + dt * (j[c] / 6.0)));
      predictedVel_[3 * k + c] = v[c] + dt * (a[c] + dt * (0.5 * j[c]));
    }
  });
}

double HermiteIntegrator::nextBlockTime() const {
  MATCHA_ASSERT(initialized_, "HermiteIntegrator: initialize() or restore() first");
  return blockTime_;
}

bool HermiteIntegrator::synchronized() const { return initialized_ && std::fmod(time_, params_.maxStep) == 0.0; }

void HermiteIntegrator::findBlock() {
  // One pass: every chunk keeps its smallest next time and the bodies that have it (in index order), then the chunks
  // whose minimum is the overall one are joined in chunk order, so the block is ascending whatever the threads did.
  const std::size_t numChunks = chunkMin_.size();
  const auto scanChunk = [this](std::size_t c) {
    const std::size_t first = c * kSearchChunk;
    const std::size_t last = std::min(numBodies_, first + kSearchChunk);
    double smallest = kInfinity;
    std::vector<std::uint32_t>& bodies = chunkBodies_[c];
    bodies.clear();
    for (std::size_t i = first; i < last; ++i) {
      const double next = nextTime_[i];
      if (next < smallest) {
        smallest = next;
        bodies.clear();
      }
      if (next == smallest) bodies.push_back(static_cast<std::uint32_t>(i));
    }
    chunkMin_[c] = smallest;
  };
  if (numChunks == 1) {
    scanChunk(0);
  } else {
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, numChunks, 1),
                      [&](const tbb::blocked_range<std::size_t>& range) {
                        for (std::size_t c = range.begin(); c != range.end(); ++c) scanChunk(c);
                      });
  }
  blockTime_ = *std::min_element(chunkMin_.begin(), chunkMin_.end());
  block_.clear();
  for (std::size_t c = 0; c < numChunks; ++c) {
    if (chunkMin_[c] == blockTime_) block_.insert(block_.end(), chunkBodies_[c].begin(), chunkBodies_[c].end());
  }
}

void HermiteIntegrator::loadJParticles(const Particles& p, std::span<const std::uint32_t> indices) {
  jScratch_.resize(indices.size());
  forEachInBlock(indices.size(), [&](std::size_t k) {
    const std::uint32_t i = indices[k];
    JParticle& j = jScratch_[k];
    j.time = bodyTime_[i];
    j.mass = G_ * p.mass[i];
    j.pos[0] = p.x[i];
    j.pos[1] = p.y[i];
    j.pos[2] = p.z[i];
    j.vel[0] = p.vx[i];
    j.vel[1] = p.vy[i];
    j.vel[2] = p.vz[i];
    j.acc[0] = p.ax[i];
    j.acc[1] = p.ay[i];
    j.acc[2] = p.az[i];
    for (int c = 0; c < 3; ++c) {
      j.jerk[c] = jerk_[3 * i + c];
      // Makino & Aarseth's predictor: position to 3rd order, velocity to 2nd, from a and jerk alone, as GRAPE-6
      // predicts (and as the host predicts the block); the snap of the last correction is not used.
      j.snap[c] = 0.0;
    }
    j.id = static_cast<std::int64_t>(i);
  });
  engine_.setJParticles(indices, jScratch_);
}

void HermiteIntegrator::computeForces(const Particles& p, std::span<const std::uint32_t> indices, bool fromBodies,
                                      double* potentialsOnly) {
  const std::size_t n = indices.size();
  blockIds_.resize(n);
  predictedPos_.resize(3 * n);
  predictedVel_.resize(3 * n);
  newAcc_.resize(3 * n);
  newJerk_.resize(3 * n);
  newPot_.resize(n);
  if (fromBodies) {
    forEachInBlock(n, [&](std::size_t k) {
      const std::uint32_t i = indices[k];
      blockIds_[k] = static_cast<std::int64_t>(i);
      predictedPos_[3 * k] = p.x[i];
      predictedPos_[3 * k + 1] = p.y[i];
      predictedPos_[3 * k + 2] = p.z[i];
      predictedVel_[3 * k] = p.vx[i];
      predictedVel_[3 * k + 1] = p.vy[i];
      predictedVel_[3 * k + 2] = p.vz[i];
    });
  }
  const IBlockView block{blockIds_.data(), predictedPos_.data(), predictedVel_.data(), n};
  // Potentials alone: the engine may skip accelerations and jerks (null arrays).
  const HermiteForceView out =
      potentialsOnly != nullptr
          ? HermiteForceView{nullptr, nullptr, potentialsOnly, nullptr, nullptr, n}
          : HermiteForceView{newAcc_.data(), newJerk_.data(), newPot_.data(), nullptr, nullptr, n};
  engine_.launchForces(block, eps2_, out);
  engine_.finishForces();
}

BlockStep HermiteIntegrator::step(Particles& p) {
  MATCHA_ASSERT(initialized_, "HermiteIntegrator: initialize() or restore() first");
  MATCHA_ASSERT(p.size() == numBodies_, "HermiteIntegrator: the bodies changed in number");
  Stopwatch clock;
  const double blockTime = blockTime_;
  const std::size_t n = block_.size();
  predictBodies(p, block_);
  double integration = clock.seconds();
  clock.restart();
  engine_.predict(blockTime, numBodies_);
  computeForces(p, block_, false);
  double force = clock.seconds();
  clock.restart();

  // Corrector (Makino & Aarseth 1992, eq. 9-11): the snap a2 and crackle a3 at the step's start (hermiteDerivatives)
  // correct the prediction by their terms of the Taylor series: x += a2 dt^4/24 + a3 dt^5/120,
  // v += a2 dt^3/6 + a3 dt^4/24. Aarseth's criterion then takes a1, j1, the snap at the end, a2 + a3 dt, and a3.
  blockStepScratch_.resize(n);
  forEachInBlock(n, [&](std::size_t k) {
    const std::uint32_t i = block_[k];
    const double dt = bodyStep_[i];
    const double dt2 = dt * dt, dt3 = dt2 * dt;
    const double a0[3] = {p.ax[i], p.ay[i], p.az[i]};
    double* j0 = &jerk_[3 * i];
    const double* a1 = &newAcc_[3 * k];
    const double* j1 = &newJerk_[3 * k];
    double snap[3], a3[3], a2End[3], x1[3], v1[3];
    hermiteDerivatives(a0, j0, a1, j1, dt, snap, a3);
    for (int c = 0; c < 3; ++c) {
      x1[c] = predictedPos_[3 * k + c] + dt2 * dt2 * (snap[c] / 24.0 + dt * (a3[c] / 120.0));
      v1[c] = predictedVel_[3 * k + c] + dt3 * (snap[c] / 6.0 + dt * (a3[c] / 24.0));
      a2End[c] = snap[c] + dt * a3[c];
    }
    p.x[i] = x1[0];
    p.y[i] = x1[1];
    p.z[i] = x1[2];
    p.vx[i] = v1[0];
    p.vy[i] = v1[1];
    p.vz[i] = v1[2];
    p.ax[i] = a1[0];
    p.ay[i] = a1[1];
    p.az[i] = a1[2];
    p.pot[i] = newPot_[k];
    for (int c = 0; c < 3; ++c) j0[c] = j1[c];
    blockStepScratch_[k] = aarsethStep(params_.eta, a1, j1, a2End, a3);
  });
  // In index order, so that the body a failure names is the first: values that are not finite, then steps too small.
  if (const auto bad = firstNonFinite(p, block_)) throwNonFinite(p, *bad, blockTime);
  double smallest = counters_.smallestStep, largest = counters_.largestStep;
  for (std::size_t k = 0; k < n; ++k) {
    const std::uint32_t i = block_[k];
    const double criterion = blockStepScratch_[k];
    const double next = nextBlockStep(bodyStep_[i], criterion, blockTime, params_.maxStep);
    if (next < params_.minStep) throwStepUnderflow(p, i, criterion, blockTime);
    bodyTime_[i] = blockTime;
    bodyStep_[i] = next;
    nextTime_[i] = blockTime + next;
    smallest = std::min(smallest, next);
    largest = std::max(largest, next);
  }
  counters_.smallestStep = smallest;
  counters_.largestStep = largest;
  integration += clock.seconds();
  clock.restart();
  loadJParticles(p, block_);
  force += clock.seconds();
  clock.restart();

  time_ = blockTime;
  ++counters_.blockSteps;
  counters_.bodySteps += n;
  counters_.interactions += static_cast<std::uint64_t>(n) * numBodies_;
  // The finished block is kept for the caller while the next one is searched into the other buffer.
  std::swap(block_, lastBlock_);
  findBlock();
  counters_.integrationSeconds += integration + clock.seconds();
  counters_.forceSeconds += force;
  return BlockStep{blockTime, lastBlock_};
}

void HermiteIntegrator::measurePotentials(Particles& p) {
  MATCHA_ASSERT(synchronized(), "HermiteIntegrator::measurePotentials: the bodies are not synchronised");
  const Stopwatch clock;
  // Every j-particle was handed over at time(): the prediction is over no time and gives the corrected state.
  engine_.predict(time_, numBodies_);
  computeForces(p, allBodies_, true, p.pot.data());
  counters_.diagnosticInteractions += static_cast<std::uint64_t>(numBodies_) * numBodies_;
  counters_.diagnosticSeconds += clock.seconds();
}

std::optional<HermiteIntegrator::BadValue> HermiteIntegrator::firstNonFinite(
    const Particles& p, std::span<const std::uint32_t> indices) const {
  for (const std::uint32_t i : indices) {
    // The force call's results before the corrector's, which are computed from them: the cause comes first.
    const double values[] = {p.ax[i], p.ay[i], p.az[i], jerk_[3 * i], jerk_[3 * i + 1], jerk_[3 * i + 2], p.pot[i],
                             p.x[i],  p.y[i],  p.z[i],  p.vx[i],      p.vy[i],          p.vz[i]};
    static constexpr const char* kNames[] = {"ax", "ay", "az", "jx", "jy", "jz", "pot",
                                             "x",  "y",  "z",  "vx", "vy", "vz"};
    for (std::size_t q = 0; q < std::size(values); ++q) {
      if (!std::isfinite(values[q])) return BadValue{i, kNames[q], values[q]};
    }
  }
  return std::nullopt;
}

void HermiteIntegrator::throwNonFinite(const Particles& p, const BadValue& bad, double at) const {
  const std::string shown = std::isnan(bad.value) ? "nan" : (bad.value > 0 ? "inf" : "-inf");
  char message[256];
  std::snprintf(message, sizeof message,
                "a value is not finite at block step %llu, t = %.17g: body id %llu (index %u): %s = %s",
                static_cast<unsigned long long>(counters_.blockSteps + 1), timeOrigin_ + at,
                static_cast<unsigned long long>(p.id[bad.index]), bad.index, bad.quantity, shown.c_str());
  throw NumericalError(message);
}

void HermiteIntegrator::throwStepUnderflow(const Particles& p, std::uint32_t i, double criterion, double at) {
  // The nearest neighbour says why: one more force call on this body alone, from the j-particles as last predicted.
  std::int64_t nearestId = -1;
  double nearestDistance2 = kInfinity;
  const double pos[3] = {p.x[i], p.y[i], p.z[i]};
  const double vel[3] = {p.vx[i], p.vy[i], p.vz[i]};
  const std::int64_t id = i;
  double acc[3], jerk[3], pot = 0.0;
  engine_.launchForces(IBlockView{&id, pos, vel, 1}, eps2_,
                       HermiteForceView{acc, jerk, &pot, &nearestId, &nearestDistance2, 1});
  engine_.finishForces();
  std::ostringstream message;
  message.precision(6);
  message << "body id " << p.id[i] << " (index " << i << "): its step fell below the smallest allowed, "
          << params_.minStep << ", at t = " << std::setprecision(17) << timeOrigin_ + at << std::setprecision(6)
          << " (Aarseth's criterion gave " << criterion << ")";
  if (nearestId >= 0 && static_cast<std::size_t>(nearestId) < p.size()) {
    message << "; its nearest neighbour, body id " << p.id[static_cast<std::size_t>(nearestId)] << ", is "
            << std::sqrt(nearestDistance2) << " away";
  }
  message << " with eps = " << eps_
          << (eps_ == 0.0 ? ": a close encounter that eps = 0 cannot resolve; give a softening (--eps) or a smaller "
                            "--min-step"
                          : ": give a larger softening (--eps) or a smaller --min-step");
  throw NumericalError(message.str());
}

void HermiteIntegrator::saveState(CheckpointState& state) const {
  MATCHA_ASSERT(synchronized(), "HermiteIntegrator::saveState: the bodies are not synchronised");
  state.doubles["hermite_jerk"] = jerk_;
  state.doubles["hermite_step"] = bodyStep_;
  state.set("hermite_time", time_);
  state.set("hermite_max_step", params_.maxStep);
  state.set("hermite_block_steps", static_cast<double>(counters_.blockSteps));
  state.set("hermite_body_steps", static_cast<double>(counters_.bodySteps));
  state.set("hermite_interactions", static_cast<double>(counters_.interactions));
  state.set("hermite_diagnostic_interactions", static_cast<double>(counters_.diagnosticInteractions));
  state.set("hermite_smallest_step", counters_.smallestStep);
  state.set("hermite_largest_step", counters_.largestStep);
}

void HermiteIntegrator::restore(const Particles& p, const CheckpointState& state) {
  prepare(p);
  const double time = state.scalar("hermite_time");
  if (state.scalar("hermite_max_step") != params_.maxStep) {
    std::ostringstream message;
    message << "the checkpoint's run has the largest step " << state.scalar("hermite_max_step") << ", this one "
            << params_.maxStep << ": a restart continues with its own (--max-step, --output-interval)";
    throw InputError(message.str());
  }
  if (!(std::isfinite(time) && time >= 0.0 && std::fmod(time, params_.maxStep) == 0.0)) {
    throw InputError("the checkpoint's hermite_time is not a synchronisation time");
  }
  const std::vector<double>& jerk = state.doubleArray("hermite_jerk");
  const std::vector<double>& steps = state.doubleArray("hermite_step");
  if (jerk.size() != 3 * numBodies_ || steps.size() != numBodies_) {
    throw InputError("the checkpoint's Hermite state does not match its " + std::to_string(numBodies_) + " bodies");
  }
  for (std::size_t i = 0; i < numBodies_; ++i) {
    if (!isPowerOfTwo(steps[i]) || steps[i] > params_.maxStep || steps[i] < params_.minStep) {
      throw InputError("the checkpoint's step of body index " + std::to_string(i) + " is not a power of two within " +
                       "the run's smallest and largest steps");
    }
  }
  jerk_ = jerk;
  bodyStep_ = steps;
  for (std::size_t i = 0; i < numBodies_; ++i) {
    bodyTime_[i] = time;
    nextTime_[i] = time + steps[i];
  }
  time_ = time;
  counters_.blockSteps = state.count("hermite_block_steps");
  counters_.bodySteps = state.count("hermite_body_steps");
  counters_.interactions = state.count("hermite_interactions");
  counters_.diagnosticInteractions = state.count("hermite_diagnostic_interactions");
  counters_.smallestStep = state.scalar("hermite_smallest_step");
  counters_.largestStep = state.scalar("hermite_largest_step");
  loadJParticles(p, allBodies_);
  initialized_ = true;
  findBlock();
}

}  // namespace matcha::integrator
