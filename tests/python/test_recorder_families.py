"""attncheck.torch recognising nanoGPT's CausalSelfAttention without an adapter (every head equal to the module's
own attention and to autograd through its own forward, to 1e-10 relative; a fork that computes something else
refused with its reason), and the warning when a model in evaluation mode records nothing."""
import copy
import json
import math
import warnings

import pytest

torch = pytest.importorskip("torch")

import attncheck.torch  # noqa: E402
from attncheck.torch import AttentionRecorder  # noqa: E402

nn, F = torch.nn, torch.nn.functional
RELATIVE = 1e-10
TOKENS = [3, 5, 17, 33, 8, 21, 9, 38, 12, 30, 2]


class CausalSelfAttention(nn.Module):
    """nanoGPT's definition (model.py), as written there."""

    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.dropout = config.dropout
        self.flash = hasattr(torch.nn.functional, 'scaled_dot_product_attention')
        if not self.flash:
            self.register_buffer("bias", torch.tril(torch.ones(config.block_size, config.block_size))
                                 .view(1, 1, config.block_size, config.block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        if self.flash:
            y = torch.nn.functional.scaled_dot_product_attention(
                q, k, v, attn_mask=None, dropout_p=self.dropout if self.training else 0, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))
            att = F.softmax(att, dim=-1)
            att = self.attn_dropout(att)
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        y = self.resid_dropout(self.c_proj(y))
        return y


class Config:
    n_embd, n_head, block_size, bias, dropout, vocab_size, n_layer = 24, 3, 16, True, 0.0, 40, 2


class Block(nn.Module):
    def __init__(self, config, attention=CausalSelfAttention):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(config.n_embd), nn.LayerNorm(config.n_embd)
        self.attn = attention(config)
        self.mlp = nn.Sequential(nn.Linear(config.n_embd, 4 * config.n_embd), nn.GELU(),
                                 nn.Linear(4 * config.n_embd, config.n_embd))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, config=Config, attention=CausalSelfAttention):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(config.vocab_size, config.n_embd), nn.Embedding(config.block_size,
                                                                                          config.n_embd)
        self.h = nn.ModuleList([Block(config, attention) for _ in range(config.n_layer)])
        self.ln_f, self.lm_head = nn.LayerNorm(config.n_embd), nn.Linear(config.n_embd, config.vocab_size)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[-1]))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def gpt(attention=CausalSelfAttention, seed=0):
    torch.manual_seed(seed)
    model = GPT(attention=attention).double()
    with torch.no_grad():  # weights of order one: attention far from uniform
        for layer in model.h:
            layer.attn.c_attn.weight.mul_(3.0)
    return model


def own_attention(model, ids):
    """Per layer: the module's own attention probabilities (heads, N, N), taken where its forward hands them to
    attn_dropout (the explicit path, which nanoGPT takes without PyTorch's fused attention), and their autograd
    Jacobian in c_attn.weight through the module's own forward at the input it was called with. The model is
    left hooked and on the explicit path: give it a copy."""
    inputs, taken = [], []
    for block in model.h:
        attention = block.attn
        if not hasattr(attention, "bias"):
            attention.register_buffer("bias", torch.ones(16, 16).tril().view(1, 1, 16, 16))
        attention.flash = False
        attention.register_forward_hook(lambda m, args, out: inputs.append(args[0]))
        attention.attn_dropout.register_forward_hook(lambda m, args, out: taken.append(out))
    with torch.no_grad():
        model(ids[None])
    results = []
    for block, x in zip(model.h, inputs):
        attention = block.attn

        def probabilities(weight):
            taken.clear()
            torch.nn.utils.stateless.functional_call(attention, {"c_attn.weight": weight}, (x,))
            return taken[-1][0]

        weight = attention.c_attn.weight.detach().clone()
        results.append((probabilities(weight).detach(),
                        torch.autograd.functional.jacobian(probabilities, weight, vectorize=True)))
    return results


