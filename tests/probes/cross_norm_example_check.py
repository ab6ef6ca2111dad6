#!/usr/bin/python3
"""Checks a short run of examples/cross_norm_digits.py (2 seeds, 60 steps, evaluation every 10, mix alpha
annealed from step 20 over 20 steps) and its report:
  - every variant and seed recorded every evaluation step (anneal from step 20 on);
  - mix alpha is 0 for softmax_v, 1 for cross_norm, and for anneal rises from 0 at step 20 to 1 at step 40,
    staying at 1 to the end;
  - at mix alpha 1 every recorded ||O||_F <= sqrt(N d_v) and ||dO/dV||_F <= sqrt(N d_v / 8) (fact 11);
  - the example's closed-form norms agree with autograd Jacobians (relative 1e-10, float64) and with
    `attncheck probe --cross-norm` (theory::cross_norm_norms) on the saved final weights (relative 1e-4: the
    checkpoint holds float32 weights, the training code computed A and V in float32): every layer of the
    softmax_v model, layer 0 of the cross-normalized ones (the probe's forward pass is standard attention, so
    their deeper layers' inputs differ from training's);
  - softmax_v's final test accuracy, mean over seeds, beats chance (0.1) by more than 3 binomial standard
    errors of a chance-level classifier on the 297 test digits (z = 3);
  - the report has the training-curves section, a plot per metric, and the statement naming the variant that
    ends highest, as computed here from the file.

  cross_norm_example_check.py ATTNCHECK RUN_DIR REPORT_DIR
Exit 0 pass, 1 fail.
"""
import json
import math
import os
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "examples"))
import torch  # noqa: E402
from cross_norm_digits import cross_norm_norms  # noqa: E402

attncheck, run, report = sys.argv[1:4]
failures = []
lines = [json.loads(line) for line in open(os.path.join(run, "attncheck-curves.jsonl"))]
metrics = {line["name"]: line for line in lines if line["record"] == "metric"}
variants = [line["name"] for line in lines if line["record"] == "variant"]
points = [line for line in lines if line["record"] == "point"]
if variants != ["softmax_v", "cross_norm", "anneal"]:
    failures.append(f"variants {variants}")

expected_steps = {"softmax_v": list(range(0, 61, 10)), "cross_norm": list(range(0, 61, 10)),
                  "anneal": list(range(20, 61, 10))}
for variant, steps in expected_steps.items():
    for seed in (0, 1):
        got = sorted(p["step"] for p in points if p["variant"] == variant and p["seed"] == seed)
        if got != steps:
            failures.append(f"{variant} seed {seed}: steps {got}, expected {steps}")

for p in points:
    mix = p["values"]["mix_alpha"]
    expected = {"softmax_v": 0.0, "cross_norm": 1.0}.get(p["variant"], min(1.0, max(0.0, (p["step"] - 20) / 20)))
    if mix != expected:
        failures.append(f"{p['variant']} seed {p['seed']} step {p['step']}: mix alpha {mix}, expected {expected}")
anneal_end = [p["values"]["mix_alpha"] for p in points if p["variant"] == "anneal" and p["step"] == 60]
if anneal_end != [1.0, 1.0]:
    failures.append(f"mix alpha at the end of the anneal: {anneal_end}")

n, d_v = 65, 8
if abs(metrics["layer0_out_fro"]["reference"]["value"] - math.sqrt(n * d_v)) > 1e-12:
    failures.append("the ||O||_F reference is not sqrt(N d_v)")
worst = 0.0
for p in points:
    if p["values"]["mix_alpha"] != 1.0:
        continue
    for key, value in p["values"].items():
        bound = math.sqrt(n * d_v) if key.endswith("_out_fro") else math.sqrt(n * d_v / 8) if key.endswith("_dV_fro") else None
        if bound is None:
            continue
        worst = max(worst, value / bound)
        if value > bound * (1 + 1e-12):
            failures.append(f"{p['variant']} seed {p['seed']} step {p['step']}: {key} = {value} > {bound}")
print(f"mix alpha 1: largest recorded norm / its bound = {worst:.4f}")

