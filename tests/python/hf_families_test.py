"""attncheck.torch on the transformers families whose queries and keys come fused or partly rotated (4.38.2,
scripts/pyenv's "transformers" set): Phi (q_proj/k_proj, half of each head rotated, also under dynamic rotary
scaling), GPT-NeoX (one query_key_value laid out head by head, rotary_pct of each head rotated), Persimmon (the same
layout, partial_rotary_factor, and its LayerNorms on queries and keys) and Falcon in its three layouts (head by head, multi-query, the new decoder
architecture's key groups). What these families can do that is not measured is refused with its reason.

The reference is the model itself: tiny random float64 models built by transformers from their config classes,
their own attention probabilities (output_attentions, eager) for ||A||_F and ||grad softmax||_F, and autograd
Jacobians of those probabilities through the attention module's own forward (torch.nn.utils.stateless
.functional_call) in its own projection weights for ||dA/dW_Q||_F, ||dA/dW_K||_F and the key group's. Every head of
every layer agrees to 1e-10 relative, rotated ones included: 4.38.2 computes the rotary frequencies, and Phi its
scores, in float32 even in a float64 model, so those are put back in float64 (below), after which both sides rotate
by the same float64 angles and only rounding separates them (measured: at most 1.4e-14).
"""
import json
import os
import sys
import warnings

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import attncheck.torch  # noqa: E402
from conftest import assert_rows_match, calls_of, run_program  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "probes"))
# hf_decoder_reference also makes float64 the default dtype, in which 4.38.2 builds its causal masks.
from hf_decoder_reference import decoder_float64, float64_softmax  # noqa: E402
from hf_reference import encoder_randomize  # noqa: E402

transformers.logging.set_verbosity_error()
torch.set_num_threads(1)
TOKENS = [3, 5, 17, 33, 8, 21, 9, 38, 12, 30, 2]
RELATIVE = 1e-10
COMMON = dict(vocab_size=50, num_hidden_layers=2, max_position_embeddings=64)

CONFIGS = {
    "phi": lambda: transformers.PhiConfig(**COMMON, hidden_size=32, intermediate_size=48, num_attention_heads=4,
                                          partial_rotary_factor=0.5, rope_theta=1000.0),
    # Heads of 16 with rotary_pct 0.25: 4 coordinates of each head rotated (2 pairs), 12 not.
    "gpt-neox": lambda: transformers.GPTNeoXConfig(**COMMON, hidden_size=48, intermediate_size=64,
                                                   num_attention_heads=3, rotary_pct=0.25, rotary_emb_base=1000),
    "gpt-neox-sequential": lambda: transformers.GPTNeoXConfig(**COMMON, hidden_size=48, intermediate_size=64,
                                                              num_attention_heads=3, rotary_pct=0.5,
                                                              rotary_emb_base=1000, use_parallel_residual=False),
    "phi-dynamic": lambda: transformers.PhiConfig(**COMMON, hidden_size=32, intermediate_size=48,
                                                  num_attention_heads=4, partial_rotary_factor=0.5, rope_theta=1000.0,
                                                  rope_scaling={"type": "dynamic", "factor": 2.0}),
    "persimmon": lambda: transformers.PersimmonConfig(**COMMON, hidden_size=32, intermediate_size=48,
                                                      num_attention_heads=4, partial_rotary_factor=0.5,
                                                      rope_theta=1000.0, qk_layernorm=False),
    # Its LayerNorms over each head's queries and keys (q_layernorm, k_layernorm: centred, with a bias).
    "persimmon-qk-layernorm": lambda: transformers.PersimmonConfig(**COMMON, hidden_size=32, intermediate_size=48,
                                                                   num_attention_heads=4, partial_rotary_factor=0.5,
                                                                   rope_theta=1000.0, qk_layernorm=True),
    "falcon": lambda: transformers.FalconConfig(**COMMON, hidden_size=32, num_attention_heads=4, bias=True,
                                                multi_query=False, new_decoder_architecture=False, rope_theta=1000.0),
    "falcon-multi-query": lambda: transformers.FalconConfig(**COMMON, hidden_size=32, num_attention_heads=4,
                                                            multi_query=True, new_decoder_architecture=False,
                                                            rope_theta=1000.0),
    "falcon-new-decoder": lambda: transformers.FalconConfig(**COMMON, hidden_size=32, num_attention_heads=4,
                                                            num_kv_heads=2, new_decoder_architecture=True,
                                                            bias=True, rope_theta=1000.0),
}


