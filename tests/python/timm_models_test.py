"""attncheck.torch on timm's vision transformers (timm 1.0.29, scripts/pyenv's "timm" set): ViT and DeiT (timm's
Attention: one fused qkv, a class token, DeiT's distillation token too, RMSNorm or LayerNorm q/k norms), EVA
(EvaAttention: fused qkv with q_bias and v_bias, or separate q_proj/k_proj; 2-D rotary positions over the patches,
EVA-02's interleaved pairs, DINOv3's halves or RoPE-Mixed's angles per head, prefix and register tokens unturned),
timm's AttentionRope, and what is refused with its reason (BEiT's relative position bias, a rope whose pairs turn by
two angles).

The reference is the model itself: tiny random float64 models built by timm, their own attention probabilities
(the tensor each layer hands its attn_drop, in timm's non-fused path) for ||A||_F and ||grad softmax||_F, and
autograd Jacobians of those probabilities through the attention module's own forward (functional_call) in its own
projection weights for ||dA/dW_Q||_F and ||dA/dW_K||_F. Every head of every layer agrees to 1e-10 relative.
"""
import warnings

import pytest

torch = pytest.importorskip("torch")
timm = pytest.importorskip("timm")

import attncheck.torch  # noqa: E402
from conftest import assert_recorder_gives_probes_rows, assert_rows_match, calls_of  # noqa: E402
from timm.layers import RmsNorm  # noqa: E402
from timm.models.beit import Beit  # noqa: E402
from timm.models.eva import Eva  # noqa: E402
from timm.models.vision_transformer import VisionTransformer  # noqa: E402
from timm.models.deit import VisionTransformerDistilled  # noqa: E402

torch.set_num_threads(1)
RELATIVE = 1e-10
SMALL = dict(img_size=16, patch_size=4, embed_dim=24, depth=2, num_heads=3, num_classes=5)

MODELS = {
    "vit": lambda: VisionTransformer(**SMALL, qkv_bias=True),
    "vit-no-class-token": lambda: VisionTransformer(**SMALL, class_token=False, global_pool="avg"),
    "vit-rms-qk-norm": lambda: VisionTransformer(**SMALL, qk_norm=True, norm_layer=RmsNorm),
    "vit-layernorm-qk-norm": lambda: VisionTransformer(**SMALL, qk_norm=True),  # timm's LayerNorm, with a bias
    "deit-distilled": lambda: VisionTransformerDistilled(**SMALL, qkv_bias=True),
    "eva": lambda: Eva(**SMALL, qkv_bias=True, use_rot_pos_emb=False),
    "eva-separate-projections": lambda: Eva(**SMALL, qkv_fused=False, use_rot_pos_emb=False),
    "eva02-rope": lambda: Eva(**SMALL, use_rot_pos_emb=True),
    "eva-rope-register-separate-projections": lambda: Eva(**SMALL, use_rot_pos_emb=True, num_reg_tokens=1,
                                                          qkv_fused=False),
    "eva-dinov3-rope-half": lambda: Eva(**SMALL, use_rot_pos_emb=True, rope_type="dinov3", rope_rotate_half=True),
    "vit-attention-rope": lambda: Eva(**SMALL, attn_type="rope", use_rot_pos_emb=True, class_token=False,
                                      num_reg_tokens=1),
}


def _rope_in_float64(model):
    """timm computes the rotary sines and cosines in float32 whatever the model's dtype, and a rounded sine and
    cosine are not exactly a rotation: the cached ones replaced by the float64 sines and cosines of the angles they
    name, so that the reference rotates to double precision (the float32 rope as timm leaves it is
    test_a_float32_rope_agrees_to_its_own_rounding's)."""
    for module in model.modules():
        if not type(module).__name__.startswith("RotaryEmbedding"):
            continue
        for name in ("pos_embed", "pos_embed_cached"):
            embed = getattr(module, name, None)
            if isinstance(embed, torch.Tensor):
                sines, cosines = embed.chunk(2, dim=-1)
                angles = torch.atan2(sines, cosines)
                setattr(module, name, torch.cat([angles.sin(), angles.cos()], dim=-1))


def _model(name, rope_in_float64=True):
    torch.manual_seed(0)
    model = MODELS[name]().double().eval()
    if rope_in_float64:
        _rope_in_float64(model)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():  # weights of order one: attention far from uniform
        for parameter_name, parameter in model.named_parameters():
            if "attn." in parameter_name:
                # q/k norm gains larger: the normalized queries and keys would give near uniform rows.
                scale = 4.0 if "_norm." in parameter_name else 0.4
                parameter.copy_(torch.randn(parameter.shape, generator=generator, dtype=torch.float64) * scale)
    for module in model.modules():
        if hasattr(module, "fused_attn"):
            module.fused_attn = False  # the path that hands A to attn_drop
    return model


