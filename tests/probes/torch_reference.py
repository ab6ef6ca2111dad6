#!/usr/bin/python3
"""PyTorch reference for `attncheck probe`.

  make-tiny DIR            writes small randomly initialized BERT and GPT-2 checkpoints (config.json +
                           safetensors; the GPT-2 one sharded, part of it in F16/BF16) into DIR/tiny-bert and
                           DIR/tiny-gpt2
  compare BIN MODEL ...    runs `BIN probe MODEL ... --json --attention-out F`, runs the same weights through
                           PyTorch's own TransformerEncoderLayer / MultiheadAttention in float64, and checks
                           every layer's and head's attention matrix (max |difference| <= 1e-5) and, for a
                           sample of heads, ||A||_F, ||grad softmax||_F and ||dA/dW_Q||_F, ||dA/dW_K||_F
                           against autograd Jacobians (relative 1e-9).

Exit 0 pass, 1 mismatch, 77 skipped (PyTorch or NumPy absent). The safetensors format is read and written
here by hand (8-byte little-endian header length, JSON header, raw bytes) so no extra package is needed.
"""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

SKIP = 77
try:
    import numpy as np
except ImportError as error:
    print(f"SKIPPED: {error} (install python3-numpy: scripts/setup core)")
    sys.exit(SKIP)
# PyTorch is needed only for the comparison; the fixtures are written with NumPy alone.
try:
    import torch
    import torch.nn.functional as F
    torch.set_default_dtype(torch.float64)
except ImportError as error:
    torch = None
    torch_missing = str(error)

NUMPY_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1",
                "U8": "u1", "BOOL": "?"}


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (length,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + length])
    data = blob[8 + length:]
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        raw = data[begin:end]
        if entry["dtype"] == "BF16":
            bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            array = bits.view(np.float32)
        else:
            array = np.frombuffer(raw, dtype=NUMPY_DTYPES[entry["dtype"]])
        out[name] = array.astype(np.float64).reshape(entry["shape"])
    return out


def write_safetensors(path, tensors):
    """tensors: name -> (numpy array, dtype name in F64/F32/F16/BF16)."""
    header, chunks, offset = {}, [], 0
    for name, (array, dtype) in tensors.items():
        if dtype == "BF16":
            bits = np.ascontiguousarray(array, dtype=np.float32).view(np.uint32)
            raw = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2").tobytes()  # round to nearest even
        else:
            raw = np.ascontiguousarray(array, dtype=NUMPY_DTYPES[dtype]).tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))
    os.replace(tmp, path)


def read_model(folder):
    config = json.load(open(os.path.join(folder, "config.json")))
    index = os.path.join(folder, "model.safetensors.index.json")
    weights = {}
    if os.path.exists(index):
        for shard in sorted(set(json.load(open(index))["weight_map"].values())):
            weights.update(read_safetensors(os.path.join(folder, shard)))
    else:
        weights = read_safetensors(os.path.join(folder, "model.safetensors"))
    return config, weights


