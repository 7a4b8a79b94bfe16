#!/usr/bin/env bash
# Set-up + every test:
#  1. a Release build (unit, golden, CLI, C API, install consumer, benchmark smoke run, the
#     experiment's tests) against the torch of .venv/;
#  2. the Python package as a user installs it: `pip install --no-build-isolation .` into a
#     new venv that holds only torch (and pytest), then the Python suite against that
#     installed package, not the build tree;
#  3. transformers' own get_rope_index, one release per behaviour (scripts/hf_matrix.sh, on the
#     Release tree's module);
#  4. the C++ and Python suites under AddressSanitizer + UndefinedBehaviorSanitizer (the
#     experiment's tests run in stage 1 only: they drive the same operators as the Python
#     suite, and under the sanitizers they took 4 of CI's minutes);
#  5. the libFuzzer targets of tests/fuzz (clang 14, ASan + UBSan) for
#     CIRCLEROPE_FUZZ_SECONDS each (default 10: a smoke run in CI; scripts/fuzz.sh runs them long).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
jobs=$(nproc)
# Every compile goes through ccache (its cache is ~/.cache/ccache, kept between runs on a
# machine): the package build of stage 2 reuses stage 1's objects, and a rerun after a small
# change recompiles only what changed. CMake reads these variables; CCACHE_DISABLE=1 turns it off.
# CCACHE_BASEDIR makes the paths under this clone relative in what ccache hashes (and
# CCACHE_NOHASHDIR leaves the working directory out for -g builds), so that a new clone at
# another path reuses the objects an earlier clone compiled.
if command -v ccache >/dev/null; then
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_CUDA_COMPILER_LAUNCHER=ccache
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-true}"
fi

# OpenMP threads that wait at a barrier sleep instead of spinning: on two cores shared by
# ctest -j2, a spinning thread takes the core its partner needs (a loaded fresh-clone run spent
# 18 s of user time spinning in a 1 s benchmark smoke test). Tests only; benchmarks are run
# without it.
export OMP_WAIT_POLICY=passive

echo "== Release build and tests"
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/release -j "$jobs"
# The Python suite runs in stage 2 against the installed package, and in stage 3 from the
# sanitizer tree; here it would be a third run of the same tests.
ctest --test-dir build/release --output-on-failure -j "$jobs" -E '^python_tests$'

echo "== (release: ${SECONDS} s so far)"
echo "== pip install --no-build-isolation . into a venv with only torch, then the Python suite on it"
scripts/package_test.sh
echo "== (package: ${SECONDS} s so far)"
echo "== transformers releases, one per get_rope_index behaviour (docs/guides/compat.md)"
# 5.24.0 is the venv's pin (hf-5.18): it runs as installed. Both files (test_hf_versions.py and
# test_hf_models.py) run on every release listed: the model tests take ~25 s a release.
CIRCLEROPE_HF_BUILD="$PWD/build/release" HF_MATRIX_NO_BUILD=1 HF_MATRIX_PARALLEL="$jobs" \
  scripts/hf_matrix.sh 4.51.3 4.52.4 5.2.0 5.5.3 5.5.4 5.17.0 5.24.0
echo "== (transformers releases: ${SECONDS} s so far)"

echo "== AddressSanitizer + UndefinedBehaviorSanitizer build and tests"
cmake -S . -B build/sanitize -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCIRCLEROPE_SANITIZE=ON >/dev/null
cmake --build build/sanitize -j "$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build/sanitize --output-on-failure -j "$jobs" -E '^experiment_tests$'
echo "== (sanitize: ${SECONDS} s so far)"
echo "== clang: ASan + UBSan + libFuzzer targets, ${CIRCLEROPE_FUZZ_SECONDS:-10} s each, and the saved regression inputs"
# Only the fuzz targets (and the libraries they link) are built with clang here: a full clang
# tree with the C++ suites doubled this script's time on the shared 2-core machine. The whole
# tree builds and passes with clang 14 too: CC=clang-14 CXX=clang++-14 cmake -B build/clang.
CC=clang-14 CXX=clang++-14 cmake -S . -B build/fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCIRCLEROPE_SANITIZE=ON -DCIRCLEROPE_FUZZ=ON -DCIRCLEROPE_BUILD_BENCH=OFF -DCIRCLEROPE_BUILD_TORCH=OFF \
  -DCIRCLEROPE_FUZZ_SECONDS="${CIRCLEROPE_FUZZ_SECONDS:-10}" >/dev/null
cmake --build build/fuzz -j "$jobs" --target circlerope_fuzz_request circlerope_fuzz_layout \
  circlerope_fuzz_c_positions circlerope_fuzz_c_kernels circlerope_fuzz_c_cuda circlerope_fuzz_grammar circlerope_fuzz_paths
ctest --test-dir build/fuzz --output-on-failure -j "$jobs" -L fuzz
echo "== (clang + fuzz: ${SECONDS} s in all)"
echo "== all tests passed"
