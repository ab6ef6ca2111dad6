#!/usr/bin/env bash
# Samples per second of --phi 'x^3' against --phi poly --p 3 (the built-in, fused or on BLAS tiles), measured in
# one run at N = 1024, D = d = 64, value + dQ, all threads; the goal is the expression within 1.5x of the built-in;
# x*x*x, the same map written so that it runs as a program over score tiles, shows the general path beside it.
# Usage: bench/monte_carlo/expression_ratio.sh [BUILD_DIR] [MIN_SECONDS]   (default: build, 3)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
bench=$build/bench/monte_carlo/bench_monte_carlo
[ -x "$bench" ] || { echo "expression_ratio.sh: $bench not built (scripts/build)" >&2; exit 2; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$bench" --benchmark_filter='^expression_samples/' --benchmark_min_time="${2:-3}" --benchmark_repetitions=3 \
  --benchmark_report_aggregates_only=true --benchmark_format=json >"$out" 2>/dev/null
/usr/bin/python3 - "$out" <<'PY'
import json, sys
rows = {b["run_name"]: b for b in json.load(open(sys.argv[1]))["benchmarks"] if b["aggregate_name"] == "median"}
rate = {int(name.split("/")[1]): rows[name]["items_per_second"] for name in rows}
labels = {0: "poly 3 (built-in)", 1: "poly 3 on BLAS tiles", 2: "expression 'x^3'", 3: "expression 'x*x*x'"}
print("N = 1024, D = d = 64, value + dQ, all threads; medians of 3 repetitions")
for m in sorted(rate):
    print(f"  {labels[m]:24s} {rate[m]:8.1f} samples/s")
print(f"  built-in / 'x^3': {rate[0] / rate[2]:.2f}x (goal <= 1.5x)")
print(f"  built-in on BLAS tiles / 'x*x*x' (a program over the same tiles): {rate[1] / rate[3]:.2f}x; "
      f"built-in / 'x*x*x': {rate[0] / rate[3]:.2f}x")
PY
