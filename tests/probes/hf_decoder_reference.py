"""`attncheck probe` against Hugging Face transformers' own models.

  check FAMILY BIN DIR     builds a tiny random FAMILY model with transformers (seeded, float64), saves it as
                           safetensors under DIR/tiny-FAMILY, runs `BIN probe` on it with --json --attention-out,
                           and checks every layer's and head's attention matrix against the model's own
                           (output_attentions, eager attention), every entry within 1e-10 relative, the rows the
                           projections act on (X) likewise, and for the first and last head of every layer
                           ||A||_F, ||grad softmax||_F, ||dA/dW_Q||_F, ||dA/dW_K||_F and the first key head's
                           group ||dA/dW_K||_F against autograd Jacobians (relative 1e-9).

Decoder families (transformers 4.38.2): mistral (Llama with a sliding window, 5 positions over 12 tokens so that
it masks), qwen2 (biased query, key and value projections), gemma (sqrt(hidden) embeddings, RMSNorm 1 + weight,
GeGLU, head_dim apart from hidden / heads). Each family's functions are prefixed with its name.

Run with the interpreter of `scripts/pyenv CACHE transformers`. Exit 0 pass, 1 mismatch, 77 skipped
(transformers absent).
"""
import json
import math
import os
import subprocess
import sys
import tempfile

SKIP = 77
try:
    import numpy as np
    import torch
    import transformers
except ImportError as error:
    print(f"SKIPPED: {error} (run with the interpreter of scripts/pyenv CACHE transformers)")
    sys.exit(SKIP)

torch.set_default_dtype(torch.float64)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_reference import compare_norms, read_safetensors  # noqa: E402


# --- Llama-like decoders (Mistral, Qwen2, Gemma), transformers 4.38.2 ---------------------------------------

DECODER_TOKENS = 12


def decoder_config(family):
    common = dict(vocab_size=50, hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6, rope_theta=1000.0,
                  tie_word_embeddings=False)
    if family == "mistral":
        return transformers.MistralConfig(**common, sliding_window=5)
    if family == "qwen2":
        return transformers.Qwen2Config(**common, use_sliding_window=False)
    if family == "gemma":
        config = transformers.GemmaConfig(**common, head_dim=12, hidden_act="gelu_pytorch_tanh")
        config.hidden_activation = "gelu_pytorch_tanh"  # the key attncheck reads, as transformers >= 4.40 do
        return config
    raise SystemExit(f"unknown decoder family {family}")


def decoder_randomize(model, family):
    """Weights large enough that attention is far from uniform (the default init's 0.02 leaves it nearly so)."""
    generator = torch.Generator().manual_seed(20260401)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            noise = torch.randn(parameter.shape, generator=generator)
            if name.endswith("norm.weight"):
                # Gemma stores RMSNorm gains as gain - 1.
                parameter.copy_(0.2 * noise + (0.0 if family == "gemma" else 1.0))
            elif name.endswith(".bias"):
                parameter.copy_(0.3 * noise)
            else:
                parameter.copy_(0.35 * noise)


def float64_softmax():
    """4.38.2's eager attention takes its softmax in float32 whatever the model's dtype: kept in float64."""
    softmax = torch.nn.functional.softmax

    def float64(x, dim=None, _stacklevel=3, dtype=None):
        return softmax(x, dim=dim, dtype=None if x.dtype == torch.float64 else dtype)

    torch.nn.functional.softmax = float64


