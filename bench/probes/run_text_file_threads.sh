#!/usr/bin/env bash
# `attncheck probe --text-file` over many short lines of the tiny BERT checkpoint the tests use (2 layers x 4 heads,
# D = 16; lines of 3 to 12 words): the default --threads (every core, or THREADS) against --threads 1, in the same
# run, medians of REPEAT runs each; and the JSON documents of both compared number by number (they must be equal).
# Usage: bench/probes/run_text_file_threads.sh [BUILD_DIR] [LINES] [THREADS] [REPEAT]
#   (defaults: build, 2000, the default of --threads, 3)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
lines=${2:-2000}
threads=${3:-}
repeat=${4:-3}
attncheck=$build/cli/attncheck
[ -x "$attncheck" ] || { echo "run_text_file_threads.sh: $attncheck not built" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
/usr/bin/python3 "$root/tests/probes/torch_reference.py" make-tiny "$out/tiny" >/dev/null
/usr/bin/python3 - "$out/lines.txt" "$lines" <<'PY'
import random, sys
words = "the cat sat on mat cats w0 w1 w2 w3 w4 w5 w6 w7 w8 w9".split()
draw = random.Random(1)
with open(sys.argv[1], "w") as out:
    for _ in range(int(sys.argv[2])):
        out.write(" ".join(draw.choice(words) for _ in range(draw.randint(3, 12))) + "\n")
PY
many=(${threads:+--threads "$threads"})
# Seconds of one run; its JSON in $out/$1.json (exit 1, a bound exceeded, is a result like 0).
run() {
  local label=$1 start end status=0
  shift
  start=$(date +%s.%N)
  "$attncheck" probe "$out/tiny/tiny-bert" --text-file "$out/lines.txt" --json "$@" >"$out/$label.json" || status=$?
  end=$(date +%s.%N)
  [ "$status" -le 1 ] || { echo "run_text_file_threads.sh: probe $* exited $status" >&2; exit 1; }
  awk -v start="$start" -v end="$end" 'BEGIN { printf "%.3f\n", end - start }'
}
one=() several=()
for _ in $(seq "$repeat"); do
  one+=("$(run one --threads 1)")
  several+=("$(run several "${many[@]}")")
done
echo "load average (1 min) after: $(cut -d' ' -f1 /proc/loadavg) on $(nproc) cores"
/usr/bin/python3 - "$out" "$lines" "${threads:-default (every core)}" "${one[*]}" "${several[*]}" <<'PY'
import json, statistics, sys
folder, lines, threads = sys.argv[1], sys.argv[2], sys.argv[3]
one, several = ([float(t) for t in arg.split()] for arg in sys.argv[4:6])
print(f"attncheck probe --text-file, {lines} lines, tiny BERT; medians of {len(one)} runs")
print(f"  --threads 1: {statistics.median(one):.2f} s  (runs: {', '.join(f'{t:.2f}' for t in one)})")
print(f"  --threads {threads}: {statistics.median(several):.2f} s  (runs: {', '.join(f'{t:.2f}' for t in several)})")
print(f"  ratio, --threads {threads} / --threads 1: {statistics.median(several) / statistics.median(one):.2f}")
a, b = (json.load(open(f"{folder}/{name}.json")) for name in ("one", "several"))
largest = 0.0
def compare(x, y, where):
    global largest
    if isinstance(x, dict):
        assert x.keys() == y.keys(), where
        for key in x: compare(x[key], y[key], f"{where}.{key}")
    elif isinstance(x, list):
        assert len(x) == len(y), where
        for k, (u, v) in enumerate(zip(x, y)): compare(u, v, f"{where}[{k}]")
    elif isinstance(x, float) and isinstance(y, float) and x != y:
        largest = max(largest, abs(x - y) / max(abs(x), abs(y)))
    else:
        assert x == y, f"{where}: {x!r} != {y!r}"
compare(a, b, "document")
print("  the two JSON documents: " + ("the same numbers" if largest == 0 else f"numbers within {largest:.2g} relative"))
sys.exit(0 if largest <= 1e-12 else 1)
PY
