"""Feedback is nbgrader's report of the learner's notebook, and nothing else (issue 57, item 3; issue 53, item 1).

A learner's answer cell copies the instructor's solutions (source/) and links to them into the
folder it runs in, where nbgrader's own run used to execute it (autograded/<learner>/labNN/, as
the instructor) and whence generate_feedback copied every file, following links, into the
learner's home.  Now nbgrader runs none of a learner's code; the notebook runs for the report in
the sandbox (as another user, in a scratch folder), and only the notebook's report goes back.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import nbformat
import pytest

from allocator_ref.labs import generate, gradebook, grading, sandbox
from sandbox_helpers import use_grader_python

pytest.importorskip("nbgrader.api", reason="nbgrader is in the test extras: pip install nbgrader")

LOOT = '''
import glob, os
for pattern in ("../../../source/*/*.ipynb", COURSE + "/source/*/*.ipynb", COURSE + "/submitted/*/*/*.ipynb"):
    for number, found in enumerate(glob.glob(pattern)):
        try:
            os.symlink(os.path.abspath(found), f"link{number}-{len(pattern)}.html")
            with open(found) as f:
                text = f.read()
            with open(f"loot{number}-{len(pattern)}.html", "w") as f:
                f.write(text)
            print(text)
        except OSError as exc:
            print("refused", exc)
with open(MARK, "w") as f:
    f.write(str(os.getuid()))
import subprocess
subprocess.Popen(["sleep", "600", TOKEN], start_new_session=True)     # left behind, holding what it inherited
'''


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="needs root, as `sudo make autograde` runs: not root, a submission runs as the "
                           "autograder's own user and can read what that user reads")
def test_feedback_hands_back_the_report_only_and_no_solution(tmp_path, monkeypatch):
    use_grader_python(monkeypatch)
    monkeypatch.setenv("ALLOCATOR_REF_DEVICE", "sim")
    course = tmp_path / "course"
    grading.release("01", course)
    release = course / "release" / "lab01" / "lab01_measure_it.ipynb"
    _, solutions = generate.build(grading.source_for("01"))
    secret = "BEGIN SOLUTION"                     # in the instructor's copy (source/) only
    adas = "# ada's own work, 7731"                 # in ada's notebook only
    marks = Path(tempfile.mkdtemp(prefix="loot-marks-"))
    marks.chmod(0o1777)
    first = next(iter(solutions))
    # The leftover names itself (sleep adds up its arguments: 600 s and a few microseconds): another
    # test grading on the other worker runs its submissions under the same numeric users.
    token = f"0.0000{os.getpid()}"
    attack = (LOOT.replace("COURSE", repr(str(course))).replace("MARK", repr(str(marks / "ran-as")))
              .replace("TOKEN", repr(token)))
    for who, answers in (("eve", {**solutions, first: solutions[first] + attack}),
                         ("ada", {**solutions, first: solutions[first] + "\n" + adas})):
        folder = course / "submitted" / who / "lab01"
        folder.mkdir(parents=True)
        nbformat.write(gradebook._answer_cells(release, answers), folder / release.name)

    assert gradebook.main(["autograde", "01", "--course", str(course)]) == 0
    assert int((marks / "ran-as").read_text()) >= sandbox.GRADER_UID_BASE      # never as root
    left = [pid for pid, (uid, argv) in _owners().items() if uid >= sandbox.GRADER_UID_BASE and token in argv]
    assert not left, f"processes the submission started outlived its grading: {left}"
    homes = tmp_path / "homes"
    for who in ("eve", "ada"):
        (homes / who).mkdir(parents=True)
    given = gradebook.feedback("01", course, homes)
    handed = sorted(p.name for p in (homes / "eve" / "graded" / "lab01" / "feedback").iterdir())
    assert handed == ["lab01_measure_it.html"], handed
    assert given["eve"] == [homes / "eve" / "graded" / "lab01" / "feedback" / "lab01_measure_it.html"]
    for path in (homes / "eve").rglob("*"):
        assert not path.is_symlink(), path
        assert path.is_dir() or not {secret, adas} & set(_found(path.read_text(errors="replace"))), path
    report = given["ada"][0].read_text()
    assert "cases pass" in report, "the report shows what check() said in the learner's run"


def _found(text: str) -> list:
    return [s for s in ("BEGIN SOLUTION", "# ada's own work, 7731") if s in text]


def _owners() -> dict:
    """{pid: (real uid, its arguments)} of every live process."""
    import re
    found = {}
    for entry in os.listdir("/proc"):
        try:
            status = Path(f"/proc/{entry}/status").read_text()
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if entry.isdigit() and "State:\tZ" not in status:
            found[int(entry)] = (int(re.search(r"^Uid:\s+(\d+)", status, re.M).group(1)), argv)
    return found
