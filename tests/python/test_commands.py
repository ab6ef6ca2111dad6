"""attncheck.bounds and attncheck.mc return what `attncheck bounds --json` and `attncheck mc --json` print, and
refuse what the command line refuses with its messages."""
import json
import os
import signal
import struct
import threading

import numpy as np
import pytest

import attncheck
from conftest import run_program


def test_bounds_equals_the_command_line_json(tmp_path):
    expected = json.loads(run_program("bounds", "--N", 24, "--trials", 2, "--search-starts", 3, "--seed", 7,
                                      "--threads", 2, "--json").stdout)
    assert attncheck.bounds(24, trials=2, search_starts=3, seed=7, threads=2) == expected
    assert expected["holds"] is True and len(expected["families"]) == 8

    logits = np.random.default_rng(3).standard_normal((9, 9)) * 5
    path = tmp_path / "logits.npy"
    np.save(path, logits)
    expected = json.loads(run_program("bounds", "--input", path, "--family", "constant", "two-equal-top",
                                      "--threads", 1, "--json").stdout)
    got = attncheck.bounds(families=["constant", "two-equal-top"], input=path, threads=1)
    assert got == expected
    assert [f["family"] for f in got["families"]] == ["constant", "two-equal-top", "input"]
    # The input family's norms are the matrix's own.
    assert got["families"][2]["max_grad_fro"] == pytest.approx(attncheck.softmax_norms(logits)["grad_fro"], rel=1e-14)


def test_mc_equals_the_command_line_json_but_for_wall_times_and_the_command(tmp_path):
    args = dict(N="8,16,32", D=4, d=4, p=[1, 3], samples=64, threads=2, seed=5)
    expected = json.loads(run_program("mc", "--claim", "C4", "--N", "8,16,32", "--D", 4, "--d", 4, "--p", "1,3",
                                      "--samples", 64, "--threads", 2, "--seed", 5, "--backend", "cpu",
                                      "--json").stdout)
    got = attncheck.mc("C4", out=tmp_path / "results", **args)
    assert got["series"] == expected["series"]
    assert got["exit_code"] == expected["exit_code"]
    strip = lambda points: [{k: v for k, v in p.items() if k != "wall_seconds"} for p in points]
    assert strip(got["points"]) == strip(expected["points"])
    assert len(got["points"]) == 2 * 2 * 3  # both readings of ^p, p = 1, 3, three N
    for k in ("backend", "threads", "run_seed", "version"):
        assert got["provenance"][k] == expected["provenance"][k]
    assert got["provenance"]["command"].startswith("attncheck.mc(claim='C4'")
    written = [json.loads(line) for line in open(tmp_path / "results" / "points.jsonl")]
    assert strip(written) == strip(got["points"])
    assert (tmp_path / "results" / "fits.json").exists()
    # Resuming the folder finishes nothing anew: the same points, read back.
    resumed = attncheck.mc("C4", out=tmp_path / "results", resume=True, **args)
    assert resumed["points"] == got["points"]


@pytest.mark.parametrize("option, value, flag", [("path", "tensor", "--path"), ("precision", "mixed", "--precision")])
def test_mc_evaluation_path_and_precision_reach_the_engine(tmp_path, option, value, flag):
    # p = 2 has a tensor-power path; mixed precision changes the values (FP32 score tiles), so equal points
    # with the command line and a recorded option show the setting was used, not only accepted.
    expected = json.loads(run_program("mc", "--phi", "poly", "--N", "8,16", "--D", 4, "--d", 4, "--p", 2,
                                      "--samples", 16, "--threads", 1, "--seed", 3, "--backend", "cpu", flag, value,
                                      "--json").stdout)
    got = attncheck.mc(phi="poly", N="8,16", D=4, d=4, p=2, samples=16, threads=1, seed=3, **{option: value})
    strip = lambda points: [{k: v for k, v in p.items() if k != "wall_seconds"} for p in points]
    assert strip(got["points"]) == strip(expected["points"])
    default = attncheck.mc(phi="poly", N="8,16", D=4, d=4, p=2, samples=16, threads=1, seed=3)
    if option == "path":
        assert {p["path"] for p in got["points"]} == {"tensor"}
        assert {p["path"] for p in default["points"]} != {"tensor"}
    else:
        assert got["provenance"]["precision"] == "mixed" and default["provenance"]["precision"] == "double"
        assert [p["mean"] for p in got["points"]] != [p["mean"] for p in default["points"]]


