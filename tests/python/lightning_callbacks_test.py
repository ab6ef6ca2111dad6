"""attncheck.callbacks.lightning_callback in a PyTorch Lightning Trainer: the optimizer steps 0, every, 2 every, ...
are recorded with gradient accumulation, the lines of step 0 are what probe() measures before training, and the
recorder is closed when fitting ends.

Run by hand, not in CTest: no Lightning imports on Debian's torch 1.13 under Python 3.11. Lightning 2.x reads its
version "1.13.0a0" as older than 1.13; the last 1.x, pytorch-lightning 1.9.5 with torchmetrics 0.11.4 (which keep
Debian's torch), imports torch.distributed._shard, whose dataclass torch 1.13 wrote with a mutable default that
Python 3.11 refuses (ValueError: mutable default ... for field tensor_properties; tried 2026-11-29). PyPI's torch
2.x brings CUDA's packages (gigabytes), too heavy for CI; so it is checked by hand (2026-11-29: pytorch-lightning
2.1.4 on PyTorch 2.5.1, in a venv over Debian's Python):

  VENV/bin/pip install torch==2.5.1 torchvision==0.20.1 pytorch-lightning==2.1.4
  PYTHONPATH=BUILD/python VENV/bin/python -m pytest -q tests/python/lightning_callbacks_test.py
"""
import json

import pytest

torch = pytest.importorskip("torch")
pl = pytest.importorskip("pytorch_lightning")

import attncheck.callbacks  # noqa: E402
import attncheck.torch  # noqa: E402


class Module(pl.LightningModule):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        layer = torch.nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

    def forward(self, x):
        return self.encoder(x)

    def training_step(self, batch, batch_idx):
        return self.encoder(batch).pow(2).mean()  # not self(batch): the callback arms the recorder itself

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_the_lightning_callback_records_optimizer_steps_and_closes(tmp_path):
    module = Module().double()
    x = torch.randn(7, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    before = attncheck.torch.probe(module, x[None])
    data = torch.utils.data.DataLoader([x] * 24, batch_size=2)
    callback = attncheck.callbacks.lightning_callback(every=2, out=tmp_path / "run")
    trainer = pl.Trainer(max_steps=6, accumulate_grad_batches=2, callbacks=[callback], logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         accelerator="cpu", default_root_dir=str(tmp_path))
    trainer.fit(module, data)
    lines = [json.loads(line) for line in open(tmp_path / "run" / "attncheck-probe.jsonl")]
    assert sorted({line["step"] for line in lines}) == [0, 2, 4]  # 6 optimizer steps of 2 accumulated batches
    assert len(lines) == 3 * 2 * 4
    for line, row in zip([line for line in lines if line["step"] == 0], before):
        assert (line["layer"], line["head"]) == (row["layer"], row["head"])
        assert line["softmax_fro"] == pytest.approx(row["softmax_fro"], rel=1e-12)
    assert callback.recorder.layers == []  # closed
