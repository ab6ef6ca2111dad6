"""`attncheck probe` on GGUF files of BERT, RoBERTa and DistilBERT (llama.cpp's architecture "bert") and of CLIP's
vision tower (mmproj files, architecture "clip"), against the same weights in safetensors.

  check FAMILY BIN DIR     writes tiny random FAMILY weights (float32) twice: under DIR/tiny-FAMILY as a Hugging Face
                           checkpoint (config.json, F32 safetensors) and as DIR/tiny-FAMILY.gguf (F32), named and
                           valued as llama.cpp's convert_hf_to_gguf.py writes them: the gguf package's tensor name
                           map for "bert", RoBERTa's position embeddings cut to the rows from pad_token_id + 1 on and
                           its context length shortened to match, DistilBERT's epsilon written as 1e-12 and no token
                           types, attention.causal false, token_type_count. Runs `BIN probe MODEL --tokens T --json
                           --attention-out` on both and requires the rows, attention and inputs to agree within 1e-10
                           relative (gguf_decoders.py's compare_pair). Then the same with the matrices whose rows are
                           whole blocks in Q8_0 (position and token type tables kept F32, as the converter keeps
                           them) against a safetensors twin of the gguf package's dequantization. And the F32
                           file against a twin configured with the exact (erf) GELU: layer 1's inputs must differ.
                           For bert, the F32 file also carries a WordPiece vocabulary as the converter writes it
                           (tokenizer.ggml.model "bert"): --text on it must give the ids, and the rows, that
                           vocab.txt gives beside the safetensors twin.
  check clip-VARIANT BIN DIR
                           CLIP's vision tower as an mmproj file (general.architecture "clip"): VARIANT llava as
                           the legacy LLaVA converter writes it (its own names, MLP projections named ffn_down
                           for fc1 and ffn_up for fc2, the last layer and post_layernorm dropped, the patch kernel
                           in F16), or mapped (the gguf package's names, every layer); probed from the same random
                           pixels against a CLIPVisionModel checkpoint of the same values, within 1e-10 relative.
  refuse BIN DIR           a BERT file without attention.causal, one whose head count does not divide the
                           embedding length, and an mmproj file of another tower (projector type gemma3) must be
                           refused with exit 2 and a message naming the key, the sizes or the type.

Families: bert (token types, epsilon 2^-10 so that the file's value shows), roberta (pad_token_id 1: the tokens stay
off it, whose position llama.cpp does not skip), distilbert. llama.cpp runs the MLP of every "bert" file with
ggml's GELU, the tanh approximation, so the safetensors twins are configured with gelu_new (the tanh form) to be
the same model.

Run with the interpreter of `scripts/pyenv CACHE` (gguf). Exit 0 pass, 1 mismatch, 77 skipped (gguf or NumPy
absent).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

SKIP = 77
try:
    import gguf
    import numpy as np
except ImportError as error:
    print(f"SKIPPED: {error} (run with the interpreter of scripts/pyenv CACHE)")
    sys.exit(SKIP)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_decoders import add_weight, compare_pair, finish, probe  # noqa: E402
from torch_reference import write_safetensors  # noqa: E402

D, H, I, L, V, P, TOKENS = 32, 4, 64, 2, 40, 24, 12
FAMILIES = ("bert", "roberta", "distilbert")
# The tensors llama.cpp's converter keeps in float32 whatever the output type.
KEPT_F32 = ("position_embd.weight", "token_types.weight")


def config_for(family):
    if family == "distilbert":
        return {"model_type": "distilbert", "dim": D, "n_heads": H, "n_layers": L, "hidden_dim": I, "vocab_size": V,
                "max_position_embeddings": P, "activation": "gelu_new"}
    config = {"model_type": family, "hidden_size": D, "num_attention_heads": H, "num_hidden_layers": L,
              "intermediate_size": I, "vocab_size": V, "max_position_embeddings": P, "hidden_act": "gelu_new"}
    # Epsilons that float32, in which GGUF stores them, holds exactly.
    if family == "roberta":
        return dict(config, type_vocab_size=1, pad_token_id=1, layer_norm_eps=2.0 ** -17)
    return dict(config, type_vocab_size=2, layer_norm_eps=2.0 ** -10)


def random_weights(family, seed):
    """Hugging Face names (without the model's prefix, as BertModel saves them), float32 values."""
    rng = np.random.default_rng(seed)

    def normal(*shape, scale=0.3):
        return rng.normal(0.0, scale, size=shape).astype(np.float32)

    def gain():
        return (1 + normal(D, scale=0.1)).astype(np.float32)

    t = {"embeddings.word_embeddings.weight": normal(V, D, scale=0.5),
         "embeddings.position_embeddings.weight": normal(P, D, scale=0.5),
         "embeddings.LayerNorm.weight": gain(), "embeddings.LayerNorm.bias": normal(D, scale=0.1)}
    if family != "distilbert":
        t["embeddings.token_type_embeddings.weight"] = normal(config_for(family)["type_vocab_size"], D, scale=0.5)
    if family == "distilbert":
        parts = {"attention.q_lin": (D, D), "attention.k_lin": (D, D), "attention.v_lin": (D, D),
                 "attention.out_lin": (D, D), "ffn.lin1": (I, D), "ffn.lin2": (D, I)}
        norms, layers = ("sa_layer_norm", "output_layer_norm"), "transformer.layer."
    else:
        parts = {"attention.self.query": (D, D), "attention.self.key": (D, D), "attention.self.value": (D, D),
                 "attention.output.dense": (D, D), "intermediate.dense": (I, D), "output.dense": (D, I)}
        norms, layers = ("attention.output.LayerNorm", "output.LayerNorm"), "encoder.layer."
    for layer in range(L):
        p = f"{layers}{layer}."
        for name, shape in parts.items():
            t[p + name + ".weight"] = normal(*shape)
            t[p + name + ".bias"] = normal(shape[0], scale=0.1)
        for name in norms:
            t[p + name + ".weight"] = gain()
            t[p + name + ".bias"] = normal(D, scale=0.1)
    return t


# A WordPiece vocabulary of V entries: the specials, whole words, continuations.
WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", "un", "##able", "##s", "dog",
         "run", "##ning", ".", ",", "!", "a"] + [f"w{k}" for k in range(20, V)]
