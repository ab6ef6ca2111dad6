"""attncheck.torch.AttentionRecorder: leaves training bit for bit as it is, measures what PyTorch's attention is,
records on the steps it says, writes the log `attncheck report` plots, and detaches cleanly."""
import copy
import io
import json
import math
import os
import shutil
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import attncheck  # noqa: E402
from attncheck.torch import AttentionRecorder  # noqa: E402
from conftest import run_program  # noqa: E402

SEED = 20261121


def encoder(layers=2, d_model=16, heads=4, dropout=0.1):
    torch.manual_seed(SEED)
    layer = torch.nn.TransformerEncoderLayer(d_model, heads, dim_feedforward=32, dropout=dropout, batch_first=True)
    return torch.nn.TransformerEncoder(layer, layers)


def train(model, steps, recorder=None, call_step=False, batch=3, n=9):
    """A few Adam steps on fixed random data; the losses and the final gradients and weights."""
    torch.manual_seed(SEED + 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    data = torch.randn(steps, batch, n, 16)
    causal = torch.nn.Transformer.generate_square_subsequent_mask(n)  # float, -inf above the diagonal
    losses = []
    for step in range(steps):
        loss = model(data[step], mask=causal).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if recorder is not None and call_step:
            recorder.step()
        losses.append(loss.detach().clone())
    return losses, [p.grad.clone() for p in model.parameters()], [p.detach().clone() for p in model.parameters()]


def _weights(mha, e=16):
    """w_q, w_k, b_q, b_k of a MultiheadAttention as maps of rows."""
    return (mha.in_proj_weight[:e].T, mha.in_proj_weight[e:2 * e].T, mha.in_proj_bias[:e], mha.in_proj_bias[e:2 * e])


def read_log(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def test_training_is_bit_for_bit_the_same_with_the_recorder(tmp_path):
    plain = train(encoder(), 12)
    with AttentionRecorder(encoder(), every=5, out=tmp_path / "run") as recorder:
        recorded = train(recorder.model, 12, recorder)
    for a, b in zip(plain, recorded):
        for x, y in zip(a, b):
            assert torch.equal(x, y)
    lines = read_log(tmp_path / "run" / "attncheck-probe.jsonl")
    assert sorted({line["step"] for line in lines}) == [0, 5, 10]
    assert len(lines) == 3 * 2 * 4  # steps x layers x heads
    assert {line["checkpoint"] for line in lines} == {"step-000000", "step-000005", "step-000010"}
    assert all(line["causal"] and line["activation"] == "softmax" and line["N"] == 9 for line in lines)


def test_the_lines_are_attention_norms_of_the_layer_and_match_pytorchs_own_attention(tmp_path):
    model = encoder(layers=1, dropout=0.0)
    mha = model.layers[0].self_attn
    x = torch.randn(2, 7, 16)
    padding = torch.tensor([[False] * 5 + [True] * 2, [False] * 7])  # sequence 0 has two padded keys
    log = tmp_path / "log.jsonl"
    with AttentionRecorder(model, every=1, out=log, sample=0):
        model(x, src_key_padding_mask=padding)
    lines = read_log(log)
    assert [line["head"] for line in lines] == [0, 1, 2, 3]
    # The padded positions are left out: the rows of the sequence's five positions alone.
    e = 16
    expected = attncheck.attention_norms(x[0, :5], mha.in_proj_weight[:e].T, mha.in_proj_weight[e:2 * e].T,
                                         mha.in_proj_bias[:e], mha.in_proj_bias[e:2 * e], heads=4)
    for line, head in zip(lines, expected):
        assert line["N"] == 5
        assert {k: v for k, v in line.items() if k not in ("checkpoint", "step", "format_version")} == head
        assert line["step"] == 0 and line["checkpoint"] == "step-000000" and line["format_version"] == 2
    # PyTorch's attention probabilities of the same call, head by head, on the unpadded queries.
    with torch.no_grad():
        _, weights = mha(x, x, x, key_padding_mask=padding, need_weights=True, average_attn_weights=False)
    for line in lines:
        assert line["softmax_fro"] == pytest.approx(weights[0, line["head"], :5].double().norm().item(), rel=1e-6)
        # The entropy against NumPy on PyTorch's rows (float32 probabilities; the padded keys' weights are 0).
        rows = weights[0, line["head"], :5, :5].double().numpy()
        entropy = -np.mean(np.sum(rows * np.log(rows), axis=1))
        assert line["softmax_entropy"] == pytest.approx(entropy, rel=1e-5)
        assert 0 < line["softmax_entropy"] <= math.log(5)


def test_steps_count_training_forwards_or_step_calls(tmp_path):
    model = encoder(layers=1)
    with AttentionRecorder(model, every=10, out=tmp_path / "auto.jsonl") as recorder:
        for _ in range(25):
            model(torch.randn(2, 5, 16))
        model.eval()
        with torch.no_grad():
            model(torch.randn(2, 5, 16))  # evaluation: neither a step nor recorded
        model.train()
        assert recorder.current_step == 25
    assert sorted({line["step"] for line in read_log(tmp_path / "auto.jsonl")}) == [0, 10, 20]

    # One forward per step, step() after it: the same steps as counting forwards.
    with AttentionRecorder(model, every=10, out=tmp_path / "calls.jsonl") as recorder:
        for _ in range(25):
            model(torch.randn(2, 5, 16))
            recorder.step()
        assert recorder.current_step == 25
    assert sorted({line["step"] for line in read_log(tmp_path / "calls.jsonl")}) == [0, 10, 20]

    # Gradient accumulation: three forwards per step, the first of each recorded step measured.
    inputs = [torch.randn(2, 5, 16) for _ in range(3)]
    with AttentionRecorder(model, every=2, out=tmp_path / "accumulated.jsonl", count="steps") as recorder:
        for _ in range(5):
            for x in inputs:
                model(x)
            recorder.step()
        assert recorder.current_step == 5
        with pytest.raises(ValueError, match="count='forwards' counts forward passes"):
            AttentionRecorder(model, out=tmp_path / "x.jsonl", count="forwards").step()
    lines = read_log(tmp_path / "accumulated.jsonl")
    assert [line["step"] for line in lines] == [0] * 4 + [2] * 4 + [4] * 4
    first = attncheck.attention_norms(inputs[0][0], *_weights(model.layers[0].self_attn), heads=4)
    assert all(line["softmax_fro"] == first[line["head"]]["softmax_fro"] for line in lines[:4])


def test_the_report_plots_a_recorded_run_over_steps(tmp_path):
    run = tmp_path / "run"
    with AttentionRecorder(encoder(), every=4, out=run) as recorder:
        train(recorder.model, 9, recorder, call_step=True)
    plots = [] if shutil.which("gnuplot") else ["--no-plots"]
    result = run_program("report", run, "--out", tmp_path / "report", *plots)
    assert result.returncode == 0, result.stderr
    report = (tmp_path / "report" / "report.md").read_text()
    assert "- lines: `24`" in report and "- checkpoints: `3`" in report  # 3 steps x 2 layers x 4 heads
    mean = {}
    for line in read_log(run / "attncheck-probe.jsonl"):
        mean.setdefault(line["step"], []).append(line["softmax_fro"])
    for step in (0, 4, 8):
        # The table's row of the step: its checkpoint, 8 layer-heads and the mean ||A||_F of softmax.
        row = f"| {step} | step-{step:06d} | 8 | {np.mean(mean[step]):.4g} ["
        assert row in report
    if not plots:
        assert (tmp_path / "report" / "plots" / "probe-model1-attention.svg").stat().st_size > 0


def test_close_detaches_and_copies_of_a_recorded_model_are_plain(tmp_path):
    model = encoder(layers=1, dropout=0.0)
    mha = model.layers[0].self_attn
    log = tmp_path / "log.jsonl"
    recorder = AttentionRecorder(model, every=1, out=log)
    assert "forward" in mha.__dict__ and recorder.layers == [(0, "layers.0.self_attn")]

    # A copy computes with its own weights and is not recorded; a pickled model loads as a plain one.
    twin = copy.deepcopy(model)
    with torch.no_grad():
        twin.layers[0].self_attn.in_proj_weight.mul_(2)
    x = torch.randn(1, 4, 16)
    plain = copy.deepcopy(model)
    recorder.close()
    assert not torch.equal(twin(x), plain(x))
    assert not log.exists()  # neither copy wrote a line
    buffer = io.BytesIO()
    recorder = AttentionRecorder(model, every=1, out=log)
    torch.save(model, buffer)
    recorder.close()
    buffer.seek(0)
    loaded = torch.load(buffer)
    assert "forward" not in mha.__dict__
    assert not model._forward_hooks and not model._forward_pre_hooks
    model(x)
    loaded(x)
    assert not log.exists()
    assert torch.equal(loaded(x), model(x))


class SelfAttention(torch.nn.Module):
    """Attention written by hand, as in examples/train_digits.py: x^3/sqrt(N) on the scaled scores."""

    def __init__(self, hidden=8, heads=2):
        super().__init__()
        self.heads = heads
        self.query, self.key = torch.nn.Linear(hidden, hidden), torch.nn.Linear(hidden, hidden)

    def scores(self, h):
        b, n, _ = h.shape
        split = lambda t: t.view(b, n, self.heads, -1).transpose(1, 2)
        q, k = split(self.query(h)), split(self.key(h))
        return q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])

    def forward(self, h):
        return self.scores(h) ** 3 / math.sqrt(h.shape[1])


