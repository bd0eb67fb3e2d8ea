"""The recorded grade: ``make autograde`` judges every submission in a sandbox, from judges it never reaches.

One path, one direction (the picture a reader can check against the code):

    autograder (make autograde; locked: not dumpable; subreaper)
      |-- fork --> judge (one per notebook, up to one per core; locked from its first instruction)
      |              |-- verdicts --> one pipe, the autograder's read end; nothing else holds it
      |              '-- starts --> submission process (sandbox.py: another user, limits, no network,
      |                                 its own session; the judge is its subreaper)
      '-- gradebook.db, grades.csv: written by the autograder alone, from the verdicts

* nbgrader files the notebooks into its gradebook and runs none of their code (gradebook.py
  leaves its Execute step out);
* the autograder reads the check cells from the instructor's copy of the assignment
  (``source/labNN``), never from the submission, and the learner's cells from the submitted
  notebook, as text;
* each judge is a *fork* of the autograder, which locked itself first: a fork keeps the lock
  (only execve resets it), so no judge is ever open to ``/proc/<pid>/fd`` or ptrace, not even for
  the moment a freshly exec'd Python would be before its own ``prctl``; it reads the settings the
  autograder was started with (settings.pin), never a file in a folder learners write;
* the judge starts the *submission process*: a fresh Python, in the sandbox, that runs the
  learner's cells in order (at each locked check it only takes the function the check names) and
  then only answers calls, the way a notebook answers a graded check (apart.py); the judge draws
  the cases, computes every expected value and gives every verdict in its own process;
* a submission that outlives its time limit, or ends or hangs its process, loses that check;
  the judge ends it and everything it started, and a fresh one runs the notebook again for the
  next check; a set-up that fails (cells still running at the limit, the process gone) fails the
  notebook's remaining checks at once;
* then the judge runs the notebook top to bottom once more in the sandbox, for the learner's
  report (what ``make feedback`` hands back), and ends everything that run started.

Each judge has a whole budget, past which the autograder kills it and what it left; a check it
never answered is failed.  What it does not promise: not run as root, the sandbox cannot change
user (sandbox.py says what still holds); an exercise marked ``observed`` is judged on an account
the submission's process makes (apart.py).
"""
from __future__ import annotations

import ast
import base64
import json
import os
import selectors
import signal
import struct
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from .. import processes, settings
from . import sandbox
from .check import exercise, quick, resolve_seed
from .apart import PACKAGE_ROOT, Silent, _call_here, receive, send
from .clean import _Remote, judge_here
from .guard import TIME_LIMIT_S, safe_str

SETUP_LIMIT_S = 900.0         # the learner's cells, run once (nbgrader's own timeout per cell)
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
@dataclass
class Notebook:
    """One submitted notebook to judge: whose, the cells it runs, the checks of its assignment."""
    name: str                                      # the key of its verdicts in judge_all's answer
    cells: list
    checks: list
    learner: Optional[str] = None                  # its Unix user, when the machine has one (sandbox.py)
    report: Optional[bytes] = None                 # the notebook to run for the learner's report (feedback)


@dataclass
class Judged:
    """What a judge sent back: a verdict per check key, and the learner's report, when one was asked for."""
    verdicts: dict
    report: Optional[bytes] = None                 # the notebook run in the sandbox, outputs and all
    why_no_report: str = ""


@dataclass
class _Running:
    """A judge this process forked, and what it has sent so far."""
    notebook: Notebook
    pid: int
    fd: int
    slot: int
    deadline: float
    data: bytearray = field(default_factory=bytearray)


def judge_notebook(cells: list[dict], checks: list[GradedCheck], setup_limit: float = SETUP_LIMIT_S,
                   learner: Optional[str] = None) -> dict:
    """{check key: (passed, explanation)} for one submitted notebook (judge_all with one)."""
    return judge_all([Notebook("one", cells, checks, learner)], parallel=1, setup_limit=setup_limit)["one"].verdicts


