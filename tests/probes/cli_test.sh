#!/usr/bin/env bash
# End-to-end checks of `attncheck probe`: outputs, exit codes and messages for bad input.
# Usage: cli_test.sh ATTNCHECK TINY_MODELS_DIR
set -uo pipefail
attncheck=$1
tiny=$2
source "$(dirname "$0")/cli_expect.sh"

expect 2 "give MODEL" -- "$attncheck" probe
expect 2 "/no/such/model: no such file" -- "$attncheck" probe /no/such/model
expect 2 "choose one input" -- "$attncheck" probe "$tiny/tiny-bert" --text "the cat" --random
echo "2 999 3" >"$work/bad-ids.txt"
expect 2 "token id 999 at position 1" -- "$attncheck" probe "$tiny/tiny-bert" --tokens "$work/bad-ids.txt"
# Anything but a regular file is refused at once, naming it (a FIFO is not waited on).
mkfifo "$work/ids.fifo"
expect 2 "ids.fifo: is a FIFO" -- timeout 10 "$attncheck" probe "$tiny/tiny-bert" --tokens "$work/ids.fifo"
expect 2 "/dev/zero: is a character device" -- "$attncheck" probe "$tiny/tiny-bert" --tokens /dev/zero
expect 2 "layer 7 does not exist" -- "$attncheck" probe "$tiny/tiny-bert" --layers 7
expect 2 "JSON lines to --out" -- "$attncheck" probe --watch "$tiny" --json
expect 2 "not a folder to watch" -- "$attncheck" probe --watch /no/such/run --until-idle 0
expect 2 "--tokens" -- "$attncheck" probe "$tiny/tiny-gpt2" --text "hello"
# Sizes and numbers checked before anything is allocated, naming the value.
# Random input longer than the model's positions is refused as text of that length is, naming both numbers.
expect 2 "1099511627776 positions, more than the model's 24 positions" -- "$attncheck" probe "$tiny/tiny-bert" --random --length 1099511627776
expect 2 "25 positions, more than the model's 24 positions" -- "$attncheck" probe "$tiny/tiny-bert" --random --length 25
expect 0 "24 Gaussian embeddings" -- "$attncheck" probe "$tiny/tiny-bert" --random --length 24 --layers 0
# An empty text is a mistake, not a silent switch to random input.
expect 2 "--text is empty" -- "$attncheck" probe "$tiny/tiny-bert" --text ''
# --help names the positional argument, not the help library's type placeholder.
expect 0 "^  MODEL +model folder" -- "$attncheck" probe --help
expect 2 "--length: '-5' is not a positive integer" -- "$attncheck" probe "$tiny/tiny-bert" --random --length -5
expect 2 "--layers: -1 is out of range" -- "$attncheck" probe "$tiny/tiny-bert" --layers -1
expect 2 "--interval: 'nan'" -- "$attncheck" probe --watch "$tiny" --interval nan
expect 2 "--until-idle: -1 is out of range" -- "$attncheck" probe --watch "$tiny" --until-idle -1
expect 0 "layer +head" -- "$attncheck" probe "$tiny/tiny-bert" --text "the cats sat on the mat."
# The table: the essential ratios by default, every header explained under the table, --columns for the rest.
"$attncheck" probe "$tiny/tiny-bert" --random --length 6 --layers 0 --heads 2 >"$work/table.txt" || fail "table exited $?"
header=$(grep "^layer" "$work/table.txt")
[ "$(wc -w <<<"$header")" -eq 8 ] || fail "default table header is not layer, head, N and 5 ratios: $header"
for h in "|A|_F/sqrt(N)" "|dA/dS|_F/(sqrt(N)/2)" "|dA/dS|_F/(2sqrt(N))" "|S^3|_F/sqrt(N)" "|relu(S)|_F/N"; do
  grep -qF -- "$h" <<<"$header" || fail "default table lacks $h: $header"
  grep -qF -- "  $h: " "$work/table.txt" || fail "no line explains $h"
done
grep -qF "bound sqrt(N): at most 1" "$work/table.txt" || fail "no line says what |A|_F/sqrt(N) is against"
# ... and ends with the answer: the largest ratios and where, heads at a bound, the verdict.
grep -Eq "^summary over 1 heads: largest \|A\|_F/sqrt\(N\) [0-9.]+ \(layer 0, head 2\); largest \|dA/dS\|_F/\(sqrt\(N\)/2\) [0-9.]+ \(layer 0, head 2\); [01] heads? within 0.1% of a bound$" \
  "$work/table.txt" || fail "no closing summary: $(tail -3 "$work/table.txt")"
