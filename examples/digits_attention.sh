#!/usr/bin/env bash
# Trains the digits transformer with softmax, x^3/sqrt(N) and x^3 attention while attncheck's AttentionRecorder
# measures every layer and head live (no checkpoints), then summarizes the logs; `attncheck report OUT/RUN`
# plots one. For a run one cannot modify, `attncheck probe --watch RUN` measures its checkpoints instead
# (train_digits.py --save-every; see docs/usage.md).
# Usage: examples/digits_attention.sh [OUT_DIR] [STEPS] [SEED]   (defaults: digits-runs, 300, 0)
# Seeded (weights, data split and batches from SEED; one torch thread): a rerun gives the same numbers.
# Needs the built package (build/python, or attncheck installed with pip), python3-torch and python3-sklearn.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-digits-runs}
steps=${2:-300}
seed=${3:-0}
export PYTHONPATH=$here/../build/python${PYTHONPATH:+:$PYTHONPATH}
for activation in softmax poly3_scaled poly3; do
  run=$out/$activation
  rm -rf "$run"
  /usr/bin/python3 "$here/train_digits.py" "$run" --activation "$activation" --steps "$steps" --record 25 \
    --save-every 0 --seed "$seed"
done
/usr/bin/python3 "$here/summarize_probe_log.py" "$out/softmax" "$out/poly3_scaled" "$out/poly3"
