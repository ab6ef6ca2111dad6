#!/usr/bin/python3
"""Hugging Face transformers (4.38.2, scripts/pyenv's "transformers" set) as the reference for `attncheck probe`:
tiny random models built and saved by transformers itself, and their own eager attention probabilities.

Encoders (RoBERTa, XLM-RoBERTa, DistilBERT, CLIP's vision and text towers):
  make-tiny-encoders DIR   writes, in float64 safetensors by save_pretrained, DIR/tiny-roberta (with tokens.txt
                           and tokens-padded.txt, which holds pad tokens), DIR/tiny-xlm-roberta (pad_token_id 3,
                           relu), DIR/tiny-distilbert, DIR/tiny-clip-vision (CLIPVisionModel with a
                           CLIPImageProcessor: shortest edge 40 bicubic, 32 x 32 center crop; image.png is 45 x 60)
                           DIR/tiny-clip (a whole CLIPModel, its vision tower probed; pixels.npy) and
                           DIR/tiny-clip-text (CLIPTextModel: causal)
  encoder-compare BIN MODEL ARGS...
                           runs `BIN probe MODEL ARGS --json --attention-out F`, runs the saved model through
                           transformers (eager attention, output_attentions) on the same ids or on the pixel values
                           the probe used, and checks every layer's and head's attention matrix entry by entry
                           (relative 1e-10), the layer inputs (1e-10), and for the first and last head of each layer
                           ||A||_F, ||grad softmax||_F, ||dA/dW_Q||_F, ||dA/dW_K||_F against autograd on the model's
                           own projection weights (relative 1e-9). With --image, also the probe's pixel values against
                           CLIPImageProcessor's (float32: 1e-5).

Exit 0 pass, 1 mismatch, 77 skipped (transformers absent: run it through tests/probes/run_with_pyenv.sh).
"""
import json
import os
import sys

SKIP = 77
try:
    import numpy as np
    import torch
    import transformers
except ImportError as error:
    print(f"SKIPPED: {error} (scripts/pyenv CACHE transformers builds the environment)")
    sys.exit(SKIP)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_reference import attention_difference, compare_norms, head_attention, run_probe  # noqa: E402

torch.set_default_dtype(torch.float64)
# The pooler these tests never load and the advice to pass an attention mask with pad tokens in the input (the
# padded case wants exactly that) would bury the results.
transformers.logging.set_verbosity_error()


# ---- Encoders: RoBERTa, XLM-RoBERTa, DistilBERT, CLIP ---------------------------------------------------------

ENCODER_TOKENS = [0, 5, 17, 33, 8, 21, 9, 38, 12, 30, 2]
# Pad tokens (id 1) inside and after the text: they keep position padding_idx and do not count.
ENCODER_TOKENS_PADDED = [0, 5, 17, 1, 33, 8, 21, 2, 1, 1]


