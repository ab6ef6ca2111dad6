#!/usr/bin/python3
"""GGUF's block types, with the `gguf` package (scripts/pyenv) as the oracle.

  make DIR         writes DIR/random-blocks.gguf: for every block type the reader dequantizes, a tensor of 16 rows
                   of 16 blocks of random bytes (fixed seed) whose scales are finite, the first blocks with
                   extreme scales (largest, smallest subnormal, -0, negative); and two tiny Llamas (hidden size
                   256, so that rows are whole K-quant super-blocks) with the same weights:
                   DIR/kquant-llama.gguf, its matrices in every K-quant llama.cpp writes and in Q5_0, Q8_0 and
                   IQ4_NL (the types K-quant files fall back to), and DIR/kquant-llama-f32.gguf, the same matrices
                   dequantized by the gguf package and stored as F32; the token ids in DIR/tokens.txt
  probe BIN DIR    runs `BIN probe` on both Llamas: attention matrices and every head's norms must agree to
                   1e-12 relative (the weights are the same numbers, read from blocks or from F32)

The dequantization itself is compared bit for bit by torch_reference.py dequant on both GGUF files with blocks.
Exit 0 pass, 1 mismatch, 77 skipped (the gguf package absent).
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_reference import read_safetensors, reference_dequantize, tiny_bpe, write_llama_gguf  # noqa: E402

SKIP = 77
# Where each block type keeps its scales (byte offsets of float16 fields; Q8_K's one scale is a float32).
SCALE_OFFSETS = {"Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0], "Q2_K": [80, 82],
                 "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208], "Q8_K": [0], "IQ4_NL": [0]}
# Extreme scales for the first blocks: the largest finite half, the smallest subnormal, -0 and a negative one
# (as float32 for Q8_K, within the range where 127 times the scale stays finite).
EXTREME_HALVES = [0x7bff, 0x0001, 0x8000, 0xbc00]
EXTREME_FLOATS = [2.0 ** 100, 2.0 ** -149, -0.0, -1.0]


def random_blocks(rng, gguf, name, count):
    """`count` blocks of type `name`: random bytes, then finite random scales."""
    qtype = gguf.GGMLQuantizationType[name]
    _, type_size = gguf.GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, size=(count, type_size), dtype=np.uint8)
    for offset in SCALE_OFFSETS[name]:
        if name == "Q8_K":
            scales = (rng.normal(size=count) * 2.0 ** rng.integers(-30, 30, size=count)).astype(np.float32)
            scales[:len(EXTREME_FLOATS)] = EXTREME_FLOATS
            blocks[:, offset:offset + 4] = scales.view(np.uint8).reshape(count, 4)
            continue
        halves = rng.integers(0, 1 << 16, size=count, dtype=np.uint32)
        while np.any(bad := (halves & 0x7c00) == 0x7c00):  # exponent all ones: infinity or NaN
            halves[bad] = rng.integers(0, 1 << 16, size=int(bad.sum()), dtype=np.uint32)
        halves[:len(EXTREME_HALVES)] = EXTREME_HALVES
        blocks[:, offset:offset + 2] = halves.astype(np.uint16).view(np.uint8).reshape(count, 2)
    return blocks


# Scales that give random blocks of the types gguf cannot quantize to weights up to about W in size (attention
# neither uniform nor one-hot): d, and dmin for the types with minimums, against the largest scale times quant
# (and minimum) a block can hold.
W = 0.15
RANDOM_SCALES = {"Q2_K": (W / 45, W / 15), "Q3_K": (W / 128, None), "Q4_K": (W / 945, W / 63),
                 "Q5_K": (W / 1953, W / 63), "Q6_K": (W / 4096, None), "IQ4_NL": (W / 127, None)}
# Per layer, the type of each matrix: every K-quant a file can hold, and the types llama.cpp falls back to for
# rows that are not whole super-blocks (Q5_0, Q8_0 in Q4_K_M files; IQ4_NL in Q2_K and Q3_K ones).
LLAMA_TYPES = [
    {"attn_q": "Q4_K", "attn_k": "Q5_K", "attn_v": "Q6_K", "attn_output": "Q3_K", "ffn_gate": "Q8_0",
     "ffn_up": "Q5_0", "ffn_down": "Q2_K"},
    {"attn_q": "Q2_K", "attn_k": "Q3_K", "attn_v": "Q4_K", "attn_output": "Q6_K", "ffn_gate": "Q5_K",
     "ffn_up": "IQ4_NL", "ffn_down": "Q6_K"},
]


def weight_blocks(rng, gguf, name, shape):
    """A matrix of `shape` in type `name`: random quants and sub-block scales, (super-)block scales set."""
    block_size, _ = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[name]]
    blocks = random_blocks(rng, gguf, name, shape[0] * shape[1] // block_size)
    for offset, scale in zip(SCALE_OFFSETS[name], RANDOM_SCALES[name]):
        if scale is not None:
            values = (scale * rng.uniform(0.5, 1.5, size=len(blocks))).astype(np.float16)
            blocks[:, offset:offset + 2] = values.view(np.uint8).reshape(-1, 2)
    return blocks.reshape(shape[0], -1)


def make(folder):
    import gguf
    from gguf.quants import quantize
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(20261123)
    writer = gguf.GGUFWriter(os.path.join(folder, "random-blocks.gguf.tmp"), "blocks")
    for name in SCALE_OFFSETS:
        block_size, _ = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[name]]
        blocks = random_blocks(rng, gguf, name, 16 * 16).reshape(16, -1)
        values = reference_dequantize(blocks, gguf.GGMLQuantizationType[name])
        assert values.shape == (16, 16 * block_size) and np.all(np.isfinite(values)), name
        writer.add_tensor(f"random.{name.lower()}", blocks, raw_dtype=gguf.GGMLQuantizationType[name])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(os.path.join(folder, "random-blocks.gguf.tmp"), os.path.join(folder, "random-blocks.gguf"))

    dims = {"L": 2, "P": 64, "D": 256, "I": 512, "H": 4, "G": 2, "theta": 10000.0, "eps": 1e-5, "d": 64}
    D, I, d = dims["D"], dims["I"], dims["d"]
    vocab, merges = tiny_bpe(300)
    shapes = {"attn_q": (dims["H"] * d, D), "attn_k": (dims["G"] * d, D), "attn_v": (dims["G"] * d, D),
              "attn_output": (D, dims["H"] * d), "ffn_gate": (I, D), "ffn_up": (I, D), "ffn_down": (D, I)}
    blocks = {"token_embd.weight": (weight_blocks(rng, gguf, "Q6_K", (len(vocab), D)), "Q6_K")}
    plain = {"output_norm.weight": 1 + 0.1 * rng.normal(size=D)}
    for layer, types in enumerate(LLAMA_TYPES):
        p = f"blk.{layer}."
        plain[p + "attn_norm.weight"] = 1 + 0.1 * rng.normal(size=D)
        plain[p + "ffn_norm.weight"] = 1 + 0.1 * rng.normal(size=D)
        for short in ("attn_q", "attn_k", "attn_v"):
            plain[p + short + ".bias"] = 0.3 * rng.normal(size=shapes[short][0])
        for short, name in types.items():
            if name in RANDOM_SCALES:
                blocks[p + short + ".weight"] = (weight_blocks(rng, gguf, name, shapes[short]), name)
            else:
                weights = (W / 2 * rng.normal(size=shapes[short])).astype(np.float32)
                blocks[p + short + ".weight"] = (quantize(weights, gguf.GGMLQuantizationType[name]), name)
    plain = {name: (value.astype(np.float32), None) for name, value in plain.items()}
    quantized = {name: (raw, gguf.GGMLQuantizationType[type_name]) for name, (raw, type_name) in blocks.items()}
    dequantized = {name: (reference_dequantize(raw, qtype).astype(np.float32), None)
                   for name, (raw, qtype) in quantized.items()}
    write_llama_gguf(os.path.join(folder, "kquant-llama.gguf"), dims, vocab, merges, {**plain, **quantized})
    write_llama_gguf(os.path.join(folder, "kquant-llama-f32.gguf"), dims, vocab, merges, {**plain, **dequantized})
    with open(os.path.join(folder, "tokens.txt"), "w") as f:
        f.write(" ".join(str(x) for x in rng.integers(0, len(vocab), size=23)) + "\n")
    return 0


def probe(binary, folder):
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("kquant-llama", "kquant-llama-f32"):
            dump = os.path.join(tmp, name + ".safetensors")
            command = [binary, "probe", os.path.join(folder, name + ".gguf"), "--tokens",
                       os.path.join(folder, "tokens.txt"), "--json", "--attention-out", dump]
            run = subprocess.run(command, capture_output=True, text=True)
            if run.returncode != 0:
                print(f"FAIL: {' '.join(command)} exited {run.returncode}: {run.stderr}")
                return 1
            runs[name] = (json.loads(run.stdout)["heads"], read_safetensors(dump))
    (heads, attention), (heads_f32, attention_f32) = runs["kquant-llama"], runs["kquant-llama-f32"]
    layers = sorted(k for k in attention_f32 if k.startswith("layer."))
    if sorted(k for k in attention if k.startswith("layer.")) != layers or len(heads) != len(heads_f32):
        print("FAIL: the two probes report different layers or heads")
        return 1
    worst_attention = max(float(np.max(np.abs(attention[k] - attention_f32[k]))) for k in layers)
    worst_norm, compared = 0.0, 0
    for row, row_f32 in zip(heads, heads_f32):
        for key, value in row_f32.items():
            if isinstance(value, float):
                worst_norm = max(worst_norm, abs(row[key] - value) / max(abs(value), 1e-300))
                compared += 1
    # Attention neither one-hot nor uniform, so that the weights shape it: ||A||_F / sqrt(N) well inside (0, 1].
    spread = [row["softmax_fro"] / np.sqrt(row["N"]) for row in heads_f32]
    print(f"K-quant blocks vs the same weights as F32: {len(layers)} layers, {len(heads)} heads "
          f"(||A||_F/sqrt(N) from {min(spread):.3f} to {max(spread):.3f}), max |attention difference| "
          f"{worst_attention:.3e}, {compared} norms, max relative difference {worst_norm:.3e}")
    return 0 if worst_attention <= 1e-12 and worst_norm <= 1e-12 and compared > 0 else 1


def main(argv):
    try:
        import gguf  # noqa: F401
    except ImportError as error:
        print(f"SKIPPED: {error} (scripts/pyenv installs the gguf package)")
        return SKIP
    if len(argv) == 2 and argv[0] == "make":
        return make(argv[1])
    if len(argv) == 3 and argv[0] == "probe":
        return probe(argv[1], argv[2])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
