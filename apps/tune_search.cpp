// SPDX-License-Identifier: MIT
#include "tune_search.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>
#include <sstream>
#include <utility>

#include "matcha/tree/tree_solver.hpp"

namespace matcha::app {

namespace {

constexpr double kMinTheta = 0.2;  // below it a treecode is slower than the direct sum at the sizes tune runs
constexpr double kMaxTheta = 1.5;  // TreeParams::validate's bound
constexpr double kMinPositiveAlpha = 2.5e-4;
constexpr double kMaxAlpha = 0.02;
constexpr std::uint32_t kMinNcrit = 16, kMaxNcrit = 8192;
constexpr std::uint32_t kMaxNleaf = 64;
constexpr std::uint32_t kMaxReuse = tree::kMaxAutoReuse;  // beyond it the balls make the lists several times longer
using tree::kAutoReuseStart;                              // where reuse auto starts its own search

/// The refinement's moves, in the order they are tried: the cost parameters first, reuse last of them (the K that
/// reuse auto starts from, 3, was the fastest in every tune on the H200 so far, and a budget often ends the search
/// before its last moves). No theta: each family a move makes is taken to the limit's theta by snapToLimit, a better
/// step than any fixed one.
constexpr std::array<TuneMove, 9> kMoves{{{TuneMove::Parameter::ncrit, 1},
                                          {TuneMove::Parameter::ncrit, -1},
                                          {TuneMove::Parameter::alpha, 1},
                                          {TuneMove::Parameter::alpha, -1},
                                          {TuneMove::Parameter::nleaf, 1},
                                          {TuneMove::Parameter::nleaf, -1},
                                          {TuneMove::Parameter::reuse, 1},
                                          {TuneMove::Parameter::reuse, -1},
                                          {TuneMove::Parameter::multipole, 1}}};

/// `value` to two significant digits, so that the ladders' products print as the numbers a person would write.
double twoDigits(double value) {
  if (value <= 0.0) return value;
  const double scale = std::pow(10.0, std::floor(std::log10(value)) - 1.0);
  return std::round(value / scale) * scale;
}

double roundTheta(double theta) { return std::round(theta * 1e4) / 1e4; }

}  // namespace

TuneSetting TuneSetting::of(const TreeParams& params) {
  return {params.multipole, params.theta, params.alpha, params.ncrit, params.nleaf, params.reuse};
}

TreeParams TuneSetting::applyTo(TreeParams base) const {
  base.multipole = multipole;
  base.theta = theta;
  base.alpha = alpha;
  base.ncrit = ncrit;
  base.nleaf = nleaf;
  base.reuse = reuse;
  return base;
}

std::string TuneSetting::describe() const {
  std::ostringstream text;
  text << toString(multipole) << " theta " << theta << " alpha " << alpha << " ncrit " << ncrit << " nleaf " << nleaf
       << " reuse " << (reuse == 0 ? std::string("auto") : std::to_string(reuse));
  return text.str();
}

bool TuneSetting::same(const TuneSetting& other) const {
  return multipole == other.multipole && std::abs(theta - other.theta) < 1e-4 &&
         std::abs(alpha - other.alpha) <= 1e-6 * std::max(alpha, other.alpha) && ncrit == other.ncrit &&
         nleaf == other.nleaf && reuse == other.reuse;
}

bool TuneSetting::sameFamily(const TuneSetting& other) const {
  TuneSetting withTheta = other;
  withTheta.theta = theta;
  return same(withTheta);
}

bool TuneGoal::feasible(const TunePoint& point) const {
  return kind == Kind::targetError ? point.error <= limit : point.stepSeconds <= limit;
}

bool TuneGoal::better(const TunePoint& a, const TunePoint& b) const {
  const bool feasibleA = feasible(a), feasibleB = feasible(b);
  if (feasibleA != feasibleB) return feasibleA;
  // Feasible: the goal's objective. Infeasible: the nearer to the limit. Ties go to the other measure.
  const bool byTime = (kind == Kind::targetError) == feasibleA;
  if (byTime) return a.stepSeconds < b.stepSeconds || (a.stepSeconds == b.stepSeconds && a.error < b.error);
  return a.error < b.error || (a.error == b.error && a.stepSeconds < b.stepSeconds);
}

std::vector<std::size_t> paretoFront(const std::vector<TunePoint>& points) {
  std::vector<std::size_t> order(points.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    if (points[a].stepSeconds != points[b].stepSeconds) return points[a].stepSeconds < points[b].stepSeconds;
    return points[a].error < points[b].error;
  });
  std::vector<std::size_t> front;
  double lowestError = std::numeric_limits<double>::infinity();
  for (const std::size_t k : order) {
    if (points[k].error < lowestError) {
      front.push_back(k);
      lowestError = points[k].error;
    }
  }
  return front;
}

