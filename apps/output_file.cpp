// SPDX-License-Identifier: MIT
#include "output_file.hpp"

#include <fstream>

#include "matcha/core/errors.hpp"

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
