// SPDX-License-Identifier: MIT
// Host-side copies and loops on all cores, for the CUDA engine's staging through page-locked buffers and its warp
// tasks (gpu/cuda/*.cu has no thread pool of its own; this plain C++ seam gives it TBB's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace matcha::gpu::detail {

/// memcpy(destination, source, bytes) split over the TBB threads; falls back to one memcpy below a few MB.
void parallelCopy(void* destination, const void* source, std::size_t bytes);

/// to[first_k + t] = packed[offset_k + t] for every run k = {first, count, offset} (the x, y, z of `runs`, 3 per run),
/// runs shared out over the cores: a subset's packed outputs back into place.
void scatterRuns(double* to, const double* packed, const std::uint32_t* runs, std::size_t numRuns);

/// packed[c * ids.size() + k] = from[c][ids[k]] for the three arrays `from`, on all cores: the kicked bodies'
/// velocities of a drifted launch (NearFieldEngine BodyMotion::drifted) packed for one copy each.
void gatherTriples(double* packed, const double* const from[3], std::span<const std::uint32_t> ids);

/// body(k) for every k in [0, count), shared out over the cores (each k once, in no particular order).
void parallelForEach(std::size_t count, const std::function<void(std::size_t)>& body);

/// order <- 0, 1, ..., costs.size() - 1 sorted by cost, largest first, equal costs in index order: what
/// std::stable_sort with `costs[a] > costs[b]` gives, on all cores. Costs must not be NaN.
void orderLongestFirst(std::span<const double> costs, std::vector<std::uint32_t>& order);

}  // namespace matcha::gpu::detail
