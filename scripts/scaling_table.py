#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Weak and strong scaling tables from `matcha run --timings --json` outputs of one run each on K ranks (issue 19).

Usage: /usr/bin/python3 scripts/scaling_table.py RUN.json [RUN.json ...] [--out FILE]

Each file is the JSON that `mpirun -np K matcha run ... --timings --json` writes to stdout (scripts/device-check.sh's
RANKS=1 names them ranks-nN-kK[-LABEL].json; a LABEL, from such a name, keeps A/B runs in tables of their own). Runs
of one label are grouped twice:

* weak scaling: runs with the same bodies per rank (N / K) at two or more K; efficiency = t(K0) / t(K), t the mean
  wall time of a step after the first force call and K0 the smallest K of the group (issue 19's target: >= 0.90 from
  1 to 4 GPUs, i.e. t(4) / t(1) <= 1.11);
* strong scaling: runs with the same N at two or more K; speed-up = t(K0) / t(K) and efficiency = speed-up K0 / K.

Beside them each row gives the mean force call, the interactions a body a force call (more bodies mean longer lists:
part of a weak-scaling loss is the larger system's own work), and where the run was on several ranks the per-rank phases
of a force call, each the largest over the ranks: the steady call (the calls after the first two, which move the
bodies into their domains), then the mean over all the run's calls, the first included, of the decomposition, local
build, LET build, communication, walk (with the lists' merge) and kernels; and the last call's imbalance of
interactions (max / mean). A one-rank run has no per-rank table (`matcha run` on one rank, under mpirun or not, is the
one-rank solver, with its reuse of trees and lists where the options allow it): its phases are left blank. Prints
markdown; with --out also writes it there (atomically).

Exit codes as matcha's: 0 success, 1 the output cannot be written, 2 a file is missing, not JSON or not a run's
output, or no group has two K (one line on stderr, starting with "scaling_table.py: error:").
"""
import argparse
import json
import os
import re
import sys
import tempfile

NAME = re.compile(r"ranks-n(\d+)-k(\d+)(?:-(.+))?\.json$")
PHASES = (  # rank_timings' seconds a force call, as the per-rank table of `matcha run --timings` shows them
    ("decomp", "decomposition_seconds"),
    ("local build", "local_build_seconds"),
    ("LET build", "let_build_seconds"),
    ("comm", "communication_seconds"),
    ("walk", "walk_seconds"),
    ("kernels", "kernel_seconds"),
)


class BadInput(Exception):
    """A file is missing, malformed or not a run's output (exit code 2)."""


def fail(message, code):
    print(f"scaling_table.py: error: {message}", file=sys.stderr)
    sys.exit(code)


def read_run(path):
    """One run's numbers from its JSON output; raises BadInput."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise BadInput(f"cannot read {path}: {e.strerror}") from e
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BadInput(f"{path} is not JSON ({e})") from e
    try:
        timings = data["timings"]
        steps = int(timings["steps"])
        bodies = int(data["bodies"])
        ranks = int(data.get("ranks", 1))
        step = float(timings["step_seconds_mean"])
        call = float(timings["force_call_seconds_mean"])
        interactions = float(data["interactions"]["body_body"]) + float(data["interactions"]["body_cell"])
        engine = str(data.get("engine", ""))
    except (KeyError, TypeError, ValueError) as e:
        raise BadInput(f"{path} is not the output of `matcha run --timings --json` (no {e})") from e
    if steps < 1 or bodies < 1 or ranks < 1 or not step > 0.0:
        raise BadInput(f"{path}: a run of {steps} steps, {bodies} bodies on {ranks} ranks has no step time to compare")
    per_rank = data.get("rank_timings") or []
    calls = int(per_rank[0]["force_calls"]) if per_rank else steps + 1  # the first call and one a step
    phases = {}
    if per_rank:
        for label, key in PHASES:
            phases[label] = max(float(r[key]) / max(1, int(r["force_calls"])) for r in per_rank)
        phases["steady call"] = max(float(r["steady_call_seconds"]) / max(1, int(r["steady_calls"])) for r in per_rank)
        phases["imbalance"] = float(data.get("last_call_imbalance", 0.0))
    match = NAME.search(os.path.basename(path))
    label = match.group(3) if match and match.group(3) else ""
    return {
        "path": path,
        "label": label,
        "bodies": bodies,
        "ranks": ranks,
        "step": step,
        "call": call,
        "per_body": interactions / bodies / calls,
        "phases": phases,
        "engine": engine,
    }


def ms(seconds):
    return f"{1e3 * seconds:.1f}"


def table(title, runs, kind):
    """Markdown for one group of runs (ascending K), efficiency against its smallest K."""
    base = runs[0]
    head = ["K", "N", "N a rank", "step ms", "force call ms"]
    head += ["efficiency"] if kind == "weak" else ["speed-up", "efficiency"]
    head += ["interactions a body a call", "steady call ms"] + [f"{p} ms" for p, _ in PHASES] + ["imbalance"]
    lines = [f"**{title}**", "", "| " + " | ".join(head) + " |", "|" + " ---: |" * len(head)]
    for run in runs:
        ratio = base["step"] / run["step"]
        row = [str(run["ranks"]), str(run["bodies"]), str(run["bodies"] // run["ranks"]), ms(run["step"]),
               ms(run["call"])]
        row += [f"{ratio:.3f}"] if kind == "weak" else [f"{ratio:.2f}", f"{ratio * base['ranks'] / run['ranks']:.3f}"]
        row.append(f"{run['per_body']:.0f}")
        phases = run["phases"]
        row.append(ms(phases["steady call"]) if phases else "")
        row += [ms(phases[p]) if phases else "" for p, _ in PHASES]
        row.append(f"{phases['imbalance']:.3f}" if phases else "")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def tables(runs):
    """Every weak and strong group of two or more K, per label; raises BadInput when there is none."""
    out = []
    for label in sorted({r["label"] for r in runs}):
        mine = [r for r in runs if r["label"] == label]
        named = f" ({label})" if label else ""
        for kind, key in (("weak", lambda r: r["bodies"] // r["ranks"]), ("strong", lambda r: r["bodies"])):
            for value in sorted({key(r) for r in mine}):
                group = sorted((r for r in mine if key(r) == value), key=lambda r: r["ranks"])
                if len({r["ranks"] for r in group}) < 2:
                    continue
                if len({r["ranks"] for r in group}) != len(group):
                    raise BadInput(f"two runs of {value} bodies{' a rank' if kind == 'weak' else ''} on the same K"
                                   f"{named}: give one of each")
                what = f"{value} bodies a rank" if kind == "weak" else f"{value} bodies"
                out.append(table(f"{kind.capitalize()} scaling{named}, {what}", group, kind))
    if not out:
        raise BadInput("no runs of the same N, or of the same N a rank, on two or more K: nothing to compare")
    engines = sorted({r["engine"] for r in runs if r["engine"]})
    header = "Engine: " + "; ".join(engines) + "\n\n" if engines else ""
    return header + "\n\n".join(out) + "\n"


def write_atomically(path, text):
    folder = os.path.dirname(os.path.abspath(path))
    fd, temporary = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(path) + ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="JSON outputs of `matcha run --timings --json`, one run each")
    parser.add_argument("--out", help="also write the markdown here")
    args = parser.parse_args()
    try:
        text = tables([read_run(path) for path in args.runs])
    except BadInput as e:
        fail(str(e), 2)
    print(text, end="")
    if args.out:
        try:
            write_atomically(args.out, text)
        except OSError as e:
            fail(f"cannot write {args.out}: {e.strerror}", 1)


if __name__ == "__main__":
    main()
