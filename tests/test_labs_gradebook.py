"""The instructor's loop (allocator_ref/labs/gradebook.py): collect, autograde everyone, feedback,
rehearse, with submissions and grades readable by the instructor only.

The room test (tests/test_workshop_hub.py) runs the same loop with three real Unix learners and
tries to read another's work from inside a learner's kernel; here it runs on a scratch course.
"""
from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import nbformat
import pytest

from allocator_ref.labs import generate, gradebook, grading
from sandbox_helpers import use_grader_python

ROOT = Path(__file__).resolve().parents[1]
pytest.importorskip("nbgrader.api", reason="nbgrader is in the test extras: pip install nbgrader")


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_private_closes_grades_and_submissions_and_keeps_the_release_open(tmp_path):
    course = tmp_path / "course"
    for folder in ("release/lab01", "submitted/ada/lab01", "autograded/ada/lab01", "feedback/ada/lab01"):
        (course / folder).mkdir(parents=True)
        (course / folder / "lab01.ipynb").write_text("{}")
        (course / folder / "lab01.ipynb").chmod(0o644)
    for name in ("gradebook.db", "grades.csv"):
        (course / name).write_text("x")
        (course / name).chmod(0o644)
    assert gradebook.main(["private", "--course", str(course)]) == 0       # what make nbgrader runs after a release
    assert _mode(course) == 0o711                                   # passable to release/, not listable
    assert _mode(course / "release") & 0o005 == 0o005 and _mode(course / "release/lab01/lab01.ipynb") & 0o004
    for name in ("submitted", "autograded", "feedback"):
        assert all(_mode(p) & 0o077 == 0 for p in [course / name, *(course / name).rglob("*")]), name
    assert _mode(course / "gradebook.db") == _mode(course / "grades.csv") == 0o600


def test_collect_never_follows_a_learners_link(tmp_path):
    """A link in place of the notebook (to the solutions, or any file only root reads) is skipped,
    and so is a link in place of ~/graded/labNN."""
    homes, course = tmp_path / "homes", tmp_path / "course"
    secret = tmp_path / "solutions.ipynb"
    secret.write_text("the solutions")
    ada = homes / "ada" / "graded" / "lab01"
    ada.mkdir(parents=True)
    (ada / "lab01_measure_it.ipynb").write_text("ada's work")
    (ada / "stolen.ipynb").symlink_to(secret)
    (homes / "bob" / "graded").mkdir(parents=True)
    (homes / "bob" / "graded" / "lab01").symlink_to(ada)
    got = gradebook.collect("01", homes, course)
    assert got == [course / "submitted" / "ada" / "lab01" / "lab01_measure_it.ipynb"]
    assert got[0].read_text() == "ada's work" and _mode(got[0]) == 0o600
    assert not (course / "submitted" / "bob").exists()


@pytest.mark.slow
def test_autograde_grades_everyone_and_names_the_broken_ones(tmp_path, monkeypatch):
    """make autograde: one learner's broken file and another's self-paced copy stop nobody; the
    report names both with what to do; the right answer gets full marks; then make feedback hands
    each graded learner their own report, and grades and feedback stay the instructor's."""
    use_grader_python(monkeypatch)
    monkeypatch.setenv("ALLOCATOR_REF_DEVICE", "sim")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    course = tmp_path / "course"
    grading.release("01", course)
    release = course / "release" / "lab01" / "lab01_measure_it.ipynb"
    _, solutions = generate.build(grading.source_for("01"))
    folders = {who: course / "submitted" / who / "lab01" for who in ("ada", "bea", "cy")}
    for folder in folders.values():
        folder.mkdir(parents=True)
    nbformat.write(gradebook._answer_cells(release, solutions), folders["ada"] / release.name)
    (folders["bea"] / release.name).write_text('{"cells": [')                     # cut off mid-save
    shutil.copy(ROOT / "labs" / "student" / release.name, folders["cy"])        # the self-paced copy

    assert gradebook.main(["autograde", "01", "--course", str(course)]) == 1
    grades = (course / "grades.csv").read_text()
    assert "ada" in grades and _mode(course / "grades.csv") == 0o600
    _, broken = gradebook.autograde("01", course)
    assert set(broken) == {"bea", "cy"}
    assert "is not a notebook" in broken["bea"] and "save it again" in broken["bea"]
    assert "not a copy of the release" in broken["cy"] and str(release) in broken["cy"]
    scores, top = _score(course, "ada")
    assert scores == top >= 1

    homes = tmp_path / "homes"
    (homes / "ada").mkdir(parents=True)
    given = gradebook.feedback("01", course, homes)
    assert list(given) == ["ada"]
    report = given["ada"][0]
    assert report == homes / "ada" / "graded" / "lab01" / "feedback" / "lab01_measure_it.html"
    assert "lab01" in report.read_text() and _mode(report) & 0o077 == 0
    for name in ("submitted", "autograded", "feedback", "gradebook.db"):
        assert _mode(course / name) & 0o077 == 0, name


