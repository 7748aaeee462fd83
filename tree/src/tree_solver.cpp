// SPDX-License-Identifier: MIT
#include "matcha/tree/tree_solver.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <limits>
#include <numeric>
#include <optional>
#include <span>
#include <type_traits>

#include "matcha/core/errors.hpp"
#include "matcha/core/stopwatch.hpp"
#include "matcha/core/tree_prediction.hpp"
#include "matcha/tree/space_filling_curve.hpp"
#include "parallel_arrays.hpp"

namespace matcha::tree {

namespace {

/// Ids compared at this many positions to notice that the caller reordered or replaced its bodies between calls.
constexpr std::size_t kIdSamples = 64;

/// A repair of more than this fraction of the groups says the prediction no longer holds: the next call builds anew.
constexpr double kRepairRebuildFraction = 0.01;

/// With TreeParams::reuse 0: every this many trees, K's neighbours are measured again (the system evolves).
constexpr std::uint64_t kReexplore = 16;

/// With TreeParams::reuse 0: the costs of the first trees are not measured. Their builds touch fresh memory (each
/// of the two trees' buffers, page by page) and ran 2-3x slower than later ones on the H200's host (sort 45-53 ms
/// against 13 at 2^20), which would make the K tried first look dear.
constexpr std::uint64_t kAutoWarmUpTrees = 3;

/// With TreeParams::reuse 0: a K on trial must beat the best K's smoothed cost by kAutoMargin to replace it. One
/// tree's mean time per call spreads by ~20% on the H200's host: at 2^22, without a margin, a lucky trial moved the
/// search to K = 2 (110 ms a step, against 93 at K = 3) for the next 16 trees. Trials are one tree long: timed over
/// two trees, a trial of K = 4 cost 8 steps at 1.5x (152 ms a step against 101 at 2^22).
constexpr double kAutoMargin = 0.1;

}  // namespace

/// What the predictions of trees built for later calls know of the bodies' motion, in the caller's order: how they
/// moved into this call and the one before, and the predicted positions and their balls.
///
/// Where the caller announces its motion between calls (ForceSolver::expectAdvance: a leapfrog's kicks and drift),
/// the last displacements follow from the bodies' state itself, x_c - x_(c-1) = v drift (the velocity the drift used
/// is the one the body has at the call) and x_(c-1) - x_(c-2) = (v - a (kicks)) drift_before, a being the accelerations
/// of the call before (which the kicks used): no history of positions is kept. Otherwise the positions of the last two
/// calls are recorded at the end of each call (three arrays copied, 48 bytes a body, a memory-bound pass that took
/// ~7 ms a call at 2^22 bodies on the H200's host). The accelerations of the last two calls are kept as floats: only
/// their change, which scales the relative test's allowance, is read from them.
struct TreeSolver::Motion {
  std::vector<double> previousX, previousY, previousZ;  ///< positions at the call before this one (unannounced motion)
  std::vector<double> earlierX, earlierY, earlierZ;     ///< positions at the call before that
  int positionsKnown = 0;                               ///< how many of the two are known (0, 1 or 2)
  /// The announced motion into this call (from the call before) and into the call before (from the one before it).
  std::optional<BodyAdvance> advanceIn, advanceBefore;
  /// The acceleration of each body at the call before this one and at the call before that (accelerationsKnown):
  /// how it changes, which the relative test of a tree built in the background must allow for (lowestAcceleration).
  std::vector<float> previousAx, previousAy, previousAz, earlierAx, earlierAy, earlierAz;
  int accelerationsKnown = 0;
  std::vector<double> predictedX, predictedY, predictedZ;
  std::vector<float> radius;

  void reset() {
    positionsKnown = 0;
    accelerationsKnown = 0;
    advanceIn.reset();
    advanceBefore.reset();
  }

  /// Whether the last two displacements follow from the announced motion.
  bool announced() const { return advanceIn.has_value() && advanceBefore.has_value(); }
  /// Whether predict() has what it needs.
  bool canPredict() const { return announced() || positionsKnown == 2; }

  /// The announced motion into this call and the one before, as the prediction reads it (announced() only). The
  /// accelerations the kicks into this call used are those `p` holds before the call writes its own (after a tree
  /// built within this call, `p` holds this call's: a change of a step, which the room covers).
  AnnouncedMotion announcedMotion() const {
    return {advanceIn->drift, advanceIn->firstKick + advanceIn->secondKick, advanceBefore->drift};
  }

