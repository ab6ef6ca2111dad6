#!/usr/bin/env bash
# scripts/gpu-check and scripts/gpu-session judged on a stand-in device: a bundle whose programs are scripts that
# answer as a GPU machine's would (the self-test's lines, the two backends' sweeps, the benchmark's JSON), so that
# what only a device run could otherwise show is tested here: every check agreeing gives exit 0; a CUDA estimate
# 1e-5 away from the CPU's, or a step that hangs past its limit, gives exit 1 naming it; OUT holds the four files
# gpu-check hands back (a device call returns at most eight, two folders deep), and gpu-session's seven.
# Usage: gpu_check_logic_test.sh SOURCE_DIR WORK_DIR
set -uo pipefail
root=$1
work=$2
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
rm -rf "$work"
mkdir -p "$work/bundle/bin"
bundle=$work/bundle
cp "$root/scripts/gpu-check" "$root/scripts/gpu_check_report.py" "$bundle/"

# The stand-in programs; STANDIN_CUDA_MEAN and STANDIN_HANG say how they misbehave.
cat >"$bundle/bin/attncheck" <<'SH'
#!/usr/bin/env bash
case "$1" in
  --version) echo "attncheck stand-in" ;;
  gpu-selftest)
    # Until 3 s before gpu-check's deadline: the step ends inside its own limit (what was left at its start), and
    # too little is left for the next one, however long gpu-check took to start.
    [ -n "${STANDIN_SELFTEST_UNTIL_DEADLINE:-}" ] && sleep $((ATTNCHECK_GPU_CHECK_DEADLINE - $(date +%s) - 3))
    echo "ok   philox words: 1024 of 1024 bit for bit"
    echo "ok   x^3 value N = 64: relative difference 3e-15"
    echo "throughput, x^3, N = 4096, D = d = 64 [value]: 1.5e+04 samples/s, score phase 3.2e+01 TFLOP/s" ;;
  mc)
    mean=1.25
    for a in "$@"; do [ "$a" = cuda ] && mean=${STANDIN_CUDA_MEAN:-1.25}; done
    echo "{\"points\": [{\"key\": \"N=16 value\", \"N\": 16, \"estimand\": \"value\", \"mean\": $mean}]}" ;;
  *) exit 2 ;;
esac
SH
cat >"$bundle/bin/gpu_device_tests" <<'SH'
#!/usr/bin/env bash
if [ "${STANDIN_HANG:-}" = device_tests ]; then
  echo $$ >"$STANDIN_PID"
  exec sleep 61
fi
echo "All tests passed (12 assertions in 3 test cases)"
SH
cat >"$bundle/bin/bench_gpu" <<'SH'
#!/usr/bin/env bash
echo '{"engine": [{"name": "x3_n4096_value", "samples_per_second": 15000.0, "score_tflops": 32.0,
  "fraction_of_dgemm": 0.6}], "dgemm": {"8192^3": {"tflops": 53.0}}, "cpu": {"points": []}}'
