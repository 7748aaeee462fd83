// SPDX-License-Identifier: MIT
// The memory a run will hold, part by part (`matcha run --dry-run`, and the check that refuses a run that will not
// fit). tree/ measures the tree and its lists on the run's bodies and adds the tree solver's arrays; gpu/ adds the
// near-field engine's; apps/ adds its own. Neither tree/ nor gpu/ knows the other: they meet here (DESIGN.md §2).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace matcha {

/// What a tree run's data structures scale with, for one tree: counted on a tree built over the run's bodies, the
/// lists estimated from a walk of a sample of its groups (tree/memory_estimate.hpp).
struct TreeSizes {
  std::uint64_t numBodies = 0;
  std::uint64_t numCells = 0;
  std::uint64_t numBlocks = 0;  ///< walk-tree blocks (tree/walk.hpp): one per cell with children, plus the root's
  std::uint64_t numGroups = 0;
  bool quadrupole = true;
  /// Over all groups' lists: accepted cells, j-body ranges and the j-bodies in those ranges.
  std::uint64_t listCells = 0;
  std::uint64_t listRanges = 0;
  std::uint64_t listBodies = 0;
  /// Groups whose lists the solver walks, hands to the engine and keeps at once: all of them, or, when the lists
  /// exceed TreeParams::maxBatchEntries (cells + j-bodies) and so stream, as many as fit (their share of the lists).
  std::uint64_t residentGroups = 0;
  /// The most groups one walk batch holds (the plan builder's per-task buffers hold that batch's lists).
  std::uint64_t largestBatchGroups = 0;
  /// Batches of the walk, each a plan (and, on the CUDA engine, an upload of its own), in walk order: groups in each.
  std::vector<std::uint64_t> batchGroups;
  /// Bodies whose trees are built for predicted positions in the background: the caller's order then differs from
  /// the tree's (TreeTopology::order), and engines keep tree-order copies of positions and outputs.
  bool gathered = false;
  std::uint64_t numSampledGroups = 0;  ///< groups walked to estimate the lists (numGroups: all of them)
  /// Bytes the walk's per-task buffers keep per group of a batch (their capacity, from the sample's lists).
  double walkBufferBytesPerGroup = 0.0;

  double cellsPerGroup() const { return numGroups == 0 ? 0.0 : double(listCells) / double(numGroups); }
  double rangesPerGroup() const { return numGroups == 0 ? 0.0 : double(listRanges) / double(numGroups); }
  double bodiesPerGroup() const { return numGroups == 0 ? 0.0 : double(listBodies) / double(numGroups); }
  /// The share of the lists the solver and the engine keep at once (1 unless the lists stream).
  double residentFraction() const { return numGroups == 0 ? 0.0 : double(residentGroups) / double(numGroups); }
};

/// One part of a run's memory: host bytes (pageable and page-locked) and device bytes.
struct MemoryPart {
  std::string name;
  std::uint64_t hostBytes = 0;
  std::uint64_t deviceBytes = 0;
};

/// The memory a run needs at its peak: every array it keeps, each at the size it reaches, plus the largest buffers
/// that are alive at that moment. An estimate: the lists are scaled up from a sample, and the heap's own overhead is
/// left out.
/// Bytes of one body in Particles: position, velocity, acceleration (3 doubles each), mass and potential, and its id.
inline constexpr std::uint64_t kBytesPerBody = 11 * sizeof(double) + sizeof(std::uint64_t);

struct MemoryEstimate {
  std::uint64_t hostBytes = 0;    ///< sum of the parts' host bytes
  std::uint64_t deviceBytes = 0;  ///< sum of the parts' device bytes (0 without a GPU engine)
  std::vector<MemoryPart> parts;  ///< the breakdown, in the order added
  std::uint64_t numBodies = 0;
  /// Tree runs: list entries (cells + j-body ranges, as the host keeps them) and j-bodies (as the CUDA engine expands
  /// them) of all groups, for the tree the run's peak is sized by; 0 for direct summation.
  std::uint64_t listEntries = 0;
  std::uint64_t listBodies = 0;

  /// Adds a part (its bytes to the totals); a part of zero bytes is left out.
  void add(const std::string& name, std::uint64_t host, std::uint64_t device = 0) {
    if (host == 0 && device == 0) return;
    parts.push_back({name, host, device});
    hostBytes += host;
    deviceBytes += device;
  }
};

}  // namespace matcha
