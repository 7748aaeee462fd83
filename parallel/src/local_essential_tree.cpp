// SPDX-License-Identifier: MIT
#include "matcha/parallel/local_essential_tree.hpp"

#include <tbb/blocked_range.h>
#include <tbb/blocked_range2d.h>
#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>
#include <tbb/task_group.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "matcha/core/errors.hpp"
#include "matcha/core/opening_criterion.hpp"
#include "matcha/core/stopwatch.hpp"
#include "matcha/parallel/collective.hpp"
#include "matcha/tree/periodic_tree_solver.hpp"

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
  box.empty = false;
  return box;
}

namespace {

/// The walk's double criterion for one cell (centre of mass `com`, opening radius, mass, b_max, comSpread) against
/// group boxes, the sender's pruning and the receiver's walk alike (so that they make the same decisions on the same
/// numbers): core/opening_criterion.hpp's distanceToBox2 and passesOpeningCriterion, which for a tree of balls
/// (spread > 0) take the centre of mass `spread` nearer and the bodies `spread` farther out, as tree::acceptCell does.
/// Each verdict without a branch on it (the conditions combined with & and |): near the root the pruning meets
/// hundreds of groups a cell, with verdicts near a coin toss for the branch predictor.
struct OpenBoundaryTest {
  double com[3];
  double openingRadius, mass, bmax, spread;
  bool quadrupole;

  bool accepts(const double* centre, const double* half, double tolerance) const {
    const double distance2 =
        distanceToBox2(com[0], com[1], com[2], centre[0], centre[1], centre[2], half[0], half[1], half[2]);
    const bool outside = distance2 > openingRadius * openingRadius;
    // The relative test: at the box's distance for exact positions; for a tree of balls at the distance less the
    // spread, with b_max grown by it, and never at distance 0.
    double d2 = distance2, b = bmax;
    bool apart = true;
    if (spread != 0.0) {
      const double distance = std::max(0.0, std::sqrt(distance2) - spread);
      d2 = distance * distance;
      b = bmax + spread;
      apart = d2 > 0.0;
    }
    const double b2 = b * b;
    const bool small =
        quadrupole ? mass * b2 * b <= tolerance * d2 * d2 * std::sqrt(d2) : mass * b2 <= tolerance * d2 * d2;
    return outside & apart & (std::isinf(tolerance) | small);
  }
};

/// OpenBoundaryTest of one cell for one box.
bool accepts(const double* com, double openingRadius, double mass, double bmax, double spread, bool quadrupole,
             const double* centre, const double* half, double tolerance) {
  return OpenBoundaryTest{{com[0], com[1], com[2]}, openingRadius, mass, bmax, spread, quadrupole}.accepts(centre, half,
                                                                                                           tolerance);
}

/// What a group makes of a cell: the periodic short range's three answers (tree::visitPeriodic), of which open
/// boundaries give accept or open.
using Visit = tree::PeriodicVisit;

/// Groups from which judge() tests a cell against them on several cores.
constexpr std::size_t kParallelJudge = 1024;
/// Groups per block of such a judging.
constexpr std::size_t kJudgeBlock = 256;

/// What all the groups that reach a cell make of it together.
enum class Reach {
  skippedByAll,   ///< periodic: every one skips it, so it is not sent
  acceptedByAll,  ///< none opens it: it goes alone
  openedBySome,   ///< its children, or a leaf's bodies, go with it
};

/// exportSubtree's depth-first pass.
class SubtreeExporter {
 public:
  SubtreeExporter(const tree::Octree& tree, const SourceView& sortedBodies, BodyIds ids, const RemoteGroups& remote,
                  const PeriodicSplit& periodic, std::vector<ExportedCell>& cells, std::vector<ExportedBody>& bodies)
      : tree_(tree),
        sorted_(sortedBodies),
        ids_(ids),
        remote_(remote),
        periodic_(periodic),
        cells_(cells),
        bodies_(bodies) {
    // Wider by 8 ulp of the scale of the numbers its distances take, more than their rounding and the groups' union's
    // (exportSubtree): the domain's distance to a centre of mass then never exceeds a group's, as computed. In a
    // periodic box that scale is L (the folded offsets p - c and |p - c| all lie below it); with open boundaries the
    // largest coordinate of the tree's centres of mass (its root's extent about its centre, and in a tree of balls
    // their spread) and of the domain box.
    double scale = periodic_.enabled() ? periodic_.boxSize : 0.0;
    if (!periodic_.enabled()) {
      const double spread = tree.comSpread.empty() ? 0.0 : tree.comSpread[0];
      for (int d = 0; d < 3; ++d) {
        scale = std::max(scale, std::fabs(tree.centre[d]) + tree.halfExtent[0] + spread);
        scale = std::max(scale, std::fabs(remote.domain.centre[d]) + remote.domain.halfExtent[d]);
      }
    }
    const double widening = 8.0 * std::numeric_limits<double>::epsilon() * scale;
    for (int d = 0; d < 3; ++d) domainHalf_[d] = remote.domain.halfExtent[d] + widening;
  }

  /// The export, depth first: the cells above kTaskBodies bodies here, each subtree below them (and each leaf above)
  /// a task on the rank's cores, into its own arrays, then all of them stitched behind the top cells in the order the
  /// depth-first pass would have met them. On one core the pass took ~110 ms a call at 2^23 bodies a rank (2 ranks:
  /// one subtree to export), beside a local walk that left cores idle.
  void run() {
    std::vector<std::uint32_t> all(remote_.size());
    for (std::size_t g = 0; g < all.size(); ++g) all[g] = static_cast<std::uint32_t>(g);
    prepare();
    const Reach root = judge(0, all, opening_[0][0]);
    if (root == Reach::skippedByAll) return;
    add(0);
    std::vector<Task> tasks;
    deferred_ = &tasks;
    taskBodies_ = std::max<std::size_t>(kMinTaskBodies, sorted_.count / kTasksPerExport);
    expand(0, 0, root, opening_[0][0], 0);
    deferred_ = nullptr;
    runTasks(tasks);
  }

