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

What a check promises
---------------------
The open mode (``check(id, fn)``, what a learner runs while working) judges in
a forked copy of the notebook's process (deadline.py; in the notebook's own process
where there is no ``fork``): it is proof against honest mistakes (an endless
loop, even one whose bare ``except:`` swallows the stop; ``sys.exit()``; an
``__eq__`` that answers True; a patched course class, see ``reference.py``), not
against code written to cheat: such code can read the judge's expected value off
the stack or patch what the reference still shares.  Its time limit holds in both
modes, whatever the submission does to the timer: the notebook's process, which
runs none of the submission's code, ends the process that does at the limit.  A graded check
(``graded=True``, written by the nbgrader release into its locked cells) judges
in a clean Python process instead, and the submission runs apart from every
expected value (see ``apart.py``): an exercise marked ``pure`` has its judge call
the submission from there; one marked ``observed`` (the submission gets live
objects: a device, an allocator) has its judge ask, through :func:`observed`,
for a plain-data account of what the submission did, made where the submission
runs, and gives its verdict there, in the clean process.

The seed is, in order: the ``seed=`` argument, the environment variable
``ALLOCATOR_REF_LAB_SEED``, or a number derived from the learner's user
name, so two learners get different hidden cases.

The report is in the learner's language (``editions/language.py`` decides: a notebook of the
Chinese edition speaks Chinese): every sentence it prints goes through ``tr("...")`` and finds its
Chinese in ``allocator_ref/locale/zh_CN/labs.po``; English is the default, word for word.

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
import pkgutil
import random
import re
import traceback
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from .. import settings
from ..editions.messages import say, translator
from . import closed, deadline, live   # closed: a graded lab past its due date; live: the room's live view
from .guard import TIME_LIMIT_S, run_guarded, safe_str, same, show
from .results import CaseResult, CheckResult   # what check() returns (its own file: apart.py builds them too)
from .verdict import Apart, Fail               # what a judge raises, and the submission seen apart (apart.py uses both)

MiB = 1 << 20
KiB = 1 << 10
SEED_ENV = "ALLOCATOR_REF_LAB_SEED"
QUICK_ENV = "ALLOCATOR_REF_LAB_QUICK"     # fewer hidden cases (CI notebook runs)
# Solutions live in the course folder, never in the installed package: a graded
# installation (``pip install .``, no clone) has no solutions to show.
SOLUTIONS_FILE = Path(__file__).resolve().parents[2] / "labs" / "solutions.json"
SAY_WHERE_THE_RECIPE_IS_AFTER = 3         # failed attempts before the nudge names hint() and show_solution()
LAB_MODULE = re.compile(r"lab(\d+)$")
tr = translator("labs")                   # what a learner reads, in the learner's language (editions/language.py)
later = translator("labs", later=True)   # marks a sentence made now (at import) and shown later: see shown()


def shown(text: str) -> str:
    """An exercise's title, nudge or recipe (written once, at import, and marked with
    ``translator("labs", later=True)``) in the language of the moment it is shown."""
    return say("labs", text)


def lab_modules() -> tuple:
    """Every ``allocator_ref/labs/labN.py``, found on disk (a new lab needs no list to edit)."""
    names = [m.name for m in pkgutil.iter_modules([str(Path(__file__).parent)]) if LAB_MODULE.match(m.name)]
    return tuple(sorted(names, key=lambda n: int(LAB_MODULE.match(n).group(1))))


LAB_MODULES = lab_modules()


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
    hint: str                            # the full recipe: shown on request or after several failures
    what: str = later("function")            # what the learner hands in, for messages
    teardown: Optional[Callable[[], None]] = None   # run after every check (e.g. stop a helper process)
    nudge: str = ""                      # after a failed attempt: where to look, not how to write it
    time_limit: float = TIME_LIMIT_S     # seconds per case
    pure: bool = False                   # the judge reads only what the submission returns (plain data), so a
                                         # graded check can judge in a clean process (apart.py)
    observed: bool = False               # the judge sees the submission only through observed() (plain data):
                                         # a graded check judges it in a clean process too (apart.py)

    @property
    def apart(self) -> bool:
        """Whether a graded check judges this exercise in a clean process."""
        return self.pure or self.observed


EXERCISES: dict[str, Exercise] = {}
_STATUS: dict[str, bool] = {}            # exercise id -> passed at the last check (this kernel)
_ATTEMPTS: dict[str, int] = {}           # exercise id -> failed attempts (stubs not counted), this kernel


