// SPDX-License-Identifier: MIT
#include "timings.hpp"

#include <tbb/task_arena.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>

namespace matcha::app {

std::string formatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0.0) return "?";
  constexpr double kMinute = 60, kHour = 3600, kDay = 86400, kYear = 365.25 * kDay;
  const auto whole = [](double value) { return std::to_string(static_cast<long long>(value)); };
  if (seconds >= kYear) return "> 1 year";
  const double s = std::round(seconds);
  if (s < kMinute) return whole(s) + " s";
  if (s < kHour) return whole(std::floor(s / kMinute)) + " min " + whole(std::fmod(s, kMinute)) + " s";
  const double m = std::round(seconds / kMinute);
  if (m < 24 * 60) return whole(std::floor(m / 60)) + " h " + whole(std::fmod(m, 60.0)) + " min";
  const double h = std::round(seconds / kHour);
  return whole(std::floor(h / 24)) + " d " + whole(std::fmod(h, 24.0)) + " h";
}

namespace {

Phase phaseAt(int k) { return static_cast<Phase>(k); }

/// The fraction of the steps' wall time the engine evaluated: GPU kernel time on the CUDA engine (the GPU is idle
/// the rest of the time), the CPU engine's evaluation otherwise. 0 without steps.
double busyFraction(const integrator::RunSummary& summary) {
  return summary.stepWallSeconds > 0.0 ? summary.stepForceTimings[Phase::kernels] / summary.stepWallSeconds : 0.0;
}

/// The mean wall time of the steps after the first (RunSummary::firstStepWallSeconds: a long run's pace); null
/// where the run timed no first step apart (fewer than two steps, a Hermite run).
nlohmann::json steadyStepSeconds(const integrator::RunSummary& summary) {
  if (!summary.firstStepWallSeconds || summary.steps < 2) return nullptr;
  return (summary.stepWallSeconds - *summary.firstStepWallSeconds) / static_cast<double>(summary.steps - 1);
}

/// Cores the process kept busy over the steps: its CPU time (all threads: the main thread, TBB's workers, a
/// background tree build) over the steps' wall time. 0 without steps.
double hostCoresBusy(double cpuSeconds, double wallSeconds) {
  return wallSeconds > 0.0 ? cpuSeconds / wallSeconds : 0.0;
}

/// x per step, or null (not NaN, which JSON cannot hold) for a run without steps.
nlohmann::json perStep(double total, std::uint64_t steps) {
  if (steps == 0) return nullptr;
  return total / static_cast<double>(steps);
}

/// printf onto the end of `text`, whatever the length.
void appendf(std::string& text, const char* format, auto... values) {
  const int length = std::snprintf(nullptr, 0, format, values...);
  if (length <= 0) return;
  const std::size_t end = text.size();
  text.resize(end + static_cast<std::size_t>(length) + 1);
  std::snprintf(text.data() + end, static_cast<std::size_t>(length) + 1, format, values...);
  text.resize(end + static_cast<std::size_t>(length));
}

/// "; positions moved on the GPU at X of N calls" (and the mismatches), or nothing where the engine never moved its
/// copy of the bodies nor found it different: the CPU engine, --device-advance off.
std::string advancedText(std::uint64_t advanced, std::uint64_t mismatches, std::uint64_t calls) {
  if (advanced == 0 && mismatches == 0) return "";
  std::string text;
  appendf(text, "; positions moved on the GPU at %llu of %llu calls", static_cast<unsigned long long>(advanced),
          static_cast<unsigned long long>(calls));
  if (mismatches > 0) {
    appendf(text, " (its copy differed from the host's at %llu: positions sent)",
            static_cast<unsigned long long>(mismatches));
  }
  return text;
}

/// " (drift in the force call D)": the part of the integration's ms a step that the force calls made (beside the
/// engine's work on a reused tree's call); nothing where none was.
std::string driftInCallText(double ms) {
  if (ms <= 0.0) return "";
  std::string text;
  appendf(text, " (drift in the force call %.3g)", ms);
  return text;
}

/// " [waited: rebuild R, engine E, mesh M]": of the force call's ms a step, those its host thread spent waiting (on a
/// rebuild, on the engine's work not hidden behind its own, on a mesh started beside it), each where it did. The
/// phases of work that overlaps (the mesh beside the short range) add up to more than the call: the waits say which
/// of it the call's wall time carried.
std::string waitsText(const ForceTimings& force, double msPer) {
  std::string text;
  const auto add = [&](const char* what, double seconds) {
    if (seconds > 0.0) appendf(text, "%s%s %.3g", text.empty() ? " [waited: " : ", ", what, seconds * msPer);
  };
  add("rebuild", force.rebuildWaitSeconds);
  add("engine", force.engineWaitSeconds);
  add("mesh", force.meshWaitSeconds);
  return text.empty() ? text : text + "]";
}

/// " (why: planned 40, escaped 3, crowded 25, other 0; 4.5 calls planned a tree)", with ", checkpoint 2" before the
/// ';' where the run ended trees for checkpoints, or nothing where the solver does not say why it built its trees
/// (open boundaries).
std::string treeEndsText(const std::array<std::uint64_t, kNumTreeEnds>& ends, std::uint64_t plannedCalls) {
  std::uint64_t said = 0;
  for (int k = 1; k < kNumTreeEnds; ++k) said += ends[k];
  if (said == 0) return "";
  std::string text;
  const auto count = [&](TreeEnd end) { return static_cast<unsigned long long>(ends[static_cast<int>(end)]); };
  appendf(text, " (why: planned %llu, escaped %llu, crowded %llu, other %llu", count(TreeEnd::planned),
          count(TreeEnd::escaped), count(TreeEnd::crowded), count(TreeEnd::other));
  if (count(TreeEnd::checkpoint) > 0) appendf(text, ", checkpoint %llu", count(TreeEnd::checkpoint));
  appendf(text, "; %.3g calls planned a tree)", static_cast<double>(plannedCalls) / static_cast<double>(said));
  return text;
}

}  // namespace