  /// Remembers what the latest call's bodies tell of their motion: its accelerations, and its positions unless the
  /// motion into the next call and into this one are both announced (`advanceNext`, and what the last call was told),
  /// which makes them unnecessary.
  void record(const Particles& p, const std::optional<BodyAdvance>& advanceNext) {
    advanceBefore = advanceIn;
    advanceIn = advanceNext;
    if (announced()) {
      positionsKnown = 0;
    } else {
      previousX.swap(earlierX);
      previousY.swap(earlierY);
      previousZ.swap(earlierZ);
      copyInParallel(p.x, previousX);
      copyInParallel(p.y, previousY);
      copyInParallel(p.z, previousZ);
      positionsKnown = std::min(positionsKnown + 1, 2);
    }
    previousAx.swap(earlierAx);
    previousAy.swap(earlierAy);
    previousAz.swap(earlierAz);
    const std::size_t n = p.size();
    for (auto* array : {&previousAx, &previousAy, &previousAz}) array->resize(n);
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n, 8192), [&](const tbb::blocked_range<std::size_t>& r) {
      for (std::size_t i = r.begin(); i != r.end(); ++i) {
        previousAx[i] = static_cast<float>(p.ax[i]);
        previousAy[i] = static_cast<float>(p.ay[i]);
        previousAz[i] = static_cast<float>(p.az[i]);
      }
    });
    accelerationsKnown = std::min(accelerationsKnown + 1, 2);
  }

  /// The smallest |a| body i reaches over the next `age` calls if its acceleration (that of `p`, the latest call's)
  /// keeps changing at its last rate: with j = a_previous - a_earlier, the minimum of |a + j t| over 0 <= t <= age,
  /// rounded down to a float (|a| itself without two known calls). A tree built in the background scales its relative
  /// test by accelerations that are up to twice its K calls old at its last call; with these the test stays as strict
  /// as with the |a| of then, as far as the last rate tells. The vector's path, not its length's: a body passing the
  /// centre of a cored potential (a = -omega^2 r) sees |a| fall to its closest approach, where the length's rate,
  /// extrapolated, reaches zero; every group holding such a body took the floor's tolerance and the kernels 1.5x longer
  /// at 2^20 (21.4 against 16.9 ms a step on the H200, reuse 3; 14.0 without any allowance).
  float lowestAcceleration(const Particles& p, std::size_t i, double age) const {
    const double a[3] = {p.ax[i], p.ay[i], p.az[i]};
    const bool rateKnown = accelerationsKnown == 2;
    const float previous[3] = {rateKnown ? previousAx[i] : 0.0f, rateKnown ? previousAy[i] : 0.0f,
                               rateKnown ? previousAz[i] : 0.0f};
    const float earlier[3] = {rateKnown ? earlierAx[i] : 0.0f, rateKnown ? earlierAy[i] : 0.0f,
                              rateKnown ? earlierAz[i] : 0.0f};
    return matcha::lowestAcceleration(a, previous, earlier, rateKnown, age);
  }

  /// Puts the remembered and predicted positions into the order the bodies were just given (new[i] = old[order[i]]).
  void permute(std::span<const std::uint32_t> order, std::vector<double>& scratch) {
    for (auto* array :
         {&previousX, &previousY, &previousZ, &earlierX, &earlierY, &earlierZ, &predictedX, &predictedY, &predictedZ}) {
      if (array->size() == order.size()) gatherInPlace(*array, order, scratch);
    }
    std::vector<float> floats;
    for (auto* array : {&radius, &previousAx, &previousAy, &previousAz, &earlierAx, &earlierAy, &earlierAz}) {
      if (array->size() == order.size()) gatherInPlace(*array, order, floats);
    }
  }

  /// The positions over calls `first` .. `last` from now (call 0 being `p` as it is), extrapolated from the last two
  /// displacements: with d1 = x - x_previous and the second difference d2 = d1 - (x_previous - x_earlier), call k is at
  /// x + k d1 + k (k + 1) / 2 d2, exact for a leapfrog step under constant acceleration. Each body's path over those
  /// calls becomes a ball: the midpoint of its first and last positions, with a radius that holds the path (half the
  /// chord plus the parabola's sag, |d2| (last - first)^2 / 8) and the prediction's error should the acceleration
  /// change by kAccelerationChange of itself (|d2| last (last + 1) / 2 times that). Needs canPredict().
  void predict(const Particles& p, std::uint32_t first, std::uint32_t last) {
    const std::size_t n = p.size();
    for (auto* array : {&predictedX, &predictedY, &predictedZ}) array->resize(n);
    radius.resize(n);
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n, 4096), [&](const tbb::blocked_range<std::size_t>& r) {
      predictRange(p, r.begin(), r.end(), first, last);
    });
  }

  /// predict(), and in the same pass over the bodies the inputs a background build copies: the masses, and each
  /// body's lowestAcceleration over `age` calls.
  void predictWithInputs(const Particles& p, std::uint32_t first, std::uint32_t last, double age,
                         std::vector<double>& mass, std::vector<float>& acceleration) {
    const std::size_t n = p.size();
    for (auto* array : {&predictedX, &predictedY, &predictedZ, &mass}) array->resize(n);
    radius.resize(n);
    acceleration.resize(n);
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n, 4096), [&](const tbb::blocked_range<std::size_t>& r) {
      predictRange(p, r.begin(), r.end(), first, last);
      for (std::size_t i = r.begin(); i != r.end(); ++i) {
        mass[i] = p.mass[i];
        acceleration[i] = lowestAcceleration(p, i, age);
      }
    });
  }

 private:
  void predictRange(const Particles& p, std::size_t begin, std::size_t end, std::uint32_t first, std::uint32_t last) {
    const PredictionWindow window = makePredictionWindow(first, last, predictionRoom(first, last));
    const bool fromAdvance = announced();
    const AnnouncedMotion motion = fromAdvance ? announcedMotion() : AnnouncedMotion{};
    for (std::size_t i = begin; i != end; ++i) {
      const double x[3] = {p.x[i], p.y[i], p.z[i]};
      double displacement[3], displacementBefore[3];
      if (fromAdvance) {
        const double v[3] = {p.vx[i], p.vy[i], p.vz[i]};
        const double a[3] = {p.ax[i], p.ay[i], p.az[i]};
        announcedDisplacements(v, a, motion, displacement, displacementBefore);
      } else {
        const double previous[3] = {previousX[i], previousY[i], previousZ[i]};
        const double earlier[3] = {earlierX[i], earlierY[i], earlierZ[i]};
        for (int d = 0; d < 3; ++d) {
          displacement[d] = x[d] - previous[d];
          displacementBefore[d] = previous[d] - earlier[d];
        }
      }
      double centre[3];
      radius[i] = predictBall(x, displacement, displacementBefore, window, centre);
      predictedX[i] = centre[0];
      predictedY[i] = centre[1];
      predictedZ[i] = centre[2];
    }
  }
};

/// One tree and its lists: what the engine was (or will be) handed, what repairs need, and, for a tree built in the
/// background, the inputs and tree-order copies it was built from.
struct TreeSolver::TreeBuild {
  // A background build's inputs, copied in the caller's order before it starts (the caller's arrays change while it
  // runs): masses and the |a| the relative test scales by (Motion::lowestAcceleration).
  std::vector<double> inMass;
  std::vector<float> inAcceleration;
  // In the tree's order (background builds; a build within a call uses the sorted particles instead).
  std::vector<double> x, y, z, mass;
  std::vector<float> acceleration, radius;
  std::vector<std::uint64_t> keys, sortedKeys;
  std::vector<std::uint32_t> order;
  KeySorter sorter;
  Octree tree;
  Groups groups;
  WalkTree walkTree;
  TreeTopology topology;
  PlanBuilder planBuilder;
  std::vector<InteractionPlan> plans;  ///< the lists, in batches; plans[0, numPlans) are in use
  std::size_t numPlans = 0;
  TreeStats stats;
  ForceTimings timings;  ///< the build's phases
  std::uint32_t steps = 1;
  std::uint64_t firstCall = 0, lastCall = 0;  ///< the calls it serves
  bool valid = false;                         ///< built and handed to the engine (current) or ready (next)
  bool fits = true;                           ///< its lists fit TreeParams::maxBatchEntries
  bool tolerancesSet = false;                 ///< the relative test was scaled by accelerations (not all zero)
  /// Its inputs in the tree's order (x, y, z, mass, acceleration, radius, sortedKeys, order) are the engine's
  /// prediction (NearFieldEngine::takeTreePrediction), not the host's: inMass, inAcceleration and the motion's
  /// predicted positions were not made.
  bool inputsOnDevice = false;
  std::size_t numBodies = 0;        ///< the bodies a background build is for
  std::uint64_t engineEntries = 0;  ///< list entries handed to the engine: the lists and their repairs
  std::exception_ptr error;         ///< what a background build threw
  // The calls made on this tree and the wall seconds of their steps (for TreeParams::reuse 0): each call's time and
  // the caller's time since the call before ended (TreeSolver::callCost).
  std::uint64_t costCalls = 0;
  double costSeconds = 0.0;
};

void fillTopology(const Octree& tree, const Groups& groups, const TreeParams& params, TreeTopology& topology) {
  copyInParallel(tree.bodies, topology.cellBodies);
  copyInParallel(tree.firstChild, topology.firstChild);
  copyInParallel(tree.numChildren, topology.numChildren);
  topology.levelOffsets = tree.levelOffsets;
  copyInParallel(tree.centre, topology.cellCentre);
  copyInParallel(tree.halfSide, topology.cellHalfSide);
  topology.groups = groups.ranges;
  topology.relativeTolerance = groups.relativeTolerance;
  topology.theta = params.theta;
  topology.multipole = params.multipole;
}

TreeSolver::TreeSolver(NearFieldEngine& engine, const TreeParams& treeParams, const GravityParams& gravity)
    : engine_(engine),
      params_(treeParams),
      gravity_(gravity),
      current_(std::make_unique<TreeBuild>()),
      next_(std::make_unique<TreeBuild>()),
      motion_(std::make_unique<Motion>()) {
  params_.validate();
  gravity_.validate();
}

TreeSolver::~TreeSolver() {
  discardLaunchAhead();
  cancel_ = true;
  if (background_.joinable()) background_.join();
}

const Octree& TreeSolver::octree() const { return current_->tree; }
const Groups& TreeSolver::groups() const { return current_->groups; }
const TreeTopology& TreeSolver::topology() const { return current_->topology; }

std::string TreeSolver::describe() const {
  char alpha[32] = "";
  if (params_.alpha > 0.0) std::snprintf(alpha, sizeof alpha, ", alpha %g", params_.alpha);
  char reuse[48] = ", reuse auto";
  if (params_.reuse == 1) {
    std::snprintf(reuse, sizeof reuse, freshTreesAhead() ? ", reuse off, each tree built a step ahead" : ", reuse off");
  }
  if (params_.reuse > 1) std::snprintf(reuse, sizeof reuse, ", reuse %u steps", params_.reuse);
  char text[224];
  std::snprintf(text, sizeof text, "tree (theta %g%s, ncrit %u, nleaf %u, %s%s%s) on ", params_.theta, alpha,
                params_.ncrit, params_.nleaf, toString(params_.multipole).c_str(), reuse,
                params_.reuse != 1 && !params_.pipeline ? ", no pipeline" : "");
  return text + engine_.name();
}