class _Float64Torch:
    """modeling_phi's `torch` with float32 read as float64: 4.38.2's Phi casts queries and keys to float32 before
    their product (against float16 overflow), which in a float64 model rounds the scores to float32."""
    float32 = torch.float64

    def __getattr__(self, name):
        return getattr(torch, name)


def _model(family, monkeypatch):
    config = CONFIGS[family]()
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager").double()
    model = encoder_randomize(model, 3)  # weights of order one: attention far from uniform
    float64_softmax()
    if family.startswith("phi"):
        monkeypatch.setattr(transformers.models.phi.modeling_phi, "torch", _Float64Torch())
    for module in model.modules():
        if type(module).__name__.endswith("RotaryEmbedding"):  # 4.38.2 keeps float32 frequencies: float64 ones
            module.inv_freq = 1.0 / module.base ** (torch.arange(0, module.dim, 2, dtype=torch.float64) / module.dim)
            module._set_cos_sin_cache(seq_len=module.max_seq_len_cached, device="cpu", dtype=torch.float64)
    return model.eval()


def _attention_layers(model):
    """The attention modules, and per query head the projection rows of its query and of its key head, as the
    model's forward lays them out: (name of the weight, rows) each."""
    if isinstance(model, transformers.PhiForCausalLM):
        layers = [layer.self_attn for layer in model.model.layers]
        d = layers[0].head_dim
        per_head = [(("q_proj.weight", torch.arange(h * d, (h + 1) * d)),
                     ("k_proj.weight", torch.arange(h * d, (h + 1) * d))) for h in range(layers[0].num_heads)]
        return layers, per_head
    if isinstance(model, transformers.GPTNeoXForCausalLM):
        layers = [layer.attention for layer in model.gpt_neox.layers]
        d = layers[0].head_size  # GPTNeoXAttention.forward views the fused output as (heads, 3 x head_size)
        per_head = [(("query_key_value.weight", torch.arange(3 * h * d, 3 * h * d + d)),
                     ("query_key_value.weight", torch.arange(3 * h * d + d, 3 * h * d + 2 * d)))
                    for h in range(layers[0].num_attention_heads)]
        return layers, per_head
    if isinstance(model, transformers.PersimmonForCausalLM):
        layers = [layer.self_attn for layer in model.model.layers]
    else:
        layers = [block.self_attention for block in model.transformer.h]
    # The layer's own _split_heads, applied to the row numbers, says which rows are whose.
    attention = layers[0]
    rows = torch.arange(attention.query_key_value.out_features, dtype=torch.float64)[None, None]
    query, key, _ = attention._split_heads(rows)
    query, key = query[0, 0].long(), key[0, 0].long()
    per_head = [(("query_key_value.weight", query[h]),
                 ("query_key_value.weight", key[h if key.shape[0] == query.shape[0] else 0]))
                for h in range(attention.num_heads)]
    return layers, per_head


