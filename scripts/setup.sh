#!/usr/bin/env bash
# Installs what spattn needs to build, test and plot on a Debian machine:
# Debian packages (compiler, CMake, GoogleTest, libpng, OpenMP) when missing,
# and a Python virtual environment (.venv) with the pinned packages of
# requirements.txt. Safe to run repeatedly; does nothing that is already done.
set -euo pipefail
cd "$(dirname "$0")/.."

debian_packages=(g++ cmake make pkg-config libgtest-dev libgmock-dev libpng-dev libomp-dev python3-venv)
missing=()
for package in "${debian_packages[@]}"; do
  dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  as_root=""
  [ "$(id -u)" -eq 0 ] || as_root="sudo"
  $as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $as_root apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$python" -m venv .venv
fi
stamp=.venv/.requirements.sha
wanted=$(sha256sum requirements.txt | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$wanted" ]; then
  echo "setup: installing pinned Python packages (requirements.txt)"
  .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.txt
  echo "$wanted" > "$stamp"
fi
