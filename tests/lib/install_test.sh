#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# `cmake --install` of the C libraries into a temporary prefix, then the two example programs compiled from their C
# sources against the installed headers and libraries with pkg-config alone, and run (CPU engine), as a user outside
# the build tree would.
#   usage: install_test.sh BUILD_DIR SOURCE_DIR C_COMPILER
set -euo pipefail
build=$1 source=$2 cc=$3
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
pcdir=$(dirname "$(find "$prefix" -name matcha_force.pc)")
for header in matcha_force.h cunbody1.h matcha_g6.h; do
  [ -f "$prefix/include/$header" ] || { echo "install_test: $header not installed" >&2; exit 1; }
done
export PKG_CONFIG_PATH=$pcdir
libdir=$(pkg-config --variable=libdir matcha_force)
export MATCHA_ENGINE=cpu LD_LIBRARY_PATH=$libdir
for example in force:force_plummer g6:g6_plummer; do
  library=matcha_${example%%:*} program=$prefix/${example##*:}
  # shellcheck disable=SC2046  # pkg-config's flags are meant to split
  "$cc" -std=c99 -D_POSIX_C_SOURCE=199309L -Wall -Wextra -Werror -I "$source/apps/examples" \
    -o "$program" "$source/apps/examples/${example##*:}.c" $(pkg-config --cflags --libs "$library") -lm
  "$program" 256
done
echo "install_test: headers, libraries and pkg-config files in $prefix work"
