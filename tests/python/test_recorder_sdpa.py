"""attncheck.torch's capture of torch.nn.functional.scaled_dot_product_attention: a model of any architecture is
measured on the scores of its own SDPA calls. Debian's torch 1.13 has no SDPA, so there these tests put in a stand-in
of its signature and semantics (torch 2.5's: attn_mask boolean or additive, is_causal, scale, enable_gqa); under
torch >= 2.5 they run on the real function (docs/python.md records that run). The rows must equal the score-side
fields of the recognised path (attncheck.attention_norms on the same weights) to 1e-12."""
import json
import math
import warnings

import pytest

torch = pytest.importorskip("torch")

import attncheck  # noqa: E402
from attncheck.torch import AttentionRecorder, probe  # noqa: E402

SEED = 20261129
# The fields a row measured from scores shares with the recognised path; the norms in W_Q, W_K are not known there.
SCORE_FIELDS = ("N", "causal", "softmax_fro", "grad_fro", "softmax_over_sqrt_N", "grad_over_half_sqrt_N",
                "score_mean", "score_std", "score_max_abs", "scores_fro", "softmax_entropy", "poly3_scaled_fro",
                "poly3_scaled_grad_fro", "poly3_fro", "relu_n_fro", "relu_n_grad_fro", "linear_scaled_fro")


def stand_in_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """scaled_dot_product_attention as torch 2.5 documents it (without dropout)."""
    n, s = query.shape[-2], key.shape[-2]
    if enable_gqa:
        repeat = query.shape[-3] // key.shape[-3]
        key, value = key.repeat_interleave(repeat, dim=-3), value.repeat_interleave(repeat, dim=-3)
    scores = query @ key.transpose(-2, -1) * (1 / math.sqrt(query.shape[-1]) if scale is None else scale)
    if is_causal:
        scores = scores.masked_fill(~torch.ones(n, s, dtype=torch.bool).tril(), float("-inf"))
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
    return torch.softmax(scores, dim=-1) @ value


REAL_SDPA = callable(getattr(torch.nn.functional, "scaled_dot_product_attention", None))


@pytest.fixture(autouse=True)
def sdpa(monkeypatch):
    """The function the models call: torch's own where it has one, else the stand-in."""
    if not REAL_SDPA:
        monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", stand_in_sdpa, raising=False)
    return torch.nn.functional.scaled_dot_product_attention


class Attention(torch.nn.Module):
    """Attention of no recognised layout (projections named a, b, c): only its SDPA call shows what it computes."""

    def __init__(self, width, heads, kv_heads=None, causal=False, mask=None, scale=None, cross=False):
        super().__init__()
        self.heads, self.kv_heads = heads, kv_heads or heads
        self.d = width // heads
        self.a = torch.nn.Linear(width, width)
        self.b = torch.nn.Linear(width, self.kv_heads * self.d)
        self.c = torch.nn.Linear(width, self.kv_heads * self.d)
        self.causal, self.mask, self.scale, self.cross = causal, mask, scale, cross

    def forward(self, x):
        batch, n, _ = x.shape
        q = self.a(x).view(batch, n, self.heads, self.d).transpose(1, 2)
        source = x[:, : n // 2] if self.cross else x
        k = self.b(source).view(batch, source.shape[1], self.kv_heads, self.d).transpose(1, 2)
        v = self.c(source).view(batch, source.shape[1], self.kv_heads, self.d).transpose(1, 2)
        extra = {"enable_gqa": True} if self.kv_heads != self.heads else {}
        if self.scale is not None:
            extra["scale"] = self.scale
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=self.mask, is_causal=self.causal,
                                                               **extra)
        return out.transpose(1, 2).reshape(batch, n, -1)


def model_of(**options):
    torch.manual_seed(SEED)
    return torch.nn.Sequential(Attention(16, 4, **options), torch.nn.Linear(16, 16),
                               Attention(16, 4, **options)).double()


def expected_rows(model, x, index, mask=None, **options):
    """attention_norms on the weights and the input of the model's attention at `index`, sequence 0."""
    attention = model[index]
    inputs = x
    for layer in model[:index]:
        inputs = layer(inputs)
    with torch.no_grad():
        return attncheck.attention_norms(
            inputs[0].numpy(), attention.a.weight.T.numpy(), attention.b.weight.T.numpy(), attention.a.bias.numpy(),
            attention.b.bias.numpy(), heads=attention.heads, kv_heads=attention.kv_heads, causal=attention.causal,
            mask=mask, scale=attention.scale, **options)


def check(rows, expected, layer):
    assert [row["head"] for row in rows] == [row["head"] for row in expected]
    for row, reference in zip(rows, expected):
        assert row["layer"] == layer and row["measured_from"] == "scaled_dot_product_attention"
        for key in SCORE_FIELDS:
            assert row[key] == pytest.approx(reference[key], rel=1e-12, abs=1e-300), (key, row[key], reference[key])
        assert "dWq_fro" not in row and "D" not in row  # unknown from the scores: left out, not guessed


@pytest.mark.parametrize("options", [{}, {"causal": True}, {"kv_heads": 2}, {"scale": 0.7}],
                         ids=["bidirectional", "causal", "grouped-keys", "explicit-scale"])
def test_each_sdpa_call_is_a_layer_measured_on_its_own_scores(options, sdpa):
    model = model_of(**options)
    x = torch.randn(3, 10, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) * 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing skipped, no "no attention layer recorded" warning
        rows = probe(model, x)
    assert len(rows) == 3  # per sequence of the batch
    for layer, index in ((0, 0), (1, 2)):
        check([row for row in rows[0] if row["layer"] == layer], expected_rows(model, x, index), layer)
    assert torch.nn.functional.scaled_dot_product_attention is sdpa  # restored when probe() is done


