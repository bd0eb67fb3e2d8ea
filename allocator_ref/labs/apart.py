"""Graded checks judge in a clean process: the submission never shares a process with an expected value.

In the open mode (``check(id, fn)``) the judge and the learner's code share the
notebook's process: a submission can read the judge's expected value off the
stack (``sys._getframe(1).f_locals``) or patch a class the reference still
shares.  A graded check (``check(..., graded=True)``, what the nbgrader release
writes) runs differently, for every exercise marked ``pure`` or ``observed``:

* a fresh Python (``python -I``: no PYTHON* variables, no user site, not the
  notebook's working folder, and not dumpable: the notebook cannot read its
  memory) imports this package, draws the same cases from the same seed and runs
  every judge: every expected value is computed there, and only there;
* ``pure`` exercises (the judge reads only what the submission returns): each
  time a judge calls the submission, the clean process sends the arguments here
  (pickled: our own data, from our own process) and the submission runs in the
  notebook's process, guarded as usual, with nothing of the judge on its stack;
* ``observed`` exercises (the submission is handed live objects: a device, an
  allocator, streams): the judge asks ``check.observed(submission, runner,
  *inputs)``; the clean process sends the runner's name and the case's inputs
  here, and the runner (a function of a lab module) builds the live objects in
  the notebook's process, runs the submission on them and describes what
  happened; the judge then computes the expected values, in the clean process,
  and gives the verdict there;
* what comes back is *plain data* only (int, float, str, bool, None and lists,
  tuples, dicts of them), encoded by hand: the clean process never unpickles
  anything the submission made, so it never runs the submission's code.

What this promises: no expected value is ever in the process the submission runs
in, and nothing the submission patches (a shared class, a module function, the
checker's own code in the notebook) changes an expected value or a verdict.
What it does not promise: the account of what an ``observed`` submission did is
made in the notebook's process, next to the submission, so code written to
forge that account (patch the device's counters, or the runner itself) is not
stopped; and the verdict comes back to the notebook's process, which shows it:
code there can change what it shows (rebind ``check``, patch the result, wrap
``receive``).  That is why the recorded grade is not this one: ``make
autograde`` judges every submission again with the same machinery, from
processes the learner's kernel never ran in (regrade.py).  Every exercise is marked one or the other
(tests/test_labs_attacks.py keeps it so); one marked neither would be judged in the
notebook's process, as in the open mode.
"""
from __future__ import annotations

import base64
import json
import os
import pickle
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

from ..editions.language import language
from ..editions.messages import translator
from .verdict import Fail
from .guard import run_guarded, safe_str
from .results import CaseResult, CheckResult

PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])     # the folder that holds allocator_ref/
MAX_DEPTH = 64
MAX_ITEMS = 1_000_000
MAX_MESSAGE = 256 << 20
REPLY_GRACE_S = 30.0          # past a case's limit, how long the clean process waits for a reply
tr = translator("labs")


class NotPlainData(TypeError):
    """The submission returned something a graded check cannot carry (a class instance, a numpy number...)."""


# ---------------------------------------------------------------- plain data, by hand
def encode(value: Any) -> Any:
    """A JSON-able, exactly typed copy of ``value`` (bool stays bool, tuple stays tuple)."""
    count = [0]

    def enc(v, depth):
        count[0] += 1
        if depth > MAX_DEPTH or count[0] > MAX_ITEMS:
            raise NotPlainData(tr("a value nested deeper than 64 levels or with more than a million items"))
        t = type(v)
        if v is None:
            return ["none"]
        if t is bool:
            return ["bool", v]
        if t is int:
            return ["int", str(v)]
        if t is float:
            return ["float", v.hex()]
        if t is str:
            return ["str", v]
        if t in (list, tuple):
            return [t.__name__, [enc(x, depth + 1) for x in v]]
        if t is dict:
            return ["dict", [[enc(k, depth + 1), enc(x, depth + 1)] for k, x in v.items()]]
        raise NotPlainData(tr("a {kind}", kind=t.__name__))
    return enc(value, 0)


