// SPDX-License-Identifier: MIT
// Periodic TreePM gravity end to end (mesh/treepm_solver.hpp = tree/periodic_tree_solver.hpp's short range on the CPU
// engine + the particle mesh) against the exact periodic reference (gpu/ewald.hpp): clustered and uniform boxes,
// GADGET's force-law test, bodies crossing the faces, bodies on the boundary, all bodies in one octant, and the
// short-range walk against brute-force truncated pairs. Bounds are the measured worst cases with a margin (README
// "Periodic boxes (TreePM)").
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <memory_resource>
#include <numbers>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "matcha/core/errors.hpp"
#include "matcha/core/force_error.hpp"
#include "matcha/core/opening_criterion.hpp"
#include "matcha/core/pair_interaction.hpp"
#include "matcha/gpu/cpu_engine.hpp"
#include "matcha/gpu/ewald.hpp"
#include "matcha/mesh/treepm_solver.hpp"
#include "matcha/testing/floating_point_traps.hpp"
#include "matcha/testing/generators.hpp"
#include "matcha/testing/mirroring_engine.hpp"
#include "matcha/testing/periodic_reference.hpp"
#include "matcha/testing/same_bodies.hpp"
#include "matcha/tree/octree.hpp"
#include "matcha/tree/periodic_tree_solver.hpp"
#include "matcha/tree/space_filling_curve.hpp"
#include "matcha/tree/walk.hpp"

namespace matcha::mesh {
namespace {

std::string scientific(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2e", value);
  return text;
}

/// The TreePM solver the command line builds: the periodic tree's short range on a CPU engine, plus the mesh.
struct TreePm {
  TreePm(const MeshParams& mesh, GravityParams gravity, gpu::Precision precision = gpu::Precision::float32,
         const TreeParams& tree = {})
      : engine(precision) {
    gravity.periodic = periodicSplit(mesh);
    auto shortRange = std::make_unique<tree::PeriodicTreeSolver>(engine, tree, gravity);
    solver = std::make_unique<TreePmSolver>(std::move(shortRange), mesh, gravity);
  }
  gpu::CpuEngine engine;
  std::unique_ptr<TreePmSolver> solver;
};

/// Ewald at `targets` (ids), cut at exp(-20) = 2e-9: ample against TreePM's 1e-4 and 25x cheaper than the defaults.
std::vector<double> ewaldAt(const Particles& p, const GravityParams& gravity, double L,
                            const std::vector<std::uint32_t>& targets, std::vector<double>& ay,
                            std::vector<double>& az) {
  std::vector<double> ax(targets.size());
  ay.assign(targets.size(), 0.0);
  az.assign(targets.size(), 0.0);
  gpu::evaluateEwald(p.sources(), gravity, gpu::EwaldParams{L, 6.0, 4.5}, targets,
                     ForceView{ax.data(), ay.data(), az.data(), nullptr, targets.size()});
  return ax;
}

/// TreePM's relative force errors against Ewald at a random subsample of `numSamples` bodies.
ForceErrorStats errorsAgainstEwald(Particles p, TreePm& treePm, const GravityParams& gravity, double L,
                                   std::size_t numSamples, std::uint64_t seed) {
  treePm.solver->computeForces(p);
  std::mt19937_64 engine(seed);
  std::vector<std::uint32_t> targets(numSamples);
  for (std::uint32_t& t : targets) t = static_cast<std::uint32_t>(engine() % p.size());
  std::vector<double> refY, refZ;
  const std::vector<double> refX = ewaldAt(p, gravity, L, targets, refY, refZ);
  std::vector<double> ax, ay, az;
  for (const std::uint32_t t : targets) {
    ax.push_back(p.ax[t]);
    ay.push_back(p.ay[t]);
    az.push_back(p.az[t]);
  }
  return summariseForceErrors({ax, ay, az}, {refX, refY, refZ});
}

void record(const std::string& name, const ForceErrorStats& stats) {
  ::testing::Test::RecordProperty(name + "_p50", scientific(stats.median));
  ::testing::Test::RecordProperty(name + "_p99", scientific(stats.p99));
  ::testing::Test::RecordProperty(name + "_max", scientific(stats.max));
  std::printf("%s: p50 %.2e p90 %.2e p99 %.2e max %.2e\n", name.c_str(), stats.median, stats.p90, stats.p99, stats.max);
}

MeshParams defaultMesh(double L, std::size_t numBodies) {
  MeshParams mesh;
  mesh.boxSize = L;
  mesh.grid = defaultPmGrid(numBodies, mesh);
  return mesh;
}

/// Clumpy bodies in the unit periodic box, and gravity with eps 1e-3 split as the default mesh splits it: the
/// PeriodicOverlap tests' input.
struct ClumpyUnitBox {
  Particles bodies;
  GravityParams gravity;
};

ClumpyUnitBox clumpyUnitBox(std::uint64_t seed, std::size_t perClump, std::size_t background) {
  ClumpyUnitBox box;
  box.bodies = testing::clumpyBox(seed, 1.0, perClump, background);
  wrapIntoBox(box.bodies, 1.0);
  box.gravity.eps = 1e-3;
  box.gravity.periodic = periodicSplit(defaultMesh(1.0, box.bodies.size()));
  return box;
}

// ---------------------------------------------------------------------------------------------------------------------
// Against Ewald.

// The target, p99 <= 1e-3 with the defaults on a clustered box: four Plummer clumps in a background, 2^13
// bodies, float CPU engine, a periodic run's defaults (tree::periodicDefaultTreeParams: theta 0.8, alpha 2e-3, ncrit
// 512, nleaf 32, quadrupoles), default mesh (42^3), eps 1e-3 L. Measured over 6 seeds: p50 5.4e-5 - 7.9e-5, p99
// 2.3e-4 - 3.1e-4 (theta 0.7 and nleaf 16, the defaults until 2026-12-02: p50 5.8e-5 - 7.9e-5, p99 2.1e-4 - 3.1e-4;
// the mesh alone, with an exact short range: p99 2.8e-4 - 4.8e-4; with the open-boundary settings,
// theta 0.5, alpha 1e-3, ncrit 256, nleaf 8, over 20 seeds: p99 2.2e-4 - 8.1e-4); the bounds leave about twice that.
/// `p` folded into the box of side L, with TreePM's defaults (eps 1e-3 L) against Ewald on 512 bodies; `name` labels
/// the recorded percentiles.
ForceErrorStats defaultTreePmErrors(Particles& p, double L, std::uint64_t seed, const std::string& name,
                                    GravityParams& gravity) {
  wrapIntoBox(p, L);
  gravity.eps = 1e-3 * L;
  TreePm treePm(defaultMesh(L, p.size()), gravity, gpu::Precision::float32, tree::periodicDefaultTreeParams());
  const ForceErrorStats stats = errorsAgainstEwald(p, treePm, gravity, L, 512, seed + 1);
  record(name, stats);
  return stats;
}

TEST(TreePm, ClusteredBoxMatchesEwald) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const double L = 2.0;
  Particles p = testing::clumpyBox(seed, L, 1024, 4096);
  GravityParams gravity;
  const ForceErrorStats stats = defaultTreePmErrors(p, L, seed, "clustered", gravity);
  EXPECT_LT(stats.median, 2e-4);
  // Measured 2.1e-4 - 3.1e-4 over 6 seeds (up to 8.1e-4 when cells were f(r) times the Newtonian quadrupole).
  EXPECT_LT(stats.p99, 8e-4);
  // The split of the error: the same mesh with the short range summed exactly (theta 0.02, double engine) leaves the
  // mesh's own error, which sets most of TreePM's.
  TreeParams exact;
  exact.theta = 0.02;
  exact.alpha = 0.0;
  TreePm meshOnly(defaultMesh(L, p.size()), gravity, gpu::Precision::float64, exact);
  const ForceErrorStats meshStats = errorsAgainstEwald(p, meshOnly, gravity, L, 512, seed + 1);
  record("clustered_exact_short_range", meshStats);
  EXPECT_LT(meshStats.p99, 1.5e-3);
}

// A uniform box, where forces nearly cancel and relative errors are largest (the issue asks for them reported). 2^13
// bodies, defaults; measured over 6 seeds: p50 1.7e-4 - 1.8e-4, p99 6.6e-4 - 8.4e-4 (the open-boundary settings, 12
// seeds: p99 6.0e-4 - 1.2e-3).
TEST(TreePm, UniformBoxMatchesEwald) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const double L = 1.0;
  Particles p = testing::uniformCube(1 << 13, seed, 0.5 * L);
  GravityParams gravity;
  const ForceErrorStats stats = defaultTreePmErrors(p, L, seed, "uniform", gravity);
  EXPECT_LT(stats.median, 4e-4);
  EXPECT_LT(stats.p99, 3e-3);
}