TEXT = "The cat sat on the mat, unable! The dogs running. A cat, a mat."


def phantom(token):
    """llama.cpp's spelling of a WordPiece token (convert_hf_to_gguf.py's BertModel.set_vocab): control tokens as
    they are, a continuation without its ##, a word's first piece after U+2581."""
    if token.startswith("[") and token.endswith("]"):
        return token
    return token[2:] if token.startswith("##") else "\u2581" + token


def write_gguf(path, family, config, weights, q8_0=False, causal=False, vocabulary=None):
    """The GGUF file llama.cpp's converter writes for the checkpoint (architecture "bert"). Returns the weights as the
    file holds them, under their Hugging Face names (RoBERTa's position table whole: the probe of the safetensors
    twin reads the rows past the padding). `causal` None leaves attention.causal out. `vocabulary`: WordPiece tokens
    written as the converter writes them (tokenizer.ggml.model "bert", control tokens typed 3)."""
    arch = gguf.MODEL_ARCH.BERT
    writer = gguf.GGUFWriter(path + ".tmp", gguf.MODEL_ARCH_NAMES[arch])
    distil = family == "distilbert"
    # RobertaModel's converter: positions start at pad_token_id + 1, so it cuts the table and the context length.
    offset = config["pad_token_id"] + 1 if family == "roberta" else 0
    writer.add_context_length(config["max_position_embeddings"] - offset)
    writer.add_embedding_length(config["dim" if distil else "hidden_size"])
    writer.add_block_count(config["n_layers" if distil else "num_hidden_layers"])
    writer.add_feed_forward_length(config["hidden_dim" if distil else "intermediate_size"])
    writer.add_head_count(config["n_heads" if distil else "num_attention_heads"])
    writer.add_layer_norm_eps(1e-12 if distil else config["layer_norm_eps"])
    if causal is not None:
        writer.add_causal_attention(causal)
    writer.add_token_type_count(config.get("type_vocab_size", 1))
    if vocabulary is not None:
        writer.add_tokenizer_model("bert")
        writer.add_token_list([phantom(t) for t in vocabulary])
        writer.add_token_types([gguf.TokenType.CONTROL if t.startswith("[") and t.endswith("]")
                                else gguf.TokenType.NORMAL for t in vocabulary])
    names = gguf.get_tensor_name_map(arch, L)
    held = dict(weights)
    for name, value in weights.items():
        mapped = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if mapped is None:
            raise SystemExit(f"{name}: no GGUF name for bert")
        if name == "embeddings.position_embeddings.weight" and offset:
            value = value[offset:]
        stored = add_weight(writer, mapped, value, q8_0 and mapped not in KEPT_F32)
        if stored is not value:
            held[name] = stored
    finish(writer, path)
    return held