def decoder_float64(model, family):
    """4.38.2 computes the RMSNorms and the rotary frequencies in float32 even in a float64 model, which alone
    differs from float64 by 1e-7: the same formulas in float64. Llama's and Gemma's rotary embeddings take position
    ids; Mistral's and Qwen2's keep a cos/sin cache."""
    float64_softmax()
    for module in model.modules():
        if type(module).__name__.endswith("RMSNorm"):
            if family == "gemma":
                module.forward = lambda x, m=module: m._norm(x) * (1 + m.weight)
            else:
                module.forward = lambda x, m=module: m.weight * (
                    x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + m.variance_epsilon))
    for layer in model.model.layers:
        rotary = layer.self_attn.rotary_emb
        exact = 1.0 / (rotary.base ** (torch.arange(0, rotary.dim, 2, dtype=torch.float64) / rotary.dim))
        if family in ("gemma", "llama"):
            rotary.inv_freq = exact

            def forward(x, position_ids, seq_len=None, inv_freq=exact):
                angles = position_ids[:, :, None].to(torch.float64) * inv_freq[None, None, :]
                emb = torch.cat((angles, angles), dim=-1)
                return emb.cos().to(x.dtype), emb.sin().to(x.dtype)

            rotary.forward = forward
        else:
            rotary.inv_freq = exact
            rotary._set_cos_sin_cache(seq_len=rotary.max_seq_len_cached, device=exact.device, dtype=torch.float64)


def decoder_rotate(x, theta):
    """Half-split rotary embedding of x [n, d] at positions 0 .. n-1, in float64."""
    n, d = x.shape
    frequency = theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = torch.arange(n, dtype=torch.float64)[:, None] * frequency[None, :]
    cos, sin = torch.cos(angle), torch.sin(angle)
    a, b = x[:, : d // 2], x[:, d // 2:]
    return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)


def decoder_mask(n, window):
    """-inf where query i does not attend key j: j > i, or j <= i - window (transformers' sliding window)."""
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    masked = (j > i) | ((j <= i - window) if window else torch.zeros(n, n, dtype=torch.bool))
    return torch.zeros(n, n).masked_fill(masked, float("-inf"))


def decoder_scores(x, wq, bq, wk, bk, theta, window):
    d = wq.shape[0]
    q, k = decoder_rotate(x @ wq.T + bq, theta), decoder_rotate(x @ wk.T + bk, theta)
    return q @ k.T / math.sqrt(d) + decoder_mask(x.shape[0], window)


def decoder_head_attention(x, wq, bq, wk, bk, theta, window):
    return torch.softmax(decoder_scores(x, wq, bq, wk, bk, theta, window), dim=-1)


def decoder_norms(model, config, xs, metrics, window):
    """The probe's norms of the first and last head per layer against autograd: (failures, worst relative)."""
    H, G = config.num_attention_heads, config.num_key_value_heads
    d = getattr(config, "head_dim", None) or config.hidden_size // H
    by_key = {(m["layer"], m["head"]): m for m in metrics}
    failures, worst = 0, 0.0
    for l, layer in enumerate(model.model.layers):
        attention, x = layer.self_attn, xs[l]
        weight = lambda p: p.weight.detach()
        bias = lambda p, rows: p.bias.detach() if p.bias is not None else torch.zeros(rows)
        wq_all, bq_all = weight(attention.q_proj), bias(attention.q_proj, H * d)
        wk_all, bk_all = weight(attention.k_proj), bias(attention.k_proj, G * d)
        share = H // G
        wk0, bk0 = wk_all[:d], bk_all[:d]

        def group(w):
            return torch.stack([decoder_head_attention(x, wq_all[h * d:(h + 1) * d], bq_all[h * d:(h + 1) * d], w,
                                                       bk0, config.rope_theta, window) for h in range(share)])
        group_fro = float(torch.linalg.norm(torch.autograd.functional.jacobian(group, wk0, vectorize=True)))
        for head in sorted({0, H - 1}):
            g = head // share
            wq, bq = wq_all[head * d:(head + 1) * d], bq_all[head * d:(head + 1) * d]
            wk, bk = wk_all[g * d:(g + 1) * d], bk_all[g * d:(g + 1) * d]
            f = lambda wq_, wk_: decoder_head_attention(x, wq_, bq, wk_, bk, config.rope_theta, window)
            scores = decoder_scores(x, wq, bq, wk, bk, config.rope_theta, window)
            d_s = torch.nan_to_num(torch.autograd.functional.jacobian(lambda s: torch.softmax(s, dim=-1), scores))
            expected = {
                "softmax_fro": float(torch.linalg.norm(f(wq, wk))),
                "grad_fro": float(torch.linalg.norm(d_s)),
                "dWq_fro": float(torch.linalg.norm(torch.autograd.functional.jacobian(lambda w: f(w, wk), wq))),
                "dWk_fro": float(torch.linalg.norm(torch.autograd.functional.jacobian(lambda w: f(wq, w), wk))),
            }
            if g == 0:
                expected["dWk_group_fro"] = group_fro
            bad, rel = compare_norms(f"layer {l} head {head}", by_key[(l, head)], expected)
            failures, worst = failures + bad, max(worst, rel)
    return failures, worst


