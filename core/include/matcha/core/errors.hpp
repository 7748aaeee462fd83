// SPDX-License-Identifier: MIT
// Typed errors. Library code throws these; only apps/ turns them into a one-line message and an exit code.
#pragma once

#include <stdexcept>
#include <string>

namespace matcha {

/// Base of every error matcha throws on purpose. `what()` is one line, fit for a terminal.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The user gave something unusable: an option out of range, a malformed parameter or IC file.
class InputError : public Error {
 public:
  using Error::Error;
};

/// Reading or writing a file failed (permissions, disk full, corrupt HDF5).
class IoError : public Error {
 public:
  using Error::Error;
};

/// A CUDA call failed; the message names the call.
class CudaError : public Error {
 public:
  using Error::Error;
};

/// A run produced a value that is not finite (NaN or inf): a position, velocity, acceleration, potential or energy.
/// The message names the step, the time, the body and the quantity. Not the user's input as far as checks up front can
/// tell (those throw InputError): the apps report it as an internal failure (exit code 3).
class NumericalError : public Error {
 public:
  using Error::Error;
};

/// An internal invariant broke: a bug in matcha, never the user's fault.
class InvariantError : public Error {
 public:
  using Error::Error;
};

namespace detail {
[[noreturn]] void throwInvariant(const char* condition, const char* file, int line, const std::string& message);
}  // namespace detail

}  // namespace matcha

/// Checks an internal invariant in every build type (these guard cheap, rare conditions, not inner loops).
#define MATCHA_ASSERT(condition, message)                                                          \
  do {                                                                                             \
    if (!(condition)) ::matcha::detail::throwInvariant(#condition, __FILE__, __LINE__, (message)); \
  } while (false)
