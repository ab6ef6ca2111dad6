#!/usr/bin/env bash
# The second route to the GPU check (scripts/gpu-sources, then DIR/build-there on the GPU machine) tried here as on a
# machine with none of the build's packages: in a private mount namespace, the system's copies of every packaged
# header folder, CMake package file and pkg-config file are hidden under empty folders, so that configuring succeeds
# only if each library is found among the unpacked packages, and the streams library (Random123's headers, which no
# package file names) compiles only if their headers reach every compile line. Every package CMake resolved must lie
# in the unpacked folder. Needs root (unshare); skipped (77) without it or where Debian's archive cannot be reached.
# --full-build (by hand, about 25 minutes on 2 cores): builds the three programs there too and runs gpu-check,
# which must load every library from the unpacked folder or the CUDA toolkit and say that no device answers.
# Usage: sources_test.sh SOURCE_DIR WORK_DIR [--full-build]
set -uo pipefail
root=$1
work=$2
full=${3:-}
if [ "$(id -u)" -ne 0 ] || ! unshare -m true 2>/dev/null; then
  echo "skipped: hiding the system's packages needs root and unshare -m"
  exit 77
fi
rm -rf "$work"
mkdir -p "$work"
"$root/scripts/gpu-sources" "$work/sources" >"$work/sources.log" 2>&1
code=$?
if [ "$code" -eq 3 ]; then
  echo "skipped: Debian's archive cannot be reached: $(tail -1 "$work/sources.log")"
  exit 77
fi
[ "$code" -eq 0 ] || { cat "$work/sources.log"; echo "FAIL: scripts/gpu-sources exited $code"; exit 1; }

# What a bare machine lacks: each package's headers, CMake files and pkg-config files.
hidden_folders=(/usr/include/CLI /usr/include/Random123 /usr/include/benchmark /usr/include/boost /usr/include/catch2
  /usr/include/eigen3 /usr/include/fmt /usr/include/nlohmann /usr/include/rapidcheck /usr/include/stb
  /usr/include/x86_64-linux-gnu/openblas-pthread /usr/lib/cmake /usr/lib/x86_64-linux-gnu/cmake /usr/share/cmake
  /usr/share/eigen3 /usr/lib/x86_64-linux-gnu/pkgconfig /usr/share/pkgconfig)
hidden_files=(/usr/include/pcre2.h /usr/include/pcre2posix.h /usr/include/rapidcheck.h)
export ATTNCHECK_GPU_SOURCES_WORK=$work/there
targets=(--target attncheck_streams)
[ "$full" = --full-build ] && targets=(--target attncheck --target gpu_device_tests --target bench_gpu)
# shellcheck disable=SC2016 # expanded by the inner shell
HIDDEN_FOLDERS="${hidden_folders[*]}" HIDDEN_FILES="${hidden_files[*]}" ROOT=$root SOURCES=$work/sources \
  OUT=$work/out FULL=$full TARGETS="${targets[*]}" unshare -m bash -c '
  set -e
  for d in $HIDDEN_FOLDERS; do [ -d "$d" ] && mount -t tmpfs none "$d"; done
  for f in $HIDDEN_FILES; do [ -e "$f" ] && mount --bind /dev/null "$f"; done
  cd "$ROOT"
  mkdir -p "$OUT"
  "$SOURCES/build-there" "$OUT" --configure-only
  if [ "$FULL" = --full-build ]; then
    "$SOURCES/build-there" "$OUT"
  else
    cmake --build "$ATTNCHECK_GPU_SOURCES_WORK/build" $TARGETS >>"$OUT/build-there.log" 2>&1
  fi
' >"$work/there.txt" 2>&1
code=$?
export -n ATTNCHECK_GPU_SOURCES_WORK
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
if [ "$full" = --full-build ]; then
  [ "$code" -eq 2 ] || fail "build-there with the system's packages hidden exited $code, expected 2 (no device)"
  grep -q "no CUDA device answers" "$work/there.txt" || fail "gpu-check did not say no device"
else
  [ "$code" -eq 0 ] || fail "configuring and compiling the streams library with the system's packages hidden: exit $code"
fi
[ "$code" -eq 0 ] || [ "$code" -eq 2 ] || { cat "$work/there.txt"; tail -n 40 "$work/out/build-there.log" 2>/dev/null; }

# build-there unpacks by Python's tarfile; dpkg-deb, the packages' own tool, is the oracle: the same paths, types,
# sizes and link targets.
mkdir -p "$work/dpkg"
for deb in "$work"/sources/debs/*.deb; do dpkg-deb -x "$deb" "$work/dpkg" || fail "dpkg-deb cannot unpack $deb"; done
listing() { (cd "$1" && find . -printf '%p %y %s %l\n' | sort); }
if [ -d "$work/there/sysroot" ]; then
  diff <(listing "$work/dpkg") <(listing "$work/there/sysroot") >"$work/unpacked.diff" ||
    fail "build-there's unpacking differs from dpkg-deb's: $(head -5 "$work/unpacked.diff")"
fi

# Every package CMake found lies in the unpacked folder.
cache=$work/there/build/CMakeCache.txt
sysroot=$work/there/sysroot
if [ -f "$cache" ]; then
  for entry in Eigen3_DIR Boost_DIR fmt_DIR nlohmann_json_DIR CLI11_DIR Catch2_DIR rapidcheck_DIR benchmark_DIR \
    ATTNCHECK_OPENBLAS_LIBRARY ATTNCHECK_OPENBLAS_INCLUDE pkgcfg_lib_PCRE2_pcre2-8 pkgcfg_lib_STB_stb; do
    value=$(grep -m1 "^$entry:" "$cache" | cut -d= -f2-)
    case "$value" in
      "$sysroot"/*) ;;
      *) fail "$entry is '$value', not in the unpacked packages" ;;
    esac
  done
else
  fail "no CMakeCache.txt: configuring failed ($work/there.txt)"
fi

if [ "$failures" -gt 0 ]; then
  echo "$failures failures"
  exit 1
fi
echo "the GPU machine's second route configures and compiles with none of the system's packages"