/// The short range of the periodic tree (double engine) against brute force, by id: per-body |a - a_brute| over the
/// rms |a_brute| (short-range pulls nearly vanish for some bodies, so per-body relative errors would measure those).
std::vector<double> shortRangeErrors(Particles p, const GravityParams& gravity, const TreeParams& params,
                                     std::size_t* numListCells = nullptr) {
  const Particles brute = testing::bruteForceShortRange(p, gravity);
  gpu::CpuEngine engine(gpu::Precision::float64);
  tree::PeriodicTreeSolver solver(engine, params, gravity);
  solver.computeForces(p);
  if (numListCells != nullptr) *numListCells = solver.lastPlan().cellList.size();
  return testing::errorsOverRmsById(p, brute);
}

GravityParams periodicGravity(const MeshParams& mesh, double eps) {
  GravityParams gravity;
  gravity.eps = eps;
  gravity.periodic = periodicSplit(mesh);
  return gravity;
}

// The walk: with every cell opened down to bodies (theta 0.02 on a uniform box, where no leaf is small enough to pass
// it: the test checks that no cell is listed) the lists hold every body within r_cut of each of its group's bodies at
// its nearest image, nothing is lost to the skip, and the sums are brute force's to rounding. With the defaults on a
// clustered box the cells' truncated multipoles (the truncation factor taken at the centre of mass,
// pair_interaction.hpp: accumulateTruncatedQuadrupoleInteraction) add their approximation, measured here.
TEST(PeriodicWalk, ShortRangeMatchesBruteForce) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const double L = 1.0;
  Particles uniform = testing::uniformCube(2000, seed, 0.5 * L);
  wrapIntoBox(uniform, L);
  const GravityParams gravity = periodicGravity(defaultMesh(L, uniform.size()), 1e-3);
  TreeParams exact;
  exact.theta = 0.02;
  exact.alpha = 0.0;
  std::size_t numCells = 1;
  const std::vector<double> exactErrors = shortRangeErrors(uniform, gravity, exact, &numCells);
  EXPECT_EQ(numCells, 0u);
  EXPECT_LT(*std::max_element(exactErrors.begin(), exactErrors.end()), 1e-12);

  Particles p = testing::clumpyBox(seed, L, 300, 800);
  wrapIntoBox(p, L);
  const std::vector<double> treeErrors = shortRangeErrors(p, gravity, TreeParams{});
  const double p99 = percentile(treeErrors, 0.99), worst = *std::max_element(treeErrors.begin(), treeErrors.end());
  RecordProperty("default_p99", scientific(p99));
  RecordProperty("default_max", scientific(worst));
  std::printf("short range vs brute force, defaults: p50 %.2e p99 %.2e max %.2e (of the rms short-range pull)\n",
              percentile(treeErrors, 0.5), p99, worst);
  // Measured over 12 seeds: p99 3.4e-6 - 2.8e-5, max 5.8e-6 - 5.6e-5 of the rms short-range pull.
  EXPECT_LT(p99, 2e-4);
  EXPECT_LT(worst, 1e-3);
  // The monopole walk: cells' truncation at their centre of mass is then the only expansion, second order in b / r.
  TreeParams monopole;
  monopole.multipole = MultipoleOrder::monopole;
  const std::vector<double> monopoleErrors = shortRangeErrors(p, gravity, monopole);
  RecordProperty("monopole_p99", scientific(percentile(monopoleErrors, 0.99)));
  std::printf("short range vs brute force, monopoles: p99 %.2e\n", percentile(monopoleErrors, 0.99));
  EXPECT_LT(percentile(monopoleErrors, 0.99), 3e-4);  // measured 5.9e-6 - 3.0e-5 over 6 seeds
}

