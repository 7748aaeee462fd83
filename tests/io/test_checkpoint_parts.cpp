// SPDX-License-Identifier: MIT
// Tests of reading part of a snapshot (readSnapshotRange: one file or a multi-file set, only the files and rows of the
// range, checks on the rows read) and of checkpoints in parts (prepareCheckpointParts, writeCheckpointPart,
// commitCheckpointParts; readCheckpoint, readCheckpointRange, inspectCheckpoint of either kind): round trips, the
// replacement of one checkpoint by the next (the old folder goes only once the new parts file is in place), and the
// one-line errors for a set that lost a part or mixes writes.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "matcha/core/errors.hpp"
#include "matcha/io/snapshot.hpp"
#include "matcha/testing/same_bodies.hpp"
#include "matcha/testing/scratch_dir.hpp"

namespace fs = std::filesystem;
namespace io = matcha::io;
using matcha::CheckpointState;
using matcha::InputError;
using matcha::IoError;
using matcha::Particles;
using matcha::testing::ScratchDir;

namespace {

constexpr std::array kColumns{&Particles::x,  &Particles::y,   &Particles::z,   &Particles::vx,
                              &Particles::vy, &Particles::vz,  &Particles::ax,  &Particles::ay,
                              &Particles::az, &Particles::pot, &Particles::mass};

/// `count` bodies with a different value in every entry (ids 1000 + 7 i, not their rows).
Particles someBodies(std::size_t count, double shift = 0.0) {
  Particles p(count);
  for (std::size_t i = 0; i < count; ++i) {
    const double v = static_cast<double>(i) + shift;
    p.x[i] = 0.25 + v;
    p.y[i] = -0.5 * v;
    p.z[i] = 1e-3 * v * v;
    p.vx[i] = 0.1 * v;
    p.vy[i] = -0.2 - v;
    p.vz[i] = 0.3 + 0.01 * v;
    p.ax[i] = -v;
    p.ay[i] = 2.0 * v;
    p.az[i] = 0.5 - v;
    p.pot[i] = -1.0 - v;
    p.mass[i] = 1.0 / (1.0 + v);
    p.id[i] = 1000 + 7 * i;
  }
  return p;
}

/// Bodies [first, first + count) of `all`.
Particles rowsOf(const Particles& all, std::size_t first, std::size_t count) {
  Particles part(count);
  for (const auto column : kColumns) {
    std::copy_n((all.*column).begin() + static_cast<std::ptrdiff_t>(first), count, (part.*column).begin());
  }
  std::copy_n(all.id.begin() + static_cast<std::ptrdiff_t>(first), count, part.id.begin());
  return part;
}

template <class T>
std::vector<T> entriesOf(const std::vector<T>& all, std::size_t first, std::size_t count) {
  return {all.begin() + static_cast<std::ptrdiff_t>(first), all.begin() + static_cast<std::ptrdiff_t>(first + count)};
}

void expectSameBodies(const Particles& expected, const Particles& actual, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  matcha::testing::expectSameBodiesBitForBit(expected, actual, what);
  EXPECT_EQ(actual.mass, expected.mass) << what;
}

void expectSameState(const CheckpointState& expected, const CheckpointState& actual, const std::string& what) {
  EXPECT_EQ(actual.scalars, expected.scalars) << what;
  EXPECT_EQ(actual.doubles, expected.doubles) << what;
  EXPECT_EQ(actual.floats, expected.floats) << what;
}

/// The message of the E that `action` throws (a failure when it throws another type or nothing).
template <class E, class F>
std::string messageOf(F&& action) {
  std::string message;
  EXPECT_THROW(
      {
        try {
          action();
        } catch (const E& error) {
          message = error.what();
          throw;
        }
      },
      E);
  return message;
}

void expectOneLineWith(const std::string& message, std::initializer_list<std::string> fragments) {
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  for (const std::string& fragment : fragments) {
    EXPECT_NE(message.find(fragment), std::string::npos) << "'" << fragment << "' missing from: " << message;
  }
}

io::SnapshotMetadata metadataAt(double time, double boxSize = 0.0) {
  io::SnapshotMetadata meta;
  meta.time = time;
  meta.step = 7;
  meta.boxSize = boxSize;
  meta.parameters = {{"theta", "0.5"}, {"solver", "tree"}};
  return meta;
}

/// `all` as a multi-file snapshot of files of `sizes` bodies, under the one-file name `path`.
void writeSet(const fs::path& path, const Particles& all, const std::vector<std::size_t>& sizes,
              const io::SnapshotMetadata& meta) {
  std::size_t first = 0;
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    io::SnapshotWriteOptions options;
    options.filePart = io::SnapshotWriteOptions::FilePart{static_cast<int>(k), static_cast<int>(sizes.size()),
                                                          all.size(), io::largestCoordinate(all)};
    io::writeSnapshot(io::multiFilePath(path, static_cast<int>(k)), rowsOf(all, first, sizes[k]), meta, options);
    first += sizes[k];
  }
}