def register(exercise: Exercise) -> Exercise:
    EXERCISES[exercise.id] = exercise
    return exercise


def _load_all() -> None:
    for name in lab_modules():
        importlib.import_module(f"allocator_ref.labs.{name}")


def exercise(exercise_id: str) -> Exercise:
    _load_all()
    if exercise_id not in EXERCISES:
        known = ", ".join(sorted(EXERCISES))
        lab = exercise_id.split(".")[0]
        raise KeyError(f"no exercise {exercise_id!r}: no allocator_ref/labs/{lab}.py registers it "
                       f"(register(Exercise(id={exercise_id!r}, ...)) adds it; lab modules are found "
                       f"by their file name labN.py). Known exercises: {known}")
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
    return settings.get("lab_quick").value == "1"      # QUICK_ENV, or lab_quick in course-settings.toml


def stub_text() -> str:
    return tr("not written yet: your code raises NotImplementedError (the stub). "
              "Replace the `raise NotImplementedError(...)` line with your solution and run the cell again.")


def interrupted_text() -> str:
    return tr("interrupted (the stop button or Ctrl-C): the remaining cases were not run")


def raised_text(kind: str, message: str, where: str) -> str:
    """What a case says when the learner's code raised; ``crashed()`` recognises it (for the crash nudge)."""
    return tr("your code raised {kind}: {message}{where}", kind=kind, message=message, where=where)


def crashed(explanation: str) -> bool:
    """Whether a case's explanation is the learner's code raising (in either language)."""
    return any(explanation.startswith(text.split("{kind}")[0])
               for text in ("your code raised {kind}", raised_text("{kind}", "", "")))


def _describe_exception(exc: BaseException) -> str:
    if isinstance(exc, NotImplementedError):
        return stub_text()
    if isinstance(exc, SystemExit):
        return tr("your code called sys.exit({code}) (or exit()/quit()): inside a notebook that would "
                  "stop the kernel's work; return a value instead", code=show(exc.code))
    if isinstance(exc, KeyboardInterrupt):
        return interrupted_text()
    # Point at the deepest frame that is not in this package's lab checker.
    frames = traceback.extract_tb(exc.__traceback__)
    here = str(Path(__file__).parent)
    located = [f for f in frames if not f.filename.startswith(here)]
    where = ""
    if getattr(exc, "where", None) is not None:      # raised by the submission in the notebook (apart.py)
        where = exc.where
    elif located:
        f = located[-1]
        where = (tr(" (at {file}:{line}: {code})", file=Path(f.filename).name, line=f.lineno, code=f.line)
                 if f.line else tr(" (line {line})", line=f.lineno))
    return raised_text(type(exc).__name__, safe_str(exc), where)


def run_case(case: Case, submission: Any, time_limit: Optional[float] = TIME_LIMIT_S,
             shown_limit: Optional[float] = None) -> CaseResult:
    """Judge one case: nothing the submission does (raise, exit, loop, print) escapes from here.
    ``shown_limit``: the limit the report names, when the one enforced here is a looser backstop."""
    outcome = run_guarded(lambda: case.judge(submission), time_limit)
    time_limit = time_limit if shown_limit is None else shown_limit
    result = CaseResult(case.label, case.hidden, True, output=_output_note(outcome))
    exc = outcome.error
    if outcome.timed_out:
        result.passed, result.stopped = False, True
        result.explanation = tr("stopped after {limit} s: your code was still running (a loop that never "
                                "ends, or a wait for something that never happens?). check() gives each case "
                                "{limit} s; the remaining cases were not run", limit=f"{time_limit:g}")
    elif isinstance(exc, Fail):
        text = exc.safe if case.hidden else exc.message
        result.passed = False
        result.explanation = text + ("\n  " + tr("Nudge: {nudge}", nudge=exc.hint) if exc.hint else "")
    elif exc is not None:                             # the learner's code blew up
        result.passed = False
        result.stub = isinstance(exc, NotImplementedError)
        result.stopped = isinstance(exc, KeyboardInterrupt)
        result.explanation = _describe_exception(exc)
    return result


def _output_note(outcome) -> str:
    if outcome.output_chars <= len(outcome.output):
        return outcome.output
    return outcome.output + "\n" + tr("[output cut: your code printed {printed} characters; "
                                       "check() keeps the first {kept} of each case]",
                                       printed=f"{outcome.output_chars:,}", kept=f"{len(outcome.output):,}")


