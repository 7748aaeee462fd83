// SPDX-License-Identifier: MIT
#include "matcha/core/checkpoint_state.hpp"

#include <cmath>

#include "matcha/core/errors.hpp"

namespace matcha {

namespace {

template <typename Map>
const typename Map::mapped_type& lookUp(const Map& map, const std::string& name) {
  const auto found = map.find(name);
  if (found == map.end()) throw InputError("the checkpoint lacks " + name);
  return found->second;
}

}  // namespace

double CheckpointState::scalar(const std::string& name) const { return lookUp(scalars, name); }

std::uint64_t CheckpointState::count(const std::string& name) const {
  const double value = scalar(name);
  if (!(value >= 0.0 && value <= 9007199254740992.0 && std::floor(value) == value)) {
    throw InputError("the checkpoint's " + name + " is not a count");
  }
  return static_cast<std::uint64_t>(value);
}

const std::vector<double>& CheckpointState::doubleArray(const std::string& name) const { return lookUp(doubles, name); }

const std::vector<float>& CheckpointState::floatArray(const std::string& name) const { return lookUp(floats, name); }

}  // namespace matcha
