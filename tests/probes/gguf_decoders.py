"""`attncheck probe` on GGUF files of the decoders built on Llama, against the same weights in safetensors.

  check FAMILY BIN DIR     writes tiny random FAMILY weights (decoder_architectures.py's random_weights, rounded
                           to float32) twice: under DIR/tiny-FAMILY as a Hugging Face checkpoint (config.json,
                           F32 safetensors), which the probes_hf_tiny_* and probes_tiny_* tests check against
                           transformers and PyTorch, and as DIR/tiny-FAMILY.gguf (F32), named and valued as
                           llama.cpp's convert_hf_to_gguf.py writes them: the gguf package's tensor name map,
                           Gemma's RMSNorm gains (q/k norms too) written as 1 + weight, the metadata keys its
                           converter writes for the family. Runs `BIN probe MODEL --tokens T --json --attention-out`
                           on both and requires every number of the JSON rows, every attention entry and every
                           input row to agree within 1e-10 relative (entries below 1e-3 to 1e-13 absolute). Then the
                           same with the matrices whose rows are whole blocks quantized to Q8_0 (tiny-FAMILY-q8_0.gguf)
                           against a safetensors twin holding the gguf package's dequantization of them.

Families (GGUF architecture in parentheses): qwen2 (qwen2: biased q/k/v), qwen3 (qwen3: q/k norms), gemma (gemma),
gemma2 (gemma2: logit cap, window on the even layers, sandwich norms), gemma3 (gemma3: q/k norms, window on all
layers but every sixth, two rotary bases, linear scaling), phi3 (phi3: fused qkv_proj and gate_up_proj, the window
on every layer), gptneox (gptneox: not Llama's block; LayerNorms, a fused query_key_value laid out head by head,
which llama.cpp's converter regroups into every query, every key, every value; half of each head rotated, parallel
residual). Their configurations stay within what GGUF metadata says:
llama.cpp takes Gemma's and Gemma 2's rotary base as 10000, the scale as head_dim^-1/2 (query_pre_attn_scalar =
head_dim), Gemma 3's window pattern as 6 and its sliding layers' base as 10000.

Run with the interpreter of `scripts/pyenv CACHE` (gguf). Exit 0 pass, 1 mismatch, 77 skipped (gguf, PyTorch or
NumPy absent).
"""
import json
import os
import subprocess
import sys
import tempfile

SKIP = 77
try:
    import gguf
    import numpy as np
    from gguf.quants import dequantize, quantize
    import torch  # noqa: F401 (decoder_architectures draws the weights with it)
except ImportError as error:
    print(f"SKIPPED: {error} (run with the interpreter of scripts/pyenv CACHE)")
    sys.exit(SKIP)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from decoder_architectures import TOKENS, family_config, random_weights  # noqa: E402
from torch_reference import read_safetensors, write_safetensors  # noqa: E402

ARCHITECTURES = {"qwen2": gguf.MODEL_ARCH.QWEN2, "qwen3": gguf.MODEL_ARCH.QWEN3, "gemma": gguf.MODEL_ARCH.GEMMA,
                 "gemma2": gguf.MODEL_ARCH.GEMMA2, "gemma3": gguf.MODEL_ARCH.GEMMA3, "phi3": gguf.MODEL_ARCH.PHI3,
                 "gptneox": gguf.MODEL_ARCH.GPTNEOX}


def config_for(family):
    """config.json of the family's tiny model (with head_dim for drawing the weights; Qwen2 saves it without)."""
    if family == "qwen3":
        return family_config("qwen3")
    if family == "gptneox":
        return dict(model_type="gpt_neox", architectures=["GPTNeoXForCausalLM"], vocab_size=50, hidden_size=32,
                    intermediate_size=48, num_hidden_layers=3, num_attention_heads=4, max_position_embeddings=64,
                    rotary_pct=0.5, rotary_emb_base=10000, layer_norm_eps=1e-5, hidden_act="gelu",
                    use_parallel_residual=True)
    if family == "phi3":
        return dict(family_config("qwen3"), model_type="phi3", architectures=["Phi3ForCausalLM"], head_dim=8,
                    sliding_window=5, use_sliding_window=None)
    if family == "qwen2":
        return dict(family_config("qwen3"), model_type="qwen2", architectures=["Qwen2ForCausalLM"], head_dim=8,
                    attention_bias=True)
    if family == "gemma":
        return dict(family_config("gemma2"), model_type="gemma", architectures=["GemmaForCausalLM"],
                    rope_theta=10000.0, attn_logit_softcapping=None, final_logit_softcapping=None,
                    sliding_window=None, query_pre_attn_scalar=None)
    if family == "gemma2":
        return dict(family_config("gemma2"), rope_theta=10000.0, query_pre_attn_scalar=12)
    return dict(family_config("gemma3_text"), num_hidden_layers=6, sliding_window_pattern=6,
                rope_local_base_freq=10000.0, query_pre_attn_scalar=12)


