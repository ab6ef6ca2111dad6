"""The computations release the GIL: another Python thread runs while one of them is under way.

The switch interval is raised to 100 s, so a thread holding the GIL keeps it until it gives it up itself. The
main thread waits for the worker to start and then looks whether the call has finished: if the call kept the
GIL, the main thread gets it back only when the worker has finished (and says so); if the call released it,
the main thread runs while the call is still computing (each call below takes tens of milliseconds or more).
"""
import sys
import threading

import numpy as np
import pytest

import attncheck


def main_thread_ran_during(call):
    started, finished = threading.Event(), threading.Event()

    def worker():
        started.set()
        call()
        finished.set()

    previous = sys.getswitchinterval()
    sys.setswitchinterval(100)
    try:
        thread = threading.Thread(target=worker)
        thread.start()
        started.wait()
        during = not finished.is_set()
        thread.join()
    finally:
        sys.setswitchinterval(previous)
    assert finished.is_set()
    return during


rng = np.random.default_rng(20261121)
LOGITS = rng.standard_normal((64, 256, 256))
X = rng.standard_normal((768, 64))
W = rng.standard_normal((64, 128)) / 8


@pytest.mark.parametrize("name, call", [
    ("softmax_norms", lambda: attncheck.softmax_norms(LOGITS)),
    ("attention_norms", lambda: attncheck.attention_norms(X, W, W, heads=2)),
    ("bounds", lambda: attncheck.bounds(512, families=["worst-case-search", "gaussian-1"], trials=4, threads=1)),
    ("mc", lambda: attncheck.mc(phi="poly", N=128, D=16, d=16, p=3, samples=2048, threads=1)),
])
def test_the_gil_is_released_during_the_computation(name, call):
    assert main_thread_ran_during(call), f"{name} kept the GIL while computing"


def test_the_check_sees_a_call_that_keeps_the_gil():
    # A pure-Python loop never gives up the GIL here, so the same check must say so.
    assert not main_thread_ran_during(lambda: sum(i * i for i in range(2_000_000)))
