#!/usr/bin/python3
"""Train a small transformer on scikit-learn's digits with softmax, x^3/sqrt(N) or x^3 attention, measuring its
attention as it trains: live with attncheck's AttentionRecorder (--record), and/or through safetensors
checkpoints that `attncheck probe --watch RUN` measures (--save-every), the route for runs one cannot modify.

Each 8x8 image (pixel values 0..16) becomes 65 tokens: a [CLS] token (id 17) and one token per pixel whose id
is its value, so N = 65 and `attncheck probe` can feed the model real digits through --tokens. The model is a
post-LayerNorm BERT encoder (tensor names and config.json as Hugging Face writes them), with config.json's
"attention_activation" telling the probe which map the model was trained with.

  /usr/bin/python3 examples/train_digits.py RUN --activation softmax|poly3_scaled|poly3 [--steps 300]
                                                [--record EVERY] [--save-every EVERY]

--record EVERY appends the norms of every layer and head, measured on the first digit of the training batch
every EVERY steps, to RUN/attncheck-probe.jsonl (needs the attncheck package: pip install . , or the build
folder's build/python on PYTHONPATH); step k is measured with the weights after k updates, as checkpoint
step-k holds them. --save-every EVERY (default 25, 0 for none) writes RUN/step-NNNNNN.safetensors (to a
temporary name, then renamed) for the watcher, with RUN/config.json and RUN/probe-tokens.txt (a held-out
digit). `attncheck report RUN` plots either log over steps. Prints the test accuracy.
Needs python3-torch and python3-sklearn (Debian).
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits

CLS = 17
VOCAB = 18


def write_safetensors(path, state):
    """The format by hand: 8-byte little-endian header length, JSON header, raw little-endian bytes."""
    header, chunks, offset = {}, [], 0
    for name, value in state.items():
        raw = value.detach().to(torch.float32).contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(value.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))
    os.replace(tmp, path)  # the watcher never sees half a checkpoint


class SelfAttention(torch.nn.Module):
    """Multi-head self-attention with the trained activation on the scaled scores S = q k^T / sqrt(d)."""

    def __init__(self, activation, hidden, heads):
        super().__init__()
        self.activation, self.heads = activation, heads
        self.query, self.key, self.value = (torch.nn.Linear(hidden, hidden) for _ in range(3))

    def attend(self, scores):
        n = scores.shape[-1]
        if self.activation == "softmax":
            return torch.softmax(scores, dim=-1)
        if self.activation == "poly3_scaled":
            return scores ** 3 / math.sqrt(n)
        return scores ** 3

    def forward(self, h):
        """The heads' context [batch, N, hidden] and the attention maps [batch, heads, N, N]."""
        b, n, hidden = h.shape
        d = hidden // self.heads
        split = lambda t: t.view(b, n, self.heads, d).transpose(1, 2)
        q, k, v = split(self.query(h)), split(self.key(h)), split(self.value(h))
        a = self.attend(q @ k.transpose(-1, -2) / math.sqrt(d))
        return (a @ v).transpose(1, 2).reshape(b, n, hidden), a


def recorded_inputs(attention, args, kwargs, output):
    """What the AttentionRecorder measures of a SelfAttention call: its input and the query and key weights as
    maps of rows (nn.Linear computes x W^T + b)."""
    return {"x": args[0], "w_q": attention.query.weight.T, "w_k": attention.key.weight.T,
            "b_q": attention.query.bias, "b_k": attention.key.bias, "heads": attention.heads,
            "activation": attention.activation}


class Encoder(torch.nn.Module):
    def __init__(self, activation, hidden=32, heads=4, layers=2, intermediate=64, positions=65, classes=10):
        super().__init__()
        self.activation, self.heads, self.hidden = activation, heads, hidden
        self.word = torch.nn.Embedding(VOCAB, hidden)
        self.position = torch.nn.Embedding(positions, hidden)
        self.token_type = torch.nn.Embedding(1, hidden)
        self.embedding_norm = torch.nn.LayerNorm(hidden, eps=1e-12)
        self.blocks = torch.nn.ModuleList()
        for _ in range(layers):
            block = torch.nn.ModuleDict({
                "attention": SelfAttention(activation, hidden, heads), "output": torch.nn.Linear(hidden, hidden),
                "attention_norm": torch.nn.LayerNorm(hidden, eps=1e-12),
                "intermediate": torch.nn.Linear(hidden, intermediate), "mlp_out": torch.nn.Linear(intermediate, hidden),
                "output_norm": torch.nn.LayerNorm(hidden, eps=1e-12)})
            self.blocks.append(block)
        self.classifier = torch.nn.Linear(hidden, classes)

    def forward(self, ids, attention=None):
        """Class logits; appends each layer's attention maps [batch, heads, N, N] to `attention` if given."""
        b, n = ids.shape
        h = self.word(ids) + self.position(torch.arange(n))[None] + self.token_type(torch.zeros_like(ids))
        h = self.embedding_norm(h)
        for block in self.blocks:
            context, a = block["attention"](h)
            if attention is not None:
                attention.append(a)
            h = block["attention_norm"](block["output"](context) + h)
            h = block["output_norm"](block["mlp_out"](F.gelu(block["intermediate"](h))) + h)
        return self.classifier(h[:, 0])

    def bert_state(self):
        """The weights under Hugging Face BERT names, which `attncheck probe` reads."""
        s = {"embeddings.word_embeddings.weight": self.word.weight,
             "embeddings.position_embeddings.weight": self.position.weight,
             "embeddings.token_type_embeddings.weight": self.token_type.weight,
             "embeddings.LayerNorm.weight": self.embedding_norm.weight,
             "embeddings.LayerNorm.bias": self.embedding_norm.bias,
             "classifier.weight": self.classifier.weight, "classifier.bias": self.classifier.bias}
        names = {"attention.query": "attention.self.query", "attention.key": "attention.self.key",
                 "attention.value": "attention.self.value", "output": "attention.output.dense",
                 "attention_norm": "attention.output.LayerNorm", "intermediate": "intermediate.dense",
                 "mlp_out": "output.dense", "output_norm": "output.LayerNorm"}
        for l, block in enumerate(self.blocks):
            for ours, theirs in names.items():
                module = block.get_submodule(ours)
                s[f"encoder.layer.{l}.{theirs}.weight"] = module.weight
                s[f"encoder.layer.{l}.{theirs}.bias"] = module.bias
        return s