def _own_attention_and_jacobians(model, layers, ids):
    """Per layer: the model's own attention probabilities (heads, N, N) and their Jacobians (heads, N, N, rows, D)
    in every projection weight of the layer, through the module's own forward at the call the model made."""
    calls = calls_of(layers, lambda: model(ids[None], output_attentions=True, use_cache=False))
    results = []
    for module, args, kwargs in calls:
        names = [name for name in ("q_proj.weight", "k_proj.weight", "query_key_value.weight")
                 if name in dict(module.named_parameters())]
        weights = tuple(dict(module.named_parameters())[name].detach().clone() for name in names)

        def attention(*ws):
            out = torch.nn.utils.stateless.functional_call(module, dict(zip(names, ws)), args, kwargs)
            return next(o for o in out if isinstance(o, torch.Tensor) and o.dim() == 4)[0]

        jacobians = torch.autograd.functional.jacobian(attention, weights, vectorize=True)
        with torch.no_grad():
            results.append((attention(*weights), dict(zip(names, jacobians))))
    return results


def _softmax_jacobian_norm(a):
    """||grad softmax||_F at the model's own A: autograd at log A, which softmax maps back to A (rows are
    shift-invariant; masked entries are -inf and contribute nothing)."""
    jacobian = torch.autograd.functional.jacobian(lambda s: torch.softmax(s, dim=-1), a.log())
    return float(torch.nan_to_num(jacobian).norm())


def _expected(model, ids):
    layers, per_head = _attention_layers(model)
    expected = []
    for l, (a, jacobians) in enumerate(_own_attention_and_jacobians(model, layers, ids)):
        group_sq = {}
        for h, ((q_name, q_rows), (k_name, k_rows)) in enumerate(per_head):
            d_wq = jacobians[q_name][h][..., q_rows, :].norm()
            d_wk = jacobians[k_name][h][..., k_rows, :].norm()
            # Nothing else of the projections moves this head's A: the rows assigned are all its queries and keys.
            everything = sum(float(j[h].norm()) ** 2 for j in jacobians.values())
            assert everything == pytest.approx(float(d_wq) ** 2 + float(d_wk) ** 2, rel=1e-12)
            group = tuple(k_rows.tolist())
            group_sq[group] = group_sq.get(group, 0.0) + float(d_wk) ** 2
            expected.append({"layer": l, "head": h, "N": len(ids), "softmax_fro": float(a[h].norm()),
                             "grad_fro": _softmax_jacobian_norm(a[h]), "dWq_fro": float(d_wq),
                             "dWk_fro": float(d_wk), "_group": group})
        for row in expected[-len(per_head):]:  # a key head's weights move every query head of its group
            row["dWk_group_fro"] = group_sq[row.pop("_group")] ** 0.5
    return expected


@pytest.mark.parametrize("family", CONFIGS)
def test_every_head_equals_the_models_own_attention_and_autograd(family, monkeypatch):
    model = _model(family, monkeypatch)
    ids = torch.tensor(TOKENS)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every layer recognised and measured: not one skipped
        rows = attncheck.torch.probe(model, ids)
    expected = _expected(model, ids)
    worst = assert_rows_match(rows, expected, RELATIVE)
    heads = model.config.num_attention_heads
    assert [(row["layer"], row["head"]) for row in rows] == [(l, h) for l in range(2) for h in range(heads)]
    print(f"{family}: {len(rows)} heads, largest relative difference {worst:.2e}")


