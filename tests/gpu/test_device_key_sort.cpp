// SPDX-License-Identifier: MIT
// The tree's key sort on the GPU (NearFieldEngine::sortKeys, CUB's radix sort) against the host's (tree::KeySorter),
// which is its reference: the same sorted keys and the same order, bit for bit, so that a tree is the same whichever
// sorted its keys. Skips, saying why, without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory_resource>
#include <random>
#include <string>
#include <vector>

#include "matcha/gpu/cuda_engine.hpp"
#include "matcha/gpu/engine_factory.hpp"
#include "matcha/integrator/leapfrog.hpp"
#include "matcha/testing/generators.hpp"
#include "matcha/testing/restart_check.hpp"
#include "matcha/tree/space_filling_curve.hpp"
#include "matcha/tree/tree_solver.hpp"

namespace matcha::gpu {
namespace {

class DeviceKeySortTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const CudaDeviceInfo device = queryCudaDevice();
    if (!device.available) GTEST_SKIP() << "no CUDA device, GPU test skipped: " << device.description;
  }
};

std::vector<std::uint64_t> mortonKeys(const Particles& p) {
  std::vector<std::uint64_t> keys;
  tree::computeMortonKeys(p.sources(), tree::computeBoundingCube(p.sources()), keys);
  return keys;
}

void expectSameSort(CudaEngine& engine, const std::vector<std::uint64_t>& keys, int keyBits, const std::string& what) {
  SCOPED_TRACE(what + ", " + std::to_string(keys.size()) + " keys");
  std::vector<std::uint64_t> hostSorted, deviceSorted(keys.size(), 0xdeadbeefull);
  std::vector<std::uint32_t> hostOrder, deviceOrder(keys.size(), 0xdeadbeefu);
  tree::KeySorter().sort(keys, hostSorted, hostOrder);
  ASSERT_TRUE(engine.sortKeys(keys, keyBits, deviceSorted, deviceOrder));
  EXPECT_TRUE(deviceSorted == hostSorted) << "sorted keys differ";
  EXPECT_TRUE(deviceOrder == hostOrder) << "orders differ (ties must follow the indices)";
}

TEST_F(DeviceKeySortTest, SortsAsTheHostDoesBitForBit) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  CudaEngine engine;
  // Sizes around the threshold and an odd one; Morton keys use 63 bits.
  for (const std::size_t n : {CudaEngine::kMinSortKeys, 3 * CudaEngine::kMinSortKeys + 17, std::size_t{1} << 20}) {
    Particles p = testing::plummer(n, seed);
    std::vector<std::uint64_t> keys = mortonKeys(p);
    expectSameSort(engine, keys, 63, "Plummer in the generator's order");
    // As a tree built from the last tree's order sees them: sorted once, then moved a little.
    std::vector<std::uint64_t> sorted;
    std::vector<std::uint32_t> order;
    tree::KeySorter().sort(keys, sorted, order);
    p.permute(order);
    for (std::size_t i = 0; i < n; ++i) {
      p.x[i] += p.vx[i] / 128.0;
      p.y[i] += p.vy[i] / 128.0;
      p.z[i] += p.vz[i] / 128.0;
    }
    expectSameSort(engine, mortonKeys(p), 63, "Plummer nearly sorted");
    // Many equal keys (coincident bodies, a clump at the deepest level): ties are where the order is decided.
    std::mt19937_64 rng(seed + n);
    std::vector<std::uint64_t> repeated(n);
    for (auto& key : repeated) key = (rng() % 97) << 50 | (rng() % 3);
    expectSameSort(engine, repeated, 63, "few distinct keys");
    expectSameSort(engine, std::vector<std::uint64_t>(n, 42), 63, "all keys equal");
    std::vector<std::uint64_t> full(n);
    for (auto& key : full) key = rng();
    expectSameSort(engine, full, 64, "all 64 bits");
  }
}

