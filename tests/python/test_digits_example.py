"""examples/train_digits.py --record: the recorder's live lines equal what `attncheck probe` measures on the
checkpoint of the same step fed the same digit (the probe's own float64 forward pass through the checkpoint),
so the example's adapter hands the recorder the right weights, biases and inputs."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("sklearn")

from conftest import run_program  # noqa: E402

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples")
sys.path.insert(0, EXAMPLES)
import train_digits  # noqa: E402

COMPARED = ("N", "D", "d", "inner", "softmax_fro", "grad_fro", "dWq_fro", "dWk_fro", "poly3_scaled_fro",
            "poly3_scaled_grad_fro", "poly3_scaled_dWq_fro", "poly3_scaled_dWk_fro", "poly3_fro", "relu_n_fro",
            "score_std", "sigma_x", "sigma_t", "iid_poly3_scaled_fro")


def test_live_lines_equal_the_probe_of_the_checkpoint_of_the_same_step(tmp_path):
    run = tmp_path / "run"
    subprocess.run([sys.executable, os.path.join(EXAMPLES, "train_digits.py"), run, "--activation", "poly3_scaled",
                    "--steps", "12", "--record", "5", "--save-every", "5"], check=True, capture_output=True,
                   env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    lines = [json.loads(line) for line in open(run / "attncheck-probe.jsonl")]
    assert sorted({line["step"] for line in lines}) == [0, 5, 10]
    assert len(lines) == 3 * 2 * 4 and all(line["activation"] == "poly3_scaled" for line in lines)

    tokens, _, train, _ = train_digits.digit_tokens(0)
    draws = train_digits.batches(0, len(train), 64)
    batch_of_update = [next(draws) for _ in range(11)]  # the forward pass after k updates uses draw k
    for step in (0, 5, 10):
        digit = tokens[train[batch_of_update[step][0]]]  # the recorder measures the batch's first sequence
        ids = tmp_path / f"ids-{step}.txt"
        ids.write_text(" ".join(str(int(t)) for t in digit))
        probed = json.loads(run_program("probe", run / f"step-{step:06d}.safetensors", "--tokens", ids,
                                        "--json").stdout)["heads"]
        recorded = [line for line in lines if line["step"] == step]
        assert [(p["layer"], p["head"]) for p in probed] == [(r["layer"], r["head"]) for r in recorded]
        for p, r in zip(probed, recorded):
            for key in COMPARED:
                # The training runs in float32, the probe in float64 on the same float32 weights: measured at most
                # 3e-7 apart.
                assert r[key] == pytest.approx(p[key], rel=5e-6), (step, r["layer"], r["head"], key)
