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
        optimizer_steps = 0  # trainer.global_step as the recorder last counted it

        def on_train_start(self, trainer, pl_module):
            # Here, not at on_fit_start: a resumed fit has restored global_step by now.
            if trainer.is_global_zero:
                self.recorder = AttentionRecorder(pl_module, **settings)
                self.recorder.current_step = self.optimizer_steps = trainer.global_step

        # training_step need not call the module itself (self.encoder(x) is common): the batch is the recorded
        # forward, armed and ended here as the module's own forward would.
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if self.recorder is not None:
                self.recorder._before_model(pl_module, ())

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if self.recorder is None:
                return
            self.recorder._after_model(pl_module, (), None)
            # With gradient accumulation a batch may end without an optimizer step; with manual optimization one
            # batch may take several: one recorder step per optimizer step.
            while self.optimizer_steps < trainer.global_step:
                self.recorder.step()
                self.optimizer_steps += 1

        def on_train_end(self, trainer, pl_module):
            if self.recorder is not None:
                self.recorder.close()

    return AttentionRecorderCallback()