nlohmann::json phasesJson(const ForceTimings& timings, double scale) {
  nlohmann::json phases = nlohmann::json::object();
  for (int k = 0; k < kNumPhases; ++k) phases[phaseName(phaseAt(k))] = timings[phaseAt(k)] * scale;
  return phases;
}

std::string formatOutputTimings(const integrator::OutputTimings& timings) {
  // Milliseconds per step; at output 0 (no steps) milliseconds of the one initial call.
  const double msPer = 1e3 / static_cast<double>(timings.steps > 0 ? timings.steps : 1);
  std::string phases;
  for (int k = 0; k < kNumPhases; ++k) {
    const double seconds = timings.force[phaseAt(k)];
    if (seconds == 0.0) continue;  // a phase this solver does not have, or that did not run
    appendf(phases, "%s%s %.3g", phases.empty() ? "" : " ", phaseName(phaseAt(k)), seconds * msPer);
  }
  std::string line;
  if (timings.steps == 0) {
    appendf(line, "# timings of the first force call: %.3g ms%s%s%s; output %.3g ms",
            timings.force.totalSeconds * msPer, phases.empty() ? "" : " (", phases.c_str(), phases.empty() ? "" : ")",
            timings.outputSeconds * 1e3);
  } else {
    appendf(line,
            "# timings since last output: %llu steps, %.3g ms/step (force %.3g%s%s%s; integration %.3g%s; output "
            "%.3g); host cores busy %.1f; trees built %llu%s%s; bodies stepped %.4g a step%s%s",
            static_cast<unsigned long long>(timings.steps), timings.stepWallSeconds * msPer,
            timings.force.totalSeconds * msPer, phases.empty() ? "" : ": ", phases.c_str(),
            waitsText(timings.force, msPer).c_str(), timings.integrationSeconds * msPer,
            driftInCallText(timings.driftInCallSeconds * msPer).c_str(), timings.outputSeconds * msPer,
            hostCoresBusy(timings.stepCpuSeconds, timings.stepWallSeconds),
            static_cast<unsigned long long>(timings.rebuilds),
            treeEndsText(timings.treeEnds, timings.plannedCalls).c_str(),
            timings.bodiesEscaped == 0
                ? ""
                : ("; bodies out of their balls " + std::to_string(timings.bodiesEscaped) + " (pulls added)").c_str(),
            static_cast<double>(timings.bodiesStepped) / static_cast<double>(timings.steps),
            advancedText(timings.callsAdvancedOnDevice, timings.advanceMismatches, timings.steps).c_str(),
            timings.longRangeSteps < timings.steps
                ? ("; long-range (mesh) steps " + std::to_string(timings.longRangeSteps)).c_str()
                : "");
  }
  return line;
}

