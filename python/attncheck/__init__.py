"""attncheck from Python: the exact attention norms, the papers' softmax bounds and their Monte Carlo scaling.

Every function takes NumPy arrays (float32 or float64, C or Fortran order, any strides) or anything NumPy can
view without copying: PyTorch CPU tensors (through DLPack; `requires_grad` tensors are detached first). The
computations run in C++ without the GIL, and results are dictionaries keyed like the command line's JSON.
Bad input raises ValueError with the command line's message; so does a size the command line refuses for the
memory it would take (a broadcast view counts the entries it shows, not the memory it holds). Ctrl-C ends a long
call with KeyboardInterrupt (attention_norms between heads).

    softmax_norms(logits, mask=None)      ||softmax||_F and ||grad softmax||_F, exact, per row and in total
    attention_norms(x, w_q, w_k, ...)     per head what `attncheck probe` reports
    bounds(N, families=..., seed=...)     `attncheck bounds --json`
    cross_norm_bounds(N, dv, mix=...)     `attncheck bounds --cross-norm --json` (claim C9)
    mc(claim=..., N=..., ...)             `attncheck mc --json`
    report(input, out, ...)               `attncheck report`: index.html and report.md with their plots

attncheck.torch.AttentionRecorder records a live PyTorch training run in the log `attncheck probe --watch`
writes, which `attncheck report` plots over training steps.
"""

import inspect
import numbers
import os

import numpy as np

from . import _core

__all__ = ["softmax_norms", "attention_norms", "bounds", "cross_norm_bounds", "mc", "report", "ACTIVATIONS"]
__version__ = _core.__version__

# The activations a model can be trained with that the probe log and `attncheck report` know by name:
# softmax, x^3/sqrt(N) (elementwise), x^3 and relu(x)/N.
ACTIVATIONS = ("softmax", "poly3_scaled", "poly3", "relu_n")


def _as_array(value, name):
    """A NumPy view of `value` without copying where its layout allows (tensors through DLPack)."""
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "__dlpack__") and hasattr(value, "detach"):  # a PyTorch tensor
        tensor = value.detach()
        if tensor.device.type != "cpu":
            raise ValueError(f"{name} is on device {tensor.device}: move it to the CPU first (.cpu())")
        try:
            return np.from_dlpack(tensor)
        except (BufferError, TypeError, RuntimeError) as error:
            raise ValueError(f"{name} has dtype {tensor.dtype}, which NumPy cannot view: give float32 or float64 "
                             f"({error})") from None
    return np.asarray(value)


def _as_mask(mask, shape, what):
    mask = _as_array(mask, "mask")
    if mask.dtype != np.bool_:
        raise ValueError(f"mask has dtype {mask.dtype}: give a boolean array, True where {what}")
    try:
        return np.broadcast_to(mask, shape)
    except ValueError:
        raise ValueError(f"mask has shape {mask.shape}, which does not broadcast to {shape}") from None


def softmax_norms(logits, mask=None):
    """Exact Frobenius norms of the row-wise softmax and of its Jacobian, per row and in total (no Jacobian is
    formed: per row a of probabilities, ||diag(a) - a a^T||_F^2 = sum a^2 - 2 sum a^3 + (sum a^2)^2, summed without
    cancellation).

    logits: a matrix (N, M) or a batch (..., N, M) of them. mask: booleans broadcastable to logits' shape, True
    where an entry takes part; masked entries get probability 0 (as a -inf logit would). A row with NaN, +inf or
    nothing unmasked is a ValueError naming it.

    Returns N, M, softmax_fro (||softmax(A)||_F), grad_fro (||grad softmax(A)||_F, the Jacobian of the row-wise
    map), row_softmax_fro and row_grad_fro (the same per row, shape (..., N)), sqrt_N, and the ratios
    softmax_over_sqrt_N (Theorem 4.1's first bound), grad_over_2sqrt_N (the papers' bound on the Jacobian) and
    grad_over_half_sqrt_N (its exact sup sqrt(N)/2). For a batch the totals and ratios are arrays of the batch's
    shape.
    """
    logits = _as_array(logits, "logits")
    if mask is not None:
        mask = _as_mask(mask, logits.shape, "an entry takes part")
    return _core.softmax_norms(logits, mask)


def _check_activation(activation):
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation '{activation}' is not one of {', '.join(ACTIVATIONS)}")


def _what_if_list(what_if):
    """The what-if expressions as a list of strings (one string is one expression)."""
    if isinstance(what_if, str):
        return [what_if]
    what_if = list(what_if or ())
    for text in what_if:
        if not isinstance(text, str):
            raise ValueError(f"what_if holds {text!r}, not an expression such as 'x^3/sqrt(N)'")
    return what_if


