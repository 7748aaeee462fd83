// SPDX-License-Identifier: MIT
// What the C libraries (libmatcha_force, libmatcha_g6) share at their boundary (STYLE.md habit 16): every C++
// exception turned into a failure kind and a one-line message, and the engine choice read from the environment.
// Private to lib/: not installed.
#pragma once

#include <exception>
#include <new>
#include <string>

#include "matcha/core/errors.hpp"
#include "matcha/core/params.hpp"

namespace matcha::lib {

/// No engine can be chosen or started: a malformed environment variable, `cuda` without a GPU, a CUDA engine that
/// fails to start.
class EngineError : public Error {
 public:
  using Error::Error;
};

/// What went wrong, for the libraries' return codes.
enum class Failure { argument, engine, device, memory, internal };

/// Runs `body()`; returns true when it returned, false when it threw, with `failure` and `message` (one line) set.
/// Never throws: this is the one place where exceptions stop on their way to a C or Fortran caller.
template <class Body>
bool runGuarded(Body&& body, Failure& failure, std::string& message) noexcept {
  try {
    try {
      body();
      return true;
    } catch (const EngineError& error) {
      failure = Failure::engine;
      message = error.what();
    } catch (const InputError& error) {
      failure = Failure::argument;
      message = error.what();
    } catch (const CudaError& error) {
      failure = Failure::device;
      message = error.what();
    } catch (const std::bad_alloc&) {
      failure = Failure::memory;
      message = "out of memory";
    } catch (const std::exception& error) {
      failure = Failure::internal;
      message = std::string("internal error: ") + error.what();
    } catch (...) {
      failure = Failure::internal;
      message = "internal error: an unknown exception";
    }
  } catch (...) {  // building the message itself failed (out of memory)
    failure = Failure::memory;
  }
  return false;
}

/// The engine kind named by the environment variable MATCHA_ENGINE: auto (also when unset or empty), cpu or cuda.
/// @throws EngineError for any other value
EngineKind engineKindFromEnvironment();

/// The integer in environment variable `name`, in [1, max]; `fallback` when unset or empty.
/// @throws EngineError when it is not a decimal integer in that range
long long integerFromEnvironment(const char* name, long long fallback, long long max);

}  // namespace matcha::lib
