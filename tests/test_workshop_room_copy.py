"""A graded room's learners pull a copy of the course without its solutions (workshop/room_copy.py).

What a learner of a graded room gets is what the hub's pull (workshop/pull.py, nbgitpuller) clones
from WORKSHOP_GRADED/course.git, the repository `make nbgrader` publishes: these tests publish from a
scratch commit of this course, pull it as the hub does, and look for solutions in the learner's
copy, in its files and in every object of its history.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workshop"))
room_copy = pytest.importorskip("room_copy")
pull = pytest.importorskip("pull", reason="workshop/pull.py needs nbgitpuller (pip install '.[workshop]')")

if subprocess.run(["git", "--version"], capture_output=True).returncode != 0:
    pytest.skip("git is needed to publish the room's course", allow_module_level=True)


def _git(*args, cwd):
    return subprocess.run(["git", "-c", "user.name=instructor", "-c", "user.email=i@example.org", *args],
                          cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """This course's HEAD as a fresh one-commit checkout (git archive: a shallow CI clone works too)."""
    src = tmp_path_factory.mktemp("course") / "course"
    src.mkdir()
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive.stdout, check=True)
    _git("init", "-q", "-b", "main", cwd=src)
    _git("add", "-A", cwd=src)
    _git("commit", "-q", "-m", "the course", cwd=src)
    return src


def _course_folder(tmp_path: Path) -> Path:
    course = tmp_path / "nbgrader"
    (course / "release" / "lab02").mkdir(parents=True)        # what make nbgrader made before
    return course


def _every_path_in_history(repo: Path) -> set[str]:
    names = _git("log", "--all", "--format=", "--name-only", cwd=repo)
    return {line for line in names.splitlines() if line}


def test_a_learners_copy_in_a_graded_room_has_no_solutions(checkout, tmp_path):
    assert (checkout / "labs" / "solutions.json").exists()     # the instructor's checkout has them
    published = room_copy.publish(_course_folder(tmp_path), root=checkout)
    copy = pull.pull_course(str(published), "main", tmp_path / "home")       # as the hub pulls it
    assert (copy / "labs" / "student" / "lab02_build_the_core.ipynb").exists()
    assert (copy / "allocator_ref" / "labs" / "check.py").exists()
    for name in room_copy.LEFT_OUT:
        assert not (copy / name).exists(), name
    history = _every_path_in_history(copy)
    assert not {p for p in history if p == "labs/solutions.json" or p.startswith(("labs/source/", "tests/"))}
    # no file of the copy holds a whole solution (the lines the student copy lacks)
    solutions = room_copy.solution_lines(checkout)
    assert len(solutions) >= 20 and all(solutions.values())
    files = {str(p.relative_to(copy)): p.read_text(errors="replace") for p in copy.rglob("*")
             if p.is_file() and ".git" not in p.parts}
    assert room_copy.leaks(files, solutions) == []
    # and show_solution() in the learner's copy has nothing to show
    out = subprocess.run([sys.executable, "-c", "from allocator_ref.labs import show_solution; "
                          "show_solution('lab2.round_size')"], cwd=copy, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(copy), "MPLBACKEND": "Agg"})
    assert out.returncode != 0 and "no solutions here" in out.stderr, out.stderr[-500:]
    solution = json.loads((checkout / "labs" / "solutions.json").read_text())["lab2.round_size"]
    assert solution.strip().splitlines()[-1].strip() not in out.stdout


def test_the_scan_finds_a_solution_in_a_file_the_list_does_not_name(checkout, tmp_path):
    """Every known path is left out; a solution pasted elsewhere stops the publish, named."""
    solutions = room_copy.solution_lines(checkout)
    full = {str(p.relative_to(checkout)): p.read_text(errors="replace")
            for p in (checkout / "labs").rglob("*") if p.is_file()}
    assert any("labs/solutions.json holds lab2.round_size's solution" == line
               for line in room_copy.leaks(full, solutions))
    work = tmp_path / "work"
    _git("clone", "-q", str(checkout), str(work), cwd=tmp_path)
    text = json.loads((checkout / "labs" / "solutions.json").read_text())["lab2.should_split"]
    (work / "notes").mkdir()
    (work / "notes" / "answers.py").write_text(text)
    _git("add", "-A", cwd=work)
    _git("commit", "-q", "-m", "notes", cwd=work)
    course = _course_folder(tmp_path)
    with pytest.raises(room_copy.RoomCopyError, match=r"notes/answers.py holds lab2.should_split's solution"):
        room_copy.publish(course, root=work)
    assert not (course / room_copy.ROOM_REPO).exists()            # nothing published


def test_a_republish_is_a_fast_forward_that_keeps_the_learners_edit(checkout, tmp_path):
    """A fix mid-workshop: make nbgrader again; the learner's re-pull brings it and keeps their edit."""
    work = tmp_path / "work"
    _git("clone", "-q", str(checkout), str(work), cwd=tmp_path)
    course = _course_folder(tmp_path)
    published = room_copy.publish(course, root=work)
    first = _git("--git-dir", str(published), "rev-parse", "main", cwd=tmp_path).strip()
    copy = pull.pull_course(str(published), "main", tmp_path / "home")
    (copy / "README.md").write_text((copy / "README.md").read_text() + "\nmy notes\n")   # the learner's edit
    (work / "ERRATA.md").write_text("lab 2: read 'best fit' for 'first fit'\n")
    _git("add", "ERRATA.md", cwd=work)
    _git("commit", "-q", "-m", "errata", cwd=work)
    room_copy.publish(course, root=work)
    second = _git("--git-dir", str(published), "rev-parse", "main", cwd=tmp_path).strip()
    assert second != first
    assert _git("--git-dir", str(published), "rev-parse", "main^", cwd=tmp_path).strip() == first
    # the room's history is its own: the instructor's commits are not in it
    assert _git("--git-dir", str(published), "rev-list", "--count", "main", cwd=tmp_path).strip() == "2"
    pull.pull_course(str(published), "main", tmp_path / "home")
    assert "best fit" in (copy / "ERRATA.md").read_text()
    assert "my notes" in (copy / "README.md").read_text()
    assert not (copy / "labs" / "solutions.json").exists()
    # publishing the same commit again makes no new commit
    room_copy.publish(course, root=work)
    assert _git("--git-dir", str(published), "rev-parse", "main", cwd=tmp_path).strip() == second


def test_a_room_repository_with_solutions_is_named(checkout, tmp_path):
    """What the hub asks before a graded room starts (jupyterhub_config.py refuses such a WORKSHOP_REPO)."""
    assert room_copy.holds_solutions(str(checkout), "main")
    published = room_copy.publish(_course_folder(tmp_path), root=checkout)
    assert not room_copy.holds_solutions(str(published), "main")


def test_without_a_release_it_says_what_to_run(checkout, tmp_path):
    with pytest.raises(room_copy.RoomCopyError, match="make nbgrader LAB=NN"):
        room_copy.publish(tmp_path / "empty", root=checkout)
    out = subprocess.run([sys.executable, str(ROOT / "workshop" / "room_copy.py"), str(tmp_path / "empty")],
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 1 and out.stderr.count("\n") == 1 and "make nbgrader" in out.stderr


def test_make_nbgrader_publishes_the_rooms_course():
    out = subprocess.run(["make", "-n", "-W", "pyproject.toml", "nbgrader", "LAB=02", "NBGRADER_DIR=/srv/c"],
                         cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "workshop/room_copy.py /srv/c" in out.stdout
