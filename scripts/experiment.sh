#!/usr/bin/env bash
# The tiny vision-language model experiment (docs/experiment.md): installs what is missing,
# builds the Python module, trains every arm and writes results/<preset>/.
#
#   scripts/experiment.sh [quick|full] [--out DIR] [--arms A,B] [--seeds N] [--steps N] ...
#   NPROC=2 scripts/experiment.sh quick     # the same run as 2 DDP processes (gloo)
#
# quick: <= 10 min on an idle 2-core machine; full: <= 90 min. Ctrl-C saves what was measured.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh  # includes python3-tqdm and python3-matplotlib
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release -DCIRCLEROPE_BUILD_TORCH=ON >/dev/null
cmake --build build/release -j "$(nproc)" --target circlerope_python
export PYTHONPATH="$PWD/build/release/python:$PWD/experiments${PYTHONPATH:+:$PYTHONPATH}"
nproc_ddp=${NPROC:-1}
if [[ $nproc_ddp -gt 1 ]]; then
  # torchrun is the same launcher; Debian does not always put it on PATH. Debian's torch 1.13
  # launcher cannot parse its own default "--redirects 0 --tee 0" under Python 3.11 (it dies
  # with "'NoneType' object has no attribute 'get'"); 1 (stdout to a log, teed) parses.
  if command -v torchrun >/dev/null; then launcher=(torchrun); else launcher=(/usr/bin/python3 -m torch.distributed.run); fi
  exec "${launcher[@]}" --standalone --redirects 1 --tee 1 --nproc_per_node "$nproc_ddp" -m tiny_vlm "$@"
fi
exec /usr/bin/python3 -m tiny_vlm "$@"
