"""AttentionRecorder where training loops already are: a Hugging Face Trainer callback and a PyTorch Lightning
callback, each a few lines over attncheck.torch.AttentionRecorder (the libraries are imported when a callback is
made, so attncheck needs neither).

    trainer = transformers.Trainer(model=model, ..., callbacks=[attncheck.callbacks.trainer_callback(every=50,
                                                                                                   out="runs/x")])
    trainer = lightning.pytorch.Trainer(..., callbacks=[attncheck.callbacks.lightning_callback(every=50,
                                                                                               out="runs/x")])

Both record the model the trainer trains, one step per optimizer step (gradient accumulation included), on the
main process only, and close the recorder when training ends. Any other AttentionRecorder option (what_if,
tensorboard, collapse_threshold, ...) is passed through; the recorder itself is the callback's `recorder`.
"""

from .torch import AttentionRecorder

__all__ = ["trainer_callback", "lightning_callback"]


def _recorder_options(every, out, options):
    if "count" in options or "training_only" in options:
        raise ValueError("count and training_only are the callback's: it counts optimizer steps of training")
    return dict(options, every=every, out=out, count="steps")


def trainer_callback(every=10, out="attncheck-probe.jsonl", **options):
    """A transformers.TrainerCallback recording the Trainer's model (AttentionRecorder(model, every, out, ...)): the
    step of each line is the Trainer's optimizer step (state.global_step before the step)."""
    from transformers import TrainerCallback

    settings = _recorder_options(every, out, options)

    class AttentionRecorderCallback(TrainerCallback):
        recorder = None

        def on_train_begin(self, args, state, control, model=None, **kwargs):
            if state.is_world_process_zero and model is not None:
                self.recorder = AttentionRecorder(model, **settings)
                self.recorder.current_step = state.global_step

        def on_step_end(self, args, state, control, **kwargs):
            if self.recorder is not None:
                self.recorder.step()

        def on_train_end(self, args, state, control, **kwargs):
            if self.recorder is not None:
                self.recorder.close()

    return AttentionRecorderCallback()


def lightning_callback(every=10, out="attncheck-probe.jsonl", **options):
    """A Lightning Callback recording the LightningModule (AttentionRecorder(pl_module, every, out, ...)): the step
    of each line is trainer.global_step, the optimizer steps taken before it."""
    try:
        from lightning.pytorch import Callback
    except ImportError:
        from pytorch_lightning import Callback

    settings = _recorder_options(every, out, options)

    class AttentionRecorderCallback(Callback):
        recorder = None

        def on_fit_start(self, trainer, pl_module):
            if trainer.is_global_zero:
                self.recorder = AttentionRecorder(pl_module, **settings)
                self.recorder.current_step = trainer.global_step

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            # With gradient accumulation a batch may end without an optimizer step: the step ends with the step.
            if self.recorder is not None and trainer.global_step > self.recorder.current_step:
                self.recorder.step()

        def on_fit_end(self, trainer, pl_module):
            if self.recorder is not None:
                self.recorder.close()

    return AttentionRecorderCallback()
