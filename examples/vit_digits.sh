#!/usr/bin/env bash
# The full ViT digits run behind the figures of docs/usage.md: the five activations at N = 16 (five seeds, norms
# every 10 steps, the recorder on seed 0, heat maps), and the c * x^3 sweep at N = 4, 16, 64 (three seeds), seed by seed, all with
# one thread at low priority; then `attncheck report`. Rerunning it reproduces the numbers (seeded, one thread).
# Usage: examples/vit_digits.sh [OUT_DIR]   (default vit-digits; the report goes to OUT_DIR-report)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-vit-digits}
export PYTHONPATH=$here/../build/python${PYTHONPATH:+:$PYTHONPATH}
nice -n 10 /usr/bin/python3 "$here/vit_digits.py" "$out" --seeds 0,1,2,3,4 --steps 400 --patch 2 --record 10 \
  --recorder --heatmaps --scales 0.0078125,0.03125,0.125,0.5,2,8 --scale-patches 4,2,1 --sweep-seeds 0,1,2
"$here/../build/cli/attncheck" report "$out" --out "$out-report"
