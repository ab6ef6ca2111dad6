#!/usr/bin/python3
"""Checks the digits example end to end on a short run: the watcher's log has every checkpoint, layer and
head with the trained activation, and the probe's forward pass through the trained map (x^3/sqrt(N) here,
which torch_reference.py does not cover) gives the attention matrices of the training code itself.

  example_check.py ATTNCHECK RUN_DIR     (RUN_DIR from train_digits.py --activation poly3_scaled)
Exit 0 pass, 1 fail.
"""
import json
import os
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "examples"))
sys.path.insert(0, here)
import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch_reference import read_safetensors  # noqa: E402
from train_digits import Encoder  # noqa: E402

attncheck, run = sys.argv[1], sys.argv[2]
failures = []
lines = [json.loads(line) for line in open(os.path.join(run, "attncheck-probe.jsonl"))]
steps = sorted({line["step"] for line in lines})
if steps != [0, 10, 20]:
    failures.append(f"steps in the log: {steps}, expected [0, 10, 20]")
if len(lines) != 3 * 2 * 4:
    failures.append(f"{len(lines)} lines, expected 3 checkpoints x 2 layers x 4 heads")
if any(line["activation"] != "poly3_scaled" or line["N"] != 65 for line in lines):
    failures.append("a line lacks activation poly3_scaled or N = 65")

checkpoint = os.path.join(run, "step-000020.safetensors")
tokens = os.path.join(run, "probe-tokens.txt")
with tempfile.TemporaryDirectory() as tmp:
    dump = os.path.join(tmp, "attention.safetensors")
    subprocess.run([attncheck, "probe", checkpoint, "--tokens", tokens, "--json", "--attention-out", dump],
                   check=True, capture_output=True)
    ours = read_safetensors(dump)
model = Encoder("poly3_scaled").double()
weights = read_safetensors(checkpoint)
with torch.no_grad():
    for name, parameter in model.bert_state().items():
        parameter.copy_(torch.tensor(weights[name]))
    maps = []
    ids = torch.tensor([[int(t) for t in open(tokens).read().split()]])
    model(ids, attention=maps)
worst = max(float(np.max(np.abs(ours[f"layer.{l}"] - maps[l][0].numpy()))) for l in range(len(maps)))
scale = max(float(np.max(np.abs(m.numpy()))) for m in maps)
print(f"x^3/sqrt(N) attention, probe vs training code: max |difference| {worst:.3e} (entries up to {scale:.3g})")
if worst > 1e-5 * max(1.0, scale):
    failures.append(f"attention differs by {worst:.3e}")
for failure in failures:
    print("FAIL:", failure)
sys.exit(1 if failures else 0)
