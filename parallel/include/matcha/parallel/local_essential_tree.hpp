// SPDX-License-Identifier: MIT
// Local essential trees (Salmon & Warren 1994; issue 19): each rank sends every other rank the part of its tree that
// the other's groups may need, pruned by the same opening criterion the walk uses, so that each group's interaction
// list over all ranks covers every body of the system exactly once, as it would on one rank.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <span>
#include <vector>

#include "matcha/core/interaction_plan.hpp"
#include "matcha/core/params.hpp"
#include "matcha/core/particles.hpp"
#include "matcha/tree/groups.hpp"
#include "matcha/tree/octree.hpp"

namespace matcha::parallel {

/// The box around all of a rank's groups, and the smallest relative tolerance among them (+inf where the relative test
/// is off). `empty`: the rank has no groups (no bodies).
struct DomainBox {
  double centre[3] = {0, 0, 0};
  double halfExtent[3] = {0, 0, 0};
  double tolerance = 0.0;
  bool empty = true;
};

/// The box and tolerance of `groups` (their boxes' union, rounded outwards; Groups::relativeTolerance's minimum, +inf
/// when empty).
DomainBox domainOf(const tree::Groups& groups);

/// What another rank's tree is pruned against: that rank's groups (their boxes and relative tolerances, exactly as its
/// walk uses them) and the box around them all.
struct RemoteGroups {
  DomainBox domain;
  std::span<const double> centre;      ///< 3 per group
  std::span<const double> halfExtent;  ///< 3 per group
  std::span<const double> tolerance;   ///< 1 per group (+inf: the relative test off)
  std::size_t size() const { return tolerance.size(); }
};

/// One cell of a pruned subtree as it travels (136 bytes, no padding: it goes through MPI as bytes). Child and body
/// indices are within the sender's subtree for that receiver (cells and bodies numbered from 0).
struct ExportedCell {
  double com[3];
  double mass;
  double quadrupole[6];  ///< qxx, qyy, qzz, qxy, qxz, qyz (0 for monopole trees)
  double trace;
  double openingRadius;
  double bmax;
  /// For a tree of balls (tree::Octree::comSpread; open boundaries only): how far the centre of mass may move while
  /// the bodies stay within their balls; 0 for a tree of exact positions. The walk's test takes it as
  /// tree::acceptCell does.
  double comSpread;
  std::uint32_t firstChild;   ///< an opened cell's first child (its children are consecutive)
  std::uint32_t numChildren;  ///< 0: an accepted cell, or an opened leaf
  std::uint32_t firstBody;    ///< an opened leaf's bodies [firstBody, lastBody); empty otherwise
  std::uint32_t lastBody;
  std::uint32_t sourceCell;  ///< the cell's id in the sender's tree (for the tests' coverage check)
  /// 1: no receiving group that reaches the cell opens it: each accepts it (the receiver takes it without a test) or,
  /// in a periodic box, skips it; 0: some group opens it, so its children (or a leaf's bodies) came with it
  std::uint32_t accepted;
};

/// One body of a pruned subtree: where it is, its mass, and its id (the tests' coverage check).
struct ExportedBody {
  double x, y, z, mass;
  std::uint64_t id;
};

/// The ids of a tree's bodies as the export reads them: ids[i] for the tree's body i or, where `order` is given, the
/// ids of bodies that were sorted into the tree's order while their ids stayed behind, ids[order[i]]
/// (DistributedTreeSolver moves the ids with the velocities while the engine runs: BodyPermuter::permuteMotion).
struct BodyIds {
  BodyIds(std::span<const std::uint64_t> inTreeOrder) : ids(inTreeOrder) {}     // NOLINT: a span is the common case
  BodyIds(const std::vector<std::uint64_t>& inTreeOrder) : ids(inTreeOrder) {}  // NOLINT: as is a body array
  BodyIds(std::span<const std::uint64_t> behind, std::span<const std::uint32_t> treeOrder)
      : ids(behind), order(treeOrder) {}
  std::uint64_t operator[](std::size_t i) const { return order.empty() ? ids[i] : ids[order[i]]; }

