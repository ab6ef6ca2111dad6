#!/usr/bin/python3
"""Time and peak memory of attncheck.attention_norms against the autograd Jacobian route, measured in one run.

One softmax head, x of N x D, W_Q and W_K of D x d (float64, biases on). attention_norms gives every number of
the head (||A||_F, ||dA/dS||_F, ||dA/dW_Q||_F, ||dA/dW_K||_F and the same for the other activations) in closed
form. The autograd route forms the two dense Jacobians dA/dW_Q and dA/dW_K (N^2 x D d entries each) with
torch.autograd.functional.jacobian in forward mode, vectorized over the D d tangents (the fastest dense route
here: reverse mode would need N^2 backward passes), and takes their Frobenius norms. Each measurement runs in
its own process, so its peak resident memory (VmHWM, minus what the process held before the computation) is
its own; the autograd route runs under an address-space limit (default: 80% of the memory available when the
run starts) and a size that exceeds it is reported as out of memory. Where both run, their ||dA/dW_Q||_F and
||dA/dW_K||_F are compared.

  /usr/bin/python3 bench/python/attention_norms_vs_autograd.py [BUILD_DIR] [--N 64,128,256,512,1024] [--D 64]
                                                               [--d 64] [--limit-gib G] [--repeats R]
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time

CHILD = r"""
import json, math, resource, sys, time
import numpy as np
route, n, D, d, repeats, limit = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])
if limit > 0:
    resource.setrlimit(resource.RLIMIT_AS, (int(limit), int(limit)))
import torch
import attncheck
torch.set_num_threads(1)
rng = np.random.default_rng(20261121)
x = rng.standard_normal((n, D))
w_q, w_k = rng.standard_normal((D, d)) / math.sqrt(D), rng.standard_normal((D, d)) / math.sqrt(D)
b_q, b_k = 0.1 * rng.standard_normal(d), 0.1 * rng.standard_normal(d)

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
before = status("VmRSS:")
try:
    if route == "attncheck":
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            head = attncheck.attention_norms(x, w_q, w_k, b_q, b_k)[0]
            times.append(time.perf_counter() - start)
        result = {"dWq_fro": head["dWq_fro"], "dWk_fro": head["dWk_fro"]}
    else:
        X, Wq, Wk, bq, bk = (torch.tensor(a) for a in (x, w_q, w_k, b_q, b_k))
        scale = 1 / math.sqrt(d)
        attention = lambda wq, wk: torch.softmax(scale * (X @ wq + bq) @ (X @ wk + bk).T, dim=-1)
        jacobian = torch.autograd.functional.jacobian
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            dq = jacobian(lambda w: attention(w, Wk), Wq, vectorize=True, strategy="forward-mode").norm().item()
            dk = jacobian(lambda w: attention(Wq, w), Wk, vectorize=True, strategy="forward-mode").norm().item()
            times.append(time.perf_counter() - start)
        result = {"dWq_fro": dq, "dWk_fro": dk}
    result.update(seconds=min(times), peak=status("VmHWM:"), before=before)
except (RuntimeError, MemoryError) as error:
    result = {"error": str(error).splitlines()[0][:200], "peak": status("VmHWM:"), "before": before}
print(json.dumps(result))
"""


def available_bytes():
    for line in open("/proc/meminfo"):
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def measure(route, n, D, d, repeats, limit, env):
    out = subprocess.run([sys.executable, "-c", CHILD, route, str(n), str(D), str(d), str(repeats), str(limit)],
                         capture_output=True, text=True, env=env)
    if out.returncode != 0 and not out.stdout.strip():
        return {"error": f"exit {out.returncode}: {out.stderr.strip().splitlines()[-1] if out.stderr.strip() else ''}"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def gib(b):
    return f"{b / 2 ** 30:.3g} GiB" if b >= 2 ** 30 else f"{b / 2 ** 20:.3g} MiB"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("build", nargs="?", default=os.path.join(os.path.dirname(__file__), "..", "..", "build"))
    parser.add_argument("--N", default="64,128,256,512,1024")
    parser.add_argument("--D", type=int, default=64)
    parser.add_argument("--d", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--limit-gib", type=float, default=None,
                        help="address-space limit of the autograd route (default: 80%% of the available memory)")
    args = parser.parse_args()
    env = dict(os.environ, PYTHONPATH=os.path.join(os.path.abspath(args.build), "python"))
    limit = args.limit_gib * 2 ** 30 if args.limit_gib else 0.8 * available_bytes()
    print(f"one softmax head, D = {args.D}, d = {args.d}, float64, one thread; best of {args.repeats} runs; "
          f"autograd route limited to {gib(limit)} of address space")
    print(f"{'N':>5} {'dense entries':>14} {'attncheck s':>12} {'autograd s':>11} {'time ratio':>11} "
          f"{'attncheck peak':>15} {'autograd peak':>14} {'memory ratio':>13}  agreement")
    for n in (int(v) for v in args.N.split(",")):
        ours = measure("attncheck", n, args.D, args.d, args.repeats, 0, env)
        dense = measure("autograd", n, args.D, args.d, 1 if n >= 256 else args.repeats, limit, env)
        ours_mem = ours["peak"] - ours["before"]
        entries = n * n * args.D * args.d
        if "error" in dense:
            print(f"{n:>5} {entries:>14.3g} {ours['seconds']:>12.4g} {'-':>11} {'-':>11} {gib(ours_mem):>15} "
                  f"{'-':>14} {'-':>13}  autograd: out of memory ({dense['error']})")
            continue
        dense_mem = dense["peak"] - dense["before"]
        agreement = max(abs(ours[k] / dense[k] - 1) for k in ("dWq_fro", "dWk_fro"))
        print(f"{n:>5} {entries:>14.3g} {ours['seconds']:>12.4g} {dense['seconds']:>11.4g} "
              f"{dense['seconds'] / ours['seconds']:>10.3g}x {gib(ours_mem):>15} {gib(dense_mem):>14} "
              f"{dense_mem / max(ours_mem, 1):>12.3g}x  {agreement:.1e} relative")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