def judge_all(notebooks: list[Notebook], parallel: Optional[int] = None, setup_limit: float = SETUP_LIMIT_S,
              pinned: Optional[dict] = None) -> dict[str, Judged]:
    """{notebook name: Judged (a verdict per check key: (passed, explanation))}, ``parallel`` judges at
    a time (default: one per core).  Each judge is a fork of this process, never an exec of a new
    program: this process is locked first (sandbox.lock), so every judge is locked from its first
    instruction, before it holds its pipe, and nothing a submission started can open
    /proc/<judge>/fd/*.  A judge past its deadline is killed, and what its submissions left behind
    with it.  A check a judge never answered is failed."""
    sandbox.lock()
    # A killed judge's orphans come back here, to be ended; the caller's own children (a kernel's, a
    # test's hub) were here before and are left alone: only what this call started is ended.
    callers = frozenset(processes.children())
    was_subreaper = processes.is_subreaper()
    processes.subreaper()
    pinned = settings.pinned() if pinned is None else pinned
    sandbox.grader_python(*sandbox.submission_user(None, 0), PACKAGE_ROOT)   # SandboxError now, not per judge
    parallel = max(1, parallel or os.cpu_count() or 1)
    todo, running, answers = list(notebooks), {}, {}
    slots = list(range(parallel))
    with selectors.DefaultSelector() as selector:
        try:
            while todo or running:
                while todo and slots:
                    run = _start(todo.pop(0), slots.pop(), setup_limit, pinned)
                    running[run.fd] = run
                    selector.register(run.fd, selectors.EVENT_READ)
                wait = min(r.deadline for r in running.values()) - time.monotonic()
                for key, _ in selector.select(max(wait, 0)):
                    run = running[key.fd]
                    chunk = os.read(run.fd, 1 << 16)
                    if chunk:
                        run.data += chunk
                    else:                          # it closed its pipe: done (or dead)
                        answers[run.notebook.name] = _finish(run, selector, running, slots, callers, kill=False)
                for run in [r for r in running.values() if time.monotonic() > r.deadline]:
                    answers[run.notebook.name] = _finish(run, selector, running, slots, callers, kill=True)
        finally:
            for run in list(running.values()):    # an interrupt: no judge outlives the autograder
                _finish(run, selector, running, slots, callers, kill=True)
            if not was_subreaper:
                processes.subreaper(False)         # a kernel that called this goes back to what it was
    return answers


def _budget(notebook: Notebook, setup_limit: float) -> float:
    """A judge's whole time: for each check, its notebook set up again (at worst) and every case's limit."""
    total = 0.0
    for call in (c for g in notebook.checks for c in g.calls):
        limit = call["time_limit"] if call["time_limit"] is not None else CASE_BUDGET_S
        total += setup_limit + limit * CASES_BUDGET + 2 * REPLY_GRACE
    return total + (REPORT_LIMIT_S if notebook.report is not None else 0) + 60


def _start(notebook: Notebook, slot: int, setup_limit: float, pinned: dict) -> _Running:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:                                   # the judge: a locked copy of this process
        code = 1
        try:
            os.close(read)
            os.setsid()                            # ^C at the terminal reaches the autograder, which ends it
            os.closerange(3, write)                # no other judge's pipe, nor the gradebook
            os.closerange(write + 1, 1 << 16)
            _forget_inherited_tracker()
            judge_main(notebook, os.fdopen(write, "wb"), slot, setup_limit, pinned)
            code = 0
        except BaseException:                      # noqa: B036 -- whatever happens, only this judge ends
            import traceback
            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(write)
    return _Running(notebook, pid, read, slot, time.monotonic() + _budget(notebook, setup_limit))


def _forget_inherited_tracker() -> None:
    """A judge closes every fd it inherited, and with them the pipe to multiprocessing's resource tracker
    when the autograder's process had started one (pytest after a test that used multiprocessing, a
    kernel): the fork still holds that fd's number, so the judge's first spawn (lab 6's receiver) wrote
    its probe into a closed fd, or into whatever file took the number, and failed in the tracker
    (EBADF at resource_tracker.py's os.close).  Forget it: the judge starts a tracker of its own."""
    import sys
    import threading
    tracker_module = sys.modules.get("multiprocessing.resource_tracker")
    if tracker_module is None:                     # never imported: nothing was inherited
        return
    tracker = tracker_module._resource_tracker
    tracker._lock = threading.RLock()              # another thread may have held it at the fork
    tracker._fd = None
    tracker._pid = None