def digit_tokens(seed):
    """Every digit as 65 token ids, and the shuffled test (297 digits) and training indices."""
    digits = load_digits()
    tokens = np.concatenate([np.full((len(digits.images), 1), CLS), digits.images.reshape(-1, 64).astype(int)], 1)
    order = np.random.default_rng(seed).permutation(len(tokens))
    return tokens, digits.target, order[297:], order[:297]


def batches(seed, train_size, batch):
    """The training indices of steps 1, 2, ...: one draw without replacement per step."""
    rng = np.random.default_rng(seed + 1)
    while True:
        yield rng.choice(train_size, batch, replace=False)


def train_step(model, optimizer, recorder, ids, labels):
    """One optimizer step on a batch (and the recorder's step, if there is one); returns the batch's loss."""
    loss = F.cross_entropy(model(ids), labels)
    optimizer.zero_grad()
    loss.backward()
    # Clipping keeps the unscaled x^3 run finite long enough to be measured; it is the same for all three.
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    if recorder is not None:
        recorder.step()
    return loss


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", help="output folder for the probe log, config.json and checkpoints")
    parser.add_argument("--activation", choices=["softmax", "poly3_scaled", "poly3"], default="softmax")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--record", type=int, default=0, metavar="EVERY",
                        help="record the attention norms live every EVERY steps (0: not at all)")
    parser.add_argument("--save-every", type=int, default=25, help="checkpoint every this many steps (0: none)")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    torch.set_num_threads(1)  # deterministic and polite on a shared machine
    tokens, labels, train, test = digit_tokens(args.seed)
    x_train, y_train = torch.tensor(tokens[train]), torch.tensor(labels[train])
    x_test, y_test = torch.tensor(tokens[test]), torch.tensor(labels[test])

    os.makedirs(args.run, exist_ok=True)
    model = Encoder(args.activation)
    recorder = None
    if args.record > 0:
        from attncheck.torch import AttentionRecorder
        recorder = AttentionRecorder(model, every=args.record, out=args.run)
        for block in model.blocks:
            recorder.register(block["attention"], recorded_inputs)
    if args.save_every > 0:
        config = {"model_type": "bert", "architectures": ["BertForSequenceClassification"],
                  "hidden_size": model.hidden, "num_attention_heads": model.heads,
                  "num_hidden_layers": len(model.blocks), "intermediate_size": 64, "vocab_size": VOCAB,
                  "max_position_embeddings": 65, "type_vocab_size": 1, "layer_norm_eps": 1e-12, "hidden_act": "gelu",
                  "attention_activation": args.activation, "num_labels": 10}
        with open(os.path.join(args.run, "config.json"), "w") as f:
            json.dump(config, f, indent=1)
        with open(os.path.join(args.run, "probe-tokens.txt"), "w") as f:
            f.write(" ".join(str(int(t)) for t in tokens[test[0]]) + "\n")
        write_safetensors(os.path.join(args.run, "step-000000.safetensors"), model.bert_state())

    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    for step, batch in zip(range(1, args.steps + 1), batches(args.seed, len(x_train), args.batch)):
        batch = torch.tensor(batch)
        loss = train_step(model, optimizer, recorder, x_train[batch], y_train[batch])
        if not math.isfinite(loss.item()):
            print(f"{args.activation}: loss is {loss.item()} at step {step}; stopping", file=sys.stderr)
            break
        report = step == args.steps or any(every > 0 and step % every == 0 for every in (args.save_every, args.record))
        if args.save_every > 0 and (step % args.save_every == 0 or step == args.steps):
            write_safetensors(os.path.join(args.run, f"step-{step:06d}.safetensors"), model.bert_state())
        if report:
            model.eval()  # evaluation passes are not training steps for the recorder
            with torch.no_grad():
                accuracy = (model(x_test).argmax(1) == y_test).double().mean().item()
            model.train()
            print(f"{args.activation}: step {step} loss {loss.item():.4f} test accuracy {accuracy:.3f}", flush=True)
    if recorder is not None:
        recorder.close()


if __name__ == "__main__":
    main()
