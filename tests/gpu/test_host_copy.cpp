// SPDX-License-Identifier: MIT
// The CUDA engine's host-side seam on all cores (gpu/detail/host_copy.hpp): what each function gives must not depend on
// the threads, since the engine's warp tasks and staged copies go straight to the device.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "matcha/gpu/detail/host_copy.hpp"

namespace md = matcha::gpu::detail;

// Longest first with ties in index order, as the single core's std::stable_sort gave: on costs with many ties (a
// subset's tasks share their group's list length), and large enough that the sort runs on several threads.
TEST(HostCopy, OrderLongestFirstIsTheStableSortsOrder) {
  std::mt19937_64 random(17);
  for (const std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{200'000}}) {
    std::vector<double> costs(count);
    std::uniform_int_distribution<int> few(0, 40);
    for (double& cost : costs) cost = 1.5 * few(random);
    std::vector<std::uint32_t> expected(count);
    std::iota(expected.begin(), expected.end(), 0u);
    std::stable_sort(expected.begin(), expected.end(),
                     [&](std::uint32_t a, std::uint32_t b) { return costs[a] > costs[b]; });
    std::vector<std::uint32_t> order{99, 98};  // replaced whole
    md::orderLongestFirst(costs, order);
    EXPECT_EQ(order, expected) << count << " costs";
  }
}

TEST(HostCopy, ParallelForEachVisitsEveryIndexOnce) {
  for (const std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{10'000}}) {
    std::vector<std::atomic<int>> visits(count);
    md::parallelForEach(count, [&](std::size_t k) { visits[k].fetch_add(1); });
    for (std::size_t k = 0; k < count; ++k) ASSERT_EQ(visits[k].load(), 1) << "index " << k << " of " << count;
  }
}

TEST(HostCopy, CopiesScattersAndGathersEveryValue) {
  const std::size_t n = std::size_t{3} << 20;  // above parallelCopy's serial size
  std::vector<double> from(n), to(n, -1.0);
  std::iota(from.begin(), from.end(), 0.0);
  md::parallelCopy(to.data(), from.data(), n * sizeof(double));
  EXPECT_EQ(to, from);

  // Runs {first, count, offset}: packed [0, 3) -> to[10..13), packed [3, 5) -> to[0..2).
  const std::vector<double> packed{1, 2, 3, 4, 5};
  const std::vector<std::uint32_t> runs{10, 3, 0, 0, 2, 3};
  std::vector<double> scattered(16, 0.0);
  md::scatterRuns(scattered.data(), packed.data(), runs.data(), 2);
  EXPECT_EQ(scattered, (std::vector<double>{4, 5, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 0, 0, 0}));

  const std::vector<double> x{0, 10, 20, 30}, y{1, 11, 21, 31}, z{2, 12, 22, 32};
  const double* const arrays[3] = {x.data(), y.data(), z.data()};
  const std::vector<std::uint32_t> ids{3, 1};
  std::vector<double> triples(6, -1.0);
  md::gatherTriples(triples.data(), arrays, ids);
  EXPECT_EQ(triples, (std::vector<double>{30, 10, 31, 11, 32, 12}));
}
