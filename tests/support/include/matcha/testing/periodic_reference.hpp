// SPDX-License-Identifier: MIT
// The periodic short range by brute force, the reference of the periodic tree's tests (tests/mesh): every pair at its
// nearest image, the erfc-truncated pair of core/pair_interaction.hpp, in double.
#pragma once

#include <vector>

#include "matcha/core/params.hpp"
#include "matcha/core/particles.hpp"

namespace matcha::testing {

/// `p` with its accelerations and potentials replaced by the short range of gravity.periodic summed over every other
/// body at its nearest image (O(N^2): tests' sizes), in double; the bodies stay in their order and may lie anywhere.
Particles bruteForceShortRange(Particles p, const GravityParams& gravity);

/// Per body of `computed`, |a - a_reference| over the rms |a_reference| (short-range pulls nearly vanish for some
/// bodies, so per-body relative errors would measure those), the reference body found by id: the two may be in other
/// orders (a tree solver sorts its bodies).
std::vector<double> errorsOverRmsById(const Particles& computed, const Particles& reference);

}  // namespace matcha::testing
