#!/usr/bin/python3
"""A small vision transformer on scikit-learn's 8 x 8 digits, trained with the papers' attention activations,
measuring ||A||_F and ||dA/dS||_F of every layer as it trains: the papers' Figures 1-3 and Table 1 at a scale
that runs on a CPU in minutes.

Each image (pixels scaled to [0, 1]) is cut into P x P patches, N = (8 / P)^2 tokens (P = 4, 2, 1: N = 4, 16,
64); with --upsample each image is first enlarged to 16 x 16 (N = 256 at P = 1). A linear patch embedding plus
learned positions feed pre-LayerNorm blocks; the class comes from the mean over tokens (no class token, so the
attention maps are exactly N x N). The attention map is A = f(S) of the scores S = q k^T / sqrt(d_head):

  softmax          row-wise softmax(S)
  poly3            S^3 (elementwise)              poly3_scaled     S^3 / sqrt(N)
  identity         S                              identity_scaled  S / sqrt(N)
  poly3 at scale c c * S^3 (--scales: the Figure 1 sweep)

  /usr/bin/python3 examples/vit_digits.py RUN [--activations softmax,poly3,...] [--seeds 0,1,2]
      [--patch 2] [--steps 150] [--record 10] [--scales 0.01,0.1,1 --scale-patches 4,2,1 --sweep-seeds 0,1] [--upsample]
      [--heatmaps] [--recorder] [--append]

writes RUN/vit-results.json (docs/results-format.md; rewritten atomically after every run, so an interrupted
sweep keeps what it finished; --append adds to it), which `attncheck report RUN` renders. --recorder also measures the seed-0 runs
of softmax, poly3_scaled and poly3 with attncheck's AttentionRecorder into RUN/attncheck-probe.jsonl (needs the
attncheck package: build/python on PYTHONPATH or pip install .). --heatmaps writes, for each activation's seed-0
run, the final attention maps of the first test digit to RUN/attention-ACTIVATION.safetensors in the layout of
`attncheck probe --attention-out` (tensor layer.L, [heads, N, N], F64).
Needs python3-torch and python3-sklearn (Debian).
"""
import argparse
import datetime
import json
import math
import os
import platform
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits

ACTIVATIONS = ("softmax", "poly3", "poly3_scaled", "identity", "identity_scaled")
TEST_SIZE = 360
RESULTS_NAME = "vit-results.json"


def write_atomically(path, data):
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)  # a reader never sees half a file


