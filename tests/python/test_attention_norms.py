"""attncheck.attention_norms against PyTorch autograd (float64): every norm of every map the probe reports, in the
scores and in the weights, with biases, several heads, a causal mask and a padding mask, to 1e-10 relative."""
import math

import numpy as np
import pytest

import attncheck
from conftest import dense_maps, key

RNG_SEED = 20261121
# The maps whose norms in W_Q and W_K the probe reports (the others: value and score Jacobian only).
WEIGHT_NORMS = ("softmax", "poly3_scaled", "poly3")


def random_layer(rng, n=7, D=5, heads=2, d=3):
    return (rng.standard_normal((n, D)), 0.6 * rng.standard_normal((D, heads * d)), 0.6 * rng.standard_normal((D, heads * d)),
            0.3 * rng.standard_normal(heads * d), 0.3 * rng.standard_normal(heads * d))


def autograd_reference(torch, x, w_q, w_k, b_q, b_k, heads, attended, scale=None):
    """Per head, every key the parity covers, from dense maps and torch.autograd.functional.jacobian."""
    jacobian = torch.autograd.functional.jacobian
    x, w_q, w_k, b_q, b_k = (torch.tensor(a, dtype=torch.float64) for a in (x, w_q, w_k, b_q, b_k))
    keep = torch.tensor(attended)
    n = x.shape[0]
    d = w_q.shape[1] // heads
    scale = 1 / math.sqrt(d) if scale is None else scale
    out = []
    for h in range(heads):
        cols = slice(h * d, (h + 1) * d)
        wq, wk, bq, bk = w_q[:, cols], w_k[:, cols], b_q[cols], b_k[cols]

        def scores(wq_, wk_):
            return scale * (x @ wq_ + bq) @ (x @ wk_ + bk).T

        s = scores(wq, wk)
        row = {}
        for prefix, f in dense_maps(torch).items():
            row[key(prefix, "value")] = f(s, keep, n).norm().item()
            row[key(prefix, "grad")] = jacobian(lambda t: f(t, keep, n), s).norm().item()
            if prefix in WEIGHT_NORMS:
                row[key(prefix, "dWq")] = jacobian(lambda w: f(scores(w, wk), keep, n), wq).norm().item()
                row[key(prefix, "dWk")] = jacobian(lambda w: f(scores(wq, w), keep, n), wk).norm().item()
        attended_scores = s[keep].numpy()
        row["score_mean"] = attended_scores.mean()
        row["score_std"] = attended_scores.std()
        row["score_max_abs"] = np.abs(attended_scores).max()
        row["scores_fro"] = np.linalg.norm(attended_scores)
        out.append(row)
    return out


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("padding", [False, True])
def test_every_norm_equals_autograd_to_1e_10(causal, padding):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(RNG_SEED + 2 * causal + padding)
    n, heads = 7, 2
    x, w_q, w_k, b_q, b_k = random_layer(rng, n=n, heads=heads)
    mask = None
    attended = np.ones((n, n), dtype=bool)
    if padding:
        mask = np.ones((n, n), dtype=bool)
        mask[:, -2:] = False  # the last two keys are padding
        mask[3, 1] = False
        attended &= mask
    if causal:
        attended &= np.tril(np.ones((n, n), dtype=bool))
    ours = attncheck.attention_norms(x, w_q, w_k, b_q, b_k, heads=heads, causal=causal, mask=mask)
    reference = autograd_reference(torch, x, w_q, w_k, b_q, b_k, heads, attended)
    assert len(ours) == heads
    for h in range(heads):
        assert ours[h]["head"] == h and ours[h]["N"] == n and ours[h]["d"] == 3 and ours[h]["D"] == 5
        assert ours[h]["causal"] is causal
        assert ours[h]["inner"] == 1 / math.sqrt(3)
        for name, expected in reference[h].items():
            assert ours[h][name] == pytest.approx(expected, rel=1e-10, abs=0), name
        assert ours[h]["softmax_over_sqrt_N"] == ours[h]["softmax_fro"] / math.sqrt(n)
        assert ours[h]["grad_over_half_sqrt_N"] == ours[h]["grad_fro"] / (math.sqrt(n) / 2)


