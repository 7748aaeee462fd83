#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The GPU check, run on a machine with a CUDA device: configure (Release, the default CUDA architectures), build with
# every core, run `ctest -L gpu`, run the CUDA benchmarks and dump the SASS of the hot kernels, teeing every log into
# $OUT (default ./device-out) and printing short tables at the end.
#
#   scripts/device-check.sh [BUILD_DIR]           build here (needs the Debian packages of scripts/setup-debian.sh)
#   scripts/device-check.sh bundle [BUILD_DIR]    on a build machine without a GPU: build BUILD_DIR (default
#                                                 build-cuda) and copy what the check needs (every gpu-labelled
#                                                 test as scripts/bundle_gpu_tests.py writes it, the benchmarks,
#                                                 matcha, the shared libraries they use) into build-device/, for a
#                                                 GPU machine that lacks the packages; BUNDLE_TESTS=0 leaves the
#                                                 tests out, BUNDLE_EXTRA="LABEL=PATH ..." adds other matcha
#                                                 binaries as apps/matcha-LABEL (a branch's, for LATE_AB)
#   MATCHA_PREBUILT=1 scripts/device-check.sh     on the GPU machine: use that build-device/ instead of building
#
# Environment: BENCH_FILTER (regex, default: the standard set of scripts/bench.sh), CPU_BENCH_FILTER (bench_cpu's,
# default the tree build and walk), BENCH=0 to skip benchmarks,
# SASS=0 to skip the disassembly, CTEST=0 to skip the tests (CTEST_REGEX: only those matching), PROFILE=1 (PROFILE_TARGETS) for Nsight Compute,
# STEPS=1 (STEP_SIZES, STEP_NCRIT, STEP_THETAS, STEP_RUNS, STEP_T_END; SCALING_FILTER for bench_cpu's core scaling, none: without)
# for whole force calls and run steps with their phase breakdown, ACCURACY=1 for the accuracy
# targets, LARGE=1 (LARGE_SIZES, LARGE_RUN_SIZES, LARGE_FORCE_SIZES) for the memory and steps of the largest runs
# and one force evaluation at 2^28, PERIODIC=1 (PERIODIC_SIZES, PERIODIC_IC) for TreePM against Ewald on the GPU,
# COSMO=1 (COSMO_GRIDS, COSMO_BOX, COSMO_Z_END, COSMO_OPTIONS, COSMO_TIMEOUT) for whole cosmological runs, OVERLAP=1
# (OVERLAP_SIZES, OVERLAP_RUNS, OVERLAP_REPEAT, OVERLAP_COSMO_GRID) for the periodic call overlapped and sequential,
# SLABS=1 (SLABS_CASES, SLABS_COUNTS, SLABS_REPEAT, SLABS_BACKEND, SLABS_OPTIONS) for the particle mesh in slabs over K ranks of the host,
# PERIODIC_STEPS=1 (PSTEP_SIZES, PSTEP_RUNS, PSTEP_COSMO_GRID, PSTEP_COSMO_RUNS) for periodic steps with and without reuse,
# GROWTH=1 (GROWTH_GRID, GROWTH_MODE, GROWTH_TIMEOUT) for the linear-growth check at full size, HERMITE=1
# (HERMITE_SIZES, HERMITE_TIMEOUT, HERMITE_BENCH=0 for the runs alone) for kirin's Tables 1-4 and CUNBODY-1's
# Tables 2-3 beside matcha's Hermite runs and libraries, TUNE=1 (TUNE_N, TUNE_TARGET, TUNE_BUDGET, TUNE_HAND) for
# matcha tune against the best hand-picked setting, RANKS=1 (RANKS_SIZES, RANKS_COUNTS or RANKS_RUNS, RANKS_STEPS, RANKS_OPTIONS) for
# matcha run on K ranks with the CUDA engine on each, RANKS_SCALING=1 (RANKS_PER_RANK, RANKS_TOTAL) for its weak and
# strong scaling runs and tables, RANKS_COSMO=1 (RANKS_COSMO_GRID, RANKS_COSMO_COUNTS,
# RANKS_COSMO_Z_END, RANKS_COSMO_TIMEOUT) for a comoving run on K ranks, LATE_AB=1 (LATE_GRID, LATE_Z, LATE_RUNS, LATE_OUTPUT_Z,
# LATE_SECONDS) for an A/B of a comoving run's late steps from one checkpoint, LET_EXPORT=1 (LET_SIZES, LET_CORES,
# LET_OPTIONS) for the local essential tree's pruning against the walk.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD

if [ "${1:-}" = bundle ]; then
  build=${2:-build-cuda}
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null || exit 1
  cmake --build "$build" -j "$(nproc)" || exit 1
  rm -rf build-device
  mkdir -p build-device/bench build-device/apps build-device/bin build-device/lib-all
  # Every gpu-labelled test (bundle_gpu_tests.py: the executables they run, a ctest file with placeholders), unless
  # BUNDLE_TESTS=0 (a call that only runs matcha: room for BUNDLE_EXTRA), the benchmarks and matcha.
  test_binaries=()
  if [ "${BUNDLE_TESTS:-1}" = 1 ]; then
    ctest --test-dir "$build" -L gpu --show-only=json-v1 >build-device/gpu-tests.json || exit 1
    /usr/bin/python3 scripts/bundle_gpu_tests.py build-device/gpu-tests.json "$build" . build-device \
      >build-device/bin.txt || exit 1
    mapfile -t test_binaries <build-device/bin.txt
    rm build-device/gpu-tests.json build-device/bin.txt
  fi
  cp "$build/bench/bench_cuda" "$build/bench/bench_cpu" build-device/bench/
  if [ -f "$build/bench/bench_slab_mesh" ]; then cp "$build/bench/bench_slab_mesh" build-device/bench/; fi
  for tool in let_export decomposition_stages; do
    if [ -f "$build/bench/$tool" ]; then cp "$build/bench/$tool" build-device/bench/; fi
  done
  cp "$build/apps/matcha" build-device/apps/
  # BUNDLE_EXTRA="LABEL=PATH ...": other matcha binaries (a branch's) as apps/matcha-LABEL, which LATE_AB runs for the
  # runs of that label.
  for extra in ${BUNDLE_EXTRA:-}; do cp "${extra#*=}" "build-device/apps/matcha-${extra%%=*}" || exit 1; done
  # Every shared library outside the C runtime (ours, matcha_force and matcha_g6, among them); the GPU machine links
  # only those it lacks. Not cuFFT (the mesh's GPU backend): 286 MB, over the device tool's limit; the GPU machine takes
  # its own (see MATCHA_PREBUILT below).
  ldd "${test_binaries[@]}" build-device/bench/bench_* build-device/apps/matcha |
    awk '/=> \//{print $3}' | sort -u | grep -vE '/(libc|libm|libdl|librt|libpthread|libgcc_s|libstdc\+\+)\.so' |
    grep -v '/libcufft\.so' | xargs -r cp -L -t build-device/lib-all/
  # The benchmark smoke test bundled bench_cuda already: one copy, linked where the checks below look for it. Each
  # binary that links the engines carries every kernel variant as SASS and PTX (~25 MB; 7.4 gzipped, 5.2 with xz):
  # the device tool carries at most 64 MiB.
  if [ -f build-device/bin/bench_cuda ]; then ln -sf ../bin/bench_cuda build-device/bench/bench_cuda; fi
  if [ -f build-device/bin/matcha ]; then ln -sf ../bin/matcha build-device/apps/matcha; fi  # the MPI tests' copy
  # Without their symbol tables (the kernels' fatbins stay): ~2.5% less, which keeps the bundle within that limit.
  find build-device/bin build-device/bench build-device/apps build-device/lib-all -type f -print0 |
    xargs -0 -r strip --strip-unneeded
  find build-device/bin build-device/bench build-device/apps build-device/lib-all -type f -print0 |
    xargs -0 -n 1 -P "$(nproc)" xz -9 -T1
  du -sh build-device
  exit 0
fi

OUT=${OUT:-$root/device-out}
mkdir -p "$OUT"
build=${1:-build-device}
jobs=$(nproc)
summary=()

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit,temperature.gpu \
  --format=csv 2>&1 | tee "$OUT/check.log"

