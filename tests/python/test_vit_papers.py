"""examples/vit_digits.py in the papers' configuration (--model vit-tiny, --plan papers):
- its float64 norms of a ViT-Tiny layer at N = 256 (||A||_F and ||dA/dS||_F per head, recomputed from the layer's
  input and weights, as the trace measures them) equal attncheck.attention_norms on the same weights and input to
  1e-10 relative, for softmax and the four polynomials, with mean pooling (T = N = 256 tokens) and with the class
  token (T = 257);
- the GPU plan's one command (examples/vit_papers.sh) at a reduced size on the CPU (the full 12 layers, 2 steps of
  2 images) writes a folder that matches docs/results-format.md's vit-results.json, and `attncheck report`
  renders it (exit 0, Table 1 and Fig. 1 rows of its runs, a panel per layer);
- bfloat16 autocast (--amp bf16, on the CPU here) records its dtype and keeps the norms float64; --max-seconds
  skips runs and says so; contradictory options are refused with a message;
- --append finishes a plan cut short: the runs already there are kept as they were and not run again, and
  --max-seconds counts that command's own time."""
import json
import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")

import attncheck  # noqa: E402
from conftest import PROGRAM  # noqa: E402

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples")
sys.path.insert(0, EXAMPLES)
import vit_digits  # noqa: E402

RELATIVE = 1e-10  # both sides are float64 of the same formulas; measured worst here about 1e-15


def vit_tiny_layer(activation, pool):
    """One ViT-Tiny block at N = 256 (64 x 64 digits, patch 4) with q, k weights large enough that softmax is far
    from uniform and S^3 far from S, and the input of its attention on the first digit."""
    config = dict(vit_digits.MODELS["vit-tiny"], layers=1, pool=pool)
    torch.manual_seed(7)
    model = vit_digits.build_model(activation, vit_digits.outer_scale(activation, 256), 4, 64, config)
    attention = model.blocks[0]["attention"]
    generator = torch.Generator().manual_seed(11)  # the same weights for every activation
    with torch.no_grad():
        for linear in (attention.query, attention.key):
            linear.weight.copy_(0.15 * torch.randn(linear.weight.shape, generator=generator))
            linear.bias.copy_(0.1 * torch.randn(linear.bias.shape, generator=generator))
    images = vit_digits.digits(0, 64)[0][:1]
    maps = []
    with torch.no_grad():
        model(images, maps)
    s, a, h = maps[0]
    return model, attention, h[0], a[0]


@pytest.mark.parametrize("pool", ["mean", "cls"])
def test_float64_norms_equal_attention_norms(pool):
    tokens = 256 + (pool == "cls")
    worst, spread = 0.0, []
    for activation in vit_digits.ACTIVATIONS:
        model, attention, x, own_map = vit_tiny_layer(activation, pool)
        assert model.tokens == 256 and x.shape == (tokens, 192)
        norms, jacobians = vit_digits.float64_norms(attention, x)
        assert norms.dtype == torch.float64 and norms.shape == (3,)
        # The recomputation is the model's own map, in float64 (float32 forward: agreement to float32 rounding).
        _, recomputed = vit_digits.float64_maps(attention, x)
        assert torch.allclose(recomputed.float(), own_map, rtol=1e-3, atol=1e-6 * float(own_map.abs().max()))
        as_array = lambda t: t.detach().double().numpy()
        rows = attncheck.attention_norms(as_array(x), as_array(attention.query.weight.T),
                                         as_array(attention.key.weight.T), as_array(attention.query.bias),
                                         as_array(attention.key.bias), heads=3)
        c = attention.scale
        assert c == (1 / 16 if activation.endswith("_scaled") else None if activation == "softmax" else 1.0)
        for head, row in enumerate(rows):
            assert row["N"] == tokens and row["inner"] == pytest.approx(1 / 8, rel=1e-15)
            # The package's own columns are at T tokens; the example's scale is 1/sqrt(N) with N = 256 patches,
            # so the unscaled columns times c are compared, and the scaled ones directly where T = N.
            if activation == "softmax":
                expected = (row["softmax_fro"], row["grad_fro"])
            elif activation.startswith("poly3"):
                expected = (c * row["poly3_fro"], c * row["poly3_grad_fro"])
            else:
                expected = (c * row["scores_fro"], c * tokens)
            if pool == "mean" and activation.endswith("_scaled"):
                prefix = activation.replace("identity", "linear")
                expected = (row[f"{prefix}_fro"], row[f"{prefix}_grad_fro"])
            for ours, theirs in zip((norms[head].item(), jacobians[head].item()), expected):
                relative = abs(ours - theirs) / abs(theirs)
                worst = max(worst, relative)
                assert relative < RELATIVE, f"{activation} head {head}: example {ours!r}, attention_norms {theirs!r}"
        spread.append(norms.mean().item())
    print(f"pool {pool}: 5 activations x 3 heads x 2 norms, worst relative difference {worst:.1e}")
    # Not a degenerate layer: the five maps' norms differ (softmax ~1, x^3 far larger).
    assert len({round(v, 6) for v in spread}) == 5 and max(spread) > 100 * min(spread)


