#!/usr/bin/env bash
# tests/package/check_package.sh - the installed CMake package, as a user sees it.
#
# Installs the build tree BUILD into a fresh prefix under WORK, configures
# examples/cpp there with a fresh cmake that knows only the prefix
# (find_package(spattn)), builds the examples and runs each of them.
#
# usage: check_package.sh CMAKE SOURCE_DIR BUILD_DIR WORK_DIR
set -euo pipefail
cmake=$1 source=$2 build=$3 work=$4

rm -rf "$work"
mkdir -p "$work"
"$cmake" --install "$build" --prefix "$work/prefix" >"$work/install.log"
for f in include/spattn/spattn.hpp lib/cmake/spattn/spattnConfig.cmake lib/cmake/spattn/spattnConfigVersion.cmake; do
  [[ -f $work/prefix/$f || -f $work/prefix/${f/lib\//lib64/} ]] || { echo "not installed: $f"; exit 1; }
done
# No source or build tree on the include path: only what was installed.
"$cmake" -S "$source/examples/cpp" -B "$work/examples" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" >"$work/configure.log"
"$cmake" --build "$work/examples" -j1 >"$work/build.log"
for example in pattern_attention varlen_attention dynamic_selection attention_backward context_parallel; do
  "$work/examples/$example"
done
