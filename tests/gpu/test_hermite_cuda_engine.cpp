// SPDX-License-Identifier: MIT
// The CUDA Hermite engine against the engines' contract (hermite_engine_contract.hpp) and against the CPU Hermite
// engine in double on Plummer spheres: i-blocks of 1 to thousands, j-sets of 1 to 20000, the split path, eps = 0 with
// coincident particles, poisoned outputs. Prints the relative error percentiles of acc, jerk and pot. Skips, saying
// why, where there is no GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "hermite_engine_contract.hpp"
#include "matcha/core/force_error.hpp"
#include "matcha/gpu/engine_factory.hpp"
#include "matcha/gpu/hermite_cpu_engine.hpp"
#include "matcha/gpu/hermite_cuda_engine.hpp"
#include "matcha/testing/generators.hpp"
#include "matcha/testing/hermite_comparison.hpp"
#include "matcha/testing/hermite_inputs.hpp"

namespace matcha::gpu {
namespace {

using testing::difference3;
using testing::forcesOn;
using Comparison = testing::HermiteComparison;
using testing::HermiteResults;
using testing::IBlock;
using testing::jParticlesOf;
using testing::loadSlots;
using testing::norm3;

HermiteCudaConfig testConfig() {
  HermiteCudaConfig config;
  config.poisonDeviceOutputs = true;
  config.synchronizeAfterLaunch = true;
  return config;
}

struct CudaHermite {
  static std::unique_ptr<HermiteEngine> make(std::string* whyNot) {
    const CudaDeviceInfo device = queryCudaDevice();
    if (!device.available) {
      *whyNot = "no CUDA device: " + device.description;
      return nullptr;
    }
    return std::make_unique<HermiteCudaEngine>(testConfig());
  }
  static constexpr double kTolerance = 2e-6;  // float pairs, double sums
};
INSTANTIATE_TYPED_TEST_SUITE_P(Cuda, HermiteEngineContract, CudaHermite);

class HermiteCudaEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    device_ = queryCudaDevice();
    if (!device_.available) GTEST_SKIP() << "no CUDA device, GPU test skipped: " << device_.description;
  }
  CudaDeviceInfo device_;
};

/// The CUDA engine (with `config`) and the CPU engine on the same j-particles (at time 0) and i-block.
Comparison runBoth(const std::vector<JParticle>& js, const IBlock& block, double eps2,
                   const HermiteCudaConfig& config = testConfig(), HermiteCudaCallStats* stats = nullptr) {
  HermiteCudaEngine cuda(config);
  HermiteCpuEngine cpu;
  loadSlots(cuda, js);
  loadSlots(cpu, js);
  const HermiteResults gpuResults = forcesOn(cuda, block, eps2);
  const HermiteResults cpuResults = forcesOn(cpu, block, eps2);
  if (stats != nullptr) *stats = cuda.lastCallStats();
  return testing::compareHermite(gpuResults, cpuResults, js, block);
}

/// Float pairs summed 64 at a time in float, then in double. The kernel's arithmetic emulated on the CPU (float pairs
/// with a correctly rounded 1/sqrt, Plummer N = 1000..16384, eps = 1/256 and 0) erred by at most: acc p99 3.0e-7 and
/// max 2.1e-6, jerk p99 1.2e-6 and max 8.5e-6 (its terms cancel more), pot 1.6e-7; the GPU's approximate reciprocal
/// square root adds an ulp or two. The bounds leave a factor of 3-10 for that and for other seeds.
void expectAccurate(const Comparison& c, const char* what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(c.unwritten, 0u);
  EXPECT_EQ(c.neighbourMismatches, 0u);
  EXPECT_LT(c.nearestDistanceError, 1e-6);
  EXPECT_LT(percentile(c.acc, 0.99), 1e-6);
  EXPECT_LT(percentile(c.acc, 1.0), 2e-5);
  EXPECT_LT(percentile(c.jerk, 0.99), 1e-5);
  EXPECT_LT(percentile(c.jerk, 1.0), 1e-4);
  EXPECT_LT(percentile(c.pot, 1.0), 1e-6);
}

std::vector<std::size_t> firstIndices(std::size_t count) {
  std::vector<std::size_t> indices(count);
  for (std::size_t k = 0; k < count; ++k) indices[k] = k;
  return indices;
}

TEST_F(HermiteCudaEngineTest, MatchesTheCpuEngineOnPlummerSpheres) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  for (const std::size_t n : {1u, 2u, 17u, 129u, 1000u, 4096u}) {
    const std::vector<JParticle> js = jParticlesOf(testing::plummer(n, seed + n));
    const IBlock block = testing::iBlockOf(js, firstIndices(n));
    for (const double eps2 : {1.0 / 65536, 0.0}) {
      const Comparison c = runBoth(js, block, eps2);
      const std::string what = "Plummer N = " + std::to_string(n) + (eps2 > 0 ? ", eps = 1/256" : ", eps = 0");
      if (n >= 1000) c.print(what.c_str());
      expectAccurate(c, what.c_str());
    }
  }
}

TEST_F(HermiteCudaEngineTest, SmallBlocksOnManyJParticlesTakeTheSplitPath) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const std::vector<JParticle> js = jParticlesOf(testing::plummer(20000, seed));
  for (const std::size_t ni : {1u, 3u, 48u, 129u}) {
    HermiteCudaCallStats stats;
    const Comparison c = runBoth(js, testing::iBlockOf(js, firstIndices(ni)), 1.0 / 65536, testConfig(), &stats);
    EXPECT_GT(stats.numSplits, 1u) << "ni = " << ni;
    EXPECT_EQ(stats.threadsPerI, 4u) << "ni = " << ni;
    expectAccurate(c, ("ni = " + std::to_string(ni) + ", nj = 20000").c_str());
  }
}

