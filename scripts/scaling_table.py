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

Each is given twice: over all the steps, and over the steps after the first ("steady": the pace of a long run; on K
ranks the first step's force call moves the bodies into the domains the first call's work weighed, and a one-rank run
starts its pipeline; matcha's JSON `steady_step_seconds_mean`, blank where a file lacks it). Beside them each row
gives the mean force call, the interactions a body a force call (more bodies mean longer lists: part of a
weak-scaling loss is the larger system's own work), and where the run was on several ranks the per-rank phases of a
steady force call (the calls after the first two), each the largest over the ranks: the whole call, the
decomposition, local build, LET build, communication, walk (with the lists' merge) and kernels (in files without the
steady phases, the mean over all calls, the first included); and the last call's imbalance of interactions
(max / mean). A one-rank run has no per-rank table (`matcha run` on one rank, under mpirun or not, is the
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
PHASES = (  # rank_timings' seconds over all calls, and steady_phase_seconds' key, as `matcha run --timings` shows them
    ("decomp", "decomposition_seconds", "decomposition"),
    ("local build", "local_build_seconds", "local_build"),
    ("LET build", "let_build_seconds", "let_build"),
    ("comm", "communication_seconds", "communication"),
    ("walk", "walk_seconds", "walk"),
    ("kernels", "kernel_seconds", "kernels"),
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
        steady = timings.get("steady_step_seconds_mean")
        steady = float(steady) if steady is not None else None
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
        for label, key, steady_key in PHASES:
            if all("steady_phase_seconds" in r for r in per_rank):
                phases[label] = max(float(r["steady_phase_seconds"][steady_key]) / max(1, int(r["steady_calls"]))
                                    for r in per_rank)
            else:
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
        "steady": steady,
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
    head += ["steady step ms"]
    head += ["steady efficiency"] if kind == "weak" else ["steady speed-up", "steady efficiency"]
    head += ["interactions a body a call", "steady call ms"] + [f"{p} ms" for p, _, _ in PHASES] + ["imbalance"]
    lines = [f"**{title}**", "", "| " + " | ".join(head) + " |", "|" + " ---: |" * len(head)]

    def ratios(ratio, ranks):
        if ratio is None:
            return [""] if kind == "weak" else ["", ""]
        return [f"{ratio:.3f}"] if kind == "weak" else [f"{ratio:.2f}", f"{ratio * base['ranks'] / ranks:.3f}"]

    for run in runs:
        row = [str(run["ranks"]), str(run["bodies"]), str(run["bodies"] // run["ranks"]), ms(run["step"]),
               ms(run["call"])]
        row += ratios(base["step"] / run["step"], run["ranks"])
        steady = base["steady"] / run["steady"] if base["steady"] and run["steady"] else None
        row.append(ms(run["steady"]) if run["steady"] else "")
        row += ratios(steady, run["ranks"])
        row.append(f"{run['per_body']:.0f}")
        phases = run["phases"]
        row.append(ms(phases["steady call"]) if phases else "")
        row += [ms(phases[p]) if phases else "" for p, _, _ in PHASES]
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
