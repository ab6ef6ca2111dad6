#!/usr/bin/python3
"""Table and figure of examples/atlas.sh, and the pixels it gives DINOv2.

  /usr/bin/python3 examples/atlas_summary.py summary OUT_DIR     reads OUT_DIR/MODEL-grid.json (probe --length
                                                                 GRID --json) and MODEL-N-*.json; the Markdown table
                                                                 on stdout, the figure in OUT_DIR/atlas.svg
  /usr/bin/python3 examples/atlas_summary.py pixels SIDE FILE    scikit-learn's china.jpg, center-cropped square,
                                                                 resized (bicubic) to SIDE x SIDE, normalized with
                                                                 ImageNet's mean and deviation: a 3 x SIDE x SIDE
                                                                 float64 .npy for `probe --pixels`
  /usr/bin/python3 examples/atlas_summary.py tokens GGUF TEXT FILE
                                                                 TEXT's token ids by GGUF's SentencePiece
                                                                 vocabulary, split as llama.cpp does, into FILE
                                                                 for `probe --tokens` (Gemma 3, whose tokenizer
                                                                 `--text` cannot read)

Every statistic is over the model's heads at one N, on one input: a description of these inputs, not a verdict
(THEORY.md's verdicts need i.i.d. samples). Ratios to the bounds: ||A||_F / sqrt(N) <= 1 and
||grad softmax||_F / (sqrt(N)/2) <= 1 hold for every head by Theorem 4.1 (the tight form of its second bound).
"""
import glob
import heapq
import json
import math
import os
import re
import statistics
import struct
import subprocess
import sys

# (file name, label, layers x heads) in the order the table and the figure show them.
MODELS = [
    ("bert-tiny", "bert-tiny (BERT, 2 x 2)"),
    ("minilm", "all-MiniLM-L6-v2 (BERT, 6 x 12)"),
    ("smollm2", "SmolLM2-135M (Llama, Q4_1 GGUF, 30 x 9)"),
    ("gemma3-270m", "Gemma 3 270M (Q4_K_M GGUF, 18 x 4)"),
    ("dinov2-small", "DINOv2-small (ViT-S/14, 12 x 6)"),
]
COLORS = {"bert-tiny": "#8e44ad", "minilm": "#2a9d4b", "smollm2": "#1f5fa8", "gemma3-270m": "#d68910",
          "dinov2-small": "#c0392b"}


def read_runs(folder):
    runs = {}
    # One `probe --length GRID --json` per text model: its lengths and a probe document for each.
    for path in glob.glob(os.path.join(folder, "*-grid.json")):
        match = re.search(r"([a-z0-9-]+)-grid\.json$", os.path.basename(path))
        if match:
            with open(path) as f:
                grid = json.load(f)
            for n, probe in zip(grid["lengths"], grid["probes"]):
                runs.setdefault(match.group(1), {})[int(n)] = probe["heads"]
    for path in glob.glob(os.path.join(folder, "*-N-*.json")):
        match = re.search(r"([a-z0-9-]+)-N-(\d+)\.json$", os.path.basename(path))
        with open(path) as f:
            runs.setdefault(match.group(1), {})[int(match.group(2))] = json.load(f)["heads"]
    return runs


def spread(values):
    """median, min, max, first and third quartiles."""
    q1, _, q3 = statistics.quantiles(values, n=4) if len(values) > 1 else (values[0],) * 3
    return statistics.median(values), min(values), max(values), q1, q3


def statistics_of(rows):
    n = rows[0]["N"]
    a = [r["softmax_fro"] / math.sqrt(n) for r in rows]
    g = [r["grad_fro"] / (math.sqrt(n) / 2) for r in rows]
    return {
        "A": spread(a), "grad": spread(g), "at_bound": sum(x >= 0.99 for x in a),
        "poly3_scaled": spread([r["poly3_scaled_fro"] / r["softmax_fro"] for r in rows]),
        "relu_n": spread([r["relu_n_fro"] / r["softmax_fro"] for r in rows]),
    }


