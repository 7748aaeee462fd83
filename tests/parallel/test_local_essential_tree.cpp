// SPDX-License-Identifier: MIT
// Local essential trees: every local group's whole list (its walk of the local tree and of every received subtree)
// covers every body of the system exactly once, by mass and by id, and every cell a rank sent as accepted passes the
// opening criterion for each group of the receiver.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "matcha/core/opening_criterion.hpp"
#include "matcha/gpu/cpu_engine.hpp"
#include "matcha/parallel/distributed_tree_solver.hpp"
#include "matcha/tree/octree.hpp"
#include "mpi_testing.hpp"

namespace matcha::parallel {
namespace {

using testing::worldRank;
using testing::worldSize;

class LocalEssentialTreeTest : public ::testing::TestWithParam<testing::TreeCase> {};

TEST_P(LocalEssentialTreeTest, EveryGroupCoversEveryBodyOnce) {
  const testing::TreeCase c = GetParam();
  const std::uint64_t seed = testing::sharedSeed();
  SCOPED_TRACE(matcha::testing::seedTrace(seed));
  const std::size_t n = 6000;
  const Particles all = matcha::testing::clumpInHalo(n, seed);
  Particles local = testing::dealOut(all, worldRank(), worldSize());
  TreeParams params;
  params.theta = c.theta;
  params.multipole = c.order;
  params.alpha = c.alpha;
  params.ncrit = c.ncrit;
  gpu::CpuEngine engine;
  DistributedTreeSolver solver(engine, params, GravityParams{}, MPI_COMM_WORLD);
  solver.computeForces(local);
  EXPECT_EQ(solver.lastStats().estimatePass, c.alpha > 0.0);

  // Which ids each rank's cells hold: every rank's bodies in its tree order, and its cells' ranges over them.
  const tree::Octree& octree = solver.octree();
  std::vector<std::uint32_t> ranges;
  for (std::size_t cell = 0; cell < octree.numCells(); ++cell) {
    ranges.push_back(octree.bodies[cell].first);
    ranges.push_back(octree.bodies[cell].last);
  }
  const std::vector<std::uint64_t> allIds = testing::allGather(local.id, MPI_UINT64_T);
  const std::vector<std::uint32_t> allRanges = testing::allGather(ranges, MPI_UINT32_T);
  std::vector<std::size_t> idOffset(worldSize() + 1, 0), rangeOffset(worldSize() + 1, 0);
  {
    int count = static_cast<int>(local.size()), cells = static_cast<int>(ranges.size());
    std::vector<int> counts(worldSize()), cellCounts(worldSize());
    MPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD);
    MPI_Allgather(&cells, 1, MPI_INT, cellCounts.data(), 1, MPI_INT, MPI_COMM_WORLD);
    for (int r = 0; r < worldSize(); ++r) {
      idOffset[r + 1] = idOffset[r] + counts[r];
      rangeOffset[r + 1] = rangeOffset[r] + cellCounts[r];
    }
  }
  double totalMass = 0.0;
  for (std::size_t i = 0; i < n; ++i) totalMass += all.mass[i];

