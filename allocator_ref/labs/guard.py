"""Run one case of a learner's code so that nothing it does can break ``check()`` itself.

``check()`` is a teaching aid, not a sandbox: the learner's code runs in the
learner's own process.  But an honest mistake must never stop the notebook,
hang it, flood it, or fool the judge:

* ``run_guarded`` catches *every* exception, ``sys.exit()`` and
  ``KeyboardInterrupt`` included (``BaseException``), and stops a case after a
  time limit (a ``SIGALRM`` timer, re-arming whatever timer was set before,
  e.g. pytest-timeout's);
* the stop is *sticky*: code that catches the time-limit exception (a bare
  ``except:`` in a retry loop) or the stop button's ``KeyboardInterrupt`` meets
  it again on the next line it runs (a trace function raises it on every line of
  every frame outside this package, and the timer keeps firing to wake a blocked
  ``sleep``), so the exception always reaches ``run_guarded``;
* what the stop spares is decided from what the submission cannot forge: the
  package's own frames (its finally blocks), the garbage collector's callbacks and
  weakref finalizers are recognised by file name and list membership, which code
  can fake (a loop compiled under a file name inside the package, a function put in
  ``gc.callbacks``), so they are spared only for ``GRACE_S`` after the stop; past
  that, every frame is stopped but this file's own functions, recognised by the
  identity of their code objects (made when this module was imported);
* all of this runs in the process that runs the submission, so code written to escape can switch
  it off (``signal.setitimer(signal.ITIMER_REAL, 0)``, ``signal.signal(signal.SIGALRM,
  signal.SIG_IGN)``): the limit that holds then is deadline.py's, kept by the notebook's process,
  which ends the forked child running the submission; this one gives an honest loop its report;
* what the learner's code prints is captured and capped (``OUTPUT_CAP``
  characters per case), and the report says when it was cut;
* ``show`` turns any learner value into a short text, even one whose
  ``__repr__``/``__str__`` raises;
* ``same`` compares by exact type and value, recursively, so an object whose
  ``__eq__`` always answers True is not "equal" to anything.
"""
from __future__ import annotations

import contextlib
import gc
import io
import signal
import sys
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from ..editions.messages import translator

tr = translator("labs")

TIME_LIMIT_S = 120.0          # per case; generous: the machine may be shared and slow
OUTPUT_CAP = 2000             # characters of learner output kept per case
SHOW_CAP = 200                # characters of a learner value shown in a message


PACKAGE_DIR = str(Path(__file__).resolve().parents[1])   # allocator_ref/: frames the sticky stop leaves alone
# weakref.finalize's own frame: the garbage collector may run a finalizer (a device's, which gives
# back its shared segments) at any line, the stopped learner's included; raising there would only
# skip that cleanup ("Exception ignored in: <finalize object>").  The callback it calls is still
# stopped when it is the learner's.
FINALIZER_FILE = weakref.__file__
REFIRE_S = 0.05               # after the limit, the timer fires this often (wakes a blocked sleep again)
GRACE_S = 2.0                 # after the stop, how long the package's cleanup and the collector are spared


class CaseTimeout(BaseException):
    """Raised inside the learner's code when a case runs past its time limit."""


class _Sticky:
    """Once a case is stopped, raise the stop again on every line the learner's code runs.

    A bare ``except:`` catches the first CaseTimeout; the handler's own first line
    then raises it again, outside the ``try``, so it climbs out frame by frame.
    Frames of this package (the judge, the allocator) are left alone, so the
    checker's own ``finally`` blocks and handlers run normally.  This is how
    ``pdb`` reaches running frames: ``frame.f_trace`` on each frame of the
    stack plus ``sys.settrace`` for new ones."""

    def __init__(self) -> None:
        self.error: Optional[type] = None          # CaseTimeout or KeyboardInterrupt once stopped
        self.old_trace = None
        self.since: Optional[float] = None         # time.monotonic() of the stop

    def start(self, error: type, frame) -> None:
        if self.error is None:
            self.old_trace = sys.gettrace()
            self.since = time.monotonic()
        self.error = error
        sys.settrace(self.trace)
        while frame is not None:
            frame.f_trace = self.trace
            frame = frame.f_back

    def trace(self, frame, event, arg):
        if self.error is None:
            return None
        if event in ("call", "line") and not self.spares(frame):
            raise self.error()
        return self.trace

    def spares(self, frame) -> bool:
        """The guard's own functions always; the package, a finalizer, a collector's callback only
        within GRACE_S of the stop (what marks them can be faked: a file name, a list entry)."""
        if id(frame.f_code) in GUARD_CODES:
            return True
        if self.since is not None and time.monotonic() - self.since > GRACE_S:
            return False
        filename = frame.f_code.co_filename
        return filename.startswith(PACKAGE_DIR) or filename == FINALIZER_FILE or _run_by_the_collector(frame)

    def stop(self) -> None:
        if self.error is not None:
            self.error = None
            sys.settrace(self.old_trace)
            frame = sys._getframe(1)
            while frame is not None:                  # the checker's own frames carry it no further
                if frame.f_trace == self.trace:
                    frame.f_trace = None
                frame = frame.f_back


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