std::vector<std::string> sortedEntries(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// ================================================================================================================
// readSnapshotRange
// ================================================================================================================

TEST(SnapshotRange, OneFileGivesTheRowsAskedFor) {
  ScratchDir dir;
  const Particles all = someBodies(10);
  io::writeSnapshot(dir / "one.hdf5", all, metadataAt(0.75));
  for (const auto& [first, count] : {std::pair{0, 10}, std::pair{0, 1}, std::pair{9, 1}, std::pair{3, 4}}) {
    const std::string what = "range " + std::to_string(first) + " + " + std::to_string(count);
    const io::Snapshot read = io::readSnapshotRange(dir / "one.hdf5", first, count);
    expectSameBodies(rowsOf(all, first, count), read.particles, what);
    EXPECT_EQ(read.time, 0.75) << what;
    EXPECT_EQ(read.parameters, metadataAt(0.75).parameters) << what;
  }
}

TEST(SnapshotRange, MultiFileRangesSpanFilesAndOpenOnlyTheFilesThatHoldThem) {
  ScratchDir dir;
  const Particles all = someBodies(12);
  const fs::path set = dir / "set.hdf5";
  writeSet(set, all, {4, 0, 5, 3}, metadataAt(0.5));  // bodies 0-3 | none | 4-8 | 9-11
  for (const auto& [first, count] : {std::pair{0, 12}, std::pair{0, 1}, std::pair{11, 1}, std::pair{5, 3},
                                     std::pair{2, 6}, std::pair{4, 5}, std::pair{3, 7}, std::pair{9, 3}}) {
    for (const fs::path& name : {set, dir / "set.2.hdf5"}) {
      const std::string what =
          name.filename().string() + " range " + std::to_string(first) + " + " + std::to_string(count);
      const io::Snapshot read = io::readSnapshotRange(name, first, count);
      expectSameBodies(rowsOf(all, first, count), read.particles, what);
      EXPECT_EQ(read.time, 0.5) << what;
    }
  }
  // Without its last file, the set still gives every range that ends before it: that file is never opened.
  fs::remove(dir / "set.3.hdf5");
  expectSameBodies(rowsOf(all, 2, 7), io::readSnapshotRange(set, 2, 7).particles, "without file 3");
  expectOneLineWith(messageOf<IoError>([&] { io::readSnapshotRange(set, 2, 8); }),
                    {"cannot read snapshot", "file 3 of the set", "set.3.hdf5", "no such file"});
  expectOneLineWith(messageOf<IoError>([&] { io::readSnapshot(set); }), {"file 3 of the set"});
}

TEST(SnapshotRange, AnEmptyOrOutOfRangeRequestIsAOneLineError) {
  ScratchDir dir;
  const Particles all = someBodies(12);
  writeSet(dir / "set.hdf5", all, {6, 6}, metadataAt(0.5));
  io::writeSnapshot(dir / "one.hdf5", all, metadataAt(0.5));
  for (const fs::path& path : {dir / "set.hdf5", dir / "one.hdf5"}) {
    expectOneLineWith(messageOf<InputError>([&] { io::readSnapshotRange(path, 3, 0); }),
                      {"cannot read snapshot", path.filename().string(), "0 bodies"});
    for (const auto& [first, count] : {std::pair<std::uint64_t, std::uint64_t>{0, 13},
                                       {12, 1},
                                       {11, 2},
                                       {13, 1},
                                       {1, std::numeric_limits<std::uint64_t>::max()}}) {
      expectOneLineWith(messageOf<InputError>([&] { io::readSnapshotRange(path, first, count); }),
                        {path.filename().string(), "the snapshot holds 12"});
    }
  }
}

TEST(SnapshotRange, ValuesAreCheckedInsideTheRangeOnly) {
  ScratchDir dir;
  Particles bad = someBodies(10);
  bad.y[6] = std::numeric_limits<double>::quiet_NaN();
  io::writeSnapshot(dir / "nan.hdf5", bad, {});
  EXPECT_EQ(io::readSnapshotRange(dir / "nan.hdf5", 0, 6).particles.size(), 6u);
  EXPECT_EQ(io::readSnapshotRange(dir / "nan.hdf5", 7, 3).particles.y, entriesOf(bad.y, 7, 3));
  expectOneLineWith(messageOf<InputError>([&] { io::readSnapshotRange(dir / "nan.hdf5", 5, 3); }),
                    {"nan.hdf5", "PartType1/Coordinates", "NaN", "body 6"});

  // In a set: a mass <= 0 at body 5 of the set, row 1 of file 2; file 0 before it is opened for its header only.
  Particles set = someBodies(12);
  set.mass[5] = 0.0;
  writeSet(dir / "set.hdf5", set, {4, 0, 5, 3}, metadataAt(0.5));
  EXPECT_EQ(io::readSnapshotRange(dir / "set.hdf5", 0, 5).particles.mass, entriesOf(set.mass, 0, 5));
  EXPECT_EQ(io::readSnapshotRange(dir / "set.hdf5", 6, 6).particles.mass, entriesOf(set.mass, 6, 6));
  expectOneLineWith(messageOf<InputError>([&] { io::readSnapshotRange(dir / "set.hdf5", 4, 3); }),
                    {"file 2 of the set", "set.2.hdf5", "mass <= 0", "body 1"});
}

TEST(SnapshotRange, IdsMustNotRepeatWithinTheRangeAndEveryFileOpenedMustAgree) {
  ScratchDir dir;
  // File 2 holds file 0's ids again: the whole set is refused; a range that holds one copy only is not.
  Particles twice = someBodies(9);
  std::copy_n(twice.id.begin(), 3, twice.id.begin() + 6);
  writeSet(dir / "twice.hdf5", twice, {3, 3, 3}, metadataAt(0.5));
  expectOneLineWith(messageOf<InputError>([&] { io::readSnapshot(dir / "twice.hdf5"); }), {"two files"});
  EXPECT_EQ(io::readSnapshotRange(dir / "twice.hdf5", 3, 6).particles.id, entriesOf(twice.id, 3, 6));
  expectOneLineWith(messageOf<InputError>([&] { io::readSnapshotRange(dir / "twice.hdf5", 2, 7); }),
                    {"ParticleID " + std::to_string(twice.id[2]), "two files"});

  // File 1 of another write (another time): even a range in file 2 alone is refused, since file 1 is opened to know
  // where file 2's bodies begin.
  const Particles all = someBodies(9);
  writeSet(dir / "mixed.hdf5", all, {3, 3, 3}, metadataAt(0.5));
  io::SnapshotWriteOptions options;
  options.filePart = io::SnapshotWriteOptions::FilePart{1, 3, 9, io::largestCoordinate(all)};
  io::writeSnapshot(dir / "mixed.1.hdf5", rowsOf(all, 3, 3), metadataAt(0.625), options);
  expectOneLineWith(messageOf<InputError>([&] { io::readSnapshotRange(dir / "mixed.hdf5", 7, 2); }),
                    {"file 1 of the set", "mixed.1.hdf5", "different snapshots"});
  EXPECT_EQ(io::readSnapshotRange(dir / "mixed.hdf5", 0, 3).particles.id, entriesOf(all.id, 0, 3));
}

// ================================================================================================================
// Checkpoints in parts
// ================================================================================================================

/// A checkpoint's contents: bodies, header, the run's state, the solver's (its own and its per-body arrays).
struct CheckpointContents {
  Particles all;
  io::SnapshotMetadata meta;
  CheckpointState run;
  CheckpointState solver;   ///< not per body
  CheckpointState perBody;  ///< one entry per body of `all`
};

CheckpointContents contentsAt(double time, std::size_t bodies, double boxSize = 0.0) {
  CheckpointContents c;
  c.all = someBodies(bodies, time);
  c.meta = metadataAt(time, boxSize);
  c.run.set("step", 10.0 * time);
  c.run.set("initial_total", -0.25);
  c.run.doubles["history"] = {1.0, 2.0, time};
  c.solver.set("theta", 0.5);
  c.solver.floats["table"] = {0.5f, 1.5f};
  for (std::size_t i = 0; i < bodies; ++i) {
    c.perBody.doubles["dt"].push_back(time + 0.01 * static_cast<double>(i));
    c.perBody.floats["old_acceleration"].push_back(static_cast<float>(i) - 0.5f);
  }
  return c;
}

/// The per-body arrays of bodies [first, first + count).
CheckpointState perBodyRows(const CheckpointState& perBody, std::size_t first, std::size_t count) {
  CheckpointState rows;
  for (const auto& [name, values] : perBody.doubles) rows.doubles[name] = entriesOf(values, first, count);
  for (const auto& [name, values] : perBody.floats) rows.floats[name] = entriesOf(values, first, count);
  return rows;
}

/// The solver state as readCheckpoint returns it: its own, and the per-body arrays of bodies [first, first + count).
CheckpointState solverWithRows(const CheckpointContents& c, std::size_t first, std::size_t count) {
  CheckpointState solver = c.solver;
  const CheckpointState rows = perBodyRows(c.perBody, first, count);
  solver.doubles.insert(rows.doubles.begin(), rows.doubles.end());
  solver.floats.insert(rows.floats.begin(), rows.floats.end());
  return solver;
}

/// Writes `c` in parts of `sizes` bodies as a checkpoint at `path` of step `step`; commits unless told not to.
fs::path writeInParts(const fs::path& path, std::uint64_t step, const CheckpointContents& c,
                      const std::vector<std::size_t>& sizes, bool commit = true) {
  const fs::path folder = io::prepareCheckpointParts(path, step);
  const int count = static_cast<int>(sizes.size());
  std::size_t first = 0;
  for (int k = 0; k < count; ++k) {
    const std::size_t n = sizes[static_cast<std::size_t>(k)];
    const io::SnapshotWriteOptions::FilePart part{k, count, c.all.size(), io::largestCoordinate(c.all)};
    io::writeCheckpointPart(folder, path, rowsOf(c.all, first, n), c.meta, part, perBodyRows(c.perBody, first, n),
                            true);
    first += n;
  }
  if (commit) io::commitCheckpointParts(path, folder, count, c.all.size(), c.meta, c.run, c.solver);
  return folder;
}

/// The one-file checkpoint of `c`, its per-body arrays in the solver's state.
void writeOneFile(const fs::path& path, const CheckpointContents& c) {
  io::writeCheckpoint(path, c.all, c.meta, c.run, solverWithRows(c, 0, c.all.size()), true);
}

void expectCheckpoint(const CheckpointContents& c, const io::Checkpoint& read, const std::string& what) {
  expectSameBodies(c.all, read.snapshot.particles, what);
  EXPECT_EQ(read.snapshot.time, c.meta.time) << what;
  EXPECT_EQ(read.snapshot.boxSize, c.meta.boxSize) << what;
  EXPECT_EQ(read.snapshot.parameters, c.meta.parameters) << what;
  expectSameState(c.run, read.run, what + ": run");
  expectSameState(solverWithRows(c, 0, c.all.size()), read.solver, what + ": solver");
}

/// Whether the HDF5 file `path` has the link `name`, and its /Checkpoint Parts attribute ("" when it has none).
std::pair<bool, std::string> linkAndPartsAttribute(const fs::path& path, const char* name) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  EXPECT_GE(file, 0) << path;
  const bool exists = H5Lexists(file, name, H5P_DEFAULT) > 0;
  std::string parts;
  if (H5Aexists_by_name(file, "Checkpoint", "Parts", H5P_DEFAULT) > 0) {
    const hid_t attribute = H5Aopen_by_name(file, "Checkpoint", "Parts", H5P_DEFAULT, H5P_DEFAULT);
    const hid_t type = H5Aget_type(attribute);
    parts.assign(H5Tget_size(type), '\0');
    H5Aread(attribute, type, parts.data());
    parts.resize(parts.find('\0') == std::string::npos ? parts.size() : parts.find('\0'));
    H5Tclose(type);
    H5Aclose(attribute);
  }
  H5Fclose(file);
  return {exists, parts};
}