void TreeSolver::joinBackgroundBuild() {
  if (!background_.joinable()) return;
  background_.join();
  if (next_->error) {
    const std::exception_ptr error = next_->error;
    next_->error = nullptr;
    next_->valid = false;
    std::rethrow_exception(error);
  }
}

void TreeSolver::expectAdvance(const std::optional<BodyAdvance>& advance) { advance_ = advance; }

bool TreeSolver::advancing() const {
  return advance_.has_value() && params_.advanceOnDevice && (params_.reuse != 1 || freshTreesAhead()) &&
         engine_.advancesBodies() && !advanceMismatch_;
}

bool TreeSolver::freshTreesAhead() const { return buildsFreshTreesAhead(params_, engine_.advancesBodies()); }

bool TreeSolver::buildsAhead() const { return params_.pipeline && (params_.reuse != 1 || freshTreesAhead()); }

BodyUpdate TreeSolver::movedBodies(const Particles& particles) {
  BodyUpdate update(BodyMotion::moved);
  if (advancing()) {
    update.vx = particles.vx.data();
    update.vy = particles.vy.data();
    update.vz = particles.vz.data();
    heldThisCall_ = true;
  }
  return update;
}

void TreeSolver::discardLaunchAhead() {
  if (launchedAheadFor_ == kNoCall) return;
  if (predictionLaunchedFor_ == launchedAheadFor_) predictionLaunchedFor_ = kNoCall;
  engine_.discardResident();
  launchedAheadFor_ = kNoCall;
  engineHoldsBodies_ = false;  // the engine forgot its copy with the launch
}

void TreeSolver::reset() {
  discardLaunchAhead();
  engineHoldsBodies_ = false;
  adoptedAhead_ = false;
  cancel_ = true;
  if (background_.joinable()) background_.join();
  cancel_ = false;
  next_->valid = false;
  next_->error = nullptr;
  current_->valid = false;
  motion_->reset();
  idSample_.clear();
  nextPlannedFor_ = kNoCall;
  nextStepsFor_ = kNoCall;
  predictionLaunchedFor_ = kNoCall;
  lastCallTimed_ = false;
}

bool TreeSolver::sameBodies(const Particles& particles) const {
  if (!current_->valid || idSample_.size() != std::min(kIdSamples, particles.size()) ||
      current_->topology.numBodies() != particles.size()) {
    return false;
  }
  for (std::size_t k = 0; k < idSample_.size(); ++k) {
    if (particles.id[k * particles.size() / idSample_.size()] != idSample_[k]) return false;
  }
  return true;
}

void TreeSolver::buildTree(TreeBuild& build, Particles* sortCaller, const SourceView& positions,
                           const float* accelerations, const float* radius) {
  const std::size_t n = positions.count;
  if (n == 0) throw InputError("no bodies to compute forces for");
  if (n >= (std::size_t{1} << 31)) throw InputError("at most 2^31 - 1 bodies are supported");
  build.timings = ForceTimings{};
  Stopwatch clock;
  const auto phaseDone = [&](Phase phase) {
    build.timings[phase] += clock.seconds();
    clock.restart();
  };
  // A build within a call sorts the caller's bodies and predicts on the host; `build` may be a background build's
  // buffers used again (a build that was not adopted, or a tree's after the swap of adopt).
  if (sortCaller != nullptr) build.inputsOnDevice = false;
  Cube cube;
  SourceView sorted;
  if (build.inputsOnDevice) {
    // The engine predicted, keyed, sorted and gathered the inputs on its device: they arrive in the tree's order (the
    // sort phase is their transfer).
    const bool taken = engine_.takeTreePrediction(
        {cube, build.sortedKeys, build.order, build.x, build.y, build.z, build.mass, build.acceleration, build.radius});
    MATCHA_ASSERT(taken && build.x.size() == n, "the engine's tree prediction is missing");
    radius = build.radius.data();
    sorted = {build.x.data(), build.y.data(), build.z.data(), build.mass.data(), n};
    phaseDone(Phase::sort);
  } else {
    cube = computeBoundingCube(positions);
    computeMortonKeys(positions, cube, build.keys);
    phaseDone(Phase::keys);
    sortKeysOn(params_.sortOnDevice ? &engine_ : nullptr, build.sorter, build.keys, build.sortedKeys, build.order);
    if (sortCaller != nullptr) {
      // The caller's bodies, their history and their predicted positions go into the tree's order.
      permuter_.permute(*sortCaller, build.order);
      motion_->permute(build.order, permuteScratch_);
      sorted = radius != nullptr ? SourceView{motion_->predictedX.data(), motion_->predictedY.data(),
                                              motion_->predictedZ.data(), sortCaller->mass.data(), n}
                                 : sortCaller->sources();
      if (radius != nullptr) radius = motion_->radius.data();
    } else {
      // Every input into the tree's order in one pass: each body's index read once for the six arrays (~10% faster
      // than six gathers on the build machine). 40 bytes a body: |a| comes as a float, not as three doubles.
      for (auto* array : {&build.x, &build.y, &build.z, &build.mass}) array->resize(n);
      build.acceleration.resize(n);
      build.radius.resize(radius != nullptr ? n : 0);
      const std::uint32_t* order = build.order.data();
      tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n, 8192), [&](const tbb::blocked_range<std::size_t>& r) {
        for (std::size_t i = r.begin(); i != r.end(); ++i) {
          const std::uint32_t from = order[i];
          build.x[i] = positions.x[from];
          build.y[i] = positions.y[from];
          build.z[i] = positions.z[from];
          build.mass[i] = positions.mass[from];
          build.acceleration[i] = accelerations[from];
          if (radius != nullptr) build.radius[i] = radius[from];
        }
      });
      if (radius != nullptr) radius = build.radius.data();
      sorted = {build.x.data(), build.y.data(), build.z.data(), build.mass.data(), n};
    }
    phaseDone(Phase::sort);
  }
  buildOctree(build.sortedKeys, cube, params_.nleaf, build.tree);
  phaseDone(Phase::octree);
  computeMultipoles(sorted, params_.theta, params_.multipole, build.tree, radius);
  phaseDone(Phase::multipoles);
  makeGroups(build.tree, sorted, params_.ncrit, build.groups);
  if (radius != nullptr) setGroupBoxesOfBalls(sorted, radius, build.groups);
  build.tolerancesSet =
      sortCaller != nullptr
          ? setRelativeTolerances(AccelerationSet{sortCaller->ax, sortCaller->ay, sortCaller->az}, params_.alpha,
                                  gravity_.G, build.groups)
          : setRelativeTolerances(std::span<const float>(build.acceleration), params_.alpha, gravity_.G, build.groups);
  buildWalkTree(build.tree, build.walkTree);
  phaseDone(Phase::groups);

  // What the engine keeps: the topology over the sorted bodies, mapped to the caller's where those stay as they are.
  TreeTopology& topology = build.topology;
  fillTopology(build.tree, build.groups, params_, topology);
  if (sortCaller != nullptr) {
    topology.order.clear();
  } else {
    copyInParallel(build.order, topology.order);
  }

  TreeStats& stats = build.stats;
  stats = TreeStats{};
  stats.numBodies = n;
  stats.numCells = build.tree.numCells();
  // The walk tree has a block per cell with children and one for the root: no serial count over the cells.
  stats.numLeaves = stats.numCells - (build.walkTree.blocks.size() - 1);
  stats.depth = build.tree.numLevels() - 1;
  stats.numGroups = build.groups.size();
  stats.meanGroupSize = double(n) / double(build.groups.size());
  for (const BodyRange& range : build.groups.ranges)
    stats.maxGroupSize = std::max<std::uint64_t>(stats.maxGroupSize, range.size());
  stats.background = sortCaller == nullptr;
  stats.predictedOnDevice = build.inputsOnDevice;
}

