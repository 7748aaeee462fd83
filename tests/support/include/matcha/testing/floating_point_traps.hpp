// SPDX-License-Identifier: MIT
// Turns NaN (invalid), division by zero and overflow into SIGFPE, so a NaN from an eps = 0 self term fails a test
// loudly instead of slipping through a comparison (STYLE.md habit 11, SWIFT's habit). glibc only; elsewhere a no-op.
#pragma once

#include <cfenv>

namespace matcha::testing {

inline constexpr int kTrappedExceptions = FE_INVALID | FE_DIVBYZERO | FE_OVERFLOW;

/// Enables the traps in the calling thread and in threads created after the call (they inherit the FP state).
inline void enableFloatingPointTraps() {
#if defined(__GLIBC__)
  std::feclearexcept(FE_ALL_EXCEPT);
  feenableexcept(kTrappedExceptions);
#endif
}

inline void disableFloatingPointTraps() {
#if defined(__GLIBC__)
  fedisableexcept(kTrappedExceptions);
#endif
}

/// Traps for one scope.
class ScopedFloatingPointTraps {
 public:
  ScopedFloatingPointTraps() { enableFloatingPointTraps(); }
  ~ScopedFloatingPointTraps() { disableFloatingPointTraps(); }
  ScopedFloatingPointTraps(const ScopedFloatingPointTraps&) = delete;
  ScopedFloatingPointTraps& operator=(const ScopedFloatingPointTraps&) = delete;
};

}  // namespace matcha::testing
