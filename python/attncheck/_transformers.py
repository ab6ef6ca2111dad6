"""Attention modules recognised by their structure, as Hugging Face transformers builds them, and timm's.

A recogniser keys on a module's submodules (its query and key projections, or one fused query_key_value) and reads
the rest from the module's attributes and its config: heads, key/value heads, head size, scale, rotary frequencies
and how many coordinates they turn, q/k norms (RMSNorms or LayerNorms over each head, or OLMo 2's RMSNorms over all
the heads together), soft-capping. What a layer
does beyond what is read (ALiBi biases, clamped queries and keys, ...) is refused, not measured as
something else. nanoGPT's CausalSelfAttention,
which no package defines, is recognised by its structure and then checked against nanoGPT's definition. timm's
attention classes are recognised by their qualified names instead: timm names one fused `qkv` projection alike in
classes that compute different maps (relative position biases, 2-D rotary positions), so structure does not tell
them apart; TransformerLens's Attention and GroupedQueryAttention likewise.
Class names are never required, so renamed classes, their eager/SDPA/flash variants and changed forward signatures
are recognised alike; what the call itself carries (the hidden states, the mask, the positions) is read by argument
name through the forward's signature.

Each recogniser returns the batched description of one call that attncheck.torch measures: x (batch, N, D) as the
projections see it, w_q (D, heads d) and w_k (D, kv_heads d) as maps of rows, biases, heads, kv_heads, scale,
causal, mask ((batch, N, N) booleans, True where query i attends to key j, or None), positions ((batch, N) or None),
rotary (frequencies, radians per position; or angles per position, (N, pairs), for timm's 2-D rope, (heads, N,
pairs) for its RoPE-Mixed, with a leading axis of images under rotary_per_image; or None),
query_norm and key_norm ((gain, eps) or None) and softcap;
and rotary_layout where the pairs are not Hugging Face's halves ("interleaved": GPT-J's and EVA's adjacent pairs);
rotary_per_image where the angles come one table per image of the batch (timm's patch dropout).
"""

import inspect
import math
import weakref

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


# A norm computed in float32 inside a float64 model (transformers' RMSNorms cast to float32 whatever the input's
# dtype) meets its definition to ~1e-7 and its gains, probed through it, their parameters to a few float32 ulps; a
# norm that computes something else misses by far more.
_FLOAT32_NORM_AGREEMENT, _FLOAT32_GAIN_AGREEMENT = 1e-5, 1e-6


