#!/usr/bin/env bash
# Builds a reader's fuzz target (safetensors or gguf) with clang's libFuzzer (the main build may use g++) and
# runs it for a bounded time over a copy of the kept corpus. Exit 77 (skipped) when clang or its runtime is
# missing.
# Usage: run_fuzz.sh SOURCE_ROOT WORK_DIR [SECONDS] [TARGET]   (TARGET: safetensors (default) or gguf)
set -euo pipefail
root=$1
work=$2
seconds=${3:-40}
target=${4:-safetensors}
clang=$(command -v clang++-14 || command -v clang++ || true)
if [ -z "$clang" ]; then
  echo "SKIPPED: clang++ not found (install clang-14 and libclang-rt-14-dev: scripts/setup probes)"
  exit 77
fi
mkdir -p "$work"
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' >"$probe/t.cpp"
if ! "$clang" -fsanitize=fuzzer "$probe/t.cpp" -o "$probe/t" 2>/dev/null; then
  echo "SKIPPED: $clang cannot link libFuzzer (install libclang-rt-14-dev)"
  exit 77
fi
binary=$work/fuzz_$target
corpus=$root/tests/probes/fuzz_corpus
[ "$target" = safetensors ] || corpus=${corpus}_$target
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
       -I"$root/probes/include" -I"$root/records/include" -I"$root/theory/include" -I/usr/include/eigen3)
headers=("$root/probes/include" "$root/records/include" "$root/theory/include")
# The readers' sources are shared by both targets: compiled once (under a lock, as both tests may run at
# once) and reused while newer than every source and header.
mkdir -p "$work/objects"
exec 8>"$work/objects.lock"
flock 8
objects=()
for source in "$root/probes/src/safetensors.cpp" "$root/probes/src/gguf.cpp" "$root/records/src/atomic_file.cpp" \
              "$root/records/src/input_file.cpp" "$root/records/src/json_input.cpp" \
              "$root/records/src/memory_budget.cpp" "$root/theory/src/printable.cpp" \
              "$root/tests/probes/fuzz_$target.cpp"; do
  object=$work/objects/$(basename "$source" .cpp).o
  if [ ! -f "$object" ] || [ -n "$(find "$source" "${headers[@]}" -newer "$object" -print -quit)" ]; then
    "$clang" "${flags[@]}" -c "$source" -o "$object.tmp"
    mv "$object.tmp" "$object"
  fi
  objects+=("$object")
done
if [ ! -x "$binary" ] || [ -n "$(find "${objects[@]}" -newer "$binary" -print -quit)" ]; then
  "$clang" -fsanitize=fuzzer,address,undefined "${objects[@]}" -lfmt -o "$binary.tmp"
  mv "$binary.tmp" "$binary"
fi
flock -u 8
# New inputs go to the first folder, so the kept corpus in the source tree is read, never written.
rm -rf "$work/corpus-$target"
mkdir -p "$work/corpus-$target"
# A finding must fail the test: libFuzzer's own exit code for one is 77, which CTest reads as "skipped".
"$binary" -error_exitcode=1 -max_total_time="$seconds" -max_len=4096 -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
  "$work/corpus-$target" "$corpus"