def test_mc_passes_on_the_command_lines_notes():
    result = attncheck.mc("C8", N="8,16", D=4, d=4, samples=16, threads=1)
    assert result["notes"] == ["C8 is a statement about d: sweep --d (e.g. --d 4:256:x2)"]


@pytest.mark.parametrize("python_call, command_line", [
    (lambda: attncheck.bounds(8, families=["nope"]), ["bounds", "--N", "8", "--family", "nope"]),
    (lambda: attncheck.bounds(8, input="/nonexistent/logits.npy"), ["bounds", "--N", "8", "--input", "/nonexistent/logits.npy"]),
    (lambda: attncheck.bounds(0), ["bounds", "--N", "0"]),
    (lambda: attncheck.bounds(8, trials=0), ["bounds", "--N", "8", "--trials", "0"]),
    (lambda: attncheck.bounds(), ["bounds"]),
    (lambda: attncheck.mc("C3", samples=1), ["mc", "--claim", "C3", "--samples", "1"]),
    (lambda: attncheck.mc("C3", phi="relu"), ["mc", "--claim", "C3", "--phi", "relu"]),
    (lambda: attncheck.mc("C3", N="16:8:x2"), ["mc", "--claim", "C3", "--N", "16:8:x2"]),
    (lambda: attncheck.mc("C3", N="16:4611686018427387904:x2"), ["mc", "--claim", "C3", "--N", "16:4611686018427387904:x2"]),
    (lambda: attncheck.mc(phi="poly", sigma_x=-1), ["mc", "--phi", "poly", "--sigma-x", "-1"]),
    (lambda: attncheck.mc("C3", resume=True), ["mc", "--claim", "C3", "--resume"]),
    (lambda: attncheck.mc("C3", precision="single"), ["mc", "--claim", "C3", "--precision", "single"]),
    (lambda: attncheck.mc("C3", path="fast"), ["mc", "--claim", "C3", "--path", "fast"]),
])
def test_bad_requests_raise_value_error_with_the_command_lines_message(python_call, command_line):
    result = run_program(*command_line, check=False)
    assert result.returncode == 2
    message = result.stderr.splitlines()[0].removeprefix("attncheck: error: ")
    with pytest.raises(ValueError) as error:
        python_call()
    assert str(error.value) == message


def npy_with_header(path, header, data):
    text = header.encode() + b" " * ((64 - (12 + len(header) + 1) % 64) % 64) + b"\n"
    path.write_bytes(b"\x93NUMPY\x02\x00" + struct.pack("<I", len(text)) + text + data)
    return path


@pytest.mark.parametrize("header, fragment", [
    ("{'descr': '<f8', 'fortran_order': False, 'shape': (3," + " " * 60000 + "3), }", None),
    ("{'descr': '" + "x" * 300000 + "', 'fortran_order': False, 'shape': (3, 3), }", "is not float32 or float64"),
    ("{'descr': '<f8', 'fortran_order': False, 'shape': (3, -32, 32), }", "negative dimension -32"),
])
def test_npy_headers_that_once_overflowed_the_stack_are_read_or_refused(tmp_path, header, fragment):
    """A shape padded with 60,000 spaces, a 300 KB descr, a negative dimension: the interpreter lives on."""
    path = npy_with_header(tmp_path / "logits.npy", header, bytes(72))
    if fragment is None:
        assert attncheck.bounds(input=str(path), threads=1)["families"]
        return
    with pytest.raises(ValueError, match=fragment) as error:
        attncheck.bounds(input=str(path), threads=1)
    assert str(path) in str(error.value)


