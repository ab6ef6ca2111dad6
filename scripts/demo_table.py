#!/usr/bin/python3
"""The demo's closing table: one row per claim C1-C9 with the paper's statement, the verdicts the run reached and
whether they are what the theory predicts.

  demo_table.py RESULTS REPORT_MD [--false-as-stated ID]... [--unsettled ID]...

RESULTS holds bounds.json (C1, C2) and fits.json (C3-C9); REPORT_MD is the report `attncheck report` wrote from
it, whose "Statement:" paragraphs are the claims' statements as records/src/claims.cpp holds them.
--false-as-stated ID: the theory proves claim ID false, so a violated series of it is expected and none is not.
--unsettled ID: no proof can settle some series of claim ID, so `consistent` or `inconclusive` is expected there.
Every other claim is expected to hold. Exit 0 when the table is printed, 3 when a file cannot be read.
"""
import argparse
import collections
import json
import os
import re
import sys
import textwrap

IDS = [f"C{i}" for i in range(1, 10)]
ORDER = ("holds", "tight", "violated", "consistent", "inconclusive")
PROVED = ("bound", "exact")
WIDTHS = (5, 42, 30, 48)


class Unreadable(Exception):
    pass


def load_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise Unreadable(f"{path}: {e.strerror}")
    except ValueError as e:
        raise Unreadable(f"{path}: {e}")


def unescape(markdown):
    return re.sub(r"\\(.)", r"\1", markdown)


def short(statement):
    """The statement's first sentence up to its first semicolon outside parentheses: the claim itself, without how
    it is checked. A sentence ends at a period before a capital, not at an abbreviation's ("i.i.d. Gaussian")."""
    first = re.split(r"(?<!\.\w)\.\s+(?=[A-Z])", statement, maxsplit=1)[0]
    depth = 0
    for i, c in enumerate(first):
        depth += {"(": 1, ")": -1}.get(c, 0)
        if depth == 0 and first.startswith("; ", i):
            return first[:i]
    return first.rstrip(".")


def statements(report_md):
    """{id: statement} from the report: C3-C9 have a "Statement:" paragraph each, C1 and C2 share one."""
    try:
        with open(report_md, encoding="utf-8") as f:
            text = unescape(f.read())
    except OSError as e:
        raise Unreadable(f"{report_md}: {e.strerror}")
    found = {}
    for claim, body in re.findall(r"^## Claim (C\d) .*?\n\nStatement: (.*)$", text, re.M):
        found[claim] = body
    # "C1 (numbering): statement. C2 (numbering): statement. Exact closed forms ...": a numbering holds "(4.1)".
    theorem = re.search(r"^C1 \(.*?\): (.*?)\. C2 \(.*?\): (.*?)\. Exact closed forms", text, re.M)
    if theorem:
        found["C1"], found["C2"] = theorem.group(1), theorem.group(2)
    return found


def tally(words):
    counts = collections.Counter(words)
    return ", ".join(f"{w} ({counts[w]})" for w in ORDER if counts[w])


def series_problem(s):
    """Why a series' proof and its samples disagree (a failure of the tool), or None."""
    exact = s.get("exact") or {}
    at = sorted(set((exact.get("disagrees_at") or []) + (exact.get("bound_exceeded_at") or [])))
    if exact.get("confirmed") is False or at:
        where = f" at {s.get('fit_variable') or 'N'} = {', '.join(str(x) for x in at)}" if at else ""
        return f"the samples disagree with the proof{where}"
    return None


