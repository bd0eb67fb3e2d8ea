"""Build the student notebooks from the instructor sources: ``python -m allocator_ref.labs.generate``.

Instructor source (the one file an instructor edits):
    ``labs/source/labNN_name.md`` -- jupytext MyST Markdown.  Its paired
    ``labNN_name.ipynb`` (for JupyterLab) is *written from it* by this tool, so the
    ``.md`` is the single source: the student copy, the solutions, the paired
    notebook and the notebook the tests execute all come from it.  If the ``.ipynb``
    was edited after the ``.md`` (outside JupyterLab's jupytext pairing, which saves
    both), this tool stops and says so rather than overwrite the edit.

Inside a code cell, an exercise is marked as nbgrader marks it::

    # exercise: lab2.round_size
    def round_size(size, config):
        ### BEGIN SOLUTION
        ...the instructor's solution...
        ### END SOLUTION

The student copy replaces every region between the markers with
``raise NotImplementedError("write your solution here")`` at the marker's
indentation; everything else is copied unchanged (outputs and execution
counts dropped).  The ``# exercise: <id>`` line names the exercise, and the
whole cell without the markers becomes that exercise's solution in
``labs/solutions.json``, which ``show_solution(id)`` prints
only when asked.  Cells tagged ``instructor`` are left out of the student copy.

Outputs:
    ``labs/source/labNN_name.ipynb``           (the pair, written from the .md)
    ``labs/student/labNN_name.ipynb``          (generated; never edit)
    ``labs/solutions.json`` (generated; never edit)

``--check`` writes nothing and exits 1 when any output differs from what this
tool would write now (CI and tests/test_labs.py use it).
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import jupytext
import nbformat

from ..editions.messages import translator

# `make student`'s results in the reader's language (the Chinese README sends translators here); a slip in
# an English lab source (SourceError, an unknown exercise id) stays English, as its author writes the source.
tr = translator("doctor")

ROOT = Path(__file__).resolve().parents[2]
SOURCE_DIR = ROOT / "labs" / "source"
STUDENT_DIR = ROOT / "labs" / "student"
SOLUTIONS = ROOT / "labs" / "solutions.json"      # outside the package: a graded install has none

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
STUB = 'raise NotImplementedError("write your solution here")'
EXERCISE_LINE = re.compile(r"^\s*#\s*exercise:\s*(\S+)\s*$")
INSTRUCTOR_TAG = "instructor"


class SourceError(ValueError):
    """A malformed instructor source (unbalanced markers, missing exercise id)."""


def strip_regions(source: str, where: str = "") -> tuple[str, str, list]:
    """(student text, solution text, [exercise ids]) of one code cell's source."""
    student, solution, ids = [], [], []
    inside = False
    for n, line in enumerate(source.split("\n"), 1):
        m = EXERCISE_LINE.match(line)
        if m:
            ids.append(m.group(1))
        stripped = line.strip()
        if stripped.startswith(BEGIN):
            if inside:
                raise SourceError(f"{where} line {n}: {BEGIN} inside another solution region")
            inside = True
            indent = line[: len(line) - len(line.lstrip())]
            student.append(indent + STUB)
            continue
        if stripped.startswith(END):
            if not inside:
                raise SourceError(f"{where} line {n}: {END} without {BEGIN}")
            inside = False
            continue
        solution.append(line)
        if not inside:
            student.append(line)
    if inside:
        raise SourceError(f"{where}: {BEGIN} without {END}")
    return "\n".join(student), "\n".join(solution), ids


def has_region(source: str) -> bool:
    return any(line.strip().startswith(BEGIN) for line in source.split("\n"))


def read_source(path: Path):
    return jupytext.read(path, fmt="md:myst")


def build(path: Path) -> tuple:
    """(student notebook, {exercise id: solution text}) for one instructor source."""
    return build_notebook(read_source(path), path)


def build_notebook(nb, path: Path) -> tuple:
    """``build`` for a source already read (the Chinese edition passes its translated twin)."""
    rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name
    cells, solutions = [], {}
    for i, cell in enumerate(nb.cells):
        tags = list(cell.get("metadata", {}).get("tags", []))
        if INSTRUCTOR_TAG in tags:
            continue
        source = cell.source
        if cell.cell_type == "code" and has_region(source):
            student, solution, ids = strip_regions(source, f"{rel} cell {i}")
            if len(ids) != 1:
                raise SourceError(f"{rel} cell {i}: a cell with a solution region needs exactly one "
                                  f"'# exercise: <id>' line (found {ids or 'none'})")
            if ids[0] in solutions:
                raise SourceError(f"{rel}: exercise {ids[0]} has two solution cells")
            solutions[ids[0]] = solution.strip("\n") + "\n"
            source = student
        if cell.cell_type == "code":
            new = nbformat.v4.new_code_cell(source)
        else:
            new = nbformat.v4.new_markdown_cell(source)
        if tags:
            new.metadata["tags"] = tags
        if "jupyter" in cell.get("metadata", {}):      # e.g. the Colab cell's collapsed source
            new.metadata["jupyter"] = dict(cell.metadata["jupyter"])
        new.id = f"{path.stem.split('_')[0]}-{len(cells):02d}"
        cells.append(new)
    student = nbformat.v4.new_notebook(cells=cells)
    student.metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
        "allocator_ref": {"generated_from": rel,
                          "note": "Generated by `make student` (python -m allocator_ref.labs.generate). "
                                  "Do not edit: edit the instructor source and regenerate."},
    }
    return student, solutions


