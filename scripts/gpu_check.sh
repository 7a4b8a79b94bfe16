#!/usr/bin/env bash
# One run of every GPU check of the CUDA backend (scripts/gpu_check.py says what each step
# does): build against the torch found here, CUDA tests, compute-sanitizer, the benchmark
# (GB/s against a device-to-device copy, speed-up over Hugging Face's eager formula) and the
# Hugging Face drop-in check. Every step is recorded as pass / fail / skipped with its reason
# in $OUT/gpu_check.json (or build/gpu_check.json); one failing step does not stop the rest.
#
#   scripts/gpu_check.sh                     # on a machine with a GPU, pip torch, nvcc
#   scripts/gpu_check.sh --cpu-dry-run       # here: what a CPU can run, from build/release
#
# PYTHON selects the interpreter whose torch is used (default: python3 on PATH).
set -uo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-python3}" scripts/gpu_check.py "$@"
