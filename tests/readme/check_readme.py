#!/usr/bin/python3
"""Checks that README.md and the reference pages it links (REFERENCE) say only what is true of this tree.

  check_readme.py paths REPO_ROOT               every repository path they cite exists
  check_readme.py options REPO_ROOT ATTNCHECK   every --option the README writes after `attncheck SUBCOMMAND` is
                                                in that subcommand's --help
  check_readme.py commands REPO_ROOT ATTNCHECK  every command of the "Verdicts per claim" table runs, exits as the
                                                row says (0, or N where "(exit N)" follows the command) and prints every
                                                verdict word of the row's verdict column
  check_readme.py demo REPO_ROOT ATTNCHECK      scripts/demo (README's first command) with that program, into a
                                                temporary folder: exit 0, and its closing table has a row per claim
                                                C1..C9, C8 violated as expected and nothing unexpected
"""
import os
import re
import subprocess
import sys
import tempfile
import time

TOP_LEVEL = ("docs", "examples", "scripts", "bench", "tests", "theory", "monte_carlo", "probes", "reports", "cli",
             "gpu", "python", ".ci")
PATH = re.compile(r"(?<![\w/.-])((?:%s)/[\w./+-]*\w)" % "|".join(re.escape(d) for d in TOP_LEVEL))
VERDICT_WORDS = ("holds", "tight", "violated", "consistent", "inconclusive")


# The README and the pages its "Reference" list moved the long sections to, read as one text.
REFERENCE = ("README.md", "docs/usage.md", "docs/python.md", "docs/benchmarks.md")


def readme(root):
    texts = []
    for name in REFERENCE:
        with open(os.path.join(root, name), encoding="utf-8") as f:
            texts.append(f.read())
    return "\n".join(texts)


def check_paths(root):
    cited = sorted(set(PATH.findall(readme(root))))
    missing = [p for p in cited if not os.path.exists(os.path.join(root, p))]
    for p in missing:
        print(f"the README (or a reference page) cites {p}, which does not exist", file=sys.stderr)
    print(f"{len(cited)} paths cited, {len(missing)} missing")
    if len(cited) < 20:  # the README cites dozens; a handful means the pattern no longer matches its style
        print(f"only {len(cited)} paths found: the path pattern no longer matches the README", file=sys.stderr)
        return 1
    return 1 if missing else 0


def cited_invocations(text):
    """(subcommand, options) for every `attncheck SUBCOMMAND ...` the README writes, in code spans and blocks."""
    spans = re.findall(r"```[^\n]*\n(.*?)```", text, re.S) + re.findall(r"`([^`\n]+)`", text)
    found = []
    for span in spans:
        for line in span.splitlines():
            for match in re.finditer(r"\battncheck ([a-z][\w-]*)((?:(?!\battncheck ).)*)", line):
                found.append((match.group(1), set(re.findall(r"(?<![\w-])(--[a-z][\w-]*)", match.group(2)))))
    return found


def check_options(root, attncheck):
    helps, failures, checked = {}, 0, 0
    for subcommand, options in cited_invocations(readme(root)):
        if subcommand not in helps:
            result = subprocess.run([attncheck, subcommand, "--help"], capture_output=True, text=True, timeout=60)
            helps[subcommand] = result.stdout if result.returncode == 0 else None
        if helps[subcommand] is None:
            print(f"the README (or a reference page) cites `attncheck {subcommand}`, which is not a subcommand",
                  file=sys.stderr)
            failures += 1
            continue
        for option in sorted(options):
            checked += 1
            if not re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(option), helps[subcommand]):
                print(f"the README (or a reference page) cites `attncheck {subcommand} {option}`, which its --help "
                      "does not list",
                      file=sys.stderr)
                failures += 1
    print(f"{checked} options of {len(helps)} subcommands checked, {failures} failures")
    if checked < 30:
        print("too few options found: the pattern no longer matches the README", file=sys.stderr)
        return 1
    return 1 if failures else 0


