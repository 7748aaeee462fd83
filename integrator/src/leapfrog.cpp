// SPDX-License-Identifier: MIT
#include "matcha/integrator/leapfrog.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_reduce.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "matcha/core/errors.hpp"
#include "matcha/core/params.hpp"
#include "matcha/core/stopwatch.hpp"

namespace matcha::integrator {

namespace {

/// Fewest bodies per TBB task. A kick or drift is 3 multiply-adds over 9 arrays per body, about a nanosecond, so a
/// block of 2048 is worth a task (a task costs about a microsecond); a few thousand bodies already use two threads.
constexpr std::size_t kBodiesPerTask = 2048;

/// out[i] += in[i] * dt for the three components, on every body, in blocks over the TBB threads.
void addScaled(std::vector<double>& outX, std::vector<double>& outY, std::vector<double>& outZ,
               const std::vector<double>& inX, const std::vector<double>& inY, const std::vector<double>& inZ,
               double dt) {
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, outX.size(), kBodiesPerTask),
                    [&](const tbb::blocked_range<std::size_t>& block) {
                      for (std::size_t i = block.begin(); i < block.end(); ++i) {
                        outX[i] += inX[i] * dt;
                        outY[i] += inY[i] * dt;
                        outZ[i] += inZ[i] * dt;
                      }
                    });
}

/// Whether x - x is 0 for every value summed into `probe`: x - x is 0 for a finite x and NaN otherwise, so one sum
/// per block, which the loops vectorise, carries every check.
inline bool allFinite(double probe) { return probe == 0.0; }  // NaN == 0 is false

/// [kick(p, closingDt)] then kick(p, openingDt) then drift(p, driftDt), in one pass over the bodies (kClosing: with the
/// closing kick, a step's last, which LeapfrogKDK::step may leave to the next step's pass), rounded as the separate
/// passes: each velocity's sum is stored as a double before the next operation reads it, whatever the compiler may
/// fuse (the integrator builds with -ffp-contract=off, which the bit-for-bit engines' copies rely on). Returns whether
/// every new position and velocity is finite. One pass reads x, v and a once (9 arrays, 6 written back) where the
/// separate kicks and drift read 12 or 15: at 2^22 bodies the step's host integration is memory bound (~10 ms on the
/// H200's host with two passes a step). With boxSize > 0 the positions are wrapped into [0, boxSize)^3 in the same
/// pass (wrapIntoBox, bit for bit): the loop only flags a block with a body outside, whose positions, still in cache,
/// are then wrapped one by one (a separate pass read and wrote every position again).
template <bool kClosing, bool kWrap>
bool kicksThenDrift(Particles& p, double closingDt, double openingDt, double driftDt, double boxSize) {
  return tbb::parallel_reduce(
      tbb::blocked_range<std::size_t>(0, p.size(), kBodiesPerTask), true,
      [&](const tbb::blocked_range<std::size_t>& block, bool finite) {
        // Distinct arrays: restrict lets the loop vectorise without reloading what it just stored.
        double* __restrict x = p.x.data();
        double* __restrict y = p.y.data();
        double* __restrict z = p.z.data();
        double* __restrict vx = p.vx.data();
        double* __restrict vy = p.vy.data();
        double* __restrict vz = p.vz.data();
        const double* __restrict ax = p.ax.data();
        const double* __restrict ay = p.ay.data();
        const double* __restrict az = p.az.data();
        double probe = 0.0;
        int outside = 0;
        for (std::size_t i = block.begin(); i < block.end(); ++i) {
          if constexpr (kClosing) {
            vx[i] += ax[i] * closingDt;
            vy[i] += ay[i] * closingDt;
            vz[i] += az[i] * closingDt;
          }
          vx[i] += ax[i] * openingDt;
          vy[i] += ay[i] * openingDt;
          vz[i] += az[i] * openingDt;
          x[i] += vx[i] * driftDt;
          y[i] += vy[i] * driftDt;
          z[i] += vz[i] * driftDt;
          if constexpr (kWrap) {
            // wrapIntoBox's value for a coordinate inside the box (-0.0 becomes +0.0); NaN counts as outside.
            x[i] += 0.0;
            y[i] += 0.0;
            z[i] += 0.0;
            outside |= int(!(x[i] >= 0.0 && x[i] < boxSize)) | int(!(y[i] >= 0.0 && y[i] < boxSize)) |
                       int(!(z[i] >= 0.0 && z[i] < boxSize));
          }
          probe += (x[i] - x[i]) + (y[i] - y[i]) + (z[i] - z[i]) + (vx[i] - vx[i]) + (vy[i] - vy[i]) + (vz[i] - vz[i]);
        }
        if (kWrap && outside != 0) {
          for (std::size_t i = block.begin(); i < block.end(); ++i) {
            x[i] = wrapIntoBox(x[i], boxSize);
            y[i] = wrapIntoBox(y[i], boxSize);
            z[i] = wrapIntoBox(z[i], boxSize);
          }
        }
        return finite && allFinite(probe);
      },
      [](bool a, bool b) { return a && b; });
}

