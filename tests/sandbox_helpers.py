"""A Python the sandbox's users can run, for tests that grade as root (allocator_ref/labs/sandbox.py).

Run as root, the autograder runs each submission as another user, who cannot run a course
Python under /root (pyenv's): workshop/learner_python.py makes one they can, as `make autograde`
does.  Made once per test run, in a folder everyone may read."""
from __future__ import annotations

import functools
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@functools.lru_cache(maxsize=None)
def _learner_python() -> str:
    base = Path(tempfile.mkdtemp(prefix="grader-python-"))
    base.chmod(0o755)
    env = {**os.environ, "WORKSHOP_PYTHON_DIR": str(base / "python")}
    env.pop("WORKSHOP_PYTHON", None)
    out = subprocess.run([sys.executable, str(ROOT / "workshop" / "learner_python.py")], env=env,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip().splitlines()[-1]


def use_grader_python(monkeypatch) -> None:
    """Run as root: point the sandbox at a Python other users can run (elsewhere: this one serves)."""
    if os.geteuid() == 0:
        monkeypatch.setenv("ALLOCATOR_REF_GRADER_PYTHON", _learner_python())


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie is dead: it waits only to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