  std::span<const std::uint64_t> ids;
  std::span<const std::uint32_t> order;
};

/// Appends to `cells` and `bodies` (both cleared first) the subtree of `tree` that the groups `remote` of another rank
/// need: the union of their walks of `tree`, each with the walk's double criterion (core/opening_criterion.hpp, as
/// tree/walk.hpp's acceptCell), so that the receiver's walk of the subtree (LocalEssentialTree::buildPlan) makes the
/// same decisions on the same numbers and never reaches a cell that was not sent. A cell that every group reaching it
/// accepts goes as accepted, without children; a cell that some group opens goes opened, with all its children
/// (consecutive), and an opened leaf with its bodies (from `sortedBodies`, the tree's order, and `ids`). `tree` needs
/// computeMultipoles; with open boundaries it may be a tree of balls (its comSpread travels with each cell, and with
/// the groups' boxes of balls the lists then hold wherever in its ball each body is: the lists a distributed solver
/// keeps over several calls), in a periodic box it must be over exact positions. Allocates.
///
/// A cell that passes the criterion for the box around all the groups is accepted for every group without a test per
/// group. Why that holds: the theta test asks that the group's box lie outside the sphere of radius r_open about the
/// cell's centre of mass, i.e. that the squared distance d^2 from the centre of mass to the nearest point of the box
/// exceed r_open^2, and the relative test that M b_max^p <= tolerance d^(p+2). Both hold the more for a larger d and a
/// larger tolerance. A group's box lies inside the domain's box, so its nearest point is at least as far as the
/// domain's, and its tolerance is at least the domain's smallest.
///
/// With `periodic` enabled (the short range of a periodic box: `tree`'s root is the cube [0, L)^3) each group's test
/// is tree::visitPeriodic's, in double: a cell that every group reaching it skips (all its bodies at least r_cut from
/// the group's box at its nearest image) is not sent at all, one that none opens goes alone, another with the children
/// that some group opening it does not skip. The domain box's shortcut holds there too, for skips as for accepts: per
/// axis the nearest-image distance to a box is the distance to the union of its images, and the images of the domain
/// box hold those of each group's box, so the nearest-image distance to the domain box is at most each group's. (The
/// domain box is not folded: a rank whose groups lie near two opposite faces gets a box across the cube, and the
/// shortcut rarely applies.) Its test takes the domain box widened by 8 ulp of L (with open boundaries, of the largest
/// coordinate of the tree and the box), so that the rounding of the two distances cannot reverse that order.
void exportSubtree(const tree::Octree& tree, const SourceView& sortedBodies, BodyIds ids, const RemoteGroups& remote,
                   std::vector<ExportedCell>& cells, std::vector<ExportedBody>& bodies,
                   const PeriodicSplit& periodic = PeriodicSplit{});

/// Sizes of one rank's exchange, for the solver's report and the tests.
struct LetStats {
  std::uint64_t cellsSent = 0, bodiesSent = 0;
  std::uint64_t cellsReceived = 0, bodiesReceived = 0;
  std::uint64_t remoteGroups = 0;     ///< the other ranks' groups this rank pruned its tree for
  double buildSeconds = 0.0;          ///< pruning the local tree for the other ranks (exportSubtree)
  double communicationSeconds = 0.0;  ///< the group boxes' allgather and the subtrees' all-to-all exchange
  double walkSeconds = 0.0;           ///< walking the received subtrees for the local groups (buildPlan, every batch)
  /// After the communication: the received bodies and cells put behind the local ones (those were placed on the
  /// rank's other cores during the exchange; the wait for them included).
  double assemblySeconds = 0.0;
};

/// The local essential tree of one rank: its own tree plus the subtrees received from every other rank, as one set of
/// sources and cells for the engine. Sources are the rank's bodies (sorted, as in its tree) followed by the received
/// bodies; cells are the local tree's cells followed by the received cells.
class LocalEssentialTree {
 public:
  /// Exchanges the pruned subtrees: every rank's group boxes and tolerances go to every rank (MPI_Allgatherv), each
  /// rank prunes its tree for every other rank's groups (exportSubtree) and the subtrees go out with MPI_Alltoallv,
  /// counts first; the local bodies and cells are copied to the front of sources() and cells() meanwhile, as a task
  /// on the rank's cores. `groups` must hold their relative tolerances (one per group) as the walk will use them.
  /// `tree`, `sortedBodies`, `ids` and `groups` are this rank's (empty for a rank with no bodies; `tree` then has no
  /// cells). With `periodic` enabled, the periodic short range's pruning (exportSubtree), and buildPlan's walk the
  /// same. Collective; allocates.
  void exchange(const tree::Octree& tree, const SourceView& sortedBodies, BodyIds ids, const tree::Groups& groups,
                MPI_Comm comm, const PeriodicSplit& periodic = PeriodicSplit{});

  /// Each local group's whole list: its list in `localPlan` (the walk of the local tree for groups 0 .. size, in order,
  /// as tree::PlanBuilder makes it), then its walk of each received subtree with the double criterion (tree/walk.hpp:
  /// acceptCell), which the sender ran for this group too (exportSubtree): a cell sent as accepted is taken as it is,
  /// another is tested for the group's box and tolerance, and opened (its children, or a leaf's bodies) when it
  /// fails. In a periodic box (exchange's `periodic`) the test is tree::visitPeriodic's: a cell the group skips is
  /// left out, one sent as accepted is taken unless skipped. Indices are into sources() and cells(). Overwrites
  /// `plan`. Parallel over groups.
  void buildPlan(const tree::Groups& groups, const InteractionPlan& localPlan, InteractionPlan& plan);
  /// buildPlan for groups [first, last) only, into `plan` as its groups 0 .. last - first: one batch of a call whose
  /// batches the engine evaluates while the next is built (NearFieldEngine::evaluatePlanBatch). The batches of
  /// consecutive ranges, joined (appendGroups), are the whole call's buildPlan. Each call's walk time adds to
  /// stats().walkSeconds.
  void buildPlan(const tree::Groups& groups, const InteractionPlan& localPlan, std::size_t first, std::size_t last,
                 InteractionPlan& plan);