/// Whether every acceleration (and with `checkPotential` every potential) is finite: what a step whose closing kick
/// waits checks right after its force call, reading 3-4 arrays instead of the kick's 10.
bool forcesFinite(const Particles& p, bool checkPotential) {
  return tbb::parallel_reduce(
      tbb::blocked_range<std::size_t>(0, p.size(), kBodiesPerTask), true,
      [&](const tbb::blocked_range<std::size_t>& block, bool finite) {
        double probe = 0.0;
        for (std::size_t i = block.begin(); i < block.end(); ++i) {
          probe += (p.ax[i] - p.ax[i]) + (p.ay[i] - p.ay[i]) + (p.az[i] - p.az[i]) +
                   (checkPotential ? p.pot[i] - p.pot[i] : 0.0);
        }
        return finite && allFinite(probe);
      },
      [](bool a, bool b) { return a && b; });
}

/// The kick of kick(), also telling whether the kicked state, positions, velocities, accelerations and (with
/// `checkPotential`) potentials, is all finite (allFinite).
bool kickAndCheckFinite(Particles& p, double dt, bool checkPotential) {
  return tbb::parallel_reduce(
      tbb::blocked_range<std::size_t>(0, p.size(), kBodiesPerTask), true,
      [&](const tbb::blocked_range<std::size_t>& block, bool finite) {
        double probe = 0.0;
        for (std::size_t i = block.begin(); i < block.end(); ++i) {
          p.vx[i] += p.ax[i] * dt;
          p.vy[i] += p.ay[i] * dt;
          p.vz[i] += p.az[i] * dt;
          probe += (p.x[i] - p.x[i]) + (p.y[i] - p.y[i]) + (p.z[i] - p.z[i]) + (p.vx[i] - p.vx[i]) +
                   (p.vy[i] - p.vy[i]) + (p.vz[i] - p.vz[i]) + (p.ax[i] - p.ax[i]) + (p.ay[i] - p.ay[i]) +
                   (p.az[i] - p.az[i]) + (checkPotential ? p.pot[i] - p.pot[i] : 0.0);
        }
        return finite && allFinite(probe);
      },
      [](bool a, bool b) { return a && b; });
}

}  // namespace

double maxAcceleration(const Particles& p) {
  // Comparisons with a NaN raise FE_INVALID (and max may compile to maxsd, which does so for any NaN), so only finite
  // squares are compared; the first non-finite one found is kept aside and wins (isfinite tests bits, quietly).
  struct Largest {
    double finite = 0.0;
    double nonFinite = 0.0;  ///< a NaN or inf square, or 0 when none was found
  };
  const Largest largest = tbb::parallel_reduce(
      tbb::blocked_range<std::size_t>(0, p.size(), kBodiesPerTask), Largest{},
      [&](const tbb::blocked_range<std::size_t>& block, Largest found) {
        for (std::size_t i = block.begin(); i < block.end(); ++i) {
          const double a2 = p.ax[i] * p.ax[i] + p.ay[i] * p.ay[i] + p.az[i] * p.az[i];
          if (std::isfinite(a2)) {
            found.finite = std::max(found.finite, a2);
          } else if (found.nonFinite == 0.0) {
            found.nonFinite = a2;
          }
        }
        return found;
      },
      [](Largest a, const Largest& b) {
        a.finite = std::max(a.finite, b.finite);
        if (a.nonFinite == 0.0) a.nonFinite = b.nonFinite;
        return a;
      });
  return std::sqrt(largest.nonFinite != 0.0 ? largest.nonFinite : largest.finite);
}

