#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# `matcha run` and `matcha compare` under mpiexec on K ranks against the same command on one rank without mpiexec
# (issue 19), on the CPU engine at CI size:
#  - run K: --solver direct, 1024 bodies, 4 steps: E, T, W within 1e-5 of one rank's at every output (one rank's sums in
#    float, K ranks' in double); --force-check 256 on 2048 bodies, 2 steps: a check a step in the log and summary.json,
#    p99 below 5e-3; a 4096-body Plummer sphere, 8 steps of 1/64 (--reuse off): the final snapshot holds
#    every id once, and the start (each rank making its share of the sphere) is the one-process start bit for bit; its
#    energies (every diagnostics line's E, T, W) agree with one rank's to 1e-4 relative and its positions to 1e-4
#    (the forces differ only in summation order); with K = 1 every diagnostics line is the plain run's, digit for digit;
#    with --snapshot-files ranks the K files of each snapshot hold the gathered snapshot's bodies bit for bit under
#    GADGET's multi-file header (one file on one rank), and a run starts from file K-1 of the last set, on one rank
#    and, each rank reading its share of the set's rows, on K (energies within 1e-4 of one rank's);
#  - periodic K: TreePM in a box (`matcha ic clumps`, 8192 bodies; the distributed tree's short range and the mesh in
#    FFTW slabs over the ranks, which the run's solver line must name; with --pm-ranks replicated the whole mesh on
#    every rank, E and W within 1e-5 of the slabs'), 8 steps of 1/1024 (--reuse off; |dE/E|
#    ~2e-3): every diagnostics line's E, T and W within 1e-4 of one rank's, the final snapshot records the box,
#    holds every id once, inside [0, L)^3, at positions within 1e-4 of one rank's; and
#    8 steps with a checkpoint after each, continued with --restart to 16 on K ranks: every diagnostics line and the
#    final snapshot's ids, positions and velocities those of 16 uninterrupted steps;
#  - periodic_cuda K: the periodic case with --engine cuda (the mesh in cuFFT slabs on the ranks' GPUs, and with
#    --pm-ranks replicated the whole grid on each, summed through the host), against one rank on the GPU; without
#    h5py the diagnostics alone; skipped (77) without CUDA;
#  - comoving K: a 16^3 2LPT box from z = 49 to 3 with the defaults (long-range and block time steps): K, W and the
#    Layzer-Irvine check within 1e-4 (1e-5 absolute) of one rank's at every output, the step count within 2%, the
#    final snapshot's ids once, positions within 1e-4 L and velocities within 1e-3 of the rms of one rank's; a
#    K-rank checkpoint at z = 4 continued to z = 3 on K ranks bit for bit the uninterrupted K-rank run (on one rank,
#    its K within 1e-4); run
#    --cosmology on K ranks the file's run to z = 6; ic cosmo on K ranks a set of K files (NumFilesPerSnapshot K)
#    holding the one-process file's bodies in its order (to 1e-11; bit for bit measured) under its header, from which
#    a run on K ranks is the file's run to z = 6;
#  - compare K: 8192 bodies, a sample of 1024, theta 0.5: K ranks' median and 99th percentile of the relative force
#    error within 10% of one rank's (measured: 1-3%; the local essential trees cut differently from one tree); the
#    same for 8192 bodies of `ic clumps` in their periodic box and a 16^3 box of `ic cosmo`, TreePM against Ewald;
#  - run_cuda K: the run case with --engine cuda (a GPU per rank, the ranks of a host sharing its GPUs in turns),
#    against one rank on the GPU; skipped (77) where the CUDA engine cannot start;
#  - bad K: more ranks than bodies (a run, a compare, a restart whose folder stays as it was), a K-rank checkpoint
#    whose shares do not add up or which lost a part, an IC file read in shares with an id in two ranks' shares or a
#    NaN in one, restarts with another dt (on K ranks and on one), another body count (-n) or an end no later than the
#    checkpoint, compare --engine cuda, a cosmological file with --open, --z-end for a run that is not comoving, a
#    run whose ranks together exceed the host's memory (MATCHA_MEMORY_LIMIT; nothing written; where only rank 0's
#    copy of the system for gathered snapshots is too much, the line says so and names --snapshot-files ranks), a
#    subcommand that runs on one rank only, ic cosmo with a bad --grid or over an existing set: one line on stderr,
#    exit status 2, no hang; --dry-run on K ranks writes nothing; ic cosmo --overwrite on K ranks leaves its K files
#    alone (the one file of its name and an earlier set's further parts removed, nothing staged left), and a rank that
#    dies among its renames (MATCHA_TEST_CRASH_RANK) leaves no part 0, so the set is refused, not read as a mix of two
#    sets;
#  - fail K: the last rank, then rank 0, fails alone after step 2 (MATCHA_TEST_FAIL_RANK): the job ends (ctest's
#    TIMEOUT catches a hang) with exit status 3, one "matcha: error: rank r: ..." line and mpirun's abort banner; the
#    snapshots and the checkpoint written before are whole (they read back; the checkpoint's one folder of parts holds
#    every body once), none is left as a temporary file; when
#    rank 0 failed, summary.json says "failed" and the RUNNING marker is gone;
#  - restart K: 2048 bodies, 8 steps of 1/64 on K ranks with a checkpoint after every step (the last after step 7),
#    continued with --restart to 16 steps on K ranks: every diagnostics line and the final snapshot bit for bit those
#    of 16 uninterrupted steps on K ranks; continued on another number of ranks (K = 1: 2, else K / 2, one rank without
#    mpiexec): energies to 1e-4 relative and positions to 1e-4 of the uninterrupted run's; on K > 1 ranks the
#    checkpoint is in parts (checkpoint.hdf5 names checkpoint.parts-STEP, K files holding every body once; the
#    earlier checkpoints' folders removed);
#  - restart_cuda K: the restart case with --engine cuda (without h5py, as on the device machine, the diagnostics
#    alone); skipped (77) where the CUDA engine cannot start.
#  - hermite K: --integrator hermite, 512 bodies to t = 0.25 on K ranks (every rank integrates all bodies; the force
#    sums split over the ranks by j-particle): every diagnostics line's E, T, W within 1e-7 and the final positions
#    within 1e-6 of one rank's (sums in another order), the same files in the folder, summary.json's engine "over K
#    ranks"; stopped at 0.125 and continued on K ranks bit for bit the uninterrupted run, on one rank within 1e-7;
#    --dry-run writes nothing.
# Usage: matcha_ranks_test.sh MPIEXEC MATCHA_BINARY SCRATCH_DIR run|run_cuda|periodic|periodic_cuda|comoving|compare|bad|fail|hermite|restart|restart_cuda K
# Exit 0 when every check holds, 1 when one fails (named on stderr), 77 (ctest's skip) without /usr/bin/python3.
set -euo pipefail

