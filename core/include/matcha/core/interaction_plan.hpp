// SPDX-License-Identifier: MIT
// The contract between tree/ and the near-field engines in gpu/ (DESIGN.md §1, §3). tree/ fills it, engines read it;
// neither side knows the other.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace matcha {

/// Half-open range [first, last) of bodies in the (sorted) particle order.
struct BodyRange {
  std::uint32_t first = 0;
  std::uint32_t last = 0;
  std::uint32_t size() const { return last - first; }
};

/// Pseudo-bodies for tree cells, indexed by cell id, in double precision on the host; engines convert them to float
/// relative to each group's centre.
///  - monopole: total mass at the centre of mass;
///  - quadrupole (when hasQuadrupole): the traceless tensor about the centre of mass,
///      Q_ab = sum_k m_k (3 d_a d_b - |d|^2 delta_ab),   d = x_k - com,
///    stored as its six components (qzz = -qxx - qyy to rounding; keeping it saves the engines two instructions),
///    and the trace of the second moment, trace = sum_k m_k |d|^2, which the traceless tensor drops but the Plummer-
///    softened potential needs (pair_interaction.hpp: accumulateQuadrupoleInteraction).
/// With hasQuadrupole false the q arrays are empty and cells act as monopoles.
struct CellMultipoles {
  std::vector<double> x, y, z;                       ///< centre of mass
  std::vector<double> mass;                          ///< total mass
  std::vector<double> qxx, qyy, qzz, qxy, qxz, qyz;  ///< traceless quadrupole about the centre of mass
  std::vector<double> trace;                         ///< sum of m |x - com|^2 over the cell's bodies
  bool hasQuadrupole = false;

  std::size_t size() const { return mass.size(); }
  void resize(std::size_t count, bool withQuadrupole) {
    hasQuadrupole = withQuadrupole;
    for (auto* array : {&x, &y, &z, &mass}) array->resize(count);
    for (auto* array : {&qxx, &qyy, &qzz, &qxy, &qxz, &qyz, &trace}) array->resize(withQuadrupole ? count : 0);
  }
  /// Room for `count` cells (their quadrupoles too where `withQuadrupole`), so that resizing up to it moves nothing.
  void reserve(std::size_t count, bool withQuadrupole) {
    for (auto* array : {&x, &y, &z, &mass}) array->reserve(count);
    if (!withQuadrupole) return;
    for (auto* array : {&qxx, &qyy, &qzz, &qxy, &qxz, &qyz, &trace}) array->reserve(count);
  }
};

/// Interaction lists for a batch of groups. Group g owns the i-bodies `groups[g]` and the list
///   cells  cellList[cellListOffsets[g] .. cellListOffsets[g+1])       (ids into CellMultipoles)
///   bodies bodyList[bodyListOffsets[g] .. bodyListOffsets[g+1])       (ranges of j-bodies, disjoint, sorted)
/// A group's own bodies appear in its body list, each exactly once: the engines count the self pair when eps > 0 and
/// take its -m_i/eps out of the potential once per body (pair_interaction.hpp: selfPairPotential).
/// `groupCentres` holds 3 doubles per group: the centre of its bounding box, the origin of the float coordinates
/// the engines use for that group.
struct InteractionPlan {
  std::vector<BodyRange> groups;
  /// The tree's ids of the plan's groups, for NearFieldEngine::setLists; empty otherwise.
  std::vector<std::uint32_t> groupIds;
  /// j-bodies in each group's list (the sum of its ranges' sizes), as the walk counted them; empty when not counted.
  std::vector<std::uint32_t> listBodyCounts;
  std::vector<double> groupCentres;
  std::vector<std::uint32_t> cellListOffsets{0};
  std::vector<std::uint32_t> cellList;
  std::vector<std::uint32_t> bodyListOffsets{0};
  std::vector<BodyRange> bodyList;
  /// Float engines evaluate a tile again in double for a body with a close or strong pair in it
  /// (pair_interaction.hpp: closePairThreshold) when this is set: direct summation sets it, for float forces at the
  /// Chamomile level (E_max ~1e-6). Tree plans leave it off: their multipole error (1e-4) dwarfs the 1e-6 it would
  /// buy, and the self tile is then redone in float, which costs far less.
  bool accurateNearPairs = false;

  std::size_t numGroups() const { return groups.size(); }

  /// Empties the plan but keeps its capacity, so batches reuse memory.
  void clear() {
    groups.clear();
    groupIds.clear();
    listBodyCounts.clear();
    groupCentres.clear();
    cellListOffsets.assign(1, 0);
    cellList.clear();
    bodyListOffsets.assign(1, 0);
    bodyList.clear();
  }

  /// Number of j-bodies in group g's list (sum of its range sizes).
  std::uint64_t numListBodies(std::size_t g) const {
    if (!listBodyCounts.empty()) return listBodyCounts[g];
    std::uint64_t count = 0;
    for (std::uint32_t k = bodyListOffsets[g]; k < bodyListOffsets[g + 1]; ++k) count += bodyList[k].size();
    return count;
  }
  std::uint64_t numListCells(std::size_t g) const { return cellListOffsets[g + 1] - cellListOffsets[g]; }
};

/// Appends groups [first, last) of `from` to `to`: their ranges, centres and lists (`to`'s offsets go on from its
/// own), and their ids and list body counts where `from` has them (`to` must then have them for each of its groups
/// too, or no groups). Throws InvariantError for a range outside `from`, mismatched ids or counts, or lists beyond
/// 32-bit offsets. Allocates.
void appendGroups(const InteractionPlan& from, std::size_t first, std::size_t last, InteractionPlan& to);

/// Interactions evaluated by one force call: the unit of performance (DESIGN.md §3).
struct InteractionCounts {
  std::uint64_t bodyBody = 0;  ///< body-body pair interactions (self pairs included, as the kernels evaluate them)
  std::uint64_t bodyCell = 0;  ///< body-cell (pseudo-body) interactions

  std::uint64_t total() const { return bodyBody + bodyCell; }
  InteractionCounts& operator+=(const InteractionCounts& other) {
    bodyBody += other.bodyBody;
    bodyCell += other.bodyCell;
    return *this;
  }
};

}  // namespace matcha