  const LocalEssentialTree& let = solver.localEssentialTree();
  const InteractionPlan& plan = solver.lastPlan();
  const tree::Groups& groups = solver.groups();
  const SourceView sources = let.sources();
  const CellMultipoles& cells = let.cells();
  ASSERT_EQ(plan.numGroups(), groups.size());
  ASSERT_EQ(let.numLocalBodies(), local.size());
  std::vector<int> covered(n);
  for (std::size_t g = 0; g < plan.numGroups(); ++g) {
    std::fill(covered.begin(), covered.end(), 0);
    double mass = 0.0;
    const auto cover = [&](int owner, std::uint32_t first, std::uint32_t last) {
      for (std::uint32_t b = first; b < last; ++b) ++covered[allIds[idOffset[owner] + b]];
    };
    for (std::uint32_t k = plan.cellListOffsets[g]; k < plan.cellListOffsets[g + 1]; ++k) {
      const std::uint32_t cell = plan.cellList[k];
      mass += cells.mass[cell];
      const bool remote = cell >= let.numLocalCells();
      const int owner = remote ? let.cellOwner(cell) : worldRank();
      const std::size_t ownerCell = remote ? let.cellSourceId(cell) : cell;
      const std::size_t at = rangeOffset[owner] + 2 * ownerCell;
      cover(owner, allRanges[at], allRanges[at + 1]);
    }
    for (std::uint32_t k = plan.bodyListOffsets[g]; k < plan.bodyListOffsets[g + 1]; ++k) {
      for (std::uint32_t b = plan.bodyList[k].first; b < plan.bodyList[k].last; ++b) {
        mass += sources.mass[b];
        ++covered[b < let.numLocalBodies() ? local.id[b] : let.bodyId(b)];
      }
    }
    EXPECT_NEAR(mass, totalMass, 1e-12 * totalMass) << "group " << g;
    std::size_t wrong = 0;
    for (std::size_t id = 0; id < n; ++id) wrong += covered[id] != 1 ? 1 : 0;
    EXPECT_EQ(wrong, 0u) << "group " << g << " on rank " << worldRank() << " covers some body not exactly once";
  }

  // Every received cell in a group's list passes the opening criterion for that group: the sender pruned its tree by
  // the receiver's groups' own tests (exportSubtree), and the receiver took what they accept.
  std::size_t remoteCellsChecked = 0, sentAccepted = 0;
  for (std::size_t g = 0; g < plan.numGroups(); ++g) {
    const double* centre = &groups.centre[3 * g];
    const double* half = &groups.halfExtent[3 * g];
    for (std::uint32_t k = plan.cellListOffsets[g]; k < plan.cellListOffsets[g + 1]; ++k) {
      const std::uint32_t cell = plan.cellList[k];
      if (cell < let.numLocalCells()) continue;
      const ExportedCell& sent = let.receivedCell(cell);
      const double d2 = distanceToBox2(sent.com[0], sent.com[1], sent.com[2], centre[0], centre[1], centre[2], half[0],
                                       half[1], half[2]);
      ASSERT_TRUE(passesOpeningCriterion(d2, sent.openingRadius, sent.mass, sent.bmax, groups.relativeTolerance[g],
                                         cells.hasQuadrupole))
          << "cell " << cell << " group " << g;
      ++remoteCellsChecked;
      sentAccepted += sent.accepted;
    }
  }
  const LetStats& stats = solver.lastStats().let;
  if (worldSize() == 1) {
    EXPECT_EQ(stats.cellsReceived + stats.bodiesReceived + stats.cellsSent + stats.bodiesSent, 0u);
  } else {
    EXPECT_GT(stats.cellsReceived, 0u);
  }
  if (worldRank() == 0) {
    std::printf(
        "[ LET      ] theta %.2f %s alpha %g: rank 0 sent %llu cells %llu bodies, received %llu cells %llu "
        "bodies; %zu remote list cells checked (%zu sent as accepted), %zu local bodies\n",
        c.theta, toString(c.order).c_str(), c.alpha, (unsigned long long)stats.cellsSent,
        (unsigned long long)stats.bodiesSent, (unsigned long long)stats.cellsReceived,
        (unsigned long long)stats.bodiesReceived, remoteCellsChecked, sentAccepted, local.size());
  }
}

// A refresh (the calls that keep their lists) sends the cells and bodies of the last exchange again, in its order,
// with the senders' multipoles and positions now: every received body is its owner's body of that id where it is now,
// every received cell its sender's cell as refitted, bit for bit; the local ones are the rank's own; and the received
// cells' pruning numbers (what buildPlan's walks test) stay as the exchange brought them.
TEST(LocalEssentialTreeRefresh, SendsTheExchangesCellsAndBodiesWhereTheyAreNow) {
  const std::uint64_t seed = testing::sharedSeed();
  SCOPED_TRACE(matcha::testing::seedTrace(seed));
  Particles local = testing::dealOut(matcha::testing::clumpInHalo(6000, seed), worldRank(), worldSize());
  TreeParams params;
  gpu::CpuEngine engine;
  DistributedTreeSolver solver(engine, params, GravityParams{}, MPI_COMM_WORLD);
  solver.computeForces(local);  // the bodies in their domains, in tree order, with a tree and groups
  tree::Octree octree = solver.octree();
  LocalEssentialTree let;
  let.exchange(octree, local.sources(), local.id, solver.groups(), MPI_COMM_WORLD);
  const std::vector<ExportedCell> before = [&] {
    std::vector<ExportedCell> cells;
    for (std::size_t c = let.numLocalCells(); c < let.cells().size(); ++c) cells.push_back(let.receivedCell(c));
    return cells;
  }();

  for (std::size_t i = 0; i < local.size(); ++i) {
    local.x[i] += 0.02 * local.vx[i];
    local.y[i] += 0.02 * local.vy[i];
    local.z[i] += 0.02 * local.vz[i];
  }
  tree::computeMultipoles(local.sources(), params.theta, params.multipole, octree);
  let.refresh(octree, local.sources(), MPI_COMM_WORLD);

  // Every rank's bodies by id and every rank's refitted cells, to look the received ones up.
  const Particles all = testing::gatherById(local);
  const CellMultipoles& m = octree.multipoles;
  const std::vector<double>* fields[5] = {&m.x, &m.y, &m.z, &m.mass, &m.qxx};
  std::vector<std::vector<double>> allFields;
  for (const std::vector<double>* field : fields) allFields.push_back(testing::allGather(*field, MPI_DOUBLE));
  std::vector<int> cellOffset(worldSize() + 1, 0);
  {
    const int count = static_cast<int>(octree.numCells());
    std::vector<int> counts(worldSize());
    MPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD);
    for (int r = 0; r < worldSize(); ++r) cellOffset[r + 1] = cellOffset[r] + counts[r];
  }