// Keys, sorted keys and order in the engine's transfer memory (page-locked: NearFieldEngine::transferMemory) go over
// the bus directly, others through the staging buffers; every mix sorts as the host does. The memory takes a
// zero-byte allocation.
TEST_F(DeviceKeySortTest, SortsFromAndIntoTransferMemoryAsTheHostDoes) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  CudaEngine engine;
  std::pmr::memory_resource* locked = engine.transferMemory();
  ASSERT_NE(locked, nullptr);
  std::pmr::memory_resource* ordinary = std::pmr::new_delete_resource();
  void* none = locked->allocate(0);
  EXPECT_NE(none, nullptr);
  locked->deallocate(none, 0);
  const std::size_t n = 3 * CudaEngine::kMinSortKeys + 5;
  const std::vector<std::uint64_t> keys = mortonKeys(testing::plummer(n, seed));
  std::vector<std::uint64_t> hostSorted;
  std::vector<std::uint32_t> hostOrder;
  tree::KeySorter().sort(keys, hostSorted, hostOrder);
  for (const int mix : {0, 1, 2, 3, 4, 5, 6, 7}) {
    SCOPED_TRACE("keys, sorted, order locked: " + std::to_string(mix & 1) + std::to_string(mix >> 1 & 1) +
                 std::to_string(mix >> 2 & 1));
    std::pmr::vector<std::uint64_t> in(keys.begin(), keys.end(), mix & 1 ? locked : ordinary);
    std::pmr::vector<std::uint64_t> sorted(n, 0xdeadbeefull, mix & 2 ? locked : ordinary);
    std::pmr::vector<std::uint32_t> order(n, 0xdeadbeefu, mix & 4 ? locked : ordinary);
    ASSERT_TRUE(engine.sortKeys(in, 63, sorted, order));
    EXPECT_TRUE(std::equal(sorted.begin(), sorted.end(), hostSorted.begin(), hostSorted.end())) << "sorted keys differ";
    EXPECT_TRUE(std::equal(order.begin(), order.end(), hostOrder.begin(), hostOrder.end())) << "orders differ";
  }
}

TEST_F(DeviceKeySortTest, FewKeysAreLeftToTheHost) {
  CudaEngine engine;
  const std::vector<std::uint64_t> keys(CudaEngine::kMinSortKeys - 1, 7);
  std::vector<std::uint64_t> sorted(keys.size(), 1);
  std::vector<std::uint32_t> order(keys.size(), 1);
  EXPECT_FALSE(engine.sortKeys(keys, 63, sorted, order));
  EXPECT_TRUE(std::all_of(sorted.begin(), sorted.end(), [](std::uint64_t k) { return k == 1; }));
}

// A run whose trees are built in the background sorts from that thread while the engine evaluates on its own stream:
// the run is the run of host sorts, bit for bit, with trees built in the background and within the call.
TEST_F(DeviceKeySortTest, RunsWithDeviceSortsAreTheRunsOfHostSorts) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  for (const std::uint32_t reuse : {3u, 1u}) {
    SCOPED_TRACE("reuse " + std::to_string(reuse));
    TreeParams params;
    params.alpha = 1e-3;
    params.reuse = reuse;
    Particles onDevice = testing::plummer(std::size_t{1} << 17, seed);
    Particles onHost = onDevice;
    CudaEngine deviceEngine, hostEngine;
    tree::TreeSolver deviceSorting(deviceEngine, params, GravityParams{});
    params.sortOnDevice = false;
    tree::TreeSolver hostSorting(hostEngine, params, GravityParams{});
    const double dt = 1.0 / 128.0;
    integrator::LeapfrogKDK deviceRun(deviceSorting, dt), hostRun(hostSorting, dt);
    deviceRun.initialize(onDevice);
    hostRun.initialize(onHost);
    int background = 0;
    for (int step = 1; step <= 24; ++step) {
      deviceRun.step(onDevice);
      hostRun.step(onHost);
      background += deviceSorting.lastStats().background ? 1 : 0;
    }
    if (reuse > 1) {
      EXPECT_GT(background, 0) << "no tree was built in the background";
    }
    testing::expectSameBodiesBitForBit(onHost, onDevice, "from the run that sorted on the host");
  }
}

