"""Attention modules recognised by their structure, as Hugging Face transformers builds them.

A recogniser keys on a module's submodules (its query and key projections) and reads the rest from the module's
attributes and its config: heads, key/value heads, head size, scale, rotary frequencies, q/k norms, soft-capping.
Class names are never required, so renamed classes, their eager/SDPA/flash variants and changed forward signatures
are recognised alike; what the call itself carries (the hidden states, the mask, the positions) is read by argument
name through the forward's signature.

Each recogniser returns the batched description of one call that attncheck.torch measures: x (batch, N, D) as the
projections see it, w_q (D, heads d) and w_k (D, kv_heads d) as maps of rows, biases, heads, kv_heads, scale,
causal, mask ((batch, N, N) booleans, True where query i attends to key j, or None), positions ((batch, N) or None),
rotary (frequencies, radians per position, or None), query_norm and key_norm ((gain, eps) or None) and softcap.
"""

import inspect
import math

import numpy as np
import torch


class Unmeasurable(Exception):
    """A call the recorder cannot measure, and why."""


def _linear(module, name):
    child = getattr(module, name, None)
    return child if isinstance(child, torch.nn.Linear) else None


def _attribute(module, *names, default=None):
    """The first of `names` set on the module, else on its config."""
    config = getattr(module, "config", None)
    for owner in (module, config):
        for name in names:
            value = getattr(owner, name, None) if owner is not None else None
            if value is not None:
                return value
    return default


def _call_arguments(module, forward, args, kwargs):
    """The call's arguments by name, through the forward's signature (positional ones included)."""
    try:
        bound = inspect.signature(forward).bind_partial(*args, **kwargs)
    except (TypeError, ValueError):
        return dict(kwargs)
    named = dict(bound.arguments)
    for name, parameter in inspect.signature(forward).parameters.items():
        if parameter.kind is inspect.Parameter.VAR_KEYWORD and name in named:
            named.update(named.pop(name))
    return named


def _hidden_states(call, *names):
    for name in names:
        value = call.get(name)
        if isinstance(value, torch.Tensor):
            if value.dim() != 3:
                raise Unmeasurable(f"{name} has shape {tuple(value.shape)}, not (batch, N, D)")
            return value
    raise Unmeasurable(f"the call has none of {', '.join(names)}")


def _allowed_from_additive(mask, n, what, rows=None):
    """A Hugging Face mask as booleans (batch, N, N): additive masks add 0 where a key takes part and a very
    negative number (the dtype's minimum, -inf, -1e4 in older models) where it does not; boolean masks are True
    where it takes part. Masks of (batch, 1, 1, N) or (batch, N) are padding masks, broadcast over the queries."""
    if mask.dim() == 2:
        mask = mask[:, None, None, :]
    if mask.dim() == 3:
        mask = mask[:, None]
    if mask.dim() != 4:
        raise Unmeasurable(f"{what} has shape {tuple(mask.shape)}")
    if mask.shape[1] != 1 and not bool((mask == mask[:, :1]).all()):
        raise Unmeasurable(f"{what} differs between heads")
    mask = mask[:, 0].detach().cpu()
    if mask.shape[-2] != 1 and mask.shape[-2] != n:
        if rows is None:
            rows = torch.arange(n)
        if mask.shape[-2] < n:
            raise Unmeasurable(f"{what} has {mask.shape[-2]} rows for N = {n} queries")
        mask = mask[:, rows.cpu()]
    if mask.shape[-1] < n:
        raise Unmeasurable(f"{what} has {mask.shape[-1]} keys for N = {n} queries (a key/value cache?)")
    mask = mask[..., :n]
    if mask.dtype == torch.bool:
        allowed = mask
    else:
        mask = mask.double()
        kept = mask == 0
        dropped = mask <= -1e4
        if not bool((kept | dropped).all()):
            raise Unmeasurable(f"{what} adds values other than 0 and a mask value to the scores (a position bias?): "
                               "not the maps measured")
        allowed = kept
    return allowed.expand(allowed.shape[0], n, n)


def _combine(first, second):
    if first is None:
        return second
    if second is None:
        return first
    return first & second


