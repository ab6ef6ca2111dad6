"""Independent oracle for `attncheck bounds --cross-norm --input S --values V` (claim C9): NumPy writes the matrices
(np.save), computes O = softmax(S) softmax_col(V) itself, and builds the explicit Jacobians dO/dV, dO/dS and
d softmax_col(V)/dV by the complex step (machine precision, without the closed forms). Exit 77 (skipped) without
NumPy."""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

try:
    import numpy as np
except ImportError:
    print("SKIPPED: NumPy is not installed for", sys.executable)
    sys.exit(77)

binary = sys.argv[1]
STEP = 1e-30


def softmax_rows(z):
    z = z - z.real.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def softmax_columns(v):
    return softmax_rows(v.T).T


def output(s, v):
    return softmax_rows(s) @ softmax_columns(v)


def jacobian_fro(f, x):
    """||d vec f(x) / d vec x||_F by one complex step per entry of x."""
    total = 0.0
    for index in np.ndindex(x.shape):
        z = x.astype(complex)
        z[index] += 1j * STEP
        total += np.sum((np.imag(f(z)) / STEP) ** 2)
    return np.sqrt(total)


failures = checks = 0
rng = np.random.default_rng(20261123)
with tempfile.TemporaryDirectory() as tmp:
    cases = [(5, 3, 1.0, 1.0, np.float64), (7, 4, 3.0, 10.0, np.float64), (6, 2, 0.1, 0.01, np.float32),
             (4, 5, 10.0, 3.0, np.float64)]
    for case, (n, dv, score_scale, value_scale, dtype) in enumerate(cases):
        s = (score_scale * rng.standard_normal((n, n))).astype(dtype)
        v = (value_scale * rng.standard_normal((n, dv))).astype(dtype)
        if case == 3:
            v = np.asfortranarray(v)
        s_path, v_path = Path(tmp) / f"s{case}.npy", Path(tmp) / f"v{case}.npy"
        np.save(s_path, s)
        np.save(v_path, v)
        out = subprocess.run([binary, "bounds", "--cross-norm", "--json", "--input", str(s_path), "--values",
                              str(v_path)], capture_output=True, text=True)
        if out.returncode != 0:
            print(f"case {case}: exit {out.returncode}: {out.stderr}")
            failures += 1
            continue
        got = json.loads(out.stdout)["families"][0]["max"]
        s64, v64 = s.astype(np.float64), v.astype(np.float64)
        expected = {
            "column_softmax_fro": np.linalg.norm(softmax_columns(v64)),
            "column_grad_fro": jacobian_fro(softmax_columns, v64),
            "output_fro": np.linalg.norm(output(s64, v64)),
            "grad_values_fro": jacobian_fro(lambda z: output(s64, z), v64),
            "grad_scores_fro": jacobian_fro(lambda z: output(z, v64), s64),
        }
        for key, want in expected.items():
            checks += 1
            rel = abs(got[key] - want) / want
            ok = rel <= 1e-12
            print(f"case {case} (N {n}, d_v {dv}, {np.dtype(dtype).name}): {key} attncheck {got[key]:.15g} "
                  f"numpy {want:.15g} rel {rel:.2e} {'ok' if ok else 'FAIL'}")
            failures += not ok
print(f"{checks - failures} passed, {failures} failed")
sys.exit(1 if failures else 0)
