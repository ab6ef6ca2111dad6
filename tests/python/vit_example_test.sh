#!/usr/bin/env bash
# Short seeded run of examples/vit_digits.py (three activations at N = 64 with the AttentionRecorder, heat maps,
# a two-point scale sweep at N = 4), its report, then vit_example_check.py.
# Exit 77 (skipped) when PyTorch or scikit-learn is missing.
# Usage: vit_example_test.sh SOURCE_ROOT PYTHON ATTNCHECK WORK_DIR   (PYTHONPATH holds the built package)
set -euo pipefail
root=$1
python=$2
attncheck=$3
run=$4/vit-digits-example
if ! "$python" -c "import torch, sklearn" 2>/dev/null; then
  echo "SKIPPED: $python lacks torch or sklearn (install python3-torch python3-sklearn: scripts/setup probes)"
  exit 77
fi
rm -rf "$run" "$run-report"
"$python" "$root/examples/vit_digits.py" "$run" --activations softmax,poly3,poly3_scaled --seeds 0 --patch 1 \
  --steps 20 --record 10 --recorder --heatmaps --scales 0.25,1 --scale-patches 4
"$attncheck" report "$run" --out "$run-report"
exec "$python" "$root/tests/python/vit_example_check.py" "$run" "$run-report"
