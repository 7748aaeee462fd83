// SPDX-License-Identifier: MIT
// Tests of matcha::io's run folder: which names are a run's, refusing a folder that holds another run's files or the
// initial conditions, --overwrite removing exactly a run's files, stale temporaries of dead processes, the RUNNING
// marker.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "matcha/core/errors.hpp"
#include "matcha/io/run_folder.hpp"
#include "matcha/testing/scratch_dir.hpp"

namespace fs = std::filesystem;
namespace io = matcha::io;
using matcha::InputError;
using matcha::testing::ScratchDir;

namespace {

/// The pid of a child that has exited and been reaped: no process has it (until the kernel reuses it, which takes a
/// full turn of the pid space).
std::int64_t deadPid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

void touch(const fs::path& path, const std::string& text = "x") { std::ofstream(path) << text; }

std::string readText(const fs::path& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

/// The InputError message of checkRunFolder, or "" when it accepts.
std::string refusal(const io::RunFolderRequest& request) {
  try {
    io::checkRunFolder(request);
  } catch (const InputError& error) {
    return error.what();
  }
  return "";
}

io::RunFolderRequest fresh(const fs::path& dir) { return {dir, io::RunFolderMode::fresh, {}}; }
io::RunFolderRequest overwrite(const fs::path& dir) { return {dir, io::RunFolderMode::overwrite, {}}; }

TEST(RunFolder, NamesARunWrites) {
  for (const char* name : {"snapshot_000.hdf5", "snapshot_1234.hdf5", "summary.json", "diagnostics.log",
                           "used_parameters.toml", "last_good_state.hdf5", "RUNNING"}) {
    EXPECT_TRUE(io::isRunFileName(name)) << name;
  }
  for (const char* name : {"snapshot_.hdf5", "snapshot_00a.hdf5", "snapshot_000.hdf5.bak", "my_snapshot_000.hdf5",
                           "plummer.hdf5", "summary.json~", "notes.txt", "running", ""}) {
    EXPECT_FALSE(io::isRunFileName(name)) << name;
  }
}

TEST(RunFolder, RecognisesTemporariesOfItsOwnFilesOnly) {
  EXPECT_EQ(io::temporaryFileOwner(".snapshot_003.hdf5.tmp-4242-0"), 4242);
  EXPECT_EQ(io::temporaryFileOwner(".summary.json.tmp-17-3"), 17);
  EXPECT_EQ(io::temporaryFileOwner("summary.json.tmp-17"), 17);  // an older matcha's text files
  EXPECT_EQ(io::temporaryFileOwner(".RUNNING.tmp-99"), 99);
  EXPECT_EQ(io::temporaryFileOwner(".matcha-write-probe-5"), 5);
  for (const char* name : {".thesis.tex.tmp-4242-0", ".snapshot_003.hdf5.tmp-", ".snapshot_003.hdf5.tmp-x-0",
                           ".snapshot_003.hdf5.tmp-12-y", "snapshot_003.hdf5", ".tmp-12"}) {
    EXPECT_FALSE(io::temporaryFileOwner(name).has_value()) << name;
  }
}

TEST(RunFolder, TellsLiveProcessesFromDeadOnes) {
  EXPECT_TRUE(io::processIsAlive(::getpid()));
  EXPECT_TRUE(io::processIsAlive(::getppid()));
  EXPECT_FALSE(io::processIsAlive(deadPid()));
  EXPECT_FALSE(io::processIsAlive(0));
  EXPECT_FALSE(io::processIsAlive(-1));
}

TEST(RunFolder, AcceptsAMissingOrForeignFolderAndRefusesAnEmptyName) {
  ScratchDir scratch;
  EXPECT_EQ(refusal(fresh(scratch / "new")), "");
  EXPECT_FALSE(fs::exists(scratch / "new")) << "checking changes nothing";
  touch(scratch / "notes.txt");
  fs::create_directories(scratch / "summary.json");  // a folder of that name is the user's, not a run's file
  EXPECT_EQ(refusal(fresh(scratch.path())), "");
  EXPECT_NE(refusal(fresh("")).find("must be named"), std::string::npos);
}

TEST(RunFolder, RefusesEveryKindOfAnotherRunsFile) {
  for (const char* name : {"snapshot_007.hdf5", "summary.json", "diagnostics.log", "used_parameters.toml", "RUNNING"}) {
    ScratchDir scratch;
    touch(scratch / name);
    const std::string message = refusal(fresh(scratch.path()));
    EXPECT_NE(message.find("already holds another run's files"), std::string::npos) << name << ": " << message;
    EXPECT_NE(message.find(name), std::string::npos) << message;
    EXPECT_NE(message.find("--overwrite"), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos);
    EXPECT_EQ(refusal(overwrite(scratch.path())), "") << name;
  }
}

TEST(RunFolder, RefusesTheFolderOfItsInitialConditionsWhateverTheMode) {
  ScratchDir scratch;
  touch(scratch / "ic.hdf5");
  for (const io::RunFolderMode mode : {io::RunFolderMode::fresh, io::RunFolderMode::overwrite}) {
    const std::string message = refusal({scratch.path(), mode, scratch / "ic.hdf5"});
    EXPECT_NE(message.find("initial-conditions file"), std::string::npos) << message;
  }
  // Spelled differently (relative, with ./ and ..): still the same folder.
  const fs::path previous = fs::current_path();
  fs::current_path(scratch.path());
  EXPECT_NE(refusal({".", io::RunFolderMode::overwrite, "./ic.hdf5"}), "");
  fs::create_directories("sub");
  EXPECT_NE(refusal({"sub/..", io::RunFolderMode::overwrite, "ic.hdf5"}), "");
  EXPECT_EQ(refusal({"sub", io::RunFolderMode::overwrite, "ic.hdf5"}), "") << "the IC beside the folder is fine";
  fs::current_path(previous);
}

TEST(RunFolder, PrepareCreatesTheFolderAndWritesTheMarker) {
  ScratchDir scratch;
  const fs::path dir = scratch / "a" / "b";
  const io::RunMarker marker = io::markerForThisProcess("matcha run --out a/b");
  io::prepareRunFolder(fresh(dir), marker);
  ASSERT_TRUE(fs::is_regular_file(dir / "RUNNING"));
  const std::string text = readText(dir / "RUNNING");
  EXPECT_NE(text.find("pid " + std::to_string(::getpid()) + "\n"), std::string::npos) << text;
  EXPECT_NE(text.find("command matcha run --out a/b\n"), std::string::npos) << text;
  EXPECT_NE(text.find("started 20"), std::string::npos) << text;
  const io::RunFolderContents contents = io::inspectRunFolder(dir);
  ASSERT_TRUE(contents.marker.has_value());
  EXPECT_EQ(contents.marker->pid, ::getpid());
  EXPECT_EQ(contents.marker->host, marker.host);
  EXPECT_EQ(contents.marker->startedUtc, marker.startedUtc);
  EXPECT_TRUE(contents.staleTemporaries.empty() && contents.liveTemporaries.empty()) << "no temporary left";
  io::removeRunningMarker(dir);
  EXPECT_FALSE(fs::exists(dir / "RUNNING"));
  EXPECT_TRUE(fs::is_empty(dir));
}

TEST(RunFolder, OverwriteRemovesTheOldRunsFilesAndNothingElse) {
  ScratchDir scratch;
  const fs::path dir = scratch.path();
  for (const char* name : {"snapshot_000.hdf5", "snapshot_001.hdf5", "snapshot_012.hdf5", "summary.json",
                           "diagnostics.log", "used_parameters.toml"}) {
    touch(dir / name);
  }
  touch(dir / "notes.txt");
  touch(dir / "snapshot_000.hdf5.bak");
  fs::create_directories(dir / "analysis");
  touch(dir / "analysis" / "snapshot_000.hdf5");
  EXPECT_NE(refusal(fresh(dir)), "");
  io::prepareRunFolder(overwrite(dir), io::markerForThisProcess("test"));
  std::vector<std::string> left = scratch.entries();
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"RUNNING", "analysis", "notes.txt", "snapshot_000.hdf5.bak"}));
  EXPECT_TRUE(fs::exists(dir / "analysis" / "snapshot_000.hdf5")) << "subfolders are not the run's";
}

