#!/usr/bin/python3
"""PyTorch reference for `attncheck probe`.

  make-tiny DIR            writes small randomly initialized BERT and GPT-2 checkpoints (config.json +
                           safetensors; the GPT-2 one sharded, part of it in F16/BF16) into DIR/tiny-bert and
                           DIR/tiny-gpt2
  make-tiny-llama DIR      writes one small random Llama (grouped queries, biased projections, a byte-level
                           BPE vocabulary) as a Hugging Face checkpoint (DIR/tiny-llama: config.json, F32
                           safetensors, vocab.json, merges.txt) and, with the `gguf` package, as GGUF files
                           DIR/tiny-llama-TYPE.gguf for TYPE in f32 f16 bf16 q8_0 q4_0 q4_1 (queries and keys
                           permuted to GGUF's interleaved rotary pairs, as llama.cpp's converter does)
  make-tiny-vit DIR        writes a small random ViT (Hugging Face ViTForImageClassification names, "vit."
                           prefix) and a small random DINOv2 (LayerScale; images of another patch grid than the
                           position embeddings', so these are interpolated) into DIR/tiny-vit and DIR/tiny-dinov2,
                           each with pixels.npy (float64 in Fortran order for the ViT, float32 for DINOv2)
  compare BIN MODEL ...    runs `BIN probe MODEL ... --json --attention-out F`, runs the same weights through
                           PyTorch in float64 (BERT, GPT-2: PyTorch's own TransformerEncoderLayer /
                           MultiheadAttention; ViT, DINOv2: PyTorch's conv2d, interpolate (bicubic) and
                           MultiheadAttention; Llama: a forward written here from the definition, the weights
                           of a GGUF file dequantized by the `gguf` package), and checks every layer's and
                           head's attention matrix (BERT, GPT-2: max |difference| <= 1e-5; Llama: every entry
                           within 1e-10 relative) and, for a sample of heads, ||A||_F, ||grad softmax||_F and
                           ||dA/dW_Q||_F, ||dA/dW_K||_F (and, with grouped queries, the group's ||dA/dW_K||_F)
                           against autograd Jacobians (relative 1e-9). With --cross-norm among the probe's
                           arguments, also the cross-normalization what-if of those heads: ||O||_F and
                           ||dO/dV||_F of O = A (mix softmax_col(V) + (1 - mix) V) on the head's own values, at
                           every mix, against autograd (relative 1e-9), and on every head the mix-1 bounds
                           ||O||_F <= sqrt(N d_v), ||dO/dV||_F <= sqrt(N d_v / 8).
  dequant BIN FILE.gguf [--rows K] [NAME ...]
                           has BIN (the test program dump_gguf) write the named tensors (all supported ones by
                           default; the first K rows of each with --rows) as F64 and checks them bit for bit
                           against the `gguf` package's dequantization (Q8_K, which it lacks, against ggml's
                           formula written here).

Exit 0 pass, 1 mismatch, 77 skipped (PyTorch, NumPy or gguf absent). The safetensors format is read and
written here by hand (8-byte little-endian header length, JSON header, raw bytes) so no extra package is
needed for it.
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
    # Older checkpoints name LayerNorm parameters gamma and beta.
    renamed = {"LayerNorm.gamma": "LayerNorm.weight", "LayerNorm.beta": "LayerNorm.bias"}
    weights = {next((k[:-len(old)] + new for old, new in renamed.items() if k.endswith(old)), k): v
               for k, v in weights.items()}
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


def make_tiny_vit(folder):
    rng = np.random.default_rng(20261123)

    def normal(*shape, scale=0.5):
        return rng.normal(0.0, scale, size=shape)

    for kind in ("vit", "dinov2"):
        out = os.path.join(folder, f"tiny-{kind}")
        os.makedirs(out, exist_ok=True)
        D, H, L, C = 16, 4, 2, 3
        if kind == "vit":
            P, image, I, pre = 8, 32, 32, "vit."
            config = {"model_type": "vit", "hidden_size": D, "num_attention_heads": H, "num_hidden_layers": L,
                      "intermediate_size": I, "hidden_act": "gelu", "layer_norm_eps": 1e-12, "image_size": image,
                      "patch_size": P, "num_channels": C, "qkv_bias": True}
            names = {"norm1": "layernorm_before", "norm2": "layernorm_after", "fc1": "intermediate.dense",
                     "fc2": "output.dense"}
            height, width = image, image
        else:
            P, image, I, pre = 6, 24, 32, ""
            config = {"model_type": "dinov2", "hidden_size": D, "num_attention_heads": H, "num_hidden_layers": L,
                      "mlp_ratio": I / D, "hidden_act": "gelu", "layer_norm_eps": 1e-6, "image_size": image,
                      "patch_size": P, "num_channels": C, "layerscale_value": 1.0}
            names = {"norm1": "norm1", "norm2": "norm2", "fc1": "mlp.fc1", "fc2": "mlp.fc2"}
            # 5 x 7 patches (and 2 pixels past the last whole patch in each direction) against 4 x 4 trained.
            height, width = 32, 44
        json.dump(config, open(os.path.join(out, "config.json"), "w"))
        grid = image // P
        t = {pre + "embeddings.cls_token": normal(1, 1, D), pre + "embeddings.mask_token": normal(1, D),
             pre + "embeddings.position_embeddings": normal(1, 1 + grid * grid, D),
             pre + "embeddings.patch_embeddings.projection.weight": normal(D, C, P, P, scale=0.1),
             pre + "embeddings.patch_embeddings.projection.bias": normal(D, scale=0.1),
             pre + "layernorm.weight": 1 + normal(D, scale=0.1), pre + "layernorm.bias": normal(D, scale=0.1)}
        for layer in range(L):
            p = f"{pre}encoder.layer.{layer}."
            for name, shape in [("attention.attention.query", (D, D)), ("attention.attention.key", (D, D)),
                                ("attention.attention.value", (D, D)), ("attention.output.dense", (D, D)),
                                (names["fc1"], (I, D)), (names["fc2"], (D, I))]:
                t[p + name + ".weight"] = normal(*shape, scale=0.6)
                t[p + name + ".bias"] = normal(shape[0], scale=0.2)
            for name in ("norm1", "norm2"):
                t[p + names[name] + ".weight"] = 1 + normal(D, scale=0.1)
                t[p + names[name] + ".bias"] = normal(D, scale=0.1)
            if kind == "dinov2":
                t[p + "layer_scale1.lambda1"] = 1 + normal(D, scale=0.3)
                t[p + "layer_scale2.lambda1"] = 1 + normal(D, scale=0.3)
        write_safetensors(os.path.join(out, "model.safetensors"), {k: (v, "F32") for k, v in t.items()})
        pixels = normal(C, height, width, scale=1.0)
        np.save(os.path.join(out, "pixels.npy"),
                np.asfortranarray(pixels) if kind == "vit" else pixels.astype(np.float32))


def vision_layers(config, weights, pixels):
    """Layer inputs X and per-head attention of a ViT or DINOv2, from PyTorch's conv2d, interpolate and
    MultiheadAttention."""
    dinov2 = config["model_type"] == "dinov2"
    pre = next(p for p in ("vit.", "dinov2.", "") if p + "embeddings.cls_token" in weights)
    D, H, L = config["hidden_size"], config["num_attention_heads"], config["num_hidden_layers"]
    P = config["patch_size"]
    eps = config.get("layer_norm_eps", 1e-6 if dinov2 else 1e-12)
    e = pre + "embeddings."
    x = torch.tensor(pixels)[None]
    patches = F.conv2d(x, tensor(weights, e + "patch_embeddings.projection.weight"),
                       tensor(weights, e + "patch_embeddings.projection.bias"), stride=P)
    gh, gw = patches.shape[2], patches.shape[3]
    h = torch.cat([tensor(weights, e + "cls_token")[0], patches.flatten(2).transpose(1, 2)[0]])
    positions = tensor(weights, e + "position_embeddings")[0]
    side = int(round(math.sqrt(positions.shape[0] - 1)))
    grid = positions[1:]
    if (gh, gw) != (side, side):
        grid = grid.reshape(1, side, side, D).permute(0, 3, 1, 2)
        grid = F.interpolate(grid, size=(gh, gw), mode="bicubic", align_corners=False)
        grid = grid.permute(0, 2, 3, 1).reshape(gh * gw, D)
    h = h + torch.cat([positions[:1], grid])
    names = ({"norm1": "norm1", "norm2": "norm2", "fc1": "mlp.fc1", "fc2": "mlp.fc2"} if dinov2 else
             {"norm1": "layernorm_before", "norm2": "layernorm_after", "fc1": "intermediate.dense",
              "fc2": "output.dense"})
    out = []
    for layer in range(L):
        p = f"{pre}encoder.layer.{layer}."
        w = lambda name: tensor(weights, p + name)
        x = F.layer_norm(h, (D,), w(names["norm1"] + ".weight"), w(names["norm1"] + ".bias"), eps)
        wq, wk, wv = (w(f"attention.attention.{k}.weight") for k in ("query", "key", "value"))
        bq, bk, bv = (w(f"attention.attention.{k}.bias") for k in ("query", "key", "value"))
        attention_module = torch.nn.MultiheadAttention(D, H, dropout=0.0, batch_first=True)
        attention_module.eval()
        with torch.no_grad():
            attention_module.in_proj_weight.copy_(torch.cat([wq, wk, wv]))
            attention_module.in_proj_bias.copy_(torch.cat([bq, bk, bv]))
            attention_module.out_proj.weight.copy_(w("attention.output.dense.weight"))
            attention_module.out_proj.bias.copy_(w("attention.output.dense.bias"))
            attended, attention = attention_module(x[None], x[None], x[None], need_weights=True,
                                                   average_attn_weights=False)
        attended = attended[0]
        if dinov2:
            attended = attended * w("layer_scale1.lambda1")
        h = h + attended
        m = F.layer_norm(h, (D,), w(names["norm2"] + ".weight"), w(names["norm2"] + ".bias"), eps)
        mlp = F.linear(F.gelu(F.linear(m, w(names["fc1"] + ".weight"), w(names["fc1"] + ".bias"))),
                       w(names["fc2"] + ".weight"), w(names["fc2"] + ".bias"))
        if dinov2:
            mlp = mlp * w("layer_scale2.lambda1")
        h = h + mlp
        out.append({"X": x.detach(), "attention": attention[0].detach(), "wq": wq, "wk": wk, "bq": bq, "bk": bk,
                    "wv": wv, "bv": bv, "heads": H, "causal": False})
    return out


def bytes_to_unicode():
    """GPT-2's map of the 256 bytes to printable characters: printable Latin-1 bytes stand for themselves,
    the others are moved to 256 + k in byte order."""
    kept = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in kept:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def tiny_bpe(size):
    """A byte-level BPE vocabulary of `size` tokens: the 256 byte characters, then merges learned greedily
    (most frequent pair, ties by the pair's text) from a small multilingual text split at spaces."""
    chars = bytes_to_unicode()
    text = ("the cat sat on the mat. the cats sat there, and then the other cat sat on the hat. "
            "le chat est sur le tapis; über die Straße; naïve café. 12345 67890 the end")
    words = [[chars[b] for b in (" " + w if k else w).encode("utf-8")] for k, w in enumerate(text.split(" "))]
    vocab = [chars[b] for b in range(256)]
    merges = []
    while len(vocab) < size:
        counts = {}
        for w in words:
            for a, b in zip(w, w[1:]):
                counts[(a, b)] = counts.get((a, b), 0) + 1
        if not counts:
            break
        pair = min(counts, key=lambda p: (-counts[p], p))
        merges.append(pair)
        vocab.append(pair[0] + pair[1])
        for w in words:
            k = 0
            while k < len(w) - 1:
                if (w[k], w[k + 1]) == pair:
                    w[k:k + 2] = [pair[0] + pair[1]]
                k += 1
    return vocab, merges


def permute_for_gguf(weight, heads):
    """llama.cpp's converter: within each head, rows in the half-split order (p, p + d/2) become interleaved
    (2p, 2p + 1), so that ggml's rotary pairs act on the same coordinates."""
    rows = weight.shape[0]
    return weight.reshape(heads, 2, rows // heads // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


LLAMA_GGUF_TYPES = ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1"]


def make_tiny_llama(folder):
    rng = np.random.default_rng(20261122)
    D, H, G, L, I, P, theta, eps = 32, 4, 2, 2, 64, 64, 500.0, 1e-5
    d = D // H
    vocab, merges = tiny_bpe(300)
    V = len(vocab)
    hf_dir = os.path.join(folder, "tiny-llama")
    os.makedirs(hf_dir, exist_ok=True)
    config = {"model_type": "llama", "hidden_size": D, "num_attention_heads": H, "num_key_value_heads": G,
              "num_hidden_layers": L, "intermediate_size": I, "vocab_size": V, "max_position_embeddings": P,
              "rms_norm_eps": eps, "rope_theta": theta, "hidden_act": "silu", "attention_bias": True,
              "tie_word_embeddings": True}
    json.dump(config, open(os.path.join(hf_dir, "config.json"), "w"))

    def normal(*shape, scale=0.5):
        return rng.normal(0.0, scale, size=shape)

    t = {"model.embed_tokens.weight": normal(V, D), "model.norm.weight": 1 + normal(D, scale=0.1)}
    for layer in range(L):
        p = f"model.layers.{layer}."
        t[p + "input_layernorm.weight"] = 1 + normal(D, scale=0.1)
        t[p + "post_attention_layernorm.weight"] = 1 + normal(D, scale=0.1)
        for name, out in [("q_proj", H * d), ("k_proj", G * d), ("v_proj", G * d)]:
            t[p + f"self_attn.{name}.weight"] = normal(out, D, scale=0.5)
            t[p + f"self_attn.{name}.bias"] = normal(out, scale=0.3)
        t[p + "self_attn.o_proj.weight"] = normal(D, H * d, scale=0.3)
        t[p + "mlp.gate_proj.weight"] = normal(I, D, scale=0.3)
        t[p + "mlp.up_proj.weight"] = normal(I, D, scale=0.3)
        t[p + "mlp.down_proj.weight"] = normal(D, I, scale=0.2)
    write_safetensors(os.path.join(hf_dir, "model.safetensors"), {k: (v, "F32") for k, v in t.items()})
    json.dump({token: k for k, token in enumerate(vocab)}, open(os.path.join(hf_dir, "vocab.json"), "w"),
              ensure_ascii=False)
    with open(os.path.join(hf_dir, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
    with open(os.path.join(hf_dir, "tokens.txt"), "w") as f:
        f.write(" ".join(str(x) for x in rng.integers(0, V, size=23)) + "\n")

    try:
        import gguf
        from gguf.quants import quantize
    except ImportError as error:
        print(f"no GGUF files: {error} (scripts/pyenv installs the gguf package)")
        return
    names = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
             "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
             "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"}
    converted = {"token_embd.weight": t["model.embed_tokens.weight"], "output_norm.weight": t["model.norm.weight"]}
    for layer in range(L):
        for short, long in names.items():
            for kind in ("weight", "bias"):
                source = f"model.layers.{layer}.{long}.{kind}"
                if source not in t:
                    continue
                value = t[source]
                if short in ("attn_q", "attn_k"):
                    value = permute_for_gguf(value, H if short == "attn_q" else G)
                converted[f"blk.{layer}.{short}.{kind}"] = value
    dims = {"L": L, "P": P, "D": D, "I": I, "H": H, "G": G, "theta": theta, "eps": eps, "d": d}
    for type_name in LLAMA_GGUF_TYPES:
        qtype = getattr(gguf.GGMLQuantizationType, type_name.upper())
        tensors = {}
        for name, value in converted.items():
            value = value.astype(np.float32)
            # Norms and biases stay F32, as llama.cpp's converter keeps 1-D tensors.
            if value.ndim == 1 or type_name == "f32":
                tensors[name] = (value, None)
            elif type_name == "f16":
                tensors[name] = (value.astype(np.float16), None)
            else:
                tensors[name] = (quantize(value, qtype), qtype)
        write_llama_gguf(os.path.join(folder, f"tiny-llama-{type_name}.gguf"), dims, vocab, merges, tensors)


def write_llama_gguf(path, dims, vocab, merges, tensors):
    """A Llama GGUF file of the sizes `dims` with the byte-level BPE vocabulary; tensors: name -> (array, None)
    for plain types, (raw block bytes, ggml type) for block types."""
    import gguf
    writer = gguf.GGUFWriter(path + ".tmp", "llama")
    writer.add_block_count(dims["L"])
    writer.add_context_length(dims["P"])
    writer.add_embedding_length(dims["D"])
    writer.add_feed_forward_length(dims["I"])
    writer.add_head_count(dims["H"])
    writer.add_head_count_kv(dims["G"])
    writer.add_rope_freq_base(dims["theta"])
    writer.add_layer_norm_rms_eps(dims["eps"])
    writer.add_rope_dimension_count(dims["d"])
    writer.add_vocab_size(len(vocab))
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt2")
    writer.add_token_list(vocab)
    writer.add_token_merges([f"{a} {b}" for a, b in merges])
    writer.add_add_bos_token(False)
    for name, (value, qtype) in tensors.items():
        if qtype is None:
            writer.add_tensor(name, value)
        else:
            writer.add_tensor(name, value, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(path + ".tmp", path)


def read_gguf(path):
    """config (as a Hugging Face config.json would say it) and weights (Hugging Face names, float64, queries
    and keys left in GGUF's interleaved order) of a Llama GGUF file, dequantized by the gguf package."""
    import gguf
    from gguf.quants import dequantize
    reader = gguf.GGUFReader(path)
    field = lambda key: reader.fields[key].contents()
    config = {"model_type": "llama", "hidden_size": field("llama.embedding_length"),
              "num_attention_heads": field("llama.attention.head_count"),
              "num_key_value_heads": field("llama.attention.head_count_kv"),
              "num_hidden_layers": field("llama.block_count"),
              "rms_norm_eps": field("llama.attention.layer_norm_rms_epsilon"),
              "rope_theta": field("llama.rope.freq_base"), "rope_interleaved": True}
    names = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
             "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
             "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"}
    weights = {}
    for t in reader.tensors:
        value = dequantize(t.data, t.tensor_type).astype(np.float64)
        parts = t.name.split(".")
        if parts[0] == "blk":
            name = f"model.layers.{parts[1]}.{names[parts[2]]}.{parts[3]}"
        elif t.name == "token_embd.weight":
            name = "model.embed_tokens.weight"
        else:
            name = t.name
        weights[name] = value
    return config, weights


def rotate(x, positions, theta, interleaved):
    """Rotary embedding of x [n, heads, d] at `positions`: pair p turned by position * theta^(-2p/d)."""
    d = x.shape[-1]
    frequency = theta ** (-2.0 * torch.arange(d // 2, dtype=torch.float64) / d)
    angle = positions[:, None].to(torch.float64) * frequency[None, :]
    cos, sin = torch.cos(angle)[:, None, :], torch.sin(angle)[:, None, :]
    first, second = (x[..., 0::2], x[..., 1::2]) if interleaved else (x[..., : d // 2], x[..., d // 2:])
    a, b = first * cos - second * sin, first * sin + second * cos
    out = torch.empty_like(x)
    if interleaved:
        out[..., 0::2], out[..., 1::2] = a, b
    else:
        out[..., : d // 2], out[..., d // 2:] = a, b
    return out


def llama_layers(config, weights, ids):
    """The Llama forward in float64 from the definition: RMSNorm, rotary queries and keys, grouped-query causal
    softmax attention, SwiGLU MLP. Returns per layer X, the attention [heads, n, n] and what the norm checks
    need."""
    D, H, L = config["hidden_size"], config["num_attention_heads"], config["num_hidden_layers"]
    G = config.get("num_key_value_heads") or H
    d = config.get("head_dim") or D // H
    eps, theta = config.get("rms_norm_eps", 1e-6), config.get("rope_theta", 10000.0)
    interleaved = config.get("rope_interleaved", False)
    pre = "model." if "model.embed_tokens.weight" in weights else ""
    w = lambda name: torch.tensor(weights[pre + name])
    has = lambda name: pre + name in weights
    n = len(ids)
    positions = torch.arange(n)
    h = w("embed_tokens.weight")[ids]

    def rms(x, gain):
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * gain

    def linear(x, name):
        y = x @ w(name + ".weight").T
        return y + w(name + ".bias") if has(name + ".bias") else y

    mask = torch.triu(torch.full((n, n), float("-inf")), diagonal=1)
    out = []
    for layer in range(L):
        p = f"layers.{layer}."
        x = rms(h, w(p + "input_layernorm.weight"))
        q = rotate(linear(x, p + "self_attn.q_proj").view(n, H, d), positions, theta, interleaved)
        k = rotate(linear(x, p + "self_attn.k_proj").view(n, G, d), positions, theta, interleaved)
        v = linear(x, p + "self_attn.v_proj").view(n, G, d)
        k_shared, v_shared = k.repeat_interleave(H // G, dim=1), v.repeat_interleave(H // G, dim=1)
        scores = torch.einsum("ihc,jhc->hij", q, k_shared) / math.sqrt(d) + mask
        attention = torch.softmax(scores, dim=-1)
        context = torch.einsum("hij,jhc->ihc", attention, v_shared).reshape(n, H * d)
        h = h + linear(context, p + "self_attn.o_proj")
        m = rms(h, w(p + "post_attention_layernorm.weight"))
        h = h + linear(F.silu(linear(m, p + "mlp.gate_proj")) * linear(m, p + "mlp.up_proj"), p + "mlp.down_proj")
        bias = lambda name, rows: w(name + ".bias") if has(name + ".bias") else torch.zeros(rows)
        out.append({"X": x, "attention": attention, "heads": H, "kv_heads": G, "d": d, "theta": theta,
                    "interleaved": interleaved, "wq": w(p + "self_attn.q_proj.weight"),
                    "wk": w(p + "self_attn.k_proj.weight"), "bq": bias(p + "self_attn.q_proj", H * d),
                    "bk": bias(p + "self_attn.k_proj", G * d), "wv": w(p + "self_attn.v_proj.weight"),
                    "bv": bias(p + "self_attn.v_proj", G * d)})
    return out


def llama_head_attention(layer, wq, bq, wk, bk):
    """One query head's causal softmax attention from its own and its key head's weight slices."""
    x, d = layer["X"], layer["d"]
    n = x.shape[0]
    positions = torch.arange(n)
    q = rotate((x @ wq.T + bq)[:, None, :], positions, layer["theta"], layer["interleaved"])[:, 0]
    k = rotate((x @ wk.T + bk)[:, None, :], positions, layer["theta"], layer["interleaved"])[:, 0]
    scores = q @ k.T / math.sqrt(d) + torch.triu(torch.full((n, n), float("-inf")), diagonal=1)
    return torch.softmax(scores, dim=-1)


CROSS_NORM_MIXES = {"mix0": 0.0, "mix0_5": 0.5, "mix1": 1.0}


def cross_norm_expected(attention, values):
    """||O||_F and ||dO/dV||_F by autograd for O = A (mix softmax_col(V) + (1 - mix) V), keyed as the probe's JSON."""
    expected = {}
    for suffix, mix in CROSS_NORM_MIXES.items():
        def output(v):
            return attention @ (mix * torch.softmax(v, dim=0) + (1 - mix) * v)
        expected["out_fro_" + suffix] = float(torch.linalg.norm(output(values)))
        expected["dV_fro_" + suffix] = float(torch.linalg.norm(
            torch.autograd.functional.jacobian(output, values, vectorize=True)))
    return expected


def check_cross_norm_bounds(metrics):
    """Fact 11 on every head at mix 1; the probe's bound fields against sqrt(N d_v), sqrt(N d_v / 8)."""
    failures, ratio = 0, 0.0
    for m in metrics:
        n, dv = m["N"], m["d_v"]
        out_bound, dv_bound = math.sqrt(n * dv), math.sqrt(n * dv / 8)
        where = f"layer {m['layer']} head {m['head']}"
        if abs(m["cross_norm_out_bound"] - out_bound) > 1e-12 * out_bound or \
                abs(m["cross_norm_dV_bound"] - dv_bound) > 1e-12 * dv_bound:
            print(f"FAIL: {where}: bounds {m['cross_norm_out_bound']}, {m['cross_norm_dV_bound']}, expected "
                  f"{out_bound}, {dv_bound}")
            failures += 1
        for key, bound in (("out_fro_mix1", out_bound), ("dV_fro_mix1", dv_bound)):
            ratio = max(ratio, m[key] / bound)
            if m[key] > bound * (1 + 1e-12):
                print(f"FAIL: {where}: {key} = {m[key]!r} above its bound {bound!r}")
                failures += 1
    print(f"cross-normalized (mix 1) ||O||_F / sqrt(N d_v) and ||dO/dV||_F / sqrt(N d_v / 8), every head: "
          f"largest {ratio:.4f} (bound 1)")
    return failures


def compare_norms(where, got, expected):
    """The probe's norms against autograd's, relative 1e-9: (failures, largest relative difference)."""
    failures, worst = 0, 0.0
    for key, value in expected.items():
        rel = abs(got[key] - value) / max(abs(value), 1e-300)
        worst = max(worst, rel)
        if rel > 1e-9:
            print(f"FAIL: {where}: {key} = {got[key]!r}, autograd {value!r} (rel {rel:.2e})")
            failures += 1
    return failures, worst


def check_llama_norms(layers, metrics, cross_norm):
    """dW_Q, dW_K per query head and dW_K of each key head's group against autograd."""
    by_key = {(m["layer"], m["head"]): m for m in metrics}
    failures, worst = 0, 0.0
    # Autograd Jacobians cost a backward pass per attention entry: on a real model, the first key head's group
    # in the first and the last layer.
    real = len(layers) > 4
    checked = [0, len(layers) - 1] if real else range(len(layers))
    for l in checked:
        layer = layers[l]
        H, G, d = layer["heads"], layer["kv_heads"], layer["d"]
        share = H // G
        for g in [0] if real else sorted({0, G - 1}):
            ks = slice(g * d, (g + 1) * d)
            wk, bk = layer["wk"][ks], layer["bk"][ks]
            group = list(range(g * share, (g + 1) * share))

            def stacked(w):
                return torch.stack([llama_head_attention(layer, layer["wq"][h * d:(h + 1) * d],
                                                         layer["bq"][h * d:(h + 1) * d], w, bk) for h in group])
            expected_group = float(torch.linalg.norm(torch.autograd.functional.jacobian(stacked, wk, vectorize=True)))
            for head in group:
                qs = slice(head * d, (head + 1) * d)
                wq, bq = layer["wq"][qs], layer["bq"][qs]
                a = llama_head_attention(layer, wq, bq, wk, bk)
                d_wq = torch.autograd.functional.jacobian(lambda w: llama_head_attention(layer, w, bq, wk, bk), wq, vectorize=True)
                d_wk = torch.autograd.functional.jacobian(lambda w: llama_head_attention(layer, wq, bq, w, bk), wk, vectorize=True)
                expected = {"softmax_fro": float(torch.linalg.norm(a)), "dWq_fro": float(torch.linalg.norm(d_wq)),
                            "dWk_fro": float(torch.linalg.norm(d_wk)), "dWk_group_fro": expected_group}
                if cross_norm:
                    expected.update(cross_norm_expected(a, layer["X"] @ layer["wv"][ks].T + layer["bv"][ks]))
                got = by_key[(l, head)]
                if got["kv_head"] != g:
                    print(f"FAIL: layer {l} head {head}: kv_head {got['kv_head']}, expected {g}")
                    failures += 1
                bad, rel = compare_norms(f"layer {l} head {head}", got, expected)
                failures, worst = failures + bad, max(worst, rel)
    groups = "the first key head's group" if real else "the first and last key head's groups"
    print(f"norms vs autograd Jacobians (layers {list(checked)}, every head of {groups}, and the groups' dW_K): "
          f"max relative difference {worst:.3e}")
    return failures


def reference_dequantize(data, qtype):
    """The gguf package's dequantization, and for Q8_K, which it lacks (llama.cpp uses Q8_K for activations in
    its dot products, not in files), ggml's dequantize_row_q8_K: the float32 scale times each int8 quant."""
    import gguf
    from gguf.quants import dequantize
    if qtype == gguf.GGMLQuantizationType.Q8_K:
        blocks = np.ascontiguousarray(data).view(np.uint8).reshape(-1, 292)
        scale = blocks[:, :4].copy().view(np.float32)
        quants = blocks[:, 4:260].copy().view(np.int8).astype(np.float32)
        return (scale * quants).reshape(*data.shape[:-1], -1)
    return dequantize(data, qtype)


def dequant(binary, path, args):
    import gguf
    rows = None
    if args[:1] == ["--rows"]:
        rows, args = int(args[1]), args[2:]
    with tempfile.TemporaryDirectory() as tmp:
        dump = os.path.join(tmp, "dequantized.safetensors")
        command = [binary, path, dump] + (["--rows", str(rows)] if rows else []) + args
        run = subprocess.run(command, capture_output=True, text=True)
        if run.returncode != 0:
            print(f"FAIL: {' '.join(command)} exited {run.returncode}: {run.stderr}")
            return 1
        ours = read_safetensors(dump)
    reader = gguf.GGUFReader(path)
    failures, counts = 0, {}
    for t in reader.tensors:
        if t.name not in ours:
            continue
        reference = reference_dequantize(t.data, t.tensor_type).astype(np.float64)
        if rows:
            reference = reference.reshape(-1, reference.shape[-1])[:rows]
        mine = ours.pop(t.name).reshape(reference.shape)
        # Bit for bit: the same float64 values, signs of zeros included.
        if mine.tobytes() != reference.tobytes():
            bad = int(np.sum(mine.view(np.uint64) != reference.view(np.uint64)))
            print(f"FAIL: {t.name} ({t.tensor_type.name}): {bad} of {mine.size} values differ from gguf's")
            failures += 1
            continue
        counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + mine.size
    if ours:
        print(f"FAIL: tensors {sorted(ours)} are not in {path} according to gguf")
        failures += 1
    print(f"dequantized values bit-equal to gguf's: {counts}")
    return 1 if failures else 0


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
        out.append({"X": x, "attention": attention[0], "wq": wq, "wk": wk, "bq": bq, "bk": bk, "wv": wv, "bv": bv,
                    "heads": H, "causal": not bert})
    return out


def head_attention(x, wq, bq, wk, bk, causal):
    d = wq.shape[0]
    scores = (x @ wq.T + bq) @ (x @ wk.T + bk).T / math.sqrt(d)
    if causal:
        scores = scores + torch.triu(torch.full(scores.shape, float("-inf")), diagonal=1)
    return torch.softmax(scores, dim=-1)


def run_probe(binary, model, probe_args):
    """`attncheck probe --json --attention-out`: (per-head metrics, the dumped tensors), or None when it failed."""
    with tempfile.TemporaryDirectory() as tmp:
        dump = os.path.join(tmp, "attention.safetensors")
        run = subprocess.run([binary, "probe", model, *probe_args, "--json", "--attention-out", dump],
                             capture_output=True, text=True)
        if run.returncode != 0:
            print(f"FAIL: attncheck probe exited {run.returncode}: {run.stderr}")
            return None
        return json.loads(run.stdout)["heads"], read_safetensors(dump)


def compare(binary, model, probe_args):
    config, weights = read_gguf(model) if model.endswith(".gguf") else read_model(model)
    probed = run_probe(binary, model, probe_args)
    if probed is None:
        return 1
    metrics, dumped = probed
    cross_norm = "--cross-norm" in probe_args
    if config["model_type"] in ("vit", "dinov2"):
        pixels = np.load(probe_args[probe_args.index("--pixels") + 1]).astype(np.float64)
        layers = vision_layers(config, weights, pixels)
        ids = range(layers[0]["X"].shape[0])
        worst_x = 0.0
        for l, layer in enumerate(layers):
            diff = float(np.max(np.abs(dumped[f"inputs.{l}"] - layer["X"].numpy())))
            worst_x = max(worst_x, diff)
            if diff > 1e-10:
                print(f"FAIL: layer {l}: max |X difference| {diff:.3e} > 1e-10 (the rows the projections act on)")
                return 1
        print(f"layer inputs X (after the LayerNorm before attention): max |attncheck - PyTorch| = {worst_x:.3e}")
    else:
        ids = [int(x) for x in dumped["input_ids"]]
    if config["model_type"] == "llama":
        return compare_llama(config, weights, ids, dumped, metrics, cross_norm)
    if config["model_type"] not in ("vit", "dinov2"):
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
            if cross_norm:
                expected.update(cross_norm_expected(a, x @ layer["wv"][s].T + layer["bv"][s]))
            got = by_key[(l, head)]
            bad, rel = compare_norms(f"layer {l} head {head}", got, expected)
            failures, worst_rel = failures + bad, max(worst_rel, rel)
            if got["N"] != n:
                print(f"FAIL: layer {l} head {head}: N = {got['N']}, expected {n}")
                failures += 1
    print(f"norms vs autograd Jacobians (first and last head per layer{', cross-normalization what-if' if cross_norm else ''}): "
          f"max relative difference {worst_rel:.3e}")
    if cross_norm:
        failures += check_cross_norm_bounds(metrics)
    return 1 if failures else 0


def attention_difference(dumped, layer, ref, oracle):
    """The probe's attention in `layer` against `oracle`'s, entry by entry relative to the reference (masked entries
    are 0 in both); None, said, when the shapes differ."""
    ours = dumped[f"layer.{layer}"]
    if ours.shape != ref.shape:
        print(f"FAIL: layer {layer}: attention shape {ours.shape}, {oracle} {ref.shape}")
        return None
    return float(np.max(np.abs(ours - ref) / np.where(ref == 0, 1.0, np.abs(ref))))


def compare_llama(config, weights, ids, dumped, metrics, cross_norm):
    layers = llama_layers(config, weights, ids)
    failures, worst = 0, 0.0
    for l, layer in enumerate(layers):
        rel = attention_difference(dumped, l, layer["attention"].numpy(), "PyTorch")
        if rel is None:
            return 1
        worst = max(worst, rel)
        if rel > 1e-10:
            print(f"FAIL: layer {l}: attention differs from PyTorch's by {rel:.3e} relative > 1e-10")
            failures += 1
    print(f"attention matrices: {len(layers)} layers x {layers[0]['heads']} heads, N = {len(ids)}, "
          f"max relative |attncheck - PyTorch| = {worst:.3e}")
    failures += check_llama_norms(layers, metrics, cross_norm)
    if cross_norm:
        failures += check_cross_norm_bounds(metrics)
    return 1 if failures else 0


def main(argv):
    if len(argv) >= 2 and argv[0] == "make-tiny":
        make_tiny(argv[1])
        return 0
    if len(argv) >= 2 and argv[0] == "make-tiny-vit":
        make_tiny_vit(argv[1])
        return 0
    if len(argv) >= 2 and argv[0] == "make-tiny-llama":
        make_tiny_llama(argv[1])
        return 0
    if len(argv) >= 3 and argv[0] == "dequant":
        try:
            import gguf  # noqa: F401
        except ImportError as error:
            print(f"SKIPPED: {error} (scripts/pyenv installs the gguf package)")
            return SKIP
        return dequant(argv[1], argv[2], argv[3:])
    if len(argv) >= 3 and argv[0] == "compare":
        if not os.path.exists(argv[2]):
            print(f"SKIPPED: model {argv[2]} is not there (run scripts/fetch-minilm)")
            return SKIP
        if torch is None:
            print(f"SKIPPED: {torch_missing} (install python3-torch: scripts/setup probes)")
            return SKIP
        if argv[2].endswith(".gguf"):
            try:
                import gguf  # noqa: F401
            except ImportError as error:
                print(f"SKIPPED: {error} (scripts/pyenv installs the gguf package)")
                return SKIP
        return compare(argv[1], argv[2], argv[3:])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
