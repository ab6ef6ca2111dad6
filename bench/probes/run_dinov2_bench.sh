#!/usr/bin/env bash
# `attncheck probe` on DINOv2-small at N = 257 (china.jpg preprocessed to 224 x 224: 16 x 16 patches of 14
# pixels + CLS) against ONNX Runtime's forward of the original graph on the same input, in one run (both on one
# thread). The probe's time is the whole command: load, forward through the 12 layers in double precision, the
# norms of one head; against ONNX Runtime's forward alone and its whole job (session from the file, then the
# forward); and bench_probe's forward alone (its weights read as each layer starts), double and --precision mixed.
# Usage: bench/probes/run_dinov2_bench.sh [BUILD_DIR] [REPEAT]   (default build, 3)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
repeat=${2:-3}
cmake --build "$build" --parallel 2 --target attncheck bench_probe >&2
OMP_NUM_THREADS=1 "$root/tests/probes/dinov2_onnx.sh" "$root" "$build/cli/attncheck" "$build/cache" bench --repeat "$repeat" \
  --bench-probe "$build/bench/probes/bench_probe"
