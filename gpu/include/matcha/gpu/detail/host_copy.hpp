// SPDX-License-Identifier: MIT
// Host-side copies on all cores, for the CUDA engine's staging through page-locked buffers (gpu/cuda/*.cu has no
// thread pool of its own; this plain C++ seam gives it TBB's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "matcha/core/interaction_plan.hpp"

namespace matcha::gpu::detail {

/// memcpy(destination, source, bytes) split over the TBB threads; falls back to one memcpy below a few MB.
void parallelCopy(void* destination, const void* source, std::size_t bytes);

/// to[c][order[i]] = from[c][i] for every i of `runs` and every c < components, split over the TBB threads: outputs
/// staged in a tree's order, put into the caller's (`order`: the caller's index of each tree position).
void scatterRuns(std::span<const BodyRange> runs, const std::uint32_t* order, const double* const (&from)[4],
                 double* const (&to)[4], int components);

}  // namespace matcha::gpu::detail