def decoder_check(family, binary, folder):
    config = decoder_config(family)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).double()
    decoder_randomize(model, family)
    out = os.path.join(folder, f"tiny-{family}")
    model.save_pretrained(out, safe_serialization=True)
    ids = torch.randint(0, config.vocab_size, (DECODER_TOKENS,), generator=torch.Generator().manual_seed(7))
    tokens = os.path.join(out, "tokens.txt")
    with open(tokens, "w") as f:
        f.write(" ".join(str(int(t)) for t in ids) + "\n")

    with tempfile.TemporaryDirectory() as tmp:
        dump = os.path.join(tmp, "attention.safetensors")
        run = subprocess.run([binary, "probe", out, "--tokens", tokens, "--json", "--attention-out", dump],
                             capture_output=True, text=True)
        if run.returncode != 0:
            print(f"FAIL: attncheck probe exited {run.returncode}: {run.stderr}")
            return 1
        probed = json.loads(run.stdout)
        dumped = read_safetensors(dump)

    model = transformers.AutoModelForCausalLM.from_pretrained(out, torch_dtype=torch.float64,
                                                              attn_implementation="eager")
    model.eval()
    decoder_float64(model, family)
    xs = []
    hooks = [layer.input_layernorm.register_forward_hook(lambda module, args, output: xs.append(output.detach()[0]))
             for layer in model.model.layers]
    with torch.no_grad():
        attentions = model(ids[None, :], output_attentions=True).attentions
    for hook in hooks:
        hook.remove()

    failures, worst, worst_x = 0, 0.0, 0.0
    for l, reference in enumerate(attentions):
        ref, ours = reference[0].numpy(), dumped[f"layer.{l}"]
        if ours.shape != ref.shape:
            print(f"FAIL: layer {l}: attention shape {ours.shape}, transformers {ref.shape}")
            return 1
        rel = float(np.max(np.abs(ours - ref) / np.where(ref == 0, 1.0, np.abs(ref))))
        rel_x = float(np.max(np.abs(dumped[f"inputs.{l}"] - xs[l].numpy()) / np.maximum(np.abs(xs[l].numpy()), 1e-3)))
        worst, worst_x = max(worst, rel), max(worst_x, rel_x)
        for what, value in (("attention", rel), ("X", rel_x)):
            if value > 1e-10:
                print(f"FAIL: layer {l}: {what} differs from transformers' by {value:.3e} relative > 1e-10")
                failures += 1
    window = getattr(config, "sliding_window", None) if family == "mistral" else None
    if window and window < DECODER_TOKENS:
        masked = int((dumped["layer.0"][0] == 0).sum())
        if masked != DECODER_TOKENS * (DECODER_TOKENS - 1) // 2 + (DECODER_TOKENS - window) * (DECODER_TOKENS - window + 1) // 2:
            print(f"FAIL: the sliding window of {window} leaves {masked} zero entries in layer 0 head 0")
            failures += 1
    print(f"{family} (transformers {transformers.__version__}): {len(attentions)} layers x "
          f"{config.num_attention_heads} heads, N = {DECODER_TOKENS}: attention max relative difference "
          f"{worst:.3e}, X {worst_x:.3e}")
    bad, worst_norm = decoder_norms(model, config, xs, probed["heads"], window)
    print(f"norms vs autograd (first and last head per layer, first key head's group): max relative difference "
          f"{worst_norm:.3e}")
    return 1 if failures + bad else 0


def main(argv):
    if len(argv) == 4 and argv[0] == "check" and argv[1] in ("mistral", "qwen2", "gemma"):
        os.makedirs(argv[3], exist_ok=True)
        return decoder_check(argv[1], argv[2], argv[3])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
