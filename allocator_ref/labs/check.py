"""The lab checker: ``check("lab2.should_split", my_fn)``.

How a check works
-----------------
Every exercise has a stable id (``"lab2.should_split"``) and is judged by
*cases*.  A case runs the learner's submission against the reference
allocator of this package and looks at what happened: return values, but
also device calls, synchronisations, reserved vs allocated bytes, leaks and
the bytes on the (simulated) device.

* **Public cases** are fixed; their explanation may show the expected value.
* **Hidden cases** come from a *seeded generator*: the inputs are drawn from
  the seed and the expected result is computed now, by the reference
  allocator.  No table of answers exists anywhere.  Their explanation says
  what kind of case failed and what went wrong, never the expected value.
  (In an open repository "hidden" means "not shown", not "secret".)

The seed is, in order: the ``seed=`` argument, the environment variable
``ALLOCATOR_REF_LAB_SEED``, or a number derived from the learner's user
name, so two learners get different hidden cases.

``check`` never raises because of the learner's code: it prints the
per-case results, the located explanation of the first failure and a hint,
then a progress line for the lab, and returns a :class:`CheckResult`
(``result.passed``).  A notebook therefore runs top to bottom even while
exercises are unsolved.
"""
from __future__ import annotations

import getpass
import importlib
import json
import os
import random
import sys
import traceback
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from .. import settings

MiB = 1 << 20
KiB = 1 << 10
LAB_MODULES = ("lab1", "lab2", "lab3", "lab4", "lab5", "lab6", "lab7", "lab8")
SEED_ENV = "ALLOCATOR_REF_LAB_SEED"
QUICK_ENV = "ALLOCATOR_REF_LAB_QUICK"     # fewer hidden cases (CI notebook runs)
SOLUTIONS_FILE = Path(__file__).with_name("data") / "solutions.json"


class Fail(Exception):
    """Raised by a case's judge: ``message`` is located (may show expected values);
    ``safe`` is what may be printed for a hidden case (no expected values)."""

    def __init__(self, message: str, safe: Optional[str] = None, hint: Optional[str] = None) -> None:
        super().__init__(message)
        self.message = message
        self.safe = safe or "your result differs from what the reference allocator does on this input"
        self.hint = hint


@dataclass
class Case:
    """One judged run.  ``judge(submission)`` returns None or raises :class:`Fail`."""

    label: str                           # public: the input in words; hidden: the kind of case
    judge: Callable[[Any], None]
    hidden: bool = False
    data: Any = None                     # the drawn inputs (tests compare them across seeds; never printed)


@dataclass
class Exercise:
    id: str                              # "lab2.should_split"
    lab: int
    title: str
    public: Callable[[], list]           # -> [Case]
    hidden: Callable[[random.Random], list]   # seeded generator -> [Case]
    hint: str
    what: str = "function"               # what the learner hands in, for messages
    teardown: Optional[Callable[[], None]] = None   # run after every check (e.g. stop a helper process)


@dataclass
class CaseResult:
    label: str
    hidden: bool
    passed: bool
    explanation: str = ""


@dataclass
class CheckResult:
    exercise: str
    seed: int
    cases: list = field(default_factory=list)
    explanation: str = ""                # of the first failure ("" when all pass)
    hint: str = ""

    @property
    def passed(self) -> bool:
        return bool(self.cases) and all(c.passed for c in self.cases)

    @property
    def failures(self) -> list:
        return [c for c in self.cases if not c.passed]

    def __bool__(self) -> bool:
        return self.passed

    def __repr__(self) -> str:
        n = sum(c.passed for c in self.cases)
        return f"<CheckResult {self.exercise}: {'PASS' if self.passed else 'FAIL'} ({n}/{len(self.cases)} cases)>"


EXERCISES: dict[str, Exercise] = {}
_STATUS: dict[str, bool] = {}            # exercise id -> passed at the last check (this kernel)