def _rms_norm(norm, d):
    """(gain, eps) of a module that applies RMSNorm over d coordinates: learned from the module itself (its weight
    may be the gain or gain - 1, as Gemma stores it), then checked on a random vector."""
    if norm is None:
        return None
    eps = _attribute(norm, "variance_epsilon", "eps", "epsilon")
    if eps is None:
        raise Unmeasurable(f"the q/k norm {type(norm).__name__} has no eps")
    probe = [p.detach().cpu().double() for p in norm.parameters()]
    if len(probe) != 1 or probe[0].shape != (d,):
        raise Unmeasurable(f"the q/k norm {type(norm).__name__} is not an RMSNorm over the head's {d} coordinates")
    twin = _double_copy(norm)
    eps = float(eps)
    with torch.no_grad():
        gain = twin(torch.ones(1, d, dtype=torch.float64))[0] * math.sqrt(1 + eps)
        generator = torch.Generator().manual_seed(20261126)
        trial = torch.randn(3, d, dtype=torch.float64, generator=generator)
        expected = trial / torch.sqrt(trial.pow(2).mean(-1, keepdim=True) + eps) * gain
        if not torch.allclose(twin(trial), expected, rtol=1e-10, atol=1e-12):
            raise Unmeasurable(f"the q/k norm {type(norm).__name__} is not x / sqrt(mean(x^2) + eps) * gain")
    return gain.numpy(), eps


def _double_copy(module):
    import copy
    twin = copy.deepcopy(module)
    return twin.to(dtype=torch.float64, device="cpu")


def _rope_settings(module, config):
    """(base, scaling dict) of this layer's rotary positions from the config: rope_theta and rope_scaling, the
    sliding layers' rope_local_base_freq, or rope_parameters (one object, or one per kind of layer)."""
    sliding = bool(getattr(module, "is_sliding", False) or getattr(module, "sliding_window", None))
    theta = getattr(config, "rope_theta", None)
    scaling = getattr(config, "rope_scaling", None) or {}
    local = getattr(config, "rope_local_base_freq", None)
    if local is not None and sliding:
        return local, {}
    parameters = getattr(config, "rope_parameters", None)
    if isinstance(parameters, dict):
        if "full_attention" in parameters or "sliding_attention" in parameters:
            parameters = parameters.get("sliding_attention" if sliding else "full_attention") or {}
        theta = parameters.get("rope_theta", theta)
        scaling = parameters
    return theta, scaling if isinstance(scaling, dict) else {}


def _rotary_frequencies(module, root, d, config):
    """The rotary frequencies of a module's queries and keys in double precision, and the factor the rotary
    embedding multiplies cos and sin by: from the config for default and linear rotary positions (the model
    computes them from the same config), else the model's own inv_freq (llama3, yarn, dynamic, ...)."""
    theta, scaling = _rope_settings(module, config) if config is not None else (None, {})
    kind = scaling.get("rope_type", scaling.get("type", "default")) or "default"
    pairs = d // 2
    if theta is not None and kind in ("default", "linear"):
        frequencies = np.power(float(theta), -2.0 * np.arange(pairs) / d)
        return frequencies / (float(scaling.get("factor", 1.0)) if kind == "linear" else 1.0), 1.0
    for owner in (module, root):
        for _, child in owner.named_modules():
            inv = getattr(child, "inv_freq", None)
            if isinstance(inv, torch.Tensor) and inv.dim() == 1 and inv.shape[0] == pairs:
                scaled = inv.detach().cpu().double() / float(getattr(child, "scaling_factor", 1.0) or 1.0)
                return scaled.numpy(), float(getattr(child, "attention_scaling", 1.0) or 1.0)
    raise Unmeasurable(f"rotary positions of type '{kind}' and no inv_freq of {pairs} frequencies found")


def _has_rotary(module, config):
    """Rotary position embeddings: the config names their base, or the module holds their frequencies."""
    if config is not None and (getattr(config, "rope_theta", None) is not None
                               or isinstance(getattr(config, "rope_parameters", None), dict)):
        return True
    return any(isinstance(getattr(child, "inv_freq", None), torch.Tensor) for child in module.modules())


def _positions(call, n):
    positions = call.get("position_ids")
    if not isinstance(positions, torch.Tensor):
        positions = call.get("cache_position")
    if not isinstance(positions, torch.Tensor):
        return None
    positions = positions.detach().cpu()
    if positions.dim() == 1:
        positions = positions[None]
    if positions.shape[-1] != n:
        raise Unmeasurable(f"position ids of length {positions.shape[-1]} for N = {n}")
    return positions