TEST(CheckpointParts, RoundTripJoinsThePartsInOrder) {
  ScratchDir dir;
  const fs::path path = dir / "checkpoint.hdf5";
  const CheckpointContents c = contentsAt(1.5, 12, 50.0);
  const fs::path folder = writeInParts(path, 120, c, {5, 0, 7});
  EXPECT_EQ(folder, dir / "checkpoint.parts-120");
  EXPECT_EQ(sortedEntries(dir.path()), (std::vector<std::string>{"checkpoint.hdf5", "checkpoint.parts-120"}));
  EXPECT_EQ(sortedEntries(folder),
            (std::vector<std::string>{"checkpoint.0.hdf5", "checkpoint.1.hdf5", "checkpoint.2.hdf5"}));
  EXPECT_EQ(linkAndPartsAttribute(path, "PartType1"), (std::pair<bool, std::string>{false, "checkpoint.parts-120"}))
      << "the parts file holds no bodies and names its folder";
  EXPECT_EQ(linkAndPartsAttribute(folder / "checkpoint.1.hdf5", "Checkpoint/Solver/dt"),
            (std::pair<bool, std::string>{true, ""}))
      << "each part holds its per-body arrays (the empty part too)";

  expectCheckpoint(c, io::readCheckpoint(path), "readCheckpoint");
  // The bodies are a multi-file snapshot: readSnapshot reads them from the parts file or from the parts themselves.
  expectSameBodies(c.all, io::readSnapshot(path).particles, "readSnapshot of the parts file");
  expectSameBodies(c.all, io::readSnapshot(folder / "checkpoint.0.hdf5").particles, "readSnapshot of the parts");
  const io::SnapshotInfo info = io::inspectSnapshot(path);
  EXPECT_EQ(info.numBodies, 12u);
  EXPECT_EQ(info.time, 1.5);
  EXPECT_EQ(info.boxSize, 50.0);
  expectSameBodies(rowsOf(c.all, 4, 2), io::readSnapshotRange(path, 4, 2).particles, "readSnapshotRange");
}

