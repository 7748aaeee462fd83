// SPDX-License-Identifier: MIT
// Bit-for-bit comparison of two sets of bodies, for tests that expect two ways of computing to agree exactly (a
// restarted run and the run that went on, an overlapped force call and the sequential one).
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <initializer_list>
#include <string>

#include "matcha/core/particles.hpp"

namespace matcha::testing {

/// Expects `actual` to hold the bodies of `expected` in the same order with the same positions, velocities and
/// accelerations (and potentials, `withPotentials`), bit for bit; `what` names the comparison in failures.
inline void expectSameBodiesBitForBit(const Particles& expected, const Particles& actual, const std::string& what,
                                      bool withPotentials = true) {
  ASSERT_EQ(actual.id, expected.id) << "the bodies' order differs " << what;
  for (const auto member : {&Particles::x, &Particles::y, &Particles::z, &Particles::vx, &Particles::vy, &Particles::vz,
                            &Particles::ax, &Particles::ay, &Particles::az, &Particles::pot}) {
    if (member == &Particles::pot && !withPotentials) continue;
    std::size_t differing = 0;
    for (std::size_t i = 0; i < expected.size(); ++i) differing += (actual.*member)[i] != (expected.*member)[i];
    EXPECT_EQ(differing, 0u) << "bodies whose state differs " << what;
  }
}

}  // namespace matcha::testing
