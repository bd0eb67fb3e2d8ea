"""The recorded grade: ``make autograde`` judges every submission again, in processes the notebook never ran in.

nbgrader grades a notebook by running it in a kernel and reading whether each locked
``assert check(...).passed`` cell raised.  That kernel runs the learner's cells: an answer
cell can rebind a name, patch the checker, or wrap the pipe the clean judge answers on
(apart.py), and the assert passes.  What that run shows is the learner's copy; the grade
recorded in the gradebook is decided here:

* the autograder (``make autograde``'s own process) reads the check cells from the
  instructor's copy of the assignment (``source/labNN``), never from the submission, and the
  learner's cells from the submitted notebook, as text;
* for each notebook it starts a *judge* (``python -I``, not dumpable), which starts the
  *submission process*: a fresh Python that runs the learner's cells in order (every code cell
  but the locked checks: at each of those it only takes the function the check names) and then
  only answers calls, the way a notebook answers a graded check (apart.py);
* the judge draws the cases, computes every expected value and gives every verdict in its own
  process, and sends them to the autograder on a pipe only those two hold: the submission
  process has no end of it, and cannot read the judge's or the autograder's memory or file
  descriptors (neither is dumpable);
* a submission that outlives its time limit, or ends or hangs its process, loses that check:
  the judge ends the process, and a fresh one runs the notebook again for the next check.

The autograder then writes each check cell's score (its points when every exercise in it
passes, else 0) into nbgrader's gradebook, over what the notebook's own run claimed, and
says where the two differ.

What it does not promise: the submission process runs as the autograder's user, like
nbgrader's own run of the notebook, so a submission written to attack the instructor's files
(the gradebook itself) is not stopped here: grade in a container or as a user who can write
nothing but the course folder's scratch space for that.  An exercise marked ``observed`` is
judged on an account the submission's process makes (apart.py).
"""
from __future__ import annotations

import ast
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from .apart import PACKAGE_ROOT, Silent, _not_dumpable, _Remote, _call_here, judge_here, receive, send
from .guard import TIME_LIMIT_S, safe_str

SETUP_LIMIT_S = 900.0         # the learner's cells, run once (nbgrader's own timeout per cell)
CHECK_LIMIT_S = 3600.0        # the autograder's backstop per check, should a judge itself hang
CHECK_NAMES = ("check",)


@dataclass
class GradedCheck:
    """One locked check cell of the instructor's copy: its nbgrader id, points, and the checks it asserts."""
    grade_id: str
    points: int
    calls: list = field(default_factory=list)      # {"key", "exercise", "expression", "seed", "hidden", "time_limit"}


def graded_checks(nb) -> list[GradedCheck]:
    """The locked check cells of an instructor's (``source/``) notebook, parsed, not run."""
    checks = []
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type != "code" or not meta.get("grade") or meta.get("solution"):
            continue
        graded = GradedCheck(meta["grade_id"], int(meta.get("points", 0)))
        for node in ast.walk(ast.parse(cell.source)):
            call = _check_call(node)
            if call is not None:
                graded.calls.append(dict(call, key=f"{graded.grade_id}/{len(graded.calls)}"))
        if graded.calls:
            checks.append(graded)
    return checks


def _check_call(node) -> Optional[dict]:
    """``assert check("lab2.round_size", round_size, seed=5, graded=True).passed``: what it asks."""
    if not (isinstance(node, ast.Assert) and isinstance(node.test, ast.Attribute) and node.test.attr == "passed"
            and isinstance(node.test.value, ast.Call)):
        return None
    call = node.test.value
    name = call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", None)
    if name not in CHECK_NAMES or len(call.args) != 2 or not isinstance(call.args[0], ast.Constant):
        return None
    options = {k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg}
    return {"exercise": call.args[0].value, "expression": ast.unparse(call.args[1]),
            "seed": options.get("seed"), "hidden": options.get("hidden"),
            "time_limit": options.get("time_limit")}


def learner_cells(nb, checks: list[GradedCheck]) -> list[dict]:
    """What the submission process runs: each code cell's text, and at each locked check cell
    (the first with its id) the names it judges, to be taken there."""
    by_id = {c.grade_id: c for c in checks}
    cells, seen = [], set()
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if grade_id in by_id:
            if grade_id not in seen:
                seen.add(grade_id)
                cells.append({"take": [[c["key"], c["expression"]] for c in by_id[grade_id].calls]})
            continue
        cells.append({"code": cell.source})
    return cells


