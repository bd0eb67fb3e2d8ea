"""Graded labs with nbgrader: ``make nbgrader LAB=02`` builds the release, ``make autograde LAB=02`` grades.

    python -m allocator_ref.labs.grading release 02 [--course build/nbgrader]
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

``autograde`` runs ``nbgrader autograde`` on ``submitted/<student>/lab02/`` and writes
``grades.csv`` (``nbgrader export``).
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import zlib
from pathlib import Path

import nbformat

from .. import settings
from . import generate

COURSE_DIR = generate.ROOT / "build" / "nbgrader"
COURSE_ID = "allocator-course"
CHECK_LINE = re.compile(r"""^(\s*)check\(\s*(["'])(lab\d+\.\w+)\2\s*,\s*(.*?)\)\s*;?\s*$""")
CONFIG = '''# Written by `make nbgrader` (allocator_ref/labs/grading.py).
c = get_config()  # noqa: F821
c.CourseDirectory.root = {root!r}
c.CourseDirectory.course_id = {course!r}
c.ClearSolutions.code_stub = {{"python": 'raise NotImplementedError("write your solution here")'}}
c.ExecutePreprocessor.timeout = 900
c.Execute.timeout = 900
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
    name = assignment_name(lab)
    course.mkdir(parents=True, exist_ok=True)
    (course / "nbgrader_config.py").write_text(CONFIG.format(root=str(course.resolve()), course=COURSE_ID))
    target = course / "source" / name
    target.mkdir(parents=True, exist_ok=True)
    nbformat.write(graded_notebook(path, assignment_seed(name)), target / (path.stem + ".ipynb"))
    _nbgrader(course, "generate_assignment", name, "--force")
    released = course / "release" / name / (path.stem + ".ipynb")
    _refuse_leaks(path, released)
    print(f"released {released} (seed {assignment_seed(name)}; autograder copy in {target})")
    return released


def _refuse_leaks(path: Path, released: Path) -> None:
    text = released.read_text()
    _, solutions = generate.build(path)
    for ex_id, solution in solutions.items():
        for line in solution.splitlines():
            line = line.strip()
            if len(line) > 12 and not line.startswith(("#", "def ", "class ", '"""', "return")) and line in text:
                released.unlink()
                raise GradingError(f"{released.name}: solution text of {ex_id} in the release ({line!r}); "
                                   "keep solutions between ### BEGIN SOLUTION / ### END SOLUTION")


def autograde(lab: str, course: Path = COURSE_DIR) -> Path:
    name = assignment_name(lab)
    if not (course / "submitted").is_dir():
        raise GradingError(f"no submissions: put each learner's notebook in {course}/submitted/<student>/{name}/")
    _nbgrader(course, "autograde", name, "--force")
    _nbgrader(course, "export", "--to", str(course / "grades.csv"))
    print(f"grades: {course / 'grades.csv'}")
    return course / "grades.csv"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m allocator_ref.labs.grading", description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=["release", "autograde"])
    parser.add_argument("lab", help="the lab number, e.g. 02")
    parser.add_argument("--course", type=Path, default=COURSE_DIR, help="the nbgrader course folder")
    args = parser.parse_args(argv)
    try:
        (release if args.action == "release" else autograde)(args.lab, args.course)
    except (GradingError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
