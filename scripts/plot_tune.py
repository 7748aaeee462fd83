#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Plots the settings `matcha tune` measured: time per step against force error (log-log), every setting as a grey
dot, the Pareto front as a line, the goal's limit as a dashed line, the defaults and the chosen setting marked.

    /usr/bin/python3 scripts/plot_tune.py DIR/tune.csv -o DIR/tune.png (--target-error E | --time-budget-per-step T)

`matcha tune` runs it at its end; run it by hand on the CSV of a tune still going, or stopped by Ctrl-C. The chosen
setting is the fastest whose error is at most E, or the most accurate whose step takes at most T seconds, as tune
chooses it. Writes the figure atomically (figure_file.py). Exit codes as matcha's: 0 success, 1 the figure cannot
be written, 2 a missing or malformed CSV or a bad option (one line on stderr, starting with "plot_tune.py: error:").
Needs Debian's python3-matplotlib (DESIGN.md section 7: run it with /usr/bin/python3).
"""
import argparse
import csv
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # figure_file.py lies beside this script
import figure_file  # noqa: E402

REQUIRED = ("ms_per_step", "error", "percentile", "defaults", "multipole", "theta", "alpha", "ncrit", "nleaf", "reuse")


class BadCsv(Exception):
    """The CSV is missing, empty or malformed (exit code 2)."""


def fail(message, code):
    figure_file.fail("plot_tune.py", message, code)


def read_points(path):
    """The rows of a tune.csv with ms_per_step, error and percentile as floats; raises BadCsv."""
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            missing = [name for name in REQUIRED if name not in (reader.fieldnames or [])]
            if missing:
                raise BadCsv("%s: not a matcha tune CSV (missing column %s)" % (path, ", ".join(missing)))
            rows = []
            for line, row in enumerate(reader, start=2):
                try:
                    for name in ("ms_per_step", "error", "percentile"):
                        row[name] = float(row[name])
                except (TypeError, ValueError):
                    raise BadCsv("%s:%d: column '%s' is not a number (%r)" % (path, line, name, row[name])) from None
                rows.append(row)
    except OSError as error:
        raise BadCsv("%s: cannot read (%s)" % (path, error.strerror)) from None
    except csv.Error as error:
        raise BadCsv("%s: malformed CSV (%s)" % (path, error)) from None
    if not rows:
        raise BadCsv("%s: no settings measured yet" % path)
    return rows


def front(rows):
    """The rows no other row beats in both time and error, by increasing time (tune_search.hpp: paretoFront)."""
    result, lowest = [], float("inf")
    for row in sorted(rows, key=lambda r: (r["ms_per_step"], r["error"])):
        if row["error"] < lowest:
            result.append(row)
            lowest = row["error"]
    return result


def chosen(rows, target_error, step_ms):
    """The row tune chooses (TuneGoal::better): feasible first, then the objective; None when none is feasible."""
    if target_error is not None:
        feasible = [row for row in rows if row["error"] <= target_error]
        return min(feasible, key=lambda r: (r["ms_per_step"], r["error"])) if feasible else None
    feasible = [row for row in rows if row["ms_per_step"] <= step_ms]
    return min(feasible, key=lambda r: (r["error"], r["ms_per_step"])) if feasible else None


def label(row):
    reuse = "auto" if row["reuse"] == "0" else row["reuse"]
    return "%s theta %s alpha %s ncrit %s nleaf %s reuse %s" % (row["multipole"], row["theta"], row["alpha"],
                                                                row["ncrit"], row["nleaf"], reuse)


def plot(rows, out, target_error, step_ms, dpi):
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on the build and device machines
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 5.5), constrained_layout=True)
    axes.scatter([r["ms_per_step"] for r in rows], [r["error"] for r in rows], s=14, color="0.6",
                 label="settings measured (%d)" % len(rows))
    on_front = front(rows)
    axes.plot([r["ms_per_step"] for r in on_front], [r["error"] for r in on_front], "-o", color="tab:blue",
              markersize=5, label="Pareto front")
    if target_error is not None:
        axes.axhline(target_error, color="tab:red", linestyle="--", label="target error %g" % target_error)
    else:
        axes.axvline(step_ms, color="tab:red", linestyle="--", label="time per step %g ms" % step_ms)
    defaults = [row for row in rows if row["defaults"] == "1"]
    for row in defaults[:1]:
        axes.scatter([row["ms_per_step"]], [row["error"]], s=90, marker="s", facecolors="none", color="black",
                     label="defaults: " + label(row))
    best = chosen(rows, target_error, step_ms)
    if best is not None:
        axes.scatter([best["ms_per_step"]], [best["error"]], s=160, marker="*", color="tab:orange", zorder=3,
                     label="chosen: " + label(best))
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("time per step, steady state with rebuilds (ms)")
    axes.set_ylabel("p%g relative force error |a - a_exact| / |a_exact|" % rows[0]["percentile"])
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize="small")
    axes.set_title("matcha tune")
    figure_file.save_atomically(figure, out, dpi)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", help="tune.csv written by `matcha tune`")
    parser.add_argument("-o", "--output", default="tune.png", help="image to write (default: tune.png)")
    goal = parser.add_mutually_exclusive_group(required=True)
    goal.add_argument("--target-error", type=float, help="the error limit tune was given")
    goal.add_argument("--time-budget-per-step", type=float, help="the step time limit tune was given, in seconds")
    parser.add_argument("--dpi", type=int, default=120, help="resolution (default 120)")
    args = parser.parse_args()
    if args.target_error is not None and not 0 < args.target_error < 1:
        fail("--target-error must be > 0 and < 1 (got %g)" % args.target_error, 2)
    if args.time_budget_per_step is not None and not args.time_budget_per_step > 0:
        fail("--time-budget-per-step must be > 0 (got %g)" % args.time_budget_per_step, 2)
    try:
        rows = read_points(args.csv)
    except BadCsv as error:
        fail(error, 2)
    step_ms = None if args.time_budget_per_step is None else args.time_budget_per_step * 1e3
    try:
        plot(rows, args.output, args.target_error, step_ms, args.dpi)
    except OSError as error:
        fail("cannot write %s: %s" % (args.output, error.strerror), 1)
    print("wrote %s" % args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
