# SPDX-License-Identifier: MIT
"""scripts/plot_power.py on spectra written by `matcha analyze power`: it writes a PNG of the expected size (default
FILE.png, or --out), scales linear theory by the growth ratio from --growth, a header growth_factor_ratio or a header
scale factor with --omega-m (flat LCDM growth: D1 = a for Omega_m = 1; the Carroll, Press & Turner 1992 fit within
0.5% for Omega_m = 0.3), draws the P_lin(k) column of `analyze power --linear` in preference to --linear/--growth
(the dashed line's points are that column's), and refuses missing or malformed files, a linear theory without growth ratios, bad options
and an unwritable output with one line on stderr and matcha's exit codes (2 bad input, 1 I/O).
Usage: plot_power_test.py MATCHA_BINARY PLOT_POWER_SCRIPT SCRATCH_DIR. Exit 77: matplotlib is not installed (Debian:
apt-get install python3-matplotlib), the test is skipped."""
import importlib.util
import os
import shutil
import struct
import subprocess
import sys

try:
    import matplotlib  # noqa: F401  (only to know whether the script can run)
except ImportError:
    print("matplotlib is not installed (apt-get install python3-matplotlib): test skipped")
    sys.exit(77)

matcha, script, scratch = sys.argv[1], sys.argv[2], sys.argv[3]
shutil.rmtree(scratch, ignore_errors=True)
os.makedirs(scratch)


def path(name):
    return os.path.join(scratch, name)


