// SPDX-License-Identifier: MIT
// Why one body is hard for float direct summation: printed beside an E_max (Chamomile's max relative error), so that
// a seed that sets a new maximum says where and why.
#pragma once

#include <cstddef>
#include <string>

#include "matcha/core/params.hpp"
#include "matcha/core/particles.hpp"

namespace matcha::testing {

/// One line about body i of `bodies`, whose double direct-summation accelerations are in `reference`: its distance
/// from the origin, |a|, how much its pair terms cancel (the sum of their magnitudes over |a|: a float partial sum
/// errs at ~1e-7 of what it sums, so this ratio times 1e-7 is the error to expect), the share of that sum from
/// bodies within 5 eps, and its nearest neighbour in units of eps. O(N).
std::string describeCancellation(const Particles& bodies, const Particles& reference, std::size_t i,
                                 const GravityParams& gravity);

}  // namespace matcha::testing