 private:
  /// A subtree deferred by the top pass: cells_[at] is `cell`'s export, to be completed as expand() would.
  struct Task {
    std::uint32_t cell;
    std::size_t at;
    Reach reach;
    std::vector<std::uint32_t> opening;
    std::size_t depth;
  };
  /// Bodies below which a subtree is one task: about kTasksPerExport tasks, none tiny.
  static constexpr std::size_t kTasksPerExport = 512;
  static constexpr std::size_t kMinTaskBodies = 2048;

  void prepare() {
    // The opening groups of each child of the cell being expanded, per level, sized once: a child's expansion never
    // moves its parent's sets.
    opening_.resize(kMaxLevel + 2);
  }

  /// Runs each task with its own exporter and arrays, then appends them in order: a task's cell k > 0 (its cell 0 is
  /// the subtree's root, cells_[at] here) and its bodies move by what the earlier tasks added.
  void runTasks(std::vector<Task>& tasks) {
    const std::size_t numTasks = tasks.size();
    std::vector<std::vector<ExportedCell>> taskCells(numTasks);
    std::vector<std::vector<ExportedBody>> taskBodies(numTasks);
    tbb::parallel_for(std::size_t{0}, numTasks, [&](std::size_t k) {
      const Task& task = tasks[k];
      SubtreeExporter sub(tree_, sorted_, ids_, remote_, periodic_, taskCells[k], taskBodies[k]);
      sub.prepare();
      taskCells[k].push_back(cells_[task.at]);
      sub.expand(task.cell, 0, task.reach, task.opening, task.depth);
    });
    std::vector<std::size_t> cellStart(numTasks + 1, cells_.size()), bodyStart(numTasks + 1, bodies_.size());
    for (std::size_t k = 0; k < numTasks; ++k) {
      cellStart[k + 1] = cellStart[k] + taskCells[k].size() - 1;
      bodyStart[k + 1] = bodyStart[k] + taskBodies[k].size();
    }
    MATCHA_ASSERT(cellStart[numTasks] < (std::size_t{1} << 32) && bodyStart[numTasks] < (std::size_t{1} << 32),
                  "an exported subtree exceeds 32-bit indices");
    cells_.resize(cellStart[numTasks]);
    bodies_.resize(bodyStart[numTasks]);
    tbb::parallel_for(std::size_t{0}, numTasks, [&](std::size_t k) {
      const auto cellShift = static_cast<std::uint32_t>(cellStart[k] - 1);  // local cell 1 goes to cellStart[k]
      const auto bodyShift = static_cast<std::uint32_t>(bodyStart[k]);
      const auto place = [&](ExportedCell cell) {
        if (cell.numChildren > 0) cell.firstChild += cellShift;
        if (cell.lastBody > cell.firstBody) {
          cell.firstBody += bodyShift;
          cell.lastBody += bodyShift;
        }
        return cell;
      };
      cells_[tasks[k].at] = place(taskCells[k][0]);
      std::transform(taskCells[k].begin() + 1, taskCells[k].end(), cells_.begin() + cellStart[k], place);
      std::copy(taskBodies[k].begin(), taskBodies[k].end(), bodies_.begin() + bodyStart[k]);
    });
  }

  void add(std::uint32_t cell) {
    const CellMultipoles& m = tree_.multipoles;
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
    out.openingRadius = tree_.openingRadius[cell];
    out.bmax = tree_.bmax[cell];
    out.comSpread = spreadOf(cell);
    out.sourceCell = cell;
    cells_.push_back(out);
    MATCHA_ASSERT(cells_.size() < (std::size_t{1} << 32), "an exported subtree exceeds 32-bit indices");
  }

  /// The walk's test of `cell` for one box and tolerance, on the numbers add() sends (the receiver's test).
  Visit visit(std::uint32_t cell, const double* centre, const double* half, double tolerance) const {
    const CellMultipoles& m = tree_.multipoles;
    const double com[3] = {m.x[cell], m.y[cell], m.z[cell]};
    if (periodic_.enabled()) {
      return tree::visitPeriodic(com, tree_.openingRadius[cell], m.mass[cell], tree_.bmax[cell], m.hasQuadrupole,
                                 centre, half, tolerance, periodic_);
    }
    return accepts(com, tree_.openingRadius[cell], m.mass[cell], tree_.bmax[cell], spreadOf(cell), m.hasQuadrupole,
                   centre, half, tolerance)
               ? Visit::accept
               : Visit::open;
  }

  double spreadOf(std::uint32_t cell) const { return tree_.comSpread.empty() ? 0.0 : tree_.comSpread[cell]; }

