#!/usr/bin/python3
"""`attncheck probe` against float64 PyTorch references of decoder families that transformers 4.38.2 lacks.

  check FAMILY BIN DIR     writes a tiny random FAMILY checkpoint (config.json + safetensors, the tensor names
                           as transformers saves them) under DIR/tiny-FAMILY, runs `BIN probe` on it with --json
                           --attention-out, and checks every layer's and head's attention matrix and the rows the
                           projections act on (X) against the reference here, every entry within 1e-10 relative,
                           and for the first and last head of every layer ||A||_F, ||grad softmax||_F,
                           ||dA/dW_Q||_F, ||dA/dW_K||_F, the first key head's group ||dA/dW_K||_F, and the
                           x^3/sqrt(N) map's value, ||dA/dS||, ||dA/dW_Q|| and ||dA/dW_K|| against autograd
                           Jacobians through the reference (relative 1e-9).

Families, each written from transformers' modeling code (models/qwen3/modeling_qwen3.py,
gemma2/modeling_gemma2.py, gemma3/modeling_gemma3.py):
  qwen3            Llama's decoder with RMSNorms (gain = weight) over each head's queries and keys before the
                   rotation; saved as Qwen3ForCausalLM (with lm_head).
  gemma2           Gemma's decoder (sqrt(hidden) embeddings, gains 1 + weight, GeGLU) with scores scaled by
                   query_pre_attn_scalar^-1/2, soft-capped logits cap tanh(S / cap), a sliding window on the even
                   layers, and RMSNorms on the attention's and the MLP's outputs; saved as the base Gemma2Model
                   (no "model." prefix, no head).
  gemma3_text      Gemma 2's block without the cap, with q/k norms (gain 1 + weight), a window on every layer but
                   each sliding_window_pattern-th, the sliding layers' rotary base rope_local_base_freq and the
                   others' rope_theta with a linear rope_scaling factor; saved as Gemma3ForCausalLM (tied head).
  gemma3           the same text model inside an image-and-text "gemma3" config (text_config, layer_types given
                   as a list, tensors under language_model.model.).

Run with /usr/bin/python3 (PyTorch and NumPy). Exit 0 pass, 1 mismatch, 77 skipped (PyTorch or NumPy absent).
"""
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

SKIP = 77
try:
    import numpy as np
    import torch
except ImportError as error:
    print(f"SKIPPED: {error} (needs PyTorch and NumPy)")
    sys.exit(SKIP)

torch.set_default_dtype(torch.float64)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_reference import compare_norms, read_safetensors, write_safetensors  # noqa: E402

TOKENS = 12


def family_config(family):
    common = dict(vocab_size=50, hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=12, max_position_embeddings=64, rms_norm_eps=1e-6,
                  rope_theta=1000.0, attention_bias=False, torch_dtype="float64")
    if family == "qwen3":
        return dict(common, model_type="qwen3", architectures=["Qwen3ForCausalLM"], hidden_act="silu",
                    use_sliding_window=False, sliding_window=None, rope_scaling=None, tie_word_embeddings=False)
    gemma = dict(common, hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=20, sliding_window=5,
                 final_logit_softcapping=30.0, tie_word_embeddings=True)
    if family == "gemma2":
        return dict(gemma, model_type="gemma2", architectures=["Gemma2Model"], attn_logit_softcapping=6.0)
    text = dict(gemma, model_type="gemma3_text", architectures=["Gemma3ForCausalLM"], attn_logit_softcapping=None,
                final_logit_softcapping=None, sliding_window_pattern=3, rope_local_base_freq=100.0,
                rope_scaling={"rope_type": "linear", "factor": 4.0})
    if family == "gemma3_text":
        return text
    if family == "gemma3":
        text = dict(text, layer_types=["sliding_attention", "full_attention", "sliding_attention"])
        del text["sliding_window_pattern"], text["architectures"]
        return {"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"], "text_config": text,
                "vision_config": {"model_type": "siglip_vision_model"}}
    raise SystemExit(f"unknown family {family}")


def text_config(config):
    return config.get("text_config", config)


def is_gemma(config):
    return text_config(config)["model_type"].startswith("gemma")


def has_sandwich_norms(config):
    return text_config(config)["model_type"] in ("gemma2", "gemma3_text")


def has_head_norms(config):
    return text_config(config)["model_type"] in ("qwen3", "gemma3_text")


def tensor_prefix(family):
    return {"qwen2": "model.", "qwen3": "model.", "gemma": "model.", "gemma2": "", "gemma3_text": "model.",
            "gemma3": "language_model.model.", "phi3": "model."}[family]


