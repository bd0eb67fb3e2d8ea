"""The course's rules for its exercises, checked: ``make check-labs`` (``python -m allocator_ref.labs.verify``).

Every exercise must have

1. a solution region in its lab's ``labs/source/labNN_*.md`` (so ``show_solution`` and the
   instructor notebook have one),
2. a ``check("<id>", ...)`` cell there,
3. at least one known-wrong answer in ``labs/wrong/labN_<mistake>.py``
   (``EXERCISE``, ``EXPECTED_REASON``, ``SUBMISSION``),

and every known-wrong answer must be

4. rejected by a full check, with its ``EXPECTED_REASON`` in the explanation, and
5. rejected by the *hidden cases alone* (public cases left out) for every seed in ``SEEDS``:
   a learner who tunes an answer until the public cases pass must still meet the mistake.

The known-wrong answers are a sample of the mistakes, not their list.  So, besides:

6. every exercise lists its rule's edges and states (``spec.edges``: each boundary where ``<`` and
   ``<=`` part, each state the rule tells apart), and the hidden cases of every seed in ``SEEDS``
   meet each one: a wrong answer nobody wrote down is met where it goes wrong;
7. every exercise's solution, run as the instructor notebook runs it (the lab's code cells in order),
   passes a full check for every seed: a solution that returns 12345 is reported;
8. the exercise table of ``labs/README.md`` names every exercise, in its lab's row;
9. every exercise says how a graded check judges it apart (``pure=True`` or ``observed=True``), and
   the guide's prose lists of each kind ("(pure: ...)", "(observed: ...)") name exactly those;
10. the student copies, ``labs/solutions.json`` and the ``.ipynb`` pairs are what ``make student``
    writes now, and the guide's list of student copies names each one.

Each problem is printed as one line that says what to add or change.  tests/test_labs.py
runs the same functions, so CI enforces exactly what this command reports.
"""
from __future__ import annotations

import importlib.util
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Optional

from ..editions.messages import translator
from . import generate
from .check import EXERCISES, _load_all, exercise, judge
from .spec import EDGES, uncovered

# `make check-labs`'s verdicts in the reader's language; each problem names a slip in an English lab source
# and stays English, as its author writes the source.
tr = translator("doctor")

WRONG_DIR = generate.ROOT / "labs" / "wrong"
SEEDS = (1, 2, 3)
# Exercises whose edges are still to be listed (lab 8 is being reworked in another branch); main() prints
# them on every run so they are not forgotten.  Remove an id as soon as its lab lists its edges.
CHECK_CALL = re.compile(r"""check\(\s*["'](lab\d+\.\w+)["']""")