  /// What the groups `reaching` make of `cell`; those that open it go to `opening` (cleared first). The domain box
  /// answers for all of them when it skips or accepts the cell.
  Reach judge(std::uint32_t cell, std::span<const std::uint32_t> reaching, std::vector<std::uint32_t>& opening) const {
    opening.clear();
    const Visit domain = visit(cell, remote_.domain.centre, domainHalf_, remote_.domain.tolerance);
    if (domain == Visit::skip) return Reach::skippedByAll;
    if (!periodic_.enabled()) {
      if (domain == Visit::accept) return Reach::acceptedByAll;
      return judgeEachGroup(cell, reaching, opening);
    }
    if (domain == Visit::accept) {
      // Each group accepts or skips it: it goes only when one of them does not skip it.
      for (const std::uint32_t g : reaching) {
        if (visit(cell, &remote_.centre[3 * g], &remote_.halfExtent[3 * g], remote_.tolerance[g]) != Visit::skip) {
          return Reach::acceptedByAll;
        }
      }
      return Reach::skippedByAll;
    }
    bool needed = false;  // some group does not skip it
    const auto visitGroup = [&](std::uint32_t g) {
      return visit(cell, &remote_.centre[3 * g], &remote_.halfExtent[3 * g], remote_.tolerance[g]);
    };
    if (reaching.size() < kParallelJudge) {
      for (const std::uint32_t g : reaching) {
        const Visit v = visitGroup(g);
        needed = needed || v != Visit::skip;
        if (v == Visit::open) opening.push_back(g);
      }
    } else {
      // The cells near the root meet most of the other rank's groups: with 2 ranks the one subtree exported is one
      // depth-first pass on one core, and its judging at those cells on the rank's cores (the list in its order).
      visits_.resize(reaching.size());
      tbb::parallel_for(tbb::blocked_range<std::size_t>(0, reaching.size(), 256),
                        [&](const tbb::blocked_range<std::size_t>& range) {
                          for (std::size_t k = range.begin(); k < range.end(); ++k)
                            visits_[k] = visitGroup(reaching[k]);
                        });
      for (std::size_t k = 0; k < reaching.size(); ++k) {
        needed = needed || visits_[k] != Visit::skip;
        if (visits_[k] == Visit::open) opening.push_back(reaching[k]);
      }
    }
    if (!opening.empty()) return Reach::openedBySome;
    return needed ? Reach::acceptedByAll : Reach::skippedByAll;
  }

  /// judge() with open boundaries once the domain box opens the cell: each group's OpenBoundaryTest, the groups that
  /// open it gathered in order without a branch. At the cells near the root, which meet hundreds of groups each, these
  /// tests were most of the export's serial part.
  Reach judgeEachGroup(std::uint32_t cell, std::span<const std::uint32_t> reaching,
                       std::vector<std::uint32_t>& opening) const {
    const CellMultipoles& m = tree_.multipoles;
    const OpenBoundaryTest test{{m.x[cell], m.y[cell], m.z[cell]},
                                tree_.openingRadius[cell],
                                m.mass[cell],
                                tree_.bmax[cell],
                                spreadOf(cell),
                                m.hasQuadrupole};
    const auto collect = [&](std::span<const std::uint32_t> groups, std::uint32_t* out) {
      std::size_t count = 0;
      for (const std::uint32_t g : groups) {
        out[count] = g;
        count += test.accepts(&remote_.centre[3 * g], &remote_.halfExtent[3 * g], remote_.tolerance[g]) ? 0 : 1;
      }
      return count;
    };
    opening.resize(reaching.size());
    std::size_t numOpening = 0;
    if (reaching.size() < kParallelJudge) {
      numOpening = collect(reaching, opening.data());
    } else {
      // The cells near the root meet most of the other rank's groups: with 2 ranks the one subtree exported is one
      // depth-first pass on one core, and its judging at those cells on the rank's cores, in blocks whose openers
      // are then put end to end (the list in its order).
      const std::size_t numBlocks = (reaching.size() + kJudgeBlock - 1) / kJudgeBlock;
      blockOpening_.resize(reaching.size());
      blockCounts_.resize(numBlocks);
      tbb::parallel_for(std::size_t{0}, numBlocks, [&](std::size_t b) {
        const std::size_t first = b * kJudgeBlock, size = std::min(kJudgeBlock, reaching.size() - first);
        blockCounts_[b] = collect(reaching.subspan(first, size), &blockOpening_[first]);
      });
      for (std::size_t b = 0; b < numBlocks; ++b) {
        std::copy_n(&blockOpening_[b * kJudgeBlock], blockCounts_[b], opening.data() + numOpening);
        numOpening += blockCounts_[b];
      }
    }
    opening.resize(numOpening);
    if (numOpening > 0) return Reach::openedBySome;
    return reaching.empty() ? Reach::skippedByAll : Reach::acceptedByAll;
  }

  /// Completes cells_[at], the export of `cell`, which the groups `opening` reach and `reach` says what of.
  void expand(std::uint32_t cell, std::size_t at, Reach reach, std::span<const std::uint32_t> opening,
              std::size_t depth) {
    if (reach == Reach::acceptedByAll) {
      cells_[at].accepted = 1;
      return;
    }
    if (deferred_ != nullptr && (tree_.isLeaf(cell) || tree_.bodies[cell].size() <= taskBodies_)) {
      deferred_->push_back({cell, at, reach, std::vector<std::uint32_t>(opening.begin(), opening.end()), depth});
      return;
    }
    if (tree_.isLeaf(cell)) {
      const BodyRange range = tree_.bodies[cell];
      cells_[at].firstBody = static_cast<std::uint32_t>(bodies_.size());
      for (std::uint32_t i = range.first; i < range.last; ++i) {
        bodies_.push_back({sorted_.x[i], sorted_.y[i], sorted_.z[i], sorted_.mass[i], ids_[i]});
      }
      MATCHA_ASSERT(bodies_.size() < (std::size_t{1} << 32), "an exported subtree exceeds 32-bit indices");
      cells_[at].lastBody = static_cast<std::uint32_t>(bodies_.size());
      return;
    }
    // Each child judged by the groups that opened this cell; those that all of them skip stay behind, the others go
    // all at once, so that they are consecutive, and are then expanded in turn.
    MATCHA_ASSERT(depth + 1 < opening_.size(), "an octree deeper than kMaxLevel");
    const std::uint32_t numChildren = tree_.numChildren[cell];
    std::array<Reach, 8> reaches{};
    for (std::uint32_t k = 0; k < numChildren; ++k) {
      reaches[k] = judge(tree_.firstChild[cell] + k, opening, opening_[depth + 1][k]);
    }
    const auto firstChild = static_cast<std::uint32_t>(cells_.size());
    for (std::uint32_t k = 0; k < numChildren; ++k) {
      if (reaches[k] != Reach::skippedByAll) add(tree_.firstChild[cell] + k);
    }
    cells_[at].firstChild = firstChild;
    cells_[at].numChildren = static_cast<std::uint32_t>(cells_.size()) - firstChild;
    std::size_t child = firstChild;
    for (std::uint32_t k = 0; k < numChildren; ++k) {
      // opening_[depth + 1] stays as it is while the children's expansions use the deeper levels.
      if (reaches[k] != Reach::skippedByAll) {
        expand(tree_.firstChild[cell] + k, child++, reaches[k], opening_[depth + 1][k], depth + 1);
      }
    }
  }

