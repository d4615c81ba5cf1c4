"""gpucmp_cli(*args): the command line as a user runs it -- `python -m gpucmp ...` in a fresh
process from `/`, with this checkout first on PYTHONPATH -- for the CLI tests."""
import os
import subprocess
import sys
from pathlib import Path

import gpucmp

HOME = str(Path(gpucmp.__file__).resolve().parents[1])


def gpucmp_cli(*args, timeout=600):
    paths = [HOME] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
    return subprocess.run([sys.executable, "-m", "gpucmp", *args], capture_output=True, text=True, timeout=timeout,
                          env=env, cwd="/")