const InteractionPlan& TreeSolver::buildPlanOnly(Particles& particles) {
  reset();
  TreeBuild& build = *current_;
  buildTree(build, &particles, particles.sources(), nullptr, nullptr);
  stats_ = build.stats;
  if (build.plans.empty()) build.plans.resize(1);
  build.planBuilder.build(build.walkTree, build.groups, 0, static_cast<std::uint32_t>(build.groups.size()),
                          build.plans[0]);
  return build.plans[0];
}

void TreeSolver::recordTreeCost(const TreeBuild& tree) {
  if (tree.costCalls == 0 || treesAdopted_ <= kAutoWarmUpTrees) return;
  if (trialSteps_ != 0 && tree.steps == trialSteps_) {
    const double perCall = tree.costSeconds / double(tree.costCalls);
    if (perCall < (1.0 - kAutoMargin) * bestCallSeconds_) {
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
  } else if (tree.steps == bestSteps_) {
    // The best K's cost follows the system as it evolves, smoothed over its trees.
    const double perCall = tree.costSeconds / double(tree.costCalls);
    bestCallSeconds_ =
        bestCallSeconds_ < std::numeric_limits<double>::infinity() ? 0.5 * (bestCallSeconds_ + perCall) : perCall;
  }
}

std::uint32_t TreeSolver::chooseReuseSteps() {
  if (params_.reuse != 0) return params_.reuse;
  // Measured costs decide (recordTreeCost). A tree serving K calls spreads its build over them but makes every
  // call's lists longer (wider balls), by an amount that grows faster than K and depends on the system's speeds and
  // the time step. So the mean wall time per call is measured over whole trees, and K climbs: from the best K so far
  // a neighbour is tried; while trials get cheaper K keeps moving that way, otherwise the other way is tried once, then
  // K stays at the best until kReexplore trees later, when the search starts again.
  const bool measuredBest = bestCallSeconds_ < std::numeric_limits<double>::infinity();
  const bool searching = trialSteps_ != 0 || !searchedOnce_;
  // On an engine that keeps the bodies (the GPU's), a tree per call is never a contender: built within its call it
  // gives up the background build and the device's prediction and advance (H200, the settings of README "Whole
  // steps": 35 / 108 / 490 ms a step at 2^20 / 2^22 / 2^24 against 11 / 38 / 164 at K = 3, 3, 2), and a trial of it
  // costs a step at that price and the next tree's prediction on the host. (Reuse off builds each tree a step ahead
  // there, buildsFreshTreesAhead, and still takes 26 / 76 / 267 ms.)
  const std::int64_t lowest = engine_.advancesBodies() ? 2 : 1;
  if (measuredBest && (searching || ++treesAtBest_ % kReexplore == 0)) {
    searchedOnce_ = true;
    std::int64_t next = std::int64_t{bestSteps_} + direction_;
    if (next < lowest || next > std::int64_t{kMaxAutoReuse}) {
      if (turned_) {
        next = 0;
      } else {
        direction_ = -direction_;
        turned_ = true;
        next = std::int64_t{bestSteps_} + direction_;
      }
    }
    trialSteps_ = next >= lowest && next <= std::int64_t{kMaxAutoReuse} ? static_cast<std::uint32_t>(next) : 0;
  }
  return trialSteps_ != 0 ? trialSteps_ : bestSteps_;
}

bool TreeSolver::walkAllGroups(TreeBuild& build, const Particles* particles, const ForceView& out, ForceReport* report,
                               std::vector<std::uint32_t>* failed) {
  const bool evaluate = particles != nullptr;
  MATCHA_ASSERT(!evaluate || (report != nullptr && failed != nullptr), "an evaluating walk needs a report");
  const auto numGroups = static_cast<std::uint32_t>(build.groups.size());
  Stopwatch clock;
  const std::uint64_t batchEntries = std::min(kPlanEntries, params_.maxBatchEntries);
  std::uint32_t first = 0;
  double entriesPerGroup = 0.0;
  std::uint64_t lastBatchGroups = 0;
  std::uint64_t resident = 0;
  bool streaming = false;
  std::uint64_t sumListBodies = 0, sumListCells = 0;
  TreeStats& stats = build.stats;
  stats.maxListBodies = stats.maxListCells = 0;
  stats.numBatches = 0;
  build.numPlans = 0;
  build.fits = true;
  // The engine evaluates one batch while the CPU walks the next. The first launch uploads the positions and refits
  // the cells; the later ones reuse that.
  bool launched = false, inFlight = false;
  const auto finishBatch = [&] {
    if (!inFlight) return;
    inFlight = false;
    const Stopwatch wait;
    ResidentResult result = engine_.finishResident();
    report->timings.engineWaitSeconds += wait.seconds();
    addResult(result, *report);
    failed->insert(failed->end(), result.failedGroups.begin(), result.failedGroups.end());
  };
  const auto launchBatch = [&](const InteractionPlan& lists) {
    engine_.launchResident(particles->sources(), gravity_, out, lists.groupIds,
                           launched ? BodyUpdate(BodyMotion::unchanged) : movedBodies(*particles));
    launched = inFlight = true;
  };
  if (evaluate) {
    clock.restart();
    engine_.setTree(build.topology, particles->sources());
    report->timings[Phase::upload] += clock.seconds();
  }
  while (first < numGroups) {
    if (cancel_) return false;  // background builds only: a call's own build is never cancelled
    const auto last = static_cast<std::uint32_t>(
        first + walkBatchGroups(numGroups, lastBatchGroups, entriesPerGroup, batchEntries, evaluate));
    const std::uint32_t end = std::min(numGroups, last);
    if (build.plans.size() <= build.numPlans) build.plans.resize(build.numPlans + 1);
    // Streamed batches take turns in one plan: the engine copies a plan's lists before setLists returns.
    InteractionPlan& plan = build.plans[streaming ? 0 : build.numPlans];
    clock.restart();
    build.planBuilder.build(build.walkTree, build.groups, first, end, plan);
    build.timings[Phase::walk] += clock.seconds();
    std::uint64_t entries = plan.cellList.size();
    for (std::size_t g = 0; g < plan.numGroups(); ++g) {
      const std::uint64_t listBodies = plan.listBodyCounts[g];
      const std::uint64_t listCells = plan.numListCells(g);
      entries += listBodies;
      sumListBodies += listBodies;
      sumListCells += listCells;
      stats.maxListBodies = std::max(stats.maxListBodies, listBodies);
      stats.maxListCells = std::max(stats.maxListCells, listCells);
    }
    ++stats.numBatches;
    if (!streaming && resident + entries > params_.maxBatchEntries) {
      build.fits = false;
      if (!evaluate) return false;  // a background build: the call that needs it builds within the call instead
      // The lists do not fit the engine: those handed over so far are evaluated (or in flight); from here on each
      // batch is evaluated and dropped.
      streaming = true;
    }
    if (evaluate) {
      if (streaming) {
        finishBatch();
        engine_.dropLists();
      }
      // This batch's lists go over while the engine still works on the last batch; then its launch.
      clock.restart();
      engine_.setLists(plan);
      report->timings[Phase::upload] += clock.seconds();
      finishBatch();
      launchBatch(plan);
    }
    if (!streaming) ++build.numPlans;
    resident += entries;
    entriesPerGroup = double(entries) / double(end - first);
    lastBatchGroups = end - first;
    first = end;
  }
  if (evaluate) finishBatch();
  stats.meanListBodies = double(sumListBodies) / double(numGroups);
  stats.meanListCells = double(sumListCells) / double(numGroups);
  build.engineEntries = streaming ? 0 : resident;
  return !streaming;
}

void TreeSolver::addResult(const ResidentResult& result, ForceReport& report) {
  report.counts += result.counts;
  report.timings[Phase::upload] += result.timings.uploadSeconds;
  report.timings[Phase::kernels] += result.timings.kernelSeconds;
  report.timings[Phase::download] += result.timings.downloadSeconds;
}

void TreeSolver::adopt(std::unique_ptr<TreeBuild>& build, const Particles& particles, ForceReport& report,
                       bool upload) {
  if (upload) {
    Stopwatch clock;
    engine_.setTree(build->topology, particles.sources());
    for (std::size_t k = 0; k < build->numPlans; ++k) engine_.setLists(build->plans[k]);
    report.timings[Phase::upload] += clock.seconds();
  }
  report.timings += build->timings;
  report.rebuilt = true;
  report.numGroupsWalked += build->groups.size();
  build->valid = true;
  ++treesAdopted_;
  build->costCalls = 0;
  build->costSeconds = 0.0;
  if (current_->valid) recordTreeCost(*current_);
  std::swap(current_, build);
  next_->valid = false;
  stats_ = current_->stats;
  stats_.reuseSteps = current_->steps;
  stats_.callsOnTree = 0;
}

void TreeSolver::buildNow(Particles& particles, std::uint32_t steps, ForceReport& report) {
  // A background build for another window would be stale: wait for it and drop it.
  cancel_ = true;
  if (background_.joinable()) background_.join();
  cancel_ = false;
  next_->valid = false;
  next_->error = nullptr;

  const bool predict = steps > 1 && motion_->canPredict();
  if (!predict) steps = 1;
  if (predict) {
    const Stopwatch predicting;
    motion_->predict(particles, 0, steps - 1);
    report.timings[Phase::motion] += predicting.seconds();
  }
  const Motion& m = *motion_;
  const SourceView positions = predict ? SourceView{m.predictedX.data(), m.predictedY.data(), m.predictedZ.data(),
                                                    particles.mass.data(), particles.size()}
                                       : particles.sources();
  TreeBuild& build = *next_;
  buildTree(build, &particles, positions, nullptr, predict ? m.radius.data() : nullptr);
  build.steps = steps;
  build.firstCall = call_;
  build.lastCall = call_ + steps - 1;

  if (params_.alpha > 0.0 && !build.tolerancesSet) {
    // No accelerations to scale the relative test by (fresh initial conditions): get them first from a cheap pass,
    // monopole cells at kEstimateTheta, as GADGET does its first step with a plain opening criterion. A list of this
    // pass that fails the check still gives |a| to a few percent, which is all the estimate is for.
    const Stopwatch estimate;
    ForceReport pass;
    computeMultipoles(particles.sources(), kEstimateTheta, MultipoleOrder::monopole, build.tree);
    build.topology.theta = kEstimateTheta;
    build.topology.multipole = MultipoleOrder::monopole;
    buildWalkTree(build.tree, build.walkTree);
    ForceView accelerations = particles.forces();
    accelerations.pot = nullptr;
    std::vector<std::uint32_t> ignored;
    walkAllGroups(build, &particles, accelerations, &pass, &ignored);
    report.counts += pass.counts;
    computeMultipoles(particles.sources(), params_.theta, params_.multipole, build.tree);
    build.topology.theta = params_.theta;
    build.topology.multipole = params_.multipole;
    setRelativeTolerances(particles, params_.alpha, gravity_.G, build.groups);
    build.topology.relativeTolerance = build.groups.relativeTolerance;
    buildWalkTree(build.tree, build.walkTree);
    build.timings[Phase::walk] = 0.0;  // the estimate's walk is part of the estimate
    report.timings[Phase::estimate] += estimate.seconds();
    build.stats.estimatePass = true;
  }
  std::vector<std::uint32_t> failed;
  if (!walkAllGroups(build, &particles, forcesToWrite(particles), &report, &failed)) {
    // The lists streamed: this call's forces are done, and nothing stays to reuse.
    build.lastCall = call_;
    build.steps = 1;
  }
  adopt(next_, particles, report, false);
  if (!failed.empty()) repair(particles, std::move(failed), report);
}

std::uint32_t TreeSolver::nextTreeSteps() {
  if (nextStepsFor_ != current_->firstCall) {
    nextSteps_ = chooseReuseSteps();
    nextStepsFor_ = current_->firstCall;
  }
  return nextSteps_;
}

const TreePredictionRequest* TreeSolver::predictionRequest(std::uint64_t call,
                                                           const std::optional<BodyAdvance>& motionIn,
                                                           const std::optional<BodyAdvance>& motionBefore,
                                                           bool rateKnown, const std::vector<float>& earlierAx,
                                                           const std::vector<float>& earlierAy,
                                                           const std::vector<float>& earlierAz) {
  if (!params_.predictOnDevice || !engine_.predictsTrees() || !motionIn || !motionBefore) return nullptr;
  const std::uint32_t steps = nextTreeSteps();
  if (steps <= 1 && !freshTreesAhead()) return nullptr;
  // As startBackgroundBuild and Motion::predictWithInputs would make them at `call`.
  const TreeBuild& current = *current_;
  const auto first = static_cast<std::uint32_t>(current.lastCall + 1 - call);
  const auto last = first + steps - 1;
  TreePredictionRequest& request = predictionRequest_;
  request.window = makePredictionWindow(first, last, predictionRoom(first, last));
  request.motion = {motionIn->drift, motionIn->firstKick + motionIn->secondKick, motionBefore->drift};
  request.age = double(current.lastCall + steps - call + 1);
  request.earlierAx = rateKnown ? earlierAx.data() : nullptr;
  request.earlierAy = rateKnown ? earlierAy.data() : nullptr;
  request.earlierAz = rateKnown ? earlierAz.data() : nullptr;
  return &request;
}

bool TreeSolver::buildStartsNextCall() const {
  // computeForces' nextTreeDue, as the next call will find it once this one has put its tree to use ahead.
  return adoptedAhead_ && buildsAhead() && !background_.joinable() && (current_->steps > 1 || freshTreesAhead()) &&
         current_->firstCall == call_ + 1 && nextPlannedFor_ != current_->firstCall;
}

double TreeSolver::startBackgroundBuild(const Particles& particles, bool onDevice) {
  const Stopwatch clock;
  const TreeBuild& current = *current_;
  nextPlannedFor_ = current.firstCall;
  const std::uint32_t steps = nextTreeSteps();
  // K = 1: the next tree is built within its call, for exact positions, unless it is built a call ahead.
  if (steps <= 1 && !freshTreesAhead()) return clock.seconds();
  // The next tree serves the calls after the current one's; this call is `first` calls before the first of them.
  const auto first = static_cast<std::uint32_t>(current.lastCall + 1 - call_);
  TreeBuild& build = *next_;
  build.steps = steps;
  build.firstCall = current.lastCall + 1;
  build.lastCall = current.lastCall + steps;
  build.valid = false;
  build.error = nullptr;
  build.inputsOnDevice = onDevice;
  cancel_ = false;
  // What the thread reads of the caller's bodies is copied first, with the prediction: they change while it runs (the
  // accelerations at the end of this very call). The predicted positions are the solver's own until the next
  // prediction, which waits for this build. The accelerations are one call old now and up to lastCall - call_ + 1
  // more at the tree's last call. A prediction on the engine's device was made by this call's launch, from its copy
  // of the bodies as they were then.
  if (!onDevice) {
    motion_->predictWithInputs(particles, first, first + steps - 1, double(build.lastCall - call_ + 1), build.inMass,
                               build.inAcceleration);
  }
  build.numBodies = particles.size();
  backgroundDone_ = false;
  background_ = std::thread([this, &build] {
    try {
      buildForLater(build);
    } catch (...) {
      build.error = std::current_exception();
    }
    backgroundDone_ = true;
  });
  return clock.seconds();
}

void TreeSolver::buildForLater(TreeBuild& build) {
  const Motion& m = *motion_;
  const std::size_t n = build.numBodies;
  const SourceView positions = build.inputsOnDevice ? SourceView{nullptr, nullptr, nullptr, nullptr, n}
                                                    : SourceView{m.predictedX.data(), m.predictedY.data(),
                                                                 m.predictedZ.data(), build.inMass.data(), n};
  buildTree(build, nullptr, positions, build.inputsOnDevice ? nullptr : build.inAcceleration.data(),
            build.inputsOnDevice ? nullptr : m.radius.data());
  build.valid = walkAllGroups(build, nullptr, {}, nullptr, nullptr) && !cancel_;
}

void TreeSolver::repair(Particles& particles, std::vector<std::uint32_t> failed, ForceReport& report) {
  const Stopwatch clock;
  TreeBuild& build = *current_;
  const std::size_t n = particles.size();
  // The current tree refitted to the exact positions (in the tree's order): every cell's centre of mass, size and
  // opening radius as the engine found them, and the failed groups' boxes; then a walk of those groups alone.
  SourceView exact = particles.sources();
  if (!build.topology.order.empty()) {
    gatherInto(particles.x.data(), build.topology.order, build.x);
    gatherInto(particles.y.data(), build.topology.order, build.y);
    gatherInto(particles.z.data(), build.topology.order, build.z);
    exact = {build.x.data(), build.y.data(), build.z.data(), build.mass.data(), n};
  }
  copyInParallel(build.tree.bodies, exactTree_.bodies);
  copyInParallel(build.tree.firstChild, exactTree_.firstChild);
  copyInParallel(build.tree.numChildren, exactTree_.numChildren);
  copyInParallel(build.tree.level, exactTree_.level);
  copyInParallel(build.tree.centre, exactTree_.centre);
  copyInParallel(build.tree.halfSide, exactTree_.halfSide);
  exactTree_.levelOffsets = build.tree.levelOffsets;
  computeMultipoles(exact, params_.theta, params_.multipole, exactTree_);
  exactGroups_ = build.groups;
  for (const std::uint32_t g : failed) {
    const BodyRange range = build.groups.ranges[g];
    const double* coordinates[3] = {exact.x, exact.y, exact.z};
    for (int d = 0; d < 3; ++d) {
      const auto [lo, hi] = std::minmax_element(coordinates[d] + range.first, coordinates[d] + range.last);
      exactGroups_.centre[3 * g + d] = 0.5 * (*lo + *hi);
      exactGroups_.halfExtent[3 * g + d] = 0.5 * (*hi - *lo);
    }
  }
  buildWalkTree(exactTree_, exactWalkTree_);
  repairBuilder_.build(exactWalkTree_, exactGroups_, failed, repairPlan_);
  std::uint64_t entries = repairPlan_.cellList.size();
  for (const std::uint32_t count : repairPlan_.listBodyCounts) entries += count;
  // Replaced lists stay in the engine's arenas until the next tree (TreeParams::maxBatchEntries): a repair that would
  // take the tree's entries past 5/4 of the bound is evaluated on its own, and the next call builds anew.
  const bool overflows = build.engineEntries + entries > params_.maxBatchEntries + params_.maxBatchEntries / 4;
  if (overflows) engine_.dropLists();  // the other groups were evaluated already; this tree serves no more calls
  build.engineEntries += entries;
  engine_.setLists(repairPlan_);
  // The positions of the launch whose lists failed: its refit serves.
  engine_.launchResident(particles.sources(), gravity_, forcesToWrite(particles), failed, BodyMotion::unchanged);
  const ResidentResult result = engine_.finishResident();
  MATCHA_ASSERT(result.failedGroups.empty(), "a list walked at the bodies' current positions failed the check");
  if (overflows) engine_.dropLists();
  report.counts += result.counts;
  report.numGroupsRepaired += failed.size();
  report.numGroupsWalked += failed.size();
  if (overflows || double(failed.size()) > kRepairRebuildFraction * double(build.groups.size())) {
    // The motion is not what the trees are built for: the next call builds anew, within the call.
    build.lastCall = call_;
    cancel_ = true;
  }
  report.timings[Phase::repair] += clock.seconds();
}

ForceReport TreeSolver::computeForces(Particles& particles) {
  const Stopwatch total;
  ForceReport report;
  // A restored state (restoreState) has no current tree to compare the bodies with: restoreState checked them.
  if (!restored_ && !sameBodies(particles)) reset();
  // What the caller did between the last call and this one (a leapfrog's kicks and drift, and with them the host's
  // share of the work a background build competes for): part of this call's step. Not known after a call whose
  // potentials were wanted (the caller measured energies, wrote outputs), after none or other bodies; capped at the
  // call's own time (callerShare) where outputs come without potentials (energies from direct sums).
  const double callerSeconds = lastCallTimed_ ? sinceLastCall_.seconds() : -1.0;
  const auto callerShare = [&](double callSeconds) { return std::min(callerSeconds, callSeconds); };
  restored_ = false;
  ++call_;
  // A launch made ahead as the last call ended serves this call if the call came as announced: same bodies (above),
  // the same output arrays, the same wish for potentials. Its positions are checked when it is finished.
  const bool launchedAhead = launchedAheadFor_ == call_ && aheadOutput_ == particles.ax.data() &&
                             aheadPotentials_ == potentialsWanted() && advancing() && motionSinceLastCall_;
  if (!launchedAhead) discardLaunchAhead();
  launchedAheadFor_ = kNoCall;
  if (adoptedAhead_) {
    // The last call put this call's tree to use as it ended: its adoption is this call's.
    adoptedAhead_ = false;
    report.rebuilt = adoptedReport_.rebuilt;
    report.timings += adoptedReport_.timings;
    report.numGroupsWalked += adoptedReport_.numGroupsWalked;
    stats_ = adoptedStats_;
  }
  const bool engineHeldBodies = engineHoldsBodies_;
  engineHoldsBodies_ = false;
  heldThisCall_ = false;
  bool evaluated = false;  // a tree built within this call evaluates the call's forces as it walks
  const bool needTree = !current_->valid || call_ > current_->lastCall;
  if (needTree) {
    const Stopwatch wait;
    joinBackgroundBuild();
    const double waited = wait.seconds();
    if (next_->valid && next_->fits && next_->firstCall == call_ && !cancel_) {
      report.timings.rebuildWaitSeconds = waited;
      adopt(next_, particles, report, true);
    } else {
      cancel_ = false;
      buildNow(particles, chooseReuseSteps(), report);
      evaluated = true;
    }
  }
  ++stats_.callsOnTree;
  if (!needTree) {
    stats_.estimatePass = false;
  }
  stats_.advancedOnDevice = false;
  stats_.launchedAhead = launchedAhead;
  // The next tree is built on the CPU cores from the first call of the current one on, while the engine works: the
  // longest time to hide it in. Always from that call, whatever the build and the calls take, so that its predicted
  // positions, and with them every force, do not depend on timing: a run and its restart (saveState) build the same
  // trees.
  const bool pipeline = buildsAhead() && motion_->canPredict() && !background_.joinable();
  const bool nextTreeDue =
      pipeline && (current_->steps > 1 || freshTreesAhead()) && nextPlannedFor_ != current_->firstCall;
  if (evaluated) {
    // cancel_: a repair found the motion unpredicted.
    if (nextTreeDue && !cancel_) report.timings[Phase::motion] += startBackgroundBuild(particles, false);
  } else {
    // The bodies may have been sorted: take the views after the build.
    const bool advanced = launchedAhead || (engineHeldBodies && advancing() && motionSinceLastCall_);
    if (!launchedAhead) {
      BodyUpdate update = advanced ? BodyUpdate(BodyMotion::advanced) : movedBodies(particles);
      predictionLaunchedFor_ = kNoCall;
      if (advanced) {
        update.advance = *motionSinceLastCall_;
        // The next tree's inputs predicted on the device, from the copy this launch moves (the motion is as recorded
        // at the end of the last call).
        const Motion& m = *motion_;
        if (nextTreeDue) {
          update.prediction = predictionRequest(call_, m.advanceIn, m.advanceBefore, m.accelerationsKnown == 2,
                                                m.earlierAx, m.earlierAy, m.earlierAz);
        }
        if (update.prediction != nullptr) predictionLaunchedFor_ = call_;
      }
      engine_.launchResident(particles.sources(), gravity_, forcesToWrite(particles), {}, update);
    }
    heldThisCall_ = heldThisCall_ || advanced;
    if (nextTreeDue) {
      report.timings[Phase::motion] += startBackgroundBuild(particles, predictionLaunchedFor_ == call_);
    }
    const Stopwatch wait;
    ResidentResult result = engine_.finishResident();
    if (result.advanceMismatch) {
      // The engine's copy is not the caller's bodies: these forces are not theirs, nor is a tree predicted from it (the
      // next call builds anew). Again with the positions, which are sent from now on.
      if (predictionLaunchedFor_ == call_) cancel_ = true;
      advanceMismatch_ = true;
      report.advanceMismatch = true;
      heldThisCall_ = false;
      engine_.launchResident(particles.sources(), gravity_, forcesToWrite(particles), {}, BodyMotion::moved);
      result = engine_.finishResident();
    }
    report.timings.engineWaitSeconds += wait.seconds();
    stats_.advancedOnDevice = advanced && !advanceMismatch_;
    stats_.advanceMismatch = advanceMismatch_;
    report.advancedOnDevice = stats_.advancedOnDevice;
    addResult(result, report);
    if (!result.failedGroups.empty()) repair(particles, std::move(result.failedGroups), report);
  }
  // The engine now holds the bodies as this call leaves them, accelerations included. The next call on this tree is
  // launched now: the GPU evaluates it while the host kicks and drifts (the engine repeats that on its copy).
  engineHoldsBodies_ = heldThisCall_ && advancing();
  motionSinceLastCall_ = advance_;
  // The first call of the next tree too, once it is put to use here.
  bool costCounted = false;
  if (engineHoldsBodies_ && current_->valid && call_ == current_->lastCall && !cancel_ && background_.joinable() &&
      next_->firstCall == call_ + 1 && (params_.adoptAheadWaits || backgroundDone_)) {
    // This call's cost goes to the tree it ran on, before the adoption closes that tree's account.
    if (call_ > 2 && report.timings[Phase::estimate] == 0.0 && callerSeconds >= 0.0) {
      const double seconds = total.seconds();
      current_->costSeconds += callerShare(seconds) + seconds;
      ++current_->costCalls;
    }
    costCounted = true;
    const TreeStats callStats = stats_;
    if (adoptAhead(particles)) {
      adoptedStats_ = stats_;
      stats_ = callStats;
    }
  }
  if (engineHoldsBodies_ && current_->valid && call_ < current_->lastCall && !cancel_) {
    BodyUpdate update(BodyMotion::advanced);
    update.advance = *motionSinceLastCall_;
    // The next call starts the next tree's build when this one put its tree to use: its inputs are predicted by this
    // launch, with the motion as the next call will know it (the record below has not run yet: the motion into the
    // next call is advance_, the one into this call the motion's advanceIn, and the accelerations of this call's
    // predecessor are the motion's previous ones).
    predictionLaunchedFor_ = kNoCall;
    if (buildStartsNextCall()) {
      const Motion& m = *motion_;
      update.prediction = predictionRequest(call_ + 1, advance_, m.advanceIn, m.accelerationsKnown >= 1, m.previousAx,
                                            m.previousAy, m.previousAz);
      if (update.prediction != nullptr) predictionLaunchedFor_ = call_ + 1;
    }
    engine_.launchResident(particles.sources(), gravity_, forcesToWrite(particles, nextPotentialsWanted()), {}, update);
    launchedAheadFor_ = call_ + 1;
    aheadOutput_ = particles.ax.data();
    aheadPotentials_ = nextPotentialsWanted();
  }
  if (params_.reuse != 1 || freshTreesAhead()) {
    const Stopwatch recording;
    motion_->record(particles, advance_);
    report.timings[Phase::motion] += recording.seconds();
  }
  idSample_.resize(std::min(kIdSamples, particles.size()));
  for (std::size_t k = 0; k < idSample_.size(); ++k) {
    idSample_[k] = particles.id[k * particles.size() / idSample_.size()];
  }
  clearUnwantedPotentials(particles);
  report.timings.totalSeconds = total.seconds();
  // The first calls (allocation, the estimate pass) would make their K look dear: not measured.
  if (!costCounted && call_ > 2 && report.timings[Phase::estimate] == 0.0 && callerSeconds >= 0.0) {
    current_->costSeconds += callerShare(report.timings.totalSeconds) + report.timings.totalSeconds;
    ++current_->costCalls;
  }
  sinceLastCall_.restart();
  lastCallTimed_ = !potentialsWanted();
  return report;
}

bool TreeSolver::adoptAhead(const Particles& particles) {
  const Stopwatch wait;
  joinBackgroundBuild();
  const double waited = wait.seconds();
  if (!(next_->valid && next_->fits && next_->firstCall == call_ + 1) || cancel_) return false;
  adoptedReport_ = ForceReport{};
  adoptedReport_.timings.rebuildWaitSeconds = waited;
  adopt(next_, particles, adoptedReport_, true);
  adoptedAhead_ = true;
  return true;
}

}  // namespace matcha::tree