def test_ctrl_c_stops_a_long_mc_run():
    # A run of about a minute; SIGINT after 0.3 s must end it between chunks with KeyboardInterrupt.
    timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            attncheck.mc(phi="poly", N=256, D=16, d=16, p=1, samples=10 ** 7, threads=1)
    finally:
        timer.cancel()


def test_cross_norm_bounds_equals_the_command_line_json(tmp_path):
    expected = json.loads(run_program("bounds", "--cross-norm", "--N", 20, "--dv", 3, "--trials", 2,
                                      "--search-starts", 3, "--seed", 7, "--mix", "0,0.5,1", "--threads", 2,
                                      "--json").stdout)
    got = attncheck.cross_norm_bounds(20, 3, trials=2, search_starts=3, seed=7, mix=[0, 0.5, 1], threads=2)
    assert got == expected
    assert [v["verdict"] for v in got["verdicts"]] == ["tight"] * 5
    assert [m["output"] for m in got["mix"]] == ["unbounded", "unbounded", "bounded"]

    values = np.random.default_rng(4).standard_normal((6, 2)) * 3
    path = tmp_path / "values.npy"
    np.save(path, values)
    expected = json.loads(run_program("bounds", "--cross-norm", "--values", path, "--threads", 1, "--json").stdout)
    assert attncheck.cross_norm_bounds(values=path, threads=1) == expected
    assert expected["d_v"] == 2 and expected["families"][0]["family"] == "input"


def test_cross_norm_bounds_refuses_what_the_command_line_refuses():
    with pytest.raises(ValueError, match="--mix: 1.5 is out of range"):
        attncheck.cross_norm_bounds(8, 2, mix=1.5)
    with pytest.raises(ValueError, match="--dv: 0 is out of range"):
        attncheck.cross_norm_bounds(8, 0)
    with pytest.raises(ValueError, match="--dv: '2.5' is not a positive integer"):
        attncheck.cross_norm_bounds(8, 2.5)


def test_mc_takes_every_option_of_the_command_line_and_no_other():
    # Both come from one table (monte_carlo/mc_options.hpp): the command line's --help and the Python signature.
    import inspect
    import re
    help_text = run_program("mc", "--help").stdout
    cli = set(re.findall(r"^\s+--([a-zA-Z][a-zA-Z-]*)", help_text, flags=re.MULTILINE)) - {"help", "json"}
    python = set(inspect.signature(attncheck.mc).parameters)
    assert {name.replace("-", "_") for name in cli} == python, (cli, python)
    with pytest.raises(TypeError, match="unexpected keyword argument 'mixes'"):
        attncheck.mc("C9", mixes=1)


def test_mc_runs_c9_with_its_mix_and_value_columns():
    got = attncheck.mc("C9", mix=[0.5, 1], dv=3, N="4,8", D=4, d=4, samples=16, threads=1, backend="cpu")
    assert {s["mix"] for s in got["series"]} == {0.5, 1.0}
    assert {p["dv"] for p in got["points"]} == {3}
    dv_series = [s for s in got["series"] if s["estimand"] == "dV"]
    assert all(s["verdict"] == "holds" and s["basis"] == "bound" for s in dv_series)


def test_mc_takes_your_own_activation_as_an_expression():
    got = attncheck.mc(phi="relu(x)^2", normalize="rows", estimand="value,dS", claimed_exponent=0.5, N="8,16",
                       D=4, d=4, samples=16, threads=1, backend="cpu")
    assert {p["expression"] for p in got["points"]} == {"relu(x)^2"}
    assert {p["derivative"] for p in got["points"]} == {"2*relu(x)*step(x)"}
    assert {p["normalize"] for p in got["points"]} == {"rows"}
    value = [s for s in got["series"] if s["estimand"] == "value"]
    # rows of phi >= 0 normalized are probability vectors: ||F||_F <= sqrt(N) on every input
    assert value and all(s["verdict"] == "holds" and s["basis"] == "bound" for s in value)
    with pytest.raises(ValueError, match="at character 7"):
        attncheck.mc(phi="relu(x", N=8, D=2, d=2, samples=4)


