#!/usr/bin/env bash
# The probe at long contexts, memory and time against N.
#  - SmolLM2-135M-Instruct (Q4_1 GGUF, 30 layers x 9 query heads on 3 key/value heads, D = 576, context 8192) on the
#    first N tokens of examples/context_paragraph.txt repeated, N = 512, 1024, ..., MAX_N: bench_probe runs the
#    streamed forward through all 30 layers and measures every metric of the last layer's 9 heads on 2 threads; GNU
#    time gives its peak RSS. PyTorch's float64 reference forward (tests/probes/torch_reference.py, which keeps every
#    layer's attention) runs in the same pass where its 30 x 9 x N^2 doubles fit (N <= 2048), on one thread.
#  - With LLAMA1B (a GGUF file from bench/probes/make_llama_gguf.py: 16 layers x 32 heads on 8, D = 2048, Q4_0),
#    `attncheck probe --random --length 4096 --layers 15 --heads 0 --threads 2`: the forward through all 16 layers
#    and one head's metrics (with its group's dA/dW_K), its peak RSS.
# Prints a Markdown table and the growth exponents of time and peak RSS in N (least squares on log-log), which
# bench/probes/README.md quotes. Softmax's dA/dW_K under rotary keys is O(N^3) per head (docs/THEORY.md): it is
# what the norms' time grows with.
# Usage: bench/probes/run_long_context.sh [BUILD_DIR] [MAX_N] [LLAMA1B]   (defaults: build, 8192, none)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
max_n=${2:-8192}
llama1b=${3:-}
bench=$build/bench/probes/bench_probe
[ -x "$bench" ] || { echo "run_long_context.sh: $bench not built (scripts/build)" >&2; exit 2; }
case "$max_n" in '' | *[!0-9]*) echo "run_long_context.sh: MAX_N '$max_n' is not a whole number" >&2; exit 2 ;; esac
model=$("$root/scripts/fetch-smollm2" "$build/cache")
python=$("$root/scripts/pyenv" "$build/cache")
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
text=$out/text.txt
for _ in 1 2 3 4 5 6 7 8 9 10; do cat "$root/examples/context_paragraph.txt"; done >"$text"
echo "load average (1 min) at the start: $(cut -d' ' -f1 /proc/loadavg) on $(nproc) cores" >&2
rows=$out/rows.jsonl
for ((n = 512; n <= max_n; n *= 2)); do
  echo "SmolLM2, N = $n ..." >&2
  /usr/bin/time -f '%M' -o "$out/rss" "$bench" "$model" "$text" "$n" 29 2 >"$out/probe.json"
  torch=null
  if [ "$n" -le 2048 ]; then
    "$build/cli/attncheck" probe "$model" --text "$(cat "$text")" --length "$n" --layers 0 --heads 0 \
      --attention-out "$out/ids.st" >/dev/null || [ $? -eq 1 ]
    OMP_NUM_THREADS=1 /usr/bin/time -f '%M' -o "$out/torch_rss" \
      "$python" "$root/bench/probes/torch_forward.py" "$model" "$out/ids.st" "$n" 29 >"$out/torch.json"
    torch=$(cat "$out/torch.json")
  fi
  echo "{\"model\": \"SmolLM2-135M\", \"probe\": $(cat "$out/probe.json"), \"rss_kib\": $(cat "$out/rss"), \"torch\": $torch}" >>"$rows"
done
if [ -n "$llama1b" ]; then
  echo "1B Llama-shaped GGUF, N = 4096 ..." >&2
  start=$(date +%s%N)
  code=0
  /usr/bin/time -f '%M' -o "$out/rss" "$build/cli/attncheck" probe "$llama1b" --random --length 4096 --layers 15 \
    --heads 0 --threads 2 --json >"$out/llama.json" || code=$?
  [ "$code" -le 1 ] || exit "$code"
  end=$(date +%s%N)
  echo "{\"model\": \"Llama 1B (Q4_0, random)\", \"N\": 4096, \"wall_s\": $(( (end - start) / 1000000 ))e-3, \"rss_kib\": $(cat "$out/rss")}" >>"$rows"
fi
echo "load average (1 min) at the end: $(cut -d' ' -f1 /proc/loadavg)" >&2
/usr/bin/python3 - "$rows" <<'PY'
import json, math, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
smol = [r for r in rows if r["model"] == "SmolLM2-135M"]
# The probe's products run on OpenBLAS's threads (both cores), PyTorch's reference on one: the wall ratio is what a
# user sees, the CPU ratio what each costs (run_bench.sh compares both on one thread).
print("| model | N | forward, 30 layers (s) | norms, 9 heads (s) | peak RSS (GiB) | PyTorch forward (s) | "
      "forward / PyTorch, wall (CPU) | sum ||A||_F agrees |")
print("|---|---|---|---|---|---|---|---|")
for r in smol:
    p, t = r["probe"], r["torch"]
    ratio = (f"{p['forward_s'] / t['forward_s']:.2f} ({p['forward_cpu_s'] / t['forward_cpu_s']:.2f})" if t
             else "(does not fit)")
    agree = ("yes" if abs(p["softmax_fro_sum"] - t["softmax_fro_sum"]) <= 1e-9 * t["softmax_fro_sum"] else "NO") if t else ""
    print(f"| SmolLM2-135M | {p['N']} | {p['forward_s']:.2f} | {p['norms_s']:.2f} | {r['rss_kib'] / 2**20:.3f} | "
          f"{t['forward_s']:.2f} | {ratio} | {agree} |" if t else
          f"| SmolLM2-135M | {p['N']} | {p['forward_s']:.2f} | {p['norms_s']:.2f} | {r['rss_kib'] / 2**20:.3f} | "
          f"| {ratio} | |")
for r in rows:
    if r["model"] != "SmolLM2-135M":
        print(f"| {r['model']} | {r['N']} | {r['wall_s']:.1f} (whole command, 16 layers + 1 head) | | "
              f"{r['rss_kib'] / 2**20:.3f} | | | |")


def slope(xs, ys):
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)


if len(smol) >= 2:
    n = [r["probe"]["N"] for r in smol]
    tail = slice(-2, None)
    for name, ys in (("forward time", [r["probe"]["forward_s"] for r in smol]),
                     ("norms time", [r["probe"]["norms_s"] for r in smol]),
                     ("peak RSS", [r["rss_kib"] for r in smol])):
        print(f"growth exponent of {name} in N: {slope(n, ys):.2f} over N = {n[0]}..{n[-1]}, "
              f"{slope(n[tail], ys[tail]):.2f} over the last doubling")
ok = all(r["rss_kib"] < 2 * 2**20 for r in smol if r["probe"]["N"] == 8192) and \
     all(r["rss_kib"] < 4 * 2**20 for r in rows if r["model"] != "SmolLM2-135M")
print("goals (SmolLM2 at N = 8192 under 2 GiB, the 1B file at N = 4096 under 4 GiB):", "met" if ok else "NOT MET")
sys.exit(0 if ok else 1)
PY
