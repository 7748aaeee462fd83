// SPDX-License-Identifier: MIT
#pragma once

#include <chrono>
#include <ctime>

namespace matcha {

/// Wall-clock seconds since construction or the last restart().
class Stopwatch {
 public:
  Stopwatch() : start_(Clock::now()) {}
  void restart() { start_ = Clock::now(); }
  double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point start_;
};

/// CPU seconds this process has used so far, all its threads together (CLOCK_PROCESS_CPUTIME_ID): over an interval,
/// divided by its wall time, how many cores the process kept busy.
inline double processCpuSeconds() {
  timespec now{};
  if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now) != 0) return 0.0;
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}

}  // namespace matcha
