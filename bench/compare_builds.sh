#!/usr/bin/env bash
# Two builds of circlerope, A and B, timed against each other on the same rows: `bench rotary`
# runs of A and B alternate for ROUNDS rounds, and each row prints the median of its per-round
# speed-ups B/A with their range. Alternating rounds cancel most of the drift a shared or
# virtual machine shows between runs; stop other work for the duration.
# Usage: bench/compare_builds.sh BUILD_A BUILD_B ROUNDS [bench rotary options...]
#   e.g. bench/compare_builds.sh /tmp/old/build/release build/release 3 --path avx512bf16 \
#          --dtypes bfloat16 --seq-lens 1024 4096 16384 --min-seconds 0.3
set -euo pipefail
if (($# < 3)); then
  echo "usage: $0 BUILD_A BUILD_B ROUNDS [bench rotary options...]" >&2
  exit 2
fi
a="$1/circlerope" b="$2/circlerope" rounds="$3"
shift 3
for bin in "$a" "$b"; do
  [[ -x "$bin" ]] || { echo "compare_builds: no circlerope binary at '$bin'" >&2; exit 2; }
done
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "compare_builds: ROUNDS must be a positive integer (got '$rounds')" >&2; exit 2; }
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
for ((r = 1; r <= rounds; ++r)); do
  echo "compare_builds: round $r of $rounds" >&2
  "$a" bench rotary "$@" --format json > "$out/A-$r.json" 2>/dev/null
  "$b" bench rotary "$@" --format json > "$out/B-$r.json" 2>/dev/null
done
python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
rows = {}
for side in "AB":
    for r in range(1, rounds + 1):
        for x in json.load(open(f"{out}/{side}-{r}.json"))["results"]:
            key = (x["path"], x["dtype"], x["seq_len"], x["direction"], x["mode"])
            rows.setdefault(key, {}).setdefault(side, []).append(x["gbps"])
print(f"{'path':<11} {'dtype':<9} {'S':>6} {'direction':<9} {'mode':<13} {'A GB/s':>7} {'B GB/s':>7}  B/A median [range]")
for key, v in rows.items():
    ratios = [b / a for a, b in zip(v["A"], v["B"])]
    print(f"{key[0]:<11} {key[1]:<9} {key[2]:>6} {key[3]:<9} {key[4]:<13} {statistics.median(v['A']):7.1f} "
          f"{statistics.median(v['B']):7.1f}  {statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]")
PY
