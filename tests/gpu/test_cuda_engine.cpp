// SPDX-License-Identifier: MIT
// The CUDA engine against its twin, the CPU engine in double precision (the oracle), on the same inputs and plans
// (STYLE.md habit 3). Every test that needs a GPU skips, saying why, where there is none; CI compiles this file and
// runs it as a string of skips. Outputs are poisoned (NaN on the host, and on the device through
// CudaKernelConfig::poisonDeviceOutputs) so that any output the engine fails to write fails the test.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "matcha/core/errors.hpp"
#include "matcha/core/force_error.hpp"
#include "matcha/gpu/bare_direct_loop.hpp"
#include "matcha/gpu/cpu_engine.hpp"
#include "matcha/gpu/cuda_engine.hpp"
#include "matcha/gpu/direct_solver.hpp"
#include "matcha/gpu/engine_factory.hpp"
#include "matcha/gpu/ewald.hpp"
#include "matcha/integrator/leapfrog.hpp"
#include "matcha/mesh/particle_mesh.hpp"
#include "matcha/mesh/treepm_solver.hpp"
#include "matcha/testing/block_steps.hpp"
#include "matcha/testing/float_sums.hpp"
#include "matcha/testing/generators.hpp"
#include "matcha/testing/mesh_reduction_check.hpp"
#include "matcha/testing/periodic_reference.hpp"
#include "matcha/testing/restart_check.hpp"
#include "matcha/tree/periodic_tree_solver.hpp"
#include "matcha/tree/space_filling_curve.hpp"
#include "matcha/tree/tree_solver.hpp"

namespace matcha::gpu {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

void poison(Particles& p) {
  for (auto* array : {&p.ax, &p.ay, &p.az, &p.pot}) std::fill(array->begin(), array->end(), kNaN);
}

CudaKernelConfig testConfig() {
  CudaKernelConfig config;
  config.poisonDeviceOutputs = true;
  config.synchronizeAfterLaunch = true;
  config.stagedDownloadPieceBytes = 4096;  // periodic calls of 1024 bodies and more download in pieces
  return config;
}

class CudaEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    device_ = queryCudaDevice();
    if (!device_.available) GTEST_SKIP() << "no CUDA device, GPU test skipped: " << device_.description;
  }
  CudaDeviceInfo device_;
};

/// Relative errors of acceleration and potential against a reference, per body.
struct Comparison {
  double accelerationMax = 0.0;
  double accelerationMedian = 0.0;
  double potentialMax = 0.0;
  std::size_t worstBody = 0;  ///< the body of accelerationMax
  std::size_t firstUnwritten = std::numeric_limits<std::size_t>::max();
};

Comparison compare(const Particles& test, const Particles& reference, std::size_t first = 0,
                   std::size_t last = std::numeric_limits<std::size_t>::max()) {
  last = std::min(last, test.size());
  Comparison result;
  std::vector<double> errors;
  for (std::size_t i = first; i < last; ++i) {
    if (!(std::isfinite(test.ax[i]) && std::isfinite(test.ay[i]) && std::isfinite(test.az[i]) &&
          std::isfinite(test.pot[i]))) {
      result.firstUnwritten = std::min(result.firstUnwritten, i);
      continue;
    }
    const double dx = test.ax[i] - reference.ax[i], dy = test.ay[i] - reference.ay[i],
                 dz = test.az[i] - reference.az[i];
    const double norm = std::sqrt(reference.ax[i] * reference.ax[i] + reference.ay[i] * reference.ay[i] +
                                  reference.az[i] * reference.az[i]);
    const double error = std::sqrt(dx * dx + dy * dy + dz * dz);
    errors.push_back(norm > 0 ? error / norm : error);
    const double potError = std::abs(test.pot[i] - reference.pot[i]);
    result.potentialMax =
        std::max(result.potentialMax, reference.pot[i] != 0 ? potError / std::abs(reference.pot[i]) : potError);
  }
  if (!errors.empty()) {
    const auto worst = std::max_element(errors.begin(), errors.end());
    result.accelerationMax = *worst;
    result.worstBody = first + std::size_t(worst - errors.begin());  // exact when every output was written
    result.accelerationMedian = percentile(errors, 0.5);
  }
  return result;
}

void expectClose(const Comparison& c, double maxTolerance, double medianTolerance, const std::string& what) {
  EXPECT_EQ(c.firstUnwritten, std::numeric_limits<std::size_t>::max())
      << what << ": output of body " << c.firstUnwritten << " not written (or not finite)";
  EXPECT_LE(c.accelerationMax, maxTolerance) << what << ": E_max";
  EXPECT_LE(c.accelerationMedian, medianTolerance) << what << ": median relative error";
  EXPECT_LE(c.potentialMax, maxTolerance) << what << ": potential";
}

/// The bodies permuted into Hilbert order, as the direct solver hands them to the engine. The float direct kernel takes
/// its coordinates relative to the centre of each block of consecutive bodies, so its accuracy depends on how compact
/// those blocks are.
Particles curveOrdered(Particles p) {
  std::vector<std::uint64_t> keys;
  tree::computeHilbertKeys(p.sources(), tree::computeBoundingCube(p.sources()), keys);
  const std::vector<std::uint32_t> order = tree::sortByKey(keys);
  p.permute(order);
  return p;
}

Particles oracleDirect(const Particles& p, const GravityParams& gravity) {
  Particles reference = p;
  CpuEngine(Precision::float64).evaluateDirect(reference.sources(), gravity, reference.forces());
  return reference;
}

// Float against the double oracle on small inputs (direct sums of 3001-4097 bodies, tree plans): a loose bound that
// still catches a lost tile or partial sum (the median bound catches it too).
constexpr double kFloatMax = 2e-4;
// Float direct summation on a Plummer sphere of 2^17 bodies against Chamomile's Table 2 level (1.5e-6), at the issue's
// target of 2e-6: close and strong pairs evaluated again in double (pair_interaction.hpp: closePairThreshold), float
// partial sums of at most 64 terms (DirectShape::subTiles), bodies whose float sums cancelled summed again in double
// (floatSumCancelled). Measured on an H100 with the auto shape (T128/I2/p256) over eight fresh seeds: Hilbert order
// 3.9e-7..5.6e-7 (13-35 bodies summed in double), random order 3.1e-7..5.1e-7 (0-2 bodies). Before the cancellation
// rule, Hilbert order gave 0.75e-6..1.8e-6 in seven seeds and 5.3e-6 in an eighth (seed 16205893033710951378).
constexpr double kChamomileEmax = 2e-6;
constexpr double kFloatMaxUnsorted = 2e-3;
constexpr double kFloatMedian = 1e-6;
constexpr double kDoubleMax = 1e-12;

// ---------------------------------------------------------------------------------------------------------------
// Direct summation

TEST_F(CudaEngineTest, DirectFloatMatchesDoubleOracleOnPlummerAndClump) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  RecordProperty("seed", std::to_string(seed));
  CudaEngine engine(Precision::float32, testConfig());
  for (const bool clump : {false, true}) {
    for (const bool sorted : {true, false}) {
      Particles p = clump ? testing::clumpInHalo(3001, seed) : testing::plummer(4097, seed);  // not tile multiples
      if (sorted) p = curveOrdered(std::move(p));
      const Particles reference = oracleDirect(p, GravityParams{});
      poison(p);
      const InteractionCounts counts = engine.evaluateDirect(p.sources(), GravityParams{}, p.forces());
      EXPECT_EQ(counts.bodyBody, std::uint64_t(p.size()) * p.size());
      EXPECT_EQ(counts.bodyCell, 0u);
      EXPECT_GT(engine.lastKernelMilliseconds(), 0.0);
      expectClose(compare(p, reference), sorted ? kFloatMax : kFloatMaxUnsorted, kFloatMedian,
                  std::string(clump ? "clump in halo" : "Plummer") + (sorted ? ", curve order" : ", random order"));
    }
  }
}

TEST_F(CudaEngineTest, DirectDoubleMatchesDoubleOracle) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  Particles p = testing::clumpInHalo(2049, seed);
  const Particles reference = oracleDirect(p, GravityParams{});
  poison(p);
  CudaEngine engine(Precision::float64, testConfig());
  engine.evaluateDirect(p.sources(), GravityParams{}, p.forces());
  expectClose(compare(p, reference), kDoubleMax, kDoubleMax, "double direct");
}

// Chamomile's accuracy measure at a size where float accumulation error would show: E_max of GPU direct summation
// (float and double) against the CPU double oracle, Plummer N = 2^17 (~1e10 pairs on the CPU; seconds on 16 cores).
TEST_F(CudaEngineTest, DirectEmaxOnPlummer131072) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  for (const bool sorted : {true, false}) {
    Particles p = testing::plummer(std::size_t{1} << 17, seed);
    if (sorted) p = curveOrdered(std::move(p));
    const Particles reference = oracleDirect(p, GravityParams{});
    for (const Precision precision : {Precision::float32, Precision::float64}) {
      poison(p);
      CudaEngine engine(precision, testConfig());
      engine.evaluateDirect(p.sources(), GravityParams{}, p.forces());
      const Comparison c = compare(p, reference);
      const bool isFloat = precision == Precision::float32;
      const std::string what = std::string(isFloat ? "GPU float" : "GPU double") + " direct vs CPU double, " +
                               (sorted ? "curve order" : "random order");
      std::printf("E_max %s, Plummer N = 131072: %.3e (median %.3e, potential max %.3e; %u bodies summed in double)\n",
                  what.c_str(), c.accelerationMax, c.accelerationMedian, c.potentialMax,
                  engine.lastCallStats().bodiesSummedInDouble);
      if (isFloat) {
        std::printf("  worst %s\n", testing::describeCancellation(p, reference, c.worstBody, GravityParams{}).c_str());
      }
      RecordProperty((isFloat ? "e_max_float" : "e_max_double") + std::string(sorted ? "_sorted" : "_random"),
                     std::to_string(c.accelerationMax));
      const double tolerance = isFloat ? kChamomileEmax : kDoubleMax;
      expectClose(c, tolerance, isFloat ? kFloatMedian : kDoubleMax, what);
    }
  }
}

// Body 0 of balancedPulls feels ~1/1000 of what its pulls sum to, which float partial sums would leave with a relative
// error of ~5e-6 (the CPU twin measured 5.0e-6..7.5e-6 without the rule). The kernels flag it (in the direct kernel
// when the j-range is unsplit, in the combining kernel when it is split) and sum it again in double
// (floatSumCancelled). In Hilbert and in input order.
TEST_F(CudaEngineTest, DirectSumsACancelledBodyAgainInDouble) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  CudaEngine engine(Precision::float32, testConfig());
  for (const bool sorted : {true, false}) {
    Particles p = testing::balancedPulls(4098, seed);
    if (sorted) p = curveOrdered(std::move(p));
    const auto body0 = std::size_t(std::find(p.id.begin(), p.id.end(), 0u) - p.id.begin());
    const Particles reference = oracleDirect(p, GravityParams{});
    for (const std::uint32_t splits : {1u, 5u}) {
      CudaKernelConfig config = testConfig();
      config.direct.numSplits = splits;
      engine.setConfig(config);
      poison(p);
      engine.evaluateDirect(p.sources(), GravityParams{}, p.forces());
      const std::string what =
          std::string(sorted ? "curve order" : "input order") + ", " + engine.lastCallStats().kernel;
      const Comparison c = compare(p, reference, body0, body0 + 1);
      std::printf("GPU float, body 0 of balanced pulls, %s: relative error %.3e, %u bodies summed in double\n",
                  what.c_str(), c.accelerationMax, engine.lastCallStats().bodiesSummedInDouble);
      EXPECT_GE(engine.lastCallStats().bodiesSummedInDouble, 1u) << what;
      expectClose(c, 1e-9, 1e-9, what + ", body 0");
      expectClose(compare(p, reference), sorted ? kFloatMax : kFloatMaxUnsorted, kFloatMedian, what);
    }
  }
}

// Every compiled shape, with the j-range unsplit, split automatically and split unevenly, on N = 1531 (a prime:
// no tile or block divides it), with the potential and without.
TEST_F(CudaEngineTest, EveryDirectShapeAndSplitAgrees) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  Particles p = curveOrdered(testing::plummer(1531, seed));
  const Particles reference = oracleDirect(p, GravityParams{});
  for (const Precision precision : {Precision::float32, Precision::float64}) {
    CudaEngine engine(precision, testConfig());
    for (const CudaDirectConfig& shape : CudaEngine::supportedDirectConfigs(precision)) {
      for (const std::uint32_t splits : {1u, 0u, 5u}) {
        CudaKernelConfig config = testConfig();
        config.autoDirect = false;
        config.direct = shape;
        config.direct.numSplits = splits;
        engine.setConfig(config);
        poison(p);
        engine.evaluateDirect(p.sources(), GravityParams{}, p.forces());
        // Blocks of up to 1024 bodies cover much of these 1531: E_max is that of random order; a lost tile or
        // split would still show in the median.
        const bool isFloat = precision == Precision::float32;
        expectClose(compare(p, reference), isFloat ? kFloatMaxUnsorted : kDoubleMax,
                    isFloat ? kFloatMedian : kDoubleMax, engine.lastCallStats().kernel);
        // The same shape without the potential: the same accelerations, bit for bit.
        Particles accelerationsOnly = p;
        poison(accelerationsOnly);
        ForceView view = accelerationsOnly.forces();
        view.pot = nullptr;
        engine.evaluateDirect(accelerationsOnly.sources(), GravityParams{}, view);
        EXPECT_EQ(accelerationsOnly.ax, p.ax) << engine.lastCallStats().kernel;
        EXPECT_EQ(accelerationsOnly.ay, p.ay) << engine.lastCallStats().kernel;
        EXPECT_EQ(accelerationsOnly.az, p.az) << engine.lastCallStats().kernel;
      }
    }
  }
}

TEST_F(CudaEngineTest, DirectWritesEveryOutputAtAwkwardSizes) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  CudaEngine engine(Precision::float32, testConfig());
  for (const std::size_t n : {1u, 2u, 31u, 127u, 129u, 513u, 1000u, 4099u}) {
    Particles p = curveOrdered(testing::plummer(n, seed));
    const Particles reference = oracleDirect(p, GravityParams{});
    poison(p);
    engine.evaluateDirect(p.sources(), GravityParams{}, p.forces());
    expectClose(compare(p, reference), kFloatMax, kFloatMedian, "N = " + std::to_string(n));
  }
}