if [[ $# -ne 5 ]]; then
  echo "usage: $0 MPIEXEC MATCHA_BINARY SCRATCH_DIR run|run_cuda|periodic|periodic_cuda|comoving|compare|bad|fail|hermite|restart|restart_cuda K" >&2
  exit 2
fi
mpiexec=$1
matcha=$(readlink -f "$2")
scratch=$3/$4-np$5
what=$4
ranks=$5
python=/usr/bin/python3
if [[ ! -x $python ]]; then
  echo "$python is not installed: test skipped"
  exit 77
fi
rm -rf "$scratch"
mkdir -p "$scratch"
cd "$scratch"
on_ranks() { "$mpiexec" -n "$ranks" --oversubscribe "$matcha" "$@"; }
skip_without_cuda() {  # exit 77 (ctest's skip) where the CUDA engine cannot start
  if ! "$matcha" run -n 64 --engine cuda --t-end 0 --out probe >probe.txt 2>&1; then
    echo "the CUDA engine does not start here: test skipped ($(tail -n 1 probe.txt))"
    exit 77
  fi
}

case $what in
run | run_cuda)
  engine=cpu
  if [[ $what == run_cuda ]]; then
    engine=cuda
    skip_without_cuda
  fi
  args=(run -n 4096 --seed 3 --engine "$engine" --reuse off --dt 0.015625 --t-end 0.125 --output-interval 0.0625)
  "$matcha" "${args[@]}" --out one >one.txt
  on_ranks "${args[@]}" --out ranks >ranks.txt
  cat ranks.txt
  # Direct summation on K ranks (each rank's bodies pulled by all, in double on the CPU Hermite engine) against one
  # rank's (the float CPU engine's direct sum): every diagnostics line's E, T and W within 1e-5.
  direct=(run -n 1024 --seed 8 --solver direct --engine "$engine" --dt 0.015625 --t-end 0.0625 --output-interval 0.03125)
  "$matcha" "${direct[@]}" --out direct-one >/dev/null
  on_ranks "${direct[@]}" --out direct-ranks >direct-ranks.txt
  if [[ $ranks -gt 1 ]] && ! grep -q "direct summation over $ranks ranks" direct-ranks.txt; then
    echo "FAILED: the run's solver line does not name the direct sum over the ranks" >&2
    exit 1
  fi
  "$python" - <<'EOF2' || exit 1
import sys
one = [l.split() for l in open("direct-one/diagnostics.log") if not l.startswith("#")]
many = [l.split() for l in open("direct-ranks/diagnostics.log") if not l.startswith("#")]
bad = len(one) != len(many) or len(one) != 3
for a, b in zip(one, many):
    for column, name in ((1, "E"), (3, "T"), (4, "W")):
        x, y = float(a[column]), float(b[column])
        print(f"direct, t = {a[0]}: {name} {x} on one rank, {y} on the ranks")
        bad = bad or abs(x - y) > 1e-5 * abs(x)
if bad:
    print("FAILED: direct summation on the ranks differs from one rank's", file=sys.stderr)
sys.exit(1 if bad else 0)
EOF2
  # --force-check on K ranks: rank 0 measures 256 bodies of the gathered system after each step (reuse off: a tree a
  # call) against its double direct sum.
  on_ranks run -n 2048 --seed 9 --engine "$engine" --reuse off --dt 0.015625 --t-end 0.03125 --force-check 256 \
    --out checked >/dev/null
  "$python" - <<'EOF2' || exit 1
import json, sys
lines = [l for l in open("checked/diagnostics.log") if l.startswith("# force check after step")]
checks = json.load(open("checked/summary.json"))["force_checks"]
print(lines)
worst = checks["worst"]["p99"] if checks else float("nan")
if len(lines) != 2 or checks["count"] != 2 or checks["sample"] != 256 or not worst < 5e-3:
    print(f"FAILED: --force-check on the ranks: {len(lines)} log lines, summary {checks}", file=sys.stderr)
    sys.exit(1)
EOF2
  # The same run with a file a rank for each snapshot, and a run that starts from one file of the last set.
  on_ranks "${args[@]}" --snapshot-files ranks --out files >files.txt
  if [[ $ranks -gt 1 ]]; then
    "$matcha" run --ic files/snapshot_002.$((ranks - 1)).hdf5 --engine "$engine" --dt 0.015625 --t-end 0.15625 \
      --out from-files >from-files.txt || { echo "FAILED: a run from file $((ranks - 1)) of a set"; exit 1; }
    # The same set read on the K ranks, each its share of the files' rows: the same run within the tree's error.
    on_ranks run --ic files/snapshot_002.0.hdf5 --engine "$engine" --dt 0.015625 --t-end 0.15625 \
      --out from-files-ranks >from-files-ranks.txt || { echo "FAILED: a run from a set on $ranks ranks"; exit 1; }
    "$python" - <<'EOF2' || exit 1
import sys
one = [l.split() for l in open("from-files/diagnostics.log") if not l.startswith("#")]
many = [l.split() for l in open("from-files-ranks/diagnostics.log") if not l.startswith("#")]
bad = len(one) != len(many) or len(one) < 2
for a, b in zip(one, many):
    print(f"t = {a[0]}: E {a[1]} on one rank, {b[1]} read in shares on the ranks")
    bad = bad or abs(float(a[1]) - float(b[1])) > 1e-4 * abs(float(a[1]))
if bad:
    print("FAILED: a run from a multi-file set read in shares differs from one rank's", file=sys.stderr)
sys.exit(1 if bad else 0)
EOF2
  fi
  "$python" - "$ranks" "$what" <<'EOF'
import os, sys
ranks, what = int(sys.argv[1]), sys.argv[2]
try:
    import h5py, numpy as np
except ImportError:
    # A GPU machine may lack them (the device tool's has neither): the diagnostics still compare the runs.
    if what != "run_cuda":
        raise
    h5py = None
def table(folder):
    return [l.split() for l in open(folder + "/diagnostics.log") if not l.startswith("#")]
one, many = table("one"), table("ranks")
failed = []
if len(one) != len(many) or len(one) != 3:
    failed.append(f"diagnostics lines: {len(one)} on one rank, {len(many)} on {ranks}")
if ranks == 1 and one != many:
    failed.append("one rank under mpiexec: the diagnostics differ from the plain run's")
for a, b in zip(one, many):
    for column, name in ((1, "E"), (3, "T"), (4, "W")):
        x, y = float(a[column]), float(b[column])
        if abs(x - y) > 1e-4 * abs(x):
            failed.append(f"t = {a[0]}: {name} {y} on {ranks} ranks against {x} on one")
    print(f"t = {a[0]}: E {a[1]} / {b[1]}  |dE/E| {a[2]} / {b[2]}")
if ranks > 1:
    import json
    # The per-rank timings: one row a rank, holding every body once between them, and every phase timed.
    rows = json.load(open("ranks/summary.json")).get("rank_timings") or []
    if len(rows) != ranks or sum(r["bodies"] for r in rows) != 4096:
        failed.append(f"summary.json's rank_timings: {len(rows)} rows for {ranks} ranks")
    elif any(r["force_calls"] != 9 or r["decomposition_seconds"] <= 0 or r["interactions"] <= 0 for r in rows):
        failed.append(f"summary.json's rank_timings miss calls or phases: {rows}")
    elif any(r["steady_calls"] != 7 or not 0 < r["steady_call_seconds"] < r["call_seconds"] for r in rows):
        failed.append(f"summary.json's rank_timings: the steady state is not the calls after the first two: {rows}")
    else:
        # The steady call's main thread: spans that follow one another, adding up to the call (`other`, what lies
        # between them, too), the work-bearing ones timed.
        for r in rows:
            path = r["steady_path_seconds"]
            if abs(sum(path.values()) - r["steady_call_seconds"]) > 1e-9 * max(1.0, r["steady_call_seconds"]) or \
                    min(path.values()) < 0 or \
                    min(path[k] for k in ("decomposition", "sort", "permute", "local_build", "exchange",
                                           "lists_and_kernels", "outputs")) <= 0:
                failed.append(f"summary.json's steady path {path} against {r['steady_call_seconds']} s")
        # The steady decomposition's stages: each timed, together within the decomposition's time.
        for r in rows:
            stages = r["steady_decomposition_stages_seconds"]
            if min(stages.values()) < 0 or stages["keys"] <= 0 or stages["moves"] <= 0 or \
                    sum(stages.values()) > r["steady_decomposition_seconds"]:
                failed.append(f"summary.json's decomposition stages {stages} against "
                              f"{r['steady_decomposition_seconds']} s")
            # Drifting bodies cross a boundary now and then; most stay (a Plummer sphere, 7 calls 1/64 apart).
            if not 0 <= r["steady_moves_exchange_seconds"] <= stages["moves"]:
                failed.append(f"summary.json's moves' exchanges {r['steady_moves_exchange_seconds']} s against "
                              f"the moves' {stages['moves']} s")
            if not 0 <= r["steady_bodies_sent"] < 7 * 4096 // 10:
                failed.append(f"summary.json's bodies sent in the steady calls: {r['steady_bodies_sent']}")
if h5py is None:
    print("h5py is not installed: the final snapshots were not compared")
else:
    with h5py.File("one/snapshot_002.hdf5") as f1, h5py.File("ranks/snapshot_002.hdf5") as fk:
        ids1, idsk = f1["PartType1/ParticleIDs"][:], fk["PartType1/ParticleIDs"][:]
        if len(idsk) != 4096 or len(np.unique(idsk)) != 4096 or set(idsk) != set(ids1):
            failed.append(f"the final snapshot on {ranks} ranks does not hold every id once")
        else:
            x1 = f1["PartType1/Coordinates"][:][np.argsort(ids1)]
            xk = fk["PartType1/Coordinates"][:][np.argsort(idsk)]
            worst = np.abs(x1 - xk).max()
            print(f"largest position difference {worst:.2e}")
            if worst > 1e-4:
                failed.append(f"positions differ by up to {worst:.2e} from one rank's")
    # The start: the Plummer sphere each rank made its share of is the one-process sphere, bit for bit.
    with h5py.File("one/snapshot_000.hdf5") as f1, h5py.File("ranks/snapshot_000.hdf5") as fk:
        o1, ok = np.argsort(f1["PartType1/ParticleIDs"][:]), np.argsort(fk["PartType1/ParticleIDs"][:])
        for field in ("ParticleIDs", "Coordinates", "Velocities", "Masses"):
            if not np.array_equal(f1["PartType1/" + field][:][o1], fk["PartType1/" + field][:][ok]):
                failed.append(f"the start made in shares on {ranks} ranks: its {field} differ from one process's")
    # --snapshot-files ranks: K files (one on one rank) that hold together what the gathered snapshot holds, bit for
    # bit, with GADGET's multi-file header.
    if ranks == 1:
        if not os.path.exists("files/snapshot_002.hdf5") or os.path.exists("files/snapshot_002.0.hdf5"):
            failed.append("one rank with --snapshot-files ranks: not one file a snapshot")
    else:
        parts = [h5py.File(f"files/snapshot_002.{k}.hdf5") for k in range(ranks)]
        header = parts[0]["Header"].attrs
        counts = [int(p["Header"].attrs["NumPart_ThisFile"][1]) for p in parts]
        if (any(int(p["Header"].attrs["NumFilesPerSnapshot"]) != ranks for p in parts) or
                any(int(p["Header"].attrs["NumPart_Total"][1]) != 4096 for p in parts) or sum(counts) != 4096):
            failed.append(f"--snapshot-files ranks: the files' headers do not describe one set of 4096 ({counts})")
        with h5py.File("ranks/snapshot_002.hdf5") as fk:
            idsk = fk["PartType1/ParticleIDs"][:]
            order = np.argsort(idsk)
            for field in ("ParticleIDs", "Coordinates", "Velocities", "Masses"):
                joined = np.concatenate([p["PartType1/" + field][:] for p in parts])
                ids = np.concatenate([p["PartType1/ParticleIDs"][:] for p in parts])
                if not np.array_equal(joined[np.argsort(ids)], fk["PartType1/" + field][:][order]):
                    failed.append(f"--snapshot-files ranks: the files' {field} differ from the gathered snapshot's")
        print(f"--snapshot-files ranks: {ranks} files of {counts} bodies, the gathered snapshot's bodies bit for bit")
        if "4096 bodies from files/snapshot_002" not in open("from-files.txt").read():
            failed.append("the run from one file of the set did not read the whole set")
for line in failed:
    print("FAILED:", line, file=sys.stderr)
sys.exit(1 if failed else 0)
EOF
  ;;
periodic | periodic_cuda)
  engine=cpu
  if [[ $what == periodic_cuda ]]; then
    engine=cuda
    skip_without_cuda
  fi
  "$matcha" ic clumps -n 8192 --seed 3 --out clumps.hdf5 >/dev/null
  args=(run --ic clumps.hdf5 --engine "$engine" --reuse off --dt 0.0009765625 --t-end 0.0078125 --output-interval 0.00390625)
  "$matcha" "${args[@]}" --out one >one.txt
  on_ranks "${args[@]}" --out ranks >ranks.txt
  cat ranks.txt
  # The mesh held the other way (--pm-ranks; auto: slabs, FFTW's on the CPU engine, cuFFT's beside the CUDA
  # engine): the same run to the mesh's rounding.
  on_ranks "${args[@]}" --pm-ranks replicated --out other-mesh >other-mesh.txt
  grep -q "on every rank" other-mesh.txt || {
    echo "FAILED: --pm-ranks replicated: the solver line does not say so" >&2
    exit 1
  }
  # A periodic checkpoint continued on as many ranks: 8 steps, then --restart to 16, against 16 uninterrupted.
  on_ranks "${args[@]}" --checkpoint-interval 0 --t-end 0.015625 --out whole >whole.txt
  on_ranks "${args[@]}" --checkpoint-interval 0 --out part >part.txt
  on_ranks run --restart part --t-end 0.015625 >part-continued.txt
  "$python" - "$ranks" "$what" <<'EOF'
