#!/usr/bin/env bash
# tests/cli/expect_exit.sh - runs a command and checks how it ended.
#
# usage: expect_exit.sh CODE REGEX [--file PATH]... -- COMMAND [ARGS...]
#
# Passes when COMMAND exits with exactly CODE, its stdout+stderr match the
# extended regular expression REGEX, and every --file PATH exists and is not
# empty afterwards (each is removed before the run). For CODE 2 (the tool's
# error exit) stderr must also be exactly one line starting "spattn: error: ",
# besides progress lines ("[...]").
set -u

if [ $# -lt 3 ]; then
  echo "usage: $0 CODE REGEX [--file PATH]... -- COMMAND [ARGS...]" >&2
  exit 64
fi
expected_code=$1
regex=$2
shift 2
files=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  case $1 in
    --file) files+=("$2"); shift 2 ;;
    *) echo "expect_exit.sh: unknown option $1" >&2; exit 64 ;;
  esac
done
if [ $# -lt 2 ] || [ "$1" != "--" ]; then
  echo "expect_exit.sh: missing -- COMMAND" >&2
  exit 64
fi
shift

for f in "${files[@]+"${files[@]}"}"; do rm -f "$f"; done

stdout_file=$(mktemp)
stderr_file=$(mktemp)
trap 'rm -f "$stdout_file" "$stderr_file"' EXIT
"$@" >"$stdout_file" 2>"$stderr_file"
code=$?

failed=0
if [ "$code" -ne "$expected_code" ]; then
  echo "FAIL: exit code $code, expected $expected_code"
  failed=1
fi
if ! cat "$stdout_file" "$stderr_file" | grep -Eq -- "$regex"; then
  echo "FAIL: output does not match /$regex/"
  failed=1
fi
if [ "$expected_code" -eq 2 ]; then
  messages=$(grep -v '^\[.*\]$' "$stderr_file" || true)
  if [ "$(printf '%s\n' "$messages" | grep -c .)" -ne 1 ] || ! printf '%s\n' "$messages" | grep -q '^spattn: error: '; then
    echo "FAIL: stderr is not one line 'spattn: error: ...'"
    failed=1
  fi
fi
for f in "${files[@]+"${files[@]}"}"; do
  if [ ! -s "$f" ]; then
    echo "FAIL: file $f was not written"
    failed=1
  fi
done

if [ "$failed" -ne 0 ]; then
  echo "--- command: $*"
  echo "--- stdout:"; cat "$stdout_file"
  echo "--- stderr:"; cat "$stderr_file"
fi
exit "$failed"
