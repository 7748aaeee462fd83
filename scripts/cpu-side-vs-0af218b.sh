#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The Speed issue's CPU target: the CPU side of a force call (tree build + walk) at 2^18 on this machine, at commit
# 0af218b and now, side by side in one run (bench/tools/cpu_side.cpp compiled against both libraries). Builds 0af218b
# (CPU only) in a temporary worktree. Usage: scripts/cpu-side-vs-0af218b.sh [BUILD_DIR] [N] [NCRIT] (NCRIT for the
# new code only; 0af218b runs at its default, 64)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
n=${2:-262144}
ncrit=${3:-}
old=${TMPDIR:-/tmp}/matcha-0af218b
if [ ! -d "$old" ]; then git worktree add -q "$old" 0af218b; fi
cmake -S "$old" -B "$old/build" -DCMAKE_BUILD_TYPE=Release -DMATCHA_ENABLE_CUDA=OFF -DMATCHA_BUILD_TESTS=OFF \
  -DMATCHA_BUILD_BENCHMARKS=OFF >/dev/null
cmake --build "$old/build" -j "$(nproc)" --target matcha_tree matcha_gpu matcha_ic matcha_core >/dev/null
cmake --build "$build" -j "$(nproc)" --target matcha_tree matcha_gpu matcha_ic matcha_core >/dev/null
compile() {  # source tree, build dir, output
  g++ -O2 -std=c++20 bench/tools/cpu_side.cpp -I"$1/core/include" -I"$1/tree/include" -I"$1/ic/include" \
    -I"$1/gpu/include" -I/usr/include/eigen3 "$2/tree/libmatcha_tree.a" "$2/gpu/libmatcha_gpu.a" \
    "$2/ic/libmatcha_ic.a" "$2/core/libmatcha_core.a" -ltbb -fopenmp-simd -o "$3"
}
compile "$old" "$old/build" "$old/cpu_side"
compile . "$build" "$build/cpu_side"
for rep in 1 2 3; do
  echo "0af218b: $("$old/cpu_side" "$n")"
  echo "now:     $("$build/cpu_side" "$n" $ncrit)"
done
