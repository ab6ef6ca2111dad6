#!/usr/bin/env bash
# Samples per second of the CPU backend against plain NumPy doing the same per sample, and the fraction of the
# machine's DGEMM rate that the score phase reaches, all measured in this one run.
# Usage: bench/monte_carlo/run_bench.sh [BUILD_DIR] [NUMPY_SECONDS]   (default: build, 20)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
numpy_seconds=${2:-20}
bench=$build/bench/monte_carlo/bench_monte_carlo
[ -x "$bench" ] || { echo "run_bench.sh: $bench not built (scripts/build)" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

load_before=$(cut -d' ' -f1 /proc/loadavg)
"$bench" --benchmark_min_time=2 --benchmark_format=json >"$out/cpp.json" 2>"$out/cpp.err"
# python3 on PATH may be another interpreter without NumPy; Debian's has python3-numpy. The machine's
# OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are removed for NumPy only, so its OpenBLAS picks its best kernel.
env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 "$root/bench/monte_carlo/numpy_baseline.py" \
  1024 64 64 3 "$numpy_seconds" >"$out/numpy.json"
load_after=$(cut -d' ' -f1 /proc/loadavg)
echo "load average (1 min) before/after: $load_before / $load_after on $(nproc) cores (other work slows both sides)"

/usr/bin/python3 - "$out/cpp.json" "$out/numpy.json" <<'PY'
import json, sys
cpp = {b["name"]: b for b in json.load(open(sys.argv[1]))["benchmarks"]}
numpy = json.load(open(sys.argv[2]))
def rate(name): return cpp[name]["GFLOPS"] / 1e9 if cpp[name]["GFLOPS"] > 1e6 else cpp[name]["GFLOPS"]
dgemm = {k.split("/")[0]: rate(k) for k in cpp if k.startswith("dgemm_")}
best_dgemm_name = max(dgemm, key=dgemm.get)
best_dgemm = dgemm[best_dgemm_name]
scores = {k: rate(k) for k in cpp if k.startswith("score_phase/")}
best_score_name = max(scores, key=scores.get)
samples = {k: cpp[k]["items_per_second"] for k in cpp if k.startswith("samples/")}
all_threads = [k for k in samples if k.startswith("samples/0/0/0/")][0]
print("N = 1024, D = d = 64, F = (T/sqrt d)^3 elementwise, estimands value + dQ, double precision")
for k, v in sorted(dgemm.items()):
    label = cpp[[n for n in cpp if n.startswith(k)][0]].get("label", "")
    print(f"  DGEMM 1024^3, one thread, {k[6:]:8s}: {v:7.1f} GFLOPS {label}")
for k, v in sorted(scores.items()):
    print(f"  score phase, one thread, tile {k.split('/')[1]:>4s}: {v:7.1f} GFLOPS = {v / best_dgemm:5.1%} of the best DGEMM ({best_dgemm_name[6:]})")
print(f"  Philox draws of one sample: {cpp['draw/real_time']['real_time']:.2f} ms")
pair_ns = {cpp[k]["label"]: 1e9 / cpp[k]["items_per_second"] for k in cpp
           if k.startswith("normal_pairs/") and "items_per_second" in cpp[k]}
block_ns = {cpp[k]["label"]: 1e9 / cpp[k]["items_per_second"] for k in cpp
            if k.startswith("philox_words/") and "items_per_second" in cpp[k]}
for what, ns in (("normal pair (Philox + Box-Muller)", pair_ns), ("Philox block alone", block_ns)):
    if ns:
        speedups = ", ".join(f"scalar/{k} = {ns['scalar'] / v:.1f}x" for k, v in ns.items() if k != "scalar")
        print(f"  {what}: " + ", ".join(f"{v:.2f} ns {k}" for k, v in ns.items())
              + (f" ({speedups})" if "scalar" in ns and speedups else ""))
def per_cpu_second(k):  # process CPU time of the whole batch, all threads
    b = cpp[k]
    return b["items_per_second"] * b["real_time"] / b["cpu_time"]
for k, v in sorted(samples.items()):
    print(f"  attncheck CPU backend, {int(cpp[k]['threads'])} thread(s), {cpp[k].get('label', '')}: {v:8.1f} samples/s, "
          f"{per_cpu_second(k):8.1f} samples per CPU-second")
# The whole sample against the 2 N^2 d roofline at the DGEMM rate on all cores (per CPU-second on both sides).
gemm = {cpp[k]["label"]: cpp[k] for k in cpp if k.startswith("gemm_all_cores/")}
if "dgemm" in gemm:
    g = gemm["dgemm"]
    dgemm_all = rate(g["name"]) * g["real_time"] / g["cpu_time"]
    flops = 2 * 1024 * 1024 * 64
    print(f"  DGEMM 1024^3 on all {int(g['threads'])} threads at once: {dgemm_all:.1f} GFLOPS per CPU-second")
    for k in sorted(samples):
        if not k.startswith("samples/0/"):
            continue
        print(f"    whole sample, {cpp[k]['label']:18s}: {per_cpu_second(k) * flops / 1e9 / dgemm_all:6.1%} of 2 N^2 d at that rate")
    mixed = [k for k in samples if k.startswith("samples/0/1/0/")]
    before = [k for k in samples if k.startswith("samples/0/0/1/")]
    if mixed:
        print(f"  mixed / double (fused): {per_cpu_second(mixed[0]) / per_cpu_second(all_threads):.2f}x per CPU-second (goal >= 1.7x)")
    if before:
        print(f"  double fused / BLAS tiles: {per_cpu_second(all_threads) / per_cpu_second(before[0]):.2f}x per CPU-second")
print(f"  NumPy {numpy['numpy']} baseline: {numpy['samples_per_second']:8.2f} samples/s, "
      f"{numpy['samples_per_cpu_second']:8.2f} samples per CPU-second (BLAS: {numpy['blas']})")
print(f"Ratios: {samples[all_threads] / numpy['samples_per_second']:.1f}x NumPy in wall time, "
      f"{per_cpu_second(all_threads) / numpy['samples_per_cpu_second']:.1f}x per CPU-second (goal >= 30x); "
      f"score phase {scores[best_score_name] / best_dgemm:.0%} of DGEMM (goal >= 50%)")
PY
