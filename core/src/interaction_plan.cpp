// SPDX-License-Identifier: MIT
#include "matcha/core/interaction_plan.hpp"

#include <limits>

#include "matcha/core/errors.hpp"

namespace matcha {

void appendGroups(const InteractionPlan& from, std::size_t first, std::size_t last, InteractionPlan& to) {
  MATCHA_ASSERT(first <= last && last <= from.numGroups(), "appendGroups: groups outside the plan");
  MATCHA_ASSERT(from.groupIds.empty() || to.groupIds.size() == to.numGroups(), "appendGroups: group ids mismatched");
  MATCHA_ASSERT(from.listBodyCounts.empty() || to.listBodyCounts.size() == to.numGroups(),
                "appendGroups: list body counts mismatched");
  if (first == last) return;
  to.groups.insert(to.groups.end(), from.groups.begin() + first, from.groups.begin() + last);
  to.groupCentres.insert(to.groupCentres.end(), from.groupCentres.begin() + 3 * first,
                         from.groupCentres.begin() + 3 * last);
  if (!from.groupIds.empty()) {
    to.groupIds.insert(to.groupIds.end(), from.groupIds.begin() + first, from.groupIds.begin() + last);
  }
  if (!from.listBodyCounts.empty()) {
    to.listBodyCounts.insert(to.listBodyCounts.end(), from.listBodyCounts.begin() + first,
                             from.listBodyCounts.begin() + last);
  }
  const std::uint32_t cellsFrom = from.cellListOffsets[first], cellsTo = from.cellListOffsets[last];
  const std::uint32_t rangesFrom = from.bodyListOffsets[first], rangesTo = from.bodyListOffsets[last];
  constexpr std::size_t kMaxEntries = std::numeric_limits<std::uint32_t>::max();
  MATCHA_ASSERT(to.cellList.size() + (cellsTo - cellsFrom) <= kMaxEntries &&
                    to.bodyList.size() + (rangesTo - rangesFrom) <= kMaxEntries,
                "appendGroups: interaction lists exceed 32-bit offsets");
  // Each appended group's offsets move by what `to` held before and what `from` held before `first`.
  const auto cellShift = static_cast<std::uint32_t>(to.cellList.size()) - cellsFrom;
  const auto rangeShift = static_cast<std::uint32_t>(to.bodyList.size()) - rangesFrom;
  to.cellList.insert(to.cellList.end(), from.cellList.begin() + cellsFrom, from.cellList.begin() + cellsTo);
  to.bodyList.insert(to.bodyList.end(), from.bodyList.begin() + rangesFrom, from.bodyList.begin() + rangesTo);
  for (std::size_t g = first; g < last; ++g) {
    to.cellListOffsets.push_back(from.cellListOffsets[g + 1] + cellShift);  // unsigned wrap-around cancels
    to.bodyListOffsets.push_back(from.bodyListOffsets[g + 1] + rangeShift);
  }
}

}  // namespace matcha
