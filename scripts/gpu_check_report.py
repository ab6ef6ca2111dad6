#!/usr/bin/env python3
"""gpu-check's report: reads what scripts/gpu-check gathered in PARTS and writes one JSON file and one Markdown
table. Standard library only (the GPU machine's python3 has no attncheck module). Exit 0 when every check that ran
agrees, 1 when one disagrees or did not run.

Usage: gpu_check_report.py PARTS OUT.json OUT.md
"""

import json
import os
import re
import sys

# docs/gpu.md and gpu/selftest.hpp: the two backends form scores in double and differ only in summation order and in
# the inputs' last bits; each sample's estimate agrees to 1e-6 relative, so the mean of the same samples does too.
ESTIMATE_REL_TOLERANCE = 1e-6


def read(parts, name, default=None):
    path = os.path.join(parts, name)
    if not os.path.exists(path):
        return default
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def read_int(parts, name):
    text = read(parts, name)
    try:
        return int(text.strip()) if text is not None else None
    except ValueError:
        return None


def read_json(parts, name):
    text = read(parts, name)
    if not text:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        return {"error": f"{name} is not JSON: {e}"}


def device_info(parts):
    text = read(parts, "nvidia-smi.csv")
    if not text or not text.strip():
        return None
    keys = ["name", "driver", "memory_total", "clock_sm", "clock_sm_max", "clock_memory", "pstate", "temperature_c",
            "power_draw"]
    values = [v.strip() for v in text.strip().splitlines()[0].split(",")]
    return dict(zip(keys, values))


def libraries(parts):
    found = {}
    for line in (read(parts, "libraries.tsv") or "").splitlines():
        if "\t" in line:
            name, where = line.split("\t", 1)
            found[name] = where
    return {"found": found, "searched": (read(parts, "searched.txt") or "").split()}


SELFTEST_LINE = re.compile(r"^(ok  |FAIL) (.*?): (.*)$")
THROUGHPUT_LINE = re.compile(
    r"^throughput, x\^3, N = 4096, D = d = 64 \[(.*?)\]: ([0-9.e+]+) samples/s, score phase ([0-9.e+]+) TFLOP/s")


def selftest(parts):
    text = read(parts, "selftest.txt")
    if text is None:
        return None
    checks, throughput = [], []
    for line in text.splitlines():
        if m := SELFTEST_LINE.match(line):
            checks.append({"name": m.group(2), "passed": m.group(1) == "ok  ", "detail": m.group(3)})
        elif m := THROUGHPUT_LINE.match(line):
            throughput.append({"estimands": m.group(1), "samples_per_second": float(m.group(2)),
                               "score_tflops": float(m.group(3))})
    return {"exit_code": read_int(parts, "selftest.exit"), "checks": checks, "throughput": throughput,
            "output_tail": text.splitlines()[-3:]}


def device_tests(parts):
    text = read(parts, "device_tests.txt")
    if text is None:
        return None
    return {"exit_code": read_int(parts, "device_tests.exit"), "output_tail": text.splitlines()[-5:]}


def relative_difference(a, b):
    if a is None or b is None:
        return 0.0 if a is None and b is None else float("inf")
    if a == b:
        return 0.0
    return abs(a - b) / max(abs(a), abs(b))


def sweeps(parts):
    """Each sweep's points on both backends, by key: the largest relative difference of the means."""
    out = []
    names = sorted({f[len("sweep-"):].rsplit("-", 1)[0] for f in os.listdir(parts) if f.startswith("sweep-")})
    for name in names:
        cpu, cuda = read_json(parts, f"sweep-{name}-cpu.json"), read_json(parts, f"sweep-{name}-cuda.json")
        entry = {"sweep": name, "tolerance": ESTIMATE_REL_TOLERANCE}
        if not cpu or not cuda or "points" not in cpu or "points" not in cuda:
            entry.update(agree=False, problem="a backend wrote no points (gpu-check.log says why)")
            out.append(entry)
            continue
        on_cpu = {p["key"]: p for p in cpu["points"]}
        on_cuda = {p["key"]: p for p in cuda["points"]}
        worst, rows = 0.0, []
        for key in sorted(on_cpu):
            if key not in on_cuda:
                rows.append({"key": key, "problem": "missing on cuda"})
                worst = float("inf")
                continue
            a, b = on_cpu[key], on_cuda[key]
            difference = relative_difference(a.get("mean"), b.get("mean"))
            worst = max(worst, difference)
            rows.append({"N": a.get("N"), "estimand": a.get("estimand"), "cpu": a.get("mean"), "cuda": b.get("mean"),
                         "relative_difference": difference, "cuda_backend": b.get("backend")})
        entry.update(agree=worst <= ESTIMATE_REL_TOLERANCE and len(on_cuda) == len(on_cpu),
                     max_relative_difference=worst, points=rows)
        out.append(entry)
    return out