TEST_F(CudaEngineTest, SingleBodyFeelsNothingWithoutSoftening) {
  Particles p(1);
  p.x = {3.0};
  p.mass = {1.0};
  GravityParams gravity;
  gravity.eps = 0.0;
  for (const Precision precision : {Precision::float32, Precision::float64}) {
    poison(p);
    CudaEngine(precision, testConfig()).evaluateDirect(p.sources(), gravity, p.forces());
    EXPECT_EQ(p.ax[0], 0.0);
    EXPECT_EQ(p.ay[0], 0.0);
    EXPECT_EQ(p.az[0], 0.0);
    EXPECT_EQ(p.pot[0], 0.0);
  }
}

/// Float and double direct sums of `p` against the double oracle, for each softening length. Tolerances of random
/// order (see curveOrdered): inputs with bodies moved onto others have blocks that are not compact; a kept self term
/// or a lost coincident -m/eps would still give errors ~1.
void expectDirectSumsMatchOracle(const Particles& p, std::initializer_list<double> softeningLengths) {
  for (const double eps : softeningLengths) {
    GravityParams gravity;
    gravity.eps = eps;
    const Particles reference = oracleDirect(p, gravity);
    for (const Precision precision : {Precision::float32, Precision::float64}) {
      Particles test = p;
      poison(test);
      CudaEngine(precision, testConfig()).evaluateDirect(test.sources(), gravity, test.forces());
      const bool isFloat = precision == Precision::float32;
      expectClose(compare(test, reference), isFloat ? kFloatMaxUnsorted : kDoubleMax,
                  isFloat ? kFloatMedian : kDoubleMax, "eps " + std::to_string(eps) + (isFloat ? " float" : " double"));
    }
  }
}

/// 50 bodies stacked on one point, with and without softening, as in the oracle: with eps = 0 the self pair and every
/// coincident pair are skipped (no NaN), with eps > 0 each coincident pair adds -m/eps and the self pair nothing.
TEST_F(CudaEngineTest, CoincidentBodiesMatchOracleWithAndWithoutSoftening) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  Particles p = testing::uniformCube(777, seed);
  for (std::size_t i = 0; i < 50; ++i) {
    p.x[i] = p.x[300];
    p.y[i] = p.y[300];
    p.z[i] = p.z[300];
  }
  expectDirectSumsMatchOracle(p, {0.0, 0.01});
}

/// Distinct bodies at one point feel each other's softened potential -G m_j / eps and no force, on the CUDA engine in
/// float and double, direct summation (one split and several) and tree (monopole and quadrupole cells): the analytic
/// values, as the CPU engines give them (tests/tree/test_tree_accuracy.cpp, CoincidentBodies). E = W = -G m^2 n (n - 1)
/// / (2 eps): -2.5 for two bodies of mass 1/2 at eps 0.1, -127.97 for 4096 bodies of mass 1/4096 at eps 1/256.
TEST_F(CudaEngineTest, CoincidentBodiesFeelEachOthersSoftenedPotential) {
  struct Case {
    std::size_t n;
    double eps;
  };
  for (const Case c : {Case{2, 0.1}, Case{3, 0.1}, Case{4096, 1.0 / 256.0}, Case{5, 0.0}}) {
    const Particles bodies = testing::coincidentBodies(c.n);
    GravityParams gravity;
    gravity.eps = c.eps;
    const double m = 1.0 / double(c.n);
    const double expectedPot = c.eps > 0 ? -double(c.n - 1) * m / c.eps : 0.0;
    const double expectedW = 0.5 * double(c.n) * m * expectedPot;
    for (const Precision precision : {Precision::float32, Precision::float64}) {
      const double tolerance = precision == Precision::float32 ? 2e-6 : 1e-13;
      for (const std::uint32_t splits : {1u, 3u}) {
        CudaKernelConfig config = testConfig();
        config.direct.numSplits = splits;
        CudaEngine engine(precision, config);
        DirectSolver direct(engine, gravity);
        TreeParams monopoles, quadrupoles;
        monopoles.multipole = MultipoleOrder::monopole;
        tree::TreeSolver monopoleTree(engine, monopoles, gravity);
        tree::TreeSolver quadrupoleTree(engine, quadrupoles, gravity);
        const std::pair<ForceSolver*, const char*> solvers[] = {
            {&direct, "direct"}, {&monopoleTree, "tree, monopoles"}, {&quadrupoleTree, "tree, quadrupoles"}};
        for (const auto& [solver, name] : solvers) {
          const std::string what = std::string(name) + ", n " + std::to_string(c.n) + ", eps " + std::to_string(c.eps) +
                                   (precision == Precision::float32 ? ", float" : ", double") + ", splits " +
                                   std::to_string(splits);
          Particles p = bodies;
          poison(p);
          solver->computeForces(p);
          double w = 0.0;
          for (std::size_t i = 0; i < c.n; ++i) {
            ASSERT_EQ(p.ax[i], 0.0) << what << ", body " << i;
            ASSERT_EQ(p.ay[i], 0.0) << what << ", body " << i;
            ASSERT_EQ(p.az[i], 0.0) << what << ", body " << i;
            ASSERT_NEAR(p.pot[i], expectedPot, tolerance * std::abs(expectedPot)) << what << ", body " << i;
            w += 0.5 * p.mass[i] * p.pot[i];
          }
          EXPECT_NEAR(w, expectedW, tolerance * std::abs(expectedW)) << what;
        }
      }
    }
  }
}

/// The direct kernel skips the near-pair search in tiles whose bounding box lies away from every body of a warp
/// (DirectArgs::tileBoxes); at 2^16 bodies most tiles are far. Coincident pairs scattered over the array, so that
/// many blocks and tiles hold one, must still meet the self-pair and zero-distance rules, with and without softening.
TEST_F(CudaEngineTest, FarTileTestKeepsTheZeroDistanceRulesAtLargeN) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  Particles p = curveOrdered(testing::plummer((std::size_t{1} << 16) + 77, seed));
  for (std::size_t k = 0; k < 60; ++k) {  // body 1093k + 501 moves onto body 1093k (another tile, mostly)
    const std::size_t from = 1093 * k, to = from + 501;
    p.x[to] = p.x[from];
    p.y[to] = p.y[from];
    p.z[to] = p.z[from];
  }
  expectDirectSumsMatchOracle(p, {0.0, 1.0 / 256.0});
}

// The bare loop, the benchmarks' ceiling (bare_direct_loop.hpp): every shape, with and without the potential, on N
// that fills no block or tile. Its float sums run over all of a split's terms with no double partial sums, so the
// bound is looser than the engine's, but a lost tile, split or row still fails it.
TEST_F(CudaEngineTest, BareLoopMatchesDoubleOracle) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const Particles bodies = curveOrdered(testing::plummer(3001, seed));
  const Particles reference = oracleDirect(bodies, GravityParams{});
  BareDirectLoop loop;
  for (const BareLoopShape& shape : BareDirectLoop::supportedShapes()) {
    for (const bool potential : {true, false}) {
      Particles p = bodies;
      poison(p);
      ForceView out = p.forces();
      if (!potential) {
        out.pot = nullptr;
        p.pot = reference.pot;  // not written: compare() checks accelerations only
      }
      const BareLoopStats stats = loop.evaluate(shape, p.sources(), GravityParams{}, out);
      EXPECT_EQ(stats.interactions, std::uint64_t(p.size()) * p.size());
      EXPECT_GT(stats.kernelMilliseconds, 0.0);
      EXPECT_GE(stats.numSplits, 1u);
      expectClose(compare(p, reference), kFloatMax, 1e-5, shape.label() + (potential ? "" : ", accelerations only"));
    }
  }
}

TEST_F(CudaEngineTest, BareLoopRefusesWhatItCannotDo) {
  Particles p = testing::plummer(64, 1);
  BareDirectLoop loop;
  GravityParams unsoftened;
  unsoftened.eps = 0.0;  // the self pair would be 0/0
  EXPECT_THROW(loop.evaluate(BareDirectLoop::supportedShapes().front(), p.sources(), unsoftened, p.forces()),
               InputError);
  BareLoopShape notCompiled;
  notCompiled.bodiesPerThread = 3;
  EXPECT_THROW(loop.evaluate(notCompiled, p.sources(), GravityParams{}, p.forces()), InputError);
}

// ---------------------------------------------------------------------------------------------------------------
// Group x list

struct TreePlan {
  Particles particles;
  tree::TreeSolver solver;
  InteractionPlan plan;

  TreePlan(Particles p, double theta, std::uint32_t ncrit, NearFieldEngine& engine,
           MultipoleOrder multipole = MultipoleOrder::quadrupole)
      : particles(std::move(p)), solver(engine, makeParams(theta, ncrit, multipole), GravityParams{}) {
    plan = solver.buildPlanOnly(particles);
  }
  static TreeParams makeParams(double theta, std::uint32_t ncrit, MultipoleOrder multipole) {
    TreeParams params;
    params.theta = theta;
    params.ncrit = ncrit;
    params.multipole = multipole;
    return params;
  }
};

/// Evaluates `plan` with the CPU double engine and with `engine`; checks the counts and the outputs.
void expectPlanMatchesOracle(CudaEngine& engine, const Particles& bodies, const CellMultipoles& cells,
                             const InteractionPlan& plan, const GravityParams& gravity, double tolerance,
                             const std::string& what) {
  Particles reference = bodies;
  poison(reference);
  const InteractionCounts expected =
      CpuEngine(Precision::float64).evaluatePlan(reference.sources(), cells, plan, gravity, reference.forces());
  Particles test = bodies;
  poison(test);
  const InteractionCounts counts = engine.evaluatePlan(test.sources(), cells, plan, gravity, test.forces());
  EXPECT_EQ(counts.bodyBody, expected.bodyBody) << what;
  EXPECT_EQ(counts.bodyCell, expected.bodyCell) << what;
  std::vector<bool> inGroup(bodies.size(), false);
  for (const BodyRange& group : plan.groups) {
    for (std::uint32_t i = group.first; i < group.last; ++i) inGroup[i] = true;
  }
  for (std::size_t i = 0; i < bodies.size(); ++i) {
    if (!inGroup[i]) {
      ASSERT_TRUE(std::isnan(test.ax[i]) && std::isnan(test.pot[i])) << what << ": body " << i << " outside every "
                                                                     << "group was written";
      test.ax[i] = reference.ax[i] = 0.0;  // so compare() sees them as written
      test.ay[i] = reference.ay[i] = 0.0;
      test.az[i] = reference.az[i] = 0.0;
      test.pot[i] = reference.pot[i] = 0.0;
    }
  }
  expectClose(compare(test, reference), tolerance, std::min(tolerance, kFloatMedian), what);
}

// The twins on the same plan: CPU float and GPU float evaluate the same float pairs (coordinates relative to the
// same group centres) and differ only in accumulation order and the reciprocal square root (correctly rounded on
// the CPU, ~2 ulp on the GPU): agreement to float precision, for monopole and quadrupole cells.
TEST_F(CudaEngineTest, CpuAndGpuFloatAgreeOnTheSamePlan) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  CpuEngine cpu(Precision::float32);
  CudaEngine gpu(Precision::float32, testConfig());
  for (const MultipoleOrder multipole : {MultipoleOrder::monopole, MultipoleOrder::quadrupole}) {
    TreePlan tp(testing::clumpInHalo(20000, seed), 0.5, 64, cpu, multipole);
    Particles onCpu = tp.particles, onGpu = tp.particles;
    poison(onCpu);
    poison(onGpu);
    const InteractionCounts cpuCounts =
        cpu.evaluatePlan(onCpu.sources(), tp.solver.octree().multipoles, tp.plan, GravityParams{}, onCpu.forces());
    const InteractionCounts gpuCounts =
        gpu.evaluatePlan(onGpu.sources(), tp.solver.octree().multipoles, tp.plan, GravityParams{}, onGpu.forces());
    EXPECT_EQ(cpuCounts.total(), gpuCounts.total());
    const Comparison c = compare(onGpu, onCpu);
    std::printf("GPU float vs CPU float on one %s plan: max %.3e, median %.3e\n", toString(multipole).c_str(),
                c.accelerationMax, c.accelerationMedian);
    expectClose(c, 2e-5, 2e-7, "GPU vs CPU float, " + toString(multipole));
  }
}

// An engine on any device, not only the runtime's default one: a plan whose lists go through the page-locked staging
// buffers (over 1 MB, on an engine without resident lists) records their events on its own stream. Those events were
// once made on device 0 before the engine chose its device, and every staged upload on device 1 failed (rank 1 of 2
// on the 2-GPU H200 machine). On a one-GPU machine this checks device 0 alone.
TEST_F(CudaEngineTest, EveryDeviceEvaluatesAStagedPlan) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  CpuEngine cpu(Precision::float32);
  TreePlan tp(testing::clumpInHalo(100000, seed), 0.5, 64, cpu, MultipoleOrder::quadrupole);
  ASSERT_GT(tp.plan.cellList.size() * sizeof(tp.plan.cellList[0]), std::size_t{1} << 20)
      << "the cell lists must be large enough for the staged upload";
  std::printf("devices: %d\n", device_.deviceCount);
  for (int device = 0; device < device_.deviceCount; ++device) {
    CudaKernelConfig config = testConfig();
    config.device = device;
    CudaEngine engine(Precision::float32, config);
    expectPlanMatchesOracle(engine, tp.particles, tp.solver.octree().multipoles, tp.plan, GravityParams{}, kFloatMax,
                            "device " + std::to_string(device));
  }
}

