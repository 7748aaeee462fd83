// SPDX-License-Identifier: MIT
// `matcha run`'s memory estimate (--dry-run prints it) and the check that refuses, before any force is computed, a
// run that will not fit: the tree solver's share from tree/, the engine's from gpu/, the run's own here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "matcha/core/memory_estimate.hpp"
#include "matcha/core/particles.hpp"
#include "options.hpp"

namespace matcha::app {

/// The memory `matcha run` with `options` needs for `particles` and what it was sized for.
struct RunMemory {
  MemoryEstimate estimate;
  std::uint64_t numSteps = 0;
  std::uint32_t reuseSteps = 1;  ///< K the trees were sized for (1: exact positions, no reuse phase)
  TreeSizes sizes;               ///< tree runs: the trees the estimate is sized by
  bool onGpu = false;
  /// Outputs written in the background (--background-output on), their copy of the bodies counted; false where they
  /// are written in place: asked for, or the copy would not fit (backgroundCopyBytes then says how much it was).
  bool backgroundOutput = false;
  std::uint64_t backgroundCopyBytes = 0;  ///< the copy left out because it would not fit; 0 otherwise
};

/// Measures the tree (and, for runs that reach reuse, a tree of balls; tree/memory_estimate.hpp) over `particles`
/// and adds every part. `onGpu`: the CUDA engine; `directPotentials`: direct sums at outputs. Does not modify
/// `particles`; allocates, and frees again, about 130 bytes per body and a sample's lists. `numSteps`: the run's steps
/// (a comoving run's estimate); unset, the fixed-step count of options.integrator. `meshRanks`: the ranks a periodic
/// run's CPU mesh is split over (mesh::SlabMesh: this rank's share of it); 1, the whole grid.
RunMemory estimateRunMemory(const Options& options, const Particles& particles, bool onGpu, bool directPotentials,
                            std::optional<std::uint64_t> numSteps = std::nullopt, int meshRanks = 1);

/// The memory of `matcha run --integrator hermite` on `numBodies` bodies: the bodies and their last good copy, the
/// Hermite integrator's per-body state and block scratch (integrator/hermite.hpp, sized for a block of every body), and
/// the Hermite engine's host j-memory (the CPU engine's; the CUDA engine's device memory is not estimated), and with
/// `backgroundOutput` the outputs' copy of the bodies where it fits (RunMemory::backgroundOutput).
RunMemory estimateHermiteRunMemory(std::uint64_t numBodies, bool backgroundOutput);

/// Host memory a run may use: MemAvailable of /proc/meminfo, less where a cgroup limit (memory.max less
/// memory.current) is tighter, less where the environment variable MATCHA_MEMORY_LIMIT (bytes, or a number with a
/// K, M, G or T suffix, powers of 1024) is tighter: the limit a batch system or a test imposes. 0 when unknown.
/// @throws InputError when MATCHA_MEMORY_LIMIT is malformed
std::uint64_t availableHostBytes();

/// Free memory of CUDA device `device`, 0 when unknown (no CUDA, no such device).
std::uint64_t deviceFreeBytes(int device = 0);

/// Throws InputError, before the initial conditions are made or read, when `numBodies` bodies (and, with
/// `measuresTree`, the memory estimate's working arrays: run and compare) exceed the available host memory (a run
/// that far too large is refused before it allocates), or when there are more than kMaxBodies (the tree's 32-bit
/// indices).
void requireBodiesFit(std::uint64_t numBodies, bool measuresTree = true);

/// Throws InputError with one line ("this run needs ~X GiB of host memory (Y GiB available); ...") when the estimate
/// exceeds the available host memory or, on the CUDA engine, the device's free memory.
void requireRunFits(const RunMemory& memory);

/// "outputs: written in place, not in the background: ..." for a run whose copy of the bodies would not fit
/// (RunMemory::backgroundCopyBytes > 0).
std::string backgroundOutputDropped(const RunMemory& memory);

/// `bytes` as "1.23 GiB" (or "123.4 MiB" below 1 GiB).
std::string formatBytes(std::uint64_t bytes);

/// The estimate as a table (parts, totals, bytes per body, what is available) for --dry-run.
std::string formatRunMemory(const RunMemory& memory);

/// The same as JSON (--dry-run --json).
std::string runMemoryJson(const RunMemory& memory);

}  // namespace matcha::app