def summary(folder):
    runs = read_runs(folder)
    if not runs:
        sys.exit(f"atlas_summary.py: no MODEL-N-*.json in {folder}")
    print("| model | N | heads | ‖A‖_F/√N median [min, max] | heads ≥ 0.99 | ‖∇softmax‖_F/(√N/2) median [max] "
          "| ‖S³‖_F/√N ÷ ‖A‖_F median [min, max] | ‖relu(S)‖_F/N ÷ ‖A‖_F median [min, max] |")
    print("|---|---|---|---|---|---|---|---|")
    table = {}
    for name, label in MODELS:
        for n in sorted(runs.get(name, {})):
            rows = runs[name][n]
            s = table.setdefault(name, {})[n] = statistics_of(rows)
            print(f"| {label} | {n} | {len(rows)} | {s['A'][0]:.3f} [{s['A'][1]:.3f}, {s['A'][2]:.3f}] | "
                  f"{s['at_bound']} | {s['grad'][0]:.3f} [{s['grad'][2]:.3f}] | "
                  f"{s['poly3_scaled'][0]:.3g} [{s['poly3_scaled'][1]:.3g}, {s['poly3_scaled'][2]:.3g}] | "
                  f"{s['relu_n'][0]:.3g} [{s['relu_n'][1]:.3g}, {s['relu_n'][2]:.3g}] |")
    plot(folder, table)


def plot(folder, table):
    # The folder's name goes into gnuplot's script as a quoted string: refuse names that would end the quote.
    if any(c in folder for c in "'\"\n`\\"):
        sys.exit(f"atlas_summary.py: the folder name {folder!r} has quotes, a backslash or a newline; choose another")
    labels = dict(MODELS)
    panels = [("A", "||A||_F / sqrt(N)  (bound: 1)", True), ("grad", "||grad softmax||_F / (sqrt(N)/2)  (bound: 1)",
                                                               True),
              ("poly3_scaled", "what if S^3/sqrt(N): its norm / ||A||_F", False),
              ("relu_n", "what if relu(S)/N: its norm / ||A||_F", False)]
    plots = []
    for panel, (key, title, bounded) in enumerate(panels):
        lines = []
        for name in table:
            data = os.path.join(folder, f"atlas-{name}-{key}.dat")
            with open(data, "w") as f:
                for n, s in sorted(table[name].items()):
                    f.write(" ".join(f"{v:.10g}" for v in (n, *s[key])) + "\n")
            color = COLORS[name]
            # Columns: N, median, min, max, first and third quartiles.
            lines.append(f"'{data}' using 1:5:6 with filledcurves fs transparent solid 0.18 noborder "
                         f"lc rgb '{color}' notitle")
            lines.append(f"'{data}' using 1:2 with linespoints pt 7 ps 0.7 lw 1.5 lc rgb '{color}' "
                         + (f"title '{labels[name]}'" if panel == 0 else "notitle"))
        if bounded:
            lines.append("1 with lines dt 2 lc rgb 'black' " + ("title 'the bound'" if panel == 0 else "notitle"))
        scale = ("set yrange [0:1.25]\nunset logscale y\nset key top right" if bounded
                 else "set autoscale y\nset logscale y\nset key off")
        plots.append(f"set title '{title}'\n{scale}\nplot " + ", \\\n     ".join(lines))
    script = f"""set terminal svg size 1200,900 dynamic font 'sans,12'
set output '{os.path.join(folder, 'atlas.svg')}'
set multiplot layout 2,2 title 'Real checkpoints against Theorem 4.1: median over heads (lines), middle half of the heads (bands)'
set logscale x 2
set xlabel 'N (tokens, or 1 + patches)'
set xrange [24:1400]
set grid
set key font 'sans,10'
""" + "\n".join(plots) + "\nunset multiplot\n"
    with open(os.path.join(folder, "atlas.gp"), "w") as f:
        f.write(script)
    subprocess.run(["gnuplot", os.path.join(folder, "atlas.gp")], check=True)


def pixels(side, path):
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_sample_image
    image = load_sample_image("china.jpg")
    h, w, _ = image.shape
    edge = min(h, w)
    top, left = (h - edge) // 2, (w - edge) // 2
    square = Image.fromarray(image[top:top + edge, left:left + edge]).resize((side, side), Image.BICUBIC)
    values = np.asarray(square, dtype=np.float64) / 255.0
    values = (values - np.array([0.485, 0.456, 0.406])) / np.array([0.229, 0.224, 0.225])
    np.save(path, np.ascontiguousarray(values.transpose(2, 0, 1)))


