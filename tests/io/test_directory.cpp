// SPDX-License-Identifier: MIT
// Tests of matcha::io::ensureWritableDirectory. The tests run as root, where permission bits do not stop writes, so
// the failing case is a path below a regular file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "matcha/core/errors.hpp"
#include "matcha/io/snapshot.hpp"
#include "matcha/testing/scratch_dir.hpp"

namespace fs = std::filesystem;
using matcha::IoError;
using matcha::io::ensureWritableDirectory;

namespace {

using matcha::testing::ScratchDir;

std::string ioErrorMessage(const fs::path& dir) {
  try {
    ensureWritableDirectory(dir);
  } catch (const IoError& error) {
    return error.what();
  } catch (const std::exception& error) {
    ADD_FAILURE() << "threw the wrong exception type: " << error.what();
    return {};
  }
  ADD_FAILURE() << "threw nothing for " << dir;
  return {};
}

TEST(EnsureWritableDirectory, CreatesMissingNestedDirectories) {
  ScratchDir scratch;
  const fs::path dir = scratch.path() / "a" / "b" / "c";
  ASSERT_FALSE(fs::exists(dir));
  ensureWritableDirectory(dir);
  EXPECT_TRUE(fs::is_directory(dir));
  EXPECT_TRUE(fs::is_empty(dir)) << "the probe file was left behind";
}

TEST(EnsureWritableDirectory, AcceptsAnExistingDirectoryAndKeepsItsContents) {
  ScratchDir scratch;
  std::ofstream(scratch.path() / "keep.txt") << "data";
  ensureWritableDirectory(scratch.path());
  ensureWritableDirectory(scratch.path());  // idempotent
  EXPECT_EQ(std::distance(fs::directory_iterator(scratch.path()), fs::directory_iterator()), 1);
  EXPECT_TRUE(fs::exists(scratch.path() / "keep.txt"));
}

TEST(EnsureWritableDirectory, PathBelowARegularFileIsIoError) {
  ScratchDir scratch;
  const fs::path file = scratch.path() / "file";
  std::ofstream(file) << "not a directory";
  const fs::path dir = file / "sub";
  const std::string message = ioErrorMessage(dir);
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_NE(message.find(dir.string()), std::string::npos) << message;
  EXPECT_NE(message.find("cannot create"), std::string::npos) << message;
}

TEST(EnsureWritableDirectory, ARegularFileIsIoError) {
  ScratchDir scratch;
  const fs::path file = scratch.path() / "file";
  std::ofstream(file) << "not a directory";
  const std::string message = ioErrorMessage(file);
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_NE(message.find(file.string()), std::string::npos) << message;
}

// A directory that exists but takes no new files, even as root: /proc (procfs refuses them with ENOENT, which alone
// would read "No such file or directory" of a directory that plainly exists).
TEST(EnsureWritableDirectory, ADirectoryThatRefusesNewFilesSaysSo) {
  if (!fs::is_directory("/proc/self")) GTEST_SKIP() << "no /proc here";
  const std::string message = ioErrorMessage("/proc");
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_NE(message.find("'/proc' is not writable: a file created there failed ("), std::string::npos) << message;
}

}  // namespace