def _run_by_the_collector(frame, depth: int = 3) -> bool:
    """Is this frame a ``gc.callbacks`` function (or one it called, a few frames down)?

    The garbage collector runs those callbacks at whatever line a collection starts, the stopped
    learner's included; raising there stops nothing (the collector swallows it and prints
    "Exception ignored in ...") and skips the library's bookkeeping.  The learner's code resumes
    right after, and its next line is stopped."""
    codes = [getattr(cb, "__code__", None) for cb in gc.callbacks]
    while frame is not None and depth > 0:
        if any(frame.f_code is code for code in codes):
            return True
        frame, depth = getattr(frame, "f_back", None), depth - 1
    return False


class _Limit:
    """The armed timer and SIGINT handler of one case (plain calls, no context manager:
    a ``with`` would put contextlib's frames between the learner's code and
    ``run_guarded``, and the sticky stop would raise inside their ``__exit__``)."""

    def __init__(self, seconds: Optional[float], sticky: _Sticky) -> None:
        self.seconds, self.sticky, self.armed = seconds, sticky, False
        if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
            return                                # no SIGALRM here (Windows, a worker thread): no limit
        self.armed = True
        self.old_int = signal.signal(signal.SIGINT, self.on_interrupt)
        self.old_alarm = signal.signal(signal.SIGALRM, self.on_alarm) if seconds else None
        self.old_delay, self.old_interval = signal.setitimer(signal.ITIMER_REAL, seconds) if seconds else (0, 0)
        self.start = time.monotonic()

    def on_alarm(self, signum, frame):
        signal.setitimer(signal.ITIMER_REAL, REFIRE_S)     # fire again: wakes a blocked call in a retry loop
        if self.sticky.error is None or not self.sticky.spares(frame):
            self.sticky.start(CaseTimeout, frame)
            raise CaseTimeout()

    def on_interrupt(self, signum, frame):
        self.sticky.start(KeyboardInterrupt, frame)
        raise KeyboardInterrupt()

    def disarm(self) -> None:
        self.sticky.stop()
        if not self.armed:
            return
        self.armed = False
        if self.seconds:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.old_alarm)
        signal.signal(signal.SIGINT, self.old_int)
        if self.old_delay:                         # someone else's timer (pytest-timeout): keep it running
            left = self.old_delay - (time.monotonic() - self.start)
            signal.setitimer(signal.ITIMER_REAL, max(left, 0.001), self.old_interval)


@contextlib.contextmanager
def time_limit(seconds: Optional[float]):
    """Raise CaseTimeout in the main thread after ``seconds`` (again and again, see _Sticky,
    while code outside this package runs); the stop button's KeyboardInterrupt sticks the
    same way.  Restores any timer and SIGINT handler set before."""
    limit = _Limit(seconds, _Sticky())
    try:
        yield
    finally:
        limit.disarm()


def run_guarded(call: Callable[[], Any], seconds: Optional[float] = TIME_LIMIT_S,
                cap: int = OUTPUT_CAP) -> Outcome:
    """Run ``call()``; never raise; report what it raised, whether it timed out and what it printed."""
    out = CappedWriter(cap)
    outcome = Outcome()
    saved = sys.stdout, sys.stderr
    sys.stdout = sys.stderr = out
    limit = _Limit(seconds, _Sticky())
    try:
        call()
    except CaseTimeout:
        outcome.timed_out = True
    except BaseException as exc:        # noqa: B036 -- sys.exit(), KeyboardInterrupt: the notebook goes on
        outcome.error = exc
    finally:
        limit.disarm()
        sys.stdout, sys.stderr = saved
    outcome.output, outcome.output_chars = out.text(), out.total
    return outcome


def show(value: Any, cap: int = SHOW_CAP) -> str:
    """``repr(value)`` for a message, cut to ``cap`` characters; never raises."""
    try:
        text = repr(value)
        if not isinstance(text, str):
            raise TypeError("__repr__ returned a non-string")
    except BaseException as exc:        # noqa: B036 -- a learner's __repr__ may do anything
        text = tr("<a {kind} whose repr() raised {error}>", kind=type(value).__name__, error=type(exc).__name__)
    return text if len(text) <= cap else text[:cap] + tr("... ({n} characters)", n=len(text))


def safe_str(exc: BaseException) -> str:
    """``str(exc)`` that survives an exception whose ``__str__`` raises."""
    try:
        text = str(exc)
        if not isinstance(text, str):
            raise TypeError
    except BaseException:               # noqa: B036
        return tr("<its message could not be printed: {kind}.__str__ raised>", kind=type(exc).__name__)
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


def _codes_of(namespace: dict) -> set:
    """id() of every code object of the functions (and methods, and functions nested in them)
    defined in this module: made at import, before any submission runs, and never freed."""
    found: list = []

    def add(code) -> None:
        found.append(code)
        for const in code.co_consts:
            if isinstance(const, type(add.__code__)):
                add(const)
    for value in list(namespace.values()):
        if getattr(value, "__module__", None) != __name__:
            continue
        members = vars(value).values() if isinstance(value, type) else [value]
        for member in members:
            member = getattr(member, "__func__", member)                 # staticmethod, classmethod
            for fn in (member, getattr(member, "fget", None), getattr(member, "__wrapped__", None)):
                if getattr(fn, "__code__", None) is not None:
                    add(fn.__code__)
    _KEEP.extend(found)
    return {id(code) for code in found}


_KEEP: list = []               # the code objects themselves, so that no id() is ever reused
GUARD_CODES = _codes_of(globals())