import sys
ranks, what = int(sys.argv[1]), sys.argv[2]
try:
    import h5py, numpy as np
except ImportError:
    if what != "periodic_cuda":  # a GPU machine may lack them: the diagnostics still compare the runs
        raise
    h5py = None
def table(folder):
    return [l.split() for l in open(folder + "/diagnostics.log") if not l.startswith("#")]
one, many = table("one"), table("ranks")
failed = []
if len(one) != len(many) or len(one) != 3:
    failed.append(f"diagnostics lines: {len(one)} on one rank, {len(many)} on {ranks}")
for a, b in zip(many, table("other-mesh")):
    for column, name in ((1, "E"), (4, "W")):
        x, y = float(a[column]), float(b[column])
        print(f"t = {a[0]}: {name} {x} with the default mesh, {y} with the mesh held the other way")
        if abs(x - y) > 1e-5 * abs(x):
            failed.append(f"t = {a[0]}: {name} {y} with the mesh held the other way against {x}")
whole, part = table("whole"), table("part")
slabs = "FFTW" if what == "periodic" else "cuFFT"
if ranks > 1 and f"{slabs} slabs over {ranks} ranks" not in open("ranks.txt").read():
    failed.append(f"the run on {ranks} ranks does not put its mesh in {slabs} slabs")
