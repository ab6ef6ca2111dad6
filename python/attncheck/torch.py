"""Attention norms measured inside a PyTorch training run, written as the log `attncheck probe --watch` writes.

    from attncheck.torch import AttentionRecorder

    with AttentionRecorder(model, every=10, out="runs/x/attncheck-probe.jsonl") as recorder:
        for batch, labels in data:
            loss = loss_fn(model(batch), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            recorder.step()          # optional: without it, every training-mode forward is a step

and `attncheck report runs/x` plots every layer's norms over the training steps.

The recorder attaches to every torch.nn.MultiheadAttention used as self-attention, to the attention layers of
Hugging Face transformers models (recognised by their query and key projections and their config, not by class
name: BERT, RoBERTa, DistilBERT, GPT-2, Llama, Mistral, Qwen2, Gemma, Phi, GPT-NeoX, Persimmon, Falcon, ViT, DINOv2,
CLIP and their descendants, eager or SDPA), to timm's and TransformerLens's attention classes (by qualified name), to
nanoGPT's CausalSelfAttention (checked against nanoGPT's definition at its first call), and to any module given to
register() with an adapter. It measures on a copy of one sequence
of the batch (`sample`), in float64, after the module has run, under torch.no_grad(): the model's outputs and
gradients are those it computes without the recorder, bit for bit. It measures what `attncheck probe` measures:
grouped keys, rotary positions (dA/dW_Q and dA/dW_K included) and the model's own masks (causal, sliding window,
padding: padded positions are left out, so a padded sequence gives the rows of the sequence without them).

    attncheck.torch.probe(model, inputs)   the rows of `attncheck probe --json` for a model in memory
"""

import math
import os
import stat
import warnings

import numpy as np
import torch

from . import ACTIVATIONS, _core, _measure, _transformers, _what_if_list

__all__ = ["AttentionRecorder", "probe", "summary_scalars"]


def _numpy(tensor):
    """A float64 NumPy copy of a tensor on any device, outside autograd."""
    return tensor.detach().to(device="cpu", dtype=torch.float64).numpy()


def _pick(tensor, sample, batched_ndim):
    """The sample's slice of a tensor whose batched form has `batched_ndim` axes (batch first)."""
    return tensor[sample] if tensor.dim() == batched_ndim else tensor


_Skip = _transformers.Unmeasurable  # a call the recorder does not measure, and why (said once per layer)


def _multihead_attention_adapter(module, args, kwargs, output, sample):
    """What a torch.nn.MultiheadAttention call gives the theory: x, W_Q, W_K (maps of rows), biases, heads, mask."""
    names = ("query", "key", "value", "key_padding_mask", "need_weights", "attn_mask", "average_attn_weights",
             "is_causal")
    call = dict(zip(names, args))
    call.update(kwargs)
    query, key = call["query"], call["key"]
    if key is not query and not (key.shape == query.shape and key.stride() == query.stride()
                                 and key.data_ptr() == query.data_ptr()):
        raise _Skip("cross-attention (key is not the query) is not measured: the theory's maps are self-attention")
    if module.bias_k is not None or module.add_zero_attn:
        raise _Skip("add_bias_kv and add_zero_attn add keys the theory's maps do not have")
    batched = query.dim() == 3
    if batched:
        x = query[sample] if module.batch_first else query[:, sample]
    else:
        x = query
    n, embed = x.shape
    if module._qkv_same_embed_dim:
        w_q, w_k = module.in_proj_weight[:embed], module.in_proj_weight[embed:2 * embed]
    else:
        w_q, w_k = module.q_proj_weight, module.k_proj_weight
    b_q = b_k = None
    if module.in_proj_bias is not None:
        b_q, b_k = module.in_proj_bias[:embed], module.in_proj_bias[embed:2 * embed]

    attended = torch.ones(n, n, dtype=torch.bool)
    causal = bool(call.get("is_causal") or False)
    attn_mask = call.get("attn_mask")
    if attn_mask is not None:
        if attn_mask.dim() == 3:  # (batch * heads, N, N)
            per_head = attn_mask[sample * module.num_heads:(sample + 1) * module.num_heads] if batched else attn_mask
            if not bool((per_head == per_head[0]).all()):
                raise _Skip("a 3-D attn_mask that differs between heads is not measured")
            attn_mask = per_head[0]
        attended &= _allowed(attn_mask.detach().cpu(), "attn_mask")
    padding = call.get("key_padding_mask")
    if padding is not None:
        padding = _pick(padding, sample, 2)
        attended &= _allowed(padding.detach().cpu(), "key_padding_mask")[None, :]
    if causal:  # the mask as the layer applies it (rows past the triangle would read as padded queries' filler)
        attended &= torch.ones(n, n, dtype=torch.bool).tril()
    # _without_padding reads "all" and the causal triangle back as no mask.
    mask = attended.numpy()
    return dict(x=x, w_q=w_q.T, w_k=w_k.T, b_q=b_q, b_k=b_k, heads=module.num_heads, causal=causal, mask=mask,
                activation="softmax")


def _allowed(mask, name):
    """PyTorch's masks say what is left out (True, or -inf added); the theory's say what takes part."""
    if mask.dtype == torch.bool:
        return ~mask
    finite = torch.isfinite(mask)
    if bool((mask[finite] != 0).any()) or bool((mask[~finite] > 0).any()):
        raise _Skip(f"a float {name} with values other than 0 and -inf adds to the scores: not the maps measured")
    return finite