def random_weights(config, family):
    """Weights large enough that attention is far from uniform; Gemma's gains stored as gain - 1."""
    c = text_config(config)
    D, H, G, d, I, V = (c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"],
                        c["intermediate_size"], c["vocab_size"])
    generator = torch.Generator().manual_seed(20261126)
    randn = lambda *shape, scale=0.35: scale * torch.randn(*shape, generator=generator)
    gain = lambda n: randn(n, scale=0.2) + (0.0 if is_gemma(config) else 1.0)
    p = tensor_prefix(family)
    w = {f"{p}embed_tokens.weight": randn(V, D, scale=1.0), f"{p}norm.weight": gain(D)}
    for l in range(c["num_hidden_layers"]):
        q = f"{p}layers.{l}."
        w.update({q + "input_layernorm.weight": gain(D), q + "post_attention_layernorm.weight": gain(D),
                  q + "self_attn.q_proj.weight": randn(H * d, D), q + "self_attn.k_proj.weight": randn(G * d, D),
                  q + "self_attn.v_proj.weight": randn(G * d, D), q + "self_attn.o_proj.weight": randn(D, H * d),
                  q + "mlp.gate_proj.weight": randn(I, D), q + "mlp.up_proj.weight": randn(I, D),
                  q + "mlp.down_proj.weight": randn(D, I)})
        if has_head_norms(config):
            w.update({q + "self_attn.q_norm.weight": gain(d), q + "self_attn.k_norm.weight": gain(d)})
        if c.get("attention_bias"):
            w.update({q + f"self_attn.{name}_proj.bias": randn(rows, scale=0.3)
                      for name, rows in (("q", H * d), ("k", G * d), ("v", G * d))})
        if has_sandwich_norms(config):
            w.update({q + "pre_feedforward_layernorm.weight": gain(D),
                      q + "post_feedforward_layernorm.weight": gain(D)})
    if family == "qwen3":
        w["lm_head.weight"] = randn(V, D)
    return w


# --- the architectures ----------------------------------------------------------------------------------------

def rms_norm(x, weight, eps, gemma):
    """Qwen3RMSNorm: weight * x / rms; Gemma2RMSNorm, Gemma3RMSNorm: (1 + weight) * x / rms."""
    normalized = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return normalized * ((1.0 + weight) if gemma else weight)


