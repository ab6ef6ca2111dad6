"""attncheck.torch on TransformerLens's HookedTransformer (transformer_lens 1.19.0, scripts/pyenv's
"transformer_lens" set): Attention and GroupedQueryAttention (W_Q, W_K as [heads, d_model, d_head] parameters),
causal, bidirectional and GPT-Neo's local attention, rotary positions in GPT-NeoX's halves and GPT-J's adjacent
pairs (partial rotary_dim too), padding; what is refused with its reason (ALiBi, per-head inputs).

The reference is the model itself: tiny random float64 HookedTransformers, their own attention patterns (each
block's hook_pattern) for ||A||_F and ||grad softmax||_F, and autograd Jacobians of those patterns through the
attention module's own forward (functional_call) in its W_Q and W_K for ||dA/dW_Q||_F and ||dA/dW_K||_F. Every head
of every layer agrees to 1e-10 relative.
"""
import warnings

import pytest

torch = pytest.importorskip("torch")
transformer_lens = pytest.importorskip("transformer_lens")

import attncheck.torch  # noqa: E402
from conftest import assert_recorder_gives_probes_rows, assert_rows_match, calls_of  # noqa: E402
from transformer_lens import HookedTransformer, HookedTransformerConfig  # noqa: E402

torch.set_num_threads(1)
RELATIVE = 1e-10
BASE = dict(n_layers=2, d_model=16, n_heads=4, d_head=4, n_ctx=12, d_vocab=30, act_fn="gelu", dtype=torch.float64,
            seed=0, normalization_type="LN")

CONFIGS = {
    "gpt2-like": dict(),
    "bidirectional": dict(attention_dir="bidirectional"),
    "local": dict(attn_types=["global", "local"], window_size=3),
    "grouped": dict(n_key_value_heads=2),
    "rotary-neox": dict(positional_embedding_type="rotary", rotary_dim=4),
    "rotary-partial": dict(positional_embedding_type="rotary", rotary_dim=2),
    "rotary-gptj": dict(positional_embedding_type="rotary", rotary_dim=4, rotary_adjacent_pairs=True),
    "no-scale": dict(use_attn_scale=False),
}


def _model(name):
    model = HookedTransformer(HookedTransformerConfig(**BASE, **CONFIGS[name])).eval()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():  # query and key weights of order one: attention far from uniform
        for parameter_name, parameter in model.named_parameters():
            if any(key in parameter_name for key in ("W_Q", "W_K", "b_Q", "b_K")):
                parameter.copy_(torch.randn(parameter.shape, generator=generator, dtype=torch.float64) * 0.6)
    return model


def _key_name(module):
    return "_W_K" if hasattr(module, "_W_K") else "W_K"


