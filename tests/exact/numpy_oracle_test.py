"""Independent oracle for `attncheck bounds --input`: NumPy writes the matrices (np.save, so the .npy reader
meets files made by NumPy itself) and differentiates softmax by the complex step, which gives the Jacobian to
machine precision without using its closed form. Exit 77 (skipped) without NumPy."""
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


def softmax_rows(z):
    z = z - z.real.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def jacobian_fro_complex_step(a, h=1e-30):
    n, m = a.shape
    total = 0.0
    for j in range(m):
        step = np.zeros((n, m), dtype=complex)
        step[:, j] = 1j * h  # rows are independent, so one step per column perturbs every row at once
        column = np.imag(softmax_rows(a.astype(complex) + step)) / h  # d s_i / d a_ij for every row i
        total += np.sum(column ** 2)
    return np.sqrt(total)


failures = 0
rng = np.random.default_rng(20261121)
with tempfile.TemporaryDirectory() as tmp:
    for case, (n, m, scale, dtype) in enumerate([(6, 6, 1.0, np.float64), (9, 13, 10.0, np.float64),
                                                 (20, 20, 0.01, np.float32), (12, 12, 3.0, np.float32),
                                                 (5, 8, 30.0, np.float64)]):
        a = (scale * rng.standard_normal((n, m))).astype(dtype)
        if case == 4:
            a = np.asfortranarray(a)
        path = Path(tmp) / f"case{case}.npy"
        np.save(path, a)
        out = subprocess.run([binary, "bounds", "--json", "--input", str(path)], capture_output=True, text=True)
        if out.returncode != 0:
            print(f"case {case}: exit {out.returncode}: {out.stderr}")
            failures += 1
            continue
        family = json.loads(out.stdout)["families"][0]
        a64 = a.astype(np.float64)
        expected_grad = jacobian_fro_complex_step(a64)
        expected_softmax = np.linalg.norm(softmax_rows(a64))
        for name, got, want in [("grad", family["max_grad_fro"], expected_grad),
                                ("softmax", family["max_softmax_fro"], expected_softmax)]:
            rel = abs(got - want) / want
            status = "ok" if rel <= 1e-12 else "FAIL"
            print(f"case {case} ({n}x{m}, scale {scale}, {np.dtype(dtype).name}): {name} attncheck {got:.15g} "
                  f"numpy {want:.15g} rel {rel:.2e} {status}")
            failures += rel > 1e-12
print(f"{5 * 2 - failures} passed, {failures} failed")
sys.exit(1 if failures else 0)
