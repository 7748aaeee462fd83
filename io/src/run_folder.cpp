// SPDX-License-Identifier: MIT
#include "matcha/io/run_folder.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <ctime>
#include <fstream>
#include <sstream>
#include <system_error>

#include "matcha/core/errors.hpp"
#include "matcha/io/snapshot.hpp"
#include "parts_folder_name.hpp"

namespace matcha::io {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kSnapshotPrefix = "snapshot_";
constexpr std::string_view kSnapshotSuffix = ".hdf5";

using detail::allDigits;

std::optional<std::int64_t> parsePid(std::string_view text) {
  std::int64_t pid = 0;
  if (!allDigits(text)) return std::nullopt;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), pid);
  if (error != std::errc() || end != text.data() + text.size() || pid <= 0) return std::nullopt;
  return pid;
}

/// The checkpoint's file name without its extension: "checkpoint", whose parts folders are "checkpoint.parts-<step>".
std::string checkpointStem() { return fs::path(kCheckpointName).stem().string(); }

/// A checkpoint's parts folder ("checkpoint.parts-<step>" or "checkpoint.parts-<step>.<n>"), which a run writes and
/// replaces as it writes its checkpoints in parts (io::prepareCheckpointParts).
bool isPartsFolderName(std::string_view name) { return detail::isPartsFolderName(name, checkpointStem()); }

/// A file of a checkpoint's parts folder: "checkpoint.<k>.hdf5" (io::writeCheckpointPart).
bool isPartFileName(std::string_view name) {
  const fs::path checkpoint(kCheckpointName);
  const std::string prefix = checkpoint.stem().string() + ".";
  const std::string suffix = checkpoint.extension().string();
  return name.size() > prefix.size() + suffix.size() && name.starts_with(prefix) && name.ends_with(suffix) &&
         allDigits(name.substr(prefix.size(), name.size() - prefix.size() - suffix.size()));
}

/// The pid in the name of a temporary file of one of the files for which `isOwn` holds (see temporaryFileOwner).
std::optional<std::int64_t> temporaryOwner(std::string_view name, bool (*isOwn)(std::string_view)) {
  constexpr std::string_view probe = ".matcha-write-probe-";
  if (name.starts_with(probe)) return parsePid(name.substr(probe.size()));
  const std::size_t at = name.rfind(".tmp-");
  if (at == std::string_view::npos || at == 0) return std::nullopt;
  std::string_view rest = name.substr(at + 5);  // "<pid>" or "<pid>-<k>"
  if (const std::size_t dash = rest.find('-'); dash != std::string_view::npos) {
    if (!allDigits(rest.substr(dash + 1))) return std::nullopt;
    rest = rest.substr(0, dash);
  }
  // Only temporaries of matcha's own files: ".<own file>.tmp-..." or "<own file>.tmp-..." (older versions).
  std::string_view target = name.substr(0, at);
  if (target.starts_with('.')) target.remove_prefix(1);
  if (!isOwn(target)) return std::nullopt;
  return parsePid(rest);
}

/// snapshot_NNN.hdf5, or file K of a multi-file snapshot, snapshot_NNN.K.hdf5 (a run on ranks, --snapshot-files ranks).
bool isSnapshotName(std::string_view name) {
  if (!(name.size() > kSnapshotPrefix.size() + kSnapshotSuffix.size() && name.starts_with(kSnapshotPrefix) &&
        name.ends_with(kSnapshotSuffix))) {
    return false;
  }
  const std::string_view number =
      name.substr(kSnapshotPrefix.size(), name.size() - kSnapshotPrefix.size() - kSnapshotSuffix.size());
  const std::size_t dot = number.find('.');
  return dot == std::string_view::npos ? allDigits(number)
                                       : allDigits(number.substr(0, dot)) && allDigits(number.substr(dot + 1));
}

std::string quoted(const fs::path& path) {
  std::string text = path.string();
  std::replace(text.begin(), text.end(), '\n', ' ');
  std::replace(text.begin(), text.end(), '\r', ' ');
  return "'" + text + "'";
}

std::string hostName() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "unknown";
  return name;
}

std::string utcNow() {
  const std::time_t now = std::time(nullptr);
  std::tm parts{};
  ::gmtime_r(&now, &parts);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &parts);
  return text;
}

std::string oneLine(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  std::replace(text.begin(), text.end(), '\r', ' ');
  return text;
}

std::string formatMarker(const RunMarker& marker) {
  std::ostringstream text;
  text << "# matcha run in progress, or killed: the files of this folder may be incomplete\n"
       << "pid " << marker.pid << "\nhost " << oneLine(marker.host) << "\nstarted " << oneLine(marker.startedUtc)
       << "\ncommand " << oneLine(marker.commandLine) << "\n";
  return text.str();
}

