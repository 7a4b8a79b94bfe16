#!/usr/bin/env bash
# The tiny vision-language model experiment (docs/experiment.md): installs what is missing,
# builds the Python module, trains every arm and writes results/<preset>/.
#
#   scripts/experiment.sh [quick|full] [--out DIR] [--arms A,B] [--seeds N] [--steps N] ...
#   NPROC=2 scripts/experiment.sh quick     # the same run as 2 DDP processes (gloo)
#   scripts/experiment.sh eval --checkpoint results/full/checkpoints/circle-s3 --grid 12x16 --gap 8 --prefix 8,16
#
# quick: 5.2 min, full: 63.4 min, measured on a 2-core AMD EPYC Zen 4 (docs/experiment.md).
# Ctrl-C saves what was measured. Every run's weights are kept in <out>/checkpoints/.
# Exit codes: 0 every run finished, 1 a run failed or was not run (results.json says which and
# how), 2 a bad option or input file (one line), 130 Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
# NPROC starts that many processes: an integer in [1, 64], as --workers (docs/experiment.md,
# Ranges); checked before anything is installed or built.
nproc_ddp=${NPROC:-1}
if ! [[ $nproc_ddp =~ ^[0-9]{1,9}$ ]] || ((10#$nproc_ddp < 1 || 10#$nproc_ddp > 64)); then
  echo "experiment.sh: error: NPROC must be an integer in [1, 64]" >&2
  exit 2
fi
nproc_ddp=$((10#$nproc_ddp))
scripts/setup.sh  # .venv/ with torch, tqdm and matplotlib (constraints.txt)
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release -DCIRCLEROPE_BUILD_TORCH=ON >/dev/null
cmake --build build/release -j "$(nproc)" --target circlerope_python
export PYTHONPATH="$PWD/build/release/python:$PWD/experiments${PYTHONPATH:+:$PYTHONPATH}"
if [[ $nproc_ddp -gt 1 ]]; then
  exec .venv/bin/python -m torch.distributed.run --standalone --nproc_per_node "$nproc_ddp" -m tiny_vlm "$@"
fi
exec .venv/bin/python -m tiny_vlm "$@"