[ "$(tail -1 "$work/table.txt")" = "verdict: Theorem 4.1's bounds hold on every head measured (exit 0)" ] ||
  fail "the table does not end with its verdict: $(tail -1 "$work/table.txt")"
grep -q "x3\|/rtN" <<<"$header" && fail "an abbreviated header is left: $header"
all=$("$attncheck" probe "$tiny/tiny-bert" --random --length 6 --layers 0 --heads 2 --columns all | grep "^layer")
[ "$(wc -w <<<"$all")" -eq 19 ] || fail "--columns all header has $(wc -w <<<"$all") words: $all"
picked=$("$attncheck" probe "$tiny/tiny-bert" --random --length 6 --layers 0 --heads 2 --columns dWq,A | grep -A1 "^layer")
grep -Eq "^layer +head +N +\|dA/dWq\|_F +\|A\|_F$" <<<"$picked" || fail "--columns dWq,A: $picked"
# The |A|_F column is the JSON's softmax_fro, printed to 4 decimals.
value=$(tail -1 <<<"$picked" | awk '{print $5}')
json_value=$("$attncheck" probe "$tiny/tiny-bert" --random --length 6 --layers 0 --heads 2 --json |
  /usr/bin/python3 -c 'import json, sys; print("%.4f" % json.load(sys.stdin)["heads"][0]["softmax_fro"])')
[ "$value" = "$json_value" ] || fail "table |A|_F $value, JSON $json_value"
expect 2 "--columns: unknown column 'bogus'" -- "$attncheck" probe "$tiny/tiny-bert" --columns A,bogus
expect 2 "--columns chooses the table" -- "$attncheck" probe "$tiny/tiny-bert" --columns A --json
expect 0 "Gaussian embeddings" -- "$attncheck" probe "$tiny/tiny-gpt2" --random --length 9

# A truncated file: refused with exit 2, naming the file.
head -c 3000 "$tiny/tiny-bert/model.safetensors" >"$work/model.safetensors"
cp "$tiny/tiny-bert/config.json" "$work/"
expect 2 "$work/model.safetensors" -- "$attncheck" probe "$work/model.safetensors"
# A file that is not safetensors says so.
printf 'hello, this is plain text and no model\n' >"$work/plain.safetensors"
expect 2 "plain.safetensors: not a safetensors file: header length [0-9]+ .*exceeds the file \\([0-9]+ bytes\\)" -- "$attncheck" probe "$work/plain.safetensors"

# JSON: one object that traces the result (model, config hash, input ids and strings, tool, verdict) with the
# per-head rows under "heads", valid against docs/probe-output.schema.json; --attention-out writes I64 ids.
schema="$(dirname "$0")/../../docs/probe-output.schema.json"
"$attncheck" probe "$tiny/tiny-bert" --text "the cats sat" --json --attention-out "$work/attention.st" \
  >"$work/out.json" || fail "--json exited $?"
"$attncheck" probe "$tiny/tiny-gpt2" --random --length 7 --seed 11 --json >"$work/random.json" || fail "--random --json exited $?"
# --what-if adds each expression's norms to every row, within the schema.
"$attncheck" probe "$tiny/tiny-gpt2" --random --length 7 --seed 11 --json --what-if 'tanh(x)' \
  --what-if 'x^3/sqrt(N)' >"$work/what-if.json" || fail "--what-if --json exited $?"
/usr/bin/python3 - "$schema" "$work/what-if.json" <<'PY' || fail "--what-if JSON"
import json, sys
import jsonschema
schema, doc = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator)
assert all([w["phi"] for w in h["what_if"]] == ["tanh(x)", "x^3/sqrt(N)"] for h in doc["heads"]), doc["heads"][0]
PY
printf '2 4 5 9 6 3\n' >"$work/ids.txt"
"$attncheck" probe "$tiny/tiny-bert" --tokens "$work/ids.txt" --json --layers 1 >"$work/tokens.json" || fail "--tokens --json exited $?"
/usr/bin/python3 - "$schema" "$work" "$tiny" <<'PY' || fail "JSON output"
import hashlib, json, os, struct, sys
import jsonschema
schema_path, work, tiny = sys.argv[1:]
schema = json.load(open(schema_path))
jsonschema.Draft202012Validator.check_schema(schema)
docs = {name: json.load(open(os.path.join(work, name))) for name in ("out.json", "random.json", "tokens.json")}
for name, doc in docs.items():
    jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator)
    assert doc["verdict"]["holds"] is True and doc["verdict"]["basis"] == "exact", (name, doc["verdict"])