def _recognised_adapter(root):
    """The adapter of every module _transformers recognises: its batched description of the call."""
    def adapter(module, args, kwargs, output):
        forward = type(module).forward.__get__(module)
        return _transformers.describe_call(module, root, forward, args, kwargs)
    return adapter


def _without_padding(x, mask, causal, positions):
    """The sequence without its padding: a position no query attends to as a key is padding (the mask's rows that
    attend past the causal triangle of a causal layer are filler for padded queries, as SDPA masks make them, and
    are not counted). Returns x, mask, causal and positions of the kept positions, the mask None where it is
    "all" or the causal triangle (then causal is True)."""
    if mask is None:
        return x, None, causal, positions
    n = x.shape[0]
    mask = np.asarray(mask, dtype=bool)
    lower = np.tril(np.ones((n, n), dtype=bool))
    if causal:
        proper = ~(mask & ~lower).any(axis=1)
        mask = mask & lower
    else:
        proper = np.ones(n, dtype=bool)
    keep = (mask & proper[:, None]).any(axis=0)
    if not keep.all():
        if not keep.any():
            raise _Skip("the mask leaves no position attended")
        x, mask = x[keep], mask[np.ix_(keep, keep)]
        positions = None if positions is None else positions[keep]
        lower = lower[np.ix_(keep, keep)]
    if mask.all():
        return x, None, causal, positions
    if (mask == lower).all():
        return x, None, True, positions
    return x, mask, causal, positions


