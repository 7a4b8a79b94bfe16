#!/usr/bin/env bash
# Instruction counts by callgrind, a repeatable measure on a machine whose wall time drifts.
# Each figure is the difference between 30 and 10 runs, over 20, so setup cancels out.
#  - positions: instructions per benchmark batch (8 x 814 tokens), per positions path;
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
  for path in scalar avx2 avx512; do  # positions paths (src/core/positions_simd.h)
    "$dir/circlerope_count_positions" "$scheme" 1 "$path" 2>/dev/null || continue  # not on this CPU
    a=$(count "$dir/circlerope_count_positions" "$scheme" 10 "$path")
    b=$(count "$dir/circlerope_count_positions" "$scheme" 30 "$path")
    echo "positions $scheme, $path path: $(((b - a) / 20)) instructions per batch"
  done
done
elements=$((512 * 18 * 128))
for path in portable avx2 avx512 avx512bf16; do
  "$dir/circlerope_count_rotary" float32 1 "$path" 2>/dev/null || continue  # not on this CPU
  for dtype in float32 bfloat16 float16; do
    a=$(count "$dir/circlerope_count_rotary" "$dtype" 10 "$path")
    b=$(count "$dir/circlerope_count_rotary" "$dtype" 30 "$path")
    awk -v d=$((b - a)) -v n=$((20 * elements)) -v p="$path" -v t="$dtype" \
      'BEGIN { printf "rotary %s %s: %.2f instructions per element\n", p, t, d / n }'
  done
done