doc = docs["out.json"]
rows = doc["heads"]
assert len(rows) == 2 * 4, len(rows)
assert sorted({(r["layer"], r["head"]) for r in rows}) == [(l, h) for l in range(2) for h in range(4)]
assert all(r["N"] == 6 for r in rows)  # [CLS] the cat ##s sat [SEP]
config = os.path.join(tiny, "tiny-bert", "config.json")
assert doc["model"]["config_sha256"] == hashlib.sha256(open(config, "rb").read()).hexdigest(), doc["model"]
assert doc["model"]["architecture"] == "BERT" and doc["model"]["layers"] == 2, doc["model"]
vocab = open(os.path.join(tiny, "tiny-bert", "vocab.txt")).read().split("\n")
assert doc["input"]["text"] == "the cats sat", doc["input"]
assert doc["input"]["tokens"] == ["[CLS]", "the", "cat", "##s", "sat", "[SEP]"], doc["input"]
assert doc["input"]["tokens"] == [vocab[i] for i in doc["input"]["token_ids"]], doc["input"]
assert all(type(i) is int for i in doc["input"]["token_ids"])
assert docs["tokens.json"]["input"]["token_ids"] == doc["input"]["token_ids"], docs["tokens.json"]["input"]
assert {r["layer"] for r in docs["tokens.json"]["heads"]} == {1}
random = docs["random.json"]
assert random["input"]["seed"] == 11 and random["input"]["length"] == 7, random["input"]
assert random["model"]["config_sha256"] == hashlib.sha256(
    open(os.path.join(tiny, "tiny-gpt2", "config.json"), "rb").read()).hexdigest()
assert all(r["N"] == 7 for r in random["heads"])
# Schema checks that can fail: a row without its keys, a token id as a float, a missing verdict.
import copy
for broken in (lambda d: d["heads"][0].pop("softmax_fro"), lambda d: d["input"]["token_ids"].__setitem__(0, 2.5),
               lambda d: d.pop("verdict")):
    bad = copy.deepcopy(doc)
    broken(bad)
    try:
        jsonschema.validate(bad, schema, cls=jsonschema.Draft202012Validator)
    except jsonschema.ValidationError:
        continue
    raise AssertionError("the schema accepted a broken document")
blob = open(os.path.join(work, "attention.st"), "rb").read()
(length,) = struct.unpack("<Q", blob[:8])
entry = json.loads(blob[8:8 + length])["input_ids"]
assert entry["dtype"] == "I64" and entry["shape"] == [6], entry
begin, end = entry["data_offsets"]
ids = list(struct.unpack("<6q", blob[8 + length + begin:8 + length + end]))
assert ids == doc["input"]["token_ids"], ids
PY

# --precision compare: double's numbers, unchanged by the second run, and how far mixed's fell from them: in
# tool.mixed_against_double (valid against the schema), under the table, and on stderr beside --csv.
"$attncheck" probe "$tiny/tiny-gpt2" --random --length 7 --seed 11 --precision compare --json >"$work/compare.json" ||
  fail "--precision compare --json exited $?"
"$attncheck" probe "$tiny/tiny-gpt2" --random --length 7 --seed 11 --precision mixed --json >"$work/mixed.json" ||
  fail "--precision mixed --json exited $?"
