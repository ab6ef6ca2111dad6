#!/usr/bin/env bash
# Runs a Python test script with the interpreter of scripts/pyenv (Debian's python3 plus the pinned PyPI
# oracles). Exit 77 (skipped) when the environment cannot be built (no network to PyPI).
# Usage: run_with_pyenv.sh SOURCE_ROOT CACHE [--set SET] SCRIPT ARGS...   (SET: an environment of scripts/pyenv)
set -uo pipefail
root=$1
cache=$2
shift 2
set_name=
if [ "${1:-}" = --set ]; then
  set_name=$2
  shift 2
fi
if ! python=$("$root/scripts/pyenv" "$cache" $set_name); then
  echo "SKIPPED: scripts/pyenv could not build the test oracles' environment (see the message above)"
  exit 77
fi
exec "$python" "$@"