def _head_norm(norm, d):
    """What a q/k norm module over d coordinates computes, learned from the module itself and then checked on random
    vectors (one of them so small that eps matters): (gain, eps) for an RMSNorm, x / sqrt(mean(x^2) + eps) * gain
    (its weight may be the gain or gain - 1, as Gemma stores it); (gain, eps, bias) for a LayerNorm,
    c / sqrt(mean(c^2) + eps) * gain + bias with c = x - mean(x) (bias None without one). A norm computed in double
    precision must meet the definition to 1e-10. One computed in float32 (transformers' RMSNorms), to 1e-5: its
    gain and bias are then the module's own parameters (or 1 and 0 without them) in double precision, which its
    float32 probes meet to 1e-6, and it is measured as its definition. Anything else is refused."""
    if norm is None:
        return None
    eps = _attribute(norm, "variance_epsilon", "eps", "epsilon")
    if eps is None:
        raise Unmeasurable(f"the q/k norm {type(norm).__name__} has no eps")
    shapes = [tuple(p.shape) for p in norm.parameters()]
    if any(shape != (d,) for shape in shapes) or len(shapes) > 2:
        raise Unmeasurable(f"the q/k norm {type(norm).__name__} is not a norm over {d} coordinates")
    eps = float(eps)
    if not eps >= 0:
        raise Unmeasurable(f"the q/k norm {type(norm).__name__} has eps = {eps}")
    trial = torch.randn(3, d, dtype=torch.float64, generator=torch.Generator().manual_seed(20261126))
    trial[2] *= math.sqrt(max(eps, 1e-12))  # mean square of order eps: a wrong eps shows
    name = type(norm).__name__

    def rms(gain):
        return trial / torch.sqrt(trial.pow(2).mean(-1, keepdim=True) + eps) * gain

    def layer(gain, bias):
        c = trial - trial.mean(-1, keepdim=True)
        return c / torch.sqrt(c.pow(2).mean(-1, keepdim=True) + eps) * gain + bias

    try:
        twin = _double_copy(norm)
        parameters = [p.detach().to(device="cpu", dtype=torch.float64) for p in twin.parameters()]
        parameters.append(torch.zeros(d, dtype=torch.float64))  # a norm without parameters: no bias, a gain of 1

        def run(x):
            return twin(x).to(dtype=torch.float64)

        def own(estimate):
            for value in parameters:
                for candidate in (value, 1 + value):
                    if torch.allclose(estimate, candidate, rtol=_FLOAT32_GAIN_AGREEMENT,
                                      atol=_FLOAT32_GAIN_AGREEMENT * 1e-2):
                        return candidate
            return None

        with torch.no_grad():
            output = run(trial)
            gain = run(torch.ones(1, d, dtype=torch.float64))[0] * math.sqrt(1 + eps)
            if torch.allclose(output, rms(gain), rtol=1e-10, atol=1e-12):
                return gain.numpy(), eps
            own_gain = own(gain)
            if own_gain is not None and torch.allclose(output, rms(own_gain), rtol=_FLOAT32_NORM_AGREEMENT,
                                                       atol=_FLOAT32_NORM_AGREEMENT * 1e-2):
                return own_gain.numpy(), eps
            if d % 2 == 0:
                # A LayerNorm sends 0 to its bias, and the alternating signs (mean 0, mean square 1) to
                # signs * gain / sqrt(1 + eps) + bias.
                signs = torch.ones(1, d, dtype=torch.float64)
                signs[0, 1::2] = -1
                bias = run(torch.zeros(1, d, dtype=torch.float64))[0]
                gain = (run(signs)[0] - bias) * signs[0] * math.sqrt(1 + eps)
                found = None
                if torch.allclose(output, layer(gain, bias), rtol=1e-10, atol=1e-12):
                    found = gain, bias
                elif own(gain) is not None and own(bias) is not None and torch.allclose(
                        output, layer(own(gain), own(bias)), rtol=_FLOAT32_NORM_AGREEMENT,
                        atol=_FLOAT32_NORM_AGREEMENT * 1e-2):
                    found = own(gain), own(bias)
                if found is not None:
                    return found[0].numpy(), eps, (None if float(found[1].abs().max()) == 0 else found[1].numpy())
    except (RuntimeError, TypeError, ValueError) as error:  # the module's own forward refuses rows of d
        raise Unmeasurable(f"the q/k norm {name} fails on rows of {d} coordinates ({type(error).__name__}: "
                           f"{error})") from None
    raise Unmeasurable(f"the q/k norm {name} is neither an RMSNorm nor a LayerNorm over {d} coordinates")


def _projection_norm(norm, d, heads):
    """A q/k norm over one head's d coordinates (_head_norm), or OLMo 2's: one RMSNorm over all `heads` heads'
    coordinates at once, applied before the heads are split (parameters of heads x d, which a norm over d cannot
    have, or a normalized_shape of heads x d). A LayerNorm over all the heads is refused, and so is a norm with
    neither parameters nor a normalized_shape, which would not say over how many coordinates it normalizes."""
    if norm is None:
        return None
    shapes = [tuple(p.shape) for p in norm.parameters()]
    width = getattr(norm, "normalized_shape", None)
    width = (width,) if isinstance(width, int) else tuple(width) if isinstance(width, (tuple, list, torch.Size)) else ()
    if not shapes and not width:
        raise Unmeasurable(f"the q/k norm {type(norm).__name__} has neither parameters nor a normalized_shape: over "
                           "one head's coordinates or all the heads', it does not say")
    if heads > 1 and ((shapes and all(shape == (heads * d,) for shape in shapes)) or width == (heads * d,)):
        measured = _head_norm(norm, heads * d)
        if len(measured) == 3:
            raise Unmeasurable(f"the q/k norm {type(norm).__name__} is a LayerNorm over all the heads' coordinates: "
                               "not measured")
        return measured
    return _head_norm(norm, d)


def _double_copy(module):
    import copy
    twin = copy.deepcopy(module)
    return twin.to(dtype=torch.float64, device="cpu")


def _rope_settings(module, config):
    """(base, scaling dict) of this layer's rotary positions from the config: rope_theta and rope_scaling, the
    sliding layers' rope_local_base_freq, or rope_parameters (one object, or one per kind of layer)."""
    sliding = bool(getattr(module, "is_sliding", False) or getattr(module, "sliding_window", None))
    theta = getattr(config, "rope_theta", None)
    if theta is None:
        theta = getattr(config, "rotary_emb_base", None)  # GPT-NeoX before rope_theta
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