def write_safetensors(path, tensors):
    """F64 tensors in the safetensors layout: 8-byte little-endian header length, JSON header, raw bytes."""
    header, chunks, offset = {}, [], 0
    for name, value in tensors.items():
        raw = np.ascontiguousarray(value, dtype="<f8").tobytes()
        header[name] = {"dtype": "F64", "shape": list(value.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    write_atomically(path, struct.pack("<Q", len(text)) + text + b"".join(chunks))


def outer_scale(activation, n, scale=None):
    """The factor c of c * S^p: 1/sqrt(N) for the scaled maps, `scale` for the sweep; None for softmax."""
    if activation == "softmax":
        return None
    if scale is not None:
        return scale
    return 1 / math.sqrt(n) if activation.endswith("_scaled") else 1.0


class SelfAttention(torch.nn.Module):
    def __init__(self, activation, scale, hidden, heads):
        super().__init__()
        self.activation, self.scale, self.heads = activation, scale, heads
        self.query, self.key, self.value = (torch.nn.Linear(hidden, hidden) for _ in range(3))

    def scores(self, h):
        b, n, hidden = h.shape
        d = hidden // self.heads
        split = lambda t: t.view(b, n, self.heads, d).transpose(1, 2)
        q, k, v = split(self.query(h)), split(self.key(h)), split(self.value(h))
        return q @ k.transpose(-1, -2) / math.sqrt(d), v

    def attend(self, s):
        if self.activation == "softmax":
            return torch.softmax(s, dim=-1)
        power = 3 if self.activation.startswith("poly3") else 1
        return self.scale * s ** power

    def forward(self, h, maps=None):
        """The heads' context [batch, N, hidden]; appends (scores, attention) [batch, heads, N, N] to maps."""
        b, n, hidden = h.shape
        s, v = self.scores(h)
        a = self.attend(s)
        if maps is not None:
            maps.append((s, a))
        return (a @ v).transpose(1, 2).reshape(b, n, hidden)


class VisionTransformer(torch.nn.Module):
    def __init__(self, activation, scale, patch, side=8, hidden=32, heads=4, layers=2, mlp=64, classes=10):
        super().__init__()
        self.patch, self.tokens = patch, (side // patch) ** 2
        self.embed = torch.nn.Linear(patch * patch, hidden)
        self.position = torch.nn.Parameter(0.02 * torch.randn(self.tokens, hidden))
        self.blocks = torch.nn.ModuleList()
        for _ in range(layers):
            self.blocks.append(torch.nn.ModuleDict({
                "attention_norm": torch.nn.LayerNorm(hidden), "attention": SelfAttention(activation, scale, hidden, heads),
                "output": torch.nn.Linear(hidden, hidden), "mlp_norm": torch.nn.LayerNorm(hidden),
                "mlp_in": torch.nn.Linear(hidden, mlp), "mlp_out": torch.nn.Linear(mlp, hidden)}))
        self.norm = torch.nn.LayerNorm(hidden)
        self.classifier = torch.nn.Linear(hidden, classes)

    def patches(self, images):
        """[batch, side, side] -> [batch, N, patch^2], patches in row-major order."""
        b, side, _ = images.shape
        p = self.patch
        return images.reshape(b, side // p, p, side // p, p).permute(0, 1, 3, 2, 4).reshape(b, -1, p * p)

    def forward(self, images, maps=None):
        h = self.embed(self.patches(images)) + self.position
        for block in self.blocks:
            h = h + block["output"](block["attention"](block["attention_norm"](h), maps))
            h = h + block["mlp_out"](F.gelu(block["mlp_in"](block["mlp_norm"](h))))
        return self.classifier(self.norm(h).mean(1))


def recorded_inputs(attention, args, kwargs, output):
    """What the AttentionRecorder measures of a SelfAttention call (nn.Linear computes x W^T + b)."""
    return {"x": args[0], "w_q": attention.query.weight.T, "w_k": attention.key.weight.T,
            "b_q": attention.query.bias, "b_k": attention.key.bias, "heads": attention.heads,
            "activation": attention.activation}


def jacobian_fro(activation, scale, s, a):
    """||dA/dS||_F per head of the row-wise (softmax) or elementwise map, in float64: [heads]."""
    if activation == "softmax":
        # Per row ||diag(a) - a a^T||_F^2 = sum a^2 - 2 sum a^3 + (sum a^2)^2.
        sq = (a ** 2).sum(-1)
        return (sq - 2 * (a ** 3).sum(-1) + sq ** 2).clamp(min=0).sum(-1).sqrt()
    if activation.startswith("poly3"):
        return (3 * abs(scale) * s ** 2).pow(2).sum((-1, -2)).sqrt()
    return torch.full(s.shape[:1], abs(scale) * s.shape[-1], dtype=s.dtype)  # c times the identity on N^2 entries


def digits(seed, upsample):
    """Images in [0, 1] and labels, split by the seed: the last TEST_SIZE of a shuffle are the test set."""
    data = load_digits()
    images = torch.tensor(data.images / 16.0, dtype=torch.float32)
    if upsample:
        images = F.interpolate(images[:, None], scale_factor=2, mode="bilinear", align_corners=False)[:, 0]
    order = np.random.default_rng(seed).permutation(len(images))
    labels = torch.tensor(data.target)
    train, test = torch.tensor(order[:-TEST_SIZE]), torch.tensor(order[-TEST_SIZE:])
    return images[train], labels[train], images[test], labels[test]


def accuracy(model, images, labels):
    model.eval()  # not a training step for the recorder
    with torch.no_grad():
        logits = model(images)
    model.train()
    if not bool(torch.isfinite(logits).all()):
        return None
    return (logits.argmax(1) == labels).double().mean().item()


def train(activation, scale, patch, seed, args, recorder_out=None, heatmap_out=None):
    """One run: its accuracy and its trace of per-layer norms (mean over heads of the measured sample)."""
    torch.manual_seed(seed)
    x_train, y_train, x_test, y_test = digits(seed, args.upsample)
    model = VisionTransformer(activation, scale, patch, side=x_train.shape[-1])
    n = model.tokens
    recorder = None
    if recorder_out is not None:
        from attncheck.torch import AttentionRecorder
        recorder = AttentionRecorder(model, every=args.record, out=recorder_out, count="steps")
        for block in model.blocks:
            recorder.register(block["attention"], recorded_inputs)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    rng = np.random.default_rng(seed + 1)
    trace, diverged_at, start = [], None, time.time()
    for step in range(args.steps + 1):
        batch = torch.tensor(rng.choice(len(x_train), args.batch, replace=False))
        measure = args.record > 0 and step % args.record == 0
        maps = [] if measure else None
        logits = model(x_train[batch], maps)
        if measure:
            # Step k is measured with the weights after k updates on the first image of its batch, as the
            # recorder measures it.
            for layer, (s, a) in enumerate(maps):
                s, a = s[0].detach().double(), a[0].detach().double()
                norms = a.pow(2).sum((-1, -2)).sqrt()
                jacobians = jacobian_fro(activation, scale, s, a)
                trace.append({"step": step, "layer": layer, "attention_fro": finite_or_none(norms.mean().item()),
                              "jacobian_fro": finite_or_none(jacobians.mean().item())})
        if step == args.steps:
            break
        loss = F.cross_entropy(logits, y_train[batch])
        if not math.isfinite(loss.item()):
            diverged_at = step
            break
        optimizer.zero_grad()
        loss.backward()
        # The same clipping for every activation, as in the papers' training recipes.
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if recorder is not None:
            recorder.step()
    if recorder is not None:
        recorder.close()
    test_accuracy = accuracy(model, x_test, y_test) if diverged_at is None else None
    if heatmap_out is not None and diverged_at is None:
        maps = []
        model.eval()
        with torch.no_grad():
            model(x_test[:1], maps)
        write_safetensors(heatmap_out, {f"layer.{l}": a[0].double().numpy() for l, (s, a) in enumerate(maps)})
    return {"activation": activation, "scale": scale, "N": n, "patch": patch, "image_side": x_train.shape[-1],
            "seed": seed, "steps": args.steps,
            "accuracy": test_accuracy, "test_size": len(y_test), "diverged_at": diverged_at,
            "wall_seconds": round(time.time() - start, 3), "trace": trace}


def finite_or_none(x):
    return x if math.isfinite(x) else None


def number_list(text, kind):
    try:
        return [kind(v) for v in text.split(",") if v]
    except ValueError:
        raise SystemExit(f"vit_digits.py: '{text}' is not a comma-separated list of {kind.__name__}s")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", help="output folder")
    parser.add_argument("--activations", default=",".join(ACTIVATIONS))
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--patch", type=int, default=2, help="patch side of the activation runs (2: N = 16)")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--record", type=int, default=10, metavar="EVERY", help="measure every EVERY steps (0: never)")
    parser.add_argument("--scales", default="", help="c of c * x^3 for the Figure 1 sweep (empty: no sweep)")
    parser.add_argument("--sweep-seeds", default=None, help="seeds of the sweep (default: --seeds)")
    parser.add_argument("--scale-patches", default="4,2,1", help="patch sides of the sweep")
    parser.add_argument("--upsample", action="store_true", help="16 x 16 images (N = 256 at patch 1)")
    parser.add_argument("--append", action="store_true",
                        help="add the runs to RUN's results (e.g. N = 256 runs to an 8 x 8 sweep) instead of replacing them")
    parser.add_argument("--heatmaps", action="store_true")
    parser.add_argument("--recorder", action="store_true")
    args = parser.parse_args()
    activations = [a for a in args.activations.split(",") if a]
    for a in activations:
        if a not in ACTIVATIONS:
            raise SystemExit(f"vit_digits.py: activation '{a}' is not one of {', '.join(ACTIVATIONS)}")
    seeds = number_list(args.seeds, int)
    sweep_seeds = seeds if args.sweep_seeds is None else number_list(args.sweep_seeds, int)
    scales = number_list(args.scales, float)
    side = 16 if args.upsample else 8
    patches = [args.patch] + number_list(args.scale_patches, int)
    if any(p < 1 or side % p for p in patches) or any(c <= 0 for c in scales) or args.steps < 1 or not seeds:
        raise SystemExit(f"vit_digits.py: patch sides must divide {side}, scales must be positive, --steps >= 1 and "
                         f"--seeds non-empty (patches {patches}, scales {scales}, steps {args.steps})")

    torch.set_num_threads(1)  # deterministic and polite on a shared machine
    os.makedirs(args.run, exist_ok=True)
    log = os.path.join(args.run, "attncheck-probe.jsonl")
    if args.recorder and os.path.exists(log):
        os.remove(log)  # the recorder appends; a rerun starts a fresh log
    started = time.time()
    results = {"format": "attncheck-vit-digits", "format_version": 1,
               "provenance": {"command": " ".join(sys.argv), "date": datetime.datetime.now(datetime.timezone.utc)
                              .strftime("%Y-%m-%dT%H:%M:%SZ"), "machine": platform.node(), "torch": torch.__version__,
                              "threads": 1, "wall_seconds": 0.0},
               "model": {"layers": 2, "heads": 4, "hidden": 32, "mlp": 64, "image_side": side, "batch": args.batch,
                         "lr": args.lr, "optimizer": "Adam", "clip_grad_norm": 1.0, "record_every": args.record},
               "runs": []}

    results_path = os.path.join(args.run, RESULTS_NAME)
    if args.append and os.path.exists(results_path):
        with open(results_path) as f:
            earlier = json.load(f)
        results["runs"] = earlier["runs"]
        results["model"] = dict(earlier["model"], image_side=sorted({earlier["model"]["image_side"], side}))
        results["provenance"]["command"] = earlier["provenance"]["command"] + " && " + results["provenance"]["command"]
        started -= earlier["provenance"]["wall_seconds"]

    def save(run):
        results["runs"].append(run)
        results["provenance"]["wall_seconds"] = round(time.time() - started, 1)
        write_atomically(results_path, (json.dumps(results) + "\n").encode())
        acc = "diverged" if run["accuracy"] is None else f"accuracy {run['accuracy']:.3f}"
        scale = "" if run["scale"] is None else f" c={run['scale']:.4g}"
        print(f"{run['experiment']}: {run['activation']}{scale} N={run['N']} seed {run['seed']}: {acc} "
              f"({run['wall_seconds']:.1f} s)", flush=True)

    # Seed by seed, so that a sweep stopped early still has every activation and scale for the seeds it finished.
    n_main = (side // args.patch) ** 2
    for seed in sorted(set(seeds) | set(sweep_seeds if scales else [])):
        first = seed == seeds[0]
        for activation in activations if seed in seeds else []:
            recorder_out = log if args.recorder and first and activation in ("softmax", "poly3_scaled", "poly3") else None
            heatmap = os.path.join(args.run, f"attention-{activation}.safetensors") if args.heatmaps and first else None
            run = train(activation, outer_scale(activation, n_main), args.patch, seed, args, recorder_out, heatmap)
            save(dict(run, experiment="activations"))
        for patch in number_list(args.scale_patches, int) if scales and seed in sweep_seeds else []:
            for c in scales:
                sweep_args = argparse.Namespace(**dict(vars(args), record=0))
                save(dict(train("poly3", c, patch, seed, sweep_args), experiment="scale-sweep"))

if __name__ == "__main__":
    main()
