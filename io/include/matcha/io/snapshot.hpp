// SPDX-License-Identifier: MIT
// HDF5 snapshots in the GADGET/SWIFT layout (DESIGN.md §2 and §7). One file per snapshot (or, from the ranks of a
// distributed run, one per rank: GADGET's multi-file snapshots, SnapshotWriteOptions::filePart), every body in
// PartType1:
//
//   /Header      NumPart_ThisFile, NumPart_Total, NumPart_Total_HighWord (6 x uint32, N at index 1),
//                MassTable (6 x double, all 0: per-body masses are written), Time, Redshift, BoxSize (the
//                periodic box's side L; for an open-boundary state the smallest origin-centred cube holding every
//                body, which yt needs), MatchaPeriodic (int32: 1 periodic, 0 open), NumFilesPerSnapshot (int32),
//                Omega0, OmegaLambda, HubbleParam (a cosmological state's, SnapshotMetadata::cosmology; else 0, 0, 0
//                and 1, a Newtonian state), and the build that wrote it: MatchaVersion,
//                MatchaGitCommit, MatchaGitDirty (strings; matcha/core/version.hpp)
//   /Units       UnitLength_in_cm, UnitMass_in_g, UnitVelocity_in_cm_per_s, UnitTime_in_s, GravitationalConstant
//   /Parameters  one attribute per run parameter (int64, double or string), in the order given
//   /PartType1   Coordinates (N x 3), Velocities (N x 3), Masses (N), ParticleIDs (N, uint64), and optionally
//                Potential (N) and Acceleration (N x 3); all floating-point data are IEEE double
//
// yt and pynbody read these files as GADGET HDF5 snapshots; `h5dump -H` shows the layout. The module uses the HDF5
// C API behind private RAII handles; no HDF5 header leaks through this one.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "matcha/core/checkpoint_state.hpp"
#include "matcha/core/particles.hpp"
#include "matcha/core/units.hpp"

namespace matcha::io {

/// A cosmological state's /Header fields, GADGET's meaning: Time is then the scale factor a, Redshift = 1/a - 1,
/// Omega0 = Omega_m and OmegaLambda today, HubbleParam = h (lengths in Mpc/h, masses in 1e10 M_sun/h).
struct CosmologyHeader {
  double redshift = 0.0;
  double omega0 = 0.0;
  double omegaLambda = 0.0;
  double hubbleParam = 1.0;
};

/// What a snapshot records besides the bodies.
struct SnapshotMetadata {
  double time = 0.0;  ///< simulation time, written to /Header Time (simulation time units)
  /// The step the state belongs to, written to /Header Step (uint64) when set (the run's last good state).
  std::optional<std::uint64_t> step;
  UnitSystem units;  ///< written to /Units in GADGET's spelling, plus UnitTime_in_s = length / velocity
  /// The periodic box's side L (BoxSize, with MatchaPeriodic 1); 0 for an open-boundary state.
  double boxSize = 0.0;
  /// Every run parameter as (name, value) text, written to /Parameters as attributes in this order: a value that
  /// looks like an integer (optional sign, digits, fits int64) becomes int64, another finite number becomes double,
  /// anything else a string. Names must be unique and non-empty.
  std::vector<std::pair<std::string, std::string>> parameters;
  /// Set for a cosmological state: written to /Header Redshift, Omega0, OmegaLambda, HubbleParam (unset: 0, 0, 0, 1).
  std::optional<CosmologyHeader> cosmology;
};

struct SnapshotWriteOptions {
  bool includeForces = true;  ///< write PartType1/Potential and Acceleration (initial-condition files leave them out)
  /// Called after each dataset is written, with its path inside the file ("PartType1/Coordinates", ...): progress
  /// reports, and tests inject faults here. An exception it throws aborts the write like any other failure.
  std::function<void(std::string_view datasetName)> afterDataset;
  /// with includeForces: write Potential too (a state whose potentials were not computed, pot NaN, leaves it out)
  bool includePotential = true;
  /// Velocities are written times this: a comoving run holds momenta p = a^2 dx/dt and writes GADGET's u = p / a^1.5
  /// without a scaled copy of its state (1: as held).
  double velocityScale = 1.0;
  /// A checkpoint (writeCheckpoint): these go to /Checkpoint/Run and /Checkpoint/Solver, each scalar an attribute
  /// (double), each array a dataset (double or float, as held).
  const CheckpointState* checkpointRun = nullptr;
  const CheckpointState* checkpointSolver = nullptr;