if what == "periodic":
    if len(whole) != 5 or part != whole:
        failed.append(f"restarted on {ranks} ranks: the diagnostics lines differ from 16 uninterrupted steps'")
else:  # the cuFFT mesh's atomic deposit sums in whatever order the warps land: the last bits differ between runs
    if len(whole) != 5 or len(part) != 5:
        failed.append(f"restarted on {ranks} ranks: {len(part)} diagnostics lines, {len(whole)} uninterrupted")
    for a, b in zip(whole, part):
        for column, name in ((1, "E"), (3, "T"), (4, "W")):
            x, y = float(a[column]), float(b[column])
            if abs(x - y) > 1e-9 * abs(x):
                failed.append(f"t = {a[0]}: {name} {y} restarted on {ranks} ranks against {x} uninterrupted")
for a, b in zip(one, many):
    for column, name in ((1, "E"), (3, "T"), (4, "W")):
        x, y = float(a[column]), float(b[column])
        if abs(x - y) > 1e-4 * abs(x):
            failed.append(f"t = {a[0]}: {name} {y} on {ranks} ranks against {x} on one")
    print(f"t = {a[0]}: E {a[1]} / {b[1]}  W {a[4]} / {b[4]}")
if h5py is None:
    print("h5py is not installed: the snapshots were not compared")
    for line in failed:
        print("FAILED:", line, file=sys.stderr)
    sys.exit(1 if failed else 0)
with h5py.File("whole/snapshot_004.hdf5") as fw, h5py.File("part/snapshot_004.hdf5") as fp:
    for field in ("ParticleIDs", "Coordinates", "Velocities"):
        if not np.array_equal(fw["PartType1/" + field][:], fp["PartType1/" + field][:]):
            failed.append(f"the restarted periodic run's final {field} differ from the uninterrupted run's")
with h5py.File("one/snapshot_002.hdf5") as f1, h5py.File("ranks/snapshot_002.hdf5") as fk:
    box = fk["Header"].attrs["BoxSize"]
    if box != f1["Header"].attrs["BoxSize"] or not box > 0:
        failed.append(f"the snapshot on {ranks} ranks records the box {box}")
    ids1, idsk = f1["PartType1/ParticleIDs"][:], fk["PartType1/ParticleIDs"][:]
    if len(idsk) != 8192 or len(np.unique(idsk)) != 8192 or set(idsk) != set(ids1):
        failed.append(f"the final snapshot on {ranks} ranks does not hold every id once")
    else:
        x1 = f1["PartType1/Coordinates"][:][np.argsort(ids1)]
        xk = fk["PartType1/Coordinates"][:][np.argsort(idsk)]
        if xk.min() < 0 or xk.max() >= box:
            failed.append(f"bodies outside [0, {box})^3 on {ranks} ranks")
        d = np.abs(x1 - xk)
        worst = np.minimum(d, box - d).max()  # the shorter way round: a body may sit across a face on one side
        print(f"largest position difference {worst:.2e} (box {box})")
        if worst > 1e-4 * box:
            failed.append(f"positions differ by up to {worst:.2e} from one rank's")
for line in failed:
    print("FAILED:", line, file=sys.stderr)
sys.exit(1 if failed else 0)
EOF
  ;;
comoving)
  # A comoving run of a 16^3 2LPT box (50 Mpc/h, z = 49 -> 3; TreePM with long-range and block time steps, the
  # defaults) on K ranks against one rank; a K-rank checkpoint continued on K ranks against the uninterrupted K-rank
  # run; and run --cosmology (the ICs made in shares, each rank its planes) against the file's run on K ranks.
  "$matcha" ic cosmo --grid 16 --box 50 --seed 3 --out cosmo.hdf5 >/dev/null
  args=(run --ic cosmo.hdf5 --engine cpu --checkpoint-interval 0 --z-end 3 --output-z 6,4)
  "$matcha" "${args[@]}" --out one >one.txt
  on_ranks "${args[@]}" --out ranks >ranks.txt
  cat ranks.txt
  on_ranks run --ic cosmo.hdf5 --engine cpu --checkpoint-interval 0 --z-end 4 --output-z 6 --out halves >halves.txt
  cp -r halves halves-on-one
  on_ranks run --restart halves --z-end 3 --output-z 6,4 >halves-continued.txt
  "$matcha" run --restart halves-on-one --z-end 3 --output-z 6,4 >halves-on-one.txt
  on_ranks run --cosmology --grid 16 --box 50 --seed 3 --engine cpu --z-end 6 --out made >made.txt
  # ic cosmo on K ranks: a set of K files, each rank's planes, and a run from it.
  on_ranks ic cosmo --grid 16 --box 50 --seed 3 --out set.hdf5 >set.txt
  on_ranks run --ic set.hdf5 --engine cpu --z-end 6 --out from-set >from-set.txt
  "$python" - "$ranks" <<'EOF'
import sys, json
import h5py, numpy as np
ranks = int(sys.argv[1])
def table(folder):
    return [l.split() for l in open(folder + "/diagnostics.log") if not l.startswith("#")]
failed = []
one, many, halves, made = table("one"), table("ranks"), table("halves"), table("made")
# The set written on K ranks against the one-process file: K files of GADGET's multi-file header, the one file's
# bodies in its order (FFTW-MPI's transforms against FFTW's: 0 measured at 16^3), its header and parameters.
names = [f"set.{k}.hdf5" for k in range(ranks)] if ranks > 1 else ["set.hdf5"]
with h5py.File("cosmo.hdf5") as f1:
    parts = [h5py.File(name) for name in names]
    whole = {field: f1["PartType1/" + field][:] for field in ("ParticleIDs", "Coordinates", "Velocities")}
    joined = {field: np.concatenate([p["PartType1/" + field][:] for p in parts if "PartType1" in p])
              for field in whole}
    counts = [int(p["Header"].attrs["NumPart_ThisFile"][1]) for p in parts]
    print(f"ic cosmo on {ranks} ranks: files {names}, bodies {counts}")
    for p in parts:
        h = p["Header"].attrs
        if h["NumFilesPerSnapshot"] != ranks or h["NumPart_Total"][1] != 4096:
            failed.append(f"{p.filename}: NumFilesPerSnapshot {h['NumFilesPerSnapshot']}, NumPart_Total {h['NumPart_Total']}")
        for key in ("Time", "Redshift", "BoxSize", "Omega0", "OmegaLambda", "HubbleParam", "MassTable"):
            if not np.array_equal(h[key], f1["Header"].attrs[key]):
                failed.append(f"{p.filename}: Header {key} {h[key]} against the one file's {f1['Header'].attrs[key]}")
        for key in ("grid", "box", "seed", "lpt", "z_start"):
            if key in f1["Parameters"].attrs and p["Parameters"].attrs.get(key) != f1["Parameters"].attrs[key]:
                failed.append(f"{p.filename}: parameter {key} differs from the one file's")
    if sum(counts) != 4096 or not np.array_equal(joined["ParticleIDs"], whole["ParticleIDs"]):
        failed.append(f"the set on {ranks} ranks does not hold the one file's ids in its order")
    else:
        d = np.abs(joined["Coordinates"] - whole["Coordinates"])
        dx = np.minimum(d, 50.0 - d).max()
        dv = np.abs(joined["Velocities"] - whole["Velocities"]).max() / np.sqrt((whole["Velocities"] ** 2).mean())
        print(f"  largest differences from the one file: position {dx:.1e} Mpc/h, velocity {dv:.1e} of the rms")
        if dx > 1e-11 or dv > 1e-11:
            failed.append(f"the set on {ranks} ranks differs from the one file: {dx:.1e} Mpc/h, {dv:.1e} of the rms")
