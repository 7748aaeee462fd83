// SPDX-License-Identifier: MIT
// The checks every command that writes one file (`ic`, `render`, `analyze power`) makes on its --out before any work.
#pragma once

#include <filesystem>
#include <functional>
#include <string>

namespace matcha::app {

/// Throws InputError, one line, for an --out that is unnamed, is the snapshot the command reads (when given), is a
/// folder, or exists without `overwrite`. With `overwrite`, an existing file must also pass `replaceable` (when
/// given), which says it is what this command writes (`kind` names that in the message): --overwrite replaces an
/// earlier output, never other data.
void checkOutputFile(const std::filesystem::path& out, const std::filesystem::path& snapshot, bool overwrite,
                     const std::function<bool(const std::filesystem::path&)>& replaceable = {},
                     const std::string& kind = "");

}  // namespace matcha::app