// The float walk the solver uses (walk.hpp with the periodic split) against the double reference walk
// (buildPeriodicPlan), on a clumpy box with the relative test on (accelerations drawn at random over three decades),
// quadrupoles and monopoles: every cell it accepts passes the double opening test; each group's list covers every body
// at most once; and every body it leaves out lies at least r_cut from the group's box at its nearest image, those the
// double walk covers included (a cell the double walk accepts, the float walk may open and skip a child of).
TEST(PeriodicWalk, FloatWalkIsTheDoubleWalksConservativeTwin) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const double L = 1.5;
  Particles p = testing::clumpyBox(seed, L, 1500, 6000);
  wrapIntoBox(p, L);
  std::mt19937_64 engine(seed + 1);
  std::uniform_real_distribution<double> exponent(-1.0, 2.0);
  for (std::size_t i = 0; i < p.size(); ++i) {
    p.ax[i] = std::pow(10.0, exponent(engine));
    p.ay[i] = p.az[i] = 0.0;
  }
  for (const MultipoleOrder multipole : {MultipoleOrder::quadrupole, MultipoleOrder::monopole}) {
    SCOPED_TRACE(toString(multipole));
    const PeriodicSplit split = periodicSplit(defaultMesh(L, p.size()));
    tree::Cube cube;
    cube.side = L;
    std::vector<std::uint64_t> keys;
    tree::computeMortonKeys(p.sources(), cube, keys);
    Particles sorted = p;
    sorted.permute(tree::sortByKey(keys));  // keys are now sorted too
    tree::Octree octree;
    tree::buildOctree(keys, cube, 8, octree);
    tree::computeMultipoles(sorted.sources(), 0.6, multipole, octree);
    tree::Groups groups;
    tree::makeGroups(octree, sorted.sources(), 64, groups);
    ASSERT_TRUE(tree::setRelativeTolerances(sorted, 1e-3, 1.0, groups));

    InteractionPlan reference, plan;
    tree::buildPeriodicPlan(octree, groups, split, reference);
    tree::WalkTree walkTree;
    tree::buildWalkTree(octree, walkTree, split);
    tree::PlanBuilder builder;
    builder.build(walkTree, groups, 0, static_cast<std::uint32_t>(groups.size()), plan);
    ASSERT_EQ(plan.numGroups(), groups.size());
    const std::size_t n = sorted.size();
    std::size_t floatEntries = 0, doubleEntries = 0;
    for (std::size_t g = 0; g < groups.size(); ++g) {
      std::vector<int> covered(n, 0), coveredByReference(n, 0);
      for (std::uint32_t k = plan.cellListOffsets[g]; k < plan.cellListOffsets[g + 1]; ++k) {
        const std::uint32_t cell = plan.cellList[k];
        // Accepted in double, or skipped there (at the cut's boundary: its bodies all lie just beyond r_cut, where
        // the truncated cell adds the little that the cut leaves out) but passing the double opening test all the same.
        ASSERT_NE(tree::visitPeriodic(octree, cell, groups, g, split), tree::PeriodicVisit::open)
            << "group " << g << ", cell " << cell;
        const double d2 = periodicDistanceToBox2(
            octree.multipoles.x[cell], octree.multipoles.y[cell], octree.multipoles.z[cell], groups.centre[3 * g],
            groups.centre[3 * g + 1], groups.centre[3 * g + 2], groups.halfExtent[3 * g], groups.halfExtent[3 * g + 1],
            groups.halfExtent[3 * g + 2], L);
        ASSERT_TRUE(passesOpeningCriterion(d2, octree.openingRadius[cell], octree.multipoles.mass[cell],
                                           octree.bmax[cell], groups.relativeTolerance[g],
                                           multipole == MultipoleOrder::quadrupole))
            << "group " << g << ", cell " << cell;
        for (std::uint32_t i = octree.bodies[cell].first; i < octree.bodies[cell].last; ++i) ++covered[i];
      }
      for (std::uint32_t k = plan.bodyListOffsets[g]; k < plan.bodyListOffsets[g + 1]; ++k) {
        for (std::uint32_t i = plan.bodyList[k].first; i < plan.bodyList[k].last; ++i) ++covered[i];
      }
      for (std::uint32_t k = reference.cellListOffsets[g]; k < reference.cellListOffsets[g + 1]; ++k) {
        const BodyRange bodies = octree.bodies[reference.cellList[k]];
        for (std::uint32_t i = bodies.first; i < bodies.last; ++i) ++coveredByReference[i];
      }
      for (std::uint32_t k = reference.bodyListOffsets[g]; k < reference.bodyListOffsets[g + 1]; ++k) {
        for (std::uint32_t i = reference.bodyList[k].first; i < reference.bodyList[k].last; ++i) {
          ++coveredByReference[i];
        }
      }
      floatEntries += plan.numListCells(g) + plan.numListBodies(g);
      doubleEntries += reference.numListCells(g) + reference.numListBodies(g);
      const double* centre = &groups.centre[3 * g];
      const double* half = &groups.halfExtent[3 * g];
      for (std::size_t i = 0; i < n; ++i) {
        ASSERT_LE(covered[i], 1) << "group " << g << " lists body " << i << " twice";
        // A body the double walk covers and this one leaves out (checked below: it lies beyond r_cut) was in a cell
        // the double walk accepted and this walk, whose opening test errs towards opening, opened, then skipped the
        // child holding it: seed 14488487009061860196 (group 340, body 3176), about one seed in 40.
        if (covered[i] == 0) {
          const double d2 = periodicDistanceToBox2(sorted.x[i], sorted.y[i], sorted.z[i], centre[0], centre[1],
                                                   centre[2], half[0], half[1], half[2], L);
          ASSERT_GE(std::sqrt(d2), split.cutoffRadius) << "group " << g << " left out body " << i;
        }
      }
    }
    std::printf("%s: float walk %zu list entries, double walk %zu\n", toString(multipole).c_str(), floatEntries,
                doubleEntries);
    // The boundary cells the float test opens or keeps instead of accepting or skipping: a few percent at most.
    EXPECT_LT(double(floatEntries), 1.05 * double(doubleEntries));
  }
}

/// GADGET's FORCETEST_TESTFORCELAW for the whole TreePM: one body of mass 1, massless tracers at 48 separations
/// log-spaced from 1e-3 L to 0.5 L in 16 random directions each, |a / a_Ewald - 1| per tracer beyond 3 eps (Ewald
/// softens the pair's nearest image as the short range does). The tracers' tree adds nothing here (a one-body leaf is
/// exact as a cell), so this is the force split's, the mesh's and the float engine's error.
TEST(TreePm, ForceLawWithinHalfAPercent) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  std::mt19937_64 engine(seed);
  const auto uniform = [&engine] { return std::generate_canonical<double, 64>(engine); };
  const double L = 2.5;
  constexpr int kSeparations = 48, kDirections = 16;
  GravityParams gravity;
  gravity.G = 0.8;
  gravity.eps = 5e-4 * L;
  Particles p(1 + kSeparations * kDirections);
  for (std::size_t i = 0; i < p.size(); ++i) p.id[i] = i;
  p.x[0] = L * uniform();
  p.y[0] = L * uniform();
  p.z[0] = L * uniform();
  p.mass[0] = 1.0;
  std::vector<double> separation(p.size(), 0.0);
  for (int s = 0; s < kSeparations; ++s) {
    const double r = L * 1e-3 * std::pow(500.0, s / double(kSeparations - 1));
    for (int d = 0; d < kDirections; ++d) {
      const std::size_t k = 1 + std::size_t(s) * kDirections + d;
      const double cosTheta = 2 * uniform() - 1, phi = 2 * std::numbers::pi * uniform();
      const double sinTheta = std::sqrt(1 - cosTheta * cosTheta);
      p.x[k] = wrapIntoBox(p.x[0] + r * sinTheta * std::cos(phi), L);
      p.y[k] = wrapIntoBox(p.y[0] + r * sinTheta * std::sin(phi), L);
      p.z[k] = wrapIntoBox(p.z[0] + r * cosTheta, L);
      p.mass[k] = 0.0;
      separation[k] = r;
    }
  }
  MeshParams mesh;
  mesh.boxSize = L;
  mesh.grid = 32;
  TreePm treePm(mesh, gravity, gpu::Precision::float32, tree::periodicDefaultTreeParams());
  Particles forces = p;
  treePm.solver->computeForces(forces);
  std::vector<std::uint32_t> targets;
  for (std::uint32_t k = 1; k < p.size(); ++k) targets.push_back(k);
  std::vector<double> refY, refZ;
  const std::vector<double> refX = ewaldAt(p, gravity, L, targets, refY, refZ);
  double worst = 0, worstAt = 0;
  for (std::size_t i = 0; i < forces.size(); ++i) {
    const std::size_t k = forces.id[i];
    if (k == 0 || separation[k] < 3 * gravity.eps) continue;
    const std::size_t t = k - 1;
    const double error = std::hypot(forces.ax[i] - refX[t], forces.ay[i] - refY[t], forces.az[i] - refZ[t]) /
                         std::hypot(refX[t], refY[t], refZ[t]);
    if (error > worst) {
      worst = error;
      worstAt = separation[k] / L;
    }
  }
  RecordProperty("worst", scientific(worst));
  std::printf("force law: worst |a / a_Ewald - 1| %.2e at r = %.3g L (mesh 32^3, eps 5e-4 L)\n", worst, worstAt);
  // The 0.5%; measured 3.0e-4 - 9.0e-4 over 24 seeds (the mesh alone: 5.8e-4, README "Particle mesh").
  EXPECT_LT(worst, 5e-3);
}

