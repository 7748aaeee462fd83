// SPDX-License-Identifier: MIT
// |value / reference - 1| and an expectation on it that prints both numbers to all their digits: what tests against
// reference values (closed forms, high-precision references) check.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <iomanip>

namespace matcha::testing {

inline double relativeError(double value, double reference) { return std::abs(value / reference - 1.0); }

}  // namespace matcha::testing

#define EXPECT_RELATIVE(value, reference, tolerance)                                                               \
  EXPECT_LE(::matcha::testing::relativeError((value), (reference)), (tolerance))                                   \
      << #value << " = " << std::setprecision(17) << (value) << ", expected " << (reference) << " (" << #reference \
      << ")"
