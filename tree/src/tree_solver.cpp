// SPDX-License-Identifier: MIT
#include "matcha/tree/tree_solver.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_reduce.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <numeric>

#include "matcha/core/errors.hpp"
#include "matcha/core/stopwatch.hpp"
#include "matcha/tree/space_filling_curve.hpp"

namespace matcha::tree {

namespace {

/// Ids compared at this many positions to notice that the caller reordered or replaced its bodies between calls.
constexpr std::size_t kIdSamples = 64;

/// The acceleration of a body may change by this fraction of itself over a tree's calls before its ball (below) is
/// too small: room for close encounters, which change it fastest.
constexpr double kAccelerationChange = 1.0;

/// A repair of more than this fraction of the groups says the prediction no longer holds: the next call builds anew.
constexpr double kRepairRebuildFraction = 0.01;

/// The walk hands the engine batches of about this many list entries (cells + j-bodies), so that the host holds one
/// batch's lists at a time however many there are; the first batch has kFirstBatchGroups groups.
constexpr std::uint64_t kPlanEntries = std::uint64_t{1} << 26;
constexpr std::uint32_t kFirstBatchGroups = 2048;

/// With TreeParams::reuse 0: every this many trees, K's neighbours are measured again (the system evolves).
constexpr std::uint64_t kReexplore = 16;

}  // namespace

/// The positions of the last calls, in the caller's order, and the predicted positions and their balls.
struct TreeSolver::Motion {
  std::vector<double> previousX, previousY, previousZ;  ///< positions at the call before this one
  std::vector<double> earlierX, earlierY, earlierZ;     ///< positions at the call before that
  int numKnown = 0;                                     ///< how many of the two are known (0, 1 or 2)
  std::vector<double> predictedX, predictedY, predictedZ;
  std::vector<float> radius;

  void reset() { numKnown = 0; }

  /// Remembers the positions of `p` as the latest call's.
  void record(const Particles& p) {
    previousX.swap(earlierX);
    previousY.swap(earlierY);
    previousZ.swap(earlierZ);
    const std::size_t n = p.size();
    for (auto* array : {&previousX, &previousY, &previousZ}) array->resize(n);
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n, 8192), [&](const tbb::blocked_range<std::size_t>& r) {
      std::copy(p.x.begin() + r.begin(), p.x.begin() + r.end(), previousX.begin() + r.begin());
      std::copy(p.y.begin() + r.begin(), p.y.begin() + r.end(), previousY.begin() + r.begin());
      std::copy(p.z.begin() + r.begin(), p.z.begin() + r.end(), previousZ.begin() + r.begin());
    });
    numKnown = std::min(numKnown + 1, 2);
  }

  /// Puts the remembered positions into the order the bodies were just given (new[i] = old[order[i]]).
  void permute(std::span<const std::uint32_t> order, std::vector<double>& scratch) {
    for (auto* array : {&previousX, &previousY, &previousZ, &earlierX, &earlierY, &earlierZ}) {
      if (array->size() != order.size()) continue;
      scratch.resize(order.size());
      tbb::parallel_for(tbb::blocked_range<std::size_t>(0, order.size(), 8192),
                        [&](const tbb::blocked_range<std::size_t>& r) {
                          for (std::size_t i = r.begin(); i != r.end(); ++i) scratch[i] = (*array)[order[i]];
                        });
      array->swap(scratch);
    }
  }

  /// The positions over calls 0 .. steps - 1 from now (call 0 being `p` as it is), extrapolated from the last three
  /// calls' positions: with displacement d1 = x - x_previous and second difference d2 = d1 - (x_previous - x_earlier),
  /// call k is at x + k d1 + k (k + 1) / 2 d2, exact for a leapfrog step under constant acceleration. Each body's
  /// path over the calls becomes a ball: the midpoint of the first and last positions, with a radius that holds
  /// the path (half the chord plus the parabola's sag, |d2| (k_max)^2 / 8) and the prediction's error should the
  /// acceleration change by kAccelerationChange of itself (|d2| k_max (k_max + 1) / 2 times that).
  void predict(const Particles& p, std::uint32_t steps) {
    const std::size_t n = p.size();
    for (auto* array : {&predictedX, &predictedY, &predictedZ}) array->resize(n);
    radius.resize(n);
    const double last = double(steps - 1);
    const double chordFactor = last * (last + 1.0) / 2.0;
    const double room = last * last / 8.0 + kAccelerationChange * last * (last + 1.0) / 2.0;
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n, 4096), [&](const tbb::blocked_range<std::size_t>& r) {
      for (std::size_t i = r.begin(); i != r.end(); ++i) {
        const double x[3] = {p.x[i], p.y[i], p.z[i]};
        const double previous[3] = {previousX[i], previousY[i], previousZ[i]};
        const double earlier[3] = {earlierX[i], earlierY[i], earlierZ[i]};
        double end[3], chord2 = 0.0, sag2 = 0.0;
        for (int d = 0; d < 3; ++d) {
          const double displacement = x[d] - previous[d];
          const double secondDifference = displacement - (previous[d] - earlier[d]);
          end[d] = x[d] + last * displacement + chordFactor * secondDifference;
          chord2 += (end[d] - x[d]) * (end[d] - x[d]);
          sag2 += secondDifference * secondDifference;
        }
        predictedX[i] = 0.5 * (x[0] + end[0]);
        predictedY[i] = 0.5 * (x[1] + end[1]);
        predictedZ[i] = 0.5 * (x[2] + end[2]);
        const double ball = 0.5 * std::sqrt(chord2) + room * std::sqrt(sag2);
        // Rounded up, with a relative margin for the rounding of the midpoint and the float.
        radius[i] = std::nextafter(static_cast<float>(ball * (1.0 + 1e-6)), std::numeric_limits<float>::infinity());
      }
    });
  }
};

