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
rm -rf "$run" "$run-report" "$run-report-maps"
"$python" "$root/examples/vit_digits.py" "$run" --activations softmax,poly3,poly3_scaled --seeds 0 --patch 1 \
  --steps 20 --record 10 --recorder --heatmaps --scales 0.25,1 --scale-patches 4
"$attncheck" report "$run" --out "$run-report"
# Another layer and head of the maps; one the files do not have is an input error (exit 2) naming it.
"$attncheck" report "$run" --out "$run-report-maps" --map-layer 1 --map-head 3 --no-plots
grep -q "attention maps (layer 1, head 3" "$run-report-maps/report.md" || { echo "FAIL: --map-layer 1 --map-head 3 not shown"; exit 1; }
status=0
"$attncheck" report "$run" --out "$run-report-maps" --map-layer 5 2> "$run-maps.err" || status=$?
if [ "$status" != 2 ] || ! grep -q 'has no tensor "layer.5"' "$run-maps.err"; then
  echo "FAIL: --map-layer 5 gave exit $status: $(cat "$run-maps.err")"
  exit 1
fi
exec "$python" "$root/tests/python/vit_example_check.py" "$run" "$run-report"
