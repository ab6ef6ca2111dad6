#!/usr/bin/env bash
# `pip install .` of the source tree into a fresh virtual environment on Debian's python3, then the installed
# package is used from outside the source and build folders. The environment has no system packages, so NumPy
# comes from PyPI as the package's only dependency, and attncheck.torch is unavailable without PyTorch.
# Exit 77 (skipped) when PyPI cannot be reached. The compiler goes through ccache when there is one.
# Usage: pip_install_test.sh SOURCE_ROOT WORK_DIR
set -euo pipefail
root=$1
work=$2
rm -rf "$work"
mkdir -p "$work"
/usr/bin/python3 -m venv "$work/venv"
pip=("$work/venv/bin/python" -m pip --disable-pip-version-check)
build_requirement=$(sed -n 's/^requires = \["\(.*\)"\]$/\1/p' "$root/pyproject.toml")
if ! "${pip[@]}" download --quiet --no-deps --dest "$work/probe" "$build_requirement" >/dev/null 2>&1; then
  echo "SKIPPED: cannot fetch $build_requirement from PyPI (no network?)"
  exit 77
fi
settings=()
if command -v ccache >/dev/null; then settings=(--config-settings=cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
"${pip[@]}" install --quiet "${settings[@]}" "$root"
cd "$work"
exec "$work/venv/bin/python" - "$work/venv" <<'PYTHON'
import math
import sys

import numpy as np

import attncheck

venv = sys.argv[1]
assert attncheck.__file__.startswith(venv), attncheck.__file__
n = 8
one_hot = np.where(np.eye(n, dtype=bool), 1e3, 0.0)
assert attncheck.softmax_norms(one_hot)["softmax_fro"] == math.sqrt(n)  # one-hot rows: exactly sqrt(N)
two_top = np.full((n, n), -40.0)
two_top[:, :2] = 0.0
assert abs(attncheck.softmax_norms(two_top)["grad_over_half_sqrt_N"] - 1) < 1e-12  # the exact sup sqrt(N)/2
ones = np.ones((4, 2))
heads = attncheck.attention_norms(ones, np.eye(2), np.eye(2), heads=2)
assert len(heads) == 2 and heads[0]["softmax_fro"] == 1.0  # equal scores: uniform rows, ||A||_F = 4 * (1/2)
assert attncheck.bounds(16, families="two-equal-top", trials=1)["families"][0]["ratio_grad_tight"] == 1.0
assert attncheck.mc("C4", N="8,16", D=4, d=4, p=1, samples=16)["points"]
try:
    import attncheck.torch  # noqa: F401
except ImportError as error:
    assert "torch" in str(error)
else:
    raise AssertionError("attncheck.torch imported without PyTorch in the environment")
print(f"attncheck {attncheck.__version__} installed with pip and working, NumPy {np.__version__} from PyPI")
PYTHON
