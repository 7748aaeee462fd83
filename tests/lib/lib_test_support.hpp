// SPDX-License-Identifier: MIT
// What the C libraries' tests share: the engine check of MATCHA_ENGINE and scoped environment variables.
#pragma once

#include <cstdlib>
#include <string>

#include "matcha/gpu/engine_factory.hpp"

namespace matcha::testing {

/// True, with the reason, when the test must skip: when MATCHA_ENGINE asks for CUDA on a machine without a GPU.
inline bool engineUnavailable(std::string& why) {
  const char* engine = std::getenv("MATCHA_ENGINE");
  if (engine == nullptr || std::string(engine) != "cuda") return false;
  const gpu::CudaDeviceInfo device = gpu::queryCudaDevice();
  why = "MATCHA_ENGINE=cuda and no CUDA device: " + device.description;
  return !device.available;
}

/// Sets an environment variable for one scope.
class ScopedEnvironment {
 public:
  ScopedEnvironment(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) {
      old_ = old;
      hadOld_ = true;
    }
    setenv(name, value, 1);
  }
  ScopedEnvironment(const ScopedEnvironment&) = delete;
  ScopedEnvironment& operator=(const ScopedEnvironment&) = delete;
  ~ScopedEnvironment() {
    if (hadOld_) {
      setenv(name_.c_str(), old_.c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }

 private:
  std::string name_, old_;
  bool hadOld_ = false;
};

}  // namespace matcha::testing
