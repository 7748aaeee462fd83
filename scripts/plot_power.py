#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Plots power spectra written by `matcha analyze power` (one file per output), log-log, each beside linear theory
scaled to its time by the square of the linear growth factor, dashed in the same colour, and its shot noise, dotted.
Writes a PNG (or any format matplotlib writes, by the extension of --out), atomically (a temporary file beside it,
then a rename).

Usage: /usr/bin/python3 scripts/plot_power.py FILE [FILE ...] [--linear PLIN] [--growth D[,D ...]] [--omega-m OM]
                                              [--subtract-shot-noise] [-o|--out IMAGE] [--dpi N]

FILE: `matcha analyze power` output: '# key = value' header lines, a column line '# k  P(k)  modes  shot_noise',
then one line of numbers per bin. Columns are found by name.

A file written with `matcha analyze power --linear ...` has a fifth column P_lin(k): linear theory already at the
file's time (P_lin(k; z = 0) D1(a)^2 / D1(1)^2 at each bin's k, computed by matcha). That column is drawn, dashed in
the file's colour, in preference to everything below: such a file needs no PLIN and no growth ratio.

PLIN: linear theory at z = 0 (a = 1) in the files' units, two columns k and P_lin(k) ('#' comments allowed). Each
file's curve is P_lin(k) times (D1(a) / D1(1))^2, the growth ratio taken, in this order, from
  --growth (one ratio for every file, or one per file in their order),
  the file's header line '# growth_factor_ratio = D',
  the file's header line '# scale_factor = a' or '# redshift = z', with --omega-m: flat LCDM (Omega_Lambda =
  1 - Omega_m, radiation neglected), D1(a) = (5 Omega_m / 2) E(a) int_0^a da' / (a' E(a'))^3, E^2 = Omega_m a^-3 +
  Omega_Lambda (Heath 1977).
A file with none of these (and no P_lin(k) column), when PLIN is given, is an error: the script does not guess a cosmology.

Exit codes as matcha's: 0 success, 1 a file cannot be read or the image cannot be written, 2 bad input (a missing
or malformed file, a bad option): one line on stderr, starting with "plot_power.py: error:". Needs Debian's
python3-matplotlib (DESIGN.md section 7: run it with /usr/bin/python3).
"""
import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # figure_file.py lies beside this script
import figure_file  # noqa: E402

COLUMNS = ("k", "P(k)", "modes", "shot_noise")
LINEAR_COLUMN = "P_lin(k)"  # written by `matcha analyze power --linear`


class BadInput(Exception):
    """A file or an option is unusable (exit code 2)."""


def fail(message, code):
    figure_file.fail("plot_power.py", message, code)


class Parser(argparse.ArgumentParser):
    """argparse with matcha's one-line errors and exit code 2."""

    def error(self, message):
        fail(message + " (see --help)", 2)


def number(text, where):
    try:
        value = float(text)
    except ValueError:
        raise BadInput("%s: not a number: '%s'" % (where, text)) from None
    if not math.isfinite(value):
        raise BadInput("%s: not a finite number: '%s'" % (where, text))
    return value


def read_power_file(path):
    """Returns (header {key: value text}, {column: [values]}) of a `matcha analyze power` file; raises BadInput or
    OSError."""
    if not os.path.exists(path):
        raise BadInput("%s: no such file" % path)
    with open(path, encoding="utf-8") as file:
        lines = file.read().splitlines()
    header, names, rows = {}, None, []
    for number_, line in enumerate(lines, start=1):
        text = line.strip()
        if not text:
            continue
        if text.startswith("#"):
            body = text[1:].strip()
            if names is None and body.split()[:1] == ["k"] and all(name in body.split() for name in COLUMNS):
                names = body.split()
            elif " = " in body:
                key, value = body.split(" = ", 1)
                header[key.strip()] = value.split("  (")[0].strip()
            continue
        if names is None:
            raise BadInput("%s line %d: numbers before the column header (a line '# k  P(k)  modes  shot_noise'); is "
                           "it a file of matcha analyze power?" % (path, number_))
        fields = text.split()
        if len(fields) != len(names):
            raise BadInput("%s line %d: %d values where the header names %d columns"
                           % (path, number_, len(fields), len(names)))
        rows.append([number(field, "%s line %d" % (path, number_)) for field in fields])
    if names is None:
        raise BadInput("%s has no column header (a line '# k  P(k)  modes  shot_noise'); is it a file of matcha "
                       "analyze power?" % path)
    if not rows:
        raise BadInput("%s has a header but no bins" % path)
    return header, {name: [row[k] for row in rows] for k, name in enumerate(names)}