def test_nanogpt_heads_equal_the_modules_own_attention_and_autograd(tmp_path):
    model = gpt().eval()
    ids = torch.tensor(TOKENS)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # recognised, checked against nanoGPT's definition and measured
        rows = attncheck.torch.probe(model, ids)
    e, d, heads = Config.n_embd, Config.n_embd // Config.n_head, Config.n_head
    assert [(row["layer"], row["head"], row["N"], row["causal"]) for row in rows] == \
        [(layer, h, len(TOKENS), True) for layer in range(2) for h in range(heads)]
    worst = 0.0
    for layer, (a, jacobian) in enumerate(own_attention(copy.deepcopy(model), ids)):
        for h in range(heads):
            # c_attn's rows: every head's query, then every head's key, then every head's value.
            d_wq = jacobian[h][..., h * d:(h + 1) * d, :].norm()
            d_wk = jacobian[h][..., e + h * d:e + (h + 1) * d, :].norm()
            assert float(jacobian[h].norm()) ** 2 == pytest.approx(float(d_wq) ** 2 + float(d_wk) ** 2, rel=1e-12)
            softmax_jacobian = torch.autograd.functional.jacobian(lambda s: torch.softmax(s, dim=-1), a[h].log())
            expected = {"softmax_fro": a[h].norm(), "grad_fro": torch.nan_to_num(softmax_jacobian).norm(),
                        "dWq_fro": d_wq, "dWk_fro": d_wk}
            row = rows[layer * heads + h]
            for key, value in expected.items():
                worst = max(worst, abs(row[key] / float(value) - 1))
                assert row[key] == pytest.approx(float(value), rel=RELATIVE), (layer, h, key)
    print(f"nanoGPT: {len(rows)} heads, largest relative difference {worst:.2e}")

    # The recorder, without an adapter, on a training step: the same rows.
    model.train()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with AttentionRecorder(model, every=1, out=tmp_path / "log.jsonl") as recorder:
            model(ids[None]).logsumexp(-1).mean().backward()
            recorder.step()
    lines = [json.loads(line) for line in open(tmp_path / "log.jsonl")]
    assert len(lines) == len(rows)
    for line, row in zip(lines, rows):
        for key in ("softmax_fro", "grad_fro", "dWq_fro", "dWk_fro"):
            assert line[key] == pytest.approx(row[key], rel=1e-12)


def test_a_fork_that_computes_something_else_is_refused_with_its_reason():
    """Named CausalSelfAttention with nanoGPT's projections, but scaling the scores by 1/d: not measured as
    nanoGPT's (one warning per layer saying why); one called with more than x is refused too."""
    class Scaled(CausalSelfAttention):
        def forward(self, x):
            B, T, C = x.size()
            q, k, v = (t.view(B, T, self.n_head, -1).transpose(1, 2) for t in self.c_attn(x).split(self.n_embd, 2))
            att = (q @ k.transpose(-2, -1) / k.size(-1)).masked_fill(torch.ones(T, T).triu(1).bool(), -math.inf)
            return self.c_proj((att.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C))

    Scaled.__name__ = "CausalSelfAttention"
    model = gpt(Scaled)
    with pytest.warns(RuntimeWarning, match=r"layer 0 .*differs from nanoGPT's causal softmax attention by "
                                            r"[0-9.e+-]+ relative") as caught:
        assert attncheck.torch.probe(model, torch.tensor(TOKENS)) == []
    assert len([w for w in caught if "not recorded" in str(w.message)]) == 2

    class WithMask(CausalSelfAttention):
        def forward(self, x, mask=None):
            return super().forward(x)

    WithMask.__name__ = "CausalSelfAttention"
    layer = WithMask(Config).double()
    with pytest.warns(RuntimeWarning, match="called with mask besides x"):
        with AttentionRecorder(layer, every=1, out=None, training_only=False):
            layer(torch.randn(1, 5, Config.n_embd, dtype=torch.float64), mask=torch.ones(5, 5))


def test_a_model_in_evaluation_mode_warns_once_at_step_that_nothing_was_recorded(tmp_path):
    model = gpt().eval()
    ids = torch.tensor(TOKENS)[None]
    with AttentionRecorder(model, every=1, out=tmp_path / "eval.jsonl") as recorder:
        with pytest.warns(RuntimeWarning, match=r"evaluation mode.*training_only=False") as caught:
            for _ in range(3):
                model(ids)
                recorder.step()
    assert len([w for w in caught if "evaluation mode" in str(w.message)]) == 1
    assert not (tmp_path / "eval.jsonl").exists() or (tmp_path / "eval.jsonl").read_text() == ""

    # Training steps with an evaluation pass between them, or training_only=False: no warning, lines recorded.
    for training_only in (True, False):
        log = tmp_path / f"train-{training_only}.jsonl"
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with AttentionRecorder(model, every=1, out=log, training_only=training_only) as recorder:
                for _ in range(2):
                    model.train(training_only)
                    model(ids).sum().backward()
                    with torch.no_grad():
                        model.eval()(ids)
                    recorder.step()
        assert {line["step"] for line in map(json.loads, open(log))} == {0, 1}