std::optional<NonFiniteValue> findNonFinite(const Particles& p, bool checkPotential) {
  const std::size_t none = std::numeric_limits<std::size_t>::max();
  const auto finiteBody = [&](std::size_t i) {
    bool finite = std::isfinite(p.x[i]) && std::isfinite(p.y[i]) && std::isfinite(p.z[i]) && std::isfinite(p.vx[i]) &&
                  std::isfinite(p.vy[i]) && std::isfinite(p.vz[i]) && std::isfinite(p.ax[i]) &&
                  std::isfinite(p.ay[i]) && std::isfinite(p.az[i]);
    return finite && (!checkPotential || std::isfinite(p.pot[i]));
  };
  const std::size_t first = tbb::parallel_reduce(
      tbb::blocked_range<std::size_t>(0, p.size(), kBodiesPerTask), none,
      [&](const tbb::blocked_range<std::size_t>& block, std::size_t found) {
        for (std::size_t i = block.begin(); i < block.end() && i < found; ++i) {
          if (!finiteBody(i)) return i;
        }
        return found;
      },
      [](std::size_t a, std::size_t b) { return std::min(a, b); });
  if (first == none) return std::nullopt;
  // In the order a step makes them (drift, force call, kick), so that the value named is the cause rather than what
  // the step computed from it: a NaN acceleration, not the velocity the kick made NaN with it.
  const std::pair<const char*, const std::vector<double>*> quantities[] = {
      {"x", &p.x},   {"y", &p.y},     {"z", &p.z},   {"ax", &p.ax}, {"ay", &p.ay},
      {"az", &p.az}, {"pot", &p.pot}, {"vx", &p.vx}, {"vy", &p.vy}, {"vz", &p.vz}};
  for (const auto& [name, values] : quantities) {
    if (values == &p.pot && !checkPotential) continue;
    if (!std::isfinite((*values)[first])) return NonFiniteValue{first, p.id[first], name, (*values)[first]};
  }
  return std::nullopt;  // unreachable: finiteBody found one
}

std::uint8_t alignedTimeBin(std::uint64_t tick) {
  if (tick == 0) return 0;
  const int zeros = std::countr_zero(tick);
  return static_cast<std::uint8_t>(zeros >= kDeepestTimeBin ? 0 : kDeepestTimeBin - zeros);
}

std::uint8_t timeBinFor(double acceleration, double binScale) {
  const double ratio = binScale * std::sqrt(acceleration);  // the long-range step over the body's limit
  if (!(ratio > 1.0)) return 0;                             // within the limit, or no acceleration (NaN: the check's)
  // ceil(log2(ratio)) read off the bits: the exponent of ratio = 1.m x 2^e, plus one unless ratio is 2^e itself.
  // Exact, where std::ceil(std::log2()) rounded log2 of a ratio a few ulps above 2^e down to e (and took two libm
  // calls: 18-20 ns a body against 7-8 on one core of the 2-core build machine). +inf: the deepest bin.
  const auto bits = std::bit_cast<std::uint64_t>(ratio);
  constexpr std::uint64_t kMantissa = (std::uint64_t{1} << 52) - 1;
  const int bin = static_cast<int>(bits >> 52) - 1023 + ((bits & kMantissa) != 0 ? 1 : 0);
  return static_cast<std::uint8_t>(std::min(bin, int{kDeepestTimeBin}));
}

std::uint8_t finestTimeBin(const Particles& p) {
  return tbb::parallel_reduce(
      tbb::blocked_range<std::size_t>(0, p.timeBin.size(), 1 << 16), std::uint8_t{0},
      [&](const tbb::blocked_range<std::size_t>& block, std::uint8_t finest) {
        for (std::size_t i = block.begin(); i < block.end(); ++i) finest = std::max(finest, p.timeBin[i]);
        return finest;
      },
      [](std::uint8_t a, std::uint8_t b) { return std::max(a, b); });
}

void kick(Particles& p, double dt) { addScaled(p.vx, p.vy, p.vz, p.ax, p.ay, p.az, dt); }

