"""Graded labs, end to end with nbgrader: every lab released, then a stub, a right and a wrong
submission graded.

What an instructor does with `make nbgrader LAB=NN`, `make collect LAB=NN` and `make autograde
LAB=NN`, on a scratch course folder named relatively as the Makefile names it: the release holds no
solution, the check cells are locked asserts with the assignment's seed, the autograder gives the
stub 0, the solutions full marks and a known-wrong answer all but its check's points; a notebook
that is not a copy of the release is refused with what to do.
"""
from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import nbformat
import pytest
from sandbox_helpers import use_grader_python

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
        # check() re-imported first: the learner's cells may have rebound the name (issue 42)
        assert cell.metadata["nbgrader"]["locked"] and re.fullmatch(
            r"from allocator_ref\.labs\.check import check\n"
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


def _wrong_answer(release: Path, lab: int) -> tuple[str, str, int]:
    """(exercise id, a known-wrong answer's cell, the points its check cell is worth): the first
    labs/wrong file of the lab, its SUBMISSION renamed to what the released check cell passes."""
    nb = nbformat.read(release, as_version=4)
    for path in sorted((ROOT / "labs" / "wrong").glob(f"lab{lab}_*.py")):
        text = path.read_text()
        ex_id = re.search(r'^EXERCISE = "([^"]+)"', text, re.M).group(1)
        for cell in nb.cells:
            m = re.search(rf"check\('{re.escape(ex_id)}', (\w+)", cell.source)
            if m and cell.metadata.get("nbgrader", {}).get("grade"):
                return ex_id, re.sub(r"\bSUBMISSION\b", m.group(1), text), cell.metadata["nbgrader"]["points"]
    raise AssertionError(f"no known-wrong answer of lab {lab} matches a check cell of {release.name}")


LABS = sorted(p.stem[3:5] for p in generate.sources())


@pytest.mark.slow
@pytest.mark.parametrize("lab", LABS)
def test_every_lab_releases_and_grades_a_stub_a_right_and_a_wrong_submission(lab, tmp_path, monkeypatch):
    """make nbgrader LAB=NN on the unmodified course, then make autograde LAB=NN with nbgrader's
    own gradebook: the untouched release 0, the solutions full marks, one known-wrong answer
    loses exactly the points of its check cell."""
    use_grader_python(monkeypatch)
    monkeypatch.setenv("ALLOCATOR_REF_DEVICE", "sim")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.delenv("ALLOCATOR_REF_LAB_SEED", raising=False)
    monkeypatch.chdir(tmp_path)
    course = Path("course")                        # relative, as the Makefile's NBGRADER_DIR is
    assert grading.main(["release", lab, "--course", str(course)]) == 0
    name = grading.assignment_name(lab)
    release = next((course / "release" / name).glob("*.ipynb"))

    solutions = _solution_cells(grading.source_for(lab))
    shipped = "\n".join(c.source for c in nbformat.read(release, as_version=4).cells)
    student, _ = generate.build(grading.source_for(lab))
    given = "\n".join(c.source for c in student.cells)
    for ex_id, solution in solutions.items():      # no solution line in what learners get
        leaked = [ln for ln in solution.splitlines()
                  if len(ln.strip()) > 20 and not ln.strip().startswith("#")
                  and ln.strip() in shipped and ln.strip() not in given]
        assert not leaked, (ex_id, leaked)
    assert f"seed={grading.assignment_seed(name)}" in shipped
    assert (course / "source").stat().st_mode & 0o077 == 0          # the solutions: owner only

    ex_id, wrong, points = _wrong_answer(release, int(lab))
    _submit(release, course, "alice", {})                                  # the untouched stubs
    _submit(release, course, "bob", solutions)                             # right
    _submit(release, course, "carol", {**solutions, ex_id: wrong})         # one plausible mistake
    # As in a whole suite run, where an earlier test used multiprocessing: the autograder's process
    # holds a resource tracker, and its judges (forks that close every inherited fd) must not use it.
    from multiprocessing import resource_tracker
    resource_tracker.ensure_running()
    assert grading.main(["autograde", lab, "--course", str(course)]) == 0

    with nbgrader_api.Gradebook(f"sqlite:///{(course / 'gradebook.db').resolve()}",
                                course_id=grading.COURSE_ID) as gb:
        scores = {s: gb.find_submission(name, s).score for s in ("alice", "bob", "carol")}
        max_score = gb.find_assignment(name).max_score
    assert max_score == sum(1 for _ in solutions) >= 1
    assert scores == {"alice": 0, "bob": max_score, "carol": max_score - points}, (ex_id, scores)
    grades = (course / "grades.csv").read_text()
    assert all(s in grades for s in ("alice", "bob", "carol"))


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    course = tmp_path_factory.mktemp("graded") / "course"
    grading.release("01", course)
    return course


def test_autograde_refuses_the_self_paced_copy_and_says_what_to_do(released, tmp_path):
    course = tmp_path / "course"
    shutil.copytree(released, course)
    folder = course / "submitted" / "dana" / "lab01"
    folder.mkdir(parents=True)
    shutil.copy(ROOT / "labs" / "student" / "lab01_measure_it.ipynb", folder)   # what the hub's learners had
    with pytest.raises(grading.GradingError) as err:
        grading.autograde("01", course)
    said = str(err.value)
    assert "not a copy of the release" in said and "labs/student/lab01_measure_it.ipynb" in said
    assert str(course / "release" / "lab01" / "lab01_measure_it.ipynb") in said
    assert not (course / "grades.csv").exists()


def test_autograde_refuses_a_renamed_notebook(released, tmp_path):
    course = tmp_path / "course"
    shutil.copytree(released, course)
    folder = course / "submitted" / "eve" / "lab01"
    folder.mkdir(parents=True)
    shutil.copy(course / "release" / "lab01" / "lab01_measure_it.ipynb", folder / "my lab.ipynb")
    with pytest.raises(grading.GradingError, match="no lab01_measure_it.ipynb .found my lab.ipynb."):
        grading.autograde("01", course)


def test_collect_takes_each_learners_handed_out_copy_from_the_homes(released, tmp_path):
    """The room's path: the hub hands out release/ into ~/graded (workshop/pull.py hand_out),
    collect copies every learner's into submitted/, where autograde reads them."""
    sys.path.insert(0, str(ROOT / "workshop"))
    from pull import hand_out
    homes = tmp_path / "homes"
    for learner in ("fay", "gus"):
        given = hand_out(released / "release", homes / learner)
        assert [p.relative_to(homes / learner).as_posix() for p in given] == \
            ["graded/lab01/lab01_measure_it.ipynb"]
    started = homes / "fay" / "graded" / "lab01" / "lab01_measure_it.ipynb"
    started.write_text(started.read_text().replace("write your solution here", "fay's work"))
    assert hand_out(released / "release", homes / "fay") == []             # started work is kept
    course = tmp_path / "course"
    shutil.copytree(released, course)
    assert grading.main(["collect", "01", "--homes", str(homes), "--course", str(course)]) == 0
    got = course / "submitted" / "fay" / "lab01" / "lab01_measure_it.ipynb"
    assert "fay's work" in got.read_text()
    assert len(grading.check_submissions("lab01", course)) == 2
    assert grading.main(["collect", "01", "--course", str(course)]) == 1     # --homes is needed


def test_the_make_targets_exist():
    makefile = (ROOT / "Makefile").read_text()
    for target in ("nbgrader:", "autograde:", "check-labs:", "student:"):
        assert re.search(rf"^{target}", makefile, re.M), f"make {target[:-1]} is missing"
