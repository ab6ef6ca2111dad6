#!/usr/bin/env bash
# End-to-end checks of `attncheck probe`: outputs, exit codes and messages for bad input.
# Usage: cli_test.sh ATTNCHECK TINY_MODELS_DIR
set -uo pipefail
attncheck=$1
tiny=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# expect CODE PATTERN -- command...: exit code CODE and PATTERN (grep -E) somewhere in stdout+stderr.
expect() {
  local code=$1 pattern=$2
  shift 3
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  [ "$rc" -eq "$code" ] || fail "'$*' exited $rc, expected $code: $out"
  grep -Eq -- "$pattern" <<<"$out" || fail "'$*' output lacks /$pattern/: $out"
}

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
expect 2 "--length: -5 is out of range" -- "$attncheck" probe "$tiny/tiny-bert" --random --length -5
expect 2 "--layers: -1 is out of range" -- "$attncheck" probe "$tiny/tiny-bert" --layers -1
expect 2 "--interval: 'nan'" -- "$attncheck" probe --watch "$tiny" --interval nan
expect 2 "--until-idle: -1 is out of range" -- "$attncheck" probe --watch "$tiny" --until-idle -1
expect 0 "layer +head" -- "$attncheck" probe "$tiny/tiny-bert" --text "the cats sat on the mat."
expect 0 "Gaussian embeddings" -- "$attncheck" probe "$tiny/tiny-gpt2" --random --length 9

# A truncated file: refused with exit 2, naming the file.
head -c 3000 "$tiny/tiny-bert/model.safetensors" >"$work/model.safetensors"
cp "$tiny/tiny-bert/config.json" "$work/"
expect 2 "$work/model.safetensors" -- "$attncheck" probe "$work/model.safetensors"
# A file that is not safetensors says so.
printf 'hello, this is plain text and no model\n' >"$work/plain.safetensors"
expect 2 "plain.safetensors: not a safetensors file: header length [0-9]+ .*exceeds the file \\([0-9]+ bytes\\)" -- "$attncheck" probe "$work/plain.safetensors"

# JSON: one object per layer and head, 0-based, with the agreed keys.
"$attncheck" probe "$tiny/tiny-bert" --text "the cats sat" --json >"$work/out.json" || fail "--json exited $?"
/usr/bin/python3 - "$work/out.json" <<'PY' || fail "JSON output"
import json, sys
rows = json.load(open(sys.argv[1]))
assert len(rows) == 2 * 4, len(rows)
assert sorted({(r["layer"], r["head"]) for r in rows}) == [(l, h) for l in range(2) for h in range(4)]
for r in rows:
    for key in ["layer", "head", "N", "softmax_fro", "grad_fro", "dWq_fro", "dWk_fro", "poly3_scaled_fro"]:
        assert key in r, key
    assert r["N"] == 6, r["N"]  # [CLS] the cat ##s sat [SEP]
PY

# CSV with a header and the selected layer and heads only.
lines=$("$attncheck" probe "$tiny/tiny-bert" --random --length 6 --layers 1 --heads 0,3 --csv | wc -l)
[ "$lines" -eq 3 ] || fail "--csv printed $lines lines, expected 3"

# --watch: measures the folder's checkpoints and stops when idle.
mkdir -p "$work/run"
cp "$tiny/tiny-bert/config.json" "$work/run/"
cp "$tiny/tiny-bert/model.safetensors" "$work/run/step-100.safetensors"
cp "$tiny/tiny-bert/model.safetensors" "$work/run/step-200.safetensors"
"$attncheck" probe --watch "$work/run" --interval 0.1 --until-idle 0.5 --random --length 5 2>"$work/watch.err" ||
  fail "--watch exited $?: $(cat "$work/watch.err")"
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
mkdir -p "$work/log-folder"
expect 2 "log-folder: is a folder" -- "$attncheck" probe --watch "$work/run" --out "$work/log-folder" --until-idle 0

if [ "$failures" -gt 0 ]; then
  echo "$failures failures"
  exit 1
fi
echo "all probe CLI checks passed"