def sources() -> list:
    return sorted(SOURCE_DIR.glob("lab[0-9][0-9]_*.md"))


def _cells(nb) -> list:
    return [(c.cell_type, c.source, list(c.get("metadata", {}).get("tags", []))) for c in nb.cells]


def paired_text(path: Path) -> str:
    """The .ipynb paired with a source .md: the same cells, no outputs, stable cell ids."""
    nb = read_source(path)
    for i, cell in enumerate(nb.cells):
        cell.id = f"{path.stem.split('_')[0]}-src-{i:02d}"
    return jupytext.writes(nb, fmt="ipynb")


def pair_in_sync(path: Path) -> bool:
    ipynb = path.with_suffix(".ipynb")
    if not ipynb.exists():
        return False
    nb = nbformat.read(ipynb, as_version=4)
    return _cells(nb) == _cells(read_source(path)) and not any(
        c.get("outputs") or c.get("execution_count") is not None for c in nb.cells)


def _pair_edited_later(path: Path) -> bool:
    ipynb = path.with_suffix(".ipynb")
    return ipynb.exists() and ipynb.stat().st_mtime > path.stat().st_mtime + 1 and not pair_in_sync(path)


def outputs() -> dict:
    """{path: text} of everything the tool writes."""
    result, all_solutions = {}, {}
    for path in sources():
        if not pair_in_sync(path):
            result[path.with_suffix(".ipynb")] = paired_text(path)
        nb, solutions = build(path)
        result[STUDENT_DIR / (path.stem + ".ipynb")] = nbformat.writes(nb) + "\n"
        for key in solutions:
            if key in all_solutions:
                raise SourceError(f"exercise {key} appears in two labs")
        all_solutions.update(solutions)
    result[SOLUTIONS] = json.dumps(dict(sorted(all_solutions.items())), indent=1, ensure_ascii=False) + "\n"
    return result


def stale() -> list:
    """Outputs that differ from what would be generated now (or are missing / no longer produced)."""
    wanted = outputs()
    bad = [p for p, text in wanted.items() if not p.exists() or p.read_text() != text]
    bad = [p for p in bad if p.parent != SOURCE_DIR or not pair_in_sync(p.with_suffix(".md"))]
    bad += [p for p in STUDENT_DIR.glob("*.ipynb") if p not in wanted]
    return bad


def unknown_ids(solutions: dict) -> list[str]:
    """One line per '# exercise: <id>' that no lab module registers (a typo, or a register() not written
    yet), with the registered id it is closest to: a check cell naming it would fail for every learner."""
    import difflib
    from .check import EXERCISES, _load_all
    _load_all()
    lines = []
    for ex_id in sorted(set(solutions) - set(EXERCISES)):
        near = difflib.get_close_matches(ex_id, list(EXERCISES), n=1)
        lines.append(f"'# exercise: {ex_id}' names no registered exercise"
                     + (f": did you mean {near[0]}?" if near else "")
                     + f" (register it in allocator_ref/labs/{ex_id.split('.')[0]}.py, or fix the id)")
    return lines


def main(argv=None) -> int:
    from ..editions.cli_words import CourseParser, add_language_option, help_language, parse_in_language
    from ..editions.language import speaking
    parser = CourseParser(prog="python -m allocator_ref.labs.generate", description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if the outputs are stale")
    add_language_option(parser)
    args = parse_in_language(parser, argv)            # --help in the reader's language, and the results too
    try:                      # an instructor's slip in a source is one line saying where and what to do
        with speaking(help_language(argv)):
            return _run(args)
    except SourceError as exc:
        print(f"error: {exc}; fix the source and run `make student` again", file=sys.stderr)
        return 1


def _run(args) -> int:
    if args.check:
        bad = stale()
        for p in bad:
            print(tr("stale: {path} (run `make student`)", path=p.relative_to(ROOT)))
        if not bad:
            print(tr("labs: {n} student notebooks and the solutions file are up to date", n=len(sources())))
        return 1 if bad else 0
    edited = [p for p in sources() if _pair_edited_later(p)]
    for p in edited:
        print(tr("{notebook} was edited after {source} and they differ: the .md is the source. Keep the notebook's "
                 "edit with `make sync-notebooks` (it copies the side edited since the last sync into the other, "
                 "and refuses, saying what to do, when both were), or discard it by deleting the .ipynb; then run "
                 "`make student` again.", notebook=p.with_suffix(".ipynb").relative_to(ROOT), source=p.name))
    if edited:
        return 1
    wanted = outputs()
    unknown = unknown_ids(json.loads(wanted[SOLUTIONS]))
    for line in unknown:
        print(f"error: {line}", file=sys.stderr)
    if unknown:
        return 1
    STUDENT_DIR.mkdir(parents=True, exist_ok=True)
    SOLUTIONS.parent.mkdir(parents=True, exist_ok=True)
    for p in STUDENT_DIR.glob("*.ipynb"):
        if p not in wanted:
            p.unlink()
            print(tr("removed {path} (its source is gone)", path=p.relative_to(ROOT)))
    for p, text in wanted.items():
        if not p.exists() or p.read_text() != text:
            p.write_text(text)
            print(tr("wrote {path}", path=p.relative_to(ROOT)))
    print(tr("labs: {n} student notebooks and the solutions file are up to date", n=len(sources())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