def table_rows(text):
    """The rows of the "Verdicts per claim" table as lists of cells (the escaped \\| kept inside a cell)."""
    section = text.split("\n## Verdicts per claim\n", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        if line.startswith("| C"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            rows.append(cells)
    return rows


def verdict_groups(rows):
    """(claims, commands with their expected exit codes, verdict words) per distinct command list: rows whose
    command is "same", or repeats the previous row's, are read from one run. A command exits 0 unless "(exit N)"
    follows it in the cell."""
    groups = []
    for cells in rows:
        claim, verdict, command_cell = cells[0], cells[2], cells[-1]
        commands = [(command, int(code) if code else 0)
                    for command, code in re.findall(r"`attncheck ([^`]*)`(?:\s*\(exit (\d)\))?", command_cell)]
        words = {w for w in VERDICT_WORDS if re.search(r"\b%s\b" % w, verdict)}
        if groups and (command_cell == "same" or commands == groups[-1][1]):
            groups[-1][0].append(claim)
            groups[-1][2].update(words)
            continue
        groups.append(([claim], commands, words))
    return groups


def check_commands(root, attncheck):
    rows = table_rows(readme(root))
    if len(rows) < 9:
        print(f"the verdict table has {len(rows)} rows, expected one per claim C1..C9", file=sys.stderr)
        return 1
    failures, ran = 0, 0
    for claims, commands, words in verdict_groups(rows):
        name = " + ".join(claims)
        if not commands:
            print(f"{name}: no command in its row", file=sys.stderr)
            failures += 1
            continue
        # Verdicts are printed on lines that start with the claim's id (the other lines explain them).
        verdict_lines = ""
        for command, expected_exit in commands:
            start = time.monotonic()
            result = subprocess.run([attncheck] + command.split(), capture_output=True, text=True, timeout=300)
            ran += 1
            verdict_lines += "".join(l + "\n" for l in result.stdout.splitlines() if re.match(r"C\d", l))
            print(f"{name}: attncheck {command}: exit {result.returncode}, {time.monotonic() - start:.1f} s")
            if result.returncode != expected_exit:
                print(f"{name}: exit {result.returncode}, the README says {expected_exit}\n{result.stderr}",
                      file=sys.stderr)
                failures += 1
        printed = {w for w in VERDICT_WORDS if re.search(r"\b%s\b" % w, verdict_lines)}
        if words - printed:
            print(f"{name}: the README's verdict says {', '.join(sorted(words - printed))}; the output never does",
                  file=sys.stderr)
            failures += 1
        if "violated" in printed and "violated" not in words:
            print(f"{name}: the output has a violated series; the README's verdict does not say so", file=sys.stderr)
            failures += 1
    print(f"{ran} commands run, {failures} failures")
    return 1 if failures else 0


def demo_table_rows(output):
    """{claim: the text of its row's cells, each cell's wrapped lines joined, cells joined by " | "} from the demo's
    closing table, whose columns the dashes under its header delimit."""
    lines = output.split("\nClaims C1-C9 (docs/THEORY.md), as this run judged them:\n", 1)[-1].splitlines()
    if len(lines) < 2:
        return {}
    spans = [m.span() for m in re.finditer(r"-+", lines[1])]
    rows, claim = {}, None
    for line in lines[2:]:
        if not line.startswith(" "):
            claim = line.split(" ", 1)[0] if re.match(r"C\d\s", line) else None
            if claim is None:
                break
            rows[claim] = [""] * len(spans)
        for i, (a, b) in enumerate(spans):
            rows[claim][i] += " " + line[a:b + 1 if i + 1 < len(spans) else None]
    return {c: " | ".join(re.sub(r"\s+", " ", cell).strip() for cell in cells) for c, cells in rows.items()}


def check_demo(root, attncheck):
    with tempfile.TemporaryDirectory() as out:
        env = dict(os.environ, ATTNCHECK_DEMO_PROGRAM=attncheck, ATTNCHECK_DEMO_OUT=out)
        start = time.monotonic()
        result = subprocess.run([os.path.join(root, "scripts", "demo")], capture_output=True, text=True, env=env,
                                timeout=900)
        print(f"scripts/demo: exit {result.returncode}, {time.monotonic() - start:.1f} s")
        failures = []
        if result.returncode != 0:
            failures.append(f"exit {result.returncode}; 0 means every series a proof can settle was settled in favour")
        rows = demo_table_rows(result.stdout)
        if list(rows) != [f"C{i}" for i in range(1, 10)]:
            failures.append(f"the closing table's rows are {list(rows)}, expected C1..C9 in order")
        if "violated, as expected: the proposition is false as stated" not in rows.get("C8", ""):
            failures.append(f"C8's row does not mark its violation as expected: {rows.get('C8')}")
        if "as expected: no proof can settle it" not in rows.get("C9", ""):
            failures.append(f"C9's row does not mark its open series as expected: {rows.get('C9')}")
        for claim, row in rows.items():
            cells = row.split(" | ")
            verdict = re.search(r"\b(holds|tight|violated) \(\d+\)", cells[2]) if len(cells) == 4 else None
            if not verdict or not cells[1] or "NOT AS EXPECTED" in row:
                failures.append(f"{claim}'s row lacks its statement, a verdict or its expected mark: {row}")
        for claim in ("C1", "C2", "C3", "C4", "C5", "C6", "C7"):
            if "violated" in rows.get(claim, "").split("not counted:")[0]:
                failures.append(f"{claim} has a counted violated series: {rows[claim]}")
        last = result.stdout.rstrip().splitlines()[-1] if result.stdout.strip() else ""
        if last != f"report: {out}/report/index.html" or not os.path.exists(os.path.join(out, "report", "index.html")):
            failures.append(f"the last line is {last!r}, not the report's path (or the report is missing)")
    for f in failures:
        print(f"scripts/demo: {f}", file=sys.stderr)
    if failures:
        print(result.stdout[-6000:] + result.stderr[-3000:], file=sys.stderr)
    return 1 if failures else 0


def main(argv):
    if len(argv) == 3 and argv[1] == "paths":
        return check_paths(argv[2])
    if len(argv) == 4 and argv[1] == "options":
        return check_options(argv[2], argv[3])
    if len(argv) == 4 and argv[1] == "commands":
        return check_commands(argv[2], argv[3])
    if len(argv) == 4 and argv[1] == "demo":
        return check_demo(argv[2], argv[3])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
