#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Plots the force-error percentiles of `matcha compare --csv` against theta and against interactions per body.

    /usr/bin/python3 scripts/plot_errors.py errors.csv [more.csv ...] -o errors.png

Left panel: median and 99th-percentile relative force error vs theta; right panel: the same vs interactions per
body (log-log), the cost axis. One colour per multipole order, one line style per percentile; with several CSV
files (e.g. several N) each file gets its own marker. Needs only Debian's python3-numpy and python3-matplotlib
(DESIGN.md §7: run it with /usr/bin/python3).
"""

import argparse
import csv
import os
import sys

import numpy as np

import matplotlib

matplotlib.use("Agg")  # files only: no display on the build and device machines
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

REQUIRED = ("multipole", "theta", "median", "p99", "interactions_per_body")
NUMERIC = ("theta", "median", "p99", "interactions_per_body")
COLOURS = {"mono": "tab:blue", "quad": "tab:red"}
PERCENTILES = (("median", "-", "median"), ("p99", "--", "99%"))
MARKERS = "osD^v<>"


class InputError(Exception):
    pass


def read_rows(path):
    """Rows of one CSV as dicts with the numeric columns converted; InputError on anything unusable."""
    try:
        with open(path, newline="") as handle:
            reader = csv.DictReader(handle)
            missing = [name for name in REQUIRED if name not in (reader.fieldnames or [])]
            if missing:
                raise InputError(f"{path}: not a matcha compare CSV (missing column {', '.join(missing)})")
            rows = []
            for line, row in enumerate(reader, start=2):
                try:
                    for name in NUMERIC:
                        row[name] = float(row[name])
                except (TypeError, ValueError):
                    raise InputError(f"{path}:{line}: column '{name}' is not a number ({row[name]!r})") from None
                if row["multipole"] not in COLOURS:
                    raise InputError(f"{path}:{line}: unknown multipole '{row['multipole']}' (mono or quad)")
                rows.append(row)
    except OSError as error:
        raise InputError(f"{path}: cannot read ({error.strerror})") from None
    except csv.Error as error:
        raise InputError(f"{path}: malformed CSV ({error})") from None
    if not rows:
        raise InputError(f"{path}: no rows")
    return rows


def describe(rows):
    """'N 20000, sample 500, cpu-double' from the fields every row shares; empty when they differ."""
    parts = []
    for name, label in (("n", "N"), ("sample", "sample"), ("ncrit", "ncrit"), ("alpha", "alpha"), ("reference", "")):
        values = {row.get(name) for row in rows}
        if len(values) == 1 and None not in values:
            parts.append(f"{label} {values.pop()}".strip())
    return ", ".join(parts)


def plot(files, output):
    figure, (by_theta, by_cost) = plt.subplots(1, 2, figsize=(11, 4.5), constrained_layout=True)
    for index, (path, rows) in enumerate(files):
        marker = MARKERS[index % len(MARKERS)]
        alphas = {row.get("alpha") for row in rows}
        if len(files) == 1:
            suffix = ""
        elif len(alphas) == 1 and None not in alphas:  # files that differ by the relative opening test
            alpha = alphas.pop()
            suffix = " (theta alone)" if float(alpha) == 0 else f" (alpha {alpha})"
        else:
            suffix = f" ({os.path.basename(path)})"
        for order in COLOURS:
            selected = sorted((row for row in rows if row["multipole"] == order), key=lambda row: row["theta"])
            if not selected:
                continue
            theta = np.array([row["theta"] for row in selected])
            cost = np.array([row["interactions_per_body"] for row in selected])
            for column, style, label in PERCENTILES:
                error = np.array([row[column] for row in selected])
                kwargs = dict(color=COLOURS[order], linestyle=style, marker=marker, label=f"{order} {label}{suffix}")
                by_theta.plot(theta, error, **kwargs)
                by_cost.plot(cost, error, **kwargs)
    by_theta.set_xlabel("opening angle theta")
    by_theta.set_yscale("log")
    by_cost.set_xlabel("interactions per body (body-body + body-cell)")
    by_cost.set_xscale("log")
    by_cost.set_yscale("log")
    for axes in (by_theta, by_cost):
        axes.set_ylabel("relative force error |a - a_ref| / |a_ref|")
        axes.grid(True, which="both", alpha=0.3)
    by_theta.legend(fontsize="small")
    title = describe([row for _, rows in files for row in rows])
    figure.suptitle("matcha compare" + (f": {title}" if title else ""))
    figure.savefig(output, dpi=120)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", nargs="+", help="CSV files written by `matcha compare --csv`")
    parser.add_argument("-o", "--output", default="errors.png", help="image to write (default: errors.png)")
    args = parser.parse_args()
    try:
        files = [(path, read_rows(path)) for path in args.csv]
        plot(files, args.output)
    except InputError as error:
        print(f"plot_errors.py: error: {error}", file=sys.stderr)
        return 1
    except OSError as error:
        print(f"plot_errors.py: error: cannot write {args.output} ({error.strerror})", file=sys.stderr)
        return 1
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
