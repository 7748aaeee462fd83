// SPDX-License-Identifier: MIT
// exportSubtree on hand-sized trees (no communication): two clumps of eight bodies far apart, pruned for remote groups
// placed by hand, where what must travel can be said in advance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "matcha/core/opening_criterion.hpp"
#include "matcha/parallel/local_essential_tree.hpp"
#include "matcha/testing/generators.hpp"
#include "matcha/tree/groups.hpp"
#include "matcha/tree/octree.hpp"
#include "matcha/tree/space_filling_curve.hpp"
#include "mpi_testing.hpp"

namespace matcha::parallel {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

/// Whether two exported subtrees have the same shape: cell for cell the same source cell, verdict, children and bodies.
::testing::AssertionResult sameSubtree(const std::vector<ExportedCell>& cells,
                                       const std::vector<ExportedCell>& reference) {
  if (cells.size() != reference.size()) {
    return ::testing::AssertionFailure() << cells.size() << " cells against " << reference.size();
  }
  for (std::size_t c = 0; c < cells.size(); ++c) {
    const ExportedCell &a = cells[c], &b = reference[c];
    if (a.sourceCell != b.sourceCell || a.accepted != b.accepted || a.firstChild != b.firstChild ||
        a.numChildren != b.numChildren || a.firstBody != b.firstBody || a.lastBody != b.lastBody) {
      return ::testing::AssertionFailure()
             << "cell " << c << " differs (source cell " << a.sourceCell << " against " << b.sourceCell << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

/// Clump A: ids 0-7 on a cube of edge 0.2 around (-10, -3, -3); clump B: ids 8-15 around (10, 3, 3), so that neither
/// straddles a plane that halves the root cube. Sorted, with their octree (nleaf 4) and monopoles at theta 0.5. In a
/// periodic box of side `boxSize` (the tree's root then): A around (0.3, 1.8, 1.8), beside the face x = 0, and B
/// around (7, 1.8, 1.8).
struct TwoClumps {
  Particles bodies;
  tree::Octree octree;

  explicit TwoClumps(double boxSize = 0.0) : bodies(16) {
    for (std::size_t i = 0; i < 16; ++i) {
      const double side = i < 8 ? -1.0 : 1.0;
      const double centre[3] = {boxSize > 0.0 ? (i < 8 ? 0.3 : 7.0) : 10.0 * side, boxSize > 0.0 ? 1.8 : 3.0 * side,
                                boxSize > 0.0 ? 1.8 : 3.0 * side};
      bodies.x[i] = centre[0] + 0.1 * ((i & 1) ? 1 : -1);
      bodies.y[i] = centre[1] + 0.1 * ((i & 2) ? 1 : -1);
      bodies.z[i] = centre[2] + 0.1 * ((i & 4) ? 1 : -1);
      bodies.mass[i] = 1.0 / 16.0;
      bodies.id[i] = i;
    }
    tree::Cube cube = tree::computeBoundingCube(bodies.sources());
    if (boxSize > 0.0) {
      cube = tree::Cube{};
      cube.side = boxSize;
    }
    std::vector<std::uint64_t> keys;
    tree::computeMortonKeys(bodies.sources(), cube, keys);
    const std::vector<std::uint32_t> order = tree::sortByKey(keys);
    bodies.permute(order);
    tree::buildOctree(keys, cube, 4, octree);
    tree::computeMultipoles(bodies.sources(), 0.5, MultipoleOrder::monopole, octree);
  }

  /// Remote groups: a cube of half edge `half` around each centre, all with tolerance `tolerance`.
  struct Remote {
    tree::Groups groups;
    RemoteGroups view() const { return {domainOf(groups), groups.centre, groups.halfExtent, groups.relativeTolerance}; }
  };
  static Remote remote(const std::vector<std::array<double, 3>>& centres, double half, double tolerance = kInf) {
    Remote r;
    for (const auto& c : centres) {
      r.groups.ranges.push_back({0, 1});
      r.groups.centre.insert(r.groups.centre.end(), c.begin(), c.end());
      r.groups.halfExtent.insert(r.groups.halfExtent.end(), {half, half, half});
      r.groups.relativeTolerance.push_back(tolerance);
    }
    return r;
  }

  /// How often each body is covered by the subtree: by an accepted cell that holds it, or as an exported body.
  std::vector<int> coverage(const std::vector<ExportedCell>& cells, const std::set<std::uint64_t>& ids) const {
    std::vector<int> count(bodies.size(), 0);
    for (const ExportedCell& c : cells) {
      if (!c.accepted) continue;
      for (std::uint32_t i = octree.bodies[c.sourceCell].first; i < octree.bodies[c.sourceCell].last; ++i) {
        ++count[bodies.id[i]];
      }
    }
    for (const std::uint64_t id : ids) ++count[id];
    return count;
  }

  std::set<std::uint64_t> exportedIds(const Remote& r, std::vector<ExportedCell>& cells,
                                      const PeriodicSplit& periodic = PeriodicSplit{}) const {
    std::vector<ExportedBody> sent;
    exportSubtree(octree, bodies.sources(), bodies.id, r.view(), cells, sent, periodic);
    std::set<std::uint64_t> ids;
    for (const ExportedBody& b : sent) EXPECT_TRUE(ids.insert(b.id).second) << "body " << b.id << " sent twice";
    return ids;
  }
};

TEST(ExportSubtree, AFarGroupGetsTheRootAlone) {
  const TwoClumps t;
  std::vector<ExportedCell> cells;
  const auto ids = t.exportedIds(TwoClumps::remote({{{1e4, 0, 0}}}, 0.1), cells);
  ASSERT_EQ(cells.size(), 1u);
  EXPECT_TRUE(ids.empty());
  EXPECT_EQ(cells[0].accepted, 1u);
  EXPECT_EQ(cells[0].sourceCell, 0u);
  EXPECT_DOUBLE_EQ(cells[0].mass, 1.0);
}

// The distributed build moves the ids into the tree's order after the export (DistributedTreeSolver: the deferred
// motion permutation): read through the order, the ids left behind must give each sent body the id it has in order.
TEST(ExportSubtree, IdsReadThroughTheOrderAreTheIdsInTreeOrder) {
  const TwoClumps t;
  const TwoClumps::Remote near = TwoClumps::remote({{{10.6, 3, 3}}}, 0.1);
  // The ids as they lay before a permutation: behind[order[i]] = id of tree body i, for a reversing order.
  const std::size_t n = t.bodies.size();
  std::vector<std::uint32_t> order(n);
  std::vector<std::uint64_t> behind(n);
  for (std::size_t i = 0; i < n; ++i) {
    order[i] = static_cast<std::uint32_t>(n - 1 - i);
    behind[order[i]] = t.bodies.id[i];
  }
  std::vector<ExportedCell> cells, cellsThroughOrder;
  std::vector<ExportedBody> sent, sentThroughOrder;
  exportSubtree(t.octree, t.bodies.sources(), t.bodies.id, near.view(), cells, sent);
  exportSubtree(t.octree, t.bodies.sources(), BodyIds(behind, order), near.view(), cellsThroughOrder, sentThroughOrder);
  ASSERT_FALSE(sent.empty()) << "the test needs bodies sent";
  ASSERT_EQ(sentThroughOrder.size(), sent.size());
  EXPECT_EQ(cellsThroughOrder.size(), cells.size());
  for (std::size_t k = 0; k < sent.size(); ++k) {
    EXPECT_EQ(sentThroughOrder[k].id, sent[k].id) << "sent body " << k;
    EXPECT_EQ(sentThroughOrder[k].x, sent[k].x) << "sent body " << k;
  }
}

TEST(ExportSubtree, AGroupBesideOneClumpGetsBodiesOfItAndTheOtherClumpAsACell) {
  const TwoClumps t;
  std::vector<ExportedCell> cells;
  // Beside clump B (0.4 from its face at x = 10.1): some of B's cells open down to their leaves; clump A, 21 away,
  // passes theta = 0.5 as one cell (the level-2 cell around it: r_open = 2 * 2.5 / 0.5 + an offset of 2.5 ~ 12.6).
  const auto ids = t.exportedIds(TwoClumps::remote({{{10.6, 3, 3}}}, 0.1), cells);
  EXPECT_FALSE(ids.empty()) << "the leaves of B's near side must travel";
  for (const std::uint64_t id : ids) EXPECT_GE(id, 8u) << "a body of clump A travelled";
  EXPECT_EQ(t.coverage(cells, ids), std::vector<int>(16, 1)) << "every body covered once";
  bool clumpAccepted = false;
  for (const ExportedCell& c : cells) {
    const BodyRange range = t.octree.bodies[c.sourceCell];
    std::set<std::uint64_t> holds;
    for (std::uint32_t i = range.first; i < range.last; ++i) holds.insert(t.bodies.id[i]);
    if (holds == std::set<std::uint64_t>{0, 1, 2, 3, 4, 5, 6, 7} && c.accepted) {
      clumpAccepted = true;
      EXPECT_DOUBLE_EQ(c.mass, 0.5);
    }
    // Children of an opened cell are consecutive and follow it; an accepted cell has none.
    if (c.accepted) {
      EXPECT_EQ(c.numChildren, 0u);
    }
    if (c.numChildren > 0) {
      ASSERT_LE(c.firstChild + c.numChildren, cells.size());
      for (std::uint32_t k = 0; k < c.numChildren; ++k) {
        EXPECT_EQ(cells[c.firstChild + k].sourceCell, t.octree.firstChild[c.sourceCell] + k);
      }
    }
  }
  EXPECT_TRUE(clumpAccepted) << "clump A travels as one accepted cell";
}

TEST(ExportSubtree, TwoGroupsGetTheUnionOfTheirWalks) {
  const TwoClumps t;
  std::vector<ExportedCell> cellsB, cellsA, cellsBoth;
  const auto idsB = t.exportedIds(TwoClumps::remote({{{10.6, 3, 3}}}, 0.1), cellsB);
  const auto idsA = t.exportedIds(TwoClumps::remote({{{-10.6, -3, -3}}}, 0.1), cellsA);
  const auto both = t.exportedIds(TwoClumps::remote({{{10.6, 3, 3}}, {{-10.6, -3, -3}}}, 0.1), cellsBoth);
  std::set<std::uint64_t> united = idsA;
  united.insert(idsB.begin(), idsB.end());
  EXPECT_EQ(both, united);
  EXPECT_EQ(t.coverage(cellsBoth, both), std::vector<int>(16, 1));
}

TEST(ExportSubtree, ManyGroupsAreJudgedAsTheirDistinctBoxesAre) {
  // 1500 groups, half of them at each clump: judged on several cores near the root (kParallelJudge), they must send
  // what the two distinct groups send, cell for cell.
  const TwoClumps t;
  std::vector<ExportedCell> cellsTwo, cellsMany;
  const auto two = t.exportedIds(TwoClumps::remote({{{10.6, 3, 3}}, {{-10.6, -3, -3}}}, 0.1), cellsTwo);
  std::vector<std::array<double, 3>> centres;
  for (int k = 0; k < 750; ++k) {
    centres.push_back({10.6, 3, 3});
    centres.push_back({-10.6, -3, -3});
  }
  const auto many = t.exportedIds(TwoClumps::remote(centres, 0.1), cellsMany);
  EXPECT_EQ(many, two);
  EXPECT_TRUE(sameSubtree(cellsMany, cellsTwo));
  EXPECT_EQ(t.coverage(cellsMany, many), std::vector<int>(16, 1));
}

TEST(ExportSubtree, TheRelativeTestOpensWhatThetaAloneAccepts) {
  const TwoClumps t;
  std::vector<ExportedCell> thetaAlone, strict;
  const auto loose = t.exportedIds(TwoClumps::remote({{{10.6, 3, 3}}}, 0.1), thetaAlone);
  // A tolerance far below any extended cell's truncation term M b^2 / d^4 (monopoles; clump A from the group:
  // 0.5 * 0.03 / 2e5 ~ 1e-7): only cells of one body (b_max = 0) may stand for their bodies.
  const auto ids = t.exportedIds(TwoClumps::remote({{{10.6, 3, 3}}}, 0.1, 1e-12), strict);
  EXPECT_GT(strict.size(), thetaAlone.size());
  for (const std::uint64_t id : loose) EXPECT_TRUE(ids.count(id)) << "body " << id;
  for (const ExportedCell& c : strict) {
    if (c.accepted) {
      EXPECT_EQ(c.bmax, 0.0) << "cell " << c.sourceCell;
    }
  }
  EXPECT_EQ(t.coverage(strict, ids), std::vector<int>(16, 1));
}

// The periodic short range (box 10, r_s 0.4, r_cut 1.8): a group beside the face x = L sees clump A across the face,
// 0.4 away at its nearest image, and never clump B (2.5 away): A is covered once, nothing that holds only B's bodies
// is sent. With open boundaries the same group gets B as well (nothing is skipped), and A from 9.4 away as one cell.
// A group beyond r_cut of both gets nothing at all.
TEST(ExportSubtree, PeriodicSendsOnlyWhatLiesWithinTheCutAtTheNearestImage) {
  const double L = 10.0;
  const TwoClumps t(L);
  const PeriodicSplit split{L, 0.4, 1.8};
  const auto holdsOnlyB = [&](const ExportedCell& c) {
    const BodyRange range = t.octree.bodies[c.sourceCell];
    for (std::uint32_t i = range.first; i < range.last; ++i) {
      if (t.bodies.id[i] < 8) return false;
    }
    return true;
  };
  std::vector<ExportedCell> cells;
  const auto ids = t.exportedIds(TwoClumps::remote({{{9.7, 1.8, 1.8}}}, 0.1), cells, split);
  std::vector<int> onlyA(16, 0);
  std::fill(onlyA.begin(), onlyA.begin() + 8, 1);
  EXPECT_EQ(t.coverage(cells, ids), onlyA);
  ASSERT_FALSE(cells.empty());
  for (const ExportedCell& c : cells) EXPECT_FALSE(holdsOnlyB(c)) << "cell " << c.sourceCell << " holds B alone";

  std::vector<ExportedCell> open;
  const auto openIds = t.exportedIds(TwoClumps::remote({{{9.7, 1.8, 1.8}}}, 0.1), open);
  EXPECT_EQ(t.coverage(open, openIds), std::vector<int>(16, 1));
  for (const std::uint64_t id : openIds) EXPECT_GE(id, 8u) << "A travelled body by body with open boundaries";

  std::vector<ExportedCell> far;
  EXPECT_TRUE(t.exportedIds(TwoClumps::remote({{{4.0, 6.0, 6.0}}}, 0.1), far, split).empty());
  EXPECT_TRUE(far.empty()) << "a group beyond r_cut of every body gets no cell";

  // Both groups: the union box (x from 3.9 to 9.8, not folded) lies 0.5 from A's centre of mass at A's nearest image,
  // so A is judged group by group; the far group adds nothing.
  std::vector<ExportedCell> both;
  const auto bothIds = t.exportedIds(TwoClumps::remote({{{9.7, 1.8, 1.8}}, {{4.0, 6.0, 6.0}}}, 0.1), both, split);
  EXPECT_EQ(bothIds, ids);
  EXPECT_EQ(t.coverage(both, bothIds), onlyA);
  for (const ExportedCell& c : both) EXPECT_FALSE(holdsOnlyB(c)) << "cell " << c.sourceCell << " holds B alone";
}

/// One side of a split box: its bodies sorted in the box's Morton order, their octree (the box as its root, nleaf 8,
/// quadrupoles at theta 0.5) and groups (ncrit 64) with relative tolerances from accelerations drawn over three
/// decades (alpha 1e-3), as a rank's tree and groups in a periodic run.
struct BoxSide {
  Particles bodies;
  tree::Octree octree;
  tree::Groups groups;

  BoxSide(const Particles& all, double L, bool (*mine)(double x, double L), std::uint64_t seed) {
    std::vector<std::uint32_t> taken;
    for (std::size_t i = 0; i < all.size(); ++i) {
      if (mine(all.x[i], L)) taken.push_back(static_cast<std::uint32_t>(i));
    }
    bodies.resize(taken.size());
    for (std::size_t k = 0; k < taken.size(); ++k) {
      const std::size_t i = taken[k];
      bodies.x[k] = all.x[i], bodies.y[k] = all.y[i], bodies.z[k] = all.z[i];
      bodies.mass[k] = all.mass[i];
      bodies.id[k] = all.id[i];
    }
    std::mt19937_64 engine(seed);
    std::uniform_real_distribution<double> exponent(-1.0, 2.0);
    for (std::size_t i = 0; i < bodies.size(); ++i) {
      bodies.ax[i] = std::pow(10.0, exponent(engine));
      bodies.ay[i] = bodies.az[i] = 0.0;
    }
    tree::Cube cube;
    cube.side = L;
    std::vector<std::uint64_t> keys;
    tree::computeMortonKeys(bodies.sources(), cube, keys);
    bodies.permute(tree::sortByKey(keys));
    tree::buildOctree(keys, cube, 8, octree);
    tree::computeMultipoles(bodies.sources(), 0.5, MultipoleOrder::quadrupole, octree);
    tree::makeGroups(octree, bodies.sources(), 64, groups);
    EXPECT_TRUE(tree::setRelativeTolerances(bodies, 1e-3, 1.0, groups));
  }
};

// The domain box's shortcut in a periodic box changes nothing: one side of a clumpy box (x >= 0.25 L) pruned for the
// groups of the other (a slab x < 0.25 L by the face x = 0, whose nearest images reach the first side across the face
// x = L) gives the same subtree, cell by cell and body by body, with the groups' own domain box as with a domain box
// over the whole cube, at which no cell is skipped or accepted (every group then decides alone).
TEST(ExportSubtree, PeriodicDomainBoxShortcutChangesNothing) {
  const double L = 1.5;
  Particles all = matcha::testing::clumpyBox(7, L, 512, 2048);
  wrapIntoBox(all, L);
  const PeriodicSplit split{L, 1.25 * L / 32.0, 4.5 * 1.25 * L / 32.0};
  const BoxSide sender(
      all, L, [](double x, double side) { return x >= 0.25 * side; }, 8);
  const BoxSide receiver(
      all, L, [](double x, double side) { return x < 0.25 * side; }, 9);
  ASSERT_GT(sender.bodies.size(), 0u);
  ASSERT_GT(receiver.groups.size(), 1u);
  const tree::Groups& theirs = receiver.groups;
  const RemoteGroups withDomain{domainOf(theirs), theirs.centre, theirs.halfExtent, theirs.relativeTolerance};
  RemoteGroups withoutShortcut = withDomain;
  for (int d = 0; d < 3; ++d) {
    withoutShortcut.domain.centre[d] = 0.5 * L;
    withoutShortcut.domain.halfExtent[d] = L;
  }
  for (const PeriodicSplit& periodic : {split, PeriodicSplit{}}) {
    SCOPED_TRACE(periodic.enabled() ? "periodic" : "open boundaries");
    std::vector<ExportedCell> cells, reference;
    std::vector<ExportedBody> bodies, referenceBodies;
    exportSubtree(sender.octree, sender.bodies.sources(), sender.bodies.id, withDomain, cells, bodies, periodic);
    exportSubtree(sender.octree, sender.bodies.sources(), sender.bodies.id, withoutShortcut, reference, referenceBodies,
                  periodic);
    ASSERT_TRUE(sameSubtree(cells, reference));
    ASSERT_EQ(bodies.size(), referenceBodies.size());
    for (std::size_t b = 0; b < bodies.size(); ++b) ASSERT_EQ(bodies[b].id, referenceBodies[b].id) << "body " << b;
    std::printf("[ export   ] %s: %zu of %zu cells and %zu of %zu bodies sent for %zu groups\n",
                periodic.enabled() ? "periodic" : "open boundaries", cells.size(), sender.octree.numCells(),
                bodies.size(), sender.bodies.size(), theirs.size());
    if (periodic.enabled()) {
      // The cut leaves most of the sender's side behind, and what goes reaches across the face x = L.
      EXPECT_LT(bodies.size(), sender.bodies.size() / 2);
      EXPECT_TRUE(std::any_of(bodies.begin(), bodies.end(), [&](const ExportedBody& b) { return b.x > 0.75 * L; }));
    }
  }
}

/// `bodies` sorted along the curve in their bounding cube, and their octree (nleaf 8, no multipoles yet).
tree::Octree sortIntoTree(Particles& bodies) {
  const tree::Cube cube = tree::computeBoundingCube(bodies.sources());
  std::vector<std::uint64_t> keys;
  tree::computeMortonKeys(bodies.sources(), cube, keys);
  bodies.permute(tree::sortByKey(keys));
  tree::Octree octree;
  tree::buildOctree(keys, cube, 8, octree);
  return octree;
}

/// The walk's double test of a cell for one group's box, as written in core/opening_criterion.hpp, with a branch per
/// condition: for a tree of balls the centre of mass comSpread nearer and b_max comSpread larger (tree::acceptCell's
/// reading), for exact positions at the box's squared distance itself.
bool definitionAccepts(const tree::Octree& t, std::uint32_t c, const double* centre, const double* half,
                       double tolerance) {
  const CellMultipoles& m = t.multipoles;
  const double d2 = distanceToBox2(m.x[c], m.y[c], m.z[c], centre[0], centre[1], centre[2], half[0], half[1], half[2]);
  const double spread = t.comSpread.empty() ? 0.0 : t.comSpread[c];
  if (spread == 0.0) {
    return passesOpeningCriterion(d2, t.openingRadius[c], m.mass[c], t.bmax[c], tolerance, m.hasQuadrupole);
  }
  if (!(d2 > t.openingRadius[c] * t.openingRadius[c])) return false;
  const double distance = std::max(0.0, std::sqrt(d2) - spread);
  return passesOpeningCriterion(distance * distance, 0.0, m.mass[c], t.bmax[c] + spread, tolerance, m.hasQuadrupole);
}

/// The union of the groups' walks, cell by cell: each cell that reaches some group, and whether none of the groups that
/// reach it opens it (open boundaries: a cell is sent with its parent's other children whenever its parent is opened).
void unionOfWalks(const tree::Octree& t, std::uint32_t cell, const std::vector<std::uint32_t>& reaching,
                  const tree::Groups& g, std::map<std::uint32_t, bool>& accepted, std::set<std::uint32_t>& bodies) {
  std::vector<std::uint32_t> opening;
  for (const std::uint32_t k : reaching) {
    if (!definitionAccepts(t, cell, &g.centre[3 * k], &g.halfExtent[3 * k], g.relativeTolerance[k])) {
      opening.push_back(k);
    }
  }
  accepted[cell] = opening.empty();
  if (opening.empty()) return;
  if (t.isLeaf(cell)) {
    for (std::uint32_t i = t.bodies[cell].first; i < t.bodies[cell].last; ++i) bodies.insert(i);
    return;
  }
  for (std::uint32_t k = 0; k < t.numChildren[cell]; ++k)
    unionOfWalks(t, t.firstChild[cell] + k, opening, g, accepted, bodies);
}

/// The export's verdicts, whichever way it computes them (on several cores near the root, without branches), are the
/// definition's: a Plummer sphere's quadrupole tree (20,000 bodies) pruned for the groups of a uniform cube of side 2
/// centred 4 length units away (over 1,024 groups: more than judge() takes on one core), a third without the relative
/// test and the rest with tolerances from 1e-6 to 0.1, sends every cell that the union of the groups' walks reaches
/// with that union's verdict and every body it reaches; again for the same tree as a tree of balls (comSpread > 0: the
/// distributed solver's kept lists). Fails if the export's test differs from the definition (a ball's b_max left
/// ungrown did).
TEST(ExportSubtree, EveryVerdictIsTheUnionOfTheGroupsWalks) {
  const std::uint64_t seed = testing::sharedSeed();
  SCOPED_TRACE(matcha::testing::seedTrace(seed));
  Particles bodies = matcha::testing::plummer(20000, seed);
  tree::Octree octree = sortIntoTree(bodies);
  Particles others = matcha::testing::uniformCube(30000, seed + 1);
  for (std::size_t i = 0; i < others.size(); ++i) others.x[i] += 4.0;
  const tree::Octree otherTree = sortIntoTree(others);
  tree::Groups groups;
  tree::makeGroups(otherTree, others.sources(), 20, groups);
  ASSERT_GT(groups.size(), 1024u);
  std::mt19937_64 random(seed);
  std::uniform_real_distribution<double> exponent(-6.0, -1.0);
  groups.relativeTolerance.resize(groups.size());
  for (std::size_t k = 0; k < groups.size(); ++k) {
    groups.relativeTolerance[k] = k % 3 == 0 ? kInf : std::pow(10.0, exponent(random));
  }
  const RemoteGroups remote{domainOf(groups), groups.centre, groups.halfExtent, groups.relativeTolerance};
  std::vector<std::uint32_t> all(groups.size());
  for (std::size_t k = 0; k < all.size(); ++k) all[k] = static_cast<std::uint32_t>(k);

  std::vector<float> radius(bodies.size());
  for (std::size_t i = 0; i < radius.size(); ++i) radius[i] = float(1e-2 * double(i % 7));
  for (const bool balls : {false, true}) {
    SCOPED_TRACE(balls ? "a tree of balls" : "exact positions");
    tree::computeMultipoles(bodies.sources(), 0.7, MultipoleOrder::quadrupole, octree, balls ? radius.data() : nullptr);
    std::vector<ExportedCell> cells;
    std::vector<ExportedBody> sent;
    exportSubtree(octree, bodies.sources(), bodies.id, remote, cells, sent);
    std::map<std::uint32_t, bool> accepted;
    std::set<std::uint32_t> reached;
    unionOfWalks(octree, 0, all, groups, accepted, reached);
    ASSERT_EQ(cells.size(), accepted.size());
    std::size_t numAccepted = 0;
    for (const ExportedCell& c : cells) {
      ASSERT_TRUE(accepted.count(c.sourceCell)) << "cell " << c.sourceCell << " sent, not reached";
      EXPECT_EQ(c.accepted == 1, accepted[c.sourceCell]) << "cell " << c.sourceCell;
      numAccepted += c.accepted;
    }
    // Both verdicts occur, hundreds of times, so that the comparison means something.
    EXPECT_GE(numAccepted, 100u);
    EXPECT_GE(cells.size() - numAccepted, 100u);
    std::set<std::uint64_t> sentIds, reachedIds;
    for (const ExportedBody& b : sent) sentIds.insert(b.id);
    for (const std::uint32_t i : reached) reachedIds.insert(bodies.id[i]);
    EXPECT_EQ(sentIds, reachedIds);
  }
}
}  // namespace
}  // namespace matcha::parallel
