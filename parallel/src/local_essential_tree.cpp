// SPDX-License-Identifier: MIT
#include "matcha/parallel/local_essential_tree.hpp"

#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "matcha/core/errors.hpp"
#include "matcha/core/opening_criterion.hpp"
#include "matcha/core/stopwatch.hpp"
#include "matcha/parallel/collective.hpp"

namespace matcha::parallel {

DomainBox domainOf(const tree::Groups& groups) {
  DomainBox box;
  box.tolerance = std::numeric_limits<double>::infinity();
  if (groups.size() == 0) return box;
  double lo[3], hi[3];
  for (int d = 0; d < 3; ++d) {
    lo[d] = std::numeric_limits<double>::infinity();
    hi[d] = -lo[d];
  }
  for (std::size_t g = 0; g < groups.size(); ++g) {
    for (int d = 0; d < 3; ++d) {
      lo[d] = std::min(lo[d], groups.centre[3 * g + d] - groups.halfExtent[3 * g + d]);
      hi[d] = std::max(hi[d], groups.centre[3 * g + d] + groups.halfExtent[3 * g + d]);
    }
    if (!groups.relativeTolerance.empty()) box.tolerance = std::min(box.tolerance, groups.relativeTolerance[g]);
  }
  for (int d = 0; d < 3; ++d) {
    box.centre[d] = 0.5 * (lo[d] + hi[d]);
    // Rounded outwards: the box must hold every group's box (exportSubtree's argument rests on it).
    const double half = 0.5 * (hi[d] - lo[d]);
    box.halfExtent[d] = std::max({half, hi[d] - box.centre[d], box.centre[d] - lo[d]});
    box.halfExtent[d] = std::nextafter(box.halfExtent[d], std::numeric_limits<double>::infinity());
  }
  box.empty = 0;
  return box;
}

void exportSubtree(const tree::Octree& tree, const SourceView& sortedBodies, std::span<const std::uint64_t> ids,
                   const DomainBox& box, std::vector<ExportedCell>& cells, std::vector<ExportedBody>& bodies) {
  cells.clear();
  bodies.clear();
  if (tree.numCells() == 0) return;
  MATCHA_ASSERT(tree.comSpread.empty(), "local essential trees need a tree of exact positions");
  const CellMultipoles& m = tree.multipoles;
  std::vector<std::uint32_t> localCell;  // the tree's id of each exported cell
  const auto add = [&](std::uint32_t cell) {
    ExportedCell out{};
    out.com[0] = m.x[cell];
    out.com[1] = m.y[cell];
    out.com[2] = m.z[cell];
    out.mass = m.mass[cell];
    if (m.hasQuadrupole) {
      const double q[6] = {m.qxx[cell], m.qyy[cell], m.qzz[cell], m.qxy[cell], m.qxz[cell], m.qyz[cell]};
      std::copy(q, q + 6, out.quadrupole);
      out.trace = m.trace[cell];
    }
    out.openingRadius = tree.openingRadius[cell];
    out.bmax = tree.bmax[cell];
    out.sourceCell = cell;
    cells.push_back(out);
    localCell.push_back(cell);
  };
  add(0);
  // Breadth first: the cells exported so far are visited in order, so each opened cell's children are appended as
  // one consecutive run.
  for (std::size_t k = 0; k < cells.size(); ++k) {
    const std::uint32_t cell = localCell[k];
    const double distance2 =
        distanceToBox2(cells[k].com[0], cells[k].com[1], cells[k].com[2], box.centre[0], box.centre[1], box.centre[2],
                       box.halfExtent[0], box.halfExtent[1], box.halfExtent[2]);
    if (passesOpeningCriterion(distance2, tree.openingRadius[cell], m.mass[cell], tree.bmax[cell], box.tolerance,
                               m.hasQuadrupole)) {
      cells[k].accepted = 1;
    } else if (tree.isLeaf(cell)) {
      const BodyRange range = tree.bodies[cell];
      cells[k].firstBody = static_cast<std::uint32_t>(bodies.size());
      for (std::uint32_t i = range.first; i < range.last; ++i) {
        bodies.push_back({sortedBodies.x[i], sortedBodies.y[i], sortedBodies.z[i], sortedBodies.mass[i], ids[i]});
      }
      cells[k].lastBody = static_cast<std::uint32_t>(bodies.size());
    } else {
      cells[k].firstChild = static_cast<std::uint32_t>(cells.size());
      cells[k].numChildren = tree.numChildren[cell];
      for (std::uint32_t c = 0; c < tree.numChildren[cell]; ++c) add(tree.firstChild[cell] + c);
    }
    MATCHA_ASSERT(cells.size() < (std::size_t{1} << 32) && bodies.size() < (std::size_t{1} << 32),
                  "an exported subtree exceeds 32-bit indices");
  }
}

namespace {

/// An MPI datatype of `bytes` contiguous bytes (one ExportedCell or ExportedBody), so that counts stay counts of
/// records, not of bytes, within int range. Freed by its destructor.
class RecordType {
 public:
  explicit RecordType(std::size_t bytes) {
    MPI_Type_contiguous(static_cast<int>(bytes), MPI_BYTE, &type_);
    MPI_Type_commit(&type_);
  }
  ~RecordType() { MPI_Type_free(&type_); }
  RecordType(const RecordType&) = delete;
  RecordType& operator=(const RecordType&) = delete;
  MPI_Datatype get() const { return type_; }