RunMarker readMarker(const fs::path& path) {
  RunMarker marker;
  std::ifstream file(path);
  for (std::string line; std::getline(file, line);) {
    const std::size_t space = line.find(' ');
    if (space == std::string::npos || line.starts_with("#")) continue;
    const std::string key = line.substr(0, space), value = line.substr(space + 1);
    if (key == "pid") marker.pid = parsePid(value).value_or(0);
    if (key == "host") marker.host = value;
    if (key == "started") marker.startedUtc = value;
    if (key == "command") marker.commandLine = value;
  }
  return marker;
}

std::string describeMarker(const RunMarker& marker) {
  std::string text = "pid " + std::to_string(marker.pid);
  if (!marker.host.empty()) text += " on " + marker.host;
  if (!marker.startedUtc.empty()) text += ", started " + marker.startedUtc;
  return text;
}

/// Up to three names and how many more: "snapshot_000.hdf5, summary.json, ... (7 files)".
std::string someNames(const std::vector<std::string>& names) {
  std::string text;
  for (std::size_t k = 0; k < std::min<std::size_t>(names.size(), 3); ++k) text += (k == 0 ? "" : ", ") + names[k];
  if (names.size() > 3) text += ", ...";
  return text + " (" + std::to_string(names.size()) + (names.size() == 1 ? " file)" : " files)");
}

/// Whether `file` lies directly in `dir` (both may not exist yet: compared after resolving what does exist).
bool isDirectlyIn(const fs::path& file, const fs::path& dir) {
  std::error_code ec;
  const fs::path parent = fs::weakly_canonical(fs::absolute(file, ec), ec).parent_path();
  if (ec) return false;
  const fs::path folder = fs::weakly_canonical(fs::absolute(dir, ec), ec);
  if (ec) return false;
  return parent == folder;
}

/// ".<name>.tmp-<pid>" or ".<name>.tmp-<pid>-<k>": the names temporaryFileOwner recognises. Appended piece by
/// piece (GCC 12 warns, wrongly, on a chain of operator+ here).
std::string temporaryName(const std::string& name, std::int64_t pid, std::optional<unsigned> k) {
  std::string text = ".";
  text.append(name).append(".tmp-").append(std::to_string(pid));
  if (k) text.append("-").append(std::to_string(*k));
  return text;
}

/// Removes a file, or a folder with its contents (a checkpoint's parts folder).
void removeFile(const fs::path& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) throw IoError("cannot remove " + quoted(path) + ": " + ec.message());
}

}  // namespace

bool isRunFileName(std::string_view name) {
  return isSnapshotName(name) || name == "summary.json" || name == "diagnostics.log" ||
         name == "used_parameters.toml" || name == "last_good_state.hdf5" || name == kCheckpointName ||
         name == kRunningMarkerName || isPartsFolderName(name);
}

std::optional<std::int64_t> temporaryFileOwner(std::string_view name) { return temporaryOwner(name, isRunFileName); }

bool processIsAlive(std::int64_t pid) {
  if (pid <= 0 || pid > std::int64_t{1} << 30) return false;
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

RunMarker markerForThisProcess(const std::string& commandLine) {
  RunMarker marker;
  marker.pid = ::getpid();
  marker.host = hostName();
  marker.startedUtc = utcNow();
  marker.commandLine = commandLine;
  return marker;
}

RunFolderContents inspectRunFolder(const fs::path& dir) {
  RunFolderContents contents;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return contents;
  contents.exists = true;
  fs::directory_iterator entries(dir, ec);
  if (ec) throw IoError("cannot list the output folder " + quoted(dir) + ": " + ec.message());
  auto addTemporary = [&](const std::string& name, std::int64_t owner) {
    (owner != ::getpid() && processIsAlive(owner) ? contents.liveTemporaries : contents.staleTemporaries)
        .push_back(name);
  };
  for (const fs::directory_entry& entry : entries) {
    const std::string name = entry.path().filename().string();
    // A run writes files, and the parts folders of its checkpoints: another folder that bears one of their names is
    // the user's (and a run fails to write there).
    if (entry.is_directory(ec)) {
      if (!isPartsFolderName(name)) continue;
      contents.runFiles.push_back(name);
      // The parts' temporaries: ranks writing a checkpoint now, or killed while they did.
      fs::directory_iterator parts(entry.path(), ec);
      for (const fs::directory_entry& part : parts) {
        const std::string partName = part.path().filename().string();
        if (const auto owner = temporaryOwner(partName, isPartFileName)) addTemporary(name + "/" + partName, *owner);
      }
    } else if (isRunFileName(name)) {
      contents.runFiles.push_back(name);
      if (isSnapshotName(name)) contents.snapshots.push_back(name);
    } else if (const auto owner = temporaryFileOwner(name)) {
      addTemporary(name, *owner);
    }
  }
  std::sort(contents.runFiles.begin(), contents.runFiles.end());
  for (auto* names : {&contents.staleTemporaries, &contents.liveTemporaries}) std::sort(names->begin(), names->end());
  // By number, not by text: snapshot_1000 comes after snapshot_999.
  std::sort(contents.snapshots.begin(), contents.snapshots.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;
  });
  if (fs::exists(dir / kRunningMarkerName, ec)) {
    contents.marker = readMarker(dir / kRunningMarkerName);
    contents.markerOwnerAlive = contents.marker->host == hostName() && contents.marker->pid != ::getpid() &&
                                processIsAlive(contents.marker->pid);
  }
  return contents;
}

