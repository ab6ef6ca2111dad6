#!/usr/bin/python3
"""`attncheck probe --what-if EXPR` on the tiny BERT against NumPy on the model's own scores.

The scores are formed here from the checkpoint's weights and the rows each layer's projections read (the probe's
--attention-out "inputs.L"): S = (X W_Q^T + b_Q)_h (X W_K^T + b_K)_h^T / sqrt(d) per head h. Then ||phi(S)||_F and
||phi'(S)||_F (the Jacobian in the scores of an elementwise map) of each what-if, to 1e-10 relative, and the
what-ifs equal to the built-in columns (x^3/sqrt(N), relu/N) give those columns' numbers, their Jacobians in W_Q
and W_K included, to 1e-12. Bad expressions exit 2 naming where they fail.
Usage: what_if_test.py ATTNCHECK TINY_MODELS_DIR
"""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np


def read_safetensors(path):
    with open(path, "rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(size))
        data = f.read()
    types = {"F64": "<f8", "F32": "<f4", "I64": "<i8"}
    return {name: np.frombuffer(data[a:b], dtype=types[info["dtype"]]).reshape(info["shape"]).astype(np.float64)
            for name, info in header.items() if name != "__metadata__"
            for a, b in [info["data_offsets"]]}


def main():
    attncheck, models = sys.argv[1], sys.argv[2]
    model = os.path.join(models, "tiny-bert")
    config = json.load(open(os.path.join(model, "config.json")))
    heads, hidden = config["num_attention_heads"], config["hidden_size"]
    d = hidden // heads
    weights = read_safetensors(os.path.join(model, "model.safetensors"))
    what_ifs = ["tanh(x)", "sigmoid(x - log(N))", "relu(x)^2/N", "x^3/sqrt(N)", "relu(x)/N"]
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        maps = os.path.join(tmp, "maps.safetensors")
        command = [attncheck, "probe", model, "--tokens", os.path.join(model, "tokens.txt"), "--json",
                   "--attention-out", maps]
        for text in what_ifs:
            command += ["--what-if", text]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            print(done.stdout, done.stderr)
            return 1
        document = json.loads(done.stdout)
        rows = read_safetensors(maps)
        worst = 0.0
        for head_record in document["heads"]:
            layer, h = head_record["layer"], head_record["head"]
            X = rows[f"inputs.{layer}"]
            n = X.shape[0]
            prefix = f"bert.encoder.layer.{layer}.attention.self."
            q = X @ weights[prefix + "query.weight"].T + weights[prefix + "query.bias"]
            k = X @ weights[prefix + "key.weight"].T + weights[prefix + "key.bias"]
            S = q[:, h * d:(h + 1) * d] @ k[:, h * d:(h + 1) * d].T / math.sqrt(d)
            shifted = 1 / (1 + np.exp(-(S - math.log(n))))
            # phi and phi' in NumPy, N the head's positions
            numpy_maps = {
                "tanh(x)": (np.tanh(S), 1 - np.tanh(S) ** 2),
                "sigmoid(x - log(N))": (shifted, shifted * (1 - shifted)),
                "relu(x)^2/N": (np.maximum(S, 0) ** 2 / n, 2 * np.maximum(S, 0) / n),
                "x^3/sqrt(N)": (S ** 3 / math.sqrt(n), 3 * S ** 2 / math.sqrt(n)),
                "relu(x)/N": (np.maximum(S, 0) / n, (S > 0) / n),
            }
            got = {w["phi"]: w for w in head_record["what_if"]}
            if set(got) != set(what_ifs):
                failures.append(f"layer {layer} head {h}: what-ifs {sorted(got)}, asked {sorted(what_ifs)}")
                continue
            for text, (value, slope) in numpy_maps.items():
                for key, want in (("fro", np.linalg.norm(value)), ("grad_fro", np.linalg.norm(slope))):
                    rel = abs(got[text][key] - want) / max(want, 1e-300)
                    worst = max(worst, rel)
                    if rel > 1e-10:
                        failures.append(f"layer {layer} head {h} {text} {key}: {got[text][key]} vs NumPy {want}")
            # The what-ifs that are the built-in columns give their numbers, weight Jacobians included.
            for text, column in (("x^3/sqrt(N)", "poly3_scaled"), ("relu(x)/N", "relu_n")):
                for key in ("fro", "grad_fro", "dWq_fro", "dWk_fro"):
                    builtin = head_record.get(f"{column}_{key}")
                    if builtin is None:
                        continue
                    if abs(got[text][key] - builtin) > 1e-12 * builtin:
                        failures.append(f"layer {layer} head {h} {text} {key}: {got[text][key]} vs {column} {builtin}")
        print(f"{len(document['heads'])} heads x {len(what_ifs)} what-ifs: largest relative difference from NumPy "
              f"{worst:.2g}")
        for bad, says in ((["--what-if", "x^"], "--what-if: 'x^': at character 3"),
                          (["--what-if", "foo(x)"], "unknown name 'foo'"),
                          (["--what-if", "x^3", "--csv"], "not in --csv")):
            done = subprocess.run([attncheck, "probe", model, "--random", "--length", "8"] + bad,
                                  capture_output=True, text=True)
            if done.returncode != 2 or says not in done.stderr:
                failures.append(f"{bad}: exit {done.returncode}, {done.stderr.strip()!r}")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