def _expected(model, tokens):
    calls = calls_of([block.attn for block in model.blocks], lambda: model(tokens))
    expected = []
    for layer, (module, args, kwargs) in enumerate(calls):
        names = ["W_Q", _key_name(module)]
        weights = tuple(dict(module.named_parameters())[name].detach().clone() for name in names)
        seen = []
        hook = module.hook_pattern.register_forward_hook(lambda _m, _inputs, out: seen.append(out))

        def attention(*ws):
            seen.clear()
            torch.nn.utils.stateless.functional_call(module, dict(zip(names, ws)), args, kwargs)
            return seen[-1][0]  # the first sequence's (heads, N, N)

        try:
            jacobians = torch.autograd.functional.jacobian(attention, weights)
            with torch.no_grad():
                a = attention(*weights)
        finally:
            hook.remove()
        group = module.cfg.n_heads // weights[1].shape[0]
        for h in range(module.cfg.n_heads):
            rows = a[h]
            softmax_jacobian = torch.autograd.functional.jacobian(lambda s: torch.softmax(s, dim=-1),
                                                                  rows.clamp_min(1e-300).log())
            expected.append({"layer": layer, "head": h, "N": rows.shape[-1], "softmax_fro": float(rows.norm()),
                             "grad_fro": float(softmax_jacobian.norm()),
                             "dWq_fro": float(jacobians[0][h][..., h, :, :].norm()),
                             # a key head shared by `group` query heads: this head's pattern in the shared weights
                             "dWk_fro": float(jacobians[1][h][..., h // group, :, :].norm())})
    return expected


@pytest.mark.parametrize("name", CONFIGS)
def test_every_head_equals_the_models_own_pattern_and_autograd(name):
    model = _model(name)
    tokens = torch.randint(0, 30, (2, 10), generator=torch.Generator().manual_seed(2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every layer recognised and measured: not one skipped
        rows = attncheck.torch.probe(model, tokens)[0]
    worst = assert_rows_match(rows, _expected(model, tokens), RELATIVE)
    # Not uniform attention, where every norm is trivially 1: the weights make the rows differ.
    assert max(row["softmax_over_sqrt_N"] for row in rows) > 1.5 / rows[0]["N"] ** 0.5
    print(f"{name}: {len(rows)} heads, N = {rows[0]['N']}, largest relative difference {worst:.2e}")


class _PaddedCall(torch.nn.Module):
    """One TransformerLens attention block called with a padding mask, as HookedTransformer calls it when its
    tokenizer pads on the left (1.19 reads no attention_mask of the caller's)."""

    def __init__(self, attention, mask):
        super().__init__()
        self.attention, self.mask = attention, mask

    def forward(self, x):
        return self.attention(query_input=x, key_input=x, value_input=x, attention_mask=self.mask)


def test_padding_leaves_the_padded_keys_out():
    model = _model("gpt2-like")
    x = torch.randn(1, 10, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    mask = torch.ones(1, 10, dtype=torch.long)
    mask[0, :3] = 0  # left padding: the first three positions are not tokens
    wrapper = _PaddedCall(model.blocks[0].attn, mask)
    rows = attncheck.torch.probe(wrapper, x)
    assert {row["N"] for row in rows} == {7}
    seen = []
    hook = wrapper.attention.hook_pattern.register_forward_hook(lambda _m, _inputs, out: seen.append(out))
    try:
        with torch.no_grad():
            wrapper(x)
    finally:
        hook.remove()
    pattern = seen[0][0][:, 3:, 3:]  # the tokens' rows and keys; the padded keys have probability 0 in them
    assert float(seen[0][0][:, 3:, :3].abs().max()) == 0.0
    for row, a in zip(rows, pattern):
        assert row["softmax_fro"] == pytest.approx(float(a.norm()), rel=RELATIVE)


def test_the_recorder_in_training_gives_the_rows_probe_gives():
    model = _model("rotary-neox")
    tokens = torch.randint(0, 30, (2, 10), generator=torch.Generator().manual_seed(4))
    assert_recorder_gives_probes_rows(model, tokens, collapse_threshold=None)


@pytest.mark.parametrize("config, reason", [
    (dict(positional_embedding_type="alibi"), "positional_embedding_type 'alibi'"),
    (dict(use_split_qkv_input=True), "per-head query and key inputs"),
])
def test_what_cannot_be_measured_exactly_is_refused_with_its_reason(config, reason):
    model = HookedTransformer(HookedTransformerConfig(**BASE, **config))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rows = attncheck.torch.probe(model, torch.randint(0, 30, (1, 6)))
    assert rows == []
    messages = [str(w.message) for w in caught]
    assert sum(reason in m for m in messages) == 2, messages  # one warning per layer, naming why


def test_hooks_that_may_change_the_scores_are_refused():
    model = _model("gpt2-like")
    model.blocks[1].attn.hook_attn_scores.add_hook(lambda scores, hook: scores * 2)  # activation patching
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rows = attncheck.torch.probe(model, torch.randint(0, 30, (1, 6)))
    assert {row["layer"] for row in rows} == {0}  # layer 1 refused, layer 0 measured
    assert any("hook_attn_scores has hooks" in str(w.message) for w in caught), [str(w.message) for w in caught]
