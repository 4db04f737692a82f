#!/usr/bin/env bash
# tests/cli/bench_plot.sh - a tiny `spattn bench --plot-dir` run end to end.
#
# usage: bench_plot.sh SPATTN_BINARY OUT_DIR
# Exits 77 (skipped) when the plotting interpreter ($SPATTN_PYTHON, else the
# project's .venv, else python3; the same order as `spattn bench --plot-dir`)
# has no matplotlib.
set -eu
spattn=$1
out_dir=$2
venv_python="$(cd "$(dirname "$0")/../.." && pwd)/.venv/bin/python"
if [ -n "${SPATTN_PYTHON:-}" ]; then
  python=$SPATTN_PYTHON
elif [ -x "$venv_python" ]; then
  python=$venv_python
else
  python=python3
fi
if ! "$python" -c "import matplotlib" >/dev/null 2>&1; then
  echo "skipped: $python has no matplotlib"
  exit 77
fi
rm -rf "$out_dir"
mkdir -p "$out_dir"
"$spattn" bench --seqs 64,128 --patterns dense,sliding-window --heads 1 --repeats 1 \
  --out "$out_dir/bench.json" --plot-dir "$out_dir"
count=$(find "$out_dir" -name '*.png' -size +1k | wc -l)
if [ "$count" -lt 1 ]; then
  echo "FAIL: no plot written to $out_dir"
  exit 1
fi
echo "ok: $count plot(s) in $out_dir"