/usr/bin/python3 - "$schema" "$work" <<'PY' || fail "--precision compare JSON"
import json, os, sys
import jsonschema
schema, work = json.load(open(sys.argv[1])), sys.argv[2]
compare, double, mixed = (json.load(open(os.path.join(work, name))) for name in ("compare.json", "random.json", "mixed.json"))
jsonschema.validate(compare, schema, cls=jsonschema.Draft202012Validator)
assert compare["tool"]["precision"] == "double" and "mixed_against_double" not in double["tool"], compare["tool"]
assert compare["heads"] == double["heads"], "compare's numbers are not double's"
check = compare["tool"]["mixed_against_double"]
# Recomputed from the double and mixed documents of the same input: the same largest difference, at the same place.
worst, where, norms = 0.0, None, 0.0
for a, b in zip(double["heads"], mixed["heads"]):
    for key, value in a.items():
        if isinstance(value, float) and isinstance(b.get(key), float):
            difference = abs(b[key] - value) / max(abs(value), 1e-12)
            if difference > worst:
                worst, where = difference, (key, a["layer"], a["head"])
            if key.endswith("_fro"):
                norms = max(norms, difference)
assert 0 < worst < 1e-4, worst
assert abs(check["largest_relative_difference"] - worst) <= 1e-12 * worst, (check, worst)
assert (check["field"], check["layer"], check["head"]) == where, (check, where)
assert abs(check["norms_largest_relative_difference"] - norms) <= 1e-12 * norms, (check, norms)
assert check["float_kernels"] in ("avx512", "portable") and mixed["tool"]["float_kernels"] == check["float_kernels"], check
PY
# Mixed precision's bits do not depend on --threads with OpenBLAS on one thread (--help): the float32 kernels run on
# the calling thread and give the same bits wherever the heap, which the measuring threads change, places their data.
for threads in 1 2 3; do
  for model in tiny-gpt2 tiny-bert; do
    OPENBLAS_NUM_THREADS=1 "$attncheck" probe "$tiny/$model" --tokens "$tiny/$model/tokens.txt" --precision mixed \
      --json --threads "$threads" >"$work/$model-mixed-$threads.json" || fail "$model mixed --threads $threads: $?"
  done
done
for model in tiny-gpt2 tiny-bert; do
  grep -q '"precision": "mixed"' "$work/$model-mixed-1.json" || fail "$model: no mixed-precision probe to compare"
  for threads in 2 3; do
    cmp -s "$work/$model-mixed-1.json" "$work/$model-mixed-$threads.json" ||
      fail "$model: --precision mixed differs between --threads 1 and $threads"
  done
done
expect 0 "precision: the numbers are double's; the same probe with --precision mixed \\((avx512|portable) kernels\\) gave Frobenius norms within [0-9.e-]+ relative" -- \
  "$attncheck" probe "$tiny/tiny-gpt2" --random --length 7 --precision compare
"$attncheck" probe "$tiny/tiny-gpt2" --random --length 7 --precision compare --csv >"$work/compare.csv" 2>"$work/compare.err" ||
  fail "--precision compare --csv exited $?"
grep -q "norms within" "$work/compare.err" || fail "--precision compare --csv: no comparison on stderr: $(cat "$work/compare.err")"
grep -q "norms within" "$work/compare.csv" && fail "--precision compare --csv: the comparison went into the CSV"
expect 2 "--precision compare applies to one MODEL and one input" -- "$attncheck" probe --watch "$tiny" --precision compare

# --text-file: every line probed on its own; per layer and head the mean over the sentences and its standard
# error, in the JSON and the table, equal to the means and standard errors of the single-sentence outputs.
printf 'the cats sat\nthe cat sat on the mat.\nthe mat\n' >"$work/sentences.txt"
"$attncheck" probe "$tiny/tiny-bert" --text-file "$work/sentences.txt" --json >"$work/sentences.json" ||
  fail "--text-file --json exited $?"
"$attncheck" probe "$tiny/tiny-bert" --text-file "$work/sentences.txt" --columns A_sqrtN >"$work/sentences.txt.table" ||
  fail "--text-file table exited $?"
# The same document on any number of threads: each head's numbers are its own, its rows' parts added in order.
for threads in 1 8; do
  "$attncheck" probe "$tiny/tiny-bert" --text-file "$work/sentences.txt" --json --threads $threads \
    >"$work/sentences-$threads.json" || fail "--text-file --threads $threads exited $?"
done
cmp -s "$work/sentences-1.json" "$work/sentences-8.json" || fail "--text-file: --threads 1 and --threads 8 differ"
k=0
while IFS= read -r sentence; do
  k=$((k + 1))
  "$attncheck" probe "$tiny/tiny-bert" --text "$sentence" --json >"$work/sentence-$k.json" || fail "--text '$sentence' exited $?"
