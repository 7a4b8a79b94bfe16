#!/usr/bin/env bash
# Instruction counts by callgrind, a repeatable measure on a machine whose wall time drifts.
# Each figure is the difference between 30 and 10 runs, over 20, so setup cancels out.
#  - positions: instructions per benchmark batch (8 x 814 tokens), per positions path;
#  - rotary: instructions per rotated element, q and k of S = 512 in place, one thread,
#    every path this CPU runs (under valgrind: not the AVX-512 ones, which it does not
#    emulate), without and with software prefetch.
# Usage: bench/instructions.sh [BUILD_DIR]   (default build/release)
set -euo pipefail
dir="${1:-build/release}/bench"
count() {
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$@" 2>&1 |
    awk '/Collected/ {print $4}'
}
# A path runs under valgrind only if the CPU has it and valgrind emulates it (no AVX-512).
runs() { valgrind --tool=none "$@" >/dev/null 2>&1; }
for scheme in circle mrope; do
  for path in scalar avx2 avx512; do  # positions paths (src/core/positions_simd.h)
    if ! runs "$dir/circlerope_count_positions" "$scheme" 1 "$path"; then
      echo "positions $scheme, $path path: not counted (not on this CPU, or not under valgrind)"
      continue
    fi
    a=$(count "$dir/circlerope_count_positions" "$scheme" 10 "$path")
    b=$(count "$dir/circlerope_count_positions" "$scheme" 30 "$path")
    echo "positions $scheme, $path path: $(((b - a) / 20)) instructions per batch"
  done
done
elements=$((512 * 18 * 128))
for path in portable avx2 avx512 avx512bf16; do
  if ! runs "$dir/circlerope_count_rotary" float32 1 "$path"; then
    echo "rotary $path: not counted (not on this CPU, or not under valgrind)"
    continue
  fi
  for dtype in float32 bfloat16 float16; do
    for prefetch in off on; do
      a=$(count "$dir/circlerope_count_rotary" "$dtype" 10 "$path" "$prefetch")
      b=$(count "$dir/circlerope_count_rotary" "$dtype" 30 "$path" "$prefetch")
      awk -v d=$((b - a)) -v n=$((20 * elements)) -v p="$path" -v t="$dtype" -v f="$prefetch" \
        'BEGIN { printf "rotary %s %s, prefetch %s: %.3f instructions per element\n", p, t, f, d / n }'
    done
  done
done