def encoder_randomize(model, seed):
    """Weights of order one instead of the initializers' 0.02, so that attention is far from uniform."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            noise = torch.randn(parameter.shape, generator=generator, dtype=torch.float64)
            norm = "norm" in name.lower()
            parameter.copy_(1 + 0.2 * noise if norm and name.endswith("weight") else 0.3 * noise)
    return model


def encoder_save(model, folder, seed):
    torch.manual_seed(seed)
    model = encoder_randomize(model.double().eval(), seed)
    model.save_pretrained(folder, safe_serialization=True)
    return model


def encoder_write_tokens(folder, name, ids):
    with open(os.path.join(folder, name), "w") as f:
        f.write(" ".join(str(i) for i in ids) + "\n")


def make_tiny_encoders(root):
    from PIL import Image
    os.makedirs(root, exist_ok=True)
    roberta = transformers.RobertaConfig(vocab_size=40, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                         intermediate_size=64, max_position_embeddings=20, type_vocab_size=1)
    folder = os.path.join(root, "tiny-roberta")
    encoder_save(transformers.RobertaModel(roberta, add_pooling_layer=False), folder, 1)
    encoder_write_tokens(folder, "tokens.txt", ENCODER_TOKENS)
    encoder_write_tokens(folder, "tokens-padded.txt", ENCODER_TOKENS_PADDED)

    xlm = transformers.XLMRobertaConfig(vocab_size=40, hidden_size=48, num_hidden_layers=2, num_attention_heads=4,
                                        intermediate_size=64, max_position_embeddings=24, type_vocab_size=1,
                                        pad_token_id=3, hidden_act="relu")
    folder = os.path.join(root, "tiny-xlm-roberta")
    encoder_save(transformers.XLMRobertaModel(xlm, add_pooling_layer=False), folder, 2)
    encoder_write_tokens(folder, "tokens.txt", [0, 7, 3, 19, 25, 3, 11, 2, 3])

    distil = transformers.DistilBertConfig(vocab_size=40, dim=32, n_layers=2, n_heads=4, hidden_dim=64,
                                           max_position_embeddings=16)
    folder = os.path.join(root, "tiny-distilbert")
    encoder_save(transformers.DistilBertModel(distil), folder, 3)
    encoder_write_tokens(folder, "tokens.txt", ENCODER_TOKENS)

    vision = transformers.CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                           num_attention_heads=4, image_size=32, patch_size=8)
    folder = os.path.join(root, "tiny-clip-vision")
    encoder_save(transformers.CLIPVisionModel(vision), folder, 4)
    transformers.CLIPImageProcessor(size={"shortest_edge": 40}, crop_size={"height": 32, "width": 32}).save_pretrained(
        folder)
    rng = np.random.default_rng(5)
    # A smooth picture plus noise: the bicubic resize sees both edges and gradients.
    y, x = np.mgrid[0:45, 0:60]
    picture = np.stack([120 + 100 * np.sin(x / 7.0), 128 + 90 * np.cos(y / 5.0), (2 * x + 3 * y) % 256], axis=-1)
    picture = np.clip(picture + rng.normal(0, 20, picture.shape), 0, 255).astype(np.uint8)
    Image.fromarray(picture).save(os.path.join(folder, "image.png"))

    whole = transformers.CLIPConfig(
        text_config={"vocab_size": 40, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                     "num_attention_heads": 4, "max_position_embeddings": 16},
        vision_config={"hidden_size": 48, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
                       "image_size": 24, "patch_size": 8, "layer_norm_eps": 1e-6},
        projection_dim=16)
    folder = os.path.join(root, "tiny-clip")
    encoder_save(transformers.CLIPModel(whole), folder, 6)
    np.save(os.path.join(folder, "pixels.npy"), rng.normal(0, 1, (3, 24, 24)))

    text = transformers.CLIPTextConfig(vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                       num_attention_heads=4, max_position_embeddings=16)
    folder = os.path.join(root, "tiny-clip-text")
    encoder_save(transformers.CLIPTextModel(text), folder, 7)
    encoder_write_tokens(folder, "tokens.txt", ENCODER_TOKENS)


def encoder_run(model_dir, config, dumped):
    """The model's attention probabilities and, per layer, the rows its projections act on and the modules."""
    kind = config["model_type"]
    with torch.no_grad():
        if kind.startswith("clip"):
            text = kind == "clip_text_model"
            tower = transformers.CLIPTextModel if text else transformers.CLIPVisionModel
            model = tower.from_pretrained(model_dir, attn_implementation="eager", torch_dtype=torch.float64)
            if text:
                out = model(input_ids=torch.tensor([int(i) for i in dumped["input_ids"]])[None],
                            output_attentions=True, output_hidden_states=True)
            else:
                out = model(pixel_values=torch.tensor(dumped["pixel_values"])[None], output_attentions=True,
                            output_hidden_states=True)
            # hidden_states[l] enters layer l, whose first LayerNorm makes the rows its projections act on.
            layers = (model.text_model if text else model.vision_model).encoder.layers
            inputs = [layer.layer_norm1(h[0]) for layer, h in zip(layers, out.hidden_states)]
            attention = [(layer.self_attn.q_proj, layer.self_attn.k_proj) for layer in layers]
        else:
            ids = torch.tensor([int(i) for i in dumped["input_ids"]])[None]
            model = transformers.AutoModel.from_pretrained(model_dir, attn_implementation="eager",
                                                           torch_dtype=torch.float64)
            out = model(input_ids=ids, output_attentions=True, output_hidden_states=True)
            inputs = [h[0] for h in out.hidden_states[:-1]]
            if kind == "distilbert":
                attention = [(b.attention.q_lin, b.attention.k_lin) for b in model.transformer.layer]
            else:
                attention = [(b.attention.self.query, b.attention.self.key) for b in model.encoder.layer]
    heads = out.attentions[0].shape[1]
    return [{"attention": a[0], "X": x, "wq": q.weight.detach(), "bq": q.bias.detach(), "wk": k.weight.detach(),
             "bk": k.bias.detach(), "heads": heads} for a, x, (q, k) in zip(out.attentions, inputs, attention)]


