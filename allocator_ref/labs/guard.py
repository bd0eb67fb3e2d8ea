"""Run one case of a learner's code so that nothing it does can break ``check()`` itself.

``check()`` is a teaching aid, not a sandbox: the learner's code runs in the
learner's own process.  But an honest mistake must never stop the notebook,
hang it, flood it, or fool the judge:

* ``run_guarded`` catches *every* exception, ``sys.exit()`` and
  ``KeyboardInterrupt`` included (``BaseException``), and stops a case after a
  time limit (a ``SIGALRM`` timer, re-arming whatever timer was set before,
  e.g. pytest-timeout's);
* what the learner's code prints is captured and capped (``OUTPUT_CAP``
  characters per case), and the report says when it was cut;
* ``show`` turns any learner value into a short text, even one whose
  ``__repr__``/``__str__`` raises;
* ``same`` compares by exact type and value, recursively, so an object whose
  ``__eq__`` always answers True is not "equal" to anything.
"""
from __future__ import annotations

import contextlib
import io
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

TIME_LIMIT_S = 120.0          # per case; generous: the machine may be shared and slow
OUTPUT_CAP = 2000             # characters of learner output kept per case
SHOW_CAP = 200                # characters of a learner value shown in a message


class CaseTimeout(BaseException):
    """Raised inside the learner's code when a case runs past its time limit."""


@dataclass
class Outcome:
    error: Optional[BaseException] = None      # what the case raised (None: it returned)
    timed_out: bool = False
    output: str = ""                           # what the learner's code printed (capped)
    output_chars: int = 0                      # how much it printed in all


class CappedWriter(io.TextIOBase):
    """A stdout/stderr stand-in that keeps the first ``cap`` characters and counts the rest."""

    def __init__(self, cap: int) -> None:
        self.cap, self.kept, self.total = cap, [], 0

    def writable(self) -> bool:
        return True

    def write(self, text) -> int:
        text = text if isinstance(text, str) else str(text)
        room = self.cap - sum(map(len, self.kept))
        if room > 0:
            self.kept.append(text[:room])
        self.total += len(text)
        return len(text)

    def text(self) -> str:
        return "".join(self.kept)


@contextlib.contextmanager
def time_limit(seconds: Optional[float]):
    """Raise CaseTimeout in the main thread after ``seconds``; restore any timer set before."""
    if not seconds or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield                                     # no SIGALRM here (Windows, a worker thread): no limit
        return

    def on_alarm(signum, frame):
        raise CaseTimeout()
    old_handler = signal.signal(signal.SIGALRM, on_alarm)
    old_delay, old_interval = signal.setitimer(signal.ITIMER_REAL, seconds)
    start = time.monotonic()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_handler)
        if old_delay:                              # someone else's timer (pytest-timeout): keep it running
            left = old_delay - (time.monotonic() - start)
            signal.setitimer(signal.ITIMER_REAL, max(left, 0.001), old_interval)


def run_guarded(call: Callable[[], Any], seconds: Optional[float] = TIME_LIMIT_S,
                cap: int = OUTPUT_CAP) -> Outcome:
    """Run ``call()``; never raise; report what it raised, whether it timed out and what it printed."""
    out = CappedWriter(cap)
    outcome = Outcome()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out), time_limit(seconds):
            call()
    except CaseTimeout:
        outcome.timed_out = True
    except BaseException as exc:        # noqa: B036 -- sys.exit(), KeyboardInterrupt: the notebook goes on
        outcome.error = exc
    outcome.output, outcome.output_chars = out.text(), out.total
    return outcome


def show(value: Any, cap: int = SHOW_CAP) -> str:
    """``repr(value)`` for a message, cut to ``cap`` characters; never raises."""
    try:
        text = repr(value)
        if not isinstance(text, str):
            raise TypeError("__repr__ returned a non-string")
    except BaseException as exc:        # noqa: B036 -- a learner's __repr__ may do anything
        text = f"<a {type(value).__name__} whose repr() raised {type(exc).__name__}>"
    return text if len(text) <= cap else text[:cap] + f"... ({len(text)} characters)"


def safe_str(exc: BaseException) -> str:
    """``str(exc)`` that survives an exception whose ``__str__`` raises."""
    try:
        text = str(exc)
        if not isinstance(text, str):
            raise TypeError
    except BaseException:               # noqa: B036
        return f"<its message could not be printed: {type(exc).__name__}.__str__ raised>"
    return text if len(text) <= 4 * SHOW_CAP else text[:4 * SHOW_CAP] + "..."


def same(got: Any, expected: Any) -> bool:
    """Exact type and value, recursively: ``1.0`` is not ``1``, ``True`` is not ``1``,
    and no object can pass by overriding ``__eq__``."""
    if type(got) is not type(expected):
        return False
    if isinstance(expected, dict):
        return got.keys() == expected.keys() and all(same(got[k], expected[k]) for k in expected)
    if isinstance(expected, (list, tuple)):
        return len(got) == len(expected) and all(same(a, b) for a, b in zip(got, expected))
    return bool(type(expected).__eq__(expected, got) is True)