def _finish(run: _Running, selector, running: dict, slots: list, callers: frozenset, kill: bool) -> Judged:
    selector.unregister(run.fd)
    os.close(run.fd)
    del running[run.fd]
    slots.append(run.slot)
    if kill:
        try:
            os.kill(run.pid, signal.SIGKILL)
        except OSError:
            pass
    os.waitpid(run.pid, 0)
    others = frozenset(r.pid for r in running.values())
    # What its submissions left (orphans of a killed judge), never another judge's nor the caller's own.
    processes.end_descendants(skip=others | callers)
    judged = Judged({}, why_no_report="its judge ended before the report was made")
    for message in _frames(bytes(run.data)):
        if "done" in message:
            break
        if "judged" in message:
            judged.verdicts[str(message["judged"])] = (message["passed"] is True, str(message["explanation"]))
        if "report" in message:
            judged.report = base64.b64decode(message["report"]) if message["report"] else None
            judged.why_no_report = str(message.get("why", ""))
    why = ("not judged: the judge ran past its time budget and was ended" if kill else
           "not judged: the judge ended before it got there")
    for call in (c for g in run.notebook.checks for c in g.calls):
        judged.verdicts.setdefault(call["key"], (False, why))
    return judged


def _frames(data: bytes):
    """The messages in a judge's whole output (apart.send's framing); a cut last one is dropped."""
    at = 0
    while at + 4 <= len(data):
        (size,) = struct.unpack(">I", data[at:at + 4])
        if at + 4 + size > len(data):
            return
        yield json.loads(data[at + 4:at + 4 + size])
        at += 4 + size


def printable(text: str) -> str:
    """A learner's text as the instructor's terminal shows it: no escape codes (an ESC sequence could
    rewrite "0/1" as a full score), control characters written as \\x.. escapes; new lines kept."""
    return "".join(c if c.isprintable() or c == "\n" else ascii(c)[1:-1] for c in str(text))


def record(name: str, course: Path, course_id: str, say: Callable[[str], None] = print,
           students: Optional[set] = None, parallel: Optional[int] = None) -> dict:
    """Judge every submission of assignment ``name`` again (only ``students``, when given: the ones
    nbgrader graded), in parallel, and write the scores into the gradebook; each learner's notebook is
    run once more in the sandbox for their report (autograded/<learner>/<name>/, what feedback shows).
    Returns {student: {grade_id: score}}.  A submission the judge cannot run is recorded 0, never left
    at what nbgrader's pass claimed."""
    import nbformat
    from nbgrader.api import Gradebook
    source = next((course / "source" / name).glob("*.ipynb"))
    checks = graded_checks(nbformat.read(source, as_version=4))
    notebooks, judged = [], {}
    for submitted in sorted((course / "submitted").glob(f"*/{name}/{source.name}")):
        student = submitted.parents[1].name
        if students is not None and student not in students:
            continue
        autograded = course / "autograded" / student / name / source.name
        try:
            cells = learner_cells(nbformat.read(submitted, as_version=4), checks)
            report = autograded.read_bytes() if autograded.is_file() and not autograded.is_symlink() else None
        except Exception as exc:          # noqa: BLE001 (one broken submission stops nobody else)
            say(printable(f"{student} {name}: not judged ({type(exc).__name__}: {str(exc)[:160]}); recorded 0"))
            judged[student] = Judged({c["key"]: (False, "not judged") for g in checks for c in g.calls})
            continue
        notebooks.append(Notebook(student, cells, checks, learner=student, report=report))
    say(f"judging {len(notebooks)} notebooks of {name}, {parallel or os.cpu_count() or 1} at a time: "
        + sandbox.describe())
    judged.update(judge_all(notebooks, parallel=parallel))
    scores: dict = {}
    for student in sorted(judged):
        verdicts = judged[student].verdicts
        scores[student] = {g.grade_id: g.points if all(verdicts[c["key"]][0] for c in g.calls) else 0
                           for g in checks}
        with Gradebook(f"sqlite:///{course / 'gradebook.db'}", course_id=course_id) as gb:
            for graded in checks:
                grade = gb.find_grade(graded.grade_id, source.stem, name, student)
                grade.auto_score = scores[student][graded.grade_id]
            gb.db.commit()
        if judged[student].report is not None:
            _keep_report(judged[student].report, course / "autograded" / student / name / source.name)
        elif judged[student].why_no_report:
            say(printable(f"{student} {name}: no report for feedback ({judged[student].why_no_report})"))
        failed = [v[1].splitlines()[0] for g in checks for c in g.calls for v in [verdicts[c["key"]]] if not v[0]]
        say(printable(f"{student} {name}: {sum(scores[student].values()):g}/{sum(g.points for g in checks)} "
                      f"(judged apart)" + (f"; first failure: {failed[0]}" if failed and failed[0] else "")))
    return scores