std::optional<std::size_t> bestPoint(const std::vector<TunePoint>& points, const TuneGoal& goal) {
  std::optional<std::size_t> best;
  for (std::size_t k = 0; k < points.size(); ++k) {
    if (!best || goal.better(points[k], points[*best])) best = k;
  }
  return best;
}

std::optional<TuneSetting> moveSetting(const TuneSetting& from, const TuneMove& move, int level) {
  TuneSetting to = from;
  const int up = move.direction > 0 ? 1 : -1;
  switch (move.parameter) {
    case TuneMove::Parameter::theta: {
      to.theta = roundTheta(from.theta + up * 0.1 / std::pow(2.0, level - 1));
      if (to.theta < kMinTheta - 1e-9 || to.theta > kMaxTheta + 1e-9) return std::nullopt;
      break;
    }
    case TuneMove::Parameter::alpha: {
      if (from.alpha == 0.0) {
        if (up < 0) return std::nullopt;
        to.alpha = kMinPositiveAlpha;
        break;
      }
      to.alpha = twoDigits(from.alpha * std::pow(2.0, up / std::pow(2.0, level - 1)));
      if (up < 0 && to.alpha < kMinPositiveAlpha * 0.99) to.alpha = 0.0;  // the step below the smallest: theta alone
      if (to.alpha > kMaxAlpha) return std::nullopt;
      break;
    }
    case TuneMove::Parameter::ncrit:
      to.ncrit = up > 0 ? from.ncrit * 2 : from.ncrit / 2;
      if (to.ncrit < kMinNcrit || to.ncrit > kMaxNcrit || to.ncrit < from.nleaf) return std::nullopt;
      break;
    case TuneMove::Parameter::nleaf:
      to.nleaf = up > 0 ? from.nleaf * 2 : from.nleaf / 2;
      if (to.nleaf < 1 || to.nleaf > kMaxNleaf || to.nleaf > from.ncrit) return std::nullopt;
      break;
    case TuneMove::Parameter::reuse:
      // auto (0) starts its own search at 3 (tree::kAutoReuseStart): up from auto is 3 fixed, down is 2.
      to.reuse = from.reuse == 0 ? (up > 0 ? kAutoReuseStart : kAutoReuseStart - 1)
                                 : from.reuse + static_cast<std::uint32_t>(up);
      if (to.reuse < 1 || to.reuse > kMaxReuse) return std::nullopt;
      break;
    case TuneMove::Parameter::multipole:
      if (up < 0) return std::nullopt;
      to.multipole = from.multipole == MultipoleOrder::monopole ? MultipoleOrder::quadrupole : MultipoleOrder::monopole;
      break;
  }
  if (to.same(from)) return std::nullopt;
  return to;
}

