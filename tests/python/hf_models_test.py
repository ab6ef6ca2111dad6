"""attncheck.torch on Hugging Face transformers models (4.38.2, scripts/pyenv's "transformers" set): layers
recognised without adapters in every family, attncheck.torch.probe equal to `attncheck probe --json` on the saved
checkpoint, padding left out, the recorder's lines equal to the command line's at the same step, and a warning
that names what it saw when nothing is recognised.

Tiny random models in float64, built by transformers itself and saved with save_pretrained. Where 4.38.2 computes
in float32 inside a float64 model (the softmax, RMSNorm, rotary angles), the same formulas are put back in float64
(tests/probes/hf_decoder_reference.py), so both sides are double precision and agree to 1e-10 relative.
"""
import json
import math
import os
import sys
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import attncheck.torch  # noqa: E402
from conftest import run_program  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "probes"))
from hf_decoder_reference import decoder_config, decoder_float64, decoder_randomize, float64_softmax  # noqa: E402
from hf_reference import encoder_randomize  # noqa: E402

transformers.logging.set_verbosity_error()
TOKENS = [3, 5, 17, 33, 8, 21, 9, 38, 12, 30, 2]
RELATIVE = 1e-10


def _llama_config():
    return transformers.LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                    rms_norm_eps=1e-6, rope_theta=1000.0, tie_word_embeddings=False)


def _decoder(family, folder):
    config = _llama_config() if family == "llama" else decoder_config(family)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).double()
    decoder_randomize(model, family)
    model.save_pretrained(folder, safe_serialization=True)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float64,
                                                              attn_implementation="eager")
    decoder_float64(model, family)
    return model


def _encoder(family, folder):
    if family == "bert":
        model = transformers.BertModel(transformers.BertConfig(
            vocab_size=40, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            max_position_embeddings=20), add_pooling_layer=False)
    elif family == "roberta":
        model = transformers.RobertaModel(transformers.RobertaConfig(
            vocab_size=40, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            max_position_embeddings=20, type_vocab_size=1), add_pooling_layer=False)
    elif family == "distilbert":
        model = transformers.DistilBertModel(transformers.DistilBertConfig(
            vocab_size=40, dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=16))
    elif family == "gpt2":
        model = transformers.GPT2Model(transformers.GPT2Config(
            vocab_size=40, n_embd=32, n_layer=2, n_head=4, n_positions=20))
    elif family == "clip-text":
        model = transformers.CLIPTextModel(transformers.CLIPTextConfig(
            vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            max_position_embeddings=16))
    elif family == "vit":
        model = transformers.ViTModel(transformers.ViTConfig(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, image_size=16,
            patch_size=8), add_pooling_layer=False)
    elif family == "dinov2":
        model = transformers.Dinov2Model(transformers.Dinov2Config(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=4, mlp_ratio=2, image_size=16, patch_size=8))
    elif family == "clip-vision":
        model = transformers.CLIPVisionModel(transformers.CLIPVisionConfig(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, image_size=16,
            patch_size=8))
    else:
        raise AssertionError(family)
    torch.manual_seed(1)
    model = encoder_randomize(model.double().eval(), 1)
    model.save_pretrained(folder, safe_serialization=True)
    return model


VISION = ("vit", "dinov2", "clip-vision")
DECODERS = ("llama", "mistral", "qwen2", "gemma")
FAMILIES = ("bert", "roberta", "distilbert", "gpt2", "clip-text") + DECODERS + VISION


def _model(family, folder):
    float64_softmax()
    return _decoder(family, folder) if family in DECODERS else _encoder(family, folder)


def _inputs(family, folder):
    """The input both sides see: token ids (written for --tokens), or pixel values (for --pixels)."""
    if family in VISION:
        pixels = np.random.default_rng(5).normal(0, 1, (3, 16, 16))
        np.save(os.path.join(folder, "pixels.npy"), pixels)
        return ["--pixels", os.path.join(folder, "pixels.npy")], torch.tensor(pixels)[None]
    tokens = TOKENS[:9] if family == "distilbert" else TOKENS
    with open(os.path.join(folder, "tokens.txt"), "w") as f:
        f.write(" ".join(map(str, tokens)) + "\n")
    return ["--tokens", os.path.join(folder, "tokens.txt")], torch.tensor(tokens)


def assert_rows_equal(ours, theirs, relative=RELATIVE):
    assert len(ours) == len(theirs) and len(ours) > 0
    worst = 0.0
    for mine, row in zip(ours, theirs):
        assert (mine["layer"], mine["head"]) == (row["layer"], row["head"])
        assert set(row) - {"activation"} <= set(mine), set(row) - set(mine)
        for key, value in row.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                assert mine[key] == value, (key, mine[key], value)
            else:
                scale = max(abs(value), 1e-300)
                worst = max(worst, abs(mine[key] - value) / scale if value else abs(mine[key]))
                assert mine[key] == pytest.approx(value, rel=relative, abs=1e-13), (mine["layer"], mine["head"], key)
    return worst