# ---------------------------------------------------------------- the autograder's side
def judge_command(entry: str) -> list:
    return [sys.executable, "-I", "-c",
            f"import sys; sys.path.insert(0, sys.argv[1]); from allocator_ref.labs.regrade import {entry}; {entry}()",
            PACKAGE_ROOT]


def judge_notebook(cells: list[dict], checks: list[GradedCheck], folder: Path,
                   setup_limit: float = SETUP_LIMIT_S) -> dict:
    """{check key: (passed, explanation)} for one submitted notebook, judged in a judge process
    this process starts; a check the judge never answered is failed."""
    calls = [c for g in checks for c in g.calls]
    errors = tempfile.TemporaryFile()
    judge = subprocess.Popen(judge_command("judge_main"), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=errors, cwd=folder)
    verdicts: dict = {}
    deadline = time.monotonic() + setup_limit + CHECK_LIMIT_S * len(calls)
    try:
        send(judge.stdin, {"cells": cells, "checks": calls, "folder": str(folder), "setup_limit": setup_limit})
        while True:
            try:
                message = receive(judge.stdout, deadline)
            except Silent:
                break
            if message is None or "done" in message:
                break
            if "judged" in message:
                verdicts[message["judged"]] = (message["passed"] is True, str(message["explanation"]))
    finally:
        if judge.poll() is None:
            judge.kill()
        judge.wait()
        errors.seek(0)
        trouble = errors.read()[-2000:].decode(errors="replace")
        for stream in (judge.stdin, judge.stdout, errors):
            stream.close()
    for call in calls:
        verdicts.setdefault(call["key"], (False, "not judged: the judge ended before it got there\n" + trouble))
    return verdicts


def record(name: str, course: Path, course_id: str, say: Callable[[str], None] = print,
           students: Optional[set] = None) -> dict:
    """Judge every submission of assignment ``name`` again (only ``students``, when given: the ones
    nbgrader graded) and write the scores into the gradebook. Returns {student: {grade_id: score}}.
    A submission the judge cannot run is recorded 0, never left at what the learner's kernel claimed."""
    import nbformat
    from nbgrader.api import Gradebook
    _not_dumpable()          # the judges' verdicts arrive on pipes: no process of this user may open ours
    source = next((course / "source" / name).glob("*.ipynb"))
    checks = graded_checks(nbformat.read(source, as_version=4))
    scores: dict = {}
    for submitted in sorted((course / "submitted").glob(f"*/{name}/{source.name}")):
        student = submitted.parents[1].name
        if students is not None and student not in students:
            continue
        try:
            cells = learner_cells(nbformat.read(submitted, as_version=4), checks)
            verdicts = judge_notebook(cells, checks, submitted.parent)
        except Exception as exc:          # noqa: BLE001 (one broken submission stops nobody else)
            say(f"{student} {name}: not judged ({type(exc).__name__}: {str(exc)[:160]}); recorded 0")
            verdicts = {c["key"]: (False, "not judged") for g in checks for c in g.calls}
        scores[student] = {g.grade_id: g.points if all(verdicts[c["key"]][0] for c in g.calls) else 0
                           for g in checks}
        with Gradebook(f"sqlite:///{course / 'gradebook.db'}", course_id=course_id) as gb:
            for graded in checks:
                grade = gb.find_grade(graded.grade_id, source.stem, name, student)
                score = scores[student][graded.grade_id]
                if grade.auto_score != score:
                    say(f"{student} {name} {graded.grade_id}: the notebook's own run scored {grade.auto_score:g}, "
                        f"the clean judge {score:g}; recorded {score:g}")
                grade.auto_score = score
            gb.db.commit()
        failed = [v[1].splitlines()[0] for g in checks for c in g.calls for v in [verdicts[c["key"]]] if not v[0]]
        say(f"{student} {name}: {sum(scores[student].values()):g}/{sum(g.points for g in checks)} "
            f"(judged apart)" + (f"; first failure: {failed[0]}" if failed else ""))
    return scores