namespace {

constexpr double kThetaGrid = 0.025;
constexpr double kErrorSlope = 3.0;  // d log error / d log theta where a family has one point
constexpr double kTimeSlope = -1.5;  // d log time / d log theta

/// The value of `measure` at `theta` on the line in log-log through the family's two points nearest to `nearTo`
/// (log distance of measure, or of theta when nearTo <= 0), with `slope` for a family of one theta or a line of
/// the wrong sign (noise); returns {value, slope used}.
template <class Measure>
std::pair<double, double> logLine(std::vector<const TunePoint*> members, const Measure& measure, double nearTo,
                                  double slope, double theta) {
  const auto distance = [&](const TunePoint* p) {
    return nearTo > 0.0 ? std::abs(std::log(measure(*p) / nearTo)) : std::abs(std::log(p->setting.theta / theta));
  };
  std::stable_sort(members.begin(), members.end(),
                   [&](const TunePoint* a, const TunePoint* b) { return distance(a) < distance(b); });
  const TunePoint& a = *members.front();
  for (const TunePoint* b : members) {
    if (std::abs(b->setting.theta - a.setting.theta) < 1e-6) continue;
    const double fitted = std::log(measure(*b) / measure(a)) / std::log(b->setting.theta / a.setting.theta);
    if (std::isfinite(fitted) && fitted * slope > 0.0 && std::abs(fitted) > 0.1) slope = fitted;
    break;
  }
  return {measure(a) * std::pow(theta / a.setting.theta, slope), slope};
}

/// The least-squares slope of log measure against log theta over the largest family of `points` (the coarse grid's
/// gives four thetas), for families of one point; `fallback` where no family has two thetas or the slope has the
/// wrong sign.
template <class Measure>
double typicalSlope(const std::vector<TunePoint>& points, const Measure& measure, double fallback) {
  std::size_t largest = 0;
  double slope = fallback;
  for (const TunePoint& p : points) {
    double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (const TunePoint& q : points) {
      if (!q.setting.sameFamily(p.setting) || !(measure(q) > 0.0)) continue;
      const double x = std::log(q.setting.theta), y = std::log(measure(q));
      n += 1;
      sx += x;
      sy += y;
      sxx += x * x;
      sxy += x * y;
    }
    const double spread = n * sxx - sx * sx;
    if (n <= double(largest) || !(spread > 1e-12)) continue;
    const double fitted = (n * sxy - sx * sy) / spread;
    if (fitted * fallback > 0.0) {
      largest = static_cast<std::size_t>(n);
      slope = fitted;
    }
  }
  return slope;
}

}  // namespace

std::optional<TuneSnap> snapToLimit(const std::vector<TunePoint>& points, const TuneSetting& family,
                                    const TuneGoal& goal) {
  std::vector<const TunePoint*> members;
  for (const TunePoint& p : points) {
    if (p.setting.sameFamily(family) && p.error > 0.0 && p.stepSeconds > 0.0) members.push_back(&p);
  }
  if (members.empty()) return std::nullopt;
  const bool byError = goal.kind == TuneGoal::Kind::targetError;
  // The limit lies between `accurate` (the largest theta on the accurate side: feasible for an error target,
  // infeasible for a time) and `cheap`, the smallest on the other side; either may be unmeasured (the range's end).
  double accurate = kMinTheta - kThetaGrid, cheap = kMaxTheta + kThetaGrid;
  bool accurateMeasured = false, cheapMeasured = false;
  for (const TunePoint* p : members) {
    if (goal.feasible(*p) == byError) {
      accurate = std::max(accurate, p->setting.theta);
      accurateMeasured = true;
    } else {
      cheap = std::min(cheap, p->setting.theta);
      cheapMeasured = true;
    }
  }
  if (cheap - accurate < 1.5 * kThetaGrid) return std::nullopt;  // resolved, or noise put the sides the wrong way
  const auto error = [](const TunePoint& p) { return p.error; };
  const auto time = [](const TunePoint& p) { return p.stepSeconds; };
  const TunePoint& first = *members.front();
  // theta at the limit: measure(theta) = limit on the line through the points nearest to it.
  const auto [atFirst, slope] =
      byError ? logLine(members, error, goal.limit, typicalSlope(points, error, kErrorSlope), first.setting.theta)
              : logLine(members, time, goal.limit, typicalSlope(points, time, kTimeSlope), first.setting.theta);
  const double limitTheta = first.setting.theta * std::pow(goal.limit / atFirst, 1.0 / slope);
  // On the grid, on the feasible side (smaller theta for an error target, larger for a time), strictly inside.
  double theta = byError ? std::floor(limitTheta / kThetaGrid + 1e-6) * kThetaGrid
                         : std::ceil(limitTheta / kThetaGrid - 1e-6) * kThetaGrid;
  if (std::isfinite(theta)) theta = std::clamp(theta, kMinTheta, kMaxTheta);
  if (!std::isfinite(theta) || theta <= accurate + 1e-6 || theta >= cheap - 1e-6) {
    // No grid theta left between the sides where the line puts the limit: where the line agrees with the points
    // (the limit between the two sides), the family is resolved to the grid; where it does not (noise), the
    // midpoint bisects, when both sides are measured.
    const bool agrees = std::isfinite(limitTheta) && limitTheta >= accurate - 1e-6 && limitTheta <= cheap + 1e-6;
    if (agrees || !(accurateMeasured && cheapMeasured)) return std::nullopt;
    theta = std::round((accurate + cheap) / 2 / kThetaGrid) * kThetaGrid;
  }
  theta = roundTheta(theta);
  if (theta <= accurate + 1e-6 || theta >= cheap - 1e-6 || theta < kMinTheta - 1e-9 || theta > kMaxTheta + 1e-9) {
    return std::nullopt;
  }
  TuneSnap snap;
  snap.setting = family;
  snap.setting.theta = theta;
  snap.predicted = byError ? logLine(members, time, 0.0, typicalSlope(points, time, kTimeSlope), theta).first
                           : logLine(members, error, 0.0, typicalSlope(points, error, kErrorSlope), theta).first;
  return snap;
}

