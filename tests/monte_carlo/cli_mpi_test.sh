#!/usr/bin/env bash
# `mpirun -n K attncheck mc`: the ranks split each point's samples, so points.jsonl is the same for every K.
# Records are compared byte for byte with two fields removed, "wall_seconds" (a clock) and "threads" (who
# computed it); rank 0 alone prints and writes; a killed run resumes under another K; an error ends every rank.
# Usage: cli_mpi_test.sh ranks|resume|errors PATH/TO/attncheck PATH/TO/mpirun
set -uo pipefail
part=$1 bin=$2 mpirun=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# Root may run mpirun only when asked to; the shared-memory transport keeps a sandbox from probing networks.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ranks() { # ranks K ARGS...: attncheck on K ranks, killed after 120 s so that a hang fails instead of waiting
  local k=$1
  shift
  timeout -k 5 120 "$mpirun" --oversubscribe --bind-to none --mca btl self,vader -n "$k" "$bin" "$@"
}
# points.jsonl without the two fields that may differ between runs of the same sweep.
stripped() { /usr/bin/python3 -c '
import re, sys
for line in open(sys.argv[1]):
    sys.stdout.write(re.sub(r"\"(wall_seconds|threads)\":[^,}]*,?", "", line))' "$1"; }
same_points() { # same_points DIR_A DIR_B WHAT
  if ! cmp -s <(stripped "$1/points.jsonl") <(stripped "$2/points.jsonl"); then
    fail "$3: points.jsonl differ: $(diff <(stripped "$1/points.jsonl") <(stripped "$2/points.jsonl") | head -c 600)"
  fi
}
sweep=(mc --claim C6 --p 2 --D 8 --d 8 --backend cpu --seed 11)

case "$part" in
ranks)
  for k in 1 2 3; do
    ranks "$k" "${sweep[@]}" --N 16,32,48 --samples 37 --threads 1 --out "$work/fixed$k" >"$work/fixed$k.txt" \
      2>"$work/fixed$k.err" || fail "fixed samples on $k ranks: exit $?: $(cat "$work/fixed$k.err")"
    ranks "$k" "${sweep[@]}" --N 16,32 --samples auto --rel-se 0.03 --max-samples 4000 --threads 1 \
      --out "$work/auto$k" >"$work/auto$k.txt" 2>"$work/auto$k.err" || fail "auto samples on $k ranks: exit $?"
  done
  # Two threads on each of two ranks: neither the threads nor the ranks change a value.
  ranks 2 "${sweep[@]}" --N 16,32,48 --samples 37 --threads 2 --out "$work/fixed2t" >/dev/null 2>&1 ||
    fail "two ranks of two threads: exit $?"
  for k in 2 3; do
    same_points "$work/fixed1" "$work/fixed$k" "--samples 37, 1 vs $k ranks"
    same_points "$work/auto1" "$work/auto$k" "--samples auto, 1 vs $k ranks"
    # The table carries no clock and no rank count: the other ranks printing anything would show here.
    cmp -s "$work/fixed1.txt" "$work/fixed$k.txt" || fail "stdout on $k ranks differs from 1 rank's"
  done
  same_points "$work/fixed1" "$work/fixed2t" "--samples 37, 1 rank of 1 thread vs 2 ranks of 2 threads"
  /usr/bin/python3 - "$work" <<'PY' || fail "sample counts or provenance"
import json, socket, sys
work = sys.argv[1]
# C6 has two estimands (dQ, dK) at each of the three N.
fixed = [json.loads(l) for l in open(f"{work}/fixed3/points.jsonl")]
auto = [json.loads(l) for l in open(f"{work}/auto3/points.jsonl")]
assert len(fixed) == 6 and all(r["samples"] == 37 for r in fixed), [r["samples"] for r in fixed]
# auto stops by the relative standard error, at a count past the 64 judged first: the stop is a joint decision.
assert all(r["stopped_by"] == "rel-se" and r["samples"] > 64 for r in auto), [(r["stopped_by"], r["samples"]) for r in auto]
for k in (1, 3):
    p = json.load(open(f"{work}/fixed{k}/fits.json"))["provenance"]
    assert p["ranks"] == k and p["hosts"] == [socket.gethostname()] and p["rank_devices"] == [None] * k, p
