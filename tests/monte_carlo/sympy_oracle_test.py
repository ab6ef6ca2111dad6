"""Exact E||F||_F^2 of F = (lambda T)^p elementwise and of its Jacobians in Q, K and the scores, against SymPy.

The oracle builds F = (lambda X Q K^T X^T)^p from symbols, differentiates it entry by entry (the explicit Jacobian,
independent of THEORY.md facts 7 and 9), expands the squared Frobenius norms into monomials of the Gaussian entries
and takes their expectations exactly (E z^k = sigma^k (k-1)!! for even k, else 0). attncheck mc --json reports its
closed forms (facts 3, 4, 7, 9) as exact_sq; both must agree to 1e-12.
Usage: sympy_oracle_test.py PATH/TO/attncheck"""
import json
import subprocess
import sys

import sympy as sp


def double_factorial(n):
    return sp.factorial2(n) if n > 0 else 1


def expectation(poly, sigma):
    total = sp.Integer(0)
    for powers, coefficient in poly.terms():
        term = coefficient
        for symbol, k in zip(poly.gens, powers):
            if k % 2:
                term = 0
                break
            term *= sigma[symbol] ** k * double_factorial(k - 1)
        total += term
    return total


def oracle(N, D, d, p, sx, st, inner):
    X = sp.Matrix(N, D, lambda i, a: sp.Symbol(f"x{i}_{a}"))
    Q = sp.Matrix(D, d, lambda a, b: sp.Symbol(f"q{a}_{b}"))
    K = sp.Matrix(D, d, lambda a, b: sp.Symbol(f"k{a}_{b}"))
    sigma = {s: sx for s in X} | {s: st for s in Q} | {s: st for s in K}
    gens = list(X) + list(Q) + list(K)
    S = inner * X * Q * K.T * X.T
    F = S.applyfunc(lambda s: s ** p)
    norms = {
        "value": sum(f ** 2 for f in F),
        "dS": sum((p * s ** (p - 1)) ** 2 for s in S),
        "dQ": sum(sp.diff(f, q) ** 2 for f in F for q in Q),
        "dK": sum(sp.diff(f, k) ** 2 for f in F for k in K),
    }
    return {name: expectation(sp.Poly(sp.expand(norm), *gens), sigma) for name, norm in norms.items()}


def tool(binary, N, D, d, p, sx, st, inner):
    out = subprocess.run([binary, "mc", "--phi", "poly", "--p", str(p), "--estimand", "value,dQ,dK,dS", "--N", str(N),
                          "--D", str(D), "--d", str(d), "--sigma-x", str(sx), "--sigma-t", str(st), "--inner-scale",
                          str(inner), "--samples", "2", "--backend", "cpu", "--json"],
                         check=True, capture_output=True, text=True).stdout
    return {r["estimand"]: r["exact_sq"] for r in json.loads(out)["points"]}


def main():
    binary = sys.argv[1]
    failures = 0
    # (N, D, d, p, sigma_x, sigma_t, lambda): diagonal and off-diagonal terms, p = 1..3, non-unit constants.
    cases = [(2, 2, 1, 2, 1, 1, 1), (2, 1, 2, 3, 1, 1, 1), (2, 2, 2, 2, sp.Rational(3, 2), sp.Rational(1, 2), 2),
             (3, 2, 1, 2, 1, 1, sp.Rational(1, 4)), (2, 2, 1, 1, sp.Rational(1, 2), 2, 1)]
    for N, D, d, p, sx, st, inner in cases:
        exact = oracle(N, D, d, p, sx, st, inner)
        got = tool(binary, N, D, d, p, float(sx), float(st), float(inner))
        for name, value in exact.items():
            relative = abs(got[name] - float(value)) / float(value)
            status = "ok" if relative <= 1e-12 else "FAIL"
            failures += status == "FAIL"
            print(f"{status}: N={N} D={D} d={d} p={p} sigma_x={sx} sigma_t={st} lambda={inner} {name}: "
                  f"SymPy {value} = {float(value):.15g}, attncheck {got[name]:.15g} (relative {relative:.1e})")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
