#!/usr/bin/python3
"""A vision transformer on scikit-learn's 8 x 8 digits, trained with the papers' attention activations, measuring
||A||_F and ||dA/dS||_F of every layer as it trains: the papers' Figures 1-3 and Table 1, at a scale that runs on
a CPU in minutes (the default small model) or in the papers' own configuration on a GPU (--plan papers).

Each image (pixels scaled to [0, 1]) is enlarged bilinearly to --image-size (8: as it is; 16: --upsample; 64: the
papers' 64 x 64) and cut into patches of P x P pixels (--patch P, or H x W as "HxW"): N = side^2 / (H W) tokens.
A linear patch embedding plus learned positions feed pre-LayerNorm blocks. The attention map is A = f(S) of the
scores S = q k^T / sqrt(d_head):

  softmax          row-wise softmax(S)
  poly3            S^3 (elementwise)              poly3_scaled     S^3 / sqrt(N)   (x^3/16 at N = 256)
  identity         S                              identity_scaled  S / sqrt(N)     (x/16 at N = 256)
  poly3 at scale c c * S^3 (--scales: the Figure 1 sweep)

Models (--model):
  small     2 layers, 4 heads, width 32, MLP 64, mean pooling (no class token, so A is exactly N x N), PyTorch's
            default initialization, Adam lr 3e-3, batch 32: the default.
  vit-tiny  the papers' ViT-Tiny: 12 layers, 3 heads of 64, width 192, MLP 768, a class token (A is (N+1) x (N+1);
            N counts the patches, as the papers' N = 256 and 1/16 = 1/sqrt(N) do), LayerNorm eps 1e-6, timm's
            initialization (truncated normal, std 0.02), AdamW lr 1e-3 (weight decay 0.05, none on biases, norms,
            positions and the class token), 10 % linear warmup then cosine decay, batch 128. --layers and --pool
            (cls or mean) override its depth and pooling.
Every model clips gradients at norm 1. The data are always the 1797 digits (1437 training, 360 test, split by the
seed): no larger image data set installs from PyPI here, so at 64 x 64 a token sees a 4 x 4 piece of a bilinear
enlargement of 8 x 8 pixels (results' "dataset" says so).

  examples/vit_digits.py RUN [--model small|vit-tiny] [--layers L] [--pool cls|mean] [--image-size 8|16|64]
      [--activations softmax,poly3,...] [--seeds 0,1,2] [--patch 2] [--steps 150] [--batch B] [--lr LR]
      [--record 10] [--scales 0.01,0.1,1 --scale-patches 4,2,1,16x32 --sweep-seeds 0,1] [--upsample]
      [--device cpu|cuda] [--amp bf16|none] [--norms maps|float64] [--curve-every K] [--eval-limit K]
      [--max-seconds S] [--plan papers] [--heatmaps] [--recorder] [--append]

--device cuda trains on the first GPU, under bfloat16 autocast unless --amp none (weights and optimizer state stay
float32). --norms: "maps" measures the model's own float32 maps (cast to float64); "float64" recomputes each
measured layer's scores and map in float64 from its input and weights (needed under --amp; the default there).
--curve-every K records the training loss and batch accuracy every K steps. --eval-limit K tests on the first K
of the 360 test digits. --max-seconds S starts no run after S seconds of this command (provenance says how many
were skipped).

--plan papers is the papers' experiment in one command (meant for a GPU; every option above still overrides it):
--model vit-tiny --image-size 64 --patch 4 (N = 256), the five activations, seeds 0,1, 400 steps, norms of all 12
layers every 20 steps in float64, the loss every 20 steps, and the c x^3 sweep at N = 256, 64, 16, 8 (patches 4,
8, 16 and 16x32) for c = 4^-5 .. 4 (7 points), seeds 0,1; --device cuda, --max-seconds 420. That is 66 runs:

  examples/vit_papers.sh RUN        # = examples/vit_digits.py RUN --plan papers, then attncheck report if built

Its cost, an estimate (not a measurement; no GPU run has been made): one 64 x 64 image through ViT-Tiny at N = 256
is 3.3 GFLOP forward, about 10 GFLOP with the backward pass; 400 steps of 128 images are 0.51 PFLOP a run, and the
24 runs at N = 256 are 12 PFLOP, about 2 minutes at an assumed 100 TFLOP/s effective on an H200 (an eighth of its
bf16 matrix peak: the width 192 and the explicit attention maps keep it far below); the 42 runs at N <= 64 are
2.2 PFLOP but bound by kernel launches, roughly 2-3 s each; about 4-5 minutes in all. Seed 0's 33 runs come
first, and --max-seconds ends the command well inside a 10-minute limit if the GPU is slower than that.

writes RUN/vit-results.json (docs/results-format.md; rewritten atomically after every run, so an interrupted
sweep keeps what it finished; --append adds to it, running none of the runs already there, so the same command
with --append finishes a plan that --max-seconds cut short), which `attncheck report RUN` renders on any machine; no
attncheck module is needed to train (the example measures the norms itself). --recorder also measures the seed-0
runs of softmax, poly3_scaled and poly3 with attncheck's AttentionRecorder into RUN/attncheck-probe.jsonl (needs
the attncheck package: build/python on PYTHONPATH or pip install .). --heatmaps writes, for each activation's seed-0
run, the final attention maps of the first test digit to RUN/attention-ACTIVATION.safetensors in the layout of
`attncheck probe --attention-out` (tensor layer.L, [heads, T, T], F64; about 1.6 MB a layer for vit-tiny at N = 256).
Needs PyTorch and scikit-learn (Debian: python3-torch python3-sklearn).
"""
import argparse
import contextlib
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