def cases_for(ex: Exercise, seed: int, *, public: bool = True, hidden: Optional[int] = None) -> list:
    """The cases one check runs: the public ones (unless ``public=False``), then the seeded hidden ones."""
    cases = list(ex.public()) if public else []
    hidden_cases = list(ex.hidden(random.Random(f"{ex.id}:{seed}")))
    if hidden is not None:
        hidden_cases = hidden_cases[:hidden]
    elif quick():
        hidden_cases = hidden_cases[:2]
    for case in hidden_cases:
        case.hidden = True
    return cases + hidden_cases


def judge(ex: Exercise, submission: Any, seed: int, *, public: bool = True, hidden: Optional[int] = None,
          time_limit: Optional[float] = None, run: Optional[Callable] = None) -> CheckResult:
    """Run the cases and collect the results; prints nothing, changes no progress.
    ``run``: how one case runs (default :func:`run_case`; a graded check's clean process waits longer, clean.py)."""
    result = CheckResult(exercise=ex.id, seed=seed)
    if submission is None:
        result.cases.append(CaseResult(tr("a submission"), False, False,
                                       tr("check() got None: pass your {what} itself, e.g. "
                                          "check({id}, my_function)", what=shown(ex.what), id=repr(ex.id))))
        return result
    limit = ex.time_limit if time_limit is None else time_limit
    cases = cases_for(ex, seed, public=public, hidden=hidden)
    try:
        for i, case in enumerate(cases):
            outcome = (run or run_case)(case, submission, limit)
            result.cases.append(outcome)
            if outcome.stopped:                       # a timeout or the stop button: do not run the rest
                result.cases.extend(CaseResult(c.label, c.hidden, False, tr("not run: an earlier case was stopped"))
                                    for c in cases[i + 1:])
                break
    finally:
        if ex.teardown is not None:
            ex.teardown()
    first = next((c for c in result.cases if not c.passed), None)
    if first is not None:
        result.explanation = first.explanation
    return result


def check(exercise_id: str, submission: Any, *, seed: Optional[int] = None,
          hidden: Optional[int] = None, verbose: bool = True, hint: bool = False,
          time_limit: Optional[float] = None, graded: bool = False) -> CheckResult:
    """Judge ``submission`` for ``exercise_id``; print the report; return a CheckResult.

    ``seed``: hidden-case seed (default: $ALLOCATOR_REF_LAB_SEED or your user name).
    ``hidden``: how many hidden cases to run (default: all the generator makes).
    ``hint=True``: show the full recipe after a failure (it never appears unasked: the nudge changes
    with each failed attempt, and after a few it says where the recipe and a solution are).
    ``time_limit``: seconds per case (default: the exercise's, 120 s).
    ``graded=True``: judge in a clean process (apart.py): every exercise marked ``pure`` or ``observed``.
    """
    ex = exercise(exercise_id)
    if graded and verbose and (line := closed.closed_line(ex.id)):   # past the learner's due date (due.py)
        print(line)
    if graded and ex.apart and submission is not None:
        from .apart import judge_apart
        limit = ex.time_limit if time_limit is None else time_limit
        if hidden is None and quick():
            hidden = 2
        # Each call of the submission runs in a forked worker that this process ends at its own
        # deadline (deadline.py): code that switches off guard.py's timer cannot hold the notebook.
        worker = deadline.Worker(ex, submission) if deadline.available() else None
        result = judge_apart(ex, submission, resolve_seed(seed), hidden, limit, worker=worker)
    elif submission is not None and deadline.available():
        # The cases run in a forked child that this process ends at its own deadline (deadline.py):
        # code that switches off guard.py's timer cannot outlive its limit.
        limit = ex.time_limit if time_limit is None else time_limit
        result = deadline.judge_in_child(ex, submission, resolve_seed(seed), cases_for(ex, resolve_seed(seed),
                                         hidden=hidden), run_case, limit)
    else:
        result = judge(ex, submission, resolve_seed(seed), hidden=hidden, time_limit=time_limit)
    _STATUS[ex.id] = result.passed
    if not result.passed and not result.untouched:
        _ATTEMPTS[ex.id] = _ATTEMPTS.get(ex.id, 0) + 1
    if not result.passed and not result.untouched:
        result.hint = nudge_text(ex, result, _ATTEMPTS[ex.id])
        if hint:                                      # asked for: the whole recipe
            result.hint += "\n" + tr("Recipe: {recipe}", recipe=shown(ex.hint))
    live.record(ex.id, result.passed, result.untouched, _ATTEMPTS.get(ex.id, 0))   # a room's live view (opt-in)
    if verbose:
        print(report(ex, result, recipe=hint and not result.passed and not result.untouched))
    return result