std::vector<TuneSetting> coarseGrid(const TuneSetting& defaults) {
  // The defaults' order at a second theta gives the slopes of error and time against theta (snapToLimit's line for
  // the families the refinement makes); the other order at that theta anchors its family. The wider theta is where
  // treecodes are fastest at p99 errors near 1e-3.
  const double wide =
      defaults.theta + 0.3 <= kMaxTheta ? roundTheta(defaults.theta + 0.3) : roundTheta(defaults.theta - 0.3);
  TuneSetting sameOrder = defaults, otherOrder = defaults;
  sameOrder.theta = otherOrder.theta = wide;
  if (defaults.reuse == 0) sameOrder.reuse = otherOrder.reuse = kAutoReuseStart;
  otherOrder.multipole =
      defaults.multipole == MultipoleOrder::monopole ? MultipoleOrder::quadrupole : MultipoleOrder::monopole;
  return {defaults, sameOrder, otherOrder};
}

TuneSearch::TuneSearch(const TuneSetting& defaults, const TuneGoal& goal)
    : goal_(goal), coarse_(coarseGrid(defaults)) {}

bool TuneSearch::measured(const TuneSetting& setting) const {
  return std::any_of(points_.begin(), points_.end(), [&](const TunePoint& p) { return p.setting.same(setting); });
}

std::optional<TuneSetting> TuneSearch::firstUntried(std::size_t around, int level,
                                                    std::optional<TuneMove>& move) const {
  for (const TuneMove& candidate : kMoves) {
    const std::optional<TuneSetting> setting = moveSetting(points_[around].setting, candidate, level);
    if (setting && !measured(*setting)) {
      move = candidate;
      return setting;
    }
  }
  return std::nullopt;
}

std::optional<TuneSetting> TuneSearch::next() {
  if (proposed_) return proposed_;
  proposedMove_.reset();
  proposedMomentum_ = false;
  if (!coarseDone_) {
    for (const TuneSetting& setting : coarse_) {
      if (!measured(setting)) return proposed_ = setting;
    }
    coarseDone_ = true;
  }
  const std::optional<std::size_t> best = incumbent_;
  if (!best) return std::nullopt;
  // A move that made the best point is tried again from it first: ncrit 256 -> 512 -> 1024 without a round between.
  if (momentum_) {
    const std::optional<TuneSetting> again = moveSetting(points_[*best].setting, *momentum_, level_);
    if (again && !measured(*again)) {
      proposedMove_ = momentum_;
      proposedMomentum_ = true;
      return proposed_ = again;
    }
    momentum_.reset();
  }
  // The family that promises most at its limit, when it promises to beat the best point.
  const TunePoint& incumbent = points_[*best];
  const double objective = goal_.kind == TuneGoal::Kind::targetError ? incumbent.stepSeconds : incumbent.error;
  std::optional<TuneSnap> promising;
  std::optional<TuneMove> promisingMove;
  for (std::size_t k = 0; k < points_.size(); ++k) {
    bool firstOfFamily = true;
    for (std::size_t j = 0; j < k && firstOfFamily; ++j)
      firstOfFamily = !points_[j].setting.sameFamily(points_[k].setting);
    if (!firstOfFamily) continue;
    const std::optional<TuneSnap> snap = snapToLimit(points_, points_[k].setting, goal_);
    if (!snap || (goal_.feasible(incumbent) && snap->predicted >= 0.98 * objective)) continue;
    if (!promising || snap->predicted < promising->predicted) {
      promising = snap;
      promisingMove = moveOf_[k];
    }
  }
  if (promising) {
    proposedMove_ = promisingMove;
    return proposed_ = promising->setting;
  }
  const std::optional<std::size_t> bracket = this->bracket();
  for (; level_ <= kMaxLevel; ++level_) {
    std::optional<TuneMove> move;
    for (const std::optional<std::size_t> around : {best, bracket}) {
      if (!around) continue;
      if (const std::optional<TuneSetting> setting = firstUntried(*around, level_, move)) {
        proposedMove_ = move;
        return proposed_ = setting;
      }
    }
  }
  return std::nullopt;
}

