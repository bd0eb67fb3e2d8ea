"""make check-labs (allocator_ref/labs/verify.py) catches, each with a line that says how to fix it:
an exercise marked neither pure nor observed, the guide's prose lists out of step with the marks,
and stale student copies.  Each mistake is made on purpose, on a copy, never in the checkout."""
from __future__ import annotations

import dataclasses
import importlib
import shutil
from pathlib import Path

from allocator_ref.labs import generate, verify

check = importlib.import_module("allocator_ref.labs.check")   # the module, not the function

ROOT = Path(__file__).resolve().parents[1]
GUIDE = (ROOT / "labs" / "README.md").read_text()


def test_the_course_as_it_is_has_none_of_these_problems():
    assert verify.apart_problems() == [] and verify.student_copy_problems() == []


def test_an_exercise_marked_neither_pure_nor_observed_is_named_with_the_fix(monkeypatch):
    check._load_all()
    ex = check.EXERCISES["lab2.round_size"]
    monkeypatch.setitem(check.EXERCISES, ex.id, dataclasses.replace(ex, pure=False, observed=False))
    problems = verify.apart_problems()
    assert any(p.startswith("lab2.round_size: marked neither pure nor observed") and "pure=True" in p
               and "allocator_ref/labs/lab2.py" in p for p in problems), problems
    # and the guide, which still lists it as pure, is out of step
    assert any("'(pure: ...)' list names lab2.round_size" in p for p in problems), problems


def test_the_guides_prose_list_must_name_each_marked_exercise():
    without = GUIDE.replace("lab7.peaks,", "", 1)
    assert without != GUIDE
    assert any(p == "labs/README.md: add lab7.peaks to the '(pure: ...)' list" for p in verify.apart_problems(without))
    gone = GUIDE.replace("(observed:", "(watched:", 1)
    assert any("no '(observed: ...)' list" in p for p in verify.apart_problems(gone))


def test_a_stale_student_copy_is_named_with_make_student(tmp_path, monkeypatch):
    student = tmp_path / "student"
    shutil.copytree(generate.STUDENT_DIR, student)
    copy = student / "lab03_fix_the_race.ipynb"
    copy.write_text(copy.read_text().replace("write your solution here", "an old stub"))
    monkeypatch.setattr(generate, "STUDENT_DIR", student)
    problems = verify.student_copy_problems()
    assert any("lab03_fix_the_race.ipynb: stale" in p and "run `make student`" in p for p in problems), problems