TreeSolver::TreeSolver(NearFieldEngine& engine, const TreeParams& treeParams, const GravityParams& gravity)
    : engine_(engine), params_(treeParams), gravity_(gravity), motion_(std::make_unique<Motion>()) {
  params_.validate();
  gravity_.validate();
}

TreeSolver::~TreeSolver() = default;

std::string TreeSolver::describe() const {
  char alpha[32] = "";
  if (params_.alpha > 0.0) std::snprintf(alpha, sizeof alpha, ", alpha %g", params_.alpha);
  char reuse[48] = ", reuse auto";
  if (params_.reuse == 1) std::snprintf(reuse, sizeof reuse, ", reuse off");
  if (params_.reuse > 1) std::snprintf(reuse, sizeof reuse, ", reuse %u steps", params_.reuse);
  char text[224];
  std::snprintf(text, sizeof text, "tree (theta %g%s, ncrit %u, nleaf %u, %s%s) on ", params_.theta, alpha,
                params_.ncrit, params_.nleaf, toString(params_.multipole).c_str(), reuse);
  return text + engine_.name();
}

void TreeSolver::reset() {
  hasTree_ = false;
  motion_->reset();
  idSample_.clear();
}

bool TreeSolver::sameBodies(const Particles& particles) const {
  if (idSample_.size() != std::min(kIdSamples, particles.size()) || topology_.numBodies() != particles.size()) {
    return false;
  }
  for (std::size_t k = 0; k < idSample_.size(); ++k) {
    if (particles.id[k * particles.size() / idSample_.size()] != idSample_[k]) return false;
  }
  return true;
}