done <"$work/sentences.txt"
/usr/bin/python3 - "$schema" "$work" <<'PY' || fail "--text-file means and standard errors"
import json, math, os, sys
import jsonschema
import numpy as np
schema_path, work = sys.argv[1:]
doc = json.load(open(os.path.join(work, "sentences.json")))
jsonschema.validate(doc, json.load(open(schema_path)), cls=jsonschema.Draft202012Validator)
singles = [json.load(open(os.path.join(work, f"sentence-{k}.json"))) for k in (1, 2, 3)]
assert doc["input"]["kind"] == "text_file" and len(doc["input"]["sentences"]) == 3, doc["input"]
assert [s["token_ids"] for s in doc["input"]["sentences"]] == [s["input"]["token_ids"] for s in singles]
assert len(doc["heads"]) == 8
table = {}
for line in open(os.path.join(work, "sentences.txt.table")):
    parts = line.split()
    if len(parts) == 6 and parts[0].isdigit():
        table[(int(parts[0]), int(parts[1]))] = (float(parts[3]), float(parts[5]))
for k, row in enumerate(doc["heads"]):
    assert row["sentences"] == 3
    for key in ("N", "softmax_fro", "softmax_over_sqrt_N", "grad_over_half_sqrt_N", "dWq_fro", "poly3_scaled_fro"):
        values = np.array([s["heads"][k][key] for s in singles], dtype=float)
        mean, se = values.mean(), values.std(ddof=1) / math.sqrt(3)
        assert abs(row[key] - mean) <= 1e-12 * abs(mean), (key, row[key], mean)
        assert abs(row["standard_error"][key] - se) <= 1e-9 * abs(se) + 1e-15, (key, row["standard_error"][key], se)
    mean, se = table[(row["layer"], row["head"])]
    assert abs(mean - row["softmax_over_sqrt_N"]) <= 5e-5 and abs(se - row["standard_error"]["softmax_over_sqrt_N"]) <= 5e-5
assert len(table) == 8, table
PY
printf 'the cats sat\n\nthe mat\n' >"$work/blank-line.txt"
expect 2 "blank-line.txt: line 2 is empty" -- "$attncheck" probe "$tiny/tiny-bert" --text-file "$work/blank-line.txt"
printf 'the cats sat\n' >"$work/one-line.txt"
expect 2 "1 sentence\\(s\\); a standard error over sentences needs at least 2" -- "$attncheck" probe "$tiny/tiny-bert" --text-file "$work/one-line.txt"
expect 2 "--csv and --attention-out take one input" -- "$attncheck" probe "$tiny/tiny-bert" --text-file "$work/sentences.txt" --csv
expect 2 "choose one input" -- "$attncheck" probe "$tiny/tiny-bert" --text-file "$work/sentences.txt" --random

# The table names the tokens; a vocabulary string with control characters is printed escaped, never raw.
mkdir -p "$work/escape-vocab"
cp "$tiny/tiny-bert/config.json" "$tiny/tiny-bert/model.safetensors" "$work/escape-vocab/"
/usr/bin/python3 - "$tiny/tiny-bert/vocab.txt" "$work/escape-vocab/vocab.txt" <<'PY'
import sys
lines = open(sys.argv[1]).read().split("\n")
lines[7] = "\x1b[2Jon\u009b"
open(sys.argv[2], "w").write("\n".join(lines))
PY
printf '2 7 3\n' >"$work/escape-ids.txt"
"$attncheck" probe "$work/escape-vocab" --tokens "$work/escape-ids.txt" >"$work/escape.txt" || fail "escape-vocab probe exited $?"
grep -qF 'tokens: [CLS] \x1b[2Jon\x9b [SEP]' "$work/escape.txt" || fail "token strings not escaped: $(grep tokens: "$work/escape.txt" | od -c | head)"
grep -q $'\x1b' "$work/escape.txt" && fail "a raw escape character reached the table"

# Progress: on a terminal's stderr (script(1) gives the probe a pseudo-terminal) the heads measured so far, the
# line cleared at the end; with stderr not a terminal, nothing.
progress=$(script -qec "'$attncheck' probe '$tiny/tiny-bert' --random --length 6 >/dev/null" /dev/null)
grep -q "0/8 heads measured" <<<"$progress" && grep -q "7/8 heads measured" <<<"$progress" ||
  fail "no progress on a terminal: $progress"
