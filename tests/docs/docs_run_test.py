#!/usr/bin/python3
"""Runs the code blocks of the documents a newcomer reads first, as printed, and fails on any that does not run.

  docs_run_test.py --repo ROOT --attncheck PROGRAM --python PYTHON --pythonpath DIR [--build DIR]
                   [--pyenv-cache DIR] [DOCUMENT...]   (default: README.md docs/python.md docs/tutorial.md)

Per document, in order: every ```python block in one interpreter (later blocks see earlier definitions), every
```sh, ```bash or ```shell block in its own `bash -e -o pipefail` (```console: the lines after "$ "). Both run in
a scratch folder of their own per document, which holds links to the repository's scripts/ and examples/ and a
build/ whose cache/, cli/ and python/ are this build's, so that a command written for the repository's root
(`scripts/fetch-bert-tiny`, `examples/...`) runs there unchanged while what it writes stays in the scratch folder.
`attncheck` and `python3` (the interpreter the module was built for) are first on PATH, PYTHONPATH holds the
module, ATTNCHECK_REPO the repository's root. Other fences (output, JSON, C++) are text.

HTML comments directly above a block (nothing between them and the fence) say how to run it:
  <!-- docs-test: skip (why) -->         not run; the reason is printed
  <!-- docs-test: needs WHAT, ... (why) --> run only where each WHAT is there: `transformers` (the interpreter of
                                         scripts/pyenv's "transformers" set, given --pyenv-cache, then runs
                                         the document's Python), or a path in the scratch folder such as
                                         build/cache/bert-tiny (fetched first by scripts/fetch-bert-tiny when that
                                         script exists); otherwise skipped with the reason
  <!-- docs-test: exit N -->              the block must exit N (default 0)
  <!-- docs-test: expect REGEX -->        its output (stdout and stderr) must match REGEX (Python re, multiline),
                                         for numbers and verdicts the text around the block quotes
A failure names the document, the block's first line and its output; every block is run, then exit 1 if any
failed.
"""
import argparse
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid

DOCUMENTS = ("README.md", "docs/python.md", "docs/tutorial.md")
RUNNABLE = {"python": "python", "sh": "sh", "bash": "sh", "shell": "sh", "console": "console"}
MARKER = re.compile(r"^<!-- docs-test: (.*) -->$")
BLOCK_TIMEOUT = 120  # seconds; the blocks are meant to take a few

# The persistent interpreter of a document's Python blocks: one JSON request per line on stdin, each block's
# output followed by a line with the request's sentinel and the block's status. A block compiles with as many
# newlines before it as lines above it in the document, so a traceback names the document's own line.
DRIVER = r"""
import json, sys, traceback
namespace = {"__name__": "__main__"}
for request in sys.stdin:
    request = json.loads(request)
    status = 0
    try:
        exec(compile("\n" * (request["line"] - 1) + request["code"], request["file"], "exec"), namespace)
    except SystemExit as stop:
        status = stop.code if isinstance(stop.code, int) else 1
    except BaseException:
        traceback.print_exc()
        status = 1
    sys.stdout.flush()
    sys.stderr.flush()
    print(request["sentinel"], status, flush=True)
"""


class Block:
    def __init__(self, document, line, kind, code, directives):
        self.document, self.line, self.kind, self.code = document, line, kind, code
        self.skip = self.needs = self.why = None
        self.exit, self.expect = 0, []
        for directive in directives:
            word, _, rest = directive.partition(" ")
            reason = re.fullmatch(r"(.*?)\s*\((.+)\)", rest)
            if word == "skip" and reason and not reason.group(1):
                self.skip = reason.group(2)
            elif word == "needs" and reason and reason.group(1):
                self.needs = [w.strip() for w in reason.group(1).split(",")]
                self.why = reason.group(2)
            elif word == "exit" and rest.isdigit():
                self.exit = int(rest)
            elif word == "expect" and rest:
                self.expect.append(re.compile(rest, re.M))
            else:
                raise ValueError(f"{self.where}: marker 'docs-test: {directive}' is not one of skip (why), "
                                 "needs WHAT (why), exit N, expect REGEX")

    @property
    def where(self):
        return f"{self.document}:{self.line}"


