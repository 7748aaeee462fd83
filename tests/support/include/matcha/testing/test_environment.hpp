// SPDX-License-Identifier: MIT
// GoogleTest habits the test binaries share: floating-point traps for the whole binary, and a seed traced on failure
// and recorded in the XML report so that a fresh-seed failure can be replayed (MATCHA_TEST_SEED).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "matcha/testing/floating_point_traps.hpp"
#include "matcha/testing/generators.hpp"

namespace matcha::testing {

/// Turns NaN, division by zero and overflow into SIGFPE for every test of the binary (STYLE.md 11).
class FloatingPointTrapsEnvironment : public ::testing::Environment {
 public:
  void SetUp() override { enableFloatingPointTraps(); }
};

/// Registers FloatingPointTrapsEnvironment, once per binary, at namespace scope:
///   [[maybe_unused]] const auto* const kTraps = matcha::testing::trapFloatingPointInEveryTest();
inline ::testing::Environment* trapFloatingPointInEveryTest() {
  return ::testing::AddGlobalTestEnvironment(new FloatingPointTrapsEnvironment);
}

}  // namespace matcha::testing

/// Traces the seed on failure and records it in the XML report, so a failure can be replayed.
#define MATCHA_TRACE_SEED(seed)                     \
  SCOPED_TRACE(::matcha::testing::seedTrace(seed)); \
  RecordProperty("seed", std::to_string(seed))