// A warp task longer than its share of the launch is cut into tasks of fewer rows, one thread per body in each
// (cuda_engine.cu: forEachBalancedWarpTask): every body's sum runs over the same tiles in the same order, so the
// forces are those of the uncut tasks, on plans (evaluatePlan) and on resident lists (a whole launch): bit for bit
// with monopole cells; with quadrupole cells to float rounding (the kinds' loops are unrolled differently, and the
// compiler fuses the quadrupole terms' products differently: up to 1.1e-7 relative on the H200). A clump in a halo
// at ncrit 1024 gives lists of very different lengths.
TEST_F(CudaEngineTest, LongTasksCutIntoFewerRowsGiveTheSameForces) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const Particles bodies = testing::clumpInHalo(60000, seed);
  const auto engineWithShare = [](double share) {
    CudaKernelConfig config = testConfig();
    config.longestTaskShare = share;
    return std::make_unique<CudaEngine>(Precision::float32, config);
  };
  MultipoleOrder multipole = MultipoleOrder::monopole;
  const auto expectSameForces = [&](const Particles& test, const Particles& reference, const std::string& what) {
    ASSERT_EQ(test.id, reference.id) << what;
    if (multipole == MultipoleOrder::monopole) {
      EXPECT_EQ(test.ax, reference.ax) << what;
      EXPECT_EQ(test.ay, reference.ay) << what;
      EXPECT_EQ(test.az, reference.az) << what;
      EXPECT_EQ(test.pot, reference.pot) << what;
    } else {
      const Comparison c = compare(test, reference);
      std::printf("%s: cut against uncut tasks, max %.3e, median %.3e\n", what.c_str(), c.accelerationMax,
                  c.accelerationMedian);
      expectClose(c, 1e-6, 1e-7, what);
    }
  };
  for (const MultipoleOrder order : {MultipoleOrder::monopole, MultipoleOrder::quadrupole}) {
    multipole = order;
    const std::string what = toString(multipole);
    // Plans: uncut (share 0), cut where the default share says, and every task of one thread per body cut to 32 rows.
    auto uncut = engineWithShare(0.0);
    TreePlan tp(bodies, 0.5, 1024, *uncut, multipole);
    Particles reference = tp.particles;
    poison(reference);
    const CellMultipoles& cells = tp.solver.octree().multipoles;
    uncut->evaluatePlan(reference.sources(), cells, tp.plan, GravityParams{}, reference.forces());
    const std::uint64_t uncutTasks = uncut->lastCallStats().numTasks;
    for (const double share : {0.5, 1e-12}) {
      auto engine = engineWithShare(share);
      Particles test = tp.particles;
      poison(test);
      engine->evaluatePlan(test.sources(), cells, tp.plan, GravityParams{}, test.forces());
      if (share < 1e-6) {
        EXPECT_GT(engine->lastCallStats().numTasks, uncutTasks) << what << ": nothing was cut";
      }
      expectSameForces(test, reference, what + " plan, share " + std::to_string(share));
    }
    // Resident lists: the same tree and lists installed, then one launch of every group (where tasks are cut).
    TreeTopology topology = tp.solver.topology();
    InteractionPlan lists = tp.plan;
    lists.groupIds.resize(lists.numGroups());
    std::iota(lists.groupIds.begin(), lists.groupIds.end(), 0u);
    const auto residentForces = [&](CudaEngine& engine) {
      Particles p = tp.particles;
      poison(p);
      engine.setTree(topology, p.sources());
      engine.setLists(lists);
      engine.launchResident(p.sources(), GravityParams{}, p.forces(), {}, BodyMotion::moved);
      EXPECT_TRUE(engine.finishResident().failedGroups.empty()) << what;
      return p;
    };
    const Particles residentReference = residentForces(*uncut);
    const std::uint64_t uncutResidentTasks = uncut->lastCallStats().numTasks;
    for (const double share : {0.5, 1e-12}) {
      auto engine = engineWithShare(share);
      const Particles test = residentForces(*engine);
      if (share < 1e-6) {
        EXPECT_GT(engine->lastCallStats().numTasks, uncutResidentTasks) << what << ": nothing was cut";
      }
      expectSameForces(test, residentReference, what + " resident, share " + std::to_string(share));
    }
  }
}

TEST_F(CudaEngineTest, TreePlansMatchOracleAcrossNcrit) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  RecordProperty("seed", std::to_string(seed));
  CpuEngine unused(Precision::float64);
  for (const Precision precision : {Precision::float32, Precision::float64}) {
    for (const std::uint32_t tile : CudaEngine::supportedPlanTileSizes(precision)) {
      CudaKernelConfig config = testConfig();
      config.planTileSize = tile;
      CudaEngine engine(precision, config);
      for (const bool clump : {false, true}) {
        // ncrit 1: groups of one body (q = 32); 16, 64: packed small groups; 700: groups larger than a warp's
        // 128 rows and than a 128-thread block, split into several tasks.
        for (const std::uint32_t ncrit : {1u, 16u, 64u, 700u}) {
          // Quadrupole cells, and monopoles for ncrit 64.
          const MultipoleOrder multipole = ncrit == 64 ? MultipoleOrder::monopole : MultipoleOrder::quadrupole;
          TreePlan tp(clump ? testing::clumpInHalo(6000, seed) : testing::plummer(6000, seed), 0.6, ncrit, unused,
                      multipole);
          const std::string what = std::string(clump ? "clump" : "Plummer") + " ncrit " + std::to_string(ncrit) +
                                   " tile " + std::to_string(tile) + " " + toString(multipole) +
                                   (precision == Precision::float32 ? " float" : " double");
          expectPlanMatchesOracle(engine, tp.particles, tp.solver.octree().multipoles, tp.plan, GravityParams{},
                                  precision == Precision::float32 ? kFloatMax : kDoubleMax, what);
        }
      }
    }
  }
}

/// A hand-made plan with every awkward case: a group of one body, a group of 1000 bodies (larger than any warp task
/// and any block), a group whose list is empty, a group with only cells, groups given out of body order, bodies in
/// no group (must stay untouched), coincident bodies and eps = 0.
TEST_F(CudaEngineTest, HandMadePlanWithAwkwardGroups) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  Particles p = testing::plummer(2000, seed);
  p.x[1500] = p.x[1501];
  p.y[1500] = p.y[1501];
  p.z[1500] = p.z[1501];
  CellMultipoles cells;
  cells.resize(3, false);
  cells.x = {5.0, -4.0, 0.5};
  cells.y = {0.0, 3.0, -6.0};
  cells.z = {1.0, 0.0, 2.0};
  cells.mass = {0.1, 0.2, 0.05};
  InteractionPlan plan;
  const auto addGroup = [&](BodyRange group, std::vector<BodyRange> bodies, std::vector<std::uint32_t> cellIds) {
    plan.groups.push_back(group);
    for (const double* coordinate : {p.x.data(), p.y.data(), p.z.data()}) {
      const auto [lo, hi] = std::minmax_element(coordinate + group.first, coordinate + group.last);
      plan.groupCentres.push_back(0.5 * (*lo + *hi));
    }
    plan.bodyList.insert(plan.bodyList.end(), bodies.begin(), bodies.end());
    plan.bodyListOffsets.push_back(static_cast<std::uint32_t>(plan.bodyList.size()));
    plan.cellList.insert(plan.cellList.end(), cellIds.begin(), cellIds.end());
    plan.cellListOffsets.push_back(static_cast<std::uint32_t>(plan.cellList.size()));
  };
  addGroup({1500, 2000}, {{1400, 2000}}, {0, 1, 2});         // holds the coincident pair 1500/1501
  addGroup({7, 8}, {{0, 100}, {1000, 1003}}, {2});           // one body, two ranges
  addGroup({100, 1100}, {{0, 1200}, {1300, 1310}}, {0, 1});  // 1000 bodies
  // Lists without the group's own bodies break the plans' contract (interaction_plan.hpp): the engines still take
  // the self pair's -m_i/eps out, so with eps > 0 those potentials are +G m_i/eps, on both engines alike.
  addGroup({1200, 1250}, {}, {});              // empty list: zero accelerations
  addGroup({1250, 1260}, {}, {0, 2});          // cells only
  addGroup({1260, 1261}, {{1260, 1261}}, {});  // only itself: zero
  // bodies 0..6, 8..99, 1100..1199, 1261..1499 are in no group
  for (const double eps : {0.0, 1.0 / 256.0}) {
    GravityParams gravity;
    gravity.eps = eps;
    // Group 100..1100 spans the whole sphere (bodies in random order), so its float coordinates about the group's
    // centre carry ~1e-7 of the sphere's size into pairs far closer than that: E_max up to 3.3e-4 over 301 seeds
    // with eps 0, the CPU float twin alike (1e-4 failed 3% of seeds). A wrong index or range errs by O(1).
    for (const Precision precision : {Precision::float32, Precision::float64}) {
      CudaEngine engine(precision, testConfig());
      expectPlanMatchesOracle(engine, p, cells, plan, gravity, precision == Precision::float32 ? 1e-3 : kDoubleMax,
                              "hand-made plan, eps " + std::to_string(eps));
    }
  }
}

TEST_F(CudaEngineTest, EmptyPlanAndEmptySourcesDoNothing) {
  CudaEngine engine(Precision::float32, testConfig());
  Particles p(3);
  poison(p);
  const InteractionCounts counts =
      engine.evaluatePlan(p.sources(), CellMultipoles{}, InteractionPlan{}, GravityParams{}, p.forces());
  EXPECT_EQ(counts.total(), 0u);
  EXPECT_TRUE(std::isnan(p.ax[0]));
  Particles none;
  EXPECT_EQ(engine.evaluateDirect(none.sources(), GravityParams{}, none.forces()).total(), 0u);
}

// The solver path: a TreeSolver on the CUDA engine gives the same forces as on the CPU double engine.
// Accelerations only (ForceView::pot null, ForceSolver::setPotentialsWanted): the kernels without the potential give
// the same accelerations bit for bit, for direct summation (unsplit and split) and for tree plans (monopole and
// quadrupole cells), and the solver leaves pot NaN.
TEST_F(CudaEngineTest, AccelerationsOnlyGiveTheSameAccelerations) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const auto expectSameAccelerations = [](const Particles& test, const Particles& reference, const std::string& what) {
    EXPECT_EQ(test.id, reference.id) << what;
    EXPECT_EQ(test.ax, reference.ax) << what;
    EXPECT_EQ(test.ay, reference.ay) << what;
    EXPECT_EQ(test.az, reference.az) << what;
  };
  CudaEngine engine(Precision::float32, testConfig());
  const Particles bodies = curveOrdered(testing::plummer(20001, seed));
  for (const std::uint32_t splits : {1u, 3u}) {
    CudaKernelConfig config = testConfig();
    config.direct.numSplits = splits;
    engine.setConfig(config);
    Particles withPotentials = bodies, accelerationsOnly = bodies;
    poison(withPotentials);
    poison(accelerationsOnly);
    engine.evaluateDirect(withPotentials.sources(), GravityParams{}, withPotentials.forces());
    ForceView view = accelerationsOnly.forces();
    view.pot = nullptr;
    engine.evaluateDirect(accelerationsOnly.sources(), GravityParams{}, view);
    const std::string what = engine.lastCallStats().kernel;
    EXPECT_NE(what.find("accelerations only"), std::string::npos) << what;
    expectSameAccelerations(accelerationsOnly, withPotentials, what);
  }
  engine.setConfig(testConfig());
  for (const MultipoleOrder order : {MultipoleOrder::monopole, MultipoleOrder::quadrupole}) {
    TreeParams params;
    params.multipole = order;
    tree::TreeSolver solver(engine, params, GravityParams{});
    Particles withPotentials = bodies, accelerationsOnly = bodies;
    solver.computeForces(withPotentials);
    solver.setPotentialsWanted(false);
    solver.computeForces(accelerationsOnly);
    const std::string what = engine.lastCallStats().kernel;
    EXPECT_NE(what.find("accelerations only"), std::string::npos) << what;
    expectSameAccelerations(accelerationsOnly, withPotentials, what);
    EXPECT_TRUE(std::all_of(accelerationsOnly.pot.begin(), accelerationsOnly.pot.end(),
                            [](double v) { return std::isnan(v); }));
  }
}

TEST_F(CudaEngineTest, TreeSolverOnCudaMatchesCpu) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  Particles onGpu = testing::clumpInHalo(20000, seed);
  CudaEngine gpu(Precision::float32, testConfig());
  CpuEngine cpu(Precision::float64);
  // The relative opening test (on by default) scales by the accelerations the bodies bring; both solvers get the
  // same ones, so that they build the same plans and differ only by their engines.
  cpu.evaluateDirect(onGpu.sources(), GravityParams{}, onGpu.forces());
  Particles onCpu = onGpu;
  TreeParams params;
  ASSERT_GT(params.alpha, 0.0);
  params.ncrit = 128;
  params.maxBatchEntries = 5000;  // several batches, so buffers are reused and regrown
  tree::TreeSolver gpuSolver(gpu, params, GravityParams{});
  tree::TreeSolver cpuSolver(cpu, params, GravityParams{});
  gpuSolver.computeForces(onGpu);
  cpuSolver.computeForces(onCpu);
  EXPECT_FALSE(gpuSolver.lastStats().estimatePass);
  expectClose(compare(onGpu, onCpu), kFloatMax, kFloatMedian, "tree solver");
  // A second call on moved bodies: the positions the engine keeps must be the new ones.
  ASSERT_EQ(onGpu.id, onCpu.id);
  onGpu.ax = onCpu.ax;
  onGpu.ay = onCpu.ay;
  onGpu.az = onCpu.az;
  for (Particles* p : {&onGpu, &onCpu}) {
    for (std::size_t i = 0; i < p->size(); ++i) p->x[i] += 0.01 * p->vy[i] + 1e-3;
  }
  gpuSolver.computeForces(onGpu);
  cpuSolver.computeForces(onCpu);
  expectClose(compare(onGpu, onCpu), kFloatMax, kFloatMedian, "tree solver, second call");
}

// A tree built within the call is evaluated batch by batch while the CPU walks the next batch (lists resident, not
// streamed): subset launches whose outputs come back through page-locked staging. Against the CPU twin in double.
// `matcha run --restart` on the GPU: a run stopped at a random checkpoint and continued by a new solver and CUDA
// engine from the saved state ends with the same bodies, bit for bit, as the run that went on (alpha > 0, trees
// reused over three steps and built in the background, and a new tree every step).
TEST_F(CudaEngineTest, RestartFromACheckpointIsBitIdentical) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const auto cudaEngine = [] { return std::make_unique<CudaEngine>(Precision::float32, testConfig()); };
  TreeParams params;
  params.alpha = 1e-3;
  for (const std::uint32_t reuse : {3u, 1u}) {
    SCOPED_TRACE("reuse " + std::to_string(reuse));
    params.reuse = reuse;
    testing::expectBitIdenticalRestart(cudaEngine, params, 65536, 40, seed);
  }
}

