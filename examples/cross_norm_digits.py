#!/usr/bin/python3
"""Softmax cross-normalization on scikit-learn's digits (claim C9, the "Request for Plot"): learning curves of the
same small transformer with three value paths, over several seeds.

  softmax_v    standard attention softmax(S) V                                      (mix alpha 0 throughout)
  cross_norm   softmax(S) softmax^T(V): each of V's d_v columns softmaxed over the N tokens (mix alpha 1)
  anneal       the softmax_v model of the same seed at step --anneal-from, trained on with
               P = mix alpha softmax_col(V) + (1 - mix alpha) V, mix alpha rising linearly from 0 to 1 over
               --anneal-steps steps and held at 1 to the end (the RFP's deformation of a trained model)

Every variant of one seed starts from the same initial weights and sees the same batches (the encoder, the
tokens and the optimizer of examples/train_digits.py: digits as 65 tokens, Adam, gradient clipping). Every
--eval-every steps the run records the test accuracy and the mean test loss on the 297 held-out digits, the mix
alpha in use, and per layer ||O||_F and ||dO/dV||_F (O = A P, averaged over the heads) on one held-out digit,
from the closed forms of THEORY.md fact 11 (the same as attncheck's theory::cross_norm_norms).

  nice /usr/bin/python3 examples/cross_norm_digits.py RUN [--seeds 5] [--steps 600] [--eval-every 25]
  attncheck report RUN --out RUN/report

writes RUN/attncheck-curves.jsonl (the training-curves format of docs/results-format.md; rewritten whole, to a
temporary name then renamed, after every seed) and, for the first seed, each variant's final weights as
RUN/final-VARIANT.safetensors with RUN/config.json and RUN/probe-tokens.txt (the held-out digit), which
`attncheck probe RUN/final-VARIANT.safetensors --tokens RUN/probe-tokens.txt --cross-norm` measures (its
forward pass is standard attention: for the cross-normalized models only layer 0 sees the inputs of training).
Needs python3-torch and python3-sklearn (Debian).
"""
import argparse
import copy
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_digits import VOCAB, Encoder, SelfAttention, batches, digit_tokens, train_step, write_safetensors  # noqa: E402

CURVES_NAME = "attncheck-curves.jsonl"
VARIANTS = {
    "softmax_v": ("softmax(S) V", "standard attention (mix alpha 0)"),
    "cross_norm": ("softmax(S) softmax^T(V)", "cross-normalized values from the start (mix alpha 1)"),
    "anneal": ("mix alpha 0 -> 1", "the softmax(S) V model, mix alpha annealed linearly from 0 to 1, then held at 1"),
}


def column_softmax_mix(v, mix):
    """mix softmax_col(V) + (1 - mix) V over the token axis (-2) of [..., N, d_v] values."""
    if mix == 0:
        return v
    p = torch.softmax(v, dim=-2)
    return p if mix == 1 else mix * p + (1 - mix) * v


class CrossNormAttention(SelfAttention):
    """Softmax attention whose values are mixed with their column softmax; `mix` is set from outside."""

    def __init__(self, hidden, heads):
        super().__init__("softmax", hidden, heads)
        self.mix = 0.0
        self.keep = False  # keep the last call's attention and values, for the norms
        self.last = None

    def forward(self, h):
        b, n, hidden = h.shape
        d = hidden // self.heads
        split = lambda t: t.view(b, n, self.heads, d).transpose(1, 2)
        q, k, v = split(self.query(h)), split(self.key(h)), split(self.value(h))
        a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d), dim=-1)
        if self.keep:
            self.last = (a.detach(), v.detach())
        return (a @ column_softmax_mix(v, self.mix)).transpose(1, 2).reshape(b, n, hidden), a


def cross_norm_norms(a, v, mix):
    """||O||_F and ||dO/dV||_F of O = A (mix softmax_col(V) + (1 - mix) V) for row-stochastic A [..., N, N] and
    V [..., N, d_v], per leading index, in float64. THEORY.md fact 11: with p = softmax_col(V) and phat = A p,
    dO_ik/dV_jk = mix p_jk (a_ij - phat_ik) + (1 - mix) a_ij (other columns: 0)."""
    a, v = a.double(), v.double()
    p = torch.softmax(v, dim=-2)
    out = a @ (mix * p + (1 - mix) * v)
    phat = a @ p
    # [..., i, j, k]
    grad = mix * p[..., None, :, :] * (a[..., :, :, None] - phat[..., :, None, :]) + (1 - mix) * a[..., :, :, None]
    return out.flatten(-2).norm(dim=-1), grad.flatten(-3).norm(dim=-1)


