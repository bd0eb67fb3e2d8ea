"""The doctor knows whose run it reads: the course's simulated run, or PyTorch's.

The course marks every snapshot it records (allocator_ref/provenance.py); the doctor words its
report from that mark through its catalogue, in both languages, so a course-made file's report never
says "PyTorch's recorded decisions" and a real PyTorch snapshot's still does.  The chapters print the
doctor's own words: none of them rewrites a tool's text by matching on it.
"""
from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import jupytext
import pytest

import allocator_ref as ar
from allocator_ref.editions import language as lang
from allocator_ref.memory_doctor import examples
from allocator_ref.memory_doctor.diff import doctor_diff
from allocator_ref.policies.registry import make_allocator
from allocator_ref.provenance import KEY, course_made
from allocator_ref.trace.recording import load_recording

ROOT = Path(__file__).resolve().parents[1]
TRACES = Path(os.environ.get("ALLOCATOR_REF_TRACES") or ROOT.parent / "shared" / "traces")
REAL = TRACES / "small-from-empty.pickle"        # a real PyTorch snapshot, the smallest of them
# What the doctor says of PyTorch's run, in each language (the catalogue's words for the header and
# the "Reproduced" line); none of it may be said of the course's run.
PYTORCH_WORDS = {"en": ("PyTorch's recorded decisions", "at PyTorch's address"),
                 "zh": ("PyTorch 所录制决策", "落在 PyTorch 的地址上")}
COURSE_WORDS = {"en": "the course's simulated run", "zh": "课程的模拟运行"}

pytestmark = pytest.mark.usefixtures("plain_language")      # tests/conftest.py


def test_the_course_marks_what_it_records_and_a_file_keeps_the_mark(tmp_path):
    snap = examples.shortage_run(900)
    assert course_made(snap) and KEY in snap
    path = ar.save_snapshot(snap, tmp_path / "oom.pickle")
    assert course_made(load_recording(str(path)).snapshot)
    other = make_allocator(ar.SimDevice("tiny-1gb"), policy="bfc")     # another design records the same way
    other.malloc(1 << 20)
    assert course_made(other.snapshot())


@pytest.mark.parametrize("language", ["en", "zh"])
def test_a_course_made_report_never_calls_it_pytorchs(language, tmp_path):
    with lang.speaking(language):
        report = ar.doctor(examples.shortage_run(900))
        text = str(report)
        page = report.html(tmp_path / "r.html")          # the page it wrote, as text
    for words in PYTORCH_WORDS[language]:
        assert words not in text and words not in page, words
    assert COURSE_WORDS[language] in text.splitlines()[0]
    assert COURSE_WORDS[language] in page


def test_a_diff_of_two_course_made_runs_says_the_recorded_address():
    lines = doctor_diff(examples.fragmentation_run(200), examples.shortage_run(900)).lines()
    assert not any("PyTorch's address" in line for line in lines)
    assert sum("at the recorded address" in line for line in lines) == 2


@pytest.mark.slow
@pytest.mark.skipif(not REAL.is_file(), reason=f"no real PyTorch snapshot at {REAL} (../shared/traces)")
@pytest.mark.parametrize("language", ["en", "zh"])
def test_a_real_pytorch_snapshot_is_still_pytorchs(language):
    assert not course_made(load_recording(str(REAL)).snapshot)
    with lang.speaking(language):
        text = str(ar.doctor(str(REAL)))
    for words in PYTORCH_WORDS[language]:
        assert words in text, words
    assert COURSE_WORDS[language] not in text


# ------------------------------------------------------------------ the chapters print, never rewrite

LETTER = re.compile(r"[A-Za-z\u4e00-\u9fff]")


def _rewrites(source: str) -> list:
    """``x.replace("words", ...)`` and ``re.sub("words", ...)`` calls: text matched on its words."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args
                and node.func.attr in ("replace", "sub")):
            continue
        pattern = node.args[0]
        if isinstance(pattern, ast.Constant) and isinstance(pattern.value, str) and LETTER.search(pattern.value):
            found.append(ast.unparse(node)[:100])
    return found


def _code(path: Path) -> str:
    """The chapter's code cells (jupytext reads the .md the notebook is made from), magics left out."""
    cells = [c.source for c in jupytext.read(path).cells if c.cell_type == "code"]
    return "\n".join(line for cell in cells for line in cell.splitlines() if not line.lstrip().startswith(("%", "!")))


@pytest.mark.parametrize("path", sorted((ROOT / "chapters").glob("*.md")), ids=lambda p: p.stem)
def test_no_chapter_rewrites_a_tools_words(path):
    assert _rewrites(_code(path)) == []


def test_the_rewriter_is_gone_and_the_check_can_fail():
    assert "def course_made" not in (ROOT / "chapters" / "_course.py").read_text(encoding="utf-8")
    assert _rewrites('print(text.replace("at PyTorch\'s address", "at ours"))')
    assert _rewrites('import re\nre.sub("PyTorch", "ours", text)')
    assert not _rewrites('print(message.replace(". ", ".\\n"))')     # layout, not words
