#!/usr/bin/env bash
# `attncheck mc --path`: the tensor and the direct path give the same points.jsonl values (1e-10 relative) from
# the same seed, auto records the path it chose, and a path that cannot take a point is a usage error.
# Usage: cli_path_test.sh PATH/TO/attncheck
set -uo pipefail
bin=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

for path in direct tensor auto; do
  "$bin" mc --phi poly --p 3 --claimed-exponent 1 --D 5 --d 3 --N 16,64,256 --estimand value,dQ,dK,dS,row-sum \
    --samples 12 --seed 7 --backend cpu --path "$path" --out "$work/$path" >"$work/$path.txt" 2>&1 ||
    fail "--path $path exit $?: $(cat "$work/$path.txt")"
done
/usr/bin/python3 - "$work" <<'PY' || fail "points.jsonl of the paths differ"
import json, sys
work = sys.argv[1]
load = lambda path: {r["key"]: r for r in map(json.loads, open(f"{work}/{path}/points.jsonl"))}
direct, tensor, auto = load("direct"), load("tensor"), load("auto")
bad = 0
assert direct.keys() == tensor.keys() == auto.keys() and len(direct) == 15, "not the same 15 records"
for key, d in direct.items():
    t = tensor[key]
    if (d["path"], t["path"]) != ("direct", "tensor") or auto[key]["path"] not in ("direct", "tensor"):
        print("paths recorded:", d["path"], t["path"], auto[key]["path"]); bad += 1
    for field in ("mean", "mean_sq", "se", "se_sq"):
        if abs(t[field] - d[field]) > 1e-10 * abs(d[field]):
            print(key, field, d[field], t[field]); bad += 1
# The flop estimate sends N = 16 (few scores) direct and N = 256 to the tensor path.
chosen = {r["N"]: r["path"] for r in auto.values()}
if chosen != {16: "direct", 64: "tensor", 256: "tensor"}:
    print("auto chose", chosen); bad += 1
sys.exit(1 if bad else 0)
PY
grep -q "stopped by  path" "$work/auto.txt" || fail "the table has no path column: $(cat "$work/auto.txt")"

# A map the tensor path cannot take: exit 2, naming why.
"$bin" mc --phi softmax --N 8 --D 2 --d 2 --samples 4 --path tensor >"$work/out" 2>"$work/err"
[ $? -eq 2 ] || fail "--path tensor with softmax: want exit 2"
grep -q "phi softmax" "$work/err" || fail "no reason named: $(cat "$work/err")"
"$bin" mc --claim C3 --N 8 --D 2 --d 2 --samples 4 --path fast >"$work/out" 2>"$work/err"
[ $? -eq 2 ] || fail "--path fast: want exit 2"
grep -q "fast" "$work/err" || fail "the bad value is not named: $(cat "$work/err")"

if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "all mc --path checks passed"