// TreeParams::advanceOnDevice: between a tree's calls the GPU kicks and drifts its own copy of the bodies (in double,
// each product and sum rounded on its own) and the next call is launched as the last one ends. The run is the run of
// an engine that is sent the positions every call, bit for bit: with trees built in the background (the caller's
// order differs from the tree's) and within the call (the caller sorted into the tree's order).
TEST_F(CudaEngineTest, BodiesAdvancedOnTheGpuGiveTheRunOfPositionsSentBitForBit) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  for (const bool pipeline : {true, false}) {
    SCOPED_TRACE(pipeline ? "pipeline on" : "pipeline off");
    TreeParams params;
    params.alpha = 1e-3;
    params.reuse = 3;
    params.pipeline = pipeline;
    Particles sent = testing::plummer(65536, seed);
    Particles advanced = sent;
    CudaEngine sentEngine(Precision::float32, testConfig()), advancingEngine(Precision::float32, testConfig());
    tree::TreeSolver advancing(advancingEngine, params, GravityParams{});
    params.advanceOnDevice = false;
    tree::TreeSolver plain(sentEngine, params, GravityParams{});
    const double dt = 1.0 / 128.0;
    integrator::LeapfrogKDK sentRun(plain, dt), advancedRun(advancing, dt);
    sentRun.initialize(sent);
    advancedRun.initialize(advanced);
    int ahead = 0, onDevice = 0, predicted = 0;
    constexpr int kSteps = 40;
    for (int step = 1; step <= kSteps; ++step) {
      sentRun.step(sent);
      advancedRun.step(advanced);
      EXPECT_FALSE(plain.lastStats().advancedOnDevice);
      EXPECT_FALSE(plain.lastStats().predictedOnDevice);
      ahead += advancing.lastStats().launchedAhead;
      onDevice += advancing.lastStats().advancedOnDevice;
      predicted += advancing.lastStats().predictedOnDevice && advancing.lastStats().callsOnTree == 1;
    }
    // The advancing run's background trees were predicted on the GPU (TreeParams::predictOnDevice), the plain run's on
    // the host: the same bits.
    if (pipeline) {
      EXPECT_GT(predicted, 0) << "no tree was predicted on the GPU";
    }
    EXPECT_FALSE(advancing.lastStats().advanceMismatch) << "the GPU's copy of the bodies differed from the host's";
    // K = 3: every call of a tree but its first is launched ahead; the first is advanced too where the tree was built
    // in the background (the caller's order kept), and sent where it was built within the call (the caller sorted).
    EXPECT_GE(onDevice, pipeline ? kSteps - 2 : kSteps / 2);
    EXPECT_GE(ahead, kSteps / 2);
    testing::expectSameBodiesBitForBit(sent, advanced, "from the run that sent its positions");
  }
}

TEST_F(CudaEngineTest, TreeSolverOverlappedBatchesOnCudaMatchCpu) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  Particles onGpu = testing::plummer(65536, seed);
  CudaEngine gpu(Precision::float32, testConfig());
  CpuEngine cpu(Precision::float64);
  cpu.evaluateDirect(onGpu.sources(), GravityParams{}, onGpu.forces());
  Particles onCpu = onGpu;
  TreeParams params;
  params.ncrit = 16;  // many groups: several batches
  params.reuse = 1;
  tree::TreeSolver gpuSolver(gpu, params, GravityParams{});
  tree::TreeSolver cpuSolver(cpu, params, GravityParams{});
  gpuSolver.computeForces(onGpu);
  cpuSolver.computeForces(onCpu);
  EXPECT_GE(gpuSolver.lastStats().numBatches, 3u);
  ASSERT_EQ(onGpu.id, onCpu.id);
  expectClose(compare(onGpu, onCpu), kFloatMax, kFloatMedian, "overlapped batches");
}

// Resident lists on the GPU against the CPU twin (double), with the bodies in an order of the caller's that differs
// from the tree's (TreeTopology::order): the bodies moved a little (every list still passes) and a few moved far
// (their groups' lists fail, with many others: lists walked for exact positions keep no room for motion): the same
// forces to float accuracy, written for every body, and the same failed groups;
// then those groups alone again (a repair's subset launch).
TEST_F(CudaEngineTest, ResidentListsMatchTheCpuTwinInTheCallersOrder) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const GravityParams gravity;
  Particles sorted = testing::plummer(20000, seed);
  CpuEngine cpu(Precision::float64);
  tree::TreeSolver solver(cpu, TreeParams{}, gravity);
  cpu.evaluateDirect(sorted.sources(), gravity, sorted.forces());  // accelerations for the relative test
  const InteractionPlan plan = solver.buildPlanOnly(sorted);       // sorts `sorted` into the tree's order
  TreeTopology topology = solver.topology();
  topology.relativeTolerance = solver.groups().relativeTolerance;
  ASSERT_EQ(topology.numBodies(), sorted.size());
  InteractionPlan lists = plan;
  lists.groupIds.resize(plan.numGroups());
  for (std::uint32_t g = 0; g < plan.numGroups(); ++g) lists.groupIds[g] = g;
  // The caller's order: a random permutation of the tree's.
  std::vector<std::uint32_t> order(sorted.size());
  for (std::uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::mt19937_64 random(seed);
  std::shuffle(order.begin(), order.end(), random);
  Particles caller(sorted.size());
  for (std::size_t k = 0; k < sorted.size(); ++k) {
    const std::size_t j = order[k];
    caller.x[j] = sorted.x[k] + 1e-5 * sorted.vx[k];
    caller.y[j] = sorted.y[k] + 1e-5 * sorted.vy[k];
    caller.z[j] = sorted.z[k] + 1e-5 * sorted.vz[k];
    caller.mass[j] = sorted.mass[k];
    caller.id[j] = sorted.id[k];
  }
  for (std::size_t j = 0; j < 20; ++j) caller.x[j] += 0.3;  // these bodies' groups no longer meet the criterion
  topology.order = order;
  CudaEngine gpu(Precision::float32, testConfig());
  Particles onGpu = caller, onCpu = caller;
  for (NearFieldEngine* engine : {static_cast<NearFieldEngine*>(&gpu), static_cast<NearFieldEngine*>(&cpu)}) {
    engine->setTree(topology, caller.sources());
    engine->setLists(lists);
  }
  poison(onGpu);
  gpu.launchResident(onGpu.sources(), gravity, onGpu.forces(), {}, BodyMotion::moved);
  const ResidentResult gpuResult = gpu.finishResident();
  cpu.launchResident(onCpu.sources(), gravity, onCpu.forces(), {}, BodyMotion::moved);
  const ResidentResult cpuResult = cpu.finishResident();
  expectClose(compare(onGpu, onCpu), kFloatMax, kFloatMedian, "resident lists");
  EXPECT_EQ(gpuResult.failedGroups, cpuResult.failedGroups);
  EXPECT_FALSE(gpuResult.failedGroups.empty()) << "the far-moved bodies should have failed their groups";
  // (Lists walked for exact positions have no room to spare: any motion can fail some; how many does not matter
  // here, only that both engines find the same.)
  EXPECT_EQ(gpuResult.counts.total(), cpuResult.counts.total());
  // The failed groups alone: only their bodies are written.
  Particles subsetGpu = caller, subsetCpu = caller;
  poison(subsetGpu);
  poison(subsetCpu);
  gpu.launchResident(subsetGpu.sources(), gravity, subsetGpu.forces(), gpuResult.failedGroups, BodyMotion::unchanged);
  const ResidentResult gpuSubset = gpu.finishResident();
  cpu.launchResident(subsetCpu.sources(), gravity, subsetCpu.forces(), gpuResult.failedGroups, BodyMotion::unchanged);
  cpu.finishResident();
  EXPECT_EQ(gpuSubset.failedGroups, gpuResult.failedGroups);
  std::size_t written = 0;
  for (std::size_t j = 0; j < caller.size(); ++j) {
    ASSERT_EQ(std::isnan(subsetGpu.ax[j]), std::isnan(subsetCpu.ax[j])) << "body " << j;
    if (std::isnan(subsetGpu.ax[j])) continue;
    ++written;
    // Float against double, body by body: the bound of the whole launch's comparison above (kFloatMax; 1e-5 failed
    // once in 40 seeds on the H200, seed 4498893174894351177, a float sum's rounding, not a lost term).
    EXPECT_NEAR(subsetGpu.ax[j], onCpu.ax[j], kFloatMax * (std::abs(onCpu.ax[j]) + 1.0));
    // The subset's launch reused the full launch's positions and refit (BodyMotion::unchanged): the same lists at the
    // same cells give the same forces.
    EXPECT_NEAR(subsetGpu.ax[j], onGpu.ax[j], 1e-12 * (std::abs(onGpu.ax[j]) + 1.0));
  }
  EXPECT_GT(written, 0u);
}

// Twenty steps of a Plummer sphere with reuse (trees built for predicted positions, refitted on the device in
// between) on the GPU, with the CPU twin fed the same positions at every step: the same trees and lists (the same
// builds at the same calls), so the forces agree to float accuracy and so do the repairs.
TEST_F(CudaEngineTest, ReuseOnTheGpuMatchesTheCpuStepByStep) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const GravityParams gravity;
  Particles p = testing::plummer(30000, seed);
  CudaEngine gpu(Precision::float32, testConfig());
  CpuEngine cpu(Precision::float32);
  TreeParams params;
  params.reuse = 4;
  // Trees built within their calls: a background build's timing (how many calls ahead it starts) adapts to measured
  // waits, which differ between the engines, and so would the trees.
  params.pipeline = false;
  tree::TreeSolver gpuSolver(gpu, params, gravity);
  tree::TreeSolver cpuSolver(cpu, params, gravity);
  Particles twin = p;
  gpuSolver.computeForces(p);
  cpuSolver.computeForces(twin);
  std::uint64_t reused = 0;
  const double dt = 1.0 / 128.0;
  for (int step = 1; step <= 20; ++step) {
    integrator::kick(p, dt);
    integrator::drift(p, dt);
    twin = p;  // the same positions and accelerations; the device outputs are poisoned (testConfig)
    const ForceReport gpuReport = gpuSolver.computeForces(p);
    const ForceReport cpuReport = cpuSolver.computeForces(twin);
    ASSERT_EQ(p.id, twin.id) << "step " << step;
    reused += gpuReport.rebuilt ? 0 : 1;
    EXPECT_EQ(gpuReport.rebuilt, cpuReport.rebuilt) << "step " << step;
    EXPECT_EQ(gpuReport.numGroupsRepaired, cpuReport.numGroupsRepaired) << "step " << step;
    expectClose(compare(p, twin), kFloatMax, kFloatMedian, ("step " + std::to_string(step)).c_str());
  }
  EXPECT_GT(reused, 10u) << "the trees were not reused";
}

// The relative opening test lives in the walk, so the GPU evaluates its plans like any other; this checks the whole
// path on the GPU at a size where it matters. Plummer N = 2^16, theta 0.5, quadrupole cells, the GPU double direct
// sum (checked against the CPU oracle above) as the reference and as the estimates the test scales by. Bounds as the
// CPU test RelativeOpeningCutsTheTailAtThetaHalf: p99 at most 0.92 of theta alone's, for at most 15% more work.
TEST_F(CudaEngineTest, RelativeOpeningCutsTheTailOnTheGpu) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const GravityParams gravity;
  CudaEngine gpu(Precision::float32, testConfig());
  Particles reference = testing::plummer(1 << 16, seed);
  tree::TreeSolver(gpu, TreeParams{}, gravity).buildPlanOnly(reference);  // sorted once, as the solves leave it
  makeCudaEngine(Precision::float64)->evaluateDirect(reference.sources(), gravity, reference.forces());
  const auto treeRun = [&](double alpha, double& interactionsPerBody) {
    Particles p = reference;
    TreeParams params;
    params.alpha = alpha;
    const ForceReport report = tree::TreeSolver(gpu, params, gravity).computeForces(p);
    interactionsPerBody = double(report.counts.total()) / double(p.size());
    return summariseForceErrors({p.ax, p.ay, p.az}, {reference.ax, reference.ay, reference.az});
  };
  double aloneCost = 0.0, relativeCost = 0.0;
  const ForceErrorStats alone = treeRun(0.0, aloneCost);
  const ForceErrorStats relative = treeRun(1e-3, relativeCost);
  std::printf(
      "Plummer 2^16, theta 0.5, quad, GPU: p99 %.3e -> %.3e (alpha 1e-3), median %.3e -> %.3e, "
      "interactions/body %.0f -> %.0f\n",
      alone.p99, relative.p99, alone.median, relative.median, aloneCost, relativeCost);
  EXPECT_LT(relative.p99, 0.92 * alone.p99);
  EXPECT_GE(relativeCost, aloneCost);
  EXPECT_LT(relativeCost, 1.15 * aloneCost);
}

// The Speed issue's accuracy target, on a fresh seed: a Plummer sphere of 2^22 bodies with the default settings (theta
// 0.5, quadrupole cells, alpha 1e-3, ncrit 64), the 99th percentile of |a - a_ref| / |a_ref| at most 4.4e-4 (the best
// GPU treecode's on this input) over 4096 bodies drawn at random, against GPU double direct sums onto them.
// Measured on the H200 (seed 7): 2.2e-4.
TEST_F(CudaEngineTest, TreeAtTwoToTheTwentyTwoMeetsTheAccuracyTarget) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const GravityParams gravity;
  Particles p = testing::plummer(std::size_t{1} << 22, seed);
  CudaEngine gpu(Precision::float32, testConfig());
  tree::TreeSolver solver(gpu, TreeParams{}, gravity);
  solver.computeForces(p);  // the estimate pass, then the real one
  // The sample first (in the tree's order, so that its blocks stay compact), then everyone else.
  std::mt19937_64 random(seed);
  std::vector<std::uint8_t> chosen(p.size(), 0);
  constexpr std::uint32_t kSample = 4096;
  for (std::uint32_t k = 0; k < kSample;) {
    const std::size_t i = random() % p.size();
    if (!chosen[i]) {
      chosen[i] = 1;
      ++k;
    }
  }
  std::vector<std::uint32_t> order;
  for (const int pass : {1, 0}) {
    for (std::uint32_t i = 0; i < p.size(); ++i) {
      if (chosen[i] == pass) order.push_back(i);
    }
  }
  Particles reference = p;
  reference.permute(order);
  Particles tree = reference;
  const InteractionPlan plan = makeDirectPlan(reference.sources(), 256, BodyRange{0, kSample});
  CudaEngine exact(Precision::float64);
  exact.evaluatePlan(reference.sources(), CellMultipoles{}, plan, gravity, reference.forces());
  const ForceErrorStats error = summariseForceErrors(
      {std::span<const double>(tree.ax.data(), kSample), std::span<const double>(tree.ay.data(), kSample),
       std::span<const double>(tree.az.data(), kSample)},
      {std::span<const double>(reference.ax.data(), kSample), std::span<const double>(reference.ay.data(), kSample),
       std::span<const double>(reference.az.data(), kSample)});
  std::printf("Plummer 2^22 (seed %llu), defaults, GPU: median %.3e, p99 %.3e, max %.3e over %u bodies\n",
              static_cast<unsigned long long>(seed), error.median, error.p99, error.max, kSample);
  EXPECT_LE(error.p99, 4.4e-4);
}

// ---------------------------------------------------------------------------------------------------------------
// Engine selection and errors

// ---------------------------------------------------------------------------------------------------------------
// The periodic TreePM short range (GravityParams::periodic)

/// Evaluates every plan it is given with the CPU float engine (into the caller's outputs: the reference) and the CUDA
/// engine (into its own), and keeps the worst differences per body over the calls. The periodic tree solver builds its
/// tree and lists per call, so this is how a test sees the CUDA engine on exactly the CPU engine's plans.
class PeriodicTwinEngine final : public NearFieldEngine {
 public:
  PeriodicTwinEngine()
      : cpu_(Precision::float32), cpuDouble_(Precision::float64), gpu_(Precision::float32, testConfig()) {}