def _measure(x, w_q, w_k, b_q, b_k, heads, causal, mask, scale, layer, kv_heads=None, rotary=None,
             rotary_layout="half", query_norm=None, key_norm=None, logit_softcap=0.0, what_if=()):
    """The per-head measurements as _core._Head objects (for the recorder, which also writes them as log lines)."""
    x = _as_array(x, "x")
    arrays = [_as_array(w_q, "w_q"), _as_array(w_k, "w_k"),
              None if b_q is None else _as_array(b_q, "b_q"), None if b_k is None else _as_array(b_k, "b_k")]
    if mask is not None:
        n = x.shape[0] if x.ndim else 0
        mask = _as_mask(mask, (n, n), "a query attends to a key")
    for name, value in (("heads", heads), ("kv_heads", kv_heads)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral)):
            raise ValueError(f"{name} = {value!r} is not an integer")
    if rotary is not None:
        rotary = np.ascontiguousarray(_as_array(rotary, "rotary"), dtype=np.float64)
    gains, biases, eps, kinds = {}, {}, [], set()
    for name, norm in (("query_norm", query_norm), ("key_norm", key_norm)):
        if norm is not None:
            if not (isinstance(norm, tuple) and len(norm) in (2, 3)):
                raise ValueError(f"{name} must be (gain, eps) for an RMSNorm or (gain, eps, bias) for a LayerNorm")
            gains[name] = np.ascontiguousarray(_as_array(norm[0], name), dtype=np.float64)
            eps.append(float(norm[1]))
            kinds.add(len(norm))
            if len(norm) == 3 and norm[2] is not None:
                biases[name] = np.ascontiguousarray(_as_array(norm[2], name + " bias"), dtype=np.float64)
    if len(set(eps)) > 1:
        raise ValueError(f"query_norm and key_norm have different eps ({eps[0]} and {eps[1]})")
    if len(kinds) > 1:
        raise ValueError("query_norm and key_norm are of different kinds (an RMSNorm and a LayerNorm)")
    return _core.measure(x, *arrays, heads=int(heads), kv_heads=0 if kv_heads is None else int(kv_heads),
                         causal=bool(causal), mask=mask, scale=None if scale is None else float(scale),
                         layer=int(layer), rotary=rotary, rotary_layout=str(rotary_layout),
                         query_norm=gains.get("query_norm"), key_norm=gains.get("key_norm"),
                         norm_eps=eps[0] if eps else 1e-6, logit_softcap=float(logit_softcap or 0.0),
                         what_if=_what_if_list(what_if), norm_centred=kinds == {3},
                         query_norm_bias=biases.get("query_norm"), key_norm_bias=biases.get("key_norm"))