void drift(Particles& p, double dt) { addScaled(p.x, p.y, p.z, p.vx, p.vy, p.vz, dt); }

LeapfrogKDK::LeapfrogKDK(ForceSolver& solver, double dt, double boxSize) : solver_(solver), dt_(dt), boxSize_(boxSize) {
  requireFinite(dt, "dt");
  if (dt <= 0.0) throw InputError("dt must be > 0 (got " + std::to_string(dt) + ")");
  requireFinite(boxSize, "box");
  if (boxSize < 0.0)
    throw InputError("box must be > 0, or 0 for open boundaries (got " + std::to_string(boxSize) + ")");
}

LeapfrogKDK::LeapfrogKDK(ForceSolver& solver, VariableSteps, double boxSize)
    : solver_(solver), dt_(0.0), boxSize_(boxSize) {
  requireFinite(boxSize, "box");
  if (boxSize < 0.0)
    throw InputError("box must be > 0, or 0 for open boundaries (got " + std::to_string(boxSize) + ")");
}

LeapfrogKDK::~LeapfrogKDK() { solver_.expectAdvance(std::nullopt); }

ForceReport LeapfrogKDK::initialize(Particles& p) {
  synchronize(p);  // a closing kick left needs the accelerations this call overwrites
  solver_.setLongRangeDue(true);
  announceAdvance(true);
  const ForceReport report = solver_.computeForces(p);
  announceAdvance();  // from the end of step 1's call on
  initialized_ = true;
  return report;
}

std::optional<NonFiniteValue> LeapfrogKDK::findNonFiniteForces(const Particles& p) const {
  return findNonFinite(p, solver_.potentialsWanted());
}

StepReport LeapfrogKDK::step(Particles& p, ClosingKick closing) {
  MATCHA_ASSERT(!variableSteps(), "LeapfrogKDK::step without factors on a leapfrog of variable steps");
  return step(p, KdkStep{0.5 * dt_, dt_, 0.5 * dt_}, closing);
}

void LeapfrogKDK::kickWithLongRange(Particles& p, double factor) {
  const AccelerationView longRange = longRangeOf(p);
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, p.size(), kBodiesPerTask),
                    [&](const tbb::blocked_range<std::size_t>& block) {
                      for (std::size_t i = block.begin(); i < block.end(); ++i) {
                        p.vx[i] += longRange.ax[i] * factor;
                        p.vy[i] += longRange.ay[i] * factor;
                        p.vz[i] += longRange.az[i] * factor;
                      }
                    });
}

namespace {

/// For one call of a block step: asks the solver for the forces of some bodies only (ForceSolver::setLowestActiveBin)
/// and tells it how the bodies moved since its last call (setBodyDrift, in a periodic box); on every path out, asks for
/// every body again and takes the word back.
class BlockCallScope {
 public:
  BlockCallScope(ForceSolver& solver, std::uint8_t bin, const std::optional<BodyDrift>& drift) : solver_(solver) {
    solver_.setLowestActiveBin(bin);
    solver_.setBodyDrift(drift);
  }
  ~BlockCallScope() {
    solver_.setLowestActiveBin(0);
    solver_.setBodyDrift(std::nullopt);
    solver_.takePendingDrift();  // a call that threw: its drift (which refers to this step) is dropped
  }
  BlockCallScope(const BlockCallScope&) = delete;
  BlockCallScope& operator=(const BlockCallScope&) = delete;

 private:
  ForceSolver& solver_;
};

/// Body i's kick of a block step: its bin's factor k for the whole acceleration, and where the long range is apart
/// (`longRange`, at a long-range step's ends) its own factor for that part: acc holds their sum, so the long range
/// takes longFactor - k. Each product and sum rounded on its own (this file builds with -ffp-contract=off).
inline void binKick(Particles& p, std::size_t i, double k, const AccelerationView& longRange, double longFactor) {
  p.vx[i] += p.ax[i] * k;
  p.vy[i] += p.ay[i] * k;
  p.vz[i] += p.az[i] * k;
  if (longRange.count != 0) {
    p.vx[i] += longRange.ax[i] * (longFactor - k);
    p.vy[i] += longRange.ay[i] * (longFactor - k);
    p.vz[i] += longRange.az[i] * (longFactor - k);
  }
}

}  // namespace