# The closed forms against autograd on a random head (float64).
generator = torch.Generator().manual_seed(5)
a = torch.softmax(torch.randn(7, 7, generator=generator, dtype=torch.float64) * 2, dim=-1)
v = torch.randn(7, 3, generator=generator, dtype=torch.float64) * 3
for mix in (0.0, 0.3, 1.0):
    out, grad = cross_norm_norms(a, v, mix)
    f = lambda values: a @ (mix * torch.softmax(values, dim=0) + (1 - mix) * values)
    jacobian = torch.autograd.functional.jacobian(f, v)
    for name, ours, reference in (("||O||_F", out, torch.linalg.norm(f(v))), ("||dO/dV||_F", grad, torch.linalg.norm(jacobian))):
        if abs(float(ours) - float(reference)) > 1e-10 * float(reference):
            failures.append(f"mix {mix}: {name} {float(ours)} against autograd {float(reference)}")

# The recorded final norms of seed 0 against the probe on the saved weights. The probe's forward pass runs
# standard attention, so only the softmax_v model's layers all see the inputs they saw in training; the
# cross-normalized models' agree in layer 0 only (deeper layers read what softmax(S) V made of layer 0).
final = {p["variant"]: p["values"] for p in points if p["seed"] == 0 and p["step"] == 60}
worst = 0.0
for variant, suffix, layers in (("softmax_v", "mix0", (0, 1)), ("cross_norm", "mix1", (0,)), ("anneal", "mix1", (0,))):
    run_probe = subprocess.run([attncheck, "probe", os.path.join(run, f"final-{variant}.safetensors"), "--tokens",
                                os.path.join(run, "probe-tokens.txt"), "--cross-norm", "--json"],
                               capture_output=True, text=True)
    if run_probe.returncode != 0:
        failures.append(f"probe on final-{variant}: exit {run_probe.returncode}: {run_probe.stderr}")
        continue
    heads = json.loads(run_probe.stdout)["heads"]
    for layer in layers:
        for ours, theirs in (("out_fro", "out_fro_"), ("dV_fro", "dV_fro_")):
            values = [h[theirs + suffix] for h in heads if h["layer"] == layer]
            probe = sum(values) / len(values)
            recorded = final[variant][f"layer{layer}_{ours}"]
            rel = abs(recorded - probe) / probe
            worst = max(worst, rel)
            if rel > 1e-4:
                failures.append(f"{variant} layer {layer} {ours}: recorded {recorded}, probe {probe} (rel {rel:.2e})")
print(f"recorded norms vs attncheck probe --cross-norm on the final weights: max relative difference {worst:.2e}")

final_accuracy = [p["values"]["test_accuracy"] for p in points if p["variant"] == "softmax_v" and p["step"] == 60]
threshold = 0.1 + 3 * math.sqrt(0.1 * 0.9 / 297)
print(f"softmax_v final test accuracy per seed {final_accuracy}, chance + 3 SE = {threshold:.3f}")
if sum(final_accuracy) / len(final_accuracy) <= threshold:
    failures.append(f"softmax_v does not beat chance: {final_accuracy}")

markdown = open(os.path.join(report, "report.md")).read()
if "Training curves: Softmax cross-normalization on digits" not in markdown:
    failures.append("the report has no training-curves section")
plots = os.listdir(os.path.join(report, "plots"))
for extension in (".svg", ".png"):
    drawn = [name for name in plots if name.startswith("curves-metric") and name.endswith(extension)]
    if len(drawn) != len(metrics):
        failures.append(f"{len(drawn)} training-curve {extension} plots for {len(metrics)} metrics")
labels = {line["name"]: line["label"] for line in lines if line["record"] == "variant"}
means = {}
for variant in variants:
    values = [p["values"]["test_accuracy"] for p in points if p["variant"] == variant and p["step"] == 60]
    means[variant] = sum(values) / len(values)
best = max(variants, key=lambda name: means[name])
statement = f"At step 60, {labels[best]} ends highest in test accuracy"
if statement not in markdown:
    failures.append(f"the report lacks the statement \"{statement}\"")
for failure in failures:
    print("FAIL:", failure)
sys.exit(1 if failures else 0)