def without_infinities(value):
    """JSON has no infinities: a difference that is infinite (a value on one backend only) is written as null."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    if isinstance(value, dict):
        return {k: without_infinities(v) for k, v in value.items()}
    if isinstance(value, list):
        return [without_infinities(v) for v in value]
    return value


def markdown(report):
    lines = ["# attncheck gpu-check", ""]
    lines.append(f"Status: **{report['status']}** (exit {report['exit_code']}), {report['seconds']} s.")
    lines.append("")
    if report.get("timed_out"):
        lines += [f"Stopped for time (no result): {', '.join(report['timed_out'])}.", ""]
    if report.get("skipped"):
        lines += ["Not run: " + "; ".join(f"{name} ({why})" for name, why in report["skipped"].items()) + ".", ""]
    device = report.get("device")
    if device:
        lines += ["| device | driver | memory | SM clock (now / max) | memory clock |", "|---|---|---|---|---|",
                  f"| {device.get('name')} | {device.get('driver')} | {device.get('memory_total')} | "
                  f"{device.get('clock_sm')} / {device.get('clock_sm_max')} | {device.get('clock_memory')} |", ""]
    else:
        lines += ["No nvidia-smi output.", ""]
    if report.get("glibc"):
        lines += [f"C library: {report['glibc']}", ""]
    lines += ["| library | found in |", "|---|---|"]
    lines += [f"| {name} | {where} |" for name, where in report["libraries"]["found"].items()]
    lines.append("")
    test = report.get("selftest")
    if test:
        passed = sum(c["passed"] for c in test["checks"])
        lines += [f"## gpu-selftest: {passed} of {len(test['checks'])} checks agree (exit {test['exit_code']})", "",
                  "| check | | detail |", "|---|---|---|"]
        lines += [f"| {c['name']} | {'ok' if c['passed'] else 'FAIL'} | {c['detail']} |" for c in test["checks"]]
        lines.append("")
    tests = report.get("device_tests")
    if tests:
        lines += [f"## gpu_device_tests: exit {tests['exit_code']}", "", "```", *tests["output_tail"], "```", ""]
    for sweep in report.get("sweeps", []):
        verdict = "agree" if sweep["agree"] else "DISAGREE"
        lines += [f"## Sweep {sweep['sweep']}, --backend cpu against --backend cuda: {verdict} "
                  f"(largest relative difference {sweep.get('max_relative_difference', 'n/a')}, tolerance "
                  f"{sweep['tolerance']:g})", ""]
        if sweep.get("points"):
            lines += ["| N | estimand | cpu mean | cuda mean | relative difference |", "|---|---|---|---|---|"]
            lines += [f"| {p.get('N')} | {p.get('estimand')} | {p.get('cpu')} | {p.get('cuda')} | "
                      f"{p.get('relative_difference', p.get('problem'))} |" for p in sweep["points"]]
        lines.append("")
    bench = report.get("bench")
    if isinstance(bench, dict) and "engine" in bench:
        lines += ["## Throughput (bench_gpu)", ""]
        for name, gemm in (bench.get("dgemm") or {}).items():
            if isinstance(gemm, dict) and "tflops" in gemm:
                lines.append(f"- cuBLAS DGEMM, {name}: {gemm['tflops']:.2f} TFLOP/s")
        lines += ["", "| point | samples/s | score TFLOP/s | of DGEMM | CPU samples/s |", "|---|---|---|---|---|"]
        cpu_points = (bench.get("cpu") or {}).get("points", []) if isinstance(bench.get("cpu"), dict) else []
        cpu = {c.get("name"): c for c in cpu_points if isinstance(c, dict)}
        for e in bench["engine"]:
            c = cpu.get(e.get("name"), {})
            lines.append(f"| {e.get('name')} | {e.get('samples_per_second', e.get('error'))} | "
                         f"{e.get('score_tflops')} | {e.get('fraction_of_dgemm')} | "
                         f"{c.get('samples_per_second', c.get('skipped', ''))} |")
        lines.append("")
    elif bench is not None:
        lines += ["## bench_gpu", "", "```", json.dumps(bench)[:2000], "```", ""]
    return "\n".join(lines)


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    parts, json_path, md_path = sys.argv[1:]
    report = {
        "status": (read(parts, "status") or "").strip(),
        "exit_code": read_int(parts, "exit_code"),
        "seconds": read_int(parts, "seconds"),
        "bundle": read(parts, "bundle.txt"),
        "glibc": (read(parts, "glibc.txt") or "").strip() or None,
        "attncheck_version": (read(parts, "version.txt") or "").strip() or None,
        "device": device_info(parts),
        "libraries": libraries(parts),
        "ldd": {f[len("ldd-"):-len(".txt")]: read(parts, f) for f in sorted(os.listdir(parts)) if f.startswith("ldd-")},
        "selftest": selftest(parts),
        "device_tests": device_tests(parts),
        "sweeps": sweeps(parts),
        "bench": read_json(parts, "bench.json"),
        "bench_exit_code": read_int(parts, "bench.exit"),
        # gpu-check stops a step that outlives its limit and leaves NAME.timeout: a hung kernel, or a slow machine.
        "timed_out": sorted(f[:-len(".timeout")] for f in os.listdir(parts) if f.endswith(".timeout")),
        # ... and skips the steps after a hung one, past its deadline, or in progress when it was stopped.
        "skipped": {f[:-len(".skipped")]: (read(parts, f) or "").strip()
                    for f in sorted(os.listdir(parts)) if f.endswith(".skipped")},
    }
    checks = [report["selftest"] and report["selftest"]["exit_code"] == 0,
              report["device_tests"] and report["device_tests"]["exit_code"] == 0,
              bool(report["sweeps"]) and all(s["agree"] for s in report["sweeps"]),
              report["bench_exit_code"] == 0]
    report["checks_agree"] = all(bool(c) for c in checks) and not report["timed_out"] and not report["skipped"]
    if report["exit_code"] == 0 and not report["checks_agree"]:
        # gpu-check judged the programs' exit codes; the sweeps' comparison is judged here alone, and gpu-check
        # turns its exit code to 1 on this script's: the report must say the same.
        report["exit_code"], report["status"] = 1, "a check disagrees (gpu-check.md)"
    for path, text in ((json_path, json.dumps(without_infinities(report), indent=1, allow_nan=False) + "\n"),
                       (md_path, markdown(report) + "\n")):
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(path + ".tmp", path)
    return 0 if report["checks_agree"] else 1


if __name__ == "__main__":
    sys.exit(main())