void TreeSolver::buildTree(Particles& particles, const SourceView& positions, const float* radius,
                           ForceTimings& timings) {
  if (particles.empty()) throw InputError("no bodies to compute forces for");
  if (particles.size() >= (std::size_t{1} << 31)) throw InputError("at most 2^31 - 1 bodies are supported");
  Stopwatch clock;
  const auto phaseDone = [&](Phase phase) {
    timings[phase] += clock.seconds();
    clock.restart();
  };
  const Cube cube = computeBoundingCube(positions);
  computeMortonKeys(positions, cube, keys_);
  phaseDone(Phase::keys);
  sorter_.sort(keys_, sortedKeys_, order_);
  permuter_.permute(particles, order_);
  std::vector<double>& scratch = permuteScratch_;
  motion_->permute(order_, scratch);
  const bool predicted = radius != nullptr;
  SourceView sorted = particles.sources();
  if (predicted) {
    // The predicted positions and balls go along: the tree is built over them.
    Motion& m = *motion_;
    for (auto* array : {&m.predictedX, &m.predictedY, &m.predictedZ}) {
      scratch.resize(order_.size());
      tbb::parallel_for(tbb::blocked_range<std::size_t>(0, order_.size(), 8192),
                        [&](const tbb::blocked_range<std::size_t>& r) {
                          for (std::size_t i = r.begin(); i != r.end(); ++i) scratch[i] = (*array)[order_[i]];
                        });
      array->swap(scratch);
    }
    std::vector<float> radii(order_.size());
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, order_.size(), 8192),
                      [&](const tbb::blocked_range<std::size_t>& r) {
                        for (std::size_t i = r.begin(); i != r.end(); ++i) radii[i] = m.radius[order_[i]];
                      });
    m.radius.swap(radii);
    sorted = {m.predictedX.data(), m.predictedY.data(), m.predictedZ.data(), particles.mass.data(), particles.size()};
    radius = m.radius.data();
  }
  phaseDone(Phase::sort);
  buildOctree(sortedKeys_, cube, params_.nleaf, tree_);
  phaseDone(Phase::octree);
  computeMultipoles(sorted, params_.theta, params_.multipole, tree_, radius);
  phaseDone(Phase::multipoles);
  makeGroups(tree_, sorted, params_.ncrit, groups_);
  if (predicted) setGroupBoxesOfBalls(sorted, radius, groups_);
  phaseDone(Phase::groups);

  // What the engine keeps: the topology over the (now sorted) bodies.
  topology_.cellBodies = tree_.bodies;
  topology_.firstChild = tree_.firstChild;
  topology_.numChildren = tree_.numChildren;
  topology_.levelOffsets = tree_.levelOffsets;
  topology_.cellCentre = tree_.centre;
  topology_.cellHalfSide = tree_.halfSide;
  topology_.groups = groups_.ranges;
  topology_.theta = params_.theta;
  topology_.multipole = params_.multipole;
  topology_.order.clear();

  stats_ = TreeStats{};
  stats_.numBodies = particles.size();
  stats_.numCells = tree_.numCells();
  stats_.numLeaves = static_cast<std::uint64_t>(std::count(tree_.numChildren.begin(), tree_.numChildren.end(), 0));
  stats_.depth = tree_.numLevels() - 1;
  stats_.numGroups = groups_.size();
  stats_.meanGroupSize = double(particles.size()) / double(groups_.size());
  for (const BodyRange& range : groups_.ranges)
    stats_.maxGroupSize = std::max<std::uint64_t>(stats_.maxGroupSize, range.size());
  stats_.predicted = predicted;
}

const InteractionPlan& TreeSolver::buildPlanOnly(Particles& particles) {
  reset();
  ForceTimings unused;
  buildTree(particles, particles.sources(), nullptr, unused);
  setRelativeTolerances(particles, params_.alpha, gravity_.G, groups_);
  buildWalkTree(tree_, walkTree_);
  planBuilder_.build(walkTree_, groups_, 0, static_cast<std::uint32_t>(groups_.size()), plan_);
  return plan_;
}