PY
  # --json on three ranks: one document on stdout.
  ranks 3 "${sweep[@]}" --N 16 --samples 10 --threads 1 --json >"$work/json.txt" 2>/dev/null || fail "--json: exit $?"
  /usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["provenance"]["ranks"] == 3' \
    "$work/json.txt" || fail "--json on 3 ranks is not one JSON document: $(head -c 300 "$work/json.txt")"
  # The clock decides on rank 0 alone: a time-limited point ends at one count on every rank (a disagreement
  # would deadlock or mismatch the gathered samples).
  ranks 3 "${sweep[@]}" --N 512 --samples auto --rel-se 0.000001 --max-seconds 0.5 --threads 1 --out "$work/timed" \
    >/dev/null 2>"$work/timed.err" || fail "--max-seconds on 3 ranks: exit $?: $(cat "$work/timed.err")"
  grep -q '"stopped_by":"max-seconds"' "$work/timed/points.jsonl" || fail "--max-seconds did not stop the point"
  ;;
resume)
  # One quick point, then one that takes about a second on one core (the direct path, not the O(N) tensor path):
  # the kill after the first point then lands mid-sweep however loaded the machine is.
  grid=(--N 16,2048 --samples 600 --threads 1 --path direct)
  ranks 1 "${sweep[@]}" "${grid[@]}" --out "$work/whole" >/dev/null 2>&1 || fail "uninterrupted run: exit $?"
  # Killed (SIGKILL to mpirun and its ranks, one process group) once the first point is in the folder.
  setsid "$mpirun" --oversubscribe --bind-to none --mca btl self,vader -n 2 "$bin" "${sweep[@]}" "${grid[@]}" --out "$work/killed" \
    >/dev/null 2>&1 &
  group=$!
  for _ in $(seq 600); do
    [ -s "$work/killed/points.jsonl" ] && break
    sleep 0.05
  done
  kill -KILL -- "-$group" 2>/dev/null
  wait "$group" 2>/dev/null
  done_before=$(wc -l <"$work/killed/points.jsonl")
  total=$(wc -l <"$work/whole/points.jsonl")
  [ "$done_before" -ge 1 ] && [ "$done_before" -lt "$total" ] ||
    fail "the kill did not land mid-sweep ($done_before of $total points written)"
  ranks 3 "${sweep[@]}" "${grid[@]}" --out "$work/killed" --resume >/dev/null 2>"$work/resumed.err" ||
    fail "resume on 3 ranks: exit $?: $(cat "$work/resumed.err")"
  grep -q "points were already in" "$work/resumed.err" || fail "the resumed run skipped nothing: $(cat "$work/resumed.err")"
  same_points "$work/whole" "$work/killed" "killed on 2 ranks, resumed on 3, vs uninterrupted on 1"
  ;;
errors)
  # Bad input given to every rank: each refuses it before MPI starts, with the message and exit code 2.
  ranks 2 mc --claim C6 --p 2 --N 0 --D 8 --d 8 --samples 10 >"$work/bad.txt" 2>"$work/bad.err"
  code=$?
  [ "$code" -eq 2 ] || fail "--N 0 on 2 ranks: exit $code, expected 2"
  grep -q "attncheck: error: .*--N" "$work/bad.err" || fail "no message naming --N: $(cat "$work/bad.err")"
  [ ! -s "$work/bad.txt" ] || fail "stdout after an error: $(cat "$work/bad.txt")"
  # An error on rank 0 alone, while the others wait for it in a collective (a folder that already holds
  # points, without --resume): every rank ends, with rank 0's exit code and message.
  ranks 1 "${sweep[@]}" --N 16 --samples 10 --out "$work/taken" >/dev/null 2>&1 || fail "first run: exit $?"
  start=$(date +%s)
  ranks 3 "${sweep[@]}" --N 16 --samples 10 --out "$work/taken" >/dev/null 2>"$work/taken.err"
  code=$?
  [ "$code" -eq 2 ] || fail "a rank's error: exit $code, expected 2 (124: the ranks hung): $(cat "$work/taken.err")"
  grep -q "already holds 2 finished points" "$work/taken.err" || fail "rank 0's message is missing: $(cat "$work/taken.err")"
  [ $(($(date +%s) - start)) -lt 60 ] || fail "the ranks took $(($(date +%s) - start)) s to end"
  ;;
*)
  echo "unknown part $part"
  exit 2
  ;;
esac
if [ "$failures" -gt 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "mpi $part: ok"