// TreeParams::predictOnDevice: trees built in the background take their inputs (balls, lowest |a|, keys, their sort,
// the gather into the tree's order) from the GPU's copy of the bodies, predicted within the launch of the call that
// starts the build; the run is the run of host predictions, bit for bit. With every tree's first call launched ahead
// (adoptAheadWaits: the prediction rides on the launch made as the tree before it ends) and without (the launch of
// the tree's first call), at K = 2 (a build started every other call), 3, and 1 (reuse off, each tree built a step
// ahead: a build started every call).
TEST_F(DeviceKeySortTest, RunsWithTreesPredictedOnTheDeviceAreTheRunsOfHostPredictions) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  struct Case {
    const char* name;
    bool waits;
    std::uint32_t reuse;
    bool jolt;
  };
  // An unannounced jolt of every body (as tests/tree/test_reuse.cpp's repair test makes) after a few trees predicted on
  // the device: the GPU's copy no longer matches, most lists fail and are repaired, and the next tree is built within
  // its call, in buffers that last held a tree predicted on the device.
  for (const Case& c :
       {Case{"adoption ahead waits, reuse 2", true, 2, false}, Case{"adoption ahead waits, reuse 3", true, 3, false},
        Case{"adoption ahead when done, reuse 2", false, 2, false},
        Case{"adoption ahead when done, reuse 3", false, 3, false},
        // Reuse off: each tree is built a step ahead (tree_solver.hpp: buildsFreshTreesAhead), a build every call.
        Case{"adoption ahead waits, reuse off", true, 1, false},
        Case{"adoption ahead when done, reuse off", false, 1, false},
        Case{"a jolt at step 12, reuse 3", true, 3, true}}) {
    SCOPED_TRACE(c.name);
    TreeParams params;
    params.alpha = 1e-3;
    params.reuse = c.reuse;
    params.adoptAheadWaits = c.waits;
    Particles onDevice = testing::plummer(std::size_t{1} << 16, seed);
    Particles onHost = onDevice;
    CudaEngine deviceEngine, hostEngine;
    tree::TreeSolver devicePredicting(deviceEngine, params, GravityParams{});
    params.predictOnDevice = false;
    tree::TreeSolver hostPredicting(hostEngine, params, GravityParams{});
    const double dt = 1.0 / 128.0;
    integrator::LeapfrogKDK deviceRun(devicePredicting, dt), hostRun(hostPredicting, dt);
    deviceRun.initialize(onDevice);
    hostRun.initialize(onHost);
    int predicted = 0, trees = 0;
    std::uint64_t repaired = 0, withinCall = 0;
    std::mt19937_64 random(seed);
    std::uniform_real_distribution<double> jolt(-0.05, 0.05);
    for (int step = 1; step <= 24; ++step) {
      if (c.jolt && step == 12) {
        for (std::size_t i = 0; i < onDevice.size(); ++i) {
          const double by[3] = {jolt(random), jolt(random), jolt(random)};
          for (Particles* p : {&onDevice, &onHost}) {
            p->x[i] += by[0];
            p->y[i] += by[1];
            p->z[i] += by[2];
          }
        }
      }
      repaired += deviceRun.step(onDevice).force.numGroupsRepaired;
      hostRun.step(onHost);
      const tree::TreeStats& stats = devicePredicting.lastStats();
      withinCall += stats.callsOnTree == 1 && !stats.background && step > 3 ? 1 : 0;
      if (stats.callsOnTree == 1 && stats.background) {
        ++trees;
        predicted += stats.predictedOnDevice ? 1 : 0;
      }
      EXPECT_FALSE(hostPredicting.lastStats().predictedOnDevice);
    }
    EXPECT_EQ(devicePredicting.lastStats().advanceMismatch, c.jolt);
    EXPECT_GT(trees, 3) << "too few trees were built in the background";
    if (c.jolt) {
      // Trees predicted on the GPU, the repair, a tree built within a call, then trees predicted on the host (the
      // positions are sent from then on).
      EXPECT_GT(repaired, 0u) << "the jolt repaired no list";
      EXPECT_GT(withinCall, 0u) << "no tree was built within a call after the jolt";
      EXPECT_GT(predicted, 0) << "no tree was predicted on the GPU";
    } else {
      // All but the first: its build starts from a tree built within a call, whose launches send the positions.
      EXPECT_GE(predicted, trees - 1) << "a background tree was predicted on the host";
    }
    testing::expectSameBodiesBitForBit(onHost, onDevice, "from the run that predicted on the host");
  }
}

}  // namespace
}  // namespace matcha::gpu
