"""attncheck.callbacks.trainer_callback in a Hugging Face Trainer (transformers 4.38.2 and accelerate 0.27.2,
scripts/pyenv's "transformers" set): it records the optimizer steps 0, every, 2 every, ... with gradient
accumulation, the lines of step 0 are what probe() measures on the model before training, and the recorder is
closed at the end of training."""
import json
import warnings

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import attncheck.callbacks  # noqa: E402
import attncheck.torch  # noqa: E402

transformers.logging.set_verbosity_error()


def tiny_bert():
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=40, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64, max_position_embeddings=32, hidden_dropout_prob=0.0,
                                     attention_probs_dropout_prob=0.0)
    return transformers.BertForMaskedLM(config)


def test_the_trainer_callback_records_optimizer_steps_and_closes(tmp_path):
    model = tiny_bert()
    ids = torch.tensor([3, 7, 12, 5, 30, 21, 9, 2])
    before = attncheck.torch.probe(model, ids)
    # The same sequence in every example: the batch's first sequence, which the recorder measures, is known.
    data = [{"input_ids": ids, "labels": ids}] * 24
    callback = attncheck.callbacks.trainer_callback(every=2, out=tmp_path / "run")
    # Two loader workers: 4.38.2's Trainer passes prefetch_factor=None, which torch 1.13's DataLoader refuses
    # without workers.
    args = transformers.TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=6, per_device_train_batch_size=2,
                                          gradient_accumulation_steps=2, learning_rate=1e-2, report_to=[],
                                          save_strategy="no", logging_strategy="no", use_cpu=True,
                                          disable_tqdm=True, dataloader_num_workers=2,
                                          dataloader_prefetch_factor=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=[callback]).train()
    lines = [json.loads(line) for line in open(tmp_path / "run" / "attncheck-probe.jsonl")]
    assert sorted({line["step"] for line in lines}) == [0, 2, 4]  # 6 optimizer steps of 2 accumulated batches
    assert len(lines) == 3 * 2 * 4  # steps x layers x heads
    first = [line for line in lines if line["step"] == 0]
    for line, row in zip(first, before):
        assert (line["layer"], line["head"]) == (row["layer"], row["head"])
        assert line["softmax_fro"] == pytest.approx(row["softmax_fro"], rel=1e-12)
        assert line["dWq_fro"] == pytest.approx(row["dWq_fro"], rel=1e-12)
    later = {(line["layer"], line["head"]): line["softmax_fro"] for line in lines if line["step"] == 4}
    assert any(later[(r["layer"], r["head"])] != pytest.approx(r["softmax_fro"], rel=1e-6) for r in before)  # trained
    assert callback.recorder.layers == []  # closed: detached from the model
    with pytest.raises(ValueError, match="count and training_only are the callback's"):
        attncheck.callbacks.trainer_callback(count="forwards")
