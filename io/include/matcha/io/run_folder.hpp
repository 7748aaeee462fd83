// SPDX-License-Identifier: MIT
// The output folder of `matcha run`: which files in it are a run's, whether a run is (or was, until killed) writing
// there, and how a new run takes the folder over without mixing its files with an older run's or removing anything
// that matcha did not write.
//
// A run folder holds snapshot_NNN.hdf5, diagnostics.log, used_parameters.toml, summary.json, checkpoint.hdf5 (with, for
// a checkpoint in parts, its folder checkpoint.parts-<step>) and, while the run is in progress (or after it was
// killed), the marker RUNNING (pid, host, start time, command line). Atomic writes leave temporary files
// ".<name>.tmp-<pid>-<k>" (io::writeSnapshot, io::writeTextFile) behind only when their process dies; a parts folder
// may hold those of its parts.
//
// Restarts: inspectRunFolder() reads what a run left (its snapshots in order, the marker, whether its writer is
// alive) without changing anything. A `--restart OUT` continues from OUT's checkpoint.hdf5 and prepares the folder
// with RunFolderMode::resume, which keeps the run's files (and removes the marker of the run that stopped).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace matcha::io {

/// The marker a run keeps in its folder from start to end; left behind when the run is killed.
inline constexpr const char* kRunningMarkerName = "RUNNING";
/// The newest checkpoint of the run in a folder (`matcha run --restart`), replaced atomically.
inline constexpr const char* kCheckpointName = "checkpoint.hdf5";

/// Whether `name` (a bare file name) is one of the files a run writes into its folder: snapshot_<digits>.hdf5,
/// summary.json, diagnostics.log, used_parameters.toml, last_good_state.hdf5, checkpoint.hdf5 or RUNNING; or the one
/// kind of folder it writes there, a checkpoint's parts: checkpoint.parts-<digits> or
/// checkpoint.parts-<digits>.<digits>.
bool isRunFileName(std::string_view name);

/// The pid in the name of a temporary file that matcha's atomic writes or its directory probe create
/// (".<name>.tmp-<pid>-<k>", "<name>.tmp-<pid>", ".matcha-write-probe-<pid>"); nullopt for any other name.
std::optional<std::int64_t> temporaryFileOwner(std::string_view name);

/// Whether a process `pid` exists on this host (kill(pid, 0); a process of another user counts as alive).
bool processIsAlive(std::int64_t pid);

/// What RUNNING records about the run that wrote it.
struct RunMarker {
  std::int64_t pid = 0;
  std::string host;         ///< gethostname() of the run's machine
  std::string startedUtc;   ///< ISO 8601, e.g. 2024-05-01T12:34:56Z
  std::string commandLine;  ///< the arguments as given, joined with spaces
};

/// The marker of this process: its pid, host name and the current time; `commandLine` as given.
RunMarker markerForThisProcess(const std::string& commandLine);

/// What a folder holds, as far as runs are concerned. Names are bare file names, each list sorted.
struct RunFolderContents {
  bool exists = false;  ///< the folder exists (everything else is empty when it does not)
  /// Every name for which isRunFileName holds, the marker included; of the folders, only checkpoint parts folders
  /// (a run writes no other).
  std::vector<std::string> runFiles;
  std::vector<std::string> snapshots;  ///< the snapshot_NNN.hdf5 among them, by number
  /// Temporary files whose process is gone (killed runs); those in a parts folder as "<folder>/<name>".
  std::vector<std::string> staleTemporaries;
  /// Temporary files of a live process (in the folder or in a parts folder): a writer is at work here now.
  std::vector<std::string> liveTemporaries;
  std::optional<RunMarker> marker;  ///< RUNNING, when present (fields empty where it is unreadable)
  /// The marker's run is alive: its pid exists on this host (a marker from another host counts as not alive).
  bool markerOwnerAlive = false;
};

/// Reads `dir` without changing it. Throws IoError when it exists but cannot be listed.
RunFolderContents inspectRunFolder(const std::filesystem::path& dir);

enum class RunFolderMode {
  fresh,      ///< refuse a folder that holds another run's files
  overwrite,  ///< remove another run's files first (--overwrite)
  resume,     ///< keep the run's files and continue it from its checkpoint (--restart)
};

struct RunFolderRequest {
  std::filesystem::path dir;  ///< --out; must not be empty
  RunFolderMode mode = RunFolderMode::fresh;
  std::filesystem::path icFile;  ///< --ic, or empty
};

/// Refuses (InputError, one line naming the folder) without changing anything: an empty dir; a folder that holds
/// the initial-conditions file (whatever the mode: --overwrite could remove it, and a new run's snapshots could
/// replace it); a folder where a run is in progress (a live RUNNING owner on this host, or live temporaries:
/// whatever the mode); in fresh mode, a folder with another run's files (RUNNING of a dead run included); in resume
/// mode, a folder that does not exist or holds no checkpoint. Stale temporaries alone do not count (prepareRunFolder
/// removes them).
void checkRunFolder(const RunFolderRequest& request);

/// Takes the folder over for a run: checkRunFolder again (the folder may have changed since), creates it if missing
/// and probes that it is writable, removes stale temporaries, in overwrite mode removes the old run's files (only
/// what runFiles lists: a checkpoint's parts folders with their contents, never another folder, never a file of
/// another name), and writes
/// RUNNING with `marker` atomically and exclusively (a second run that starts at the same moment fails to create it
/// and is refused). Throws InputError as checkRunFolder does, IoError when a file cannot be created or removed.
void prepareRunFolder(const RunFolderRequest& request, const RunMarker& marker);

/// Removes RUNNING at the end of a run (complete or failed: summary.json then says which). IoError if it cannot.
void removeRunningMarker(const std::filesystem::path& dir);

/// Writes `text` to `path` atomically: a temporary file ".<name>.tmp-<pid>-<k>" beside it, flushed, then renamed
/// over `path`; on failure the temporary file is removed and `path` is untouched. Throws IoError naming `path`.
void writeTextFile(const std::filesystem::path& path, const std::string& text);

}  // namespace matcha::io
