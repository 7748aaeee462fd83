// SPDX-License-Identifier: MIT
#include "matcha/core/errors.hpp"

namespace matcha::detail {

void throwInvariant(const char* condition, const char* file, int line, const std::string& message) {
  throw InvariantError("internal error: " + message + " [" + condition + " failed at " + file + ":" +
                       std::to_string(line) + "]");
}

}  // namespace matcha::detail
