#!/usr/bin/python3
"""Summarize the probe logs of the digits runs (written live by the recorder or by `attncheck probe --watch`):
for each run and logged step, the norm of the attention map the model was trained with (softmax:
||softmax(S)||_F, x^3/sqrt(N): ||S^3||_F/sqrt(N), x^3: ||S^3||_F), as mean +- standard error over all layers
and heads, with its ratio to sqrt(N); then the papers' qualitative claim checked on the last common step: x^3
far above softmax (ratio > 10) and x^3/sqrt(N) close to it (ratio within [1/10, 10]). The thresholds are this
script's, stated so they can be argued with.

  /usr/bin/python3 examples/summarize_probe_log.py RUN_DIR [RUN_DIR ...]
"""
import json
import math
import os
import statistics
import sys

OWN_NORM = {"softmax": "softmax_fro", "poly3_scaled": "poly3_scaled_fro", "poly3": "poly3_fro"}
LABEL = {"softmax": "softmax", "poly3_scaled": "x^3/sqrt(N)", "poly3": "x^3"}


def load(run):
    by_step = {}
    activation = None
    with open(os.path.join(run, "attncheck-probe.jsonl")) as f:
        for line in f:
            row = json.loads(line)
            activation = row["activation"]
            by_step.setdefault(row["step"], []).append(row)
    return activation, by_step


def mean_se(values):
    mean = statistics.fmean(values)
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else float("nan")
    return mean, se


def ratio_se(numerator, denominator):
    """Standard error of mean_a / mean_b for independent means (first-order propagation of their errors)."""
    (_, a, a_se), (_, b, b_se) = numerator, denominator
    return abs(a / b) * math.sqrt((a_se / a) ** 2 + (b_se / b) ** 2)


def main(runs):
    last = {}
    for run in runs:
        activation, by_step = load(run)
        key = OWN_NORM[activation]
        print(f"{run}: trained with {LABEL[activation]}; ||A||_F of that map per step "
              f"(mean +- standard error over {len(next(iter(by_step.values())))} heads; N: the measured sequence's length)")
        print(f"{'step':>7} {'N':>4} {'||A||_F':>20} {'/sqrt(N)':>9} {'min':>9} {'max':>9}")
        for step in sorted(by_step):
            rows = by_step[step]
            values = [r[key] for r in rows]
            mean, se = mean_se(values)
            n = rows[0]["N"]
            print(f"{step:>7} {n:>4} {mean:>11.4g} +- {se:<6.2g} {mean / math.sqrt(n):>9.3f} {min(values):>9.4g} "
                  f"{max(values):>9.4g}")
            last[activation] = (step, mean, se)
        print()
    if {"softmax", "poly3", "poly3_scaled"} <= last.keys():
        soft = last["softmax"][1]
        cube = last["poly3"][1] / soft
        scaled = last["poly3_scaled"][1] / soft
        cube_se, scaled_se = ratio_se(last["poly3"], last["softmax"]), ratio_se(last["poly3_scaled"], last["softmax"])
        print(f"last logged step: ||x^3||_F / ||softmax||_F = {cube:.3g} +- {cube_se:.2g}, "
              f"||x^3/sqrt(N)||_F / ||softmax||_F = {scaled:.3g} +- {scaled_se:.2g} (ratios of the means over "
              "heads; +- one standard error from the heads' spread, the runs taken as independent)")
        holds = cube > 10 and 0.1 <= scaled <= 10
        print("papers' qualitative finding (x^3 far above softmax, x^3/sqrt(N) close to it): "
              + ("reproduced" if holds else "NOT reproduced"))
        return 0 if holds else 1
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    sys.exit(main(sys.argv[1:]))