@pytest.mark.parametrize("family", FAMILIES)
def test_probe_in_memory_equals_the_command_line_on_the_saved_checkpoint(family, tmp_path):
    folder = str(tmp_path / family)
    model = _model(family, folder)
    args, inputs = _inputs(family, folder)
    cli = json.loads(run_program("probe", folder, *args, "--json").stdout)["heads"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every layer recognised and measured: not one skipped
        rows = attncheck.torch.probe(model, inputs)
    assert {row["layer"] for row in rows} == set(range(model.config.num_hidden_layers if hasattr(
        model.config, "num_hidden_layers") else model.config.n_layer))
    worst = assert_rows_equal(rows, cli)
    print(f"{family}: {len(rows)} heads, largest relative difference {worst:.2e}")


@pytest.mark.parametrize("family", ("bert", "distilbert", "gpt2", "llama", "mistral"))
@pytest.mark.parametrize("side", ("right", "left"))
def test_a_padded_batch_gives_the_rows_of_each_sequence_without_padding(family, side, tmp_path):
    if family in ("bert", "distilbert") and side == "left":
        pytest.skip("encoders are padded on the right")
    model = _model(family, str(tmp_path / family))
    short, full = TOKENS[:7], TOKENS[:10]
    pad = 0
    padded = [pad] * (len(full) - len(short)) + short if side == "left" else short + [pad] * (len(full) - len(short))
    mask = [int(i >= len(full) - len(short)) for i in range(len(full))] if side == "left" else \
        [1] * len(short) + [0] * (len(full) - len(short))
    batch = {"input_ids": torch.tensor([padded, full]), "attention_mask": torch.tensor([mask, [1] * len(full)])}
    if side == "left":
        # Positions count from the first token, as generate() gives them.
        batch["position_ids"] = torch.tensor([[0] * (len(full) - len(short)) + list(range(len(short))),
                                              list(range(len(full)))])
    padded_rows, full_rows = attncheck.torch.probe(model, batch)
    alone_short = attncheck.torch.probe(model, torch.tensor(short))
    alone_full = attncheck.torch.probe(model, torch.tensor(full))
    assert all(row["N"] == len(short) for row in padded_rows)
    assert_rows_equal(padded_rows, alone_short, relative=1e-9)
    assert_rows_equal(full_rows, alone_full, relative=1e-12)


def test_the_recorder_lines_equal_the_command_line_on_the_checkpoint_of_the_same_step(tmp_path):
    folder = str(tmp_path / "llama")
    model = _model("llama", folder)
    model.train()
    data = torch.randint(0, 50, (12, 2, 9), generator=torch.Generator().manual_seed(3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    log = tmp_path / "run" / "attncheck-probe.jsonl"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with attncheck.torch.AttentionRecorder(model, every=5, out=log) as recorder:
            for step in range(12):
                if step == 10:
                    model.save_pretrained(str(tmp_path / "step-10"), safe_serialization=True)
                loss = model(input_ids=data[step], labels=data[step]).loss
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                recorder.step()
    lines = [json.loads(line) for line in open(log)]
    assert sorted({line["step"] for line in lines}) == [0, 5, 10]
    tokens = tmp_path / "tokens.txt"
    tokens.write_text(" ".join(str(int(t)) for t in data[10, 0]) + "\n")
    cli = json.loads(run_program("probe", tmp_path / "step-10", "--tokens", tokens, "--json").stdout)["heads"]
    assert_rows_equal([line for line in lines if line["step"] == 10], cli)


def test_a_model_with_nothing_recognised_gets_a_warning_naming_what_it_saw(tmp_path):
    class FancyAttention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.wq, self.wk = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

        def forward(self, x):
            return torch.softmax(self.wq(x) @ self.wk(x).transpose(-1, -2), -1) @ x

    model = torch.nn.Sequential(FancyAttention(), torch.nn.Linear(8, 8))
    recorder = attncheck.torch.AttentionRecorder(model, every=1, out=tmp_path / "log.jsonl")
    assert recorder.layers == []
    with pytest.warns(RuntimeWarning, match=r"no attention layer of Sequential is recorded: it saw FancyAttention.*"
                                            r"register"):
        model(torch.randn(2, 5, 8))
    recorder.close()


def test_unmeasurable_calls_are_skipped_with_a_reason(tmp_path):
    """A BERT with relative position embeddings adds position terms to the scores: not the maps measured."""
    model = transformers.BertModel(transformers.BertConfig(
        vocab_size=40, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=20, position_embedding_type="relative_key"), add_pooling_layer=False)
    with pytest.warns(RuntimeWarning, match="position_embedding_type 'relative_key'"):
        assert attncheck.torch.probe(model, torch.tensor(TOKENS)) == []