if table("from-set") != many[:2]:
    failed.append(f"a run from the set on {ranks} ranks: the diagnostics to z = 6 differ from the one file's run")
if len(one) != 4 or len(many) != 4:
    failed.append(f"diagnostics lines: {len(one)} on one rank, {len(many)} on {ranks} (the start, z = 6, 4, 3)")
for a, b in zip(one, many):
    # a z K W K+W integral dE_LI/|W| 2K/|W| |P| |x_cm|
    for column, name in ((2, "K"), (3, "W")):
        x, y = float(a[column]), float(b[column])
        if abs(x - y) > 1e-4 * abs(x):
            failed.append(f"z = {a[1]}: {name} {y} on {ranks} ranks against {x} on one")
    x, y = float(a[6]), float(b[6])
    if abs(x - y) > 1e-5:
        failed.append(f"z = {a[1]}: Layzer-Irvine {y} on {ranks} ranks against {x} on one")
    print(f"z = {float(a[1]):g}: K {a[2]} / {b[2]}  dE_LI/|W| {a[6]} / {b[6]}")
if halves != many:
    failed.append(f"a checkpoint continued on {ranks} ranks: the diagnostics lines differ from the uninterrupted run's")
# Block time steps: calls of some groups keep the last call's tree (DistributedTreeSolver), the restart above included.
kept = [r["kept_tree_calls"] for r in json.load(open("ranks/summary.json"))["rank_timings"]]
print(f"calls on kept trees per rank: {kept}")
if len(kept) != ranks or len(set(kept)) != 1 or kept[0] == 0:
    failed.append(f"calls on kept trees per rank: {kept} (block steps should keep some, every rank alike)")
elsewhere = table("halves-on-one")
if len(elsewhere) != 4 or any(abs(float(a[2]) - float(b[2])) > 1e-4 * float(a[2]) for a, b in zip(many, elsewhere)):
    failed.append(f"a {ranks}-rank checkpoint continued on one rank: K differs from the uninterrupted run's")
if len(made) != 2 or made != many[:2]:
    failed.append(f"run --cosmology on {ranks} ranks: the diagnostics to z = 6 differ from the file's run")
s1, sk = json.load(open("one/summary.json")), json.load(open("ranks/summary.json"))
if sk.get("ranks") != ranks or "comoving" not in sk or sk["status"] != "complete":
    failed.append(f"summary.json on {ranks} ranks: {sk.get('ranks')} ranks, status {sk['status']}, no comoving record")
elif abs(sk["steps"] - s1["steps"]) > 0.02 * s1["steps"]:
    failed.append(f"{sk['steps']} steps on {ranks} ranks against {s1['steps']} on one")
else:
    print(f"steps {s1['steps']} / {sk['steps']}, long-range steps {s1['comoving']['long_range_steps']} / "
          f"{sk['comoving']['long_range_steps']}")
with h5py.File("ranks/snapshot_003.hdf5") as fk, h5py.File("halves/snapshot_003.hdf5") as fh:
    for field in ("ParticleIDs", "Coordinates", "Velocities"):
        if not np.array_equal(fk["PartType1/" + field][:], fh["PartType1/" + field][:]):
            failed.append(f"the continued run's final {field} differ from the uninterrupted run's")
with h5py.File("one/snapshot_003.hdf5") as f1, h5py.File("ranks/snapshot_003.hdf5") as fk:
    header = fk["Header"].attrs
    box = header["BoxSize"]
    if abs(header["Time"] - 0.25) > 1e-12 or abs(header["Redshift"] - 3) > 1e-9 or header["Omega0"] != f1["Header"].attrs["Omega0"]:
        failed.append(f"the final snapshot's header on {ranks} ranks: Time {header['Time']}, Redshift {header['Redshift']}")
    ids1, idsk = f1["PartType1/ParticleIDs"][:], fk["PartType1/ParticleIDs"][:]
    if len(idsk) != 4096 or len(np.unique(idsk)) != 4096 or set(idsk) != set(ids1):
        failed.append(f"the final snapshot on {ranks} ranks does not hold every id once")
    else:
        o1, ok = np.argsort(ids1), np.argsort(idsk)
        x1, xk = f1["PartType1/Coordinates"][:][o1], fk["PartType1/Coordinates"][:][ok]
        v1, vk = f1["PartType1/Velocities"][:][o1], fk["PartType1/Velocities"][:][ok]
        d = np.abs(x1 - xk)
        worst = np.minimum(d, box - d).max()
        dv = np.abs(v1 - vk).max() / np.sqrt((v1 ** 2).mean())
        print(f"largest position difference {worst:.2e} (box {box}), velocity {dv:.2e} of the rms")
        if worst > 1e-4 * box or dv > 1e-3:
            failed.append(f"positions differ by up to {worst:.2e}, velocities {dv:.2e} of the rms, from one rank's")
for line in failed:
    print("FAILED:", line, file=sys.stderr)
sys.exit(1 if failed else 0)
EOF
  ;;
compare)
  # A Plummer sphere against direct summation, and a periodic box of clumps (TreePM, the box's opening settings)
  # against Ewald: the same percentiles on K ranks as on one.
  # A cosmological file compares as any periodic box.
  "$matcha" ic clumps -n 8192 --seed 3 --out clumps.hdf5 >/dev/null
  "$matcha" ic cosmo --grid 16 --seed 3 --out cosmo.hdf5 >/dev/null
  plummer=(compare -n 8192 --seed 5 --engine cpu --theta 0.5 --sample 1024 --reference cpu-double --json)
  periodic=(compare --ic clumps.hdf5 --engine cpu --sample 1024 --json)
  cosmo=(compare --ic cosmo.hdf5 --engine cpu --sample 512 --json)
  "$matcha" "${plummer[@]}" >one.json
  on_ranks "${plummer[@]}" >ranks.json
  "$matcha" "${periodic[@]}" >one-periodic.json
  on_ranks "${periodic[@]}" >ranks-periodic.json
  "$matcha" "${cosmo[@]}" >one-cosmo.json
  on_ranks "${cosmo[@]}" >ranks-cosmo.json
  "$python" - "$ranks" <<'EOF'
import sys, json
ranks = int(sys.argv[1])
failed = []
for name, suffix in (("Plummer", ""), ("periodic clumps", "-periodic"), ("a 16^3 2LPT box", "-cosmo")):
    one, many = json.load(open(f"one{suffix}.json")), json.load(open(f"ranks{suffix}.json"))
    for a, b in zip(one["rows"], many["rows"]):
        for key in ("median", "p99"):
            x, y = a["error"][key], b["error"][key]
            print(f"{name}, {a['multipole']} theta {a['theta']}: {key} {x:.3e} on one rank, {y:.3e} on {ranks}")
            if abs(y - x) > 0.10 * x:
                failed.append(f"{name}: {key} {y:.3e} on {ranks} ranks against {x:.3e} on one")
    if one["bodies"] != many["bodies"] or one["sample"] != many["sample"] or len(one["rows"]) != len(many["rows"]):
        failed.append(f"{name}: the JSON's bodies, sample or rows differ")
    if suffix and one.get("reference") != many.get("reference"):  # the direct sum's names its thread count
        failed.append(f"{name}: the reference differs: {one.get('reference')} against {many.get('reference')}")
