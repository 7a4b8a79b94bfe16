#!/usr/bin/env bash
# Installs what circlerope needs, if anything is missing:
#  1. Debian packages for the C++ core, the C API, the CLI and their tests (no Python);
#  2. unless CIRCLEROPE_CPP_ONLY=1: the project's virtual environment .venv/ in the repository
#     root, with torch, transformers and the rest pinned in constraints.txt, from PyPI.
# Packages come from uv's cache (~/.cache/uv) once downloaded, hard-linked into each new
# .venv: a fresh clone on a machine that has set up once downloads nothing (torch for Linux
# is a CUDA build of several GB).
# Usage: scripts/setup.sh            (sourced by demo.sh, test.sh and experiment.sh)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

packages=(cmake ninja-build g++ libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev libcli11-dev
          bochs bochsbios vgabios  # tests/avx512_emulator (AVX-512 paths under Bochs)
          clang-14 libclang-rt-14-dev  # the libFuzzer targets of tests/fuzz (scripts/test.sh, scripts/fuzz.sh)
          ccache)  # scripts/test.sh compiles through it: a rerun recompiles only what changed
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

[[ "${CIRCLEROPE_CPP_ONLY:-0}" == 1 ]] && exit 0

# uv (from PyPI) makes the venv and installs into it; it lives in its own small venv.
uv_version=0.13.9
tools="${XDG_CACHE_HOME:-$HOME/.cache}/circlerope/tools"
uv="$tools/bin/uv"
if ! "$uv" --version 2>/dev/null | grep -q " $uv_version"; then
  echo "setup: installing uv $uv_version into $tools" >&2
  base="${CIRCLEROPE_BASE_PYTHON:-$(command -v python3)}"
  "$base" -m venv --clear "$tools"
  "$tools/bin/python" -m pip install -q --disable-pip-version-check "uv==$uv_version"
fi

venv="$root/.venv"
if [[ ! -x "$venv/bin/python" ]]; then
  echo "setup: creating $venv" >&2
  "$uv" venv -q --python "${CIRCLEROPE_BASE_PYTHON:-$(command -v python3)}" "$venv"
fi
# Every pinned package, exactly at its pin; a no-op (well under a second) when all are there.
mapfile -t wanted < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$root/constraints.txt")
"$uv" pip install -q --python "$venv/bin/python" --link-mode hardlink -c "$root/constraints.txt" "${wanted[@]}"