def encoder_check_pixels(model_dir, image_file, ours):
    from PIL import Image
    processor = transformers.CLIPImageProcessor.from_pretrained(model_dir)
    expected = processor(Image.open(image_file).convert("RGB"), return_tensors="np")["pixel_values"][0]
    if ours.shape != expected.shape:
        print(f"FAIL: pixels {ours.shape}, CLIPImageProcessor {expected.shape}")
        return 1
    diff = float(np.max(np.abs(ours - expected)))
    print(f"pixel values: max |attncheck - CLIPImageProcessor (float32)| = {diff:.3e}")
    if diff > 1e-5:
        print("FAIL: the preprocessing differs from CLIPImageProcessor's by more than float32 rounding")
        return 1
    return 0


def encoder_compare(binary, model_dir, probe_args):
    config = json.load(open(os.path.join(model_dir, "config.json")))
    probed = run_probe(binary, model_dir, probe_args)
    if probed is None:
        return 1
    metrics, dumped = probed
    failures = 0
    if "--image" in probe_args:
        failures += encoder_check_pixels(model_dir, probe_args[probe_args.index("--image") + 1],
                                         dumped["pixel_values"])
    layers = encoder_run(model_dir, config, dumped)
    worst, worst_x = 0.0, 0.0
    for l, layer in enumerate(layers):
        rel = attention_difference(dumped, l, layer["attention"].numpy(), "transformers")
        if rel is None:
            return 1
        worst = max(worst, rel)
        x = layer["X"].numpy()
        rel_x = float(np.max(np.abs(dumped[f"inputs.{l}"] - x)) / np.max(np.abs(x)))
        worst_x = max(worst_x, rel_x)
        if rel > 1e-10 or rel_x > 1e-10:
            print(f"FAIL: layer {l}: attention {rel:.3e}, inputs {rel_x:.3e} relative to transformers' > 1e-10")
            failures += 1
    n = layers[0]["attention"].shape[-1]
    print(f"{config['model_type']}: attention matrices, {len(layers)} layers x {layers[0]['heads']} heads, N = {n}: "
          f"max relative |attncheck - transformers| = {worst:.3e}; layer inputs {worst_x:.3e}")
    by_key = {(m["layer"], m["head"]): m for m in metrics}
    causal = config["model_type"] == "clip_text_model"
    worst_rel = 0.0
    for l, layer in enumerate(layers):
        H = layer["heads"]
        d = layer["wq"].shape[0] // H
        for head in sorted({0, H - 1}):
            s = slice(head * d, (head + 1) * d)
            x = layer["X"]
            wq, wk, bq, bk = layer["wq"][s], layer["wk"][s], layer["bq"][s], layer["bk"][s]
            a = head_attention(x, wq, bq, wk, bk, causal)
            scores = (x @ wq.T + bq) @ (x @ wk.T + bk).T / d ** 0.5
            if causal:
                scores = scores + torch.triu(torch.full(scores.shape, float("-inf")), diagonal=1)
            # Masked logits give NaN derivatives in autograd's softmax, where the map's derivative is 0.
            expected = {
                "softmax_fro": float(torch.linalg.norm(a)),
                "grad_fro": float(torch.linalg.norm(torch.nan_to_num(
                    torch.autograd.functional.jacobian(lambda t: torch.softmax(t, dim=-1), scores)))),
                "dWq_fro": float(torch.linalg.norm(torch.autograd.functional.jacobian(
                    lambda w: head_attention(x, w, bq, wk, bk, causal), wq))),
                "dWk_fro": float(torch.linalg.norm(torch.autograd.functional.jacobian(
                    lambda w: head_attention(x, wq, bq, w, bk, causal), wk)))}
            bad, rel = compare_norms(f"layer {l} head {head}", by_key[(l, head)], expected)
            failures, worst_rel = failures + bad, max(worst_rel, rel)
    print(f"norms vs autograd Jacobians (first and last head per layer): max relative difference {worst_rel:.3e}")
    return 1 if failures else 0


def main(argv):
    if len(argv) == 2 and argv[0] == "make-tiny-encoders":
        make_tiny_encoders(argv[1])
        return 0
    if len(argv) >= 3 and argv[0] == "encoder-compare":
        return encoder_compare(argv[1], argv[2], argv[3:])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
