// SPDX-License-Identifier: MIT
// What the C libraries (libmatcha_force, libmatcha_g6) share at their boundary (STYLE.md habit 16): every C++
// exception turned into a return code and a one-line message, calls serialised by a lock, and the engine choice read
// from the environment. Private to lib/: not installed.
#pragma once

#include <exception>
#include <mutex>
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

/// A failure a library reports with a return code of its own (GRAPE-6's "not open", "no calc to finish").
class CodedError : public Error {
 public:
  CodedError(int returnCode, const std::string& message) : Error(message), code(returnCode) {}
  int code;
};

/// A library's return codes for each kind of failure.
struct ReturnCodes {
  int ok, argument, engine, device, memory, internal;
};

/// Runs `body()` holding `mutex` and returns codes.ok, or the code of what it threw (InputError: argument,
/// EngineError: engine, CudaError: device, bad_alloc: memory, CodedError: its own, anything else: internal), with
/// `lastError` set to "<call>: <message>" (empty on success). Never throws: this is the one place where exceptions
/// stop on their way to a C or Fortran caller.
template <class Body>
int runAtBoundary(const char* call, std::mutex& mutex, std::string& lastError, const ReturnCodes& codes,
                  Body&& body) noexcept {
  int code = codes.internal;
  try {
    try {
      const std::lock_guard<std::mutex> lock(mutex);
      body();
      lastError.clear();
      return codes.ok;
    } catch (const CodedError& error) {
      code = error.code;
      lastError = error.what();
    } catch (const EngineError& error) {
      code = codes.engine;
      lastError = error.what();
    } catch (const InputError& error) {
      code = codes.argument;
      lastError = error.what();
    } catch (const CudaError& error) {
      code = codes.device;
      lastError = error.what();
    } catch (const std::bad_alloc&) {
      code = codes.memory;
      lastError = "out of memory";
    } catch (const std::exception& error) {
      lastError = std::string("internal error: ") + error.what();
    } catch (...) {
      lastError = "internal error: an unknown exception";
    }
    lastError.insert(0, std::string(call) + ": ");
  } catch (...) {  // building the message itself failed (out of memory)
    code = codes.memory;
  }
  return code;
}

/// The engine kind named by the environment variable MATCHA_ENGINE: auto (also when unset or empty), cpu or cuda.
/// @throws EngineError for any other value
EngineKind engineKindFromEnvironment();

/// The integer in environment variable `name`, in [1, max]; `fallback` when unset or empty.
/// @throws EngineError when it is not a decimal integer in that range
long long integerFromEnvironment(const char* name, long long fallback, long long max);

}  // namespace matcha::lib
