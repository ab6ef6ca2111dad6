#!/usr/bin/env bash
# Probe time for SmolLM2-135M-Instruct (Q4_1 GGUF) at N tokens of examples/context_paragraph.txt against the
# PyTorch reference forward (float64, the weights dequantized by the gguf package), both in this one run and
# both on one thread (Debian's PyTorch uses one here; OMP_NUM_THREADS=1 keeps Eigen's GEMMs to one as well).
# Usage: bench/probes/run_bench.sh [BUILD_DIR] [N]   (defaults: build, 512)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
n=${2:-512}
bench=$build/bench/probes/bench_probe
[ -x "$bench" ] || { echo "run_bench.sh: $bench not built (scripts/build)" >&2; exit 2; }
model=$("$root/scripts/fetch-smollm2" "$build/cache")
python=$("$root/scripts/pyenv" "$build/cache")
text=$root/examples/context_paragraph.txt
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
load_before=$(cut -d' ' -f1 /proc/loadavg)
OMP_NUM_THREADS=1 "$bench" "$model" "$text" "$n" >"$out/probe.json"
# The reference forward reads the ids the probe's tokenizer gave.
"$build/cli/attncheck" probe "$model" --text "$(cat "$text")" --length "$n" --layers 0 --attention-out "$out/ids.st" \
  >/dev/null || [ $? -eq 1 ]
OMP_NUM_THREADS=1 "$python" "$root/bench/probes/torch_forward.py" "$model" "$out/ids.st" "$n" >"$out/torch.json"
load_after=$(cut -d' ' -f1 /proc/loadavg)
echo "load average (1 min) before/after: $load_before / $load_after on $(nproc) cores (other work slows both sides)"
/usr/bin/python3 - "$out/probe.json" "$out/torch.json" <<'PY'
import json, sys
probe, torch = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
total = probe["load_s"] + probe["input_s"] + probe["forward_s"] + probe["norms_s"]
print(f"SmolLM2-135M-Instruct Q4_1, N = {probe['N']}, 30 layers x 9 heads, double precision on both sides")
print(f"  attncheck: open {probe['load_s']:.2f} s, tokenize {probe['input_s']:.2f} s, forward (dequantizing as it "
      f"goes) {probe['forward_s']:.2f} s ({probe['forward_cpu_s']:.2f} CPU s), norms of 270 heads "
      f"{probe['norms_s']:.2f} s ({probe['norms_cpu_s']:.2f} CPU s); total {total:.2f} s")
print(f"  PyTorch reference ({torch['threads']} thread(s)): dequantize (gguf) {torch['dequantize_s']:.2f} s, "
      f"forward {torch['forward_s']:.2f} s ({torch['forward_cpu_s']:.2f} CPU s)")
print(f"  forward / PyTorch forward: {probe['forward_s'] / torch['forward_s']:.2f} wall, "
      f"{probe['forward_cpu_s'] / torch['forward_cpu_s']:.2f} CPU")
print(f"  whole probe / (PyTorch dequantize + forward): {total / (torch['dequantize_s'] + torch['forward_s']):.2f}")
agree = abs(probe["softmax_fro_sum"] - torch["softmax_fro_sum"]) <= 1e-9 * torch["softmax_fro_sum"]
print(f"  sum of ||A||_F over heads: {probe['softmax_fro_sum']:.12g} / {torch['softmax_fro_sum']:.12g} "
      f"({'agree' if agree else 'DIFFER'})")
sys.exit(0 if agree else 1)
PY