def attention_norms(x, w_q, w_k, b_q=None, b_k=None, heads=1, activation="softmax", causal=False, mask=None,
                    scale=None, *, kv_heads=None, rotary=None, rotary_layout="half", query_norm=None, key_norm=None,
                    logit_softcap=0.0, what_if=()):
    """Per head, what `attncheck probe` measures on one sequence: the attention map's Frobenius norm against the
    bounds, its Jacobians in the scores and in the weights, score statistics and the alternative activations on
    the same scores, all in closed form (no Jacobian is formed; O(N^2 d) per head).

    Weights follow the math, not nn.Linear's storage: x is (N, D), w_q and w_k are (D, heads * d_head) and
    q = x @ w_q + b_q, k = x @ w_k + b_k (b_q, b_k of length heads * d_head, or None); head h owns columns
    h * d_head .. (h + 1) * d_head - 1. For an nn.Linear, pass linear.weight.T and linear.bias. The scores are
    S = scale * q_h k_h^T with scale = 1/sqrt(d_head) unless given. causal masks j > i; mask (N, N) booleans,
    True where query i attends to key j, masks the rest (with causal, both apply).
    kv_heads: grouped-query attention, w_k (and b_k) of D x (kv_heads * d_head), query head h reading key head
    h // (heads // kv_heads); dWk_group is then the derivative in the key head's weights shared by its group.
    rotary: the frequencies (radians per position) of rotary position embeddings, queries and keys of row t
    rotated by t * frequency; pair p rotates coordinates (p, p + len(rotary)) (rotary_layout "half", Hugging
    Face's) or (2p, 2p + 1) ("interleaved", ggml's); coordinates past 2 * len(rotary) are not rotated. Or a 2-D
    (N, P) array of angles per position: row t's pair p turns by rotary[t, p] (EVA's 2-D rotary over image
    patches, its prefix tokens at 0), in the same layouts with P pairs; softmax's dWk_fro is then O(N^3 d) per head.
    Or a 3-D (heads, N, P) array, head h's queries and keys turned by rotary[h] (timm's mixed rotary learns angles
    per head; kv_heads must then equal heads).
    query_norm, key_norm: (gain, eps) of an RMSNorm applied to each head's queries or keys before the rotation,
    q / sqrt(mean(q^2) + eps) * gain (Qwen3, Gemma 3), or (gain, eps, bias) of a LayerNorm, c / sqrt(mean(c^2) +
    eps) * gain + bias with c = q - mean(q) (Persimmon, timm's qk_norm; bias None without one); logit_softcap: the
    softmax takes cap * tanh(S / cap) (Gemma 2). The derivatives in W_Q and W_K go through both; grad_fro stays the softmax's Jacobian in its logits.
    A gain of heads * d_head entries (kv_heads * d_head for key_norm) is one RMSNorm over all the heads' queries (keys)
    together (OLMo 2): a head's map then moves with every head's weights, and dWq_fro, dWk_fro are its Jacobians in
    the whole w_q and w_k (dWk_group_fro that of its group's maps in the whole w_k).

    Returns one dict per head, keyed like the rows under `heads` of `attncheck probe --json`: layer (0), head,
    N, D, d, causal, inner (the scale), softmax_fro (||A||_F), grad_fro (||dA/dS||_F), dWq_fro and dWk_fro (||dA/dW_Q||_F, ||dA/dW_K||_F,
    in the head's weights, the biases entering through the scores), sqrt_N and the ratios to the bounds, score
    statistics over the attended entries, the same norms for S/sqrt(N), S^3/sqrt(N) (poly3_scaled_*), S^3
    (poly3_*) and relu(S)/N (relu_n_*), the i.i.d. Gaussian model's exact root mean squares (iid_*) with the
    measured sigma_x and sigma_t, and activation: the one the model uses (one of ACTIVATIONS), which names the
    model's own columns among these. what_if: expressions in x (the score), N and d, as `attncheck mc --phi` and
    `attncheck probe --what-if` take them ("x^3/sqrt(N)", "sigmoid(x - log(N))"), applied elementwise to the same
    scores: each head's "what_if" lists their phi and fro, grad_fro, dWq_fro, dWk_fro.
    """
    _check_activation(activation)
    heads_measured = _measure(x, w_q, w_k, b_q, b_k, heads, causal, mask, scale, 0, kv_heads, rotary, rotary_layout,
                              query_norm, key_norm, logit_softcap, what_if)
    return [dict(head.as_dict(), activation=activation) for head in heads_measured]


def _option_list(value):
    """A command-line list ("16,64" or "16:4096:x2") from a string, a number or a sequence of numbers."""
    if isinstance(value, str):
        return value
    if isinstance(value, numbers.Number):
        return repr(value)
    return ",".join(repr(v) if isinstance(v, float) else str(v) for v in value)


def bounds(N=None, families=None, seed=1, *, trials=8, search_starts=8, input=None, threads=None):
    """Theorem 4.1 checked exactly on matrix families: the dictionary `attncheck bounds --json` prints.

    N: the matrix size (N x N logits); families: names as the command line takes them (gaussian-1e-3,
    gaussian-1, gaussian-10, gaussian-1e3, near-one-hot, two-equal-top, constant, worst-case-search; all when
    None); input: a .npy or CSV file of logits (N = its rows); threads: None for all cores. Results do not
    depend on threads.
    """
    if isinstance(families, str):
        families = [families]
    if N is not None and (isinstance(N, bool) or not isinstance(N, numbers.Integral)):
        raise ValueError(f"--N: '{N}' is not a positive integer")
    return _core.bounds(None if N is None else int(N), list(families or []), "" if input is None else str(input),
                        int(trials), int(search_starts), int(seed), 0 if threads is None else int(threads))


