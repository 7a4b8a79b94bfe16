#!/usr/bin/env bash
# Generates the Python API reference from the package's docstrings with pdoc (from PyPI), as
# HTML under build/docs/python/ (git-ignored). The C and C++ reference is the headers
# themselves (docs/reference/README.md lists them).
#
#   docs/reference/generate.sh [BUILD_DIR] [OUT_DIR]      (defaults: build/release build/docs/python)
#
# Needs .venv/ and uv (scripts/setup.sh) and a build with the Python package
# (cmake --build BUILD_DIR --target circlerope_python). pdoc goes into build/docs-tools/, not into
# .venv/, so the pinned environment is unchanged.
set -euo pipefail
cd "$(dirname "$0")/../.."
build="${1:-build/release}"
out="${2:-build/docs/python}"
python=.venv/bin/python
uv="${CIRCLEROPE_UV:-${XDG_CACHE_HOME:-$HOME/.cache}/circlerope/tools/bin/uv}"
pdoc_version=16.0.0
tools=build/docs-tools
if [[ ! -x "$python" || ! -x "$uv" ]]; then
  echo "generate: needs .venv/ and uv: run scripts/setup.sh first" >&2
  exit 2
fi
if [[ ! -d "$build/python/circlerope" ]]; then
  echo "generate: no Python package in $build/python: cmake --build $build --target circlerope_python" >&2
  exit 2
fi
if ! PYTHONPATH="$tools" "$python" -c "import pdoc, sys; sys.exit(pdoc.__version__ != '$pdoc_version')" 2>/dev/null; then
  "$uv" pip install -q --python "$python" --target "$tools" "pdoc==$pdoc_version"
fi
PYTHONPATH="$tools:$build/python${PYTHONPATH:+:$PYTHONPATH}" "$python" -m pdoc \
  --docformat markdown --no-search -o "$out" circlerope circlerope.hf
echo "generate: wrote $out/index.html"