def _keep_report(data: bytes, path: Path) -> None:
    """The sandbox's run of the notebook, in place of nbgrader's unrun copy (a new file: never through a link)."""
    import nbformat
    try:
        nbformat.reads(data.decode("utf-8"), as_version=4)
    except Exception:                     # noqa: BLE001 -- not a notebook: keep nbgrader's copy
        return
    fresh = path.with_name(path.name + ".new")
    fresh.unlink(missing_ok=True)
    fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(fresh, path)


# ---------------------------------------------------------------- the judge
class _Submission:
    """The submission process of one notebook, seen from the judge: started in the sandbox, fed the
    cells, asked.  ``broken``: why its set-up failed (then no check of the notebook runs it again)."""

    def __init__(self, cells: list[dict], box: sandbox.Sandbox, setup_limit: float) -> None:
        command = [box.python, "-I", "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                   "from allocator_ref.labs.regrade import serve_main; serve_main()", PACKAGE_ROOT]
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, cwd=box.folder, env=box.env(),
                                     preexec_fn=box.enter, start_new_session=True)
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
        """Kill it and everything it started (this judge is their subreaper)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        processes.end_descendants()
        self.broken = self.broken or "its process was ended"

    def teardown(self, exercise_id: str) -> None:
        """What the exercise's runners started in the submission process (lab 6's receiver)."""
        try:
            send(self.proc.stdin, {"teardown": exercise_id})
            receive(self.proc.stdout, time.monotonic() + REPLY_GRACE)
        except (Silent, OSError):
            self.end()


REPLY_GRACE = 30.0
CASE_BUDGET_S = TIME_LIMIT_S      # a case's limit when the check cell names none (the judge's budget)
CASES_BUDGET = 40                 # at most this many cases' limits per check, in a judge's whole budget


def judge_main(notebook: Notebook, outbox, slot: int, setup_limit: float, pinned: dict) -> None:
    """The judge of one notebook (a fork of the autograder): run its submission process in a sandbox,
    judge every check, send each verdict."""
    sandbox.lock()
    processes.subreaper()                          # what a submission orphans comes here, to be ended
    os.dup2(2, 1)                                  # whatever a judge prints must not enter the verdicts
    settings.pin(pinned)                           # the instructor's settings, never a file a learner wrote
    # The verdicts are the instructor's record (the gradebook, make autograde's log): the same words
    # whatever language the learner's folder, the room or this process's locale would choose.
    from ..editions.language import set_language
    set_language("en")
    box = sandbox.sandbox_for(notebook.learner, slot, PACKAGE_ROOT)
    submission, set_up_failed = None, None
    try:
        for call in (c for g in notebook.checks for c in g.calls):
            if set_up_failed is None and (submission is None or submission.proc.poll() is not None):
                if submission is not None:
                    submission.end()
                submission = _Submission(notebook.cells, box, setup_limit)
                set_up_failed = submission.broken  # one failed set-up fails every check left, at once
            passed, explanation = False, set_up_failed
            if explanation is None and call["key"] in submission.missing:
                explanation = (f"the check cell judges {call['expression']}, which the notebook did not define "
                               f"there ({submission.missing[call['key']]})")
            if explanation is None:
                ex = exercise(call["exercise"])
                limit = call["time_limit"] if call["time_limit"] is not None else ex.time_limit or TIME_LIMIT_S
                hidden = call["hidden"] if call["hidden"] is not None else (2 if quick() else None)
                remote = _Remote(submission.proc.stdout, submission.proc.stdin, limit, key=call["key"],
                                 on_silence=submission.end)
                seed = call["seed"] if call["seed"] is not None else resolve_seed(None)
                result = judge_here(ex, remote, int(seed), hidden, limit)
                passed, explanation = result.passed, result.explanation or "every case passes"
                if ex.teardown is not None and submission.proc.poll() is None:
                    submission.teardown(ex.id)
                if remote.silent:
                    submission.end()
            send(outbox, {"judged": call["key"], "passed": passed, "explanation": explanation})
        if notebook.report is not None:
            if submission is not None:
                submission.end()                   # nothing of the judged run is left when the report runs
            report, why = run_report(notebook.report, box)
            send(outbox, {"report": base64.b64encode(report).decode() if report else None, "why": why})
        send(outbox, {"done": True})
    finally:
        if submission is not None:
            submission.end()
        processes.end_descendants()
        box.close()


# ---------------------------------------------------------------- the learner's report
REPORT_LIMIT_S = 1200.0       # the whole notebook run for the report (nbgrader's own run took 900 s a cell)
REPORT_CELL_S = 300           # one cell of it
REPORT_MAX_BYTES = 64 << 20   # the run notebook brought back (outputs are cut at 1 MB each by nbgrader's export)
REPORT_RUNNER = ("import sys, nbformat; from nbclient import NotebookClient; "
                 "nb = nbformat.read('report.ipynb', as_version=4); "
                 "NotebookClient(nb, timeout=int(sys.argv[1]), allow_errors=True, kernel_name='python3').execute(); "
                 "nbformat.write(nb, 'report.ipynb')")


def run_report(notebook: bytes, box: sandbox.Sandbox, limit: float = REPORT_LIMIT_S) -> tuple[Optional[bytes], str]:
    """(the notebook run top to bottom in the sandbox, or None; why not): what the learner's feedback shows.

    This replaces nbgrader's own run, which executed every learner's cells as the instructor's user (root
    under sudo): the cells run here as the sandbox's user, in its scratch folder, with its limits, and the
    whole run has a deadline; then every process it started is ended.  The notebook comes back read without
    following a link, only when it is a plain file of the sandbox's user: nothing else of the folder leaves."""
    path = box.folder / "report.ipynb"
    path.write_bytes(notebook)
    if box.uid is not None:
        os.chown(path, box.uid, box.gid)
    env = dict(box.env(), PYTHONPATH=PACKAGE_ROOT, ALLOCATOR_REF_LAB_QUICK=settings.get("lab_quick").value)
    proc = subprocess.Popen([box.python, "-I", "-c", REPORT_RUNNER, str(REPORT_CELL_S)], cwd=box.folder, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=box.enter, start_new_session=True)
    try:
        proc.wait(limit)
        why = "" if proc.returncode == 0 else f"the notebook's run for the report stopped (exit {proc.returncode})"
    except subprocess.TimeoutExpired:
        why = f"the notebook's run for the report was still going after {limit:g} s and was ended"
    finally:
        proc.kill()
        proc.wait()
        processes.end_descendants()                  # its kernel, and all the kernel left behind
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        return None, why or f"no report notebook ({exc.strerror})"
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        owner = box.uid if box.uid is not None else os.getuid()
        if (st.st_mode & 0o170000) != 0o100000 or st.st_uid != owner or st.st_nlink != 1:
            return None, "the report notebook was replaced by something else than a plain file"
        data = f.read(REPORT_MAX_BYTES + 1)
    if len(data) > REPORT_MAX_BYTES:
        return None, f"the report notebook grew past {REPORT_MAX_BYTES >> 20} MiB"
    return data, why


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
            teardown = exercise(message["teardown"]).teardown
            try:
                teardown()
            except BaseException:                  # noqa: B036
                traceback.print_exc()
            send(outbox, {})
            continue
        send(outbox, _call_here(taken[message["key"]], message))