void LeapfrogKDK::blockStep(Particles& p, const KdkStep& factors, StepReport& report) {
  const BinnedStep& block = *factors.block;
  MATCHA_ASSERT(block.tick < block.nextTick && block.nextTick <= kTicksPerLongStep &&
                    block.nextTick - block.tick ==
                        (std::uint64_t{1} << (kDeepestTimeBin - alignedTimeBin(block.nextTick - block.tick))),
                "a block step that is not one step of a bin");
  MATCHA_ASSERT(factors.longRangeAtEnd == block.endsLongStep(),
                "a block step whose long range is not due exactly at the long-range step's end");
  Stopwatch clock;
  synchronize(p);  // a closing kick a global step left
  const std::size_t n = p.size();
  const bool start = block.tick == 0;
  if (start) p.timeBin.resize(n);
  MATCHA_ASSERT(p.timeBin.size() == n, "block time steps without bins: the long-range step did not start at tick 0");
  // At the long-range step's ends the long range kicks with its own factor and the short range with each body's:
  // acc holds their sum, the solver the long range alone.
  AccelerationView openingLong;
  if (start && factors.longRangeOpeningKick != 0.0) openingLong = longRangeOf(p);
  const double longOpening = factors.longRangeOpeningKick;
  const std::uint8_t openingFrom = alignedTimeBin(block.tick);
  const double drift = factors.drift;
  const bool wrap = boxSize_ > 0.0;
  // The opening pass: the kicks of the bodies whose steps begin here (at the long-range step's start every body's, its
  // bin set first), then every body's drift, folded into the box. Where the solver takes the drift into its call
  // (takesPendingDrift) the pass makes the kicks alone and hands the drift over, to be made while the engine
  // evaluates; each body's arithmetic is the same either way, and so are the bits.
  const auto opening = [&]<bool kKick, bool kDrift>() {
    return tbb::parallel_reduce(
        tbb::blocked_range<std::size_t>(0, n, kBodiesPerTask), true,
        [&](const tbb::blocked_range<std::size_t>& range, bool finite) {
          double probe = 0.0;
          int outside = 0;
          for (std::size_t i = range.begin(); i < range.end(); ++i) {
            if constexpr (kKick) {
              if (start) {
                const double a2 = p.ax[i] * p.ax[i] + p.ay[i] * p.ay[i] + p.az[i] * p.az[i];
                p.timeBin[i] = timeBinFor(std::sqrt(a2), block.openingBinScale);
              }
              const std::uint8_t bin = p.timeBin[i];
              if (bin >= openingFrom) {
                binKick(p, i, block.openingKick[bin], openingLong, longOpening);
              }
            }
            if constexpr (kDrift) {
              p.x[i] += p.vx[i] * drift;
              p.y[i] += p.vy[i] * drift;
              p.z[i] += p.vz[i] * drift;
              if (wrap) {
                // As kicksThenDrift: flag the block, wrap it below (-0.0 becomes +0.0 here, as wrapIntoBox does).
                p.x[i] += 0.0;
                p.y[i] += 0.0;
                p.z[i] += 0.0;
                outside |= int(!(p.x[i] >= 0.0 && p.x[i] < boxSize_)) | int(!(p.y[i] >= 0.0 && p.y[i] < boxSize_)) |
                           int(!(p.z[i] >= 0.0 && p.z[i] < boxSize_));
              }
              probe += (p.x[i] - p.x[i]) + (p.y[i] - p.y[i]) + (p.z[i] - p.z[i]) + (p.vx[i] - p.vx[i]) +
                       (p.vy[i] - p.vy[i]) + (p.vz[i] - p.vz[i]);
            }
          }
          if (outside != 0) {
            for (std::size_t i = range.begin(); i < range.end(); ++i) {
              p.x[i] = wrapIntoBox(p.x[i], boxSize_);
              p.y[i] = wrapIntoBox(p.y[i], boxSize_);
              p.z[i] = wrapIntoBox(p.z[i], boxSize_);
            }
          }
          return finite && allFinite(probe);
        },
        [](bool a, bool b) { return a && b; });
  };
  // Not where the call computes the long range: the mesh reads the positions first.
  const bool driftInCall = wrap && !factors.longRangeAtEnd && solver_.takesPendingDrift();
  bool openingFinite =
      driftInCall ? opening.template operator()<true, false>() : opening.template operator()<true, true>();
  report.integrationSeconds = clock.seconds();

  const std::uint8_t closingFrom = alignedTimeBin(block.nextTick);
  if (solver_.longRangeStepsOn()) solver_.setLongRangeDue(factors.longRangeAtEnd);
  {
    // Since the last call (the closing pass of the step before, this opening pass) the bodies of bin >= openingFrom
    // were kicked, every body at the long-range step's start, and all drifted (and were wrapped, in a box).
    std::optional<BodyDrift> moved;
    if (wrap) moved = BodyDrift{drift, boxSize_, start ? std::uint8_t{0} : openingFrom};
    const BlockCallScope call(solver_, closingFrom, moved);
    if (driftInCall) {
      // Timed whole, as integration, though it overlaps the call's phases.
      solver_.setPendingDrift([&] {
        const Stopwatch drifting;
        openingFinite = opening.template operator()<false, true>() && openingFinite;
        report.driftInCallSeconds = drifting.seconds();
        report.integrationSeconds += report.driftInCallSeconds;
      });
    }
    report.force = solver_.computeForces(p);  // may permute the bodies, their bins with them
    solver_.runPendingDrift();                // where the call did not
  }
  clock.restart();
  AccelerationView closingLong;
  if (block.endsLongStep() && factors.longRangeClosingKick != 0.0) closingLong = longRangeOf(p);
  const double longClosing = factors.longRangeClosingKick;
  const bool checkPotential = solver_.potentialsWanted();
  const bool ends = block.endsLongStep();
  // The call may have changed the bodies as well as their order: a solver over several ranks moves bodies between
  // them (each body's bin with it).
  MATCHA_ASSERT(p.timeBin.size() == p.size(), "the force call left bodies without bins");
  struct Closed {
    bool finite = true;
    std::uint64_t bodies = 0;
  };
  const Closed closed = tbb::parallel_reduce(
      tbb::blocked_range<std::size_t>(0, p.size(), kBodiesPerTask), Closed{},
      [&](const tbb::blocked_range<std::size_t>& range, Closed done) {
        double probe = 0.0;
        for (std::size_t i = range.begin(); i < range.end(); ++i) {
          const std::uint8_t bin = p.timeBin[i];
          if (bin < closingFrom) continue;
          ++done.bodies;
          binKick(p, i, block.closingKick[bin], closingLong, longClosing);
          const double a2 = p.ax[i] * p.ax[i] + p.ay[i] * p.ay[i] + p.az[i] * p.az[i];
          if (!ends) p.timeBin[i] = std::max(timeBinFor(std::sqrt(a2), block.closingBinScale), closingFrom);
          probe += (a2 - a2) + (p.vx[i] - p.vx[i]) + (p.vy[i] - p.vy[i]) + (p.vz[i] - p.vz[i]) +
                   (checkPotential ? p.pot[i] - p.pot[i] : 0.0);
        }
        done.finite = done.finite && allFinite(probe);
        return done;
      },
      [](Closed a, const Closed& b) {
        return Closed{a.finite && b.finite, a.bodies + b.bodies};
      });
  report.bodiesStepped = closed.bodies;
  if (!(openingFinite && closed.finite)) report.nonFinite = findNonFinite(p, checkPotential);
  report.integrationSeconds += clock.seconds();
}

