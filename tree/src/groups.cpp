// SPDX-License-Identifier: MIT
#include "matcha/tree/groups.hpp"

#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_reduce.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <span>

#include "matcha/core/errors.hpp"

namespace matcha::tree {

namespace {

constexpr std::uint32_t kNoCell = std::numeric_limits<std::uint32_t>::max();

// A candidate group: a contiguous range of sorted bodies and the cube they were found in. The cube is a tree cell
// (`cell` its id) or, below a leaf, a virtual octant of it (`cell` = kNoCell); bodies in Morton order fill each
// octant of a cube as a contiguous sub-range, so virtual octants split a range into contiguous pieces too.
struct Candidate {
  BodyRange range;
  std::uint32_t cell = kNoCell;
  /// A pack of consecutive sibling cells (children firstMember .. firstMember + numMembers - 1 of the cell whose cube
  /// this is); 0 members for a single cell or a piece of one.
  std::uint32_t firstMember = 0;
  std::uint32_t numMembers = 0;
  double centre[3] = {0, 0, 0};
  double halfSide = 0.0;
  int level = 0;
  // An ancestor cell whose cube holds this candidate's cube widened by twice the reach of the extent rule's probes
  // (so every probe of this candidate and of the pieces it may be split into): probes descend from here, not from
  // the root.
  std::uint32_t probeRoot = 0;
};

// The tight box of a range of bodies, with the body that sets each face (the face's probe is placed beside it).
struct TightBox {
  double lo[3], hi[3];
  std::uint32_t loBody[3], hiBody[3];

