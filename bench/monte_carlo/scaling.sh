#!/usr/bin/env bash
# The N-scaling table of the CPU backend at D = d = 64, F = (T/sqrt d)^3 elementwise, value + dQ, all threads:
# samples per second, the fraction of the 2 N^2 d roofline at the machine's DGEMM rate on all cores (and, for
# mixed, the fraction of the same flops at the SGEMM rate), the mixed/double ratio, and peak RSS, for both
# precisions. The GEMM rates and every sample rate come from one benchmark process.
# Usage: bench/monte_carlo/scaling.sh [BUILD_DIR] [MAX_N]   (default: build, 16384; N = 256 .. MAX_N by x2)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
max_n=${2:-16384}
bench=$build/bench/monte_carlo/bench_monte_carlo
attncheck=$build/cli/attncheck
[ -x "$bench" ] && [ -x "$attncheck" ] || { echo "scaling.sh: $bench or $attncheck not built (scripts/build)" >&2; exit 2; }
case "$max_n" in '' | *[!0-9]*) echo "scaling.sh: MAX_N '$max_n' is not a whole number" >&2; exit 2 ;; esac
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

ns=()
for ((n = 256; n <= max_n; n *= 2)); do ns+=("$n"); done
[ ${#ns[@]} -gt 0 ] || { echo "scaling.sh: MAX_N $max_n is below 256" >&2; exit 2; }
filter="gemm_all_cores|scaling/($(IFS='|'; echo "${ns[*]}"))/"
load_before=$(cut -d' ' -f1 /proc/loadavg)
"$bench" --benchmark_filter="$filter" --benchmark_min_time=1 --benchmark_format=json >"$out/bench.json" 2>"$out/bench.err"
load_after=$(cut -d' ' -f1 /proc/loadavg)

# Peak RSS of a whole `attncheck mc` run (2 samples) per N and precision, from GNU time.
: >"$out/rss.txt"
for n in "${ns[@]}"; do
  for precision in double mixed; do
    /usr/bin/time -f "%M" -o "$out/time.txt" "$attncheck" mc --phi poly --p 3 --N "$n" --D 64 --d 64 \
      --estimand value,dQ --samples 2 --claimed-exponent 1 --backend cpu --precision "$precision" >/dev/null 2>&1
    echo "$n $precision $(tail -1 "$out/time.txt")" >>"$out/rss.txt"
  done
done
echo "load average (1 min) before/after the benchmark: $load_before / $load_after on $(nproc) cores"

/usr/bin/python3 - "$out/bench.json" "$out/rss.txt" <<'PY'
import json, sys
runs = json.load(open(sys.argv[1]))["benchmarks"]
rss = {}
for line in open(sys.argv[2]):
    n, precision, kib = line.split()
    rss[(int(n), precision)] = int(kib) / 1024
def per_cpu(b):  # the process's CPU seconds: on a shared machine, what other loads disturb least
    return b["real_time"] / b["cpu_time"]
gemm = {}
for b in runs:
    if b["name"].startswith("gemm_all_cores"):
        rate = b["GFLOPS"] / 1e9 if b["GFLOPS"] > 1e6 else b["GFLOPS"]
        gemm[b["label"]] = (rate, rate * per_cpu(b), int(b["threads"]))
print("GEMM 1024^3 on all {} threads at once: DGEMM {:.1f} GFLOPS ({:.1f} per CPU-second), SGEMM {:.1f} ({:.1f})".format(
    gemm["dgemm"][2], gemm["dgemm"][0], gemm["dgemm"][1], gemm["sgemm"][0], gemm["sgemm"][1]))
print("D = d = 64, F = (T/sqrt d)^3, value + dQ, all threads; roofline = 2 N^2 d flops at the DGEMM rate, per CPU-second")
print(f"{'N':>6} {'precision':>9} {'samples/s':>10} {'per CPU-s':>10} {'of DGEMM':>9} {'of SGEMM':>9} {'mixed/double':>12} {'peak RSS':>9}")
rows = {}
for b in runs:
    if b["name"].startswith("scaling/"):
        rows[(int(b["N"]), b["label"])] = b
for (n, precision) in sorted(rows):
    b = rows[(n, precision)]
    wall = b["items_per_second"]
    cpu = wall * per_cpu(b)
    flops = b["score_flops"]
    of_d = cpu * flops / (gemm["dgemm"][1] * 1e9)
    of_s = cpu * flops / (gemm["sgemm"][1] * 1e9)
    ratio = ""
    if precision == "mixed" and (n, "double") in rows:
        d = rows[(n, "double")]
        ratio = f"{cpu / (d['items_per_second'] * per_cpu(d)):.2f}x"
    mem = rss.get((n, precision))
    of_s_text = f"{of_s:.1%}" if precision == "mixed" else "-"  # double is measured against DGEMM only
    mem_text = f"{mem:.1f} MiB" if mem else "-"
    print(f"{n:>6} {precision:>9} {wall:>10.2f} {cpu:>10.2f} {of_d:>9.1%} {of_s_text:>9} {ratio:>12} {mem_text:>11}")
PY