  const tree::Octree& tree_;
  const SourceView& sorted_;
  BodyIds ids_;
  const RemoteGroups& remote_;
  const PeriodicSplit& periodic_;
  double domainHalf_[3];  ///< the domain box's half extents as judge() tests them
  std::vector<ExportedCell>& cells_;
  std::vector<ExportedBody>& bodies_;
  /// Per depth d + 1: the groups that open each child (up to 8) of the cell expanded at depth d.
  std::vector<std::array<std::vector<std::uint32_t>, 8>> opening_;
  /// judge()'s verdicts of each group, where it judges them in parallel (kParallelJudge or more), and with open
  /// boundaries each block's groups that open the cell and their number (judgeEachGroup).
  mutable std::vector<Visit> visits_;
  mutable std::vector<std::uint32_t> blockOpening_;
  mutable std::vector<std::size_t> blockCounts_;
  /// The top pass's tasks, while it runs: expand() defers a leaf or a subtree of at most taskBodies_ bodies there.
  std::vector<Task>* deferred_ = nullptr;
  std::size_t taskBodies_ = 0;
};

}  // namespace

void exportSubtree(const tree::Octree& tree, const SourceView& sortedBodies, BodyIds ids, const RemoteGroups& remote,
                   std::vector<ExportedCell>& cells, std::vector<ExportedBody>& bodies, const PeriodicSplit& periodic) {
  cells.clear();
  bodies.clear();
  if (tree.numCells() == 0 || remote.size() == 0) return;
  MATCHA_ASSERT(tree.comSpread.empty() || !periodic.enabled(), "periodic local essential trees need exact positions");
  MATCHA_ASSERT(!periodic.enabled() || tree.halfSide[0] == 0.5 * periodic.boxSize,
                "a periodic export needs the periodic cube as the tree's root");
  SubtreeExporter(tree, sortedBodies, ids, remote, periodic, cells, bodies).run();
}

namespace {

static_assert(sizeof(ExportedCell) == 14 * sizeof(double) + 6 * sizeof(std::uint32_t), "ExportedCell has padding");
static_assert(sizeof(ExportedBody) == 5 * sizeof(double), "ExportedBody has padding");

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

/// Exchanges per-destination blocks of records: `send[r]` goes to rank r; `received` gets rank 0's records for this
/// rank, then rank 1's, ..., and `offsets` where each begins (numRanks + 1 entries). `packed` is scratch. The buffers
/// are the caller's, kept from call to call: fresh ones cost their first touch every call (tens of MB at 2^22 bodies a
/// rank), and the blocks are packed on the rank's cores.
template <class Record>
void exchangeBlocks(const std::vector<std::vector<Record>>& send, std::vector<Record>& packed,
                    std::vector<Record>& received, std::vector<int>& offsets, MPI_Comm comm) {
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
  packed.resize(static_cast<std::size_t>(sendOffsets[numRanks]));
  tbb::parallel_for(0, numRanks, [&](int r) {
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, send[r].size(), 16384),
                      [&](const tbb::blocked_range<std::size_t>& range) {
                        std::copy(send[r].begin() + range.begin(), send[r].begin() + range.end(),
                                  packed.begin() + sendOffsets[r] + range.begin());
                      });
  });
  received.resize(static_cast<std::size_t>(offsets[numRanks]));
  const RecordType type(sizeof(Record));
  MPI_Alltoallv(packed.data(), sendCounts.data(), sendOffsets.data(), type.get(), received.data(), receiveCounts.data(),
                offsets.data(), type.get(), comm);
}

/// cells[0, numLocal) = the local tree's multipoles, each array in blocks on the rank's cores; a rank's cells without
/// quadrupoles (it has none) get zeros where another rank's have them (cells.hasQuadrupole).
void copyLocalCells(const CellMultipoles& local, std::size_t numLocal, CellMultipoles& cells) {
  const bool quadrupole = numLocal > 0 && local.hasQuadrupole;
  const std::vector<double>* localArrays[11] = {&local.x,   &local.y,   &local.z,    &local.mass,
                                                &local.qxx, &local.qyy, &local.qzz,  &local.qxy,
                                                &local.qxz, &local.qyz, &local.trace};
  std::vector<double>* cellArrays[11] = {&cells.x,   &cells.y,   &cells.z,   &cells.mass, &cells.qxx,  &cells.qyy,
                                         &cells.qzz, &cells.qxy, &cells.qxz, &cells.qyz,  &cells.trace};
  const int numArrays = cells.hasQuadrupole ? 11 : 4;
  tbb::parallel_for(tbb::blocked_range2d<int, std::size_t>(0, numArrays, 1, 0, numLocal, 65536),
                    [&](const tbb::blocked_range2d<int, std::size_t>& range) {
                      for (int a = range.rows().begin(); a < range.rows().end(); ++a) {
                        std::vector<double>& to = *cellArrays[a];
                        const bool present = a < 4 || quadrupole;
                        for (std::size_t c = range.cols().begin(); c < range.cols().end(); ++c) {
                          to[c] = present ? (*localArrays[a])[c] : 0.0;
                        }
                      }
                    });
}