 private:
  MPI_Datatype type_{};
};

/// Exchanges per-destination blocks of records: `send[r]` goes to rank r; the result holds rank 0's records for this
/// rank, then rank 1's, ..., and `offsets` where each begins (numRanks + 1 entries).
template <class Record>
std::vector<Record> exchangeBlocks(const std::vector<std::vector<Record>>& send, std::vector<int>& offsets,
                                   MPI_Comm comm) {
  const int numRanks = static_cast<int>(send.size());
  std::vector<int> sendCounts(numRanks), receiveCounts(numRanks), sendOffsets(numRanks + 1, 0);
  for (int r = 0; r < numRanks; ++r) {
    MATCHA_ASSERT(send[r].size() < (std::size_t{1} << 31), "an exported subtree exceeds an MPI count");
    sendCounts[r] = static_cast<int>(send[r].size());
    sendOffsets[r + 1] = sendOffsets[r] + sendCounts[r];
  }
  MPI_Alltoall(sendCounts.data(), 1, MPI_INT, receiveCounts.data(), 1, MPI_INT, comm);
  offsets.assign(numRanks + 1, 0);
  for (int r = 0; r < numRanks; ++r) offsets[r + 1] = offsets[r] + receiveCounts[r];
  std::vector<Record> packed(static_cast<std::size_t>(sendOffsets[numRanks]));
  for (int r = 0; r < numRanks; ++r) std::copy(send[r].begin(), send[r].end(), packed.begin() + sendOffsets[r]);
  std::vector<Record> received(static_cast<std::size_t>(offsets[numRanks]));
  const RecordType type(sizeof(Record));
  MPI_Alltoallv(packed.data(), sendCounts.data(), sendOffsets.data(), type.get(), received.data(), receiveCounts.data(),
                offsets.data(), type.get(), comm);
  return received;
}

}  // namespace

void LocalEssentialTree::exchange(const tree::Octree& tree, const SourceView& sortedBodies,
                                  std::span<const std::uint64_t> ids, const tree::Groups& groups, MPI_Comm comm) {
  stats_ = LetStats{};
  const int rank = rankOf(comm);
  const int numRanks = numRanksOf(comm);
  Stopwatch clock;
  std::vector<DomainBox> boxes(numRanks);
  const DomainBox mine = domainOf(groups);
  MPI_Datatype boxType;
  MPI_Type_contiguous(static_cast<int>(sizeof(DomainBox)), MPI_BYTE, &boxType);
  MPI_Type_commit(&boxType);
  MPI_Allgather(&mine, 1, boxType, boxes.data(), 1, boxType, comm);
  MPI_Type_free(&boxType);
  stats_.communicationSeconds += clock.seconds();

  clock.restart();
  std::vector<std::vector<ExportedCell>> sendCells(numRanks);
  std::vector<std::vector<ExportedBody>> sendBodies(numRanks);
  for (int r = 0; r < numRanks; ++r) {
    if (r == rank || boxes[r].empty) continue;
    exportSubtree(tree, sortedBodies, ids, boxes[r], sendCells[r], sendBodies[r]);
    stats_.cellsSent += sendCells[r].size();
    stats_.bodiesSent += sendBodies[r].size();
  }
  stats_.buildSeconds += clock.seconds();

  clock.restart();
  std::vector<int> cellOffsets, bodyOffsets;
  received_ = exchangeBlocks(sendCells, cellOffsets, comm);
  const std::vector<ExportedBody> bodies = exchangeBlocks(sendBodies, bodyOffsets, comm);
  stats_.communicationSeconds += clock.seconds();
  stats_.cellsReceived = received_.size();
  stats_.bodiesReceived = bodies.size();

  // Sources: the local bodies, then the received ones; cells: the local tree's, then the received ones, with each
  // subtree's child and body indices moved to where its cells and bodies now lie.
  numLocalBodies_ = sortedBodies.count;
  numLocalCells_ = tree.numCells();
  const std::size_t numSources = numLocalBodies_ + bodies.size();
  MATCHA_ASSERT(numSources < (std::size_t{1} << 32) && numLocalCells_ + received_.size() < (std::size_t{1} << 32),
                "a local essential tree exceeds 32-bit indices");
  x_.assign(sortedBodies.x, sortedBodies.x + numLocalBodies_);
  y_.assign(sortedBodies.y, sortedBodies.y + numLocalBodies_);
  z_.assign(sortedBodies.z, sortedBodies.z + numLocalBodies_);
  mass_.assign(sortedBodies.mass, sortedBodies.mass + numLocalBodies_);
  receivedIds_.resize(bodies.size());
  for (std::size_t b = 0; b < bodies.size(); ++b) {
    x_.push_back(bodies[b].x);
    y_.push_back(bodies[b].y);
    z_.push_back(bodies[b].z);
    mass_.push_back(bodies[b].mass);
    receivedIds_[b] = bodies[b].id;
  }
  const CellMultipoles& local = tree.multipoles;
  const bool quadrupole = numLocalCells_ > 0 ? local.hasQuadrupole : false;
  bool anyQuadrupole = quadrupole;
  MPI_Allreduce(MPI_IN_PLACE, &anyQuadrupole, 1, MPI_CXX_BOOL, MPI_LOR, comm);
  cells_ = local;
  if (numLocalCells_ == 0) cells_.resize(0, anyQuadrupole);
  const std::size_t numCells = numLocalCells_ + received_.size();
  cells_.resize(numCells, anyQuadrupole);
  cellOwner_.resize(received_.size());
  subtreeRoots_.clear();
  for (int from = 0; from < numRanks; ++from) {
    if (cellOffsets[from] < cellOffsets[from + 1]) {
      subtreeRoots_.push_back(static_cast<std::uint32_t>(numLocalCells_ + cellOffsets[from]));
    }
    for (int k = cellOffsets[from]; k < cellOffsets[from + 1]; ++k) {
      ExportedCell& cell = received_[k];
      cellOwner_[k] = from;
      if (cell.numChildren > 0) cell.firstChild += static_cast<std::uint32_t>(numLocalCells_ + cellOffsets[from]);
      const auto bodyShift = static_cast<std::uint32_t>(numLocalBodies_ + bodyOffsets[from]);
      cell.firstBody += bodyShift;
      cell.lastBody += bodyShift;
      const std::size_t c = numLocalCells_ + k;
      cells_.x[c] = cell.com[0];
      cells_.y[c] = cell.com[1];
      cells_.z[c] = cell.com[2];
      cells_.mass[c] = cell.mass;
      if (anyQuadrupole) {
        cells_.qxx[c] = cell.quadrupole[0];
        cells_.qyy[c] = cell.quadrupole[1];
        cells_.qzz[c] = cell.quadrupole[2];
        cells_.qxy[c] = cell.quadrupole[3];
        cells_.qxz[c] = cell.quadrupole[4];
        cells_.qyz[c] = cell.quadrupole[5];
        cells_.trace[c] = cell.trace;
      }
    }
  }
}

void LocalEssentialTree::buildPlan(const tree::Groups& groups, const InteractionPlan& localPlan,
                                   InteractionPlan& plan) {
  const Stopwatch clock;
  const std::size_t numGroups = groups.size();
  MATCHA_ASSERT(localPlan.numGroups() == numGroups, "the local plan must hold every group, in order");
  std::vector<std::vector<std::uint32_t>> remoteCells(numGroups);
  std::vector<std::vector<BodyRange>> remoteRanges(numGroups);
  tbb::enumerable_thread_specific<std::vector<std::uint32_t>> stacks;
  tbb::parallel_for(std::size_t{0}, numGroups, [&](std::size_t g) {
    std::vector<std::uint32_t>& stack = stacks.local();
    std::vector<std::uint32_t>& cellList = remoteCells[g];
    std::vector<BodyRange>& ranges = remoteRanges[g];
    const double* centre = &groups.centre[3 * g];
    const double* half = &groups.halfExtent[3 * g];
    const double tolerance =
        groups.relativeTolerance.empty() ? std::numeric_limits<double>::infinity() : groups.relativeTolerance[g];
    for (const std::uint32_t root : subtreeRoots_) {
      stack.assign(1, root);
      while (!stack.empty()) {
        const std::uint32_t c = stack.back();
        stack.pop_back();
        const ExportedCell& cell = received_[c - numLocalCells_];
        // The sender's test for this rank's whole domain holds for this group (exportSubtree says why); any other
        // cell gets the walk's test (tree/walk.hpp: acceptCell) for the group's own box and tolerance.
        bool accept = cell.accepted != 0;
        if (!accept) {
          const double distance2 = distanceToBox2(cell.com[0], cell.com[1], cell.com[2], centre[0], centre[1],
                                                  centre[2], half[0], half[1], half[2]);
          accept = passesOpeningCriterion(distance2, cell.openingRadius, cell.mass, cell.bmax, tolerance,
                                          cells_.hasQuadrupole);
        }
        if (accept) {
          cellList.push_back(c);
        } else if (cell.numChildren == 0) {
          if (cell.lastBody == cell.firstBody) continue;
          if (!ranges.empty() && ranges.back().last == cell.firstBody) {
            ranges.back().last = cell.lastBody;
          } else {
            ranges.push_back({cell.firstBody, cell.lastBody});
          }
        } else {
          for (std::uint32_t k = cell.numChildren; k-- > 0;) stack.push_back(cell.firstChild + k);
        }
      }
    }
  });

  plan.clear();
  plan.groups = localPlan.groups;
  plan.groupCentres = localPlan.groupCentres;
  plan.groupIds = localPlan.groupIds;
  plan.listBodyCounts.resize(numGroups);
  for (std::size_t g = 0; g < numGroups; ++g) {
    std::uint64_t listBodies = localPlan.numListBodies(g);
    plan.cellList.insert(plan.cellList.end(), localPlan.cellList.begin() + localPlan.cellListOffsets[g],
                         localPlan.cellList.begin() + localPlan.cellListOffsets[g + 1]);
    plan.cellList.insert(plan.cellList.end(), remoteCells[g].begin(), remoteCells[g].end());
    plan.bodyList.insert(plan.bodyList.end(), localPlan.bodyList.begin() + localPlan.bodyListOffsets[g],
                         localPlan.bodyList.begin() + localPlan.bodyListOffsets[g + 1]);
    for (const BodyRange& range : remoteRanges[g]) listBodies += range.size();
    plan.bodyList.insert(plan.bodyList.end(), remoteRanges[g].begin(), remoteRanges[g].end());
    MATCHA_ASSERT(plan.cellList.size() < (std::size_t{1} << 32) && plan.bodyList.size() < (std::size_t{1} << 32),
                  "interaction lists exceed 32-bit offsets");
    plan.cellListOffsets.push_back(static_cast<std::uint32_t>(plan.cellList.size()));
    plan.bodyListOffsets.push_back(static_cast<std::uint32_t>(plan.bodyList.size()));
    plan.listBodyCounts[g] = static_cast<std::uint32_t>(listBodies);
  }
  stats_.walkSeconds = clock.seconds();
}

}  // namespace matcha::parallel
