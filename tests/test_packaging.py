"""The package's metadata builds without setuptools deprecation warnings.

``make lab`` installs the course with pip; a ``project.license`` written as a
TOML table made setuptools print "project.license as a TOML table is
deprecated" many times over, burying the useful output.  The fix is the SPDX
string of PEP 639, not a warning filter, so this builds the metadata the way
pip does (``setuptools.build_meta.prepare_metadata_for_build_wheel``) and
reads what it printed.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

BUILD = """
import sys, warnings
warnings.simplefilter("always")
from setuptools import build_meta
print(build_meta.prepare_metadata_for_build_wheel(sys.argv[1]))
"""


def test_metadata_builds_without_deprecation_warnings(tmp_path):
    out = subprocess.run([sys.executable, "-c", BUILD, str(tmp_path)], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    printed = out.stdout + out.stderr
    noisy = [line for line in printed.splitlines() if "deprecat" in line.lower()]
    assert not noisy, "setuptools warns while building the metadata:\n" + "\n".join(noisy[:5])
    metadata = (tmp_path / out.stdout.split()[-1] / "METADATA").read_text()
    assert "License-Expression: MIT" in metadata
