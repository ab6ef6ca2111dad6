#!/usr/bin/env bash
# The papers' ViT experiment in one command, meant for a GPU: examples/vit_digits.py --plan papers (ViT-Tiny,
# 12 x 3 x 192, class token, on the digits enlarged to 64 x 64 with patch 4: N = 256; the five activations with
# ||A||_F and ||dA/dS||_F of every layer in float64, and the c x^3 sweep at N = 256, 64, 16, 8; bf16 autocast on
# cuda; 66 runs, about 4-5 minutes of an H200 by estimate, none measured), all into OUT_DIR/vit-results.json
# (under 1 MB). Then `attncheck report OUT_DIR --out OUT_DIR-report` when the program is built here (ATTNCHECK, or
# build/cli/attncheck); elsewhere copy OUT_DIR back and render it on any machine that has attncheck.
# Usage: examples/vit_papers.sh OUT_DIR [vit_digits.py options, which override the plan's]
#   e.g. the CPU smoke test: examples/vit_papers.sh /tmp/vp --device cpu --steps 2 --batch 2 --record 1 \
#        --curve-every 1 --seeds 0 --sweep-seeds 0 --scales 0.0625 --eval-limit 8
# PYTHON picks the interpreter (default: the first of python3, /usr/bin/python3 that imports torch and sklearn).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: examples/vit_papers.sh OUT_DIR [vit_digits.py options]}
shift
python=${PYTHON:-}
if [ -z "$python" ]; then
  for candidate in python3 /usr/bin/python3; do
    if "$candidate" -c "import torch, sklearn" 2>/dev/null; then python=$candidate; break; fi
  done
fi
if [ -z "$python" ]; then
  echo "vit_papers.sh: no python3 here imports torch and sklearn (set PYTHON)" >&2
  exit 2
fi
PYTHONUNBUFFERED=1 "$python" "$here/vit_digits.py" "$out" --plan papers "$@"
attncheck=${ATTNCHECK:-$here/../build/cli/attncheck}
if [ -x "$attncheck" ]; then
  "$attncheck" report "$out" --out "$out-report"
else
  echo "vit_papers.sh: no attncheck program at $attncheck: render with  attncheck report $out --out $out-report"
fi
