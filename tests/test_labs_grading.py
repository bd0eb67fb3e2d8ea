"""Graded labs, end to end with nbgrader: release, then a stub, a right and a wrong submission graded.

What an instructor does with `make nbgrader LAB=07` and `make autograde LAB=07`, on a scratch
course folder: the release holds no solution, the check cells are locked asserts with the
assignment's seed, and the autograder gives 0, 2 and 1 of 2 points.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import nbformat
import pytest

from allocator_ref.labs import generate, grading

ROOT = Path(__file__).resolve().parents[1]
nbgrader_api = pytest.importorskip("nbgrader.api", reason="nbgrader is in the test extras: pip install nbgrader")


def test_graded_seed_is_fixed_per_assignment_and_follows_a_numeric_course_seed(monkeypatch):
    monkeypatch.setenv("ALLOCATOR_REF_LAB_SEED", "user")
    a, b = grading.assignment_seed("lab02"), grading.assignment_seed("lab03")
    assert a == grading.assignment_seed("lab02") and a != b
    monkeypatch.setenv("USER", "someone-else")                  # the grader's user name never matters
    assert grading.assignment_seed("lab02") == a
    monkeypatch.setenv("ALLOCATOR_REF_LAB_SEED", "4242")
    assert grading.assignment_seed("lab02") == 4242


def test_graded_notebook_locks_asserting_checks_with_the_assignment_seed():
    nb = grading.graded_notebook(grading.source_for("02"), 77)
    answers = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]
    tests = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
    assert len(answers) == len(tests) == 4
    for cell in tests:
        assert cell.metadata["nbgrader"]["locked"] and re.fullmatch(
            r"assert check\('lab2\.\w+', \w+, seed=77, graded=True\)\.passed, .*", cell.source), cell.source
    assert all(generate.INSTRUCTOR_TAG not in c.metadata.get("tags", []) for c in nb.cells)


def test_an_unknown_lab_is_refused_with_the_list():
    with pytest.raises(grading.GradingError, match="labs: 01"):
        grading.source_for("42")


def _solution_cells(source: Path) -> dict:
    _, solutions = generate.build(source)
    return solutions


def _submit(release: Path, course: Path, student: str, replace: dict) -> None:
    nb = nbformat.read(release, as_version=4)
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
        for ex_id, text in replace.items():
            if grade_id == f"{ex_id}-answer".replace(".", "-"):
                cell.source = text
    folder = course / "submitted" / student / release.parent.name
    folder.mkdir(parents=True)
    nbformat.write(nb, folder / release.name)


@pytest.mark.slow
def test_release_then_autograde_a_stub_a_right_and_a_wrong_submission(tmp_path, monkeypatch):
    monkeypatch.setenv("ALLOCATOR_REF_DEVICE", "sim")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.delenv("ALLOCATOR_REF_LAB_SEED", raising=False)
    course = tmp_path / "course"
    assert grading.main(["release", "07", "--course", str(course)]) == 0
    release = next((course / "release" / "lab07").glob("*.ipynb"))

    source = grading.source_for("07")
    solutions = _solution_cells(source)
    text = release.read_text()
    for solution in solutions.values():            # no solution body in what learners get
        body = [ln for ln in solution.splitlines() if len(ln.strip()) > 20 and not ln.strip().startswith(("#", "def"))]
        assert body and not any(ln in text for ln in body)
    assert f"seed={grading.assignment_seed('lab07')}" in text

    wrong = (ROOT / "labs" / "wrong" / "lab7_peaks_requested_at_free_requested.py").read_text()
    wrong = "# exercise: lab7.peaks\n" + wrong.replace("def SUBMISSION(", "def peaks(")
    _submit(release, course, "alice", {})                                  # the untouched stubs
    _submit(release, course, "bob", solutions)                             # right
    _submit(release, course, "carol", {**solutions, "lab7.peaks": wrong})  # one plausible mistake
    assert grading.main(["autograde", "07", "--course", str(course)]) == 0

    with nbgrader_api.Gradebook(f"sqlite:///{course / 'gradebook.db'}", course_id=grading.COURSE_ID) as gb:
        scores = {s: gb.find_submission("lab07", s).score for s in ("alice", "bob", "carol")}
        max_score = gb.find_assignment("lab07").max_score
    assert max_score == 2
    assert scores == {"alice": 0, "bob": 2, "carol": 1}, scores
    assert "carol" in (course / "grades.csv").read_text()


def test_the_make_targets_exist():
    makefile = (ROOT / "Makefile").read_text()
    for target in ("nbgrader:", "autograde:", "check-labs:", "student:"):
        assert re.search(rf"^{target}", makefile, re.M), f"make {target[:-1]} is missing"
