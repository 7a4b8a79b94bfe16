#!/usr/bin/env bash
# Set-up + every test: a Release build (unit, golden, CLI, C API, install
# consumer, benchmark smoke run), then the same suite under AddressSanitizer +
# UndefinedBehaviorSanitizer, then the libFuzzer targets of tests/fuzz (clang 14, ASan + UBSan)
# for CIRCLEROPE_FUZZ_SECONDS each (default 30).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
jobs=$(nproc)

echo "== Release build and tests"
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/release -j "$jobs"
ctest --test-dir build/release --output-on-failure -j "$jobs"

echo "== (release: ${SECONDS} s so far)"
echo "== AddressSanitizer + UndefinedBehaviorSanitizer build and tests"
cmake -S . -B build/sanitize -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCIRCLEROPE_SANITIZE=ON >/dev/null
cmake --build build/sanitize -j "$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build/sanitize --output-on-failure -j "$jobs"
echo "== (sanitize: ${SECONDS} s so far)"
echo "== clang: ASan + UBSan + libFuzzer targets, ${CIRCLEROPE_FUZZ_SECONDS:-30} s each, and the saved regression inputs"
# Only the fuzz targets (and the libraries they link) are built with clang here: a full clang
# tree with the C++ suites doubled this script's time on the shared 2-core machine. The whole
# tree builds and passes with clang 14 too: CC=clang-14 CXX=clang++-14 cmake -B build/clang.
CC=clang-14 CXX=clang++-14 cmake -S . -B build/fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCIRCLEROPE_SANITIZE=ON -DCIRCLEROPE_FUZZ=ON -DCIRCLEROPE_BUILD_BENCH=OFF \
  -DCIRCLEROPE_FUZZ_SECONDS="${CIRCLEROPE_FUZZ_SECONDS:-30}" >/dev/null
cmake --build build/fuzz -j "$jobs" --target circlerope_fuzz_request circlerope_fuzz_layout \
  circlerope_fuzz_c_positions circlerope_fuzz_c_kernels
ctest --test-dir build/fuzz --output-on-failure -j "$jobs" -L fuzz
echo "== (clang + fuzz: ${SECONDS} s in all)"
echo "== all tests passed"