# What each --model means; "init": "torch" keeps PyTorch's default initialization, "timm" is timm's ViT one.
MODELS = {
    "small": {"layers": 2, "heads": 4, "hidden": 32, "mlp": 64, "pool": "mean", "ln_eps": 1e-5, "init": "torch",
              "optimizer": "Adam", "lr": 3e-3, "weight_decay": 0.0, "schedule": "constant", "batch": 32},
    "vit-tiny": {"layers": 12, "heads": 3, "hidden": 192, "mlp": 768, "pool": "cls", "ln_eps": 1e-6, "init": "timm",
                 "optimizer": "AdamW", "lr": 1e-3, "weight_decay": 0.05, "schedule": "warmup-cosine", "batch": 128},
}
WARMUP_FRACTION = 0.1

# --plan papers: the options it sets, each overridden by the same option given on the command line.
PLANS = {
    "papers": {"model": "vit-tiny", "image_size": 64, "patch": "4", "activations": ",".join(ACTIVATIONS),
               "seeds": "0,1", "steps": 400, "record": 20, "norms": "float64", "curve_every": 20,
               "scales": ",".join(repr(4.0 ** k) for k in range(-5, 2)), "scale_patches": "4,8,16,16x32",
               "sweep_seeds": "0,1", "device": "cuda", "max_seconds": 420.0},
}
DEFAULTS = {"model": "small", "image_size": 8, "patch": "2", "activations": ",".join(ACTIVATIONS), "seeds": "0,1,2",
            "steps": 150, "record": 10, "norms": None, "curve_every": 0, "scales": "", "scale_patches": "4,2,1",
            "sweep_seeds": None, "device": "cpu", "max_seconds": None}


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
        """The heads' context [batch, T, hidden]; appends (scores, attention, input) to maps (scores and attention
        [batch, heads, T, T], input [batch, T, hidden])."""
        b, n, hidden = h.shape
        s, v = self.scores(h)
        a = self.attend(s)
        if maps is not None:
            maps.append((s, a, h))
        return (a @ v).transpose(1, 2).reshape(b, n, hidden)