// Bodies on the faces and in one corner of the box: x = 0 and the largest double below L are inside, x = L is not
// (wrapIntoBox makes it 0), and a box whose bodies all sit in one octant (the tree's root is still the whole box, and
// the other octants' images pull through the faces) matches Ewald as a spread-out one does.
TEST(TreePm, BodiesOnTheBoundaryAndInOneOctant) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const double L = 1.0;
  Particles p = testing::clumpyBox(seed, 0.5 * L, 200, 1200);  // a box of side L/2 ...
  wrapIntoBox(p, 0.5 * L);                                     // ... in the octant [0, L/2)^3
  const double top = std::nextafter(L, 0.0);
  p.x[0] = 0.0;
  p.y[0] = -0.0;
  p.z[0] = top;
  p.x[1] = L;  // on the face x = L: outside until folded
  p.y[1] = top;
  p.z[1] = -1e-300;
  GravityParams gravity;
  gravity.eps = 1e-3;
  TreePm treePm(defaultMesh(L, p.size()), gravity);
  Particles unwrapped = p;
  EXPECT_THROW(treePm.solver->computeForces(unwrapped), InputError);
  wrapIntoBox(p, L);
  EXPECT_EQ(p.x[1], 0.0);
  EXPECT_TRUE(p.z[1] >= 0.0 && p.z[1] < L);
  const ForceErrorStats stats = errorsAgainstEwald(p, treePm, gravity, L, 400, seed + 1);
  record("octant", stats);
  EXPECT_LT(stats.p99, 3e-3);  // measured 2.5e-4 - 1.1e-3 over 12 seeds
  // The corner bodies themselves.
  Particles corners = p;
  treePm.solver->computeForces(corners);
  std::vector<std::uint32_t> targets;
  std::vector<std::size_t> at;
  for (std::uint32_t i = 0; i < corners.size(); ++i) {
    if (corners.id[i] <= 1) {
      targets.push_back(i);
      at.push_back(i);
    }
  }
  std::vector<double> refY, refZ;
  const std::vector<double> refX = ewaldAt(corners, gravity, L, targets, refY, refZ);
  for (std::size_t t = 0; t < targets.size(); ++t) {
    const std::size_t i = at[t];
    const double error = std::hypot(corners.ax[i] - refX[t], corners.ay[i] - refY[t], corners.az[i] - refZ[t]) /
                         std::hypot(refX[t], refY[t], refZ[t]);
    EXPECT_LT(error, 5e-3) << "body " << corners.id[i];
  }
}

// Bodies that leave the box re-enter on the other side with continuous forces: 64 bodies of a uniform box are put
// 1e-12 L inside a face (some at an edge or a corner, inside up to three faces at once), then moved 2e-12 L across it,
// which wrapIntoBox folds to 1e-12 L inside the opposite face. With the short range summed exactly (theta 0.02 on a
// uniform box lists no cell, as PeriodicWalk checks; double engine) every body's force may change by no more than the
// motion itself changes it: body i by at most sum_j 3 m_j |u_i - u_j| (1 / s_ij^3 + 8 / L^3), u the displacements and
// s_ij^2 = r_ij^2 + eps^2 (a softened pull's Jacobian is at most 2 m / s^3; the other images add < 8 m / L^3), plus
// 1e-9 of its force for rounding. That bound is 1e-9..1e-6 of the force (1e-7 when a body lies 1e-5 from a moved one,
// as the corner bodies, which share a point, and a random body sometimes do); a lost or doubled image would change
// the force by ~1e-2. With the defaults (cells, float engine) the tree around the crossing bodies changes, and the
// forces by up to the method's error (measured 4.3e-5 - 2.4e-4; up to 1.0e-3 over 40 seeds).
TEST(TreePm, BodiesCrossingAFaceKeepContinuousForces) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const double L = 1.0, delta = 1e-12 * L;
  Particles p = testing::uniformCube(2000, seed, 0.5 * L);
  wrapIntoBox(p, L);
  constexpr std::size_t kCrossing = 64;
  Particles crossed = p;
  for (std::size_t k = 0; k < kCrossing; ++k) {
    // Body k lies just inside the low face of axis k % 3 (and of the next axes for k % 7 == 0 and k % 11 == 0), and
    // moves to just inside the opposite face.
    std::vector<double>* axes[3] = {&p.x, &p.y, &p.z};
    std::vector<double>* moved[3] = {&crossed.x, &crossed.y, &crossed.z};
    const int numFaces = k % 11 == 0 ? 3 : k % 7 == 0 ? 2 : 1;
    for (int f = 0; f < numFaces; ++f) {
      const int axis = static_cast<int>((k + f) % 3);
      (*axes[axis])[k] = delta;
      (*moved[axis])[k] = wrapIntoBox(-delta, L);
      ASSERT_GT((*moved[axis])[k], 0.5 * L);
    }
  }
  GravityParams gravity;
  gravity.eps = 1e-3;
  TreeParams exact;
  exact.theta = 0.02;
  exact.alpha = 0.0;
  const auto forcesById = [&](Particles bodies, gpu::Precision precision, const TreeParams& tree) {
    TreePm treePm(defaultMesh(L, bodies.size()), gravity, precision, tree);
    treePm.solver->computeForces(bodies);
    std::vector<double> byId(3 * bodies.size());
    for (std::size_t i = 0; i < bodies.size(); ++i) {
      byId[3 * bodies.id[i]] = bodies.ax[i];
      byId[3 * bodies.id[i] + 1] = bodies.ay[i];
      byId[3 * bodies.id[i] + 2] = bodies.az[i];
    }
    return byId;
  };
  // The displacement each body makes, as the nearest image sees it.
  std::vector<double> displacement(3 * p.size());
  for (std::size_t k = 0; k < p.size(); ++k) {
    displacement[3 * p.id[k]] = nearestImage(crossed.x[k] - p.x[k], L);
    displacement[3 * p.id[k] + 1] = nearestImage(crossed.y[k] - p.y[k], L);
    displacement[3 * p.id[k] + 2] = nearestImage(crossed.z[k] - p.z[k], L);
  }
  const auto motionBound = [&](std::size_t i) {  // body i's largest force change that the motion may cause
    double bound = 0;
    for (std::size_t j = 0; j < p.size(); ++j) {
      const double du = std::hypot(displacement[3 * p.id[i]] - displacement[3 * p.id[j]],
                                   displacement[3 * p.id[i] + 1] - displacement[3 * p.id[j] + 1],
                                   displacement[3 * p.id[i] + 2] - displacement[3 * p.id[j] + 2]);
      if (du == 0) continue;
      const double s2 = std::pow(nearestImage(p.x[j] - p.x[i], L), 2) + std::pow(nearestImage(p.y[j] - p.y[i], L), 2) +
                        std::pow(nearestImage(p.z[j] - p.z[i], L), 2) + gravity.eps * gravity.eps;
      bound += 3 * p.mass[j] * du * (1 / (s2 * std::sqrt(s2)) + 8 / (L * L * L));
    }
    return bound;
  };
  const auto changeById = [](const std::vector<double>& a, const std::vector<double>& b, std::uint32_t id) {
    return std::hypot(a[3 * id] - b[3 * id], a[3 * id + 1] - b[3 * id + 1], a[3 * id + 2] - b[3 * id + 2]);
  };
  const auto magnitudeById = [](const std::vector<double>& a, std::uint32_t id) {
    return std::hypot(a[3 * id], a[3 * id + 1], a[3 * id + 2]);
  };
  const std::vector<double> exactBefore = forcesById(p, gpu::Precision::float64, exact);
  const std::vector<double> exactAfter = forcesById(crossed, gpu::Precision::float64, exact);
  const std::vector<double> defaultBefore = forcesById(p, gpu::Precision::float32, TreeParams{});
  const std::vector<double> defaultAfter = forcesById(crossed, gpu::Precision::float32, TreeParams{});
  double exactChange = 0, worstShareOfBound = 0, defaultChange = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const std::uint32_t id = p.id[i];
    const double change = changeById(exactAfter, exactBefore, id);
    const double magnitude = magnitudeById(exactBefore, id);
    exactChange = std::max(exactChange, change / magnitude);
    worstShareOfBound = std::max(worstShareOfBound, change / (motionBound(i) + 1e-9 * magnitude));
    defaultChange =
        std::max(defaultChange, changeById(defaultAfter, defaultBefore, id) / magnitudeById(defaultBefore, id));
  }
  RecordProperty("exact_change", scientific(exactChange));
  RecordProperty("exact_change_over_motion_bound", scientific(worstShareOfBound));
  RecordProperty("default_change", scientific(defaultChange));
  std::printf(
      "crossing: largest relative force change %.2e (exact short range; %.2f of the motion's bound), %.2e "
      "(defaults)\n",
      exactChange, worstShareOfBound, defaultChange);
  EXPECT_LE(worstShareOfBound, 1.0);
  EXPECT_LT(exactChange, 1e-5);  // the motion's bound itself stays far below a lost image's 1e-2
  EXPECT_LT(defaultChange, 1e-2);
}