void checkRunFolder(const RunFolderRequest& request) {
  const fs::path& dir = request.dir;
  if (dir.empty()) throw InputError("--out: the output folder must be named (got an empty string)");
  const std::string where = "--out " + quoted(dir);
  if (!request.icFile.empty() && isDirectlyIn(request.icFile, dir)) {
    throw InputError(where + " holds the initial-conditions file " + quoted(request.icFile) +
                     ", which a run there could replace or remove; write the run to another folder");
  }
  const RunFolderContents contents = inspectRunFolder(dir);
  if (request.mode == RunFolderMode::resume) {
    const std::string given = "--restart " + quoted(dir);
    if (!contents.exists) throw InputError(given + ": no such folder");
    if (!fs::is_regular_file(dir / kCheckpointName)) {
      throw InputError(given + " holds no " + kCheckpointName +
                       ": the run wrote none (one follows its first output and every --checkpoint-interval seconds)");
    }
  }
  if (contents.marker && contents.markerOwnerAlive) {
    throw InputError(where + ": a run is in progress there (" + describeMarker(*contents.marker) +
                     "); wait for it or choose another folder");
  }
  if (!contents.liveTemporaries.empty()) {
    throw InputError(where + ": another process is writing there (" + contents.liveTemporaries.front() +
                     "); choose another folder");
  }
  if (request.mode == RunFolderMode::fresh && !contents.runFiles.empty()) {
    const std::string killed =
        contents.marker ? ", from a run that did not finish (" + describeMarker(*contents.marker) + ")" : "";
    throw InputError(where + " already holds another run's files: " + someNames(contents.runFiles) + killed +
                     "; choose a new folder, or --overwrite to remove them first");
  }
}

void prepareRunFolder(const RunFolderRequest& request, const RunMarker& marker) {
  checkRunFolder(request);
  const fs::path& dir = request.dir;
  ensureWritableDirectory(dir);
  const RunFolderContents contents = inspectRunFolder(dir);
  for (const std::string& name : contents.staleTemporaries) removeFile(dir / name);
  if (request.mode == RunFolderMode::overwrite) {
    for (const std::string& name : contents.runFiles) removeFile(dir / name);
  }
  // A resumed run takes the place of the one that stopped: its marker, if it was killed, goes.
  if (request.mode == RunFolderMode::resume && contents.marker) removeFile(dir / kRunningMarkerName);
  // Written under a temporary name, then linked to its name: link() fails when the name exists, so of two runs that
  // start at the same moment one gets the folder and the other is refused, and nobody reads a half-written marker.
  const fs::path markerPath = dir / kRunningMarkerName;
  const fs::path temporary = dir / temporaryName(kRunningMarkerName, ::getpid(), std::nullopt);
  {
    std::ofstream file(temporary, std::ios::trunc);
    file << formatMarker(marker);
    file.flush();
    if (!file) {
      std::error_code ignored;
      fs::remove(temporary, ignored);
      throw IoError("cannot write " + quoted(markerPath));
    }
  }
  const int linked = ::link(temporary.c_str(), markerPath.c_str());
  const int code = errno;
  std::error_code ignored;
  fs::remove(temporary, ignored);
  if (linked != 0 && code == EEXIST) {
    throw InputError("--out " + quoted(dir) +
                     ": another run took the folder at the same moment; choose another folder");
  }
  if (linked != 0) {
    throw IoError("cannot write " + quoted(markerPath) + ": " +
                  std::error_code(code, std::generic_category()).message());
  }
}

void removeRunningMarker(const fs::path& dir) { removeFile(dir / kRunningMarkerName); }

void writeTextFile(const fs::path& path, const std::string& text) {
  static std::atomic<unsigned> counter{0};  // tells apart concurrent writes of one process
  const fs::path temporary =
      path.parent_path() / temporaryName(path.filename().string(), ::getpid(), counter.fetch_add(1));
  {
    std::ofstream file(temporary, std::ios::trunc);
    file << text;
    file.flush();
    if (!file) {
      std::error_code ignored;
      fs::remove(temporary, ignored);
      throw IoError("cannot write " + quoted(path));
    }
  }
  std::error_code error;
  fs::rename(temporary, path, error);
  if (error) {
    std::error_code ignored;
    fs::remove(temporary, ignored);
    throw IoError("cannot write " + quoted(path) + ": " + error.message());
  }
}

}  // namespace matcha::io
