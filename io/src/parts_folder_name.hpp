// SPDX-License-Identifier: MIT
// The names of a checkpoint's parts folders (matcha/io/snapshot.hpp, prepareCheckpointParts), which the checkpoint
// writer removes once they are no longer named and the run folder counts as a run's own.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>

namespace matcha::io::detail {

inline bool allDigits(std::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

/// "<stem>.parts-": what every parts folder of the checkpoint whose file name has stem `stem` begins with.
inline std::string partsFolderPrefix(std::string_view stem) { return std::string(stem) + ".parts-"; }

/// Whether `name` is a parts folder of a checkpoint of file stem `stem`: "<stem>.parts-<step>" or
/// "<stem>.parts-<step>.<n>", with <step> and <n> decimal digits.
inline bool isPartsFolderName(std::string_view name, std::string_view stem) {
  const std::string prefix = partsFolderPrefix(stem);
  if (!name.starts_with(prefix)) return false;
  const std::string_view rest = name.substr(prefix.size());
  const std::size_t dot = rest.find('.');
  return dot == std::string_view::npos ? allDigits(rest)
                                       : allDigits(rest.substr(0, dot)) && allDigits(rest.substr(dot + 1));
}

}  // namespace matcha::io::detail