def _sdpa_scores(query, key, attn_mask, is_causal, scale, sample=None):
    """The description attncheck.torch measures of one scaled_dot_product_attention call, from its own arguments:
    scores q k^T * scale ((batch, heads, N, N), or (heads, N, N) of sequence `sample` alone), its boolean mask (True
    where a query attends to a key), its causal flag and the head size d. Calls the theory's maps are not
    (cross-attention, cached keys, additive position biases) raise _Skip."""
    if not isinstance(query, torch.Tensor) or not isinstance(key, torch.Tensor):
        raise _Skip("query and key are not tensors")
    if query.dim() == 3:  # (batch, N, d): one head
        query, key = query[:, None], key[:, None]
        if isinstance(attn_mask, torch.Tensor) and attn_mask.dim() == 3:
            attn_mask = attn_mask[:, None]
    if query.dim() != 4 or key.dim() != 4:
        raise _Skip(f"query of shape {tuple(query.shape)}: not (batch, heads, N, d)")
    n, d = query.shape[-2], query.shape[-1]
    if key.shape[-2] != n:
        raise _Skip(f"{key.shape[-2]} keys for {n} queries: cross-attention or cached keys, not self-attention")
    heads, kv_heads = query.shape[1], key.shape[1]
    if kv_heads != heads:
        if kv_heads == 0 or heads % kv_heads:
            raise _Skip(f"{kv_heads} key heads do not divide {heads} query heads")
        key = key.repeat_interleave(heads // kv_heads, dim=1)  # grouped keys, as enable_gqa reads them
    batch = query.shape[0]
    if sample is not None:
        if sample >= batch:
            raise _Skip(f"sample = {sample} is past the call's batch of {batch}")
        query, key = query[sample:sample + 1], key[sample:sample + 1]
    scale = d ** -0.5 if scale is None else float(scale)
    # On the CPU in float64, never on the model's device: MPS has no float64, and a GPU's memory is the model's.
    q, k = (t.detach().to(device="cpu", dtype=torch.float64) for t in (query, key))
    scores = (q @ k.transpose(-1, -2)) * scale
    allowed = None
    if isinstance(attn_mask, torch.Tensor):
        mask = attn_mask.detach().cpu()
        while mask.dim() < 4:
            mask = mask[None]
        mask = mask.expand(batch, heads, n, n)
        if sample is not None:
            mask = mask[sample:sample + 1]
        # Now (batch, heads, N, N): read as the Hugging Face layers' masks are (boolean, or additive 0 and a mask
        # value; the same for every head).
        allowed = _transformers._allowed_from_additive(mask, n, "attn_mask")
    elif attn_mask is not None:
        raise _Skip(f"attn_mask of type {type(attn_mask).__name__}")
    if sample is not None:
        scores, allowed = scores[0], None if allowed is None else allowed[0]
    return dict(scores=scores, mask=allowed, causal=bool(is_causal), d=d, activation="softmax")


class _SdpaCapture:
    """torch.nn.functional.scaled_dot_product_attention while a recorder is open: the function it replaced, then,
    when the recorder arms it (a recorded forward of its model) and the call is not inside a measured layer, the
    recorder's measurement of the call's own scores. Closed, or replaced by another after it, it only passes the
    call on."""

    def __init__(self, recorder, original):
        self.recorder, self.original = recorder, original

    def __call__(self, query, key, value, *args, **kwargs):
        output = self.original(query, key, value, *args, **kwargs)
        recorder = self.recorder
        if recorder is not None and recorder._sdpa_armed and recorder._layer_depth == 0:
            named = dict(zip(("attn_mask", "dropout_p", "is_causal", "scale"), args))
            named.update(kwargs)
            recorder._measure_sdpa_call(query, key, named.get("attn_mask"), named.get("is_causal", False),
                                        named.get("scale"))
        return output


class _Layer:
    def __init__(self, index, name, module, adapter, with_sample):
        self.index, self.name, self.module, self.adapter, self.with_sample = index, name, module, adapter, with_sample
        self.warned = False
        self.recognised = False  # attached by recognition (register() may replace its adapter)
        self.from_sdpa = False  # a scaled_dot_product_attention call measured on its scores
        # An instance attribute that was there before ours (an SDPA call has no module).
        self.own_forward = None if module is None else module.__dict__.get("forward")
        self.wrapper = None


def _inert_hook(*args):
    """What a copy or a pickle of a recorded model gets in place of the recorder's hooks: it is not recorded."""
    return None


def _inert_hook_of():
    return _inert_hook


class _Hook:
    def __init__(self, function):
        self.function = function

    def __call__(self, *args):
        return self.function(*args)

    def __deepcopy__(self, memo):
        return _inert_hook

    def __reduce__(self):
        return _inert_hook_of, ()


class _RecordedForward:
    """A module's forward, then the recorder's measurement of the call. A copy of the module (copy.deepcopy,
    pickle) gets its own plain forward back, so it computes with its own weights and is not recorded."""

    def __init__(self, recorder, layer):
        self.recorder, self.layer = recorder, layer
        self.original = layer.module.forward

    def __call__(self, *args, **kwargs):
        self.recorder._layer_depth += 1  # the SDPA calls inside a measured layer are that layer's
        try:
            output = self.original(*args, **kwargs)
        finally:
            self.recorder._layer_depth -= 1
        if self.layer.wrapper is self and self.recorder._recording:
            self.recorder._measure(self.layer, args, kwargs, output)
        return output

    def __deepcopy__(self, memo):
        copy = memo.get(id(self.layer.module))
        return copy.forward if copy is not None else self.original

    def __reduce__(self):
        return getattr, (self.layer.module, "forward")


class AttentionRecorder:
    """Records the attention norms of a model's layers every `every` steps into `out`.

    model: a torch.nn.Module; every torch.nn.MultiheadAttention in it that is called as self-attention, and every
    attention layer of a transformers model in it, is measured (layers are numbered in the order of
    model.named_modules(), then of register()). A model in which nothing is recognised gets a warning at its
    first recorded step naming the attention-like module classes it saw.
    every: record steps 0, every, 2 every, ...
    out: the JSON-lines log (a name ending in .jsonl), or a folder for FOLDER/attncheck-probe.jsonl as
    `attncheck probe --watch FOLDER` writes it; created if needed. None: no log (callback or tensorboard only). Lines are appended, one write per step, as the
    watcher appends them; a step's lines carry checkpoint "step-NNNNNN" and its step. An existing file is appended
    to only when it is an attncheck probe log (or empty): any other file, a symbolic link, or an existing file named
    without .jsonl is a ValueError naming it, and is left as it is.
    sample: which sequence of each batch is measured.
    activation: the activation the registered modules use unless their adapter says (one of
    attncheck.ACTIVATIONS); MultiheadAttention is softmax.
    training_only: measure only forward passes in training mode (evaluation passes are neither steps nor
    recorded; a step() reached after evaluation-mode passes only warns once that nothing was recorded).

    count: what a step is. "forwards": every training-mode forward of `model`. "steps": what step() ends (call it
    once per optimizer step); only the first training-mode forward of a recorded step is measured, so several
    forward passes per step (gradient accumulation) are one step. "auto": "forwards" until step() is first
    called, then "steps" (call it from the first step on; with gradient accumulation use "steps").
    current_step is the step the next forward pass belongs to.
    A call the recorder cannot measure (cross-attention, masks that change the scores, NaN weights, a softmax
    row with nothing to attend to) is skipped with one warning per layer; training goes on.

    callback: called once per recorded step with {"step": step, "heads": [one dict per measured head: the row
    `attncheck probe --json` prints, with "layer" and "head"], "summary": summary_scalars(heads)}, e.g. to log
    to W&B (wandb.log(record["summary"], step=record["step"])) or MLflow.
    tensorboard: a log folder or a torch.utils.tensorboard.SummaryWriter (needs the tensorboard package): every
    recorded step adds the summary scalars under "attncheck/" and, per layer and head, ||A||_F / sqrt(N) and
    ||grad softmax||_F / (sqrt(N)/2) under "attncheck/layer L/head H/" (both at most 1 by Theorem 4.1).
    what_if: expressions in x (the score), N and d ("x^3/sqrt(N)", "sigmoid(x - log(N))"), measured elementwise on
    each head's own scores beside softmax, as `attncheck probe --what-if` does: each row's "what_if" in the log.
    capture_sdpa: while the recorder is open, every torch.nn.functional.scaled_dot_product_attention call of a
    recorded forward that is not inside a measured layer is measured on its own scores (q k^T * scale under its
    mask and causal flag): a layer of any architecture, as layer "scaled_dot_product_attention call K" (the K-th
    such call of the forward, numbered after the measured layers). From scores alone the norms in W_Q and W_K are
    not known: those rows leave them out, and carry "measured_from": "scaled_dot_product_attention". Calls the
    theory's maps are not (cross-attention, cached keys, additive position biases) are skipped with one warning
    each. Code that imported the function by name before the recorder opened is not seen.

    Training-stability warnings, once per head and kind (a RuntimeWarning naming layer, head and step), and counted
    per step in the summary scalars (so on TensorBoard too):
    collapse_threshold: a head whose ||A||_F / sqrt(N) exceeds this nears entropy collapse (1: every row one-hot;
    (||A||_F / sqrt(N))^2 is the mean over rows of exp(-H2), H2 a row's Renyi-2 entropy). None: no warning.
    max_logit: a head whose largest |score| (score_max_abs, after the scale) exceeds this is warned: past a gap of
    50 the runner-up key's weight is below exp(-50) = 2e-22, so its row is one-hot in any precision and its
    gradient vanishes. None: no warning.
    """

    def __init__(self, model, every=10, out="attncheck-probe.jsonl", *, sample=0, activation="softmax",
                 training_only=True, count="auto", callback=None, tensorboard=None, what_if=(),
                 collapse_threshold=0.95, max_logit=50.0, capture_sdpa=True):
        if not isinstance(model, torch.nn.Module):
            raise ValueError(f"model is a {type(model).__name__}, not a torch.nn.Module")
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"every = {every!r} must be a positive integer")
        if isinstance(sample, bool) or not isinstance(sample, int) or sample < 0:
            raise ValueError(f"sample = {sample!r} must be a non-negative integer")
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation '{activation}' is not one of {', '.join(ACTIVATIONS)}")
        if count not in ("auto", "forwards", "steps"):
            raise ValueError(f"count '{count}' is not one of auto, forwards, steps")
        if callback is not None and not callable(callback):
            raise ValueError("callback must be callable as callback(record)")
        for name, value in (("collapse_threshold", collapse_threshold), ("max_logit", max_logit)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not math.isfinite(value) or value <= 0):
                raise ValueError(f"{name} = {value!r} must be a positive number, or None for no warning")
        self.callback = callback
        self.what_if = _what_if_list(what_if)
        self.collapse_threshold, self.max_logit = collapse_threshold, max_logit
        self._warned_heads = set()  # (kind, layer, head) already warned about
        if out is not None:
            out = _log_path(out)  # before the TensorBoard writer, which creates its folder
        self._tensorboard, self._owns_tensorboard = _summary_writer(tensorboard)
        self.model, self.every, self.out, self.sample = model, every, out, sample
        self.activation, self.training_only = activation, training_only
        self.count = count
        self.current_step = 0
        self._counting_steps = count == "steps"  # else forward passes are counted (until step() is called)
        self._training_forwards = 0
        self._recorded_step = None    # the step whose forward was measured
        self._recording = False
        self._pending = []
        self._layers = []
        self._handles = [model.register_forward_pre_hook(_Hook(self._before_model)),
                         model.register_forward_hook(_Hook(self._after_model))]
        self._samples = None  # None: the one `sample`; "all": every sequence of the batch (probe())
        self._collected = []  # probe()'s measurements: (sample, log lines, rows)
        seen = set()
        for name, module in model.named_modules():
            if isinstance(module, torch.nn.MultiheadAttention):
                self._attach(module, name or type(module).__name__, _multihead_attention_adapter, with_sample=True)
            elif _transformers.recognise(module):
                self._attach(module, name or type(module).__name__, _recognised_adapter(model), with_sample=False)
                self._layers[-1].recognised = True
            elif _transformers.looks_like_attention(module):
                seen.add(type(module).__name__)
        self._unrecognised = sorted(seen)  # named in the warning when nothing is recorded
        self._warned_empty = False
        self._warned_silent = False  # a recorded forward that ran none of the measured layers
        self._measured_in_forward = False
        # Forward passes since the last step() left out for being in evaluation mode, and those counted: a step()
        # after only the first says once why nothing is recorded (a pretrained model tried as it is loaded).
        self._evaluation_forwards = self._counted_forwards = 0
        self._warned_evaluation = False
        self._layer_depth = 0  # measured layers' forwards under way
        self._sdpa_armed = False  # a recorded forward of the model is under way
        self._sdpa_layers = []  # the pseudo-layers of the SDPA calls, by their place in a forward
        self._sdpa_calls = 0  # SDPA calls of the forward under way
        self._sdpa = None
        functional = torch.nn.functional
        if capture_sdpa and callable(getattr(functional, "scaled_dot_product_attention", None)):
            self._sdpa = _SdpaCapture(self, functional.scaled_dot_product_attention)
            functional.scaled_dot_product_attention = self._sdpa
            # A forward that raises never reaches _after_model: this hook disarms the capture all the same, so that
            # later SDPA calls of other code are not measured under a stale step.
            try:
                self._handles.append(model.register_forward_hook(_Hook(self._disarm_sdpa), always_call=True))
            except TypeError:  # torch without always_call (before 2.0) has no SDPA to capture either
                pass

    @property
    def layers(self):
        """(layer index, module name) of every measured module, as the log numbers them."""
        return [(layer.index, layer.name) for layer in self._layers]

    def register(self, module, adapter, name=None):
        """Measures `module` too. adapter(module, args, kwargs, output) is called after each recorded forward of
        the module and returns None (nothing to measure this time) or a dict with either

          x (N, D) or (batch, N, D), w_q and w_k (D, heads * d_head) with q = x @ w_q + b_q (for an nn.Linear:
          linear.weight.T), optionally b_q, b_k, heads (1), causal (False), mask ((N, N) or (batch, N, N)
          booleans, True where a query attends to a key), scale (1/sqrt(d_head)), activation,

        or scores ((heads, N, N) or (batch, heads, N, N): what the activation is applied to), optionally causal,
        mask and activation; from scores alone the norms in W_Q and W_K are not known and are left out.
        A tuple (x, w_q, w_k, b_q, b_k, heads) is read as the first form. A layer the recorder recognised by
        itself is measured through `adapter` instead, under its number.
        """
        if not isinstance(module, torch.nn.Module):
            raise ValueError(f"module is a {type(module).__name__}, not a torch.nn.Module")
        if not callable(adapter):
            raise ValueError("adapter must be callable as adapter(module, args, kwargs, output)")
        for layer in self._layers:
            if layer.module is module:
                if not layer.recognised:
                    raise ValueError(f"{name or type(module).__name__} is already recorded")
                layer.adapter, layer.with_sample, layer.recognised = adapter, False, False  # the user's adapter wins
                return self
        if name is None:
            name = next((n for n, m in self.model.named_modules() if m is module), type(module).__name__)
        self._attach(module, name, adapter, with_sample=False)
        return self

    def step(self):
        """Ends a training step: the next forward passes belong to the next step."""
        if self.count == "forwards":
            raise ValueError("count='forwards' counts forward passes as steps: step() is for count='steps' or 'auto'")
        if self._evaluation_forwards and not self._counted_forwards and not self._warned_evaluation:
            self._warned_evaluation = True
            model = type(self.model).__name__
            warnings.warn(f"attncheck: the {self._evaluation_forwards} forward pass(es) of {model} before this "
                          "step() ran in evaluation mode (model.eval()) and were not recorded: the recorder measures "
                          "training-mode passes only (training_only=True). To record evaluation-mode passes (a "
                          "pretrained model as it is loaded), use AttentionRecorder(..., training_only=False).",
                          RuntimeWarning, stacklevel=2)
        self._evaluation_forwards = self._counted_forwards = 0
        self._flush()
        if self._counting_steps:
            self.current_step += 1
        else:
            # count='auto' switches to counting calls: the forward passes before this one call were step 0.
            self._counting_steps = True
            self.current_step = 1 if self._training_forwards else 0

    def flush(self):
        """Writes the lines measured so far."""
        self._flush()

    def close(self):
        """Writes what is pending and detaches from the model: the modules are as they were."""
        self._flush()
        if self._owns_tensorboard:
            self._tensorboard.close()
        self._tensorboard = None
        for handle in self._handles:
            handle.remove()
        self._handles = []
        if self._sdpa is not None:
            if torch.nn.functional.scaled_dot_product_attention is self._sdpa:
                original = self._sdpa.original
                while isinstance(original, _SdpaCapture) and original.recorder is None:
                    original = original.original  # a recorder closed before this one: its wrapper is dropped too
                torch.nn.functional.scaled_dot_product_attention = original
            self._sdpa.recorder = None  # wrapped by a later recorder, it passes calls on from now on
            self._sdpa = None
        self._sdpa_armed = False
        for layer in self._layers:
            if layer.module is None:
                continue
            if layer.module.__dict__.get("forward") is layer.wrapper:
                if layer.own_forward is None:
                    del layer.module.forward
                else:
                    layer.module.forward = layer.own_forward
            layer.wrapper = None  # a wrapper someone else kept calling is a plain forward from now on
        self._layers = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    # --- inside the model's forward ---

    def _attach(self, module, name, adapter, with_sample):
        layer = _Layer(len(self._layers), name, module, adapter, with_sample)
        layer.wrapper = _RecordedForward(self, layer)
        module.forward = layer.wrapper
        self._layers.append(layer)

    def _before_model(self, model, args):
        counts = model.training or not self.training_only
        self._recording = (counts and self.current_step % self.every == 0
                           and not (self._counting_steps and self._recorded_step == self.current_step))
        self._sdpa_armed, self._sdpa_calls = self._recording and self._sdpa is not None, 0
        self._measured_in_forward = False

    def _after_model(self, model, args, output):
        self._sdpa_armed = False
        if self._recording and not self._layers and not self._warned_empty:
            self._warned_empty = True
            found = (f"it saw {', '.join(self._unrecognised)}, whose query and key projections it does not "
                     "recognise" if self._unrecognised else "it saw no module named like attention")
            warnings.warn(f"attncheck: no attention layer of {type(model).__name__} is recorded: {found}. Measure "
                          "one with recorder.register(module, adapter) (see AttentionRecorder.register).",
                          RuntimeWarning, stacklevel=2)
        if self._recording and self._layers and not self._measured_in_forward and not self._warned_silent:
            self._warned_silent = True
            warnings.warn(f"attncheck: a recorded forward pass of {type(model).__name__} ran none of its "
                          f"{len(self._layers)} measured layers' forwards, so nothing was recorded at step "
                          f"{self.current_step}. PyTorch's nn.TransformerEncoderLayer does this in evaluation mode "
                          "when no gradient is needed (its fused fast path bypasses MultiheadAttention.forward): "
                          "record training-mode passes, or run this one with gradients enabled and trainable "
                          "weights or input.", RuntimeWarning,
                          stacklevel=2)
        if self._recording:
            self._recorded_step = self.current_step
            self._flush()
        self._recording = False
        if model.training or not self.training_only:
            self._training_forwards += 1
            self._counted_forwards += 1
            if not self._counting_steps:
                self.current_step += 1
        else:
            self._evaluation_forwards += 1

    def _measure(self, layer, args, kwargs, output):
        self._measured_in_forward = True
        try:
            with torch.no_grad():
                if layer.with_sample:
                    samples = self._sample_indices(layer.module, args, kwargs)
                    specs = [(sample, layer.adapter(layer.module, args, kwargs, output, sample)) for sample in samples]
                else:
                    spec = layer.adapter(layer.module, args, kwargs, output)
                    specs = [(sample, spec) for sample in self._sample_indices_of(spec)]
                measured = [(sample, self._heads(layer, spec, sample)) for sample, spec in specs if spec is not None]
        except Exception as error:  # noqa: BLE001 - a layer the recorder cannot measure must not stop the training
            reason = error if isinstance(error, (_Skip, ValueError, IndexError)) else (
                f"the measurement failed ({type(error).__name__}: {error}); please report it")
            if not layer.warned:
                layer.warned = True
                warnings.warn(f"attncheck: layer {layer.index} ({layer.name}) not recorded at step "
                              f"{self.current_step}: {reason}", RuntimeWarning, stacklevel=2)
            return
        checkpoint = f"step-{self.current_step:06d}"
        for sample, (heads, activation) in measured:
            rows = [dict(head.as_dict(), activation=activation) for head in heads]
            if layer.from_sdpa:
                for row in rows:
                    row["measured_from"] = "scaled_dot_product_attention"
            self._pending.append((sample, "".join(head.log_line(checkpoint, self.current_step, activation)
                                                  for head in heads), rows))

    def _disarm_sdpa(self, *args):
        self._sdpa_armed = False

    def _measure_sdpa_call(self, query, key, attn_mask, is_causal, scale):
        self._measured_in_forward = True
        place = self._sdpa_calls
        self._sdpa_calls += 1
        if place == len(self._sdpa_layers):
            layer = _Layer(len(self._layers), f"scaled_dot_product_attention call {place}", None,
                           lambda _module, args, _kwargs, _output: args[0], with_sample=False)
            layer.from_sdpa = True
            self._layers.append(layer)
            self._sdpa_layers.append(layer)
        layer = self._sdpa_layers[place]
        try:
            spec = _sdpa_scores(query, key, attn_mask, is_causal, scale,
                                None if self._samples == "all" else self.sample)
        except Exception as reason:  # noqa: BLE001 - a capture that fails (memory, a device) skips, training goes on
            if not layer.warned:
                layer.warned = True
                warnings.warn(f"attncheck: layer {layer.index} ({layer.name}) not recorded at step "
                              f"{self.current_step}: {reason}", RuntimeWarning, stacklevel=4)
            return
        self._measure(layer, (spec,), {}, None)

    def _sample_indices(self, module, args, kwargs):
        """The sequences measured: `sample`, or every one of the batch for probe()."""
        if self._samples != "all":
            return [self.sample]
        query = args[0] if args else kwargs["query"]
        if query.dim() != 3:
            return [0]
        return range(query.shape[0] if module.batch_first else query.shape[1])

    def _sample_indices_of(self, spec):
        if spec is None:
            return []
        if self._samples != "all":
            return [self.sample]
        x = spec.get("x", spec.get("scores"))
        batched = getattr(x, "ndim", 0) == (4 if "scores" in spec else 3)
        return range(x.shape[0] if batched else 1)

    def _heads(self, layer, spec, sample):
        """The measured heads of one sequence of the call, and the activation they are recorded under."""
        if isinstance(spec, tuple):
            spec = dict(zip(("x", "w_q", "w_k", "b_q", "b_k", "heads"), spec))
        activation = spec.get("activation", self.activation)
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation '{activation}' is not one of {', '.join(ACTIVATIONS)}")
        mask = spec.get("mask")
        if "scores" in spec:
            scores = spec["scores"]
            scores = _pick(scores, sample, 4) if isinstance(scores, torch.Tensor) else np.asarray(scores)
            if isinstance(scores, torch.Tensor):
                scores = _numpy(scores)
            if scores.ndim == 2:
                scores = scores[None]
            if isinstance(mask, torch.Tensor):
                mask = _pick(mask, sample, 3).detach().cpu().numpy()
            causal = bool(spec.get("causal", False))
            # Padding is left out as from the weights: the positions the mask leaves no query attending to.
            kept, mask, causal, _ = _without_padding(np.arange(scores.shape[-1]), mask, causal, None)
            if len(kept) < scores.shape[-1]:
                scores = scores[:, kept][:, :, kept]
            heads = _core.measure_scores(np.ascontiguousarray(scores), causal=causal, mask=mask, layer=layer.index,
                                         what_if=self.what_if, d=int(spec.get("d", 0)))
            return heads, activation
        x = spec["x"]
        if isinstance(x, torch.Tensor):
            x = _numpy(_pick(x, sample, 3))
        if isinstance(mask, torch.Tensor):
            mask = _pick(mask, sample, 3).detach().cpu().numpy()
        positions = spec.get("positions")
        if isinstance(positions, torch.Tensor):
            positions = _pick(positions, sample, 2).numpy() if positions.shape[0] > 1 else positions[0].numpy()
        causal = bool(spec.get("causal", False))
        rotary = spec.get("rotary")
        if rotary is not None and spec.get("rotary_per_image"):  # timm's patch dropout: each image its patches'
            rotary = rotary[sample]
        if rotary is not None and np.ndim(rotary) >= 2:  # angles per (head and) position: the kept positions'
            x, mask, causal, kept = _without_padding(np.asarray(x), mask, causal, np.arange(len(x)))
            rotary = np.asarray(rotary)[..., kept, :]
        else:
            x, mask, causal, positions = _without_padding(np.asarray(x), mask, causal, positions)
            if rotary is not None and positions is not None and np.any(np.diff(positions) != 1):
                raise _Skip("the positions of the measured sequence are not consecutive (packed sequences?): its "
                            "rotary angles are not those of positions 0 .. N-1")
        tensors = [spec["w_q"], spec["w_k"], spec.get("b_q"), spec.get("b_k")]
        w_q, w_k, b_q, b_k = (_numpy(t) if isinstance(t, torch.Tensor) else t for t in tensors)
        heads = _measure(x, w_q, w_k, b_q, b_k, spec.get("heads", 1), causal, mask, spec.get("scale"), layer.index,
                         spec.get("kv_heads"), rotary, spec.get("rotary_layout", "half"), spec.get("query_norm"),
                         spec.get("key_norm"), spec.get("softcap", 0.0), self.what_if)
        return heads, activation

    def _flush(self):
        if self._pending:
            pending, self._pending = self._pending, []
            if self._samples == "all":
                self._collected.extend(pending)
                return
            if self.out is not None:
                _core.append_log_lines(self.out, "".join(lines for _, lines, _ in pending))
            heads = [head for _, _, step_heads in pending for head in step_heads]
            step = self._recorded_step if self._recorded_step is not None else self.current_step
            self._warn_instability(step, heads)
            self._publish(step, heads)

    def _warn_instability(self, step, heads):
        for head in heads:
            for kind, key, threshold in (("collapse", "softmax_over_sqrt_N", self.collapse_threshold),
                                         ("logit", "score_max_abs", self.max_logit)):
                value = head.get(key)
                place = (kind, head["layer"], head["head"])
                if not _past_threshold(head, key, threshold) or place in self._warned_heads:
                    continue
                self._warned_heads.add(place)
                where = f"attncheck: layer {head['layer']} head {head['head']} at step {step}"
                if kind == "collapse":
                    entropy = head.get("softmax_entropy")
                    entropy = "unknown" if entropy is None else f"{entropy:.3g} nats"
                    warnings.warn(f"{where} nears entropy collapse: ||A||_F/sqrt(N) = {value:.4f} > "
                                  f"collapse_threshold {threshold:g} (mean row entropy {entropy}, uniform rows "
                                  f"log N = {math.log(head['N']):.3g}); its rows are close to one-hot",
                                  RuntimeWarning, stacklevel=4)
                else:
                    warnings.warn(f"{where}: its largest logit |S| = {value:.4g} > max_logit {threshold:g}; growing "
                                  "logits precede attention entropy collapse and divergence", RuntimeWarning,
                                  stacklevel=4)

    def _publish(self, step, heads):
        if self.callback is None and self._tensorboard is None:
            return
        record = {"step": step, "heads": heads,
                  "summary": summary_scalars(heads, collapse_threshold=self.collapse_threshold,
                                             max_logit=self.max_logit)}
        if self._tensorboard is not None:
            for name, value in record["summary"].items():
                self._tensorboard.add_scalar(f"attncheck/{name}", value, step)
            for head in heads:
                prefix = f"attncheck/layer {head['layer']}/head {head['head']}"
                for key in ("softmax_over_sqrt_N", "grad_over_half_sqrt_N", "softmax_entropy", "score_max_abs"):
                    if head.get(key) is not None:
                        self._tensorboard.add_scalar(f"{prefix}/{key}", head[key], step)
            self._tensorboard.flush()
        if self.callback is not None:
            self.callback(record)


