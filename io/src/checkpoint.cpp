// SPDX-License-Identifier: MIT
// Checkpoints (matcha/io/snapshot.hpp): one file written by writeCheckpoint, a snapshot with forces and the run's and
// the solver's states in /Checkpoint; or in parts, written by the ranks of a distributed run: a folder
// "<name>.parts-<step>" beside the checkpoint's path holding a multi-file snapshot, one file a part, each with the
// per-body arrays of its bodies' solver state in /Checkpoint/Solver, and at the path itself a small "parts file":
//
//   /Header      as a snapshot's, for the whole set (NumPart_Total, NumFilesPerSnapshot = parts, Time, BoxSize, ...),
//                with NumPart_ThisFile 0
//   /Units, /Parameters
//   /Checkpoint  attribute Parts: the folder's name (relative to the parts file's folder); groups Run and Solver
//
// The parts file is written after every part, and atomically: it names either the old folder or the new one, whose
// parts are complete. Folders it does not name are removed once it is in place.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include "matcha/core/errors.hpp"
#include "matcha/io/snapshot.hpp"
#include "parts_folder_name.hpp"
#include "snapshot_internal.hpp"

namespace matcha::io {
namespace detail {

std::optional<std::filesystem::path> checkpointPartsFolder(hid_t file, const std::filesystem::path& path) {
  constexpr const char* kAttribute = "Parts";
  if (!linkExists(file, "Checkpoint", "group /Checkpoint")) return std::nullopt;
  Handle group = checked(H5Gopen2(file, "Checkpoint", H5P_DEFAULT), H5Gclose, "H5Gopen2(/Checkpoint)");
  const htri_t exists = H5Aexists(group.get(), kAttribute);
  if (exists < 0) throw IoError("looking up attribute /Checkpoint Parts failed: " + hdf5ErrorText());
  if (exists == 0) return std::nullopt;
  const std::optional<std::string> name = attributeText(group.get(), kAttribute, "/Checkpoint");
  if (!name || name->empty() || *name == "." || *name == ".." || name->find('/') != std::string::npos) {
    throw InputError("/Checkpoint Parts is not the name of a folder beside the file: the checkpoint is malformed");
  }
  return path.parent_path() / *name;
}

std::filesystem::path partPath(const std::filesystem::path& folder, const std::filesystem::path& path, int index) {
  return multiFilePath(folder / path.filename(), index);
}

}  // namespace detail

namespace {

namespace fs = std::filesystem;
using detail::Handle;
using detail::HeaderInfo;
using detail::quoted;
using detail::RowWindow;

/// Best effort: removes every parts folder of the checkpoint `path` beside it but `keep` (a bare name; empty: none is
/// kept). A folder that cannot be removed stays; the next commit tries again.
void removePartsFoldersExcept(const fs::path& path, const std::string& keep) {
  std::error_code ec;
  const fs::path dir = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  const std::string stem = path.stem().string();
  std::vector<fs::path> doomed;
  for (fs::directory_iterator entry(dir, ec), end; !ec && entry != end; entry.increment(ec)) {
    const std::string name = entry->path().filename().string();
    std::error_code notDirectory;
    if (name != keep && detail::isPartsFolderName(name, stem) && entry->is_directory(notDirectory)) {
      doomed.push_back(entry->path());
    }
  }
  for (const fs::path& folder : doomed) fs::remove_all(folder, ec);
  detail::syncDirectory(dir);
}

/// Whether the open checkpoint file is a parts file.
bool isPartsFile(const Handle& file, const fs::path& path) {
  return detail::checkpointPartsFolder(file.get(), path).has_value();
}

/// Appends part arrays to the joined ones (each per-body array of a checkpoint in parts, over its parts in order).
void appendArrays(CheckpointState& joined, const CheckpointState& part) {
  auto append = [](auto& to, const auto& from) {
    for (const auto& [name, values] : from) {
      auto& all = to[name];
      all.insert(all.end(), values.begin(), values.end());
    }
  };
  append(joined.doubles, part.doubles);
  append(joined.floats, part.floats);
}

/// Puts the per-body arrays joined over the parts beside the parts file's solver state, after checking that each has
/// one entry per body read (a part that holds bodies but lacks an array makes it shorter).
void mergePerBodyArrays(CheckpointState& solver, const CheckpointState& perBody, std::uint64_t bodies) {
  auto merge = [&](auto& to, const auto& from) {
    for (const auto& [name, values] : from) {
      if (values.size() != bodies) {
        throw InputError("the per-body solver array " + name + " has " + std::to_string(values.size()) +
                         " entries over the parts, for " + std::to_string(bodies) +
                         " bodies: a part lacks it, or holds it as another type");
      }
      if (solver.scalars.count(name) != 0 || solver.doubles.count(name) != 0 || solver.floats.count(name) != 0) {
        throw InputError("the solver state " + name + " is both in the parts file and in the parts");
      }
      to[name] = values;
    }
  };
  merge(solver.doubles, perBody.doubles);
  merge(solver.floats, perBody.floats);
}

/// The bodies [first, first + count) of a checkpoint (count nullopt: to the last; everyFile: as readSnapshot, every
/// part read and checked) with the run's state and the solver's, its per-body arrays cut to the range.
Checkpoint readCheckpointRows(const fs::path& path, std::uint64_t first, std::optional<std::uint64_t> count,
                              bool everyFile) {
  Checkpoint checkpoint;
  bool parts = false;
  {
    Handle file = detail::openForReading(path);
    parts = isPartsFile(file, path);
    checkpoint.run = detail::readState(file.get(), "Run");
    if (parts) checkpoint.solver = detail::readState(file.get(), "Solver");
  }
  CheckpointState perBody;  // of a checkpoint in parts: joined over the parts read
  checkpoint.snapshot = detail::readBodies(
      path, first, count, everyFile,
      [&](hid_t file, int, const HeaderInfo&, std::uint64_t rows, std::uint64_t begin, std::uint64_t n) {
        if (!parts) {
          checkpoint.solver = detail::readState(file, "Solver", RowWindow{rows, begin, n, false});
        } else if (n > 0) {
          appendArrays(perBody, detail::readState(file, "Solver", RowWindow{rows, begin, n, true}));
        }
      });
  if (parts) mergePerBodyArrays(checkpoint.solver, perBody, checkpoint.snapshot.particles.size());
  return checkpoint;
}

std::string readPrefix(const fs::path& path) { return "cannot read checkpoint " + quoted(path) + ": "; }

}  // namespace

void writeCheckpoint(const std::filesystem::path& path, const Particles& particles, const SnapshotMetadata& meta,
                     const CheckpointState& run, const CheckpointState& solver, bool includePotential) {
  SnapshotWriteOptions options;
  options.includePotential = includePotential;
  options.checkpointRun = &run;
  options.checkpointSolver = &solver;
  writeSnapshot(path, particles, meta, options);
  removePartsFoldersExcept(path, "");  // a checkpoint in parts that this one replaces
}

Checkpoint readCheckpoint(const std::filesystem::path& path) {
  const detail::ErrorPrintingOff quiet;
  try {
    return readCheckpointRows(path, 0, std::nullopt, true);
  } catch (...) {
    detail::rethrowWithPrefix(readPrefix(path));
  }
}

Checkpoint readCheckpointRange(const std::filesystem::path& path, std::uint64_t first, std::uint64_t count) {
  const detail::ErrorPrintingOff quiet;
  try {
    if (count == 0) throw InputError("a range of 0 bodies (from body " + std::to_string(first) + ") reads nothing");
    return readCheckpointRows(path, first, count, false);
  } catch (...) {
    detail::rethrowWithPrefix(readPrefix(path));
  }
}

CheckpointInfo inspectCheckpoint(const std::filesystem::path& path) {
  const detail::ErrorPrintingOff quiet;
  try {
    CheckpointInfo info;
    info.snapshot = detail::inspectFile(path);
    Handle file = detail::openForReading(path);
    info.run = detail::readState(file.get(), "Run");
    if (!isPartsFile(file, path)) {
      // The arrays with one entry per body are read empty, then left out.
      info.solver =
          detail::readState(file.get(), "Solver", RowWindow{info.snapshot.numBodies, 0, 0, false}, &info.perBodyArrays);
      for (const std::string& name : info.perBodyArrays) {
        info.solver.doubles.erase(name);
        info.solver.floats.erase(name);
      }
      return info;
    }
    info.solver = detail::readState(file.get(), "Solver");
    file.close();
    // Every part's header (checked against the parts file's, their bodies adding up) and its arrays' names.
    std::set<std::string> names;
    detail::readBodies(path, 0, 0, true,
                       [&](hid_t part, int, const HeaderInfo&, std::uint64_t rows, std::uint64_t, std::uint64_t) {
                         info.partBodies.push_back(rows);
                         std::vector<std::string> partNames;
                         detail::readState(part, "Solver", RowWindow{rows, 0, 0, true}, &partNames);
                         names.insert(partNames.begin(), partNames.end());
                       });
    info.perBodyArrays.assign(names.begin(), names.end());
    return info;
  } catch (...) {
    detail::rethrowWithPrefix(readPrefix(path));
  }
}

std::filesystem::path prepareCheckpointParts(const std::filesystem::path& path, std::uint64_t step) {
  const std::string prefix = "cannot prepare the parts of checkpoint " + quoted(path) + ": ";
  if (path.filename().empty()) throw InputError(prefix + "the path names no file");
  const detail::ErrorPrintingOff quiet;
  // The folder that the checkpoint at `path` names now must stay until the new one replaces it. When the checkpoint
  // cannot be read, no folder that exists is taken.
  std::optional<std::string> named;
  bool unknown = false;
  std::error_code ec;
  if (fs::exists(path, ec) || ec) {
    try {
      Handle file = detail::openForReading(path);
      if (const auto folder = detail::checkpointPartsFolder(file.get(), path)) named = folder->filename().string();
    } catch (const std::exception&) {
      unknown = true;
    }
  }
  const std::string base = detail::partsFolderPrefix(path.stem().string()) + std::to_string(step);
  fs::path folder;
  for (unsigned n = 0;; ++n) {
    const std::string name = n == 0 ? base : base + "." + std::to_string(n);
    folder = path.parent_path() / name;
    if (name == named || (unknown && (fs::exists(folder, ec) || ec))) continue;
    break;
  }
  fs::remove_all(folder, ec);  // a folder of this name left by an interrupted write
  if (ec) throw IoError(prefix + "cannot empty " + quoted(folder) + ": " + ec.message());
  fs::create_directories(folder, ec);
  if (ec) throw IoError(prefix + "cannot create " + quoted(folder) + ": " + ec.message());
  detail::syncDirectory(path.parent_path());
  return folder;
}

void writeCheckpointPart(const std::filesystem::path& folder, const std::filesystem::path& path,
                         const Particles& particles, const SnapshotMetadata& meta,
                         const SnapshotWriteOptions::FilePart& part, const CheckpointState& partSolver,
                         bool includePotential) {
  const fs::path file = detail::partPath(folder, path, part.index);
  auto refuse = [&](const std::string& why) { throw InputError("cannot write snapshot " + quoted(file) + ": " + why); };
  if (!partSolver.scalars.empty()) {
    refuse("a part's solver state holds per-body arrays only, not the scalar " + partSolver.scalars.begin()->first);
  }
  auto requirePerBody = [&](const auto& arrays) {
    for (const auto& [name, values] : arrays) {
      if (values.size() != particles.size()) {
        refuse("the part's solver array " + name + " has " + std::to_string(values.size()) + " entries for " +
               std::to_string(particles.size()) + " bodies");
      }
    }
  };
  requirePerBody(partSolver.doubles);
  requirePerBody(partSolver.floats);
  SnapshotWriteOptions options;
  options.includePotential = includePotential;
  options.checkpointSolver = &partSolver;
  options.filePart = part;
  writeSnapshot(file, particles, meta, options);
}

void commitCheckpointParts(const std::filesystem::path& path, const std::filesystem::path& folder, int count,
                           std::uint64_t totalBodies, const SnapshotMetadata& meta, const CheckpointState& run,
                           const CheckpointState& solver) {
  const std::string prefix = "cannot write checkpoint " + quoted(path) + ": ";
  if (path.filename().empty()) throw InputError(prefix + "the path names no file");
  const std::string name = folder.filename().string();
  std::error_code ec;
  const fs::path here = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  const fs::path there = folder.parent_path().empty() ? fs::path(".") : folder.parent_path();
  if (!detail::isPartsFolderName(name, path.stem().string()) || !fs::equivalent(here, there, ec)) {
    throw InputError(prefix + quoted(folder) + " is not a parts folder beside it (" +
                     detail::partsFolderPrefix(path.stem().string()) + "STEP, from prepareCheckpointParts)");
  }
  if (count < 1) throw InputError(prefix + "a checkpoint of " + std::to_string(count) + " parts");
  const detail::ErrorPrintingOff quiet;
  // The parts must all be on disk and of this write before the parts file names them (and the old ones go).
  detail::HeaderCounts counts{0, totalBodies, count, 1.0};
  try {
    for (int k = 0; k < count; ++k) {
      const fs::path file = detail::partPath(folder, path, k);
      if (!fs::is_regular_file(file, ec))
        throw IoError("part " + std::to_string(k) + ", " + quoted(file) + ", is missing");
    }
    HeaderInfo header;
    detail::readBodies(detail::partPath(folder, path, 0), 0, 0, true,
                       [&](hid_t, int k, const HeaderInfo& partHeader, std::uint64_t, std::uint64_t, std::uint64_t) {
                         if (k == 0) header = partHeader;
                       });
    if (header.numFiles != count || header.totalBodies != totalBodies || header.time != meta.time ||
        header.boxSize != std::max(meta.boxSize, 0.0)) {
      throw InputError("the parts in " + quoted(folder) + " are of another write: their NumFilesPerSnapshot (" +
                       std::to_string(header.numFiles) + "), NumPart_Total (" + std::to_string(header.totalBodies) +
                       "), Time or BoxSize differ from this checkpoint's");
    }
    counts.boxSize = header.storedBoxSize;
  } catch (...) {
    detail::rethrowWithPrefix(prefix);
  }
  detail::writeAtomically(path, prefix, [&](hid_t file) {
    detail::writeHeader(file, meta, counts);
    detail::writeUnits(file, meta.units);
    detail::writeParameters(file, meta.parameters);
    Handle checkpoint = detail::createGroup(file, "Checkpoint", false);
    detail::writeStringAttribute(checkpoint.get(), "Parts", name);
    detail::writeState(checkpoint.get(), "Run", run);
    detail::writeState(checkpoint.get(), "Solver", solver);
  });
  removePartsFoldersExcept(path, name);
}

}  // namespace matcha::io
