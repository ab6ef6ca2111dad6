# Sourced by the probe CLI tests: a scratch folder removed on exit, a failure count, and expect().
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
