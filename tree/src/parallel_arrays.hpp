// SPDX-License-Identifier: MIT
// Parallel copies and gathers of per-body and per-cell arrays, for the tree module's builds: at 2^24 bodies each
// array is 128 MB, tens of milliseconds for one core. Private to tree/src.
#pragma once

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

namespace matcha::tree {

/// out[i] = values[order[i]] in parallel (out resized; where it must grow, with an eighth more room and without
/// copying what it held: the arrays it fills are swapped into the bodies' arrays, whose number can grow by a few
/// percent a call on a rank of a distributed run, and each growth past the capacity is a reallocation and a first
/// touch).
template <class T>
void gatherInto(const T* values, std::span<const std::uint32_t> order, std::vector<T>& out) {
  if (order.size() > out.capacity()) {
    out.clear();
    out.reserve(order.size() + order.size() / 8);
  }
  out.resize(order.size());
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, order.size(), 8192),
                    [&](const tbb::blocked_range<std::size_t>& r) {
                      for (std::size_t i = r.begin(); i != r.end(); ++i) out[i] = values[order[i]];
                    });
}

/// values[i] = old values[order[i]], through `scratch` (the old array becomes the next call's scratch).
template <class T>
void gatherInPlace(std::vector<T>& values, std::span<const std::uint32_t> order, std::vector<T>& scratch) {
  gatherInto(values.data(), order, scratch);
  values.swap(scratch);
}

/// to = from in parallel. Growing `to` value-initialises only what it lacks (little, when it held a copy of the same
/// size before).
template <class T>
void copyInParallel(const std::vector<T>& from, std::vector<T>& to) {
  if (to.capacity() < from.size()) to.clear();  // nothing old for the reallocation to carry over
  to.resize(from.size());
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, from.size(), 65536),
                    [&](const tbb::blocked_range<std::size_t>& r) {
                      std::copy(from.begin() + r.begin(), from.begin() + r.end(), to.begin() + r.begin());
                    });
}

}  // namespace matcha::tree
