#!/usr/bin/python3
"""Table and plot of examples/smollm2_context.sh: the live norms of every layer and head of SmolLM2 against the
context length N, next to the theory's sqrt(N).

  /usr/bin/python3 examples/summarize_context.py OUT_DIR    (reads OUT_DIR/N-*.json, writes the Markdown table
                                                            on stdout and OUT_DIR/smollm2-context.svg)

Every figure is over the model's 30 x 9 = 270 query heads. The exponents are least-squares slopes of
log(norm) against log(N) over the N measured: a description of this one paragraph, not a verdict (THEORY.md's
verdicts need i.i.d. samples; here there is one text).
"""
import glob
import json
import math
import os
import re
import statistics
import subprocess
import sys

# (JSON key, label): the norms whose growth with N is fitted and plotted.
QUANTITIES = [
    ("softmax_fro", "‖A‖_F"),
    ("grad_fro", "‖∇softmax‖_F"),
    ("dWq_fro", "‖dA/dW_Q‖_F"),
    ("dWk_fro", "‖dA/dW_K‖_F"),
    ("dWk_group_fro", "group ‖dA/dW_K‖_F"),
    ("linear_scaled_fro", "‖S‖_F/√N"),
    ("poly3_scaled_fro", "‖S³‖_F/√N"),
    ("relu_n_fro", "‖relu(S)‖_F/N"),
]


def slope(ns, values):
    xs, ys = [math.log(n) for n in ns], [math.log(v) for v in values]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def quartiles(values):
    q = statistics.quantiles(values, n=4)
    return q[0], statistics.median(values), q[2]


def main(folder):
    runs = {}
    for path in glob.glob(os.path.join(folder, "N-*.json")):
        n = int(re.search(r"N-(\d+)\.json$", path).group(1))
        document = json.load(open(path))
        # Outputs saved before `probe --json` printed one object were the bare list of per-head rows.
        runs[n] = document["heads"] if isinstance(document, dict) else document
    ns = sorted(runs)
    if len(ns) < 2:
        sys.exit(f"summarize_context.py: fewer than two N-*.json in {folder}")
    heads = len(runs[ns[0]])
    print(f"SmolLM2-135M-Instruct (Q4_1), examples/context_paragraph.txt (repeated past its 1052 tokens) cut to its "
          f"first N tokens; {heads} heads (30 layers x 9 query heads).\n")
    print("| N | ‖A‖_F/√N median [min, max] | ‖∇softmax‖_F/(√N/2) median [max] | heads with ‖A‖_F ≥ 0.99 √N "
          "| ‖S‖_F/√N ÷ ‖A‖_F | ‖S³‖_F/√N ÷ ‖A‖_F | ‖relu(S)‖_F/N ÷ ‖A‖_F |")
    print("|---|---|---|---|---|---|---|")
    for n in ns:
        rows = runs[n]
        a = [r["softmax_fro"] / math.sqrt(n) for r in rows]
        g = [r["grad_fro"] / (math.sqrt(n) / 2) for r in rows]
        ratio = lambda key: statistics.median(r[key] / r["softmax_fro"] for r in rows)
        print(f"| {n} | {statistics.median(a):.3f} [{min(a):.3f}, {max(a):.3f}] | {statistics.median(g):.3f} "
              f"[{max(g):.3f}] | {sum(x >= 0.99 for x in a)} | {ratio('linear_scaled_fro'):.3g} | "
              f"{ratio('poly3_scaled_fro'):.3g} | {ratio('relu_n_fro'):.3g} |")
    print(f"\nExponents of N (least squares over N = {ns[0]} ... {ns[-1]}; the theory's bound grows like N^0.5):\n")
    print("| norm | exponent of the median over heads | per-head exponents: quartiles |")
    print("|---|---|---|")
    by_head = {(r["layer"], r["head"]): {} for r in runs[ns[0]]}
    for n in ns:
        for r in runs[n]:
            by_head[(r["layer"], r["head"])][n] = r
    medians = {}
    for key, label in QUANTITIES:
        medians[key] = [statistics.median(r[key] for r in runs[n]) for n in ns]
        per_head = [slope(ns, [h[n][key] for n in ns]) for h in by_head.values() if all(h[n][key] > 0 for n in ns)]
        q1, q2, q3 = quartiles(per_head)
        print(f"| {label} | {slope(ns, medians[key]):.3f} | {q1:.3f}, {q2:.3f}, {q3:.3f} |")
    plot(folder, ns, runs, medians)


def plot(folder, ns, runs, medians):
    # The folder's name goes into gnuplot's script as a quoted string: refuse names that would end the quote.
    if any(c in folder for c in "'\"\n`"):
        sys.exit(f"summarize_context.py: the folder name {folder!r} has quotes or a newline; choose another")
    data = os.path.join(folder, "smollm2-context.dat")
    with open(data, "w") as f:
        for k, n in enumerate(ns):
            a = [r["softmax_fro"] for r in runs[n]]
            f.write(" ".join(f"{x:.10g}" for x in [n, min(a), max(a)] + [medians[key][k] for key, _ in QUANTITIES])
                    + "\n")
    # Columns: 1 N, 2-3 min/max ||A||, then the medians in QUANTITIES' order from column 4.
    column = {key: 4 + k for k, (key, _) in enumerate(QUANTITIES)}
    script = f"""set terminal svg size 860,640 dynamic font 'sans,13'
set output '{os.path.join(folder, 'smollm2-context.svg')}'
set logscale xy
set xlabel 'N (tokens of the paragraph, repeated past 1052)'
set ylabel 'Frobenius norm (median over the 270 heads)'
set title 'SmolLM2-135M-Instruct: live norms against context length'
set key below maxrows 4
set xtics ({', '.join(str(n) for n in ns)})
set xrange [{ns[0] / 1.25}:{ns[-1] * 1.25}]
set grid
plot '{data}' using 1:2:3 with filledcurves lc rgb '#cfe0f5' title '||A||_F, min to max over heads', \\
     x**0.5 with lines dt 2 lc rgb 'black' title 'sqrt(N) (sup ||A||_F)', \\
     0.5*x**0.5 with lines dt 3 lc rgb 'black' title 'sqrt(N)/2 (sup ||grad softmax||_F)', \\
     '{data}' using 1:{column['softmax_fro']} with linespoints pt 7 lc rgb '#1f5fa8' title '||A||_F', \\
     '{data}' using 1:{column['grad_fro']} with linespoints pt 5 lc rgb '#2a9d4b' title '||grad softmax||_F', \\
     '{data}' using 1:{column['linear_scaled_fro']} with linespoints pt 9 lc rgb '#8a8a8a' title 'what if S/sqrt(N)', \\
     '{data}' using 1:{column['poly3_scaled_fro']} with linespoints pt 11 lc rgb '#c0392b' title 'what if S^3/sqrt(N)', \\
     '{data}' using 1:{column['relu_n_fro']} with linespoints pt 13 lc rgb '#8e44ad' title 'what if relu(S)/N'
"""
    with open(os.path.join(folder, "smollm2-context.gp"), "w") as f:
        f.write(script)
    subprocess.run(["gnuplot", os.path.join(folder, "smollm2-context.gp")], check=True)


if __name__ == "__main__":
    main(sys.argv[1])
