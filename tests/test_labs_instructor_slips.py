"""An instructor's slip in a lab source is one line saying where and what to do, and nothing is written.

Issue 53: a missing '# exercise:' line or a typo in an id was a 15-20 line traceback with the useful
line last.  Each test edits a copy of lab 9's source the way the slip happens, then runs what the
guide says to run next (make student: generate.main; make check-labs: verify.main).
"""
from __future__ import annotations

import shutil

import pytest

from allocator_ref.labs import generate, verify


@pytest.fixture
def sources(tmp_path, monkeypatch):
    """A scratch labs/ holding lab 9's source: make student writes only there."""
    folder = tmp_path / "source"
    folder.mkdir()
    shutil.copy(generate.SOURCE_DIR / "lab09_casebook.md", folder)
    monkeypatch.setattr(generate, "SOURCE_DIR", folder)
    monkeypatch.setattr(generate, "STUDENT_DIR", tmp_path / "student")
    monkeypatch.setattr(generate, "SOLUTIONS", tmp_path / "solutions.json")
    monkeypatch.setattr(generate, "ROOT", tmp_path)
    return folder / "lab09_casebook.md"


def _edit(path, old, new):
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def _one_error_line(capsys) -> str:
    said = capsys.readouterr()
    lines = [line for line in said.err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in said.err + said.out, said.err
    return lines[0]


def test_a_missing_exercise_line_is_one_line(sources, capsys, tmp_path):
    _edit(sources, "# exercise: lab9.stranded\n", "")
    assert generate.main([]) == 1
    line = _one_error_line(capsys)
    assert line.startswith("error: ") and "lab09_casebook.md cell" in line
    assert "needs exactly one '# exercise: <id>' line (found none)" in line and "make student" in line
    assert not (tmp_path / "student").exists() and not (tmp_path / "solutions.json").exists()
    assert verify.main(["--lab", "9"]) == 1                      # make check-labs says the same line
    assert "needs exactly one '# exercise: <id>' line" in _one_error_line(capsys)


def test_a_typo_in_an_exercise_id_is_one_line_with_the_id_it_meant(sources, capsys, tmp_path):
    _edit(sources, "# exercise: lab9.stranded\n", "# exercise: lab9.strandd\n")
    assert generate.main([]) == 1
    line = _one_error_line(capsys)
    assert "'# exercise: lab9.strandd' names no registered exercise: did you mean lab9.stranded?" in line
    assert not (tmp_path / "student").exists() and not (tmp_path / "solutions.json").exists()


def test_the_unmodified_source_generates(sources, capsys, tmp_path):
    assert generate.main([]) == 0
    assert (tmp_path / "student" / "lab09_casebook.ipynb").exists()
    assert "lab9.stranded" in (tmp_path / "solutions.json").read_text()