for line in failed:
    print("FAILED:", line, file=sys.stderr)
sys.exit(1 if failed else 0)
EOF
  ;;
bad)
  failed=0
  expect_refusal() {  # expected text, then the arguments
    local expected=$1
    shift
    local status=0
    on_ranks "$@" >out.txt 2>err.txt || status=$?
    local lines
    lines=$(grep -c "matcha: error" err.txt || true)
    if [[ $status -ne 2 || $lines -ne 1 ]] || ! grep -q "$expected" err.txt; then
      echo "FAILED: matcha $* on $ranks ranks: exit $status, $lines error lines (expected 2, 1, '$expected'):" >&2
      cat err.txt >&2
      failed=1
    else
      cat err.txt
    fi
  }
  expect_refusal "every rank needs at least one body" run -n $((ranks - 1)) --engine cpu --out few
  # Comoving runs on K ranks refuse what one rank refuses: a cosmological file without its box, a comoving option
  # for a run that is not comoving.
  "$matcha" ic cosmo --grid 8 --seed 3 --out cosmo8.hdf5 >/dev/null
  expect_refusal "comoving runs are periodic" run --ic cosmo8.hdf5 --open --engine cpu --out open-cosmo
  expect_refusal "is an option of comoving runs" run -n 64 --z-end 3 --engine cpu --out plummer-z-end
  # Memory: a run that fits one rank's share (20 MiB) but not the host's ranks together is refused before anything is
  # written; --dry-run prints rank 0's estimate and the host's total, runs nothing and writes nothing.
  MATCHA_MEMORY_LIMIT=20M expect_refusal "of host memory on a host of $ranks ranks" run -n 4096 --engine cpu \
    --out too-big
  on_ranks run -n 4096 --engine cpu --dry-run --json --out dry >dry.json
  if [[ -e too-big || -e dry ]] || ! "$python" -c "import json, sys; d = json.load(open('dry.json')); \
sys.exit(0 if d['ranks'] == $ranks and d['host_ranks'] == $ranks and d['host_total_bytes'] > d['host_bytes'] else 1)"; then
    echo "FAILED: the memory check or --dry-run on $ranks ranks wrote a folder or its JSON lacks the host's total" >&2
    failed=1
  fi
  # A run that would fit but for rank 0's copy of the whole system for the snapshots it gathers is told so, with what
  # it needs writing a file a rank instead.
  on_ranks run -n 65536 --engine cpu --dry-run --json --out dry >gathered.json
  on_ranks run -n 65536 --engine cpu --dry-run --json --snapshot-files ranks --out dry >per-rank.json
  limit=$("$python" -c "import json
gathered, per_rank = (json.load(open(f))['host_total_bytes'] for f in ('gathered.json', 'per-rank.json'))
print((gathered + per_rank) // 2 if per_rank < gathered else 0)")
  MATCHA_MEMORY_LIMIT=$limit expect_refusal "of it for the whole system rank 0 gathers for each snapshot: with \
--snapshot-files ranks" run -n 65536 --engine cpu --out too-big-gathered
  if [[ -e too-big-gathered || $limit == 0 ]]; then
    echo "FAILED: gathered snapshots' memory on $ranks ranks: limit $limit, folder $(ls -d too-big-gathered 2>&1)" >&2
    failed=1
  fi
  if [[ -e few/snapshot_000.hdf5 ]]; then
    echo "FAILED: a snapshot was written by a refused run" >&2
    failed=1
  fi
  expect_refusal "compare --engine cuda on $ranks ranks is not supported yet" compare -n 64 --engine cuda
  expect_refusal "every rank needs at least one body" compare -n $((ranks - 1)) --engine cpu
  expect_refusal "runs on one rank" ic plummer -n 64 --out plummer.hdf5
  # ic cosmo on K ranks: bad options, a file of the set that exists, are refused before any file is written; with
  # --overwrite the new set replaces the one file of its name and an earlier, larger set's parts, and nothing is left
  # beside them.
  expect_refusal "points per side" ic cosmo --grid 3 --out tiny-set.hdf5
  on_ranks ic cosmo --grid 8 --seed 3 --out set.hdf5 >/dev/null
  expect_refusal "already exists; pass --overwrite" ic cosmo --grid 8 --seed 4 --out set.hdf5
  cp cosmo8.hdf5 set.hdf5
  cp cosmo8.hdf5 "set.$ranks.hdf5"
  on_ranks ic cosmo --grid 8 --seed 4 --out set.hdf5 --overwrite >/dev/null
  left=$(ls -A | grep -E '^\.?(tiny-)?set\.' | tr '\n' ' ')
  expected=$(for ((k = 0; k < ranks; ++k)); do echo -n "set.$k.hdf5 "; done)
  if [[ $left != "$expected" ]]; then
    echo "FAILED: ic cosmo --overwrite on $ranks ranks left '$left' (expected '$expected')" >&2
    failed=1
  fi
  # A rank that dies while the new set goes into place over a whole old one (MATCHA_TEST_CRASH_RANK: the last rank,
  # before its rename; rank 0, once the others are renamed) leaves no part 0, where readers start: the set is refused,
  # never read as a mix of the two sets' parts. A run afterwards replaces the remains.
  for rank in $((ranks - 1)) 0; do
    on_ranks ic cosmo --grid 8 --seed 4 --out set.hdf5 --overwrite >/dev/null
    status=0
    MATCHA_TEST_CRASH_RANK=$rank "$mpiexec" -n "$ranks" --oversubscribe -x MATCHA_TEST_CRASH_RANK "$matcha" ic cosmo \
      --grid 8 --seed 5 --out set.hdf5 --overwrite >/dev/null 2>crash.txt || status=$?
    if [[ $status -eq 0 || -e set.0.hdf5 ]]; then
      echo "FAILED: rank $rank dying among the renames on $ranks ranks: exit $status, set.0.hdf5 $(ls set.0.hdf5 2>&1)" >&2
      failed=1
    fi
  done
  expect_refusal "cannot read snapshot 'set.hdf5': no such file" run --ic set.hdf5 --engine cpu --out from-crashed-set
  on_ranks ic cosmo --grid 8 --seed 4 --out set.hdf5 --overwrite >/dev/null
  left=$(ls -A | grep -E '^\.?set\.' | tr '\n' ' ')
  if [[ $left != "$expected" ]]; then
    echo "FAILED: ic cosmo --overwrite after the crashes on $ranks ranks left '$left' (expected '$expected')" >&2
    failed=1
  fi
  # Each rank reads its share of an IC file: what one rank's read refuses of the whole file, the ranks refuse too. An
  # id held by the first and the last rank's shares; a NaN in the last rank's share alone.
  "$matcha" ic plummer -n 256 --seed 5 --out shared.hdf5 >/dev/null
  cp shared.hdf5 twice.hdf5
  cp shared.hdf5 nan.hdf5
  "$python" -c "import h5py
with h5py.File('twice.hdf5', 'r+') as f:
    ids = f['PartType1/ParticleIDs']
    ids[255] = ids[0]
with h5py.File('nan.hdf5', 'r+') as f:
    f['PartType1/Coordinates'][250, 1] = float('nan')"
  expect_refusal "repeats ParticleID" run --ic twice.hdf5 --engine cpu --out twice
  expect_refusal "NaN or infinite" run --ic nan.hdf5 --engine cpu --out nan
  if [[ -e twice || -e nan ]]; then
    echo "FAILED: a refused IC file left a run folder" >&2
    failed=1
  fi
  # A checkpoint of fewer bodies than ranks (written on one rank) is refused before the folder changes.
  "$matcha" run -n $((ranks - 1)) --engine cpu --dt 0.015625 --t-end 0.03125 --checkpoint-interval 0 --out tiny >/dev/null
  cp tiny/diagnostics.log tiny-diagnostics.log
  expect_refusal "every rank needs at least one body" run --restart tiny --t-end 0.0625
  if ! cmp -s tiny/diagnostics.log tiny-diagnostics.log || [[ -e tiny/RUNNING ]]; then
    echo "FAILED: a refused restart changed its run folder" >&2
    failed=1
  fi
  # A checkpoint of K ranks whose shares do not add up to its bodies is refused, not split wrongly.
  on_ranks run -n 256 --engine cpu --dt 0.015625 --t-end 0.03125 --checkpoint-interval 0 --out shares >/dev/null
  "$python" -c "import h5py
with h5py.File('shares/checkpoint.hdf5', 'r+') as f:
    counts = f['Checkpoint/Run/rank_bodies']
    counts[0] = counts[0] + 1"
  expect_refusal "the checkpoint's rank_bodies are corrupt" run --restart shares --t-end 0.0625
  # Another dt, or an end no later than the checkpoint's step, on K ranks and on one (the checks they share).
  expect_refusal "a restart continues with its dt" run --restart shares --t-end 0.0625 --dt 0.0078125
  expect_refusal "give a later --t-end" run --restart shares --t-end 0.015625
  expect_refusal "makes a start and cannot be given with it" run --restart shares --t-end 0.0625 -n 512
  # A checkpoint whose parts lost one is refused, and the folder stays as it was.
  if [[ $ranks -gt 1 ]]; then
    on_ranks run -n 256 --engine cpu --dt 0.015625 --t-end 0.03125 --checkpoint-interval 0 --out lost >/dev/null
    rm lost/checkpoint.parts-*/checkpoint.$((ranks - 1)).hdf5
    cp lost/diagnostics.log lost-diagnostics.log
    expect_refusal "the checkpoint's parts folder lacks this part" run --restart lost --t-end 0.0625
    if ! cmp -s lost/diagnostics.log lost-diagnostics.log || [[ -e lost/RUNNING ]]; then
      echo "FAILED: a restart from a checkpoint missing a part changed its run folder" >&2
      failed=1
    fi
  fi
  status=0
  "$matcha" run --restart tiny --t-end 0.0625 --dt 0.0078125 >out.txt 2>err.txt || status=$?
  if [[ $status -ne 2 ]] || ! grep -q "a restart continues with its dt" err.txt; then
    echo "FAILED: a one-rank restart with another dt: exit $status" >&2
    cat err.txt >&2
    failed=1
  fi
  exit $failed
  ;;
fail)
  failed=0
  for rank in $((ranks - 1)) 0; do
    status=0
    MATCHA_TEST_FAIL_RANK=$rank "$mpiexec" -n "$ranks" --oversubscribe -x MATCHA_TEST_FAIL_RANK "$matcha" run -n 1024 \
      --engine cpu --dt 0.015625 --t-end 0.125 --output-interval 0.015625 --out fail$rank >out.txt 2>err.txt || status=$?
    lines=$(grep -c "matcha: error" err.txt || true)
    if [[ $status -ne 3 || $lines -ne 1 ]] || ! grep -q "matcha: error: rank $rank: step 2: a failure injected" err.txt; then
      echo "FAILED: rank $rank failing alone on $ranks ranks: exit $status, $lines error lines (expected 3, 1):" >&2
      cat err.txt >&2
      failed=1
    fi
    grep "matcha: error" err.txt
    if ls fail$rank | grep -v -E '^(snapshot_00[0-9]\.hdf5|checkpoint\.hdf5|checkpoint\.parts-[0-9.]+|diagnostics\.log|used_parameters\.toml|summary\.json|RUNNING)$'; then
      echo "FAILED: rank $rank failing left the files above in the run folder" >&2
      failed=1
    fi
    # Every snapshot whole; the checkpoint names one folder of parts, whose files hold every body once.
    "$python" -c "import h5py, glob, os
for name in sorted(glob.glob('fail$rank/snapshot_*.hdf5')):
    with h5py.File(name) as f:
        assert len(f['PartType1/ParticleIDs']) == 1024, name
if os.path.exists('fail$rank/checkpoint.hdf5'):
    with h5py.File('fail$rank/checkpoint.hdf5') as f:
        parts = f['Checkpoint'].attrs['Parts']
        parts = parts.decode() if isinstance(parts, bytes) else parts
    ids = []
    for k in range($ranks):
        with h5py.File(f'fail$rank/{parts}/checkpoint.{k}.hdf5') as f:
            ids.extend(f['PartType1/ParticleIDs'][:])
    assert sorted(ids) == list(range(1024)), 'the checkpoint parts do not hold every body once'
    assert glob.glob('fail$rank/checkpoint.parts-*') == ['fail$rank/' + parts], 'stale checkpoint parts'" || failed=1
    if [[ $rank -eq 0 ]] && { [[ -e fail0/RUNNING ]] || ! grep -q '"status": "failed"' fail0/summary.json; }; then
      echo "FAILED: rank 0 failed and the run folder does not say so" >&2
      failed=1
    fi
  done
  exit $failed
  ;;
hermite)
  # Hermite on K ranks: every rank integrates all bodies, the force sums split over the ranks' engines by j-particle
  # and combined alike on every rank; rank 0 alone writes the folder.
  args=(run -n 512 --seed 6 --integrator hermite --solver direct --engine cpu --eps 0.01 --output-interval 0.0625 --checkpoint-interval 0)
  "$matcha" "${args[@]}" --t-end 0.25 --out one >one.txt
  on_ranks "${args[@]}" --t-end 0.25 --out whole >whole.txt
  cat whole.txt
  # Stopped at 0.125 and continued on K ranks: the uninterrupted K-rank run bit for bit; on one rank: within rounding.
  on_ranks "${args[@]}" --t-end 0.125 --out part >/dev/null
  cp -r part other
  on_ranks run --restart part --t-end 0.25 >part-continued.txt
  "$matcha" run --restart other --t-end 0.25 >other-continued.txt
  on_ranks "${args[@]}" --t-end 0.25 --dry-run --out dry >dry.txt
  if [[ -e dry ]] || ! grep -q "dry-run" dry.txt; then
    echo "FAILED: a Hermite --dry-run on $ranks ranks wrote a folder or printed no estimate" >&2
    exit 1
  fi
  "$python" - "$ranks" <<'EOF'
