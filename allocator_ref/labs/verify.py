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

Each problem is printed as one line that says what to add or change.  tests/test_labs.py
runs the same functions, so CI enforces exactly what this command reports.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Optional

from . import generate
from .check import EXERCISES, _load_all, exercise, judge

WRONG_DIR = generate.ROOT / "labs" / "wrong"
SEEDS = (1, 2, 3)
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m allocator_ref.labs.verify", description=__doc__.split("\n")[0])
    parser.add_argument("--lab", type=int, help="only this lab (e.g. 2)")
    args = parser.parse_args(argv)
    problems = exercise_problems(args.lab)
    for path in wrong_files(args.lab):
        verdict = verify_wrong(path)
        print(f"{'ok  ' if not verdict.problems else 'BAD '} {path.relative_to(generate.ROOT)}", flush=True)
        problems += verdict.problems
    for line in problems:
        print(line)
    print(f"{len(problems)} problem(s)" if problems else "labs: every exercise has a solution, a check cell and a "
          f"known-wrong answer that the hidden cases alone reject (seeds {', '.join(map(str, SEEDS))})")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
