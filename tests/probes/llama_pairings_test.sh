#!/usr/bin/env bash
# The same Llama weights as a Hugging Face checkpoint (rotary pairs (p, p + d/2)) and as a GGUF file (queries
# and keys permuted by llama.cpp's converter, pairs (2p, 2p + 1)): the probe must give the same attention
# matrices and norms (to 1e-10: the sums run in another order), so both dimension pairings and both ways of
# reading the architecture agree.
# Usage: llama_pairings_test.sh ATTNCHECK TINY_LLAMA_DIR
set -uo pipefail
attncheck=$1
tiny=$2
if [ ! -f "$tiny/tiny-llama-f32.gguf" ]; then
  echo "SKIPPED: $tiny/tiny-llama-f32.gguf was not written (the gguf package is missing)"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$attncheck" probe "$tiny/tiny-llama" --tokens "$tiny/tiny-llama/tokens.txt" --json --attention-out "$work/hf.st" \
  >"$work/hf.json" || { echo "FAIL: probe of the Hugging Face checkpoint exited $?"; exit 1; }
"$attncheck" probe "$tiny/tiny-llama-f32.gguf" --tokens "$tiny/tiny-llama/tokens.txt" --json \
  --attention-out "$work/gguf.st" >"$work/gguf.json" || { echo "FAIL: probe of the GGUF file exited $?"; exit 1; }
# Heads measured on several threads give the same document, byte for byte: each head's numbers are its own,
# and a grouped key head's derivative is summed once all its query heads are measured.
"$attncheck" probe "$tiny/tiny-llama" --tokens "$tiny/tiny-llama/tokens.txt" --json --threads 1 >"$work/t1.json" &&
  "$attncheck" probe "$tiny/tiny-llama" --tokens "$tiny/tiny-llama/tokens.txt" --json --threads 3 >"$work/t3.json" ||
  { echo "FAIL: probe --threads exited $?"; exit 1; }
cmp -s "$work/t1.json" "$work/t3.json" || { echo "FAIL: probe --threads 1 and --threads 3 differ"; exit 1; }
grep -q '"dWk_group_fro": [0-9]' "$work/t1.json" || { echo "FAIL: no grouped key derivative to compare"; exit 1; }
# --text: the GGUF file's own byte-level BPE and the checkpoint's vocab.json + merges.txt give the same ids.
for model in "$tiny/tiny-llama-f32.gguf" "$tiny/tiny-llama"; do
  "$attncheck" probe "$model" --text "the cats sat on the mat, 12345" | grep "^input: " >>"$work/text-ids" ||
    { echo "FAIL: --text on $model"; exit 1; }
done
[ "$(sort -u "$work/text-ids" | wc -l)" -eq 1 ] || { echo "FAIL: --text gives different ids: $(cat "$work/text-ids")"; exit 1; }
# Bad input: exit 2 with the reason.
out=$("$attncheck" probe "$tiny/tiny-llama-q4_0.gguf" --text "the cat" --length 99 2>&1)
[ $? -eq 2 ] && grep -q "fewer than the 99 asked for" <<<"$out" || { echo "FAIL: --length beyond the text: $out"; exit 1; }
head -c 5000 "$tiny/tiny-llama-q4_0.gguf" >"$work/cut.gguf"
out=$("$attncheck" probe "$work/cut.gguf" --random 2>&1)
[ $? -eq 2 ] && grep -q "$work/cut.gguf" <<<"$out" || { echo "FAIL: a truncated GGUF file: $out"; exit 1; }
exec /usr/bin/python3 - "$work" "$0" <<'PY'
import json, os, struct, sys
import numpy as np
work = sys.argv[1]
def tensors(path):
    blob = open(path, "rb").read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    return {k: np.frombuffer(blob[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]],
                             {"F64": "<f8", "I64": "<i8"}[v["dtype"]])
            for k, v in header.items() if k != "__metadata__"}
hf, gg = tensors(os.path.join(work, "hf.st")), tensors(os.path.join(work, "gguf.st"))
worst = max(float(np.max(np.abs(hf[k] - gg[k]))) for k in hf if k.startswith("layer."))
documents = [json.load(open(os.path.join(work, name))) for name in ("hf.json", "gguf.json")]
import jsonschema
schema = json.load(open(os.path.join(os.path.dirname(sys.argv[2]), "..", "..", "docs", "probe-output.schema.json")))
for document in documents:
    jsonschema.validate(document, schema, cls=jsonschema.Draft202012Validator)
# A GGUF file's configuration is its metadata: no config.json to hash.
assert documents[1]["model"]["config_sha256"] is None and documents[0]["model"]["config_sha256"] is not None
rows_hf, rows_gg = (document["heads"] for document in documents)
worst_norm = max(abs(a[k] - b[k]) / max(abs(a[k]), 1e-300) for a, b in zip(rows_hf, rows_gg)
                 for k in ("softmax_fro", "grad_fro", "dWq_fro", "dWk_fro", "dWk_group_fro", "poly3_fro"))
print(f"Hugging Face pairs vs GGUF pairs: max |attention difference| {worst:.3e}, max relative norm difference "
      f"{worst_norm:.3e}")
sys.exit(0 if worst <= 1e-10 and worst_norm <= 1e-10 else 1)
PY