@pytest.mark.parametrize("family", ("gpt-neox", "falcon-new-decoder"))
def test_the_recorder_in_training_and_a_padded_batch_give_the_same_rows(family, monkeypatch, tmp_path):
    """The recorder on a training step records what probe() measures on the same weights; a right-padded batch
    (the models' own padding masks) gives the rows of the shorter sequence alone."""
    model = _model(family, monkeypatch)
    ids = torch.tensor(TOKENS)
    alone = attncheck.torch.probe(model, ids)
    model.train()
    log = tmp_path / "attncheck-probe.jsonl"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with attncheck.torch.AttentionRecorder(model, every=1, out=log) as recorder:
            model(input_ids=ids[None], labels=ids[None]).loss.backward()
            recorder.step()
    lines = [json.loads(line) for line in open(log)]
    keys = ("layer", "head", "softmax_fro", "grad_fro", "dWq_fro", "dWk_fro")
    assert_rows_match(lines, [{key: row[key] for key in keys} for row in alone], RELATIVE)
    short = TOKENS[:7]
    batch = {"input_ids": torch.tensor([short + [0] * (len(TOKENS) - len(short)), TOKENS]),
             "attention_mask": torch.tensor([[1] * len(short) + [0] * (len(TOKENS) - len(short)), [1] * len(TOKENS)])}
    padded, full = attncheck.torch.probe(model.eval(), batch)
    assert {row["N"] for row in padded} == {len(short)}
    keys = ("layer", "head", "softmax_fro", "dWq_fro", "dWk_fro")
    short_alone = attncheck.torch.probe(model, torch.tensor(short))
    assert_rows_match(padded, [{key: row[key] for key in keys} for row in short_alone], RELATIVE)
    assert_rows_match(full, [{key: row[key] for key in keys} for row in alone], RELATIVE)


@pytest.mark.parametrize("family", ("gpt-neox", "gpt-neox-sequential"))
def test_the_command_line_on_the_saved_checkpoint_equals_probe_in_memory(family, monkeypatch, tmp_path):
    """`attncheck probe` reads the checkpoint save_pretrained writes (GPT-NeoX: its fused query_key_value, partial
    rotary, parallel or sequential residual) and runs its own forward pass in float64: every field of every head
    equals what probe() measures on the model in memory (itself checked against the model's own attention above)."""
    model = _model(family, monkeypatch)
    model.save_pretrained(tmp_path, safe_serialization=True)
    tokens = tmp_path / "tokens.txt"
    tokens.write_text(" ".join(map(str, TOKENS)) + "\n")
    cli = json.loads(run_program("probe", tmp_path, "--tokens", tokens, "--json").stdout)["heads"]
    rows = attncheck.torch.probe(model, torch.tensor(TOKENS))
    assert [(row["layer"], row["head"]) for row in cli] == [(row["layer"], row["head"]) for row in rows]
    worst = 0.0
    for ours, theirs in zip(cli, rows):
        for key, value in ours.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                assert theirs[key] == value, key
                continue
            worst = max(worst, abs(value - theirs[key]) / max(abs(theirs[key]), 1e-300))
            assert value == pytest.approx(theirs[key], rel=RELATIVE, abs=1e-13), (ours["layer"], ours["head"], key)
    print(f"{family}: the command line on the checkpoint, largest relative difference {worst:.2e}")