# --- what is recognised, and how a call is described ---------------------------------------------------------

def _projection_pairs(module):
    """Query and key projections: q_proj/k_proj (Llama, Mistral, Qwen, Gemma, CLIP), query/key (BERT, RoBERTa, ViT,
    DINOv2), q_lin/k_lin (DistilBERT)."""
    for query, key, value in (("q_proj", "k_proj", "v_proj"), ("query", "key", "value"), ("q_lin", "k_lin", "v_lin")):
        if _linear(module, query) is not None and _linear(module, key) is not None:
            return _linear(module, query), _linear(module, key)
    return None


def _is_gpt2_attention(module):
    c_attn = getattr(module, "c_attn", None)
    weight = getattr(c_attn, "weight", None)
    return (isinstance(weight, torch.Tensor) and weight.dim() == 2 and weight.shape[1] == 3 * weight.shape[0]
            and getattr(module, "num_heads", None) is not None)


def _from_transformers(module):
    """A module of a transformers model (its class or a base class is defined in the package): a module of the
    user's with query and key projections may compute anything, and is measured only through register()."""
    return any(getattr(cls, "__module__", "").startswith("transformers.") for cls in type(module).__mro__)


def recognise(module):
    """Whether this module is an attention layer the recorder measures without an adapter."""
    return _from_transformers(module) and (_projection_pairs(module) is not None or _is_gpt2_attention(module))


def looks_like_attention(module):
    """A module whose name says attention although it is not recognised (for the warning that names them)."""
    name = type(module).__name__.lower()
    return "attention" in name or "attn" in name


def describe_call(module, root, forward, args, kwargs):
    """The batched description of one forward call of a recognised module (see the module's docstring)."""
    call = _call_arguments(module, forward, args, kwargs)
    config = getattr(module, "config", None) or getattr(root, "config", None)
    head_mask = call.get("head_mask")
    if isinstance(head_mask, torch.Tensor) and not bool((head_mask == 1).all()):
        raise Unmeasurable("a head_mask that scales heads changes the maps measured")
    if call.get("encoder_hidden_states") is not None:
        raise Unmeasurable("cross-attention (encoder_hidden_states) is not measured: the theory's maps are "
                           "self-attention")
    if _keys_cached_before(module, call):
        raise Unmeasurable("a call with cached keys (generation) is not measured: its queries are not its keys")
    if _is_gpt2_attention(module):
        return _gpt2(module, call)
    query, key = _projection_pairs(module)
    if _linear(module, "q_lin") is query:
        x = _hidden_states(call, "query", "hidden_states")
        if call.get("key") is not None and call["key"] is not call.get("query"):
            raise Unmeasurable("cross-attention (key is not the query) is not measured")
        mask = call.get("mask")
        allowed = None if mask is None else _allowed_from_additive(mask.bool() if mask.dtype != torch.bool else mask,
                                                                   x.shape[1], "mask")
        heads = _attribute(module, "n_heads")
        return _linear_spec(query, key, x, heads, heads, None, False, allowed, None, None, None, None, 0.0)
    x = _hidden_states(call, "hidden_states", "x", "query")
    n = x.shape[1]
    heads = _attribute(module, "num_heads", "num_attention_heads", "n_heads")
    if heads is None:
        raise Unmeasurable("the number of heads is neither an attribute nor in the config")
    heads = int(heads)
    d = query.out_features // heads
    head_dim = _attribute(module, "head_dim", "attention_head_size", default=d)
    if head_dim * heads != query.out_features:
        raise Unmeasurable(f"q projection of {query.out_features} outputs for {heads} heads of {head_dim}")
    kv_heads = key.out_features // head_dim
    if getattr(module, "position_embedding_type", "absolute") not in ("absolute", None):
        raise Unmeasurable(f"position_embedding_type '{module.position_embedding_type}' adds position terms to the "
                           "scores: not the maps measured")
    scale = _attribute(module, "scaling", "scale")
    if not isinstance(scale, (int, float)):
        scalar = getattr(config, "query_pre_attn_scalar", None)
        scale = scalar ** -0.5 if scalar is not None else head_dim ** -0.5
    rotary = None
    if _has_rotary(module, config) or call.get("position_embeddings") is not None:
        rotary, attention_scaling = _rotary_frequencies(module, root, head_dim, config)
        if rotary is None:
            raise Unmeasurable("the call rotates its queries and keys, and no rotary frequencies were found")
        scale = scale * attention_scaling ** 2
    causal = bool(getattr(module, "is_causal", False))
    rows = call.get("cache_position") if isinstance(call.get("cache_position"), torch.Tensor) else None
    allowed = None
    for name in ("attention_mask", "causal_attention_mask", "attn_mask"):
        mask = call.get(name)
        if isinstance(mask, torch.Tensor):
            allowed = _combine(allowed, _allowed_from_additive(mask, n, name, rows))
    if allowed is None and causal:
        window = getattr(module, "sliding_window", None)
        if isinstance(window, int) and not isinstance(window, bool) and window > 0:
            i = torch.arange(n)
            band = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - window)
            allowed = band.expand(x.shape[0], n, n)
    softcap = _attribute(module, "attn_logit_softcapping", "softcap", default=0.0) or 0.0
    query_norm = _rms_norm(getattr(module, "q_norm", None), head_dim)
    key_norm = _rms_norm(getattr(module, "k_norm", None), head_dim)
    return _linear_spec(query, key, x, heads, kv_heads, scale, causal, allowed, _positions(call, n), rotary,
                        query_norm, key_norm, float(softcap))