std::string formatTimingsTable(const integrator::RunSummary& summary, bool onGpu) {
  std::string table;
  const ForceTimings& initial = summary.initialForceTimings;
  appendf(table, "timings: first force call %.3f s (", initial.totalSeconds);
  bool first = true;
  for (int k = 0; k < kNumPhases; ++k) {
    if (initial[phaseAt(k)] == 0.0) continue;
    appendf(table, first ? "%s %.3f" : ", %s %.3f", phaseName(phaseAt(k)), initial[phaseAt(k)]);
    first = false;
  }
  table += "), not in the table\n";
  if (summary.steps == 0) return table + "timings: no steps taken\n";

  const double steps = static_cast<double>(summary.steps);
  const double stepWall = summary.stepWallSeconds;
  appendf(table, "timings of the %llu steps (phases that overlap are each timed whole: they can add up to more)\n",
          static_cast<unsigned long long>(summary.steps));
  appendf(table, "  %-18s %12s %10s %11s\n", "", "total s", "ms/step", "% of step");
  const auto row = [&](const char* name, double seconds) {
    appendf(table, "  %-18s %12.6f %10.3f %11.1f\n", name, seconds, seconds * 1e3 / steps,
            stepWall > 0.0 ? 100.0 * seconds / stepWall : 0.0);
  };
  const ForceTimings& force = summary.stepForceTimings;
  for (int k = 0; k < kNumPhases; ++k) row(phaseName(phaseAt(k)), force[phaseAt(k)]);
  row("rebuild wait", force.rebuildWaitSeconds);
  row("engine wait", force.engineWaitSeconds);
  row("mesh wait", force.meshWaitSeconds);
  row("integration", summary.integrationSeconds);
  if (summary.driftInCallSeconds > 0.0) row("  drift in call", summary.driftInCallSeconds);
  row("output", summary.outputSeconds);
  row("step (wall)", stepWall);
  if (const nlohmann::json steady = steadyStepSeconds(summary); !steady.is_null()) {
    appendf(table, "  %-18s %12s %10.3f\n", "steps after 1st", "", 1e3 * steady.get<double>());
  }
  row("force call (wall)", force.totalSeconds);
  appendf(table, "GPU busy fraction: %.3f = kernels / step wall time%s\n", busyFraction(summary),
          onGpu ? "" : " (CPU engine: the evaluation)");
  appendf(table, "host cores busy: %.2f of %d = process CPU time (every thread) / step wall time\n",
          hostCoresBusy(summary.stepCpuSeconds, stepWall), tbb::this_task_arena::max_concurrency());
  appendf(table,
          "rebuilds: %llu of %llu steps; groups walked per step: %.1f; groups repaired: %llu; bodies out of their "
          "balls, pulls added: %.1f per step\n",
          static_cast<unsigned long long>(summary.rebuilds), static_cast<unsigned long long>(summary.steps),
          static_cast<double>(summary.groupsWalked) / steps, static_cast<unsigned long long>(summary.groupsRepaired),
          static_cast<double>(summary.bodiesEscaped) / steps);
  appendf(table,
          "positions moved on the GPU (its own copy of the bodies): %llu of %llu steps; its copy differed from "
          "the host's (positions sent): %llu\n",
          static_cast<unsigned long long>(summary.callsAdvancedOnDevice),
          static_cast<unsigned long long>(summary.steps), static_cast<unsigned long long>(summary.advanceMismatches));
  return table;
}