def test_scale_and_activation_are_carried_and_inputs_may_be_any_layout_or_tensor():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(RNG_SEED + 7)
    x, w_q, w_k, b_q, b_k = random_layer(rng, n=6, heads=1, d=4)
    x32, w_q32, w_k32 = (a.astype(np.float32) for a in (x, w_q, w_k))
    expected = attncheck.attention_norms(x32.astype(np.float64), w_q32.astype(np.float64), w_k32.astype(np.float64),
                                         b_q, b_k, scale=0.3, activation="poly3_scaled")
    assert expected[0]["inner"] == 0.3 and expected[0]["activation"] == "poly3_scaled"
    linear_q = torch.nn.Linear(5, 4).double()
    with torch.no_grad():
        linear_q.weight.copy_(torch.tensor(w_q32.T))  # nn.Linear stores (out, in): the recorder's transposition
    variants = [
        (x32, w_q32, w_k32),
        (np.asfortranarray(x32), np.asfortranarray(w_q32), w_k32),
        (torch.tensor(x32, requires_grad=True), linear_q.weight.T, torch.tensor(w_k32)),
    ]
    for xs, wq, wk in variants:
        got = attncheck.attention_norms(xs, wq, wk, b_q, b_k, scale=0.3, activation="poly3_scaled")
        assert got == expected
    reference = autograd_reference(torch, x32.astype(np.float64), w_q32.astype(np.float64), w_k32.astype(np.float64),
                                   b_q, b_k, 1, np.ones((6, 6), dtype=bool), scale=0.3)
    assert expected[0]["poly3_scaled_dWq_fro"] == pytest.approx(reference[0]["poly3_scaled_dWq_fro"], rel=1e-10)


def test_bad_input_is_a_value_error_naming_it():
    rng = np.random.default_rng(RNG_SEED + 8)
    x, w_q, w_k, b_q, b_k = random_layer(rng, n=4, heads=2, d=2)
    with pytest.raises(ValueError, match=r"x must be 2-D: got shape \(1, 4, 5\)"):
        attncheck.attention_norms(x[None], w_q, w_k)
    with pytest.raises(ValueError, match="w_q has 4 columns, not a positive multiple of heads = 3"):
        attncheck.attention_norms(x, w_q, w_k, heads=3)
    with pytest.raises(ValueError, match="shapes do not chain: x is 4x5, w_q is 4x4"):
        attncheck.attention_norms(x, w_q[:4], w_k)
    with pytest.raises(ValueError, match="b_q has 3 entries, w_q 4 columns"):
        attncheck.attention_norms(x, w_q, w_k, b_q[:3], heads=2)
    bad = x.copy()
    bad[1, 2] = np.nan
    with pytest.raises(ValueError, match=r"x has nan at \(1, 2\)"):
        attncheck.attention_norms(bad, w_q, w_k)
    with pytest.raises(ValueError, match="activation 'gelu' is not one of softmax, poly3_scaled, poly3, relu_n"):
        attncheck.attention_norms(x, w_q, w_k, activation="gelu")
    nothing = np.ones((4, 4), dtype=bool)
    nothing[2] = False
    with pytest.raises(ValueError, match=r"row 2 \(0-based\) attends to nothing"):
        attncheck.attention_norms(x, w_q, w_k, mask=nothing)
    with pytest.raises(ValueError, match="mask has dtype int64"):
        attncheck.attention_norms(x, w_q, w_k, mask=np.ones((4, 4), dtype=np.int64))
    with pytest.raises(ValueError, match=r"heads = 0 must be >= 1"):
        attncheck.attention_norms(x, w_q, w_k, heads=0)