def rotate(x, base, factor=1.0):
    """apply_rotary_pos_emb with rotate_half at positions 0 .. n-1 (inv_freq / factor: linear rope scaling)."""
    n, d = x.shape[-2], x.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float64) / d)) / factor
    angles = torch.arange(n, dtype=torch.float64)[:, None] * inv_freq[None, :]
    emb = torch.cat((angles, angles), dim=-1)
    half = torch.cat((-x[..., d // 2:], x[..., : d // 2]), dim=-1)
    return x * emb.cos() + half * emb.sin()


def layer_plan(config):
    """Per layer: (sliding window or None, rotary base, linear factor), as each family's attention reads them."""
    c = text_config(config)
    plan = []
    for l in range(c["num_hidden_layers"]):
        if c["model_type"] == "qwen3":
            plan.append((None, c["rope_theta"], 1.0))
        elif c["model_type"] == "gemma2":
            plan.append((c["sliding_window"] if l % 2 == 0 else None, c["rope_theta"], 1.0))
        else:
            if "layer_types" in c:
                sliding = c["layer_types"][l] == "sliding_attention"
            else:
                sliding = bool((l + 1) % c["sliding_window_pattern"])
            factor = c["rope_scaling"]["factor"] if c.get("rope_scaling") else 1.0
            plan.append((c["sliding_window"], c["rope_local_base_freq"], 1.0) if sliding
                        else (None, c["rope_theta"], factor))
    return plan


def attention_mask(n, window):
    """0 where query i attends key j (j <= i, and j > i - window in a sliding layer), -inf elsewhere."""
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    masked = j > i
    if window is not None:
        masked = masked | (j <= i - window)
    return torch.zeros(n, n).masked_fill(masked, float("-inf"))


class HeadMaps:
    """One layer's map from X and one head's W_Q, W_K slices to its scores, logits and attention."""

    def __init__(self, config, weights, prefix, l, plan):
        c = text_config(config)
        self.c, self.gemma, self.plan = c, is_gemma(config), plan
        self.d = c["head_dim"]
        self.scaling = (c["query_pre_attn_scalar"] ** -0.5) if self.gemma else self.d ** -0.5
        self.cap = c.get("attn_logit_softcapping") if c["model_type"] != "qwen3" else None
        q = f"{prefix}layers.{l}.self_attn."
        self.q_norm = weights.get(q + "q_norm.weight")
        self.k_norm = weights.get(q + "k_norm.weight")

    def rows(self, x, w, norm):
        window, base, factor = self.plan
        y = x @ w.T
        if norm is not None:
            y = rms_norm(y, norm, self.c["rms_norm_eps"], self.gemma)
        return rotate(y, base, factor)

    def scores(self, x, wq, wk):
        return (self.rows(x, wq, self.q_norm) @ self.rows(x, wk, self.k_norm).T) * self.scaling

    def logits(self, scores):
        return scores if not self.cap else torch.tanh(scores / self.cap) * self.cap

    def mask(self, n):
        return attention_mask(n, self.plan[0])

    def attention(self, x, wq, wk):
        return torch.softmax(self.logits(self.scores(x, wq, wk)) + self.mask(x.shape[0]), dim=-1)


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def forward(config, weights, family, ids):
    """Per layer: the rows the projections act on, the layer's head maps and its attention [heads, N, N]."""
    c = text_config(config)
    p, gemma = tensor_prefix(family), is_gemma(config)
    D, H, G, d = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    eps = c["rms_norm_eps"]
    norm = lambda x, name: rms_norm(x, weights[name + ".weight"], eps, gemma)
    h = weights[p + "embed_tokens.weight"][ids]
    if gemma:
        h = h * torch.tensor(D ** 0.5)
    out = []
    for l, plan in enumerate(layer_plan(config)):
        q = f"{p}layers.{l}."
        maps = HeadMaps(config, weights, p, l, plan)
        x = norm(h, q + "input_layernorm")
        wq, wk, wv = (weights[q + f"self_attn.{n}_proj.weight"] for n in "qkv")
        heads = []
        context = []
        for head in range(H):
            g = head // (H // G)
            a = maps.attention(x, wq[head * d:(head + 1) * d], wk[g * d:(g + 1) * d])
            heads.append(a)
            context.append(a @ (x @ wv[g * d:(g + 1) * d].T))
        attended = torch.cat(context, dim=-1) @ weights[q + "self_attn.o_proj.weight"].T
        if gemma:
            attended = norm(attended, q + "post_attention_layernorm")
        h = h + attended
        m = norm(h, q + ("pre_feedforward_layernorm" if gemma else "post_attention_layernorm"))
        gate = m @ weights[q + "mlp.gate_proj.weight"].T
        gate = gelu_tanh(gate) if gemma else torch.nn.functional.silu(gate)
        mlp = (gate * (m @ weights[q + "mlp.up_proj.weight"].T)) @ weights[q + "mlp.down_proj.weight"].T
        if gemma:
            mlp = norm(mlp, q + "post_feedforward_layernorm")
        h = h + mlp
        out.append((x, maps, torch.stack(heads)))
    return out


# --- the check ------------------------------------------------------------------------------------------------

def expected_norms(x, maps, wq, wk, group_wq):
    """Autograd's norms for one head (and, given the query slices of key head 0's group, the group's dW_K)."""
    n = x.shape[0]
    mask = maps.mask(n)
    attended = torch.isfinite(mask)
    f = lambda wq_, wk_: maps.attention(x, wq_, wk_)
    # x^3 / sqrt(N) on the uncapped scores, zero where masked.
    poly = lambda wq_, wk_: torch.where(attended, maps.scores(x, wq_, wk_).pow(3) / math.sqrt(n), torch.zeros(n, n))
    jac = lambda fn, at: float(torch.linalg.norm(torch.autograd.functional.jacobian(fn, at, vectorize=True)))
    scores = maps.scores(x, wq, wk)
    logits = maps.logits(scores)
    d_logits = torch.nan_to_num(torch.autograd.functional.jacobian(lambda s: torch.softmax(s + mask, dim=-1), logits))
    d_poly = torch.where(attended, 3 * scores.pow(2) / math.sqrt(n), torch.zeros(n, n))
    expected = {
        "softmax_fro": float(torch.linalg.norm(f(wq, wk))),
        "grad_fro": float(torch.linalg.norm(d_logits)),
        "dWq_fro": jac(lambda w: f(w, wk), wq),
        "dWk_fro": jac(lambda w: f(wq, w), wk),
        "poly3_scaled_fro": float(torch.linalg.norm(poly(wq, wk))),
        "poly3_scaled_grad_fro": float(torch.linalg.norm(d_poly)),
        "poly3_scaled_dWq_fro": jac(lambda w: poly(w, wk), wq),
        "poly3_scaled_dWk_fro": jac(lambda w: poly(wq, w), wk),
    }
    if group_wq is not None:
        expected["dWk_group_fro"] = jac(lambda w: torch.stack([f(q, w) for q in group_wq]), wk)
    return expected


def check(family, binary, folder):
    config = family_config(family)
    c = text_config(config)
    weights = random_weights(config, family)
    out = os.path.join(folder, f"tiny-{family}")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    write_safetensors(os.path.join(out, "model.safetensors"),
                      {name: (t.numpy(), "F64") for name, t in weights.items()})
    ids = torch.randint(0, c["vocab_size"], (TOKENS,), generator=torch.Generator().manual_seed(7))
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

    layers = forward(config, weights, family, ids)
    failures, worst, worst_x = 0, 0.0, 0.0
    for l, (x, maps, attention) in enumerate(layers):
        ref, ours = attention.numpy(), dumped[f"layer.{l}"]
        if ours.shape != ref.shape:
            print(f"FAIL: layer {l}: attention shape {ours.shape}, reference {ref.shape}")
            return 1
        rel = float(np.max(np.abs(ours - ref) / np.where(ref == 0, 1.0, np.abs(ref))))
        rel_x = float(np.max(np.abs(dumped[f"inputs.{l}"] - x.numpy()) / np.maximum(np.abs(x.numpy()), 1e-3)))
        worst, worst_x = max(worst, rel), max(worst_x, rel_x)
        for what, value in (("attention", rel), ("X", rel_x)):
            if value > 1e-10:
                print(f"FAIL: layer {l}: {what} differs from the reference by {value:.3e} relative > 1e-10")
                failures += 1
        window = maps.plan[0]
        zeros = int((ours[0] == 0).sum())
        expected_zeros = int((~torch.isfinite(maps.mask(TOKENS))).sum())
        if zeros != expected_zeros or (window is not None and zeros == TOKENS * (TOKENS - 1) // 2):
            print(f"FAIL: layer {l} (window {window}): {zeros} zero entries in head 0, the mask has {expected_zeros}")
            failures += 1
    print(f"{family}: {len(layers)} layers x {c['num_attention_heads']} heads, N = {TOKENS}: attention max relative "
          f"difference {worst:.3e}, X {worst_x:.3e}")

    H, G, d = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    share = H // G
    by_key = {(m["layer"], m["head"]): m for m in probed["heads"]}
    worst_norm, checked = 0.0, 0
    for l, (x, maps, _) in enumerate(layers):
        p = f"{tensor_prefix(family)}layers.{l}.self_attn."
        wq_all, wk_all = weights[p + "q_proj.weight"], weights[p + "k_proj.weight"]
        for head in sorted({0, H - 1}):
            g = head // share
            group = [wq_all[h * d:(h + 1) * d] for h in range(share)] if g == 0 else None
            expected = expected_norms(x, maps, wq_all[head * d:(head + 1) * d], wk_all[g * d:(g + 1) * d], group)
            bad, rel = compare_norms(f"layer {l} head {head}", by_key[(l, head)], expected)
            failures, worst_norm, checked = failures + bad, max(worst_norm, rel), checked + len(expected)
            if by_key[(l, head)]["grad_fro"] > math.sqrt(TOKENS) / 2 * (1 + 1e-12):
                print(f"FAIL: layer {l} head {head}: ||grad softmax|| above sqrt(N)/2")
                failures += 1
    print(f"norms vs autograd ({checked} values: first and last head per layer, first key head's group): max "
          f"relative difference {worst_norm:.3e}")
    if family == "gemma3_text":
        failures += newer_rope_keys_read_alike(binary, out, config, tokens, probed["heads"])
    return 1 if failures else 0


def newer_rope_keys_read_alike(binary, out, config, tokens, rows):
    """transformers >= 5 writes Gemma 3's rotary settings as one rope_parameters object per kind of layer: the same
    checkpoint with its config written that way gives the same rows."""
    newer = dict(config)
    full = {"rope_type": "linear", "rope_theta": newer.pop("rope_theta"), "factor": newer.pop("rope_scaling")["factor"]}
    newer["rope_parameters"] = {"full_attention": full,
                                "sliding_attention": {"rope_type": "default",
                                                      "rope_theta": newer.pop("rope_local_base_freq")}}
    folder = out + "-rope-parameters"
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(newer, f, indent=1)
    shutil.copyfile(os.path.join(out, "model.safetensors"), os.path.join(folder, "model.safetensors"))
    run = subprocess.run([binary, "probe", folder, "--tokens", tokens, "--json"], capture_output=True, text=True)
    if run.returncode != 0:
        print(f"FAIL: with rope_parameters, attncheck probe exited {run.returncode}: {run.stderr}")
        return 1
    if json.loads(run.stdout)["heads"] != rows:
        print("FAIL: the config's rope_parameters give other rows than rope_theta, rope_local_base_freq, rope_scaling")
        return 1
    print("rope_parameters per kind of layer (transformers >= 5): the same rows")
    return 0


def main(argv):
    if len(argv) == 4 and argv[0] == "check" and argv[1] in ("qwen3", "gemma2", "gemma3_text", "gemma3"):
        os.makedirs(argv[3], exist_ok=True)
        return check(argv[1], argv[2], argv[3])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