namespace matcha::tree {

namespace {

constexpr const char* kStatePrefix = "tree.";

std::string stateName(const char* name) { return std::string(kStatePrefix) + name; }

}  // namespace

bool TreeSolver::atCheckpointBoundary() const {
  return !current_->valid || call_ >= current_->lastCall || adoptedAhead_;
}

void TreeSolver::saveState(CheckpointState& state) {
  MATCHA_ASSERT(atCheckpointBoundary(), "TreeSolver::saveState between the calls of a tree");
  joinBackgroundBuild();
  const Motion& m = *motion_;
  state.set(stateName("call"), double(call_));
  state.set(stateName("motion_positions_known"), m.positionsKnown);
  if (m.positionsKnown >= 1) {
    state.doubles[stateName("previous_x")] = m.previousX;
    state.doubles[stateName("previous_y")] = m.previousY;
    state.doubles[stateName("previous_z")] = m.previousZ;
  }
  if (m.positionsKnown >= 2) {
    state.doubles[stateName("earlier_x")] = m.earlierX;
    state.doubles[stateName("earlier_y")] = m.earlierY;
    state.doubles[stateName("earlier_z")] = m.earlierZ;
  }
  state.set(stateName("motion_accelerations_known"), m.accelerationsKnown);
  if (m.accelerationsKnown >= 1) {
    state.floats[stateName("previous_ax")] = m.previousAx;
    state.floats[stateName("previous_ay")] = m.previousAy;
    state.floats[stateName("previous_az")] = m.previousAz;
  }
  if (m.accelerationsKnown >= 2) {
    state.floats[stateName("earlier_ax")] = m.earlierAx;
    state.floats[stateName("earlier_ay")] = m.earlierAy;
    state.floats[stateName("earlier_az")] = m.earlierAz;
  }
  const auto saveAdvance = [&](const char* name, const std::optional<BodyAdvance>& advance) {
    state.set(stateName(name), advance ? 1.0 : 0.0);
    if (!advance) return;
    state.set(stateName(name) + "_first_kick", advance->firstKick);
    state.set(stateName(name) + "_second_kick", advance->secondKick);
    state.set(stateName(name) + "_drift", advance->drift);
  };
  saveAdvance("advance_in", m.advanceIn);
  saveAdvance("advance_before", m.advanceBefore);
  // The next call adopts the background build when it is valid, fits and is due then; else it builds within the
  // call. A restored solver makes the same choice from the same inputs.
  // A tree the last call put to use ahead (adoptAhead) is saved as that next tree: its inputs are kept with it, and the
  // prediction they were made with is still the motion's (the next one starts at the next call).
  const TreeBuild& next = adoptedAhead_ ? *current_ : *next_;
  const bool adoptNext =
      adoptedAhead_ || (current_->valid && next.valid && next.fits && next.firstCall == call_ + 1 && !cancel_);
  state.set(stateName("next_tree"), adoptNext ? 1.0 : 0.0);
  if (adoptNext && next.inputsOnDevice) {
    // The engine predicted that tree's inputs: they exist in its order only. Back into the caller's order, where a
    // restored solver's host prediction would have made them (the same bits).
    const auto callerOrder = [&](const auto& treeOrder) {
      std::vector<std::decay_t<decltype(treeOrder[0])>> values(treeOrder.size());
      tbb::parallel_for(std::size_t{0}, treeOrder.size(), [&](std::size_t k) { values[next.order[k]] = treeOrder[k]; });
      return values;
    };
    state.set(stateName("next_steps"), next.steps);
    state.doubles[stateName("next_predicted_x")] = callerOrder(next.x);
    state.doubles[stateName("next_predicted_y")] = callerOrder(next.y);
    state.doubles[stateName("next_predicted_z")] = callerOrder(next.z);
    state.floats[stateName("next_radius")] = callerOrder(next.radius);
    state.doubles[stateName("next_mass")] = callerOrder(next.mass);
    state.floats[stateName("next_acceleration")] = callerOrder(next.acceleration);
  } else if (adoptNext) {
    state.set(stateName("next_steps"), next.steps);
    state.doubles[stateName("next_predicted_x")] = m.predictedX;
    state.doubles[stateName("next_predicted_y")] = m.predictedY;
    state.doubles[stateName("next_predicted_z")] = m.predictedZ;
    state.floats[stateName("next_radius")] = m.radius;
    state.doubles[stateName("next_mass")] = next.inMass;
    state.floats[stateName("next_acceleration")] = next.inAcceleration;
  }
  state.set(stateName("auto_best_steps"), bestSteps_);
  state.set(stateName("auto_best_call_seconds"), bestCallSeconds_);
  state.set(stateName("auto_trial_steps"), trialSteps_);
  state.set(stateName("auto_direction"), direction_);
  state.set(stateName("auto_turned"), turned_ ? 1.0 : 0.0);
  state.set(stateName("auto_searched_once"), searchedOnce_ ? 1.0 : 0.0);
  state.set(stateName("auto_trees_at_best"), double(treesAtBest_));
  state.set(stateName("auto_trees_adopted"), double(treesAdopted_));
}

void TreeSolver::restoreState(const CheckpointState& state, const Particles& particles) {
  reset();
  const std::size_t n = particles.size();
  const auto bodyArray = [&](const char* name) -> const std::vector<double>& {
    const std::vector<double>& array = state.doubleArray(stateName(name));
    if (array.size() != n) {
      throw InputError("the checkpoint's " + stateName(name) + " has " + std::to_string(array.size()) +
                       " entries for " + std::to_string(n) + " bodies");
    }
    return array;
  };
  const auto floatBodyArray = [&](const std::string& name) -> const std::vector<float>& {
    const std::vector<float>& array = state.floatArray(stateName(name.c_str()));
    if (array.size() != n) {
      throw InputError("the checkpoint's " + stateName(name.c_str()) + " has " + std::to_string(array.size()) +
                       " entries for " + std::to_string(n) + " bodies");
    }
    return array;
  };
  Motion& m = *motion_;
  const std::uint64_t positionsKnown = state.count(stateName("motion_positions_known"));
  const std::uint64_t accelerationsKnown = state.count(stateName("motion_accelerations_known"));
  if (positionsKnown > 2 || accelerationsKnown > 2)
    throw InputError("the checkpoint's " + stateName("motion_*_known") + " counts are not 0, 1 or 2");
  if (positionsKnown >= 1) {
    m.previousX = bodyArray("previous_x");
    m.previousY = bodyArray("previous_y");
    m.previousZ = bodyArray("previous_z");
  }
  if (positionsKnown >= 2) {
    m.earlierX = bodyArray("earlier_x");
    m.earlierY = bodyArray("earlier_y");
    m.earlierZ = bodyArray("earlier_z");
  }
  if (accelerationsKnown >= 1) {
    m.previousAx = floatBodyArray("previous_ax");
    m.previousAy = floatBodyArray("previous_ay");
    m.previousAz = floatBodyArray("previous_az");
  }
  if (accelerationsKnown >= 2) {
    m.earlierAx = floatBodyArray("earlier_ax");
    m.earlierAy = floatBodyArray("earlier_ay");
    m.earlierAz = floatBodyArray("earlier_az");
  }
  m.positionsKnown = static_cast<int>(positionsKnown);
  m.accelerationsKnown = static_cast<int>(accelerationsKnown);
  const auto restoreAdvance = [&](const char* name) -> std::optional<BodyAdvance> {
    if (state.scalar(stateName(name)) == 0.0) return std::nullopt;
    return BodyAdvance{state.scalar(stateName(name) + "_first_kick"), state.scalar(stateName(name) + "_second_kick"),
                       state.scalar(stateName(name) + "_drift")};
  };
  m.advanceIn = restoreAdvance("advance_in");
  m.advanceBefore = restoreAdvance("advance_before");
  bestSteps_ = static_cast<std::uint32_t>(state.count(stateName("auto_best_steps")));
  bestCallSeconds_ = state.scalar(stateName("auto_best_call_seconds"));
  trialSteps_ = static_cast<std::uint32_t>(state.count(stateName("auto_trial_steps")));
  direction_ = state.scalar(stateName("auto_direction")) < 0.0 ? -1 : 1;
  turned_ = state.scalar(stateName("auto_turned")) != 0.0;
  searchedOnce_ = state.scalar(stateName("auto_searched_once")) != 0.0;
  treesAtBest_ = state.count(stateName("auto_trees_at_best"));
  treesAdopted_ = state.count(stateName("auto_trees_adopted"));
  call_ = state.count(stateName("call"));

  if (state.scalar(stateName("next_tree")) != 0.0) {
    TreeBuild& build = *next_;
    m.predictedX = bodyArray("next_predicted_x");
    m.predictedY = bodyArray("next_predicted_y");
    m.predictedZ = bodyArray("next_predicted_z");
    m.radius = state.floatArray(stateName("next_radius"));
    if (m.radius.size() != n) throw InputError("the checkpoint's " + stateName("next_radius") + " has the wrong size");
    build.inMass = bodyArray("next_mass");
    build.inAcceleration = floatBodyArray("next_acceleration");
    const std::uint64_t steps = state.count(stateName("next_steps"));
    if (steps < 1 || steps > 64) throw InputError("the checkpoint's " + stateName("next_steps") + " is out of range");
    build.steps = static_cast<std::uint32_t>(steps);
    build.firstCall = call_ + 1;
    build.lastCall = call_ + steps;
    build.error = nullptr;
    build.inputsOnDevice = false;
    build.numBodies = n;
    // The build the saving solver ran in the background, run here before the first call (its phases are reported
    // by the call that adopts it, as they would have been).
    buildForLater(build);
    if (!build.valid) throw InvariantError("the checkpoint's next tree no longer fits the engine's list bound");
  }
  current_->lastCall = call_;
  idSample_.resize(std::min(kIdSamples, n));
  for (std::size_t k = 0; k < idSample_.size(); ++k) idSample_[k] = particles.id[k * n / idSample_.size()];
  restored_ = true;
}

}  // namespace matcha::tree