def _assert_grouped_heads_equal_autograd(ours, heads, kv_heads, head_attention):
    """Each head's row against autograd: head_attention(h, g) gives the map of query head h (reading key head g) as a
    function of the weights (w_q, w_k) its derivatives are taken in, and those weights. ||A||_F to 1e-12,
    dWq_fro, dWk_fro and the group's dWk_group_fro (the key head's derivative summed over its query heads) to 1e-10."""
    import torch

    jacobian = torch.autograd.functional.jacobian
    group_sq = [0.0] * kv_heads
    for h in range(heads):
        g = h // (heads // kv_heads)
        attention, wq, wk = head_attention(h, g)
        dWk = jacobian(lambda w: attention(wq, w), wk).norm().item()
        group_sq[g] += dWk ** 2
        assert ours[h]["kv_head"] == g
        assert ours[h]["softmax_fro"] == pytest.approx(attention(wq, wk).norm().item(), rel=1e-12)
        assert ours[h]["dWq_fro"] == pytest.approx(jacobian(lambda w: attention(w, wk), wq).norm().item(), rel=1e-10)
        assert ours[h]["dWk_fro"] == pytest.approx(dWk, rel=1e-10)
    for h in range(heads):
        assert ours[h]["dWk_group_fro"] == pytest.approx(math.sqrt(group_sq[h // (heads // kv_heads)]), rel=1e-10)


@pytest.mark.parametrize("angles_per_position", [False, True])
def test_rotary_positions_and_grouped_keys_equal_autograd(angles_per_position):
    """kv_heads and rotary: four query heads on two key heads, queries and keys rotated to their positions in
    Hugging Face's half layout with the last two coordinates left unrotated (partial rotary), causal; the
    derivatives in a key head's weights summed over its group (dWk_group_fro) too. By frequencies (t * f), or by
    an (N, pairs) table of angles per position (EVA's 2-D rotary is one), random here."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(RNG_SEED + 11)
    n, D, heads, kv_heads, d = 8, 6, 4, 2, 6
    x = rng.standard_normal((n, D))
    w_q, w_k = 0.6 * rng.standard_normal((D, heads * d)), 0.6 * rng.standard_normal((D, kv_heads * d))
    b_q, b_k = 0.3 * rng.standard_normal(heads * d), 0.3 * rng.standard_normal(kv_heads * d)
    frequencies = np.array([1.0, 0.3])  # pairs (0, 2) and (1, 3); coordinates 4 and 5 unrotated
    angles = rng.uniform(-3, 3, (n, 2)) if angles_per_position else np.arange(n)[:, None] * frequencies[None, :]
    ours = attncheck.attention_norms(x, w_q, w_k, b_q, b_k, heads=heads, causal=True, kv_heads=kv_heads,
                                     rotary=angles if angles_per_position else frequencies)

    t = lambda a: torch.tensor(a, dtype=torch.float64)  # noqa: E731
    cos, sin = torch.cos(t(angles)), torch.sin(t(angles))

    def rotate(rows):
        first, second, rest = rows[:, :2], rows[:, 2:4], rows[:, 4:]
        return torch.cat([first * cos - second * sin, first * sin + second * cos, rest], dim=1)

    keep = torch.ones(n, n, dtype=torch.bool).tril()
    softmax = dense_maps(torch)["softmax"]
    xs = t(x)

    def head_attention(h, g):
        wq, bq = t(w_q[:, h * d:(h + 1) * d]), t(b_q[h * d:(h + 1) * d])
        wk, bk = t(w_k[:, g * d:(g + 1) * d]), t(b_k[g * d:(g + 1) * d])

        def attention(wq_, wk_):
            return softmax(rotate(xs @ wq_ + bq) @ rotate(xs @ wk_ + bk).T / math.sqrt(d), keep, n)

        return attention, wq, wk

    _assert_grouped_heads_equal_autograd(ours, heads, kv_heads, head_attention)
    with pytest.raises(ValueError, match="kv_heads = 3 does not divide heads = 4"):
        attncheck.attention_norms(x, w_q, w_k, heads=heads, kv_heads=3)
    with pytest.raises(ValueError, match="rotary has 4 frequencies: need 1 .. d/2 = 3"):
        attncheck.attention_norms(x, w_q, w_k, heads=heads, kv_heads=kv_heads, rotary=np.ones(4))
    with pytest.raises(ValueError, match="rotary angles for 7 positions, x has 8"):
        attncheck.attention_norms(x, w_q, w_k, heads=heads, kv_heads=kv_heads, rotary=np.ones((7, 2)))
    with pytest.raises(ValueError, match="rotary has 4 pairs of angles: need 1 .. d/2 = 3"):
        attncheck.attention_norms(x, w_q, w_k, heads=heads, kv_heads=kv_heads, rotary=np.ones((8, 4)))
    with pytest.raises(ValueError, match=r"rotary must be 1-D \(frequencies\), 2-D \(angles per position\) or 3-D "
                                         r"\(angles per head and position\): got shape \(4, 8, 2, 1\)"):
        attncheck.attention_norms(x, w_q, w_k, heads=heads, kv_heads=kv_heads, rotary=np.ones((4, 8, 2, 1)))


def test_angles_per_head_equal_autograd():
    """A 3-D rotary (heads, N, pairs): each head turns its queries and keys by its own angles (timm's mixed
    rotary), interleaved pairs; with grouped keys it is refused, a key head then being turned two ways."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(RNG_SEED + 31)
    n, D, heads, d = 6, 5, 3, 4
    x = rng.standard_normal((n, D))
    w_q, w_k = 0.8 * rng.standard_normal((D, heads * d)), 0.8 * rng.standard_normal((D, heads * d))
    angles = rng.uniform(-3, 3, (heads, n, 2))
    ours = attncheck.attention_norms(x, w_q, w_k, heads=heads, rotary=angles, rotary_layout="interleaved")
    t = lambda a: torch.tensor(a, dtype=torch.float64)  # noqa: E731
    jacobian = torch.autograd.functional.jacobian
    softmax = dense_maps(torch)["softmax"]
    keep = torch.ones(n, n, dtype=torch.bool)
    for h in range(heads):
        cos, sin = torch.cos(t(angles[h])), torch.sin(t(angles[h]))

        def rotate(rows):
            even, odd = rows[:, 0::2], rows[:, 1::2]
            return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).reshape(n, d)

        wq, wk = t(w_q[:, h * d:(h + 1) * d]), t(w_k[:, h * d:(h + 1) * d])

        def attention(wq_, wk_):
            return softmax(rotate(t(x) @ wq_) @ rotate(t(x) @ wk_).T / math.sqrt(d), keep, n)

        assert ours[h]["softmax_fro"] == pytest.approx(attention(wq, wk).norm().item(), rel=1e-12)
        assert ours[h]["dWq_fro"] == pytest.approx(jacobian(lambda w: attention(w, wk), wq).norm().item(), rel=1e-10)
        assert ours[h]["dWk_fro"] == pytest.approx(jacobian(lambda w: attention(wq, w), wk).norm().item(), rel=1e-10)
    with pytest.raises(ValueError, match="3 rotary embeddings for 3 heads and 1 key heads: need one per head"):
        attncheck.attention_norms(x, w_q, w_k[:, :d], heads=heads, kv_heads=1, rotary=angles)
    with pytest.raises(ValueError, match="2 rotary embeddings for 3 heads"):
        attncheck.attention_norms(x, w_q, w_k, heads=heads, rotary=angles[:2])


@pytest.mark.parametrize("angles_per_position", [False, True])
def test_norms_over_all_the_heads_equal_autograd_in_the_whole_weights(angles_per_position):
    """OLMo 2's q_norm and k_norm: one RMSNorm over every head's coordinates (gains of heads d and kv_heads d), then
    rotary; head h's map moves with every head's weights through the shared mean square, so dWq_fro and dWk_fro are
    the Jacobians in the whole W_Q and W_K, and dWk_group_fro that of the group's maps in the whole W_K."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(RNG_SEED + 21 + angles_per_position)
    n, D, heads, kv_heads, d, eps = 7, 5, 4, 2, 4, 1e-3
    x = rng.standard_normal((n, D))
    w_q, w_k = 0.8 * rng.standard_normal((D, heads * d)), 0.8 * rng.standard_normal((D, kv_heads * d))
    b_q = 0.3 * rng.standard_normal(heads * d)
    gain_q, gain_k = 1 + 0.3 * rng.standard_normal(heads * d), 1 + 0.3 * rng.standard_normal(kv_heads * d)
    angles = rng.uniform(-3, 3, (n, 2)) if angles_per_position else np.arange(n)[:, None] * np.array([[1.0, 0.1]])
    ours = attncheck.attention_norms(x, w_q, w_k, b_q, heads=heads, causal=True, kv_heads=kv_heads,
                                     rotary=angles if angles_per_position else np.array([1.0, 0.1]),
                                     query_norm=(gain_q, eps), key_norm=(gain_k, eps))
    t = lambda a: torch.tensor(a, dtype=torch.float64)  # noqa: E731
    cos, sin = torch.cos(t(angles)), torch.sin(t(angles))

    def rotate(rows):
        first, second = rows[:, :2], rows[:, 2:]
        return torch.cat([first * cos - second * sin, first * sin + second * cos], dim=1)

    def normalized(rows, gain):  # over all the heads' coordinates at once, as OLMo 2's RMSNorm
        return rows / torch.sqrt(rows.pow(2).mean(-1, keepdim=True) + eps) * t(gain)

    keep = torch.ones(n, n, dtype=torch.bool).tril()
    xs = t(x)

    def head_attention(h, g):  # in the whole weights: every head's columns move head h's map
        def attention(wq_, wk_):
            q = rotate(normalized(xs @ wq_ + t(b_q), gain_q)[:, h * d:(h + 1) * d])
            k = rotate(normalized(xs @ wk_, gain_k)[:, g * d:(g + 1) * d])
            return torch.softmax((q @ k.T / math.sqrt(d)).masked_fill(~keep, -math.inf), dim=-1)

        return attention, t(w_q), t(w_k)

    _assert_grouped_heads_equal_autograd(ours, heads, kv_heads, head_attention)
    with pytest.raises(ValueError, match="query_norm is a LayerNorm over all the heads"):
        attncheck.attention_norms(x, w_q, w_k, heads=heads, kv_heads=kv_heads, query_norm=(gain_q, eps, None),
                                  key_norm=(gain_k, eps, None))


@pytest.mark.parametrize("softcap, layer_norm", [(0.0, False), (1.5, False), (0.0, True), (1.5, True)])
def test_query_and_key_norms_and_soft_capped_logits_equal_autograd(softcap, layer_norm):
    """Qwen3's and Gemma 3's per-head RMSNorms of queries and keys (before the rotation), or LayerNorms (Persimmon's,
    timm's qk_norm: centred, the query's with a bias, the key's without), and Gemma 2's soft-capped logits: the
    derivatives in W_Q and W_K go through them; grad_fro is the softmax's Jacobian in its logits."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(RNG_SEED + 12 + int(softcap) + 2 * layer_norm)
    n, D, heads, kv_heads, d, eps = 7, 5, 2, 1, 4, 1e-6
    x = rng.standard_normal((n, D))
    w_q, w_k = 0.8 * rng.standard_normal((D, heads * d)), 0.8 * rng.standard_normal((D, kv_heads * d))
    gain_q, gain_k = 1 + 0.3 * rng.standard_normal(d), 1 + 0.3 * rng.standard_normal(d)
    bias_q = 0.5 * rng.standard_normal(d)
    frequencies = np.array([1.0, 0.1])
    query_norm, key_norm = ((gain_q, eps, bias_q), (gain_k, eps, None)) if layer_norm else ((gain_q, eps),
                                                                                             (gain_k, eps))
    ours = attncheck.attention_norms(x, w_q, w_k, heads=heads, causal=True, kv_heads=kv_heads, rotary=frequencies,
                                     query_norm=query_norm, key_norm=key_norm, logit_softcap=softcap)
    t = lambda a: torch.tensor(a, dtype=torch.float64)  # noqa: E731
    angles = torch.arange(n, dtype=torch.float64)[:, None] * t(frequencies)[None, :]
    cos, sin = torch.cos(angles), torch.sin(angles)

    def rotate(rows):
        first, second = rows[:, :2], rows[:, 2:]
        return torch.cat([first * cos - second * sin, first * sin + second * cos], dim=1)

    def norm(rows, gain, bias=None):
        if layer_norm:
            rows = rows - rows.mean(-1, keepdim=True)
        out = rows / torch.sqrt(rows.pow(2).mean(-1, keepdim=True) + eps) * t(gain)
        return out + t(bias) if layer_norm and bias is not None else out

    keep = torch.ones(n, n, dtype=torch.bool).tril()
    jacobian = torch.autograd.functional.jacobian
    xs, wk = t(x), t(w_k)
    for h in range(heads):
        wq = t(w_q[:, h * d:(h + 1) * d])

        def logits(wq_, wk_):
            s = rotate(norm(xs @ wq_, gain_q, bias_q)) @ rotate(norm(xs @ wk_, gain_k)).T / math.sqrt(d)
            return softcap * torch.tanh(s / softcap) if softcap else s

        def attention(wq_, wk_):
            return torch.softmax(logits(wq_, wk_).masked_fill(~keep, -math.inf), dim=-1)

        softmax_of = lambda z: torch.softmax(z.masked_fill(~keep, -math.inf), dim=-1)  # noqa: E731
        assert ours[h]["softmax_fro"] == pytest.approx(attention(wq, wk).norm().item(), rel=1e-12)
        assert ours[h]["grad_fro"] == pytest.approx(jacobian(softmax_of, logits(wq, wk)).norm().item(), rel=1e-10)
        assert ours[h]["dWq_fro"] == pytest.approx(jacobian(lambda w: attention(w, wk), wq).norm().item(), rel=1e-10)
        assert ours[h]["dWk_fro"] == pytest.approx(jacobian(lambda w: attention(wq, w), wk).norm().item(), rel=1e-10)
    with pytest.raises(ValueError, match=r"query_norm has 3 gains: need d = 4 \(one head's\) or 8 \(every head's\)"):
        attncheck.attention_norms(x, w_q, w_k, heads=heads, kv_heads=kv_heads, query_norm=(np.ones(3), eps))
    with pytest.raises(ValueError, match="different kinds"):
        attncheck.attention_norms(x, w_q, w_k, heads=heads, kv_heads=kv_heads, query_norm=(gain_q, eps),
                                  key_norm=(gain_k, eps, None))
    with pytest.raises(ValueError, match="query_norm has a bias of 3 entries"):
        attncheck.attention_norms(x, w_q, w_k, heads=heads, kv_heads=kv_heads, query_norm=(gain_q, eps, np.ones(3)),
                                  key_norm=(gain_k, eps, None))