def float64_maps(attention, x):
    """Scores and map of one sequence x [T, hidden] in float64 from the layer's weights: [heads, T, T] each."""
    with torch.no_grad():
        x = x.detach().double()
        t, hidden = x.shape
        d = hidden // attention.heads
        project = lambda linear: (x @ linear.weight.double().T + linear.bias.double()).view(t, attention.heads, d)
        q, k = project(attention.query).transpose(0, 1), project(attention.key).transpose(0, 1)
        s = q @ k.transpose(-1, -2) / math.sqrt(d)
        return s, attention.attend(s)


def float64_norms(attention, x):
    """||A||_F and ||dA/dS||_F per head of one sequence x [T, hidden], in float64 from the weights: [heads] each."""
    s, a = float64_maps(attention, x)
    return a.pow(2).sum((-1, -2)).sqrt(), jacobian_fro(attention.activation, attention.scale, s, a)


def parse_patch(text):
    """"4" -> (4, 4); "16x32" -> (16, 32) (height x width)."""
    try:
        sides = tuple(int(v) for v in text.lower().split("x"))
    except ValueError:
        sides = ()
    if len(sides) == 1:
        sides = sides * 2
    if len(sides) != 2 or min(sides) < 1:
        raise SystemExit(f"vit_digits.py: patch '{text}' is not a positive integer P or HxW")
    return sides


def run_identity(experiment, activation, scale, patch, image_side, seed, steps):
    """What makes two runs the same run; patch is P, (H, W) or [H, W]."""
    return experiment, activation, scale, tuple(patch) if isinstance(patch, (tuple, list)) else (patch, patch), \
        image_side, seed, steps