SECOND_NUDGE = later("take the first failing input above and work it through the rule by hand, one step at a "
                     "time, next to what your code does with it: the first step where the two part is the bug.")
FIRST_NUDGE = later("the first failure above names the input and what differed: start there.")


def nudge_label() -> str:
    """The word before a nudge (``Nudge: {nudge}`` starts with it): ``nudge_text`` looks for it to tell
    a case's own, located nudge."""
    return tr("Nudge: {nudge}", nudge="").rstrip()


def nudges(ex: Exercise) -> tuple:
    """The exercise's nudges in the order a learner gets them: its own (one, or a list, where to look
    first), then a general second one.  Never the recipe."""
    own = ex.nudge if isinstance(ex.nudge, (list, tuple)) else (ex.nudge,)
    own = tuple(n for n in own if n) or (FIRST_NUDGE,)
    return own + (SECOND_NUDGE,)


CRASH_NUDGE = later("your code stopped with an error before its result could be judged: the line above names the "
               "error and where; fix that first (on the device, as on a GPU, touching memory after freeing it "
               "or passing a wrong argument is an error), then the exercise's own rule.")


def nudge_text(ex: Exercise, result: CheckResult, attempt: int = 1) -> str:
    """What a failed attempt gets: a nudge that changes with the attempt (1, 2, ...), never the recipe.
    From attempt SAY_WHERE_THE_RECIPE_IS_AFTER on it also says how to ask for the recipe or a solution.
    A failure that is the learner's code raising gets the crash nudge first: the exercise's own nudge
    would point at the rule while the code never reached it."""
    steps = nudges(ex)
    if crashed(result.explanation):
        steps = (CRASH_NUDGE,) + steps
    located = nudge_label() in result.explanation     # the failing case gave its own, located nudge
    index = attempt - 1 if not located else attempt - 2   # a located nudge is the first one
    text = "" if index < 0 else tr("Nudge: {nudge}", nudge=shown(steps[min(index, len(steps) - 1)]))
    if attempt >= SAY_WHERE_THE_RECIPE_IS_AFTER:
        text += (("\n" if text else "") + tr("(attempt {attempt}: hint({id}) gives the full recipe, "
                                              "show_solution({id}) a solution)", attempt=attempt, id=repr(ex.id)))
    return text


def report(ex: Exercise, result: CheckResult, recipe: bool = False) -> str:
    """The printed report.  What it gives away follows the hint policy:
    an untouched stub gets only what to do; a failed attempt gets the located
    explanation and a nudge that changes with the attempt; the full recipe comes only
    on request (``hint=True``, ``hint(id)``), a solution only from ``show_solution(id)``."""
    title = shown(ex.title)
    lines = [f"{ex.id}: {title}  " + tr("(simulated device; hidden cases from seed {seed})", seed=result.seed)]
    if result.untouched:
        n_pub = sum(not c.hidden for c in result.cases)
        lines.append(f"  {tr('FAIL')}  {stub_text()}")
        lines.append("  " + tr("What to write: {title}. check() will run {public} public and "
                               "{hidden} hidden cases on it.", title=title, public=n_pub,
                               hidden=len(result.cases) - n_pub))
        lines.append(progress_line(ex.lab))
        return "\n".join(lines)
    n_public = n_hidden = 0
    first_index = None
    for c in result.cases:
        if c.hidden:
            n_hidden += 1
            name = tr("hidden {n}", n=f"{n_hidden:2d}")
        else:
            n_public += 1
            name = tr("public {n}", n=f"{n_public:2d}")
        status = tr("pass") if c.passed else tr("FAIL")
        lines.append(f"  {name}  {status}  {shown(c.label)}")
        if not c.passed and first_index is None:
            first_index = (name, c)
    printed = next((c for c in result.cases if c.output), None)
    if printed is not None:
        lines.append(tr("Your code printed (case {case}):", case=repr(printed.label)))
        lines.extend("  | " + line[:200] for line in printed.output.splitlines()[:40])
    if first_index is None:
        lines.append(tr("All {n} cases pass. Well done.", n=len(result.cases)))
    else:
        name, c = first_index
        n_fail = len(result.failures)
        lines.append(tr("{failed} of {n} cases fail. First failure ({case}: {label}):", failed=n_fail,
                        n=len(result.cases), case=name.strip(), label=shown(c.label)))
        lines.extend("  " + line for line in c.explanation.splitlines())
        if result.hint:
            lines.extend(result.hint.splitlines())
        # From SAY_WHERE_THE_RECIPE_IS_AFTER attempts on, nudge_text's own line names hint() and
        # show_solution() already: saying it a second time is noise.
        if _ATTEMPTS.get(ex.id, 0) >= SAY_WHERE_THE_RECIPE_IS_AFTER and result.hint:
            pass
        elif recipe:
            lines.append(tr("(show_solution({id}) shows a solution)", id=repr(ex.id)))
        else:
            lines.append(tr("(check(..., hint=True) or hint({id}) gives the full recipe)", id=repr(ex.id)))
    lines.append(progress_line(ex.lab))
    return "\n".join(lines)


