#!/usr/bin/env bash
# scripts/wheel (`pip wheel` of the source tree, then `auditwheel repair`), then `pip install` of that wheel into a
# fresh virtual environment on Debian's python3 (no system site packages), timed, and the installed package used
# from outside the source and build folders: the `attncheck` command (bounds, mc, report) and `import attncheck`.
# NumPy comes from PyPI as the package's only dependency, and attncheck.torch is unavailable without PyTorch. The
# wheel is tagged manylinux, and the shared libraries its program and module load come from the wheel itself or
# from glibc and GCC's runtime (ldd).
# Exit 77 (skipped) when PyPI cannot be reached. The compiler is CXX, the one of the build the test belongs to
# (pip's environment would name x86_64-linux-gnu-g++, another ccache key for the same compiler), through ccache when
# there is one (CMake finds it); two compile jobs (CMAKE_BUILD_PARALLEL_LEVEL), as the suite's other tests share the
# cores; the CMake build folder WORK_DIR/cmake-build is kept between runs, so a second run rebuilds only what
# changed. With WERROR, the build's ATTNCHECK_WERROR: the wheel's quick build (pyproject.toml) then has no warning.
# Usage: pip_install_test.sh SOURCE_ROOT WORK_DIR CXX WERROR
set -euo pipefail
root=$1
work=$2
cxx=$3
werror=${4:-OFF}
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2}
mkdir -p "$work"
rm -rf "$work/venv" "$work/wheel" "$work/probe" "$work/run"
/usr/bin/python3 -m venv "$work/venv"
pip=("$work/venv/bin/python" -m pip --disable-pip-version-check)
build_requirement=$(sed -n 's/^requires = \["\(.*\)"\]$/\1/p' "$root/pyproject.toml")
if ! "${pip[@]}" download --quiet --no-deps --dest "$work/probe" "$build_requirement" >/dev/null 2>&1; then
  echo "SKIPPED: cannot fetch $build_requirement from PyPI (no network?)"
  exit 77
fi
settings=(--config-settings=build-dir="$work/cmake-build" --config-settings=cmake.define.CMAKE_CXX_COMPILER="$cxx"
          --config-settings=cmake.define.ATTNCHECK_WERROR="$werror")
started=$SECONDS
wheel=$("$root/scripts/wheel" "$work/wheel" "${settings[@]}")
echo "scripts/wheel: $((SECONDS - started)) s"
case "$(basename "$wheel")" in
  attncheck-*-manylinux_2_*_x86_64.whl) ;;
  *) echo "scripts/wheel wrote $wheel, not a manylinux wheel" >&2; exit 1 ;;
esac
[ "$(find "$work/wheel" -type f | wc -l)" -eq 1 ] || { echo "$work/wheel holds more than the wheel:" >&2; ls -a "$work/wheel" >&2; exit 1; }
# Another wheel of the same name is not replaced: exit 2, and the file is as it was.
cp "$wheel" "$work/before.whl"
code=0
"$root/scripts/wheel" "$work/wheel" "${settings[@]}" >/dev/null 2>"$work/again.txt" || code=$?
[ "$code" -eq 2 ] && grep -q "exists already" "$work/again.txt" && cmp -s "$wheel" "$work/before.whl" ||
  { echo "scripts/wheel over an existing wheel: exit $code, $(cat "$work/again.txt")" >&2; exit 1; }
started=$SECONDS
"${pip[@]}" install --quiet "$wheel"
echo "pip install of the wheel (NumPy from PyPI included): $((SECONDS - started)) s"

mkdir -p "$work/run"
cd "$work/run"
PATH="$work/venv/bin:$PATH"
package=$("$work/venv/bin/python" -c 'import attncheck, os; print(os.path.dirname(attncheck.__file__))')
case "$package" in "$work/venv/"*) ;; *) echo "attncheck imported from $package, not the environment" >&2; exit 1 ;; esac
[ "$(command -v attncheck)" = "$work/venv/bin/attncheck" ] || { echo "attncheck on PATH: $(command -v attncheck)" >&2; exit 1; }

# Every library the program and the module load is the wheel's own (attncheck/lib, or attncheck.libs where
# auditwheel puts what it adds), or glibc's or GCC's runtime.
for binary in "$package/bin/attncheck" "$package"/_core*.so; do
  ldd "$binary" >"$work/ldd.txt"
  if grep -q "not found" "$work/ldd.txt"; then
    echo "$binary: shared libraries not found:" >&2
    cat "$work/ldd.txt" >&2
    exit 1
  fi
  while read -r name _ path _; do
    case "$name" in linux-vdso.so.* | /*ld-linux* | ld-linux* | libc.so.* | libm.so.* | libmvec.so.* | libdl.so.* | \
      libpthread.so.* | librt.so.* | libutil.so.* | libresolv.so.* | libstdc++.so.* | libgcc_s.so.*) continue ;; esac
    case "$(readlink -f "$path")" in "$(readlink -f "$package/lib")/"* | "$(readlink -f "$package.libs")/"*) ;; *)
      echo "$binary loads $name from $path, not from the wheel ($package/lib)" >&2
      exit 1
      ;;
    esac
  done <"$work/ldd.txt"
done
[ -n "$(ls "$package/lib")" ] || { echo "the wheel carries no libraries in $package/lib" >&2; exit 1; }

# The command: Theorem 4.1's bounds, a small sweep, and its report.
attncheck bounds --N 256 >"$work/bounds.txt"
grep -q "sqrt(N)/2" "$work/bounds.txt" || { echo "attncheck bounds does not name the bound sqrt(N)/2:" >&2; cat "$work/bounds.txt" >&2; exit 1; }
code=0
attncheck mc --claim C4 --N 8,16,32 --D 4 --d 4 --p 1 --samples 16 --out "$work/run/results" >"$work/mc.txt" || code=$?
case "$code" in 0 | 1 | 5) ;; *) echo "attncheck mc exited $code" >&2; cat "$work/mc.txt" >&2; exit 1 ;; esac
[ -s "$work/run/results/points.jsonl" ] || { echo "attncheck mc wrote no points" >&2; exit 1; }
attncheck report "$work/run/results" --out "$work/run/report" >/dev/null
for file in index.html report.md; do
  [ -s "$work/run/report/$file" ] || { echo "attncheck report wrote no $file" >&2; exit 1; }
done
code=0
attncheck mc --claim C4 --N 0 >/dev/null 2>&1 || code=$?
[ "$code" -eq 2 ] || { echo "attncheck mc --claim C4 --N 0 exited $code through the console command, not 2" >&2; exit 1; }

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
