"""`sudo make feedback LAB=01` exactly as the guides write it (workshop/README.md, labs/README.md).

The guide's commands name no course folder and no homes: the defaults must work.  Feedback writes
each report into a home *as its learner*, from /, so the default homes path must be absolute (issue
53: it was relative, and `sudo make feedback LAB=NN` exited 2 with "mkdir: cannot create directory").
Run on a scratch copy of the course's Makefile, with a real Unix learner (`nobody`) owning a home
under the default workshop/.run/homes.
"""
from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest

from allocator_ref.labs import grading

ROOT = Path(__file__).resolve().parents[1]
pytest.importorskip("nbgrader.api", reason="nbgrader is in the test extras: pip install nbgrader")
if os.getuid() != 0:
    pytest.skip("the guide runs feedback with sudo (it writes as each learner): run as root (CI does)",
                allow_module_level=True)


@pytest.mark.slow
def test_make_feedback_as_the_guide_writes_it_hands_the_report_to_its_learner():
    learner = pwd.getpwnam("nobody")
    scratch = Path(tempfile.mkdtemp(prefix="workshop-feedback-"))     # learners must reach their home
    scratch.chmod(0o755)
    try:
        shutil.copy(ROOT / "Makefile", scratch / "Makefile")
        for name in ("pyproject.toml", ".venv"):
            (scratch / name).symlink_to(ROOT / name)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "ALLOCATOR_REF_DEVICE": "sim", "MPLBACKEND": "Agg"}
        for name in ("NBGRADER_DIR", "WORKSHOP_HOMES"):
            env.pop(name, None)
        # what make nbgrader, the hub's hand-out, make collect and make autograde leave behind, for a
        # one-cell lab 1 (the real labs' grading is tests/test_labs_grading.py's): nbgrader's own steps
        course = scratch / "build" / "nbgrader"
        (course / "source" / "lab01").mkdir(parents=True)
        (course / "nbgrader_config.py").write_text(grading.CONFIG.format(root=str(course), course=grading.COURSE_ID))
        answer = nbformat.v4.new_code_cell("def answer():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION")
        answer.metadata["nbgrader"] = grading._meta("answer", solution=True, grade=False, locked=False)
        test = nbformat.v4.new_code_cell("assert answer() == 1")
        test.metadata["nbgrader"] = grading._meta("answer-check", solution=False, grade=True, locked=True, points=1)
        name = "lab01_measure_it.ipynb"
        nbformat.write(nbformat.v4.new_notebook(cells=[answer, test], metadata={"kernelspec": {
            "display_name": "Python 3", "language": "python", "name": "python3"}}), course / "source/lab01" / name)
        grading._nbgrader(course, "generate_assignment", "lab01", "--force")
        submitted = course / "submitted" / learner.pw_name / "lab01"
        submitted.mkdir(parents=True)
        shutil.copy(course / "release/lab01" / name, submitted / name)
        grading._nbgrader(course, "autograde", "lab01", "--force")
        homes = scratch / "workshop/.run/homes"
        home = homes / learner.pw_name
        home.mkdir(parents=True)
        homes.chmod(0o711)
        os.chown(home, learner.pw_uid, learner.pw_gid)
        home.chmod(0o700)

        out = subprocess.run(["make", "--no-print-directory", "feedback", "LAB=01"], cwd=scratch, env=env,
                             capture_output=True, text=True, timeout=600)        # sudo make feedback LAB=01
        assert out.returncode == 0, f"{out.stdout[-2000:]}\n{out.stderr[-2000:]}"
        report = home / "graded" / "lab01" / "feedback" / "lab01_measure_it.html"
        assert report.is_file(), out.stdout[-2000:]
        assert report.stat().st_uid == learner.pw_uid and report.stat().st_mode & 0o077 == 0
        assert "lab01" in report.read_text()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