  std::string name() const override { return "twin of " + cpu_.name() + " and " + gpu_.name(); }
  bool periodicShortRange() const override { return cpu_.periodicShortRange() && gpu_.periodicShortRange(); }
  InteractionCounts evaluatePlan(const SourceView& sources, const CellMultipoles& cells, const InteractionPlan& plan,
                                 const GravityParams& gravity, const ForceView& out) override {
    const std::size_t n = sources.count;
    for (auto* array : {&ax_, &ay_, &az_, &pot_, &doublePot_, &doubleAx_, &doubleAy_, &doubleAz_}) {
      array->assign(n, kNaN);
    }
    const InteractionCounts cpuCounts = cpu_.evaluatePlan(sources, cells, plan, gravity, out);
    cpuDouble_.evaluatePlan(sources, cells, plan, gravity,
                            ForceView{doubleAx_.data(), doubleAy_.data(), doubleAz_.data(), doublePot_.data(), n});
    const InteractionCounts gpuCounts =
        gpu_.evaluatePlan(sources, cells, plan, gravity, ForceView{ax_.data(), ay_.data(), az_.data(), pot_.data(), n});
    EXPECT_EQ(cpuCounts.total(), gpuCounts.total());
    kernel = gpu_.lastCallStats().kernel;
    double rms = 0.0;
    for (std::size_t i = 0; i < n; ++i) rms += out.ax[i] * out.ax[i] + out.ay[i] * out.ay[i] + out.az[i] * out.az[i];
    rms = std::sqrt(rms / double(std::max<std::size_t>(n, 1)));
    relative.clear();
    ofRms = 0.0;
    potential = potentialGpuError = potentialCpuError = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      if (!(std::isfinite(ax_[i]) && std::isfinite(ay_[i]) && std::isfinite(az_[i]) && std::isfinite(pot_[i]))) {
        ADD_FAILURE() << "CUDA periodic output of body " << i << " (id-free, tree order) not written or not finite";
        return cpuCounts;
      }
      const double difference = std::hypot(ax_[i] - out.ax[i], ay_[i] - out.ay[i], az_[i] - out.az[i]);
      const double norm = std::hypot(out.ax[i], out.ay[i], out.az[i]);
      relative.push_back(norm > 0 ? difference / norm : difference);
      ofRms = std::max(ofRms, difference / rms);
      // A float potential carries the rounding of its own pair's -G m_i / eps, which is taken out in double: a body
      // with no other source within r_cut (small r_s in a clustered box) has a potential of exactly 0 in double and
      // that rounding in float. So the scale is the larger of |phi_i| and G m_i / eps.
      const double scale =
          std::max(std::abs(doublePot_[i]), gravity.eps > 0 ? gravity.G * sources.mass[i] / gravity.eps : 0.0);
      potential = std::max(potential, std::abs(pot_[i] - out.pot[i]) / scale);
      potentialGpuError = std::max(potentialGpuError, std::abs(pot_[i] - doublePot_[i]) / scale);
      potentialCpuError = std::max(potentialCpuError, std::abs(out.pot[i] - doublePot_[i]) / scale);
    }
    return cpuCounts;
  }
  EngineTimings lastTimings() const override { return gpu_.lastTimings(); }
  void setTree(const TreeTopology&, const SourceView&) override { ADD_FAILURE() << "periodic plans are not resident"; }
  void setLists(const InteractionPlan&) override { ADD_FAILURE() << "periodic plans are not resident"; }
  void dropLists() override {}
  void launchResident(const SourceView&, const GravityParams&, const ForceView&, std::span<const std::uint32_t>,
                      const BodyUpdate&) override {
    ADD_FAILURE() << "periodic plans are not resident";
  }
  ResidentResult finishResident() override { return {}; }
  void discardResident() override {}
  InteractionCounts evaluateDirect(const SourceView&, const GravityParams&, const ForceView&) override {
    ADD_FAILURE() << "no periodic direct summation";
    return {};
  }

  // The last call's differences, GPU against CPU, in the solver's (Morton) order.
  std::vector<double> relative;  ///< per body |a_gpu - a_cpu| / |a_cpu|
  double ofRms = 0.0;            ///< largest |a_gpu - a_cpu| over the rms |a_cpu| of the call
  double potential = 0.0;        ///< largest |pot_gpu - pot_cpu| / max(|pot_double|, G m / eps)
  /// Largest relative potential error of each float engine against the CPU engine in double on the same plan.
  double potentialGpuError = 0.0, potentialCpuError = 0.0;
  std::string kernel;

 private:
  CpuEngine cpu_, cpuDouble_;
  CudaEngine gpu_;
  std::vector<double> ax_, ay_, az_, pot_, doubleAx_, doubleAy_, doubleAz_, doublePot_;
};

/// A box of side L for the periodic tests: bodies folded into [0, L)^3, and a few on faces, edges and corners (x = 0
/// and the largest double below L), whose nearest images lie across the box.
Particles periodicBox(Particles p, double L) {
  wrapIntoBox(p, L);
  const double top = std::nextafter(L, 0.0);
  const double places[][3] = {{0.0, 0.0, 0.0},     {top, top, top},      {0.0, top, 0.5 * L}, {top, 0.0, 0.0},
                              {0.5 * L, 0.0, top}, {1e-9 * L, top, 0.0}, {top, 0.25 * L, 0.0}};
  for (std::size_t k = 0; k < std::size(places) && k < p.size(); ++k) {
    p.x[k] = places[k][0];
    p.y[k] = places[k][1];
    p.z[k] = places[k][2];
  }
  return p;
}

/// The TreePM split of the command line's defaults for `numBodies` bodies in a box of side L.
mesh::MeshParams periodicMesh(double L, std::size_t numBodies) {
  mesh::MeshParams mesh;
  mesh.boxSize = L;
  mesh.grid = mesh::defaultPmGrid(numBodies, mesh);
  return mesh;
}

/// The reuse tests' box: a clumpy box of side L (seed), eps 1e-3 L, the split of its default mesh.
struct ClumpyPeriodicBox {
  Particles bodies;
  GravityParams gravity;
  ClumpyPeriodicBox(std::uint64_t seed, double L) : bodies(periodicBox(testing::clumpyBox(seed, L, 1500, 6000), L)) {
    gravity.eps = 1e-3 * L;
    gravity.periodic = mesh::periodicSplit(periodicMesh(L, bodies.size()));
  }
};

// The twins on the same periodic plans: the CPU and the CUDA engine in float fold the same float offsets to their
// nearest images and evaluate the same truncated pairs and cells; they differ in accumulation order, the reciprocal
// square root (~2 ulp on the GPU) and the erfc polynomial's Gaussian: std::exp on the CPU, __expf and __fdividef on the
// GPU (within ~1e-6 of f and g, pair_interaction.hpp: shortRangeFactorsPolynomial; until 2026-11-29 the CPU took
// std::erfc). Each pair's pull then differs by <~1e-6 of itself, so
// a body's difference is <~1e-6 of the sum of its pulls' magnitudes: ~1e-7 typical. Measured on the H200 (first
// run): median relative difference 1.5-2.1e-7, largest 2.3-3.0e-6 of the body's pull and 1.3-7.5e-6 of the rms pull.
// In the uniform box a body's pull is the small residual of many that cancel, so the sum of magnitudes, and with it
// the difference, can be many times the rms pull: 2.24e-5 of it on 2026-11-30 (seed 12653996857549569522, "uniform,
// quadrupoles"; its worst body 5.1e-6 of its own pull). The bounds leave 2.5-10x over what was seen, and catch a
// wrong image, a lost cell or a lost tile (errors of 1e-3 and more).
TEST_F(CudaEngineTest, PeriodicPlansMatchTheCpuEngine) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const double L = 2.0;
  struct Case {
    std::string name;
    Particles bodies;
    MultipoleOrder multipole;
    int grid = 0;  // the mesh; 0: the default for the bodies
  };
  // The kernels skip the per-pair wrap for tiles whose sources lie within half a box of every body of the task
  // (runPlanTask: wrapFreeLimit): with the 16^3 mesh (r_cut = 0.35 L) most tiles wrap, with the 128^3 one (r_cut =
  // 0.044 L) none does, with the defaults (32^3, 0.18 L) some do.
  std::vector<Case> cases;
  cases.push_back(
      {"clustered, quadrupoles", periodicBox(testing::clumpyBox(seed, L, 500, 2000), L), MultipoleOrder::quadrupole});
  cases.push_back(
      {"clustered, monopoles", periodicBox(testing::clumpyBox(seed + 1, L, 500, 2000), L), MultipoleOrder::monopole});
  cases.push_back({"uniform, quadrupoles", periodicBox(testing::uniformCube(4096, seed + 2, 0.5 * L), L),
                   MultipoleOrder::quadrupole});
  cases.push_back({"uniform, quadrupoles, 16^3 mesh", periodicBox(testing::uniformCube(4096, seed + 3, 0.5 * L), L),
                   MultipoleOrder::quadrupole, 16});
  cases.push_back({"clustered, quadrupoles, 128^3 mesh", periodicBox(testing::clumpyBox(seed + 4, L, 500, 2000), L),
                   MultipoleOrder::quadrupole, 128});
  for (Case& c : cases) {
    SCOPED_TRACE(c.name);
    GravityParams gravity;
    gravity.eps = 1e-3 * L;
    mesh::MeshParams mesh = periodicMesh(L, c.bodies.size());
    if (c.grid != 0) mesh.grid = c.grid;
    gravity.periodic = mesh::periodicSplit(mesh);
    TreeParams params;
    params.multipole = c.multipole;
    PeriodicTwinEngine twin;
    ASSERT_TRUE(twin.periodicShortRange());
    tree::PeriodicTreeSolver solver(twin, params, gravity);
    solver.computeForces(c.bodies);
    ASSERT_EQ(twin.relative.size(), c.bodies.size());
    EXPECT_NE(twin.kernel.find("periodic"), std::string::npos) << twin.kernel;
    if (c.name.rfind("clustered", 0) == 0) {
      EXPECT_GT(solver.lastPlan().cellList.size(), 0u) << "no cells listed: the truncated cells go untested";
    }
    const double median = percentile(twin.relative, 0.5);
    const double worst = *std::max_element(twin.relative.begin(), twin.relative.end());
    std::printf(
        "periodic GPU vs CPU float, %s (%zu bodies, %zu list cells, %s): relative median %.2e, worst %.2e; "
        "worst of the rms pull %.2e; potential worst %.2e (against double: GPU %.2e, CPU float %.2e)\n",
        c.name.c_str(), c.bodies.size(), solver.lastPlan().cellList.size(), twin.kernel.c_str(), median, worst,
        twin.ofRms, twin.potential, twin.potentialGpuError, twin.potentialCpuError);
    EXPECT_LE(median, 2e-6) << "median relative difference of the accelerations";
    EXPECT_LE(twin.ofRms, 6e-5) << "largest acceleration difference over the rms acceleration";
    // A potential sums thousands of terms of one sign in float, so its rounding grows with their number where the
    // accelerations' cancel (the first H200 run: GPU against CPU float up to 7.2e-5). Each float engine is held to
    // the CPU engine in double on the same plan instead: the GPU within 4x the CPU float engine's own error, or 2e-5.
    EXPECT_LE(twin.potentialGpuError, std::max(2e-5, 4.0 * twin.potentialCpuError))
        << "largest relative potential error against double";
  }
}

// ---------------------------------------------------------------------------------------------------------------------
// The particle mesh's cuFFT backend against its FFTW twin (mesh/particle_mesh.hpp: MeshBackend).

/// The largest difference of the two meshes' accelerations (as vectors) and potentials, each over the FFTW mesh's rms.
struct MeshDifference {
  double acceleration = 0;
  double potential = 0;
  std::size_t firstUnwritten = std::numeric_limits<std::size_t>::max();
};

MeshDifference meshDifference(const Particles& gpu, const Particles& cpu) {
  MeshDifference d;
  double accelerationSquares = 0, potentialSquares = 0, worstAcceleration = 0, worstPotential = 0;
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    if (!(std::isfinite(gpu.ax[i]) && std::isfinite(gpu.ay[i]) && std::isfinite(gpu.az[i]) &&
          std::isfinite(gpu.pot[i]))) {
      d.firstUnwritten = std::min(d.firstUnwritten, i);
      continue;
    }
    accelerationSquares += cpu.ax[i] * cpu.ax[i] + cpu.ay[i] * cpu.ay[i] + cpu.az[i] * cpu.az[i];
    potentialSquares += cpu.pot[i] * cpu.pot[i];
    worstAcceleration =
        std::max(worstAcceleration, std::hypot(gpu.ax[i] - cpu.ax[i], gpu.ay[i] - cpu.ay[i], gpu.az[i] - cpu.az[i]));
    worstPotential = std::max(worstPotential, std::abs(gpu.pot[i] - cpu.pot[i]));
  }
  const auto count = static_cast<double>(cpu.size());
  d.acceleration = worstAcceleration / std::sqrt(accelerationSquares / count);
  d.potential = worstPotential / std::sqrt(potentialSquares / count);
  return d;
}

class CufftMeshTest : public CudaEngineTest {};