def _projection_rows(module, h):
    """(name, rows) of head h's query and key weights in the module's parameters."""
    d, width = module.head_dim, module.num_heads * module.head_dim
    rows = torch.arange(h * d, (h + 1) * d)
    if getattr(module, "qkv", None) is not None:
        return ("qkv.weight", rows), ("qkv.weight", rows + width)
    return ("q_proj.weight", rows), ("k_proj.weight", rows)


def _expected(model, pixels, image=0, calls=None):
    """Every head's norms on image `image` of the batch, from the layers' calls in model(pixels) or those given."""
    calls = calls or calls_of([block.attn for block in model.blocks], lambda: model(pixels))
    expected = []
    for layer, (module, args, kwargs) in enumerate(calls):
        names = sorted({name for h in range(module.num_heads) for name, _ in _projection_rows(module, h)})
        weights = tuple(dict(module.named_parameters())[name].detach().clone() for name in names)
        seen = []
        hook = module.attn_drop.register_forward_hook(lambda _m, inputs, _out: seen.append(inputs[0]))

        def attention(*ws):
            seen.clear()
            torch.nn.utils.stateless.functional_call(module, dict(zip(names, ws)), args, kwargs)
            return seen[-1][image]  # that image's (heads, N, N)

        try:
            jacobians = dict(zip(names, torch.autograd.functional.jacobian(attention, weights)))
            with torch.no_grad():
                a = attention(*weights)
        finally:
            hook.remove()
        for h in range(module.num_heads):
            (q_name, q_rows), (k_name, k_rows) = _projection_rows(module, h)
            softmax_jacobian = torch.autograd.functional.jacobian(lambda s: torch.softmax(s, dim=-1), a[h].log())
            expected.append({"layer": layer, "head": h, "N": a.shape[-1], "softmax_fro": float(a[h].norm()),
                             "grad_fro": float(softmax_jacobian.norm()),
                             "dWq_fro": float(jacobians[q_name][h][..., q_rows, :].norm()),
                             "dWk_fro": float(jacobians[k_name][h][..., k_rows, :].norm())})
    return expected