def read_linear_file(path):
    """Returns ([k], [P_lin]) from a two-column file, k increasing and > 0; raises BadInput or OSError."""
    if not os.path.exists(path):
        raise BadInput("--linear %s: no such file" % path)
    k, p = [], []
    with open(path, encoding="utf-8") as file:
        for number_, line in enumerate(file, start=1):
            text = line.split("#", 1)[0].strip()
            if not text:
                continue
            fields = text.split()
            if len(fields) < 2:
                raise BadInput("--linear %s line %d: two columns k and P_lin(k) expected" % (path, number_))
            where = "--linear %s line %d" % (path, number_)
            k.append(number(fields[0], where))
            p.append(number(fields[1], where))
            if k[-1] <= 0 or (len(k) > 1 and k[-1] <= k[-2]):
                raise BadInput("%s: k must be > 0 and increasing" % where)
    if len(k) < 2:
        raise BadInput("--linear %s holds fewer than two points" % path)
    return k, p


def growth_factor(a, omega_m):
    """D1(a) of flat LCDM (Heath 1977), normalised so that D1(a) = a while matter dominates."""
    omega_lambda = 1.0 - omega_m

    def e(x):
        return math.sqrt(omega_m / x ** 3 + omega_lambda)

    # Simpson's rule on int_0^a dx / (x E(x))^3, whose integrand goes as x^(3/2) / omega_m^(3/2) near 0.
    intervals = 2000
    h = a / intervals
    total = 0.0
    for i in range(intervals + 1):
        x = i * h
        f = 0.0 if x == 0 else 1.0 / (x * e(x)) ** 3
        total += f * (1 if i in (0, intervals) else 4 if i % 2 else 2)
    return 2.5 * omega_m * e(a) * total * h / 3.0


def growth_ratio(header, given, omega_m, path):
    """D1(a) / D1(1) for a file: --growth, the header's growth_factor_ratio, or its scale_factor/redshift with
    --omega-m; None when none applies."""
    if given is not None:
        return given
    if "growth_factor_ratio" in header:
        ratio = number(header["growth_factor_ratio"], "%s: growth_factor_ratio" % path)
        if ratio <= 0:
            raise BadInput("%s: growth_factor_ratio must be > 0 (got %g)" % (path, ratio))
        return ratio
    a = None
    if "scale_factor" in header:
        a = number(header["scale_factor"], "%s: scale_factor" % path)
    elif "redshift" in header:
        a = 1.0 / (1.0 + number(header["redshift"], "%s: redshift" % path))
    if a is None or omega_m is None:
        return None
    if not 0 < a <= 10:
        raise BadInput("%s: the scale factor must be in (0, 10] (got %g)" % (path, a))
    return growth_factor(a, omega_m) / growth_factor(1.0, omega_m)


def label(path, header):
    for key, symbol in (("scale_factor", "a"), ("redshift", "z"), ("time", "t")):
        if key in header:
            # matcha writes 17 digits so the value reads back exactly; a legend needs 4.
            try:
                value = "%.4g" % float(header[key])
            except ValueError:
                value = header[key]
            return "%s (%s = %s)" % (os.path.basename(path), symbol, value)
    return os.path.basename(path)


def has_linear_column(columns):
    return LINEAR_COLUMN in columns


def plot(spectra, linear, subtract, out, dpi):
    import matplotlib

    matplotlib.use("Agg")  # no display: files only
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6.4, 4.8), constrained_layout=True)
    k_min = min(min(columns["k"]) for _, _, columns, _ in spectra)
    k_max = max(max(columns["k"]) for _, _, columns, _ in spectra)
    halves = set()
    for index, (path, header, columns, ratio) in enumerate(spectra):
        colour = "C%d" % (index % 10)
        shot = columns["shot_noise"][0]
        already = header.get("shot_noise_subtracted") == "yes"
        power = [p - shot if subtract and not already else p for p in columns["P(k)"]]
        kept = [(k, p) for k, p in zip(columns["k"], power) if p > 0]
        own = has_linear_column(columns)
        title = label(path, header) + ("" if ratio is None or (linear is None and not own) else ", D/D0 = %.4g" % ratio)
        if kept:
            axes.loglog([k for k, _ in kept], [p for _, p in kept], marker="o", markersize=2.5, linewidth=1,
                        color=colour, label=title)
        if not subtract and not already:
            axes.axhline(shot, color=colour, linestyle=":", linewidth=0.8)
        if own:
            # matcha's own linear theory at this file's time comes first; it has a value at every bin (0 outside a
            # table's range, which a log axis cannot show, so those are left out).
            points = [(k, p) for k, p in zip(columns["k"], columns[LINEAR_COLUMN]) if p > 0]
            if points:
                axes.loglog([k for k, _ in points], [p for _, p in points], color=colour, linestyle="--",
                            linewidth=1)
        elif linear is not None and ratio is not None:
            points = [(k, p * ratio ** 2) for k, p in zip(*linear) if k_min / 2 <= k <= 2 * k_max and p > 0]
            if points:
                axes.loglog([k for k, _ in points], [p for _, p in points], color=colour, linestyle="--",
                            linewidth=1)
        if "k_nyquist" in header:
            halves.add(float(header["k_nyquist"]) / 2)
    for half in sorted(halves):
        axes.axvline(half, color="0.6", linestyle=":", linewidth=0.8)
    axes.set_xlabel("k  [1 / length: h/Mpc for a box in Mpc/h]")
    axes.set_ylabel("P(k)%s  [length^3]" % (" - shot noise" if subtract else ""))
    notes = ["solid: measured"]
    if linear is not None or any(has_linear_column(columns) for _, _, columns, _ in spectra):
        notes.append("dashed: linear theory x (D1/D1(a=1))^2")
    if not subtract:
        notes.append("dotted: shot noise")
    if halves:
        notes.append("grey: k_N / 2")
    axes.set_title("matcha analyze power\n" + "; ".join(notes), fontsize=8)
    axes.grid(True, which="major", alpha=0.3)
    axes.legend(fontsize=7)

    figure_file.save_atomically(figure, out, dpi)