def gguf_metadata(path, wanted):
    """The GGUF header's values under the keys in wanted (the tensors are not read)."""
    scalars = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
    with open(path, "rb") as f:
        def read(fmt):
            return struct.unpack(fmt, f.read(struct.calcsize(fmt)))[0]

        def string():
            return f.read(read("<Q")).decode("utf-8", errors="surrogateescape")

        def value(kind):
            if kind == 8:
                return string()
            if kind == 9:
                item, count = read("<I"), read("<Q")
                return [value(item) for _ in range(count)]
            return read(scalars[kind])

        if f.read(4) != b"GGUF" or read("<I") < 2:
            sys.exit(f"atlas_summary.py: {path} is not a GGUF file of version 2 or later")
        read("<Q")
        found = {}
        for _ in range(read("<Q")):
            key = string()
            kind = read("<I")
            # Every value is parsed, wanted or not: its length is only known by reading it.
            v = value(kind)
            if key in wanted:
                found[key] = v
        return found


def spm_tokens(gguf, text):
    """llama.cpp's SentencePiece tokenization (llm_tokenizer_spm): user-defined pieces matched in the raw text,
    then per fragment the highest-scoring merge of neighbouring pieces first (the leftmost on ties), pieces
    outside the vocabulary as <0xXX> bytes; BOS first when the file asks for it."""
    meta = gguf_metadata(gguf, {"tokenizer.ggml.model", "tokenizer.ggml.tokens", "tokenizer.ggml.scores",
                                "tokenizer.ggml.token_type", "tokenizer.ggml.bos_token_id",
                                "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_space_prefix"})
    if meta.get("tokenizer.ggml.model") != "llama":
        sys.exit(f"atlas_summary.py: {gguf} has no SentencePiece vocabulary (tokenizer.ggml.model 'llama')")
    pieces, scores, types = (meta[f"tokenizer.ggml.{k}"] for k in ("tokens", "scores", "token_type"))
    ids = {p: i for i, p in enumerate(pieces)}
    user_defined = sorted((p for p, t in zip(pieces, types) if t == 4), key=len, reverse=True)
    fragments = [text] if text else []  # llama.cpp tokenizes no empty fragment: an empty text is BOS alone
    for piece in user_defined:
        split = []
        for fragment in fragments:
            if isinstance(fragment, int) or piece not in fragment:
                split.append(fragment)
                continue
            parts = fragment.split(piece)
            for k, part in enumerate(parts):
                if part:
                    split.append(part)
                if k + 1 < len(parts):
                    split.append(ids[piece])
        fragments = split
    out = []
    if meta.get("tokenizer.ggml.add_bos_token", True):
        out.append(meta["tokenizer.ggml.bos_token_id"])
    prefix = meta.get("tokenizer.ggml.add_space_prefix", True)
    previous_special = True
    for fragment in fragments:
        if isinstance(fragment, int):
            out.append(fragment)
            previous_special = True
            continue
        out += spm_fragment((" " if prefix and previous_special else "") + fragment, ids, scores)
        previous_special = False
    return out


def spm_fragment(text, ids, scores):
    symbols = list(text.replace(" ", "\u2581"))
    prev = list(range(-1, len(symbols) - 1))
    nxt = list(range(1, len(symbols) + 1))
    nxt[-1] = -1
    queue, merged_from = [], {}

    def bigram(left, right):
        if left < 0 or right < 0:
            return
        piece = symbols[left] + symbols[right]
        if piece in ids:
            heapq.heappush(queue, (-scores[ids[piece]], left, right, piece))
            merged_from.setdefault(piece, (symbols[left], symbols[right]))

    for i in range(1, len(symbols)):
        bigram(i - 1, i)
    while queue:
        _, left, right, piece = heapq.heappop(queue)
        # A bigram whose symbols changed since it was queued is stale.
        if not symbols[left] or not symbols[right] or symbols[left] + symbols[right] != piece:
            continue
        symbols[left], symbols[right] = piece, ""
        nxt[left] = nxt[right]
        if nxt[right] >= 0:
            prev[nxt[right]] = left
        bigram(prev[left], left)
        bigram(left, nxt[left])
    out = []

    def resegment(piece):
        if piece in ids:
            out.append(ids[piece])
        elif piece in merged_from:
            for part in merged_from[piece]:
                resegment(part)
        else:
            out.extend(ids[f"<0x{b:02X}>"] for b in piece.encode("utf-8"))

    i = 0
    while i >= 0:
        resegment(symbols[i])
        i = nxt[i]
    return out


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "summary":
        summary(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "pixels":
        pixels(int(sys.argv[2]), sys.argv[3])
    elif len(sys.argv) == 5 and sys.argv[1] == "tokens":
        ids = spm_tokens(sys.argv[2], sys.argv[3])
        with open(sys.argv[4], "w") as f:
            f.write(" ".join(map(str, ids)) + "\n")
    else:
        sys.exit(__doc__)
