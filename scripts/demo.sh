#!/usr/bin/env bash
# Set-up + the main job: install what is missing, build, run `circlerope demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
CIRCLEROPE_CPP_ONLY=1 scripts/setup.sh  # the main job is C++ only: no venv needed
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/release --target circlerope_cli
build/release/circlerope demo --out circlerope-demo.svg "$@"