TEST_F(HermiteCudaEngineTest, BlocksLargerThanAThreadBlockWithoutSplits) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const std::vector<JParticle> js = jParticlesOf(testing::plummer(3000, seed));
  HermiteCudaConfig config = testConfig();
  config.numSplits = 1;
  config.threadsPerI = 1;
  const Comparison c = runBoth(js, testing::iBlockOf(js, firstIndices(1000)), 0.0, config);
  expectAccurate(c, "ni = 1000 in 8 thread blocks, one split");
}

TEST_F(HermiteCudaEngineTest, ShapesChangeOnlyTheRoundingAndNeverTheNeighbours) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const std::vector<JParticle> js = jParticlesOf(testing::plummer(5000, seed));
  const IBlock block = testing::iBlockOf(js, firstIndices(300));
  std::vector<HermiteResults> results;
  for (const auto& [splits, threads] : {std::pair{1u, 1u}, std::pair{7u, 4u}, std::pair{0u, 0u}, std::pair{40u, 1u}}) {
    HermiteCudaConfig config = testConfig();
    config.numSplits = splits;
    config.threadsPerI = threads;
    HermiteCudaEngine engine(config);
    loadSlots(engine, js);
    results.push_back(forcesOn(engine, block, 0.0));
  }
  for (std::size_t k = 1; k < results.size(); ++k) {
    for (std::size_t i = 0; i < block.id.size(); ++i) {
      // The same float pairs in other partial sums: differences of float rounding only.
      EXPECT_LT(difference3(results[k].acc, results[0].acc, i), 1e-6 * norm3(results[0].acc, i)) << k << " " << i;
      EXPECT_LT(difference3(results[k].jerk, results[0].jerk, i), 1e-4 * norm3(results[0].jerk, i)) << k << " " << i;
      // Each pair's |r|^2 is the same float whatever the shape, and ties go to the lowest slot.
      EXPECT_EQ(results[k].nearestId[i], results[0].nearestId[i]) << k << " " << i;
      EXPECT_EQ(results[k].nearestDistance2[i], results[0].nearestDistance2[i]) << k << " " << i;
    }
  }
}

TEST_F(HermiteCudaEngineTest, CoincidentParticlesWithoutSofteningGiveNoNaN) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  // A Plummer sphere with five particles on one point and a pair on another (distinct ids), eps = 0.
  Particles bodies = testing::plummer(600, seed);
  for (std::size_t k = 1; k < 5; ++k) {
    bodies.x[k] = bodies.x[0];
    bodies.y[k] = bodies.y[0];
    bodies.z[k] = bodies.z[0];
  }
  bodies.x[11] = bodies.x[10];
  bodies.y[11] = bodies.y[10];
  bodies.z[11] = bodies.z[10];
  const std::vector<JParticle> js = jParticlesOf(bodies);
  const IBlock block = testing::iBlockOf(js, firstIndices(64));
  HermiteCudaEngine cuda(testConfig());
  loadSlots(cuda, js);
  const HermiteResults gpu = forcesOn(cuda, block, 0.0);
  for (std::size_t i = 0; i < block.id.size(); ++i) {
    for (int d = 0; d < 3; ++d) ASSERT_TRUE(std::isfinite(gpu.acc[3 * i + d]) && std::isfinite(gpu.jerk[3 * i + d]));
    ASSERT_TRUE(std::isfinite(gpu.pot[i]));
  }
  for (std::size_t i = 0; i < 5; ++i) EXPECT_EQ(gpu.nearestDistance2[i], 0.0) << i;
  EXPECT_EQ(gpu.nearestId[10], 11);
  EXPECT_EQ(gpu.nearestId[11], 10);
  expectAccurate(runBoth(js, block, 0.0), "coincident particles, eps = 0");
}

TEST_F(HermiteCudaEngineTest, AClosePairFarFromTheOriginKeepsItsDigits) {
  // A binary of separation 1e-6 at (1000, -2000, 500) plus a distant third body, eps = 0: float coordinates would
  // round each position to ~1e-4 and lose the pair; double-single differences keep it to float precision.
  const std::vector<JParticle> js = {testing::jParticleAt(0, 1e-3, {1000.0, -2000.0, 500.0}, {0.0, 0.03, 0.0}),
                                     testing::jParticleAt(1, 1e-3, {1000.0 + 1e-6, -2000.0, 500.0}, {0.0, -0.03, 0.0}),
                                     testing::jParticleAt(2, 1.0, {0.0, 0.0, 0.0})};
  const Comparison c = runBoth(js, testing::iBlockOf(js, {0, 1}), 0.0);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_LT(c.acc[i], 1e-6) << i;
    EXPECT_LT(c.jerk[i], 1e-6) << i;
    EXPECT_LT(c.pot[i], 1e-6) << i;
  }
}

TEST_F(HermiteCudaEngineTest, FactoryPicksTheCudaEngine) {
  std::string reason;
  EXPECT_NE(makeHermiteEngine(EngineKind::automatic, &reason)->name().find("cuda-hermite"), std::string::npos);
  EXPECT_NE(reason.find("CUDA"), std::string::npos) << reason;
  EXPECT_NE(makeHermiteEngine(EngineKind::cuda)->name().find("cuda-hermite"), std::string::npos);
}

}  // namespace
}  // namespace matcha::gpu
