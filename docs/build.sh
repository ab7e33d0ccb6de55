#!/usr/bin/env bash
# Build the documentation site with warnings as errors.
#   docs/build.sh [OUTPUT_DIR]        (default: docs/_build/html)
# Needs the docs extra: python -m pip install ".[docs]"
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-docs/_build/html}"
python="${PYTHON:-python}"
"$python" -m sphinx -W --keep-going -q -b html docs "$out"
echo "built $out/index.html"