def cross_norm_bounds(N=None, dv=None, families=None, seed=1, *, mix=1, trials=8, search_starts=8, input=None,
                      values=None, threads=None):
    """Claim C9's bounds (THEORY.md facts 10-11) checked exactly: the dictionary `attncheck bounds --cross-norm
    --json` prints.

    N: tokens; dv: value columns (64, or the columns of `values`, when None); families: names as the command line
    takes them (all when None); mix: the mix weight alpha in [0, 1] or a list of them; input: a .npy or CSV file of
    N x N scores; values: a .npy or CSV file of N x d_v values; threads: None for all cores.
    """
    if isinstance(families, str):
        families = [families]
    for name, value in (("--N", N), ("--dv", dv)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral)):
            raise ValueError(f"{name}: '{value}' is not a positive integer")
    return _core.cross_norm_bounds(None if N is None else int(N), None if dv is None else int(dv),
                                   list(families or []), "" if input is None else str(input),
                                   "" if values is None else str(values), _option_list(mix), int(trials),
                                   int(search_starts), int(seed), 0 if threads is None else int(threads))


def _mc_value(option, kind, value):
    """The value of one option as the request holds it, checked as the command line checks its text."""
    if kind == "flag":
        return bool(value)
    if value is None and kind.startswith("optional"):
        return None
    if kind in ("text", "optional_text"):
        return os.fspath(value) if isinstance(value, os.PathLike) else _option_list(value)
    if kind in ("real", "optional_real"):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ValueError(f"--{option.replace('_', '-')}: '{value}' is not a number")
        return float(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or (kind == "count" and value < 0):
        raise ValueError(f"--{option.replace('_', '-')} {value}: must be a{' non-negative' if kind == 'count' else 'n'} "
                         "integer")
    return int(value)


def mc(claim=None, **options):
    """Monte Carlo scaling of the expectation claims C3-C9 (and of any map without a claim): the dictionary
    `attncheck mc --json` prints (provenance, points, series with their verdicts and bases, exit_code: 0 holds,
    1 violated, 5 not settled), plus "notes" when the command line would print a note.

    Every option of `attncheck mc` (see `attncheck mc --help`), with underscores for dashes, built from the same
    table as the command line's: claim (C3-C9), N, D, d, preset, p, phi (a word, or your own activation as an
    expression in x such as "relu(x)^2/N"), normalize ("rows"), alpha (C7), mix and dv (C9), inner_scale,
    outer_scale, estimand, claimed_exponent, samples, rel_se, max_samples, max_seconds, sigma_x, sigma_t, seed,
    threads, tile, tolerance, backend, precision, path, out, resume, force. N, D, d and max_seconds not given are
    the preset's: "quick" (the default; a first sweep in about a minute) or "paper" (the papers' D = d = 64).
    Grids (N, D, d, dv) and lists (p, alpha, mix, estimand) may be strings as on the command line ("16:4096:x2",
    "1,2,3"), numbers or sequences; samples is an integer or "auto". out names a results folder (points.jsonl,
    points.csv, fits.json), which `attncheck report` reads. Ctrl-C stops the run between chunks of samples
    (KeyboardInterrupt); points already finished are in out.
    """
    request = _core._McRequest()
    known = {name: kind for name, kind, _, _ in _core._mc_options}
    given = {"claim": claim, **options}
    for name, value in given.items():
        if name not in known:
            raise TypeError(f"mc() got an unexpected keyword argument '{name}'")
        setattr(request, name, _mc_value(name, known[name], value))
    request.command = "attncheck.mc(" + ", ".join(f"{k}={v!r}" for k, v in given.items()) + ")"
    return _core.mc(request)


mc.__signature__ = inspect.Signature(
    [inspect.Parameter("claim", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None)]
    + [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default)
       for name, _, default, _ in _core._mc_options if name != "claim"])


def report(input, out, *, compare_with=(), plots=True, gnuplot="gnuplot", map_layer=0, map_head=0, force=False):
    """`attncheck report INPUT [COMPARE_WITH...] --out OUT`: writes OUT/index.html and OUT/report.md (with plots/
    drawn by gnuplot unless plots=False) from a results folder of `mc(out=...)` (the verdicts of C3-C9, their
    fits and figures), a probe log of `attncheck probe --watch` or of attncheck.torch.AttentionRecorder, training
    curves, or `attncheck probe --json` output; compare_with holds further runs of the same kind drawn in the same
    report. Returns what was written: {"html", "markdown", "plots", "series", "verdicts": {"holds", "tight",
    "violated", "consistent", "inconclusive"}, "probe_records", "curve_points", "vit_runs", "probe_outputs",
    "warnings"}. A missing or malformed input raises ValueError naming the file, and so does a file of OUT that
    no report wrote (index.html, report.md, plots/*), which is left as it is unless force=True.
    """
    if isinstance(compare_with, (str, os.PathLike)):
        compare_with = [compare_with]
    return _core.report(os.fspath(input), [os.fspath(path) for path in compare_with], os.fspath(out), bool(plots),
                        str(gnuplot), int(map_layer), int(map_head), bool(force))