def _rotated_coordinates(module, config, scaling, d):
    """How many of a head's d coordinates the rotary embedding turns (the first ones; the others pass unrotated):
    the module's rotary_ndims, or partial_rotary_factor (Phi, Persimmon) or rotary_pct (GPT-NeoX) times d, else all
    of them. Sources that disagree are refused rather than one of them believed."""
    found = {}
    ndims = getattr(module, "rotary_ndims", None)
    if isinstance(ndims, int) and not isinstance(ndims, bool):
        found["rotary_ndims"] = ndims
    for name in ("partial_rotary_factor", "rotary_pct"):
        factor = scaling.get(name) if name in scaling else getattr(module, name, getattr(config, name, None))
        if isinstance(factor, (int, float)) and not isinstance(factor, bool):
            found[name] = int(float(factor) * d)
    if len(set(found.values())) > 1:
        raise Unmeasurable("the rotated coordinates per head disagree: "
                           + ", ".join(f"{name} gives {value}" for name, value in found.items()))
    rotated = next(iter(found.values()), d)
    if rotated <= 0 or rotated > d or rotated % 2:
        raise Unmeasurable(f"{rotated} rotated coordinates of a head of {d}: not an even number in 2 .. {d}")
    return rotated


def _check_module_frequencies(module, frequencies, kind, scaling):
    """The frequencies read from the config against the rotary embedding the module holds (4.38-era layers hold
    theirs): the same number (a partial rotary turns fewer pairs than d/2) and the same values, to the float32
    they are stored in (linear scaling may divide them already or divide the positions instead)."""
    for child in module.modules():
        inv = getattr(child, "inv_freq", None)
        if not isinstance(inv, torch.Tensor) or inv.dim() != 1:
            continue
        if inv.shape[0] != len(frequencies):
            raise Unmeasurable(f"the rotary embedding {type(child).__name__} turns {inv.shape[0]} pairs of "
                               f"coordinates, the config {len(frequencies)}")
        inv = inv.detach().cpu().double().numpy()
        candidates = [frequencies]
        if kind == "linear":
            candidates.append(frequencies * float(scaling.get("factor", 1.0)))
        if not any(np.allclose(inv, c, rtol=1e-5, atol=0) for c in candidates):
            raise Unmeasurable(f"the rotary embedding {type(child).__name__} holds frequencies other than the "
                               "config's rotary base gives")


def _rotary_frequencies(module, root, d, config):
    """The rotary frequencies of a module's queries and keys in double precision (one per rotated pair: fewer than
    d/2 under a partial rotary), and the factor the rotary embedding multiplies cos and sin by: from the config for
    default and linear rotary positions (the model computes them from the same config), else the model's own
    inv_freq (llama3, yarn, dynamic, ...)."""
    theta, scaling = _rope_settings(module, config) if config is not None else (None, {})
    kind = scaling.get("rope_type", scaling.get("type", "default")) or "default"
    pairs = _rotated_coordinates(module, config, scaling, d) // 2
    if theta is not None and kind in ("default", "linear"):
        frequencies = np.power(float(theta), -2.0 * np.arange(pairs) / (2 * pairs))
        _check_module_frequencies(module, frequencies, kind, scaling)
        return frequencies / (float(scaling.get("factor", 1.0)) if kind == "linear" else 1.0), 1.0
    for owner in (module, root):
        for _, child in owner.named_modules():
            inv = getattr(child, "inv_freq", None)
            if isinstance(inv, torch.Tensor) and inv.dim() == 1 and inv.shape[0] == pairs:
                # Linear scaling divides the positions by scaling_factor; dynamic scaling changes inv_freq itself.
                divisor = float(getattr(child, "scaling_factor", 1.0) or 1.0) if kind == "linear" else 1.0
                scaled = inv.detach().cpu().double() / divisor
                return scaled.numpy(), float(getattr(child, "attention_scaling", 1.0) or 1.0)
    raise Unmeasurable(f"rotary positions of type '{kind}' and no inv_freq of {pairs} frequencies found")