class VisionTransformer(torch.nn.Module):
    def __init__(self, activation, scale, patch, side=8, hidden=32, heads=4, layers=2, mlp=64, classes=10,
                 pool="mean", ln_eps=1e-5, init="torch"):
        super().__init__()
        self.patch_shape = (patch, patch) if isinstance(patch, int) else tuple(patch)
        ph, pw = self.patch_shape
        self.patch, self.pool = ph, pool
        self.tokens = (side // ph) * (side // pw)  # N: the patches
        self.sequence = self.tokens + (pool == "cls")  # T: the side of the attention map
        self.embed = torch.nn.Linear(ph * pw, hidden)
        self.position = torch.nn.Parameter(0.02 * torch.randn(self.sequence, hidden))
        self.cls = torch.nn.Parameter(torch.zeros(1, 1, hidden)) if pool == "cls" else None
        self.blocks = torch.nn.ModuleList()
        for _ in range(layers):
            self.blocks.append(torch.nn.ModuleDict({
                "attention_norm": torch.nn.LayerNorm(hidden, eps=ln_eps),
                "attention": SelfAttention(activation, scale, hidden, heads),
                "output": torch.nn.Linear(hidden, hidden), "mlp_norm": torch.nn.LayerNorm(hidden, eps=ln_eps),
                "mlp_in": torch.nn.Linear(hidden, mlp), "mlp_out": torch.nn.Linear(mlp, hidden)}))
        self.norm = torch.nn.LayerNorm(hidden, eps=ln_eps)
        self.classifier = torch.nn.Linear(hidden, classes)
        if init == "timm":
            # timm's ViT: truncated normal (std 0.02) for every linear layer but the patch embedding (a convolution
            # there, left at PyTorch's default) and the positions, zero biases, the class token at std 1e-6.
            for name, module in self.named_modules():
                if isinstance(module, torch.nn.Linear) and name != "embed":
                    torch.nn.init.trunc_normal_(module.weight, std=0.02)
                    torch.nn.init.zeros_(module.bias)
            torch.nn.init.trunc_normal_(self.position, std=0.02)
            if self.cls is not None:
                torch.nn.init.normal_(self.cls, std=1e-6)
        elif init != "torch":
            raise ValueError(f"init '{init}' is not torch or timm")

    def patches(self, images):
        """[batch, side, side] -> [batch, N, ph * pw], patches in row-major order."""
        b, side, _ = images.shape
        ph, pw = self.patch_shape
        return images.reshape(b, side // ph, ph, side // pw, pw).permute(0, 1, 3, 2, 4).reshape(b, -1, ph * pw)

    def forward(self, images, maps=None):
        h = self.embed(self.patches(images))
        if self.cls is not None:
            h = torch.cat([self.cls.expand(len(h), -1, -1).to(h.dtype), h], 1)
        h = h + self.position
        for block in self.blocks:
            h = h + block["output"](block["attention"](block["attention_norm"](h), maps))
            h = h + block["mlp_out"](F.gelu(block["mlp_in"](block["mlp_norm"](h))))
        h = self.norm(h)
        return self.classifier(h[:, 0] if self.cls is not None else h.mean(1))


def build_model(activation, scale, patch, side, config):
    return VisionTransformer(activation, scale, patch, side=side, hidden=config["hidden"], heads=config["heads"],
                             layers=config["layers"], mlp=config["mlp"], pool=config["pool"],
                             ln_eps=config["ln_eps"], init=config["init"])


def optimizer_for(model, config):
    if config["optimizer"] == "Adam":
        return torch.optim.Adam(model.parameters(), lr=config["lr"])
    # As timm: no weight decay on biases, norms, positions and the class token.
    decayed = lambda name, p: p.ndim >= 2 and name not in ("position", "cls")
    decay = [p for name, p in model.named_parameters() if decayed(name, p)]
    rest = [p for name, p in model.named_parameters() if not decayed(name, p)]
    return torch.optim.AdamW([{"params": decay, "weight_decay": config["weight_decay"]},
                              {"params": rest, "weight_decay": 0.0}], lr=config["lr"])


def schedule_for(optimizer, config, steps):
    if config["schedule"] == "constant":
        return None
    warmup = max(1, round(WARMUP_FRACTION * steps))

    def factor(step):
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


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
    # c times the identity on T^2 entries
    return torch.full(s.shape[:1], abs(scale) * s.shape[-1], dtype=s.dtype, device=s.device)


def digits(seed, side):
    """Images in [0, 1] (enlarged bilinearly to side x side) and labels, split by the seed: the last TEST_SIZE of a
    shuffle are the test set."""
    data = load_digits()
    images = torch.tensor(data.images / 16.0, dtype=torch.float32)
    if side != 8:
        images = F.interpolate(images[:, None], scale_factor=side // 8, mode="bilinear", align_corners=False)[:, 0]
    order = np.random.default_rng(seed).permutation(len(images))
    labels = torch.tensor(data.target)
    train, test = torch.tensor(order[:-TEST_SIZE]), torch.tensor(order[-TEST_SIZE:])
    return images[train], labels[train], images[test], labels[test]


def autocast(device, amp):
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16) if amp else contextlib.nullcontext()


def accuracy(model, images, labels, device, amp, chunk=512):
    model.eval()  # not a training step for the recorder
    with torch.no_grad(), autocast(device, amp):
        logits = torch.cat([model(images[i:i + chunk]).float() for i in range(0, len(images), chunk)])
    model.train()
    if not bool(torch.isfinite(logits).all()):
        return None
    return (logits.argmax(1) == labels).double().mean().item()


def train(activation, scale, patch, seed, args, recorder_out=None, heatmap_out=None):
    """One run: its accuracy and its trace of per-layer norms (mean over heads of the measured sample)."""
    torch.manual_seed(seed)
    device, amp = args.torch_device, args.amp == "bf16"
    x_train, y_train, x_test, y_test = digits(seed, args.image_size)
    if args.eval_limit:
        x_test, y_test = x_test[:args.eval_limit], y_test[:args.eval_limit]
    model = build_model(activation, scale, patch, x_train.shape[-1], args.config)
    n = model.tokens
    model.to(device)
    x_train, y_train, x_test, y_test = (t.to(device) for t in (x_train, y_train, x_test, y_test))
    recorder = None
    if recorder_out is not None:
        from attncheck.torch import AttentionRecorder
        recorder = AttentionRecorder(model, every=args.record, out=recorder_out, count="steps")
        for block in model.blocks:
            recorder.register(block["attention"], recorded_inputs)
    optimizer = optimizer_for(model, args.config)
    schedule = schedule_for(optimizer, args.config, args.steps)
    rng = np.random.default_rng(seed + 1)
    trace, curve, diverged_at, start = [], [], None, time.time()
    for step in range(args.steps + 1):
        batch = torch.tensor(rng.choice(len(x_train), args.batch, replace=False)).to(device)
        measure = args.record > 0 and step % args.record == 0
        maps = [] if measure else None
        with autocast(device, amp):
            logits = model(x_train[batch], maps)
            loss = F.cross_entropy(logits.float(), y_train[batch])
        if measure:
            # Step k is measured with the weights after k updates on the first image of its batch, as the
            # recorder measures it.
            for layer, (s, a, h) in enumerate(maps):
                if args.norms == "float64":
                    norms, jacobians = float64_norms(model.blocks[layer]["attention"], h[0])
                else:
                    s, a = s[0].detach().double(), a[0].detach().double()
                    norms = a.pow(2).sum((-1, -2)).sqrt()
                    jacobians = jacobian_fro(activation, scale, s, a)
                trace.append({"step": step, "layer": layer, "attention_fro": finite_or_none(norms.mean().item()),
                              "jacobian_fro": finite_or_none(jacobians.mean().item())})
            maps = None
        if args.curve_every and step % args.curve_every == 0:
            right = (logits.argmax(1) == y_train[batch]).double().mean().item()
            curve.append({"step": step, "loss": finite_or_none(loss.item()), "batch_accuracy": right})
        if step == args.steps:
            break
        if not math.isfinite(loss.item()):
            diverged_at = step
            break
        optimizer.zero_grad()
        loss.backward()
        # The same clipping for every activation, as in the papers' training recipes.
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if schedule is not None:
            schedule.step()
        if recorder is not None:
            recorder.step()
    if recorder is not None:
        recorder.close()
    test_accuracy = accuracy(model, x_test, y_test, device, amp) if diverged_at is None else None
    if heatmap_out is not None and diverged_at is None:
        maps = []
        model.eval()
        with torch.no_grad(), autocast(device, amp):
            model(x_test[:1], maps)
        if args.norms == "float64":
            maps = [float64_maps(block["attention"], h[0]) for block, (s, a, h) in zip(model.blocks, maps)]
        else:
            maps = [(s[0], a[0]) for s, a, h in maps]
        write_safetensors(heatmap_out, {f"layer.{l}": a.double().cpu().numpy() for l, (s, a) in enumerate(maps)})
    run = {"activation": activation, "scale": scale, "N": n, "patch": model.patch, "image_side": x_train.shape[-1],
           "seed": seed, "steps": args.steps,
           "accuracy": test_accuracy, "test_size": len(y_test), "diverged_at": diverged_at,
           "wall_seconds": round(time.time() - start, 3), "trace": trace,
           "tokens": model.sequence, "patch_shape": list(model.patch_shape)}
    if args.curve_every:
        run["curve"] = curve
    return run


def finite_or_none(x):
    return x if math.isfinite(x) else None


def number_list(text, kind):
    try:
        return [kind(v) for v in text.split(",") if v]
    except ValueError:
        raise SystemExit(f"vit_digits.py: '{text}' is not a comma-separated list of {kind.__name__}s")


def device_of(name):
    if name == "cpu":
        return torch.device("cpu")
    if name != "cuda":
        raise SystemExit(f"vit_digits.py: --device '{name}' is not cpu or cuda")
    if not torch.cuda.is_available():
        raise SystemExit("vit_digits.py: --device cuda, but this PyTorch sees no CUDA device (use --device cpu)")
    return torch.device("cuda", 0)


def resolve(args):
    """Fills the options left out from --plan, then from the defaults; the model's settings from --model and the
    options that override them."""
    plan = PLANS[args.plan] if args.plan else {}
    for name, default in DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, plan.get(name, default))
    if args.upsample:
        if args.image_size not in (8, 16):
            raise SystemExit(f"vit_digits.py: --upsample is --image-size 16, not {args.image_size}")
        args.image_size = 16
    if args.image_size < 8 or args.image_size % 8:
        raise SystemExit(f"vit_digits.py: --image-size {args.image_size} is not a multiple of 8 (the digits' side)")
    config = dict(MODELS[args.model])
    for name in ("layers", "pool", "batch", "lr"):
        if getattr(args, name) is not None:
            config[name] = getattr(args, name)
    if config["layers"] < 1 or config["batch"] < 1 or not config["lr"] > 0:
        raise SystemExit(f"vit_digits.py: --layers {config['layers']} and --batch {config['batch']} must be >= 1 and "
                         f"--lr {config['lr']} positive")
    args.config, args.batch, args.lr = config, config["batch"], config["lr"]
    args.torch_device = device_of(args.device)
    if args.amp is None:
        args.amp = "bf16" if args.torch_device.type == "cuda" else "none"
    if args.norms is None:
        args.norms = "float64" if args.amp == "bf16" else "maps"
    if args.amp == "bf16" and args.norms == "maps":
        raise SystemExit("vit_digits.py: --norms maps measures the model's own maps, which are not float32 under "
                         "--amp bf16: use --norms float64")
    if args.recorder and (args.amp == "bf16" or args.torch_device.type != "cpu"):
        raise SystemExit("vit_digits.py: --recorder measures float32 CPU runs (--device cpu --amp none)")
    if args.eval_limit is not None and not 1 <= args.eval_limit <= TEST_SIZE:
        raise SystemExit(f"vit_digits.py: --eval-limit {args.eval_limit} is not in 1..{TEST_SIZE}")
    if args.curve_every < 0:
        raise SystemExit(f"vit_digits.py: --curve-every {args.curve_every} is negative")


def dataset_description(side):
    text = "scikit-learn's digits (1797 images of 8 x 8 pixels, 17 grey levels; 1437 training, 360 test)"
    if side != 8:
        text += f", enlarged bilinearly to {side} x {side}: no more than 8 x 8 pixels of information"
    return {"name": "digits", "source": "sklearn.datasets.load_digits", "image_side": side, "caption": text}


def device_description(device):
    if device.type == "cuda":
        return f"cuda:{device.index} {torch.cuda.get_device_name(device)}"
    return "cpu"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", help="output folder")
    parser.add_argument("--plan", choices=sorted(PLANS), help="a whole experiment's options (see above)")
    parser.add_argument("--model", choices=sorted(MODELS))
    parser.add_argument("--layers", type=int, help="the model's depth (default: the model's)")
    parser.add_argument("--pool", choices=("cls", "mean"), help="class token or mean pooling (default: the model's)")
    parser.add_argument("--image-size", type=int, help="side the 8 x 8 digits are enlarged to (8, 16, 64, ...)")
    parser.add_argument("--activations")
    parser.add_argument("--seeds")
    parser.add_argument("--patch", help="patch side of the activation runs, P or HxW (2: N = 16 on 8 x 8)")
    parser.add_argument("--steps", type=int)
    parser.add_argument("--batch", type=int, help="default: the model's")
    parser.add_argument("--lr", type=float, help="peak learning rate (default: the model's)")
    parser.add_argument("--record", type=int, metavar="EVERY", help="measure every EVERY steps (0: never)")
    parser.add_argument("--norms", choices=("maps", "float64"), help="how the norms are measured (see above)")
    parser.add_argument("--curve-every", type=int, metavar="K", help="record the training loss every K steps")
    parser.add_argument("--eval-limit", type=int, metavar="K", help="test on the first K of the 360 test digits")
    parser.add_argument("--scales", help="c of c * x^3 for the Figure 1 sweep (empty: no sweep)")
    parser.add_argument("--sweep-seeds", help="seeds of the sweep (default: --seeds)")
    parser.add_argument("--scale-patches", help="patch sides of the sweep, P or HxW")
    parser.add_argument("--upsample", action="store_true", help="16 x 16 images (N = 256 at patch 1)")
    parser.add_argument("--device", help="cpu or cuda")
    parser.add_argument("--amp", choices=("bf16", "none"), help="autocast (default: bf16 on cuda, none on cpu)")
    parser.add_argument("--max-seconds", type=float, help="start no run after this many seconds of this command")
    parser.add_argument("--append", action="store_true",
                        help="add the runs to RUN's results (e.g. N = 256 runs to an 8 x 8 sweep) instead of replacing "
                             "them; runs already there are not run again")
    parser.add_argument("--heatmaps", action="store_true")
    parser.add_argument("--recorder", action="store_true")
    args = parser.parse_args()
    resolve(args)
    activations = [a for a in args.activations.split(",") if a]
    for a in activations:
        if a not in ACTIVATIONS:
            raise SystemExit(f"vit_digits.py: activation '{a}' is not one of {', '.join(ACTIVATIONS)}")
    seeds = number_list(args.seeds, int)
    sweep_seeds = seeds if args.sweep_seeds is None else number_list(args.sweep_seeds, int)
    scales = number_list(args.scales, float)
    side = args.image_size
    patch = parse_patch(args.patch)
    scale_patches = [parse_patch(p) for p in args.scale_patches.split(",") if p]
    patches = [patch] + scale_patches
    if any(side % p for shape in patches for p in shape) or any(c <= 0 for c in scales) or args.steps < 1 or not seeds:
        raise SystemExit(f"vit_digits.py: patch sides must divide {side}, scales must be positive, --steps >= 1 and "
                         f"--seeds non-empty (patches {patches}, scales {scales}, steps {args.steps})")
    # A square patch is an int, so that the default runs are built exactly as before rectangular patches existed.
    square = lambda shape: shape[0] if shape[0] == shape[1] else shape

    torch.set_num_threads(1)  # deterministic and polite on a shared machine
    os.makedirs(args.run, exist_ok=True)
    log = os.path.join(args.run, "attncheck-probe.jsonl")
    if args.recorder and os.path.exists(log):
        os.remove(log)  # the recorder appends; a rerun starts a fresh log
    started = call_started = time.time()
    config = args.config
    results = {"format": "attncheck-vit-digits", "format_version": 1,
               "provenance": {"command": " ".join(sys.argv), "date": datetime.datetime.now(datetime.timezone.utc)
                              .strftime("%Y-%m-%dT%H:%M:%SZ"), "machine": platform.node(), "torch": torch.__version__,
                              "threads": 1, "wall_seconds": 0.0, "device": device_description(args.torch_device),
                              "cuda": torch.version.cuda if args.torch_device.type == "cuda" else None,
                              "dtype": "bfloat16 autocast (float32 weights)" if args.amp == "bf16" else "float32",
                              "norms": ("float64, recomputed from each layer's input and weights"
                                        if args.norms == "float64" else "float64 of the model's own float32 maps"),
                              "plan": args.plan, "runs_planned": 0, "runs_skipped": 0},
               "model": {"layers": config["layers"], "heads": config["heads"], "hidden": config["hidden"],
                         "mlp": config["mlp"], "image_side": side, "batch": args.batch,
                         "lr": args.lr, "optimizer": config["optimizer"], "clip_grad_norm": 1.0,
                         "record_every": args.record, "name": args.model, "pool": config["pool"],
                         "ln_eps": config["ln_eps"], "init": config["init"], "weight_decay": config["weight_decay"],
                         "schedule": config["schedule"], "curve_every": args.curve_every},
               "dataset": dataset_description(side),
               "runs": []}
    if config["schedule"] == "warmup-cosine":
        results["model"]["warmup_steps"] = max(1, round(WARMUP_FRACTION * args.steps))

    results_path = os.path.join(args.run, RESULTS_NAME)
    if args.append and os.path.exists(results_path):
        with open(results_path) as f:
            earlier = json.load(f)
        if earlier["model"].get("name", "small") != args.model:
            raise SystemExit(f"vit_digits.py: {results_path} holds runs of the {earlier['model'].get('name', 'small')}"
                             f" model, not {args.model}: --append adds runs of the same model only")
        results["runs"] = earlier["runs"]
        earlier_sides = earlier["model"]["image_side"]
        sides = set(earlier_sides if isinstance(earlier_sides, list) else [earlier_sides]) | {side}
        results["model"] = dict(earlier["model"], image_side=side if sides == {side} else sorted(sides))
        results["provenance"]["command"] = earlier["provenance"]["command"] + " && " + results["provenance"]["command"]
        started -= earlier["provenance"]["wall_seconds"]

    def save(run=None):
        if run is not None:
            results["runs"].append(run)
        results["provenance"]["wall_seconds"] = round(time.time() - started, 1)
        write_atomically(results_path, (json.dumps(results) + "\n").encode())
        if run is None:
            return
        acc = "diverged" if run["accuracy"] is None else f"accuracy {run['accuracy']:.3f}"
        scale = "" if run["scale"] is None else f" c={run['scale']:.4g}"
        print(f"{run['experiment']}: {run['activation']}{scale} N={run['N']} seed {run['seed']}: {acc} "
              f"({run['wall_seconds']:.1f} s)", flush=True)

    # Seed by seed, so that a sweep stopped early still has every activation and scale for the seeds it finished.
    n_main = (side // patch[0]) * (side // patch[1])
    jobs = []
    for seed in sorted(set(seeds) | set(sweep_seeds if scales else [])):
        first = seed == seeds[0]
        for activation in activations if seed in seeds else []:
            recorder_out = log if args.recorder and first and activation in ("softmax", "poly3_scaled", "poly3") else None
            heatmap = os.path.join(args.run, f"attention-{activation}.safetensors") if args.heatmaps and first else None
            jobs.append(("activations", (activation, outer_scale(activation, n_main), square(patch), seed, args,
                                         recorder_out, heatmap)))
        for shape in scale_patches if scales and seed in sweep_seeds else []:
            for c in scales:
                sweep_args = argparse.Namespace(**dict(vars(args), record=0))
                jobs.append(("scale-sweep", ("poly3", c, square(shape), seed, sweep_args)))
    # A plan cut short by --max-seconds (a GPU lease running out) continues with --append: the runs already in the
    # results are not run again, and what was planned counts them, so runs = planned - skipped still holds.
    there = {run_identity(run["experiment"], run["activation"], run["scale"], run.get("patch_shape", run["patch"]),
                          run.get("image_side"), run["seed"], run["steps"]) for run in results["runs"]}
    fresh = [(experiment, job) for experiment, job in jobs
             if run_identity(experiment, *job[:3], side, job[3], args.steps) not in there]
    if len(fresh) < len(jobs):
        print(f"--append: {len(jobs) - len(fresh)} of the {len(jobs)} runs planned are already in {results_path}: "
              f"not run again", flush=True)
    jobs = fresh
    results["provenance"]["runs_planned"] = len(results["runs"]) + len(jobs)
    for done, (experiment, job) in enumerate(jobs):
        if args.max_seconds is not None and time.time() - call_started > args.max_seconds:
            results["provenance"]["runs_skipped"] = len(jobs) - done
            save()
            print(f"--max-seconds {args.max_seconds:g}: stopped before {len(jobs) - done} of {len(jobs)} runs",
                  flush=True)
            break
        save(dict(train(*job), experiment=experiment))
    if not jobs:
        save()


if __name__ == "__main__":
    main()
