"""The PyTorch reference forward of a Llama GGUF file (tests/probes/torch_reference.py's, float64) on the first
N ids that `attncheck probe --attention-out` recorded, timed by phase. Prints one JSON object (seconds), with the sum of
||A||_F over every layer's heads (LAYER's alone when given).
Usage: torch_forward.py MODEL.gguf ATTENTION_DUMP.safetensors N [LAYER]
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "probes"))
import torch_reference as reference  # noqa: E402

model, dump, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
only_layer = int(sys.argv[4]) if len(sys.argv) > 4 else -1
ids = [int(x) for x in reference.read_safetensors(dump)["input_ids"]][:n]
t0 = time.perf_counter()
config, weights = reference.read_gguf(model)
t1, c1 = time.perf_counter(), time.process_time()
with reference.torch.no_grad():
    layers = reference.llama_layers(config, weights, ids)
t2, c2 = time.perf_counter(), time.process_time()
print(json.dumps({"N": n, "dequantize_s": t1 - t0, "forward_s": t2 - t1, "forward_cpu_s": c2 - c1,
                  "threads": reference.torch.get_num_threads(),
                  "softmax_fro_sum": float(sum(reference.torch.linalg.norm(l["attention"], dim=(1, 2)).sum()
                                               for k, l in enumerate(layers) if only_layer in (-1, k)))}))
