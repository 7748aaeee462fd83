// SPDX-License-Identifier: MIT
#include "matcha/gpu/detail/host_copy.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstring>

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

}  // namespace matcha::gpu::detail