def register(exercise: Exercise) -> Exercise:
    EXERCISES[exercise.id] = exercise
    return exercise


def _load_all() -> None:
    for name in LAB_MODULES:
        try:
            importlib.import_module(f"allocator_ref.labs.{name}")
        except ModuleNotFoundError as exc:          # a lab not written yet
            if exc.name != f"allocator_ref.labs.{name}":
                raise


def exercise(exercise_id: str) -> Exercise:
    _load_all()
    if exercise_id not in EXERCISES:
        known = ", ".join(sorted(EXERCISES))
        raise KeyError(f"no exercise {exercise_id!r}; known exercises: {known}")
    return EXERCISES[exercise_id]


def resolve_seed(seed: Optional[int] = None) -> int:
    """The hidden-case seed: argument, then the course setting ``lab_seed``
    ($ALLOCATOR_REF_LAB_SEED or course-settings.toml), then the user name."""
    if seed is not None:
        return int(seed)
    setting = settings.get("lab_seed")
    if setting.value != "user":
        try:
            return int(setting.value)
        except ValueError:
            raise settings.SettingsError(
                f"lab_seed={setting.value!r} (from {setting.source}) must be 'user' or a whole "
                "number") from None
    try:
        user = getpass.getuser()
    except Exception:                                 # no user name (some containers)
        user = "learner"
    return zlib.crc32(user.encode()) % 100_000


def quick() -> bool:
    return os.environ.get(QUICK_ENV, "") not in ("", "0")


def _describe_exception(exc: BaseException) -> str:
    if isinstance(exc, NotImplementedError):
        return ("not written yet: your code raises NotImplementedError (the stub). "
                "Replace the `raise NotImplementedError(...)` line with your solution and run the cell again.")
    # Point at the deepest frame that is not in this package's lab checker.
    frames = traceback.extract_tb(exc.__traceback__)
    here = str(Path(__file__).parent)
    located = [f for f in frames if not f.filename.startswith(here)]
    where = ""
    if located:
        f = located[-1]
        where = f" (at {Path(f.filename).name}:{f.lineno}: {f.line})" if f.line else f" (line {f.lineno})"
    return f"your code raised {type(exc).__name__}: {exc}{where}"


def run_case(case: Case, submission: Any) -> CaseResult:
    try:
        case.judge(submission)
    except Fail as fail:
        text = fail.safe if case.hidden else fail.message
        return CaseResult(case.label, case.hidden, False, text + (f"\n  Hint: {fail.hint}" if fail.hint else ""))
    except Exception as exc:                          # the learner's code blew up
        return CaseResult(case.label, case.hidden, False, _describe_exception(exc))
    return CaseResult(case.label, case.hidden, True)


def check(exercise_id: str, submission: Any, *, seed: Optional[int] = None,
          hidden: Optional[int] = None, verbose: bool = True) -> CheckResult:
    """Judge ``submission`` for ``exercise_id``; print the report; return a CheckResult.

    ``seed``: hidden-case seed (default: $ALLOCATOR_REF_LAB_SEED or your user name).
    ``hidden``: how many hidden cases to run (default: all the generator makes).
    """
    ex = exercise(exercise_id)
    seed = resolve_seed(seed)
    result = CheckResult(exercise=ex.id, seed=seed)
    out = []
    if submission is None:
        result.cases.append(CaseResult("a submission", False, False,
                                       f"check() got None: pass your {ex.what} itself, e.g. "
                                       f"check({ex.id!r}, my_function)"))
    else:
        cases = list(ex.public())
        hidden_cases = list(ex.hidden(random.Random(f"{ex.id}:{seed}")))
        if hidden is not None:
            hidden_cases = hidden_cases[:hidden]
        elif quick():
            hidden_cases = hidden_cases[:2]
        for case in hidden_cases:
            case.hidden = True
        try:
            for case in cases + hidden_cases:
                result.cases.append(run_case(case, submission))
        finally:
            if ex.teardown is not None:
                ex.teardown()
    _STATUS[ex.id] = result.passed
    first = next((c for c in result.cases if not c.passed), None)
    if first is not None:
        result.explanation = first.explanation
        result.hint = ex.hint
    if verbose:
        print(report(ex, result))
    return result