def blocks_of(root, document):
    """The fenced blocks of a document that run, with the markers above each; a marker above anything else, or
    a runnable fence left open, is an error."""
    lines = open(os.path.join(root, document), encoding="utf-8").read().splitlines()
    blocks, directives, i = [], [], 0
    while i < len(lines):
        line = lines[i]
        marker = MARKER.match(line)
        if marker:
            directives.append(marker.group(1).strip())
            i += 1
            continue
        fence = re.match(r"^```\s*([\w-]*)", line)
        if fence:
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
            if end is None:
                raise ValueError(f"{document}:{i + 1}: the fence is never closed")
            kind = RUNNABLE.get(fence.group(1).lower())
            if kind:
                blocks.append(Block(document, i + 2, kind, "\n".join(lines[i + 1:end]) + "\n", directives))
            elif directives:
                raise ValueError(f"{document}:{i + 1}: docs-test markers above a ```{fence.group(1)} block, "
                                 "which is not run")
            directives, i = [], end + 1
            continue
        if directives:
            raise ValueError(f"{document}:{i + 1}: docs-test markers must be directly above the block they mark")
        i += 1
    return blocks


def console_commands(code):
    """The commands of a console transcript: lines after "$ ", with their "\\"-continued lines."""
    commands, continuing = [], False
    for line in code.splitlines():
        if line.startswith("$ ") or continuing:
            commands.append(line[2:] if not continuing else line)
            continuing = line.endswith("\\")
    return "\n".join(commands) + "\n"


def scratch_folder(root, build):
    """A folder in which the repository's scripts/ and examples/ are where a command from its root expects
    them, and build/ holds this build's cache/, cli/ and python/: the fetch scripts find (or fill) this build's
    cache, and nothing a block writes lands in the checkout."""
    folder = tempfile.mkdtemp(prefix="attncheck-docs-")
    for name in ("scripts", "examples"):
        os.symlink(os.path.join(root, name), os.path.join(folder, name))
    os.makedirs(os.path.join(folder, "build"))
    for name in ("cache", "cli", "python"):
        target = os.path.join(build, name)
        if name == "cache":
            os.makedirs(target, exist_ok=True)
        if os.path.exists(target):
            os.symlink(target, os.path.join(folder, "build", name))
    return folder


