#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs the standard benchmark set and appends its rows to bench/RESULTS.md (STYLE.md habit 12), stamped with the
# date, the git commit (marked "+dirty" when the tree has uncommitted changes), the machine, and for the GPU its
# model and clocks. `make bench` calls it with the build folder.
#
#   scripts/bench.sh [BUILD_DIR]      default: build
#
# Environment: CUDA_FILTER / CPU_FILTER (benchmark regexes; "none" skips that binary), RESULTS (the file to append
# to, default bench/RESULTS.md), OUT (where the JSON goes, default BUILD_DIR/bench-out).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
results=${RESULTS:-bench/RESULTS.md}
out=${OUT:-$build/bench-out}
mkdir -p "$out"

# The standard set: every direct shape for N = 2^12 ... 2^20 and the default at 2^22, double direct, the group x list
# kernel on the Plummer 2^20 plans for ncrit 16 ... 4096, and the bare loop's ceiling at 2^20
# (bench/bench_cuda.cpp registers exactly these).
cuda_filter=${CUDA_FILTER:-.}
cpu_filter=${CPU_FILTER:-BM_DirectCpu/float/N:16384/|BM_TreeCpu/N:65536/theta100:50/}

commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then commit="$commit+dirty"; fi
today=$(date -u +%Y-%m-%d)
python=/usr/bin/python3
[ -x "$python" ] || python=python3

append_rows() {  # json file, heading
  "$python" - "$1" "$2" "$results" <<'EOF'
import json, sys
data = json.load(open(sys.argv[1]))
runs = [r for r in data["benchmarks"] if r.get("run_type", "iteration") == "iteration"]
with open(sys.argv[3], "a") as out:
    out.write(f"\n### {sys.argv[2]}\n\n")
    context = data.get("context", {})
    for key in ("gpu", "fp32_floor_design", "fp32_floor_sass", "fp64_floor"):
        if key in context:
            out.write(f"- {key}: {context[key]}\n")
    out.write("\n| benchmark | time/iter (ms) | interactions/s | floor% | issue% | extra |\n")
    out.write("| --- | ---: | ---: | ---: | ---: | --- |\n")
    skip = {"interactions/s", "floor%", "issue%", "fp64floor%", "GFLOP/s(20)", "GFLOP/s(38)"}
    for r in runs:
        floor = r.get("floor%", r.get("fp64floor%"))
        extra = ", ".join(f"{k} {v:.4g}" for k, v in r.items()
                          if k not in skip and isinstance(v, float) and k not in
                          ("real_time", "cpu_time", "iterations") and not k.startswith("repetition"))
        if "GFLOP/s(20)" in r:
            extra = f"GFLOP/s(20) {r['GFLOP/s(20)']:.0f}, " + extra
        floor_text = "" if floor is None else "%.1f" % floor
        issue_text = "%.1f" % r["issue%"] if "issue%" in r else ""
        rate = r.get("interactions/s", 0.0)
        out.write(f"| {r['name']} | {r['real_time']:.4g} | {rate:.3e} | {floor_text} | {issue_text} | {extra} |\n")
EOF
}

if [ -x "$build/bench/bench_cuda" ] && [ "$cuda_filter" != none ]; then
  smi=""
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw --format=csv,noheader -lms 500 >"$out/clocks.csv" 2>&1 &
    smi=$!
  fi
  "$build/bench/bench_cuda" --benchmark_filter="$cuda_filter" --benchmark_out="$out/cuda.json" \
    --benchmark_out_format=json --benchmark_counters_tabular=true | tee "$out/cuda.txt"
  [ -n "$smi" ] && kill "$smi" 2>/dev/null || true
  if [ -f "$out/cuda.json" ]; then
    clocks="SM clock under load: $(awk -F', ' '$1+0>1000 {print $1+0}' "$out/clocks.csv" 2>/dev/null | sort -n |
      awk '{v[NR]=$1} END {if (NR) print v[1] "-" v[NR] " MHz (median " v[int((NR+1)/2)] ")"; else print "n/a"}')"
    gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)
    append_rows "$out/cuda.json" "$today · $commit · GPU: $gpu · $clocks · bench_cuda"
  fi
else
  echo "bench.sh: no bench_cuda in $build (CUDA off) or CUDA_FILTER=none; CUDA benchmarks skipped"
fi

if [ -x "$build/bench/bench_cpu" ] && [ "$cpu_filter" != none ]; then
  "$build/bench/bench_cpu" --benchmark_filter="$cpu_filter" --benchmark_out="$out/cpu.json" \
    --benchmark_out_format=json --benchmark_counters_tabular=true | tee "$out/cpu.txt"
  cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
  append_rows "$out/cpu.json" "$today · $commit · CPU: $cpu ($(nproc) threads) · bench_cpu"
fi
echo "bench.sh: rows appended to $results"
