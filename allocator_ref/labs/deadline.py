"""A time limit the submission cannot switch off: its code runs in a forked child, and the
notebook's process, which runs none of it, ends that child at a deadline of its own.

guard.py's limit lives in the process that runs the submission (a ``SIGALRM`` timer and a
trace function), so code there can turn it off: ``signal.setitimer(signal.ITIMER_REAL, 0)``,
``signal.alarm(0)``, ``signal.signal(signal.SIGALRM, signal.SIG_IGN)`` or a handler of its own,
the same through ``_signal`` or ``ctypes``, ``sys.settrace(None)``.  The limit that counts is
therefore kept where the submission never runs:

* ``check()`` (the open mode) forks; the child runs the cases exactly as before (guarded, so an
  honest endless loop gets its usual report) and sends back each case's result as plain data;
  the notebook's process waits for each with its own clock: the case's limit plus
  ``BACKSTOP_S``.  Past that it kills the child's process group with ``SIGKILL``, which no code
  in the child can catch, ignore or cancel, and reports the case stopped;
* a graded check's notebook side runs each call of the submission in a forked worker the same
  way (:class:`Worker`, which check() hands to apart.judge_apart).

The notebook's process counts at most as many cases as it drew itself, each with its own
deadline, so a child that answers early or often cannot stretch the total.

Why a process and not a watchdog thread: a thread shares the interpreter with the submission; it
can only *ask* the main thread to stop (a signal, an async exception), which the submission can
catch, ignore or never reach (one long C call holds the GIL), and it is one more thread holding
locks when anything in the process forks (a lock held at ``fork()`` stays held forever in the
child: the classic fork-with-threads deadlock).  Nothing here starts a thread.

Where ``os.fork`` is missing (Windows), the cases run in the notebook's process, under guard.py's
limit alone.  The child is a subreaper (allocator_ref/processes.py): a process the submission starts
and moves out of the child's process group (``os.setsid()`` in a grandchild) stays below it and is
ended with it.  What it does not reach: a child that ends itself (``os._exit``) before the check does
hands its orphans to init.
"""
from __future__ import annotations

import os
import signal
import sys
import tempfile
import time
import warnings
from dataclasses import asdict
from typing import Any, Callable, Optional

from .. import processes
from ..editions.messages import translator
from .apart import Silent, receive, send, serve
from .results import CaseResult, CheckResult

tr = translator("labs")   # the lines a stopped case gets, in the learner's language

BACKSTOP_S = 3.0          # past a case's limit: guard.py's own stop reports first; this ends the child
TEARDOWN_S = 15.0         # after the last case: the child's teardown (lab 6 stops its receiver process)


def available() -> bool:
    """Whether checks run in a forked child here (a POSIX system)."""
    return hasattr(os, "fork")


def ended_text(limit: float) -> str:
    """The one line a case gets when the notebook's process had to end the child."""
    return tr("stopped after {limit} s: your code was still running past check()'s limit of {limit} s "
              "per case and did not stop when asked (did it switch off the timer?), so check() ended the "
              "process running it. Make it return in time: look for a loop that never ends; the remaining "
              "cases were not run", limit=f"{limit:g}")


def died_text() -> str:
    return tr("the process running your code ended during this case (os._exit(), a crash, or it was killed): "
              "nothing came back to judge; the remaining cases were not run")


def interrupted_text() -> str:
    return tr("interrupted (the stop button or Ctrl-C): the remaining cases were not run")


SPILL_SHOWN = 16 << 10     # bytes of what the child wrote to fds 1 and 2 shown after it ends


def _spill_descriptors(spill: int) -> None:
    """In the child: file descriptors 1 and 2 lead to a file of the parent's, not to the notebook's own.
    Replacing ``sys.stdout`` does not reach what writes to the descriptor itself (``os.write(1, ...)``,
    a C library's printf, a process it starts); in a kernel fd 1 is ipykernel's capture pipe, and
    50 MB written there from this fork killed the kernel (issue 57): open mode failed an answer the
    autograder passed (its submission process writes fds 1 and 2 to /dev/null)."""
    os.dup2(spill, 1)
    os.dup2(spill, 2)


def _show_spill(spill) -> None:
    """The first SPILL_SHOWN bytes the child wrote to its descriptors, printed here through sys.stdout
    (a kernel's own stream): lab 6's receiver, started from a script with no main guard, says there
    how to fix it.  The rest is left unread."""
    spill.seek(0)
    shown = spill.read(SPILL_SHOWN)
    spill.close()
    if shown:
        sys.stdout.write(shown.decode(errors="replace"))


