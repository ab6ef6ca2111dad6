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
# Both readers share safetensors.cpp (element types, mapping); each has its own kept corpus.
sources=("$root/tests/probes/fuzz_$target.cpp" "$root/probes/src/safetensors.cpp" "$root/probes/src/gguf.cpp"
         "$root/reports/src/atomic_file.cpp")
corpus=$root/tests/probes/fuzz_corpus
[ "$target" = safetensors ] || corpus=${corpus}_$target
if [ ! -x "$binary" ] || [ -n "$(find "${sources[@]}" "$root/probes/include" "$root/reports/include" -newer "$binary" -print -quit)" ]; then
  "$clang" -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -I"$root/probes/include" -I"$root/reports/include" -I"$root/theory/include" -I/usr/include/eigen3 \
    "${sources[@]}" -lfmt -o "$binary.tmp"
  mv "$binary.tmp" "$binary"
fi
# New inputs go to the first folder, so the kept corpus in the source tree is read, never written.
rm -rf "$work/corpus-$target"
mkdir -p "$work/corpus-$target"
"$binary" -max_total_time="$seconds" -max_len=4096 -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
  "$work/corpus-$target" "$corpus"
