// SPDX-License-Identifier: MIT
#include "matcha/tree/batch_evaluation.hpp"

#include <functional>

#include "matcha/core/errors.hpp"
#include "matcha/core/stopwatch.hpp"

namespace matcha::tree {

BatchEvaluation::Evaluated BatchEvaluation::evaluate(const InteractionPlan& plan, PlanBatch where) {
  Evaluated done;
  done.counts = engine_.evaluatePlanBatch(sources_, cells_, plan, gravity_, out_, where);
  done.timings = engine_.lastTimings();  // read by the thread that evaluated, before the next evaluation
  return done;
}

void BatchEvaluation::take(const Evaluated& done) {
  counts_ += done.counts;
  report_.counts += done.counts;
  report_.timings[Phase::upload] += done.timings.uploadSeconds;
  report_.timings[Phase::kernels] += done.timings.kernelSeconds;
  report_.timings[Phase::download] += done.timings.downloadSeconds;
}

void BatchEvaluation::hand(const InteractionPlan& plan, PlanBatch where) {
  if (!beside_) {
    evaluateNow(plan, where);
    return;
  }
  MATCHA_ASSERT(!inFlight_.valid(), "BatchEvaluation: a batch handed while another is in flight");
  inFlight_ = std::async(std::launch::async, &BatchEvaluation::evaluate, this, std::cref(plan), where);
}

void BatchEvaluation::collect() {
  if (!inFlight_.valid()) return;
  const Stopwatch waiting;
  const Evaluated done = inFlight_.get();
  report_.timings.engineWaitSeconds += waiting.seconds();
  take(done);
}

}  // namespace matcha::tree
