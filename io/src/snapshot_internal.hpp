// SPDX-License-Identifier: MIT
// What snapshot.cpp and checkpoint.cpp share inside matcha::io: RAII handles over the HDF5 C API, the writer's groups
// (header, units, parameters, checkpoint states) and atomic file replacement, the reader's header and state readers,
// and the body reader over one file or a multi-file set (readBodies), which readSnapshot, readSnapshotRange and the
// checkpoint readers all go through. Private to the io module: no HDF5 header leaks through include/.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "matcha/core/checkpoint_state.hpp"
#include "matcha/core/units.hpp"
#include "matcha/io/snapshot.hpp"

namespace matcha::io::detail {

/// Replaces line breaks with spaces: every message matcha throws is one line.
std::string oneLine(std::string text);

/// `path` in single quotes, on one line.
std::string quoted(const std::filesystem::path& path);

/// The current HDF5 error stack as one phrase: the API-level description, plus the innermost one in parentheses
/// (for example "unable to open file (truncated file: eof = 1024, ...)"). Empty when the stack is empty.
std::string hdf5ErrorText();

/// Turns off HDF5's printing of its error stack to stderr for the lifetime of the object, so that failures surface
/// only as matcha's one-line exceptions; restores the previous handler afterwards.
class ErrorPrintingOff {
 public:
  ErrorPrintingOff() {
    if (H5Eget_auto2(H5E_DEFAULT, &oldFunction_, &oldData_) < 0) {
      oldFunction_ = nullptr;
      oldData_ = nullptr;
    }
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~ErrorPrintingOff() { H5Eset_auto2(H5E_DEFAULT, oldFunction_, oldData_); }
  ErrorPrintingOff(const ErrorPrintingOff&) = delete;
  ErrorPrintingOff& operator=(const ErrorPrintingOff&) = delete;

 private:
  H5E_auto2_t oldFunction_ = nullptr;
  void* oldData_ = nullptr;
};

/// Owns one HDF5 identifier and releases it with the matching close function (H5Fclose, H5Gclose, ...).
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);

