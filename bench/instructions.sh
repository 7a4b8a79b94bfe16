#!/usr/bin/env bash
# Instructions per benchmark batch (8 x 814 tokens), counted by callgrind:
# the difference between 30 and 10 calls, over 20, so setup cancels out.
# Usage: bench/instructions.sh [BUILD_DIR]   (default build/release)
set -euo pipefail
bin="${1:-build/release}/bench/circlerope_count_positions"
count() {
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" "$1" "$2" 2>&1 |
    awk '/Collected/ {print $4}'
}
for scheme in circle mrope; do
  a=$(count "$scheme" 10)
  b=$(count "$scheme" 30)
  echo "$scheme: $(((b - a) / 20)) instructions per batch"
done