def gptneox_weights(config):
    """GPT-NeoX's tensors under Hugging Face's names, float32, large enough that attention is far from uniform."""
    rng = np.random.default_rng(20261129)
    D, I, V = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    randn = lambda *shape, scale=0.35: (scale * rng.standard_normal(shape)).astype(np.float32)
    w = {"gpt_neox.embed_in.weight": randn(V, D, scale=1.0), "gpt_neox.final_layer_norm.weight": 1 + randn(D),
         "gpt_neox.final_layer_norm.bias": randn(D)}
    for l in range(config["num_hidden_layers"]):
        p = f"gpt_neox.layers.{l}."
        for norm in ("input_layernorm", "post_attention_layernorm"):
            w[p + norm + ".weight"], w[p + norm + ".bias"] = 1 + randn(D, scale=0.2), randn(D, scale=0.2)
        w[p + "attention.query_key_value.weight"], w[p + "attention.query_key_value.bias"] = randn(3 * D, D), randn(3 * D)
        w[p + "attention.dense.weight"], w[p + "attention.dense.bias"] = randn(D, D), randn(D)
        w[p + "mlp.dense_h_to_4h.weight"], w[p + "mlp.dense_h_to_4h.bias"] = randn(I, D), randn(I)
        w[p + "mlp.dense_4h_to_h.weight"], w[p + "mlp.dense_4h_to_h.bias"] = randn(D, I), randn(D)
    return w


def gptneox_regrouped(name, value, heads, inverse=False):
    """What llama.cpp's converter writes for a GPT-NeoX query_key_value tensor: the rows of every head's query, then
    of every key, then of every value (its modify_tensors), instead of head by head; `inverse`: back again."""
    if ".attention.query_key_value." not in name:
        return value
    rest = value.shape[1:]
    if inverse:
        return value.reshape((3, heads, -1) + rest).swapaxes(0, 1).reshape(value.shape)
    return value.reshape((heads, 3, -1) + rest).swapaxes(0, 1).reshape(value.shape)


def float32_weights(config, family):
    """random_weights as float32; Gemma's gains w chosen so that 1 + w is a float32 too (llama.cpp's converter
    stores 1 + w, which float32 would otherwise round)."""
    if family == "gptneox":
        return gptneox_weights(config)
    weights = {}
    for name, tensor in random_weights(config, "gemma3_text" if family == "gemma3" else family).items():
        value = tensor.numpy().astype(np.float32)
        if family.startswith("gemma") and name.endswith("norm.weight"):
            for _ in range(3):
                value = (value.astype(np.float64) + 1).astype(np.float32).astype(np.float64) - 1
                value = value.astype(np.float32)
            if not np.all((value.astype(np.float64) + 1).astype(np.float32) == value.astype(np.float64) + 1):
                raise SystemExit(f"{name}: 1 + weight is not a float32")
        weights[name] = value
    return fused_for_phi3(weights, config) if family == "phi3" else weights


def fused_for_phi3(weights, config):
    """Phi-3's checkpoint of the same weights: q, k, v rows stacked into qkv_proj, gate and up into gate_up_proj."""
    fused = dict(weights)
    for l in range(config["num_hidden_layers"]):
        p = f"model.layers.{l}."
        fused[p + "self_attn.qkv_proj.weight"] = np.concatenate(
            [fused.pop(p + f"self_attn.{x}_proj.weight") for x in "qkv"])
        fused[p + "mlp.gate_up_proj.weight"] = np.concatenate(
            [fused.pop(p + "mlp.gate_proj.weight"), fused.pop(p + "mlp.up_proj.weight")])
    return fused