def theory_cell(claim, counted, reported, false_as_stated, unsettled):
    """Whether the verdicts are what the theory predicts for `claim`, in words: the counted series' against the
    claim, the others (not the claim's own quantity) against their proofs."""
    proved = [s for s in counted if s["basis"] in PROVED]
    fitted = [s for s in counted if s["basis"] not in PROVED]
    violated = [s for s in proved if s["verdict"] == "violated"]
    parts, unexpected = [], []
    if claim in false_as_stated:
        if violated:
            findings = sorted({s["finding"].split(":", 1)[0] for s in violated if s.get("finding")})
            parts.append("violated, as expected: the proposition is false as stated" +
                         (f" ({'; '.join(findings)})" if findings else ""))
        else:
            unexpected.append("nothing violated, yet the proposition is false as stated")
    elif violated:
        unexpected.append(f"violated ({len(violated)}), yet the theory proves the claim")
    rest = [s["verdict"] for s in proved if s["verdict"] != "violated"]
    if rest:
        parts.append(("the rest " if parts else "") + f"{', '.join(w for w in ORDER if w in rest)}, as proved")
    open_series = [s["verdict"] for s in fitted if s["verdict"] in ("consistent", "inconclusive")]
    if open_series:
        if claim in unsettled:
            parts.append(f"{tally(open_series)} as expected: no proof can settle it (not settled)")
        else:
            unexpected.append(f"{tally(open_series)}: not settled, yet a proof was expected to decide")
    for s in fitted:
        if s["verdict"] in ("holds", "tight", "violated"):
            unexpected.append(f"{s['verdict']} without a proof (basis {s['basis']})")
    if any(s["basis"] in PROVED for s in reported):
        parts.append("not counted: as proved")
    unexpected += [p for p in map(series_problem, counted + reported) if p]
    if unexpected:
        return "NOT AS EXPECTED: " + "; ".join(unexpected) + ("; " + "; ".join(parts) if parts else "")
    return "; ".join(parts)


def rows(results, report_md, false_as_stated, unsettled):
    bounds = load_json(os.path.join(results, "bounds.json"))
    fits = load_json(os.path.join(results, "fits.json"))
    said = statements(report_md)
    series = collections.defaultdict(list)
    for s in fits.get("series", []):
        series[s.get("claim")].append(s)
    # C1 and C2 are exact (`attncheck bounds`): one verdict each, decided by the closed forms.
    for claim, verdict in (bounds.get("verdicts") or {}).items():
        series[claim].append({"claim": claim, "verdict": verdict, "basis": "exact", "counts_for_exit": True})
    out = []
    for claim in IDS:
        counted = [s for s in series[claim] if s.get("counts_for_exit", True)]
        reported = [s for s in series[claim] if not s.get("counts_for_exit", True)]
        if not counted:
            out.append((claim, short(said.get(claim, "")), "not run", "NOT AS EXPECTED: no verdict in " + results))
            continue
        verdicts = tally(s["verdict"] for s in counted)
        if reported:
            verdicts += f"; not counted: {tally(s['verdict'] for s in reported)}"
        out.append((claim, short(said.get(claim, "")), verdicts,
                    theory_cell(claim, counted, reported, false_as_stated, unsettled)))
    return out


def print_table(table):
    print("Claims C1-C9 (docs/THEORY.md), as this run judged them:")
    header = ("claim", "the paper's statement (short)", "verdicts (series)", "what the theory predicts")
    print("  ".join(h.ljust(w) for h, w in zip(header, WIDTHS)).rstrip())
    print("  ".join("-" * w for w in WIDTHS))
    for row in table:
        cells = [textwrap.wrap(cell, w, break_on_hyphens=False) or [""] for cell, w in zip(row, WIDTHS)]
        for i in range(max(len(c) for c in cells)):
            print("  ".join((c[i] if i < len(c) else "").ljust(w) for c, w in zip(cells, WIDTHS)).rstrip())
    print("not counted: series the report shows beside a claim (another reading, a secondary norm, a model outside "
          "its hypothesis); the exit code leaves them out.")


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results")
    parser.add_argument("report_md")
    parser.add_argument("--false-as-stated", action="append", default=[], choices=IDS)
    parser.add_argument("--unsettled", action="append", default=[], choices=IDS)
    args = parser.parse_args(argv[1:])
    try:
        table = rows(args.results, args.report_md, set(args.false_as_stated), set(args.unsettled))
    except Unreadable as e:
        print(f"demo_table.py: cannot read {e}", file=sys.stderr)
        return 3
    print_table(table)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