def probe(model, inputs, *, what_if=(), as_frame=False, **forward_kwargs):
    """What `attncheck probe --json` reports under "heads", measured on a model in memory: one forward pass of
    `model` (in evaluation mode, without gradients; its mode is restored) on `inputs`, and per attention layer and
    head the row the command line prints (same fields, same numbers for the same checkpoint and input), with
    "activation".

    inputs: token ids ((N,) or (batch, N)), pixel values, or a mapping of the model's inputs (a tokenizer's
    output: input_ids, attention_mask, ...), passed as model(**inputs); forward_kwargs go to the model too.
    Layers are recognised as AttentionRecorder recognises them (register() is not available here: record with
    an AttentionRecorder for modules that need an adapter). Padding is left out: a padded sequence gives the rows
    of the sequence without it.

    what_if: expressions in x, N and d ("x^3/sqrt(N)", "relu(x)/N") measured elementwise on each head's own
    scores beside softmax, as `attncheck probe --what-if` does: each row's "what_if".

    Returns the rows of one sequence (for 1-D ids or a batch of one), else one list of rows per sequence. With
    as_frame=True, one pandas DataFrame instead (needs pandas): a row per head, and per sequence with a column
    "sequence" for a batch; each what-if's numbers as columns "what_if[PHI].fro", ".grad_fro", ... .
    """
    if as_frame:
        try:
            import pandas
        except ImportError as error:
            raise ValueError(f"as_frame=True needs pandas (pip install pandas): {error}") from None
    if not isinstance(model, torch.nn.Module):
        raise ValueError(f"model is a {type(model).__name__}, not a torch.nn.Module")
    recorder = AttentionRecorder(model, every=1, out=None, training_only=False, count="forwards", what_if=what_if)
    recorder._samples = "all"
    if isinstance(inputs, torch.Tensor) and inputs.dim() == 1 and not inputs.is_floating_point():
        inputs = inputs[None]
    was_training = model.training
    try:
        model.eval()
        # Without gradients PyTorch's nn.TransformerEncoderLayer runs a fused fast path in evaluation mode that never
        # calls its MultiheadAttention's forward: with one in the model the pass keeps gradients on (and discards
        # them), so that every layer is measured.
        fast_path = any(isinstance(m, torch.nn.MultiheadAttention) for m in model.modules())
        if fast_path and isinstance(inputs, torch.Tensor) and inputs.is_floating_point():
            inputs = inputs.detach().requires_grad_(True)  # the fast path is also off when the input needs grad
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with torch.set_grad_enabled(fast_path):
                if isinstance(inputs, dict) or hasattr(inputs, "keys"):
                    model(**inputs, **forward_kwargs)
                else:
                    model(inputs, **forward_kwargs)
        recorder.flush()
    finally:
        recorder.close()
        model.train(was_training)
    for warning in caught:
        warnings.warn(warning.message, warning.category, stacklevel=2)
    batch = 1 + max((sample for sample, _, _ in recorder._collected), default=0)
    per_sequence = [[] for _ in range(batch)]
    for sample, _, rows in recorder._collected:
        per_sequence[sample].extend(rows)
    if as_frame:
        return pandas.DataFrame([_flat_row(row, sequence if batch > 1 else None)
                                 for sequence, rows in enumerate(per_sequence) for row in rows])
    return per_sequence[0] if batch == 1 else per_sequence


