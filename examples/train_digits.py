#!/usr/bin/python3
"""Train a small transformer on scikit-learn's digits with softmax, x^3/sqrt(N) or x^3 attention, writing
safetensors checkpoints that `attncheck probe --watch RUN` measures while it trains.

Each 8x8 image (pixel values 0..16) becomes 65 tokens: a [CLS] token (id 17) and one token per pixel whose id
is its value, so N = 65 and `attncheck probe` can feed the model real digits through --tokens. The model is a
post-LayerNorm BERT encoder (tensor names and config.json as Hugging Face writes them), with config.json's
"attention_activation" telling the probe which map the model was trained with.

  /usr/bin/python3 examples/train_digits.py RUN --activation softmax|poly3_scaled|poly3 [--steps 300]

Writes RUN/config.json, RUN/probe-tokens.txt (a held-out digit), RUN/step-NNNNNN.safetensors every
--save-every steps (written to a temporary name, then renamed), and prints the test accuracy.
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
                "query": torch.nn.Linear(hidden, hidden), "key": torch.nn.Linear(hidden, hidden),
                "value": torch.nn.Linear(hidden, hidden), "output": torch.nn.Linear(hidden, hidden),
                "attention_norm": torch.nn.LayerNorm(hidden, eps=1e-12),
                "intermediate": torch.nn.Linear(hidden, intermediate), "mlp_out": torch.nn.Linear(intermediate, hidden),
                "output_norm": torch.nn.LayerNorm(hidden, eps=1e-12)})
            self.blocks.append(block)
        self.classifier = torch.nn.Linear(hidden, classes)

    def attend(self, scores):
        n = scores.shape[-1]
        if self.activation == "softmax":
            return torch.softmax(scores, dim=-1)
        if self.activation == "poly3_scaled":
            return scores ** 3 / math.sqrt(n)
        return scores ** 3

    def forward(self, ids, attention=None):
        """Class logits; appends each layer's attention maps [batch, heads, N, N] to `attention` if given."""
        b, n = ids.shape
        h = self.word(ids) + self.position(torch.arange(n))[None] + self.token_type(torch.zeros_like(ids))
        h = self.embedding_norm(h)
        d = self.hidden // self.heads
        for block in self.blocks:
            split = lambda t: t.view(b, n, self.heads, d).transpose(1, 2)
            q, k, v = split(block["query"](h)), split(block["key"](h)), split(block["value"](h))
            a = self.attend(q @ k.transpose(-1, -2) / math.sqrt(d))
            if attention is not None:
                attention.append(a)
            context = (a @ v).transpose(1, 2).reshape(b, n, self.hidden)
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
        names = {"query": "attention.self.query", "key": "attention.self.key", "value": "attention.self.value",
                 "output": "attention.output.dense", "attention_norm": "attention.output.LayerNorm",
                 "intermediate": "intermediate.dense", "mlp_out": "output.dense", "output_norm": "output.LayerNorm"}
        for l, block in enumerate(self.blocks):
            for ours, theirs in names.items():
                s[f"encoder.layer.{l}.{theirs}.weight"] = block[ours].weight
                s[f"encoder.layer.{l}.{theirs}.bias"] = block[ours].bias
        return s


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", help="output folder for config.json and checkpoints")
    parser.add_argument("--activation", choices=["softmax", "poly3_scaled", "poly3"], default="softmax")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--save-every", type=int, default=25)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    torch.set_num_threads(1)  # deterministic and polite on a shared machine
    digits = load_digits()
    tokens = np.concatenate([np.full((len(digits.images), 1), CLS), digits.images.reshape(-1, 64).astype(int)], 1)
    order = np.random.default_rng(args.seed).permutation(len(tokens))
    test, train = order[:297], order[297:]
    x_train, y_train = torch.tensor(tokens[train]), torch.tensor(digits.target[train])
    x_test, y_test = torch.tensor(tokens[test]), torch.tensor(digits.target[test])

    os.makedirs(args.run, exist_ok=True)
    model = Encoder(args.activation)
    config = {"model_type": "bert", "architectures": ["BertForSequenceClassification"], "hidden_size": model.hidden,
              "num_attention_heads": model.heads, "num_hidden_layers": len(model.blocks), "intermediate_size": 64,
              "vocab_size": VOCAB, "max_position_embeddings": 65, "type_vocab_size": 1, "layer_norm_eps": 1e-12,
              "hidden_act": "gelu", "attention_activation": args.activation, "num_labels": 10}
    with open(os.path.join(args.run, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    with open(os.path.join(args.run, "probe-tokens.txt"), "w") as f:
        f.write(" ".join(str(int(t)) for t in tokens[test[0]]) + "\n")

    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    rng = np.random.default_rng(args.seed + 1)
    write_safetensors(os.path.join(args.run, "step-000000.safetensors"), model.bert_state())
    for step in range(1, args.steps + 1):
        batch = torch.tensor(rng.choice(len(x_train), args.batch, replace=False))
        loss = F.cross_entropy(model(x_train[batch]), y_train[batch])
        optimizer.zero_grad()
        loss.backward()
        # Clipping keeps the unscaled x^3 run finite long enough to be measured; it is the same for all three.
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if not math.isfinite(loss.item()):
            print(f"{args.activation}: loss is {loss.item()} at step {step}; stopping", file=sys.stderr)
            break
        if step % args.save_every == 0 or step == args.steps:
            write_safetensors(os.path.join(args.run, f"step-{step:06d}.safetensors"), model.bert_state())
            with torch.no_grad():
                accuracy = (model(x_test).argmax(1) == y_test).double().mean().item()
            print(f"{args.activation}: step {step} loss {loss.item():.4f} test accuracy {accuracy:.3f}", flush=True)


if __name__ == "__main__":
    main()