def main():
    parser = Parser(prog="plot_power.py",
                    description="Plot power spectra of `matcha analyze power` against linear theory scaled by D1^2.")
    parser.add_argument("files", metavar="FILE", nargs="+", help="files written by matcha analyze power")
    parser.add_argument("--linear", metavar="PLIN", help="linear P(k) at z = 0: two columns k, P_lin(k)")
    parser.add_argument("--growth", metavar="D[,D...]",
                        help="D1(a) / D1(1) of each FILE (one value for all, or one per file)")
    parser.add_argument("--omega-m", type=float, metavar="OM",
                        help="Omega_m of flat LCDM, for files whose header gives scale_factor or redshift")
    parser.add_argument("--subtract-shot-noise", action="store_true", help="plot P(k) less the shot noise")
    parser.add_argument("-o", "--out", help="image to write (default: the first FILE with the extension .png)")
    parser.add_argument("--dpi", type=int, default=100, help="resolution (default 100: 640 x 480 pixels)")
    args = parser.parse_args()

    out = args.out or os.path.splitext(args.files[0])[0] + ".png"
    if args.dpi < 10 or args.dpi > 1000:
        fail("--dpi must be 10 to 1000 (got %d)" % args.dpi, 2)
    if args.omega_m is not None and not 0 < args.omega_m <= 1:
        fail("--omega-m must be in (0, 1] (got %g)" % args.omega_m, 2)
    given = [None] * len(args.files)
    try:
        if args.growth is not None:
            values = [number(text, "--growth") for text in args.growth.split(",")]
            if any(value <= 0 for value in values):
                raise BadInput("--growth: ratios must be > 0 (got %s)" % args.growth)
            if len(values) not in (1, len(args.files)):
                raise BadInput("--growth gives %d ratios for %d files (give one, or one per file)"
                               % (len(values), len(args.files)))
            given = values * len(args.files) if len(values) == 1 else values
        linear = read_linear_file(args.linear) if args.linear else None
        spectra = []
        for path, ratio in zip(args.files, given):
            header, columns = read_power_file(path)
            ratio = growth_ratio(header, ratio, args.omega_m, path)
            if linear is not None and ratio is None and not has_linear_column(columns):
                raise BadInput("%s: no growth factor to scale linear theory by: give --growth, or a header line "
                               "growth_factor_ratio, or scale_factor/redshift with --omega-m" % path)
            spectra.append((path, header, columns, ratio))
    except BadInput as error:
        fail(error, 2)
    except (OSError, UnicodeDecodeError) as error:
        fail("cannot read: %s" % error, 1)
    try:
        plot(spectra, linear, args.subtract_shot_noise, out, args.dpi)
    except (OSError, ValueError) as error:
        fail("cannot write %s: %s" % (out, error), 1)
    own = sum(1 for _, _, columns, _ in spectra if has_linear_column(columns))
    scaled = ", ".join("%.4g" % ratio for _, _, columns, ratio in spectra
                       if ratio is not None and not has_linear_column(columns))
    notes = ""
    if own:
        notes += "; linear theory from the P_lin(k) column of %d file%s" % (own, "" if own == 1 else "s")
    if linear and scaled:
        notes += "; linear theory scaled by D1/D1(1) = " + scaled
    print("wrote %s (%d spectra%s)" % (out, len(spectra), notes))


if __name__ == "__main__":
    main()