def make_model(seed, layers):
    """The encoder of train_digits with cross-normalizable attention, from the seed's initial weights."""
    torch.manual_seed(seed)
    model = Encoder("softmax", layers=layers)
    for block in model.blocks:
        plain = block["attention"]
        mixed = CrossNormAttention(model.hidden, model.heads)
        mixed.load_state_dict(plain.state_dict())
        block["attention"] = mixed
    return model


def set_mix(model, mix):
    for block in model.blocks:
        block["attention"].mix = mix


def evaluate(model, x_test, y_test, probe_ids):
    """Test accuracy and mean loss, and per layer the head-averaged ||O||_F, ||dO/dV||_F on one digit."""
    model.eval()
    with torch.no_grad():
        logits = model(x_test)
        values = {"test_accuracy": (logits.argmax(1) == y_test).double().mean().item(),
                  "test_loss": F.cross_entropy(logits, y_test).item()}
        for block in model.blocks:
            block["attention"].keep = True
        model(probe_ids[None])
        for l, block in enumerate(model.blocks):
            attention = block["attention"]
            attention.keep = False
            a, v = attention.last
            out, grad = cross_norm_norms(a[0], v[0], attention.mix)
            values[f"layer{l}_out_fro"] = out.mean().item()
            values[f"layer{l}_dV_fro"] = grad.mean().item()
            attention.last = None
        values["mix_alpha"] = model.blocks[0]["attention"].mix
    model.train()
    return values


def anneal_mix(step, start, length):
    """The mix alpha of update `step` (1-based) in the anneal variant: 0 until `start`, 1 from start + length."""
    return min(1.0, max(0.0, (step - start) / length))


def header_lines(args, layers, tokens, d_v):
    bound = math.sqrt(tokens * d_v)
    lines = [{"record": "curves", "format": 1,
              "title": "Softmax cross-normalization on digits: softmax(S) V against softmax(S) softmax^T(V)",
              "x_label": "training step", "headline": "test_accuracy",
              "description": (f"The same encoder ({layers} layers, 4 heads of d_v = {d_v}, N = {tokens} tokens) "
                              f"on scikit-learn's digits, {args.steps} Adam steps of batch {args.batch}; the "
                              f"anneal variant leaves the softmax(S) V model at step {args.anneal_from} and "
                              f"raises mix alpha to 1 by step {args.anneal_from + args.anneal_steps}."),
              "settings": {"steps": args.steps, "seeds": args.seeds, "first_seed": args.first_seed,
                           "batch": args.batch, "lr": args.lr, "eval_every": args.eval_every,
                           "anneal_from": args.anneal_from, "anneal_steps": args.anneal_steps, "layers": layers}}]
    for name, (label, description) in VARIANTS.items():
        lines.append({"record": "variant", "name": name, "label": label, "description": description})
    lines.append({"record": "metric", "name": "test_accuracy", "label": "test accuracy",
                  "unit": "fraction of the 297 held-out digits", "higher_is_better": True, "log_y": False,
                  "reference": {"value": 0.1, "label": "chance (10 classes)"}})
    lines.append({"record": "metric", "name": "test_loss", "label": "test loss",
                  "unit": "mean cross-entropy over the held-out digits, nats", "higher_is_better": False,
                  "log_y": True})
    lines.append({"record": "metric", "name": "mix_alpha", "label": "mix alpha",
                  "unit": "weight of softmax_col(V) in the values", "log_y": False})
    for l in range(layers):
        lines.append({"record": "metric", "name": f"layer{l}_out_fro", "label": f"layer {l}: ||O||_F",
                      "unit": "Frobenius norm of one head's output on one held-out digit, mean over heads",
                      "log_y": True, "reference": {"value": bound, "label": "sqrt(N d_v): the bound at mix alpha 1"}})
        lines.append({"record": "metric", "name": f"layer{l}_dV_fro", "label": f"layer {l}: ||dO/dV||_F",
                      "unit": "Frobenius norm of the Jacobian in the values, mean over heads", "log_y": True,
                      "reference": {"value": math.sqrt(tokens * d_v / 8),
                                    "label": "sqrt(N d_v / 8): the bound at mix alpha 1"}})
    return lines


def write_lines(path, lines):
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")
    os.replace(tmp, path)


def point(variant, seed, step, values):
    return {"record": "point", "variant": variant, "seed": seed, "step": step, "values": values}


