// SPDX-License-Identifier: MIT
// What a checkpoint keeps beside the bodies (`matcha run --restart`): named numbers and arrays, so that each module
// saves its own state without io/ knowing its shape, and io/ writes them without knowing what they mean.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace matcha {

struct CheckpointState {
  std::map<std::string, double> scalars;  ///< counts and flags too (exact up to 2^53)
  std::map<std::string, std::vector<double>> doubles;
  std::map<std::string, std::vector<float>> floats;

  void set(const std::string& name, double value) { scalars[name] = value; }
  /// The scalar `name`; throws InputError ("the checkpoint lacks NAME") when it is missing.
  double scalar(const std::string& name) const;
  /// scalar(name) as a count: throws InputError unless it is a whole number in [0, 2^53].
  std::uint64_t count(const std::string& name) const;
  const std::vector<double>& doubleArray(const std::string& name) const;
  const std::vector<float>& floatArray(const std::string& name) const;
  bool empty() const { return scalars.empty() && doubles.empty() && floats.empty(); }
};

}  // namespace matcha