def _has_rotary(module, config):
    """Rotary position embeddings: the config names their base, or the module holds their frequencies."""
    if config is not None and (getattr(config, "rope_theta", None) is not None
                               or getattr(config, "rotary_emb_base", None) is not None
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


def _is_nanogpt_attention(module):
    """nanoGPT's (and minGPT's) CausalSelfAttention, which no package defines: c_attn, an nn.Linear from C to 3C
    features (q | k | v side by side), n_head heads and c_proj. Its forward is checked against nanoGPT's
    definition at its first measured call (_nanogpt_difference), so a fork that computes something else is
    refused."""
    c_attn = _linear(module, "c_attn")
    heads = getattr(module, "n_head", None)
    return (type(module).__name__ == "CausalSelfAttention" and c_attn is not None
            and _linear(module, "c_proj") is not None and isinstance(heads, int) and not isinstance(heads, bool)
            and heads > 0 and c_attn.out_features == 3 * c_attn.in_features and c_attn.in_features % heads == 0)


def _from_transformers(module):
    """A module of a transformers model (its class or a base class is defined in the package): a module of the
    user's with query and key projections may compute anything, and is measured only through register()."""
    return any(getattr(cls, "__module__", "").startswith("transformers.") for cls in type(module).__mro__)


# timm's attention classes by qualified name: those measured, and those refused with their reason (each call is
# then skipped with one warning per layer, as any call the recorder cannot measure).
_TIMM_MEASURED = {"timm.layers.attention.Attention", "timm.models.vision_transformer.Attention",
                  "timm.models.eva.EvaAttention", "timm.layers.attention.AttentionRope"}
_TIMM_REFUSED = {
    "timm.models.beit.Attention": "BEiT's relative position bias adds to the scores: not the maps measured",
}


def _timm_class(module):
    cls = type(module)
    return f"{cls.__module__}.{cls.__qualname__}"


# TransformerLens's attention blocks by qualified name (HookedTransformer: W_Q, W_K as [heads, d_model, d_head]
# parameters), as timm's: the classes, not a structure, say what they compute.
_TRANSFORMER_LENS = {"transformer_lens.components.Attention", "transformer_lens.components.GroupedQueryAttention",
                     "transformer_lens.components.attention.Attention",
                     "transformer_lens.components.grouped_query_attention.GroupedQueryAttention"}


def recognise(module):
    """Whether this module is an attention layer the recorder measures without an adapter."""
    if (_is_nanogpt_attention(module) or _timm_class(module) in _TIMM_MEASURED or _timm_class(module) in _TIMM_REFUSED
            or _timm_class(module) in _TRANSFORMER_LENS):
        return True
    return _from_transformers(module) and (_projection_pairs(module) is not None or _is_gpt2_attention(module)
                                           or _linear(module, "query_key_value") is not None
                                           or _linear(module, "qkv_proj") is not None)


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
    for name in ("encoder_hidden_states", "key_value_states"):
        if call.get(name) is not None:
            raise Unmeasurable(f"cross-attention ({name}) is not measured: the theory's maps are self-attention")
    if _keys_cached_before(module, call):
        raise Unmeasurable("a call with cached keys (generation) is not measured: its queries are not its keys")
    if _is_nanogpt_attention(module):
        return _nanogpt(module, call)
    if _timm_class(module) in _TIMM_REFUSED:
        raise Unmeasurable(_TIMM_REFUSED[_timm_class(module)])
    if _timm_class(module) in _TIMM_MEASURED:
        return _timm(module, call)
    if _timm_class(module) in _TRANSFORMER_LENS:
        return _transformer_lens(module, call)
    if _is_gpt2_attention(module):
        return _gpt2(module, call)
    pair = _projection_pairs(module)
    if pair is not None and _linear(module, "q_lin") is pair[0]:
        query, key = pair
        x = _hidden_states(call, "query", "hidden_states")
        if call.get("key") is not None and call["key"] is not call.get("query"):
            raise Unmeasurable("cross-attention (key is not the query) is not measured")
        mask = call.get("mask")
        allowed = None if mask is None else _allowed_from_additive(mask.bool() if mask.dtype != torch.bool else mask,
                                                                   x.shape[1], "mask")
        heads = _attribute(module, "n_heads")
        return _linear_spec(query, key, x, heads, heads, None, False, allowed, None, None, None, None, 0.0)
    if call.get("alibi") is not None:
        raise Unmeasurable("ALiBi position biases (alibi) add to the scores: not the maps measured")
    if _attribute(module, "clip_qkv") is not None:
        raise Unmeasurable("clip_qkv clamps the queries and keys (OLMo): not the maps measured")
    if _attribute(module, "rotary_dim") is not None:
        raise Unmeasurable("rotary positions over rotary_dim coordinates, turned in adjacent pairs (GPT-J's "
                           "layout, without inv_freq), are not measured")
    if getattr(config, "attention_layers", None) is not None and getattr(config, "window_size", None) is not None:
        raise Unmeasurable("GPT-Neo's scores are not divided by sqrt(d) and its local layers mask a window, which "
                           "the layer does not declare: not measured")
    x = _hidden_states(call, "hidden_states", "x", "query")
    n = x.shape[1]
    heads = _attribute(module, "num_heads", "num_attention_heads", "n_heads")
    if heads is None:
        raise Unmeasurable("the number of heads is neither an attribute nor in the config")
    heads = int(heads)
    if pair is not None:
        query, key = pair
        d = query.out_features // heads
        head_dim = _attribute(module, "head_dim", "attention_head_size", default=d)
        if head_dim * heads != query.out_features:
            raise Unmeasurable(f"q projection of {query.out_features} outputs for {heads} heads of {head_dim}")
        kv_heads = key.out_features // head_dim
        w_q, w_k, b_q, b_k = query.weight.T, key.weight.T, query.bias, key.bias
    elif _linear(module, "qkv_proj") is not None:
        w_q, w_k, b_q, b_k, head_dim, kv_heads = _qkv_proj(module, heads)
    else:
        if not isinstance(getattr(module, "is_causal", None), bool):
            raise Unmeasurable("the layer does not say whether it is causal (is_causal): its mask is not known")
        w_q, w_k, b_q, b_k, head_dim, kv_heads = _fused_projections(module, heads)
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
    query_norm = _projection_norm(getattr(module, "q_norm", getattr(module, "q_layernorm", None)), head_dim, heads)
    key_norm = _projection_norm(getattr(module, "k_norm", getattr(module, "k_layernorm", None)), head_dim, kv_heads)
    return _spec(x, w_q, w_k, b_q, b_k, heads, kv_heads, scale, causal, allowed, _positions(call, n), rotary,
                 query_norm, key_norm, float(softcap))


def _fused_projections(module, heads):
    """W_Q and W_K (maps of rows), their biases, the head size and the number of key heads of a fused
    query_key_value projection, in the layout the module declares: Falcon's new decoder architecture (per key
    group: its query heads, then one key and one value head), Falcon's multi-query (every query head, then one key
    and one value head), else a query, a key and a value head per head in turn (GPT-NeoX, Falcon, Persimmon)."""
    fused = _linear(module, "query_key_value")
    d = int(_attribute(module, "head_dim", "head_size", default=fused.in_features // heads))
    if getattr(module, "new_decoder_architecture", False):
        groups = _attribute(module, "num_kv_heads")
        if not isinstance(groups, int) or groups < 1 or heads % groups:
            raise Unmeasurable(f"num_kv_heads = {groups!r} key/value heads do not divide {heads} heads")
        per_group = heads // groups
        stride = (per_group + 2) * d
        query_starts = [g * stride + j * d for g in range(groups) for j in range(per_group)]
        key_starts = [g * stride + per_group * d for g in range(groups)]
        layout, outputs = "new decoder architecture", groups * stride
    elif getattr(module, "multi_query", False):
        query_starts, key_starts = [h * d for h in range(heads)], [heads * d]
        layout, outputs = "multi-query", (heads + 2) * d
    else:
        query_starts, key_starts = [3 * h * d for h in range(heads)], [3 * h * d + d for h in range(heads)]
        layout, outputs = "per-head query, key, value", 3 * heads * d
    if fused.out_features != outputs:
        raise Unmeasurable(f"query_key_value has {fused.out_features} outputs, the {layout} layout of {heads} heads "
                           f"of {d} has {outputs}")
    query_rows = torch.cat([torch.arange(start, start + d) for start in query_starts]).to(fused.weight.device)
    key_rows = torch.cat([torch.arange(start, start + d) for start in key_starts]).to(fused.weight.device)
    bias = fused.bias
    return (fused.weight[query_rows].T, fused.weight[key_rows].T, None if bias is None else bias[query_rows],
            None if bias is None else bias[key_rows], d, len(key_starts))


def _qkv_proj(module, heads):
    """Phi-3's fused qkv_proj: rows of every query head, then of every key head, then of every value head."""
    fused = _linear(module, "qkv_proj")
    d = int(_attribute(module, "head_dim", default=fused.in_features // heads))
    kv_heads = int(_attribute(module, "num_key_value_heads", default=heads))
    if fused.out_features != (heads + 2 * kv_heads) * d:
        raise Unmeasurable(f"qkv_proj has {fused.out_features} outputs, not ({heads} + 2 x {kv_heads}) heads of {d}")
    bias = fused.bias
    width, key_width = heads * d, kv_heads * d
    return (fused.weight[:width].T, fused.weight[width:width + key_width].T, None if bias is None else bias[:width],
            None if bias is None else bias[width:width + key_width], d, kv_heads)


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


# nanoGPT modules checked against nanoGPT's definition: None where the module computes it, else why not.
_NANOGPT_CHECKED = weakref.WeakKeyDictionary()


def _nanogpt(module, call):
    others = sorted(name for name, value in call.items() if name != "x" and value is not None)
    if others:
        raise Unmeasurable(f"CausalSelfAttention is called with {', '.join(others)} besides x: not nanoGPT's "
                           "attention (measure it with register())")
    x = _hidden_states(call, "x")
    if module not in _NANOGPT_CHECKED:
        _NANOGPT_CHECKED[module] = _nanogpt_difference(module, x)
    if _NANOGPT_CHECKED[module] is not None:
        raise Unmeasurable(_NANOGPT_CHECKED[module])
    embed, weight, bias = module.c_attn.in_features, module.c_attn.weight, module.c_attn.bias
    return _spec(x, weight[:embed].T, weight[embed:2 * embed].T, None if bias is None else bias[:embed],
                 None if bias is None else bias[embed:2 * embed], module.n_head, module.n_head, None, True, None)


def _nanogpt_difference(module, x):
    """Why the module is not nanoGPT's attention, or None: its own forward (a float64 copy in evaluation mode, so
    without dropout, on the call's first sequence) against nanoGPT's definition, y = c_proj(concat over heads of
    causal softmax(q k^T / sqrt(d)) v) with q | k | v = c_attn(x), to 1e-9 relative. A fork that rotates, scales,
    masks or projects otherwise differs by far more than rounding."""
    sequence = x[:1].detach().to(device="cpu", dtype=torch.float64)
    what = "CausalSelfAttention is not nanoGPT's attention"
    try:
        twin = _double_copy(module).eval()
        with torch.no_grad():
            output = type(twin).forward(twin, sequence)  # the class's forward: not a hook nor the recorder's
    except Exception as error:  # noqa: BLE001 - any failure of the user's code on x alone is a refusal, said
        return f"{what}: its forward on x alone fails ({type(error).__name__}: {error}); measure it with register()"
    if isinstance(output, (tuple, list)) and output:
        output = output[0]
    if not isinstance(output, torch.Tensor) or output.shape != sequence.shape:
        return f"{what}: its output is not (batch, N, C) like its input; measure it with register()"
    n, embed = sequence.shape[1], sequence.shape[2]
    heads = int(twin.n_head)
    d = embed // heads
    q, k, v = (part.reshape(n, heads, d).transpose(0, 1) for part in
               torch.nn.functional.linear(sequence[0], twin.c_attn.weight, twin.c_attn.bias).split(embed, dim=-1))
    scores = (q @ k.transpose(-1, -2) / math.sqrt(d)).masked_fill(
        torch.ones(n, n, dtype=torch.bool).triu(1), -math.inf)
    y = (torch.softmax(scores, dim=-1) @ v).transpose(0, 1).reshape(n, embed)
    y = torch.nn.functional.linear(y, twin.c_proj.weight, twin.c_proj.bias)
    difference = float((y - output[0]).abs().max() / y.abs().max().clamp_min(1e-300))
    if not difference <= 1e-9:
        return (f"{what}: its output differs from nanoGPT's causal softmax attention by {difference:.1e} relative "
                "(rotary positions, another scale or mask?); measure it with register()")
    return None


def _rope_angles(module, rope, n, batch):
    """The angles per position (N, d/2), or per head and position (heads, N, d/2) for timm's mixed rotary, and the
    pairs' layout, of the rope that EvaAttention and AttentionRope hand apply_rot_embed_cat: sines | cosines of each
    coordinate of a head, one row per patch after the num_prefix_tokens prefix tokens, which are not turned (angle
    0); pairs (2p, 2p + 1), or (p, p + d/2) under rotate_half. Under patch dropout in training timm hands each image
    the rope of the patches it kept, (batch, 1 or heads, patches, 2 d): then one table per image, on a leading axis,
    and the third value returned is True. Refused where it is not one rotation per pair."""
    d, heads = int(module.head_dim), int(module.num_heads)
    half = bool(getattr(module, "rotate_half", False))
    prefix = int(getattr(module, "num_prefix_tokens", 0) or 0)
    if not isinstance(rope, torch.Tensor) or not 2 <= rope.dim() <= 4 or rope.shape[-1] != 2 * d or d % 2:
        raise Unmeasurable(f"rope of shape {tuple(getattr(rope, 'shape', ()))} is not the sines and cosines of "
                           f"{d} coordinates per patch: not measured")
    # (images, 1 or heads, patches, 2 d): one table for the layer or one per head, and one per image where they differ.
    tables = rope.shape[-3] if rope.dim() >= 3 else 1
    if tables not in (1, heads):
        raise Unmeasurable(f"rope of shape {tuple(rope.shape)} has {tables} tables for {heads} heads: not measured")
    table = rope.detach().to(device="cpu", dtype=torch.float64).reshape(-1, tables, rope.shape[-2], 2 * d)
    if not bool((table == table[:, :1]).all()):
        per_head = True
    else:
        per_head, table = False, table[:, :1]
    per_image = not bool((table == table[:1]).all())
    if per_image and (rope.dim() != 4 or rope.shape[0] != batch):
        raise Unmeasurable(f"rope of shape {tuple(rope.shape)} differs along an axis that is not the batch's: not "
                           "measured")
    sines, cosines = (table if per_image else table[:1]).chunk(2, dim=-1)
    if sines.shape[-2] != n - prefix:
        raise Unmeasurable(f"rope has {sines.shape[-2]} rows for {n} positions after {prefix} prefix tokens")
    pairs = d // 2
    first = torch.arange(pairs) if half else 2 * torch.arange(pairs)
    second = first + pairs if half else first + 1
    if not (torch.equal(sines[..., first], sines[..., second]) and
            torch.equal(cosines[..., first], cosines[..., second])):
        raise Unmeasurable("rope turns the two coordinates of a pair by different angles: not a rotation per pair")
    # Rounded sines and cosines (float32 whatever the model's dtype, bfloat16 in a bfloat16 model) have squares that
    # sum to 1 within about one ulp of their dtype; a map that is not a rotation misses by far more.
    off_circle = float((sines[..., first] ** 2 + cosines[..., first] ** 2 - 1).abs().amax()) if sines.numel() else 0.0
    if off_circle > 4 * max(torch.finfo(rope.dtype).eps, torch.finfo(torch.float32).eps):
        raise Unmeasurable(f"rope's sines and cosines are {off_circle:.1e} off the unit circle: not rotations")
    angles = torch.zeros(*sines.shape[:2], n, pairs, dtype=torch.float64)
    angles[..., prefix:, :] = torch.atan2(sines[..., first], cosines[..., first])
    angles = angles if per_head else angles[:, 0]
    return (angles if per_image else angles[0]).numpy(), "half" if half else "interleaved", per_image


def _timm(module, call):
    """timm's Attention (ViT, DeiT, ...), EvaAttention and AttentionRope: one fused qkv projection (q | k | v, each
    heads x d) or separate q_proj/k_proj, EVA's q_bias/k_bias beside a bias-free qkv, scores q k^T * scale after the
    optional per-head q/k norms and the rope (2-D rotary positions over the image patches, angles per position:
    _rope_angles), under the call's attn_mask and is_causal."""
    x = _hidden_states(call, "x")
    n = x.shape[1]
    heads, d = int(module.num_heads), int(module.head_dim)
    rotary, layout, per_image = (_rope_angles(module, call["rope"], n, x.shape[0]) if call.get("rope") is not None
                                 else (None, "half", False))
    width = heads * d
    qkv = _linear(module, "qkv")
    if qkv is not None:
        if qkv.out_features != 3 * width:
            raise Unmeasurable(f"qkv has {qkv.out_features} outputs, not 3 x {heads} heads x {d}")
        w_q, w_k = qkv.weight[:width].T, qkv.weight[width:2 * width].T
        b_q = b_k = None
        if qkv.bias is not None:
            b_q, b_k = qkv.bias[:width], qkv.bias[width:2 * width]
        if getattr(module, "q_bias", None) is not None:
            if qkv.bias is not None and not getattr(module, "qkv_bias_separate", False):
                raise Unmeasurable("qkv has a bias and q_bias replaces it: an unexpected EVA layout")
            b_q = module.q_bias if b_q is None else b_q + module.q_bias
            b_k = module.k_bias if b_k is None else b_k + module.k_bias
    elif _linear(module, "q_proj") is not None and _linear(module, "k_proj") is not None:
        w_q, w_k, b_q, b_k = module.q_proj.weight.T, module.k_proj.weight.T, module.q_proj.bias, module.k_proj.bias
    else:
        raise Unmeasurable("neither a qkv projection nor q_proj and k_proj")
    norms = []
    for name in ("q_norm", "k_norm"):
        norm = getattr(module, name, None)
        norms.append(None if norm is None or isinstance(norm, torch.nn.Identity) else _head_norm(norm, d))
    allowed = None
    mask = call.get("attn_mask")
    if isinstance(mask, torch.Tensor):
        if mask.dim() == 2 and tuple(mask.shape) == (n, n):
            mask = mask[None, None]  # timm's (N, N) mask, shared by the batch
        allowed = _allowed_from_additive(mask, n, "attn_mask")
        allowed = allowed.expand(x.shape[0], n, n)  # a mask shared by the batch, as every sequence reads it
    spec = _spec(x, w_q, w_k, b_q, b_k, heads, heads, float(module.scale), bool(call.get("is_causal", False)), allowed,
                 rotary=rotary, query_norm=norms[0], key_norm=norms[1])
    spec["rotary_layout"] = layout
    spec["rotary_per_image"] = per_image
    return spec


def _transformer_lens(module, call):
    """TransformerLens's Attention and GroupedQueryAttention: q = x W_Q[h] + b_Q[h] per head (W_Q [heads, d_model,
    d_head]; grouped keys in _W_K [kv_heads, d_model, d_head], query head h reading key head h // (heads / kv_heads)),
    scores q k^T / attn_scale, under the block's mask buffer (causal, or GPT-Neo's local band) where attention_dir is
    causal, the padding of attention_mask and an additive_attention_mask; rotary positions over the first rotary_dim
    coordinates, in GPT-NeoX's halves or GPT-J's adjacent pairs. ALiBi, shortformer positions, per-head inputs
    (use_split_qkv_input, use_attn_in), 4-bit weights and cached keys are refused."""
    cfg = module.cfg
    if call.get("past_kv_cache_entry") is not None:
        raise Unmeasurable("a call with cached keys (generation) is not measured: its queries are not its keys")
    if getattr(cfg, "load_in_4bit", False):
        raise Unmeasurable("4-bit weights (load_in_4bit) are not measured")
    if getattr(cfg, "use_split_qkv_input", False) or getattr(cfg, "use_attn_in", False):
        raise Unmeasurable("per-head query and key inputs (use_split_qkv_input, use_attn_in) are not one x: not "
                           "measured")
    # What later releases (checked against 1.19.0 only) add to the scores: refused rather than left out.
    for name, off in (("attn_scores_soft_cap", -1.0), ("use_NTK_by_parts_rope", False), ("use_qk_norm", False)):
        value = getattr(cfg, name, off)
        if value not in (off, None, 0, 0.0, False):
            raise Unmeasurable(f"{name} = {value} changes the scores: not measured")
    # Hooks (run_with_hooks, activation patching, run_with_cache) may replace the queries, keys, scores or pattern.
    for name in ("hook_q", "hook_k", "hook_rot_q", "hook_rot_k", "hook_attn_scores", "hook_pattern"):
        point = getattr(module, name, None)
        if point is not None and (point._forward_hooks or point._forward_pre_hooks):
            raise Unmeasurable(f"{name} has hooks, which may change the scores or the pattern: measure the model "
                               "without them")
    kind = cfg.positional_embedding_type
    if kind not in ("standard", "rotary"):
        raise Unmeasurable(f"positional_embedding_type '{kind}' changes the scores or the queries' input beyond x: "
                           "not measured")
    x = _hidden_states(call, "query_input")
    key_input = call.get("key_input")
    # The block normalizes query_input and key_input apart: equal tensors, not one object.
    if not (isinstance(key_input, torch.Tensor) and key_input.shape == x.shape and torch.equal(key_input, x)):
        raise Unmeasurable("cross-attention (key_input is not query_input) is not measured")
    if x.dim() != 3:
        raise Unmeasurable(f"query_input of shape {tuple(x.shape)}: not (batch, N, d_model)")
    n = x.shape[1]
    heads, d = int(cfg.n_heads), int(cfg.d_head)
    w_q, b_q = module.W_Q, module.b_Q
    w_k, b_k = (module._W_K, module._b_K) if hasattr(module, "_W_K") else (module.W_K, module.b_K)
    kv_heads = int(w_k.shape[0])
    # [heads, d_model, d_head] -> (d_model, heads d): head h's columns h d .. (h + 1) d, as the engine reads them.
    w_q, w_k = (w.permute(1, 0, 2).reshape(w.shape[1], -1) for w in (w_q, w_k))
    b_q, b_k = b_q.reshape(-1), b_k.reshape(-1)
    allowed = None
    if cfg.attention_dir == "causal":
        allowed = module.mask[:n, :n].bool().expand(x.shape[0], n, n)  # causal, or the local band
    padding = call.get("attention_mask")
    if isinstance(padding, torch.Tensor):
        if kind == "rotary":
            raise Unmeasurable("rotary positions offset by the padding of attention_mask are not measured")
        keys = padding.bool()[:, None, -n:].expand(x.shape[0], n, n)
        allowed = keys if allowed is None else allowed & keys
    additive = call.get("additive_attention_mask")
    if isinstance(additive, torch.Tensor):
        allowed = _combine(allowed, _allowed_from_additive(additive, n, "additive_attention_mask"))
    rotary, layout = None, "half"
    if kind == "rotary":
        rotated = int(cfg.rotary_dim)
        if rotated <= 0 or rotated > d or rotated % 2:
            raise Unmeasurable(f"rotary_dim {rotated} of a head of {d}: not an even number in 2 .. {d}")
        rotary = np.power(float(cfg.rotary_base), -2.0 * np.arange(rotated // 2) / rotated)
        layout = "interleaved" if getattr(cfg, "rotary_adjacent_pairs", False) else "half"
    spec = _spec(x, w_q, w_k, b_q, b_k, heads, kv_heads, 1.0 / float(module.attn_scale), cfg.attention_dir == "causal",
                 allowed, None, rotary)
    spec["rotary_layout"] = layout
    return spec


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