def decode(data: Any) -> Any:
    kind = data[0]
    if kind == "none":
        return None
    if kind == "bool":
        return bool(data[1])
    if kind == "int":
        return int(data[1])
    if kind == "float":
        return float.fromhex(data[1])
    if kind == "str":
        return str(data[1])
    if kind in ("list", "tuple"):
        items = [decode(x) for x in data[1]]
        return items if kind == "list" else tuple(items)
    if kind == "dict":
        return {decode(k): decode(v) for k, v in data[1]}
    raise ValueError(f"not an encoded value: {kind!r}")


# ---------------------------------------------------------------- messages: 4-byte length + JSON
def send(stream, message: dict) -> None:
    body = json.dumps(message).encode()
    stream.write(struct.pack(">I", len(body)) + body)
    stream.flush()


class Silent(Exception):
    """The other side sent nothing before the deadline (a submission that escaped its time limit,
    a judge that hangs): the caller stops waiting and ends that process."""


def receive(stream, deadline: Optional[float] = None) -> Optional[dict]:
    """The next message, or None when the other side closed the pipe; past ``deadline`` (a
    ``time.monotonic()`` value) raise Silent.  Reads the file descriptor itself, never a buffer,
    so that waiting with a deadline sees every byte that has arrived."""
    head = _read_exactly(stream.fileno(), 4, deadline)
    if len(head) < 4:
        return None
    (size,) = struct.unpack(">I", head)
    if size > MAX_MESSAGE:
        raise ValueError(f"a message of {size} bytes (more than {MAX_MESSAGE})")
    body = _read_exactly(stream.fileno(), size, deadline)
    if len(body) < size:
        return None
    return json.loads(body)


def _read_exactly(fd: int, size: int, deadline: Optional[float]) -> bytes:
    import select
    import time
    parts, got = [], 0
    while got < size:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise Silent()
        chunk = os.read(fd, min(size - got, 1 << 20))
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


# ---------------------------------------------------------------- the notebook's side
STARTUP_S = 60.0              # the clean process's own start (imports) before its first message


def judge_command() -> list:
    """The clean process: ``python -I`` (no PYTHON* variables, no user site, not the notebook's folder)."""
    return [sys.executable, "-I", "-c",
            "import sys; sys.path.insert(0, sys.argv[1]); from allocator_ref.labs.clean import main; main()",
            PACKAGE_ROOT]


def judge_apart(ex, submission, seed: int, hidden: Optional[int], time_limit: float, worker=None):
    """Run ``ex``'s cases in a clean process, calling ``submission`` here; return the CheckResult.

    ``worker`` (check() passes a deadline.Worker): runs each call of the submission in a forked child
    that this process ends at its own deadline, so a submission that switches off guard.py's timer
    cannot hold the notebook here; without one, the calls run in this process.

    The wait has a deadline too: the clean process speaks at least once per case (each call of the
    submission, then the verdict), so a silence longer than a case's limit plus the two processes'
    grace means it hangs; it is then ended and the report says so."""
    import tempfile
    import time
    errors = tempfile.TemporaryFile()         # its stderr: a file, so that no full pipe can block it
    proc = subprocess.Popen(judge_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors)
    wait = time_limit + 2 * REPLY_GRACE_S + STARTUP_S
    try:
        # The clean process starts elsewhere (python -I): it is told the learner's language, which
        # set_language() in the notebook may have chosen and no variable or folder would tell it.
        send(proc.stdin, {"exercise": ex.id, "seed": seed, "hidden": hidden, "time_limit": time_limit,
                          "language": language()})
        while True:
            try:
                message = receive(proc.stdout, time.monotonic() + wait)
            except KeyboardInterrupt:                 # the stop button while the judge works
                return _stopped(ex, seed, tr("interrupted (the stop button or Ctrl-C): the remaining cases "
                                             "were not run"))
            except Silent:
                return _stopped(ex, seed, tr("stopped: the graded judge sent nothing for {wait} s (each case "
                                             "may take {limit} s); it was ended and the remaining cases were "
                                             "not run", wait=f"{wait:g}", limit=f"{time_limit:g}"))
            if message is None:
                errors.seek(0)
                err = errors.read().decode(errors="replace")[-2000:]
                raise RuntimeError(f"the graded judge process ended before it answered (exit code "
                                   f"{proc.wait()}):\n{err}")
            if "done" in message:
                result = CheckResult(exercise=ex.id, seed=seed)
                result.cases = [CaseResult(**c) for c in message["done"]["cases"]]
                result.explanation = message["done"]["explanation"]
                return result
            try:
                reply = worker.call(message) if worker is not None else _call_here(submission, message)
            except KeyboardInterrupt:
                return _stopped(ex, seed, "interrupted (the stop button or Ctrl-C): the remaining cases "
                                "were not run")
            try:
                send(proc.stdin, reply)
            except OSError:                           # it gave up on this reply (too late): read its verdict
                pass
    finally:
        if worker is not None:
            worker.close()                     # its teardown (what the runners started there), then the kill
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for stream in (proc.stdin, proc.stdout, errors):
            stream.close()
        if ex.teardown is not None:            # what the runners started here (lab 6's receiver process)
            ex.teardown()