bool TuneSearch::significantlyBetter(const TunePoint& a, const TunePoint& b) const {
  if (!goal_.better(a, b)) return false;
  if (!goal_.feasible(a) || !goal_.feasible(b)) return true;
  const bool byTime = goal_.kind == TuneGoal::Kind::targetError;
  return (byTime ? a.stepSeconds / b.stepSeconds : a.error / b.error) < 1.0 - kSignificant;
}

void TuneSearch::record(const TunePoint& point) {
  proposed_.reset();
  points_.push_back(point);
  moveOf_.push_back(proposedMove_);
  const bool newIncumbent = !incumbent_ || significantlyBetter(point, points_[*incumbent_]);
  if (newIncumbent) incumbent_ = points_.size() - 1;
  // A point made by a move (or in a family a move made) that became the best: the move is tried again from it. A
  // repeat that did not pay ends the momentum.
  if (newIncumbent && proposedMove_) {
    momentum_ = proposedMove_;
  } else if (proposedMomentum_) {
    momentum_.reset();
  }
  proposedMove_.reset();
  proposedMomentum_ = false;
}

std::optional<std::size_t> TuneSearch::bracket() const {
  std::optional<std::size_t> beyond;
  for (const std::size_t k : paretoFront(points_)) {
    if (!goal_.feasible(points_[k]) && (!beyond || goal_.better(points_[k], points_[*beyond]))) beyond = k;
  }
  return beyond;
}

std::size_t TuneSearch::remaining() const {
  constexpr std::size_t kFinerMoves = 2;  // alpha up and down
  if (!coarseDone_) {
    const auto left = static_cast<std::size_t>(
        std::count_if(coarse_.begin(), coarse_.end(), [&](const TuneSetting& setting) { return !measured(setting); }));
    return left + kMoves.size() + kFinerMoves * (kMaxLevel - 1);
  }
  if (level_ > kMaxLevel) return 0;
  std::size_t untried = 0;
  for (const std::optional<std::size_t> around : {incumbent_, bracket()}) {
    if (!around) continue;
    for (const TuneMove& move : kMoves) {
      const std::optional<TuneSetting> setting = moveSetting(points_[*around].setting, move, level_);
      if (setting && !measured(*setting)) ++untried;
    }
  }
  return untried + kFinerMoves * static_cast<std::size_t>(kMaxLevel - level_);
}

std::string TuneSearch::stage() const {
  if (!coarseDone_) return "coarse grid";
  if (level_ > kMaxLevel) return "converged";
  return "refinement level " + std::to_string(level_);
}

double estimatePointSeconds(const std::vector<TunePoint>& points, const TuneSetting& setting) {
  const auto logAlpha = [](double alpha) { return std::log2(std::max(alpha, kMinPositiveAlpha / 2)); };
  double nearest = std::numeric_limits<double>::infinity(), seconds = 0.0;
  for (const TunePoint& point : points) {
    const TuneSetting& s = point.setting;
    const double distance =
        std::abs(s.theta - setting.theta) / 0.1 + std::abs(logAlpha(s.alpha) - logAlpha(setting.alpha)) +
        std::abs(std::log2(double(s.ncrit)) - std::log2(double(setting.ncrit))) +
        std::abs(std::log2(double(s.nleaf)) - std::log2(double(setting.nleaf))) +
        std::abs(double(s.reuse) - double(setting.reuse)) + (s.multipole == setting.multipole ? 0.0 : 1.0);
    if (distance < nearest) {
      nearest = distance;
      seconds = point.pointSeconds;
    }
  }
  return 1.25 * seconds;
}

}  // namespace matcha::app