# CLIP's vision tower: 4 x 4 patches of 6 pixels, a CLS token.
CLIP_D, CLIP_H, CLIP_I, CLIP_L, IMAGE, PATCH = 32, 4, 64, 3, 24, 6
# Where the legacy LLaVA converter (llama.cpp's tools/mtmd/legacy-models/convert_image_encoder_to_gguf.py) puts
# each tensor of CLIPVisionModel: mlp.fc1, the MLP's first projection, becomes ffn_down and fc2 ffn_up.
LEGACY_NAMES = {"embeddings.class_embedding": "v.class_embd", "embeddings.patch_embedding.weight": "v.patch_embd.weight",
                "embeddings.position_embedding.weight": "v.position_embd.weight", "pre_layrnorm": "v.pre_ln",
                "post_layernorm": "v.post_ln"}
LEGACY_LAYER_NAMES = {"layer_norm1": "ln1", "layer_norm2": "ln2", "self_attn.q_proj": "attn_q",
                      "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.out_proj": "attn_out",
                      "mlp.fc1": "ffn_down", "mlp.fc2": "ffn_up"}


def clip_config():
    return {"model_type": "clip_vision_model", "hidden_size": CLIP_D, "num_attention_heads": CLIP_H,
            "num_hidden_layers": CLIP_L, "intermediate_size": CLIP_I, "image_size": IMAGE, "patch_size": PATCH,
            "num_channels": 3, "hidden_act": "quick_gelu", "layer_norm_eps": 2.0 ** -17}


def clip_weights(seed):
    """CLIPVisionModel's tensors ("vision_model." names), float32; the patch kernel float16 values, as the
    converter stores 4-D tensors in F16 whatever the output type."""
    rng = np.random.default_rng(seed)
    D, I = CLIP_D, CLIP_I

    def normal(*shape, scale=0.3):
        return rng.normal(0.0, scale, size=shape).astype(np.float32)

    grid = IMAGE // PATCH
    v = "vision_model."
    t = {v + "embeddings.class_embedding": normal(D, scale=0.5),
         v + "embeddings.patch_embedding.weight": normal(D, 3, PATCH, PATCH, scale=0.1).astype(np.float16),
         v + "embeddings.position_embedding.weight": normal(1 + grid * grid, D, scale=0.5),
         v + "pre_layrnorm.weight": 1 + normal(D, scale=0.1), v + "pre_layrnorm.bias": normal(D, scale=0.1),
         v + "post_layernorm.weight": 1 + normal(D, scale=0.1), v + "post_layernorm.bias": normal(D, scale=0.1)}
    for layer in range(CLIP_L):
        p = f"{v}encoder.layers.{layer}."
        for name, shape in [("self_attn.q_proj", (D, D)), ("self_attn.k_proj", (D, D)), ("self_attn.v_proj", (D, D)),
                            ("self_attn.out_proj", (D, D)), ("mlp.fc1", (I, D)), ("mlp.fc2", (D, I))]:
            t[p + name + ".weight"] = normal(*shape)
            t[p + name + ".bias"] = normal(shape[0], scale=0.1)
        for name in ("layer_norm1", "layer_norm2"):
            t[p + name + ".weight"] = 1 + normal(D, scale=0.1)
            t[p + name + ".bias"] = normal(D, scale=0.1)
    return t


def legacy_name(name):
    name = name.removeprefix("vision_model.")
    stem, _, suffix = name.rpartition(".")
    if name in LEGACY_NAMES:
        return LEGACY_NAMES[name]
    if stem in LEGACY_NAMES:
        return f"{LEGACY_NAMES[stem]}.{suffix}"
    _, _, layer, part = stem.split(".", 3)  # encoder.layers.N.part
    return f"v.blk.{layer}.{LEGACY_LAYER_NAMES[part]}.{suffix}"


