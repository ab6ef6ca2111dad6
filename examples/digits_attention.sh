#!/usr/bin/env bash
# Trains the digits transformer with softmax, x^3/sqrt(N) and x^3 attention while `attncheck probe --watch`
# measures each checkpoint as it appears, then summarizes the logs.
# Usage: examples/digits_attention.sh [OUT_DIR] [STEPS]   (defaults: digits-runs, 300)
# Needs the built attncheck (build/cli/attncheck or on PATH), python3-torch and python3-sklearn.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-digits-runs}
steps=${2:-300}
attncheck=${ATTNCHECK:-$here/../build/cli/attncheck}
[ -x "$attncheck" ] || attncheck=$(command -v attncheck)
for activation in softmax poly3_scaled poly3; do
  run=$out/$activation
  rm -rf "$run"
  mkdir -p "$run"
  /usr/bin/python3 "$here/train_digits.py" "$run" --activation "$activation" --steps "$steps" --save-every 25 &
  trainer=$!
  # The watcher feeds the checkpoints a held-out digit, which the trainer writes first.
  while [ ! -f "$run/probe-tokens.txt" ] && kill -0 "$trainer" 2>/dev/null; do sleep 0.2; done
  "$attncheck" probe --watch "$run" --tokens "$run/probe-tokens.txt" --interval 0.5 2>"$run/watch.log" &
  watcher=$!
  wait "$trainer"
  # Stop the watcher (as Ctrl-C would) once the last checkpoint is in its log.
  last=$(ls "$run" | grep -E '^step-[0-9]+\.safetensors$' | sort | tail -1)
  for _ in $(seq 1200); do
    grep -q "\"checkpoint\":\"$last\"" "$run/attncheck-probe.jsonl" 2>/dev/null && break
    sleep 0.1
  done
  kill -TERM "$watcher"
  wait "$watcher"
done
/usr/bin/python3 "$here/summarize_probe_log.py" "$out/softmax" "$out/poly3_scaled" "$out/poly3"