  const SourceView sources = let.sources();
  const CellMultipoles& cells = let.cells();
  std::size_t wrongBodies = 0, wrongCells = 0, movedCells = 0;
  for (std::size_t b = 0; b < sources.count; ++b) {
    const std::uint64_t id = b < let.numLocalBodies() ? local.id[b] : let.bodyId(b);
    wrongBodies += sources.x[b] == all.x[id] && sources.y[b] == all.y[id] && sources.z[b] == all.z[id] ? 0 : 1;
  }
  for (std::size_t c = 0; c < cells.size(); ++c) {
    const bool remote = c >= let.numLocalCells();
    const int owner = remote ? let.cellOwner(c) : worldRank();
    const std::size_t at = cellOffset[owner] + (remote ? let.cellSourceId(c) : c);
    const double now[5] = {cells.x[c], cells.y[c], cells.z[c], cells.mass[c], cells.qxx[c]};
    for (int k = 0; k < 5; ++k) wrongCells += now[k] == allFields[k][at] ? 0 : 1;
    if (remote) {
      const ExportedCell& kept = let.receivedCell(c);
      const ExportedCell& exchanged = before[c - let.numLocalCells()];
      EXPECT_EQ(kept.com[0], exchanged.com[0]) << "the walks' numbers must stay the exchange's";
      EXPECT_EQ(kept.openingRadius, exchanged.openingRadius);
      movedCells += cells.x[c] != exchanged.com[0] ? 1 : 0;
    }
  }
  EXPECT_EQ(wrongBodies, 0u) << "on rank " << worldRank();
  EXPECT_EQ(wrongCells, 0u) << "on rank " << worldRank();
  if (worldSize() > 1) {
    EXPECT_GT(let.stats().cellsReceived, 0u);
    EXPECT_EQ(let.stats().cellsReceived, before.size());
    EXPECT_GT(movedCells, 0u) << "the drift moved no received cell: the test would not see a stale one";
  }
}

INSTANTIATE_TEST_SUITE_P(Criteria, LocalEssentialTreeTest,
                         ::testing::Values(testing::TreeCase{0.5, MultipoleOrder::quadrupole, 1e-3, 256},
                                           testing::TreeCase{0.8, MultipoleOrder::monopole, 0.0, 64},
                                           testing::TreeCase{0.3, MultipoleOrder::quadrupole, 0.0, 32}));

}  // namespace
}  // namespace matcha::parallel