quiet=$("$attncheck" probe "$tiny/tiny-bert" --random --length 6 2>&1 >/dev/null)
[ -z "$quiet" ] || fail "progress written to a stderr that is not a terminal: $quiet"

# CSV with a header and the selected layer and heads only.
lines=$("$attncheck" probe "$tiny/tiny-bert" --random --length 6 --layers 1 --heads 0,3 --csv | wc -l)
[ "$lines" -eq 3 ] || fail "--csv printed $lines lines, expected 3"

# --cross-norm: the what-if columns in the table, their keys in JSON and CSV, and refused with --watch.
expect 0 "\|O\|_F a=1 +\|O\|_F/sqrt\(N d_v\) +\|dO/dV\|_F a=1 +\|dO/dV\|_F/sqrt\(N d_v/8\)" -- "$attncheck" probe "$tiny/tiny-gpt2" --random --length 7 --cross-norm
"$attncheck" probe "$tiny/tiny-gpt2" --random --length 7 --cross-norm --json >"$work/cross.json" || fail "--cross-norm --json exited $?"
/usr/bin/python3 - "$work/cross.json" "$schema" <<'PY' || fail "--cross-norm JSON output"
import json, math, sys
import jsonschema
document = json.load(open(sys.argv[1]))
jsonschema.validate(document, json.load(open(sys.argv[2])), cls=jsonschema.Draft202012Validator)
assert "cross-normalization" in document["verdict"]["statement"], document["verdict"]
rows = document["heads"]
for r in rows:
    assert r["d_v"] == r["d"], r
    assert abs(r["cross_norm_out_bound"] - math.sqrt(7 * r["d_v"])) < 1e-12, r
    for mix in ("mix0", "mix0_5", "mix1"):
        assert r["out_fro_" + mix] > 0 and r["dV_fro_" + mix] > 0, r
    assert r["out_fro_mix1"] <= r["cross_norm_out_bound"] and r["dV_fro_mix1"] <= r["cross_norm_dV_bound"], r
PY
header=$("$attncheck" probe "$tiny/tiny-gpt2" --random --length 7 --cross-norm --csv | head -1)
[[ "$header" == *",d_v,cross_norm_out_bound,cross_norm_dV_bound,out_fro_mix0,dV_fro_mix0,out_fro_mix0_5,dV_fro_mix0_5,out_fro_mix1,dV_fro_mix1" ]] ||
  fail "--cross-norm --csv header: $header"
plain=$("$attncheck" probe "$tiny/tiny-gpt2" --random --length 7 --json)
grep -q "out_fro_mix1" <<<"$plain" && fail "the default JSON has the what-if keys"
expect 2 "--cross-norm describe one MODEL" -- "$attncheck" probe --watch "$tiny" --cross-norm

# --watch: measures the folder's checkpoints and stops when idle.
mkdir -p "$work/run"
cp "$tiny/tiny-bert/config.json" "$work/run/"
cp "$tiny/tiny-bert/model.safetensors" "$work/run/step-100.safetensors"
cp "$tiny/tiny-bert/model.safetensors" "$work/run/step-200.safetensors"
"$attncheck" probe --watch "$work/run" --interval 0.1 --until-idle 0.5 --random --length 5 2>"$work/watch.err" ||
  fail "--watch exited $?: $(cat "$work/watch.err")"
grep -q "heads measured" "$work/watch.err" && fail "--watch wrote progress to a file: $(cat "$work/watch.err")"
lines=$(wc -l <"$work/run/attncheck-probe.jsonl")
[ "$lines" -eq 16 ] || fail "--watch wrote $lines lines, expected 16 (2 checkpoints x 2 layers x 4 heads)"
grep -q '"step":200' "$work/run/attncheck-probe.jsonl" || fail "--watch lines lack the step"