// The same bodies on both backends, every variant: clustered and uniform boxes, CIC and TSC, Fourier and four-point
// gradients, interlaced or not, on a 2^k grid and on a mixed-radix one (48 = 2^4 3: cuFFT and FFTW factor it apart).
// Both compute in double with mesh_kernels.hpp's arithmetic and the same Green's-function tables, so they differ by
// the transforms' rounding (~1e-16 log n relative to the field's largest values) and the order of the deposit's atomic
// adds: ~1e-14 of the rms is expected. The bound, 1e-9 of the rms, leaves five orders of margin and still fails a
// backend that slipped to float anywhere (float rounding of one stage alone gives ~1e-7), so "the same results to float
// rounding" (issue 15) holds with room to spare. Outputs start poisoned as NaN except for a known value that the mesh
// must add to, not overwrite.
TEST_F(CufftMeshTest, MatchesFftwOnEveryVariant) {
  ASSERT_TRUE(mesh::cufftMeshBuilt());
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const double L = 2.0;
  struct Box {
    std::string name;
    Particles bodies;
  };
  std::vector<Box> boxes;
  boxes.push_back({"clustered", periodicBox(testing::clumpyBox(seed, L, 2000, 8000), L)});
  boxes.push_back({"uniform", periodicBox(testing::uniformCube(20000, seed + 1, 0.5 * L), L)});
  double worstAcceleration = 0, worstPotential = 0;
  for (Box& box : boxes) {
    for (const int grid : {32, 48}) {
      for (const mesh::MassAssignment assignment : {mesh::MassAssignment::cic, mesh::MassAssignment::tsc}) {
        for (const mesh::MeshGradient gradient : {mesh::MeshGradient::fourier, mesh::MeshGradient::finiteDifference}) {
          for (const bool interlace : {false, true}) {
            mesh::MeshParams params;
            params.boxSize = L;
            params.grid = grid;
            params.assignment = assignment;
            params.gradient = gradient;
            params.interlace = interlace;
            const std::string name = box.name + " " + std::to_string(grid) + "^3 " + mesh::toString(assignment) + " " +
                                     mesh::toString(gradient) + (interlace ? " interlaced" : "");
            SCOPED_TRACE(name);
            GravityParams gravity;
            gravity.G = 1.3;
            Particles cpu = box.bodies, gpu = box.bodies;
            for (Particles* p : {&cpu, &gpu}) {
              for (auto* array : {&p->ax, &p->ay, &p->az, &p->pot}) std::fill(array->begin(), array->end(), 0.25);
            }
            mesh::ParticleMesh(params).addLongRange(cpu.sources(), gravity, cpu.forces());
            params.backend = mesh::MeshBackend::cufft;
            mesh::ParticleMesh onGpu(params);
            onGpu.addLongRange(gpu.sources(), gravity, gpu.forces());
            const MeshDifference d = meshDifference(gpu, cpu);
            std::printf("cuFFT vs FFTW mesh, %-40s (%zu bodies): max |da| / rms a %.2e, max |dphi| / rms phi %.2e\n",
                        name.c_str(), cpu.size(), d.acceleration, d.potential);
            EXPECT_EQ(d.firstUnwritten, std::numeric_limits<std::size_t>::max());
            EXPECT_LE(d.acceleration, 1e-9);
            EXPECT_LE(d.potential, 1e-9);
            worstAcceleration = std::max(worstAcceleration, d.acceleration);
            worstPotential = std::max(worstPotential, d.potential);
            const mesh::MeshStageSeconds stages = onGpu.lastStageSeconds();
            EXPECT_GT(stages.total, 0.0);
            EXPECT_GT(stages.fft, 0.0);
          }
        }
      }
    }
  }
  std::printf("cuFFT vs FFTW mesh, worst of all variants: acceleration %.2e, potential %.2e of the rms\n",
              worstAcceleration, worstPotential);
}

// The cuFFT mesh's setDensityReduction (each pass's grid through the host and back): two parts' grids summed give
// each part the whole system's long range, interlaced or not, to the rounding of the grid's sums and the deposit's
// atomics; a part without bodies takes part (no kernel of zero blocks launched).
TEST_F(CufftMeshTest, SummedGridsSolveTheWholeSystem) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  testing::expectSummedGridsSolveTheWholeSystem(seed, mesh::MeshBackend::cufft);
}

// The GPU mesh adds (never overwrites), is periodic in the bodies' positions, leaves the potential untouched when none
// is asked for, and takes a second call with more bodies (its buffers grow).
TEST_F(CufftMeshTest, AddsIsPeriodicAndGrows) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  mesh::MeshParams params;
  params.grid = 32;
  params.backend = mesh::MeshBackend::cufft;
  mesh::ParticleMesh mesh(params);
  Particles small = periodicBox(testing::uniformCube(1000, seed, 0.5), 1.0);
  Particles once = small, twice = small, shifted = small;
  for (Particles* p : {&once, &twice, &shifted}) {
    for (auto* array : {&p->ax, &p->ay, &p->az, &p->pot}) std::fill(array->begin(), array->end(), 0.0);
  }
  for (std::size_t i = 0; i < shifted.size(); ++i) {
    shifted.x[i] += 3.0;  // whole boxes away: the same mesh coordinates to rounding
    shifted.y[i] -= 2.0;
  }
  mesh.addLongRange(once.sources(), GravityParams{}, once.forces());
  mesh.addLongRange(twice.sources(), GravityParams{}, twice.forces());
  mesh.addLongRange(twice.sources(), GravityParams{}, twice.forces());
  mesh.addLongRange(shifted.sources(), GravityParams{}, shifted.forces());
  for (std::size_t i = 0; i < small.size(); ++i) {
    EXPECT_NEAR(twice.ax[i], 2.0 * once.ax[i], 1e-12 * (1.0 + std::abs(once.ax[i]))) << i;
    EXPECT_NEAR(twice.pot[i], 2.0 * once.pot[i], 1e-12 * (1.0 + std::abs(once.pot[i]))) << i;
    EXPECT_NEAR(shifted.ax[i], once.ax[i], 1e-9 * (1.0 + std::abs(once.ax[i]))) << i;
  }
  std::vector<double> ax(small.size(), 0.0), ay(small.size(), 0.0), az(small.size(), 0.0);
  mesh.addLongRange(small.sources(), GravityParams{},
                    ForceView{ax.data(), ay.data(), az.data(), nullptr, small.size()});
  EXPECT_NEAR(ax[0], once.ax[0], 1e-12 * (1.0 + std::abs(once.ax[0])));
  Particles large = periodicBox(testing::uniformCube(50000, seed + 1, 0.5), 1.0);
  poison(large);
  for (auto* array : {&large.ax, &large.ay, &large.az, &large.pot}) std::fill(array->begin(), array->end(), 0.0);
  mesh.addLongRange(large.sources(), GravityParams{}, large.forces());
  for (std::size_t i = 0; i < large.size(); ++i) ASSERT_TRUE(std::isfinite(large.ax[i]) && std::isfinite(large.pot[i]));
}

// What the cuFFT backend refuses, each with a one-line InputError before any work: a mesh beyond the device's memory
// (4096^3 in double: 1.1 TB of grids) and a body with a non-finite position.
TEST_F(CufftMeshTest, RefusesTooLargeMeshAndBadBodies) {
  mesh::MeshParams params;
  params.backend = mesh::MeshBackend::cufft;
  params.grid = mesh::kMaxGrid;
  try {
    mesh::ParticleMesh tooLarge(params);
    ADD_FAILURE() << "a " << params.grid << "^3 mesh fitted on the device";
  } catch (const InputError& error) {
    const std::string message = error.what();
    std::printf("refused: %s\n", message.c_str());
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_NE(message.find("device memory"), std::string::npos) << message;
  }
  params.grid = 32;
  mesh::ParticleMesh mesh(params);
  Particles p = periodicBox(testing::uniformCube(100, testing::freshSeed(), 0.5), 1.0);
  p.y[17] = kNaN;
  try {
    mesh.addLongRange(p.sources(), GravityParams{}, p.forces());
    ADD_FAILURE() << "no error for a NaN position";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("body 17"), std::string::npos) << error.what();
  }
}

// TreePM end to end on the CUDA engine (the periodic tree's short range on the GPU plus the mesh, once with FFTW on the
// CPU and once with cuFFT on the GPU) against Ewald, with tests/mesh/test_treepm.cpp's TreePm.ClusteredBoxMatchesEwald
// input, settings (a periodic run's defaults, tree::periodicDefaultTreeParams) and bounds (the CPU engine measured p50
// 5.8e-5 - 7.9e-5, p99 2.1e-4 - 3.1e-4 over 6 seeds; the GPU's float short range differs from the CPU's by ~1e-6 and
// the two meshes by ~1e-14, so the same numbers are expected).
TEST_F(CudaEngineTest, PeriodicTreePmOnCudaMatchesEwald) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const double L = 2.0;
  Particles start = testing::clumpyBox(seed, L, 1024, 4096);
  wrapIntoBox(start, L);
  GravityParams gravity;
  gravity.eps = 1e-3 * L;
  std::mt19937_64 random(seed + 1);
  std::vector<std::uint32_t> targets(512);
  for (std::uint32_t& t : targets) t = static_cast<std::uint32_t>(random() % start.size());
  std::vector<double> refX(targets.size()), refY(targets.size()), refZ(targets.size());
  evaluateEwald(start.sources(), gravity, EwaldParams{L, 6.0, 4.5}, targets,
                ForceView{refX.data(), refY.data(), refZ.data(), nullptr, targets.size()});
  // The mesh on the CPU (FFTW) and on the GPU (cuFFT, as `matcha run --engine cuda` has it): the same bounds.
  for (const mesh::MeshBackend backend : {mesh::MeshBackend::fftw, mesh::MeshBackend::cufft}) {
    SCOPED_TRACE(mesh::toString(backend));
    Particles p = start;
    for (std::size_t i = 0; i < p.size(); ++i) p.id[i] = i;  // the solver reorders; the ids find the targets again
    mesh::MeshParams meshParams = periodicMesh(L, p.size());
    meshParams.backend = backend;
    GravityParams withSplit = gravity;
    withSplit.periodic = mesh::periodicSplit(meshParams);
    CudaEngine engine(Precision::float32, testConfig());
    mesh::TreePmSolver treePm(
        std::make_unique<tree::PeriodicTreeSolver>(engine, tree::periodicDefaultTreeParams(), withSplit), meshParams,
        withSplit);
    treePm.computeForces(p);
    EXPECT_NE(engine.lastCallStats().kernel.find("periodic"), std::string::npos) << engine.lastCallStats().kernel;
    EXPECT_NE(treePm.describe().find(mesh::toString(backend)), std::string::npos) << treePm.describe();
    std::vector<std::size_t> slotOf(p.size());
    for (std::size_t i = 0; i < p.size(); ++i) slotOf[p.id[i]] = i;
    std::vector<double> ax, ay, az;
    for (const std::uint32_t t : targets) {
      ax.push_back(p.ax[slotOf[t]]);
      ay.push_back(p.ay[slotOf[t]]);
      az.push_back(p.az[slotOf[t]]);
    }
    const ForceErrorStats stats = summariseForceErrors({ax, ay, az}, {refX, refY, refZ});
    std::printf(
        "TreePM on CUDA (mesh on %s) vs Ewald, clustered box of %zu bodies: p50 %.2e p90 %.2e p99 %.2e max %.2e\n",
        mesh::toString(backend).c_str(), p.size(), stats.median, stats.p90, stats.p99, stats.max);
    EXPECT_LT(stats.median, 2e-4);
    EXPECT_LT(stats.p99, 1.5e-3);
  }
}

