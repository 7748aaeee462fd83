// SPDX-License-Identifier: MIT
// The checks every command that writes one file (`ic`, `render`, `analyze power`), or a set of files (`ic cosmo` on
// several ranks), makes on its --out before any work.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "matcha/core/particles.hpp"

namespace matcha::app {

/// Throws InputError, one line, for an --out that is unnamed, is the snapshot the command reads (when given), is a
/// folder or anything else but a regular file (a device such as /dev/null, which the atomic write's rename would
/// replace), or exists without `overwrite`. With `overwrite`, an existing file must also pass `replaceable` (when
/// given), which says it is what this command writes (`kind` names that in the message): --overwrite replaces an
/// earlier output, never other data.
void checkOutputFile(const std::filesystem::path& out, const std::filesystem::path& snapshot, bool overwrite,
                     const std::function<bool(const std::filesystem::path&)>& replaceable = {},
                     const std::string& kind = "");

/// The files of a set of `count` parts written for `out` (io::multiFilePath(out, k), k < count: GADGET's multi-file
/// layout), checked as checkOutputFile checks one --out, together with what replacing them would also remove: `out`
/// itself, which readers take before the set (io::readSnapshot), and the parts an earlier, larger set left beyond
/// `count` (staleParts). Throws InputError, one line, naming the first file that may not be replaced.
void checkOutputSet(const std::filesystem::path& out, int count, bool overwrite,
                    const std::function<bool(const std::filesystem::path&)>& replaceable, const std::string& kind);

/// The parts of an earlier set at `out` beyond `count`: io::multiFilePath(out, k) for k = count, count + 1, ... as long
/// as they exist.
std::vector<std::filesystem::path> staleParts(const std::filesystem::path& out, int count);

/// Refuses, in one line, generated bodies that no run could read back (Particles::validate, as `run --ic` checks them):
/// extreme options (`ic cosmo --sigma8 1e160` overflows the displacements, `--box 1e-160` the masses) wrote such a
/// file with exit 0 before. `generator` names the command ("ic cosmo").
void requireUsableBodies(const std::string& generator, const Particles& particles);

/// Whether `path` is a regular file that starts with `prefix` (an earlier output's signature or header line).
bool fileStartsWith(const std::filesystem::path& path, const std::string& prefix);

/// Whether `path` is an HDF5 file (its signature at the start, where matcha writes it): what `ic --overwrite` replaces.
bool isHdf5File(const std::filesystem::path& path);

}  // namespace matcha::app
