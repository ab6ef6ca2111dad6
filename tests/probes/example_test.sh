#!/usr/bin/env bash
# Short run of examples/train_digits.py (x^3/sqrt(N) attention) with `attncheck probe --watch` beside it,
# then example_check.py. Exit 77 (skipped) when PyTorch or scikit-learn is missing.
# Usage: example_test.sh SOURCE_ROOT ATTNCHECK WORK_DIR
set -euo pipefail
root=$1
attncheck=$2
run=$3/digits-poly3-scaled
if ! /usr/bin/python3 -c "import torch, sklearn" 2>/dev/null; then
  echo "SKIPPED: /usr/bin/python3 lacks torch or sklearn (install python3-torch python3-sklearn: scripts/setup probes)"
  exit 77
fi
rm -rf "$run"
mkdir -p "$run"
/usr/bin/python3 "$root/examples/train_digits.py" "$run" --activation poly3_scaled --steps 20 --save-every 10 &
trainer=$!
while [ ! -f "$run/probe-tokens.txt" ] && kill -0 "$trainer" 2>/dev/null; do sleep 0.1; done
"$attncheck" probe --watch "$run" --tokens "$run/probe-tokens.txt" --interval 0.2 &
watcher=$!
wait "$trainer"
# The watcher runs until told to stop (as with Ctrl-C), once the last checkpoint is in its log.
for _ in $(seq 600); do
  grep -q '"checkpoint":"step-000020.safetensors"' "$run/attncheck-probe.jsonl" 2>/dev/null && break
  sleep 0.1
done
kill -TERM "$watcher"
wait "$watcher"
exec /usr/bin/python3 "$root/tests/probes/example_check.py" "$attncheck" "$run"