# --watch as a service: a truncated checkpoint is skipped with its reason, the others are measured, and the
# exit code once it stops says a checkpoint was refused (2). An --out that is a folder is refused at once.
head -c 3000 "$tiny/tiny-bert/model.safetensors" >"$work/run/step-300.safetensors"
cp "$tiny/tiny-bert/model.safetensors" "$work/run/step-400.safetensors"
"$attncheck" probe --watch "$work/run" --interval 0.1 --until-idle 0.5 --random --length 5 2>"$work/watch2.err"
code=$?
[ "$code" -eq 2 ] || fail "--watch with a truncated checkpoint exited $code, expected 2: $(cat "$work/watch2.err")"
grep -q "skipped step-300.safetensors: .*step-300.safetensors" "$work/watch2.err" || fail "no reason for the skip: $(cat "$work/watch2.err")"
lines=$(wc -l <"$work/run/attncheck-probe.jsonl")
[ "$lines" -eq 24 ] || fail "--watch wrote $lines lines, expected 24 (the good step-400 measured after the bad one)"
# --watch on a terminal shows the progress of each checkpoint.
mkdir -p "$work/run-tty"
cp "$tiny/tiny-bert/config.json" "$tiny/tiny-bert/model.safetensors" "$work/run-tty/"
progress=$(script -qec "'$attncheck' probe --watch '$work/run-tty' --interval 0.1 --until-idle 0.5 --random --length 5" /dev/null)
grep -q "a checkpoint: 7/8 heads measured" <<<"$progress" || fail "--watch shows no progress on a terminal: $progress"
mkdir -p "$work/log-folder"
expect 2 "log-folder: is a folder" -- "$attncheck" probe --watch "$work/run" --out "$work/log-folder" --until-idle 0

# Bytes that are not UTF-8 in --text or a --text-file line come out of --json as U+FFFD: the output is valid JSON,
# and the rest of the text is kept.
"$attncheck" probe "$tiny/tiny-bert" --text $'the \xff\xfe cat\xc3' --json --layers 0 >"$work/not-utf8.json"
code=$?
[ "$code" -le 1 ] || fail "--text with bytes that are not UTF-8 exited $code"
printf 'the cat sat\nthe \xff dog\n' >"$work/not-utf8.txt"
"$attncheck" probe "$tiny/tiny-bert" --text-file "$work/not-utf8.txt" --json --layers 0 >"$work/not-utf8-file.json"
code=$?
[ "$code" -le 1 ] || fail "--text-file with a line that is not UTF-8 exited $code"
/usr/bin/python3 - "$work/not-utf8.json" "$work/not-utf8-file.json" <<'PY' || fail "JSON of text that is not UTF-8"
import json, sys
text = json.loads(open(sys.argv[1], "rb").read().decode("utf-8"))["input"]["text"]
assert text == "the \ufffd\ufffd cat\ufffd", repr(text)
sentences = json.loads(open(sys.argv[2], "rb").read().decode("utf-8"))["input"]["sentences"]
assert sentences[1]["text"] == "the \ufffd dog", sentences
PY

# --length as a grid: the same input at each length, one probe document per length, and each head's growth: the
# least-squares slope of log ||A||_F (and log ||dA/dS||_F) on log N, here checked against NumPy's polyfit of the
# documents' own norms (a slope is ordinary least squares however it is computed: 1e-12).
"$attncheck" probe "$tiny/tiny-bert" --random --length 4:24:x2 --layers 0,1 --json >"$work/grid.json" ||
  fail "--length 4:24:x2 --json exited $?"
/usr/bin/python3 - "$work/grid.json" <<'PY' || fail "the --length grid's JSON"
import json, sys
import numpy as np
grid = json.load(open(sys.argv[1]))
assert grid["lengths"] == [4, 8, 16], grid["lengths"]
assert [p["heads"][0]["N"] for p in grid["probes"]] == [4, 8, 16]
heads = len(grid["probes"][0]["heads"])
assert heads > 1 and len(grid["growth"]) == heads
for h, growth in enumerate(grid["growth"]):
    for key, column in (("softmax_fro_exponent", "softmax_fro"), ("grad_fro_exponent", "grad_fro")):
        norms = [p["heads"][h][column] for p in grid["probes"]]
        slope = np.polyfit(np.log(grid["lengths"]), np.log(norms), 1)[0]
        assert abs(growth[key] - slope) < 1e-12, (h, key, growth[key], slope)
        assert growth["layer"] == grid["probes"][0]["heads"][h]["layer"]
PY
"$attncheck" probe "$tiny/tiny-bert" --random --length 4,16,8 --layers 0 --heads 1 >"$work/grid.txt" ||
  fail "--length 4,16,8 table exited $?"