@pytest.mark.parametrize("name", MODELS)
def test_every_head_equals_the_models_own_attention_and_autograd(name):
    model = _model(name)
    pixels = torch.randn(2, 3, 16, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every layer recognised and measured: not one skipped
        rows = attncheck.torch.probe(model, pixels)[0]
    expected = _expected(model, pixels)
    assert [(row["layer"], row["head"]) for row in rows] == [(l, h) for l in range(2) for h in range(3)]
    worst = assert_rows_match(rows, expected, RELATIVE)
    # Not uniform attention, where every norm is trivially 1: the weights make the rows differ.
    assert min(row["softmax_over_sqrt_N"] for row in rows) > 1.2 / rows[0]["N"] ** 0.5
    print(f"{name}: {len(rows)} heads, N = {rows[0]['N']}, largest relative difference {worst:.2e}")


def _mixed_angles_in_float64(freqs, t_x, t_y):
    """timm 1.0.29's get_mixed_freqs without its float32 cast (which also keeps it from running in a float64 model):
    the same angles, x times the x frequencies plus y times the y frequencies of each head, their sines and cosines
    in float64."""
    angles = (t_x.double().unsqueeze(-1) @ freqs[0].double().unsqueeze(-2)
              + t_y.double().unsqueeze(-1) @ freqs[1].double().unsqueeze(-2))
    return torch.cat([angles.sin().repeat_interleave(2, -1), angles.cos().repeat_interleave(2, -1)], dim=-1)


def test_mixed_rotary_angles_per_head_equal_the_models_own_attention_and_autograd(monkeypatch):
    # RoPE-Mixed: every head turns its pairs by angles of its own, learned frequencies over the patch's row and column.
    import timm.layers.pos_embed_sincos
    monkeypatch.setattr(timm.layers.pos_embed_sincos, "get_mixed_freqs", _mixed_angles_in_float64)
    torch.manual_seed(0)
    model = Eva(**SMALL, use_rot_pos_emb=True, rope_type="mixed").double().eval()
    with torch.no_grad():
        model.rope.freqs.mul_(3)  # learned frequencies far from their start: the heads' angles differ visibly
    assert (model.rope.freqs[:, 0] - model.rope.freqs[:, 1]).abs().max() > 0.1
    for module in model.modules():
        if hasattr(module, "fused_attn"):
            module.fused_attn = False
    pixels = torch.randn(2, 3, 16, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rows = attncheck.torch.probe(model, pixels)[0]
    worst = assert_rows_match(rows, _expected(model, pixels), RELATIVE)
    print(f"mixed rotary: {len(rows)} heads, largest relative difference {worst:.2e}")


def test_a_float32_rope_agrees_to_its_own_rounding():
    # EVA-02's rope as timm leaves it in a float64 model: float32 sines and cosines, whose squares sum to 1 within
    # ~1.2e-7, so the model turns each pair by a rotation scaled by 1 + O(1e-7). attncheck measures the rotation
    # they name (atan2): agreement to 1e-6 relative, not to double precision.
    model = _model("eva02-rope", rope_in_float64=False)
    pixels = torch.randn(2, 3, 16, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rows = attncheck.torch.probe(model, pixels)[0]
    worst = assert_rows_match(rows, _expected(model, pixels), 1e-6)
    assert worst > 1e-12  # the rounding is there to see: the case differs from the float64 rope's
    print(f"float32 rope: largest relative difference {worst:.2e}")


@pytest.mark.parametrize("mixed", [False, True])
def test_patch_dropout_in_training_each_image_its_own_rope(mixed, monkeypatch):
    # In training, timm's patch dropout keeps other patches in each image and hands each its patches' rope: the
    # recorder measures every image with its own angles, against the layer's own attention and autograd on that
    # image.
    import timm.layers.pos_embed_sincos
    monkeypatch.setattr(timm.layers.pos_embed_sincos, "get_mixed_freqs", _mixed_angles_in_float64)
    torch.manual_seed(0)
    model = Eva(**SMALL, use_rot_pos_emb=True, patch_drop_rate=0.5, rope_type="mixed" if mixed else "cat").double()
    _rope_in_float64(model)
    for module in model.modules():
        if hasattr(module, "fused_attn"):
            module.fused_attn = False
    model.train()
    pixels = torch.randn(3, 3, 16, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    calls = calls_of([block.attn for block in model.blocks], lambda: (torch.manual_seed(7), model(pixels)))
    assert not torch.equal(calls[0][2]["rope"][0], calls[0][2]["rope"][1])  # the images kept other patches
    for image in range(3):
        records = []
        torch.manual_seed(7)  # the patches kept, as in the reference's pass above
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with attncheck.torch.AttentionRecorder(model, every=1, out=None, count="forwards", sample=image,
                                                   callback=records.append):
                model(pixels)
        assert_rows_match(records[0]["heads"], _expected(model, pixels, image, calls), RELATIVE)


def test_a_rope_that_is_not_one_rotation_per_pair_is_refused_naming_why():
    from attncheck._transformers import Unmeasurable, _rope_angles
    torch.manual_seed(0)
    attention = Eva(**SMALL, use_rot_pos_emb=True).blocks[0].attn  # heads of 8, a class token
    angles = torch.rand(16, 4, dtype=torch.float64)
    rope = torch.cat([angles.sin().repeat_interleave(2, -1), angles.cos().repeat_interleave(2, -1)], dim=-1)
    table, layout, per_image = _rope_angles(attention, rope, 17, 2)
    assert (layout, per_image, table.shape) == ("interleaved", False, (17, 4))
    assert abs(table[1:] - angles.numpy()).max() < 1e-15 and not table[0].any()  # the class token unturned
    for bad, reason in ((rope * 1.01, "off the unit circle: not rotations"),  # a scaled rotation
                        (rope[None].expand(2, 16, 16), "has 2 tables for 3 heads"),
                        (torch.stack([rope, rope.flip(0)])[:, None], "differs along an axis that is not the batch's"),
                        (rope[:15], "has 15 rows for 17 positions after 1 prefix tokens")):
        with pytest.raises(Unmeasurable, match=reason):
            _rope_angles(attention, bad, 17, 3)


def test_the_recorder_in_training_gives_the_rows_probe_gives(tmp_path):
    model = _model("vit")
    pixels = torch.randn(2, 3, 16, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    assert_recorder_gives_probes_rows(model, pixels)


@pytest.mark.parametrize("build, dtype, reason", [
    (lambda: Beit(**SMALL, use_rel_pos_bias=True), torch.float64, "relative position bias"),
    # EVA-02's interleaved sines and cosines read in halves: coordinates p and p + d/2 turn by different angles.
    (lambda: Eva(**SMALL, use_rot_pos_emb=True, rope_rotate_half=True), torch.float64, "by different angles"),
])
def test_what_cannot_be_measured_exactly_is_refused_with_its_reason(build, dtype, reason):
    torch.manual_seed(0)
    model = build().to(dtype)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rows = attncheck.torch.probe(model, torch.randn(1, 3, 16, 16, dtype=dtype))
    assert rows == []
    messages = [str(w.message) for w in caught]
    assert sum(reason in m for m in messages) == 2, messages  # one warning per layer, naming why