class PythonSession:
    """The interpreter that runs a document's Python blocks one after another, in one namespace."""

    def __init__(self, python, cwd, env):
        self.process = subprocess.Popen([python, "-u", "-c", DRIVER], cwd=cwd, env=env, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def run(self, block):
        sentinel = "docs-test-" + uuid.uuid4().hex
        request = {"file": block.document, "line": block.line, "code": block.code, "sentinel": sentinel}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        output, deadline = [], time.monotonic() + BLOCK_TIMEOUT
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.close()
                return None, "".join(output) + f"\n(no end after {BLOCK_TIMEOUT} s: the interpreter was stopped)"
            if line is None:
                return None, "".join(output) + "\n(the interpreter ended)"
            if line.startswith(sentinel + " "):
                return int(line.split()[1]), "".join(output)
            output.append(line)

    def close(self):
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def run_shell(code, cwd, env):
    try:
        result = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", code], cwd=cwd, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=BLOCK_TIMEOUT)
    except subprocess.TimeoutExpired as stopped:
        output = stopped.output.decode(errors="replace") if isinstance(stopped.output, bytes) else stopped.output
        return None, (output or "") + f"\n(no end after {BLOCK_TIMEOUT} s: stopped)"
    return result.returncode, result.stdout


def missing_needs(block, folder, interpreter_has_transformers):
    missing = []
    for what in block.needs or ():
        if what == "transformers":
            if not interpreter_has_transformers:
                missing.append("transformers (scripts/pyenv's environment of that name)")
        elif "/" not in what:
            raise ValueError(f"{block.where}: needs '{what}': give `transformers` or a path")
        elif not os.path.exists(os.path.join(folder, what)):
            missing.append(what)
    return missing


def fetch_needed(blocks, folder, env):
    """Runs scripts/fetch-NAME for each needed build/cache/NAME that is not there yet (once: the scripts keep
    what they fetched). A fetch that fails (no network to PyPI) leaves its blocks to be skipped."""
    for block in blocks:
        for what in block.needs or ():
            match = re.fullmatch(r"build/cache/([\w.-]+)", what)
            fetcher = match and os.path.join(folder, "scripts", "fetch-" + match.group(1))
            if fetcher and not os.path.exists(os.path.join(folder, what)) and os.path.exists(fetcher):
                result = subprocess.run([fetcher], cwd=folder, env=env, capture_output=True, text=True, timeout=600)
                if result.returncode != 0:
                    print(f"scripts/fetch-{match.group(1)} failed (exit {result.returncode}); blocks that need "
                          f"{what} are skipped:\n{result.stderr[-2000:]}")


def run_document(root, document, args, transformers_python):
    blocks = blocks_of(root, document)
    if not blocks:
        return [f"{document}: no runnable block found (has the fence style changed?)"], 0, 0
    folder = scratch_folder(root, args.build)
    bin_dir = os.path.join(folder, ".bin")
    os.makedirs(bin_dir)
    os.symlink(os.path.abspath(args.attncheck), os.path.join(bin_dir, "attncheck"))
    wants_transformers = any("transformers" in (b.needs or ()) for b in blocks)
    python = transformers_python if wants_transformers and transformers_python else args.python
    # A script rather than a link: a virtual environment's interpreter finds its pyvenv.cfg by the path it is
    # started from.
    with open(os.path.join(bin_dir, "python3"), "w") as f:
        f.write(f'#!/bin/sh\nexec "{python}" "$@"\n')
    os.chmod(os.path.join(bin_dir, "python3"), 0o755)
    env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""), ATTNCHECK_REPO=root,
               PYTHONPATH=os.path.abspath(args.pythonpath))
    failures, ran, skipped = [], 0, 0
    session = None
    try:
        fetch_needed(blocks, folder, env)
        for block in blocks:
            missing = missing_needs(block, folder, bool(transformers_python) and python == transformers_python)
            if block.skip or missing:
                reason = block.skip or f"needs {', '.join(missing)}: {block.why}"
                print(f"{block.where} {block.kind}: SKIPPED ({reason})")
                skipped += 1
                continue
            start = time.monotonic()
            if block.kind == "python":
                session = session or PythonSession(python, folder, env)
                status, output = session.run(block)
                if status is None:
                    session = None
            else:
                code = console_commands(block.code) if block.kind == "console" else block.code
                status, output = run_shell(code, folder, env)
            ran += 1
            seconds = time.monotonic() - start
            problems = []
            if status != block.exit:
                problems.append(f"exit {status}, expected {block.exit}")
            problems += [f"the output does not match /{e.pattern}/" for e in block.expect if not e.search(output)]
            print(f"{block.where} {block.kind}: {'FAILED' if problems else 'ok'} ({seconds:.1f} s)")
            if args.show_output:
                print(output, end="" if output.endswith("\n") or not output else "\n")
            if problems:
                failures.append(f"{block.where} ({block.kind} block): {'; '.join(problems)}\n"
                                f"--- its code:\n{block.code}--- its output:\n{output[-6000:]}")
    finally:
        if session:
            session.close()
        shutil.rmtree(folder, ignore_errors=True)
    return failures, ran, skipped


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repo", required=True)
    parser.add_argument("--attncheck", required=True)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--pythonpath", required=True, help="the folder holding the built package attncheck")
    parser.add_argument("--build", help="the build folder (cache/, cli/, python/); default: --pythonpath's parent")
    parser.add_argument("--pyenv-cache", help="the cache of scripts/pyenv: its \"transformers\" environment runs the "
                        "Python of a document with blocks that need transformers (without it they are skipped)")
    parser.add_argument("--show-output", action="store_true", help="print every block's output")
    parser.add_argument("documents", nargs="*", default=DOCUMENTS)
    args = parser.parse_args()
    root = os.path.abspath(args.repo)
    args.build = os.path.abspath(args.build or os.path.join(args.pythonpath, ".."))
    transformers_python = None
    if args.pyenv_cache and any("transformers" in (b.needs or ()) for d in args.documents for b in blocks_of(root, d)):
        # Built once (minutes, from PyPI) and shared with the tests of tests/python/hf_models_test.py.
        result = subprocess.run([os.path.join(root, "scripts", "pyenv"), args.pyenv_cache, "transformers"],
                                capture_output=True, text=True)
        if result.returncode == 0:
            transformers_python = result.stdout.strip().splitlines()[-1]
        else:
            print(f"scripts/pyenv could not build the transformers environment (exit {result.returncode}); blocks "
                  f"that need it are skipped:\n{result.stderr[-2000:]}")
    start = time.monotonic()
    failures, ran, skipped = [], 0, 0
    for document in args.documents:
        f, r, s = run_document(root, document, args, transformers_python)
        failures += f
        ran += r
        skipped += s
    print(f"{ran} blocks ran, {skipped} skipped, {len(failures)} failed, {time.monotonic() - start:.1f} s")
    for failure in failures:
        print(f"\nFAILED {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