def _keys_cached_before(module, call):
    """Whether the call attends to keys of earlier calls (a key/value cache during generation). The recorder looks
    after the call, when a cache already holds this call's own keys: only those beyond them are earlier ones."""
    cache_position = call.get("cache_position")
    if isinstance(cache_position, torch.Tensor) and cache_position.numel():
        return int(cache_position.reshape(-1)[0]) > 0
    past = call.get("past_key_value", call.get("past_key_values", call.get("layer_past")))
    if past is None:
        return False
    if isinstance(past, (tuple, list)):
        return len(past) > 0 and isinstance(past[0], torch.Tensor) and past[0].numel() > 0
    length = getattr(past, "get_seq_length", None)
    x = call.get("hidden_states")
    if not callable(length) or not isinstance(x, torch.Tensor):
        return True
    layer = getattr(module, "layer_idx", None)
    cached = length(layer) if layer is not None else length()
    return cached > x.shape[1]


def _spec(x, w_q, w_k, b_q, b_k, heads, kv_heads, scale, causal, allowed, positions=None, rotary=None,
          query_norm=None, key_norm=None, softcap=0.0):
    return dict(x=x, w_q=w_q, w_k=w_k, b_q=b_q, b_k=b_k, heads=int(heads), kv_heads=int(kv_heads), scale=scale,
                causal=causal, mask=allowed, positions=positions, rotary=rotary, query_norm=query_norm,
                key_norm=key_norm, softcap=softcap)


def _linear_spec(query, key, x, heads, kv_heads, scale, causal, allowed, positions, rotary, query_norm, key_norm,
                 softcap):
    return _spec(x, query.weight.T, key.weight.T, query.bias, key.bias, heads, kv_heads, scale, causal, allowed,
                 positions, rotary, query_norm, key_norm, softcap)


def _gpt2(module, call):
    if getattr(module, "is_cross_attention", False):
        raise Unmeasurable("cross-attention is not measured")
    x = _hidden_states(call, "hidden_states")
    n, embed = x.shape[1], module.c_attn.weight.shape[0]
    heads = int(module.num_heads)
    head_dim = embed // heads
    scale = head_dim ** -0.5 if getattr(module, "scale_attn_weights", True) else 1.0
    if getattr(module, "scale_attn_by_inverse_layer_idx", False):
        scale /= float(module.layer_idx + 1)
    weight, bias = module.c_attn.weight, module.c_attn.bias  # Conv1D: x @ weight + bias, columns q | k | v
    allowed = None
    mask = call.get("attention_mask")
    if isinstance(mask, torch.Tensor):
        allowed = _allowed_from_additive(mask, n, "attention_mask")
    causal_buffer = getattr(module, "bias", None)
    causal = not (isinstance(causal_buffer, torch.Tensor) and causal_buffer.dtype == torch.bool
                  and bool(causal_buffer[..., :n, :n].all()))
    return _spec(x, weight[:, :embed], weight[:, embed:2 * embed], bias[:embed], bias[embed:2 * embed], heads, heads,
                 scale, causal, allowed)