TEST(CheckpointParts, ASinglePartAndAnOpenBoxRoundTrip) {
  ScratchDir dir;
  const fs::path path = dir / "checkpoint.hdf5";
  const CheckpointContents c = contentsAt(2.0, 6);
  writeInParts(path, 3, c, {6});
  expectCheckpoint(c, io::readCheckpoint(path), "one part");
  EXPECT_EQ(io::inspectSnapshot(path).boxSize, 0.0);
}

TEST(CheckpointParts, RangesCutTheBodiesAndThePerBodyArrays) {
  ScratchDir dir;
  const fs::path parts = dir / "parts" / "checkpoint.hdf5";
  const fs::path one = dir / "one" / "checkpoint.hdf5";
  fs::create_directories(parts.parent_path());
  fs::create_directories(one.parent_path());
  const CheckpointContents c = contentsAt(1.0, 12);
  writeInParts(parts, 5, c, {5, 0, 7});
  writeOneFile(one, c);
  for (const fs::path& path : {parts, one}) {
    for (const auto& [first, count] : {std::pair{3, 5}, std::pair{0, 12}, std::pair{5, 7}, std::pair{11, 1}}) {
      const std::string what =
          path.parent_path().filename().string() + " range " + std::to_string(first) + " + " + std::to_string(count);
      const io::Checkpoint read = io::readCheckpointRange(path, first, count);
      expectSameBodies(rowsOf(c.all, first, count), read.snapshot.particles, what);
      expectSameState(c.run, read.run, what + ": run");
      expectSameState(solverWithRows(c, first, count), read.solver, what + ": solver");
    }
    expectOneLineWith(messageOf<InputError>([&] { io::readCheckpointRange(path, 10, 3); }),
                      {"cannot read checkpoint", "the snapshot holds 12"});
    expectOneLineWith(messageOf<InputError>([&] { io::readCheckpointRange(path, 0, 0); }), {"0 bodies"});
  }
}

