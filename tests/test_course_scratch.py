"""Each kernel writes its files (snapshots, the doctor's HTML report) in a folder of its own.

Chapter 7 once wrote fixed names in the system's temporary folder, so an English and a Chinese run
of the chapter overwrote each other's report.  ``_course.scratch(name)`` is the seam every chapter
uses; here two kernels are two Python processes, as Jupyter runs them.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ASK = ("import sys; sys.path[:0] = [{chapters!r}, {root!r}]; import _course; "
       "a = _course.scratch('ch7_doctor.html'); b = _course.scratch('ch7_oom.pickle'); "
       "open(a, 'w').write('report'); print(a); print(b)")


def _kernel() -> list:
    code = ASK.format(chapters=str(ROOT / "chapters"), root=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "MPLBACKEND": "Agg"})
    return out.stdout.split()


def test_two_kernels_never_share_a_file_and_one_kernel_keeps_one_folder():
    first, second = _kernel(), _kernel()
    assert Path(first[0]).name == "ch7_doctor.html" and Path(first[0]).read_text() == "report"
    assert Path(first[0]).parent == Path(first[1]).parent           # one folder per kernel
    assert Path(first[0]).parent != Path(second[0]).parent          # never the other kernel's
    assert first[0] != second[0]


def test_no_chapter_writes_a_fixed_name_in_the_shared_temporary_folder():
    """A chapter that calls tempfile.gettempdir() writes where another kernel writes too."""
    offenders = [p.name for p in sorted((ROOT / "chapters").glob("*.md")) if "gettempdir()" in p.read_text()]
    assert offenders == [], f"use course.scratch(name) instead of tempfile.gettempdir() in {offenders}"