def make_tiny(folder):
    rng = np.random.default_rng(20240605)
    bert_dir, gpt_dir = os.path.join(folder, "tiny-bert"), os.path.join(folder, "tiny-gpt2")
    os.makedirs(bert_dir, exist_ok=True)
    os.makedirs(gpt_dir, exist_ok=True)
    D, H, I, L, V, P = 16, 4, 32, 2, 40, 24
    bert = {"model_type": "bert", "hidden_size": D, "num_attention_heads": H, "num_hidden_layers": L,
            "intermediate_size": I, "vocab_size": V, "max_position_embeddings": P, "type_vocab_size": 2,
            "layer_norm_eps": 1e-12, "hidden_act": "gelu"}
    json.dump(bert, open(os.path.join(bert_dir, "config.json"), "w"))

    def normal(*shape, scale=0.5):
        return rng.normal(0.0, scale, size=shape)

    t = {"bert.embeddings.word_embeddings.weight": normal(V, D), "bert.embeddings.position_embeddings.weight":
         normal(P, D), "bert.embeddings.token_type_embeddings.weight": normal(2, D),
         "bert.embeddings.LayerNorm.weight": 1 + normal(D, scale=0.1), "bert.embeddings.LayerNorm.bias": normal(D, scale=0.1)}
    for layer in range(L):
        p = f"bert.encoder.layer.{layer}."
        for name, shape in [("attention.self.query", (D, D)), ("attention.self.key", (D, D)),
                            ("attention.self.value", (D, D)), ("attention.output.dense", (D, D)),
                            ("intermediate.dense", (I, D)), ("output.dense", (D, I))]:
            t[p + name + ".weight"] = normal(*shape, scale=0.6)
            t[p + name + ".bias"] = normal(shape[0], scale=0.2)
        for name in ["attention.output.LayerNorm", "output.LayerNorm"]:
            t[p + name + ".weight"] = 1 + normal(D, scale=0.1)
            t[p + name + ".bias"] = normal(D, scale=0.1)
    write_safetensors(os.path.join(bert_dir, "model.safetensors"), {k: (v, "F32") for k, v in t.items()})
    with open(os.path.join(bert_dir, "vocab.txt"), "w") as f:
        words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "cat", "sat", "on", "mat", "##s", ".", ","]
        f.write("\n".join(words + [f"w{k}" for k in range(V - len(words))]) + "\n")

    D, H, L, V, P = 12, 3, 3, 30, 20
    gpt = {"model_type": "gpt2", "n_embd": D, "n_head": H, "n_layer": L, "vocab_size": V, "n_positions": P,
           "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new"}
    json.dump(gpt, open(os.path.join(gpt_dir, "config.json"), "w"))
    t = {"wte.weight": normal(V, D), "wpe.weight": normal(P, D)}
    for layer in range(L):
        p = f"h.{layer}."
        t[p + "ln_1.weight"], t[p + "ln_1.bias"] = 1 + normal(D, scale=0.1), normal(D, scale=0.1)
        t[p + "ln_2.weight"], t[p + "ln_2.bias"] = 1 + normal(D, scale=0.1), normal(D, scale=0.1)
        t[p + "attn.c_attn.weight"], t[p + "attn.c_attn.bias"] = normal(D, 3 * D, scale=0.7), normal(3 * D, scale=0.2)
        t[p + "attn.c_proj.weight"], t[p + "attn.c_proj.bias"] = normal(D, D), normal(D, scale=0.1)
        t[p + "mlp.c_fc.weight"], t[p + "mlp.c_fc.bias"] = normal(D, 4 * D), normal(4 * D, scale=0.1)
        t[p + "mlp.c_proj.weight"], t[p + "mlp.c_proj.bias"] = normal(4 * D, D), normal(D, scale=0.1)
    t["ln_f.weight"], t["ln_f.bias"] = np.ones(D), np.zeros(D)
    # Two shards, the first in F16, the second in BF16 for the layer weights: the reference reads the same
    # rounded values, so the comparison stays exact while the reader's half-precision paths are exercised.
    names = sorted(t)
    first = {k: (t[k], "F16") for k in names[: len(names) // 2]}
    second = {k: (t[k], "BF16" if k.startswith("h.") else "F32") for k in names[len(names) // 2:]}
    write_safetensors(os.path.join(gpt_dir, "model-00001-of-00002.safetensors"), first)
    write_safetensors(os.path.join(gpt_dir, "model-00002-of-00002.safetensors"), second)
    weight_map = {k: "model-00001-of-00002.safetensors" for k in first}
    weight_map.update({k: "model-00002-of-00002.safetensors" for k in second})
    json.dump({"metadata": {}, "weight_map": weight_map}, open(os.path.join(gpt_dir, "model.safetensors.index.json"), "w"))
    with open(os.path.join(gpt_dir, "tokens.txt"), "w") as f:
        f.write(" ".join(str(x) for x in rng.integers(0, V, size=17)) + "\n")
    with open(os.path.join(bert_dir, "tokens.txt"), "w") as f:
        f.write(" ".join(str(x) for x in [2] + list(rng.integers(4, V, size=13)) + [3]) + "\n")


def tensor(weights, name):
    return torch.tensor(weights[name])


def torch_layers(config, weights, ids):
    """Layer inputs X, per-head attention, and the projection parameters, from PyTorch's own modules."""
    bert = config["model_type"] == "bert"
    if bert:
        pre = "bert." if "bert.embeddings.word_embeddings.weight" in weights else ""
        D, H, L = config["hidden_size"], config["num_attention_heads"], config["num_hidden_layers"]
        eps = config.get("layer_norm_eps", 1e-12)
        n = len(ids)
        h = (tensor(weights, pre + "embeddings.word_embeddings.weight")[ids]
             + tensor(weights, pre + "embeddings.position_embeddings.weight")[:n]
             + tensor(weights, pre + "embeddings.token_type_embeddings.weight")[[0] * n])
        h = F.layer_norm(h, (D,), tensor(weights, pre + "embeddings.LayerNorm.weight"),
                         tensor(weights, pre + "embeddings.LayerNorm.bias"), eps)
    else:
        pre = "transformer." if "transformer.wte.weight" in weights else ""
        D, H, L = config["n_embd"], config["n_head"], config["n_layer"]
        eps = config.get("layer_norm_epsilon", 1e-5)
        n = len(ids)
        h = tensor(weights, pre + "wte.weight")[ids] + tensor(weights, pre + "wpe.weight")[:n]
    I = config.get("intermediate_size") or config.get("n_inner") or 4 * D
    activation = (lambda x: F.gelu(x)) if bert else (lambda x: F.gelu(x, approximate="tanh"))
    mask = None if bert else torch.triu(torch.full((n, n), float("-inf")), diagonal=1)
    out = []
    for layer in range(L):
        block = torch.nn.TransformerEncoderLayer(D, H, I, dropout=0.0, activation=activation, layer_norm_eps=eps,
                                                 batch_first=True, norm_first=not bert)
        block.eval()
        with torch.no_grad():
            if bert:
                p = f"{pre}encoder.layer.{layer}."
                wq, wk, wv = (tensor(weights, p + f"attention.self.{k}.weight") for k in ("query", "key", "value"))
                bq, bk, bv = (tensor(weights, p + f"attention.self.{k}.bias") for k in ("query", "key", "value"))
                block.self_attn.out_proj.weight.copy_(tensor(weights, p + "attention.output.dense.weight"))
                block.self_attn.out_proj.bias.copy_(tensor(weights, p + "attention.output.dense.bias"))
                block.norm1.weight.copy_(tensor(weights, p + "attention.output.LayerNorm.weight"))
                block.norm1.bias.copy_(tensor(weights, p + "attention.output.LayerNorm.bias"))
                block.linear1.weight.copy_(tensor(weights, p + "intermediate.dense.weight"))
                block.linear1.bias.copy_(tensor(weights, p + "intermediate.dense.bias"))
                block.linear2.weight.copy_(tensor(weights, p + "output.dense.weight"))
                block.linear2.bias.copy_(tensor(weights, p + "output.dense.bias"))
                block.norm2.weight.copy_(tensor(weights, p + "output.LayerNorm.weight"))
                block.norm2.bias.copy_(tensor(weights, p + "output.LayerNorm.bias"))
            else:
                p = f"{pre}h.{layer}."
                c_attn, c_attn_b = tensor(weights, p + "attn.c_attn.weight"), tensor(weights, p + "attn.c_attn.bias")
                wq, wk, wv = (c_attn[:, k * D:(k + 1) * D].T for k in range(3))  # Conv1D stores [in, out]
                bq, bk, bv = (c_attn_b[k * D:(k + 1) * D] for k in range(3))
                block.self_attn.out_proj.weight.copy_(tensor(weights, p + "attn.c_proj.weight").T)
                block.self_attn.out_proj.bias.copy_(tensor(weights, p + "attn.c_proj.bias"))
                block.norm1.weight.copy_(tensor(weights, p + "ln_1.weight"))
                block.norm1.bias.copy_(tensor(weights, p + "ln_1.bias"))
                block.linear1.weight.copy_(tensor(weights, p + "mlp.c_fc.weight").T)
                block.linear1.bias.copy_(tensor(weights, p + "mlp.c_fc.bias"))
                block.linear2.weight.copy_(tensor(weights, p + "mlp.c_proj.weight").T)
                block.linear2.bias.copy_(tensor(weights, p + "mlp.c_proj.bias"))
                block.norm2.weight.copy_(tensor(weights, p + "ln_2.weight"))
                block.norm2.bias.copy_(tensor(weights, p + "ln_2.bias"))
            block.self_attn.in_proj_weight.copy_(torch.cat([wq, wk, wv]))
            block.self_attn.in_proj_bias.copy_(torch.cat([bq, bk, bv]))
            x = h if bert else block.norm1(h)
            _, attention = block.self_attn(x[None], x[None], x[None], attn_mask=mask, need_weights=True,
                                           average_attn_weights=False)
            h = block(h[None], src_mask=mask)[0]
        out.append({"X": x, "attention": attention[0], "wq": wq, "wk": wk, "bq": bq, "bk": bk, "heads": H,
                    "causal": not bert})
    return out


def head_attention(x, wq, bq, wk, bk, causal):
    d = wq.shape[0]
    scores = (x @ wq.T + bq) @ (x @ wk.T + bk).T / math.sqrt(d)
    if causal:
        scores = scores + torch.triu(torch.full(scores.shape, float("-inf")), diagonal=1)
    return torch.softmax(scores, dim=-1)


def compare(binary, model, probe_args):
    config, weights = read_model(model)
    with tempfile.TemporaryDirectory() as tmp:
        dump = os.path.join(tmp, "attention.safetensors")
        run = subprocess.run([binary, "probe", model, *probe_args, "--json", "--attention-out", dump],
                             capture_output=True, text=True)
        if run.returncode != 0:
            print(f"FAIL: attncheck probe exited {run.returncode}: {run.stderr}")
            return 1
        metrics = json.loads(run.stdout)
        dumped = read_safetensors(dump)
    ids = [int(x) for x in dumped["input_ids"]]
    layers = torch_layers(config, weights, ids)
    failures = 0
    worst = 0.0
    for l, layer in enumerate(layers):
        ours = dumped[f"layer.{l}"]
        ref = layer["attention"].numpy()
        if ours.shape != ref.shape:
            print(f"FAIL: layer {l}: attention shape {ours.shape}, PyTorch {ref.shape}")
            return 1
        diff = float(np.max(np.abs(ours - ref)))
        worst = max(worst, diff)
        if diff > 1e-5:
            print(f"FAIL: layer {l}: max |attention difference| {diff:.3e} > 1e-5")
            failures += 1
    print(f"attention matrices: {len(layers)} layers x {layers[0]['heads']} heads, N = {len(ids)}, "
          f"max |attncheck - PyTorch| = {worst:.3e}")
    # Norms against autograd, for the first and last head of every layer.
    worst_rel = 0.0
    by_key = {(m["layer"], m["head"]): m for m in metrics}
    for l, layer in enumerate(layers):
        H = layer["heads"]
        d = layer["wq"].shape[0] // H
        for head in sorted({0, H - 1}):
            s = slice(head * d, (head + 1) * d)
            x, causal = layer["X"], layer["causal"]
            wq, wk, bq, bk = layer["wq"][s], layer["wk"][s], layer["bq"][s], layer["bk"][s]
            a = head_attention(x, wq, bq, wk, bk, causal)
            n = a.shape[0]
            d_wq = torch.autograd.functional.jacobian(lambda w: head_attention(x, w, bq, wk, bk, causal), wq)
            d_wk = torch.autograd.functional.jacobian(lambda w: head_attention(x, wq, bq, w, bk, causal), wk)
            scores = (x @ wq.T + bq) @ (x @ wk.T + bk).T / math.sqrt(d)
            if causal:
                scores = scores + torch.triu(torch.full(scores.shape, float("-inf")), diagonal=1)
            # Rows of -inf logits give NaN derivatives in autograd's softmax only when a whole row is masked,
            # which never happens (the diagonal is visible).
            d_s = torch.autograd.functional.jacobian(lambda t: torch.softmax(t, dim=-1), scores)
            d_s = torch.nan_to_num(d_s)
            visible = torch.tril(torch.ones(n, n)) if causal else torch.ones(n, n)
            poly = (scores.masked_fill(visible == 0, 0.0)) ** 3 / math.sqrt(n)
            expected = {"softmax_fro": float(torch.linalg.norm(a)), "dWq_fro": float(torch.linalg.norm(d_wq)),
                        "dWk_fro": float(torch.linalg.norm(d_wk)), "grad_fro": float(torch.linalg.norm(d_s)),
                        "poly3_scaled_fro": float(torch.linalg.norm(poly))}
            got = by_key[(l, head)]
            for key, value in expected.items():
                rel = abs(got[key] - value) / max(abs(value), 1e-300)
                worst_rel = max(worst_rel, rel)
                if rel > 1e-9:
                    print(f"FAIL: layer {l} head {head}: {key} = {got[key]!r}, autograd {value!r} (rel {rel:.2e})")
                    failures += 1
            if got["N"] != n:
                print(f"FAIL: layer {l} head {head}: N = {got['N']}, expected {n}")
                failures += 1
    print(f"norms vs autograd Jacobians (first and last head per layer): max relative difference {worst_rel:.3e}")
    return 1 if failures else 0


def main(argv):
    if len(argv) >= 2 and argv[0] == "make-tiny":
        make_tiny(argv[1])
        return 0
    if len(argv) >= 3 and argv[0] == "compare":
        if not os.path.exists(argv[2]):
            print(f"SKIPPED: model {argv[2]} is not there (run scripts/fetch-minilm)")
            return SKIP
        if torch is None:
            print(f"SKIPPED: {torch_missing} (install python3-torch: scripts/setup probes)")
            return SKIP
        return compare(argv[1], argv[2], argv[3:])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