  double extent() const { return std::max({hi[0] - lo[0], hi[1] - lo[1], hi[2] - lo[2]}); }
};

// The faces' bodies are std::minmax_element's (the first smallest, the last largest coordinate), found in two passes:
// the extremes by a loop the compiler vectorises, then each face's body by a scan that stops at it. 1.65x faster than
// minmax_element on ranges of 400 bodies (the 2-core build machine, -O3), where the tight boxes were ~40% of the
// groups phase (perf, BM_PeriodicTreePhases at 2^22 on 2 threads: that phase's best lap 52 -> 46 ms, means of three
// runs, open boundaries 80 -> 66).
TightBox computeTightBox(const SourceView& sources, BodyRange range) {
  MATCHA_ASSERT(range.first < range.last, "tight box of no bodies");
  const double* coordinates[3] = {sources.x, sources.y, sources.z};
  TightBox box;
  for (int d = 0; d < 3; ++d) {
    const double* c = coordinates[d];
    double lo = c[range.first], hi = c[range.first];
    for (std::uint32_t i = range.first + 1; i < range.last; ++i) {
      lo = c[i] < lo ? c[i] : lo;
      hi = c[i] > hi ? c[i] : hi;
    }
    // Bounded scans: a NaN coordinate (never equal to itself) must not run past the range.
    std::uint32_t loBody = range.first;
    while (loBody + 1 < range.last && !(c[loBody] == lo)) ++loBody;
    std::uint32_t hiBody = range.last - 1;
    while (hiBody > range.first && !(c[hiBody] == hi)) --hiBody;
    box.lo[d] = lo;
    box.hi[d] = hi;
    box.loBody[d] = loBody;
    box.hiBody[d] = hiBody;
  }
  return box;
}

// The octant digit of `point` in a cube centred on `centre`: bit d set when the point is on the upper side along
// dimension d (the Morton digit, x lowest).
std::uint32_t octantDigit(const double* point, const double* centre) {
  return (point[0] >= centre[0] ? 1u : 0u) | (point[1] >= centre[1] ? 2u : 0u) | (point[2] >= centre[2] ? 4u : 0u);
}

// The group scale at `point`: the edge of the cube that would hold a group there by count alone, i.e. of the
// largest cell around the point with at most `ncrit` bodies (or the leaf around it, or the empty octant it falls
// in: half the edge of the cell that lacks that child); +inf outside the root. Returns whether that edge is below
// `limit`, descending from `start` (a cell that holds the point, or the root) only as far as needed: once a cell's
// children are smaller than `limit` the answer is known.
bool isGroupScaleBelow(const Octree& tree, const double* point, std::uint32_t start, double limit,
                       std::uint32_t ncrit) {
  for (int d = 0; d < 3; ++d) {
    if (!(std::abs(point[d] - tree.centre[3 * start + d]) <= tree.halfSide[start])) return false;  // outside the root
  }
  std::uint32_t cell = start;
  while (tree.bodies[cell].size() > ncrit && !tree.isLeaf(cell)) {
    if (tree.halfSide[cell] < limit) return true;  // what the point lies in is at most this small
    const double* centre = &tree.centre[3 * cell];
    const std::uint32_t digit = octantDigit(point, centre);
    const std::uint32_t firstChild = tree.firstChild[cell];
    std::uint32_t next = kNoCell;
    if (tree.numChildren[cell] == 8) {
      next = firstChild + digit;  // children are stored in digit order
    } else {
      for (std::uint32_t child = firstChild; child < firstChild + tree.numChildren[cell]; ++child) {
        if (octantDigit(&tree.centre[3 * child], centre) == digit) {
          next = child;
          break;
        }
      }
    }
    if (next == kNoCell) return false;  // an empty octant, of edge halfSide >= limit
    cell = next;
  }
  return 2.0 * tree.halfSide[cell] < limit;
}

// The extent rule (groups.hpp): the box's largest edge is at most kMaxExtentOverGroupScale times the group scale at
// each face's probe.
bool passesExtentRule(const Octree& tree, const SourceView& sources, const TightBox& box, std::uint32_t probeRoot,
                      std::uint32_t ncrit) {
  const double extent = box.extent();
  if (extent <= 0.0) return true;
  const double limit = extent / kMaxExtentOverGroupScale;
  // Outside the face by a fraction of the box (E / 8): close enough to land in the material the face lies against.
  const double offset = 0.5 * limit;
  const double* coordinates[3] = {sources.x, sources.y, sources.z};
  for (int d = 0; d < 3; ++d) {
    for (int side = 0; side < 2; ++side) {
      const std::uint32_t body = side == 0 ? box.loBody[d] : box.hiBody[d];
      double probe[3] = {coordinates[0][body], coordinates[1][body], coordinates[2][body]};
      probe[d] = side == 0 ? box.lo[d] - offset : box.hi[d] + offset;
      if (isGroupScaleBelow(tree, probe, probeRoot, limit, ncrit)) return false;
    }
  }
  return true;
}

// Appends the sub-candidates of `parent` to `out`: its tree children for an inner cell, else its non-empty virtual
// octants (the bodies of the range, in order, cut where their octant digit changes).
void splitCandidate(const Octree& tree, const SourceView& sources, const Candidate& parent,
                    std::vector<Candidate>& out) {
  const bool isPack = parent.numMembers > 0;
  if (isPack || (parent.cell != kNoCell && !tree.isLeaf(parent.cell))) {
    const std::uint32_t firstChild = isPack ? parent.firstMember : tree.firstChild[parent.cell];
    const std::uint32_t lastChild = firstChild + (isPack ? parent.numMembers : tree.numChildren[parent.cell]);
    for (std::uint32_t child = firstChild; child < lastChild; ++child) {
      Candidate c;
      c.range = tree.bodies[child];
      c.cell = child;
      for (int d = 0; d < 3; ++d) c.centre[d] = tree.centre[3 * child + d];
      c.halfSide = tree.halfSide[child];
      c.level = tree.level[child];
      c.probeRoot = parent.probeRoot;
      out.push_back(c);
    }
    return;
  }
  const double half = 0.5 * parent.halfSide;
  std::uint32_t first = parent.range.first;
  while (first < parent.range.last) {
    const double point[3] = {sources.x[first], sources.y[first], sources.z[first]};
    const std::uint32_t digit = octantDigit(point, parent.centre);
    std::uint32_t last = first + 1;
    while (last < parent.range.last) {
      const double next[3] = {sources.x[last], sources.y[last], sources.z[last]};
      if (octantDigit(next, parent.centre) != digit) break;
      ++last;
    }
    Candidate c;
    c.range = {first, last};
    for (int d = 0; d < 3; ++d) c.centre[d] = parent.centre[d] + ((digit >> d) & 1u ? half : -half);
    c.halfSide = half;
    c.level = parent.level + 1;
    c.probeRoot = parent.probeRoot;
    out.push_back(c);
    first = last;
  }
}

void appendGroup(BodyRange range, const TightBox& box, Groups& groups) {
  groups.ranges.push_back(range);
  for (int d = 0; d < 3; ++d) {
    groups.centre.push_back(0.5 * (box.lo[d] + box.hi[d]));
    groups.halfExtent.push_back(0.5 * (box.hi[d] - box.lo[d]));
  }
}

// A part of the bodies whose groups one task finds: the candidates of a subtree, or a single candidate that the
// serial descent over the largest cells found.
struct Piece {
  std::uint32_t subtree = kNoCell;                     ///< the subtree's root, or kNoCell for a single candidate
  std::array<std::uint32_t, kMaxLevel + 1> ancestors;  ///< the cells from the root down to the subtree's parent
  Candidate candidate;                                 ///< the one candidate of a piece without a subtree
  // What its task found. Its groups are groups [firstGroup, firstGroup + numGroups) of `found`, the groups of every
  // piece its task's thread ran, one after another (PieceScratch).
  const Groups* found = nullptr;
  std::size_t firstGroup = 0, numGroups = 0;
  std::size_t numCandidates = 0, numExtentSplits = 0;
};

// A thread's buffers for the pieces it runs: reused from piece to piece, so that a piece allocates next to nothing.
struct PieceScratch {
  std::vector<Candidate> candidates;
  std::vector<Candidate> pending;  // pieces of a failed candidate still to test, the next one last
  std::vector<Candidate> children;
  Groups groups;
};

// Pieces hold at most this fraction of the bodies (or a few groups' worth): enough pieces to balance many cores.
constexpr std::size_t kMinPieces = 256;

// Candidates by count, in body order (makeGroups, step 1): depth-first from a cell, a cell with at most ncrit bodies
// is a candidate; a larger cell's children are visited in order, consecutive small ones packed together
// (packCandidate) and large ones descended into. With `pieces`, subtrees of at most `deferBodies` bodies are left to
// pieces of their own, in order among the pieces of single candidates.
class CandidateFinder {
 public:
  CandidateFinder(const Octree& tree, std::uint32_t ncrit) : tree_(tree), ncrit_(ncrit) {}