SH
chmod +x "$bundle"/bin/*

export STANDIN_PID=$work/standin.pid
# The sessions' ViT plan sees no GPU even on a machine with one (it would train for minutes).
export CUDA_VISIBLE_DEVICES=
check() {  # NAME EXPECTED_EXIT PYTHON_ASSERTIONS [ENV...]: runs gpu-check into WORK/NAME and checks its report
  local name=$1 expected=$2 assertions=$3 code
  shift 3
  env ATTNCHECK_GPU_CHECK_STEP_SECONDS=3 "$@" "$bundle/gpu-check" "$work/$name" >"$work/$name.txt" 2>&1
  code=$?
  [ "$code" -eq "$expected" ] || fail "$name: gpu-check exited $code, expected $expected: $(cat "$work/$name.txt")"
  local files
  files=$(cd "$work/$name" && find . -type f | sort | tr '\n' ' ')
  [ "$files" = "./gpu-check-parts.tar.gz ./gpu-check.json ./gpu-check.log ./gpu-check.md " ] ||
    fail "$name: OUT holds $files, not gpu-check's four files"
  grep -q 'selftest.txt' <<<"$(tar -tzf "$work/$name/gpu-check-parts.tar.gz")" || fail "$name: the parts lack selftest.txt"
  /usr/bin/python3 - "$work/$name/gpu-check.json" "$work/$name/gpu-check.md" <<PY || fail "$name: the report"
import json, sys
report = json.load(open(sys.argv[1]))
markdown = open(sys.argv[2]).read()
$assertions
PY
}

check agree 0 '
assert report["checks_agree"] is True and report["timed_out"] == [], report
assert "GLIBC" in report["glibc"].upper(), report["glibc"]
assert report["status"] == "every check agrees", report["status"]
assert [c["passed"] for c in report["selftest"]["checks"]] == [True, True]
assert report["selftest"]["throughput"][0]["samples_per_second"] == 15000.0
assert [s["agree"] for s in report["sweeps"]] == [True, True], report["sweeps"]'

check disagree 1 '
assert report["checks_agree"] is False and report["status"].startswith("a check disagrees"), report["status"]
assert [s["agree"] for s in report["sweeps"]] == [False, False], report["sweeps"]
difference = report["sweeps"][0]["max_relative_difference"]
assert abs(difference - 1e-5 / 1.25001) < 1e-12, difference
assert "DISAGREE" in markdown' STANDIN_CUDA_MEAN=1.25001

# A step that hangs is stopped at its limit, and the steps after it, which would hang on such a device too, are
# skipped.
started=$(date +%s)
check hang 1 '
assert report["timed_out"] == ["device_tests"], report["timed_out"]
after = ["bench", "sweep-poly-cpu", "sweep-poly-cuda", "sweep-softmax-cpu", "sweep-softmax-cuda"]
assert sorted(report["skipped"]) == after, report["skipped"]
assert all(why == "skipped: device_tests hung before it" for why in report["skipped"].values()), report["skipped"]
assert report["checks_agree"] is False and "ran out of time or was skipped: device_tests" in report["status"]
assert report["device_tests"]["exit_code"] == 124, report["device_tests"]
assert "Stopped for time (no result): device_tests" in markdown' STANDIN_HANG=device_tests
[ $(($(date +%s) - started)) -lt 30 ] || fail "the hung step was not stopped at its 3 s limit"

# The deadline: a self-test that ends 3 s before it leaves too little for the next step, skipped so.
check deadline 1 '
assert report["selftest"]["exit_code"] == 0 and report["timed_out"] == [], report
assert report["skipped"]["device_tests"] == "skipped: the deadline had come", report["skipped"]
assert report["checks_agree"] is False' ATTNCHECK_GPU_CHECK_STEP_SECONDS=60 STANDIN_SELFTEST_UNTIL_DEADLINE=1 \
  ATTNCHECK_GPU_CHECK_DEADLINE=$(($(date +%s) + 12))
env ATTNCHECK_GPU_CHECK_DEADLINE=soon "$bundle/gpu-check" "$work/bad-deadline" >"$work/bad-deadline.txt" 2>&1
code=$?
if [ "$code" -ne 2 ] || ! grep -q "DEADLINE 'soon'" "$work/bad-deadline.txt"; then fail "a bad deadline: exit $code"; fi

# Stopped from outside mid-step (a device call's time running out), once the hanging step has started: the step is
# stopped with it, nothing of it runs on, and the report is still written, naming the step.
rm -f "$STANDIN_PID"
cat >"$work/stop-when-started" <<'SH'
#!/usr/bin/env bash
"$@" &
for _ in $(seq 600); do [ -s "$STANDIN_PID" ] && break; sleep 0.1; done
# Twice, as coreutils' timeout does (its command, then the command's group).
kill -TERM $!
sleep 0.05
kill -TERM $!
wait $!
SH
chmod +x "$work/stop-when-started"
check stopped 1 '
assert report["status"] == "stopped from outside before it ended (during device_tests)", report["status"]
assert report["skipped"] == {"device_tests": "stopped from outside"}, report["skipped"]' \
  STANDIN_HANG=device_tests ATTNCHECK_GPU_CHECK_STEP_SECONDS=60 "$work/stop-when-started"
[ -s "$STANDIN_PID" ] || fail "the stand-in's hanging step never started"
sleep 1
if [ -s "$STANDIN_PID" ] && kill -0 "$(cat "$STANDIN_PID")" 2>/dev/null; then
  fail "the stopped step's program runs on"
  kill "$(cat "$STANDIN_PID")"
fi

# gpu-session: the check, then the ViT plan (which, where PyTorch sees no GPU, says so and exits 1); its summary.
session_out=$work/session
(cd "$root" && scripts/gpu-session "$bundle" "$session_out") >"$work/session.txt" 2>&1
code=$?
# 5: the ViT plan wrote no run (vit_digits.py finds no CUDA device, or vit_papers.sh no python3 with PyTorch).
[ "$code" -eq 5 ] || fail "gpu-session, every check agreeing, no GPU for PyTorch: exit $code, expected 5"
files=$(cd "$session_out" && find . -type f | sort | tr '\n' ' ')
[ "$(wc -w <<<"$files")" -le 8 ] || fail "gpu-session wrote more than a device call hands back: $files"
for f in ./session.md ./vit.log ./gpu/gpu-check.json; do grep -q -- "$f " <<<"$files " || fail "gpu-session wrote no $f"; done
if [ -f "$session_out/session.md" ]; then
  grep -q '^| gpu-check | 0 |.*every check agrees' "$session_out/session.md" || fail "session.md: $(cat "$session_out/session.md")"
  grep -q '^| ViT plan | [12] | .* no vit-results.json' "$session_out/session.md" ||
    fail "session.md has no ViT row: $(cat "$session_out/session.md")"
  grep -q '^| step |' <<<"$(tail -n 12 "$work/session.txt")" || fail "gpu-session does not print session.md last"
fi
# The ViT leg run to its end, shrunk to the CPU by --vit (the CPU smoke test of docs/usage.md): 9 runs written.
(cd "$root" && scripts/gpu-session "$bundle" "$work/vit" --seconds 300 --vit "--device cpu --steps 2 --batch 2 \
  --record 1 --curve-every 1 --seeds 0 --sweep-seeds 0 --scales 0.0625 --eval-limit 8") >"$work/vit.txt" 2>&1
code=$?
if [ "$code" -eq 0 ]; then
  grep -q '^| ViT plan | 0 | [0-9]* | 9 of 9 runs on cpu' "$work/vit/session.md" || fail "the ViT row: $(cat "$work/vit/session.md")"
  grep -qE -- '--max-seconds [0-9]+ --device cpu' <<<"$(head -c 2000 "$work/vit/vit/vit-results.json")" ||
    fail "the ViT plan's command lacks the session's --max-seconds before --vit's options"
elif [ "$code" -eq 2 ] && grep -q "no python3 here imports torch and sklearn" "$work/vit/vit.log"; then
  echo "the ViT leg not run: no python3 with PyTorch and scikit-learn"
else
  fail "gpu-session with --vit for the CPU: exit $code: $(cat "$work/vit.txt")"
fi

# gpu-session stopped from outside while the check's step hangs: the step is stopped, nothing of it runs on,
# gpu-check's report and OUT/session.md are written, and the session exits 1.
rm -f "$STANDIN_PID"
(cd "$root" && ATTNCHECK_GPU_CHECK_STEP_SECONDS=60 STANDIN_HANG=device_tests \
  "$work/stop-when-started" scripts/gpu-session "$bundle" "$work/session-stopped") >"$work/session-stopped.txt" 2>&1
code=$?
[ "$code" -eq 1 ] || fail "gpu-session stopped from outside: exit $code, expected 1"
grep -q '^| (stopped from outside) |' "$work/session-stopped/session.md" 2>/dev/null ||
  fail "gpu-session stopped from outside wrote no session.md saying so: $(cat "$work/session-stopped.txt")"
grep -q '"status": "stopped from outside before it ended (during device_tests)"' \
  "$work/session-stopped/gpu/gpu-check.json" 2>/dev/null || fail "gpu-session stopped: gpu-check's report"
sleep 1
if [ -s "$STANDIN_PID" ] && kill -0 "$(cat "$STANDIN_PID")" 2>/dev/null; then
  fail "the stopped session's step runs on"
  kill "$(cat "$STANDIN_PID")"
fi

# Too little time left for one N = 256 run: the ViT plan is not started, and said so.
(cd "$root" && scripts/gpu-session "$bundle" "$work/short" --seconds 60) >"$work/short.txt" 2>&1
code=$?
[ "$code" -eq 5 ] || fail "gpu-session with 60 s: exit $code, expected 5 (no ViT run)"
grep -q 'ViT plan | - | 0 | not started' "$work/short/session.md" 2>/dev/null || fail "60 s: $(cat "$work/short.txt")"
for bad in "x" "59" "3601"; do
  (cd "$root" && scripts/gpu-session "$bundle" "$work/bad" --seconds "$bad") >"$work/bad.txt" 2>&1
  code=$?
  if [ "$code" -ne 2 ] || ! grep -q -- "--seconds '$bad'" "$work/bad.txt"; then fail "--seconds $bad: exit $code: $(cat "$work/bad.txt")"; fi
done
for bad in "60" "--seconds" "--sources $work/nowhere"; do
  # shellcheck disable=SC2086 # the arguments are words
  (cd "$root" && scripts/gpu-session "$bundle" "$work/bad" $bad) >"$work/bad.txt" 2>&1
  code=$?
  [ "$code" -eq 2 ] || fail "gpu-session BUNDLE OUT $bad: exit $code, expected 2: $(cat "$work/bad.txt")"
done

# The second route: where the bundle cannot run (gpu-check's exit 3, here a program missing from it), the check is
# made again from a build there (SOURCES/build-there OUT/gpu, a stand-in that says it built and runs the check).
broken=$work/broken
mkdir -p "$broken/bin" "$work/sources"
cp "$bundle/gpu-check" "$bundle/gpu_check_report.py" "$broken/"
cp "$bundle/bin/attncheck" "$bundle/bin/bench_gpu" "$broken/bin/"
cat >"$work/sources/build-there" <<SH
#!/usr/bin/env bash
echo "built there" >"\$1/build-there.log"
ATTNCHECK_GPU_CHECK_STEP_SECONDS=3 "$bundle/gpu-check" "\$1"
SH
chmod +x "$work/sources/build-there"
(cd "$root" && scripts/gpu-session "$broken" "$work/fallback" --seconds 200 --sources "$work/sources") \
  >"$work/fallback.txt" 2>&1
grep -q '^| gpu-check | 3 |.*the bundle cannot run here' "$work/fallback/session.md" 2>/dev/null ||
  fail "the broken bundle's row: $(cat "$work/fallback.txt")"
grep -q '^| gpu-check, built there | 0 |.*every check agrees' "$work/fallback/session.md" 2>/dev/null ||
  fail "the second route's row: $(cat "$work/fallback.txt")"
files=$(cd "$work/fallback" && find . -type f | wc -l)
[ "$files" -le 8 ] || fail "gpu-session with the second route wrote $files files, more than eight"
# A build there that fails: its row says so from build-there.log, not from the bundle's earlier report.
cat >"$work/sources/build-there" <<'SH'
#!/usr/bin/env bash
echo "build-there: the build failed (the end of build-there.log:)" >"$1/build-there.log"
exit 4
SH
(cd "$root" && scripts/gpu-session "$broken" "$work/fallback" --seconds 200 --sources "$work/sources") \
  >"$work/fallback.txt" 2>&1
code=$?
[ "$code" -eq 4 ] || fail "gpu-session whose build there fails: exit $code, expected 4"
grep -q '^| gpu-check, built there | 4 |.*no report written: build-there: the build failed' "$work/fallback/session.md" ||
  fail "the failed build's row: $(cat "$work/fallback/session.md")"
(cd "$root" && scripts/gpu-session "$work/nowhere" "$work/bad") >"$work/bad.txt" 2>&1
code=$?
if [ "$code" -ne 2 ] || ! grep -q "holds no gpu-check" "$work/bad.txt"; then fail "a missing bundle: exit $code"; fi

if [ "$failures" -gt 0 ]; then
  echo "$failures failures"
  exit 1
fi
echo "gpu-check and gpu-session judged a stand-in device rightly"