for seed in ("1", "2"):
    subprocess.run([matcha, "ic", "lattice", "-n", "4096", "--perturbation", "0.25", "--seed", seed, "--box", "100",
                    "-o", path("box%s.hdf5" % seed)], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([matcha, "analyze", "power", path("box%s.hdf5" % seed)], check=True, stdout=subprocess.DEVNULL)
first, second = path("box1.power.txt"), path("box2.power.txt")
with open(path("plin.txt"), "w") as f:
    f.write("# k P_lin(k) at z = 0\n")
    for i in range(200):
        k = 10 ** (-3 + 4 * i / 199)
        f.write("%.6e %.6e\n" % (k, 2e4 * k / (1 + (k / 0.02) ** 2.5)))


def plot(*args):
    return subprocess.run([sys.executable, script, *args], capture_output=True, text=True)


def png_size(name):
    with open(name, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", name
    return struct.unpack(">II", head[16:24])


def expect_error(args, code, mentions):
    result = plot(*args)
    assert result.returncode == code, (args, result.returncode, result.stderr)
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("plot_power.py: error:"), result.stderr
    assert mentions in result.stderr, (mentions, result.stderr)


def with_header(name, line):
    """A copy of the first spectrum with one more header line."""
    lines = open(first).read().splitlines()
    lines.insert(3, line)
    with open(path(name), "w") as f:
        f.write("\n".join(lines) + "\n")
    return path(name)


# Two outputs against linear theory, one growth ratio each: FILE.png, 640 x 480 at 100 dpi.
result = plot(first, second, "--linear", path("plin.txt"), "--growth", "0.5,1")
assert result.returncode == 0, result.stderr
assert result.stdout.strip() == "wrote %s (2 spectra; linear theory scaled by D1/D1(1) = 0.5, 1)" % path(
    "box1.power.png"), result.stdout
assert png_size(path("box1.power.png")) == (640, 480)
assert not [name for name in os.listdir(scratch) if ".tmp-" in name], os.listdir(scratch)
# The ratio from the header, or from its scale factor (Einstein-de Sitter: D1 = a).
result = plot(with_header("growth.txt", "# growth_factor_ratio = 0.25"), "--linear", path("plin.txt"), "--out",
              path("growth.png"))
assert result.returncode == 0 and "D1/D1(1) = 0.25)" in result.stdout, (result.stdout, result.stderr)
result = plot(with_header("eds.txt", "# scale_factor = 0.5"), "--linear", path("plin.txt"), "--omega-m", "1",
              "--out", path("eds.png"))
assert result.returncode == 0 and "D1/D1(1) = 0.5)" in result.stdout, (result.stdout, result.stderr)
# Without linear theory, shot noise subtracted, at another resolution.
result = plot(first, second, "--subtract-shot-noise", "-o", path("bare.png"), "--dpi", "50")
assert result.returncode == 0, result.stderr
assert png_size(path("bare.png")) == (320, 240)

# The growth factor against Carroll, Press & Turner (1992): within 0.5% for Omega_m = 0.3 at z = 1 and 3.
spec = importlib.util.spec_from_file_location("plot_power", script)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
assert abs(module.growth_factor(0.3, 1.0) - 0.3) < 1e-6
assert abs(module.growth_factor(1.0, 1.0) - 1.0) < 1e-6


def carroll_press_turner(a, omega_m):
    om = omega_m / (omega_m + (1 - omega_m) * a ** 3)
    ol = 1 - om
    return a * 2.5 * om / (om ** (4 / 7) - ol + (1 + om / 2) * (1 + ol / 70))


for a in (0.5, 0.25):
    exact = module.growth_factor(a, 0.3) / module.growth_factor(1.0, 0.3)
    fit = carroll_press_turner(a, 0.3) / carroll_press_turner(1.0, 0.3)
    assert abs(exact / fit - 1) < 5e-3, (a, exact, fit)
    assert exact > a  # growth slows under Lambda: more of it lies in the past
    assert abs(module.growth_ratio({"redshift": repr(1 / a - 1)}, None, 0.3, "x") / exact - 1) < 1e-12

# A spectrum with matcha's own linear theory (`analyze power --linear eh`): its P_lin(k) column is drawn, before
# --linear and --growth, which still serve the file without one.
subprocess.run([matcha, "ic", "cosmo", "--grid", "16", "--box", "100", "--z-start", "3", "--seed", "2", "-o",
                path("cosmo.hdf5")], check=True, stdout=subprocess.DEVNULL)
subprocess.run([matcha, "analyze", "power", path("cosmo.hdf5"), "--linear", "eh"], check=True,
               stdout=subprocess.DEVNULL)
own = path("cosmo.power.txt")
result = plot(own, "-o", path("own.png"))
assert result.returncode == 0, result.stderr
assert result.stdout.strip() == "wrote %s (1 spectra; linear theory from the P_lin(k) column of 1 file)" % path(
    "own.png"), result.stdout
assert png_size(path("own.png")) == (640, 480)
result = plot(own, first, "--linear", path("plin.txt"), "--growth", "0.5", "-o", path("mixed.png"))
assert result.returncode == 0, result.stderr
assert result.stdout.strip().endswith(
    "(2 spectra; linear theory from the P_lin(k) column of 1 file; linear theory scaled by D1/D1(1) = 0.5)"), \
    result.stdout
# What is drawn: keep the figure (plot() closes it) and read its dashed lines back.
import matplotlib.pyplot as plt  # noqa: E402  (after the skip above)

kept = []
plt.close = kept.append
header, columns = module.read_power_file(own)
_, lattice_columns = module.read_power_file(first)
module.plot([(own, header, columns, 0.5), (first, {}, lattice_columns, 0.5)], module.read_linear_file(path("plin.txt")),
            False, path("drawn.png"), 50)
figures = [figure for figure in kept if hasattr(figure, "axes")]  # plt.close("all") may come by too
assert len(figures) == 1, kept
dashed = [line for line in figures[0].axes[0].get_lines() if line.get_linestyle() == "--"]
assert len(dashed) == 2, dashed
assert list(dashed[0].get_xdata()) == columns["k"] and list(dashed[0].get_ydata()) == columns["P_lin(k)"]
assert dashed[0].get_color() == "C0" and dashed[1].get_color() == "C1"
plin_k, plin_p = module.read_linear_file(path("plin.txt"))
assert abs(dashed[1].get_ydata()[0] / (0.25 * plin_p[list(plin_k).index(dashed[1].get_xdata()[0])]) - 1) < 1e-12

# Bad input: exit 2, one line.
expect_error([path("missing.txt")], 2, "missing.txt: no such file")
with open(path("numbers.txt"), "w") as f:
    f.write("1 2 3 4\n")
expect_error([path("numbers.txt")], 2, "line 1: numbers before the column header")
lines = open(first).read().splitlines()
with open(path("short.txt"), "w") as f:
    f.write("\n".join(lines[:-1] + [" ".join(lines[-1].split()[:3])]) + "\n")
expect_error([path("short.txt")], 2, "3 values where the header names 4 columns")
with open(path("header-only.txt"), "w") as f:
    f.write("\n".join(line for line in lines if line.startswith("#")) + "\n")
expect_error([path("header-only.txt")], 2, "has a header but no bins")
expect_error([first, "--linear", path("plin.txt")], 2, "no growth factor to scale linear theory by")
expect_error([with_header("eds2.txt", "# scale_factor = 0.5"), "--linear", path("plin.txt")], 2, "no growth factor")
expect_error([first, second, "--linear", path("plin.txt"), "--growth", "1,2,3"], 2,
             "--growth gives 3 ratios for 2 files")
expect_error([first, "--growth", "-1"], 2, "--growth: ratios must be > 0")
expect_error([first, "--linear", path("nothing.txt"), "--growth", "1"], 2, "--linear")
expect_error([first, "--omega-m", "0"], 2, "--omega-m must be in (0, 1]")
expect_error([first, "--colour", "red"], 2, "unrecognized arguments")
# An output that cannot be written: exit 1.
open(path("a-file"), "w").close()
expect_error([first, "--out", os.path.join(path("a-file"), "p.png")], 1, "cannot write")
print("plot_power.py: plots spectra against scaled linear theory or their own P_lin(k) column (640 x 480 PNG) and "
      "refuses bad input with one line")