TEST(CheckpointParts, InspectGivesTheHeaderStatesAndPartsWithoutTheBodies) {
  ScratchDir dir;
  const fs::path parts = dir / "parts" / "checkpoint.hdf5";
  const fs::path one = dir / "one" / "checkpoint.hdf5";
  fs::create_directories(parts.parent_path());
  fs::create_directories(one.parent_path());
  const CheckpointContents c = contentsAt(1.25, 12, 8.0);
  writeInParts(parts, 5, c, {5, 0, 7});
  writeOneFile(one, c);
  for (const fs::path& path : {parts, one}) {
    const std::string what = path.parent_path().filename().string();
    const io::CheckpointInfo info = io::inspectCheckpoint(path);
    EXPECT_EQ(info.snapshot.numBodies, 12u) << what;
    EXPECT_EQ(info.snapshot.time, 1.25) << what;
    EXPECT_EQ(info.snapshot.boxSize, 8.0) << what;
    expectSameState(c.run, info.run, what);
    expectSameState(c.solver, info.solver, what + ": the solver's state without its per-body arrays");
    EXPECT_EQ(info.perBodyArrays, (std::vector<std::string>{"dt", "old_acceleration"})) << what;
  }
  EXPECT_EQ(io::inspectCheckpoint(parts).partBodies, (std::vector<std::uint64_t>{5, 0, 7}));
  EXPECT_TRUE(io::inspectCheckpoint(one).partBodies.empty());
}

