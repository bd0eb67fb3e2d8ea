"""Grading a room: N learners x 1 lab, ``make autograde``'s whole path, one judge at a time and one per core.

    python -m benchmarks.bench_grading [--learners 40] [--lab 01]

Every fourth learner hands in one of the lab's known-wrong answers (labs/wrong, in turn, with the
solutions for the other exercises, as ``make rehearse`` does), the others the solutions; the course
is released once, then graded twice from the same submissions: ``parallel=1`` and ``parallel=cores``
(allocator_ref/labs/gradebook.autograde: nbgrader files the notebooks, serially; the judges and the
report runs, regrade.judge_all, in parallel).  Run as root, each submission runs as another user, as
``sudo make autograde`` does (a Python that user can run: workshop/learner_python.py).
Writes results/grading.json; every right learner must score full marks and every wrong one less, in
both runs, or the figures are void (``misgraded`` names them).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .common import REPO, write_result


def _grader_python() -> Path | None:
    """A Python the submissions' users can run, made in a folder of its own (returned, to remove after)."""
    if os.geteuid() == 0 and not os.environ.get("ALLOCATOR_REF_GRADER_PYTHON"):
        folder = Path(tempfile.mkdtemp(prefix="bench-python-"))
        folder.chmod(0o755)                         # the submissions' users run it
        made = subprocess.run([sys.executable, str(REPO / "workshop" / "learner_python.py")], capture_output=True,
                              text=True, check=True, env={**os.environ, "WORKSHOP_PYTHON_DIR": str(folder / "py")})
        os.environ["ALLOCATOR_REF_GRADER_PYTHON"] = made.stdout.strip().splitlines()[-1]
        return folder
    return None


WRONG_EVERY = 4                  # one learner in four hands in a known-wrong answer


def _graded_course(base: Path, lab: str, learners: int) -> tuple[Path, set]:
    """The released course with ``learners`` submissions; returns it and the wrong learners' names."""
    import nbformat
    from allocator_ref.labs import generate, gradebook, grading
    course = base
    released = grading.release(lab, course)
    _, solutions = generate.build(grading.source_for(lab))
    wrongs = gradebook._known_wrongs(released, int(lab))       # [(exercise id, answer cell, file)]
    wrong_learners = set()
    for n in range(learners):
        learner, answers = f"learner{n:02d}", solutions
        if n % WRONG_EVERY == WRONG_EVERY - 1:                  # the known-wrong answers, in turn
            ex_id, wrong, _ = wrongs[(n // WRONG_EVERY) % len(wrongs)]
            learner, answers = f"learner{n:02d}-wrong", {**solutions, ex_id: wrong}
            wrong_learners.add(learner)
        folder = course / "submitted" / learner / grading.assignment_name(lab)
        folder.mkdir(parents=True)
        nbformat.write(gradebook._answer_cells(released, answers), folder / released.name)
    return course, wrong_learners


def _time(made: tuple[Path, set], lab: str, parallel: int) -> tuple[float, list]:
    """Seconds of make autograde's path, and the learners scored otherwise than their answer deserves."""
    from nbgrader.api import Gradebook
    from allocator_ref.labs import gradebook, grading
    course, wrong = made
    started = time.perf_counter()
    gradebook.autograde(lab, course, parallel=parallel)
    took = time.perf_counter() - started
    name = grading.assignment_name(lab)
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", course_id=grading.COURSE_ID) as gb:
        top = gb.find_assignment(name).max_score
        misgraded = [s.student.id for s in gb.assignment_submissions(name)
                     if (s.score >= top) == (s.student.id in wrong)]
    return took, misgraded


def run(quick: bool = False, learners: int | None = None, lab: str = "01", out_dir=None) -> dict:
    os.environ.setdefault("ALLOCATOR_REF_DEVICE", "sim")
    os.environ.setdefault("MPLBACKEND", "Agg")
    made = _grader_python()
    learners = learners or (WRONG_EVERY if quick else 40)
    cores = os.cpu_count() or 1
    base = Path(tempfile.mkdtemp(prefix="bench-grading-"))
    try:
        # two courses released alike (a course folder names itself in its nbgrader_config.py: no copying)
        serial, short_serial = _time(_graded_course(base / "serial", lab, learners), lab, 1)
        parallel, short_parallel = _time(_graded_course(base / "parallel", lab, learners), lab, cores)
    finally:
        shutil.rmtree(base, ignore_errors=True)
        if made is not None:                        # the Python made for this run only
            shutil.rmtree(made, ignore_errors=True)
            os.environ.pop("ALLOCATOR_REF_GRADER_PYTHON", None)
    result = {"lab": lab, "learners": learners, "cores": cores, "runs_as_root": os.geteuid() == 0,
              "serial_s": round(serial, 1), "parallel_s": round(parallel, 1),
              "speedup": round(serial / parallel, 2), "per_learner_parallel_s": round(parallel / learners, 2),
              "wrong_learners": len([n for n in range(learners) if n % WRONG_EVERY == WRONG_EVERY - 1]),
              "misgraded": sorted(set(short_serial) | set(short_parallel))}
    write_result("grading", result, out_dir)
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--learners", type=int, default=None)
    parser.add_argument("--lab", default="01")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    print(run(args.quick, args.learners, args.lab))
