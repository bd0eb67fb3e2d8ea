"""Graded labs with nbgrader: ``make nbgrader LAB=02`` builds the release, ``make autograde LAB=02`` grades.

    python -m allocator_ref.labs.grading release 02 [--course build/nbgrader]
    python -m allocator_ref.labs.grading collect 02 --homes workshop/.run/homes [--course build/nbgrader]
    python -m allocator_ref.labs.grading autograde 02 [--course build/nbgrader]

``release`` turns ``labs/source/lab02_*.md`` (the one source of a lab) into an nbgrader
course folder and runs ``nbgrader generate_assignment``:

* ``source/lab02/lab02_*.ipynb`` -- the autograder copy: solutions inside nbgrader's own
  ``### BEGIN SOLUTION`` markers, each exercise cell marked "Autograded answer", each
  ``check(...)`` cell turned into a locked "Autograder tests" cell worth one point:
  ``assert check("lab2.round_size", round_size, seed=<the assignment's seed>, graded=True).passed``
  (graded: judged in a clean process, see apart.py);
* ``release/lab02/lab02_*.ipynb`` -- what learners get: stubs, no solution text (this
  tool refuses to finish if any solution line is found in the release).

The graded seed rule: one seed per assignment, written into the locked check cells
(``assignment_seed``): the course setting ``lab_seed`` when it is a number, else a number
derived from the assignment name.  The hidden cases a learner runs in the released
notebook are exactly the ones the autograder runs: a learner's user name never matters.

Solutions are not part of the installed package (they live in ``labs/solutions.json`` in
the course folder), so a learner environment installed with ``pip install .`` (not a clone)
has no ``show_solution()`` to call.

The one path from the room to grades (labs/README.md, "Grading"):

    make nbgrader LAB=02                   release/lab02/ (and source/, readable by its owner only)
    WORKSHOP_GRADED=build/nbgrader make workshop     each learner finds ~/graded/lab02/lab02_*.ipynb
    make collect LAB=02                    copies every ~/graded/lab02/ into submitted/<learner>/lab02/
    make autograde LAB=02                  nbgrader autograde + export: grades.csv

``autograde`` first refuses any submission that is not a copy of the release (the self-paced
``labs/student`` copy has no nbgrader cells, and nbgrader would score it 0 without a word).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zlib
from collections import Counter
from pathlib import Path

import nbformat

from .. import settings
from . import generate

COURSE_DIR = generate.ROOT / "build" / "nbgrader"
COURSE_ID = "allocator-course"
GRADED_FOLDER = "graded"          # where the hub hands each learner the release (~/graded/labNN/)
# The locked cell imports check() itself: a learner's cell may have rebound the name `check`.
GRADED_IMPORT = "from allocator_ref.labs.check import check"
CHECK_LINE = re.compile(r"""^(\s*)check\(\s*(["'])(lab\d+\.\w+)\2\s*,\s*(.*?)\)\s*;?\s*$""")
CONFIG = '''# Written by `make nbgrader` (allocator_ref/labs/grading.py).
c = get_config()  # noqa: F821
c.CourseDirectory.root = {root!r}
c.CourseDirectory.course_id = {course!r}
c.ClearSolutions.code_stub = {{"python": 'raise NotImplementedError("write your solution here")'}}
c.ExecutePreprocessor.timeout = 900
c.Execute.timeout = 900
# A copy changed after its learner's due date scores 0 (allocator_ref/labs/due.py: the lab is closed).
c.LateSubmissionPlugin.penalty_method = "zero"
'''


class GradingError(RuntimeError):
    """The release could not be built safely; the message says what to do."""


def assignment_name(lab: str) -> str:
    return f"lab{int(lab):02d}"


def assignment_seed(assignment: str) -> int:
    """The one seed of a graded assignment: the course's numeric lab_seed, else derived from the name."""
    value = settings.get("lab_seed").value
    if value != "user":
        return int(value)
    return zlib.crc32(f"{COURSE_ID}:{assignment}".encode()) % 100_000


def source_for(lab: str) -> Path:
    matches = [p for p in generate.sources() if p.stem.startswith(assignment_name(lab) + "_")]
    if not matches:
        known = ", ".join(p.stem[3:5] for p in generate.sources())
        raise GradingError(f"no labs/source/{assignment_name(lab)}_*.md; labs: {known}")
    return matches[0]


def _meta(grade_id: str, *, solution: bool, grade: bool, locked: bool, points: int = 0) -> dict:
    meta = {"grade": grade, "grade_id": grade_id, "locked": locked, "schema_version": 3,
            "solution": solution, "task": False}
    if grade:
        meta["points"] = points
    return meta


def graded_notebook(path: Path, seed: int):
    """The nbgrader source notebook of one lab: marked cells, locked asserting checks, no instructor cells."""
    nb = generate.read_source(path)
    cells = []
    for cell in nb.cells:
        if generate.INSTRUCTOR_TAG in cell.get("metadata", {}).get("tags", []):
            continue
        if cell.cell_type == "code" and generate.has_region(cell.source):
            _, _, ids = generate.strip_regions(cell.source)
            cell.metadata["nbgrader"] = _meta(f"{ids[0]}-answer".replace(".", "-"), solution=True,
                                              grade=False, locked=False)
        elif cell.cell_type == "code" and any(CHECK_LINE.match(line) for line in cell.source.splitlines()):
            lines, ids = [], []
            for line in cell.source.splitlines():
                m = CHECK_LINE.match(line)
                if m:
                    indent, _, ex_id, args = m.groups()
                    args = re.sub(r",?\s*seed\s*=\s*[^,]+", "", args)
                    ids.append(ex_id)
                    if not ids[:-1]:
                        lines.append(f"{indent}{GRADED_IMPORT}")
                    line = (f"{indent}assert check({ex_id!r}, {args}, seed={seed}, graded=True).passed, "
                            f"\"{ex_id} does not pass yet: read the report above\"")
                lines.append(line)
            cell.source = "\n".join(lines)
            cell.metadata["nbgrader"] = _meta(f"{ids[0]}-check".replace(".", "-"), solution=False,
                                              grade=True, locked=True, points=len(ids))
        cells.append(cell)
    nb.cells = cells
    nb.metadata.pop("jupytext", None)
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    return nb


def _nbgrader(course: Path, *args: str) -> subprocess.CompletedProcess:
    # nbgrader runs its helper `alembic` from PATH: put this Python's scripts folder first.
    env = dict(os.environ, PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    proc = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise GradingError(f"nbgrader {' '.join(args)} failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return proc


def release(lab: str, course: Path = COURSE_DIR) -> Path:
    """Build source/ and release/ for one lab; return the released notebook."""
    path = source_for(lab)
    name, course = assignment_name(lab), course.resolve()
    course.mkdir(parents=True, exist_ok=True)
    (course / "nbgrader_config.py").write_text(CONFIG.format(root=str(course.resolve()), course=COURSE_ID))
    target = course / "source" / name
    target.mkdir(parents=True, exist_ok=True)
    nbformat.write(graded_notebook(path, assignment_seed(name)), target / (path.stem + ".ipynb"))
    _nbgrader(course, "generate_assignment", name, "--force")
    released = course / "release" / name / (path.stem + ".ipynb")
    _refuse_leaks(path, released)
    (course / "source").chmod(0o700)          # the autograder copies hold the solutions
    print(f"released {released} (seed {assignment_seed(name)}; autograder copy in {target})")
    return released


def _source_lines(nb) -> Counter:
    return Counter(line.strip() for cell in nb.cells for line in cell.source.splitlines() if line.strip())


def _refuse_leaks(path: Path, released: Path) -> None:
    """A solution line is a leak when the release holds it more often than the student copy does:
    the student copy (``make student``, proven free of solutions by the lab tests) already has the
    lab's prose and given code, which may share a line with a solution (``dev.fill(ptr, nbytes, 1)``)."""
    student, solutions = generate.build(path)
    given = _source_lines(student)
    shipped = _source_lines(nbformat.read(released, as_version=4))
    for ex_id, solution in solutions.items():
        for line in solution.splitlines():
            line = line.strip()
            if line and not line.startswith("#") and shipped[line] > given[line]:
                released.unlink()
                raise GradingError(
                    f"{released.name}: a line of {ex_id}'s solution is in the release ({line!r}) but not "
                    f"in the student copy, so the release was deleted. nbgrader left it outside the "
                    f"cleared answer: check {ex_id}'s exercise cell in {path.name} (its solution region "
                    f"must be inside the cell that has the '# exercise: {ex_id}' line)")


def _graded_cells(nb) -> set:
    return {c.metadata["nbgrader"]["grade_id"] for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("grade_id")}


def check_submissions(name: str, course: Path) -> list[Path]:
    """Every learner's folder holds the released notebook, and each is a copy of the release
    (its nbgrader cells), not the self-paced student copy, which nbgrader would score 0 without a word."""
    release_dir = course / "release" / name
    expected = sorted(release_dir.glob("*.ipynb"))
    if not expected:
        raise GradingError(f"no release for {name} in {course}: run make nbgrader LAB={name[3:]} first")
    ids = _graded_cells(nbformat.read(expected[0], as_version=4))
    folders = sorted(p for p in (course / "submitted").glob(f"*/{name}") if p.is_dir())
    if not folders:
        raise GradingError(f"no submissions: put each learner's notebook in {course}/submitted/<student>/{name}/ "
                           f"(make collect LAB={name[3:]} does it from the hub's homes)")
    found = []
    for folder in folders:
        submitted = folder / expected[0].name
        if not submitted.exists():
            there = ", ".join(p.name for p in folder.glob("*.ipynb")) or "nothing"
            raise GradingError(f"{folder}: no {expected[0].name} (found {there}); the file must keep "
                               "the released name")
        missing = ids - _graded_cells(nbformat.read(submitted, as_version=4))
        if missing:
            raise GradingError(
                f"{submitted} is not a copy of the release (it lacks the graded cells {sorted(missing)[:3]}): "
                f"it is probably labs/student/{submitted.name}, the self-paced copy, which nbgrader would "
                f"score 0. Hand out {expected[0]} (a graded workshop's hub does: WORKSHOP_GRADED), ask the "
                "learner to paste their answers into it, and collect that file")
        found.append(submitted)
    return found


def collect(lab: str, homes: Path, course: Path = COURSE_DIR) -> list[Path]:
    """Copy each learner's graded notebook (~/graded/labNN/, handed out by the hub) into
    submitted/<learner>/labNN/, where autograde reads it."""
    name, course, homes = assignment_name(lab), course.resolve(), homes.resolve()
    copied = []
    for notebook in sorted(homes.glob(f"*/{GRADED_FOLDER}/{name}/*.ipynb")):
        learner = notebook.parents[2].name
        dest = course / "submitted" / learner / name
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(notebook, dest / notebook.name)        # a plain copy: never follow the learner's links
        copied.append(dest / notebook.name)
    if not copied:
        raise GradingError(f"no ~/{GRADED_FOLDER}/{name}/*.ipynb in any home under {homes}: was the hub "
                           f"started with WORKSHOP_GRADED={course}?")
    print(f"collected {len(copied)} notebooks into {course / 'submitted'}")
    return copied


# nbgrader's autograde pass without its Execute step: it files each notebook and its cells into the
# gradebook and runs none of the learner's code as the instructor (nbgrader/converters/autograde.py,
# Autograde.autograde_preprocessors, 0.9: Execute first, then these).  The grade is a judge's and the
# learner's report their notebook run in a sandbox (regrade.py, sandbox.py).
NO_EXECUTION = tuple(f"--Autograde.autograde_preprocessors={p}" for p in (
    "nbgrader.preprocessors.IgnorePattern", "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput", "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties", "nbgrader.preprocessors.CheckCellMetadata"))


def autograde(lab: str, course: Path = COURSE_DIR) -> Path:
    name, course = assignment_name(lab), course.resolve()     # nbgrader runs in the course folder
    check_submissions(name, course)
    _nbgrader(course, "autograde", name, "--force", *NO_EXECUTION)
    # nbgrader ran none of the learners' code; the grade recorded is the one judged apart from every
    # submission, and each report the notebook run in a sandbox (regrade.py).
    from .regrade import record
    record(name, course, COURSE_ID)
    grades = course / "grades.csv"
    _nbgrader(course, "export", "--to", str(grades))
    print(f"grades: {grades}")
    return grades


def main(argv=None) -> int:
    from ..editions.cli_words import CourseParser, add_language_option, parse_in_language   # --help in the reader's language
    parser = CourseParser(prog="python -m allocator_ref.labs.grading", description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=["release", "collect", "autograde"])
    parser.add_argument("lab", help="the lab number, e.g. 02")
    parser.add_argument("--course", type=Path, default=COURSE_DIR, help="the nbgrader course folder")
    parser.add_argument("--homes", type=Path, help="collect: the hub's homes folder (WORKSHOP_HOMES)")
    add_language_option(parser)
    args = parse_in_language(parser, argv)
    try:
        if args.action == "collect":
            if args.homes is None:
                raise GradingError("collect needs --homes, the hub's WORKSHOP_HOMES folder")
            collect(args.lab, args.homes, args.course)
        else:
            (release if args.action == "release" else autograde)(args.lab, args.course)
    except (GradingError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
