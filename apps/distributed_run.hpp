// SPDX-License-Identifier: MIT
// `matcha` on several MPI ranks (issue 19): the process's MPI session, the errors the ranks agree on, and `run`,
// `compare` and `ic cosmo` with their bodies spread over the ranks. All of apps/'s MPI lives in distributed_run.cpp
// and, for moving, reading and writing the bodies over the ranks, rank_bodies.cpp, built with MATCHA_MPI
// (MATCHA_HAVE_MPI); without it every process is a world of one rank and these are the one-rank answers. Under mpirun
// with one rank, or without mpirun, `matcha` takes its one-rank code paths unchanged.
#pragma once

#include <CLI/CLI.hpp>
#include <exception>
#include <filesystem>
#include <memory>
#include <string>

#include "commands.hpp"
#include "cosmological_ics.hpp"
#include "options.hpp"

namespace matcha::app {

/// MPI for the life of the process when a launcher (mpirun, mpiexec, srun) started it: MPI_Init_thread
/// (MPI_THREAD_FUNNELED: only the main thread calls MPI, TBB's and OpenMP's workers never do) on construction,
/// MPI_Finalize on destruction. Started without one, the process is a world of one rank and MPI is left alone. With
/// several ranks, each rank's TBB threads are capped at its share of the cores, and ranks other than 0 discard
/// std::cout (help, progress, tables: rank 0 speaks for the run). Construct it first in main, before anything prints.
class MpiSession {
 public:
  MpiSession(int& argc, char**& argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  struct State;  ///< the session's MPI state, private to distributed_run.cpp

 private:
  std::unique_ptr<State> state_;
};

/// This process's rank in MPI_COMM_WORLD and the world's size (0 and 1 without MPI).
int worldRank();
int worldSize();

/// Thrown on the ranks other than 0 when rank 0 failed in work they were waiting for (it prints the message): they
/// end with its exit code and say nothing more.
class RankZeroFailed : public std::exception {
 public:
  explicit RankZeroFailed(int exitCode) : exitCode_(exitCode) {}
  int exitCode() const { return exitCode_; }
  const char* what() const noexcept override { return "rank 0 failed"; }

 private:
  int exitCode_;
};

/// The error `message` (one line, without "matcha: error: ") ends this process with `exitCode`: main's catch blocks
/// call it and return what it returns. On one rank it prints the line and returns exitCode. On several: when every
/// rank fails (a check of the options, or an error the ranks share, parallel::checkOnEveryRank), rank 0 alone prints
/// and every rank returns exitCode; when rank 0 fails in work the others wait for, it tells them (RankZeroFailed);
/// when some ranks fail and others do not within a few seconds, each failing rank prints its line with its rank and
/// calls MPI_Abort, so that no rank waits forever in a collective call.
int reportFailure(int exitCode, const std::string& message);

/// Throws InputError (one line, the same on every rank) when `command` (the subcommand parsed, `ic`'s own included)
/// cannot run on this world's ranks: only `run`, `compare` and `ic cosmo` run on several.
void requireRunsOnRanks(const CLI::App& command);

/// `matcha run` on several ranks: a leapfrog run of the distributed tree (open boundaries, or TreePM in a periodic box,
/// a comoving one from a cosmological file or --cosmology with its long-range and block time steps) on each rank's
/// engine. Every rank reads its share of an IC file or a checkpoint (rank 0 makes a generated start and scatters it),
/// integrates its own bodies and writes its part of each checkpoint; rank 0 writes the rest of the run folder (the
/// snapshots gathered, or each rank its file with --snapshot-files ranks). Or a Hermite run (--integrator hermite):
/// every rank integrates all the bodies alike and the force sums are split over the ranks' engines by j-particle
/// (parallel::DistributedHermiteEngine), rank 0 writing the folder as one rank does. Or --solver direct
/// (parallel::DistributedDirectSolver). Every option of `run` works on one rank as on K. Collective over
/// MPI_COMM_WORLD.
int runDistributed(CLI::App& command, const Options& options);

/// `matcha ic cosmo` on several ranks: every rank makes the bodies of its own planes of the grid, as `run --cosmology`
/// on as many ranks does, and writes them as its file of a GADGET multi-file set (NumFilesPerSnapshot K, the files
/// io::multiFilePath(out, k), which io::readSnapshot and yt read as one, by `out`'s name or any file's), so that no
/// process holds the whole start. The files are written beside their names and renamed into place only when every
/// rank's is written: a failure on any rank leaves none of them (and, without --overwrite, an existing file of the set
/// is refused before any work). With `overwrite`, what the new set replaces goes once it is in place: `out` itself
/// (readers take it before a set) and the parts of an earlier, larger set. Collective over MPI_COMM_WORLD.
int writeCosmologicalIcsOnRanks(const CLI::App& command, CosmologicalIcOptions& options,
                                const std::filesystem::path& out, bool overwrite);

/// `matcha compare` on several ranks: the distributed tree's forces on rank 0's bodies against direct summation on
/// rank 0; the same table or JSON as on one rank. Collective over MPI_COMM_WORLD.
int compareDistributed(const Options& options, const CompareOptions& compare);

}  // namespace matcha::app
