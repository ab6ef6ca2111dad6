#!/usr/bin/env bash
# scripts/check-layering on scratch trees laid out as `low -> mid -> {left, right} -> top`: the clean tree
# passes and --plan counts its edges; a tree with an upward include, a sideways include, an upward link and an
# include of a library outside the order fails with exit 1, naming exactly those four by file and line.
set -euo pipefail
checker=$1
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# C++ lines written without a literal hash next to a path: check-cited-paths reads a shell line from '#' on as a
# comment, and these paths exist only in the scratch trees.
hash='#'
includes() {  # includes FILE HEADER...: a source file that includes each HEADER (under attncheck/)
  local file=$1
  shift
  : > "$file"
  for header in "$@"; do printf '%sinclude "attncheck/%s"\n' "$hash" "$header" >> "$file"; done
}

make_tree() {
  local root=$1
  mkdir -p "$root/docs"
  printf '# Design\n\n```\nlow -> mid -> {left, right} -> top\n```\n' > "$root/docs/design.md"
  for lib in low mid left right top; do
    mkdir -p "$root/$lib/include/attncheck/$lib" "$root/$lib/src"
    includes "$root/$lib/include/attncheck/$lib/$lib.hpp"
  done
  printf 'attncheck_library(attncheck_low PUBLIC_DEPS Eigen3::Eigen DEVICE_HEADERS attncheck/low/low.hpp)\n' \
    > "$root/low/CMakeLists.txt"
  printf 'attncheck_library(attncheck_mid PUBLIC_DEPS attncheck_low)\n' > "$root/mid/CMakeLists.txt"
  printf 'attncheck_library(attncheck_left PUBLIC_DEPS attncheck_mid\n  PRIVATE_DEPS attncheck_low_device)\n' \
    > "$root/left/CMakeLists.txt"
  printf 'attncheck_library(attncheck_right PUBLIC_DEPS attncheck_low)\n' > "$root/right/CMakeLists.txt"
  printf 'add_executable(attncheck_top main.cpp)\ntarget_link_libraries(attncheck_top PRIVATE attncheck_left attncheck::right)\n' \
    > "$root/top/CMakeLists.txt"
  includes "$root/left/src/left.cpp" mid/mid.hpp low/low.hpp
  printf '%sinclude <attncheck/low/low.%s>\n' "$hash" hpp > "$root/right/src/right.cpp"
  includes "$root/top/main.cpp" left/left.hpp right/right.hpp
}

fail() {
  printf '%s\n' "$1"
  exit 1
}

make_tree "$scratch/clean"
plan=$(/usr/bin/python3 "$checker" --plan "$scratch/clean") || fail "the clean tree was refused:"$'\n'"$plan"
grep -Eqx ' +left -> low +1 include' <<<"$plan" || fail "--plan does not count left -> low:"$'\n'"$plan"
grep -Eqx ' +left -> low +1 link' <<<"$plan" || fail "--plan does not count left's link of low's device target:"$'\n'"$plan"
grep -Eqx ' +top -> right +1 link' <<<"$plan" || fail "--plan does not map attncheck::right to right:"$'\n'"$plan"

make_tree "$scratch/bad"
includes "$scratch/bad/mid/include/attncheck/mid/mid.hpp"
printf '// A comment may name attncheck/top/ freely.\n' >> "$scratch/bad/mid/include/attncheck/mid/mid.hpp"
printf '%sinclude "attncheck/top/top.%s"\n' "$hash" hpp >> "$scratch/bad/mid/include/attncheck/mid/mid.hpp"
includes "$scratch/bad/right/src/right.cpp" low/low.hpp left/left.hpp
printf 'attncheck_library(attncheck_mid PUBLIC_DEPS attncheck_low\n  PRIVATE_DEPS attncheck_right)\n' \
  > "$scratch/bad/mid/CMakeLists.txt"
printf '%sinclude <attncheck/elsewhere/thing.%s>\n' "$hash" hpp > "$scratch/bad/low/src/low.cpp"
status=0
output=$(/usr/bin/python3 "$checker" "$scratch/bad" 2>&1) || status=$?
expected=$'low/src/low.cpp:1: low includes attncheck/elsewhere/ (a library not in docs/design.md\'s layering)
mid/include/attncheck/mid/mid.hpp:2: mid includes attncheck/top/ (upward)
mid/CMakeLists.txt:2: mid links attncheck_right of right (upward)
right/src/right.cpp:2: right includes attncheck/left/ (sideways)'
got=$(grep -E '^(low|mid|left|right|top)/' <<<"$output" | sort)
if [[ $status -ne 1 ]] || [[ "$got" != "$(sort <<<"$expected")" ]]; then
  printf 'expected exit 1 naming exactly:\n%s\ngot exit %d:\n%s\n' "$expected" "$status" "$output"
  exit 1
fi
echo "the checker accepted the clean tree and named the upward, sideways, unknown and linked dependencies"
