"""attncheck from Python: the exact attention norms, the papers' softmax bounds and their Monte Carlo scaling.

Every function takes NumPy arrays (float32 or float64, C or Fortran order, any strides) or anything NumPy can
view without copying: PyTorch CPU tensors (through DLPack; `requires_grad` tensors are detached first). The
computations run in C++ without the GIL, and results are dictionaries keyed like the command line's JSON.
Bad input raises ValueError with the command line's message.

    softmax_norms(logits, mask=None)      ||softmax||_F and ||grad softmax||_F, exact, per row and in total
    attention_norms(x, w_q, w_k, ...)     per head what `attncheck probe` reports
    bounds(N, families=..., seed=...)     `attncheck bounds --json`
    cross_norm_bounds(N, dv, mix=...)     `attncheck bounds --cross-norm --json` (claim C9)
    mc(claim=..., N=..., ...)             `attncheck mc --json`

attncheck.torch.AttentionRecorder records a live PyTorch training run in the log `attncheck probe --watch`
writes, which `attncheck report` plots over training steps.
"""

import numbers

import numpy as np

from . import _core

__all__ = ["softmax_norms", "attention_norms", "bounds", "cross_norm_bounds", "mc", "ACTIVATIONS"]
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


def _measure(x, w_q, w_k, b_q, b_k, heads, causal, mask, scale, layer):
    """The per-head measurements as _core._Head objects (for the recorder, which also writes them as log lines)."""
    x = _as_array(x, "x")
    arrays = [_as_array(w_q, "w_q"), _as_array(w_k, "w_k"),
              None if b_q is None else _as_array(b_q, "b_q"), None if b_k is None else _as_array(b_k, "b_k")]
    if mask is not None:
        n = x.shape[0] if x.ndim else 0
        mask = _as_mask(mask, (n, n), "a query attends to a key")
    if not isinstance(heads, numbers.Integral):
        raise ValueError(f"heads = {heads!r} is not an integer")
    return _core.measure(x, *arrays, heads=int(heads), causal=bool(causal), mask=mask,
                         scale=None if scale is None else float(scale), layer=int(layer))


def attention_norms(x, w_q, w_k, b_q=None, b_k=None, heads=1, activation="softmax", causal=False, mask=None,
                    scale=None):
    """Per head, what `attncheck probe` measures on one sequence: the attention map's Frobenius norm against the
    bounds, its Jacobians in the scores and in the weights, score statistics and the alternative activations on
    the same scores, all in closed form (no Jacobian is formed; O(N^2 d) per head).

    Weights follow the math, not nn.Linear's storage: x is (N, D), w_q and w_k are (D, heads * d_head) and
    q = x @ w_q + b_q, k = x @ w_k + b_k (b_q, b_k of length heads * d_head, or None); head h owns columns
    h * d_head .. (h + 1) * d_head - 1. For an nn.Linear, pass linear.weight.T and linear.bias. The scores are
    S = scale * q_h k_h^T with scale = 1/sqrt(d_head) unless given. causal masks j > i; mask (N, N) booleans,
    True where query i attends to key j, masks the rest (with causal, both apply).

    Returns one dict per head, keyed like the rows under `heads` of `attncheck probe --json`: layer (0), head,
    N, D, d, causal, inner (the scale), softmax_fro (||A||_F), grad_fro (||dA/dS||_F), dWq_fro and dWk_fro (||dA/dW_Q||_F, ||dA/dW_K||_F,
    in the head's weights, the biases entering through the scores), sqrt_N and the ratios to the bounds, score
    statistics over the attended entries, the same norms for S/sqrt(N), S^3/sqrt(N) (poly3_scaled_*), S^3
    (poly3_*) and relu(S)/N (relu_n_*), the i.i.d. Gaussian model's exact root mean squares (iid_*) with the
    measured sigma_x and sigma_t, and activation: the one the model uses (one of ACTIVATIONS), which names the
    model's own columns among these.
    """
    _check_activation(activation)
    heads_measured = _measure(x, w_q, w_k, b_q, b_k, heads, causal, mask, scale, 0)
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


def mc(claim=None, *, N="16:1024:x2", D="64", d="64", p="1,2,3", phi=None, alpha=None, inner_scale=None,
       outer_scale=None, estimand=None, claimed_exponent=None, samples="auto", rel_se=0.01, max_samples=100000,
       max_seconds=600, sigma_x=1, sigma_t=1, seed=1, threads=0, tile=256, path="auto", precision="double",
       tolerance=0.05, out=None, resume=False, force=False):
    """Monte Carlo scaling of the expectation claims C3-C8 on the CPU backend: the dictionary `attncheck mc
    --json` prints (provenance, points, series with slopes and verdicts, exit_code), plus "notes" when the
    command line would print a note.

    Options are the command line's (see `attncheck mc --help`), with underscores for dashes. Grids (N, D, d)
    and lists (p, alpha) may be strings as on the command line ("16:4096:x2", "1,2,3"), numbers or sequences of
    numbers; samples is an integer or "auto". out names a results folder (points.jsonl, points.csv, fits.json),
    which `attncheck report` reads. Ctrl-C stops the run between chunks of samples (KeyboardInterrupt); points
    already finished are in out.
    """
    request = _core._McRequest()
    request.claim = claim
    request.phi = phi
    request.inner_scale = None if inner_scale is None else str(inner_scale)
    request.outer_scale = None if outer_scale is None else str(outer_scale)
    request.estimand = None if estimand is None else _option_list(estimand)
    request.out = None if out is None else str(out)
    request.N, request.D, request.d = _option_list(N), _option_list(D), _option_list(d)
    request.p = _option_list(p)
    request.alpha = None if alpha is None else _option_list(alpha)
    request.samples = str(samples)
    request.claimed_exponent = None if claimed_exponent is None else float(claimed_exponent)
    request.rel_se, request.max_seconds = float(rel_se), float(max_seconds)
    request.sigma_x, request.sigma_t, request.tolerance = float(sigma_x), float(sigma_t), float(tolerance)
    for option, value in (("--max-samples", max_samples), ("--seed", seed)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
            raise ValueError(f"{option} {value}: must be a non-negative integer")
    request.max_samples, request.seed = int(max_samples), int(seed)
    request.threads, request.tile, request.resume = int(threads), int(tile), bool(resume)
    request.path, request.precision = str(path), str(precision)
    request.force = bool(force)
    given = {name: value for name, value in locals().items() if name not in ("request", "option", "value")}
    request.command = "attncheck.mc(" + ", ".join(f"{k}={v!r}" for k, v in given.items()) + ")"
    return _core.mc(request)
