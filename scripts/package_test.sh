#!/usr/bin/env bash
# The package as a user installs it, into new venvs (build/package-venv*) holding only torch,
# the build tools and pytest from constraints.txt, with `pip install --no-build-isolation .`;
# then python/tests run against the installed package (no PYTHONPATH into a build tree):
#  1. on a machine without CLI11 and nlohmann-json (hidden from CMake here): the package must
#     install without the C++ command, its `circlerope` entry point must say why, and the whole
#     Python suite runs against it;
#  2. with them, as this machine has them: the command is shipped, and the suite's checks
#     that drive it run.
# CUDA kernels are left out (CIRCLEROPE_CUDA=OFF: there is no GPU to run them, and the Release
# tree compiles them).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
uv="${XDG_CACHE_HOME:-$HOME/.cache}/circlerope/tools/bin/uv"   # scripts/setup.sh installs it

# install VENV BUILD_DIR [pip options...]: a new venv with the package installed
install() {
  local venv="$1" build="$2"
  shift 2
  rm -rf "$venv"
  "$uv" venv -q --seed --python "$root/.venv/bin/python" "$venv"
  "$uv" pip install -q --python "$venv/bin/python" --link-mode hardlink -c constraints.txt \
    torch numpy scikit-build-core pybind11 pytest pytest-xdist
  CIRCLEROPE_CUDA=OFF "$venv/bin/python" -m pip install -q --disable-pip-version-check \
    --no-build-isolation -C build-dir="$build" "$@" .
  (cd "$root/build" && "$venv/bin/python" -c "import circlerope; assert circlerope.__file__.startswith('$venv'), \
circlerope.__file__; print('installed:', circlerope.__file__)")
}

echo "== without CLI11 and nlohmann-json"
bare="$root/build/package-venv-bare"
install "$bare" "$root/build/package-build-bare" \
  -C cmake.define.CMAKE_DISABLE_FIND_PACKAGE_CLI11=ON -C cmake.define.CMAKE_DISABLE_FIND_PACKAGE_nlohmann_json=ON
if out=$("$bare/bin/circlerope" --help 2>&1); then
  echo "package_test: the entry point ran a command that should not be there: $out" >&2
  exit 1
fi
grep -q "the command is not in this installation" <<<"$out" || { echo "package_test: unclear message: $out" >&2; exit 1; }
echo "entry point without the command: ${out:0:100}..."
# One pytest worker per core (pytest-xdist), each running torch on one thread.
(cd "$root/build" && CIRCLEROPE_SOURCE_DIR="$root" CIRCLEROPE_TEST_THREADS=1 \
  "$bare/bin/python" -m pytest -q -p no:cacheprovider -n "$(nproc)" "$root/python/tests")

echo "== with the command"
full="$root/build/package-venv"
install "$full" "$root/build/package-build"
"$full/bin/circlerope" --help | head -1   # the entry point runs the shipped command
# the test files whose checks run the command (they skip without CIRCLEROPE_CLI)
mapfile -t with_cli < <(grep -rl CIRCLEROPE_CLI "$root/python/tests" --include='test_*.py')
(cd "$root/build" && CIRCLEROPE_SOURCE_DIR="$root" CIRCLEROPE_CLI="$full/bin/circlerope" CIRCLEROPE_TEST_THREADS=1 \
  "$full/bin/python" -m pytest -q -p no:cacheprovider -n "$(nproc)" "${with_cli[@]}")