def test_masks_and_what_ifs_with_the_head_size_from_the_call():
    n = 10
    band = torch.ones(n, n, dtype=torch.bool).tril() & ~torch.ones(n, n, dtype=torch.bool).tril(-4)  # window of 4
    for mask in (band, torch.zeros(n, n, dtype=torch.float64).masked_fill(~band, float("-inf"))):
        model = model_of(mask=mask)
        x = torch.randn(2, n, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
        what_if = ["x^3/sqrt(N)", "sigmoid(x - log(N)) / sqrt(d)"]
        rows = probe(model, x, what_if=what_if)[0]
        expected = expected_rows(model, x, 0, mask=band.numpy(), what_if=what_if)
        check([row for row in rows if row["layer"] == 0], expected, 0)
        for row, reference in zip(rows, expected):
            for ours, theirs in zip(row["what_if"], reference["what_if"]):
                assert ours["phi"] == theirs["phi"]
                assert ours["fro"] == pytest.approx(theirs["fro"], rel=1e-12)
                assert ours["grad_fro"] == pytest.approx(theirs["grad_fro"], rel=1e-12)


def test_the_recorder_logs_sdpa_layers_each_step(tmp_path, sdpa):
    model = model_of(causal=True).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(4, 8, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    with AttentionRecorder(model, every=2, out=tmp_path / "run") as recorder:
        for _ in range(5):
            loss = model(x).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            recorder.step()
        assert recorder.layers == [(0, "scaled_dot_product_attention call 0"),
                                   (1, "scaled_dot_product_attention call 1")]
    lines = [json.loads(line) for line in open(tmp_path / "run" / "attncheck-probe.jsonl")]
    assert sorted({line["step"] for line in lines}) == [0, 2, 4]
    assert len(lines) == 3 * 2 * 4 and all(line["causal"] and line["N"] == 8 for line in lines)
    assert torch.nn.functional.scaled_dot_product_attention is sdpa


def test_calls_inside_measured_layers_are_not_measured_twice_and_others_are_skipped_with_a_reason():
    torch.manual_seed(SEED)
    inner = Attention(16, 4).double()
    model = torch.nn.Sequential(inner, torch.nn.Linear(16, 16)).double()
    x = torch.randn(1, 6, 16, dtype=torch.float64)
    records = []
    with AttentionRecorder(model, every=1, out=None, count="forwards", training_only=False,
                           callback=records.append) as recorder:
        recorder.register(inner, lambda m, args, kwargs, out: (args[0], m.a.weight.T, m.b.weight.T, m.a.bias,
                                                                m.b.bias, m.heads))
        model(x)
    assert len(records[0]["heads"]) == 4  # the registered layer's heads, with their weight norms, once
    assert all("dWq_fro" in head and "measured_from" not in head for head in records[0]["heads"])

    for options, reason in (({"cross": True}, "cross-attention or cached keys"),
                            ({"mask": torch.full((6, 6), 0.5, dtype=torch.float64)}, "position bias")):
        model = model_of(**options)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            rows = probe(model, torch.randn(1, 6, 16, dtype=torch.float64))
        assert rows == []
        assert sum(reason in str(w.message) for w in caught) == 2, [str(w.message) for w in caught]


def test_capture_sdpa_false_and_a_closed_recorder_leave_the_function_alone(sdpa):
    model = model_of()
    with AttentionRecorder(model, out=None, capture_sdpa=False):
        assert torch.nn.functional.scaled_dot_product_attention is sdpa
    first = AttentionRecorder(model, out=None, training_only=False, every=1, count="forwards")
    second = AttentionRecorder(model, out=None, training_only=False, every=1, count="forwards")
    first.close()  # closed out of order: the second's wrapper stays installed until it closes
    second.close()
    assert torch.nn.functional.scaled_dot_product_attention is sdpa  # both wrappers gone
    records = []
    with AttentionRecorder(model, out=None, training_only=False, every=1, count="forwards", callback=records.append):
        model(torch.randn(1, 4, 16, dtype=torch.float64))
    assert len(records[0]["heads"]) == 8  # a new recorder sees the calls through the inert wrapper


def test_padding_is_left_out_and_a_failing_capture_never_stops_training(monkeypatch):
    model = model_of()
    x = torch.randn(2, 8, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    # Sequence 0's last three keys are padding (a (batch, 1, 1, N) mask, as SDPA broadcasts it).
    padding = torch.ones(2, 1, 1, 8, dtype=torch.bool)
    padding[0, ..., 5:] = False
    model[0].mask = model[2].mask = padding
    rows = probe(model, x)
    assert {row["N"] for row in rows[0]} == {5} and {row["N"] for row in rows[1]} == {8}
    model_alone = model_of()
    check([row for row in rows[0] if row["layer"] == 0],
          [dict(row, N=5) for row in expected_rows(model_alone, x[:, :5], 0)], 0)

    def broken(*args, **kwargs):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(attncheck.torch, "_sdpa_scores", broken)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with AttentionRecorder(model, every=1, out=None, count="forwards") as recorder:
            out = model(x)
    assert out.shape == x.shape  # the forward went on
    assert sum("out of memory" in str(w.message) for w in caught) == 2  # one warning per layer
    assert recorder.layers == []