def _score(course: Path, who: str):
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", course_id=grading.COURSE_ID) as gb:
        return gb.find_submission("lab01", who).score, gb.find_assignment("lab01").max_score


@pytest.mark.slow
def test_rehearse_grades_a_right_and_a_wrong_submission(tmp_path, monkeypatch, capsys):
    use_grader_python(monkeypatch)
    monkeypatch.setenv("ALLOCATOR_REF_DEVICE", "sim")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.delenv("ALLOCATOR_REF_LAB_SEED", raising=False)
    assert gradebook.main(["rehearse", "01", "--course", str(tmp_path / "rehearsal")]) == 0
    said = capsys.readouterr().out
    assert "REHEARSAL lab01: right 2/2, wrong 1/2" in said, said[-2000:]


@pytest.mark.slow
def test_rehearse_tries_every_known_wrong_answer_of_a_lab(tmp_path, monkeypatch, capsys):
    """make rehearse LAB=09: the solutions and each of lab 9's known-wrong answers, one learner each."""
    use_grader_python(monkeypatch)                 # as make rehearse's GRADER_PYTHON prefix does, run as root
    monkeypatch.setenv("ALLOCATOR_REF_DEVICE", "sim")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.delenv("ALLOCATOR_REF_LAB_SEED", raising=False)
    wrong = sorted((ROOT / "labs" / "wrong").glob("lab9_*.py"))
    assert len(wrong) >= 2
    assert gradebook.main(["rehearse", "09", "--course", str(tmp_path / "rehearsal")]) == 0
    said = capsys.readouterr().out
    for path in wrong:
        assert f"wrong 0/1 (lab9.stranded, labs/wrong/{path.name})" in said, said[-2000:]
    assert "REHEARSAL lab09: right 1/1" in said and f"{len(wrong)} known-wrong answers tried" in said
    graded = {p.name for p in (tmp_path / "rehearsal" / "autograded").iterdir()}
    assert graded == {gradebook.RIGHT} | {gradebook._wrong_learner(p) for p in wrong}


def test_the_make_targets_exist():
    makefile = (ROOT / "Makefile").read_text()
    for target in ("collect", "autograde", "feedback", "rehearse"):
        assert f"\n{target}: $(STAMP)" in makefile and f"$(GRADEBOOK) {target}" in makefile, target


def test_collect_leaves_out_make_room_checks_test_learners(tmp_path, capsys):
    """make room-check logs in test learners who run lab 1 before the room arrives: their copies are
    not collected, so they are never graded nor exported; a learner named like them but not made so is."""
    import sys
    sys.path.insert(0, str(ROOT / "workshop"))
    room_check = pytest.importorskip("room_check", reason="workshop/room_check.py needs requests + websocket-client")
    homes, course = tmp_path / "homes", tmp_path / "course"
    names = [room_check.room_check_name(1), room_check.room_check_name(2), "ada", "roomcheck-fan"]
    for name in names:
        (homes / name / "graded" / "lab01").mkdir(parents=True)
        (homes / name / "graded" / "lab01" / "lab01_measure_it.ipynb").write_text(f"{name}'s work")
    got = gradebook.collect("01", homes, course)
    assert sorted(p.parents[1].name for p in got) == ["ada", "roomcheck-fan"]
    assert "left out 2 room-check test learners" in capsys.readouterr().out
