#!/usr/bin/env bash
# Long fuzzing runs: scripts/fuzz.sh [seconds-per-target] [target...]
#   targets: request layout c_positions c_kernels c_cuda grammar paths (default: all, one after the other)
#
# Builds the libFuzzer targets (clang + ASan + UBSan, build/fuzz) if needed, runs each target
# for the given seconds (default 600) from its seed corpus (tests/fuzz/corpus/<target>) and the
# build tree's work corpus, and prints the executions of each target and their total. A
# finding stops libFuzzer; the target is restarted for the rest of its time (at most
# CIRCLEROPE_FUZZ_RESTARTS times, default 5). Crash inputs are kept in fuzz-crashes/<target>/
# (git-ignored); each run's log is fuzz-crashes/<target>/run-N.log.
#
# Environment: CIRCLEROPE_FUZZ_SKIP_KNOWN=0 checks the known findings too (see
# tests/fuzz/README.md); CIRCLEROPE_FUZZ_NICE (default 19) is the nice level of the runs;
# CC/CXX default to clang-14/clang++-14.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
seconds=${1:-600}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(request layout c_positions c_kernels c_cuda grammar paths)
for t in "${targets[@]}"; do
  case $t in request|layout|c_positions|c_kernels|c_cuda|grammar|paths) ;; *) echo "unknown target '$t' (expected request, layout, c_positions, c_kernels, c_cuda, grammar or paths)" >&2; exit 2 ;; esac
done
[[ $seconds =~ ^[0-9]+$ ]] && [ "$seconds" -gt 0 ] || { echo "seconds-per-target must be a positive integer (got '$seconds')" >&2; exit 2; }

build=build/fuzz
if [ ! -f $build/CMakeCache.txt ]; then
  CC=${CC:-clang-14} CXX=${CXX:-clang++-14} cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCIRCLEROPE_BUILD_BENCH=OFF \
    -DCIRCLEROPE_SANITIZE=ON -DCIRCLEROPE_FUZZ=ON >/dev/null
fi
cmake --build $build -j "$(nproc)" --target $(printf 'circlerope_fuzz_%s ' "${targets[@]}") >/dev/null

nice_level=${CIRCLEROPE_FUZZ_NICE:-19}
max_restarts=${CIRCLEROPE_FUZZ_RESTARTS:-5}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
total=0
declare -A executed findings
for t in "${targets[@]}"; do
  work=$root/$build/tests/fuzz/work/$t
  crashes=$root/fuzz-crashes/$t
  mkdir -p "$work" "$crashes"
  max_len=4096
  [ $t = layout ] || [ $t = grammar ] && max_len=256
  dict=()
  [ -f tests/fuzz/$t.dict ] && dict=(-dict=tests/fuzz/$t.dict)
  deadline=$(( $(date +%s) + seconds ))
  executed[$t]=0
  findings[$t]=0
  run=0
  while :; do
    left=$(( deadline - $(date +%s) ))
    [ $left -gt 0 ] || break
    run=$((run + 1))
    log=$crashes/run-$run.log
    set +e
    nice -n "$nice_level" $build/tests/fuzz/circlerope_fuzz_$t -max_total_time=$left -timeout=20 \
      -rss_limit_mb=2048 -max_len=$max_len "${dict[@]}" -print_final_stats=1 \
      -artifact_prefix="$crashes/" "$work" tests/fuzz/corpus/$t >"$log" 2>&1
    status=$?
    set -e
    n=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || true)
    executed[$t]=$(( ${executed[$t]} + ${n:-0} ))
    if [ $status -ne 0 ]; then
      findings[$t]=$(( ${findings[$t]} + 1 ))
      echo "$t: run $run stopped (status $status): $(grep -m1 -E 'circlerope fuzz finding|ERROR: |runtime error' "$log" || echo '?')"
      echo "    $(grep -m1 -o "Test unit written to .*" "$log" || true)"
      [ $run -le "$max_restarts" ] || { echo "$t: $max_restarts restarts used, stopping this target"; break; }
    fi
  done
  total=$(( total + ${executed[$t]} ))
  printf '%-12s %12d executions  %d finding(s)\n' "$t" "${executed[$t]}" "${findings[$t]}"
done
printf '%-12s %12d executions\n' total "$total"
