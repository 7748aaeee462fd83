// SPDX-License-Identifier: MIT
#include "c_boundary.hpp"

#include <cerrno>
#include <cstdlib>
#include <string_view>

namespace matcha::lib {

EngineKind engineKindFromEnvironment() {
  const char* value = std::getenv("MATCHA_ENGINE");
  const std::string_view text = value != nullptr ? value : "";
  if (text.empty() || text == "auto") return EngineKind::automatic;
  if (text == "cpu") return EngineKind::cpu;
  if (text == "cuda") return EngineKind::cuda;
  throw EngineError("MATCHA_ENGINE must be auto, cpu or cuda, not '" + std::string(text) + "'");
}

long long integerFromEnvironment(const char* name, long long fallback, long long max) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  const long long parsed = std::strtoll(value, &end, 10);
  if (errno != 0 || *end != '\0' || parsed < 1 || parsed > max) {
    throw EngineError(std::string(name) + " must be an integer from 1 to " + std::to_string(max) + ", not '" + value +
                      "'");
  }
  return parsed;
}

}  // namespace matcha::lib