TEST(RunFolder, StaleTemporariesOfDeadRunsAreRemovedLiveOnesRefuse) {
  ScratchDir scratch;
  const fs::path dir = scratch.path();
  const std::string dead = std::to_string(deadPid());
  touch(dir / (".snapshot_003.hdf5.tmp-" + dead + "-0"));
  touch(dir / (".summary.json.tmp-" + dead + "-1"));
  touch(dir / (".thesis.tex.tmp-" + dead + "-0"));  // not matcha's: stays
  const io::RunFolderContents before = io::inspectRunFolder(dir);
  EXPECT_EQ(before.staleTemporaries.size(), 2u);
  EXPECT_TRUE(before.runFiles.empty());
  EXPECT_EQ(refusal(fresh(dir)), "") << "stale temporaries alone do not make a folder another run's";
  io::prepareRunFolder(fresh(dir), io::markerForThisProcess("test"));
  std::vector<std::string> left = scratch.entries();
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{".thesis.tex.tmp-" + dead + "-0", "RUNNING"}));

  // A temporary file of a live process: someone is writing into this folder now.
  ScratchDir busy;
  touch(busy / (".snapshot_003.hdf5.tmp-" + std::to_string(::getppid()) + "-0"));
  for (const io::RunFolderMode mode : {io::RunFolderMode::fresh, io::RunFolderMode::overwrite}) {
    EXPECT_NE(refusal({busy.path(), mode, {}}).find("another process is writing there"), std::string::npos);
  }
}

