// SPDX-License-Identifier: MIT
#include "matcha/gpu/detail/host_copy.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_sort.h>

#include <algorithm>
#include <cstring>
#include <numeric>

namespace matcha::gpu::detail {

void parallelCopy(void* destination, const void* source, std::size_t bytes) {
  // One core copies ~5-10 GB/s; a page-locked DMA moves ~50 GB/s over PCIe 5: below a few MB, threads cost more.
  constexpr std::size_t kSerialBytes = std::size_t{4} << 20;
  constexpr std::size_t kPiece = std::size_t{1} << 20;
  if (bytes <= kSerialBytes) {
    std::memcpy(destination, source, bytes);
    return;
  }
  auto* to = static_cast<char*>(destination);
  const auto* from = static_cast<const char*>(source);
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, (bytes + kPiece - 1) / kPiece),
                    [&](const tbb::blocked_range<std::size_t>& pieces) {
                      const std::size_t begin = pieces.begin() * kPiece;
                      const std::size_t end = std::min(bytes, pieces.end() * kPiece);
                      std::memcpy(to + begin, from + begin, end - begin);
                    });
}

void scatterRuns(double* to, const double* packed, const std::uint32_t* runs, std::size_t numRuns) {
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, numRuns, 16), [&](const tbb::blocked_range<std::size_t>& some) {
    for (std::size_t k = some.begin(); k != some.end(); ++k) {
      const std::uint32_t* run = runs + 3 * k;
      std::memcpy(to + run[0], packed + run[2], std::size_t{run[1]} * sizeof(double));
    }
  });
}

void gatherTriples(double* packed, const double* const from[3], std::span<const std::uint32_t> ids) {
  const std::size_t count = ids.size();
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, count, std::size_t{1} << 14),
                    [&](const tbb::blocked_range<std::size_t>& some) {
                      for (int c = 0; c < 3; ++c) {
                        double* to = packed + std::size_t(c) * count;
                        for (std::size_t k = some.begin(); k != some.end(); ++k) to[k] = from[c][ids[k]];
                      }
                    });
}

void parallelForEach(std::size_t count, const std::function<void(std::size_t)>& body) {
  tbb::parallel_for(std::size_t{0}, count, [&](std::size_t k) { body(k); });
}

void orderLongestFirst(std::span<const double> costs, std::vector<std::uint32_t>& order) {
  order.resize(costs.size());
  std::iota(order.begin(), order.end(), 0u);
  // The index breaks ties: the order is unique, as stable_sort's, whatever the threads.
  tbb::parallel_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
    return costs[a] > costs[b] || (costs[a] == costs[b] && a < b);
  });
}

}  // namespace matcha::gpu::detail