def progress_line(lab: int) -> str:
    _load_all()
    ids = [e.id for e in EXERCISES.values() if e.lab == lab]
    passing = sum(1 for i in ids if _STATUS.get(i))
    return tr("lab {lab}: {passing}/{n} exercises passing", lab=lab, passing=passing, n=len(ids))


def progress(lab: Optional[int] = None) -> str:
    """The progress line of one lab (or of every lab), for this kernel session."""
    _load_all()
    labs = [lab] if lab is not None else sorted({e.lab for e in EXERCISES.values()})
    text = "\n".join(progress_line(n) for n in labs)
    print(text)
    return text


def hint(exercise_id: str) -> str:
    """The full recipe of one exercise (asked for, so given)."""
    ex = exercise(exercise_id)
    recipe = shown(ex.hint)          # returned in the same language it was printed in (Jupyter shows both)
    print(tr("Recipe for {id}: {recipe}", id=ex.id, recipe=recipe))
    return recipe


def solution_text(exercise_id: str) -> str:
    exercise(exercise_id)
    if not SOLUTIONS_FILE.exists():
        raise FileNotFoundError(
            f"no solutions here ({SOLUTIONS_FILE} is missing). Solutions live in the course folder, not in "
            "the installed package: a graded installation has none. In a clone, run `make student`.")
    solutions = json.loads(SOLUTIONS_FILE.read_text())
    if exercise_id not in solutions:
        raise KeyError(f"no solution recorded for {exercise_id!r}; run `make student`")
    return solutions[exercise_id]


def show_solution(exercise_id: str) -> None:
    """Print the instructor's solution of one exercise (only when you ask for it)."""
    print(tr("# A solution of {id} (from the instructor source; yours may differ and be right)", id=exercise_id) + "\n")
    print(solution_text(exercise_id))


def observed(submission: Any, runner: Callable, *args: Any) -> Any:
    """``runner(submission, *args)``: what the submission did with the live objects it was handed, as
    plain data (int, float, str, bool, None, and lists, tuples and dicts of them).

    A judge of an exercise marked ``observed`` meets the submission only here, and computes its
    expected values after this returns.  In a graded check the judge runs in a clean process and
    ``runner`` runs in the notebook's process, where the submission lives: it builds the device, the
    allocator, the streams from ``args``, runs the submission on them, and sends back only its plain
    account; a :class:`Fail` the runner raises (a wrong behaviour it sees without any expected value)
    comes back as itself.  ``runner`` must be a module-level function of a lab module (the notebook
    finds it by name), and nothing it returns may be an expected value.
    """
    if isinstance(submission, Apart):
        return submission.observe(runner, args)
    return runner(submission, *args)


# ---------------------------------------------------------------- helpers for lab modules
def lab_device(profile: str = "h100-80gb"):
    """A fresh simulated device: checks always run on the SimDevice, so results are reproducible."""
    from ..device import SimDevice
    return SimDevice(profile)


def fmt(n: int) -> str:
    """Bytes in the unit a learner reads best: '19.5 MiB', '1000 B', '2 MiB'.

    Where the rounded text is not the exact size, the bytes follow it: near an edge
    '10 MiB - 512 B' must not read as '10 MiB' ("10 MiB is between 1 MiB and 10 MiB")."""
    for unit, size in (("GiB", 1 << 30), ("MiB", MiB), ("KiB", KiB)):
        if n >= size:
            text = f"{n / size:.2f}".rstrip("0").rstrip(".")
            exact = float(text) * size == n
            return f"{text} {unit}" if exact else f"{text} {unit} ({n:,} bytes)"
    return f"{n} B"


__all__ = ["check", "hint", "show_solution", "progress", "Fail", "Case", "Exercise",
           "CheckResult", "register", "resolve_seed", "lab_device", "fmt", "EXERCISES", "same", "show",
           "judge", "lab_modules", "observed", "Apart"]