  Handle() = default;
  Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  Handle(Handle&& other) noexcept : id_(std::exchange(other.id_, H5I_INVALID_HID)), closer_(other.closer_) {}
  Handle& operator=(Handle&& other) noexcept {
    if (this != &other) {
      reset();
      id_ = std::exchange(other.id_, H5I_INVALID_HID);
      closer_ = other.closer_;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { reset(); }

  hid_t get() const { return id_; }

  /// Closes now and reports the close status (a file's close is where HDF5 flushes; its failure matters).
  herr_t close() {
    const herr_t status = (id_ >= 0 && closer_ != nullptr) ? closer_(id_) : 0;
    id_ = H5I_INVALID_HID;
    return status;
  }

 private:
  void reset() noexcept {
    if (id_ >= 0 && closer_ != nullptr) closer_(id_);  // errors on the unwinding path are ignored on purpose
    id_ = H5I_INVALID_HID;
  }

  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

/// Wraps a freshly created identifier; throws IoError naming `what` and the HDF5 error if it is invalid.
Handle checked(hid_t id, Handle::Closer closer, const std::string& what);

/// Throws IoError naming `what` and the HDF5 error when `status` < 0.
void check(herr_t status, const std::string& what);

/// Whether `name` is a link in group `loc` (throws IoError when HDF5 cannot tell).
bool linkExists(hid_t loc, const char* name, const std::string& what);

/// A file access property list that uses HDF5's file locking where the file system supports it and goes on without
/// it where it does not (parallel file systems often lack flock).
Handle makeFileAccessList();

/// Rethrows the exception in flight with `prefix` added: InputError and IoError keep their type, other matcha::Error
/// types pass through unchanged, any other std::exception becomes IoError, and anything else propagates as is.
[[noreturn]] void rethrowWithPrefix(const std::string& prefix);

// ---------------------------------------------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------------------------------------------

/// Creates group `name` in `loc` (tracking its attributes' creation order when asked).
Handle createGroup(hid_t loc, const char* name, bool trackAttributeOrder);

/// A fixed-length, NUL-terminated string attribute (what GADGET and SWIFT write; h5dump shows it plainly).
void writeStringAttribute(hid_t loc, const char* name, const std::string& value);

/// What /Header says about the bodies and the files: this file's bodies, the set's, the set's files, and the BoxSize
/// attribute as written (the periodic box, or an open-boundary state's enclosing cube).
struct HeaderCounts {
  std::uint64_t thisFile = 0;
  std::uint64_t total = 0;
  std::int32_t numFiles = 1;
  double boxSize = 1.0;
};

/// /Header (see snapshot.hpp), /Units and /Parameters.
void writeHeader(hid_t file, const SnapshotMetadata& meta, const HeaderCounts& counts);
void writeUnits(hid_t file, const UnitSystem& units);
void writeParameters(hid_t file, const std::vector<std::pair<std::string, std::string>>& parameters);

/// A CheckpointState as group `name` of `parent`: scalars as double attributes, arrays as 1-D datasets.
void writeState(hid_t parent, const char* name, const CheckpointState& state);

/// Writes the HDF5 file `path` atomically: `write` fills a new file created at a temporary path beside it (it gets
/// the open file and must leave no object of it open), which is then flushed, closed, synced and renamed over `path`,
/// and the directory synced. On any failure the temporary file is removed, `path` is untouched, and the exception is
/// rethrown with `prefix` (rethrowWithPrefix).
void writeAtomically(const std::filesystem::path& path, const std::string& prefix,
                     const std::function<void(hid_t file)>& write);

/// Best effort: makes a rename in `dir` durable (empty: the current directory).
void syncDirectory(const std::filesystem::path& dir);

// ---------------------------------------------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------------------------------------------

/// Opens `path` as an HDF5 file for reading, or throws the errors readSnapshot documents for files.
Handle openForReading(const std::filesystem::path& path);

/// A string (or numeric) attribute as text; nullopt for types that have no text form. `where` names `loc` in
/// messages ("/Parameters").
std::optional<std::string> attributeText(hid_t loc, const std::string& name, const std::string& where);

/// The /Header facts that the readers use or check; every field is optional in the file.
struct HeaderInfo {
  double time = 0.0;
  double massTable1 = 0.0;
  std::string matchaVersion, matchaGitCommit;
  double boxSize = 0.0;                      ///< Snapshot::boxSize
  double storedBoxSize = 0.0;                ///< the BoxSize attribute as stored (0 when absent)
  std::optional<CosmologyHeader> cosmology;  ///< Snapshot::cosmology
  std::int64_t numFiles = 1;                 ///< NumFilesPerSnapshot (1 when absent)
  std::uint64_t totalBodies = 0;             ///< NumPart_Total[1] with its high word (this file's rows when absent)
};

/// Reads and checks /Header of a file whose PartType1/Coordinates has `count` rows. `bodiesElsewhere`: the file holds
/// no bodies but describes a set that does (a checkpoint's parts file), so NumPart_Total is not this file's.
HeaderInfo readHeader(hid_t file, hsize_t count, bool bodiesElsewhere = false);

/// /Units as Snapshot::units documents it.
std::optional<UnitSystem> readUnits(hid_t file);

/// Rows [begin, begin + count) of the arrays that have `rows` entries: what a reader of part of the bodies takes of
/// the per-body arrays of a checkpoint's solver state.
struct RowWindow {
  hsize_t rows = 0;
  hsize_t begin = 0;
  hsize_t count = 0;
  bool everyArray = false;  ///< every array must have `rows` entries (a checkpoint part's): another is an error
};

/// Group /Checkpoint/`name` back as a CheckpointState. With `perBody`, the arrays of perBody->rows entries are read in
/// its window only, and their names listed in `perBodyNames` (when given), in name order.
CheckpointState readState(hid_t file, const char* name, const std::optional<RowWindow>& perBody = std::nullopt,
                          std::vector<std::string>* perBodyNames = nullptr);

/// Every file that readBodies opens, in set order: the open file, its index in the set, its checked header, its
/// bodies (rows), and the rows of it in the range read ([begin, begin + count) of this file's rows; count 0 when the
/// range misses it).
using FileVisitor = std::function<void(hid_t file, int index, const HeaderInfo& header, std::uint64_t rows,
                                       std::uint64_t begin, std::uint64_t count)>;

/// The bodies [first, first + count) (count nullopt: to the last body) of the one-file or multi-file snapshot named by
/// `given` (as readSnapshot takes it; a checkpoint's parts file stands for the set of its parts), with the header
/// fields of the file named (of part 0 for a parts file). Each file of the set is opened in order, its header checked
/// against the set's, until the range is covered (`everyFile`: every file, and their bodies must add up to
/// NumPart_Total). Only the range's rows are read, and checked as readSnapshot checks them; ParticleIDs are checked not
/// to repeat within the range. Throws the errors readSnapshot documents, without its "cannot read snapshot" prefix, and
/// InputError when the range is not within the set.
Snapshot readBodies(const std::filesystem::path& given, std::uint64_t first, std::optional<std::uint64_t> count,
                    bool everyFile, const FileVisitor& visit = {});

/// The SnapshotInfo of `path` (one file, or a parts file: its header's) without reading bodies.
SnapshotInfo inspectFile(const std::filesystem::path& path);

// ---------------------------------------------------------------------------------------------------------------
// Checkpoints in parts (checkpoint.cpp)
// ---------------------------------------------------------------------------------------------------------------

/// When the open file `file` at `path` is a checkpoint's parts file: the folder of its parts (beside `path`).
/// Throws InputError when the folder's name is malformed.
std::optional<std::filesystem::path> checkpointPartsFolder(hid_t file, const std::filesystem::path& path);

/// Part `index` of the checkpoint `path` in `folder`: multiFilePath(folder / path's file name, index).
std::filesystem::path partPath(const std::filesystem::path& folder, const std::filesystem::path& path, int index);

}  // namespace matcha::io::detail