  /// The candidates of the subtree under `cell`, whose ancestors (root first) are `ancestors`, appended to `out`.
  void find(std::uint32_t cell, std::span<const std::uint32_t> ancestors, std::vector<Candidate>& out) {
    ancestors_.assign(ancestors.begin(), ancestors.end());
    out_ = &out;
    pieces_ = nullptr;
    visit(cell);
  }

  /// The pieces of the whole tree, in body order.
  void findPieces(std::size_t deferBodies, std::vector<Piece>& pieces) {
    ancestors_.clear();
    pieces_ = &pieces;
    deferBodies_ = deferBodies;
    visit(0);
  }

 private:
  Candidate cellCandidate(std::uint32_t cell, BodyRange range, bool isCell) const {
    Candidate c;
    c.range = range;
    c.cell = isCell ? cell : kNoCell;
    for (int d = 0; d < 3; ++d) c.centre[d] = tree_.centre[3 * cell + d];
    c.halfSide = tree_.halfSide[cell];
    c.level = tree_.level[cell];
    // Probes lie at most E / (2 kMaxExtentOverGroupScale) <= halfSide / kMaxExtentOverGroupScale outside the cell
    // (E <= its edge); twice that leaves room for rounding.
    const double reach = c.halfSide * (1.0 + 2.0 / kMaxExtentOverGroupScale);
    for (int l = c.level - 1; l > 0 && c.probeRoot == 0; --l) {
      const std::uint32_t ancestor = ancestors_[l];
      bool holds = true;
      for (int d = 0; d < 3; ++d) {
        holds = holds && std::abs(c.centre[d] - tree_.centre[3 * ancestor + d]) + reach <= tree_.halfSide[ancestor];
      }
      if (holds) c.probeRoot = ancestor;
    }
    return c;
  }

