"""Calls that could run for minutes. A size the command line refuses (here broadcast views, whose few bytes of
memory show 2^40 entries) is a ValueError naming the argument and its shape, at once; a long call that is allowed
ends at Ctrl-C (KeyboardInterrupt) instead of running to its end.

Without the module's own look at signals Python would raise KeyboardInterrupt only when the call returns, so the
interrupted calls are sized, from a short timed call, to run several times longer than the time allowed for the
interruption."""
import os
import signal
import threading
import time

import numpy as np
import pytest

import attncheck
from attncheck import _core

HUGE = (2 ** 20, 2 ** 20)
INTERRUPTED_WITHIN_S = 1.0  # the module looks every 25 ms; the rest is slack for slow (sanitized) builds
UNINTERRUPTED_AT_LEAST_S = 4 * INTERRUPTED_WITHIN_S


def zeros(shape, dtype=np.float64):
    """Zeros of any shape in one element's memory."""
    return np.broadcast_to(np.zeros((), dtype=dtype), shape)


def test_views_larger_than_the_command_line_takes_are_refused_at_once():
    refusals = [
        (lambda: attncheck.softmax_norms(zeros(HUGE)),
         r"softmax_norms on logits of shape \(1048576, 1048576\) needs 8\.[0-9]+e\+03 GiB of memory"),
        (lambda: attncheck.softmax_norms(zeros((2 ** 20, 2 ** 10, 2 ** 10), np.float32),
                                         mask=np.ones(2 ** 10, bool)),
         r"softmax_norms on logits of shape \(1048576, 1024, 1024\) needs 8\.[0-9]+e\+03 GiB of memory"),
        (lambda: attncheck.attention_norms(zeros(HUGE), zeros((2 ** 20, 4)), zeros((2 ** 20, 4)), heads=2),
         r"measuring x of shape \(1048576, 1048576\) with w_q of shape \(1048576, 4\) and w_k of shape "
         r"\(1048576, 4\) \(2 heads\) needs"),
        # Few features, many positions: the scratch of the head's N x N products.
        (lambda: attncheck.attention_norms(zeros((2 ** 30, 4)), zeros((4, 4)), zeros((4, 4)), heads=1),
         r"measuring x of shape \(1073741824, 4\) .* needs"),
        (lambda: _core.measure_scores(zeros((1,) + HUGE)),
         r"measuring scores of shape \(1, 1048576, 1048576\) needs"),
    ]
    for call, message in refusals:
        start = time.monotonic()
        with pytest.raises(ValueError, match=message + r".* GiB are available"):
            call()
        assert time.monotonic() - start < INTERRUPTED_WITHIN_S


def seconds_to_interrupt(call, delay=0.2):
    """Runs call() on this (the main) thread with SIGINT sent to the process after `delay` s: the seconds from the
    signal to the KeyboardInterrupt. Fails when the call returns."""
    sent = []

    def send():
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(delay, send)
    try:
        timer.start()
        try:
            call()
        except KeyboardInterrupt:
            assert sent, "KeyboardInterrupt before the signal was sent"
            return time.monotonic() - sent[0]
        raise AssertionError("the call returned: it was not interrupted")
    finally:
        timer.cancel()
        timer.join()
        signal.signal(signal.SIGINT, previous)


def available_memory_bytes():
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    pytest.skip("/proc/meminfo does not say how much memory is available")


def timed(call):
    start = time.monotonic()
    call()
    return time.monotonic() - start


def test_softmax_norms_ends_at_ctrl_c():
    cols = 4096
    rows = 2048
    per_entry = timed(lambda: attncheck.softmax_norms(zeros((rows, cols)))) / (rows * cols)
    # A broadcast view is allowed while its entries as doubles fit the memory (80% of what is available): stay
    # well within it.
    rows = int(min(UNINTERRUPTED_AT_LEAST_S * 3 / per_entry, available_memory_bytes() / 4 / 8) // cols)
    if rows * cols * per_entry < UNINTERRUPTED_AT_LEAST_S:
        pytest.skip(f"this machine's memory allows no call long enough to tell an interruption from the call's end "
                    f"({rows} x {cols} logits: about {rows * cols * per_entry:.1f} s)")
    assert seconds_to_interrupt(lambda: attncheck.softmax_norms(zeros((rows, cols)))) < INTERRUPTED_WITHIN_S
    # The module is whole afterwards.
    assert attncheck.softmax_norms(np.zeros((3, 10)))["softmax_over_sqrt_N"] == pytest.approx(np.sqrt(0.1))


def test_attention_norms_ends_at_ctrl_c_between_heads():
    # A head of N = 512 takes about 15 ms, and holds its projections (64 KiB).
    rng = np.random.default_rng(20261121)
    n, dim, d = 512, 8, 8
    x = rng.standard_normal((n, dim))

    def call(heads):
        w = rng.standard_normal((dim, heads * d)) / 4
        return lambda: attncheck.attention_norms(x, w, w, heads=heads)

    per_head = timed(call(4)) / 4
    if per_head > INTERRUPTED_WITHIN_S / 4:
        pytest.skip(f"a head takes {per_head:.2f} s here: too slow to tell a prompt interruption")
    heads = int(UNINTERRUPTED_AT_LEAST_S * 3 / per_head) + 1
    assert seconds_to_interrupt(call(heads)) < INTERRUPTED_WITHIN_S