import json, os, sys
ranks = int(sys.argv[1])
def table(folder):
    return [l.split() for l in open(folder + "/diagnostics.log") if not l.startswith("#")]
failed = []
one, whole, part, other = table("one"), table("whole"), table("part"), table("other")
if len(one) != 5 or len(whole) != 5:
    failed.append(f"{len(one)} and {len(whole)} diagnostics lines, not 5")
for a, b in zip(one, whole):
    print(f"t = {a[0]}: E {a[1]} on one rank, {b[1]} on {ranks}")
    for column, name in ((1, "E"), (3, "T"), (4, "W")):
        x, y = float(a[column]), float(b[column])
        if abs(x - y) > 1e-7 * abs(x):  # ~1e-13 seen: rounding, unless a body's block step rounds the other way
            failed.append(f"t = {a[0]}: {name} {y} on {ranks} ranks against {x} on one")
if part != whole:
    failed.append(f"restarted on {ranks} ranks: the diagnostics lines differ from the uninterrupted run's")
for a, b in zip(whole, other):
    if abs(float(a[1]) - float(b[1])) > 1e-7 * abs(float(a[1])):
        failed.append(f"t = {a[0]}: E {b[1]} restarted on one rank against {a[1]}")
summary = json.load(open("whole/summary.json"))
if ranks > 1 and f"over {ranks} ranks" not in summary["engine"]:
    failed.append(f"summary.json's engine does not say it spans the ranks: {summary['engine']}")