// What periodic gravity refuses, with one-line InputErrors before any work: an engine without the truncated kernels
// (the CUDA engine in double; the mirroring test engine does not declare them either), a split whose r_cut reaches half
// the box, a split that differs from the mesh's, and bodies outside the box.
TEST(TreePm, RefusesWhatItCannotDo) {
  MeshParams mesh;
  mesh.boxSize = 1.0;
  mesh.grid = 32;
  GravityParams gravity;
  gravity.periodic = periodicSplit(mesh);
  gpu::CpuEngine cpu;
  testing::MirroringEngine withoutKernels(cpu);
  try {
    tree::PeriodicTreeSolver solver(withoutKernels, TreeParams{}, gravity);
    ADD_FAILURE() << "an engine without periodic kernels was taken";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("CPU engine"), std::string::npos) << error.what();
    EXPECT_EQ(std::string(error.what()).find('\n'), std::string::npos);
  }
  EXPECT_THROW(tree::PeriodicTreeSolver(cpu, TreeParams{}, GravityParams{}), InputError);  // no box
  mesh.grid = 12;  // r_cut = 5.5 * 1.25 / 12 L > L / 2
  EXPECT_THROW(periodicSplit(mesh), InputError);
  GravityParams reaching = gravity;
  reaching.periodic.cutoffRadius = 0.5;
  EXPECT_THROW(tree::PeriodicTreeSolver(cpu, TreeParams{}, reaching), InputError);
  mesh.grid = 64;  // the short range split for 32^3, the mesh at 64^3
  EXPECT_THROW(TreePmSolver(std::make_unique<tree::PeriodicTreeSolver>(cpu, TreeParams{}, gravity), mesh, gravity),
               InvariantError);
  tree::PeriodicTreeSolver solver(cpu, TreeParams{}, gravity);
  for (const double outside : {1.0, -1e-9, 1.5, std::nan("")}) {
    Particles p = testing::uniformCube(64, 7, 0.5);
    wrapIntoBox(p, 1.0);
    p.y[10] = outside;
    EXPECT_THROW(solver.computeForces(p), InputError) << outside;
  }
  // Checked on every core, the error names the first offender by index, whatever the thread that found one.
  Particles many = testing::uniformCube(200000, 9, 0.5);
  wrapIntoBox(many, 1.0);
  many.x[170000] = 2.0;
  many.z[30001] = -0.25;
  try {
    solver.computeForces(many);
    ADD_FAILURE() << "bodies outside the box were taken";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("body " + std::to_string(many.id[30001]) + " lies outside"),
              std::string::npos)
        << error.what();
  }
}

// ---------------------------------------------------------------------------------------------------------------------
// The overlapped call (TreeParams::overlapWalk, MeshParams::overlap) against the sequential one.

/// The CPU engine, said to work on a device (NearFieldEngine::evaluatesOnDevice), so that the periodic solver
/// evaluates its batches on a second host thread while it walks the next, as with the CUDA engine. It checks the
/// batches' protocol as it goes: each pass's batches are consecutive runs of the groups, in order, the first marked
/// first and only the last marked last, with no other evaluation among them.
/// With `addsAddends`, it also takes PlanBatch::addend (NearFieldEngine::addsForceAddend), adding it onto the outputs
/// of every group of the call's batches once the last is evaluated, as a separate pass would.
class BesideEngine final : public NearFieldEngine {
 public:
  explicit BesideEngine(gpu::Precision precision, bool addsAddends = false)
      : inner_(precision), addsAddends_(addsAddends) {}
  std::string name() const override { return "beside " + inner_.name(); }
  bool periodicShortRange() const override { return inner_.periodicShortRange(); }
  bool evaluatesOnDevice() const override { return true; }
  bool addsForceAddend() const override { return addsAddends_; }
  InteractionCounts evaluatePlan(const SourceView& sources, const CellMultipoles& cells, const InteractionPlan& plan,
                                 const GravityParams& gravity, const ForceView& out) override {
    EXPECT_FALSE(inPass_) << "evaluatePlan among a call's batches";
    return inner_.evaluatePlan(sources, cells, plan, gravity, out);
  }
  InteractionCounts evaluatePlanBatch(const SourceView& sources, const CellMultipoles& cells,
                                      const InteractionPlan& batch, const GravityParams& gravity, const ForceView& out,
                                      PlanBatch where) override {
    EXPECT_EQ(where.first, !inPass_) << "a pass starts with its first batch and only there";
    if (where.first) {
      nextGroup_ = 0;
      passGroups_.clear();
    }
    for (const std::uint32_t id : batch.groupIds) EXPECT_EQ(id, nextGroup_++) << "batches out of the groups' order";
    EXPECT_EQ(batch.groupIds.size(), batch.numGroups());
    EXPECT_TRUE(where.addend == nullptr || (addsAddends_ && where.last)) << "an addend off the last batch";
    inPass_ = !where.last;
    ++numBatches_;
    passGroups_.insert(passGroups_.end(), batch.groups.begin(), batch.groups.end());
    const InteractionCounts counts = inner_.evaluatePlanBatch(sources, cells, batch, gravity, out, where);
    if (where.addend != nullptr) {
      const ForceAddend& add = *where.addend;
      EXPECT_EQ(add.count, out.count);
      EXPECT_EQ(add.pot != nullptr, out.pot != nullptr);
      for (const BodyRange group : passGroups_) {
        for (std::uint32_t i = group.first; i < group.last; ++i) {
          out.ax[i] += add.ax[i];
          out.ay[i] += add.ay[i];
          out.az[i] += add.az[i];
          if (out.pot != nullptr) out.pot[i] += add.pot[i];
        }
      }
      ++numAddends_;
    }
    return counts;
  }
  InteractionCounts evaluateDirect(const SourceView& sources, const GravityParams& gravity,
                                   const ForceView& out) override {
    return inner_.evaluateDirect(sources, gravity, out);
  }
  EngineTimings lastTimings() const override { return inner_.lastTimings(); }
  void setTree(const TreeTopology& topology, const SourceView& bodies) override { inner_.setTree(topology, bodies); }
  void setLists(const InteractionPlan& plan) override { inner_.setLists(plan); }
  void dropLists() override { inner_.dropLists(); }
  void launchResident(const SourceView& bodies, const GravityParams& gravity, const ForceView& out,
                      std::span<const std::uint32_t> groups, const BodyUpdate& update) override {
    inner_.launchResident(bodies, gravity, out, groups, update);
  }
  ResidentResult finishResident() override { return inner_.finishResident(); }
  void discardResident() override { inner_.discardResident(); }