def _flat_row(row, sequence):
    """A probe row with its what-ifs as columns what_if[PHI].KEY (a table has no nested lists)."""
    flat = {} if sequence is None else {"sequence": sequence}
    for key, value in row.items():
        if key == "what_if":
            for item in value:
                flat.update({f"what_if[{item['phi']}].{k}": v for k, v in item.items() if k != "phi"})
        else:
            flat[key] = value
    return flat


def summary_scalars(heads, *, collapse_threshold=0.95, max_logit=50.0):
    """The scalars a dashboard plots per step from the heads' rows: the largest and the mean over the heads of
    ||A||_F / sqrt(N) and ||grad softmax||_F / (sqrt(N)/2) (Theorem 4.1 bounds both by 1), the smallest and the
    mean of the attention entropy (nats), the largest logit, the number of heads, and (unless the threshold is
    None) how many heads are past collapse_threshold (heads_near_collapse) and max_logit (heads_past_max_logit),
    as AttentionRecorder warns. Non-finite values are left out of the means, minima and maxima."""
    def finite(key):
        return [h[key] for h in heads if h.get(key) is not None and math.isfinite(h[key])]

    summary = {"heads": float(len(heads))}
    for key in ("softmax_over_sqrt_N", "grad_over_half_sqrt_N", "softmax_entropy", "score_max_abs"):
        values = finite(key)
        if values:
            summary[f"{key}/min" if key == "softmax_entropy" else f"{key}/max"] = (
                min(values) if key == "softmax_entropy" else max(values))
            if key != "score_max_abs":
                summary[f"{key}/mean"] = sum(values) / len(values)
    for name, key, threshold in (("heads_near_collapse", "softmax_over_sqrt_N", collapse_threshold),
                                 ("heads_past_max_logit", "score_max_abs", max_logit)):
        if threshold is not None:
            summary[name] = float(sum(_past_threshold(h, key, threshold) for h in heads))
    return summary