std::uint32_t TreeSolver::chooseReuseSteps() {
  if (params_.reuse != 0) return params_.reuse;
  // Measured costs decide. A tree serving K calls spreads its build over them but makes every call's lists longer
  // (wider balls), by an amount that grows faster than K and depends on the system's speeds and the time step. So the
  // mean wall time per call is measured over whole trees (the build and every call on it), and K climbs: from the
  // best K so far a neighbour is tried; while trials get cheaper K keeps moving that way, otherwise the other way is
  // tried once, then K stays at the best until kReexplore trees later, when the search starts again.
  if (windowCalls_ > 0) {
    const double perCall = windowSeconds_ / double(windowCalls_);
    if (trialSteps_ != 0 && windowSteps_ == trialSteps_) {
      if (perCall < bestCallSeconds_) {
        bestSteps_ = trialSteps_;
        bestCallSeconds_ = perCall;
        turned_ = false;
      } else if (!turned_) {
        direction_ = -direction_;
        turned_ = true;
      } else {
        direction_ = -direction_;  // back to the first direction for the next search
        turned_ = false;
        trialSteps_ = 0;
      }
    } else if (windowSteps_ == bestSteps_) {
      bestCallSeconds_ = perCall;
      turned_ = false;
    }
  }
  windowSeconds_ = 0.0;
  windowCalls_ = 0;
  const bool measuredBest = bestCallSeconds_ < std::numeric_limits<double>::infinity();
  const bool searching = trialSteps_ != 0 || !searchedOnce_;
  if (measuredBest && (searching || ++treesAtBest_ % kReexplore == 0)) {
    searchedOnce_ = true;
    std::int64_t next = std::int64_t{bestSteps_} + direction_;
    if (next < 1 || next > std::int64_t{kMaxAutoReuse}) {
      if (turned_) {
        next = 0;
      } else {
        direction_ = -direction_;
        turned_ = true;
        next = std::int64_t{bestSteps_} + direction_;
      }
    }
    trialSteps_ = next >= 1 && next <= std::int64_t{kMaxAutoReuse} ? static_cast<std::uint32_t>(next) : 0;
  }
  return trialSteps_ != 0 ? trialSteps_ : bestSteps_;
}

bool TreeSolver::walkAllGroups(const Particles& particles, const ForceView& out, ForceReport& report) {
  const auto numGroups = static_cast<std::uint32_t>(groups_.size());
  Stopwatch clock;
  // Walked in batches of about kPlanEntries list entries (the first batch's size is a guess; each next one follows
  // from the entries per group seen), each handed to the engine at once, so the host holds one batch. The engine keeps
  // them all unless they would exceed maxBatchEntries (cells + j-bodies): then the lists stream, each batch evaluated
  // and dropped, the groups kept so far first.
  std::uint32_t batch = std::min<std::uint32_t>(numGroups, kFirstBatchGroups);
  std::uint32_t first = 0;
  std::uint64_t resident = 0;
  bool streaming = false;
  std::uint64_t sumListBodies = 0, sumListCells = 0;
  stats_.maxListBodies = stats_.maxListCells = 0;
  stats_.numBatches = 0;
  while (first < numGroups) {
    const std::uint32_t last = std::min(numGroups, first + batch);
    clock.restart();
    planBuilder_.build(walkTree_, groups_, first, last, plan_);
    report.timings[Phase::walk] += clock.seconds();
    std::uint64_t entries = plan_.cellList.size();
    for (std::size_t g = 0; g < plan_.numGroups(); ++g) {
      const std::uint64_t listBodies = plan_.listBodyCounts[g];
      const std::uint64_t listCells = plan_.numListCells(g);
      entries += listBodies;
      sumListBodies += listBodies;
      sumListCells += listCells;
      stats_.maxListBodies = std::max(stats_.maxListBodies, listBodies);
      stats_.maxListCells = std::max(stats_.maxListCells, listCells);
    }
    ++stats_.numBatches;
    if (!streaming && resident + entries > params_.maxBatchEntries) {
      streaming = true;
      if (first > 0) {
        streamIds_.resize(first);
        std::iota(streamIds_.begin(), streamIds_.end(), 0u);
        engine_.launchResident(particles.sources(), gravity_, out, streamIds_);
        addResult(engine_.finishResident(), report);
      }
      engine_.dropLists();
    }
    clock.restart();
    engine_.setLists(plan_);
    report.timings[Phase::upload] += clock.seconds();
    if (streaming) {
      engine_.launchResident(particles.sources(), gravity_, out, plan_.groupIds);
      addResult(engine_.finishResident(), report);
      engine_.dropLists();
    }
    resident += entries;
    const double perGroup = std::max(1.0, double(entries) / double(last - first));
    batch = static_cast<std::uint32_t>(std::clamp(double(kPlanEntries) / perGroup, 1.0, double(numGroups)));
    first = last;
  }
  stats_.meanListBodies = double(sumListBodies) / double(numGroups);
  stats_.meanListCells = double(sumListCells) / double(numGroups);
  report.numGroupsWalked += numGroups;
  return streaming;
}