  std::uint64_t numBatches() const { return numBatches_; }
  std::uint64_t numAddends() const { return numAddends_; }
  bool inPass() const { return inPass_; }

 private:
  gpu::CpuEngine inner_;
  bool addsAddends_ = false;
  std::vector<BodyRange> passGroups_;
  std::uint64_t numAddends_ = 0;
  bool inPass_ = false;
  std::uint32_t nextGroup_ = 0;
  std::uint64_t numBatches_ = 0;
};

/// Whether two plans hold the same groups, centres and lists (offsets included).
void expectSamePlans(const InteractionPlan& test, const InteractionPlan& reference) {
  ASSERT_EQ(test.numGroups(), reference.numGroups());
  for (std::size_t g = 0; g < reference.numGroups(); ++g) {
    ASSERT_EQ(test.groups[g].first, reference.groups[g].first) << g;
    ASSERT_EQ(test.groups[g].last, reference.groups[g].last) << g;
  }
  EXPECT_EQ(test.groupIds, reference.groupIds);
  EXPECT_EQ(test.listBodyCounts, reference.listBodyCounts);
  EXPECT_EQ(test.groupCentres, reference.groupCentres);
  EXPECT_EQ(test.cellListOffsets, reference.cellListOffsets);
  EXPECT_EQ(test.cellList, reference.cellList);
  EXPECT_EQ(test.bodyListOffsets, reference.bodyListOffsets);
  ASSERT_EQ(test.bodyList.size(), reference.bodyList.size());
  for (std::size_t k = 0; k < reference.bodyList.size(); ++k) {
    ASSERT_EQ(test.bodyList[k].first, reference.bodyList[k].first) << k;
    ASSERT_EQ(test.bodyList[k].last, reference.bodyList[k].last) << k;
  }
}

// The walk in batches, each evaluated while the next is walked, gives the forces of the walk into one plan, bit for
// bit: on a clumpy box and a uniform one, with and without potentials, at a first call (no accelerations: the estimate
// pass with theta alone, then the relative test) and at a second (the relative test from the first call's
// accelerations), with the batches evaluated in turn (the CPU engine) and on a second thread (BesideEngine). The
// batches' plans, joined, are the one plan. maxBatchEntries 2^11 cuts the groups into batches of a few each.
TEST(PeriodicOverlap, WalkInBatchesGivesTheOnePlansForces) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const double L = 2.0;
  struct Box {
    std::string name;
    Particles bodies;
  };
  std::vector<Box> boxes;
  boxes.push_back({"clumpy", testing::clumpyBox(seed, L, 384, 1536)});
  boxes.push_back({"uniform", testing::uniformCube(3072, seed + 1, 0.5 * L)});
  for (Box& box : boxes) {
    wrapIntoBox(box.bodies, L);
    GravityParams gravity;
    gravity.eps = 1e-3 * L;
    gravity.periodic = periodicSplit(defaultMesh(L, box.bodies.size()));
    for (const bool potentials : {true, false}) {
      const std::string what = box.name + (potentials ? ", potentials" : ", accelerations only");
      SCOPED_TRACE(what);
      TreeParams sequential;
      sequential.overlapWalk = false;
      sequential.reuse = 1;  // each call walks anew (the second call's bodies have not moved)
      TreeParams batched;
      batched.overlapWalk = true;
      batched.reuse = 1;
      batched.maxBatchEntries = std::uint64_t{1} << 11;
      gpu::CpuEngine cpu(gpu::Precision::float32);
      BesideEngine beside(gpu::Precision::float32);
      tree::PeriodicTreeSolver reference(cpu, sequential, gravity);
      tree::PeriodicTreeSolver inTurn(cpu, batched, gravity);
      tree::PeriodicTreeSolver onThread(beside, batched, gravity);
      Particles expected = box.bodies, turned = box.bodies, threaded = box.bodies;
      for (ForceSolver* solver : {static_cast<ForceSolver*>(&reference), static_cast<ForceSolver*>(&inTurn),
                                  static_cast<ForceSolver*>(&onThread)}) {
        solver->setPotentialsWanted(potentials);
      }
      for (const int call : {1, 2}) {
        SCOPED_TRACE("call " + std::to_string(call));
        const ForceReport one = reference.computeForces(expected);
        inTurn.computeForces(turned);
        const std::uint64_t batchesBefore = beside.numBatches();
        const ForceReport report = onThread.computeForces(threaded);
        EXPECT_EQ(reference.lastStats().estimatePass, call == 1);
        EXPECT_EQ(onThread.lastStats().estimatePass, call == 1);
        EXPECT_FALSE(beside.inPass()) << "a pass ended without its last batch";
        EXPECT_GT(onThread.lastStats().numBatches, 8u);
        EXPECT_GT(beside.numBatches() - batchesBefore, onThread.lastStats().numBatches)
            << "the bodies and cells go ahead of the first batch, in an empty one";
        EXPECT_EQ(reference.lastStats().numBatches, 1u);
        testing::expectSameBodiesBitForBit(expected, turned, what + ", batches in turn", potentials);
        testing::expectSameBodiesBitForBit(expected, threaded, what + ", batches on a second thread", potentials);
        expectSamePlans(onThread.lastPlan(), reference.lastPlan());
        expectSamePlans(inTurn.lastPlan(), reference.lastPlan());
        EXPECT_EQ(report.counts.bodyBody, one.counts.bodyBody);
        EXPECT_EQ(report.counts.bodyCell, one.counts.bodyCell);
        EXPECT_EQ(onThread.lastStats().meanListCells, reference.lastStats().meanListCells);
        EXPECT_EQ(onThread.lastStats().maxListBodies, reference.lastStats().maxListBodies);
        EXPECT_GT(report.timings[call == 1 ? Phase::estimate : Phase::walk], 0.0);
        EXPECT_GE(report.timings.engineWaitSeconds, 0.0);
      }
    }
  }
}

