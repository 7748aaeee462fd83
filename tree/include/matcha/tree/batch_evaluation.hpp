// SPDX-License-Identifier: MIT
// A force call's lists handed to the engine batch by batch (NearFieldEngine::evaluatePlanBatch), for a caller that
// makes the next batch while the engine evaluates this one: the periodic solver's overlapped walk
// (tree/periodic_tree_solver.hpp) and the distributed solver's merge of local and remote lists (parallel/).
#pragma once

#include <future>

#include "matcha/core/force_solver.hpp"
#include "matcha/core/interaction_plan.hpp"
#include "matcha/core/near_field_engine.hpp"

namespace matcha::tree {

/// An engine on a device (NearFieldEngine::evaluatesOnDevice) evaluates each handed batch on a second host thread
/// while the caller's cores make the next; another engine evaluates it as it is handed (its work would compete with
/// the caller's for the cores). Each evaluation's interactions and upload, kernel and download times are added to
/// `report`, and the caller's waits for a batch in flight to report.timings.engineWaitSeconds. A batch handed must stay
/// unchanged until it is collected; the destructor waits for the batch in flight (std::async's future), so that an
/// exception in the caller's walk leaves no evaluation reading its plans.
class BatchEvaluation {
 public:
  BatchEvaluation(NearFieldEngine& engine, const SourceView& sources, const CellMultipoles& cells,
                  const GravityParams& gravity, const ForceView& out, ForceReport& report)
      : engine_(engine),
        sources_(sources),
        cells_(cells),
        gravity_(gravity),
        out_(out),
        report_(report),
        beside_(engine.evaluatesOnDevice()) {}
  BatchEvaluation(const BatchEvaluation&) = delete;
  BatchEvaluation& operator=(const BatchEvaluation&) = delete;

  /// Whether handed batches run on a second host thread.
  bool beside() const { return beside_; }
  /// Evaluates `plan` as the call's batch `where`: on the second thread where beside() (collect() the batch before
  /// first: one is in flight at a time), else now.
  void hand(const InteractionPlan& plan, PlanBatch where);
  /// Evaluates `plan` as batch `where` on this thread, now.
  void evaluateNow(const InteractionPlan& plan, PlanBatch where) { take(evaluate(plan, where)); }
  /// Waits for the batch in flight, if any, and adds it to the report.
  void collect();
  /// The interactions of every batch evaluated and collected so far.
  const InteractionCounts& counts() const { return counts_; }

 private:
  struct Evaluated {
    InteractionCounts counts;
    EngineTimings timings;
  };
  Evaluated evaluate(const InteractionPlan& plan, PlanBatch where);
  void take(const Evaluated& done);

  NearFieldEngine& engine_;
  SourceView sources_;
  const CellMultipoles& cells_;
  const GravityParams& gravity_;
  ForceView out_;
  ForceReport& report_;
  bool beside_;
  InteractionCounts counts_;
  std::future<Evaluated> inFlight_;  ///< last: destroyed (waited for) first
};

}  // namespace matcha::tree
