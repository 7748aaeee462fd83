// SPDX-License-Identifier: MIT
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <system_error>

#include "matcha/core/errors.hpp"
#include "matcha/io/snapshot.hpp"

namespace matcha::io {
namespace {

std::string quoted(const std::filesystem::path& path) {
  std::string text = path.string();
  std::replace(text.begin(), text.end(), '\n', ' ');
  std::replace(text.begin(), text.end(), '\r', ' ');
  return std::string("'") + text + "'";
}

std::string errnoText(int code) { return std::error_code(code, std::generic_category()).message(); }

}  // namespace

void ensureWritableDirectory(const std::filesystem::path& dir) {
  const std::filesystem::path target = dir.empty() ? std::filesystem::path(".") : dir;
  std::error_code ec;
  std::filesystem::create_directories(target, ec);
  if (ec) throw IoError("cannot create output directory " + quoted(target) + ": " + ec.message());
  if (!std::filesystem::is_directory(target, ec)) {
    throw IoError("output path " + quoted(target) + " exists and is not a directory");
  }
  // Permission bits do not tell the whole story (root, ACLs, read-only mounts, quotas): try it.
  const std::filesystem::path probe = target / (".matcha-write-probe-" + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int code = errno;  // before anything else can change it
    // The probe's own errno reads oddly alone: /proc refuses new files with "No such file or directory".
    throw IoError("output directory " + quoted(target) + " is not writable: a file created there failed (" +
                  errnoText(code) + ")");
  }
  ::close(fd);
  if (::unlink(probe.c_str()) != 0) {
    const int code = errno;
    throw IoError("cannot remove probe file " + quoted(probe) + ": " + errnoText(code));
  }
}

}  // namespace matcha::io
