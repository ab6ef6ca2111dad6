#!/usr/bin/env bash
# scripts/check-cited-paths on a scratch repository: it must accept the citations that exist (by full path, by
# include-style suffix, by name, and a document's sibling) and name, with file and line, each one that does not.
set -euo pipefail
checker=$1
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/lib/include/attncheck/lib" "$scratch/docs"
printf '# Notes\nSee design.md and lib/include/attncheck/lib/thing.hpp.\n' > "$scratch/docs/notes.md"
printf '# Design\n' > "$scratch/docs/design.md"
printf '// Declared in lib/thing.hpp (docs/notes.md); writes DIR/out.md.\n' > "$scratch/lib/include/attncheck/lib/thing.hpp"
printf '// Conventions: DESIGN.md and lib/gone.hpp.\nint x;\n' > "$scratch/lib/use.cpp"
git -C "$scratch" init -q
git -C "$scratch" add -A
status=0
output=$(/usr/bin/python3 "$checker" "$scratch" 2>&1) || status=$?
expected=$'lib/use.cpp:1: DESIGN.md\nlib/use.cpp:1: lib/gone.hpp'
if [[ $status -ne 1 ]] || [[ "$(grep '^lib/' <<<"$output")" != "$expected" ]]; then
  printf 'expected exit 1 naming exactly:\n%s\ngot exit %d:\n%s\n' "$expected" "$status" "$output"
  exit 1
fi
echo "the checker named both missing citations and accepted the four that exist"
