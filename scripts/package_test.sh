#!/usr/bin/env bash
# The package as a user installs it: a new venv (build/package-venv) holding only torch, the
# build tools and pytest from constraints.txt; `pip install --no-build-isolation .` into it;
# then python/tests run against the installed package (no PYTHONPATH into a build tree), its
# `circlerope` command on the venv's PATH. CUDA kernels are left out here (CIRCLEROPE_CUDA=OFF:
# there is no GPU to run them, and the Release tree compiles them).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
uv="${XDG_CACHE_HOME:-$HOME/.cache}/circlerope/tools/bin/uv"   # scripts/setup.sh installs it
venv="$root/build/package-venv"
rm -rf "$venv"
"$uv" venv -q --seed --python "$root/.venv/bin/python" "$venv"
"$uv" pip install -q --python "$venv/bin/python" --link-mode hardlink -c constraints.txt \
  torch numpy scikit-build-core pybind11 pytest pytest-xdist
CIRCLEROPE_CUDA=OFF "$venv/bin/python" -m pip install -q --disable-pip-version-check \
  --no-build-isolation -C build-dir="$root/build/package-build" .
cd "$root/build"  # not the source tree: `import circlerope` must find the installed package
"$venv/bin/python" -c "import circlerope, sys; assert circlerope.__file__.startswith('$venv'), circlerope.__file__; print('installed:', circlerope.__file__)"
"$venv/bin/circlerope" --help | head -1   # the entry point runs the shipped command
# One pytest worker per core (pytest-xdist), each running torch on one thread.
CIRCLEROPE_SOURCE_DIR="$root" CIRCLEROPE_CLI="$venv/bin/circlerope" CIRCLEROPE_TEST_THREADS=1 \
  "$venv/bin/python" -m pytest -q -p no:cacheprovider -n "$(nproc)" "$root/python/tests"