/// Sets cells' entry c to a received cell's multipoles (its quadrupole where the cells have quadrupoles): an
/// ExportedCell as exchanged, or a refresh's update of one.
template <class Received>
void setReceivedCell(CellMultipoles& cells, std::size_t c, const Received& cell) {
  cells.x[c] = cell.com[0];
  cells.y[c] = cell.com[1];
  cells.z[c] = cell.com[2];
  cells.mass[c] = cell.mass;
  if (!cells.hasQuadrupole) return;
  cells.qxx[c] = cell.quadrupole[0];
  cells.qyy[c] = cell.quadrupole[1];
  cells.qzz[c] = cell.quadrupole[2];
  cells.qxy[c] = cell.quadrupole[3];
  cells.qxz[c] = cell.quadrupole[4];
  cells.qyz[c] = cell.quadrupole[5];
  cells.trace[c] = cell.trace;
}

/// Sources [0, numSources) of the local essential tree on the rank's cores (at 2^23 bodies a rank these copies are
/// ~300 MB a call): the local bodies, then the received records; `take(i, record)` copies record i of `received`
/// (positions, and what else it carries) into source numLocal + i.
template <class Record, class Take>
void placeSources(const SourceView& local, const std::vector<Record>& received, double* x, double* y, double* z,
                  Take take) {
  const std::size_t numLocal = local.count;
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, numLocal + received.size(), 65536),
                    [&](const tbb::blocked_range<std::size_t>& range) {
                      for (std::size_t i = range.begin(); i < range.end(); ++i) {
                        if (i < numLocal) {
                          x[i] = local.x[i];
                          y[i] = local.y[i];
                          z[i] = local.z[i];
                        } else {
                          const Record& record = received[i - numLocal];
                          x[i] = record.x;
                          y[i] = record.y;
                          z[i] = record.z;
                          take(i - numLocal, record);
                        }
                      }
                    });
}

}  // namespace

