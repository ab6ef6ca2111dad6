#!/usr/bin/env bash
# `attncheck mc --resume` and `attncheck report` on a results folder whose points.jsonl was changed by hand: a
# record whose mean, CI, z, standard error or sample count no longer follows from its own moments is refused with
# exit 2, naming the file, the line and the field, instead of being resumed or reported as a result.
# Usage: cli_resume_edited_test.sh PATH/TO/attncheck
set -uo pipefail
bin=$1
py=/usr/bin/python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

run=(mc --claim C4 --N 8,16 --D 4 --d 4 --p 1 --samples 50 --backend cpu)
"$bin" "${run[@]}" --out "$work/base" >/dev/null 2>&1 || fail "the first run exit $?"
# The folder as written resumes: every record agrees with itself.
cp -r "$work/base" "$work/same"
"$bin" "${run[@]}" --out "$work/same" --resume >/dev/null 2>"$work/same.err" || fail "resume of the untouched folder exit $?"
grep -qF -- "--resume: 4 of 4 points were already in" "$work/same.err" ||
  fail "the untouched folder did not resume: $(cat "$work/same.err")"

# edit FOLDER FIELD PYTHON-EXPRESSION: sets FIELD of line 2 to the expression, of the record r as written.
edit() {
  $py - "$1/points.jsonl" "$2" "$3" <<'PY'
import json, sys
path, field, expression = sys.argv[1:]
lines = open(path).read().splitlines()
r = json.loads(lines[1])
r[field] = eval(expression, {"r": r})
lines[1] = json.dumps(r)
open(path, "w").write("\n".join(lines) + "\n")
PY
}

# expect_refused FIELD EXPRESSION NAMED: the edit is refused by --resume (exit 2), naming file, line and NAMED.
expect_refused() {
  local folder="$work/edited"
  rm -rf "$folder"
  cp -r "$work/base" "$folder"
  edit "$folder" "$1" "$2" || { fail "could not edit $1"; return; }
  timeout 60 "$bin" "${run[@]}" --out "$folder" --resume >"$work/out" 2>"$work/err"
  local got=$?
  [ "$got" -eq 2 ] || fail "$1 = $2: --resume exit $got, want 2: $(cat "$work/err")"
  grep -qF -- "$folder/points.jsonl line 2: " "$work/err" || fail "$1 = $2: no file and line: $(cat "$work/err")"
  grep -qF -- "$3" "$work/err" || fail "$1 = $2: the message does not name $3: $(cat "$work/err")"
  ! grep -q "tight\|holds" "$work/out" || fail "$1 = $2: a verdict was printed from the edited record"
}

expect_refused mean 1e308 '"mean" = 1e+308'
expect_refused mean None '"mean" is null'
expect_refused mean 'r["mean"] * 1.001' '"ci95"'
expect_refused ci95 '[r["ci95"][0] / 2, r["ci95"][1]]' '"ci95"'
expect_refused ci95 '[None, None]' '"ci95" = [null, null]'
expect_refused samples 'r["samples"] * 2' '"samples" = 100'
expect_refused samples 'r["samples"] + 1' '"samples" = 51'
expect_refused z_exact_sq 'r["z_exact_sq"] + 0.5' '"z_exact_sq"'
expect_refused se 'r["se"] * 1.5' '"se"'
expect_refused mean_sq 'r["mean_sq"] / 2' '"mean_sq"'
expect_refused jensen_ratio 0.5 '"jensen_ratio"'

# `report` reads the same records through the same reader.
rm -rf "$work/edited"
cp -r "$work/base" "$work/edited"
edit "$work/edited" mean 1e308
timeout 60 "$bin" report "$work/edited" --out "$work/report" --no-plots >/dev/null 2>"$work/err"
got=$?
[ "$got" -eq 2 ] || fail "report of an edited folder exit $got, want 2: $(cat "$work/err")"
grep -qF -- "$work/edited/points.jsonl line 2: \"mean\" = 1e+308" "$work/err" ||
  fail "report does not name the file, line and field: $(cat "$work/err")"

[ "$failures" -eq 0 ] && echo "all passed"
exit "$failures"