grep -q "measured at N = 4, 8, 16" "$work/grid.txt" || fail "the grid's table does not say its lengths: $(cat "$work/grid.txt")"
grep -Eq "^summary: growth of \|\|A\|\|_F in N: median -?[0-9.]+, from" "$work/grid.txt" ||
  fail "the grid's table has no growth summary: $(cat "$work/grid.txt")"
[ "$(tail -1 "$work/grid.txt")" = "verdict: Theorem 4.1's bounds hold on every head at every length (exit 0)" ] ||
  fail "the grid's table does not end with its verdict: $(tail -1 "$work/grid.txt")"
rows=$("$attncheck" probe "$tiny/tiny-bert" --random --length 4:16:x2 --layers 0 --csv | wc -l)
heads=$("$attncheck" probe "$tiny/tiny-bert" --random --length 4 --layers 0 --csv | wc -l)
[ "$rows" -eq $(( 3 * (heads - 1) + 1 )) ] || fail "--length 4:16:x2 --csv has $rows lines, not 3 x $((heads - 1)) heads + header"
# A text: its first N tokens at each length; a length past the text is refused as one --length is, naming both.
expect 0 "measured at N = 2, 4, 8" -- "$attncheck" probe "$tiny/tiny-bert" --text "the cats sat on the mat." --length 2:8:x2 --layers 0
expect 2 "the input has 10 tokens, fewer than the 20 asked for with --length" -- \
  "$attncheck" probe "$tiny/tiny-bert" --text "the cats sat on the mat." --length 2,4,20 --layers 0
expect 2 "--length: 0 in '0:8:x2' must be >= 1" -- "$attncheck" probe "$tiny/tiny-bert" --random --length 0:8:x2
expect 2 "--length: 'abc' is not a positive integer" -- "$attncheck" probe "$tiny/tiny-bert" --random --length abc
expect 2 "--precision mixed or compare takes one --length" -- \
  "$attncheck" probe "$tiny/tiny-bert" --random --length 4,8 --precision mixed
expect 2 "--watch takes one --length" -- "$attncheck" probe --watch "$tiny" --length 4,8 --until-idle 0

# `attncheck report` reads a probe's --csv as it reads its --json: the same per-head ratios.
"$attncheck" probe "$tiny/tiny-bert" --random --length 6 --csv >"$work/probe.csv" || fail "probe --csv exited $?"
"$attncheck" probe "$tiny/tiny-bert" --random --length 6 --json >"$work/probe.json" || fail "probe --json exited $?"
"$attncheck" report "$work/probe.csv" --out "$work/csv-report" --no-plots >/dev/null || fail "report of a probe CSV exited $?"
"$attncheck" report "$work/probe.json" --out "$work/json-report" --no-plots >/dev/null || fail "report of probe JSON exited $?"
diff <(sed -n '/per layer (rows) and head (columns)/,$p' "$work/csv-report/report.md") \
  <(sed -n '/per layer (rows) and head (columns)/,$p' "$work/json-report/report.md") >/dev/null ||
  fail "the report of the CSV and of the JSON differ in their ratio tables"
grep -q "not in a probe --csv output" "$work/csv-report/report.md" || fail "the CSV's report does not say what the CSV lacks"
head -1 "$work/probe.csv" >"$work/header-only.csv"
expect 2 "header-only.csv: a header line and no head" -- "$attncheck" report "$work/header-only.csv" --out "$work/r1"
printf 'layer,head,N,softmax_fro,grad_fro\n0,0,4,1.5,x\n' >"$work/bad.csv"
expect 2 "bad.csv line 2: \"grad_fro\" is 'x': not a finite number" -- "$attncheck" report "$work/bad.csv" --out "$work/r2"
printf 'layer,head,N,softmax_fro,grad_fro\n\n0,0,4,1.5,1\n0,1,4,1.5,\n' >"$work/blank.csv"  # a blank line is counted
expect 2 "blank.csv line 4: \"grad_fro\" is empty" -- "$attncheck" report "$work/blank.csv" --out "$work/r4"
printf 'layer,head,softmax_fro\n' >"$work/columns.csv"
expect 2 "no column \"N\"" -- "$attncheck" report "$work/columns.csv" --out "$work/r3"

if [ "$failures" -gt 0 ]; then
  echo "$failures failures"
  exit 1
fi
echo "all probe CLI checks passed"
