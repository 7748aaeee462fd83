// SPDX-License-Identifier: MIT
#pragma once

#include <chrono>

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

}  // namespace matcha
