// SPDX-License-Identifier: MIT
#include "output_file.hpp"

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
  if (!overwrite) throw InputError("--out " + out.string() + " already exists; pass --overwrite to replace it");
  if (replaceable && !replaceable(out)) {
    throw InputError("--out " + out.string() + " exists and is not " + kind + "; --overwrite replaces only those");
  }
}

}  // namespace matcha::app
