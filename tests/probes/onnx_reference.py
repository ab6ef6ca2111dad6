#!/usr/bin/python3
"""ONNX Runtime reference for `attncheck probe` on DINOv2-small.

  compare BIN MODEL_DIR MODEL.onnx [--size S] [--layers K]
      Preprocesses scikit-learn's sample photograph china.jpg as facebook/dinov2-small's processor does (the
      NumPy and Pillow reference of image_reference.py, center crop S, default 224), runs the original ONNX
      graph with ONNX Runtime (float32) with every backbone layer's LayerNorm output (the rows the attention
      projections act on) and attention matrices exposed as outputs, runs `BIN probe MODEL_DIR --pixels ...
      --attention-out ...` (double precision, the weights converted by scripts/fetch-dinov2-small), and
      checks that they agree: per layer, max |X difference| <= 2e-5 max |X| and max |attention difference|
      <= 1e-4 (float32 rounding through 12 layers: measured 2.7e-6 and 1.6e-5 on this input; the measured
      differences are printed). --layers K compares the first K layers only (the probe computes no more).
  bench BIN MODEL_DIR MODEL.onnx [--repeat R] [--bench-probe BENCH_PROBE]
                          (also the probe with --precision mixed: its time, its ratio to ONNX Runtime's, and the
                          largest relative difference of its row's numbers from the double-precision probe's)
      Wall and CPU time of the whole probe command (load and convert the F32 weights, the forward through all
      12 layers in double precision, the norms of one head) and of ONNX Runtime's forward (float32, session
      already loaded) on the same 224 x 224 input (N = 257 positions), in one run; medians of R runs. Also ONNX
      Runtime's whole in-process job (creating the session from the file, then the forward), and, with
      BENCH_PROBE (bench/probes/bench_probe), the probe's forward alone (the 12 layers, their weights read as
      each starts; not the process start, the pixels or the norms), double, mixed on the float32 kernels the CPU
      takes (float_kernels), and mixed on the portable ones (mixed_portable: ATTNCHECK_NO_AVX512=1).

Exit 0 pass, 1 mismatch, 77 skipped (onnx, onnxruntime, Pillow or the model absent).
"""
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

SKIP = 77
try:
    import numpy as np
    import onnx
    import onnxruntime
except ImportError as error:
    print(f"SKIPPED: {error} (scripts/pyenv installs onnx and onnxruntime)")
    sys.exit(SKIP)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from image_reference import hf_preprocess, sample_photograph  # noqa: E402
from torch_reference import read_safetensors  # noqa: E402


def session_with_layer_outputs(onnx_path, layers):
    model = onnx.load(onnx_path)
    # The graph declares 224 x 224 inputs but computes every shape from the input's: other sizes run as well.
    for dim, name in zip(model.graph.input[0].type.tensor_type.shape.dim[2:], ("height", "width")):
        dim.dim_param = name
    names = []
    for l in range(layers):
        for name in (f"/backbone/encoder/layer.{l}/norm1/Add_1_output_0",
                     f"/backbone/encoder/layer.{l}/attention/attention/Softmax_output_0"):
            model.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
            names.append(name)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session, names