nlohmann::json timingsJson(const integrator::RunSummary& summary, bool onGpu) {
  const std::uint64_t steps = summary.steps;
  nlohmann::json meanMs = nullptr;
  if (steps > 0) meanMs = phasesJson(summary.stepForceTimings, 1e3 / static_cast<double>(steps));
  return {{"steps", steps},
          {"step_seconds_mean", perStep(summary.stepWallSeconds, steps)},
          {"steady_step_seconds_mean", steadyStepSeconds(summary)},
          {"force_call_seconds_mean", perStep(summary.stepForceTimings.totalSeconds, steps)},
          {"gpu_busy_fraction", steps > 0 ? nlohmann::json(busyFraction(summary)) : nlohmann::json(nullptr)},
          {"engine_on_gpu", onGpu},
          {"host_cores_busy", steps > 0 ? nlohmann::json(hostCoresBusy(summary.stepCpuSeconds, summary.stepWallSeconds))
                                        : nlohmann::json(nullptr)},
          {"host_cores", tbb::this_task_arena::max_concurrency()},
          {"step_cpu_seconds", summary.stepCpuSeconds},
          {"step_wall_seconds", summary.stepWallSeconds},
          {"integration_seconds", summary.integrationSeconds},
          {"drift_in_call_seconds", summary.driftInCallSeconds},
          {"output_seconds", summary.outputSeconds},
          {"initial_call_seconds", summary.initialForceTimings.totalSeconds},
          {"initial_call", phasesJson(summary.initialForceTimings)},
          {"steps_total", phasesJson(summary.stepForceTimings)},
          {"steps_mean_ms", meanMs},
          {"rebuild_wait_seconds", summary.stepForceTimings.rebuildWaitSeconds},
          {"engine_wait_seconds", summary.stepForceTimings.engineWaitSeconds},
          {"mesh_wait_seconds", summary.stepForceTimings.meshWaitSeconds},
          {"rebuilds", summary.rebuilds},
          {"rebuilds_by_cause",
           {{"planned", summary.treeEnds[static_cast<int>(TreeEnd::planned)]},
            {"escaped", summary.treeEnds[static_cast<int>(TreeEnd::escaped)]},
            {"crowded", summary.treeEnds[static_cast<int>(TreeEnd::crowded)]},
            {"other", summary.treeEnds[static_cast<int>(TreeEnd::other)]},
            {"checkpoint", summary.treeEnds[static_cast<int>(TreeEnd::checkpoint)]}}},
          {"calls_planned_per_tree", summary.rebuilds > 0 ? nlohmann::json(static_cast<double>(summary.plannedCalls) /
                                                                           static_cast<double>(summary.rebuilds))
                                                          : nlohmann::json(nullptr)},
          {"groups_walked_per_step", perStep(static_cast<double>(summary.groupsWalked), steps)},
          {"groups_repaired", summary.groupsRepaired},
          {"bodies_escaped_per_step", perStep(static_cast<double>(summary.bodiesEscaped), steps)},
          {"bodies_stepped_per_step", perStep(static_cast<double>(summary.bodiesStepped), steps)},
          {"long_range_steps", summary.longRangeSteps},
          {"calls_advanced_on_device", summary.callsAdvancedOnDevice},
          {"advance_mismatches", summary.advanceMismatches}};
}

ProgressLine::ProgressLine(bool blockSteps) : blockSteps_(blockSteps), terminal_(::isatty(STDERR_FILENO) != 0) {}

void ProgressLine::update(const integrator::ProgressInfo& info, std::optional<double> layzerIrvine) {
  const bool last = info.step == info.totalSteps;
  if (!last && info.elapsedSeconds - lastPrinted_ < 1.0) return;
  lastPrinted_ = info.elapsedSeconds;
  char where[128];
  if (layzerIrvine) {
    std::snprintf(where, sizeof where, "step %llu/~%llu  z = %.4f -> %.4g", static_cast<unsigned long long>(info.step),
                  static_cast<unsigned long long>(info.totalSteps), 1.0 / info.time - 1.0, 1.0 / info.tEnd - 1.0);
  } else if (blockSteps_) {
    std::snprintf(where, sizeof where, "block step %llu/~%llu (%.3g body steps)  t = %.4f/%.4g",
                  static_cast<unsigned long long>(info.step), static_cast<unsigned long long>(info.totalSteps),
                  static_cast<double>(info.bodySteps), info.time, info.tEnd);
  } else {
    std::snprintf(where, sizeof where, "step %llu/%llu  t = %.4f/%.4g", static_cast<unsigned long long>(info.step),
                  static_cast<unsigned long long>(info.totalSteps), info.time, info.tEnd);
  }
  std::fprintf(stderr, "%s%s  elapsed %.1f s  ETA %s  %s = %.2e%s", terminal_ ? "\r" : "", where, info.elapsedSeconds,
               formatDuration(info.etaSeconds).c_str(), layzerIrvine ? "Layzer-Irvine |dE|/|W|" : "|dE/E|",
               layzerIrvine ? std::abs(*layzerIrvine) : info.relativeEnergyError,
               terminal_ ? (last ? "\n" : "          ") : "\n");
  std::fflush(stderr);
}

}  // namespace matcha::app