@pytest.mark.parametrize("lifted", [True, False])
def test_norms_over_all_the_heads_olmo2_style_equal_the_models_own_attention_and_autograd(lifted):
    """OLMo 2's layout, which transformers 4.38.2 lacks (its own classes are checked by hand under transformers 5.24,
    tests/python/hf_current_transformers.py): Llama's attention whose q_proj and k_proj outputs pass through one
    LlamaRMSNorm over all the heads' coordinates before the heads are split, as OLMo 2 applies
    q_norm(q_proj(x)). Every head's map moves with every head's weights, so dWq_fro and dWk_fro are the Jacobians
    in the whole q_proj and k_proj weights. LlamaRMSNorm computes in float32 whatever the model's dtype: recognised
    all the same, and measured as its definition, which the model's float32 norm meets to ~1e-7 (1e-6 here); with
    its float32 lifted to float64 (`lifted`), to 1e-10."""
    config = transformers.LlamaConfig(**COMMON, hidden_size=32, intermediate_size=48, num_attention_heads=4,
                                      num_key_value_heads=2, rope_theta=1000.0)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager").double()
    model = encoder_randomize(model, 3)
    decoder_float64(model, "llama")  # the model's own RMSNorms and rotary frequencies in float64
    generator = torch.Generator().manual_seed(5)
    layers = [layer.self_attn for layer in model.model.layers]
    for attention in layers:
        for name, projection in (("q_norm", attention.q_proj), ("k_norm", attention.k_proj)):
            norm = transformers.models.llama.modeling_llama.LlamaRMSNorm(projection.out_features, eps=1e-6).double()
            with torch.no_grad():
                norm.weight.copy_(1 + 0.3 * torch.randn(projection.out_features, generator=generator,
                                                        dtype=torch.float64))
            if lifted:
                norm.forward = lambda x, m=norm: m.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True)
                                                                            + m.variance_epsilon))
            setattr(attention, name, norm)
            projection.register_forward_hook(lambda _module, _inputs, output, norm=norm: norm(output))
    model.eval()
    ids = torch.tensor(TOKENS)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rows = attncheck.torch.probe(model, ids)
    expected = []
    for l, (a, jacobians) in enumerate(_own_attention_and_jacobians(model, layers, ids)):
        heads = [{"layer": l, "head": h, "N": len(TOKENS), "softmax_fro": float(a[h].norm()),
                  "grad_fro": _softmax_jacobian_norm(a[h]), "dWq_fro": float(jacobians["q_proj.weight"][h].norm()),
                  "dWk_fro": float(jacobians["k_proj.weight"][h].norm())} for h in range(4)]
        for h, row in enumerate(heads):  # query heads 2g and 2g + 1 read key head g
            row["dWk_group_fro"] = (heads[h - h % 2]["dWk_fro"] ** 2 + heads[h - h % 2 + 1]["dWk_fro"] ** 2) ** 0.5
        # Another head's query columns move this head's map: the norm over all the heads couples them.
        d = 8
        other = jacobians["q_proj.weight"][0][..., d:, :].norm()
        assert float(other) > 0.01 * heads[0]["dWq_fro"]
        expected.extend(heads)
    worst = assert_rows_match(rows, expected, RELATIVE if lifted else 1e-6)
    if not lifted:
        assert worst > 1e-12  # the model's float32 norm is there to see
    print(f"norms over all the heads ({'lifted' if lifted else 'float32 inside'}): largest relative difference "
          f"{worst:.2e}")


def test_q_k_norms_computed_in_float32_are_measured_with_their_own_parameters():
    """transformers' RMSNorms compute in float32 inside a float64 model: recognised, with the module's own gain in
    double precision (Llama's weight; Gemma's 1 + weight), not the float32 rounding its probes carry. A norm computed
    in double precision keeps what its probes find, even 5e-6 from its parameters; what is not such a norm is
    refused naming why."""
    from attncheck._transformers import Unmeasurable, _head_norm, _projection_norm
    llama = transformers.models.llama.modeling_llama.LlamaRMSNorm(8, eps=1e-6).double()
    gemma = transformers.models.gemma.modeling_gemma.GemmaRMSNorm(8, eps=1e-6).double()
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        llama.weight.copy_(1 + 0.3 * torch.randn(8, generator=generator, dtype=torch.float64))
        gemma.weight.copy_(0.3 * torch.randn(8, generator=generator, dtype=torch.float64))
    assert torch.equal(torch.tensor(_head_norm(llama, 8)[0]), llama.weight.detach())
    assert torch.equal(torch.tensor(_head_norm(gemma, 8)[0]), 1 + gemma.weight.detach())

    class Scaled(torch.nn.Module):  # an RMSNorm in double precision whose gain is its weight times 1 + 5e-6
        def __init__(self, eps):
            super().__init__()
            self.weight, self.eps = torch.nn.Parameter(llama.weight.detach().clone()), eps

        def forward(self, x):
            return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight * (1 + 5e-6)

    gain = torch.tensor(_head_norm(Scaled(1e-6), 8)[0])
    assert torch.allclose(gain, llama.weight.detach() * (1 + 5e-6), rtol=1e-13, atol=0)
    assert _head_norm(Scaled(0.0), 8)[1] == 0.0  # eps = 0 is a norm too
    not_a_norm = Scaled(1e-6)
    not_a_norm.forward = lambda x: x * not_a_norm.weight  # a gain without the normalization
    with pytest.raises(Unmeasurable, match="is neither an RMSNorm nor a LayerNorm over 8 coordinates"):
        _head_norm(not_a_norm, 8)
    failing = Scaled(1e-6)
    failing.forward = lambda x: x.view(-1, 3)  # rows of 8 do not split in threes
    with pytest.raises(Unmeasurable, match="fails on rows of 8 coordinates"):
        _head_norm(failing, 8)
    with pytest.raises(Unmeasurable, match="has neither parameters nor a normalized_shape"):
        _projection_norm(torch.nn.Softmax(dim=-1), 8, 4)