def test_registered_modules_from_weights_or_from_scores(tmp_path):
    module = SelfAttention()
    h = torch.randn(2, 6, 8)
    weights = lambda m, args, kwargs, out: dict(x=args[0], w_q=m.query.weight.T, w_k=m.key.weight.T, b_q=m.query.bias,
                                                b_k=m.key.bias, heads=m.heads, activation="poly3_scaled")
    log = tmp_path / "log.jsonl"
    with AttentionRecorder(module, every=1, out=log) as recorder:
        recorder.register(module, weights)
        module(h)
    by_weights = read_log(log)
    expected = attncheck.attention_norms(h[0], module.query.weight.T, module.key.weight.T, module.query.bias,
                                         module.key.bias, heads=2, activation="poly3_scaled")
    assert [{k: v for k, v in line.items() if k not in ("checkpoint", "step", "format_version")}
            for line in by_weights] == expected
    # The map the module computes is the poly3_scaled one of the log.
    with torch.no_grad():
        maps = module(h)[0]
    for line in by_weights:
        assert line["poly3_scaled_fro"] == pytest.approx(maps[line["head"]].double().norm().item(), rel=1e-5)

    scores_log = tmp_path / "scores.jsonl"
    with AttentionRecorder(module, every=1, out=scores_log, activation="poly3_scaled") as recorder:
        recorder.register(module, lambda m, args, kwargs, out: {"scores": m.scores(args[0])})
        module(h)
    by_scores = read_log(scores_log)
    for a, b in zip(by_scores, by_weights):
        assert "dWq_fro" not in a and "D" not in a
        for k in ("softmax_fro", "grad_fro", "poly3_scaled_fro", "poly3_scaled_grad_fro", "relu_n_fro", "score_std"):
            assert a[k] == pytest.approx(b[k], rel=1e-6)
    assert run_program("report", scores_log, "--out", tmp_path / "report", "--no-plots").returncode == 0


