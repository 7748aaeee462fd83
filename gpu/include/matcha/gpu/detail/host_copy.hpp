// SPDX-License-Identifier: MIT
// Host-side copies on all cores, for the CUDA engine's staging through page-locked buffers (gpu/cuda/*.cu has no
// thread pool of its own; this plain C++ seam gives it TBB's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace matcha::gpu::detail {

/// memcpy(destination, source, bytes) split over the TBB threads; falls back to one memcpy below a few MB.
void parallelCopy(void* destination, const void* source, std::size_t bytes);

/// to[first_k + t] = packed[offset_k + t] for every run k = {first, count, offset} (the x, y, z of `runs`, 3 per run),
/// runs shared out over the cores: a subset's packed outputs back into place.
void scatterRuns(double* to, const double* packed, const std::uint32_t* runs, std::size_t numRuns);

/// packed[c * ids.size() + k] = from[c][ids[k]] for the three arrays `from`, on all cores: the kicked bodies'
/// velocities of a drifted launch (NearFieldEngine BodyMotion::drifted) packed for one copy each.
void gatherTriples(double* packed, const double* const from[3], std::span<const std::uint32_t> ids);

}  // namespace matcha::gpu::detail