void LocalEssentialTree::exchange(const tree::Octree& tree, const SourceView& sortedBodies, BodyIds ids,
                                  const tree::Groups& groups, MPI_Comm comm, const PeriodicSplit& periodic) {
  stats_ = LetStats{};
  periodic_ = periodic;
  const int rank = rankOf(comm);
  const int numRanks = numRanksOf(comm);
  // The local bodies and cells go to the front of the sources and cells on the rank's other cores while this thread
  // exchanges (they need nothing from the other ranks): at 2^22 bodies a rank four arrays of 32 MB and the cells'
  // arrays a call, which the assembly after the exchange no longer waits for (2.6 ms of assembly left on an H100's
  // host, 2 ranks of 8 cores). Waited for on every way out, an exception's too.
  numLocalBodies_ = sortedBodies.count;
  numLocalCells_ = tree.numCells();
  tbb::task_group localPart;
  struct WaitedOnLeaving {
    tbb::task_group& tasks;
    ~WaitedOnLeaving() {
      try {
        tasks.wait();
      } catch (...) {  // NOLINT(bugprone-empty-catch): the exception that unwinds is the one to report
      }
    }
  } waitedOnLeaving{localPart};
  localPart.run([&] { placeLocal(tree, sortedBodies); });
  Stopwatch clock;
  // Every rank's groups as its walk sees them: box centre, half extents, relative tolerance (7 doubles a group).
  constexpr int kGroupDoubles = 7;
  const std::size_t numGroups = groups.size();
  MATCHA_ASSERT(groups.relativeTolerance.size() == numGroups, "exchange needs the groups' relative tolerances");
  std::vector<double> mine(kGroupDoubles * numGroups);
  for (std::size_t g = 0; g < numGroups; ++g) {
    double* record = &mine[kGroupDoubles * g];
    for (int d = 0; d < 3; ++d) {
      record[d] = groups.centre[3 * g + d];
      record[3 + d] = groups.halfExtent[3 * g + d];
    }
    record[6] = groups.relativeTolerance[g];
  }
  MATCHA_ASSERT(numGroups < (std::size_t{1} << 31), "too many groups for an MPI count");
  const int myCount = static_cast<int>(numGroups);
  std::vector<int> groupCounts(numRanks), groupOffsets(numRanks + 1, 0);
  MPI_Allgather(&myCount, 1, MPI_INT, groupCounts.data(), 1, MPI_INT, comm);
  for (int r = 0; r < numRanks; ++r) groupOffsets[r + 1] = groupOffsets[r] + groupCounts[r];
  std::vector<double> allGroups(kGroupDoubles * static_cast<std::size_t>(groupOffsets[numRanks]));
  {
    const RecordType groupType(kGroupDoubles * sizeof(double));
    MPI_Allgatherv(mine.data(), myCount, groupType.get(), allGroups.data(), groupCounts.data(), groupOffsets.data(),
                   groupType.get(), comm);
  }
  stats_.communicationSeconds += clock.seconds();

  clock.restart();
  // The subtrees go out of buffers kept from call to call (exportSubtree clears them, keeping their room).
  sendCells_.resize(numRanks);
  sendBodies_.resize(numRanks);
  std::vector<std::vector<ExportedCell>>& sendCells = sendCells_;
  std::vector<std::vector<ExportedBody>>& sendBodies = sendBodies_;
  // One subtree per other rank, each pruned on its own (in parallel over the ranks).
  tbb::parallel_for(0, numRanks, [&](int r) {
    if (r == rank || groupCounts[r] == 0) {
      sendCells[r].clear();
      sendBodies[r].clear();
      return;
    }
    // Rank r's groups, field by field, and their domain box.
    tree::Groups theirs;
    const auto count = static_cast<std::size_t>(groupCounts[r]);
    theirs.ranges.resize(count);
    theirs.centre.resize(3 * count);
    theirs.halfExtent.resize(3 * count);
    theirs.relativeTolerance.resize(count);
    for (std::size_t g = 0; g < count; ++g) {
      const double* record = &allGroups[kGroupDoubles * (groupOffsets[r] + g)];
      for (int d = 0; d < 3; ++d) {
        theirs.centre[3 * g + d] = record[d];
        theirs.halfExtent[3 * g + d] = record[3 + d];
      }
      theirs.relativeTolerance[g] = record[6];
    }
    const RemoteGroups remote{domainOf(theirs), theirs.centre, theirs.halfExtent, theirs.relativeTolerance};
    exportSubtree(tree, sortedBodies, ids, remote, sendCells[r], sendBodies[r], periodic_);
  });
  for (int r = 0; r < numRanks; ++r) {
    if (r != rank) stats_.remoteGroups += static_cast<std::uint64_t>(groupCounts[r]);
    stats_.cellsSent += sendCells[r].size();
    stats_.bodiesSent += sendBodies[r].size();
  }
  stats_.buildSeconds += clock.seconds();

  clock.restart();
  std::vector<int> cellOffsets, bodyOffsets;
  exchangeBlocks(sendCells, packedCells_, received_, cellOffsets, comm);
  exchangeBlocks(sendBodies, packedBodies_, receivedBodies_, bodyOffsets, comm);
  const std::vector<ExportedBody>& bodies = receivedBodies_;
  stats_.communicationSeconds += clock.seconds();
  stats_.cellsReceived = received_.size();
  stats_.bodiesReceived = bodies.size();

  // Sources: the local bodies (placed beside the exchange), then the received ones; cells: the local tree's, then the
  // received ones, with each subtree's child and body indices moved to where its cells and bodies now lie.
  clock.restart();
  localPart.wait();
  const std::size_t numSources = numLocalBodies_ + bodies.size();
  MATCHA_ASSERT(numSources < (std::size_t{1} << 32) && numLocalCells_ + received_.size() < (std::size_t{1} << 32),
                "a local essential tree exceeds 32-bit indices");
  for (auto* array : {&x_, &y_, &z_, &mass_}) array->resize(numSources);
  receivedIds_.resize(bodies.size());
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, bodies.size(), 16384),
                    [&](const tbb::blocked_range<std::size_t>& range) {
                      for (std::size_t k = range.begin(); k < range.end(); ++k) {
                        const std::size_t i = numLocalBodies_ + k;
                        x_[i] = bodies[k].x;
                        y_[i] = bodies[k].y;
                        z_[i] = bodies[k].z;
                        mass_[i] = bodies[k].mass;
                        receivedIds_[k] = bodies[k].id;
                      }
                    });
  bool anyQuadrupole = numLocalCells_ > 0 ? tree.multipoles.hasQuadrupole : false;
  MPI_Allreduce(MPI_IN_PLACE, &anyQuadrupole, 1, MPI_CXX_BOOL, MPI_LOR, comm);
  const std::size_t numCells = numLocalCells_ + received_.size();
  // A rank whose cells have no quadrupoles (none: it has no bodies) gets zeros where the others' have them: resize
  // value-initialises the arrays' new entries.
  cells_.resize(numCells, anyQuadrupole);
  cellOwner_.resize(received_.size());
  subtreeRoots_.clear();
  for (int from = 0; from < numRanks; ++from) {
    if (cellOffsets[from] < cellOffsets[from + 1]) {
      subtreeRoots_.push_back(static_cast<std::uint32_t>(numLocalCells_ + cellOffsets[from]));
    }
  }
  tbb::parallel_for(
      tbb::blocked_range<std::size_t>(0, received_.size(), 16384), [&](const tbb::blocked_range<std::size_t>& range) {
        for (std::size_t k = range.begin(); k < range.end(); ++k) {
          // The sending rank: the last whose block begins at or before k.
          const int from =
              static_cast<int>(std::upper_bound(cellOffsets.begin(), cellOffsets.end(), static_cast<int>(k)) -
                               cellOffsets.begin()) -
              1;
          ExportedCell& cell = received_[k];
          cellOwner_[k] = from;
          if (cell.numChildren > 0) cell.firstChild += static_cast<std::uint32_t>(numLocalCells_ + cellOffsets[from]);
          const auto bodyShift = static_cast<std::uint32_t>(numLocalBodies_ + bodyOffsets[from]);
          cell.firstBody += bodyShift;
          cell.lastBody += bodyShift;
          setReceivedCell(cells_, numLocalCells_ + k, cell);
        }
      });
  lastReceivedBodies_ = bodies.size();
  lastReceivedCells_ = received_.size();
  stats_.assemblySeconds = clock.seconds();
  exchanged_ = true;
}

