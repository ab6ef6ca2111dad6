#!/usr/bin/env bash
# Runs a Python test script with the interpreter of scripts/pyenv (Debian's python3 plus the pinned PyPI
# oracles). Exit 77 (skipped) when the environment cannot be built (no network to PyPI).
# Usage: run_with_pyenv.sh SOURCE_ROOT CACHE SCRIPT ARGS...
set -uo pipefail
root=$1
cache=$2
shift 2
if ! python=$("$root/scripts/pyenv" "$cache"); then
  echo "SKIPPED: scripts/pyenv could not build the test oracles' environment (see the message above)"
  exit 77
fi
exec "$python" "$@"