// The sorted-bodies hook (ForceSolver::setSortedBodiesHook, which TreePM uses to order the GPU mesh's results): the
// periodic solver calls it once per call, after its sort, with the bodies' positions and masses in the order the call
// leaves them and the order they came from (body k was the call's body order[k]); the call leaves every other array
// in that order too (the velocities and ids, moved later in the call); an empty hook turns it off. TreePM with the FFTW
// mesh keeps the mesh after the short range whatever MeshParams::overlap says (ParticleMesh::runsBeside: false), with
// the same forces.
TEST(PeriodicOverlap, SortedBodiesHookAndTheFftwMesh) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const double L = 1.0;
  Particles bodies = testing::clumpyBox(seed, L, 256, 1024);
  wrapIntoBox(bodies, L);
  const MeshParams mesh = defaultMesh(L, bodies.size());
  GravityParams gravity;
  gravity.eps = 1e-3 * L;
  gravity.periodic = periodicSplit(mesh);
  gpu::CpuEngine cpu(gpu::Precision::float32);
  tree::PeriodicTreeSolver solver(cpu, TreeParams{}, gravity);
  int calls = 0;
  std::vector<double> xAtHook, massAtHook;
  std::vector<std::uint32_t> orderAtHook;
  EXPECT_TRUE(solver.setSortedBodiesHook([&](const SourceView& sorted, std::span<const std::uint32_t> order) {
    ++calls;
    xAtHook.assign(sorted.x, sorted.x + sorted.count);
    massAtHook.assign(sorted.mass, sorted.mass + sorted.count);
    orderAtHook.assign(order.begin(), order.end());
  }));
  Particles p = bodies;
  solver.computeForces(p);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(xAtHook, p.x) << "the hook saw the bodies in another order than the call left them";
  EXPECT_EQ(massAtHook, p.mass);
  ASSERT_EQ(orderAtHook.size(), p.size());
  for (std::size_t k = 0; k < p.size(); ++k) {
    ASSERT_EQ(bodies.id[orderAtHook[k]], p.id[k]) << "body " << k << " did not come from where the order says";
    ASSERT_EQ(bodies.x[orderAtHook[k]], p.x[k]);
    ASSERT_EQ(bodies.vx[orderAtHook[k]], p.vx[k]);
    ASSERT_EQ(bodies.vz[orderAtHook[k]], p.vz[k]);
  }
  EXPECT_NE(p.id, bodies.id) << "the input was already in Morton order: the test would not see a hook before the sort";
  solver.computeForces(p);
  EXPECT_EQ(calls, 2);
  EXPECT_TRUE(solver.setSortedBodiesHook({}));
  solver.computeForces(p);
  EXPECT_EQ(calls, 2);

  MeshParams sequentialMesh = mesh;
  sequentialMesh.overlap = false;
  Particles overlapped = bodies, sequential = bodies;
  for (const bool overlap : {true, false}) {
    const MeshParams& params = overlap ? mesh : sequentialMesh;
    TreePmSolver treePm(std::make_unique<tree::PeriodicTreeSolver>(cpu, TreeParams{}, gravity), params, gravity);
    EXPECT_EQ(treePm.describe().find("beside the short range"), std::string::npos) << treePm.describe();
    Particles& q = overlap ? overlapped : sequential;
    treePm.computeForces(q);
    const ForceReport report = treePm.computeForces(q);
    EXPECT_GT(report.timings[Phase::mesh], 0.0);
    EXPECT_EQ(report.timings.meshWaitSeconds, 0.0);
  }
  testing::expectSameBodiesBitForBit(sequential, overlapped,
                                     "TreePM with the FFTW mesh, MeshParams::overlap on and off");
}

// The unsorted-bodies hook (ForceSolver::setUnsortedBodiesHook, where TreePM starts its GPU mesh) runs on a second
// thread while the call sorts: an exception it throws is the call's, which leaves the bodies in the order it found
// them; an empty hook turns it off.
TEST(PeriodicOverlap, AnUnsortedBodiesHooksExceptionIsTheCalls) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const auto [bodies, gravity] = clumpyUnitBox(seed, 128, 512);
  gpu::CpuEngine cpu(gpu::Precision::float32);
  TreeParams params;
  params.reuse = 1;
  tree::PeriodicTreeSolver solver(cpu, params, gravity);
  int sortedHooks = 0;
  EXPECT_TRUE(solver.setSortedBodiesHook([&](const SourceView&, std::span<const std::uint32_t>) { ++sortedHooks; }));
  EXPECT_TRUE(solver.setUnsortedBodiesHook([](const SourceView&) { throw std::runtime_error("the hook failed"); }));
  Particles p = bodies;
  EXPECT_THROW(
      {
        try {
          solver.computeForces(p);
        } catch (const std::runtime_error& error) {
          EXPECT_STREQ(error.what(), "the hook failed");
          throw;
        }
      },
      std::runtime_error);
  EXPECT_EQ(sortedHooks, 0) << "the call went on past a failed hook";
  EXPECT_EQ(p.id, bodies.id) << "the failed call moved the bodies";
  EXPECT_EQ(p.x, bodies.x);
  EXPECT_TRUE(solver.setUnsortedBodiesHook({}));
  solver.computeForces(p);
  EXPECT_EQ(sortedHooks, 1);
}

// The periodic solver keeps its keys, sorted keys and order in the engine's transfer memory
// (NearFieldEngine::transferMemory: page-locked on the CUDA engine, which then sorts without staging them), in the
// default memory where the engine offers none; the forces are the same, bit for bit, and every byte goes back when the
// solver does.
TEST(PeriodicOverlap, KeysAndOrderLieInTheEnginesTransferMemory) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const auto [bodies, gravity] = clumpyUnitBox(seed, 256, 1024);
  class CountingMemory final : public std::pmr::memory_resource {
   public:
    std::size_t allocated = 0, outstanding = 0;

   private:
    void* do_allocate(std::size_t bytes, std::size_t alignment) override {
      allocated += bytes;
      outstanding += bytes;
      return std::pmr::new_delete_resource()->allocate(bytes, alignment);
    }
    void do_deallocate(void* memory, std::size_t bytes, std::size_t alignment) override {
      outstanding -= bytes;
      std::pmr::new_delete_resource()->deallocate(memory, bytes, alignment);
    }
    bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override { return this == &other; }
  } memory;
  gpu::CpuEngine cpu(gpu::Precision::float32);
  testing::MirroringEngine offering(cpu, true);
  offering.setTransferMemory(&memory);
  EXPECT_EQ(cpu.transferMemory(), nullptr) << "the CPU engine has no memory of its own to offer";
  TreeParams params;
  params.reuse = 1;
  Particles expected = bodies, test = bodies;
  {
    tree::PeriodicTreeSolver plain(cpu, params, gravity), solver(offering, params, gravity);
    EXPECT_EQ(memory.allocated, 0u);
    for (const int call : {1, 2}) {
      plain.computeForces(expected);
      solver.computeForces(test);
      testing::expectSameBodiesBitForBit(expected, test, "call " + std::to_string(call));
    }
    const std::size_t n = bodies.size();
    EXPECT_GE(memory.outstanding, n * (2 * sizeof(std::uint64_t) + sizeof(std::uint32_t)));
  }
  EXPECT_GT(memory.allocated, 0u);
  EXPECT_EQ(memory.outstanding, 0u) << "the solver kept transfer memory after it was gone";
}