// The overlapped periodic call (the walk in batches evaluated on a second host thread, TreeParams::overlapWalk; the
// cuFFT mesh started while the tree sorts its keys and run beside it, MeshParams::overlap) against the sequential one,
// on a clumpy and a uniform box, with and without potentials, at a first call (estimate pass) and a second:
//  - the short range alone on the CUDA engine: bit for bit. Small plans make the one plan cut its longest warp tasks
//    into tasks of fewer rows (forEachBalancedWarpTask), which with quadrupole cells changes the rounding (up to 1e-7,
//    LongTasksCutIntoFewerRowsGiveTheSameForces); the batches defer those groups to the last batch, where the whole
//    call's cut is known (CudaEngine::evaluatePlanBatch). The test checks that the one plan did cut tasks;
//  - TreePM with the FFTW mesh (after the short range either way): bit for bit;
//  - TreePM with the cuFFT mesh beside (its forces added by the CUDA engine as it copies out the short range's:
//    ForceSolver::setForceAddendProvider; walked in batches and in one plan): the short range's bits plus the mesh's,
//    whose deposit adds doubles atomically in whatever order the warps reach a mesh point, so two sequential calls
//    differ too (~1e-16 of the grid's values): within 1e-12 of the rms force and potential (a mesh begun before the
//    sort, or added twice, would differ by ~1).
TEST_F(CudaEngineTest, PeriodicOverlapGivesTheSequentialForces) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const double L = 2.0;
  struct Box {
    std::string name;
    Particles bodies;
  };
  std::vector<Box> boxes;
  boxes.push_back({"clumpy", periodicBox(testing::clumpyBox(seed, L, 3000, 8000), L)});
  boxes.push_back({"uniform", periodicBox(testing::uniformCube(16384, seed + 1, 0.5 * L), L)});
  CudaEngine engine(Precision::float32, testConfig());
  for (Box& box : boxes) {
    const mesh::MeshParams meshParams = periodicMesh(L, box.bodies.size());
    GravityParams gravity;
    gravity.eps = 1e-3 * L;
    gravity.periodic = mesh::periodicSplit(meshParams);
    // A tree a call (reuse 1) for both: maxBatchEntries, which cuts the batches here, is also the most the engine
    // keeps, so the overlapped solver's trees would serve their own call alone while the sequential one's served the
    // second (other lists: its relative test scaled by the estimate pass's |a|, not the first call's); and the solvers
    // share one engine, whose resident lists are the last hand-over's. Reused calls: PeriodicReuseFollowsTheCpuEngine.
    TreeParams sequential;
    sequential.overlapWalk = false;
    sequential.reuse = 1;
    TreeParams overlapped = sequential;
    overlapped.overlapWalk = true;
    overlapped.maxBatchEntries = std::uint64_t{1} << 14;  // ~10 batches of the ~100 groups
    for (const bool potentials : {true, false}) {
      const std::string what = box.name + (potentials ? ", potentials" : ", accelerations only");
      SCOPED_TRACE(what);
      // The short range alone.
      tree::PeriodicTreeSolver one(engine, sequential, gravity), batched(engine, overlapped, gravity);
      one.setPotentialsWanted(potentials);
      batched.setPotentialsWanted(potentials);
      Particles expected = box.bodies, test = box.bodies;
      for (const int call : {1, 2}) {
        one.computeForces(expected);
        batched.computeForces(test);
        EXPECT_EQ(batched.lastStats().estimatePass, call == 1);
        EXPECT_GT(batched.lastStats().numBatches, 4u);
        testing::expectSameBodiesBitForBit(expected, test, what + ", short range, call " + std::to_string(call),
                                           potentials);
      }
      // The one plan cut tasks (otherwise the deferral above went untested): more warp tasks than without the cut.
      CudaKernelConfig uncutConfig = testConfig();
      uncutConfig.longestTaskShare = 0.0;
      CudaEngine uncut(Precision::float32, uncutConfig);
      Particles scratch = expected;
      const ForceView scratchOut =
          potentials ? scratch.forces()
                     : ForceView{scratch.ax.data(), scratch.ay.data(), scratch.az.data(), nullptr, scratch.size()};
      engine.evaluatePlan(scratch.sources(), one.octree().multipoles, one.lastPlan(), gravity, scratchOut);
      const std::uint64_t cutTasks = engine.lastCallStats().numTasks;
      uncut.evaluatePlan(scratch.sources(), one.octree().multipoles, one.lastPlan(), gravity, scratchOut);
      std::printf("periodic overlap, %s: %llu batches; one plan's warp tasks %llu cut, %llu uncut\n", what.c_str(),
                  static_cast<unsigned long long>(batched.lastStats().numBatches),
                  static_cast<unsigned long long>(cutTasks),
                  static_cast<unsigned long long>(uncut.lastCallStats().numTasks));
      EXPECT_GT(cutTasks, uncut.lastCallStats().numTasks) << "the one plan cut no task";

      // TreePM, the mesh on FFTW and on cuFFT.
      for (const mesh::MeshBackend backend : {mesh::MeshBackend::fftw, mesh::MeshBackend::cufft}) {
        SCOPED_TRACE(mesh::toString(backend));
        mesh::MeshParams meshOff = meshParams, meshOn = meshParams;
        meshOff.backend = meshOn.backend = backend;
        meshOff.overlap = false;
        mesh::TreePmSolver treePmOff(std::make_unique<tree::PeriodicTreeSolver>(engine, sequential, gravity), meshOff,
                                     gravity);
        mesh::TreePmSolver treePmOn(std::make_unique<tree::PeriodicTreeSolver>(engine, overlapped, gravity), meshOn,
                                    gravity);
        mesh::TreePmSolver again(std::make_unique<tree::PeriodicTreeSolver>(engine, sequential, gravity), meshOff,
                                 gravity);
        // The mesh beside a walk in one plan: the engine adds the mesh's forces after its one download.
        mesh::TreePmSolver onePlan(std::make_unique<tree::PeriodicTreeSolver>(engine, sequential, gravity), meshOn,
                                   gravity);
        const bool beside = backend == mesh::MeshBackend::cufft;
        EXPECT_EQ(treePmOn.describe().find("beside the short range") != std::string::npos, beside)
            << treePmOn.describe();
        for (mesh::TreePmSolver* solver : {&treePmOff, &treePmOn, &again, &onePlan}) {
          solver->setPotentialsWanted(potentials);
        }
        Particles off = box.bodies, on = box.bodies, offAgain = box.bodies, inOnePlan = box.bodies;
        for (const int call : {1, 2}) {
          SCOPED_TRACE("call " + std::to_string(call));
          treePmOff.computeForces(off);
          const ForceReport report = treePmOn.computeForces(on);
          again.computeForces(offAgain);
          const ForceReport onePlanReport = onePlan.computeForces(inOnePlan);
          EXPECT_GT(report.timings[Phase::mesh], 0.0);
          EXPECT_GE(report.timings.meshWaitSeconds, 0.0);
          // The cuFFT mesh's forces go to the CUDA engine, which adds them as it copies out the batches' forces.
          EXPECT_EQ(report.addendTaken, beside);
          EXPECT_EQ(onePlanReport.addendTaken, beside);
          if (!beside) {
            testing::expectSameBodiesBitForBit(off, on, what + ", TreePM with the FFTW mesh", potentials);
            testing::expectSameBodiesBitForBit(off, inOnePlan, what + ", TreePM with the FFTW mesh, one plan",
                                               potentials);
            continue;
          }
          ASSERT_EQ(on.id, off.id);
          ASSERT_EQ(inOnePlan.id, off.id);
          double squares = 0, potentialSquares = 0, worst = 0, worstPotential = 0, noise = 0;
          for (std::size_t i = 0; i < off.size(); ++i) {
            squares += off.ax[i] * off.ax[i] + off.ay[i] * off.ay[i] + off.az[i] * off.az[i];
            worst = std::max(worst, std::hypot(on.ax[i] - off.ax[i], on.ay[i] - off.ay[i], on.az[i] - off.az[i]));
            worst = std::max(worst, std::hypot(inOnePlan.ax[i] - off.ax[i], inOnePlan.ay[i] - off.ay[i],
                                               inOnePlan.az[i] - off.az[i]));
            noise = std::max(
                noise, std::hypot(offAgain.ax[i] - off.ax[i], offAgain.ay[i] - off.ay[i], offAgain.az[i] - off.az[i]));
            if (potentials) {
              potentialSquares += off.pot[i] * off.pot[i];
              worstPotential = std::max(worstPotential, std::abs(on.pot[i] - off.pot[i]));
              worstPotential = std::max(worstPotential, std::abs(inOnePlan.pot[i] - off.pot[i]));
            } else {
              EXPECT_TRUE(std::isnan(on.pot[i])) << i;
              EXPECT_TRUE(std::isnan(inOnePlan.pot[i])) << i;
            }
          }
          const double rms = std::sqrt(squares / double(off.size()));
          std::printf(
              "periodic overlap, %s, cuFFT mesh beside, call %d: max |da| / rms a %.2e (two sequential calls: %.2e)%s",
              what.c_str(), call, worst / rms, noise / rms, potentials ? "" : "\n");
          EXPECT_LE(worst, 1e-12 * rms);
          if (potentials) {
            const double rmsPotential = std::sqrt(potentialSquares / double(off.size()));
            std::printf(", max |dphi| / rms phi %.2e\n", worstPotential / rmsPotential);
            EXPECT_LE(worstPotential, 1e-12 * rmsPotential);
          }
        }
      }
    }
  }
}

// The GPU's Ewald sum (evaluateEwaldOnGpu) against the CPU's on a clustered box spread over several images, with the
// default sums (alpha L 12, the nearest image and 25,270 wave vectors) and compare's (alpha L 6, X 4.5: further images
// in real space), softened and not: the same sums to rounding, and the same bits on a second call.
TEST_F(CudaEngineTest, EwaldOnGpuMatchesTheCpu) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const double L = 2.0;
  const Particles p = testing::clumpyBox(seed, L, 1500, 2000);
  std::mt19937_64 random(seed + 1);
  std::vector<std::uint32_t> targets(300);
  for (std::uint32_t& t : targets) t = static_cast<std::uint32_t>(random() % p.size());
  targets[0] = targets[1];  // a repeated target
  const std::size_t m = targets.size();
  for (const EwaldParams& params : {EwaldParams{L, 12.0, 6.0}, EwaldParams{L, 6.0, 4.5}}) {
    for (const double eps : {0.0, 1e-3 * L}) {
      SCOPED_TRACE("alpha L " + std::to_string(params.alphaTimesBox) + ", eps " + std::to_string(eps));
      GravityParams gravity;
      gravity.eps = eps;
      gravity.G = 1.5;
      std::vector<double> cpu(4 * m), gpu(4 * m, kNaN), again(4 * m, kNaN);
      const auto view = [m](std::vector<double>& v) {
        return ForceView{v.data(), v.data() + m, v.data() + 2 * m, v.data() + 3 * m, m};
      };
      evaluateEwald(p.sources(), gravity, params, targets, view(cpu));
      evaluateEwaldOnGpu(p.sources(), gravity, params, targets, view(gpu));
      evaluateEwaldOnGpu(p.sources(), gravity, params, targets, view(again));
      double rmsAcceleration = 0.0, rmsPotential = 0.0, worstAcceleration = 0.0, worstPotential = 0.0;
      for (std::size_t k = 0; k < m; ++k) {
        rmsAcceleration += cpu[k] * cpu[k] + cpu[m + k] * cpu[m + k] + cpu[2 * m + k] * cpu[2 * m + k];
        rmsPotential += cpu[3 * m + k] * cpu[3 * m + k];
      }
      rmsAcceleration = std::sqrt(rmsAcceleration / double(m));
      rmsPotential = std::sqrt(rmsPotential / double(m));
      for (std::size_t k = 0; k < m; ++k) {
        const double da = std::hypot(gpu[k] - cpu[k], gpu[m + k] - cpu[m + k], gpu[2 * m + k] - cpu[2 * m + k]);
        worstAcceleration = std::max(worstAcceleration, da / rmsAcceleration);
        worstPotential = std::max(worstPotential, std::abs(gpu[3 * m + k] - cpu[3 * m + k]) / rmsPotential);
      }
      std::printf(
          "Ewald GPU vs CPU (alpha L %g, X %g, eps %g, %zu bodies): worst acceleration %.2e, potential %.2e of "
          "the rms\n",
          params.alphaTimesBox, params.cutoff, eps, p.size(), worstAcceleration, worstPotential);
      EXPECT_LT(worstAcceleration, 1e-11);
      EXPECT_LT(worstPotential, 1e-11);
      for (std::size_t k = 0; k < 4 * m; ++k) ASSERT_EQ(gpu[k], again[k]) << "entry " << k << ": not deterministic";
      for (std::size_t c = 0; c < 4; ++c)
        EXPECT_EQ(gpu[c * m], gpu[c * m + 1]) << "the repeated target, component " << c;
    }
  }
}

// The GPU's Ewald sum on the issue's checks: a simple cubic lattice feels no force, a body alone in the box has the
// lattice constant's potential +2.8372975 G m / L, and a target that is not a source is refused with one line.
TEST_F(CudaEngineTest, EwaldOnGpuLatticeAndLoneBody) {
  const double L = 3.0;
  const int side = 6;
  Particles lattice(side * side * side);
  for (int i = 0; i < side * side * side; ++i) {
    lattice.x[i] = (i % side + 0.25) * L / side;
    lattice.y[i] = (i / side % side + 0.25) * L / side;
    lattice.z[i] = (i / (side * side) + 0.25) * L / side;
    lattice.mass[i] = 1.0 / (side * side * side);
  }
  std::vector<std::uint32_t> all(lattice.size());
  std::iota(all.begin(), all.end(), 0u);
  // Newtonian: eps softens the nearest image only, and the bodies L/2 apart have theirs on one side (measured: 4.7e-7
  // at eps 1/256, a fifth of G m / spacing^2 times (eps / r)^2 summed over that plane).
  GravityParams gravity;
  gravity.eps = 0.0;
  evaluateEwaldOnGpu(lattice.sources(), gravity, EwaldParams{L}, all, lattice.forces());
  for (std::size_t i = 0; i < lattice.size(); ++i) {
    ASSERT_LT(std::hypot(lattice.ax[i], lattice.ay[i], lattice.az[i]), 1e-12) << "body " << i;
  }
  Particles lone(1);
  lone.x[0] = 0.3;
  lone.y[0] = 2.9;
  lone.z[0] = -1.0;
  lone.mass[0] = 2.0;
  const std::vector<std::uint32_t> first{0};
  evaluateEwaldOnGpu(lone.sources(), gravity, EwaldParams{L}, first, lone.forces());
  EXPECT_NEAR(lone.pot[0], -kEwaldSelfConstant * 2.0 / L, 1e-10);
  EXPECT_LT(std::hypot(lone.ax[0], lone.ay[0], lone.az[0]), 1e-13);
  const std::vector<std::uint32_t> outside{1};
  EXPECT_THROW(evaluateEwaldOnGpu(lone.sources(), gravity, EwaldParams{L}, outside, lone.forces()), InputError);
}

// What the CUDA engine refuses for periodic gravity, with one-line InputErrors: double precision (no such kernels) and
// resident lists (open-boundary only).
// The periodic tree's reuse (tree/periodic_tree_solver.hpp) on the GPU: a clustered box drifting through its faces,
// trees for 4 calls, the CUDA engine against the CPU engine in float call by call. Both solvers build the same trees
// and lists (alpha 0: the lists depend on the positions alone, not on either engine's last accelerations) and reuse
// them at the same calls, so the forces differ by float rounding only (PeriodicPlansMatchTheCpuEngine's bound): the
// reused calls hand the engine the bodies' continued paths, some across a face.
TEST_F(CudaEngineTest, PeriodicReuseFollowsTheCpuEngine) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const double L = 2.0;
  const ClumpyPeriodicBox box(seed, L);
  const Particles& bodies = box.bodies;
  const GravityParams& gravity = box.gravity;
  const double step = 0.02 * gravity.periodic.splitRadius;  // bulk motion a call, each axis
  std::mt19937_64 random(seed + 5);
  std::normal_distribution<double> spread(0.0, 0.003 * gravity.periodic.splitRadius);
  std::vector<double> vx(bodies.size()), vy(bodies.size()), vz(bodies.size());
  for (std::size_t k = 0; k < bodies.size(); ++k) {
    vx[k] = step + spread(random);
    vy[k] = -step + spread(random);
    vz[k] = step + spread(random);
  }
  TreeParams params;
  params.reuse = 4;
  params.alpha = 0.0;
  CudaEngine engine(Precision::float32, testConfig());
  CpuEngine cpu(Precision::float32);
  tree::PeriodicTreeSolver onGpu(engine, params, gravity), onCpu(cpu, params, gravity);
  Particles gpuBodies = bodies, cpuBodies = bodies;
  int reused = 0;
  for (int call = 1; call <= 9; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    const ForceReport gpuReport = onGpu.computeForces(gpuBodies);
    const ForceReport cpuReport = onCpu.computeForces(cpuBodies);
    ASSERT_EQ(gpuReport.rebuilt, cpuReport.rebuilt);
    ASSERT_EQ(gpuBodies.id, cpuBodies.id);
    EXPECT_EQ(onGpu.lastStats().meanListBodies, onCpu.lastStats().meanListBodies) << "the same lists";
    EXPECT_EQ(onGpu.lastStats().meanListCells, onCpu.lastStats().meanListCells);
    reused += gpuReport.rebuilt ? 0 : 1;
    const std::vector<double> differences = testing::errorsOverRmsById(gpuBodies, cpuBodies);
    const double worst = *std::max_element(differences.begin(), differences.end());
    EXPECT_LT(worst, 5e-5) << "largest difference " << worst << " of the rms pull";
    for (Particles* p : {&gpuBodies, &cpuBodies}) {
      for (std::size_t i = 0; i < p->size(); ++i) {
        const std::uint64_t k = p->id[i];
        p->x[i] = wrapIntoBox(p->x[i] + vx[k], L);
        p->y[i] = wrapIntoBox(p->y[i] + vy[k], L);
        p->z[i] = wrapIntoBox(p->z[i] + vz[k], L);
      }
    }
  }
  EXPECT_GE(reused, 5) << "calls 1 and 2 build, then trees for 4 calls";
}