TEST(RunFolder, AMarkerOfALiveRunRefusesEvenOverwriteAKilledRunsMarkerIsReported) {
  ScratchDir scratch;
  const fs::path dir = scratch.path();
  io::RunMarker live = io::markerForThisProcess("matcha run");
  live.pid = ::getppid();  // alive, on this host, not this process
  touch(dir / "RUNNING", "pid " + std::to_string(live.pid) + "\nhost " + live.host + "\nstarted " + live.startedUtc +
                             "\ncommand matcha run\n");
  touch(dir / "snapshot_000.hdf5");
  EXPECT_TRUE(io::inspectRunFolder(dir).markerOwnerAlive);
  for (const io::RunFolderMode mode : {io::RunFolderMode::fresh, io::RunFolderMode::overwrite}) {
    const std::string message = refusal({dir, mode, {}});
    EXPECT_NE(message.find("a run is in progress there (pid " + std::to_string(live.pid)), std::string::npos)
        << message;
  }

  // The same run, killed: its marker stays behind and says so; --overwrite takes the folder.
  const std::string dead = std::to_string(deadPid());
  touch(dir / "RUNNING", "pid " + dead + "\nhost " + live.host + "\nstarted 2024-01-02T03:04:05Z\ncommand x\n");
  EXPECT_FALSE(io::inspectRunFolder(dir).markerOwnerAlive);
  const std::string message = refusal(fresh(dir));
  EXPECT_NE(message.find("from a run that did not finish (pid " + dead), std::string::npos) << message;
  EXPECT_NE(message.find("started 2024-01-02T03:04:05Z"), std::string::npos) << message;
  io::prepareRunFolder(overwrite(dir), io::markerForThisProcess("new"));
  EXPECT_FALSE(fs::exists(dir / "snapshot_000.hdf5"));
  EXPECT_NE(readText(dir / "RUNNING").find("pid " + std::to_string(::getpid())), std::string::npos);
}

// Resume (--restart) needs the folder and its checkpoint, keeps the run's files and replaces a dead run's marker.
TEST(RunFolder, ResumeKeepsTheRunsFilesAndNeedsItsCheckpoint) {
  ScratchDir scratch;
  EXPECT_NE(refusal({scratch / "missing", io::RunFolderMode::resume, {}}).find("no such folder"), std::string::npos);
  touch(scratch / "snapshot_000.hdf5");
  touch(scratch / "diagnostics.log");
  EXPECT_NE(refusal({scratch.path(), io::RunFolderMode::resume, {}}).find("checkpoint.hdf5"), std::string::npos);
  touch(scratch / "checkpoint.hdf5");
  std::ofstream(scratch / "RUNNING") << "pid 999999999\nhost " << io::markerForThisProcess("x").host << "\n";
  io::prepareRunFolder({scratch.path(), io::RunFolderMode::resume, {}}, io::markerForThisProcess("matcha run"));
  EXPECT_TRUE(std::filesystem::exists(scratch / "snapshot_000.hdf5"));
  EXPECT_TRUE(std::filesystem::exists(scratch / "diagnostics.log"));
  EXPECT_TRUE(std::filesystem::exists(scratch / "checkpoint.hdf5"));
  EXPECT_NE(readText(scratch / "RUNNING").find("pid " + std::to_string(::getpid())), std::string::npos);
}

TEST(RunFolder, ListsSnapshotsByNumber) {
  ScratchDir scratch;
  for (const char* name : {"snapshot_1000.hdf5", "snapshot_999.hdf5", "snapshot_002.hdf5", "summary.json"}) {
    touch(scratch / name);
  }
  EXPECT_EQ(io::inspectRunFolder(scratch.path()).snapshots,
            (std::vector<std::string>{"snapshot_002.hdf5", "snapshot_999.hdf5", "snapshot_1000.hdf5"}));
  EXPECT_FALSE(io::inspectRunFolder(scratch / "missing").exists);
}