void TreeSolver::addResult(const ResidentResult& result, ForceReport& report) {
  report.counts += result.counts;
  report.timings[Phase::upload] += result.timings.uploadSeconds;
  report.timings[Phase::kernels] += result.timings.kernelSeconds;
  report.timings[Phase::download] += result.timings.downloadSeconds;
}

bool TreeSolver::build(Particles& particles, std::uint32_t steps, ForceReport& report) {
  const bool predict = steps > 1 && motion_->numKnown == 2;
  if (!predict) steps = 1;
  if (predict) motion_->predict(particles, steps);
  const Motion& m = *motion_;
  const SourceView positions = predict ? SourceView{m.predictedX.data(), m.predictedY.data(), m.predictedZ.data(),
                                                    particles.mass.data(), particles.size()}
                                       : particles.sources();
  buildTree(particles, positions, predict ? m.radius.data() : nullptr, report.timings);
  report.rebuilt = true;
  hasTree_ = true;
  stats_.reuseSteps = steps;

  if (params_.alpha > 0.0 && !setRelativeTolerances(particles, params_.alpha, gravity_.G, groups_)) {
    // No accelerations to scale the relative test by (fresh initial conditions): get them first from a cheap pass,
    // monopole cells at kEstimateTheta, as GADGET does its first step with a plain opening criterion.
    const Stopwatch estimate;
    ForceReport pass;
    computeMultipoles(particles.sources(), kEstimateTheta, MultipoleOrder::monopole, tree_);
    topology_.theta = kEstimateTheta;
    topology_.multipole = MultipoleOrder::monopole;
    topology_.relativeTolerance.assign(groups_.size(), std::numeric_limits<double>::infinity());
    groups_.relativeTolerance = topology_.relativeTolerance;
    buildWalkTree(tree_, walkTree_);
    engine_.setTree(topology_, particles.sources());
    ForceView accelerations = particles.forces();
    accelerations.pot = nullptr;
    if (!walkAllGroups(particles, accelerations, pass)) {
      engine_.launchResident(particles.sources(), gravity_, accelerations, {});
      addResult(engine_.finishResident(), pass);
    }
    report.counts += pass.counts;
    report.numGroupsWalked += pass.numGroupsWalked;
    report.timings[Phase::estimate] += estimate.seconds();
    computeMultipoles(particles.sources(), params_.theta, params_.multipole, tree_);
    topology_.theta = params_.theta;
    topology_.multipole = params_.multipole;
    setRelativeTolerances(particles, params_.alpha, gravity_.G, groups_);
    stats_.estimatePass = true;
  }
  topology_.relativeTolerance = groups_.relativeTolerance;
  const Stopwatch walkTreeClock;
  buildWalkTree(tree_, walkTree_);
  report.timings[Phase::groups] += walkTreeClock.seconds();
  engine_.setTree(topology_, particles.sources());
  const bool evaluated = walkAllGroups(particles, forcesToWrite(particles), report);
  // Streamed lists were dropped as they were evaluated: nothing to reuse.
  lastValidCall_ = evaluated ? call_ : call_ + steps - 1;
  return evaluated;
}