if sorted(os.listdir("whole")) != sorted(os.listdir("one")):
    failed.append(f"the folders differ: {sorted(os.listdir('whole'))} against {sorted(os.listdir('one'))}")
try:
    import h5py, numpy as np
    with h5py.File("one/snapshot_004.hdf5") as f1, h5py.File("whole/snapshot_004.hdf5") as fk, \
            h5py.File("part/snapshot_004.hdf5") as fp:
        worst = np.abs(f1["PartType1/Coordinates"][:] - fk["PartType1/Coordinates"][:]).max()
        print(f"final positions: largest difference {worst:.2e} between one rank and {ranks}")
        if worst > 1e-6:
            failed.append(f"final positions differ by {worst:.2e} between one rank and {ranks}")
        if not np.array_equal(fk["PartType1/Coordinates"][:], fp["PartType1/Coordinates"][:]):
            failed.append("the restarted run's final positions differ from the uninterrupted run's")
except ImportError:
    print("h5py is not installed: the snapshots were not compared")
for line in failed:
    print("FAILED:", line, file=sys.stderr)
sys.exit(1 if failed else 0)
EOF
  ;;
restart | restart_cuda)
  engine=cpu
  if [[ $what == restart_cuda ]]; then
    engine=cuda
    skip_without_cuda
  fi
  args=(run -n 2048 --seed 4 --engine "$engine" --reuse off --dt 0.015625 --output-interval 0.0625 --checkpoint-interval 0)
  on_ranks "${args[@]}" --t-end 0.25 --out whole >whole.txt
  on_ranks "${args[@]}" --t-end 0.125 --out part >part.txt
  cp -r part other
  on_ranks run --restart part --t-end 0.25 >part-continued.txt
  cat part-continued.txt
  other_ranks=$((ranks == 1 ? 2 : ranks / 2))
  if [[ $other_ranks -eq 1 ]]; then
    "$matcha" run --restart other --t-end 0.25 >other-continued.txt
  else
    "$mpiexec" -n "$other_ranks" --oversubscribe "$matcha" run --restart other --t-end 0.25 >other-continued.txt
  fi
  "$python" - "$ranks" "$other_ranks" "$what" <<'EOF'
import sys
ranks, other, what = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
try:
    import h5py, numpy as np
except ImportError:
    if what != "restart_cuda":  # a GPU machine may lack them: the diagnostics still compare the runs
        raise
    h5py = None
def table(folder):
    return [l.split() for l in open(folder + "/diagnostics.log") if not l.startswith("#")]
failed = []
whole, part, moved = table("whole"), table("part"), table("other")
if len(whole) != 5:
    failed.append(f"{len(whole)} diagnostics lines in the uninterrupted run, not 5")
if part != whole:
    failed.append(f"restarted on {ranks} ranks: the diagnostics lines differ from the uninterrupted run's")
if len(moved) != len(whole):
    failed.append(f"restarted on {other} ranks: {len(moved)} diagnostics lines")
for a, b in zip(whole, moved):
    for column, name in ((1, "E"), (3, "T"), (4, "W")):
        x, y = float(a[column]), float(b[column])
        if abs(x - y) > 1e-4 * abs(x):
            failed.append(f"t = {a[0]}: {name} {y} restarted on {other} ranks against {x}")
    print(f"t = {a[0]}: E {a[1]} uninterrupted, {b[1]} restarted on {other} ranks")
if h5py is None:
    print("h5py is not installed: the snapshots were not compared")
    for line in failed:
        print("FAILED:", line, file=sys.stderr)
    sys.exit(1 if failed else 0)
with h5py.File("whole/snapshot_004.hdf5") as fw, h5py.File("part/snapshot_004.hdf5") as fp, \
        h5py.File("other/snapshot_004.hdf5") as fo, h5py.File("part/checkpoint.hdf5") as fc:
    for field in ("ParticleIDs", "Coordinates", "Velocities"):
        if not np.array_equal(fw["PartType1/" + field][:], fp["PartType1/" + field][:]):
            failed.append(f"restarted on {ranks} ranks: the final snapshot's {field} differ from the uninterrupted run's")
    ids_w, ids_o = fw["PartType1/ParticleIDs"][:], fo["PartType1/ParticleIDs"][:]
    if len(ids_o) != 2048 or set(ids_o) != set(ids_w):
        failed.append(f"restarted on {other} ranks: the final snapshot does not hold every id once")
    else:
        worst = np.abs(fw["PartType1/Coordinates"][:][np.argsort(ids_w)]
                       - fo["PartType1/Coordinates"][:][np.argsort(ids_o)]).max()
        print(f"restarted on {other} ranks: largest position difference {worst:.2e}")
        if worst > 1e-4:
            failed.append(f"restarted on {other} ranks: positions differ by up to {worst:.2e}")
    written_on = fc["Checkpoint/Run"].attrs.get("ranks", 1.0)
    if ranks > 1 and written_on != ranks:
        failed.append(f"the checkpoint says it was written on {written_on} ranks, not {ranks}")
    # On K ranks the checkpoint is in parts, one file a rank, written without a gather: the checkpoint file names the
    # folder of the last one (the 7 before it removed) and holds no body; the parts hold every body once.
    import glob, os
    folders = sorted(glob.glob("part/checkpoint.parts-*"))
    if ranks == 1:
        if folders or "PartType1" not in fc:
            failed.append(f"one rank's checkpoint is not one file: {folders}")
    else:
        parts = fc["Checkpoint"].attrs.get("Parts", b"")
        parts = parts.decode() if isinstance(parts, bytes) else parts
        if "PartType1" in fc or folders != ["part/" + parts]:
            failed.append(f"the {ranks}-rank checkpoint names {parts!r} among the folders {folders}")
        else:
            files = sorted(os.listdir("part/" + parts))
            ids = []
            for k in range(ranks):
                with h5py.File(f"part/{parts}/checkpoint.{k}.hdf5") as f:
                    ids.extend(f["PartType1/ParticleIDs"][:])
                    if f["Header"].attrs["NumFilesPerSnapshot"] != ranks:
                        failed.append(f"checkpoint part {k}: NumFilesPerSnapshot is not {ranks}")
            if len(files) != ranks or sorted(ids) != list(range(2048)):
                failed.append(f"the checkpoint's parts {files} do not hold every body once")
for line in failed:
    print("FAILED:", line, file=sys.stderr)
sys.exit(1 if failed else 0)
EOF
  ;;
*)
  echo "$0: unknown test '$what'" >&2
  exit 2
  ;;
esac