def _stopped(ex, seed: int, why: str) -> CheckResult:
    result = CheckResult(exercise=ex.id, seed=seed)
    result.cases = [CaseResult(tr("the graded check"), False, False, why, stopped=True)]
    result.explanation = why
    return result


def _call_here(submission, message: dict) -> dict:
    args, kwargs = pickle.loads(base64.b64decode(message["args"]))   # made by our clean process
    reply: dict = {}
    target = submission
    if "observe" in message:                   # an observed exercise: the runner runs the submission here
        runner = _runner(message["observe"])
        target = lambda *a, **k: runner(submission, *a, **k)   # noqa: E731

    def call():
        value = target(*args, **kwargs)
        try:
            reply["value"] = encode(value)
        except NotPlainData as exc:
            reply["raised"] = {"type": "TypeError", "message":
                               tr("it returned {what}: a graded check carries back only plain data (int, float, "
                                  "str, bool, None, and lists, tuples and dicts of them)", what=exc), "where": ""}
    outcome = run_guarded(call, message["time_left"])
    reply["output"] = outcome.output
    if outcome.timed_out:
        reply = {"timeout": True, "output": outcome.output}
    elif type(outcome.error) is Fail:          # the runner saw a wrong behaviour (no expected value needed)
        reply.pop("value", None)
        exc = outcome.error
        reply["fail"] = {"message": safe_str(Exception(exc.message)), "safe": safe_str(Exception(exc.safe)),
                         "hint": exc.hint if isinstance(exc.hint, str) else None}
    elif outcome.error is not None:
        reply.pop("value", None)
        reply["raised"] = _describe_raised(outcome.error)
    return reply


def serve(submission, inbox, outbox, teardown=None) -> None:
    """A graded check's worker (deadline.Worker): answer each call of the clean process, run here;
    ``{"teardown": True}``: stop what the runners started (lab 6's receiver), answer, and end."""
    while (message := receive(inbox)) is not None:
        if "teardown" in message:
            if teardown is not None:
                teardown()
            send(outbox, {})
            return
        send(outbox, _call_here(submission, message))


def _runner(name: str):
    """The runner a graded check's clean process names: a module-level function of a lab module."""
    import importlib
    module, _, qualname = name.partition(":")
    if not module.startswith("allocator_ref.labs.") or not qualname.isidentifier():
        raise ValueError(f"not a lab runner: {name!r}")
    return getattr(importlib.import_module(module), qualname)


def _describe_raised(exc: BaseException) -> dict:
    import traceback
    if isinstance(exc, KeyboardInterrupt):
        return {"type": "KeyboardInterrupt", "message": "", "where": ""}
    if isinstance(exc, SystemExit):
        return {"type": "SystemExit", "message": safe_str(exc), "where": ""}
    where = ""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith(PACKAGE_ROOT)]
    if frames:
        f = frames[-1]
        where = (tr(" (at {file}:{line}: {code})", file=Path(f.filename).name, line=f.lineno, code=f.line)
                 if f.line else tr(" (line {line})", line=f.lineno))
    return {"type": type(exc).__name__, "message": safe_str(exc), "where": where,
            "stub": isinstance(exc, NotImplementedError)}