  /// For a call that keeps the last exchange's lists (the same local tree, its multipoles computed anew for the
  /// bodies' current positions; the same bodies in the same order): sends every cell and body the last exchange sent
  /// again, in the same order, with its current multipoles or position (11 and 3 doubles, against 17 and 5 for a
  /// whole exchange, and no pruning), and overwrites sources() and cells() with them, the local ones from `tree` and
  /// `sortedBodies`. The plans of buildPlan then index the same cells and bodies at their new positions; buildPlan's
  /// walks still test the numbers the senders pruned with (receivedCell), so that a call may exchange for balls
  /// about predicted positions, refresh for the positions now, and then walk. Open
  /// boundaries only (a periodic exchange's cells and bodies are at nearest images of the groups they were pruned
  /// for). stats() gives the update's sizes and times. Collective; every rank must call it after the same exchange.
  void refresh(const tree::Octree& tree, const SourceView& sortedBodies, MPI_Comm comm);

  /// The sources and cells the plan of buildPlan indexes. Valid until the next exchange.
  SourceView sources() const { return {x_.data(), y_.data(), z_.data(), mass_.data(), x_.size()}; }
  const CellMultipoles& cells() const { return cells_; }

  std::size_t numLocalBodies() const { return numLocalBodies_; }
  std::size_t numLocalCells() const { return numLocalCells_; }
  /// For a received cell c (cells() index c >= numLocalCells()): the rank that sent it and its id in that rank's tree.
  int cellOwner(std::size_t c) const { return cellOwner_[c - numLocalCells_]; }
  std::uint32_t cellSourceId(std::size_t c) const { return received_[c - numLocalCells_].sourceCell; }
  /// Received cell c as it arrived at the exchange (child and body indices made absolute, into cells() and sources();
  /// refresh leaves it as it was).
  const ExportedCell& receivedCell(std::size_t c) const { return received_[c - numLocalCells_]; }
  /// The id of received body b (sources() index b >= numLocalBodies()).
  std::uint64_t bodyId(std::size_t b) const { return receivedIds_[b - numLocalBodies_]; }

  const LetStats& stats() const { return stats_; }

 private:
  /// sources()' and cells()' front: the local bodies and the local tree's multipoles (exchange's task beside the
  /// communication), with room behind them for as many received ones as the last exchange's.
  void placeLocal(const tree::Octree& tree, const SourceView& sortedBodies);

  std::size_t numLocalBodies_ = 0, numLocalCells_ = 0;
  std::size_t lastReceivedBodies_ = 0, lastReceivedCells_ = 0;
  std::vector<double> x_, y_, z_, mass_;
  CellMultipoles cells_;
  std::vector<ExportedCell> received_;  ///< child and body indices made absolute (into cells() and sources())
  std::vector<int> cellOwner_;
  std::vector<std::uint64_t> receivedIds_;
  std::vector<std::uint32_t> subtreeRoots_;  ///< cells() index of each received subtree's root
  /// exchange's buffers, kept from call to call for their room: the subtree for each rank, the blocks packed for the
  /// all-to-all, and the bodies received (received_ holds the cells)
  std::vector<std::vector<ExportedCell>> sendCells_;
  std::vector<std::vector<ExportedBody>> sendBodies_;
  std::vector<ExportedCell> packedCells_;
  std::vector<ExportedBody> packedBodies_, receivedBodies_;
  /// refresh()'s records and buffers: what changes of a sent cell (its multipoles) and of a sent body (its position)
  struct CellUpdate {
    double com[3];
    double mass;
    double quadrupole[6];
    double trace;
  };
  struct BodyUpdate {
    double x, y, z;
  };
  std::vector<std::vector<CellUpdate>> sendCellUpdates_;
  std::vector<std::vector<BodyUpdate>> sendBodyUpdates_;
  std::vector<CellUpdate> packedCellUpdates_, receivedCellUpdates_;
  std::vector<BodyUpdate> packedBodyUpdates_, receivedBodyUpdates_;
  bool exchanged_ = false;  ///< an exchange was made (refresh needs one)
  /// buildPlan's remote lists of a batch's groups (cell ids, body ranges), kept from call to call for their room
  std::vector<std::vector<std::uint32_t>> remoteCells_;
  std::vector<std::vector<BodyRange>> remoteRanges_;
  PeriodicSplit periodic_;  ///< the last exchange's (disabled: open boundaries)
  LetStats stats_;
};

}  // namespace matcha::parallel
