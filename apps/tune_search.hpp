// SPDX-License-Identifier: MIT
// The search of `matcha tune`, apart from any timing: which tree settings to measure next, the Pareto front of time
// per step against force error, and the setting that best meets the user's goal. Pure functions of the points
// measured so far (and of the moves the search made), so that tests can drive it with made-up costs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "matcha/core/params.hpp"

namespace matcha::app {

/// The tree parameters `matcha tune` varies; the others (pipeline, device advance, ...) keep their defaults.
struct TuneSetting {
  MultipoleOrder multipole = MultipoleOrder::quadrupole;
  double theta = 0.5;
  double alpha = 1e-3;
  std::uint32_t ncrit = 256;
  std::uint32_t nleaf = 8;
  std::uint32_t reuse = 0;  ///< TreeParams::reuse: 0 auto, 1 off, K

  /// The fields of `params` that tune varies.
  static TuneSetting of(const TreeParams& params);
  /// `base` with this setting's fields.
  TreeParams applyTo(TreeParams base) const;
  /// One line for people: "quad theta 0.8 alpha 0.002 ncrit 1024 nleaf 16 reuse 3".
  std::string describe() const;
  /// Equal as the search sees them: theta to 1e-4, alpha to 1e-6 relative.
  bool same(const TuneSetting& other) const;
  /// Equal in every parameter but theta: one family, whose error rises and whose time falls with theta.
  bool sameFamily(const TuneSetting& other) const;
};

/// One measured setting.
struct TunePoint {
  TuneSetting setting;
  double stepSeconds = 0.0;   ///< steady-state wall time per step
  double error = 0.0;         ///< the force error percentile the user asked for (the worse of the places measured)
  double pointSeconds = 0.0;  ///< wall time the measurement took (for the budget's estimates)
};

/// What the user asks for: the fastest setting whose error is at most `limit` (targetError), or the most accurate
/// one whose step takes at most `limit` seconds (stepTime).
struct TuneGoal {
  enum class Kind { targetError, stepTime };
  Kind kind = Kind::targetError;
  double limit = 0.0;

  bool feasible(const TunePoint& point) const;
  /// Whether `a` serves the goal better than `b`: a feasible point beats an infeasible one; among feasible points the
  /// faster (targetError) or the more accurate (stepTime); among infeasible ones the one nearer to feasible.
  bool better(const TunePoint& a, const TunePoint& b) const;
};

/// Indices of the points no other point beats in both time and error (a point equal in both to an earlier one is
/// left out), by increasing time (and so decreasing error).
std::vector<std::size_t> paretoFront(const std::vector<TunePoint>& points);

/// The index of the point that serves `goal` best (TuneGoal::better), feasible or not; nullopt for no points.
std::optional<std::size_t> bestPoint(const std::vector<TunePoint>& points, const TuneGoal& goal);

/// A change of one parameter by one step of its ladder, as the refinement makes them.
struct TuneMove {
  enum class Parameter { ncrit, reuse, nleaf, alpha, theta, multipole };
  Parameter parameter = Parameter::theta;
  int direction = 1;  ///< +1 up the ladder, -1 down (multipole: +1 flips)
};

/// `from` moved by `move` at refinement level `level` (1, 2, ...: theta steps 0.1, 0.05, 0.025; alpha factors 2,
/// 2^(1/2), 2^(1/4); the other ladders the same at every level: ncrit and nleaf x2, reuse +-1, auto counting as 3),
/// or nullopt where the ladder ends (theta in [0.2, 1.5], alpha <= 0.02, ncrit 16 to 8192, nleaf 1 to 64 and <= ncrit,
/// reuse 1 to 8).
std::optional<TuneSetting> moveSetting(const TuneSetting& from, const TuneMove& move, int level);

/// Where a family of settings (all parameters but theta) meets the goal's limit.
struct TuneSnap {
  TuneSetting setting;     ///< the family's setting at the predicted theta
  double predicted = 0.0;  ///< the goal's objective there, predicted: seconds per step (targetError) or error
};

/// The theta at which the family of `family` (every parameter but theta) meets `goal`'s limit, on a 0.025 grid on
/// the limit's feasible side, predicted from the family's points by a line in log theta (through the two points
/// nearest to the limit; one point alone: error ~ theta^3, time ~ theta^-1.5, about what a treecode shows), and
/// kept strictly between the family's largest theta on the accurate side and its smallest on the other (the midpoint
/// when the line points outside: bisection, so that noise cannot loop). nullopt when the family has no points, when
/// those two thetas are one grid step apart (the family is resolved) or when no theta in [0.2, 1.5] is left.
std::optional<TuneSnap> snapToLimit(const std::vector<TunePoint>& points, const TuneSetting& family,
                                    const TuneGoal& goal);

/// The coarse grid the search starts with: `defaults`, then the defaults' multipole order and the other one at theta
/// 0.3 larger (smaller where that passes 1.5), the other parameters the defaults' but reuse: where the defaults choose
/// it at run time (auto), these two fix it at the K auto starts from (3). Auto searches K in the run itself, which a
/// tune's short measurement cannot show in its steady state, and a run given the K the tune measured best does not
/// pay for that search (10-20% of a step on the H200 at 2^22 and 2^24). Three settings, not more: the refinement takes
/// each family to the target's theta from there (snapToLimit), and a setting of 2^15 bodies on two CPU cores takes ten
/// seconds and more to measure.
std::vector<TuneSetting> coarseGrid(const TuneSetting& defaults);

/// The search: the coarse grid, then a compass search around the best point for the goal and around the front point
/// beyond the goal's limit, each family a move makes (ncrit up, say) first taken to the theta where it meets the
/// limit (snapToLimit) when that promises to beat the best point by 2%: the best setting of the cost parameters lies
/// on the limit, which a step of theta alone rarely hits. A move that paid is repeated first; when no neighbour is
/// left to try, the next level's finer alpha steps, up to kMaxLevel. Tie it to the measurements with next()
/// and record(): record the point of each setting next() gave, in order.
class TuneSearch {
 public:
  static constexpr int kMaxLevel = 3;
  /// A point takes over as the one the search moves around when it serves the goal better by this fraction (2%
  /// faster, say): less is within the timings' noise on a shared host, and each takeover costs a round of moves.
  static constexpr double kSignificant = 0.02;