REFUSED = {
    "falcon-alibi": (lambda: transformers.FalconConfig(**COMMON, hidden_size=32, num_attention_heads=4, alibi=True),
                     "ALiBi position biases"),
    "gpt-j": (lambda: transformers.GPTJConfig(vocab_size=50, n_positions=64, n_embd=32, n_layer=2, n_head=4,
                                              rotary_dim=4), "rotary_dim coordinates, turned in adjacent pairs"),
    "gpt-neo": (lambda: transformers.GPTNeoConfig(vocab_size=50, max_position_embeddings=64, hidden_size=32,
                                                  num_layers=2, num_heads=4, window_size=4,
                                                  attention_types=[[["global", "local"], 1]]),
                r"GPT-Neo's scores are not divided by sqrt\(d\)"),
    "gpt-neox-japanese": (lambda: transformers.GPTNeoXJapaneseConfig(
        **COMMON, hidden_size=32, num_attention_heads=4, intermediate_multiple_size=2),
        r"does not say whether it is causal \(is_causal\)"),
}


@pytest.mark.parametrize("family", REFUSED)
def test_what_cannot_be_measured_exactly_is_refused_with_its_reason(family):
    """Each of these has the projections of a measured family but computes other maps (GPT-J and GPT-Neo were
    measured as Llama's and BERT's before, ||A||_F off by 45% and 19%): each layer is refused with one warning
    naming why, and nothing is recorded. ALiBi biases, GPT-J's partial rotary in
    adjacent pairs without inv_freq, GPT-Neo's unscaled scores and local windows, a fused layer that does not
    declare itself causal."""
    config, reason = REFUSED[family]
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config(), attn_implementation="eager").double().eval()
    with pytest.warns(RuntimeWarning, match=f"layer 0 .*{reason}") as caught:
        assert attncheck.torch.probe(model, torch.tensor(TOKENS)) == []
    assert len([w for w in caught if "not recorded" in str(w.message)]) == 2


def test_rotary_frequencies_other_than_the_configs_and_cross_attention_are_refused(monkeypatch):
    """A rotary embedding whose frequencies are not the config's (the config's base changed after the model was
    built) would be measured with the wrong angles; BART's decoder attends to the encoder through key_value_states
    (cross-attention), which its self-attention layers' projections would otherwise be measured as."""
    model = _model("phi", monkeypatch)
    model.config.rope_theta = 500.0
    with pytest.warns(RuntimeWarning, match="holds frequencies other than the config's rotary base gives"):
        assert attncheck.torch.probe(model, torch.tensor(TOKENS)) == []
    torch.manual_seed(0)
    bart = transformers.BartModel(transformers.BartConfig(
        vocab_size=50, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=48, decoder_ffn_dim=48, max_position_embeddings=64)).double()
    ids = torch.tensor(TOKENS)[None]
    with pytest.warns(RuntimeWarning, match=r"layer 2 \(decoder.layers.0.encoder_attn\).*cross-attention "
                                            r"\(key_value_states\)"):
        rows = attncheck.torch.probe(bart, {"input_ids": ids, "decoder_input_ids": ids[:, :7]})
    assert sorted({(row["layer"], row["N"]) for row in rows}) == [(0, 11), (1, 7)]  # encoder, decoder self