def report(ex: Exercise, result: CheckResult) -> str:
    lines = [f"{ex.id}: {ex.title}  (simulated device; hidden cases from seed {result.seed})"]
    n_public = n_hidden = 0
    first_index = None
    for i, c in enumerate(result.cases):
        if c.hidden:
            n_hidden += 1
            name = f"hidden {n_hidden:2d}"
        else:
            n_public += 1
            name = f"public {n_public:2d}"
        status = "pass" if c.passed else "FAIL"
        lines.append(f"  {name}  {status}  {c.label}")
        if not c.passed and first_index is None:
            first_index = (name, c)
    if first_index is None:
        lines.append(f"All {len(result.cases)} cases pass. Well done.")
    else:
        name, c = first_index
        n_fail = len(result.failures)
        lines.append(f"{n_fail} of {len(result.cases)} cases fail. First failure ({name.strip()}: {c.label}):")
        lines.extend("  " + line for line in c.explanation.splitlines())
        lines.append(f"Hint: {ex.hint}")
        lines.append(f"(hint({ex.id!r}) repeats the hint; show_solution({ex.id!r}) shows a solution)")
    lines.append(progress_line(ex.lab))
    return "\n".join(lines)


def progress_line(lab: int) -> str:
    _load_all()
    ids = [e.id for e in EXERCISES.values() if e.lab == lab]
    passing = sum(1 for i in ids if _STATUS.get(i))
    return f"lab {lab}: {passing}/{len(ids)} exercises passing"


def progress(lab: Optional[int] = None) -> str:
    """The progress line of one lab (or of every lab), for this kernel session."""
    _load_all()
    labs = [lab] if lab is not None else sorted({e.lab for e in EXERCISES.values()})
    text = "\n".join(progress_line(n) for n in labs)
    print(text)
    return text


def hint(exercise_id: str) -> str:
    ex = exercise(exercise_id)
    print(f"Hint for {ex.id}: {ex.hint}")
    return ex.hint


def solution_text(exercise_id: str) -> str:
    exercise(exercise_id)
    if not SOLUTIONS_FILE.exists():
        raise FileNotFoundError(f"{SOLUTIONS_FILE} is missing: run `make student` to generate it")
    solutions = json.loads(SOLUTIONS_FILE.read_text())
    if exercise_id not in solutions:
        raise KeyError(f"no solution recorded for {exercise_id!r}; run `make student`")
    return solutions[exercise_id]


def show_solution(exercise_id: str) -> None:
    """Print the instructor's solution of one exercise (only when you ask for it)."""
    print(f"# A solution of {exercise_id} (from the instructor source; yours may differ and be right)\n")
    print(solution_text(exercise_id))


# ---------------------------------------------------------------- helpers for lab modules
def lab_device(profile: str = "h100-80gb"):
    """A fresh simulated device: checks always run on the SimDevice, so results are reproducible."""
    from ..device import SimDevice
    return SimDevice(profile)


def fmt(n: int) -> str:
    """Bytes in the unit a learner reads best: '19.5 MiB', '1000 B', '2 MiB'."""
    for unit, size in (("GiB", 1 << 30), ("MiB", MiB), ("KiB", KiB)):
        if n >= size:
            text = f"{n / size:.2f}".rstrip("0").rstrip(".")
            return f"{text} {unit}"
    return f"{n} B"


__all__ = ["check", "hint", "show_solution", "progress", "Fail", "Case", "Exercise",
           "CheckResult", "register", "resolve_seed", "lab_device", "fmt", "EXERCISES"]