  TuneSearch(const TuneSetting& defaults, const TuneGoal& goal);

  /// The next setting to measure, or nullopt when the search has converged. Calling it again without record() gives
  /// the same setting.
  std::optional<TuneSetting> next();
  /// Takes the measurement of the setting next() gave last (its TunePoint::setting must be that setting).
  void record(const TunePoint& point);

  const std::vector<TunePoint>& points() const { return points_; }
  int level() const { return level_; }
  /// "coarse grid", "refinement level L" or "converged", for the progress line.
  std::string stage() const;
  /// A guess of the settings still to measure, for the progress line's ETA: what is left of the coarse grid, the
  /// untried neighbours of the best point and of the front point beyond the limit at this level, and two moves
  /// (alpha) at each finer level.
  std::size_t remaining() const;

 private:
  bool measured(const TuneSetting& setting) const;
  /// Whether `a` serves the goal better than `b` by kSignificant at least (or is feasible where `b` is not).
  bool significantlyBetter(const TunePoint& a, const TunePoint& b) const;
  /// The front point that misses the goal by the least (the other side of the limit from the best point), if any.
  std::optional<std::size_t> bracket() const;
  std::optional<TuneSetting> firstUntried(std::size_t around, int level, std::optional<TuneMove>& move) const;

  TuneGoal goal_;
  std::vector<TuneSetting> coarse_;
  std::vector<TunePoint> points_;
  int level_ = 1;
  bool coarseDone_ = false;
  std::optional<TuneSetting> proposed_;
  std::optional<TuneMove> proposedMove_;         ///< the move that made proposed_ (or its family), if any
  bool proposedMomentum_ = false;                ///< proposed_ repeats momentum_
  std::vector<std::optional<TuneMove>> moveOf_;  ///< per point: the move that made it or its family
  std::optional<TuneMove> momentum_;             ///< the move that made the incumbent, to be tried again from it
  std::optional<std::size_t> incumbent_;         ///< the point the search moves around (best, up to kSignificant)
};

/// A guess of the seconds that measuring `setting` will take: the measured time of the point nearest to it (distance
/// in theta, log2 alpha, log2 ncrit, log2 nleaf, reuse and multipole), scaled by 1.25 for the margin of a guess;
/// 0 without points.
double estimatePointSeconds(const std::vector<TunePoint>& points, const TuneSetting& setting);

}  // namespace matcha::app
