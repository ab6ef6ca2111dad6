"""Plain NumPy doing what one sample of `attncheck mc` does at the benchmark point: draw X, Q, K, form S,
sum s^(2p) for ||F||_F and the dQ closed form (THEORY.md fact 7). Prints one JSON line with samples/s."""
import json
import sys
import time

import numpy as np


def one_sample(rng, n, D, d, p):
    X = rng.standard_normal((n, D))
    Q = rng.standard_normal((D, d))
    K = rng.standard_normal((D, d))
    lam = 1 / np.sqrt(d)
    U = X @ K
    S = lam * (X @ Q) @ U.T
    value = np.sqrt(np.sum(S ** (2 * p)))
    G = (p * S ** (p - 1)) ** 2
    dq = lam * np.sqrt(np.sum((X ** 2).sum(axis=1) * (G @ (U ** 2).sum(axis=1))))
    return value, dq


def main():
    n, D, d, p = (int(a) for a in sys.argv[1:5]) if len(sys.argv) >= 5 else (1024, 64, 64, 3)
    seconds = float(sys.argv[5]) if len(sys.argv) >= 6 else 10.0
    rng = np.random.default_rng(1)
    one_sample(rng, n, D, d, p)  # warm-up
    done, start, cpu_start = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - start < seconds:
        one_sample(rng, n, D, d, p)
        done += 1
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu_start
    info = {}
    try:
        from threadpoolctl import threadpool_info
        info = [{k: v for k, v in pool.items() if k in ("internal_api", "version", "num_threads", "architecture")}
                for pool in threadpool_info()]
    except ImportError:
        info = "threadpoolctl not installed"
    print(json.dumps({"samples_per_second": done / elapsed, "samples_per_cpu_second": done / cpu,
                      "samples": done, "seconds": elapsed,
                      "numpy": np.__version__, "blas": info}))


if __name__ == "__main__":
    main()
