"""Shared pieces of the package's tests: the built program, and dense PyTorch references of every attention map
the probe measures (autograd differentiates them, so no closed form of ours enters the references)."""
import math
import os
import subprocess

import pytest

PROGRAM = os.environ.get("ATTNCHECK_PROGRAM", "")


def calls_of(modules, run):
    """The (module, args, kwargs) of every call of these modules while run() runs, without gradients, in order: the
    calls the references then repeat through each module's own forward."""
    import torch

    calls = []
    for module in modules:
        def capture(*args, _module=module, _forward=module.forward, **kwargs):
            calls.append((_module, args, kwargs))
            return _forward(*args, **kwargs)
        module.forward = capture
    try:
        with torch.no_grad():
            run()
    finally:
        for module in modules:
            del module.forward
    return calls


def assert_rows_match(rows, expected, relative):
    """The measured rows against the references, head by head: layer, head (and N where given) equal, every other key
    to `relative`. Returns the largest relative difference."""
    assert rows and [(r["layer"], r["head"]) for r in rows] == [(e["layer"], e["head"]) for e in expected]
    worst = 0.0
    for row, reference in zip(rows, expected):
        for key, value in reference.items():
            if key in ("layer", "head", "N"):
                assert row[key] == value, (key, row[key], value)
                continue
            worst = max(worst, abs(row[key] - value) / abs(value))
            assert row[key] == pytest.approx(value, rel=relative), (row["layer"], row["head"], key, row[key], value)
    return worst


def assert_recorder_gives_probes_rows(model, inputs, **recorder):
    """One training-mode pass under AttentionRecorder (options `recorder`) records, head by head, the rows probe()
    measures on the same inputs in evaluation mode: ||A||_F and ||dA/dW_K||_F to 1e-12."""
    import attncheck.torch

    expected = attncheck.torch.probe(model, inputs)[0]
    model.train()
    records = []
    with attncheck.torch.AttentionRecorder(model, every=1, out=None, count="forwards", callback=records.append,
                                           **recorder):
        model(inputs)
    assert [(h["layer"], h["head"]) for h in records[0]["heads"]] == [(r["layer"], r["head"]) for r in expected]
    for head, row in zip(records[0]["heads"], expected):
        assert head["softmax_fro"] == pytest.approx(row["softmax_fro"], rel=1e-12)
        assert head["dWk_fro"] == pytest.approx(row["dWk_fro"], rel=1e-12)


def run_program(*args, check=True):
    """Runs the built `attncheck` with these arguments; the CompletedProcess (text output)."""
    if not PROGRAM:
        pytest.skip("ATTNCHECK_PROGRAM (the built attncheck) is not set")
    result = subprocess.run([PROGRAM, *map(str, args)], capture_output=True, text=True)
    if check and result.returncode not in (0, 1, 5):
        raise AssertionError(f"attncheck {' '.join(map(str, args))}: exit {result.returncode}: {result.stderr}")
    return result


# The maps the probe reports, by the prefix of their keys: softmax (the keys softmax_fro, grad_fro, dWq_fro, dWk_fro),
# S/sqrt(N), S^3/sqrt(N), S^3 and relu(S)/N, each as (name, function of the masked scores, N).
def dense_maps(torch):
    def softmax(scores, attended, n):
        return torch.softmax(scores.masked_fill(~attended, -math.inf), dim=-1)

    def elementwise(h, outer):
        return lambda scores, attended, n: torch.where(attended, h(scores) * outer(n), torch.zeros_like(scores))

    return {
        "softmax": softmax,
        "linear_scaled": elementwise(lambda s: s, lambda n: n ** -0.5),
        "poly3_scaled": elementwise(lambda s: s ** 3, lambda n: n ** -0.5),
        "poly3": elementwise(lambda s: s ** 3, lambda n: 1.0),
        "relu_n": elementwise(torch.relu, lambda n: 1.0 / n),
    }


def key(prefix, quantity):
    """The JSON key of a quantity (value, grad, dWq, dWk) of a map: softmax's are bare (softmax_fro, grad_fro...)."""
    if prefix == "softmax":
        return {"value": "softmax_fro", "grad": "grad_fro", "dWq": "dWq_fro", "dWk": "dWk_fro"}[quantity]
    return f"{prefix}_fro" if quantity == "value" else f"{prefix}_{quantity}_fro"
