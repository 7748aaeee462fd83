// SPDX-License-Identifier: MIT
// The checks every command that writes one file (`ic`, `render`, `analyze power`) makes on its --out before any work.
#pragma once

#include <filesystem>
#include <functional>
#include <string>

namespace matcha::app {

/// Throws InputError, one line, for an --out that is unnamed, is the snapshot the command reads (when given), is a
/// folder or anything else but a regular file (a device such as /dev/null, which the atomic write's rename would
/// replace), or exists without `overwrite`. With `overwrite`, an existing file must also pass `replaceable` (when
/// given), which says it is what this command writes (`kind` names that in the message): --overwrite replaces an
/// earlier output, never other data.
void checkOutputFile(const std::filesystem::path& out, const std::filesystem::path& snapshot, bool overwrite,
                     const std::function<bool(const std::filesystem::path&)>& replaceable = {},
                     const std::string& kind = "");

/// Whether `path` is a regular file that starts with `prefix` (an earlier output's signature or header line).
bool fileStartsWith(const std::filesystem::path& path, const std::string& prefix);

/// Whether `path` is an HDF5 file (its signature at the start, where matcha writes it): what `ic --overwrite` replaces.
bool isHdf5File(const std::filesystem::path& path);

}  // namespace matcha::app
