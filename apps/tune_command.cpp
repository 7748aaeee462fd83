// SPDX-License-Identifier: MIT
// `matcha tune`: the fastest tree setting (ncrit, nleaf, theta, alpha, multipole order, reuse) for the user's own
// bodies at the force error they ask for, or the most accurate one whose step fits a time. Each setting is measured
// as a short `matcha run` (the leapfrog on the solver `run` makes, warm-up steps, then steady-state steps with their
// rebuilds) and against double-precision direct sums on a random sample of bodies (compare's reference), where a
// tree is least accurate. The search itself is apps/tune_search.hpp.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "commands.hpp"
#include "force_reference.hpp"
#include "matcha/core/errors.hpp"
#include "matcha/core/force_error.hpp"
#include "matcha/core/stopwatch.hpp"
#include "matcha/core/version.hpp"
#include "matcha/integrator/run_loop.hpp"
#include "matcha/io/run_folder.hpp"
#include "matcha/tree/tree_solver.hpp"
#include "memory_check.hpp"
#include "output_file.hpp"
#include "timings.hpp"
#include "tune_search.hpp"

namespace matcha::app {

namespace {

/// A number as the user would write it back: "0.0006", "1e-05", "99.9" (printf's %g).
std::string shortNumber(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

constexpr unsigned kTuneOptions = kBodies | kGravity | kEngine | kJson;

/// Fewer bodies than this time nothing a run would see (the tree is a handful of groups) and give percentiles of a
/// few bodies.
constexpr std::uint64_t kMinTuneBodies = 1024;

/// tune's own options, beside the shared ones.
struct TuneOptions {
  std::optional<double> targetError;  ///< --target-error: the error percentile to stay at or under (when given)
  std::optional<double> stepTime;     ///< --time-budget-per-step: seconds a step may take (when given)
  double percentile = 99.0;           ///< --percentile of the per-body relative force errors
  std::string errorAt = "both";       ///< --error-at: which measured error counts: fresh, steady or both (the worse)
  double budget = 0.0;                ///< --budget: wall seconds for the whole tune; 0 = until the search converges
  std::string outDir = "matcha-tune";
  double dt = IntegratorParams{}.dt;  ///< --dt: the leapfrog step the timings and the reuse predictions run at
  int steps = 0;                      ///< --steps: steady-state steps timed per setting; 0: chosen (autoSteps)
  std::int64_t sample = 0;            ///< --sample: bodies the errors are measured on; 0: kSample of the reference
  std::uint64_t sampleSeed = 1;       ///< --sample-seed
  bool overwrite = false;             ///< --overwrite: replace an earlier tune's files in --out
};

/// Bodies the errors are measured on by default: the GPU's double direct sum onto 8192 of 2^22 bodies is ~0.1 s; the
/// CPU's onto 2048 of 2^15 ~0.3 s on 2 cores.
constexpr std::int64_t kSampleGpu = 8192, kSampleCpu = 2048;

/// Timed steps per setting by default, and the fewest --budget may cut them to: with reuse 3, two trees or one.
constexpr int kDefaultSteps = 6, kFewestAutoSteps = 3;
/// --budget should hold at least this many settings: the coarse grid and a few moves.
constexpr double kSettingsPerBudget = 8.0;

/// --steps 0: kDefaultSteps, or fewer (down to kFewestAutoSteps) where measuring kSettingsPerBudget settings of
/// about `callSeconds` a force call would not fit in `budget` (0: none) otherwise.
int autoSteps(double budget, double callSeconds) {
  if (!(budget > 0.0) || !(callSeconds > 0.0)) return kDefaultSteps;
  // calls per setting ~ 4 + the warm-up (10 at reuse 3) + timed (PointMeasure::callsPerSetting)
  const double calls = budget / kSettingsPerBudget / callSeconds;
  return std::clamp(static_cast<int>(calls - 4.0 - (2.0 * tree::kAutoReuseStart + 4.0)), kFewestAutoSteps,
                    kDefaultSteps);
}

/// Wall seconds kept from --budget for the end: the files, and tune.png (matplotlib's start-up is most of it).
constexpr double kFinishSeconds = 1.5;

/// The default target when neither --target-error nor --time-budget-per-step is given.
constexpr double kDefaultTargetError = 1e-3;

volatile std::sig_atomic_t interrupted = 0;

extern "C" void onInterrupt(int) { interrupted = 1; }

/// SIGINT sets `interrupted` while the tune measures (checked between settings); a second Ctrl-C stops the process
/// as usual (SA_RESETHAND). The previous handler is put back on every path out.
class InterruptScope {
 public:
  InterruptScope() {
    interrupted = 0;
    struct sigaction action {};
    action.sa_handler = onInterrupt;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESETHAND;
    sigaction(SIGINT, &action, &previous_);
  }
  ~InterruptScope() { sigaction(SIGINT, &previous_, nullptr); }
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;

 private:
  struct sigaction previous_ {};
};

/// An upper bound of the percentile q in (0, 1] of what `errors` sample, at about 97.5% confidence: the value of rank
/// q n + 2 sqrt(n q (1 - q)) (the binomial count's two standard deviations above q n) instead of q n, so that a
/// setting that meets the target on this sample meets it on a fresh one (`matcha compare --sample-seed`) but for
/// the luck of the draw. At p99 that is the 99.44th percentile of 2048 bodies, the 99.22nd of 8192.
double upperPercentile(std::vector<double> errors, double q) {
  if (errors.empty()) return 0.0;
  const double n = double(errors.size());
  const double rank = std::ceil(q * n + 2.0 * std::sqrt(n * q * (1.0 - q)));
  const auto k = static_cast<std::size_t>(std::clamp(rank, 1.0, n)) - 1;
  std::nth_element(errors.begin(), errors.begin() + static_cast<std::ptrdiff_t>(k), errors.end());
  return errors[k];
}

/// Thrown by the run's callback once the error is measured at the last call on a tree: the steps after it would
/// measure nothing.
struct MeasurementDone {};

/// Everything measured for one setting; `point` is what the search sees.
struct Measurement {
  TunePoint point;
  std::string stage;
  double freshError = 0.0, steadyError = 0.0;    ///< the percentile's upper bound: fresh tree, last call on a tree
  double freshMedian = 0.0, steadyMedian = 0.0;  ///< the medians of the same
  std::uint64_t steadySteps = 0, rebuilds = 0, checkStep = 0;
  ForceTimings phases;  ///< the steady-state steps' force calls, summed
  bool defaults = false;
};

/// How one setting is measured: the leapfrog of `matcha run` from the same bodies each time. Warm-up steps (the first
/// calls build within the call and touch fresh memory; reuse auto's first trees are not timed by its search either),
/// then `steps` timed steps (OutputTimings of their outputs: kicks, drift and force calls, rebuilds included,
/// diagnostics excluded), then up to a tree's worth of steps until the last call on a tree, where a reused tree is
/// least accurate: the error is measured there (as `matcha run --force-check`) and on a fresh tree (as `matcha
/// compare` measures it), each as an upper bound of the percentile (upperPercentile), and the worse of the two counts.
class PointMeasure {
 public:
  PointMeasure(const Particles& bodies, const Options& options, const TuneOptions& tune, gpu::EngineChoice& engine,
               NearFieldEngine& oracle)
      : bodies_(bodies), options_(options), tune_(tune), engine_(engine), oracle_(oracle) {
    const std::size_t numTargets = std::min<std::size_t>(static_cast<std::size_t>(tune.sample), bodies.size());
    freshSample_ = drawSample(bodies.size(), numTargets, tune.sampleSeed);
    // The first call's reference is the same for every setting: the bodies start where they are.
    freshReference_ = directOnTargets(oracle_, bodies_, targetIndices(bodies_, freshSample_), options_.gravity);
    // Every setting's fresh tree and run start from the bodies with the accelerations of the defaults' fresh tree
    // (its second call, as `matcha compare` measures it): their first calls then scale the relative opening test by
    // these |a| instead of making an estimate pass first (~0.4 s at 2^22 on the H200, which with the fresh tree's
    // second call was a fifth of a setting's measurement), and the fresh tree's first call is the one compare
    // measures, its test scaled by |a| within the defaults' error (~1e-4) of the |a| compare's first call gives.
    Options fresh = options_;
    fresh.tree.reuse = 1;
    const std::unique_ptr<ForceSolver> solver = makeSolver(fresh, engine_);
    start_ = bodies_;
    solver->computeForces(start_);
    solver->computeForces(start_);
  }

  /// Wall seconds of one force call with `setting` and a tree per call (the second of two: the first touches fresh
  /// memory).
  double probe(const TuneSetting& setting) const {
    Options options = options_;
    options.tree = setting.applyTo(options_.tree);
    options.tree.reuse = 1;
    const std::unique_ptr<ForceSolver> solver = makeSolver(options, engine_);
    Particles q = bodies_;
    solver->computeForces(q);
    const Stopwatch clock;
    solver->computeForces(q);
    return clock.seconds();
  }

  /// The force calls measuring a setting makes at the least, with `timed` steps timed: two for the fresh tree, the
  /// run's first, its warm-up and timed steps, and one after them (the last call on a tree may come later).
  static std::uint64_t callsPerSetting(std::uint64_t timed, std::uint32_t reuse) {
    return 4 + warmUpSteps(timed, reuse) + timed;
  }

  /// Steps before the timed ones: until trees are built in the background and put to use on time. The first tree is
  /// built within its call, the second from the motion of the first calls, often within its call or waited for; on
  /// the H200 at 2^22 with reuse 3 the first 20 steps of a run took 84 ms a step, the next 39. Two trees' worth of
  /// calls and four more (reuse auto: of its largest K, which its search may try first), at least half the timed.
  static std::uint64_t warmUpSteps(std::uint64_t timed, std::uint32_t reuse) {
    const std::uint64_t treeCalls = reuse == 0 ? tree::kMaxAutoReuse : reuse;
    return std::max<std::uint64_t>(2 * treeCalls + 4, timed / 2);
  }

  Measurement operator()(const TuneSetting& setting) const {
    const Stopwatch clock;
    Options options = options_;
    options.tree = setting.applyTo(options_.tree);
    options.tree.validate();
    const std::unique_ptr<ForceSolver> solver = makeSolver(options, engine_);
    Particles p = start_;
    // Outputs (whose intervals give the steady-state timings) every `interval` steps: at the end of the warm-up and
    // of the timed steps.
    const std::uint64_t timed = static_cast<std::uint64_t>(tune_.steps);
    const std::uint64_t warmUp = warmUpSteps(timed, setting.reuse);
    const std::uint64_t interval = std::gcd(warmUp, timed);
    const std::uint64_t checkSteps = setting.reuse == 0 ? tree::kMaxAutoReuse : setting.reuse;
    IntegratorParams integrator;
    integrator.dt = tune_.dt;
    integrator.tStart = 0.0;
    integrator.tEnd = double(warmUp + timed + checkSteps) * tune_.dt;
    integrator.outputInterval = double(interval) * tune_.dt;
    integrator.checkpointInterval = 1e30;  // no checkpoints are taken (no onCheckpoint), and none are due

    Measurement m;
    m.point.setting = setting;
    {
      // A fresh tree on the bodies as given, measured as `matcha compare` measures it: a tree per call, its relative
      // opening test scaled by accelerations the bodies bring (start_'s).
      Options fresh = options;
      fresh.tree.reuse = 1;
      const std::unique_ptr<ForceSolver> freshSolver = makeSolver(fresh, engine_);
      Particles q = start_;
      freshSolver->computeForces(q);
      const TargetForces tree = gatherTargets(q, targetIndices(q, freshSample_));
      const std::vector<double> errors = relativeForceErrors(tree.view(), freshReference_.view());
      m.freshError = upperPercentile(errors, tune_.percentile / 100.0);
      m.freshMedian = percentile(errors, 0.5);
    }
    integrator::RunCallbacks callbacks;
    // The solver computes accelerations only, as between a run's outputs: the outputs here (every few steps, to
    // time the steps between them) would otherwise have their force calls compute potentials too, which a run does
    // every few dozen steps. The diagnostics read zeros (runLeapfrog wants finite energies); tune reads none.
    callbacks.outputPotentials = [](Particles& state) { std::fill(state.pot.begin(), state.pot.end(), 0.0); };
    callbacks.onTimings = [&](const integrator::OutputTimings& t) {
      const std::uint64_t lastStep = t.outputIndex * interval;
      if (t.outputIndex == 0 || lastStep <= warmUp || lastStep > warmUp + timed) return;
      m.point.stepSeconds += t.stepWallSeconds;
      m.steadySteps += t.steps;
      m.rebuilds += t.rebuilds;
      m.phases += t.force;
    };
    bool checked = false;
    const auto check = [&](const Particles& state, std::uint64_t step) {
      const std::vector<std::uint32_t> targets =
          drawTargets(state.size(), freshSample_.numTargets, tune_.sampleSeed ^ step);
      const TargetForces exact = directOnTargets(oracle_, state, targets, options.gravity);
      const std::vector<double> errors = relativeForceErrors(gatherTargets(state, targets).view(), exact.view());
      m.steadyError = upperPercentile(errors, tune_.percentile / 100.0);
      m.steadyMedian = percentile(errors, 0.5);
      m.checkStep = step;
      checked = true;
    };
    callbacks.onLastCallOnTree = [&](const Particles& state, double, std::uint64_t step) {
      if (step <= warmUp + timed) return;
      check(state, step);
      throw MeasurementDone{};
    };
    try {
      integrator::runLeapfrog(p, *solver, integrator, callbacks);
    } catch (const MeasurementDone&) {
    }
    // No tree ended within the run's last steps (reuse auto can choose up to 8): the state at the end.
    if (!checked) check(p, warmUp + timed + checkSteps);
    m.point.stepSeconds /= double(std::max<std::uint64_t>(m.steadySteps, 1));
    m.point.error = tune_.errorAt == "fresh"    ? m.freshError
                    : tune_.errorAt == "steady" ? m.steadyError
                                                : std::max(m.freshError, m.steadyError);
    m.point.pointSeconds = clock.seconds();
    return m;
  }

 private:
  const Particles& bodies_;
  Particles start_;  ///< bodies_ with the accelerations of the defaults' fresh tree
  const Options& options_;
  const TuneOptions& tune_;
  gpu::EngineChoice& engine_;
  NearFieldEngine& oracle_;
  Sample freshSample_;
  TargetForces freshReference_;
};

std::string csvHeader() {
  std::string header =
      "point,stage,defaults,multipole,theta,alpha,ncrit,nleaf,reuse,ms_per_step,percentile,error,fresh_error,"
      "steady_error,fresh_median,steady_median,steady_steps,rebuilds,check_step,point_seconds";
  for (int k = 0; k < kNumPhases; ++k) header += std::string(",") + phaseName(static_cast<Phase>(k)) + "_ms";
  return header + "\n";
}

std::string csvRow(std::size_t index, const Measurement& m, double percentileAsked) {
  const TuneSetting& s = m.point.setting;
  std::ostringstream row;
  row.precision(6);
  row << index << ',' << m.stage << ',' << (m.defaults ? 1 : 0) << ',' << toString(s.multipole) << ',' << s.theta << ','
      << s.alpha << ',' << s.ncrit << ',' << s.nleaf << ',' << s.reuse << ',' << m.point.stepSeconds * 1e3 << ','
      << percentileAsked << ',' << m.point.error << ',' << m.freshError << ',' << m.steadyError << ',' << m.freshMedian
      << ',' << m.steadyMedian << ',' << m.steadySteps << ',' << m.rebuilds << ',' << m.checkStep << ','
      << m.point.pointSeconds;
  const double perStep = 1e3 / double(std::max<std::uint64_t>(m.steadySteps, 1));
  for (int k = 0; k < kNumPhases; ++k) row << ',' << m.phases[static_cast<Phase>(k)] * perStep;
  return row.str() + "\n";
}

std::string percentileName(double q) { return "p" + shortNumber(q); }

/// "3.215 ms", "1296 ms": four significant digits.
std::string milliseconds(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.4g ms", seconds * 1e3);
  return text;
}

std::string goalText(const TuneGoal& goal, const std::string& pName) {
  char text[96];
  if (goal.kind == TuneGoal::Kind::targetError) {
    std::snprintf(text, sizeof text, "%s force error <= %g", pName.c_str(), goal.limit);
  } else {
    std::snprintf(text, sizeof text, "step <= %s", milliseconds(goal.limit).c_str());
  }
  return text;
}

/// tuned.toml: the chosen setting as `matcha run --config` reads it (the keys of usedParameters), with what was
/// measured in comments.
std::string tunedToml(const Measurement& chosen, const Measurement& defaults, const TuneGoal& goal,
                      const Options& options, const TuneOptions& tune, const std::string& source,
                      const std::string& engineName, const std::string& verdict, const std::string& search) {
  const TuneSetting& s = chosen.point.setting;
  const std::string pName = percentileName(tune.percentile);
  char line[512];
  std::string text = "# matcha tune: " + verdict + "\n# search: " + search + "\n";
  text += "# goal: " + goalText(goal, pName) + " (error at: " + tune.errorAt + "); bodies: " + source + "; engine " +
          engineName + "\n";
  std::snprintf(line, sizeof line,
                "# measured: %.4g ms per step (%llu steady-state steps, %llu rebuilds), %s error %.3g (fresh tree "
                "%.3g, last call on a tree %.3g; %lld bodies sampled)\n",
                chosen.point.stepSeconds * 1e3, static_cast<unsigned long long>(chosen.steadySteps),
                static_cast<unsigned long long>(chosen.rebuilds), pName.c_str(), chosen.point.error, chosen.freshError,
                chosen.steadyError, static_cast<long long>(tune.sample));
  text += line;
  std::snprintf(line, sizeof line, "# defaults (%s): %.4g ms per step, %s error %.3g\n",
                defaults.point.setting.describe().c_str(), defaults.point.stepSeconds * 1e3, pName.c_str(),
                defaults.point.error);
  text += line;
  text += "# " + versionText() + "; use as `matcha run --config tuned.toml` (options given after it override it)\n";
  std::snprintf(line, sizeof line, "theta = %.10g\nalpha = %.10g\nncrit = %u\nnleaf = %u\nmultipole = \"%s\"\n",
                s.theta, s.alpha, s.ncrit, s.nleaf, toString(s.multipole).c_str());
  text += line;
  text += "reuse = " + std::to_string(s.reuse) + "\n";
  std::snprintf(line, sizeof line, "eps = %.17g\ndt = %.17g\nengine = \"%s\"\n", options.gravity.eps, tune.dt,
                toString(options.engine).c_str());
  text += line;
  if (options.icFile.empty()) {
    text += "bodies = " + std::to_string(options.numBodies) + "\nseed = " + std::to_string(options.seed) + "\n";
  } else {
    text += "ic = \"" + options.icFile + "\"\n";
  }
  return text;
}

nlohmann::json pointJson(const Measurement& m) {
  const TuneSetting& s = m.point.setting;
  return {{"multipole", toString(s.multipole)},
          {"theta", s.theta},
          {"alpha", s.alpha},
          {"ncrit", s.ncrit},
          {"nleaf", s.nleaf},
          {"reuse", s.reuse},
          {"step_seconds", m.point.stepSeconds},
          {"error", m.point.error},
          {"fresh_error", m.freshError},
          {"steady_error", m.steadyError},
          {"defaults", m.defaults},
          {"stage", m.stage},
          {"point_seconds", m.point.pointSeconds}};
}

/// The table of the front, marking the chosen setting (*) and the defaults (d).
void printFront(std::ostream& out, const std::vector<Measurement>& all, const std::vector<std::size_t>& front,
                std::optional<std::size_t> chosen, std::size_t defaults, const std::string& pName) {
  char line[256];
  out << "Pareto front, time per step against " << pName << " force error (" << front.size() << " of " << all.size()
      << " settings; * chosen, d defaults):\n";
  std::snprintf(line, sizeof line, "     %10s %10s %10s %10s  %-5s %6s %8s %6s %6s %6s\n", "ms/step", pName.c_str(),
                "fresh", "steady", "mult", "theta", "alpha", "ncrit", "nleaf", "reuse");
  out << line;
  std::vector<std::size_t> rows = front;
  if (std::find(rows.begin(), rows.end(), defaults) == rows.end()) rows.push_back(defaults);
  for (const std::size_t k : rows) {
    const Measurement& m = all[k];
    const TuneSetting& s = m.point.setting;
    const std::string mark = std::string(chosen == k ? "*" : " ") + (k == defaults ? "d" : " ");
    std::snprintf(line, sizeof line, "  %s %10.4g %10.3g %10.3g %10.3g  %-5s %6g %8g %6u %6u %6s%s\n", mark.c_str(),
                  m.point.stepSeconds * 1e3, m.point.error, m.freshError, m.steadyError, toString(s.multipole).c_str(),
                  s.theta, s.alpha, s.ncrit, s.nleaf, s.reuse == 0 ? "auto" : std::to_string(s.reuse).c_str(),
                  std::find(front.begin(), front.end(), k) == front.end() ? "  (not on the front)" : "");
    out << line;
  }
}

/// The project's script `name`: from $MATCHA_SCRIPTS_DIR when set, else the source tree matcha was built from, else
/// scripts/ two folders above the binary (a build folder copied with its checkout, as onto the GPU machine). Empty
/// when none holds it.
std::filesystem::path findScript(const std::string& name) {
  std::vector<std::filesystem::path> folders;
  if (const char* fromEnvironment = std::getenv("MATCHA_SCRIPTS_DIR"); fromEnvironment != nullptr) {
    folders.emplace_back(fromEnvironment);
  }
  folders.emplace_back(MATCHA_SCRIPTS_DIR);
  std::error_code error;
  const std::filesystem::path binary = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) folders.push_back(binary.parent_path().parent_path().parent_path() / "scripts");
  for (const std::filesystem::path& folder : folders) {
    if (std::filesystem::is_regular_file(folder / name, error)) return folder / name;
  }
  return {};
}

/// tune.png from tune.csv by scripts/plot_tune.py with Debian's python3; a line saying why not where it cannot.
std::string drawPlot(const std::filesystem::path& dir, const TuneGoal& goal) {
  const std::filesystem::path script = findScript("plot_tune.py");
  const std::filesystem::path png = dir / "tune.png";
  if (script.empty()) {
    return std::string("tune.png not drawn: plot_tune.py not found in $MATCHA_SCRIPTS_DIR, ") + MATCHA_SCRIPTS_DIR +
           " or scripts/ beside the build folder";
  }
  if (!std::filesystem::exists("/usr/bin/python3")) return "tune.png not drawn: /usr/bin/python3 is missing";
  std::ostringstream command;
  command << "/usr/bin/python3 '" << script.string() << "' '" << (dir / "tune.csv").string() << "' -o '" << png.string()
          << "' " << (goal.kind == TuneGoal::Kind::targetError ? "--target-error " : "--time-budget-per-step ")
          << goal.limit << " >/dev/null 2>'" << (dir / ".plot-errors.txt").string() << "'";
  const int status = std::system(command.str().c_str());
  std::ifstream errors(dir / ".plot-errors.txt");
  std::string message;
  std::getline(errors, message);
  std::filesystem::remove(dir / ".plot-errors.txt");
  if (status != 0) return "tune.png not drawn: " + (message.empty() ? "plot_tune.py failed" : message);
  return "";
}

int tuneSettings(const Options& givenOptions, const TuneOptions& given) {
  const Stopwatch wall;
  Options options = givenOptions;
  validateOptions(options, kTuneOptions);
  if (given.targetError && !(*given.targetError > 0.0 && *given.targetError < 1.0)) {
    throw InputError("--target-error must be > 0 and < 1 (got " + shortNumber(*given.targetError) + ")");
  }
  if (given.stepTime && !(*given.stepTime > 0.0 && std::isfinite(*given.stepTime))) {
    throw InputError("--time-budget-per-step must be > 0 seconds (got " + shortNumber(*given.stepTime) + ")");
  }
  if (!(given.percentile > 0.0 && given.percentile <= 100.0)) {
    throw InputError("--percentile must be in (0, 100] (got " + std::to_string(given.percentile) + ")");
  }
  if (!(given.budget >= 0.0 && std::isfinite(given.budget))) {
    throw InputError("--budget must be >= 0 seconds, 0 for no limit (got " + std::to_string(given.budget) + ")");
  }
  if (!(given.dt > 0.0 && std::isfinite(given.dt))) {
    throw InputError("--dt must be > 0 (got " + std::to_string(given.dt) + ")");
  }
  if (given.steps < 0 || given.steps > 1000) {
    throw InputError("--steps must be 1 to 1000, or 0 to choose (got " + std::to_string(given.steps) + ")");
  }
  if (given.sample != 0 && given.sample < 16) {
    throw InputError("--sample must be >= 16, or 0 for the default (got " + std::to_string(given.sample) + ")");
  }
  const TuneGoal goal = given.stepTime
                            ? TuneGoal{TuneGoal::Kind::stepTime, *given.stepTime}
                            : TuneGoal{TuneGoal::Kind::targetError, given.targetError.value_or(kDefaultTargetError)};
  const std::filesystem::path outDir = given.outDir;
  if (std::filesystem::exists(outDir) && !std::filesystem::is_directory(outDir)) {
    throw InputError("--out " + given.outDir + ": is a file, not a folder");
  }
  // An earlier tune's files are replaced only when asked, and then only if they are a tune's (tuned.toml may have
  // been edited by hand since, or be another file of the user's).
  for (const auto& [name, signature] :
       {std::pair{"tune.csv", csvHeader()}, std::pair{"tuned.toml", std::string("# matcha tune: ")}}) {
    const std::filesystem::path file = outDir / name;
    std::error_code ec;
    if (std::filesystem::symlink_status(file, ec).type() == std::filesystem::file_type::not_found) continue;
    if (!given.overwrite) {
      throw InputError("--out " + given.outDir + " holds " + name +
                       " already; pass --overwrite to replace an earlier " + "tune's files, or name another folder");
    }
    if (!fileStartsWith(file, signature)) {
      throw InputError("--out " + given.outDir + ": " + name +
                       " is not one `matcha tune` wrote; --overwrite replaces " + "only those");
    }
  }
  const InitialConditionsInfo ic = inspectInitialConditions(options);
  if (ic.boxSize > 0.0) {
    throw InputError("--ic " + options.icFile + ": a periodic box; matcha tune measures open-boundary trees only");
  }
  if (ic.numBodies < kMinTuneBodies) {
    throw InputError((options.icFile.empty()
                          ? "-n " + std::to_string(ic.numBodies)
                          : "--ic " + options.icFile + " holds " + std::to_string(ic.numBodies) + " bodies") +
                     ": matcha tune needs at least " + std::to_string(kMinTuneBodies) + " bodies");
  }
  requireBodiesFit(ic.numBodies);
  // The engines first: an --engine that cannot be is refused before a large sphere is made.
  gpu::EngineChoice engine = makeRunEngine(options);
  std::string referenceKind;
  const std::unique_ptr<NearFieldEngine> oracle = makeReferenceEngine("auto", referenceKind);
  std::ostream& info = options.json ? std::cerr : std::cout;
  Particles bodies = loadInitialConditions(options, info);
  gpu::requireFloatRange(bodies, options.gravity);
  std::iota(bodies.id.begin(), bodies.id.end(), std::uint64_t{0});  // ids index the error sample (Sample)
  options.integrator.tStart = 0.0;
  TuneOptions tune = given;
  if (tune.sample == 0) {
    tune.sample = std::min<std::int64_t>(referenceKind == "gpu-double" ? kSampleGpu : kSampleCpu,
                                         static_cast<std::int64_t>(bodies.size()));
  } else if (tune.sample > static_cast<std::int64_t>(bodies.size())) {
    throw InputError("--sample " + std::to_string(tune.sample) + " exceeds the " + std::to_string(bodies.size()) +
                     " bodies (as compare, which refuses it too)");
  }
  std::filesystem::create_directories(outDir);
  const std::filesystem::path csvPath = outDir / "tune.csv";
  std::ofstream csv(csvPath, std::ios::trunc);
  if (!csv) throw IoError("cannot write " + csvPath.string());
  csv << csvHeader() << std::flush;

  const std::string pName = percentileName(tune.percentile);
  const std::string source = options.icFile.empty()
                                 ? "a Plummer sphere of " + std::to_string(bodies.size()) + " bodies (seed " +
                                       std::to_string(options.seed) + ")"
                                 : options.icFile + " (" + std::to_string(bodies.size()) + " bodies)";
  info << "matcha tune: " << source << "; goal: " << goalText(goal, pName)
       << (tune.budget > 0.0 ? "; budget " + formatDuration(tune.budget) : std::string())
       << "\nengine: " << engine.reason << "\nerrors: " << pName << " of |a - a_exact| / |a_exact| on " << tune.sample
       << " bodies (an upper bound at ~97.5% confidence) against direct summation in double (" << referenceKind
       << "), on a fresh tree (as compare) and at the last call on a tree after the timed steps; "
       << (tune.errorAt == "both" ? std::string("the worse counts") : "the " + tune.errorAt + " one counts")
       << std::endl;
  const PointMeasure measure(bodies, options, tune, engine, *oracle);

  const TuneSetting defaultSetting = TuneSetting::of(options.tree);
  if (tune.budget > 0.0 || tune.steps == 0) {
    const double callSeconds = measure.probe(defaultSetting);
    if (tune.steps == 0) tune.steps = autoSteps(tune.budget, callSeconds);
    const std::uint64_t calls = PointMeasure::callsPerSetting(std::uint64_t(tune.steps), defaultSetting.reuse);
    const double needed = wall.seconds() + double(calls) * callSeconds + kFinishSeconds;
    // A budget that cannot hold the defaults' measurement is refused before the sweep starts.
    if (tune.budget > 0.0 && needed > tune.budget) {
      throw InputError("--budget " + shortNumber(tune.budget) + " s is too small for one measurement: the set-up and " +
                       std::to_string(calls) + " force calls of " + milliseconds(callSeconds) + " take ~" +
                       formatDuration(needed) + " on these bodies");
    }
  }
  info << "steps: " << PointMeasure::warmUpSteps(std::uint64_t(tune.steps), tree::kAutoReuseStart) << " warm-up ("
       << PointMeasure::warmUpSteps(std::uint64_t(tune.steps), 0) << " for reuse auto) + " << tune.steps
       << " timed per setting, dt " << tune.dt << "\npoints: " << csvPath.string()
       << " (one row per setting, as it is measured)" << std::endl;
  TuneSearch search(defaultSetting, goal);
  std::vector<Measurement> all;
  const bool terminal = ::isatty(STDERR_FILENO) != 0;
  std::string stopReason = "the search converged";
  // Ctrl-C from here on ends the sweep after the setting being measured; the results are still written.
  const InterruptScope interruptScope;
  while (const std::optional<TuneSetting> next = search.next()) {
    if (interrupted) {
      stopReason = "interrupted (Ctrl-C)";
      break;
    }
    const double elapsed = wall.seconds();
    const double estimate = estimatePointSeconds(search.points(), *next);
    if (tune.budget > 0.0 && !all.empty() && elapsed + estimate + kFinishSeconds > tune.budget) {
      stopReason = "the budget of " + formatDuration(tune.budget) + " would be exceeded by the next setting";
      break;
    }
    double meanPoint = 0.0;
    for (const TunePoint& p : search.points()) meanPoint += p.pointSeconds / double(search.points().size());
    // The search's guess of the settings left, at the mean cost so far; the budget, where it ends sooner.
    double eta = double(search.remaining()) * meanPoint;
    if (tune.budget > 0.0) eta = std::min(eta, tune.budget - elapsed);
    std::fprintf(stderr, "%ssetting %zu (%s): %s  elapsed %s  ETA %s%s", terminal ? "\r\033[K" : "", all.size() + 1,
                 search.stage().c_str(), next->describe().c_str(), formatDuration(elapsed).c_str(),
                 all.empty() ? "?" : formatDuration(eta).c_str(), terminal ? "" : "\n");
    std::fflush(stderr);
    Measurement m = measure(*next);
    m.stage = search.stage();
    m.defaults = next->same(defaultSetting);
    search.record(m.point);
    all.push_back(m);
    csv << csvRow(all.size() - 1, m, tune.percentile) << std::flush;
  }
  if (terminal) std::fprintf(stderr, "\n");
  csv.close();
  if (all.empty()) throw InputError("interrupted before the first setting was measured");

  const std::vector<TunePoint>& points = search.points();
  const std::vector<std::size_t> front = paretoFront(points);
  const std::size_t best = *bestPoint(points, goal);
  const std::size_t defaults = 0;  // the coarse grid starts with them
  const bool met = goal.feasible(points[best]);
  const Measurement& chosen = all[best];
  const Measurement& base = all[defaults];
  std::string verdict;
  char line[512];
  if (!met) {
    verdict = "no setting measured meets the goal (" + goalText(goal, pName) + "); the nearest is written";
  } else if (best == defaults) {
    verdict = "the defaults are already the best setting measured for the goal (on the front)";
  } else if (goal.kind == TuneGoal::Kind::targetError) {
    if (goal.feasible(points[defaults])) {
      std::snprintf(line, sizeof line, "%.2fx faster than the defaults (%s against %s per step), both within the goal",
                    points[defaults].stepSeconds / points[best].stepSeconds,
                    milliseconds(points[best].stepSeconds).c_str(), milliseconds(points[defaults].stepSeconds).c_str());
    } else {
      std::snprintf(line, sizeof line, "meets the goal, which the defaults miss (%s %.3g); %s against %s per step",
                    pName.c_str(), points[defaults].error, milliseconds(points[best].stepSeconds).c_str(),
                    milliseconds(points[defaults].stepSeconds).c_str());
    }
    verdict = std::string("the fastest setting measured that meets the goal: ") + line;
  } else {
    std::snprintf(line, sizeof line, "%s error %.3g against the defaults' %.3g%s", pName.c_str(), points[best].error,
                  points[defaults].error, goal.feasible(points[defaults]) ? "" : " (whose step does not fit the time)");
    verdict = std::string("the most accurate setting measured whose step fits: ") + line;
  }

  io::writeTextFile(outDir / "tuned.toml",
                    tunedToml(chosen, base, goal, options, tune, source, engine.engine->name(), verdict,
                              std::to_string(all.size()) + " settings measured in " + formatDuration(wall.seconds()) +
                                  ", stopped: " + stopReason));
  const std::string plotNote = drawPlot(outDir, goal);
  if (options.json) {
    nlohmann::json json = {
        {"bodies", bodies.size()},
        {"engine", engine.engine->name()},
        {"reference", referenceKind},
        {"goal",
         {{"kind", goal.kind == TuneGoal::Kind::targetError ? "target_error" : "step_seconds"},
          {"limit", goal.limit},
          {"percentile", tune.percentile},
          {"error_at", tune.errorAt}}},
        {"met", met},
        {"verdict", verdict},
        {"stopped", stopReason},
        {"wall_seconds", wall.seconds()},
        {"chosen", pointJson(chosen)},
        {"defaults", pointJson(base)},
        {"speedup", points[best].stepSeconds > 0 ? points[defaults].stepSeconds / points[best].stepSeconds : 0.0},
        {"front", front},
        {"points", nlohmann::json::array()},
        {"files",
         {{"toml", (outDir / "tuned.toml").string()},
          {"csv", csvPath.string()},
          {"png", plotNote.empty() ? nlohmann::json((outDir / "tune.png").string()) : nullptr}}}};
    for (const Measurement& m : all) json["points"].push_back(pointJson(m));
    std::cout << json.dump(2) << std::endl;
  } else {
    std::printf("\n");
    printFront(std::cout, all, front, best, defaults, pName);
    std::printf("\n%s\n  %s: %s per step, %s error %.3g\n", verdict.c_str(), chosen.point.setting.describe().c_str(),
                milliseconds(chosen.point.stepSeconds).c_str(), pName.c_str(), chosen.point.error);
    std::printf("%zu settings in %s; stopped: %s\nwritten: %s, %s%s\n", all.size(),
                formatDuration(wall.seconds()).c_str(), stopReason.c_str(), (outDir / "tuned.toml").string().c_str(),
                csvPath.string().c_str(), plotNote.empty() ? (", " + (outDir / "tune.png").string()).c_str() : "");
  }
  if (!plotNote.empty()) std::cerr << plotNote << "\n";
  return interrupted ? 130 : 0;
}

}  // namespace

std::function<int()> addTuneCommand(CLI::App& parent, Options& options) {
  CLI::App* command = parent.add_subcommand(
      "tune",
      "the fastest ncrit, nleaf, theta, alpha, multipole order and reuse for these bodies at a force error (or the "
      "most accurate whose step fits a time): measured runs, a Pareto front, DIR/tuned.toml for run --config");
  addOptions(*command, options, kTuneOptions);
  auto tune = std::make_shared<TuneOptions>();
  auto* target = command->add_option_function<double>(
      "--target-error", [tune](double value) { tune->targetError = value; },
      "the force error percentile (--percentile) to stay at or under, in (0, 1); default 1e-3");
  command
      ->add_option_function<double>(
          "--time-budget-per-step", [tune](double value) { tune->stepTime = value; },
          "instead of --target-error: the most accurate setting whose step takes at most this many seconds")
      ->excludes(target);
  command
      ->add_option("--error-at", tune->errorAt,
                   "which error counts: a fresh tree's (fresh: what compare measures, a run's first step), the last "
                   "call's on a reused tree (steady: a run's steps after the first trees), or the worse (both)")
      ->check(CLI::IsMember({"fresh", "steady", "both"}))
      ->capture_default_str();
  command->add_option("--percentile", tune->percentile, "percentile of the per-body relative force errors, (0, 100]")
      ->capture_default_str();
  command
      ->add_option("--budget", tune->budget,
                   "wall seconds for the whole tune: it stops before a setting that would not fit (0: until the "
                   "search converges)")
      ->capture_default_str();
  command->add_option("--out", tune->outDir, "folder for tuned.toml, tune.csv and tune.png (created if missing)")
      ->capture_default_str();
  command->add_flag("--overwrite", tune->overwrite, "replace an earlier tune's files in --out");
  command->add_option("--dt", tune->dt, "leapfrog time step of the measured runs (reuse's predictions depend on it)")
      ->capture_default_str();
  command
      ->add_option("--steps", tune->steps,
                   "steady-state steps timed per setting, after half as many warm-up (0: 6, or down to 3 where "
                   "--budget would hold fewer than 8 settings)")
      ->capture_default_str();
  command
      ->add_option("--sample", tune->sample,
                   "bodies the errors are measured on, drawn at random (0: 8192 with a GPU reference, 2048 without)")
      ->capture_default_str();
  addSeedOption(*command, "--sample-seed", tune->sampleSeed, "random seed of --sample, 0 to 2^64 - 1");
  return [&options, tune] { return tuneSettings(options, *tune); };
}

}  // namespace matcha::app
