#!/usr/bin/env bash
# circlerope's compat modes against the real transformers releases, one release at a time.
#
# One documented command runs the whole matrix:
#
#     scripts/hf_matrix.sh
#
# and a list of versions runs a subset (CI runs one release per behaviour):
#
#     scripts/hf_matrix.sh 4.51.3 5.2.0 5.5.3 5.24.0
#
# and --record (first) also writes tests/data/hf_mrope_releases.json: each release's own
# outputs on a fixed set of requests, which tests/test_hf_compat.cpp checks without
# transformers (rerun it with every version after adding one):
#
#     scripts/hf_matrix.sh --record
#
# For each version it
#  1. installs transformers==VERSION with the dependencies that release asks for
#     (huggingface_hub, tokenizers, ...) into build/hf/VERSION/ (uv pip install --target, from
#     uv's cache: after the first run nothing is downloaded; an existing dir is kept). torch
#     and numpy come from .venv/ (numpy is pinned to the venv's). The venv's own transformers
#     (constraints.txt's pin) is used as is, without a dir;
#  2. runs python/tests/test_hf_versions.py, test_hf_models.py and test_hf_families.py with
#     PYTHONPATH=build/hf/VERSION:BUILD/python, so that release is the transformers the test
#     imports. The tests build tiny models from configs (nothing is downloaded): Qwen2-VL /
#     Qwen2.5-VL / Qwen3-VL, and every family circlerope.hf switches that the release has,
#     and compare their get_rope_index with circlerope's under compat_for_version(VERSION).
#
# BUILD is $CIRCLEROPE_HF_BUILD (default build/hf-build): configured there if it is not yet,
# then its target circlerope_python is brought up to date (a no-op when nothing changed;
# HF_MATRIX_NO_BUILD=1 skips it).
# Environment: HF_MATRIX_TESTS (default "test_hf_versions.py test_hf_models.py test_hf_families.py":
# the compat modes, circlerope.hf.apply, its families), HF_MATRIX_PYTEST_ARGS (extra pytest arguments, e.g. "-x"),
# HF_MATRIX_CASES (random requests per category, default 12), HF_MATRIX_INSTALL_ONLY=1
# (install, run nothing), HF_MATRIX_PARALLEL (releases tested at once, default 1; each then
# runs torch on one thread, CIRCLEROPE_TEST_THREADS=1: the tiny models gain next to nothing
# from a second thread, and two releases side by side finish in about half the time on two
# cores). Prints one line per version and a summary; exits non-zero if any version failed or
# could not be installed.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
record=""
if [[ "${1:-}" == "--record" ]]; then
  record="$root/build/hf/records"
  rm -rf "$record"
  shift
  if (($#)); then
    echo "hf_matrix: --record runs every version (the file holds one result per mode)" >&2
    exit 2
  fi
fi

# One release per behaviour change of get_rope_index and its callers (docs/guides/compat.md).
all_versions=(4.49.0 4.51.3 4.52.4 4.54.1 4.56.2 4.57.6 5.1.0 5.2.0 5.3.0 5.5.3 5.5.4 5.6.0 5.13.1 5.17.0 5.18.0 5.24.0)
if (($#)); then versions=("$@"); else versions=("${all_versions[@]}"); fi

python="$root/.venv/bin/python"
uv="${CIRCLEROPE_UV:-${XDG_CACHE_HOME:-$HOME/.cache}/circlerope/tools/bin/uv}"
if [[ ! -x "$python" || ! -x "$uv" ]]; then
  echo "hf_matrix: needs .venv/ and uv: run scripts/setup.sh first" >&2
  exit 2
fi
venv_transformers="$("$python" -c 'import transformers; print(transformers.__version__)' 2>/dev/null || true)"
venv_numpy="$("$python" -c 'import numpy; print(numpy.__version__)')"

build="${CIRCLEROPE_HF_BUILD:-$root/build/hf-build}"
mkdir -p "$root/build/hf"
if [[ "${HF_MATRIX_INSTALL_ONLY:-0}" != 1 && "${HF_MATRIX_NO_BUILD:-0}" != 1 ]]; then
  if [[ ! -f "$build/build.ninja" ]]; then
    echo "hf_matrix: configuring $build" >&2
    cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCIRCLEROPE_CUDA=OFF \
      -DCIRCLEROPE_BUILD_BENCH=OFF >/dev/null || exit 2
  fi
  cmake --build "$build" -j "${HF_MATRIX_JOBS:-2}" --target circlerope_python >"$root/build/hf/build.log" 2>&1 || {
    echo "hf_matrix: building circlerope_python in $build failed (see build/hf/build.log)" >&2
    exit 2
  }
fi

# Installs VERSION into build/hf/VERSION unless it is there (the .complete mark is written last).
install_version() {
  local ver="$1" dir="$root/build/hf/$1"
  [[ "$ver" == "$venv_transformers" ]] && return 0
  [[ -f "$dir/.complete" ]] && return 0
  rm -rf "$dir"
  mkdir -p "$dir"
  printf 'numpy==%s\n' "$venv_numpy" >"$dir.constraints"
  if ! "$uv" pip install -q --python "$python" --target "$dir" --link-mode hardlink \
      -c "$dir.constraints" "transformers==$ver" >"$dir.install.log" 2>&1; then
    echo "hf_matrix: installing transformers $ver failed (see $dir.install.log)" >&2
    return 1
  fi
  rm -f "$dir.constraints"
  touch "$dir/.complete"
}

# The test files run against each release (HF_MATRIX_TESTS, names under python/tests).
tests=()
for name in ${HF_MATRIX_TESTS:-test_hf_versions.py test_hf_models.py test_hf_families.py}; do tests+=("$root/python/tests/$name"); done

declare -A result
failed=0
start=$SECONDS
parallel="${HF_MATRIX_PARALLEL:-1}"
[[ "$parallel" =~ ^[1-9][0-9]*$ ]] || { echo "hf_matrix: HF_MATRIX_PARALLEL='$parallel' is not a positive integer" >&2; exit 2; }
threads_env=()
((parallel > 1)) && threads_env=(CIRCLEROPE_TEST_THREADS=1 OMP_NUM_THREADS=1)

# Installs first, one at a time (uv's cache is shared), then the tests, `parallel` at once.
to_test=()
for ver in "${versions[@]}"; do
  if ! install_version "$ver"; then
    result[$ver]="install failed"
    failed=1
  elif [[ "${HF_MATRIX_INSTALL_ONLY:-0}" == 1 ]]; then
    result[$ver]="installed"
  else
    to_test+=("$ver")
  fi
done

# Runs one release's tests; its summary line goes to build/hf/VERSION.result.
test_version() {
  local ver="$1" path log rc summary t0=$SECONDS
  if [[ "$ver" == "$venv_transformers" ]]; then path="$build/python"; else path="$root/build/hf/$ver:$build/python"; fi
  log="$root/build/hf/$ver.log"
  # shellcheck disable=SC2086
  env "${threads_env[@]}" PYTHONPATH="$path" HF_MATRIX_EXPECT_VERSION="$ver" HF_MATRIX_RECORD_DIR="$record" \
    "$python" -m pytest -q -p no:cacheprovider \
    ${HF_MATRIX_PYTEST_ARGS:-} "${tests[@]}" >"$log" 2>&1
  rc=$?
  summary="$(grep -E '^(=+ )?[0-9]+ (passed|failed|skipped|error)' "$log" | tail -1 | tr -d '=' | sed 's/^ *//;s/ *$//')"
  summary="${summary:-no summary, rc $rc} ($((SECONDS - t0)) s)"
  ((rc != 0)) && summary="FAIL: $summary (log: build/hf/$ver.log)"
  echo "$summary" >"$root/build/hf/$ver.result"
  echo "transformers $ver: $summary"
}

for ver in "${to_test[@]}"; do
  rm -f "$root/build/hf/$ver.result"
  while (($(jobs -rp | wc -l) >= parallel)); do wait -n; done
  test_version "$ver" &
done
wait
for ver in "${to_test[@]}"; do
  result[$ver]="$(cat "$root/build/hf/$ver.result" 2>/dev/null || echo "FAIL: no result")"
  [[ "${result[$ver]}" == FAIL* ]] && failed=1
done

if [[ -n "$record" ]]; then
  PYTHONPATH="$build/python" "$python" "$root/python/tests/test_hf_versions.py" --merge "$record" \
    "$root/tests/data/hf_mrope_releases.json" || failed=1
fi
echo "== hf_matrix: ${#versions[@]} versions in $((SECONDS - start)) s"
for ver in "${versions[@]}"; do printf '  %-8s %s\n' "$ver" "${result[$ver]:-not run}"; done
exit "$failed"