void LocalEssentialTree::placeLocal(const tree::Octree& tree, const SourceView& sortedBodies) {
  const std::size_t numLocal = sortedBodies.count;
  // Room for the bodies and cells to be received, as many as last time and an eighth more, so that adding them
  // rarely moves the local ones again.
  const auto withRoom = [](std::size_t local, std::size_t received) { return local + received + received / 8; };
  for (auto* array : {&x_, &y_, &z_, &mass_}) {
    array->reserve(withRoom(numLocal, lastReceivedBodies_));
    array->resize(numLocal);
  }
  const double* from[4] = {sortedBodies.x, sortedBodies.y, sortedBodies.z, sortedBodies.mass};
  double* to[4] = {x_.data(), y_.data(), z_.data(), mass_.data()};
  tbb::parallel_for(tbb::blocked_range2d<int, std::size_t>(0, 4, 1, 0, numLocal, 65536),
                    [&](const tbb::blocked_range2d<int, std::size_t>& range) {
                      for (int a = range.rows().begin(); a < range.rows().end(); ++a) {
                        std::copy(from[a] + range.cols().begin(), from[a] + range.cols().end(),
                                  to[a] + range.cols().begin());
                      }
                    });
  const std::size_t numCells = tree.numCells();
  const bool quadrupole = numCells > 0 && tree.multipoles.hasQuadrupole;
  cells_.reserve(withRoom(numCells, lastReceivedCells_), quadrupole);
  cells_.resize(numCells, quadrupole);
  copyLocalCells(tree.multipoles, numCells, cells_);
}

void LocalEssentialTree::refresh(const tree::Octree& tree, const SourceView& sortedBodies, MPI_Comm comm) {
  MATCHA_ASSERT(exchanged_ && !periodic_.enabled(), "refresh needs an exchange with open boundaries");
  MATCHA_ASSERT(sortedBodies.count == numLocalBodies_ && tree.numCells() == numLocalCells_,
                "refresh needs the exchange's local tree and bodies");
  const LetStats sizes = stats_;
  stats_ = LetStats{};
  stats_.remoteGroups = sizes.remoteGroups;
  const int numRanks = numRanksOf(comm);
  Stopwatch clock;
  // Each sent cell's multipoles and each sent body's position, where the exchange put them: an opened leaf's bodies
  // went as its bodies in the tree's order, at [firstBody, lastBody) of the subtree (exportSubtree).
  sendCellUpdates_.resize(numRanks);
  sendBodyUpdates_.resize(numRanks);
  const CellMultipoles& m = tree.multipoles;
  for (int r = 0; r < numRanks; ++r) {
    const std::vector<ExportedCell>& sent = sendCells_[r];
    std::vector<CellUpdate>& cellUpdates = sendCellUpdates_[r];
    std::vector<BodyUpdate>& bodyUpdates = sendBodyUpdates_[r];
    cellUpdates.resize(sent.size());
    bodyUpdates.resize(sendBodies_[r].size());
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, sent.size(), 4096),
                      [&](const tbb::blocked_range<std::size_t>& range) {
                        for (std::size_t k = range.begin(); k < range.end(); ++k) {
                          const std::uint32_t c = sent[k].sourceCell;
                          CellUpdate& update = cellUpdates[k];
                          update = CellUpdate{{m.x[c], m.y[c], m.z[c]}, m.mass[c], {}, 0.0};
                          if (m.hasQuadrupole) {
                            const double q[6] = {m.qxx[c], m.qyy[c], m.qzz[c], m.qxy[c], m.qxz[c], m.qyz[c]};
                            std::copy(q, q + 6, update.quadrupole);
                            update.trace = m.trace[c];
                          }
                          const std::uint32_t first = tree.bodies[c].first;
                          for (std::uint32_t b = sent[k].firstBody; b < sent[k].lastBody; ++b) {
                            const std::uint32_t i = first + (b - sent[k].firstBody);
                            bodyUpdates[b] = {sortedBodies.x[i], sortedBodies.y[i], sortedBodies.z[i]};
                          }
                        }
                      });
    stats_.cellsSent += cellUpdates.size();
    stats_.bodiesSent += bodyUpdates.size();
  }
  stats_.buildSeconds = clock.seconds();

  clock.restart();
  std::vector<int> cellOffsets, bodyOffsets;
  exchangeBlocks(sendCellUpdates_, packedCellUpdates_, receivedCellUpdates_, cellOffsets, comm);
  exchangeBlocks(sendBodyUpdates_, packedBodyUpdates_, receivedBodyUpdates_, bodyOffsets, comm);
  stats_.communicationSeconds = clock.seconds();
  MATCHA_ASSERT(
      receivedCellUpdates_.size() == received_.size() && receivedBodyUpdates_.size() == x_.size() - numLocalBodies_,
      "refresh received other than the exchange did");
  stats_.cellsReceived = receivedCellUpdates_.size();
  stats_.bodiesReceived = receivedBodyUpdates_.size();

  clock.restart();
  placeSources(sortedBodies, receivedBodyUpdates_, x_.data(), y_.data(), z_.data(),
               [](std::size_t, const BodyUpdate&) {});
  copyLocalCells(m, numLocalCells_, cells_);
  // received_ keeps the numbers the sender pruned with: buildPlan's walks must test those.
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, received_.size(), 16384),
                    [&](const tbb::blocked_range<std::size_t>& range) {
                      for (std::size_t k = range.begin(); k < range.end(); ++k) {
                        setReceivedCell(cells_, numLocalCells_ + k, receivedCellUpdates_[k]);
                      }
                    });
  stats_.buildSeconds += clock.seconds();
}

