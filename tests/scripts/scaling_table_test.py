# SPDX-License-Identifier: MIT
"""scripts/scaling_table.py on real runs: `matcha run --timings --json` of a Plummer sphere on 1 and 2 ranks (CPU
engine) at 1024 bodies a rank (weak) and at 2048 bodies (strong), named as scripts/device-check.sh's RANKS=1 names
them. The tables hold one row a run with the efficiency the runs' own step times give, over all steps and over the
steps after the first (steady; blank for a file without them), the per-rank steady phases on 2 ranks and none on one; a label keeps A/B runs apart; --out writes the same text. Refused with one line and exit 2: no
two K to compare, a missing file, a file that is not JSON or not a run's output, two runs of one K in a group.
Usage: scaling_table_test.py MPIEXEC MATCHA_BINARY SCALING_TABLE_SCRIPT SCRATCH_DIR."""
import json
import os
import re
import shutil
import subprocess
import sys

mpiexec, matcha, script, scratch = sys.argv[1:5]
shutil.rmtree(scratch, ignore_errors=True)
os.makedirs(scratch)
environment = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def run(ranks, bodies, label=""):
    """The JSON file of a 3-step run of `bodies` on `ranks` ranks."""
    name = f"ranks-n{bodies}-k{ranks}{'-' + label if label else ''}.json"
    path = os.path.join(scratch, name)
    with open(path, "w") as out:
        subprocess.run([mpiexec, "-np", str(ranks), "--oversubscribe", matcha, "run", "-n", str(bodies), "--seed", "7",
                        "--engine", "cpu", "--dt", "0.0078125", "--t-end", "0.0234375", "--output-interval",
                        "0.0234375", "--timings", "--json", "--overwrite", "--out",
                        os.path.join(scratch, name + ".out")], check=True, stdout=out, stderr=subprocess.DEVNULL,
                       env=environment)
    return path


def table(*args):
    return subprocess.run([sys.executable, script, *args], capture_output=True, text=True)


def expect_error(args, mentions):
    result = table(*args)
    assert result.returncode == 2, (args, result.returncode, result.stdout, result.stderr)
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("scaling_table.py: error:"), result.stderr
    assert mentions in result.stderr, (mentions, result.stderr)


def rows(text, title):
    """The rows (lists of cells) of the table under `title`."""
    block = text.split(f"**{title}**", 1)[1].split("\n\n")[1]
    lines = block.strip().splitlines()
    head = [cell.strip() for cell in lines[0].strip("|").split("|")]
    return [dict(zip(head, (cell.strip() for cell in line.strip("|").split("|")))) for line in lines[2:]]


one, two, strong = run(1, 1024), run(2, 2048), run(2, 1024)
steps = {path: json.load(open(path))["timings"]["step_seconds_mean"] for path in (one, two, strong)}
steady = {path: json.load(open(path))["timings"]["steady_step_seconds_mean"] for path in (one, two, strong)}

result = table(one, two, strong, "--out", os.path.join(scratch, "scaling.md"))
assert result.returncode == 0, result.stderr
text = result.stdout
assert open(os.path.join(scratch, "scaling.md")).read() == text
assert text.startswith("Engine: cpu-float"), text
weak = rows(text, "Weak scaling, 1024 bodies a rank")
assert [(r["K"], r["N"], r["N a rank"]) for r in weak] == [("1", "1024", "1024"), ("2", "2048", "1024")], weak
assert weak[0]["efficiency"] == "1.000" and weak[0]["LET build ms"] == "" and weak[0]["steady call ms"] == "", weak
assert abs(float(weak[1]["efficiency"]) - steps[one] / steps[two]) < 1e-3, (weak, steps)
assert abs(float(weak[1]["step ms"]) - 1e3 * steps[two]) < 0.051, (weak, steps)
# The steady columns: the steps after the first, as the runs' JSON gives them.
assert weak[0]["steady efficiency"] == "1.000", weak
assert abs(float(weak[1]["steady efficiency"]) - steady[one] / steady[two]) < 1e-3, (weak, steady)
assert abs(float(weak[1]["steady step ms"]) - 1e3 * steady[two]) < 0.051, (weak, steady)
# The steady phases are the steady calls', the largest over the ranks.
ranks = json.load(open(two))["rank_timings"]
walk = max(r["steady_phase_seconds"]["walk"] / r["steady_calls"] for r in ranks)
assert abs(float(weak[1]["walk ms"]) - 1e3 * walk) < 0.051, (weak, ranks)
# Every steady phase was timed on the ranks and is shown as the JSON has it (a phase of a few hundredths of a ms, as the
# decomposition of 1024 bodies a rank may take, shows as 0.0: its printed value alone cannot tell that it was timed).
for column, key in (("decomp ms", "decomposition"), ("local build ms", "local_build"), ("LET build ms", "let_build"),
                    ("comm ms", "communication"), ("walk ms", "walk"), ("kernels ms", "kernels")):
    timed = max(r["steady_phase_seconds"][key] / r["steady_calls"] for r in ranks)
    assert timed > 0.0, (column, ranks)
    assert abs(float(weak[1][column]) - 1e3 * timed) < 0.051, (column, weak[1], ranks)