if [ "${MATCHA_PREBUILT:-0}" = 1 ]; then
  echo "== prebuilt $build (no configure/build here)"
  find "$build" -name '*.gz' -exec gunzip -f {} +
  # xz where the machine has it, else Python's lzma (the GPU machine's image has Python, maybe not xz).
  find "$build" -name '*.xz' -print0 | while IFS= read -r -d '' packed; do
    if command -v xz >/dev/null; then
      xz -d -f "$packed"
    else
      python3 -c 'import lzma, os, shutil, sys
with lzma.open(sys.argv[1]) as packed, open(sys.argv[1][:-3], "wb") as unpacked: shutil.copyfileobj(packed, unpacked)
os.chmod(sys.argv[1][:-3], 0o755); os.remove(sys.argv[1])' "$packed"
    fi
  done
  if [ -f "$build"/CTestTestfile.cmake ]; then  # not in a bundle made with BUNDLE_TESTS=0
    sed -i -e "s|@BUILD@|$root/$build|g" -e "s|@ROOT@|$root|g" "$build"/CTestTestfile.cmake
  fi
  mkdir -p "$build/work"
  # test_cli runs the matcha binary it was built beside: here, the bundle's.
  export MATCHA_TEST_BINARY="$root/$build/apps/matcha"
  mkdir -p "$build/lib"
  for lib in "$build"/lib-all/*; do  # link only the libraries this machine lacks
    name=$(basename "$lib")
    ldconfig -p | grep -q "/$name\$" || ln -sf "../lib-all/$name" "$build/lib/$name"
  done
  # cuFFT of CUDA 13 (soname libcufft.so.12), left out of the bundle: from the system, or else from a CUDA install or
  # a Python wheel (nvidia-cufft) on this machine.
  if ! ldconfig -p | grep -q '/libcufft\.so\.12$'; then
    cufft=$(find /usr/local/cuda*/lib64 /usr/local/cuda*/targets /usr/lib /usr/local/lib /opt \
      $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null) \
      -name 'libcufft.so.12' 2>/dev/null | head -n 1)
    if [ -n "$cufft" ]; then
      ln -sf "$cufft" "$build/lib/libcufft.so.12"
      echo "cuFFT: $cufft"
    else
      echo "cuFFT (libcufft.so.12 of CUDA 13) not found: the GPU binaries will not load; put it on LD_LIBRARY_PATH"
    fi
  fi
  export LD_LIBRARY_PATH="$root/$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "libraries taken from the bundle: $(ls "$build/lib" | tr '\n' ' ')"
else
  echo "== configure + build ($jobs jobs)"
  if ! cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >"$OUT/configure.log" 2>&1; then
    tail -n 20 "$OUT/configure.log"
    echo "configure failed; on a machine without the Debian packages use the bundle mode (see the header)"
    exit 1
  fi
  cmake --build "$build" -j "$jobs" >"$OUT/build.log" 2>&1 || { tail -n 40 "$OUT/build.log"; exit 1; }
fi

ctest_status=0
if [ "${CTEST:-1}" = 1 ]; then
  echo "== ctest -L gpu"
  # shellcheck disable=SC2086
  (cd "$build" && ctest -L gpu ${CTEST_REGEX:+-R "$CTEST_REGEX"} -V --timeout 600) 2>&1 | tee "$OUT/ctest-gpu.log"
  ctest_status=${PIPESTATUS[0]}
  summary+=("ctest -L gpu: $(grep -E 'tests passed|tests failed' "$OUT/ctest-gpu.log" | tail -n 1)")
  grep -h "E_max" "$OUT/ctest-gpu.log" | sort -u | tee -a "$OUT/check.log"
fi

if [ "${SASS:-1}" = 1 ] && command -v cuobjdump >/dev/null; then
  echo "== SASS of every kernel (sass.txt.gz) and resource usage"
  cuobjdump -sass "$build/bench/bench_cuda" 2>&1 | gzip -9 >"$OUT/sass.txt.gz"
  cuobjdump -res-usage "$build/bench/bench_cuda" 2>&1 | grep -E "Function|REG" >>"$OUT/check.log"
fi

# PROFILE=1: Nsight Compute on one launch of the hot kernels (issue efficiency, stall reasons, occupancy).
if [ "${PROFILE:-0}" = 1 ]; then
  ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
  echo "== profile ($ncu)"
  sections="--section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats
            --section Occupancy --section LaunchStats --section InstructionStats --section MemoryWorkloadAnalysis"
  # PROFILE_TARGETS: "kernel-regex benchmark-filter" pairs separated by ';'
  targets=${PROFILE_TARGETS:-"planKernel plan/float/Plummer/N:1048576/theta:0.50/ncrit:256/mono/p64/;planKernel plan/float/Plummer/N:1048576/theta:0.50/ncrit:512/mono/p64/;planKernel plan/float/Plummer/N:1048576/theta:0.50/ncrit:64/mono/p64/;directKernel direct/float/N:262144/T128/I2/q1/p256/"}
  IFS=';' read -ra target_list <<<"$targets"
  for target in "${target_list[@]}"; do
    set -- $target
    echo "---- $2" >>"$OUT/profile.txt"
    # shellcheck disable=SC2086
    timeout 300 "$ncu" --kernel-name "regex:$1" --launch-skip 1 --launch-count 1 $sections \
      --metrics "smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio" \
      "$build/bench/bench_cuda" --benchmark_filter="$2" --benchmark_min_time=0.001 >>"$OUT/profile.txt" 2>&1
  done
  grep -E "^----|Duration|Issue Slots Busy|Issued Warp|No Eligible|Achieved Occupancy|Registers Per|inst_executed|issue_active" \
    "$OUT/profile.txt"
fi

if [ "${BENCH:-1}" = 1 ]; then
  echo "== benchmarks"
  filter=${BENCH_FILTER:-.}
  (nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv -lms 500 \
    >"$OUT/clocks.csv" 2>&1 &
   echo $! >"/tmp/matcha-smi.pid")
  "$build/bench/bench_cuda" --benchmark_filter="$filter" --benchmark_out="$OUT/bench.json" \
    --benchmark_out_format=json --benchmark_counters_tabular=true 2>&1 | tee "$OUT/bench.txt"
  kill "$(cat /tmp/matcha-smi.pid)" 2>/dev/null
  rm -f /tmp/matcha-smi.pid
  # The CPU side of a GPU force call (sort, tree, groups, walk), on this machine's cores.
  "$build/bench/bench_cpu" --benchmark_filter="${CPU_BENCH_FILTER:-BM_TreeBuildAndWalk}" --benchmark_repetitions=3 \
    --benchmark_report_aggregates_only=true 2>&1 | tee "$OUT/bench-cpu.txt"
  summary+=("SM clock under load (MHz, min/median/max): $(awk -F', ' 'NR>1 && $2+0>1000 {print $2+0}' "$OUT/clocks.csv" |
    sort -n | awk '{v[NR]=$1} END {if (NR) print v[1] "/" v[int((NR+1)/2)] "/" v[NR]; else print "n/a"}')")
fi