  // A pack of siblings lies in its parent's cube, which serves as its cube for the extent rule (a failing pack is
  // split into its members, each then tested as a cell).
  Candidate packCandidate(std::uint32_t parent, std::uint32_t firstMember, std::uint32_t lastMember) const {
    if (lastMember - firstMember == 1) return cellCandidate(firstMember, tree_.bodies[firstMember], true);
    Candidate c = cellCandidate(parent, {tree_.bodies[firstMember].first, tree_.bodies[lastMember - 1].last}, false);
    c.firstMember = firstMember;
    c.numMembers = lastMember - firstMember;
    return c;
  }

  void emit(const Candidate& c) {
    if (pieces_ != nullptr) {
      pieces_->emplace_back().candidate = c;
    } else {
      out_->push_back(c);
    }
  }

  void visit(std::uint32_t cell) {
    ancestors_.resize(tree_.level[cell]);  // ancestors_[l]: the cell of level l on the path to the current cell
    ancestors_.push_back(cell);
    const BodyRange range = tree_.bodies[cell];
    if (range.size() <= ncrit_) {
      emit(cellCandidate(cell, range, true));
    } else if (tree_.isLeaf(cell)) {
      // A leaf with more than ncrit bodies: consecutive chunks, each a candidate in the leaf's cube.
      for (std::uint32_t first = range.first; first < range.last; first += ncrit_) {
        emit(cellCandidate(cell, {first, std::min(range.last, first + ncrit_)}, false));
      }
    } else {
      // Consecutive small children are packed greedily (optimal for the number of packs of contiguous runs), but a
      // pack must be a block of octants with no other child between them: the box around octants {1, 2} of a cube
      // also covers octants 0 and 3, and if either holds bodies (a dense core beside two sparse corners) the pack's
      // box would lie over them and its list would take in everything there. A pack that fails gives back its last
      // members until it passes (a single cell always does).
      const std::uint32_t firstChild = tree_.firstChild[cell];
      const std::uint32_t lastChild = firstChild + tree_.numChildren[cell];
      std::uint32_t digits[8];
      for (std::uint32_t child = firstChild; child < lastChild; ++child) {
        digits[child - firstChild] = octantDigit(&tree_.centre[3 * child], &tree_.centre[3 * cell]);
      }
      const auto isBlock = [&](std::uint32_t first, std::uint32_t last) {
        std::uint32_t any = 0, all = 7;  // bits set in some member, bits set in every member
        for (std::uint32_t child = first; child < last; ++child) {
          any |= digits[child - firstChild];
          all &= digits[child - firstChild];
        }
        const std::uint32_t sharedAxes = ~(any ^ all) & 7u;  // axes on which every member lies on the same side
        for (std::uint32_t child = firstChild; child < lastChild; ++child) {
          const bool member = child >= first && child < last;
          if (!member && (digits[child - firstChild] & sharedAxes) == (all & sharedAxes)) return false;
        }
        return true;
      };
      std::uint32_t child = firstChild;
      while (child < lastChild) {
        if (tree_.bodies[child].size() > ncrit_) {
          if (pieces_ != nullptr && tree_.bodies[child].size() <= deferBodies_) {
            Piece& piece = pieces_->emplace_back();
            piece.subtree = child;
            std::copy(ancestors_.begin(), ancestors_.end(), piece.ancestors.begin());
          } else {
            visit(child);
            ancestors_.resize(tree_.level[cell] + 1);  // the descent replaced the deeper entries
          }
          ++child;
          continue;
        }
        std::uint32_t last = child + 1;
        std::uint32_t bodies = tree_.bodies[child].size();
        while (last < lastChild && bodies + tree_.bodies[last].size() <= ncrit_) bodies += tree_.bodies[last++].size();
        while (last - child > 1 && !isBlock(child, last)) --last;
        emit(packCandidate(cell, child, last));
        child = last;
      }
    }
  }

