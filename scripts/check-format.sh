#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Fails when a tracked C++/CUDA file differs from what .clang-format makes of it. Skips (saying so) without
# clang-format. Fix with: git ls-files '*.cpp' '*.hpp' '*.cu' '*.cuh' | xargs clang-format -i
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v clang-format >/dev/null 2>&1; then
  echo "format check: clang-format not installed, skipped"
  exit 0
fi
if git ls-files '*.cpp' '*.hpp' '*.cu' '*.cuh' | xargs clang-format --dry-run --Werror 2>/tmp/matcha-format.log; then
  echo "format check: ok"
else
  grep "error:" /tmp/matcha-format.log | cut -d: -f1 | sort -u | sed 's/^/format check: not clang-formatted: /'
  exit 1
fi
