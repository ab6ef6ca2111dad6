#!/usr/bin/env bash
# How the live norms of a real decoder grow with context length: SmolLM2-135M-Instruct (Q4_1 GGUF, fetched once
# by scripts/fetch-smollm2) on the first N tokens of examples/context_paragraph.txt (1052 tokens, repeated past its
# end), every layer and head, for N = 32 ... 8192 (the model's context); then the table (Markdown, on stdout) and the
# plot (OUT_DIR/smollm2-context.svg, gnuplot). A finished N is not measured again. N = 8192 takes most of an hour
# on 2 cores: softmax's dA/dW_K under rotary keys is O(N^3) per head.
# Usage: examples/smollm2_context.sh [OUT_DIR]   (default: smollm2-context)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-smollm2-context}
attncheck=${ATTNCHECK:-$here/../build/cli/attncheck}
[ -x "$attncheck" ] || attncheck=$(command -v attncheck)
model=$("$here/../scripts/fetch-smollm2")
mkdir -p "$out"
paragraph=$(cat "$here/context_paragraph.txt")
text=$paragraph
for _ in 1 2 3 4 5 6 7; do text+=$'\n'$paragraph; done
for n in 32 64 128 256 512 1024 2048 4096 8192; do
  [ -s "$out/N-$n.json" ] && continue
  start=$(date +%s)
  # Exit 1 would mean a bound is exceeded; the table shows it, so only errors (2) stop the run.
  code=0
  "$attncheck" probe "$model" --text "$text" --length "$n" --json >"$out/N-$n.json.tmp" || code=$?
  [ "$code" -le 1 ] || exit "$code"
  mv "$out/N-$n.json.tmp" "$out/N-$n.json"
  echo "N = $n: $(( $(date +%s) - start )) s" >&2
done
exec /usr/bin/python3 "$here/summarize_context.py" "$out"