TEST(CheckpointParts, CommitReplacesTheOldFolderAndAnInterruptedWriteKeepsTheOldCheckpoint) {
  ScratchDir dir;
  const fs::path path = dir / "checkpoint.hdf5";
  const CheckpointContents first = contentsAt(1.0, 9);
  writeInParts(path, 10, first, {3, 3, 3});
  // Interrupted: parts written, no commit. The checkpoint is still the first one.
  const CheckpointContents second = contentsAt(2.0, 11);
  writeInParts(path, 20, second, {4, 7}, false);
  EXPECT_EQ(sortedEntries(dir.path()),
            (std::vector<std::string>{"checkpoint.hdf5", "checkpoint.parts-10", "checkpoint.parts-20"}));
  expectCheckpoint(first, io::readCheckpoint(path), "after an interrupted write");
  // The next write cleans up both.
  const CheckpointContents third = contentsAt(3.0, 10);
  writeInParts(path, 30, third, {2, 8});
  EXPECT_EQ(sortedEntries(dir.path()), (std::vector<std::string>{"checkpoint.hdf5", "checkpoint.parts-30"}));
  expectCheckpoint(third, io::readCheckpoint(path), "after the next write");

  // Twice at one step: the new parts go beside the ones the checkpoint names, then replace them.
  EXPECT_EQ(writeInParts(path, 30, first, {9}), dir / "checkpoint.parts-30.1");
  EXPECT_EQ(sortedEntries(dir.path()), (std::vector<std::string>{"checkpoint.hdf5", "checkpoint.parts-30.1"}));
  expectCheckpoint(first, io::readCheckpoint(path), "step 30 again");
  EXPECT_EQ(writeInParts(path, 30, third, {5, 5}), dir / "checkpoint.parts-30");
  expectCheckpoint(third, io::readCheckpoint(path), "step 30 a third time");

  // A stale folder of the chosen name (an interrupted write of that step) is emptied.
  fs::create_directories(dir / "checkpoint.parts-40");
  std::ofstream(dir / "checkpoint.parts-40" / "checkpoint.5.hdf5") << "stale";
  EXPECT_EQ(io::prepareCheckpointParts(path, 40), dir / "checkpoint.parts-40");
  EXPECT_TRUE(fs::is_empty(dir / "checkpoint.parts-40"));
  expectCheckpoint(third, io::readCheckpoint(path), "after a prepare");
}

TEST(CheckpointParts, AFolderThatLostAPartOrMixesWritesIsAOneLineError) {
  ScratchDir dir;
  const fs::path path = dir / "checkpoint.hdf5";
  const CheckpointContents c = contentsAt(1.0, 9);
  const fs::path folder = writeInParts(path, 10, c, {3, 3, 3});
  const fs::path lost = folder / "checkpoint.2.hdf5";
  fs::rename(lost, dir / "aside.hdf5");
  for (const std::string& message : {messageOf<InputError>([&] { io::readCheckpoint(path); }),
                                     messageOf<InputError>([&] { io::inspectCheckpoint(path); }),
                                     messageOf<InputError>([&] { io::readSnapshot(path); })}) {
    expectOneLineWith(message, {path.string(), "part 2 of the checkpoint", lost.string(), "lacks this part"});
  }
  // A range that ends before the lost part does not need it.
  expectSameBodies(rowsOf(c.all, 1, 4), io::readCheckpointRange(path, 1, 4).snapshot.particles, "before the loss");

  // The part back, but from another write (another time): the parts disagree.
  const CheckpointContents other = contentsAt(4.0, 9);
  io::writeCheckpointPart(folder, path, rowsOf(other.all, 6, 3), other.meta,
                          {2, 3, 9, io::largestCoordinate(other.all)}, perBodyRows(other.perBody, 6, 3), true);
  expectOneLineWith(messageOf<InputError>([&] { io::readCheckpoint(path); }),
                    {"cannot read checkpoint", "part 2 of the checkpoint", "different snapshots"});

  // The folder gone altogether.
  fs::remove_all(folder);
  expectOneLineWith(messageOf<InputError>([&] { io::readCheckpoint(path); }), {"part 0 of the checkpoint"});
}

