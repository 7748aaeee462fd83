// SPDX-License-Identifier: MIT
#include "output_file.hpp"

#include <fstream>

#include "matcha/core/errors.hpp"
#include "matcha/io/snapshot.hpp"

namespace matcha::app {

namespace fs = std::filesystem;

void checkOutputFile(const fs::path& out, const fs::path& snapshot, bool overwrite,
                     const std::function<bool(const fs::path&)>& replaceable, const std::string& kind) {
  if (out.filename().empty()) throw InputError("--out: the output file must be named (got '" + out.string() + "')");
  std::error_code ec;
  if (!snapshot.empty() && fs::exists(snapshot, ec) && fs::equivalent(out, snapshot, ec)) {
    throw InputError("--out " + out.string() + " is the snapshot itself; name another file");
  }
  const fs::file_status status = fs::status(out, ec);
  if (status.type() == fs::file_type::not_found) return;
  if (status.type() == fs::file_type::directory)
    throw InputError("--out " + out.string() + " is a folder; name a file");
  if (status.type() != fs::file_type::regular)
    throw InputError("--out " + out.string() + " is not a regular file; name a file");
  if (!overwrite) throw InputError("--out " + out.string() + " already exists; pass --overwrite to replace it");
  if (replaceable && !replaceable(out)) {
    throw InputError("--out " + out.string() + " exists and is not " + kind + "; --overwrite replaces only those");
  }
}

void checkOutputSet(const fs::path& out, int count, bool overwrite,
                    const std::function<bool(const fs::path&)>& replaceable, const std::string& kind) {
  checkOutputFile(out, {}, overwrite, replaceable, kind);
  for (int k = 0; k < count; ++k) checkOutputFile(io::multiFilePath(out, k), {}, overwrite, replaceable, kind);
  for (const fs::path& part : staleParts(out, count)) checkOutputFile(part, {}, overwrite, replaceable, kind);
}

std::vector<fs::path> staleParts(const fs::path& out, int count) {
  std::vector<fs::path> parts;
  std::error_code ec;
  for (int k = count; k < (1 << 30); ++k) {
    fs::path part = io::multiFilePath(out, k);
    if (!fs::exists(part, ec)) break;
    parts.push_back(std::move(part));
  }
  return parts;
}

void requireUsableBodies(const std::string& generator, const Particles& particles) {
  try {
    particles.validate();
  } catch (const InputError& error) {
    throw InputError(generator + ": nothing was written: with these options " + error.what() + " (beyond a double)");
  }
}

bool fileStartsWith(const fs::path& path, const std::string& prefix) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  std::string head(prefix.size(), '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  return in.gcount() == static_cast<std::streamsize>(prefix.size()) && head == prefix;
}

bool isHdf5File(const fs::path& path) { return fileStartsWith(path, std::string("\x89HDF\r\n\x1a\n", 8)); }

}  // namespace matcha::app