def check_schema(results):
    """docs/results-format.md's vit-results.json, field by field: the problems found (empty when it matches)."""
    problems = []

    def need(ok, message):
        if not ok:
            problems.append(message)

    def typed(obj, key, kinds, where):
        need(key in obj and isinstance(obj[key], kinds) and not isinstance(obj[key], bool),
             f"{where}: \"{key}\" = {obj.get(key)!r} is not {kinds}")

    number, text, optional_text = (int, float), str, (str, type(None))
    need(results.get("format") == "attncheck-vit-digits" and results.get("format_version") == 1, "format")
    provenance, model, dataset = results["provenance"], results["model"], results["dataset"]
    for key, kinds in (("command", text), ("date", text), ("machine", text), ("torch", text), ("threads", int),
                       ("wall_seconds", number), ("device", text), ("cuda", optional_text), ("dtype", text),
                       ("norms", text), ("plan", optional_text), ("runs_planned", int), ("runs_skipped", int)):
        typed(provenance, key, kinds, "provenance")
    need(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", provenance["date"]) is not None, "date is not ISO 8601")
    for key, kinds in (("layers", int), ("heads", int), ("hidden", int), ("mlp", int), ("image_side", int),
                       ("batch", int), ("lr", number), ("optimizer", text), ("clip_grad_norm", number),
                       ("record_every", int), ("name", text), ("pool", text), ("ln_eps", number), ("init", text),
                       ("weight_decay", number), ("schedule", text), ("curve_every", int)):
        typed(model, key, kinds, "model")
    for key in ("name", "source", "caption"):
        typed(dataset, key, text, "dataset")
    need(dataset["image_side"] == model["image_side"], "dataset and model image sides differ")
    need(len(results["runs"]) == provenance["runs_planned"] - provenance["runs_skipped"], "run count")
    for i, run in enumerate(results["runs"]):
        where = f"runs[{i}]"
        need(run.get("experiment") in ("activations", "scale-sweep"), f"{where}: experiment")
        need(run.get("activation") in vit_digits.ACTIVATIONS, f"{where}: activation")
        for key in ("N", "patch", "image_side", "seed", "steps", "test_size", "tokens"):
            typed(run, key, int, where)
        typed(run, "wall_seconds", number, where)
        ph, pw = run["patch_shape"]
        side = run["image_side"]
        need(run["patch"] == ph and run["N"] == (side // ph) * (side // pw), f"{where}: N, patch, patch_shape")
        need(run["tokens"] == run["N"] + (model["pool"] == "cls"), f"{where}: tokens {run['tokens']}")
        if run["activation"] == "softmax":
            need(run["scale"] is None, f"{where}: softmax has a scale")
        elif run["experiment"] == "activations":
            expected = 1 / math.sqrt(run["N"]) if run["activation"].endswith("_scaled") else 1.0
            need(run["scale"] == pytest.approx(expected, rel=1e-15), f"{where}: scale {run['scale']}")
        if run["accuracy"] is None:
            typed(run, "diverged_at", int, where)
        else:
            need(0 <= run["accuracy"] <= 1 and run["diverged_at"] is None, f"{where}: accuracy")
        steps = [] if run["experiment"] == "scale-sweep" or not model["record_every"] else \
            range(0, run["steps"] + 1, model["record_every"])
        need(sorted({(p["step"], p["layer"]) for p in run["trace"]}) ==
             [(s, l) for s in steps for l in range(model["layers"])], f"{where}: trace steps and layers")
        for p in run["trace"]:
            for key in ("attention_fro", "jacobian_fro"):
                need(p[key] is None or (isinstance(p[key], float) and math.isfinite(p[key]) and p[key] >= 0),
                     f"{where}: trace {key} = {p[key]!r}")
        if model["curve_every"]:
            need([c["step"] for c in run["curve"]] == list(range(0, run["steps"] + 1, model["curve_every"])),
                 f"{where}: curve steps")
            need(all(c["loss"] is None or c["loss"] > 0 for c in run["curve"]) and
                 all(0 <= c["batch_accuracy"] <= 1 for c in run["curve"]), f"{where}: curve values")
    return problems


def run_example(*args):
    return subprocess.run([sys.executable, os.path.join(EXAMPLES, "vit_digits.py"), *map(str, args)],
                          capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))


def test_the_papers_plan_reduced_on_the_cpu_writes_its_schema_and_renders(tmp_path):
    if not PROGRAM:
        pytest.skip("ATTNCHECK_PROGRAM (the built attncheck) is not set")
    out, report = tmp_path / "vit-papers", tmp_path / "vit-papers-report"
    # The GPU command itself (examples/vit_papers.sh), shrunk to the CPU: every layer, two steps of two images.
    done = subprocess.run(["bash", os.path.join(EXAMPLES, "vit_papers.sh"), out, "--device", "cpu", "--steps", "2",
                           "--batch", "2", "--record", "1", "--curve-every", "1", "--seeds", "0", "--sweep-seeds", "0",
                           "--scales", "0.0625", "--eval-limit", "8"], capture_output=True, text=True,
                          env=dict(os.environ, PYTHON=sys.executable, ATTNCHECK=PROGRAM, OMP_NUM_THREADS="1"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(os.listdir(out)) == ["vit-results.json"]
    assert os.path.getsize(out / "vit-results.json") < 1_000_000
    results = json.load(open(out / "vit-results.json"))
    assert check_schema(results) == []
    provenance, model = results["provenance"], results["model"]
    assert (provenance["plan"], provenance["device"], provenance["dtype"], provenance["cuda"]) == \
        ("papers", "cpu", "float32", None)
    assert provenance["torch"] == torch.__version__ and provenance["norms"].startswith("float64, recomputed")
    assert (provenance["runs_planned"], provenance["runs_skipped"]) == (9, 0)
    assert (model["name"], model["layers"], model["heads"], model["hidden"], model["mlp"], model["pool"],
            model["image_side"]) == ("vit-tiny", 12, 3, 192, 768, "cls", 64)
    assert "8 x 8 pixels of information" in results["dataset"]["caption"]
    runs = results["runs"]
    main = {r["activation"]: r for r in runs if r["experiment"] == "activations"}
    assert sorted(main) == sorted(vit_digits.ACTIVATIONS) and {r["N"] for r in main.values()} == {256}
    assert main["poly3_scaled"]["scale"] == 1 / 16 and {r["tokens"] for r in main.values()} == {257}
    sweep = sorted((r["N"], tuple(r["patch_shape"])) for r in runs if r["experiment"] == "scale-sweep")
    assert sweep == [(8, (16, 32)), (16, (16, 16)), (64, (8, 8)), (256, (4, 4))]
    # Step 0, layer 0: the same weights and input for every activation, so x^3 is exactly 16 times x^3/16, and
    # c x has the Jacobian c T (T = 257 with the class token).
    first = {a: r["trace"][0] for a, r in main.items()}
    assert first["poly3"]["attention_fro"] == pytest.approx(16 * first["poly3_scaled"]["attention_fro"], rel=1e-12)
    assert first["identity"]["jacobian_fro"] == pytest.approx(257, rel=1e-15)

    markdown = (report / "report.md").read_text()
    for label, activation in (("softmax", "softmax"), ("x^3", "poly3"), ("x^3/sqrt(N)", "poly3_scaled"),
                              ("x", "identity"), ("x/sqrt(N)", "identity_scaled")):
        row = f"| {label} | 256 | 1 | 0 | {main[activation]['accuracy']:.4g} (one seed: no SE) |"
        assert row in markdown, row
    for n in (256, 64, 16, 8):
        assert re.search(rf"^\| {n} \| 0\.0625 \| [^|]+ \| 1 \| 0 \|", markdown, re.M), f"no Fig. 1 row for N = {n}"
    for layer in range(12):
        assert (report / "plots" / f"vit-attention-layer{layer}.svg").exists()
        assert (report / "plots" / f"vit-jacobian-layer{layer}.svg").exists()
    assert (report / "plots" / "vit-scale-sweep.svg").exists()


def test_bf16_autocast_trains_and_measures_in_float64(tmp_path):
    out = tmp_path / "amp"
    done = run_example(out, "--plan", "papers", "--device", "cpu", "--amp", "bf16", "--layers", "2", "--steps", "2",
                       "--batch", "2", "--record", "1", "--seeds", "0", "--activations", "softmax,poly3_scaled",
                       "--scales", "", "--eval-limit", "8", "--heatmaps")
    assert done.returncode == 0, done.stderr
    results = json.load(open(out / "vit-results.json"))
    assert check_schema(results) == []
    assert results["provenance"]["dtype"] == "bfloat16 autocast (float32 weights)"
    assert results["provenance"]["norms"].startswith("float64")
    # Step 0 again, in process: the run's initial weights (its seed) and the first image of its first batch, through
    # the same autocast forward; the trace holds the float64 norms from that layer input, not the bf16 maps'.
    config = dict(vit_digits.MODELS["vit-tiny"], layers=2)
    x_train = vit_digits.digits(0, 64)[0]
    batch = torch.tensor(np.random.default_rng(1).choice(len(x_train), 2, replace=False))
    for run in results["runs"]:
        torch.manual_seed(0)
        model = vit_digits.build_model(run["activation"], run["scale"], 4, 64, config)
        maps = []
        with torch.no_grad(), torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            model(x_train[batch], maps)
        for layer, (s, a, h) in enumerate(maps):
            assert a.dtype != torch.float64
            norms, jacobians = vit_digits.float64_norms(model.blocks[layer]["attention"], h[0])
            point = run["trace"][layer]
            assert (point["step"], point["layer"]) == (0, layer)
            assert point["attention_fro"] == pytest.approx(norms.mean().item(), rel=1e-13)
            assert point["jacobian_fro"] == pytest.approx(jacobians.mean().item(), rel=1e-13)
    header_size = int.from_bytes(open(out / "attention-softmax.safetensors", "rb").read(8), "little")
    header = json.loads(open(out / "attention-softmax.safetensors", "rb").read(8 + header_size)[8:])
    assert header["layer.1"]["shape"] == [3, 257, 257] and header["layer.1"]["dtype"] == "F64"


def test_append_finishes_a_plan_cut_short_without_running_a_run_twice(tmp_path):
    out = tmp_path / "continued"
    plan = ("--plan", "papers", "--device", "cpu", "--layers", "1", "--steps", "1", "--batch", "2", "--record", "1",
            "--activations", "softmax,poly3", "--scales", "0.25", "--scale-patches", "16", "--eval-limit", "8")
    first = run_example(out, *plan, "--seeds", "0", "--sweep-seeds", "0")
    assert first.returncode == 0, first.stderr
    before = json.load(open(out / "vit-results.json"))
    assert [(r["experiment"], r["seed"]) for r in before["runs"]] == \
        [("activations", 0), ("activations", 0), ("scale-sweep", 0)]
    # As if the first command had taken long: --max-seconds counts this command's time, not the folder's.
    before["provenance"]["wall_seconds"] = 1e6
    (out / "vit-results.json").write_text(json.dumps(before))
    second = run_example(out, *plan, "--seeds", "0,1", "--sweep-seeds", "0,1", "--append", "--max-seconds", "600")
    assert second.returncode == 0, second.stderr
    assert "3 of the 6 runs planned are already in" in second.stdout
    after = json.load(open(out / "vit-results.json"))
    assert after["runs"][:3] == before["runs"]  # as they were, wall_seconds included: not run again
    assert sorted((r["experiment"], r["activation"], r["N"], r["seed"]) for r in after["runs"][3:]) == \
        [("activations", "poly3", 256, 1), ("activations", "softmax", 256, 1), ("scale-sweep", "poly3", 16, 1)]
    provenance = after["provenance"]
    assert (provenance["runs_planned"], provenance["runs_skipped"]) == (6, 0) and check_schema(after) == []
    assert provenance["wall_seconds"] > 1e6 and provenance["command"].count(" && ") == 1
    # Appended again with everything there: nothing runs, and the image side stays one number.
    third = run_example(out, *plan, "--seeds", "0,1", "--sweep-seeds", "0,1", "--append", "--max-seconds", "0")
    assert third.returncode == 0, third.stderr
    assert "6 of the 6 runs planned are already in" in third.stdout and "stopped before" not in third.stdout
    again = json.load(open(out / "vit-results.json"))
    assert again["runs"] == after["runs"] and check_schema(again) == [] and again["model"]["image_side"] == 64
    assert (again["provenance"]["runs_planned"], again["provenance"]["runs_skipped"]) == (6, 0)


def refusal(monkeypatch, tmp_path, *options):
    """The message main() exits with for these options (it must refuse them before training)."""
    monkeypatch.setattr(sys, "argv", ["vit_digits.py", str(tmp_path / "bad"), "--plan", "papers", *options])
    with pytest.raises(SystemExit) as exit:
        vit_digits.main()
    return str(exit.value.code)


def test_max_seconds_skips_runs_and_bad_options_are_refused(tmp_path, monkeypatch):
    done = run_example(tmp_path / "none", "--plan", "papers", "--device", "cpu", "--layers", "1", "--steps", "1",
                       "--seeds", "0", "--activations", "softmax,poly3", "--scales", "", "--max-seconds", "0")
    assert done.returncode == 0, done.stderr
    results = json.load(open(tmp_path / "none" / "vit-results.json"))
    assert (results["runs"], results["provenance"]["runs_planned"], results["provenance"]["runs_skipped"]) == ([], 2, 2)
    assert "stopped before 2 of 2 runs" in done.stdout
    refused = {
        ("--amp", "bf16", "--norms", "maps"): "use --norms float64",
        ("--image-size", "60"): "not a multiple of 8",
        ("--patch", "3"): "patch sides must divide 64",
        ("--patch", "4y4"): "is not a positive integer P or HxW",
        ("--eval-limit", "361"): "not in 1..360",
        ("--layers", "0"): "must be >= 1",
    }
    if not torch.cuda.is_available():
        refused[("--device", "cuda")] = "sees no CUDA device"
    for options, message in refused.items():
        device = [] if "--device" in options else ["--device", "cpu"]
        assert message in refusal(monkeypatch, tmp_path, *device, *options), options
    # Runs of another model are not appended to a results file (the report could not tell them apart).
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "vit-results.json").write_text(json.dumps(
        {"runs": [], "model": {"image_side": 8}, "provenance": {"command": "x", "wall_seconds": 1.0}}))
    assert "--append adds runs of the same model only" in refusal(monkeypatch, tmp_path, "--device", "cpu", "--append")