def dinov2_pixels(model_dir, size):
    config = json.load(open(os.path.join(model_dir, "preprocessor_config.json")))
    config["crop_size"] = {"height": size, "width": size}
    config["size"] = {"shortest_edge": size * 256 // 224}
    return hf_preprocess(sample_photograph("china.jpg"), config).astype(np.float32)


def run_probe(binary, model_dir, pixels_file, dump, layers, precision="double", rows=None):
    """Runs the probe through `layers` layers, measuring one head of the last; returns wall and CPU seconds
    (CPU: the child's user + system time). `rows`, a list, receives the JSON rows."""
    command = [binary, "probe", model_dir, "--pixels", pixels_file, "--layers", str(layers - 1), "--heads", "0",
               "--json", "--precision", precision] + (["--attention-out", dump] if dump else [])
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    run = subprocess.run(command, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if run.returncode != 0:
        print(f"FAIL: {' '.join(command)} exited {run.returncode}: {run.stderr}")
        sys.exit(1)
    if rows is not None:
        rows[:] = json.loads(run.stdout)["heads"]
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def largest_relative_difference(rows, reference):
    """Over every number of the rows, relative to the reference's (entries below 1e-12 in size compared absolutely)."""
    worst = 0.0
    for row, ref in zip(rows, reference):
        for key, value in ref.items():
            if isinstance(value, float) and isinstance(row.get(key), float):
                worst = max(worst, abs(row[key] - value) / max(abs(value), 1e-12))
    return worst


def compare(binary, model_dir, onnx_path, size, layers):
    layers = layers or json.load(open(os.path.join(model_dir, "config.json")))["num_hidden_layers"]
    pixels = dinov2_pixels(model_dir, size)
    session, names = session_with_layer_outputs(onnx_path, layers)
    outputs = dict(zip(names, session.run(names, {"input_image": pixels[None]})))
    with tempfile.TemporaryDirectory() as tmp:
        pixels_file, dump = os.path.join(tmp, "pixels.npy"), os.path.join(tmp, "attention.safetensors")
        np.save(pixels_file, pixels)
        run_probe(binary, model_dir, pixels_file, dump, layers)
        ours = read_safetensors(dump)
    failures, worst_x, worst_a = 0, 0.0, 0.0
    for l in range(layers):
        x_ref = outputs[names[2 * l]][0].astype(np.float64)
        a_ref = outputs[names[2 * l + 1]][0].astype(np.float64)
        x_ours, a_ours = ours[f"inputs.{l}"], ours[f"layer.{l}"]
        if x_ours.shape != x_ref.shape or a_ours.shape != a_ref.shape:
            print(f"FAIL: layer {l}: shapes X {x_ours.shape} / {x_ref.shape}, attention {a_ours.shape} / {a_ref.shape}")
            return 1
        x_rel = float(np.max(np.abs(x_ours - x_ref)) / np.max(np.abs(x_ref)))
        a_abs = float(np.max(np.abs(a_ours - a_ref)))
        worst_x, worst_a = max(worst_x, x_rel), max(worst_a, a_abs)
        if x_rel > 2e-5 or a_abs > 1e-4:
            print(f"FAIL: layer {l}: max |X difference| / max |X| = {x_rel:.3e} (limit 2e-5), "
                  f"max |attention difference| = {a_abs:.3e} (limit 1e-4)")
            failures += 1
    n = ours["layer.0"].shape[-1]
    print(f"DINOv2-small on china.jpg at {size} x {size} (N = {n}): {layers} layers x {ours['layer.0'].shape[0]} "
          f"heads against ONNX Runtime {onnxruntime.__version__} (float32): max |X diff| / max |X| = {worst_x:.3e}, "
          f"max |attention diff| = {worst_a:.3e}")
    return 1 if failures else 0


def bench(binary, model_dir, onnx_path, repeat, bench_probe=None):
    layers = json.load(open(os.path.join(model_dir, "config.json")))["num_hidden_layers"]
    pixels = dinov2_pixels(model_dir, 224)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(onnx_path, options, providers=["CPUExecutionProvider"])
    session.run(None, {"input_image": pixels[None]})
    ort_times, ort_whole_times, probe_times, mixed_times = [], [], [], []
    # mixed_portable: the mixed forward on the portable float32 kernels (products through OpenBLAS's SGEMM), as a
    # CPU without AVX-512 runs it.
    forward_times = {"double": [], "mixed": [], "mixed_portable": []}
    float_kernels = None
    double_rows, mixed_rows = [], []
    with tempfile.TemporaryDirectory() as tmp:
        pixels_file = os.path.join(tmp, "pixels.npy")
        np.save(pixels_file, pixels)
        for _ in range(repeat):
            started, cpu = time.perf_counter(), time.process_time()
            session.run(None, {"input_image": pixels[None]})
            ort_times.append((time.perf_counter() - started, time.process_time() - cpu))
            started, cpu = time.perf_counter(), time.process_time()
            fresh = onnxruntime.InferenceSession(onnx_path, options, providers=["CPUExecutionProvider"])
            fresh.run(None, {"input_image": pixels[None]})
            ort_whole_times.append((time.perf_counter() - started, time.process_time() - cpu))
            del fresh
            probe_times.append(run_probe(binary, model_dir, pixels_file, None, layers, "double", double_rows))
            mixed_times.append(run_probe(binary, model_dir, pixels_file, None, layers, "mixed", mixed_rows))
            if bench_probe:
                for precision, times in forward_times.items():
                    portable = precision == "mixed_portable"
                    environment = dict(os.environ, **({"ATTNCHECK_NO_AVX512": "1"} if portable else {}))
                    run = subprocess.run([bench_probe, model_dir, pixels_file, "257", str(layers - 1), "1",
                                          "mixed" if portable else precision],
                                         capture_output=True, text=True, check=True, env=environment)
                    phases = json.loads(run.stdout)
                    times.append((phases["forward_s"], phases["forward_cpu_s"]))
                    if precision == "mixed":
                        float_kernels = phases["float_kernels"]
    ort, probe = np.median(np.array(ort_times), axis=0), np.median(np.array(probe_times), axis=0)
    ort_whole = np.median(np.array(ort_whole_times), axis=0)
    mixed = np.median(np.array(mixed_times), axis=0)
    forward = {p: np.median(np.array(t), axis=0) for p, t in forward_times.items() if t}
    print(json.dumps({"model": "DINOv2-small", "N": 257, "repeat": repeat, "threads": 1,
                      "load_average_1min": os.getloadavg()[0],
                      "onnxruntime_forward_wall_s": float(ort[0]), "onnxruntime_forward_cpu_s": float(ort[1]),
                      "probe_wall_s": float(probe[0]), "probe_cpu_s": float(probe[1]),
                      "wall_ratio": float(probe[0] / ort[0]), "cpu_ratio": float(probe[1] / ort[1]),
                      "mixed_probe_wall_s": float(mixed[0]), "mixed_probe_cpu_s": float(mixed[1]),
                      "mixed_wall_ratio": float(mixed[0] / ort[0]), "mixed_cpu_ratio": float(mixed[1] / ort[1]),
                      "onnxruntime_session_and_forward_wall_s": float(ort_whole[0]),
                      "onnxruntime_session_and_forward_cpu_s": float(ort_whole[1]),
                      "mixed_probe_over_session_and_forward_cpu": float(mixed[1] / ort_whole[1]),
                      **{f"{p}_forward_{what}_s": float(t[k]) for p, t in forward.items()
                         for k, what in ((0, "wall"), (1, "cpu"))},
                      **{f"{p}_forward_over_onnxruntime_forward_cpu": float(t[1] / ort[1]) for p, t in forward.items()},
                      "float_kernels": float_kernels,
                      "mixed_largest_relative_difference_from_double": largest_relative_difference(mixed_rows,
                                                                                                   double_rows)}))
    return 0


def main(argv):
    if len(argv) < 4 or argv[0] not in ("compare", "bench"):
        print(__doc__)
        return 2
    binary, model_dir, onnx_path = argv[1:4]
    for path in (model_dir, onnx_path):
        if not os.path.exists(path):
            print(f"SKIPPED: {path} is not there (scripts/fetch-dinov2-small fetches it)")
            return SKIP
    option = lambda name, default: int(argv[argv.index(name) + 1]) if name in argv else default
    if argv[0] == "compare":
        return compare(binary, model_dir, onnx_path, option("--size", 224), option("--layers", 0))
    bench_probe = argv[argv.index("--bench-probe") + 1] if "--bench-probe" in argv else None
    return bench(binary, model_dir, onnx_path, option("--repeat", 3), bench_probe)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