// Block time steps on the GPU (ForceSolver::setLowestActiveBin): from call 3 on only the bodies in a third of the box
// end their steps; the CUDA engine evaluates their groups alone, on reused trees and on trees built for later calls,
// and returns their outputs packed (one copy per component). Their forces follow the CPU engine's as the whole calls'
// do; most other bodies keep what they had. The engine also leaves out the warp tasks (32 to 128 rows) of an
// evaluated group that hold no body in need of a force: fewer interactions than the CPU engine's whole groups.
TEST_F(CudaEngineTest, PeriodicBlockStepsFollowTheCpuEngine) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  constexpr double L = 2.0;
  const ClumpyPeriodicBox box(seed, L);
  for (const std::uint32_t ncrit : {64u, 512u}) {
    SCOPED_TRACE("ncrit " + std::to_string(ncrit));
    TreeParams params;
    params.reuse = 4;
    params.alpha = 0.0;
    params.ncrit = ncrit;
    CudaEngine engine(Precision::float32, testConfig());
    CpuEngine cpu(Precision::float32);
    tree::PeriodicTreeSolver onGpu(engine, params, box.gravity), onCpu(cpu, params, box.gravity);
    Particles gpuBodies = box.bodies, cpuBodies = box.bodies;
    const double step = 0.02 * box.gravity.periodic.splitRadius;  // a call's drift along each axis
    int subsetCalls = 0, builtWithSubset = 0;
    std::uint64_t gpuInteractions = 0, cpuInteractions = 0;
    for (int call = 1; call <= 9; ++call) {
      SCOPED_TRACE("call " + std::to_string(call));
      const bool subset = call >= 3;
      std::uint8_t lowest = 0;
      if (subset) {
        lowest = 2;
        for (Particles* p : {&gpuBodies, &cpuBodies}) {
          p->timeBin.resize(p->size());
          for (std::size_t i = 0; i < p->size(); ++i) p->timeBin[i] = p->x[i] < L / 3 ? 2 : 1;
        }
      }
      const Particles before = gpuBodies;
      onGpu.setLowestActiveBin(lowest);
      onCpu.setLowestActiveBin(lowest);
      const ForceReport gpuReport = onGpu.computeForces(gpuBodies);
      const ForceReport cpuReport = onCpu.computeForces(cpuBodies);
      ASSERT_EQ(gpuReport.rebuilt, cpuReport.rebuilt);
      ASSERT_EQ(gpuBodies.id, cpuBodies.id);
      if (!subset) {
        EXPECT_EQ(gpuReport.counts.total(), cpuReport.counts.total()) << "every group evaluated";
      } else {
        EXPECT_LE(gpuReport.counts.total(), cpuReport.counts.total()) << "the same groups evaluated, or fewer rows";
      }
      if (subset) {
        gpuInteractions += gpuReport.counts.total();
        cpuInteractions += cpuReport.counts.total();
      }
      double rms = 0.0;
      for (std::size_t i = 0; i < cpuBodies.size(); ++i) {
        rms +=
            cpuBodies.ax[i] * cpuBodies.ax[i] + cpuBodies.ay[i] * cpuBodies.ay[i] + cpuBodies.az[i] * cpuBodies.az[i];
      }
      rms = std::sqrt(rms / double(cpuBodies.size()));
      double worst = 0.0;
      std::size_t active = 0, kept = 0;
      for (std::size_t i = 0; i < gpuBodies.size(); ++i) {
        if (!subset || gpuBodies.timeBin[i] >= lowest) {
          ++active;
          worst = std::max(worst, std::hypot(gpuBodies.ax[i] - cpuBodies.ax[i], gpuBodies.ay[i] - cpuBodies.ay[i],
                                             gpuBodies.az[i] - cpuBodies.az[i]) /
                                      rms);
        } else if (!gpuReport.rebuilt && gpuBodies.ax[i] == before.ax[i] && gpuBodies.az[i] == before.az[i]) {
          ++kept;
        }
      }
      EXPECT_GT(active, 100u);
      EXPECT_LT(worst, 5e-5) << "largest difference of the rms pull";
      if (subset) {
        ++subsetCalls;
        builtWithSubset += gpuReport.rebuilt ? 1 : 0;
        if (!gpuReport.rebuilt && ncrit == 64) {
          EXPECT_GT(kept, (gpuBodies.size() - active) / 2) << "the others' groups not evaluated";
        }
      }
      for (Particles* p : {&gpuBodies, &cpuBodies}) {
        for (std::size_t i = 0; i < p->size(); ++i) {
          p->x[i] = wrapIntoBox(p->x[i] + step, L);
          p->y[i] = wrapIntoBox(p->y[i] - step, L);
          p->z[i] = wrapIntoBox(p->z[i] + 0.5 * step, L);
        }
      }
    }
    EXPECT_EQ(subsetCalls, 7);
    EXPECT_GE(builtWithSubset, 1) << "calls 6 (trees for 4 calls from call 2) builds with a subset";
    std::printf("ncrit %u: %llu interactions on the GPU, %llu on the CPU over the subset calls\n", ncrit,
                static_cast<unsigned long long>(gpuInteractions), static_cast<unsigned long long>(cpuInteractions));
    // (H200: 16.7 of 18.0 M at ncrit 64, whose groups of 33 to 64 are cut into tasks of 32 rows; 52.9 of 67.6 M at
    // 512.)
    EXPECT_LT(gpuInteractions, cpuInteractions) << "no task of an evaluated group left out";
  }
}

// Block time steps in a box (the real leapfrog, TreePM with long-range steps, trees for 4 calls): with advanceOnDevice
// the engine keeps its own copy of the bodies and drifts it (BodyMotion::drifted), receiving the kicked bodies'
// velocities alone; the run is the run that sends every position each call, bit for bit. A body moved behind the
// leapfrog's back (index 0: the sample's first body) is caught by the sample, and the call sends the positions again.
// On the H200 (2026-11-30, with a long step 4x as long and one perturbation): 23-38 of 44-65 calls drifted, the runs
// the same bits, no perturbed call followed by a drifted one (trees built anew there): not yet run as it stands.
TEST_F(CudaEngineTest, PeriodicBlockStepsDriftTheEnginesCopyBitForBit) {
  namespace mi = matcha::integrator;
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  constexpr double L = 2.0;
  const ClumpyPeriodicBox box(seed, L);
  Particles start = box.bodies;
  std::mt19937_64 random(seed + 11);
  const double rs = box.gravity.periodic.splitRadius;
  std::normal_distribution<double> speed(0.0, 0.05 * rs);  // a long step's drift: ~5% of r_s
  for (std::size_t i = 0; i < start.size(); ++i) {
    start.vx[i] = speed(random);
    start.vy[i] = speed(random);
    start.vz[i] = speed(random) + 0.1 * rs;  // and a bulk flow, so that bodies cross the faces
  }
  struct Run {
    Particles bodies;
    int drifted = 0, mismatches = 0, calls = 0;
  };
  // The drifted run perturbs after each drifted call of the last two long steps whose tree is to serve the next call
  // too (the next may build anyway: many bodies out of their balls), and records which: the run that sends the
  // positions perturbs after the same calls.
  std::vector<int> perturbAfter;
  const auto run = [&](bool onDevice) {
    TreeParams params = tree::periodicDefaultTreeParams();
    params.reuse = 4;
    params.ncrit = 64;
    params.advanceOnDevice = onDevice;
    mesh::MeshParams meshParams = periodicMesh(L, start.size());
    meshParams.backend = mesh::MeshBackend::fftw;
    CudaEngine engine(Precision::float32, testConfig());
    auto shortRange = std::make_unique<tree::PeriodicTreeSolver>(engine, params, box.gravity);
    const tree::PeriodicTreeSolver& periodic = *shortRange;
    mesh::TreePmSolver solver(std::move(shortRange), meshParams, box.gravity);
    solver.setLongRangeSteps(true);
    solver.setPotentialsWanted(false);
    Run result;
    result.bodies = start;
    Particles& p = result.bodies;
    mi::LeapfrogKDK leapfrog(solver, mi::LeapfrogKDK::VariableSteps{}, L);
    leapfrog.initialize(p);
    // The fastest-pulled body's fine step moves it by ~1% of r_s / 16 (its long step twice that); the bins' scale gives
    // bins 0 to 3. With a long step four times as long, trees were built anew at nearly every third call (many
    // bodies out of their balls: the CPU engine's twin of this run, 2026-11-30), before any perturbed call drifted.
    const double largest = mi::maxAcceleration(p);
    const double longStep = std::sqrt(0.01 * rs / largest) * 2.0;
    const double binScale = 6.0 / std::sqrt(largest);
    for (int longSteps = 0; longSteps < 3; ++longSteps) {
      testing::takeBlockLongStep(leapfrog, p, longStep, binScale, 1.0, [&](const mi::StepReport& report) {
        EXPECT_FALSE(report.nonFinite.has_value());
        const int call = ++result.calls;
        const tree::TreeStats& stats = periodic.lastStats();
        result.drifted += stats.advancedOnDevice ? 1 : 0;
        result.mismatches += stats.advanceMismatch ? 1 : 0;
        const bool perturb = onDevice ? longSteps >= 1 && stats.advancedOnDevice && stats.callsOnTree < stats.reuseSteps
                                      : std::find(perturbAfter.begin(), perturbAfter.end(), call) != perturbAfter.end();
        if (perturb) {
          // Not the leapfrog's doing, where the next call reuses the tree: the engine's copy is no longer the caller's
          // bodies (in both runs alike). By 1e-9 r_s, so that the body stays in its ball (a body out of it would be
          // evaluated where the host places it) and the next drift's rounding keeps the difference (one ulp did not
          // always survive it: the H200, 2026-11-30).
          p.x[0] = wrapIntoBox(p.x[0] + 1e-9 * rs, L);
          if (onDevice) perturbAfter.push_back(call);
        }
      });
    }
    return result;
  };
  const Run drifted = run(true), sent = run(false);
  ASSERT_FALSE(perturbAfter.empty()) << "no drifted call whose tree serves the next";
  ASSERT_EQ(sent.calls, drifted.calls);
  EXPECT_EQ(sent.drifted, 0);
  // On the CPU engine's twin of this run: 11-14 of 31-44 calls drifted, 6-9 perturbations caught (8 seeds).
  EXPECT_GE(drifted.drifted, sent.calls / 4) << "of " << sent.calls << " calls";
  EXPECT_GE(drifted.mismatches, 1) << "the moved body was not caught";
  std::printf("block steps in a box: %d calls, %d drifted on the device\n", drifted.calls, drifted.drifted);
  const Particles& a = sent.bodies;
  const Particles& b = drifted.bodies;
  ASSERT_EQ(a.id, b.id) << "the same trees sort the bodies alike";
  std::size_t differ = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const bool same = a.x[i] == b.x[i] && a.y[i] == b.y[i] && a.z[i] == b.z[i] && a.vx[i] == b.vx[i] &&
                      a.vy[i] == b.vy[i] && a.vz[i] == b.vz[i];
    differ += same ? 0 : 1;
  }
  EXPECT_EQ(differ, 0u) << "bodies whose positions or velocities differ";
}

TEST_F(CudaEngineTest, PeriodicRefusesTheDoubleEngine) {
  GravityParams gravity;
  gravity.periodic = mesh::periodicSplit(periodicMesh(1.0, 4096));
  CudaEngine doubleEngine(Precision::float64, testConfig());
  EXPECT_FALSE(doubleEngine.periodicShortRange());
  try {
    tree::PeriodicTreeSolver solver(doubleEngine, TreeParams{}, gravity);
    ADD_FAILURE() << "the double CUDA engine was taken for periodic gravity";
  } catch (const InputError& error) {
    EXPECT_EQ(std::string(error.what()).find('\n'), std::string::npos) << error.what();
  }
  Particles p = periodicBox(testing::uniformCube(2000, testing::freshSeed(), 0.5), 1.0);
  CudaEngine floatEngine(Precision::float32, testConfig());
  EXPECT_TRUE(floatEngine.periodicShortRange());
  tree::PeriodicTreeSolver onFloat(floatEngine, TreeParams{}, gravity);
  onFloat.computeForces(p);
  EXPECT_THROW(doubleEngine.evaluatePlan(p.sources(), CellMultipoles{}, onFloat.lastPlan(), gravity, p.forces()),
               InputError);
  // Resident lists take periodic gravity in float only (the periodic solver's reuse): the double engine refuses it.
  EXPECT_THROW(doubleEngine.launchResident(p.sources(), gravity, p.forces(), {}, BodyMotion::moved), InputError);
}

TEST_F(CudaEngineTest, FactoryPicksCudaAndNamesTheGpu) {
  for (const EngineKind kind : {EngineKind::automatic, EngineKind::cuda}) {
    const EngineChoice choice = makeEngine(kind);
    EXPECT_NE(choice.engine->name().find("cuda-float"), std::string::npos) << choice.engine->name();
    EXPECT_NE(choice.engine->name().find(device_.name), std::string::npos) << choice.engine->name();
    EXPECT_NE(choice.reason.find(device_.name), std::string::npos) << choice.reason;
  }
  EXPECT_NE(makeCudaEngine(Precision::float64)->name().find("cuda-double"), std::string::npos);
  EXPECT_GT(device_.numSMs, 0);
  EXPECT_GT(device_.clockMHz, 0);
  EXPECT_GT(fp32FloorInteractionsPerSecond(device_), 0.0);
}

TEST_F(CudaEngineTest, BadDeviceIsATypedError) {
  CudaKernelConfig config;
  config.device = 999;
  try {
    CudaEngine engine(Precision::float32, config);
    FAIL() << "no error for device 999";
  } catch (const CudaError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("999"), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

TEST_F(CudaEngineTest, UnsupportedShapesAreInputErrors) {
  CudaEngine engine(Precision::float32);
  CudaKernelConfig config;
  config.autoDirect = false;
  config.direct.tileSize = 96;
  EXPECT_THROW(engine.setConfig(config), InputError);
  config = CudaKernelConfig{};
  config.planTileSize = 48;
  EXPECT_THROW(engine.setConfig(config), InputError);
  config = CudaKernelConfig{};
  config.planTileSize = 128;
  EXPECT_THROW(CudaEngine(Precision::float64, config), InputError);  // double: tile 64 only
  for (const double share : {-1.0, std::numeric_limits<double>::infinity(), kNaN}) {
    config = CudaKernelConfig{};
    config.longestTaskShare = share;
    EXPECT_THROW(engine.setConfig(config), InputError) << share;
  }
}

TEST(CudaEngineWithoutDevice, AskingForCudaFailsClearly) {
  const CudaDeviceInfo device = queryCudaDevice();
  if (device.available) GTEST_SKIP() << "a CUDA device is present (" << device.description << "); nothing to check";
  try {
    makeEngine(EngineKind::cuda);
    FAIL() << "--engine cuda without a device did not fail";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("--engine cuda"), std::string::npos) << error.what();
  }
  EXPECT_THROW(makeCudaEngine(Precision::float64), InputError);
  const EngineChoice fallback = makeEngine(EngineKind::automatic);
  EXPECT_NE(fallback.engine->name().find("cpu"), std::string::npos) << fallback.engine->name();
  EXPECT_EQ(fp32FloorInteractionsPerSecond(device), 0.0);
}

}  // namespace
}  // namespace matcha::gpu
