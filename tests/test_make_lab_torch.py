"""`make lab` installs torch (chapter 7's predict cells and `predict` need it): the local CPU wheel
when the machine has one, else torch from the package index.  Run against a stand-in venv whose
python records what pip was asked to install (nothing is downloaded or installed)."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FAKE_PYTHON = """#!/bin/sh
# a stand-in venv python: `-c "import torch"` fails until pip "installed" something; pip records its args
here=$(dirname "$0")
if [ "$1" = "-c" ]; then [ -f "$here/../torch-installed" ]; exit $?; fi
if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then echo "$@" >> "$here/../pip-calls"; touch "$here/../torch-installed"; exit 0; fi
exit 2
"""


def fake_venv(tmp_path: Path) -> Path:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    stamp = venv / ".installed"             # the course itself counts as installed (newer than pyproject.toml)
    stamp.touch()
    os.utime(stamp, (4_000_000_000, 4_000_000_000))
    return venv


def make_torch(venv: Path, wheel: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "-s", f"VENV={venv}", f"TORCH_WHEEL={wheel}", f"{venv}/.torch-installed"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_lab_installs_the_local_cpu_wheel_when_there_is_one(tmp_path):
    venv = fake_venv(tmp_path)
    proc = make_torch(venv, "/opt/wheels/torch-9.9.9+cpu-cp311-none.whl")
    assert proc.returncode == 0, proc.stderr
    [call] = (venv / "pip-calls").read_text().splitlines()
    assert call.split()[-1] == "/opt/wheels/torch-9.9.9+cpu-cp311-none.whl"
    assert (venv / ".torch-installed").exists()
    assert make_torch(venv, "").returncode == 0                       # installed once: not again
    assert len((venv / "pip-calls").read_text().splitlines()) == 1


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_lab_installs_torch_from_the_index_without_a_local_wheel(tmp_path):
    venv = fake_venv(tmp_path)
    proc = make_torch(venv, "")
    assert proc.returncode == 0, proc.stderr
    [call] = (venv / "pip-calls").read_text().splitlines()
    assert call.split()[-1] == "torch"


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_the_lab_target_asks_for_torch():
    proc = subprocess.run(["make", "-pn", "lab"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    rule = next(line for line in proc.stdout.splitlines() if line.startswith("lab:"))
    assert ".torch-installed" in rule