// The addend (ForceSolver::setForceAddendProvider, TreePM's GPU mesh handed to the short range's engine): the periodic
// solver asks for it once per call, after the sorted-bodies hook and only for the call's last pass (a first call's
// estimate pass goes without), and hands it with the last batch to an engine that adds addends, walked in batches or
// in one plan: the forces are the short range's plus the addend, bit for bit those of a pass adding it after the call.
// An engine that does not add them, a tree walked for several calls, or no provider: never asked, the addend the
// caller's to add.
TEST(PeriodicOverlap, TheAddendGoesWithTheLastBatch) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const auto [bodies, gravity] = clumpyUnitBox(seed, 384, 1536);
  // A distinct addend for every body, by its id: the solver's order at the provider must be the one the call leaves.
  const auto addendOf = [](std::uint64_t id, int component) {
    return 1e-3 * double(id % 977) - 0.25 * component + 1e-7 * double(id);
  };
  for (const bool potentials : {true, false}) {
    for (const bool overlap : {true, false}) {
      const std::string what = std::string(overlap ? "batches" : "one plan") + (potentials ? ", potentials" : "");
      SCOPED_TRACE(what);
      TreeParams params;
      params.overlapWalk = overlap;
      params.reuse = 1;
      params.maxBatchEntries = std::uint64_t{1} << 11;
      BesideEngine plain(gpu::Precision::float32), adding(gpu::Precision::float32, true);
      tree::PeriodicTreeSolver reference(plain, params, gravity), solver(adding, params, gravity);
      reference.setPotentialsWanted(potentials);
      solver.setPotentialsWanted(potentials);
      std::vector<std::uint64_t> idsBefore;
      std::vector<std::uint32_t> orderAtHook;
      std::vector<double> addend[4];
      int provided = 0, hooked = 0;
      EXPECT_TRUE(solver.setSortedBodiesHook([&](const SourceView&, std::span<const std::uint32_t> order) {
        ++hooked;
        orderAtHook.assign(order.begin(), order.end());
      }));
      EXPECT_TRUE(solver.setForceAddendProvider([&] {
        ++provided;
        EXPECT_EQ(hooked, provided) << "the addend asked for before the bodies' order was known";
        const std::size_t n = idsBefore.size();
        for (int c = 0; c < 4; ++c) {
          addend[c].resize(n);
          for (std::size_t k = 0; k < n; ++k) addend[c][k] = addendOf(idsBefore[orderAtHook[k]], c);
        }
        return ForceAddend{addend[0].data(), addend[1].data(), addend[2].data(),
                           potentials ? addend[3].data() : nullptr, n};
      }));
      Particles expected = bodies, test = bodies;
      for (const int call : {1, 2}) {
        SCOPED_TRACE("call " + std::to_string(call));
        // The relative test of call 2 reads the |a| the bodies bring: the same for both (without the addend).
        test.ax = expected.ax;
        test.ay = expected.ay;
        test.az = expected.az;
        idsBefore = test.id;
        reference.computeForces(expected);
        const ForceReport report = solver.computeForces(test);
        EXPECT_EQ(solver.lastStats().estimatePass, call == 1);
        EXPECT_EQ(provided, call) << "the provider is called once a call";
        EXPECT_TRUE(report.addendTaken);
        EXPECT_EQ(adding.numAddends(), std::uint64_t(call));
        ASSERT_EQ(test.id, expected.id);
        for (std::size_t i = 0; i < test.size(); ++i) {
          ASSERT_EQ(test.ax[i], expected.ax[i] + addendOf(test.id[i], 0)) << i;
          ASSERT_EQ(test.ay[i], expected.ay[i] + addendOf(test.id[i], 1)) << i;
          ASSERT_EQ(test.az[i], expected.az[i] + addendOf(test.id[i], 2)) << i;
          if (potentials) {
            ASSERT_EQ(test.pot[i], expected.pot[i] + addendOf(test.id[i], 3)) << i;
          } else {
            ASSERT_TRUE(std::isnan(test.pot[i])) << i;
          }
        }
      }
      // Never asked: an engine that does not add addends, or a tree walked for several calls into one plan.
      tree::PeriodicTreeSolver notAdding(plain, params, gravity);
      TreeParams held = params;
      held.overlapWalk = false;
      held.reuse = 4;
      tree::PeriodicTreeSolver holding(adding, held, gravity);
      for (tree::PeriodicTreeSolver* other : {&notAdding, &holding}) {
        int asked = 0;
        other->setPotentialsWanted(potentials);
        other->setForceAddendProvider([&] {
          ++asked;
          return ForceAddend{};
        });
        Particles q = bodies;
        EXPECT_FALSE(other->computeForces(q).addendTaken);
        EXPECT_EQ(asked, 0);
      }
      EXPECT_TRUE(solver.setForceAddendProvider({}));
      Particles q = expected;
      EXPECT_FALSE(solver.computeForces(q).addendTaken);
      EXPECT_EQ(provided, 2);
    }
  }
}

// Long-range steps: with them off (the default) nothing changes; on, a call that is not due gives the periodic tree's
// short range alone (bit for bit its own solver's, potentials included), a due call the whole TreePM force (the one
// without long-range steps, to the rounding of the sum's order) with the mesh's accelerations kept apart in the
// call's order (acc their sum with the short range's), and
// computeLongRange gives the same long range again for the bodies as they are; turning the steps off drops it.
TEST(TreePm, LongRangeStepsKeepTheMeshApart) {
  const std::uint64_t seed = testing::freshSeed();
  SCOPED_TRACE(testing::seedTrace(seed));
  const double L = 1.0;
  Particles bodies = testing::clumpyBox(seed, L, 256, 1024);
  wrapIntoBox(bodies, L);
  GravityParams gravity;
  gravity.eps = 1e-3 * L;
  const MeshParams mesh = defaultMesh(L, bodies.size());
  TreePm whole(mesh, gravity), split(mesh, gravity), shortOnly(mesh, gravity);
  EXPECT_TRUE(split.solver->splitsLongRange());
  EXPECT_EQ(split.solver->lastLongRange().count, 0u);
  split.solver->setLongRangeSteps(true);
  Particles a = bodies, b = bodies, c = bodies;
  whole.solver->computeForces(a);
  split.solver->computeForces(b);
  // The same force to the rounding of the sum's order (the mesh's passes summed apart, then added).
  ASSERT_EQ(a.id, b.id);
  double largest = 0.0, worst = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    largest = std::max({largest, std::abs(a.ax[i]), std::abs(a.ay[i]), std::abs(a.az[i])});
    worst = std::max({worst, std::abs(a.ax[i] - b.ax[i]), std::abs(a.ay[i] - b.ay[i]), std::abs(a.az[i] - b.az[i]),
                      std::abs(a.pot[i] - b.pot[i])});
  }
  EXPECT_LE(worst, 1e-13 * largest);
  EXPECT_EQ(a.x, b.x);
  const AccelerationView kept = split.solver->lastLongRange();
  ASSERT_EQ(kept.count, b.size());
  const std::vector<double> longX(kept.ax, kept.ax + kept.count), longZ(kept.az, kept.az + kept.count);
  // The short range alone: the tree's own solver on the bodies in the same order, bringing the accelerations the due
  // call was brought (none), so that the relative opening test reads the same ones and the walks give the same lists.
  // (Brought the due call's results, its lists differed: by up to 1.3e-5 of the largest force on a clumpy box.)
  split.solver->setLongRangeDue(false);
  Particles shortRange = b;
  for (auto* field : {&shortRange.ax, &shortRange.ay, &shortRange.az, &shortRange.pot}) {
    std::fill(field->begin(), field->end(), 0.0);
  }
  ASSERT_TRUE(std::all_of(bodies.ax.begin(), bodies.ax.end(), [](double v) { return v == 0.0; }));
  c = shortRange;  // the same bodies, order and accelerations brought
  split.solver->computeForces(shortRange);
  EXPECT_EQ(split.solver->lastLongRange().count, 0u) << "a call without the long range keeps none";
  shortOnly.solver->shortRange().computeForces(c);
  testing::expectSameBodiesBitForBit(c, shortRange, "a call that is not due and the periodic tree solver alone");
  double largestMesh = 0.0, largestDifference = 0.0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    ASSERT_EQ(b.id[i], shortRange.id[i]);
    largestMesh = std::max(largestMesh, std::abs(longX[i]));
    // The due call's acc is the short range's plus the kept long range, to the rounding of that sum.
    largestDifference = std::max(largestDifference, std::abs(b.ax[i] - (shortRange.ax[i] + longX[i])));
  }
  EXPECT_GT(largestMesh, 1e-3 * largest);
  EXPECT_LE(largestDifference, 1e-12 * largest);
  split.solver->computeLongRange(shortRange);
  const AccelerationView again = split.solver->lastLongRange();
  ASSERT_EQ(again.count, b.size());
  EXPECT_EQ(std::vector<double>(again.ax, again.ax + again.count), longX);
  EXPECT_EQ(std::vector<double>(again.az, again.az + again.count), longZ);
  split.solver->setLongRangeSteps(false);
  EXPECT_EQ(split.solver->lastLongRange().count, 0u);
}

}  // namespace
}  // namespace matcha::mesh
