#!/usr/bin/env bash
# scripts/gpu-bundle's folder runs on a machine with none of the build's packages: every binary loads only what the
# bundle holds beside glibc, the C++ runtime and the CUDA libraries a GPU machine has; attncheck --version and
# gpu-selftest (exit 2, no device) run from it; and gpu-check, run where no GPU is, says so (exit 2) having written
# its JSON with what it found.
# Usage: bundle_test.sh SOURCE_DIR WORK_DIR
set -uo pipefail
root=$1
work=$2
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
rm -rf "$work"
mkdir -p "$work"
bundle=$work/gpu-bundle
ATTNCHECK_GPU_BUILD=${ATTNCHECK_GPU_BUILD:-$root/build-gpu} "$root/scripts/gpu-bundle" "$bundle" >"$work/bundle.log" 2>&1 ||
  { cat "$work/bundle.log" >&2; echo "FAIL: scripts/gpu-bundle exited $?" >&2; exit 1; }
size=$(du -sm "$bundle" | cut -f1)
[ "$size" -lt 48 ] || fail "the bundle is $size MiB, not under 48"
for f in gpu-check gpu_check_report.py payload.tar.xz BUNDLE.txt cuda-libraries.txt; do [ -e "$bundle/$f" ] || fail "the bundle lacks $f"; done

mkdir -p "$work/unpacked"
unpacked=$(readlink -f "$work/unpacked")
tar -xJf "$bundle/payload.tar.xz" -C "$unpacked" || fail "payload.tar.xz does not unpack"
# The CUDA runtime and cuBLAS come from the machine (here the toolkit's own folder, as gpu-check finds them there).
cuda_lib=$(dirname "$(find /usr/local/cuda/ -name 'libcublas.so.13' -print -quit 2>/dev/null)")
runtime='^(linux-vdso|ld-linux|libc\.|libm\.|libmvec\.|libdl\.|libpthread\.|librt\.|libstdc\+\+\.|libgcc_s\.)'
grep -qx 'libcublas.so.13' "$bundle/cuda-libraries.txt" || fail "cuda-libraries.txt lacks cuBLAS: $(cat "$bundle/cuda-libraries.txt")"
for program in attncheck gpu_device_tests bench_gpu; do
  [ -x "$unpacked/bin/$program" ] || { fail "bin/$program is missing"; continue; }
  ldd_out=$(env -u LD_LIBRARY_PATH LD_LIBRARY_PATH="$cuda_lib" ldd "$unpacked/bin/$program")
  grep -q "not found" <<<"$ldd_out" && fail "$program: a library is not found: $ldd_out"
  while read -r name path; do
    path=$(readlink -f "$path")
    case "$path" in
      "$unpacked"/lib/*) ;;
      *) [[ "$name" =~ $runtime ]] || grep -qxF "$name" "$bundle/cuda-libraries.txt" ||
        fail "$program loads $name from $path, outside the bundle" ;;
    esac
  done < <(awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' <<<"$ldd_out")
  # The RPATH is the bundle's own folder alone, of the kind that also serves the copied libraries.
  readelf -d "$unpacked/bin/$program" | grep -q 'RPATH.*\[\$ORIGIN/../lib\]' || fail "$program: RPATH is not \$ORIGIN/../lib"
done
ls "$unpacked/lib" | grep -q '^libopenblas' || fail "OpenBLAS is not in the bundle: $(ls "$unpacked/lib")"
# BUNDLE.txt names the oldest C library and C++ runtime that can run it, as the binaries' symbol versions ask.
newest_glibc=$(objdump -T "$unpacked"/bin/* "$unpacked"/lib/* | grep -o 'GLIBC_2\.[0-9]*' | sort -Vu | tail -1)
grep -q "^at least: $newest_glibc, GLIBCXX_3" "$bundle/BUNDLE.txt" || fail "BUNDLE.txt does not say $newest_glibc: $(cat "$bundle/BUNDLE.txt")"

LD_LIBRARY_PATH=$cuda_lib "$unpacked/bin/attncheck" --version >"$work/version.txt" 2>&1 ||
  fail "attncheck --version from the bundle exited $?: $(cat "$work/version.txt")"
LD_LIBRARY_PATH=$cuda_lib "$unpacked/bin/attncheck" gpu-selftest >"$work/selftest.txt" 2>&1
code=$?
if nvidia-smi >/dev/null 2>&1; then
  [ "$code" -le 1 ] || fail "gpu-selftest from the bundle exited $code on a machine with a GPU"
else
  [ "$code" -eq 2 ] || fail "gpu-selftest without a GPU exited $code, expected 2"
  grep -q "nothing to test" "$work/selftest.txt" || fail "gpu-selftest does not say why: $(cat "$work/selftest.txt")"
fi

if ! nvidia-smi >/dev/null 2>&1; then
  "$bundle/gpu-check" "$work/out" >"$work/check.txt" 2>&1
  code=$?
  [ "$code" -eq 2 ] || fail "gpu-check without a GPU exited $code, expected 2: $(cat "$work/check.txt")"
  grep -q "no CUDA device answers" "$work/check.txt" || fail "gpu-check does not say no device: $(cat "$work/check.txt")"
  /usr/bin/python3 - "$work/out/gpu-check.json" "$work/out/gpu-check.md" <<'PY' || fail "gpu-check's report"
import json, sys
report = json.load(open(sys.argv[1]))
assert report["exit_code"] == 2 and report["status"].startswith("no device"), report["status"]
found = report["libraries"]["found"]
assert all(where != "not found" for where in found.values()), found  # the toolkit's folder is searched
assert report["attncheck_version"], report
assert report["selftest"]["exit_code"] == 2 and report["checks_agree"] is False
assert "no device" in open(sys.argv[2]).read()
PY
fi

if [ "$failures" -gt 0 ]; then
  echo "$failures failures"
  exit 1
fi
echo "the GPU bundle checks passed ($size MiB)"