def write_gguf(path, family, config, weights, q8_0=False):
    """The GGUF file llama.cpp's converter writes for the checkpoint: F32 tensors, or with `q8_0` the matrices whose
    rows are whole Q8_0 blocks (32) in Q8_0, as its converter keeps the others unquantized. Returns the weights as
    the file holds them (dequantized by the gguf package), under their Hugging Face names."""
    arch = ARCHITECTURES[family]
    c = config
    writer = gguf.GGUFWriter(path + ".tmp", gguf.MODEL_ARCH_NAMES[arch])
    if family == "gptneox":
        return write_gptneox_gguf(writer, path, c, weights, q8_0)
    writer.add_context_length(c["max_position_embeddings"])
    writer.add_embedding_length(c["hidden_size"])
    writer.add_block_count(c["num_hidden_layers"])
    writer.add_feed_forward_length(c["intermediate_size"])
    writer.add_head_count(c["num_attention_heads"])
    writer.add_head_count_kv(c["num_key_value_heads"])
    writer.add_layer_norm_rms_eps(c["rms_norm_eps"])
    # Gemma's and Gemma 2's converters write no rotary base (llama.cpp's default, 10000, applies).
    if family in ("qwen2", "qwen3", "gemma3", "phi3"):
        writer.add_rope_freq_base(c["rope_theta"])
    if family == "phi3":
        writer.add_rope_dimension_count(c["hidden_size"] // c["num_attention_heads"])
        writer.add_sliding_window(c["sliding_window"])
    if "head_dim" in c and family != "qwen2":
        writer.add_key_length(c["head_dim"])
        writer.add_value_length(c["head_dim"])
    if family == "gemma2":
        writer.add_attn_logit_softcapping(c["attn_logit_softcapping"])
        writer.add_final_logit_softcapping(c["final_logit_softcapping"])
    if family in ("gemma2", "gemma3"):
        writer.add_sliding_window(c["sliding_window"])
    if family == "gemma3" and c.get("rope_scaling"):
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(c["rope_scaling"]["factor"])
    names = gguf.get_tensor_name_map(arch, c["num_hidden_layers"])
    held = dict(weights)
    for name, value in weights.items():
        if name == "lm_head.weight":
            continue  # the output head: not what the probe reads
        hf = name if name.startswith("model.") else "model." + name
        mapped = names.get_name(hf, try_suffixes=(".weight", ".bias"))
        if mapped is None:
            raise SystemExit(f"{name}: no GGUF name for {gguf.MODEL_ARCH_NAMES[arch]}")
        if family.startswith("gemma") and name.endswith("norm.weight"):
            value = (value.astype(np.float64) + 1).astype(np.float32)
        stored = add_weight(writer, mapped, value, q8_0)
        if stored is not value:  # quantized (Gemma's gains stay as the safetensors twin holds them)
            held[name] = stored
    finish(writer, path)
    return held


def write_gptneox_gguf(writer, path, c, weights, q8_0):
    """llama.cpp's GPTNeoXModel: its metadata (no rotary base: llama.cpp's 10000), the tensors under the gguf
    package's names, query_key_value regrouped. Returns the weights as the file holds them, under Hugging Face's
    names and layout."""
    heads = c["num_attention_heads"]
    writer.add_context_length(c["max_position_embeddings"])
    writer.add_embedding_length(c["hidden_size"])
    writer.add_block_count(c["num_hidden_layers"])
    writer.add_feed_forward_length(c["intermediate_size"])
    writer.add_rope_dimension_count(int(c["rotary_pct"] * (c["hidden_size"] // heads)))
    writer.add_head_count(heads)
    writer.add_parallel_residual(c["use_parallel_residual"])
    writer.add_layer_norm_eps(c["layer_norm_eps"])
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.GPTNEOX, c["num_hidden_layers"])
    held = dict(weights)
    for name, value in weights.items():
        mapped = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if mapped is None:
            raise SystemExit(f"{name}: no GGUF name for gptneox")
        regrouped = gptneox_regrouped(name, value, heads)
        stored = add_weight(writer, mapped, regrouped, q8_0)
        if stored is not regrouped:  # quantized: the twin holds the dequantized rows, head by head again
            held[name] = gptneox_regrouped(name, stored, heads, inverse=True)
    finish(writer, path)
    return held


def add_weight(writer, name, value, q8_0):
    """Adds tensor `name`: F32, or with `q8_0` in Q8_0 when its rows are whole blocks (32). Returns the values the
    file holds (for Q8_0 the gguf package's dequantization; else `value` itself)."""
    if q8_0 and value.ndim == 2 and value.shape[1] % 32 == 0:
        blocks = quantize(value, gguf.GGMLQuantizationType.Q8_0)
        writer.add_tensor(name, blocks, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        return dequantize(blocks, gguf.GGMLQuantizationType.Q8_0).reshape(value.shape)
    writer.add_tensor(name, value)
    return value


def finish(writer, path):
    """Writes the file begun as path + ".tmp" and moves it to `path`."""
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(path + ".tmp", path)


def probe(binary, model, tokens, tmp, tag, inputs=None):
    """`inputs`: the probe's input arguments instead of --tokens TOKENS."""
    dump = os.path.join(tmp, f"{tag}.safetensors")
    given = inputs if inputs is not None else ["--tokens", tokens]
    run = subprocess.run([binary, "probe", model, *given, "--json", "--attention-out", dump],
                         capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"FAIL: attncheck probe {model} exited {run.returncode}: {run.stderr}")
    return json.loads(run.stdout), read_safetensors(dump)


def relative(a, b):
    return abs(a - b) / max(abs(a), abs(b), 1e-300) if a != b else 0.0


def compare_rows(a, b, where=""):
    """(numbers compared, worst relative difference, mismatches in shape or text)"""
    if isinstance(a, dict) and isinstance(b, dict):
        if sorted(a) != sorted(b):
            return 0, 0.0, [f"{where}: keys {sorted(a)} vs {sorted(b)}"]
        totals = [compare_rows(a[k], b[k], f"{where}.{k}") for k in a]
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return 0, 0.0, [f"{where}: {len(a)} vs {len(b)} entries"]
        totals = [compare_rows(x, y, f"{where}[{i}]") for i, (x, y) in enumerate(zip(a, b))]
    elif isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return 1, relative(float(a), float(b)), []
    else:
        return 0, 0.0, [] if a == b else [f"{where}: {a!r} vs {b!r}"]
    return (sum(t[0] for t in totals), max([t[1] for t in totals], default=0.0),
            [m for t in totals for m in t[2]])


def check(family, binary, folder):
    config = config_for(family)
    weights = float32_weights(config, family)
    ids = np.random.default_rng(7).integers(0, config["vocab_size"], size=TOKENS)
    failures = 0
    for kind in ("f32", "q8_0"):
        name = f"tiny-{family}" + ("" if kind == "f32" else "-q8_0")
        gguf_path = os.path.join(folder, f"{name}.gguf")
        held = write_gguf(gguf_path, family, config, weights, q8_0=kind == "q8_0")
        if kind == "q8_0" and all(held[k] is weights[k] for k in weights):
            print("FAIL: no matrix was quantized")
            failures += 1
        # The safetensors twin holds what the GGUF file holds: for Q8_0, the gguf package's dequantized values.
        out = os.path.join(folder, name)
        os.makedirs(out, exist_ok=True)
        saved = {k: v for k, v in config.items() if not (family == "qwen2" and k == "head_dim")}
        with open(os.path.join(out, "config.json"), "w") as f:
            json.dump(saved, f, indent=1)
        write_safetensors(os.path.join(out, "model.safetensors"), {k: (v, "F32") for k, v in held.items()})
        tokens = os.path.join(out, "tokens.txt")
        with open(tokens, "w") as f:
            f.write(" ".join(str(int(t)) for t in ids) + "\n")
        label = f"{family} ({gguf.MODEL_ARCH_NAMES[ARCHITECTURES[family]]} GGUF {kind} vs safetensors of its values)"
        failures += compare_pair(label, binary, out, gguf_path, tokens)
    return 1 if failures else 0


def compare_pair(label, binary, out, gguf_path, tokens, inputs=None):
    """Probes the safetensors folder `out` and the GGUF file on the same tokens (or `inputs`, the probe's input
    arguments): the JSON rows, every attention entry and every input row must agree within 1e-10 relative. Returns
    the number of failures."""
    with tempfile.TemporaryDirectory() as tmp:
        hf_rows, hf_dump = probe(binary, out, tokens, tmp, "safetensors", inputs)
        gguf_rows, gguf_dump = probe(binary, gguf_path, tokens, tmp, "gguf", inputs)
    failures = 0
    count, worst, mismatches = compare_rows(hf_rows["heads"], gguf_rows["heads"], "heads")
    for message in mismatches:
        print(f"FAIL: {message}")
    failures += len(mismatches)
    if count == 0:
        print("FAIL: no numbers in the rows")
        failures += 1
    worst_dump = 0.0
    if sorted(hf_dump) != sorted(gguf_dump):
        print(f"FAIL: dumped tensors {sorted(hf_dump)} vs {sorted(gguf_dump)}")
        return 1
    for name in hf_dump:
        a, b = hf_dump[name], gguf_dump[name]
        if a.shape != b.shape:
            print(f"FAIL: {name}: shape {a.shape} vs {b.shape}")
            return 1
        worst_dump = max(worst_dump, float(np.max(np.abs(a - b) / np.maximum(np.abs(a), 1e-3))))
    for what, value in (("JSON rows", worst), ("attention and inputs", worst_dump)):
        if value > 1e-10:
            print(f"FAIL: {what} differ by {value:.3e} relative > 1e-10")
            failures += 1
    print(f"{label}: {len(hf_rows['heads'])} rows, {count} numbers, max relative difference {worst:.3e}; {len(hf_dump)} "
          f"dumped tensors, max relative difference {worst_dump:.3e}")
    return failures


def main(argv):
    if len(argv) == 4 and argv[0] == "check" and argv[1] in ARCHITECTURES:
        os.makedirs(argv[3], exist_ok=True)
        return check(argv[1], argv[2], argv[3])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
