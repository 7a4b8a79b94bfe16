#!/usr/bin/env bash
# Installs the Debian packages circlerope needs, if any are missing.
# Usage: scripts/setup.sh            (sourced by demo.sh and test.sh)
set -euo pipefail

packages=(cmake ninja-build g++ libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev libcli11-dev
          libtorch-dev python3-torch python3-dev pybind11-dev python3-numpy python3-pytest libopenblas0-openmp
          bochs bochsbios vgabios  # tests/avx512_emulator (AVX-512 paths under Bochs)
          clang-14 libclang-rt-14-dev  # the libFuzzer targets of tests/fuzz (scripts/test.sh, scripts/fuzz.sh)
          python3-tqdm python3-matplotlib)  # experiments/tiny_vlm: progress and plots (its tests write them)
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