def test_calls_it_cannot_measure_are_skipped_with_one_warning_and_training_goes_on(tmp_path):
    torch.manual_seed(SEED)
    decoder = torch.nn.TransformerDecoderLayer(16, 4, dim_feedforward=32, dropout=0.0, batch_first=True)
    log = tmp_path / "log.jsonl"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with AttentionRecorder(decoder, every=1, out=log) as recorder:
            assert recorder.layers == [(0, "self_attn"), (1, "multihead_attn")]
            for _ in range(3):
                decoder(torch.randn(1, 5, 16), torch.randn(1, 7, 16))
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(messages) == 1 and "layer 1 (multihead_attn)" in messages[0] and "cross-attention" in messages[0]
    assert {line["layer"] for line in read_log(log)} == {0}
    assert len(read_log(log)) == 3 * 4

    biased = torch.zeros(5, 5)
    biased[0, 1] = 0.5  # an additive bias, not a mask
    model = encoder(layers=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with AttentionRecorder(model, every=1, out=tmp_path / "biased.jsonl"):
            model(torch.randn(1, 5, 16), mask=biased)
    assert any("values other than 0 and -inf" in str(w.message) for w in caught)
    assert not (tmp_path / "biased.jsonl").exists()


def test_bad_settings_are_value_errors(tmp_path):
    model = encoder(layers=1)
    with pytest.raises(ValueError, match="every = 0 must be a positive integer"):
        AttentionRecorder(model, every=0, out=tmp_path / "x.jsonl")
    with pytest.raises(ValueError, match="activation 'gelu' is not one of softmax, poly3_scaled, poly3, relu_n"):
        AttentionRecorder(model, out=tmp_path / "x.jsonl", activation="gelu")
    with pytest.raises(ValueError, match="model is a list, not a torch.nn.Module"):
        AttentionRecorder([model], out=tmp_path / "x.jsonl")
    with AttentionRecorder(model, out=tmp_path / "x.jsonl") as recorder:
        with pytest.raises(ValueError, match="already recorded"):
            recorder.register(model.layers[0].self_attn, lambda *a: None)
    assert "forward" not in model.layers[0].self_attn.__dict__


def _recorded_with(tmp_path, **options):
    """Twelve training forwards of a two-layer encoder, recorded every 5: steps 0, 5 and 10."""
    model = encoder()
    with AttentionRecorder(model, every=5, out=tmp_path / "run.jsonl", **options) as recorder:
        for _ in range(12):
            model(torch.randn(2, 7, 16))
        return recorder, read_log(tmp_path / "run.jsonl")


def files_under(folder):
    """Every entry under `folder`: a regular file's bytes, a symbolic link's target, else its kind."""
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_symlink():
            out[path] = os.readlink(path)
        elif path.is_file():
            out[path] = path.read_bytes()
        else:
            out[path] = "folder" if path.is_dir() else "other"
    return out


def test_out_is_refused_when_it_names_a_file_the_recorder_did_not_write(tmp_path):
    model = encoder(layers=1, dropout=0.0)
    user = tmp_path / "user"
    user.mkdir()
    (user / "notes.jsonl").write_bytes(b'{"epoch": 1, "loss": 0.5}\n')
    (user / "binary.jsonl").write_bytes(bytes(range(256)))
    (user / "blank-first.jsonl").write_bytes(b'\n\r\n{"epoch": 1, "loss": 0.5}\n')  # the reader skips blank lines
    (user / "blanks.jsonl").write_bytes(b"\n  \n")
    (user / "notes.txt").write_bytes(b"my notes\n")
    (user / "run").mkdir()
    (user / "run" / "attncheck-probe.jsonl").write_bytes(b"step,loss\n0,1.5\n")
    (user / "target.jsonl").write_bytes(b"")  # a log an empty file would be: the link is refused all the same
    os.symlink(user / "target.jsonl", user / "link.jsonl")
    os.symlink(user / "nowhere.jsonl", user / "dangling.jsonl")
    os.mkfifo(user / "fifo.jsonl")
    before = files_under(user)
    refusals = [
        ("notes.jsonl", "notes.jsonl", r"is not an attncheck probe log \(.*key \"checkpoint\" is missing\)"),
        ("binary.jsonl", "binary.jsonl", "is not an attncheck probe log"),
        ("blank-first.jsonl", "blank-first.jsonl",
         r"is not an attncheck probe log \(.*key \"checkpoint\" is missing\)"),
        ("blanks.jsonl", "blanks.jsonl", r"is not an attncheck probe log \(it holds no record of one\)"),
        ("run", "run/attncheck-probe.jsonl", "is not an attncheck probe log"),
        ("notes.txt", "notes.txt", "is an existing file, not a folder nor a log named"),
        ("notes.txt/x.jsonl", "notes.txt", "cannot create the folder"),
        ("link.jsonl", "link.jsonl", "is a symbolic link, which the recorder did not make"),
        ("dangling.jsonl", "dangling.jsonl", "is a symbolic link, which the recorder did not make"),
        ("fifo.jsonl", "fifo.jsonl", "is not a regular file"),
    ]
    for out, named, reason in refusals:
        with pytest.raises(ValueError, match=reason) as error:
            AttentionRecorder(model, every=1, out=user / out, tensorboard=tmp_path / f"tb-{len(out)}")
        assert str(user / named) in str(error.value)
        if "cannot create" not in reason:
            assert "give a new name, or a folder for the log" in str(error.value)
        assert not (tmp_path / f"tb-{len(out)}").exists()
    assert "forward" not in model.layers[0].self_attn.__dict__  # nothing was attached
    model(torch.randn(1, 5, 16))
    assert files_under(user) == before


def test_out_appends_to_an_attncheck_log_or_an_empty_file(tmp_path):
    model = encoder(layers=1, dropout=0.0)
    log, empty = tmp_path / "log.jsonl", tmp_path / "empty.jsonl"
    empty.touch()
    for out in (log, log, empty):
        with AttentionRecorder(model, every=1, out=out):
            model(torch.randn(1, 5, 16))
    assert [line["checkpoint"] for line in read_log(log)] == ["step-000000"] * 8  # 2 runs x 4 heads
    assert len(read_log(empty)) == 4
    # A log `attncheck probe --watch` wrote, whose lines carry the checkpoint's fingerprint.
    watched = tmp_path / "watched.jsonl"
    watched.write_text(json.dumps(dict(read_log(log)[0], checkpoint="ckpt-1", checkpoint_fingerprint="1:2")) + "\n")
    with AttentionRecorder(model, every=1, out=watched):
        model(torch.randn(1, 5, 16))
    assert [line["checkpoint"] for line in read_log(watched)] == ["ckpt-1"] + ["step-000000"] * 4


def test_the_callback_gets_each_recorded_step_with_the_logs_rows_and_their_summary(tmp_path):
    records = []
    _, lines = _recorded_with(tmp_path, callback=records.append)
    assert [r["step"] for r in records] == [0, 5, 10]
    for record in records:
        logged = [line for line in lines if line["step"] == record["step"]]
        assert [(h["layer"], h["head"]) for h in record["heads"]] == [(l["layer"], l["head"]) for l in logged]
        assert [h["softmax_fro"] for h in record["heads"]] == [l["softmax_fro"] for l in logged]
        ratios = [h["grad_over_half_sqrt_N"] for h in record["heads"]]
        summary = record["summary"]
        assert summary["heads"] == 8  # two layers of four heads
        assert summary["grad_over_half_sqrt_N/max"] == max(ratios)
        assert summary["grad_over_half_sqrt_N/mean"] == pytest.approx(sum(ratios) / len(ratios), rel=1e-15)
        assert 0 < summary["softmax_over_sqrt_N/max"] <= 1  # Theorem 4.1


def test_tensorboard_gets_the_summary_and_every_heads_ratios(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    records = []
    recorder, _ = _recorded_with(tmp_path, callback=records.append, tensorboard=tmp_path / "tb")
    assert recorder._tensorboard is None  # closed with the recorder
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    tags = events.Tags()["scalars"]
    assert "attncheck/grad_over_half_sqrt_N/max" in tags
    assert "attncheck/layer 1/head 3/softmax_over_sqrt_N" in tags
    assert {"attncheck/layer 1/head 3/softmax_entropy", "attncheck/layer 1/head 3/score_max_abs",
            "attncheck/heads_near_collapse", "attncheck/heads_past_max_logit", "attncheck/softmax_entropy/min"} <= set(tags)
    scalars = events.Scalars("attncheck/grad_over_half_sqrt_N/max")
    assert [s.step for s in scalars] == [0, 5, 10]
    # TensorBoard keeps float32.
    assert [s.value for s in scalars] == pytest.approx([r["summary"]["grad_over_half_sqrt_N/max"] for r in records],
                                                       rel=1e-6)
    head = events.Scalars("attncheck/layer 1/head 3/softmax_over_sqrt_N")
    assert [s.value for s in head] == pytest.approx(
        [next(h for h in r["heads"] if (h["layer"], h["head"]) == (1, 3))["softmax_over_sqrt_N"] for r in records],
        rel=1e-6)


def test_a_tensorboard_folder_without_the_package_or_a_bad_callback_is_a_value_error(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="callback must be callable"):
        AttentionRecorder(encoder(), out=tmp_path / "x.jsonl", callback=3)
    monkeypatch.setitem(__import__("sys").modules, "torch.utils.tensorboard", None)
    with pytest.raises(ValueError, match="needs the tensorboard package"):
        AttentionRecorder(encoder(), out=tmp_path / "y.jsonl", tensorboard=tmp_path / "tb")


def test_padding_is_left_out_of_the_masks_eager_and_sdpa_attention_give():
    """Left padding of 3 in a causal layer of N = 8, as transformers' eager masks give it (padded queries attend to
    nothing) and as its SDPA masks give it (padded queries attend to everything, so that no row is empty): both are
    the causal mask of the 5 tokens. A bidirectional layer's padding (the keys nobody attends to) likewise."""
    from attncheck.torch import _without_padding
    n, pad = 8, 3
    x = np.arange(n * 2, dtype=float).reshape(n, 2)
    causal = np.tril(np.ones((n, n), dtype=bool))
    eager = causal.copy()
    eager[:, :pad] = False
    sdpa = eager.copy()
    sdpa[:pad] = True
    positions = np.arange(n)
    for mask in (eager, sdpa):
        kept, kept_mask, is_causal, kept_positions = _without_padding(x, mask, True, positions)
        assert (kept == x[pad:]).all() and kept_mask is None and is_causal
        assert (kept_positions == positions[pad:]).all()
    bidirectional = np.ones((n, n), dtype=bool)
    bidirectional[:, n - 2:] = False  # right padding of 2
    kept, kept_mask, is_causal, _ = _without_padding(x, bidirectional, False, None)
    assert (kept == x[:n - 2]).all() and kept_mask is None and not is_causal
    window = np.tril(np.ones((n, n), dtype=bool)) & ~np.tril(np.ones((n, n), dtype=bool), -3)  # sliding window 3
    kept, kept_mask, is_causal, _ = _without_padding(x, window, True, None)
    assert (kept == x).all() and (kept_mask == window).all()


def test_what_if_expressions_on_the_heads_own_scores():
    # what_if in probe(), the recorder and attention_norms: the expressions' norms on the same scores, equal to the
    # built-in columns they can also write, and to NumPy's on the scores themselves.
    torch.manual_seed(3)
    layer = torch.nn.MultiheadAttention(8, 2, batch_first=True).double()
    x = torch.randn(1, 12, 8, dtype=torch.float64)
    w_q, w_k = layer.in_proj_weight[:8].detach().numpy().T, layer.in_proj_weight[8:16].detach().numpy().T
    b_q, b_k = layer.in_proj_bias[:8].detach().numpy(), layer.in_proj_bias[8:16].detach().numpy()
    xs = x[0].numpy()
    heads = attncheck.attention_norms(xs, w_q, w_k, b_q, b_k, heads=2, what_if=["x^3/sqrt(N)", "tanh(x)"])
    for h, row in enumerate(heads):
        got = {w["phi"]: w for w in row["what_if"]}
        for key in ("fro", "grad_fro", "dWq_fro", "dWk_fro"):
            assert got["x^3/sqrt(N)"][key] == pytest.approx(row[f"poly3_scaled_{key}"], rel=1e-12)
        q, k = xs @ w_q + b_q, xs @ w_k + b_k
        s = q[:, 4 * h:4 * h + 4] @ k[:, 4 * h:4 * h + 4].T / 2
        assert got["tanh(x)"]["fro"] == pytest.approx(np.linalg.norm(np.tanh(s)), rel=1e-12)
        assert got["tanh(x)"]["grad_fro"] == pytest.approx(np.linalg.norm(1 - np.tanh(s) ** 2), rel=1e-12)
    with pytest.raises(ValueError, match="at character 3"):
        attncheck.attention_norms(xs, w_q, w_k, heads=2, what_if="x^")

    class SelfAttention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.attention = layer

        def forward(self, inputs):
            return self.attention(inputs, inputs, inputs)[0]

    rows = attncheck.torch.probe(SelfAttention(), x, what_if=["x^3/sqrt(N)", "tanh(x)"])
    assert [r["what_if"] for r in rows] == [r["what_if"] for r in heads]


def test_a_run_whose_logits_grow_warns_once_per_head_at_the_step_it_crosses_each_threshold(tmp_path):
    """A constructed run: the query weights double every step, so the logits grow and the heads' attention
    collapses towards one-hot rows. Each head is warned once per kind, at the first recorded step past the
    threshold, and the summary counts the heads past it at every step."""
    model = encoder(layers=1, heads=2, dropout=0.0)
    mha = model.layers[0].self_attn
    torch.manual_seed(SEED + 2)
    x = torch.randn(1, 12, 16)
    records = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with AttentionRecorder(model, every=1, out=tmp_path / "run", count="forwards", callback=records.append,
                               collapse_threshold=0.9, max_logit=30.0):
            for _ in range(12):
                model(x)
                with torch.no_grad():
                    mha.in_proj_weight[:16] *= 2
    lines = read_log(tmp_path / "run" / "attncheck-probe.jsonl")
    messages = [str(w.message) for w in caught if "attncheck: layer" in str(w.message)]
    for head in (0, 1):
        of_head = sorted((line for line in lines if line["head"] == head), key=lambda line: line["step"])
        for kind, key, threshold in (("nears entropy collapse", "softmax_over_sqrt_N", 0.9),
                                     ("largest logit", "score_max_abs", 30.0)):
            first = next(line["step"] for line in of_head if line[key] > threshold)
            warned = [m for m in messages if f"layer 0 head {head} " in m and kind in m]
            assert len(warned) == 1, (kind, head, messages)
            assert f"at step {first}" in warned[0]
    # The entropy falls as the logits grow.
    entropies = [line["softmax_entropy"] for line in lines if line["head"] == 0]
    assert entropies[-1] < 0.2 * entropies[0]
    for record in records:
        heads = record["heads"]
        assert record["summary"]["heads_near_collapse"] == sum(h["softmax_over_sqrt_N"] > 0.9 for h in heads)
        assert record["summary"]["heads_past_max_logit"] == sum(h["score_max_abs"] > 30.0 for h in heads)
        assert record["summary"]["softmax_entropy/min"] == min(h["softmax_entropy"] for h in heads)
    assert records[0]["summary"]["heads_near_collapse"] == 0 and records[-1]["summary"]["heads_near_collapse"] == 2

    # None turns a warning off; a threshold must be a positive number.
    with warnings.catch_warnings(record=True) as quiet:
        warnings.simplefilter("always")
        with AttentionRecorder(model, every=1, out=None, count="forwards", collapse_threshold=None,
                               max_logit=None):
            model(x)
    assert not [w for w in quiet if "attncheck: layer" in str(w.message)]
    for bad in (0, -1.0, float("nan"), True, "0.9"):
        with pytest.raises(ValueError, match="collapse_threshold = .* must be a positive number"):
            AttentionRecorder(model, out=None, collapse_threshold=bad)


def test_probe_rows_as_a_pandas_data_frame():
    pandas = pytest.importorskip("pandas")
    model = encoder(layers=2, dropout=0.0).eval()
    x = torch.randn(2, 6, 16)
    rows = attncheck.torch.probe(model, x, what_if=["x^3/sqrt(N)"])
    frame = attncheck.torch.probe(model, x, what_if=["x^3/sqrt(N)"], as_frame=True)
    assert isinstance(frame, pandas.DataFrame) and len(frame) == 2 * 2 * 4  # sequences x layers x heads
    assert list(frame["sequence"]) == [0] * 8 + [1] * 8
    for (_, line), row in zip(frame.iterrows(), rows[0] + rows[1]):
        assert (line["layer"], line["head"], line["softmax_fro"]) == (row["layer"], row["head"], row["softmax_fro"])
        assert line["what_if[x^3/sqrt(N)].fro"] == row["what_if"][0]["fro"]
    one = attncheck.torch.probe(model, x[:1], as_frame=True)
    assert "sequence" not in one.columns and len(one) == 8


def test_a_forward_that_bypasses_the_measured_layers_warns_and_probe_avoids_it():
    """nn.TransformerEncoderLayer in evaluation mode without gradients runs a fused kernel that never calls its
    MultiheadAttention's forward: the recorder says so once instead of recording nothing silently, and probe()
    keeps gradients on for such models, so that their rows are there."""
    model = encoder(layers=2, dropout=0.0).eval()
    x = torch.randn(1, 6, 16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with AttentionRecorder(model, every=1, out=None, training_only=False, count="forwards"):
            with torch.no_grad():
                model(x)
                model(x)
    said = [str(w.message) for w in caught if "ran none of its 2 measured layers' forwards" in str(w.message)]
    assert len(said) == 1, [str(w.message) for w in caught]
    rows = attncheck.torch.probe(model, x)
    mha = model.layers[0].self_attn
    expected = attncheck.attention_norms(x[0], *_weights(mha), heads=4)
    assert len(rows) == 8
    for row, reference in zip(rows[:4], expected):
        assert row["softmax_fro"] == pytest.approx(reference["softmax_fro"], rel=1e-12)
