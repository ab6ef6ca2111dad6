"""A Llama-shaped GGUF file with random weights, for the probe's memory and speed benchmarks (no such real file of
1B parameters is on PyPI). The default sizes are Llama 3.2 1B's: hidden 2048, 16 layers, 32 query heads on 8
key/value heads of 64, feed-forward 8192, vocabulary 128256, rope base 500000, 131072 positions; 1.24e9
parameters. Matrices are Q4_0 (or Q4_K with --type q4_k), norms F32. Weights are random blocks with scales that
keep activations of order one, so a forward pass over Gaussian embeddings (`probe --random`) stays finite; the
file has no tokenizer (probe it with --random).

  PYTHON bench/probes/make_llama_gguf.py OUT.gguf [--layers 16] [--hidden 2048] [--type q4_0] [--seed 1]

PYTHON: the interpreter of `scripts/pyenv build/cache` (it has the gguf package). Writes OUT.gguf.tmp, then
renames it: the file is complete or absent.
"""
import argparse
import os

import numpy as np


def random_blocks(rng, rows, cols, qtype, gguf):
    """Raw block bytes of a rows x cols matrix: each block's scale 2^-4 / sqrt(cols) x (1..2), random codes."""
    block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
    if cols % block_size:
        raise SystemExit(f"{cols} columns are not a multiple of the {block_size} of a block")
    blocks = rows * cols // block_size
    raw = rng.integers(0, 256, size=(blocks, type_size), dtype=np.uint8)
    scale = (np.float32(2.0 ** -4 / np.sqrt(cols)) * (1 + rng.random(blocks, dtype=np.float32))).astype(np.float16)
    raw[:, 0:2] = scale.view(np.uint8).reshape(blocks, 2)
    if qtype == gguf.GGMLQuantizationType.Q4_K:
        # Q4_K: d, dmin (fp16), 12 bytes of 6-bit sub-scales and mins, then codes; dmin small so values centre.
        raw[:, 2:4] = (scale / 8).astype(np.float16).view(np.uint8).reshape(blocks, 2)
    return raw.reshape(rows, cols // block_size * type_size)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out")
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--intermediate", type=int, default=8192)
    parser.add_argument("--vocab", type=int, default=128256)
    parser.add_argument("--type", choices=["q4_0", "q4_k"], default="q4_0")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    import gguf
    qtype = {"q4_0": gguf.GGMLQuantizationType.Q4_0, "q4_k": gguf.GGMLQuantizationType.Q4_K}[args.type]
    rng = np.random.default_rng(args.seed)
    D, H, G, I = args.hidden, args.heads, args.kv_heads, args.intermediate
    d = D // H
    writer = gguf.GGUFWriter(args.out + ".tmp", "llama")
    writer.add_name("random-llama-1b-shape")
    writer.add_block_count(args.layers)
    writer.add_context_length(131072)
    writer.add_embedding_length(D)
    writer.add_feed_forward_length(I)
    writer.add_head_count(H)
    writer.add_head_count_kv(G)
    writer.add_rope_freq_base(500000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(d)
    writer.add_vocab_size(args.vocab)

    def matrix(name, rows, cols):
        writer.add_tensor(name, random_blocks(rng, rows, cols, qtype, gguf), raw_dtype=qtype)

    def norm(name):
        writer.add_tensor(name, (1 + 0.1 * rng.standard_normal(D)).astype(np.float32))

    matrix("token_embd.weight", args.vocab, D)
    for layer in range(args.layers):
        prefix = f"blk.{layer}."
        norm(prefix + "attn_norm.weight")
        matrix(prefix + "attn_q.weight", H * d, D)
        matrix(prefix + "attn_k.weight", G * d, D)
        matrix(prefix + "attn_v.weight", G * d, D)
        matrix(prefix + "attn_output.weight", D, H * d)
        norm(prefix + "ffn_norm.weight")
        matrix(prefix + "ffn_gate.weight", I, D)
        matrix(prefix + "ffn_up.weight", I, D)
        matrix(prefix + "ffn_down.weight", D, I)
    norm("output_norm.weight")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(args.out + ".tmp", args.out)


if __name__ == "__main__":
    main()