def _past_threshold(head, key, threshold):
    """Whether a head's `key` is past the recorder's threshold for it (None: never): what the recorder warns about
    and the summary counts. A head of one position is one-hot whatever its scores: never a collapse."""
    value = head.get(key)
    if threshold is None or value is None or not math.isfinite(value):
        return False
    if key == "softmax_over_sqrt_N" and head.get("N", 2) < 2:
        return False
    return value > threshold


# The first line of a probe log is a few kilobytes; more than this is not one.
_FIRST_LINE_LIMIT = 1 << 20


def _log_path(out):
    """The log `out` names (itself when it ends in .jsonl, else FOLDER/attncheck-probe.jsonl), its folder created.
    The recorder writes only files it made: an existing log is appended to only when it is an attncheck probe log,
    and anything else is refused, named, and left as it is."""
    out = os.fspath(out)
    if out.endswith(".jsonl") and not os.path.isdir(out):
        log = out
    elif os.path.isdir(out) or not os.path.lexists(out):
        log = os.path.join(out, "attncheck-probe.jsonl")
    else:
        raise ValueError(f"out={out!r} is an existing file, not a folder nor a log named *.jsonl: the recorder does "
                         "not write into it; give a new name, or a folder for the log")
    folder = os.path.dirname(log)
    if folder:
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError as error:
            reason = ("a file (not a folder) is in the way" if isinstance(error, (FileExistsError, NotADirectoryError))
                      else error.strerror or error)
            raise ValueError(f"out={out!r}: cannot create the folder {folder!r} for the log: {reason}") from None
    try:
        status = os.lstat(log)
    except FileNotFoundError:
        return log
    refusal = "the recorder appends only to its own logs; give a new name, or a folder for the log"
    if stat.S_ISLNK(status.st_mode):
        raise ValueError(f"out={log!r} is a symbolic link, which the recorder did not make: {refusal}")
    if not stat.S_ISREG(status.st_mode):
        raise ValueError(f"out={log!r} exists and is not a regular file: {refusal}")
    # An empty file holds nothing an append could spoil, and it is what `attncheck probe --watch` leaves when it
    # stops before its first checkpoint (it creates its log at its start): so it counts as a log.
    if status.st_size == 0:
        return log
    try:
        with open(log, "rb") as file:
            # The log's reader skips blank lines; the first line with text is what tells a log from a user's file.
            first = b""
            while not first.strip():
                first = file.readline(_FIRST_LINE_LIMIT)
                if not first:
                    break
    except OSError as error:
        raise ValueError(f"out={log!r} exists and cannot be read ({error.strerror or error}), so it cannot be told "
                         f"to be an attncheck probe log: {refusal}") from None
    problem = _core.probe_log_line_problem(first.decode("utf-8", errors="replace"), log)
    if problem:
        raise ValueError(f"out={log!r} exists and is not an attncheck probe log ({problem}): {refusal}")
    return log


def _summary_writer(tensorboard):
    """(writer, whether the recorder closes it) from a SummaryWriter, a log folder or None."""
    if tensorboard is None:
        return None, False
    if hasattr(tensorboard, "add_scalar"):
        return tensorboard, False
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as error:
        raise ValueError(f"tensorboard={tensorboard!r} needs the tensorboard package (pip install tensorboard): "
                         f"{error}") from None
    return SummaryWriter(log_dir=os.fspath(tensorboard)), True
