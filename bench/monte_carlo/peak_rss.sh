#!/usr/bin/env bash
# Peak resident memory of `attncheck mc` at N = 65536, D = d = 64 (goal: under 1 GiB), measured with GNU time.
# Usage: bench/monte_carlo/peak_rss.sh [BUILD_DIR]   (needs Debian's `time`, in scripts/deps/monte_carlo.list)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
[ -x /usr/bin/time ] || { echo "peak_rss.sh: /usr/bin/time missing (apt-get install time)" >&2; exit 2; }
run() {
  local label=$1
  shift
  /usr/bin/time -v "$build/cli/attncheck" mc "$@" --N 65536 --D 64 --d 64 --samples 2 --threads 2 --json \
    >/dev/null 2>"$tmp"
  local kib seconds
  kib=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$tmp")
  seconds=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$tmp")
  awk -v label="$label" -v kib="$kib" -v wall="$seconds" \
    'BEGIN { printf "%-58s peak RSS %7.1f MiB (%.1f%% of 1 GiB), wall %s\n", label, kib / 1024, 100 * kib / 1048576, wall }'
}
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
run "tiled: (T/sqrt d)^3, value, dQ, dK, dS, 2 samples" --phi poly --p 3 --estimand value,dQ,dK,dS
run "Gram path: T/sqrt d (p = 1), every estimand, 2 samples" --phi poly --p 1 --estimand value,dQ,dK,dS,score-var
run "matrix-power reading: (T/sqrt d)^3, value, 2 samples" --phi matpow --p 3