  /// One file of a snapshot split over several (GADGET's multi-file snapshots: NumFilesPerSnapshot, each file's
  /// NumPart_ThisFile, the whole's NumPart_Total), as the ranks of a distributed run write them, each its own bodies.
  struct FilePart {
    int index = 0;                  ///< this file's place in the set, 0 .. count - 1 (its name: multiFilePath)
    int count = 1;                  ///< files in the set, >= 1
    std::uint64_t totalBodies = 0;  ///< bodies in all the files together (>= this file's)
    /// largestCoordinate over all the set's bodies, so that every file of an open-boundary state gets the same BoxSize
    /// (the origin-centred cube around them all); < 0: this file's own bodies'.
    double largestCoordinate = -1.0;
  };
  /// Set: this file is one part of a multi-file snapshot and may hold no bodies. Unset: a one-file snapshot.
  std::optional<FilePart> filePart = std::nullopt;
};

/// The largest |coordinate| among the finite ones (0 when there are none): an open-boundary snapshot's BoxSize is
/// twice it (1 when it is 0).
double largestCoordinate(const Particles& particles);

/// The name of file `index` of a multi-file snapshot whose one-file name would be `path`: "snapshot_003.hdf5" ->
/// "snapshot_003.<index>.hdf5", GADGET's and yt's convention (yt opens "snapshot_003.0.hdf5" and finds the rest).
std::filesystem::path multiFilePath(const std::filesystem::path& path, int index);

/// Writes `particles` and `meta` to the HDF5 file `path`, atomically: the data go to a temporary file in the same
/// directory (".<name>.tmp-<pid>-<k>"), which is flushed, closed, synced to disk and then renamed over `path`. A crash
/// at any point leaves either the old file or the new one, never a mix (a stale temporary file may remain after a
/// crash); on an exception the temporary file is removed and an existing `path` is untouched.
/// In: particles (all arrays of equal length N, 1 <= N < 2^32; NaN values are written as they are), meta, options.
/// Allocates: a bounded scratch buffer (at most 64 Ki rows x 3 doubles) plus HDF5's own buffers.
/// Throws: InputError for no bodies, too many bodies, or empty/duplicate parameter names; IoError (one line, naming
/// `path`) when the file cannot be created, written, synced or renamed, and for any std::exception thrown by
/// options.afterDataset; other matcha::Error types pass through unchanged (prefixed with the path when they are
/// InputError/IoError). Not safe to call concurrently from several threads unless HDF5 was built thread-safe.
void writeSnapshot(const std::filesystem::path& path, const Particles& particles, const SnapshotMetadata& meta,
                   const SnapshotWriteOptions& options = {});

/// A snapshot as read back: bodies, time, parameters and units.
struct Snapshot {
  Particles particles;        ///< every array has N entries, in file order; acceleration and potential are 0 if absent
  double time = 0.0;          ///< /Header Time, 0 if absent
  std::string matchaVersion;  ///< /Header MatchaVersion of the build that wrote the file, empty if absent
  std::string matchaGitCommit;  ///< /Header MatchaGitCommit, empty if absent
  /// The periodic box's side L, 0 for an open-boundary file: /Header BoxSize when MatchaPeriodic is 1, or when the
  /// file was written by another code (no MatchaVersion) and BoxSize > 0 (GADGET's convention: BoxSize is the box).
  /// matcha's own open-boundary files also write a BoxSize (for yt), with MatchaPeriodic 0 or, before periodic runs
  /// existed, without MatchaPeriodic: those stay open.
  double boxSize = 0.0;
  /// /Parameters attributes in file order (creation order when the file tracks it, else name order) as text:
  /// integers in decimal, doubles in the shortest form that reads back to the same value, strings as stored.
  /// Numeric array attributes are joined with single spaces; attributes of other types are skipped.
  std::vector<std::pair<std::string, std::string>> parameters;
  /// /Units, what the file says its code units are: set when UnitLength_in_cm, UnitMass_in_g and
  /// UnitVelocity_in_cm_per_s are all present as finite numbers > 0 (GravitationalConstant is taken when present and
  /// finite, else 1); nullopt otherwise (the numbers are then N-body units with no physical reading). Only labels
  /// (`matcha render`) use it; no computation depends on it.
  std::optional<UnitSystem> units;
  /// /Header Redshift, Omega0, OmegaLambda, HubbleParam when Omega0 is present and > 0 (a cosmological file; each
  /// missing one takes CosmologyHeader's default); nullopt otherwise.
  std::optional<CosmologyHeader> cosmology;
};

/// Reads a snapshot or an initial-condition file written by matcha or by another GADGET-style HDF5 writer, in one file
/// or in several (NumFilesPerSnapshot > 1): `path` names any file of the set ("snapshot_003.2.hdf5") or the set's
/// one-file name ("snapshot_003.hdf5", when no such file exists and "snapshot_003.0.hdf5" does); the bodies come in
/// file order. Every file must agree on NumFilesPerSnapshot, NumPart_Total, Time and BoxSize, and the files' bodies
/// must add up to NumPart_Total with no ParticleID twice (a set mixed from two writes, or with a file missing, is an
/// error naming the file). A checkpoint's parts file (commitCheckpointParts) is read as the multi-file snapshot of its
/// parts, each of which must also agree with the parts file's header.
/// Accepts: Coordinates/Velocities/Potential/Acceleration stored as any integer or floating type (converted to
/// double); a Masses dataset, or none and /Header MassTable[1] > 0 (equal masses); ParticleIDs of any integer type,
/// or none (ids 0..N-1); Potential/Acceleration present or absent (zeros); /Header optional.
/// Out: a new Snapshot. Allocates the particle arrays and a bounded scratch buffer.
/// Throws (one-line messages that start with "cannot read snapshot '<path>': "):
///   IoError: the file is missing, is a directory, cannot be opened as HDF5 (truncated or corrupt), or a read fails;
///   InputError: the file is not HDF5, lacks /PartType1, Coordinates or Velocities, a dataset has the wrong rank,
///   shape or type class, dataset lengths differ, N = 0, a value is NaN or infinite, there is no Masses dataset and
///   MassTable[1] <= 0, a mass is <= 0, MassTable[1] > 0 and a mass differs from it (by more than 1e-6 relative),
///   ParticleIDs repeat or one is negative, or the /Header describes other particle types.
Snapshot readSnapshot(const std::filesystem::path& path);

/// A checkpoint as read back (`matcha run --restart`): the state with its forces, and what the run and the solver
/// saved beside it.
struct Checkpoint {
  Snapshot snapshot;
  CheckpointState run;
  CheckpointState solver;
};

/// Writes a checkpoint: a snapshot with forces (atomically, as writeSnapshot) and the two states; then removes, best
/// effort, the parts folders beside `path` of a checkpoint in parts that it replaces.
void writeCheckpoint(const std::filesystem::path& path, const Particles& particles, const SnapshotMetadata& meta,
                     const CheckpointState& run, const CheckpointState& solver, bool includePotential);

/// Reads a checkpoint written by writeCheckpoint, or in parts (commitCheckpointParts: the bodies of every part in part
/// order, each per-body solver array joined over the parts). Throws as readSnapshot, and InputError when the file has
/// no /Checkpoint group or it is malformed ("... is not a checkpoint"), or a part is missing or from another write.
Checkpoint readCheckpoint(const std::filesystem::path& path);

/// What a snapshot holds, read without its bodies.
struct SnapshotInfo {
  std::uint64_t numBodies = 0;               ///< rows of PartType1/Coordinates
  double time = 0.0;                         ///< /Header Time, 0 if absent
  double boxSize = 0.0;                      ///< as Snapshot::boxSize
  std::optional<CosmologyHeader> cosmology;  ///< as Snapshot::cosmology (set when Omega0 > 0)
  std::optional<UnitSystem> units;           ///< as Snapshot::units
};

/// Reads the body count, the time, the box, the cosmology and the units of a snapshot without reading (or allocating)
/// its bodies: what a run checks before it loads them. A multi-file snapshot (named as for readSnapshot): its first
/// file's header, the count NumPart_Total; a checkpoint's parts file: its own header. Throws as readSnapshot does for a
/// file that cannot be opened, lacks PartType1/Coordinates or whose /Header is malformed; the other datasets are not
/// checked here.
SnapshotInfo inspectSnapshot(const std::filesystem::path& path);

/// The bodies [first, first + count) of a snapshot in one file or in several (named as for readSnapshot), in the order
/// readSnapshot gives them, with the header fields readSnapshot returns: what each rank of a distributed run reads, so
/// that no process holds the whole system. Only the files that hold part of the range are opened, and of each only the
/// rows in the range are read (hyperslabs, in bounded blocks). A checkpoint's parts file (commitCheckpointParts) is
/// read as the multi-file snapshot it names.
/// The checks are readSnapshot's, on the rows read and on every file opened, with one difference: ParticleIDs are
/// checked not to repeat within the range only (the caller checks across ranges: ids are a set-wide property).
/// Throws as readSnapshot, and InputError (one line) when count is 0 or first + count exceeds the set's bodies.
Snapshot readSnapshotRange(const std::filesystem::path& path, std::uint64_t first, std::uint64_t count);

/// A checkpoint written by the K ranks of a distributed run, each writing its own bodies, none gathering the whole
/// system. The bodies are a GADGET multi-file snapshot (NumFilesPerSnapshot K, readable by yt) in a folder beside the
/// checkpoint's path; the path itself becomes a small HDF5 "parts file" that names the folder and holds the run's and
/// the solver's states (no bodies). Replacing a checkpoint takes three calls, in this order:
///   1. one process: folder = prepareCheckpointParts(path, step), shared with the others;
///   2. every process k of K: writeCheckpointPart(folder, k, K, ...), each file atomically (as writeSnapshot);
///   3. one process, once every part is written and synced: commitCheckpointParts(path, folder, ...), which writes
///      the parts file atomically and only then removes the folders no longer named (older checkpoints' parts, and
///      parts of a write that was interrupted).
/// A crash at any point leaves the old checkpoint or the new one complete, never a mix; readCheckpoint reads either.
/// A one-file checkpoint (writeCheckpoint) at `path` is replaced the same way.

/// The folder for a new set of parts beside `path` ("<name>.parts-<step>", or "<name>.parts-<step>.<n>" when the
/// checkpoint at `path` names that one already), created empty (a stale folder of that name, left by an interrupted
/// write, is emptied first). Throws IoError (one line) when the folder cannot be made.
std::filesystem::path prepareCheckpointParts(const std::filesystem::path& path, std::uint64_t step);

/// Writes part `index` of `count` (0 <= index < count) into `folder`: `particles` (which may be empty) as file `index`
/// of a multi-file snapshot with forces (multiFilePath(folder / path's file name, index)), with `meta` and `part`
/// (FilePart: totalBodies and largestCoordinate over all parts), and `partSolver` beside it: per-body arrays of this
/// part's bodies (readCheckpoint joins each array over the parts in part order). Atomic as writeSnapshot. Throws as
/// writeSnapshot, and InputError when partSolver holds a scalar or an array of another length than `particles`.
void writeCheckpointPart(const std::filesystem::path& folder, const std::filesystem::path& path,
                         const Particles& particles, const SnapshotMetadata& meta,
                         const SnapshotWriteOptions::FilePart& part, const CheckpointState& partSolver,
                         bool includePotential);

/// Writes the parts file at `path` (atomically) naming `folder` (which must be beside it and hold `count` parts), with
/// `meta`'s header fields, NumPart_Total `totalBodies`, the run's state and the solver's state that is not per body;
/// then removes every other "<name>.parts-*" folder beside `path`. The parts' headers are read first: a part that is
/// missing (IoError), or parts of another write (NumFilesPerSnapshot, NumPart_Total, Time or BoxSize not this
/// checkpoint's: InputError), or a `folder` that is not a parts folder of `path` beside it (InputError) leave the old
/// checkpoint and its folder untouched. Throws IoError (one line) when the file cannot be written; a folder that cannot
/// be removed is left (a later commit tries again) without an error.
void commitCheckpointParts(const std::filesystem::path& path, const std::filesystem::path& folder, int count,
                           std::uint64_t totalBodies, const SnapshotMetadata& meta, const CheckpointState& run,
                           const CheckpointState& solver);

/// A checkpoint read without its bodies: what a distributed restart checks on one process before every rank reads its
/// share (readCheckpointRange).
struct CheckpointInfo {
  SnapshotInfo snapshot;  ///< as inspectSnapshot (numBodies: the whole set's)
  CheckpointState run;
  CheckpointState solver;                  ///< the solver's state, without its per-body arrays
  std::vector<std::string> perBodyArrays;  ///< the names of the solver's arrays with one entry per body
  std::vector<std::uint64_t> partBodies;   ///< each part's bodies, in part order; empty for a one-file checkpoint
};

/// Reads a checkpoint's header and states, one-file or in parts. Throws as readCheckpoint.
CheckpointInfo inspectCheckpoint(const std::filesystem::path& path);

/// The bodies [first, first + count) of a checkpoint, one-file or in parts (as readSnapshotRange), with the run's
/// state, and the solver's: its per-body arrays cut to the range (in a one-file checkpoint, the arrays with one entry
/// per body), the rest whole. Throws as readCheckpoint and readSnapshotRange.
Checkpoint readCheckpointRange(const std::filesystem::path& path, std::uint64_t first, std::uint64_t count);

/// Makes sure `dir` (empty means the current directory) exists and can take new files: creates it and its parents
/// if missing, then creates and removes a probe file in it.
/// Throws IoError with a one-line message naming `dir` when it cannot be created, is not a directory, or a file
/// cannot be created or removed in it. Allocates only small strings.
void ensureWritableDirectory(const std::filesystem::path& dir);

}  // namespace matcha::io