def write_clip_gguf(path, config, weights, variant, projector="mlp"):
    """An mmproj file of CLIP's vision tower. "llava": as the legacy LLaVA converter writes one (its names, fc1 as
    ffn_down; the last layer and post_layernorm dropped, block_count one less; projector_type `projector` and the
    projector's own mm.* tensors, which the probe does not read). "mapped": the gguf package's names for the
    multimodal projector files (fc1 as ffn_up), every layer, no projector type."""
    writer = gguf.GGUFWriter(path + ".tmp", "clip")
    llava = variant == "llava"
    writer.add_bool("clip.has_text_encoder", False)
    writer.add_bool("clip.has_vision_encoder", True)
    writer.add_bool("clip.has_llava_projector", llava)
    if llava:
        writer.add_string("clip.projector_type", projector)
    writer.add_uint32("clip.vision.image_size", config["image_size"])
    writer.add_uint32("clip.vision.patch_size", config["patch_size"])
    writer.add_uint32("clip.vision.embedding_length", config["hidden_size"])
    writer.add_uint32("clip.vision.feed_forward_length", config["intermediate_size"])
    writer.add_uint32("clip.vision.projection_dim", 16)
    writer.add_uint32("clip.vision.attention.head_count", config["num_attention_heads"])
    writer.add_float32("clip.vision.attention.layer_norm_epsilon", config["layer_norm_eps"])
    writer.add_uint32("clip.vision.block_count", config["num_hidden_layers"] - (1 if llava else 0))
    writer.add_array("clip.vision.image_mean", [0.48145466, 0.4578275, 0.40821073])
    writer.add_array("clip.vision.image_std", [0.26862954, 0.26130258, 0.27577711])
    writer.add_bool("clip.use_gelu", config["hidden_act"] == "gelu")
    if llava:
        rng = np.random.default_rng(5)
        writer.add_tensor("mm.0.weight", rng.normal(size=(16, CLIP_D)).astype(np.float16))
        writer.add_tensor("mm.0.bias", rng.normal(size=16).astype(np.float32))
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.MMPROJ, config["num_hidden_layers"])
    last = f"vision_model.encoder.layers.{config['num_hidden_layers'] - 1}."
    for name, value in weights.items():
        if llava and (name.startswith(last) or "post_layernorm" in name):
            continue
        if llava:
            mapped = legacy_name(name)
        else:
            mapped = names.get_name("vision_tower." + name, try_suffixes=(".weight", ".bias"))
            if mapped is None:
                raise SystemExit(f"{name}: no GGUF name for mmproj")
        writer.add_tensor(mapped, value)
    finish(writer, path)


def check_clip(variant, binary, folder):
    config, weights = clip_config(), clip_weights(7)
    name = f"tiny-clip-{variant}"
    gguf_path = os.path.join(folder, f"{name}.gguf")
    write_clip_gguf(gguf_path, config, weights, variant)
    out = os.path.join(folder, name)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    write_safetensors(os.path.join(out, "model.safetensors"),
                      {k: (v.astype(np.float32), "F32") for k, v in weights.items()})
    pixels = os.path.join(out, "pixels.npy")
    np.save(pixels, np.random.default_rng(13).normal(size=(3, IMAGE, IMAGE)))
    inputs = ["--pixels", pixels]
    if variant == "llava":  # the layers the file holds
        inputs += ["--layers", ",".join(str(l) for l in range(CLIP_L - 1))]
    return 1 if compare_pair(f"CLIP vision ({variant} mmproj GGUF vs safetensors)", binary, out, gguf_path, None,
                             inputs) else 0


def token_ids(family):
    # RoBERTa's pad token (1) keeps position padding_idx in transformers, llama.cpp counts it as any other.
    low = 2 if family == "roberta" else 0
    return np.random.default_rng(11).integers(low, V, size=TOKENS)


def check(family, binary, folder):
    config = config_for(family)
    weights = random_weights(family, FAMILIES.index(family) + 1)
    failures = 0
    for kind in ("f32", "q8_0"):
        name = f"tiny-{family}" + ("" if kind == "f32" else "-q8_0")
        gguf_path = os.path.join(folder, f"{name}.gguf")
        held = write_gguf(gguf_path, family, config, weights, q8_0=kind == "q8_0",
                          vocabulary=WORDS if family == "bert" else None)
        if kind == "q8_0" and all(held[k] is weights[k] for k in weights):
            print("FAIL: no matrix was quantized")
            failures += 1
        out = os.path.join(folder, name)
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "config.json"), "w") as f:
            json.dump(config, f, indent=1)
        write_safetensors(os.path.join(out, "model.safetensors"), {k: (v, "F32") for k, v in held.items()})
        tokens = os.path.join(out, "tokens.txt")
        with open(tokens, "w") as f:
            f.write(" ".join(str(int(t)) for t in token_ids(family)) + "\n")
        failures += compare_pair(f"{family} (bert GGUF {kind} vs safetensors of its values)", binary, out, gguf_path,
                                 tokens)
        if kind == "f32":
            failures += check_tanh_gelu(family, binary, out, gguf_path, tokens)
        if family == "bert" and kind == "f32":
            failures += check_text(binary, out, gguf_path)
    return 1 if failures else 0