def test_report_writes_what_the_command_line_writes(tmp_path):
    attncheck.mc("C4", out=tmp_path / "results", N="8,16,32", D=4, d=4, p=3, samples=32, threads=1, seed=2)
    summary = attncheck.report(tmp_path / "results", tmp_path / "python", plots=False)
    printed = run_program("report", tmp_path / "results", "--out", tmp_path / "cli", "--no-plots").stdout
    assert summary["html"] == str(tmp_path / "python" / "index.html")
    assert summary["plots"] == 0 and summary["warnings"] == []
    # The command line prints the same counts of series and verdicts.
    verdicts = summary["verdicts"]
    assert (f"{summary['series']} series: {verdicts['holds']} holds, {verdicts['tight']} tight, "
            f"{verdicts['violated']} violated") in printed
    assert summary["series"] == 2  # both readings of ^p at p = 3
    # Both reports are the same document but for where they were written.
    python_md = (tmp_path / "python" / "report.md").read_text().replace(str(tmp_path / "python"), "OUT")
    cli_md = (tmp_path / "cli" / "report.md").read_text().replace(str(tmp_path / "cli"), "OUT")
    assert python_md == cli_md


def test_report_refuses_a_missing_input_naming_it(tmp_path):
    with pytest.raises(ValueError, match="nowhere"):
        attncheck.report(tmp_path / "nowhere", tmp_path / "out", plots=False)


def test_a_folder_written_by_several_runs_keeps_and_reports_each_runs_provenance(tmp_path):
    folder = tmp_path / "results"
    attncheck.mc("C4", out=folder, N="8,16", D=4, d=4, p=1, samples=8, threads=1, seed=3)
    attncheck.mc("C3", out=folder, N="8,16", D=4, d=4, p=1, samples=8, threads=1, seed=4, resume=True)
    fits = json.load(open(folder / "fits.json"))
    assert [run["run_seed"] for run in fits["runs"]] == [3, 4]
    assert fits["runs"][0]["command"].startswith("attncheck.mc(claim='C4'")
    assert fits["runs"][1]["command"].startswith("attncheck.mc(claim='C3'")
    assert fits["provenance"] == fits["runs"][1]  # the last run, for readers that know no "runs"
    attncheck.report(folder, tmp_path / "report", plots=False)
    text = (tmp_path / "report" / "report.md").read_text()
    assert "2 runs wrote this folder" in text
    assert "attncheck.mc(claim='C4'" in text and "attncheck.mc(claim='C3'" in text


def test_console_command_runs_the_bundled_program_or_names_its_absence(tmp_path, monkeypatch, capsys):
    # The wheel's `attncheck` (attncheck._cli) execs attncheck/bin/attncheck; the build folder's package has none.
    from attncheck import _cli
    monkeypatch.setattr(_cli, "program", lambda: tmp_path / "bin" / "attncheck")
    assert _cli.main() == 2
    assert str(tmp_path / "bin" / "attncheck") in capsys.readouterr().err
    # With the program there, the command becomes it: arguments in, exit code out (exec in a child process).
    script = tmp_path / "bin" / "attncheck"
    script.parent.mkdir()
    script.write_text('#!/bin/sh\necho "$*"\nexit 5\n')
    script.chmod(0o755)
    import subprocess
    import sys
    code = ("import sys, attncheck._cli as c, pathlib; path = pathlib.Path(sys.argv[1]); c.program = lambda: path; "
            "sys.argv = ['attncheck', 'mc', '--claim', 'C4']; sys.exit(c.main())")
    done = subprocess.run([sys.executable, "-c", code, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 5, done.stderr
    assert done.stdout.strip() == "mc --claim C4"
