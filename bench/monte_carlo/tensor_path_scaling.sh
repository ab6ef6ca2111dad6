#!/usr/bin/env bash
# N-scaling of the two evaluation paths of elementwise x^p (C3's preset: p = 2, D = 16, d = 8, value): samples
# per second of `attncheck mc --path direct` and `--path tensor` at each N, measured in this one run, and their
# ratio. The direct path is O(N^2 d) per sample, so it stops at DIRECT_MAX_N; the tensor path goes on.
# Usage: bench/monte_carlo/tensor_path_scaling.sh [BUILD_DIR] [DIRECT_MAX_N] [TENSOR_MAX_N]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
direct_max=${2:-16384}
tensor_max=${3:-1048576}
attncheck=$build/cli/attncheck
[[ -x $attncheck ]] || { echo "tensor_path_scaling: no $attncheck (build the attncheck target first)" >&2; exit 2; }
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# Samples per point: about the same work per point on each path (O(N^2) direct, O(N) tensor), at least two.
run_path() {
  local path=$1 max=$2 n=256
  while ((n <= max)); do
    local samples=$((4194304 / n))
    [[ $path == direct ]] && samples=$((67108864 / n / n))
    ((samples < 2)) && samples=2
    ((samples > 64)) && samples=64
    "$attncheck" mc --phi poly --p 2 --D 16 --d 8 --N "$n" --estimand value --claimed-exponent 1 --samples "$samples" \
      --path "$path" --backend cpu --json >"$scratch/$path-$n.json"
    n=$((n * 4))
  done
}
run_path direct "$direct_max"
run_path tensor "$tensor_max"

/usr/bin/python3 - "$scratch" <<'EOF'
import glob, json, os, sys
rates = {}
for f in glob.glob(os.path.join(sys.argv[1], "*.json")):
    point = json.load(open(f))["points"][0]
    rates[(point["path"], point["N"])] = point["samples"] / point["wall_seconds"]
print("x^2 elementwise, D = 16, d = 8, value; samples per wall second (both paths in this run)")
print(f"{'N':>9} {'direct':>12} {'tensor':>12} {'tensor/direct':>14}")
for n in sorted({n for _, n in rates}):
    d, t = rates.get(("direct", n)), rates.get(("tensor", n))
    cell = lambda r: f"{r:12.4g}" if r else f"{'-':>12}"
    ratio = f"{t / d:14.3g}" if d and t else f"{'-':>14}"
    print(f"{n:>9} {cell(d)} {cell(t)} {ratio}")
EOF