def run_seed(seed, args, data, save_folder):
    """The three variants of one seed; returns their point records."""
    x_train, y_train, x_test, y_test, probe_ids = data
    schedule = [torch.tensor(b) for _, b in zip(range(args.steps), batches(seed, len(x_train), args.batch))]
    records = []

    def train(variant, model, optimizer, first_step, mix_of):
        for step in range(first_step, args.steps + 1):
            set_mix(model, mix_of(step))
            batch = schedule[step - 1]
            loss = train_step(model, optimizer, None, x_train[batch], y_train[batch])
            if not math.isfinite(loss.item()):
                raise SystemExit(f"{variant} seed {seed}: loss is {loss.item()} at step {step}")
            if step == args.anneal_from and variant == "softmax_v":
                snapshot["state"] = (copy.deepcopy(model), copy.deepcopy(optimizer.state_dict()))
            if step % args.eval_every == 0 or step == args.steps:
                values = evaluate(model, x_test, y_test, probe_ids)
                records.append(point(variant, seed, step, values))
        print(f"seed {seed} {variant}: test accuracy {records[-1]['values']['test_accuracy']:.3f} at step "
              f"{args.steps}", flush=True)
        if save_folder:
            write_safetensors(os.path.join(save_folder, f"final-{variant}.safetensors"), model.bert_state())

    snapshot = {}
    for variant, mix in (("softmax_v", 0.0), ("cross_norm", 1.0)):
        model = make_model(seed, args.layers)
        set_mix(model, mix)
        records.append(point(variant, seed, 0, evaluate(model, x_test, y_test, probe_ids)))
        optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
        train(variant, model, optimizer, 1, lambda step, mix=mix: mix)
    model, optimizer_state = snapshot["state"]
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    optimizer.load_state_dict(optimizer_state)
    set_mix(model, 0.0)
    records.append(point("anneal", seed, args.anneal_from, evaluate(model, x_test, y_test, probe_ids)))
    train("anneal", model, optimizer, args.anneal_from + 1,
          lambda step: anneal_mix(step, args.anneal_from, args.anneal_steps))
    return records


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", help="output folder")
    parser.add_argument("--seeds", type=int, default=5, help="number of seeds (first_seed, first_seed + 1, ...)")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--eval-every", type=int, default=25)
    parser.add_argument("--anneal-from", type=int, default=None, help="default: a third of --steps")
    parser.add_argument("--anneal-steps", type=int, default=None,
                        help="steps over which mix alpha rises from 0 to 1 (default: half of what follows "
                             "--anneal-from)")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    args = parser.parse_args()
    if args.anneal_from is None:
        args.anneal_from = args.steps // 3
    if args.anneal_steps is None:
        args.anneal_steps = max(1, (args.steps - args.anneal_from) // 2)
    for name, value, low in (("--seeds", args.seeds, 1), ("--steps", args.steps, 2), ("--eval-every", args.eval_every, 1),
                             ("--anneal-from", args.anneal_from, 1), ("--anneal-steps", args.anneal_steps, 1),
                             ("--layers", args.layers, 1), ("--batch", args.batch, 1)):
        if value < low:
            parser.error(f"{name} {value} must be >= {low}")
    if args.anneal_from + args.anneal_steps > args.steps:
        parser.error(f"--anneal-from {args.anneal_from} + --anneal-steps {args.anneal_steps} goes past --steps "
                     f"{args.steps}: mix alpha would not reach 1")
    if not (args.lr > 0 and math.isfinite(args.lr)):
        parser.error(f"--lr {args.lr} must be a positive number")

    torch.set_num_threads(1)  # deterministic and polite on a shared machine
    started = time.monotonic()
    os.makedirs(args.run, exist_ok=True)
    path = os.path.join(args.run, CURVES_NAME)
    lines = None
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        tokens, labels, train, test = digit_tokens(seed)
        data = (torch.tensor(tokens[train]), torch.tensor(labels[train]), torch.tensor(tokens[test]),
                torch.tensor(labels[test]), torch.tensor(tokens[test[0]]))
        first = seed == args.first_seed
        if first:
            model = make_model(seed, args.layers)
            lines = header_lines(args, args.layers, tokens.shape[1], model.hidden // model.heads)
            config = {"model_type": "bert", "architectures": ["BertForSequenceClassification"],
                      "hidden_size": model.hidden, "num_attention_heads": model.heads,
                      "num_hidden_layers": len(model.blocks), "intermediate_size": 64, "vocab_size": VOCAB,
                      "max_position_embeddings": 65, "type_vocab_size": 1, "layer_norm_eps": 1e-12,
                      "hidden_act": "gelu", "attention_activation": "softmax", "num_labels": 10}
            write_lines(os.path.join(args.run, "config.json"), [config])
            with open(os.path.join(args.run, "probe-tokens.txt"), "w") as f:
                f.write(" ".join(str(int(t)) for t in tokens[test[0]]) + "\n")
        lines += run_seed(seed, args, data, args.run if first else None)
        write_lines(path, lines)
    print(f"wrote {path} ({args.seeds} seeds, {time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