class Child:
    """A forked copy of this process running ``body(inbox, outbox)`` (framed messages, apart.py's
    ``send``/``receive``), in a process group of its own so that ``end()`` kills what it started too."""

    def __init__(self, body: Callable[[Any, Any], None]) -> None:
        down_r, down_w = os.pipe()                 # this process -> the child
        self.spill = tempfile.TemporaryFile()      # the child's fds 1 and 2 (_spill_descriptors)
        up_r, up_w = os.pipe()                     # the child -> this process
        with warnings.catch_warnings():
            # Python 3.12+ warns on every fork of a process with threads (a Jupyter kernel has some). The
            # child runs only the checker and the submission, and if a lock a kernel thread held at the
            # fork ever blocks it, this process's deadline still ends it.
            warnings.filterwarnings("ignore", message=".*multi-threaded.*fork", category=DeprecationWarning)
            pid = os.fork()
        if pid == 0:                               # the child: never returns into the caller's stack
            status = 0
            try:
                os.setpgid(0, 0)
                processes.subreaper()              # what the submission orphans stays below this child
                os.close(down_w)
                os.close(up_r)
                # The notebook's streams belong to the parent (a kernel's go through its own threads):
                # what the learner prints is captured per case by guard.run_guarded anyway.
                sys.stdout = sys.stderr = open(os.devnull, "w")
                _spill_descriptors(self.spill.fileno())
                body(os.fdopen(down_r, "rb"), os.fdopen(up_w, "wb"))
            except BaseException:                  # noqa: B036 -- whatever happens, only this child ends
                status = 1
            finally:
                processes.end_descendants()        # a setsid grandchild too: nothing it started outlives it
                os._exit(status)
        os.close(down_r)
        os.close(up_w)
        try:
            os.setpgid(pid, pid)                   # both sides set it: no race with the first kill
        except OSError:
            pass
        self.pid = pid
        self.inbox = os.fdopen(up_r, "rb")
        self.outbox = os.fdopen(down_w, "wb")

    def ask(self, message: Optional[dict], seconds: float) -> Optional[dict]:
        """Send ``message`` (if any), then the child's next message within ``seconds``; None when the
        child ended; Silent past the deadline."""
        if message is not None:
            try:
                send(self.outbox, message)
            except OSError:                        # it has ended: its pipe is closed
                return None
        return receive(self.inbox, time.monotonic() + seconds)

    def end(self) -> None:
        """Kill the child, all below it and its process group (SIGKILL: nothing there can refuse it) and
        reap it.  The child is a subreaper, so a ``setsid`` grandchild that left the group is still below it."""
        processes.end_tree(self.pid)
        for kill in (lambda: os.killpg(self.pid, signal.SIGKILL), lambda: os.kill(self.pid, signal.SIGKILL)):
            try:
                kill()
            except OSError:                        # already gone, or it left its group
                pass
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
        for stream in (self.inbox, self.outbox):
            try:
                stream.close()
            except OSError:
                pass
        _show_spill(self.spill)


def judge_in_child(ex, submission: Any, seed: int, cases: list, run_case: Callable, limit: float) -> CheckResult:
    """check.judge(), with ``run_case(case, submission, limit)`` run in a forked child for each of
    ``cases`` (drawn here), each ended by this process's deadline."""
    result = CheckResult(exercise=ex.id, seed=seed)

    def run_cases(inbox, outbox) -> None:           # in the child
        try:
            for case in cases:
                outcome = run_case(case, submission, limit)
                send(outbox, {"case": asdict(outcome)})
                if outcome.stopped:
                    break
        finally:
            if ex.teardown is not None:
                ex.teardown()
            send(outbox, {"end": True})

    child = Child(run_cases)
    ended = False                                  # this process had to end the child (or it died)
    try:
        for i, case in enumerate(cases):
            why = None
            try:
                message = child.ask(None, limit + BACKSTOP_S)
            except Silent:
                why = ended_text(limit)
            except KeyboardInterrupt:              # the stop button, while the child works
                why = interrupted_text()
            except ValueError:                     # not a message of ours: what ran there broke the pipe
                why = died_text()
            else:
                try:
                    outcome = CaseResult(**message["case"])
                except (TypeError, KeyError):      # None (it ended), or not a case's result
                    why = died_text()
            if why is not None:
                ended = True
                outcome = CaseResult(case.label, case.hidden, False, why, stopped=True)
            result.cases.append(outcome)
            if result.cases[-1].stopped:
                result.cases.extend(CaseResult(c.label, c.hidden, False, "not run: an earlier case was stopped")
                                    for c in cases[i + 1:])
                break
        if not ended:
            try:
                child.ask(None, TEARDOWN_S)        # its teardown: a clean end where there is one
            except (Silent, KeyboardInterrupt, ValueError):
                pass
    finally:
        child.end()
    first = next((c for c in result.cases if not c.passed), None)
    if first is not None:
        result.explanation = first.explanation
    return result


class Worker:
    """A graded check's notebook side: the submission's calls run in a forked child, one at a time,
    each ended by this process's deadline (the call's time left plus BACKSTOP_S)."""

    def __init__(self, ex, submission: Any) -> None:
        self.ex, self.submission, self.child = ex, submission, None

    def serve(self, inbox, outbox) -> None:       # in the child
        serve(self.submission, inbox, outbox, self.ex.teardown)

    def call(self, message: dict) -> dict:
        """The child's reply to one call: its own, or ``{"timeout": True}`` when this process had to
        end it, or ``{"ended": True}`` when it died."""
        if self.child is None:
            self.child = Child(self.serve)
        try:
            reply = self.child.ask(message, float(message.get("time_left", 0)) + BACKSTOP_S)
        except Silent:
            self.close(teardown=False)
            return {"timeout": True, "output": ""}
        except BaseException:                      # noqa: B036 -- KeyboardInterrupt: end it, then go on up
            self.close(teardown=False)
            raise
        if reply is None:
            self.close(teardown=False)
            return {"ended": True}
        return reply

    def close(self, teardown: bool = True) -> None:
        if self.child is None:
            return
        child, self.child = self.child, None
        if teardown:
            try:
                child.ask({"teardown": True}, TEARDOWN_S)
            except (Silent, KeyboardInterrupt, ValueError):
                pass
        child.end()
