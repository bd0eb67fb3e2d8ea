"""A grade no submission can forge (issues 41 and 42): the recorded grade is judged apart.

Each attack below is an answer cell of a released lab 7 that makes every locked
``assert check(...).passed`` pass in the learner's own kernel, where nbgrader runs it.  What
`make autograde` records must still be 0 for each: the autograder judges every submission
again in processes of its own (allocator_ref/labs/regrade.py).
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import nbformat
import pytest

from allocator_ref.labs import gradebook
from allocator_ref.labs import generate, grading
from sandbox_helpers import use_grader_python

ROOT = Path(__file__).resolve().parents[1]
nbgrader_api = pytest.importorskip("nbgrader.api", reason="nbgrader is in the test extras: pip install nbgrader")

WRONG = '''
def peaks(snapshot):
    return {"peak_requested": 0, "peak_reserved": 0}

def largest_free_block(snapshot):
    return 0
'''

ATTACKS = {
    # The notebook's end of the pipe from the clean judge: every verdict comes back passed.
    "wrap receive": '''
import allocator_ref.labs.apart as _apart
_real_receive = _apart.receive
def _forged_receive(stream, *args, **kwargs):
    message = _real_receive(stream, *args, **kwargs)
    if message and "done" in message:
        for case in message["done"]["cases"]:
            case["passed"] = True
        message["done"]["explanation"] = ""
    return message
_apart.receive = _forged_receive
''',
    # The result object: every CheckResult says it passed.
    "patch the result": '''
from allocator_ref.labs import results as _results
_results.CheckResult.passed = property(lambda self: True)
''',
    # The judge's frame: on the first call, replace the clean process's stdout by a pipe that
    # holds a forged verdict.
    "patch the judge's stdout": '''
import json as _json, os as _os, struct as _struct, sys as _sys
def _forge():
    frame = _sys._getframe(1)
    while frame is not None and "proc" not in frame.f_locals:
        frame = frame.f_back
    if frame is None:
        return
    body = _json.dumps({"done": {"cases": [{"label": "forged", "hidden": False, "passed": True}],
                                 "explanation": ""}}).encode()
    r, w = _os.pipe()
    _os.write(w, _struct.pack(">I", len(body)) + body)
    _os.close(w)
    frame.f_locals["proc"].stdout = _os.fdopen(r, "rb")
_wrong_peaks, _wrong_largest = peaks, largest_free_block
def peaks(snapshot):
    _forge()
    return _wrong_peaks(snapshot)
def largest_free_block(snapshot):
    _forge()
    return _wrong_largest(snapshot)
''',
    # Issue 42: three lines, and every locked `assert check(...).passed` held.
    "rebind check": '''
class _Passed:
    passed = True
def check(*args, **kwargs):
    return _Passed()
''',
}


@pytest.mark.slow
def test_no_forged_pass_reaches_the_recorded_grade(tmp_path, monkeypatch):
    use_grader_python(monkeypatch)
    monkeypatch.setenv("ALLOCATOR_REF_DEVICE", "sim")
    monkeypatch.setenv("ALLOCATOR_REF_LAB_QUICK", "1")           # two hidden cases a check: the attacks need none
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.delenv("ALLOCATOR_REF_LAB_SEED", raising=False)
    monkeypatch.chdir(tmp_path)
    course = Path("course")
    assert grading.main(["release", "07", "--course", str(course)]) == 0
    release = next((course / "release" / "lab07").glob("*.ipynb"))
    _, solutions = generate.build(grading.source_for("07"))

    submissions = {"honest": solutions}
    for number, (name, attack) in enumerate(ATTACKS.items()):
        # the attack sits in the notebook's first answer cell; both exercises are wrong
        submissions[f"forger{number}"] = {"lab7.peaks": WRONG + attack, "lab7.largest_free": "pass"}
    for student, answers in submissions.items():
        nb = nbformat.read(release, as_version=4)
        for cell in nb.cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
            for ex_id, text in answers.items():
                if grade_id == f"{ex_id}-answer".replace(".", "-"):
                    cell.source = text
        folder = course / "submitted" / student / "lab07"
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / release.name)

    # what `make autograde LAB=07` runs (labs/gradebook.py)
    assert gradebook.main(["autograde", "07", "--course", str(course)]) == 0
    with nbgrader_api.Gradebook(f"sqlite:///{(course / 'gradebook.db').resolve()}",
                                course_id=grading.COURSE_ID) as gb:
        scores = {s: gb.find_submission("lab07", s).score for s in submissions}
    names = dict(zip([f"forger{i}" for i in range(len(ATTACKS))], ATTACKS))
    assert scores["honest"] == 2, scores
    forged = {names[s]: score for s, score in scores.items() if s != "honest" and score}
    assert not forged, f"forged grades recorded: {forged}"
    grades = (course / "grades.csv").read_text()
    assert "forger0" in grades


def test_the_autograder_reads_the_checks_from_the_instructors_copy_not_the_learners():
    """What regrade judges comes from source/ (parsed, never run): the exercise, the name judged, the seed."""
    from allocator_ref.labs import regrade
    nb = grading.graded_notebook(grading.source_for("02"), 77)
    checks = regrade.graded_checks(nb)
    assert [c.grade_id for c in checks] == [f"lab2-{n}-check" for n in
                                            ("round_size", "get_allocation_size", "should_split", "merge")]
    assert checks[0].calls[0] == {"key": "lab2-round_size-check/0", "exercise": "lab2.round_size",
                                  "expression": "round_size", "seed": 77, "hidden": None, "time_limit": None}
    # the learner's copy: its check cells become "take the named function here", nothing else of them runs
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade"):
            cell.source = "check = lambda *a, **k: None"           # a learner's edit of a locked cell
    cells = regrade.learner_cells(nb, checks)
    assert not any("check = lambda" in c.get("code", "") for c in cells)
    assert [c["take"] for c in cells if "take" in c][0] == [["lab2-round_size-check/0", "round_size"]]


def test_a_notebook_judged_apart_gets_the_verdicts_of_its_functions(tmp_path, monkeypatch):
    """judge_notebook without nbgrader: a right and a wrong function, a name never defined, and a
    cell that ends its own process before the checks."""
    from allocator_ref.labs import regrade
    use_grader_python(monkeypatch)
    monkeypatch.setenv("ALLOCATOR_REF_DEVICE", "sim")
    monkeypatch.setenv("ALLOCATOR_REF_LAB_QUICK", "1")
    _, solutions = generate.build(grading.source_for("07"))
    checks = [regrade.GradedCheck("a", 1, [{"key": "a/0", "exercise": "lab7.peaks", "expression": "peaks",
                                           "seed": 3, "hidden": None, "time_limit": None}]),
              regrade.GradedCheck("b", 1, [{"key": "b/0", "exercise": "lab7.largest_free",
                                           "expression": "largest_free_block", "seed": 3, "hidden": None,
                                           "time_limit": None}]),
              regrade.GradedCheck("c", 1, [{"key": "c/0", "exercise": "lab7.peaks", "expression": "nowhere",
                                           "seed": 3, "hidden": None, "time_limit": None}])]
    cells = [{"code": solutions["lab7.peaks"]}, {"take": [["a/0", "peaks"]]},
             {"code": WRONG.split("def largest")[0] + "def largest_free_block(s):\n    return 0\n"},
             {"take": [["b/0", "largest_free_block"]]}, {"take": [["c/0", "nowhere"]]}]
    verdicts = regrade.judge_notebook(cells, checks)
    assert verdicts["a/0"][0] is True, verdicts
    assert verdicts["b/0"][0] is False and verdicts["c/0"][0] is False, verdicts
    assert "did not define" in verdicts["c/0"][1] and "NameError" in verdicts["c/0"][1]

    ended = regrade.judge_notebook([{"code": "import os\nos._exit(3)"}] + cells, checks)
    assert not any(passed for passed, _ in ended.values())
    assert "ended before its cells had run" in ended["a/0"][1], ended


@pytest.mark.slow
def test_the_recorded_grade_stops_a_submission_that_switches_its_timer_off(tmp_path, monkeypatch):
    """In the learner's own kernel a submission may cancel check()'s timer (signal.setitimer(..., 0));
    the autograder's judge still ends it: it waits for each answer the case's limit plus a grace,
    then ends the submission's process, and the check fails as stopped."""
    from allocator_ref.labs import apart, regrade
    use_grader_python(monkeypatch)
    monkeypatch.setenv("ALLOCATOR_REF_DEVICE", "sim")
    code = ("import signal, time\n"
            "def peaks(snapshot):\n"
            "    signal.setitimer(signal.ITIMER_REAL, 0)\n"
            "    while True:\n"
            "        try:\n"
            "            time.sleep(0.2)\n"
            "        except BaseException:\n"
            "            pass\n")
    checks = [regrade.GradedCheck("a", 1, [{"key": "a/0", "exercise": "lab7.peaks", "expression": "peaks",
                                           "seed": 3, "hidden": None, "time_limit": 1}])]
    started = time.monotonic()
    verdicts = regrade.judge_notebook([{"code": code}, {"take": [["a/0", "peaks"]]}], checks)
    assert verdicts["a/0"][0] is False and "stopped after 1 s" in verdicts["a/0"][1], verdicts
    assert time.monotonic() - started < 1 + apart.REPLY_GRACE_S + 60
