#!/usr/bin/env bash
# Instruction counts by callgrind, a repeatable measure on a machine whose wall time drifts.
# Each figure is the difference between 30 and 10 runs, over 20, so setup cancels out.
#  - positions: instructions per benchmark batch (8 x 814 tokens);
#  - rotary: instructions per rotated element, q and k of S = 512 in place, one thread,
#    every path this CPU runs.
# Usage: bench/instructions.sh [BUILD_DIR]   (default build/release)
set -euo pipefail
dir="${1:-build/release}/bench"
count() {
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$@" 2>&1 |
    awk '/Collected/ {print $4}'
}
for scheme in circle mrope; do
  a=$(count "$dir/circlerope_count_positions" "$scheme" 10)
  b=$(count "$dir/circlerope_count_positions" "$scheme" 30)
  echo "positions $scheme: $(((b - a) / 20)) instructions per batch"
done
elements=$((512 * 18 * 128))
for path in portable avx2; do
  "$dir/circlerope_count_rotary" float32 1 "$path" 2>/dev/null || continue  # not on this CPU
  for dtype in float32 bfloat16 float16; do
    a=$(count "$dir/circlerope_count_rotary" "$dtype" 10 "$path")
    b=$(count "$dir/circlerope_count_rotary" "$dtype" 30 "$path")
    awk -v d=$((b - a)) -v n=$((20 * elements)) -v p="$path" -v t="$dtype" \
      'BEGIN { printf "rotary %s %s: %.2f instructions per element\n", p, t, d / n }'
  done
done
