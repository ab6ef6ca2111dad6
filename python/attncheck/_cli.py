"""The `attncheck` command of an installed wheel: runs the command-line program the wheel carries inside the
package (attncheck/bin/attncheck), with this command's arguments and its exit code."""

import os
import sys
from pathlib import Path


def program():
    """Where the wheel puts the command-line program."""
    return Path(__file__).resolve().parent / "bin" / "attncheck"


def main():
    path = program()
    if not os.access(path, os.X_OK):
        sys.stderr.write(f"attncheck: the command-line program {path} is not part of this installation; install the "
                         "package with pip (pip install .), which builds it, or run BUILD/cli/attncheck of a CMake "
                         "build\n")
        return 2
    # exec rather than a child process: signals (Ctrl-C) and the exit code reach the caller unchanged.
    os.execv(path, ["attncheck", *sys.argv[1:]])
    return 2  # not reached: execv replaces the process or raises