# ---------------------------------------------------------------- the judge
class _Submission:
    """The submission process of one notebook, seen from the judge: started, fed the cells, asked."""

    def __init__(self, cells: list[dict], folder: str, setup_limit: float) -> None:
        self.proc = subprocess.Popen(judge_command("serve_main"), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, cwd=folder)
        self.broken: Optional[str] = None
        self.missing: dict = {}
        try:
            send(self.proc.stdin, {"cells": cells})
            ready = receive(self.proc.stdout, time.monotonic() + setup_limit)
        except Silent:
            ready, self.broken = None, f"the notebook's cells were still running after {setup_limit:g} s"
        except OSError:
            ready = None
        if ready is None or "ready" not in ready:
            self.broken = self.broken or "the notebook's process ended before its cells had run (os._exit, a crash?)"
            self.end()
        else:
            self.missing = dict(ready["ready"])

    def end(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.broken = self.broken or "its process was ended"

    def teardown(self, exercise_id: str) -> None:
        """What the exercise's runners started in the submission process (lab 6's receiver)."""
        try:
            send(self.proc.stdin, {"teardown": exercise_id})
            receive(self.proc.stdout, time.monotonic() + REPLY_GRACE)
        except (Silent, OSError):
            self.end()


REPLY_GRACE = 30.0


def judge_main() -> None:
    """The judge of one notebook: start its submission process, judge every check, send each verdict."""
    import importlib
    _not_dumpable()
    inbox = sys.stdin.buffer
    outbox = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)                                  # whatever a judge prints must not enter the verdicts
    request = receive(inbox)
    # The verdicts are the instructor's record (the gradebook, make autograde's log): the same words
    # whatever language the learner's folder, the room or this process's locale would choose.
    from ..editions.language import set_language
    set_language("en")
    check_module = importlib.import_module("allocator_ref.labs.check")
    submission = None
    for call in request["checks"]:
        if submission is None or submission.proc.poll() is not None:
            submission = _Submission(request["cells"], request["folder"], request["setup_limit"])
        passed, explanation = False, submission.broken
        if explanation is None and call["key"] in submission.missing:
            explanation = (f"the check cell judges {call['expression']}, which the notebook did not define "
                           f"there ({submission.missing[call['key']]})")
        if explanation is None:
            ex = check_module.exercise(call["exercise"])
            limit = call["time_limit"] if call["time_limit"] is not None else ex.time_limit or TIME_LIMIT_S
            hidden = call["hidden"] if call["hidden"] is not None else (2 if check_module.quick() else None)
            remote = _Remote(submission.proc.stdout, submission.proc.stdin, limit, key=call["key"],
                             on_silence=submission.end)
            seed = call["seed"] if call["seed"] is not None else check_module.resolve_seed(None)
            result = judge_here(ex, remote, int(seed), hidden, limit)
            passed, explanation = result.passed, result.explanation or "every case passes"
            if ex.teardown is not None and submission.proc.poll() is None:
                submission.teardown(ex.id)
            if remote.silent:
                submission.end()
        send(outbox, {"judged": call["key"], "passed": passed, "explanation": explanation})
    if submission is not None:
        submission.end()
    send(outbox, {"done": True})


# ---------------------------------------------------------------- the submission process
def serve_main() -> None:
    """Run the learner's cells, take the functions the checks name, then answer the judge's calls."""
    import builtins
    import linecache
    import traceback
    inbox = os.fdopen(os.dup(0), "rb")
    outbox = os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)                               # input() in a cell must not read the judge's messages
    os.dup2(2, 1)                                  # nor print() write into them
    request = receive(inbox)
    namespace: dict = {"__name__": "__main__", "__builtins__": builtins}
    taken: dict = {}
    missing: dict = {}
    for number, cell in enumerate(request["cells"], 1):
        if "code" in cell:
            name = f"<cell {number}>"
            # As IPython does: the cell's text in linecache, so inspect.getsource() finds a function
            # defined there (lab 6 sends the receiver's source to another process).
            linecache.cache[name] = (len(cell["code"]), None, cell["code"].splitlines(True), name)
            try:
                exec(compile(cell["code"], name, "exec"), namespace)   # noqa: S102 -- the learner's own notebook
            except BaseException:                  # noqa: B036 -- as nbgrader does: the next cells still run
                traceback.print_exc()
            continue
        for key, expression in cell["take"]:
            try:
                taken[key] = eval(expression, namespace)       # noqa: S307 -- a name from the instructor's cell
            except BaseException as exc:           # noqa: B036
                missing[key] = f"{type(exc).__name__}: {safe_str(exc)}"
    send(outbox, {"ready": missing})
    while (message := receive(inbox)) is not None:
        if "teardown" in message:
            from .check import exercise
            teardown = exercise(message["teardown"]).teardown
            try:
                teardown()
            except BaseException:                  # noqa: B036
                traceback.print_exc()
            send(outbox, {})
            continue
        send(outbox, _call_here(taken[message["key"]], message))