void LocalEssentialTree::buildPlan(const tree::Groups& groups, const InteractionPlan& localPlan,
                                   InteractionPlan& plan) {
  buildPlan(groups, localPlan, 0, groups.size(), plan);
}

void LocalEssentialTree::buildPlan(const tree::Groups& groups, const InteractionPlan& localPlan, std::size_t first,
                                   std::size_t last, InteractionPlan& plan) {
  const Stopwatch clock;
  MATCHA_ASSERT(localPlan.numGroups() == groups.size(), "the local plan must hold every group, in order");
  MATCHA_ASSERT(first <= last && last <= groups.size(), "buildPlan: groups [first, last) outside the groups");
  const std::size_t numGroups = last - first;
  // Each group's remote list, kept from call to call (cleared, not freed): a batch's groups reuse the rooms of
  // earlier calls' groups at the same place along the curve.
  if (remoteCells_.size() < numGroups) {
    remoteCells_.resize(numGroups);
    remoteRanges_.resize(numGroups);
  }
  tbb::enumerable_thread_specific<std::vector<std::uint32_t>> stacks;
  tbb::parallel_for(std::size_t{0}, numGroups, [&](std::size_t k) {
    const std::size_t g = first + k;
    std::vector<std::uint32_t>& stack = stacks.local();
    std::vector<std::uint32_t>& cellList = remoteCells_[k];
    std::vector<BodyRange>& ranges = remoteRanges_[k];
    cellList.clear();
    ranges.clear();
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
        // The sender ran this group's walk on the same numbers (exportSubtree): a cell it sent as accepted passes for
        // every group that reaches it (in a periodic box, unless the group skips it); any other cell gets the walk's
        // test for the group's own box and tolerance.
        Visit visit = Visit::accept;
        if (periodic_.enabled()) {
          visit = tree::visitPeriodic(cell.com, cell.openingRadius, cell.mass, cell.bmax, cells_.hasQuadrupole, centre,
                                      half, tolerance, periodic_);
        } else if (cell.accepted == 0 && !accepts(cell.com, cell.openingRadius, cell.mass, cell.bmax, cell.comSpread,
                                                  cells_.hasQuadrupole, centre, half, tolerance)) {
          visit = Visit::open;
        }
        if (visit == Visit::skip) continue;
        if (visit == Visit::accept || cell.accepted != 0) {
          cellList.push_back(c);
        } else if (cell.numChildren == 0) {
          if (cell.lastBody == cell.firstBody) continue;
          if (!ranges.empty() && ranges.back().last == cell.firstBody) {
            ranges.back().last = cell.lastBody;
          } else {
            ranges.push_back({cell.firstBody, cell.lastBody});
          }
        } else {
          for (std::uint32_t child = cell.numChildren; child-- > 0;) stack.push_back(cell.firstChild + child);
        }
      }
    }
  });

  // Each group's local list, then its remote one: offsets first, then the copies on the rank's cores (the local plan
  // is ~the whole plan; one core's copy of it was a serial stretch of every call).
  plan.clear();
  plan.groups.assign(localPlan.groups.begin() + first, localPlan.groups.begin() + last);
  plan.groupCentres.assign(localPlan.groupCentres.begin() + 3 * first, localPlan.groupCentres.begin() + 3 * last);
  if (!localPlan.groupIds.empty()) {
    plan.groupIds.assign(localPlan.groupIds.begin() + first, localPlan.groupIds.begin() + last);
  }
  plan.listBodyCounts.resize(numGroups);
  plan.cellListOffsets.resize(numGroups + 1);
  plan.bodyListOffsets.resize(numGroups + 1);
  std::uint64_t numListCells = 0, numListRanges = 0;
  for (std::size_t k = 0; k < numGroups; ++k) {
    const std::size_t g = first + k;
    numListCells += localPlan.numListCells(g) + remoteCells_[k].size();
    numListRanges += (localPlan.bodyListOffsets[g + 1] - localPlan.bodyListOffsets[g]) + remoteRanges_[k].size();
    MATCHA_ASSERT(numListCells < (std::uint64_t{1} << 32) && numListRanges < (std::uint64_t{1} << 32),
                  "interaction lists exceed 32-bit offsets");
    plan.cellListOffsets[k + 1] = static_cast<std::uint32_t>(numListCells);
    plan.bodyListOffsets[k + 1] = static_cast<std::uint32_t>(numListRanges);
  }
  plan.cellList.resize(numListCells);
  plan.bodyList.resize(numListRanges);
  tbb::parallel_for(std::size_t{0}, numGroups, [&](std::size_t k) {
    const std::size_t g = first + k;
    auto cellsTo = plan.cellList.begin() + plan.cellListOffsets[k];
    cellsTo = std::copy(localPlan.cellList.begin() + localPlan.cellListOffsets[g],
                        localPlan.cellList.begin() + localPlan.cellListOffsets[g + 1], cellsTo);
    std::copy(remoteCells_[k].begin(), remoteCells_[k].end(), cellsTo);
    auto rangesTo = plan.bodyList.begin() + plan.bodyListOffsets[k];
    rangesTo = std::copy(localPlan.bodyList.begin() + localPlan.bodyListOffsets[g],
                         localPlan.bodyList.begin() + localPlan.bodyListOffsets[g + 1], rangesTo);
    std::copy(remoteRanges_[k].begin(), remoteRanges_[k].end(), rangesTo);
    std::uint64_t listBodies = localPlan.numListBodies(g);
    for (const BodyRange& range : remoteRanges_[k]) listBodies += range.size();
    plan.listBodyCounts[k] = static_cast<std::uint32_t>(listBodies);
  });
  stats_.walkSeconds += clock.seconds();
}

}  // namespace matcha::parallel