def load_wrong(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"wrong_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    missing = [name for name in ("EXERCISE", "EXPECTED_REASON", "SUBMISSION") if not hasattr(module, name)]
    if missing:
        raise ValueError(f"{path.relative_to(generate.ROOT)}: define {', '.join(missing)} "
                         "(see labs/README.md, 'A known-wrong answer')")
    return module


def wrong_files(lab: Optional[int] = None) -> list:
    pattern = f"lab{lab}_*.py" if lab is not None else "lab*.py"
    return sorted(WRONG_DIR.glob(pattern))


def exercise_problems(lab: Optional[int] = None) -> list:
    """Rules 1-3, one line per problem."""
    _load_all()
    solutions = json.loads(generate.SOLUTIONS.read_text()) if generate.SOLUTIONS.exists() else {}
    checked = set()
    for source in generate.sources():
        checked |= set(CHECK_CALL.findall(source.read_text()))
    wrong = {}
    for path in wrong_files():
        wrong.setdefault(load_wrong(path).EXERCISE, []).append(path)
    problems = []
    for ex in sorted(EXERCISES.values(), key=lambda e: e.id):
        if lab is not None and ex.lab != lab:
            continue
        if ex.id not in solutions:
            problems.append(f"{ex.id}: no solution region: add a code cell with '# exercise: {ex.id}' and "
                            f"### BEGIN SOLUTION / ### END SOLUTION to labs/source/lab{ex.lab:02d}_*.md, "
                            "then `make student`")
        if ex.id not in checked:
            problems.append(f"{ex.id}: no check cell: add a cell `check({ex.id!r}, your_function);` after the "
                            f"exercise in labs/source/lab{ex.lab:02d}_*.md")
        if ex.id not in wrong:
            problems.append(f"{ex.id}: no known-wrong answer: add labs/wrong/lab{ex.lab}_<the mistake>.py with "
                            f"EXERCISE = {ex.id!r}, EXPECTED_REASON = '<words the explanation must contain>' and "
                            "SUBMISSION = the wrong function")
    for name, paths in wrong.items():
        if name not in EXERCISES and (lab is None or name.startswith(f"lab{lab}.")):
            problems.append(f"{paths[0].relative_to(generate.ROOT)}: EXERCISE = {name!r} is not a registered "
                            "exercise")
    return problems


@dataclass
class WrongVerdict:
    path: Path
    problems: list


def verify_wrong(path: Path, seeds=SEEDS) -> WrongVerdict:
    """Rules 4-5 for one known-wrong answer."""
    module = load_wrong(path)
    rel = path.relative_to(generate.ROOT)
    ex = exercise(module.EXERCISE)
    problems = []
    full = judge(ex, module.SUBMISSION, seeds[0])
    if full.passed:
        problems.append(f"{rel}: passes {ex.id}: add a case that catches this mistake")
    elif module.EXPECTED_REASON not in full.explanation:
        problems.append(f"{rel}: rejected, but its explanation lacks {module.EXPECTED_REASON!r}; it says: "
                        f"{full.explanation.splitlines()[0] if full.explanation else '(nothing)'}")
    for seed in seeds:
        hidden_only = judge(ex, module.SUBMISSION, seed, public=False)
        if hidden_only.passed:
            problems.append(f"{rel}: the hidden cases alone (seed {seed}) accept it: make the hidden generator "
                            f"of {ex.id} always draw the situation this mistake gets wrong")
    return WrongVerdict(path, problems)


def coverage_problems(lab: Optional[int] = None, seeds=SEEDS) -> list:
    """Rule 6: every exercise lists its edges, and every seed's hidden cases meet each one."""
    _load_all()
    problems = []
    for ex in sorted(EXERCISES.values(), key=lambda e: e.id):
        if lab is not None and ex.lab != lab:
            continue
        if not EDGES.get(ex.id):
            problems.append(f"{ex.id}: no edges listed: add spec.edges({ex.id!r}, Edge('<a boundary or state of the "
                            f"rule>', lambda data: ...), ...) to allocator_ref/labs/lab{ex.lab}.py")
            continue
        for seed in seeds:
            for name in uncovered(ex, seed):
                problems.append(f"{ex.id}: the hidden cases of seed {seed} never meet {name!r}: make the hidden "
                                "generator always draw it")
    return problems


def _run_lab_source(path: Path) -> list:
    """The lab's code cells run in order, as the instructor notebook runs them, with ``check``
    recording (exercise id, submission) instead of judging: the solutions as a learner would hand them in."""
    import contextlib
    import io
    import linecache

    import allocator_ref.labs as labs_package

    recorded: list = []

    def recording_check(exercise_id, submission, **_):
        recorded.append((exercise_id, submission))

    namespace: dict = {"__name__": f"lab_source_{path.stem}"}
    saved = labs_package.check
    labs_package.check = recording_check
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            for i, cell in enumerate(generate.read_source(path).cells):
                if cell.cell_type != "code":
                    continue
                namespace["check"] = recording_check
                code = "\n".join(line for line in cell.source.split("\n")
                                  if not line.lstrip().startswith(("%", "!"))) + "\n"
                # As IPython does: the cell's text in linecache, so inspect.getsource finds a function
                # defined in it (lab 6 sends the receiver's source to another process).
                filename = f"<{path.name} cell {i}>"
                linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
                exec(compile(code, filename, "exec"), namespace)
                namespace["check"] = recording_check
    finally:
        labs_package.check = saved
    return recorded


def solution_problems(lab: Optional[int] = None, seeds=SEEDS) -> list:
    """Rule 7: each exercise's solution, from its lab's source, passes a full check for every seed."""
    _load_all()
    problems = []
    for source in generate.sources():
        number = int(source.name[3:5])
        if lab is not None and number != lab:
            continue
        try:
            recorded = _run_lab_source(source)
        except Exception as exc:             # the instructor source itself is broken
            problems.append(f"{source.relative_to(generate.ROOT)}: its code cells do not run: "
                            f"{type(exc).__name__}: {exc}")
            continue
        if not recorded:
            problems.append(f"{source.relative_to(generate.ROOT)}: no check() cell ran: nothing was judged")
        for exercise_id, submission in recorded:
            ex = exercise(exercise_id)
            for seed in seeds:
                result = judge(ex, submission, seed)
                if not result.passed:
                    first = result.explanation.splitlines()[0] if result.explanation else "(no explanation)"
                    problems.append(f"{exercise_id}: the solution in {source.name} fails a full check (seed "
                                    f"{seed}): {first}")
                    break
    return problems


TABLE_ROW = re.compile(r"^\| (\d+) ")


def guide_problems() -> list:
    """Rule 8: labs/README.md's table names every exercise, each in its own lab's row."""
    _load_all()
    guide = generate.ROOT / "labs" / "README.md"
    named: dict = {}
    for line in guide.read_text().splitlines():
        row = TABLE_ROW.match(line)
        if row:
            for exercise_id in re.findall(r"`(lab\d+\.\w+)`", line.split("|")[2]):
                named[exercise_id] = int(row.group(1))
    problems = [f"labs/README.md: add `{i}` to the exercises of lab {EXERCISES[i].lab} in the table"
                for i in sorted(set(EXERCISES) - set(named))]
    problems += [f"labs/README.md: the table names `{i}`, which no lab registers: remove it"
                 for i in sorted(set(named) - set(EXERCISES))]
    problems += [f"labs/README.md: `{i}` is in the row of lab {n}, but it is an exercise of lab {EXERCISES[i].lab}"
                 for i, n in sorted(named.items()) if i in EXERCISES and EXERCISES[i].lab != n]
    return problems


def _prose_list(guide: str, opening: str) -> Optional[set]:
    """The exercise ids of the guide's "(pure: lab1.explain, lab2.round_size, get_allocation_size, ...)"
    list: a bare name belongs to the lab named last.  None when the guide has no such list."""
    if opening not in guide:
        return None
    named, lab = set(), None
    for word in re.findall(r"[\w.]+", guide.split(opening, 1)[1].split(")", 1)[0]):
        lab, name = word.split(".", 1) if "." in word else (lab, word)
        named.add(f"{lab}.{name}")
    return named


def apart_problems(guide_text: Optional[str] = None) -> list:
    """Rule 9: each exercise marked pure or observed, and the guide's prose lists say which."""
    _load_all()
    problems = [f"{ex.id}: marked neither pure nor observed, so a graded check cannot judge it apart: in its "
                f"register(...) or function_exercise(...) in allocator_ref/labs/lab{ex.lab}.py add pure=True "
                "when the judge reads only what the submission returns, else observed=True with a runner "
                "(labs/README.md, 'Change a lab', step 2)"
                for ex in sorted(EXERCISES.values(), key=lambda e: e.id) if not (ex.pure or ex.observed)]
    guide = " ".join((guide_text if guide_text is not None else
                      (generate.ROOT / "labs" / "README.md").read_text()).split())
    for kind in ("pure", "observed"):
        marked = {i for i, ex in EXERCISES.items() if getattr(ex, kind)}
        listed = _prose_list(guide, f"({kind}:")
        if listed is None:
            problems.append(f"labs/README.md: no '({kind}: ...)' list of the exercises judged that way: write one "
                            "in the paragraph on what the open mode does not promise")
            continue
        if marked - listed:
            problems.append(f"labs/README.md: add {', '.join(sorted(marked - listed))} to the '({kind}: ...)' list")
        if listed - marked:
            problems.append(f"labs/README.md: the '({kind}: ...)' list names {', '.join(sorted(listed - marked))}, "
                            f"not marked {kind}=True: remove it or fix the mark")
    return problems


def student_copy_problems() -> list:
    """Rule 10: what make student writes is what is there, and the guide lists every student copy."""
    where = lambda p: p.relative_to(generate.ROOT) if p.is_relative_to(generate.ROOT) else p   # noqa: E731
    problems = [f"{where(p)}: stale (it is not what `make student` writes from labs/source/ "
                "now): run `make student` and commit what it writes" for p in generate.stale()]
    guide = (generate.ROOT / "labs" / "README.md").read_text()
    listed = guide[guide.find("Student copies:"):][:800]
    problems += [f"labs/README.md: add {p.name} to the list after 'Student copies:'"
                 for p in sorted(generate.STUDENT_DIR.glob("*.ipynb")) if p.name not in listed]
    return problems


def main(argv=None) -> int:
    from ..editions.cli_words import CourseParser, add_language_option, help_language, parse_in_language
    from ..editions.language import speaking
    parser = CourseParser(prog="python -m allocator_ref.labs.verify", description=__doc__.split("\n")[0])
    parser.add_argument("--lab", type=int, help="only this lab (e.g. 2)")
    add_language_option(parser)
    args = parse_in_language(parser, argv)            # --help in the reader's language, and the verdicts too
    with speaking(help_language(argv)):
        return _verify(args)


def _verify(args) -> int:
    try:                                  # a malformed source: its one line, not a traceback
        generate.outputs()
    except generate.SourceError as exc:
        print(f"error: {exc}; fix the source, then make student", file=sys.stderr)
        return 1
    problems = student_copy_problems() + exercise_problems(args.lab) + guide_problems() + apart_problems()
    problems += coverage_problems(args.lab)
    problems += solution_problems(args.lab)
    for path in wrong_files(args.lab):
        verdict = verify_wrong(path)
        where = path.relative_to(generate.ROOT)
        print(tr("ok   {path}", path=where) if not verdict.problems else tr("BAD  {path}", path=where), flush=True)
        problems += verdict.problems
    for line in problems:
        print(line)
    print(tr("{n} problem(s)", n=len(problems)) if problems else
          tr("labs: every exercise has a solution that passes, a check cell, its row in labs/README.md, hidden "
             "cases that meet every edge of its rule and a known-wrong answer that the hidden cases alone reject "
             "(seeds {seeds})", seeds=", ".join(map(str, SEEDS))))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