  const Octree& tree_;
  const std::uint32_t ncrit_;
  std::vector<std::uint32_t> ancestors_;
  std::vector<Candidate>* out_ = nullptr;
  std::vector<Piece>* pieces_ = nullptr;
  std::size_t deferBodies_ = 0;
};

}  // namespace

void makeGroups(const Octree& tree, const SourceView& sources, std::uint32_t ncrit, Groups& groups) {
  MATCHA_ASSERT(ncrit >= 1, "ncrit must be >= 1");
  // 1. Candidates by count (CandidateFinder). A serial descent over the largest cells cuts the bodies into pieces,
  //    in body order, and the rest runs in parallel over pieces: the descent stops at the first cell small enough, so
  //    the serial part visits only the few cells above the pieces.
  const std::size_t numBodies = tree.bodies[0].size();
  std::vector<Piece> pieces;
  CandidateFinder(tree, ncrit).findPieces(std::max(numBodies / kMinPieces, 4 * std::size_t{ncrit}), pieces);

  // 2. Per candidate, its tight box and the extent rule. One body, or the deepest level, cannot split. A candidate
  //    that fails is split (tree children, else virtual octants) and the pieces are tested in turn, depth-first (few
  //    candidates fail).
  const auto isFinal = [&](const Candidate& c, const TightBox& box) {
    return c.range.size() == 1 || c.level >= kMaxLevel || passesExtentRule(tree, sources, box, c.probeRoot, ncrit);
  };
  tbb::enumerable_thread_specific<PieceScratch> scratch;
  tbb::parallel_for(std::size_t{0}, pieces.size(), [&](std::size_t p) {
    Piece& piece = pieces[p];
    PieceScratch& local = scratch.local();
    local.candidates.clear();
    if (piece.subtree != kNoCell) {
      CandidateFinder(tree, ncrit)
          .find(piece.subtree, {piece.ancestors.data(), tree.level[piece.subtree]}, local.candidates);
    } else {
      local.candidates.push_back(piece.candidate);
    }
    Groups& found = local.groups;
    piece.found = &found;
    piece.firstGroup = found.size();
    piece.numCandidates = local.candidates.size();
    const std::size_t splitsBefore = found.numExtentSplits;
    const auto split = [&](const Candidate& c) {
      ++found.numExtentSplits;
      local.children.clear();
      splitCandidate(tree, sources, c, local.children);
      local.pending.insert(local.pending.end(), local.children.rbegin(), local.children.rend());
    };
    for (const Candidate& candidate : local.candidates) {
      const TightBox box = computeTightBox(sources, candidate.range);
      if (isFinal(candidate, box)) {
        appendGroup(candidate.range, box, found);
        continue;
      }
      split(candidate);
      while (!local.pending.empty()) {
        const Candidate next = local.pending.back();
        local.pending.pop_back();
        const TightBox nextBox = computeTightBox(sources, next.range);
        if (isFinal(next, nextBox)) {
          appendGroup(next.range, nextBox, found);
        } else {
          split(next);
        }
      }
    }
    piece.numGroups = found.size() - piece.firstGroup;
    piece.numExtentSplits = found.numExtentSplits - splitsBefore;
  });

  // 3. The pieces' groups, concatenated in body order.
  std::vector<std::size_t> firstGroup(pieces.size());
  std::size_t numGroups = 0;
  groups.numCandidates = 0;
  groups.numExtentSplits = 0;
  for (std::size_t p = 0; p < pieces.size(); ++p) {
    firstGroup[p] = numGroups;
    numGroups += pieces[p].numGroups;
    groups.numCandidates += pieces[p].numCandidates;
    groups.numExtentSplits += pieces[p].numExtentSplits;
  }
  groups.ranges.resize(numGroups);
  groups.centre.resize(3 * numGroups);
  groups.halfExtent.resize(3 * numGroups);
  tbb::parallel_for(std::size_t{0}, pieces.size(), [&](std::size_t p) {
    const Piece& piece = pieces[p];
    const Groups& found = *piece.found;
    const std::size_t first = piece.firstGroup, last = first + piece.numGroups;
    std::copy(found.ranges.begin() + first, found.ranges.begin() + last, groups.ranges.begin() + firstGroup[p]);
    std::copy(found.centre.begin() + 3 * first, found.centre.begin() + 3 * last,
              groups.centre.begin() + 3 * firstGroup[p]);
    std::copy(found.halfExtent.begin() + 3 * first, found.halfExtent.begin() + 3 * last,
              groups.halfExtent.begin() + 3 * firstGroup[p]);
  });
  groups.relativeTolerance.assign(numGroups, std::numeric_limits<double>::infinity());
}

void setGroupBoxesOfBalls(const SourceView& sources, const float* radius, Groups& groups) {
  tbb::parallel_for(std::size_t{0}, groups.size(), [&](std::size_t g) {
    const BodyRange range = groups.ranges[g];
    const double* coordinates[3] = {sources.x, sources.y, sources.z};
    for (int d = 0; d < 3; ++d) {
      double lo = std::numeric_limits<double>::infinity(), hi = -lo;
      for (std::uint32_t i = range.first; i < range.last; ++i) {
        lo = std::min(lo, coordinates[d][i] - double(radius[i]));
        hi = std::max(hi, coordinates[d][i] + double(radius[i]));
      }
      groups.centre[3 * g + d] = 0.5 * (lo + hi);
      // Rounded up by a relative 2^-50 so that the ball's extreme points stay inside after the subtraction.
      groups.halfExtent[3 * g + d] = 0.5 * (hi - lo) * (1.0 + 0x1p-50) + 0x1p-60 * std::abs(hi);
    }
  });
}

bool setRelativeTolerances(const Particles& previous, double alpha, double G, Groups& groups) {
  return setRelativeTolerances(AccelerationSet{previous.ax, previous.ay, previous.az}, alpha, G, groups);
}

namespace {

/// The sum of magnitude(i) over `count` bodies. A deterministic reduce over fixed blocks: the floor, and so the lists,
/// must not depend on how the threads split the sum (runs would differ bit by bit from one run or thread count to the
/// next).
template <typename Magnitude>
double sumMagnitudes(std::size_t count, const Magnitude& magnitude) {
  return tbb::parallel_deterministic_reduce(
      tbb::blocked_range<std::size_t>(0, count, 4096), 0.0,
      [&](const tbb::blocked_range<std::size_t>& block, double sum) {
        for (std::size_t i = block.begin(); i < block.end(); ++i) sum += magnitude(i);
        return sum;
      },
      std::plus<>());
}

/// Each group's tolerance from the smallest magnitude(i) of its bodies, floored at `floor`.
template <typename Magnitude>
void setTolerancesWithFloor(const Magnitude& magnitude, double floor, double alpha, double G, Groups& groups) {
  groups.relativeTolerance.resize(groups.size());
  tbb::parallel_for(std::size_t{0}, groups.size(), [&](std::size_t g) {
    double minAccel = std::numeric_limits<double>::infinity();
    for (std::uint32_t i = groups.ranges[g].first; i < groups.ranges[g].last; ++i)
      minAccel = std::min(minAccel, double(magnitude(i)));
    groups.relativeTolerance[g] = alpha * std::max(minAccel, floor) / G;
  });
}

/// setRelativeTolerances over `count` bodies whose |a| is magnitude(i).
template <typename Magnitude>
bool setTolerancesFrom(std::size_t count, const Magnitude& magnitude, double alpha, double G, Groups& groups) {
  MATCHA_ASSERT(count == (groups.size() == 0 ? 0 : groups.ranges.back().last), "groups and bodies differ");
  groups.relativeTolerance.assign(groups.size(), std::numeric_limits<double>::infinity());
  if (alpha <= 0.0 || groups.size() == 0) return false;
  const double sumAccel = sumMagnitudes(count, magnitude);
  if (!(sumAccel > 0.0) || !std::isfinite(sumAccel)) return false;
  setTolerancesWithFloor(magnitude, kRelativeFloorOfMeanAccel * sumAccel / double(count), alpha, G, groups);
  return true;
}

/// |a| of body i of `a`.
struct Magnitude {
  const AccelerationSet& a;
  double operator()(std::size_t i) const {
    return std::sqrt(a.ax[i] * a.ax[i] + a.ay[i] * a.ay[i] + a.az[i] * a.az[i]);
  }
};

}  // namespace

bool setRelativeTolerances(const AccelerationSet& previous, double alpha, double G, Groups& groups) {
  return setTolerancesFrom(previous.ax.size(), Magnitude{previous}, alpha, G, groups);
}

bool setRelativeTolerances(std::span<const float> accelerationMagnitudes, double alpha, double G, Groups& groups) {
  return setTolerancesFrom(
      accelerationMagnitudes.size(), [&](std::size_t i) { return double(accelerationMagnitudes[i]); }, alpha, G,
      groups);
}

bool setRelativeTolerances(std::span<const double> accelerationMagnitudes, double alpha, double G, Groups& groups) {
  return setTolerancesFrom(
      accelerationMagnitudes.size(), [&](std::size_t i) { return accelerationMagnitudes[i]; }, alpha, G, groups);
}

double sumOfAccelerationMagnitudes(const AccelerationSet& accelerations) {
  return sumMagnitudes(accelerations.ax.size(), Magnitude{accelerations});
}

void setRelativeTolerancesWithTotal(const AccelerationSet& accelerations, double sumOfMagnitudes, double numBodies,
                                    double alpha, double G, Groups& groups) {
  MATCHA_ASSERT(alpha > 0.0 && sumOfMagnitudes > 0.0, "the relative test needs alpha > 0 and a positive sum of |a|");
  MATCHA_ASSERT(accelerations.ax.size() == (groups.size() == 0 ? 0 : groups.ranges.back().last),
                "groups and bodies differ");
  setTolerancesWithFloor(Magnitude{accelerations}, kRelativeFloorOfMeanAccel * sumOfMagnitudes / numBodies, alpha, G,
                         groups);
}

double sumOfAccelerationMagnitudes(std::span<const double> accelerationMagnitudes) {
  return sumMagnitudes(accelerationMagnitudes.size(), [&](std::size_t i) { return accelerationMagnitudes[i]; });
}

void setRelativeTolerancesWithTotal(std::span<const double> accelerationMagnitudes, double sumOfMagnitudes,
                                    double numBodies, double alpha, double G, Groups& groups) {
  MATCHA_ASSERT(alpha > 0.0 && sumOfMagnitudes > 0.0, "the relative test needs alpha > 0 and a positive sum of |a|");
  MATCHA_ASSERT(accelerationMagnitudes.size() == (groups.size() == 0 ? 0 : groups.ranges.back().last),
                "groups and bodies differ");
  setTolerancesWithFloor([&](std::size_t i) { return accelerationMagnitudes[i]; },
                         kRelativeFloorOfMeanAccel * sumOfMagnitudes / numBodies, alpha, G, groups);
}

}  // namespace matcha::tree