AccelerationView LeapfrogKDK::longRangeOf(Particles& p) {
  AccelerationView longRange = solver_.lastLongRange();
  if (longRange.count != p.size()) {
    solver_.computeLongRange(p);
    longRange = solver_.lastLongRange();
  }
  MATCHA_ASSERT(longRange.count == p.size(), "the solver kept no long range for the long-range kick");
  return longRange;
}

StepReport LeapfrogKDK::step(Particles& p, const KdkStep& factors, ClosingKick closing) {
  MATCHA_ASSERT(initialized_, "LeapfrogKDK::step called before initialize");
  if (factors.block) {
    MATCHA_ASSERT(solver_.longRangeStepsOn(), "block time steps need long-range steps (a periodic TreePM solver)");
    StepReport report;
    const Stopwatch wall;
    const double cpuAtStart = processCpuSeconds();
    blockStep(p, factors, report);
    ++stepsTaken_;
    report.wallSeconds = wall.seconds();
    report.cpuSeconds = processCpuSeconds() - cpuAtStart;
    return report;
  }
  const bool longRangeSteps = solver_.longRangeStepsOn();
  MATCHA_ASSERT(longRangeSteps || (factors.longRangeAtEnd && factors.longRangeOpeningKick == 0.0 &&
                                   factors.longRangeClosingKick == 0.0),
                "a long-range step given to a leapfrog whose solver does not take long-range steps");
  MATCHA_ASSERT(factors.longRangeAtEnd || factors.longRangeClosingKick == 0.0,
                "a long-range closing kick on a step whose call leaves the long range out");
  StepReport report;
  const Stopwatch wall;
  const double cpuAtStart = processCpuSeconds();
  Stopwatch clock;
  // The long range's shares of the kicks at a long-range step's start, in the order a synchronised state takes them:
  // the last step's closing kick, the long range's share of it, the long range's share of this opening kick (then the
  // pass below makes the opening kick and the drift), so that a run is the same bit for bit wherever it synchronises.
  const double openingLongRange =
      factors.longRangeOpeningKick != 0.0 ? factors.longRangeOpeningKick - factors.openingKick : 0.0;
  if (closingKickPending_ && (pendingLongRangeClosing_ != 0.0 || openingLongRange != 0.0)) {
    kick(p, pendingClosingKick_);
    closingKickPending_ = false;
  }
  if (pendingLongRangeClosing_ != 0.0) kickWithLongRange(p, pendingLongRangeClosing_);
  pendingLongRangeClosing_ = 0.0;
  if (openingLongRange != 0.0) kickWithLongRange(p, openingLongRange);
  const double closingDt = closingKickPending_ ? pendingClosingKick_ : 0.0;
  const auto pass = [&]<bool kClosing, bool kWrap>() {
    return kicksThenDrift<kClosing, kWrap>(p, closingDt, factors.openingKick, factors.drift, boxSize_);
  };
  bool finite = false;
  if (boxSize_ > 0.0) {
    finite = closingKickPending_ ? pass.template operator()<true, true>() : pass.template operator()<false, true>();
  } else {
    finite = closingKickPending_ ? pass.template operator()<true, false>() : pass.template operator()<false, false>();
  }
  closingKickPending_ = false;
  report.integrationSeconds = clock.seconds();
  if (longRangeSteps) solver_.setLongRangeDue(factors.longRangeAtEnd);
  // The solver may permute the bodies here; kick and drift are elementwise, so nothing indexed survives the call.
  report.force = solver_.computeForces(p);
  clock.restart();
  const bool checkPotential = solver_.potentialsWanted();
  const double closingLongRange =
      factors.longRangeClosingKick != 0.0 ? factors.longRangeClosingKick - factors.closingKick : 0.0;
  if (closing == ClosingKick::now) {
    finite = kickAndCheckFinite(p, factors.closingKick, checkPotential) && finite;
    if (closingLongRange != 0.0) kickWithLongRange(p, closingLongRange);
  } else {
    finite = forcesFinite(p, checkPotential) && finite;
    closingKickPending_ = true;
    pendingClosingKick_ = factors.closingKick;
    pendingLongRangeClosing_ = closingLongRange;
  }
  if (!finite) report.nonFinite = findNonFinite(p, checkPotential);
  report.integrationSeconds += clock.seconds();
  report.bodiesStepped = p.size();
  ++stepsTaken_;
  report.wallSeconds = wall.seconds();
  report.cpuSeconds = processCpuSeconds() - cpuAtStart;
  return report;
}

double LeapfrogKDK::synchronize(Particles& p) {
  if (!closingKickPending_) return 0.0;
  const Stopwatch clock;
  kick(p, pendingClosingKick_);
  closingKickPending_ = false;
  if (pendingLongRangeClosing_ != 0.0) kickWithLongRange(p, pendingLongRangeClosing_);
  pendingLongRangeClosing_ = 0.0;
  return clock.seconds();
}

}  // namespace matcha::integrator
