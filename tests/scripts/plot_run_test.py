# SPDX-License-Identifier: MIT
"""scripts/plot_run.py on a short real run's diagnostics.log: it writes a PNG of the expected size (default
OUT/run.png, or --out), plots a log still being written and a failed run's log, and refuses a missing, empty or
malformed log and an unwritable output with one line on stderr and matcha's exit codes (2 bad input, 1 I/O).
Usage: plot_run_test.py MATCHA_BINARY PLOT_RUN_SCRIPT SCRATCH_DIR. Exit 77: matplotlib is not installed (Debian:
apt-get install python3-matplotlib), the test is skipped."""
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
out = os.path.join(scratch, "run")
subprocess.run([matcha, "run", "-n", "512", "--t-end", "0.25", "--output-interval", "0.0625", "--engine", "cpu",
                "--out", out], check=True, stdout=subprocess.DEVNULL)


def plot(*args):
    return subprocess.run([sys.executable, script, *args], capture_output=True, text=True)


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", path
    return struct.unpack(">II", head[16:24])


def expect_error(args, code, mentions):
    result = plot(*args)
    assert result.returncode == code, (args, result.returncode, result.stderr)
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("plot_run.py: error:"), result.stderr
    assert mentions in result.stderr, (mentions, result.stderr)


# The run's folder: OUT/run.png, 640 x 640 at the default 100 dpi.
result = plot(out)
assert result.returncode == 0, result.stderr
assert "wrote " + os.path.join(out, "run.png") + " (5 outputs, t = 0 to 0.25)" in result.stdout, result.stdout
assert png_size(os.path.join(out, "run.png")) == (640, 640), png_size(os.path.join(out, "run.png"))
assert not [name for name in os.listdir(out) if ".tmp-" in name], os.listdir(out)
# --out elsewhere, at another resolution; the log itself may be named instead of its folder.
other = os.path.join(scratch, "elsewhere.png")
result = plot(os.path.join(out, "diagnostics.log"), "--out", other, "--dpi", "50")
assert result.returncode == 0, result.stderr
assert png_size(other) == (320, 320), png_size(other)

log = open(os.path.join(out, "diagnostics.log")).read().splitlines()
comments = [line for line in log if line.startswith("#")]
rows = [line for line in log if line.strip() and not line.startswith("#")]
assert len(rows) == 5, log


def folder_with(name, lines):
    folder = os.path.join(scratch, name)
    os.makedirs(folder)
    with open(os.path.join(folder, "diagnostics.log"), "w") as f:
        f.write("\n".join(lines) + ("\n" if lines else ""))
    return folder


# A run in progress (no closing line yet) and a failed run plot.
assert plot(folder_with("running", comments[:3] + rows[:2])).returncode == 0
failed = folder_with("failed", comments[:3] + rows[:3] + ["# failed: a value is not finite at step 5, t = 0.039"])
assert plot(failed).returncode == 0

# Bad input: exit 2, one line.
expect_error([os.path.join(scratch, "no-such-run")], 2, "no such file")
expect_error([folder_with("empty", [])], 2, "is empty")
expect_error([folder_with("header-only", comments[:3])], 2, "no outputs yet")
expect_error([folder_with("no-header", rows)], 2, "before the column header")
expect_error([folder_with("short-row", comments[:3] + [rows[0], " ".join(rows[1].split()[:4])])], 2,
             "line 5: 4 values where the header names 10 columns")
expect_error([folder_with("word", comments[:3] + [rows[0].replace(rows[0].split()[2], "oops")])], 2,
             "line 4: not a number")
# An output that cannot be written: exit 1.
open(os.path.join(scratch, "a-file"), "w").close()
expect_error([out, "--out", os.path.join(scratch, "a-file", "run.png")], 1, "cannot write")
print("plot_run.py: plots a real run's log (640 x 640 PNG) and refuses bad logs with one line")
