#!/usr/bin/env bash
# Short seeded run of examples/cross_norm_digits.py (2 seeds, 60 steps), its report, then
# cross_norm_example_check.py. Exit 77 (skipped) when PyTorch or scikit-learn is missing.
# Usage: cross_norm_example_test.sh SOURCE_ROOT ATTNCHECK WORK_DIR
set -euo pipefail
root=$1
attncheck=$2
run=$3/cross-norm-digits
if ! /usr/bin/python3 -c "import torch, sklearn" 2>/dev/null; then
  echo "SKIPPED: /usr/bin/python3 lacks torch or sklearn (install python3-torch python3-sklearn: scripts/setup probes)"
  exit 77
fi
rm -rf "$run"
/usr/bin/python3 "$root/examples/cross_norm_digits.py" "$run" --seeds 2 --steps 60 --eval-every 10 \
  --anneal-from 20 --anneal-steps 20
"$attncheck" report "$run" --out "$run/report"
exec /usr/bin/python3 "$root/tests/probes/cross_norm_example_check.py" "$attncheck" "$run" "$run/report"