call = max(r["steady_call_seconds"] / r["steady_calls"] for r in ranks)
assert call > 0.0 and abs(float(weak[1]["steady call ms"]) - 1e3 * call) < 0.051, (weak[1], ranks)
assert 1.0 <= float(weak[1]["imbalance"]) < 2.0, weak[1]
# A larger sphere's bodies have longer lists.
assert float(weak[1]["interactions a body a call"]) > float(weak[0]["interactions a body a call"]), weak
strong_rows = rows(text, "Strong scaling, 1024 bodies")
assert [r["K"] for r in strong_rows] == ["1", "2"], strong_rows
speedup = steps[one] / steps[strong]
assert abs(float(strong_rows[1]["speed-up"]) - speedup) < 5e-3, (strong_rows, steps)
assert abs(float(strong_rows[1]["efficiency"]) - speedup / 2) < 1e-3, (strong_rows, steps)
assert abs(float(strong_rows[1]["steady speed-up"]) - steady[one] / steady[strong]) < 5e-3, (strong_rows, steady)
# A file of an older matcha, without the steady step: its steady cells blank, the rest as before.
old_one = os.path.join(scratch, "old", "ranks-n1024-k1.json")
os.makedirs(os.path.dirname(old_one))
data = json.load(open(one))
del data["timings"]["steady_step_seconds_mean"]
json.dump(data, open(old_one, "w"))
result = table(old_one, two)
assert result.returncode == 0, result.stderr
old_rows = rows(result.stdout, "Weak scaling, 1024 bodies a rank")
assert old_rows[0]["steady step ms"] == "" and old_rows[1]["steady efficiency"] == "", old_rows
assert abs(float(old_rows[1]["efficiency"]) - steps[one] / steps[two]) < 1e-3, old_rows
assert "Strong scaling, 2048" not in text and "Weak scaling, 512" not in text, text

# A labelled run (an A/B's other binary) forms tables of its own, named by the label.
other = run(2, 2048, "old")
shutil.copy(one, os.path.join(scratch, "ranks-n1024-k1-old.json"))
result = table(one, two, other, os.path.join(scratch, "ranks-n1024-k1-old.json"))
assert result.returncode == 0, result.stderr
assert len(rows(result.stdout, "Weak scaling (old), 1024 bodies a rank")) == 2, result.stdout
assert len(rows(result.stdout, "Weak scaling, 1024 bodies a rank")) == 2, result.stdout

# Refusals: one line, exit 2.
expect_error([one], "nothing to compare")
expect_error([one, os.path.join(scratch, "missing.json")], "cannot read")
garbage = os.path.join(scratch, "garbage.json")
open(garbage, "w").write("step 1/3 ...\n")
expect_error([one, garbage], "is not JSON")
not_a_run = os.path.join(scratch, "not-a-run.json")
json.dump({"bodies": 3}, open(not_a_run, "w"))
expect_error([one, not_a_run], "is not the output of `matcha run --timings --json`")
twice = os.path.join(scratch, "copy.json")
shutil.copy(two, twice)
expect_error([one, two, twice], "on the same K")
assert not re.search(r"\.scaling\.md\.", " ".join(os.listdir(scratch))), os.listdir(scratch)
print("scaling_table.py: tables, labels and refusals as expected")
