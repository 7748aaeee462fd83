// SPDX-License-Identifier: MIT
// One long-range step of block time steps (integrator/leapfrog.hpp: BinnedStep) driven as the comoving schedule drives
// them, with fixed factors in place of the cosmology's: for tests of what the solvers and engines do within one.
// Header-only; a test that includes it links matcha::integrator.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "matcha/core/particles.hpp"
#include "matcha/integrator/leapfrog.hpp"

namespace matcha::testing {

/// Steps `p` with `leapfrog` (variable steps, on a solver that takes long-range steps) over one long-range step of
/// length `longStep`: each body in the bin timeBinFor(|a|, binScale) gives it at the step's start (and its closing
/// calls after), the finest bin setting each call; every bin's kicks `kickScale` times half its step (longStep /
/// 2^bin), the long range's kicks `kickScale` times half the long step, the drift each call's own span. After each
/// call, `afterCall(report)`. Returns the calls made.
template <class AfterCall>
int takeBlockLongStep(integrator::LeapfrogKDK& leapfrog, Particles& p, double longStep, double binScale,
                      double kickScale, AfterCall&& afterCall) {
  namespace mi = integrator;
  int calls = 0;
  std::uint64_t tick = 0;
  while (tick < mi::kTicksPerLongStep) {
    mi::BinnedStep block;
    block.tick = tick;
    block.openingBinScale = block.closingBinScale = binScale;
    const std::uint8_t finest = tick == 0 ? mi::timeBinFor(mi::maxAcceleration(p), binScale) : mi::finestTimeBin(p);
    block.nextTick = tick + (std::uint64_t{1} << (mi::kDeepestTimeBin - finest));
    for (std::size_t bin = 0; bin < mi::kNumTimeBins; ++bin) {
      block.openingKick[bin] = block.closingKick[bin] = kickScale * 0.5 * longStep * std::ldexp(1.0, -int(bin));
    }
    mi::KdkStep factors;
    factors.drift = double(block.nextTick - tick) * (longStep / double(mi::kTicksPerLongStep));
    factors.longRangeAtEnd = block.endsLongStep();
    if (tick == 0) factors.longRangeOpeningKick = kickScale * 0.5 * longStep;
    if (block.endsLongStep()) factors.longRangeClosingKick = kickScale * 0.5 * longStep;
    factors.block = block;
    const mi::StepReport report = leapfrog.step(p, factors);
    ++calls;
    tick = block.nextTick;
    afterCall(report);
  }
  return calls;
}

}  // namespace matcha::testing