TEST(CheckpointParts, OneFileAndPartsCheckpointsReplaceEachOther) {
  ScratchDir dir;
  const fs::path path = dir / "checkpoint.hdf5";
  const CheckpointContents one = contentsAt(1.0, 8);
  writeOneFile(path, one);
  const CheckpointContents parts = contentsAt(2.0, 10);
  writeInParts(path, 20, parts, {4, 6});
  expectCheckpoint(parts, io::readCheckpoint(path), "parts over one file");
  EXPECT_EQ(sortedEntries(dir.path()), (std::vector<std::string>{"checkpoint.hdf5", "checkpoint.parts-20"}));
  const CheckpointContents again = contentsAt(3.0, 7);
  writeOneFile(path, again);
  EXPECT_EQ(sortedEntries(dir.path()), std::vector<std::string>{"checkpoint.hdf5"}) << "the parts went with them";
  expectCheckpoint(again, io::readCheckpoint(path), "one file over parts");
}

TEST(CheckpointParts, CommitRefusesPartsThatAreMissingOrOfAnotherWriteAndKeepsTheOldCheckpoint) {
  ScratchDir dir;
  const fs::path path = dir / "checkpoint.hdf5";
  const CheckpointContents old = contentsAt(1.0, 9);
  writeInParts(path, 10, old, {9});
  const CheckpointContents c = contentsAt(2.0, 9);
  const fs::path folder = writeInParts(path, 20, c, {4, 5}, false);

  expectOneLineWith(messageOf<IoError>([&] { io::commitCheckpointParts(path, folder, 3, 9, c.meta, c.run, c.solver); }),
                    {"cannot write checkpoint", "part 2", "missing"});
  expectOneLineWith(
      messageOf<InputError>([&] { io::commitCheckpointParts(path, folder, 2, 10, c.meta, c.run, c.solver); }),
      {"another write", "NumPart_Total (9)"});
  expectOneLineWith(
      messageOf<InputError>([&] { io::commitCheckpointParts(path, folder, 2, 9, metadataAt(2.5), c.run, c.solver); }),
      {"another write"});
  fs::create_directories(dir / "elsewhere");
  expectOneLineWith(
      messageOf<InputError>([&] { io::commitCheckpointParts(path, dir / "elsewhere", 2, 9, c.meta, c.run, c.solver); }),
      {"not a parts folder beside it"});
  expectCheckpoint(old, io::readCheckpoint(path), "after the refused commits");
  EXPECT_TRUE(fs::exists(dir / "checkpoint.parts-10"));
  io::commitCheckpointParts(path, folder, 2, 9, c.meta, c.run, c.solver);
  expectCheckpoint(c, io::readCheckpoint(path), "after the commit");
}

TEST(CheckpointParts, APartsSolverStateHoldsOneEntryPerBodyOnly) {
  ScratchDir dir;
  const fs::path path = dir / "checkpoint.hdf5";
  const fs::path folder = io::prepareCheckpointParts(path, 1);
  const Particles bodies = someBodies(4);
  CheckpointState wrongLength;
  wrongLength.doubles["dt"] = {1.0, 2.0, 3.0};
  CheckpointState scalar;
  scalar.set("theta", 0.5);
  for (const auto& [state, fragment] :
       {std::pair{&wrongLength, "dt has 3 entries for 4 bodies"}, std::pair{&scalar, "not the scalar theta"}}) {
    expectOneLineWith(messageOf<InputError>([&] {
                        io::writeCheckpointPart(folder, path, bodies, metadataAt(1.0), {0, 2, 8, 10.0}, *state, true);
                      }),
                      {"checkpoint.0.hdf5", fragment});
  }
  EXPECT_TRUE(fs::is_empty(folder));
}

}  // namespace