def check_text(binary, out, gguf_path):
    """--text on the GGUF file's own vocabulary gives the ids vocab.txt gives beside the safetensors twin (lower-cased,
    as llama.cpp's tokenizer and an uncased BERT's do), and with them the same rows."""
    with open(os.path.join(out, "vocab.txt"), "w") as f:
        f.write("\n".join(WORDS) + "\n")
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"do_lower_case": True}, f)
    with tempfile.TemporaryDirectory() as tmp:
        _, from_vocab = probe(binary, out, None, tmp, "vocab", ["--text", TEXT])
        _, from_gguf = probe(binary, gguf_path, None, tmp, "gguf", ["--text", TEXT])
    ids_vocab, ids_gguf = from_vocab["input_ids"].tolist(), from_gguf["input_ids"].tolist()
    print(f"bert --text: ids from vocab.txt {ids_vocab}, from the GGUF vocabulary {ids_gguf}")
    unknown = WORDS.index("[UNK]")
    if ids_vocab != ids_gguf or unknown in ids_vocab or WORDS.index("##able") not in ids_vocab:
        print("FAIL: the GGUF file's WordPiece vocabulary tokenizes otherwise (or the text was not split into pieces)")
        return 1
    return compare_pair("bert --text (GGUF vocabulary vs vocab.txt)", binary, out, gguf_path, None, ["--text", TEXT])


def check_tanh_gelu(family, binary, out, gguf_path, tokens):
    """The same weights with transformers' exact (erf) GELU must give other inputs to layer 1: the GGUF file runs
    ggml's tanh form, as llama.cpp does."""
    erf = out + "-erf"
    os.makedirs(erf, exist_ok=True)
    config = config_for(family)
    config["activation" if family == "distilbert" else "hidden_act"] = "gelu"
    with open(os.path.join(erf, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    shutil.copyfile(os.path.join(out, "model.safetensors"), os.path.join(erf, "model.safetensors"))
    with tempfile.TemporaryDirectory() as tmp:
        _, exact = probe(binary, erf, tokens, tmp, "erf")
        _, tanh = probe(binary, gguf_path, tokens, tmp, "gguf")
    a, b = exact["inputs.1"], tanh["inputs.1"]
    difference = float(np.max(np.abs(a - b) / np.maximum(np.abs(a), 1e-3)))
    print(f"{family}: layer 1's inputs under erf GELU (transformers) vs the GGUF file's tanh GELU (llama.cpp): "
          f"max relative difference {difference:.3e}")
    if difference < 1e-8:
        print("FAIL: the GGUF file's MLP is not ggml's tanh GELU")
        return 1
    return 0


def refuse(binary, folder):
    """Malformed files: each must exit 2 with a message containing the expected words."""
    config, weights = config_for("bert"), random_weights("bert", 1)
    cases = []
    path = os.path.join(folder, "bert-no-causal.gguf")
    write_gguf(path, "bert", config, weights, causal=None)
    cases.append((path, "bert.attention.causal"))
    path = os.path.join(folder, "bert-bad-heads.gguf")
    write_gguf(path, "bert", dict(config, num_attention_heads=5), weights)
    cases.append((path, "not a multiple of the 5 heads"))
    path = os.path.join(folder, "clip-siglip.gguf")
    write_clip_gguf(path, clip_config(), clip_weights(7), "llava", projector="gemma3")
    cases.append((path, "clip.projector_type 'gemma3' is not supported"))
    tokens = os.path.join(folder, "refused-tokens.txt")
    with open(tokens, "w") as f:
        f.write("2 3 4\n")
    failures = 0
    for path, words in cases:
        run = subprocess.run([binary, "probe", path, "--tokens", tokens], capture_output=True, text=True)
        if run.returncode != 2 or words not in run.stderr:
            print(f"FAIL: {os.path.basename(path)}: exit {run.returncode}, stderr {run.stderr!r} (expected 2, "
                  f"{words!r})")
            failures += 1
        else:
            print(f"{os.path.basename(path)}: refused: {run.stderr.strip()}")
    return 1 if failures else 0


def main(argv):
    if len(argv) == 4 and argv[0] == "check" and argv[1] in FAMILIES:
        os.makedirs(argv[3], exist_ok=True)
        return check(argv[1], argv[2], argv[3])
    if len(argv) == 4 and argv[0] == "check" and argv[1] in ("clip-llava", "clip-mapped"):
        os.makedirs(argv[3], exist_ok=True)
        return check_clip(argv[1].removeprefix("clip-"), argv[2], argv[3])
    if len(argv) == 3 and argv[0] == "refuse":
        os.makedirs(argv[2], exist_ok=True)
        return refuse(argv[1], argv[2])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
