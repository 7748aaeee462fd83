// SPDX-License-Identifier: MIT
// The CPU near-field engine: the CUDA engine's twin (STYLE.md habit 3), OpenMP over groups and SIMD over j-bodies.
// In double precision it is the test oracle; in float it is the fast CPU fallback.
#pragma once

#include <memory>
#include <string>

#include "matcha/core/near_field_engine.hpp"

namespace matcha::gpu {

enum class Precision { float32, float64 };

class CpuEngine final : public NearFieldEngine {
 public:
  /// float32: coordinates relative to each group's centre in float, per-tile partial sums in float added into
  /// double accumulators (the Chamomile scheme). float64: everything in double; this is the oracle.
  explicit CpuEngine(Precision precision = Precision::float32);
  ~CpuEngine() override;
  CpuEngine(const CpuEngine&) = delete;
  CpuEngine& operator=(const CpuEngine&) = delete;

  std::string name() const override;

  /// With gravity.periodic enabled: the periodic TreePM short range (nearest images, erfc-truncated pairs and cells).
  InteractionCounts evaluatePlan(const SourceView& sources, const CellMultipoles& cells, const InteractionPlan& plan,
                                 const GravityParams& gravity, const ForceView& out) override;
  bool periodicShortRange() const override { return true; }

  /// Direct summation as a plan: blocks of consecutive bodies as groups, every body in every list. Bodies in
  /// space-filling-curve order (as the tree solver leaves them) give compact blocks and so the best float accuracy.
  InteractionCounts evaluateDirect(const SourceView& sources, const GravityParams& gravity,
                                   const ForceView& out) override;

  /// The whole evaluation as kernels: there is nothing to copy.
  EngineTimings lastTimings() const override { return timings_; }

  /// Resident lists (NearFieldEngine), the CUDA engine's twin: the refit runs level by level over the cells with
  /// core/cell_refit.hpp's refitCell, the groups in parallel, and every accepted cell of an evaluated list is checked
  /// with core/opening_criterion.hpp. launchResident does all the work; finishResident only reports it.
  void setTree(const TreeTopology& topology, const SourceView& bodies) override;
  void setLists(const InteractionPlan& plan) override;
  void dropLists() override;
  void launchResident(const SourceView& bodies, const GravityParams& gravity, const ForceView& out,
                      std::span<const std::uint32_t> groups, const BodyUpdate& update) override;
  ResidentResult finishResident() override;
  void discardResident() override;

  Precision precision() const { return precision_; }

 private:
  struct Resident;

  Precision precision_;
  EngineTimings timings_;
  std::unique_ptr<Resident> resident_;
};

/// Builds the plan that makes direct summation a group x list evaluation: groups of `blockSize` consecutive bodies,
/// each group's centre the mean position of its bodies, and one list holding every body. Shared by the engines.
/// Allocates the plan; reads positions only.
/// Sets accurateNearPairs (direct summation is the float accuracy reference).
InteractionPlan makeDirectPlan(const SourceView& sources, std::uint32_t blockSize);
/// The same onto the targets [targets.first, targets.last) only (every source still in every list): direct sums for
/// a subsample of bodies placed first.
InteractionPlan makeDirectPlan(const SourceView& sources, std::uint32_t blockSize, BodyRange targets);
/// The same with every group's list the sources [list.first, list.last) instead of every source: direct sums onto the
/// targets from another set of bodies held in the same SourceView (lib/'s CUNBODY-1 call puts its i-bodies, of mass 0,
/// before its j-bodies, so that each i-body's sum runs over the j-bodies alone).
InteractionPlan makeDirectPlan(const SourceView& sources, std::uint32_t blockSize, BodyRange targets, BodyRange list);

}  // namespace matcha::gpu
