#!/usr/bin/env python3
"""bench_gpu --quick, for CTest: on a machine with a CUDA device it must exit 0 with the whole report (every
section, every point measured, positive rates); without one it must exit 2 printing only {"error": ...} that
says no device or driver answers. On both, bad options must exit 2 with an error naming the option.

usage: check_quick.py BENCH_GPU
"""
import json
import subprocess
import sys

ENGINE_POINTS = ["x3_n4096_value", "x3_n4096_norms", "x3_n1024_value", "x3_n2048_value", "x3_n8192_value",
                 "x3_n16384_value", "x3_n32768_value", "x3_n65536_value", "softmax_n4096_value",
                 "matpow3_n1048576_value"]


def run(binary, *args):
    result = subprocess.run([binary, *args], capture_output=True, text=True, timeout=560)
    try:
        document = json.loads(result.stdout)
    except json.JSONDecodeError as error:
        raise AssertionError(f"{args}: stdout is not one JSON object ({error}):\n{result.stdout}\n{result.stderr}")
    return result.returncode, document, result.stderr


def positive(value, where):
    assert isinstance(value, (int, float)) and value > 0, f"{where}: {value!r} is not a positive number"


def check_report(doc):
    for key in ("device", "dgemm", "engine", "cpu"):
        assert key in doc, f"no \"{key}\" section"
    assert doc["device"]["name"], "no device name"
    positive(doc["device"]["multiprocessors"], "device.multiprocessors")
    for shape in ("score_shape", "square"):
        positive(doc["dgemm"][shape].get("tflops"), f"dgemm.{shape}.tflops")
    assert doc["dgemm"]["score_shape"]["call"]["k"] == 64
    names = [p["name"] for p in doc["engine"]]
    assert names == ENGINE_POINTS, f"engine points {names}"
    for p in doc["engine"]:
        assert "error" not in p, f"engine {p['name']}: {p['error']}"
        positive(p["samples_per_second"], f"engine {p['name']}.samples_per_second")
        if p["name"].startswith("matpow"):
            assert p["score_tflops"] is None and p["fraction_of_dgemm"] is None
            positive(p["path_tflops"], f"engine {p['name']}.path_tflops")
        else:
            positive(p["score_tflops"], f"engine {p['name']}.score_tflops")
            positive(p["fraction_of_dgemm"], f"engine {p['name']}.fraction_of_dgemm")
    cpu = {p["name"]: p for p in doc["cpu"]["points"]}
    assert list(cpu) == ENGINE_POINTS, f"cpu points {list(cpu)}"
    for name, p in cpu.items():
        large = name.startswith("matpow") or int(name.split("_n")[1].split("_")[0]) > 8192
        if large:
            assert "skipped" in p, f"cpu {name} was not skipped"
        else:
            assert "error" not in p, f"cpu {name}: {p.get('error')}"
            positive(p["samples_per_second"], f"cpu {name}.samples_per_second")
            positive(p["gpu_speedup"], f"cpu {name}.gpu_speedup")


def main():
    binary = sys.argv[1]
    code, doc, stderr = run(binary, "--quick")
    if code == 2:
        assert list(doc) == ["error"], f"exit 2 with {doc}"
        message = doc["error"].lower()
        assert "no " in message and ("device" in message or "driver" in message), f"exit 2: {doc['error']}"
        print(f"no device: exit 2, {doc['error']}")
    elif code == 0:
        check_report(doc)
        print("a device: exit 0, the report is complete")
    else:
        raise AssertionError(f"--quick exited {code}:\n{json.dumps(doc, indent=2)}\n{stderr}")

    for args, named in [(["--max-seconds-per-point", "zero"], "--max-seconds-per-point"),
                        (["--max-seconds-per-point", "0"], "--max-seconds-per-point"),
                        (["--max-seconds-per-point"], "--max-seconds-per-point"),
                        (["--points", "x3_n4096_value,nonsense"], "nonsense"),
                        (["--points", ""], "--points"),
                        (["--frobnicate"], "--frobnicate")]:
        code, doc, _ = run(binary, *args)
        assert code == 2, f"{args}: exit {code}, expected 2"
        assert list(doc) == ["error"] and named in doc["error"], f"{args}: {doc} does not name {named}"
    print("bad options: exit 2 naming the option")


if __name__ == "__main__":
    try:
        main()
    except AssertionError as failure:
        print(f"FAIL: {failure}", file=sys.stderr)
        sys.exit(1)
