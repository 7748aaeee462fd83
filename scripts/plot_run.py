#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Plots a matcha run's conservation diagnostics over time: |dE/E| (log scale), the virial ratio 2T/|W| (1 in
equilibrium) and the magnitude of the total momentum |P| (log scale), in three panels sharing the time axis, from
OUT/diagnostics.log (`matcha run --out OUT`). Writes OUT/run.png, or --out FILE (any format matplotlib writes, by its
extension), atomically (a temporary file beside it, then a rename).

Usage: /usr/bin/python3 scripts/plot_run.py OUT [--out FILE] [--dpi N]

The log's format (integrator/src/diagnostics.cpp, apps/run_command.cpp): comment lines start with '#'; one of them
names the columns ("#  time  E  |dE/E|  T  W  2T/|W|  |P|  |L|  |dL/L|  |x_cm|"); every other line is one output's
numbers in those columns. Columns are found by name, so a log with more columns still plots. A run still in progress
plots what it has written so far; a failed run's log says so in the title.

Exit codes as matcha's: 0 success, 1 the log cannot be read or the image cannot be written, 2 the log is missing,
empty or malformed (one line on stderr, starting with "plot_run.py: error:"). Needs Debian's python3-matplotlib
(DESIGN.md section 7: run it with /usr/bin/python3).
"""
import argparse
import math
import os
import sys
import textwrap

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # figure_file.py lies beside this script
import figure_file  # noqa: E402

COLUMNS = ("time", "|dE/E|", "2T/|W|", "|P|")


class BadLog(Exception):
    """The log is empty or malformed (exit code 2)."""


def fail(message, code):
    figure_file.fail("plot_run.py", message, code)


def read_log(path):
    """Returns ({column: [values]}, [comment lines]) from a diagnostics log; raises BadLog or OSError."""
    with open(path, encoding="utf-8") as log:
        lines = log.read().splitlines()
    if not any(line.strip() for line in lines):
        raise BadLog("%s is empty (has the run written its first output yet?)" % path)
    names, rows, comments = None, [], []
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text:
            continue
        if text.startswith("#"):
            fields = text[1:].split()
            if names is None and fields[:1] == ["time"] and all(name in fields for name in COLUMNS):
                names = fields
            else:
                comments.append(text[1:].strip())
            continue
        if names is None:
            raise BadLog("%s line %d: numbers before the column header (a line '# time E |dE/E| ...'); is this a "
                         "matcha diagnostics.log?" % (path, number))
        fields = text.split()
        if len(fields) != len(names):
            raise BadLog("%s line %d: %d values where the header names %d columns"
                         % (path, number, len(fields), len(names)))
        try:
            values = [float(field) for field in fields]
        except ValueError:
            raise BadLog("%s line %d: not a number in '%s'" % (path, number, text)) from None
        rows.append(values)
    if names is None:
        raise BadLog("%s has no column header (a line '# time E |dE/E| ...'); is this a matcha diagnostics.log?" % path)
    if not rows:
        raise BadLog("%s has a header but no outputs yet" % path)
    columns = {name: [row[k] for row in rows] for k, name in enumerate(names)}
    return columns, comments


def positive(times, values):
    """The points where a log-scale quantity is > 0 (|dE/E| is exactly 0 at the first output)."""
    kept = [(t, v) for t, v in zip(times, values) if v > 0 and math.isfinite(v)]
    return [t for t, _ in kept], [v for _, v in kept]


def plot(columns, comments, title, out, dpi):
    import matplotlib

    matplotlib.use("Agg")  # no display: files only
    import matplotlib.pyplot as plt

    t = columns["time"]
    figure, axes = plt.subplots(3, 1, sharex=True, figsize=(6.4, 6.4), constrained_layout=True)
    marker = "o" if len(t) <= 40 else None

    energy = axes[0]
    te, de = positive(t, columns["|dE/E|"])
    if de:
        energy.semilogy(te, de, marker=marker, markersize=3, color="C0")
    else:
        energy.text(0.5, 0.5, "|dE/E| = 0 at every output", transform=energy.transAxes, ha="center", va="center")
    energy.set_ylabel("|dE/E|")
    energy.grid(True, which="major", alpha=0.3)

    virial = axes[1]
    virial.plot(t, columns["2T/|W|"], marker=marker, markersize=3, color="C1")
    virial.axhline(1.0, color="0.5", linewidth=0.8, linestyle="--")
    virial.set_ylabel("virial ratio 2T/|W|")
    virial.grid(True, alpha=0.3)

    momentum = axes[2]
    tp, p = positive(t, columns["|P|"])
    if p:
        momentum.semilogy(tp, p, marker=marker, markersize=3, color="C2")
    else:
        momentum.text(0.5, 0.5, "|P| = 0 at every output", transform=momentum.transAxes, ha="center", va="center")
    momentum.set_ylabel("|total momentum| |P|")
    momentum.set_xlabel("time (N-body units)")
    momentum.grid(True, which="major", alpha=0.3)

    failed = [c for c in comments if c.startswith("failed:")]
    # The solver line ("tree (theta 0.5, ...) on cpu-float ...; potentials from ...") says what produced the numbers.
    solver = next((c.split(";")[0] for c in comments if c.startswith(("tree", "direct"))), "")
    heading = [title] + textwrap.wrap(solver, 80)
    if failed:
        heading += textwrap.wrap("run FAILED: " + failed[0][len("failed:"):].strip(), 80)[:2]
    axes[0].set_title("\n".join(heading), fontsize=9)

    figure_file.save_atomically(figure, out, dpi)


def main():
    parser = argparse.ArgumentParser(
        prog="plot_run.py",
        description="Plot |dE/E|, the virial ratio and |P| over time from a matcha run's diagnostics.log.")
    parser.add_argument("run", metavar="OUT", help="the run's folder (matcha run --out OUT), or its diagnostics.log")
    parser.add_argument("--out", help="image to write (default: OUT/run.png)")
    parser.add_argument("--dpi", type=int, default=100, help="resolution (default 100: 640 x 640 pixels)")
    args = parser.parse_args()

    log = args.run if os.path.isfile(args.run) else os.path.join(args.run, "diagnostics.log")
    folder = os.path.dirname(log) or "."
    out = args.out or os.path.join(folder, "run.png")
    if not os.path.exists(log):
        fail("%s: no such file (is %s a matcha run folder?)" % (log, args.run), 2)
    if args.dpi < 10 or args.dpi > 1000:
        fail("--dpi must be 10 to 1000 (got %d)" % args.dpi, 2)
    try:
        columns, comments = read_log(log)
    except BadLog as error:
        fail(error, 2)
    except (OSError, UnicodeDecodeError) as error:
        fail("cannot read %s: %s" % (log, error), 1)
    try:
        plot(columns, comments, os.path.basename(os.path.abspath(folder)), out, args.dpi)
    except (OSError, ValueError) as error:
        fail("cannot write %s: %s" % (out, error), 1)
    print("wrote %s (%d outputs, t = %g to %g)" % (out, len(columns["time"]), columns["time"][0], columns["time"][-1]))


if __name__ == "__main__":
    main()