# STEPS=1: what users wait for, end to end (the Speed issue): one force call of `matcha compare` (phases, error
# percentiles against GPU double direct sums on a random subsample) and 60 steps (STEP_T_END / dt) of `matcha run
# --timings` with an output every 20 (the phase table; the steady state is the last 20 steps' line, rebuilds
# included and the start-up's first touches of memory left behind) for each run of STEP_RUNS ("label=options;..."; default: reuse
# off and auto) at each of STEP_SIZES (default 2^20 and 2^22), on the Plummer sphere of seed 7; compare sweeps
# STEP_THETAS (a --theta list) for each ncrit of STEP_NCRIT, with STEP_COMPARE_OPTIONS added (e.g. "--nleaf 16");
# STEP_COMPARE=0 leaves the force calls out.
if [ "${STEPS:-0}" = 1 ]; then
  # SCALING_FILTER=none leaves the core scaling out (~150 s on the H200's host, most of a short device call).
  if [ "${SCALING_FILTER:-}" != none ]; then
    echo "== how the CPU phases scale from 1 to all cores"
    "$build/bench/bench_cpu" --benchmark_filter="${SCALING_FILTER:-BM_ParallelArithmetic|^BM_TreePhases/N:(1048576|4194304)/|BM_PeriodicTreePhases/N:4194304/}" \
      --benchmark_min_time=0.3 --benchmark_counters_tabular=true 2>&1 | tee "$OUT/cpu-scaling.txt"
  fi
  echo "== whole force calls and steps"
  matcha="$build/apps/matcha"
  for n in ${STEP_SIZES:-1048576 4194304}; do
    for ncrit in ${STEP_NCRIT:-256}; do
      [ "${STEP_COMPARE:-1}" = 1 ] || break
      # shellcheck disable=SC2086
      "$matcha" compare -n "$n" --seed 7 --ncrit "$ncrit" --theta "${STEP_THETAS:-0.5}" --engine cuda \
        ${STEP_COMPARE_OPTIONS:-} --reference gpu-double --sample 4096 --json >"$OUT/compare-n$n-ncrit$ncrit.json" 2>"$OUT/compare-n$n-ncrit$ncrit.log"
      summary+=("compare N=$n ncrit $ncrit: $(python3 -c 'import json,sys; print("; ".join("theta %.2f: p99 %.3g, %.0f per body, call %.3f s (%s)" % (r["theta"], r["error"]["p99"], r["interactions_per_body"]["total"], r["seconds"]["tree_total"], ", ".join("%s %.1f" % (k, 1e3*v) for k, v in r["phases"].items() if v > 0)) for r in json.load(open(sys.argv[1]))["rows"]))' "$OUT/compare-n$n-ncrit$ncrit.json" 2>&1 | head -c 1500)")
    done
    # STEP_RUNS: runs separated by ';', each "label=options" (default: reuse off and auto at the default settings).
    IFS=';' read -ra runs <<<"${STEP_RUNS:-off=--reuse off;auto=--reuse auto}"
    for spec in "${runs[@]}"; do
      label=${spec%%=*}
      # shellcheck disable=SC2086
      "$matcha" run -n "$n" --seed 7 --engine cuda --dt 0.0078125 --t-end "${STEP_T_END:-0.46875}" \
        --output-interval 0.15625 --diagnostic-potential solver --timings --json ${spec#*=} \
        --overwrite --out "${TMPDIR:-/tmp}/matcha-steps-$n-$label" >"$OUT/run-n$n-$label.json" 2>"$OUT/run-n$n-$label.log"
      tail -n 24 "$OUT/run-n$n-$label.log"
      summary+=("run N=$n $label (${spec#*=}): $(python3 -c 'import json,sys; t=json.load(open(sys.argv[1]))["timings"]; import re; last=[l for l in open(sys.argv[2]) if l.startswith("# timings since last output")]; steady=re.search(r"([0-9.e+]+) ms/step", last[-1]).group(1) if len(last) > 1 else "n/a"; fc=json.load(open(sys.argv[1])).get("force_checks"); checks="" if not fc else ", force checks: worst p99 %.3g, max %.3g over %d" % (fc["worst"]["p99"], fc["worst"]["max"], fc["count"]); print("step %.1f ms (force %.1f ms), last interval %s ms/step, GPU busy %.2f, rebuilds %d, repaired %d%s" % (1e3*t["step_seconds_mean"], 1e3*t["force_call_seconds_mean"], steady, t["gpu_busy_fraction"], t["rebuilds"], t["groups_repaired"], checks))' "$OUT/run-n$n-$label.json" "$OUT/run-n$n-$label.log" 2>&1 | head -c 400)")
    done
  done
fi

# LARGE=1: the largest runs this machine holds. `matcha run --dry-run` at each of LARGE_SIZES (default 2^24, 2^26,
# 2^28): the host and device memory each needs and whether it fits; then, for each size of LARGE_RUN_SIZES (default
# 2^24), LARGE_STEPS steps (default 10) of `matcha run --timings` at theta LARGE_THETA (0.8) for each of LARGE_RUNS
# ("label=options;...", default reuse off and auto), each under LARGE_TIMEOUT seconds (default 240).
if [ "${LARGE:-0}" = 1 ]; then
  echo "== large runs"
  matcha="$build/apps/matcha"
  for n in ${LARGE_SIZES:-16777216 67108864 268435456}; do
    timeout "${LARGE_TIMEOUT:-240}" "$matcha" run -n "$n" --seed 7 --engine cuda --theta "${LARGE_THETA:-0.8}" --dry-run \
      >"$OUT/dry-run-n$n.log" 2>&1
    cat "$OUT/dry-run-n$n.log"
    summary+=("dry run N=$n: $(grep -E '^(host|device):|error' "$OUT/dry-run-n$n.log" | tr '\n' ' ')")
  done
  t_end=$(python3 -c "print(${LARGE_STEPS:-10} / 128)")
  for n in ${LARGE_RUN_SIZES:-16777216}; do
    IFS=';' read -ra runs <<<"${LARGE_RUNS:-off=--reuse off;auto=--reuse auto}"
    for spec in "${runs[@]}"; do
      label=${spec%%=*}
      # shellcheck disable=SC2086
      timeout "${LARGE_TIMEOUT:-240}" "$matcha" run -n "$n" --seed 7 --engine cuda --theta "${LARGE_THETA:-0.8}" \
        --dt 0.0078125 --t-end "$t_end" --output-interval "$t_end" --diagnostic-potential solver --timings --json \
        ${spec#*=} --overwrite --out "${TMPDIR:-/tmp}/matcha-large-$n-$label" >"$OUT/run-n$n-$label.json" 2>"$OUT/run-n$n-$label.log"
      echo "exit $? after $SECONDS s" >>"$OUT/run-n$n-$label.log"
      tail -n 26 "$OUT/run-n$n-$label.log"
      rm -rf "${TMPDIR:-/tmp}/matcha-large-$n-$label"
      summary+=("run N=$n $label (${spec#*=}): $(python3 -c 'import json,sys; t=json.load(open(sys.argv[1]))["timings"]; print("step %.1f ms (force %.1f ms), GPU busy %.2f, rebuilds %d, repaired %d" % (1e3*t["step_seconds_mean"], 1e3*t["force_call_seconds_mean"], t["gpu_busy_fraction"], t["rebuilds"], t["groups_repaired"]))' "$OUT/run-n$n-$label.json" 2>&1 | head -c 300)")
    done
  done
fi

# LARGE=1, then: one force evaluation (`matcha run --t-end 0 --reuse off`: the first call with its estimate pass and
# the t = 0 snapshot) at each of LARGE_FORCE_SIZES (default 2^28) that its dry run says fits, with the peak host
# memory (VmHWM, polled) and the peak device memory (nvidia-smi, polled) beside the dry run's estimate.
if [ "${LARGE:-0}" = 1 ]; then
  for n in ${LARGE_FORCE_SIZES:-268435456}; do
    force_options=(-n "$n" --seed 7 --engine cuda --theta "${LARGE_THETA:-0.8}" --reuse off --t-end 0
                   --diagnostic-potential solver --timings)
    timeout "${LARGE_TIMEOUT:-240}" "$matcha" run "${force_options[@]}" --dry-run >"$OUT/force-dry-run-n$n.log" 2>&1
    cat "$OUT/force-dry-run-n$n.log"
    if ! grep -q '^host:.*: fits' "$OUT/force-dry-run-n$n.log"; then
      summary+=("force N=$n: not run: $(grep -E '^host:|error' "$OUT/force-dry-run-n$n.log" | tr '\n' ' ')")
      continue
    fi
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 500 >"$OUT/force-n$n-gpu-memory.txt" &
    smi=$!
    dir="${TMPDIR:-/tmp}/matcha-force-$n"
    start=$SECONDS
    timeout "${LARGE_FORCE_TIMEOUT:-500}" "$matcha" run "${force_options[@]}" --overwrite --out "$dir" >"$OUT/force-n$n.log" 2>&1 &
    pid=$!
    peak_kib=0
    while kill -0 "$pid" 2>/dev/null; do
      hwm=$(awk '/^VmHWM/{print $2}' "/proc/$(pgrep -P "$pid" matcha || echo "$pid")/status" 2>/dev/null)
      [ -n "$hwm" ] && [ "$hwm" -gt "$peak_kib" ] && peak_kib=$hwm
      sleep 0.5
    done
    wait "$pid"
    status=$?
    kill "$smi" 2>/dev/null
    ls -l "$dir" >>"$OUT/force-n$n.log" 2>&1
    rm -rf "$dir"
    echo "exit $status after $((SECONDS - start)) s; peak host memory $peak_kib KiB" >>"$OUT/force-n$n.log"
    tail -n 30 "$OUT/force-n$n.log"
    gpu_peak=$(sort -n "$OUT/force-n$n-gpu-memory.txt" | tail -n 1)
    summary+=("force N=$n: exit $status after $((SECONDS - start)) s; peak host $(python3 -c "print('%.1f GiB = %.0f B/body' % ($peak_kib / 2**20, $peak_kib * 1024 / $n))"), peak device ${gpu_peak:-?} MiB; dry run: $(grep -E '^(host|device):' "$OUT/force-dry-run-n$n.log" | tr '\n' ' ')")
  done
fi

# PERIODIC=1: TreePM against Ewald and the whole periodic force call. For each N of PERIODIC_SIZES (default 2^20 and
# 2^24): `matcha compare` with a box (the bodies of `matcha ic PERIODIC_IC` when set, e.g. "clumps", else a Plummer
# sphere centred in a box of side 1) on PERIODIC_SAMPLE (4096) bodies against the GPU's Ewald sum, with the call's
# phases; then, at the first N, the same Ewald sum on PERIODIC_EWALD_SAMPLE (256) bodies on the CPU and on the GPU,
# timed side by side.
if [ "${PERIODIC:-0}" = 1 ]; then
  echo "== periodic"
  matcha="$build/apps/matcha"
  first=1
  for n in ${PERIODIC_SIZES:-1048576 16777216}; do
    if [ -n "${PERIODIC_IC:-}" ]; then
      ic="${TMPDIR:-/tmp}/matcha-periodic-$n.hdf5"
      # shellcheck disable=SC2086
      "$matcha" ic "$PERIODIC_IC" -n "$n" --seed 7 ${PERIODIC_IC_OPTIONS:-} -o "$ic" --overwrite >"$OUT/periodic-ic-n$n.log" 2>&1
      bodies=(--ic "$ic")
    else
      bodies=(-n "$n" --seed 7 --box 1)
    fi
    # shellcheck disable=SC2086
    timeout "${PERIODIC_TIMEOUT:-300}" "$matcha" compare "${bodies[@]}" --engine cuda --sample "${PERIODIC_SAMPLE:-4096}" \
      --reference gpu-double ${PERIODIC_OPTIONS:-} --json >"$OUT/periodic-n$n.json" 2>"$OUT/periodic-n$n.log"
    summary+=("periodic N=$n: $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); r=d["rows"][0]; print("p50 %.3g p99 %.3g max %.3g; call %.1f ms (%s); Ewald on the GPU %.2f s" % (r["error"]["median"], r["error"]["p99"], r["error"]["max"], 1e3*r["seconds"]["tree_total"], ", ".join("%s %.1f" % (k, 1e3*v) for k, v in r["phases"].items() if v > 0), d["seconds"]["reference"]))' "$OUT/periodic-n$n.json" 2>&1 | head -c 800)")
    if [ "$first" = 1 ]; then
      first=0
      for ref in cpu-double gpu-double; do
        timeout "${PERIODIC_TIMEOUT:-300}" "$matcha" compare "${bodies[@]}" --engine cuda \
          --sample "${PERIODIC_EWALD_SAMPLE:-256}" --reference "$ref" --json >"$OUT/periodic-ewald-$ref.json" \
          2>"$OUT/periodic-ewald-$ref.log"
        summary+=("Ewald on $ref, N=$n, ${PERIODIC_EWALD_SAMPLE:-256} targets: $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%.2f s, TreePM p99 %.3g (%s)" % (d["seconds"]["reference"], d["rows"][0]["error"]["p99"], d["reference_kind"]))' "$OUT/periodic-ewald-$ref.json" 2>&1 | head -c 300)")
      done
    fi
    rm -f "${TMPDIR:-/tmp}/matcha-periodic-$n.hdf5"
  done
fi

# OVERLAP=1: the periodic call's overlaps against the sequential call, side by side in one device call (issues 15
# and 16). For each N of OVERLAP_SIZES (default 2^22 and 2^24), `matcha compare` on the bodies of `matcha ic
# OVERLAP_IC` (clumps, seed 7) against the GPU's Ewald sum on OVERLAP_SAMPLE (1024) bodies, once for each run of
# OVERLAP_RUNS ("label=options;...", default: seq = both overlaps off, mesh = the mesh beside the tree only, walk = the
# walk beside the kernels only, both = the defaults), OVERLAP_OPTIONS added to all, the whole round OVERLAP_REPEAT (2)
# times; the timed call is compare's second. A label B-NAME runs apps/matcha-B when the bundle has it (BUNDLE_EXTRA). Then an OVERLAP_COSMO_GRID^3 (256) comoving box (`matcha ic cosmo`, box
# 100 Mpc/h, seed 7) run from z = 49 to OVERLAP_COSMO_Z_END (45, ~20 steps) with --timings for each run of
# OVERLAP_COSMO_RUNS (default: seq = both overlaps off, both = the defaults; labels B-NAME as above).
if [ "${OVERLAP:-0}" = 1 ]; then
  echo "== periodic overlaps"
  matcha="$build/apps/matcha"
  IFS=';' read -ra runs <<<"${OVERLAP_RUNS:-seq=--mesh-overlap off --walk-overlap off;mesh=--walk-overlap off;walk=--mesh-overlap off;both=}"
  for n in ${OVERLAP_SIZES:-4194304 16777216}; do
    ic="${TMPDIR:-/tmp}/matcha-overlap-$n.hdf5"
    "$matcha" ic "${OVERLAP_IC:-clumps}" -n "$n" --seed 7 -o "$ic" --overwrite >"$OUT/overlap-ic-n$n.log" 2>&1
    for repeat in $(seq 1 "${OVERLAP_REPEAT:-2}"); do
      for spec in "${runs[@]}"; do
        label=${spec%%=*}
        name="overlap-n$n-$label-$repeat"
        # A label "B-..." runs apps/matcha-B where the bundle has it (BUNDLE_EXTRA: an A/B against another commit).
        binary=$matcha
        if [ -x "$build/apps/matcha-${label%%-*}" ]; then binary="$build/apps/matcha-${label%%-*}"; fi
        # shellcheck disable=SC2086
        timeout "${PERIODIC_TIMEOUT:-300}" "$binary" compare --ic "$ic" --engine cuda --sample "${OVERLAP_SAMPLE:-1024}" \
          --reference gpu-double ${OVERLAP_OPTIONS:-} ${spec#*=} --json >"$OUT/$name.json" 2>"$OUT/$name.log"
        summary+=("periodic N=$n $label #$repeat (${spec#*=}): $(python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["rows"][0]; w=r.get("waits", {}); print("call %.1f ms, p99 %.3g; waits: engine %.1f, mesh %.1f; %s" % (1e3*r["seconds"]["tree_total"], r["error"]["p99"], 1e3*w.get("engine", 0), 1e3*w.get("mesh", 0), ", ".join("%s %.1f" % (k, 1e3*v) for k, v in r["phases"].items() if v > 0)))' "$OUT/$name.json" 2>&1 | head -c 600)")
      done
    done
    rm -f "$ic"
  done
  grid=${OVERLAP_COSMO_GRID:-256}
  if [ "$grid" -gt 0 ]; then
    runsdir=${TMPDIR:-/tmp}/matcha-overlap-cosmo
    mkdir -p "$runsdir"
    ic="$runsdir/ics-$grid.hdf5"
    "$matcha" ic cosmo --grid "$grid" --box 100 --seed 7 --out "$ic" --overwrite >"$OUT/overlap-cosmo-ic-$grid.log" 2>&1
    IFS=';' read -ra cosmo_runs <<<"${OVERLAP_COSMO_RUNS:-seq=--mesh-overlap off --walk-overlap off;both=}"
    for spec in "${cosmo_runs[@]}"; do
      label=${spec%%=*}
      name="overlap-cosmo-$grid-$label"
      binary=$matcha
      if [ -x "$build/apps/matcha-${label%%-*}" ]; then binary="$build/apps/matcha-${label%%-*}"; fi
      # shellcheck disable=SC2086
      timeout "${COSMO_TIMEOUT:-550}" "$binary" run --ic "$ic" --engine cuda --z-end "${OVERLAP_COSMO_Z_END:-45}" \
        --timings --checkpoint-interval 100000 ${spec#*=} --overwrite --out "$runsdir/run-$label" --json \
        >"$OUT/$name.json" 2>"$OUT/$name.log"
      tail -n 32 "$OUT/$name.log"
      summary+=("cosmo $grid^3 $label (${spec#*=}): $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); t=d["timings"]; m=t["steps_mean_ms"] or {}; print("%d steps, %.1f ms/step (force %.1f ms), GPU busy %.3f, waits per step: engine %.1f ms, mesh %.1f ms; %s" % (t["steps"], 1e3*t["step_seconds_mean"], 1e3*t["force_call_seconds_mean"], t["gpu_busy_fraction"], 1e3*t["engine_wait_seconds"]/max(t["steps"],1), 1e3*t.get("mesh_wait_seconds", 0)/max(t["steps"],1), ", ".join("%s %.1f" % (k, v) for k, v in m.items() if v > 0)))' "$OUT/$name.json" 2>&1 | head -c 700)")
    done
    rm -rf "$runsdir"
  fi
fi

# PERIODIC_STEPS=1: whole periodic steps and what the periodic tree's reuse saves (issues 15, 16). For each N of
# PSTEP_SIZES (default 2^24), on the bodies of `matcha ic PSTEP_IC` (clumps, seed 7), PSTEP_STEPS steps (default 20)
# of `matcha run --timings` (dt 1/128, the phases of the last half's interval) for each run of PSTEP_RUNS
# ("label=options;...", default: reuse off, 2 and 4); then a PSTEP_COSMO_GRID^3 (default 256; 0: none) comoving box
# (`matcha ic cosmo`, 100 Mpc/h, seed 7) from z = 49 to PSTEP_COSMO_Z_END (default 40) for each run of
# PSTEP_COSMO_RUNS (default: reuse off and the default, auto). PSTEP_OPTIONS go to every run; each under COSMO_TIMEOUT.
if [ "${PERIODIC_STEPS:-0}" = 1 ]; then
  echo "== periodic steps"
  matcha="$build/apps/matcha"
  runsdir=${TMPDIR:-/tmp}/matcha-periodic-steps
  mkdir -p "$runsdir"
  pstep_summary() {  # $1 JSON, $2 log: the steps' means, the last interval's ms/step, rebuilds, phases of the means
    python3 -c 'import json, re, sys
d = json.load(open(sys.argv[1])); t = d["timings"]; m = t.get("steps_mean_ms") or {}
last = [l for l in open(sys.argv[2]) if l.startswith("# timings since last output")]
steady = re.search(r"([0-9.e+]+) ms/step", last[-1]).group(1) if last else "n/a"
print("%d steps, %.1f ms/step (force %.1f), last interval %s ms/step, rebuilds %d, GPU busy %.3f; %s" % (t["steps"],
      1e3 * t["step_seconds_mean"], 1e3 * t["force_call_seconds_mean"], steady, t["rebuilds"], t["gpu_busy_fraction"],
      ", ".join("%s %.1f" % (k, v) for k, v in m.items() if v > 0)))' "$1" "$2" 2>&1 | head -c 700
  }
  steps=${PSTEP_STEPS:-20}
  t_end=$(python3 -c "print($steps / 128)")
  interval=$(python3 -c "print($steps / 256)")
  for n in ${PSTEP_SIZES:-16777216}; do
    ic="$runsdir/bodies-$n.hdf5"
    "$matcha" ic "${PSTEP_IC:-clumps}" -n "$n" --seed 7 -o "$ic" --overwrite >"$OUT/pstep-ic-n$n.log" 2>&1
    IFS=';' read -ra runs <<<"${PSTEP_RUNS:-off=--reuse off;r2=--reuse 2;r4=--reuse 4}"
    for spec in "${runs[@]}"; do
      label=${spec%%=*}
      name="pstep-n$n-$label"
      # shellcheck disable=SC2086
      timeout "${COSMO_TIMEOUT:-550}" "$matcha" run --ic "$ic" --engine cuda --dt 0.0078125 --t-end "$t_end" \
        --output-interval "$interval" --timings --json --checkpoint-interval 100000 ${PSTEP_OPTIONS:-} ${spec#*=} \
        --overwrite --out "$runsdir/run-$label" >"$OUT/$name.json" 2>"$OUT/$name.log"
      tail -n 30 "$OUT/$name.log"
      summary+=("periodic steps N=$n $label (${spec#*=}): $(pstep_summary "$OUT/$name.json" "$OUT/$name.log")")
      rm -rf "$runsdir/run-$label"
    done
    rm -f "$ic"
  done
  grid=${PSTEP_COSMO_GRID:-256}
  if [ "$grid" -gt 0 ]; then
    ic="$runsdir/ics-$grid.hdf5"
    "$matcha" ic cosmo --grid "$grid" --box 100 --seed 7 --out "$ic" --overwrite >"$OUT/pstep-cosmo-ic-$grid.log" 2>&1
    IFS=';' read -ra runs <<<"${PSTEP_COSMO_RUNS:-off=--reuse off;auto=}"
    for spec in "${runs[@]}"; do
      label=${spec%%=*}
      name="pstep-cosmo-$grid-$label"
      # shellcheck disable=SC2086
      timeout "${COSMO_TIMEOUT:-550}" "$matcha" run --ic "$ic" --engine cuda --z-end "${PSTEP_COSMO_Z_END:-40}" \
        --timings --json --checkpoint-interval 100000 ${PSTEP_OPTIONS:-} ${spec#*=} --overwrite \
        --out "$runsdir/run-$label" >"$OUT/$name.json" 2>"$OUT/$name.log"
      tail -n 30 "$OUT/$name.log"
      summary+=("cosmo $grid^3 $label (${spec#*=}): $(pstep_summary "$OUT/$name.json" "$OUT/$name.log")")
      rm -rf "$runsdir/run-$label"
    done
  fi
  rm -rf "$runsdir"
fi

# ACCURACY=1: the accuracy targets of bench/RESULTS.md (README "Accuracy"): tree error percentiles on a random
# subsample of Plummer 2^22 and 2^20 against GPU double direct sums (CSV for scripts/plot_errors.py), and the energy
# error of one N-body time unit at N = 2^16 split into time-step error (direct summation) and force error (tree).
if [ "${ACCURACY:-0}" = 1 ]; then
  echo "== accuracy targets"
  matcha="$build/apps/matcha"
  if [ "${ACCURACY_SWEEP:-1}" = 1 ]; then
    # The default opening test (theta and the relative test, alpha 1e-3) and theta alone (alpha 0), at the issue's
    # N = 2^22, and a theta sweep at 2^20 for the error-vs-cost frontier of each.
    for alpha in 0.001 0; do
      "$matcha" compare -n 4194304 --engine cuda --reference gpu-double --sample 20000 --theta 0.5 --multipole both \
        --alpha "$alpha" --csv "$OUT/compare-n22-alpha$alpha.csv" 2>&1 | tee "$OUT/compare-n22-alpha$alpha.log"
      "$matcha" compare -n 1048576 --engine cuda --reference gpu-double --sample 20000 \
        --theta 0.3,0.4,0.5,0.6,0.7,0.8 --multipole both --alpha "$alpha" --csv "$OUT/compare-n20-alpha$alpha.csv" 2>&1 |
        tee "$OUT/compare-n20-alpha$alpha.log"
    done
  fi
  runs=${TMPDIR:-/tmp}/matcha-energy
  # solver, multipole, dt, theta, alpha, seed, diagnostic potentials: direct summation at dt and dt/2 gives the
  # time-step error and its scaling; the tree runs at the same dt add the force error, measured with direct-sum
  # potentials at the outputs (the default on a GPU) and, for contrast, with the tree's own.
  for run in "direct quad 0.00390625 0.5 0 1 solver" "direct quad 0.00390625 0.5 0 2 solver" \
    "direct quad 0.00390625 0.5 0 3 solver" "direct quad 0.001953125 0.5 0 1 solver" \
    "tree quad 0.00390625 0.5 0.001 1 direct" "tree quad 0.00390625 0.5 0.001 2 direct" \
    "tree quad 0.00390625 0.5 0.001 3 direct" "tree quad 0.00390625 0.5 0.001 1 solver" \
    "tree quad 0.00390625 0.5 0 1 direct" "tree quad 0.001953125 0.5 0.001 1 direct" \
    "tree mono 0.00390625 0.5 0.001 1 direct"; do
    set -- $run
    name="energy-$1-$2-dt$3-theta$4-alpha$5-seed$6-potential-$7"
    "$matcha" run -n 65536 --seed "$6" --eps 0.00390625 --dt "$3" --theta "$4" --alpha "$5" --t-end 1 \
      --output-interval 0.125 --engine cuda --solver "$1" --multipole "$2" --diagnostic-potential "$7" \
      --overwrite --out "$runs/$name" --json >"$OUT/$name.json" 2>"$OUT/$name.log"
    cp "$runs/$name/diagnostics.log" "$OUT/$name.diagnostics.log" 2>/dev/null
    summary+=("$name: $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("dE/E %.3e, %d steps, force %.1f s, potentials %.2f s" % (d["relative_energy_error"], d["steps"], d["force_seconds"], d["diagnostic_seconds"]))' "$OUT/$name.json" 2>&1 | head -c 300)")
  done
fi

# COSMO=1: cosmological runs (issue 16): for each n of COSMO_GRIDS (default 256), `matcha ic cosmo` (n^3 bodies in a
# box of COSMO_BOX = 100 Mpc/h at z = 49, the defaults) and `matcha run` to COSMO_Z_END (0; e.g. 38 for the first ten
# steps) on the GPU with its timings, within COSMO_TIMEOUT seconds (550): the wall time, steps and steps per unit ln a
# from summary.json, the Layzer-Irvine check, and P(k) of the last snapshot against linear theory.
if [ "${COSMO:-0}" = 1 ]; then
  echo "== cosmological runs"
  matcha="$build/apps/matcha"
  runs=${TMPDIR:-/tmp}/matcha-cosmo
  mkdir -p "$runs"
  for n in ${COSMO_GRIDS:-256}; do
    ic="$runs/ics-$n.hdf5"
    start=$(date +%s.%N)
    "$matcha" ic cosmo --grid "$n" --box "${COSMO_BOX:-100}" --seed 7 --out "$ic" --overwrite >"$OUT/cosmo-ic-$n.log" 2>&1
    ic_seconds=$(python3 -c "import sys; print('%.1f' % ($(date +%s.%N) - $start))")
    timeout "${COSMO_TIMEOUT:-550}" "$matcha" run --ic "$ic" --engine cuda --z-end "${COSMO_Z_END:-0}" \
      --timings --checkpoint-interval 100000 ${COSMO_OPTIONS:-} --overwrite --out "$runs/run-$n" --json \
      >"$OUT/cosmo-run-$n.json" 2>"$OUT/cosmo-run-$n.log"
    status=$?
    cp "$runs/run-$n/diagnostics.log" "$OUT/cosmo-run-$n.diagnostics.log" 2>/dev/null
    last=$(ls "$runs/run-$n"/snapshot_*.hdf5 2>/dev/null | tail -1)
    if [ -n "$last" ]; then
      "$matcha" analyze power "$last" --linear eh --out "$OUT/cosmo-power-$n.txt" --overwrite >>"$OUT/cosmo-ic-$n.log" 2>&1
    fi
    summary+=("cosmo n=$n: ic $ic_seconds s, run exit $status: $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); c=d["comoving"]; print("%d steps z %.3g -> %.3g, wall %.1f s (force %.1f s), %.1f steps per ln a, Layzer-Irvine %.2e" % (d["steps"], c["z_start"], c["z_end"], d["wall_seconds"], d["force_seconds"], c["steps_per_unit_ln_a"], c["layzer_irvine_relative_violation"]))' "$OUT/cosmo-run-$n.json" 2>&1 | tail -c 300)")
  done
fi

# LATE_AB=1: an A/B of a comoving run's late steps, where the 256^3 box spends most of its time (issue 16). One run
# (LATE_GRID^3 bodies, default 256, box 100 Mpc/h, seed 7, the defaults) goes from z = 49 to just past LATE_Z (default
# 1) with an output at LATE_Z, which a checkpoint follows; then each run of LATE_RUNS ("label=options;...", default: outputs in the background and in
# place) restarts from that checkpoint, each from its own folder (the HDF5 files hard-linked), towards z = 0 with
# outputs at LATE_OUTPUT_Z, for LATE_SECONDS (default 110) of wall time. Every run thus starts from the same bodies;
# the table gives each run's step and z at its end and its timings lines. A run whose label has a binary
# build-device/apps/matcha-LABEL (carried beside the bundle's) runs that binary: a branch against main.
if [ "${LATE_AB:-0}" = 1 ]; then
  echo "== late steps, A/B from one checkpoint"
  matcha="$build/apps/matcha"
  late_dir=${TMPDIR:-/tmp}/matcha-late
  rm -rf "$late_dir"
  mkdir -p "$late_dir"
  n=${LATE_GRID:-256}
  "$matcha" ic cosmo --grid "$n" --box 100 --seed 7 --out "$late_dir/ic.hdf5" >"$OUT/late-ic.log" 2>&1
  start=$(date +%s)
  z_past=$(awk -v z="${LATE_Z:-1}" 'BEGIN { print z - 0.02 * (1 + z) }')  # a few steps past LATE_Z
  "$matcha" run --ic "$late_dir/ic.hdf5" --engine "${LATE_ENGINE:-cuda}" --output-z "${LATE_Z:-1}" --z-end "$z_past" \
    --checkpoint-interval 100000 --timings --out "$late_dir/prefix" >"$OUT/late-prefix.log" 2>&1
  status=$?
  summary+=("late A/B: the run to z = ${LATE_Z:-1} took $(( $(date +%s) - start )) s (exit $status)")
  cp "$late_dir/prefix/diagnostics.log" "$OUT/late-prefix.diagnostics.log" 2>/dev/null
  IFS=';' read -ra late_runs <<<"${LATE_RUNS:-background=--background-output on;in-place=--background-output off}"
  for spec in "${late_runs[@]}"; do
    label=${spec%%=*}
    options=${spec#*=}
    binary=$matcha
    [ -x "$build/apps/matcha-$label" ] && binary="$build/apps/matcha-$label"
    dir="$late_dir/$label"
    mkdir -p "$dir"
    for file in "$late_dir"/prefix/*; do
      case $file in
        *.hdf5) ln "$file" "$dir/" ;;  # replaced by renames, never written in place: a link is a copy here
        *) cp "$file" "$dir/" ;;
      esac
    done
    # shellcheck disable=SC2086
    timeout "${LATE_SECONDS:-110}" "$binary" run --restart "$dir" --z-end 0 --output-z "${LATE_OUTPUT_Z:-0.75,0.5,0.25,0}" \
      --timings $options >"$OUT/late-$label.log" 2>&1
    status=$?
    cp "$dir/diagnostics.log" "$OUT/late-$label.diagnostics.log" 2>/dev/null
    reached=$(tr '\r' '\n' <"$OUT/late-$label.log" | grep '^step' | tail -n 1 | cut -c1-80)
    summary+=("late A/B $label ($binary $options): exit $status, $reached")
    mapfile -t timings < <(awk '/^# restarted/ { since = 1 } since && /timings since/' "$dir/diagnostics.log" |
      sed "s/.*since last output: /  /" | cut -c1-400)
    summary+=("${timings[@]}")
  done
fi

# GROWTH=1: the linear growth of issue 16 at full size: tests/apps/comoving_growth_test.sh with GROWTH_GRID (default
# 128) bodies per side on the GPU, GROWTH_MODE (default both): the run at sigma8 / 20 against the lattice's linear
# theory, and the paired runs at the nominal sigma8 against lattice + one-loop SPT at z = 3, 1, 0.5 and 0
# (scripts/growth_theory.py; without scipy here the runs and measurements only). analyze growth's JSON files, the
# runs' logs and summaries go to $OUT/growth/, for growth_theory.py on any machine.
if [ "${GROWTH:-0}" = 1 ]; then
  echo "== linear growth"
  scratch=${TMPDIR:-/tmp}/matcha-growth
  theory=1
  /usr/bin/python3 -c "import numpy, scipy" 2>/dev/null || theory=0
  GROWTH_GRID=${GROWTH_GRID:-128} GROWTH_ENGINE=cuda GROWTH_THEORY=$theory timeout "${GROWTH_TIMEOUT:-570}" \
    tests/apps/comoving_growth_test.sh "$build/apps/matcha" "$scratch" "${GROWTH_MODE:-both}" 2>&1 | tee "$OUT/growth.log"
  status=${PIPESTATUS[0]}
  mkdir -p "$OUT/growth"
  cp "$scratch"/*.json "$scratch"/*.log "$OUT/growth/" 2>/dev/null
  for run in low a b; do
    cp "$scratch/$run/diagnostics.log" "$OUT/growth/$run.diagnostics.log" 2>/dev/null
    cp "$scratch/$run/summary.json" "$OUT/growth/$run.summary.json" 2>/dev/null
  done
  summary+=("growth n=${GROWTH_GRID:-128} (${GROWTH_MODE:-both}): exit $status (theory here: $theory)")
fi

# HERMITE=1: issue 18's tables. bench_cuda's hermite/ rows (force, jerk, potential, neighbour: kirin's k = 60) and
# cunbody/ rows (matcha_force, force only: k = 38, E_max against a double host), then Hermite runs of kirin's Table 1
# set-up (Plummer, eps 1/256, eta 0.02, t = 0 to 0.5; the time from 0.25 to 0.5 from summary.json) at each of
# HERMITE_SIZES, each within HERMITE_TIMEOUT seconds.
if [ "${HERMITE:-0}" = 1 ]; then
  echo "== Hermite and the C libraries"
  if [ "${HERMITE_BENCH:-1}" = 1 ]; then
    "$build/bench/bench_cuda" --benchmark_filter='hermite/|cunbody/' --benchmark_counters_tabular=true \
      --benchmark_out="$OUT/bench-hermite.json" --benchmark_out_format=json 2>&1 | tee "$OUT/bench-hermite.txt"
  fi
  for n in ${HERMITE_SIZES:-1024 4096 16384 65536 262144 524288 1048576}; do
    name="hermite-n$n"
    timeout "${HERMITE_TIMEOUT:-540}" "$build/apps/matcha" run --integrator hermite --solver direct --engine cuda -n "$n" \
      --seed 7 --eps 0.00390625 --eta 0.02 --t-end 0.5 --output-interval 0.25 --overwrite \
      --out "${TMPDIR:-/tmp}/matcha-$name" --json >"$OUT/$name.json" 2>"$OUT/$name.log"
    summary+=("Hermite N=$n: $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); h=d["hermite"]; o=h["outputs"]; print("|dE/E| %.3g, t 0.25-0.5 %.4g s, t 0-0.5 %.4g s, %d block steps, %d body steps" % (abs(d["relative_energy_error"]), o[2]["wall_seconds"] - o[1]["wall_seconds"], o[-1]["wall_seconds"], h["block_steps"], h["body_steps"]))' "$OUT/$name.json" 2>&1 | head -c 300)")
  done
fi

# TUNE=1: issue 17's target. matcha tune on a Plummer sphere of TUNE_N bodies (2^22) for TUNE_TARGET (p99 4.3e-4)
# within TUNE_BUDGET seconds, then its tuned.toml and the best hand-picked setting (TUNE_HAND) run side by side, in
# turns, with force checks at each tree's last step: the same measurement for both.
if [ "${TUNE:-0}" = 1 ]; then
  echo "== tune against the hand-picked setting"
  n=${TUNE_N:-4194304}
  tune_dir=${TMPDIR:-/tmp}/matcha-tune
  rm -rf "$tune_dir"
  timeout 400 "$build/apps/matcha" tune -n "$n" --seed 7 --engine cuda --target-error "${TUNE_TARGET:-4.3e-4}" \
    --budget "${TUNE_BUDGET:-170}" --out "$tune_dir" 2>&1 | tee "$OUT/tune.log" | tail -n 30
  cp "$tune_dir/tuned.toml" "$tune_dir/tune.csv" "$OUT/" 2>/dev/null
  for round in 1 2; do
    for spec in "tuned=--config $tune_dir/tuned.toml" "hand=${TUNE_HAND:---theta 1.0 --ncrit 1024 --nleaf 16 --alpha 1.5e-3 --reuse 3}"; do
      label=${spec%%=*}
      # shellcheck disable=SC2086
      timeout 200 "$build/apps/matcha" run ${spec#*=} -n "$n" --seed 7 --engine cuda --dt 0.0078125 --t-end 0.46875 \
        --output-interval 0.15625 --diagnostic-potential solver --timings --force-check 4096 --overwrite \
        --out "${TMPDIR:-/tmp}/matcha-tune-$label" >"$OUT/tune-run-$label-$round.log" 2>&1
      summary+=("tune N=$n $label #$round: $(grep 'timings since last output' "$OUT/tune-run-$label-$round.log" | tail -n 2 | grep -o '[0-9.]* ms/step' | paste -sd' '), worst force-check p99 $(grep -o '99% [0-9.e+-]*' "$OUT/tune-run-$label-$round.log" | sort -k2 -g | tail -n 1)")
    done
  done
fi

# RANKS=1: issue 19 on this machine's GPUs. `mpirun -np K matcha run --engine cuda` (a GPU per rank; the ranks of one
# host take its GPUs in turns, so on a one-GPU machine they share it) for each K of RANKS_COUNTS (default 1 2 4) at
# each size of RANKS_SIZES (default 2^22), RANKS_STEPS steps (default 10) of 1/128 with RANKS_OPTIONS, --timings.
# RANKS_RUNS="K:N K:N ..." names the runs instead (weak scaling: N growing with K). RANKS_ENGINE=cpu runs the CPU engine
# (each of K ranks on a host takes 1/K of its cores), RANKS_IC=clumps a periodic box of `matcha ic clumps` (seed 7)
# instead of the Plummer sphere. RANKS_LABELS="new LABEL ..." runs each run with apps/matcha ("new") and with each
# apps/matcha-LABEL of the bundle's BUNDLE_EXTRA in turn (an A/B in one lease), their logs named by label.
# RANKS_CORES_PER_RANK=C runs K ranks on the host's first K C cores (taskset): a one-rank run with a K-rank run's share
# of the host, the weak-scaling proxy of a machine with one GPU. The runs' weak and strong scaling tables
# (scripts/scaling_table.py) go to $OUT/scaling.md.
#
# RANKS_SCALING=1: issue 19's scaling runs through RANKS=1: weak scaling at RANKS_PER_RANK bodies a rank (default 2^24)
# and strong scaling of RANKS_TOTAL bodies (default 2^26), each over every K of RANKS_COUNTS (default 1 2 4: a GPU a
# rank on a machine with 4; on fewer GPUs the ranks share them, and the tables measure that); RANKS_STEPS, RANKS_IC,
# RANKS_OPTIONS and RANKS_LABELS as above.
if [ "${RANKS_SCALING:-0}" = 1 ]; then
  RANKS=1
  RANKS_RUNS=""
  for k in ${RANKS_COUNTS:-1 2 4}; do
    for n in $((k * ${RANKS_PER_RANK:-16777216})) "${RANKS_TOTAL:-67108864}"; do
      case " $RANKS_RUNS " in *" $k:$n "*) ;; *) RANKS_RUNS+=" $k:$n" ;; esac
    done
  done
fi
if [ "${RANKS:-0}" = 1 ]; then
  engine=${RANKS_ENGINE:-cuda}
  echo "== matcha run on K ranks, the $engine engine on each"
  nvidia-smi -L
  matcha="$build/apps/matcha"
  t_end=$(python3 -c "print(${RANKS_STEPS:-10} / 128)")
  runs=${RANKS_RUNS:-}
  if [ -z "$runs" ]; then
    for n in ${RANKS_SIZES:-4194304}; do
      for k in ${RANKS_COUNTS:-1 2 4}; do runs+=" $k:$n"; done
    done
  fi
  for run in $runs; do
    k=${run%%:*}
    n=${run#*:}
    bodies=(-n "$n" --seed 7)
    if [ "${RANKS_IC:-}" = clumps ]; then
      ic="${TMPDIR:-/tmp}/matcha-ranks-clumps-$n.hdf5"
      [ -f "$ic" ] || "$matcha" ic clumps -n "$n" --seed 7 --out "$ic" >/dev/null
      bodies=(--ic "$ic")
    fi
    for label in ${RANKS_LABELS:-new}; do
      binary=$matcha
      name="ranks-n$n-k$k"
      if [ -n "${RANKS_LABELS:-}" ]; then name+="-$label"; fi
      if [ "$label" != new ]; then binary="$build/apps/matcha-$label"; fi
      cores=()
      if [ -n "${RANKS_CORES_PER_RANK:-}" ]; then cores=(taskset -c "0-$((k * RANKS_CORES_PER_RANK - 1))"); fi
      # shellcheck disable=SC2086
      OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout "${RANKS_TIMEOUT:-240}" "${cores[@]}" \
        mpirun -np "$k" --oversubscribe --bind-to none -x LD_LIBRARY_PATH "$binary" run \
        "${bodies[@]}" --engine "$engine" --dt 0.0078125 \
        --t-end "$t_end" --output-interval "$t_end" --timings --json ${RANKS_OPTIONS:-} --overwrite \
        --out "${TMPDIR:-/tmp}/matcha-ranks-$n-$k" >"$OUT/$name.json" 2>"$OUT/$name.log"
      echo "exit $?" >>"$OUT/$name.log"
      tail -n 30 "$OUT/$name.log"
      summary+=("ranks N=$n K=$k ($label): $(grep -E '^# timings since|^summary' "$OUT/$name.log" | tail -n 2 | tr '\n' ' ' | head -c 400)")
    done
  done
  # Only where some N (or N a rank) ran at two K; a run that failed leaves a file the script names and refuses.
  python3 scripts/scaling_table.py "$OUT"/ranks-n*-k*.json --out "$OUT/scaling.md" || true
fi

# RANKS_COSMO=1: a comoving run on K ranks with the CUDA engine on each (issue 19): `run --cosmology` of a
# RANKS_COSMO_GRID^3 box (default 128, 100 Mpc/h, seed 7) from z = 49 to RANKS_COSMO_Z_END (default 3) with the defaults
# (long-range and block time steps) for each K of RANKS_COSMO_COUNTS (default 1 2), --timings; the summary lines and
# the Layzer-Irvine check of each K side by side. RANKS_COSMO_LABELS="new LABEL ..." runs each K with apps/matcha and
# with each apps/matcha-LABEL of the bundle's BUNDLE_EXTRA in turn (an A/B in one lease).
if [ "${RANKS_COSMO:-0}" = 1 ]; then
  echo "== comoving runs on K ranks, the CUDA engine on each"
  grid=${RANKS_COSMO_GRID:-128}
  for k in ${RANKS_COSMO_COUNTS:-1 2}; do
    for label in ${RANKS_COSMO_LABELS:-new}; do
      matcha="$build/apps/matcha"
      log="$OUT/ranks-cosmo-g$grid-k$k.log"
      if [ -n "${RANKS_COSMO_LABELS:-}" ]; then log="$OUT/ranks-cosmo-g$grid-k$k-$label.log"; fi
      if [ "$label" != new ]; then matcha="$build/apps/matcha-$label"; fi
      OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout "${RANKS_COSMO_TIMEOUT:-300}" \
        mpirun -np "$k" --oversubscribe --bind-to none -x LD_LIBRARY_PATH "$matcha" run --cosmology --grid "$grid" \
        --box 100 --seed 7 --engine cuda --z-end "${RANKS_COSMO_Z_END:-3}" --timings --overwrite \
        --out "${TMPDIR:-/tmp}/matcha-ranks-cosmo-$grid-$k" >"$log" 2>&1
      echo "exit $?" >>"$log"
      grep -vE '^step ' "$log" | tail -n 40
      summary+=("ranks cosmo ${grid}^3 K=$k ($label): $(grep -E '^summary' "$log" | tail -n 1 | head -c 400)")
    done
  done
fi

# SLABS=1: the particle mesh over K ranks on this machine's host (issue 19): bench_slab_mesh with K ranks of 16 / K
# threads for each K of SLABS_COUNTS (default 1 2 4 8) and each N:grid of SLABS_CASES (default 2^22 at 256^3 and 2^24 at
# 512^3, the default grids' sizes), the slab mesh against the replicated one, one table. SLABS_BACKEND=cufft (default
# fftw, the hosts' cores): both on the GPUs, the ranks sharing them where there are fewer.
if [ "${SLABS:-0}" = 1 ]; then
  echo "== the particle mesh in slabs over K ranks (${SLABS_BACKEND:-fftw})"
  cores=$(nproc)
  header=--header
  for case in ${SLABS_CASES:-4194304:256 16777216:512}; do
    for k in ${SLABS_COUNTS:-1 2 4 8}; do
      threads=$((cores / k))
      [ "$threads" -ge 1 ] || threads=1
      # shellcheck disable=SC2086
      OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout "${SLABS_TIMEOUT:-300}" \
        mpirun -np "$k" --oversubscribe --bind-to none -x LD_LIBRARY_PATH "$build/bench/bench_slab_mesh" \
        -n "${case%%:*}" --grid "${case#*:}" --threads "$threads" --repeat "${SLABS_REPEAT:-3}" $header \
        --backend "${SLABS_BACKEND:-fftw}" ${SLABS_OPTIONS:-} \
        >>"$OUT/slabs.md" 2>>"$OUT/slabs.log"
      echo "exit $? (K=$k, $case)" >>"$OUT/slabs.log"
      header=
    done
  done
  cat "$OUT/slabs.md"
  summary+=("slabs: $(grep -c '^| [0-9]' "$OUT/slabs.md") rows in slabs.md")
fi

# LET_EXPORT=1: the local essential tree's pruning against the local walk it sits beside (bench/tools/let_export, no
# MPI), then the steady decomposition's stages on 2 ranks (bench/tools/decomposition.cpp): a Plummer sphere of each N of LET_SIZES (default 2^23 and 2^25, two ranks' halves of 2^22 and 2^24) split in
# two, on LET_CORES cores of the host (default 8 and 16; taskset), LET_OPTIONS the tool's further arguments (ncrit,
# nleaf, theta, alpha, repeats: default 1024 16 1.0 1.5e-3 5, the weak-scaling proxy's settings).
if [ "${LET_EXPORT:-0}" = 1 ]; then
  echo "== the LET export against the walk"
  for n in ${LET_SIZES:-8388608 33554432}; do
    for c in ${LET_CORES:-8 16}; do
      # shellcheck disable=SC2086
      timeout 300 taskset -c "0-$((c - 1))" "$build/bench/let_export" "$n" ${LET_OPTIONS:-1024 16 1.0 1.5e-3 5} \
        2>&1 | sed "s/^/[$c cores] /" | tee -a "$OUT/let_export.log"
    done
  done
  # The steady decomposition's stages (bench/tools/decomposition.cpp) at the same sizes, on 2 ranks of LET_CORES / 2
  # cores each.
  for n in ${LET_SIZES:-8388608 33554432}; do
    for c in ${LET_CORES:-8 16}; do
      OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 300 taskset -c "0-$((c - 1))" \
        mpirun -np 2 --oversubscribe --bind-to none -x LD_LIBRARY_PATH "$build/bench/decomposition_stages" "$n" 9 \
        0.0078125 "$((c / 2))" 2>&1 | tee -a "$OUT/let_export.log"
    done
  done
  summary+=("let_export: $(grep -c 'export / walk' "$OUT/let_export.log") timings in let_export.log")
fi

echo
echo "== summary"
printf '%s\n' "${summary[@]}"
if [ -f "$OUT/bench.json" ]; then
  /usr/bin/env python3 - "$OUT/bench.json" <<'EOF'
import json, sys
runs = json.load(open(sys.argv[1]))["benchmarks"]
print(f"{'benchmark':58s} {'ms':>9s} {'inter/s':>10s} {'floor%':>7s} {'issue%':>7s}")
for r in runs:
    rate = r.get("interactions/s", 0)
    floor = r.get("floor%", r.get("fp64floor%", 0))
    print(f"{r['name'][:58]:58s} {r['real_time']:9.3f} {rate:10.3e} {floor:7.1f} {r.get('issue%', 0):7.1f}")
EOF
fi
# The device tool brings back at most 8 files from $OUT: where there are more, all but check.log go into one archive,
# so that none is left behind (a late A/B's prefix logs were, at 10 files).
mapfile -t out_files < <(cd "$OUT" && find . -type f ! -name check.log | sed 's|^\./||' | sort)
if [ $((${#out_files[@]} + 1)) -gt 8 ]; then
  (cd "$OUT" && tar -czf logs.tgz --remove-files -- "${out_files[@]}") &&
    echo "$OUT: $((${#out_files[@]} + 1)) files, over the device tool's 8: all but check.log are in logs.tgz"
fi
exit "$ctest_status"