void TreeSolver::repair(Particles& particles, std::vector<std::uint32_t> failed, ForceReport& report) {
  const Stopwatch clock;
  // The current tree refitted to the exact positions: every cell's centre of mass, size and opening radius as the
  // engine found them, and the failed groups' boxes, then a walk of those groups alone.
  exactTree_.bodies = tree_.bodies;
  exactTree_.firstChild = tree_.firstChild;
  exactTree_.numChildren = tree_.numChildren;
  exactTree_.level = tree_.level;
  exactTree_.centre = tree_.centre;
  exactTree_.halfSide = tree_.halfSide;
  exactTree_.levelOffsets = tree_.levelOffsets;
  computeMultipoles(particles.sources(), params_.theta, params_.multipole, exactTree_);
  exactGroups_ = groups_;
  for (const std::uint32_t g : failed) {
    const BodyRange range = groups_.ranges[g];
    const double* coordinates[3] = {particles.x.data(), particles.y.data(), particles.z.data()};
    for (int d = 0; d < 3; ++d) {
      const auto [lo, hi] = std::minmax_element(coordinates[d] + range.first, coordinates[d] + range.last);
      exactGroups_.centre[3 * g + d] = 0.5 * (*lo + *hi);
      exactGroups_.halfExtent[3 * g + d] = 0.5 * (*hi - *lo);
    }
  }
  buildWalkTree(exactTree_, exactWalkTree_);
  planBuilder_.build(exactWalkTree_, exactGroups_, failed, plan_);
  engine_.setLists(plan_);
  engine_.launchResident(particles.sources(), gravity_, forcesToWrite(particles), failed);
  const ResidentResult result = engine_.finishResident();
  MATCHA_ASSERT(result.failedGroups.empty(), "a list walked at the bodies' current positions failed the check");
  report.counts += result.counts;
  report.numGroupsRepaired += failed.size();
  report.numGroupsWalked += failed.size();
  stats_.numRepaired += failed.size();
  if (double(failed.size()) > kRepairRebuildFraction * double(groups_.size())) lastValidCall_ = call_;
  report.timings[Phase::repair] += clock.seconds();
}

ForceReport TreeSolver::computeForces(Particles& particles) {
  const Stopwatch total;
  ForceReport report;
  if (!sameBodies(particles)) reset();
  ++call_;
  bool evaluated = false;
  const bool building = !hasTree_ || call_ > lastValidCall_;
  if (building) {
    evaluated = build(particles, chooseReuseSteps(), report);
    windowSteps_ = stats_.reuseSteps;
  } else {
    ++stats_.callsOnTree;
    stats_.estimatePass = false;
    stats_.numRepaired = 0;
  }
  if (building) stats_.callsOnTree = 1;
  if (!evaluated) {
    // The bodies may have been sorted: take the views after the build.
    engine_.launchResident(particles.sources(), gravity_, forcesToWrite(particles), {});
    ResidentResult result = engine_.finishResident();
    addResult(result, report);
    if (!result.failedGroups.empty()) repair(particles, std::move(result.failedGroups), report);
  }
  if (params_.reuse != 1) motion_->record(particles);
  idSample_.resize(std::min(kIdSamples, particles.size()));
  for (std::size_t k = 0; k < idSample_.size(); ++k)
    idSample_[k] = particles.id[k * particles.size() / idSample_.size()];
  clearUnwantedPotentials(particles);
  report.timings.totalSeconds = total.seconds();
  // The first calls (allocation, the estimate pass) would make their K look dear: not measured.
  if (call_ > 2 && report.timings[Phase::estimate] == 0.0) {
    windowSeconds_ += report.timings.totalSeconds;
    ++windowCalls_;
  }
  return report;
}

}  // namespace matcha::tree