// A checkpoint in parts keeps its bodies in a folder beside checkpoint.hdf5 (io::prepareCheckpointParts): the one kind
// of folder a run writes, counted, refused, removed and checked for writers like its files.
TEST(RunFolder, CheckpointPartsFoldersAreTheRunsOwn) {
  for (const char* name : {"checkpoint.parts-120", "checkpoint.parts-0", "checkpoint.parts-120.1"}) {
    EXPECT_TRUE(io::isRunFileName(name)) << name;
  }
  for (const char* name : {"checkpoint.parts-", "checkpoint.parts-12a", "checkpoint.parts-1.2.3", "checkpoint.parts-1.",
                           "snapshot.parts-1", "my_checkpoint.parts-1", "checkpoint.parts"}) {
    EXPECT_FALSE(io::isRunFileName(name)) << name;
  }
  EXPECT_FALSE(io::temporaryFileOwner(".checkpoint.0.hdf5.tmp-42-0").has_value()) << "a part's, outside its folder";

  ScratchDir scratch;
  const fs::path dir = scratch.path();
  fs::create_directories(dir / "checkpoint.parts-120");
  touch(dir / "checkpoint.parts-120" / "checkpoint.0.hdf5");
  fs::create_directories(dir / "checkpoint.parts-backup");  // not a name the run writes: the user's
  touch(dir / "checkpoint.parts-backup" / "checkpoint.0.hdf5");
  const io::RunFolderContents contents = io::inspectRunFolder(dir);
  EXPECT_EQ(contents.runFiles, std::vector<std::string>{"checkpoint.parts-120"});
  const std::string message = refusal(fresh(dir));
  EXPECT_NE(message.find("already holds another run's files: checkpoint.parts-120"), std::string::npos) << message;
  io::prepareRunFolder(overwrite(dir), io::markerForThisProcess("test"));
  std::vector<std::string> left = scratch.entries();
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"RUNNING", "checkpoint.parts-backup"}));
  EXPECT_TRUE(fs::exists(dir / "checkpoint.parts-backup" / "checkpoint.0.hdf5"));
}

TEST(RunFolder, TemporariesInAPartsFolderAreCheckedAndRemovedLikeTheOthers) {
  ScratchDir scratch;
  const fs::path dir = scratch.path();
  const fs::path parts = dir / "checkpoint.parts-7";
  fs::create_directories(parts);
  touch(dir / "checkpoint.hdf5");
  touch(parts / "checkpoint.0.hdf5");
  const std::string dead = std::to_string(deadPid());
  touch(parts / (".checkpoint.1.hdf5.tmp-" + dead + "-0"));
  touch(parts / (".notes.txt.tmp-" + dead + "-0"));  // not a part's: stays
  const io::RunFolderContents before = io::inspectRunFolder(dir);
  EXPECT_EQ(before.staleTemporaries,
            std::vector<std::string>{"checkpoint.parts-7/.checkpoint.1.hdf5.tmp-" + dead + "-0"});
  const io::RunFolderRequest resume{dir, io::RunFolderMode::resume, {}};
  io::prepareRunFolder(resume, io::markerForThisProcess("matcha run --restart"));
  std::vector<std::string> left;
  for (const auto& entry : fs::directory_iterator(parts)) left.push_back(entry.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{".notes.txt.tmp-" + dead + "-0", "checkpoint.0.hdf5"}))
      << "resume keeps the parts and removes the dead writer's temporary";
  io::removeRunningMarker(dir);

  // A rank writing its part now: whatever the mode, the folder is refused.
  touch(parts / (".checkpoint.2.hdf5.tmp-" + std::to_string(::getppid()) + "-3"));
  for (const io::RunFolderMode mode :
       {io::RunFolderMode::fresh, io::RunFolderMode::overwrite, io::RunFolderMode::resume}) {
    EXPECT_NE(refusal({dir, mode, {}}).find("another process is writing there (checkpoint.parts-7/"),
              std::string::npos);
  }
}

TEST(WriteTextFile, ReplacesAtomicallyAndLeavesNoTemporary) {
  ScratchDir scratch;
  io::writeTextFile(scratch / "summary.json", "one\n");
  io::writeTextFile(scratch / "summary.json", "two\n");
  EXPECT_EQ(readText(scratch / "summary.json"), "two\n");
  EXPECT_EQ(scratch.entries(), std::vector<std::string>{"summary.json"});
  EXPECT_THROW(io::writeTextFile(scratch / "missing" / "x.txt", "x"), matcha::IoError);
}

}  // namespace
