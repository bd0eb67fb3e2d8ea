"""A graded check's clean process: where every expected value is computed and every verdict given.

The notebook's side (apart.py) starts it as ``python -I`` and answers its calls; this side draws
the cases from the seed, runs each judge of check.py here, and asks the notebook for the
submission only through :class:`_Remote` (plain data both ways, apart.py's wire format).  The
recorded grade's judge (regrade.py) runs the same ``judge_here`` against a submission process.

Its own module, apart from apart.py, so that the grading path imports in one direction:
check.py -> deadline.py -> apart.py (the notebook's side and the wire), and clean.py, regrade.py
-> check.py (the judges).  Nothing the judges import leads back here.
"""
from __future__ import annotations

import base64
import os
import pickle
import sys
from typing import Optional

from ..editions.language import set_language
from ..editions.messages import translator
from . import sandbox
from .check import exercise, judge, run_case
from .apart import REPLY_GRACE_S, Silent, decode, receive, send
from .guard import CaseTimeout
from .results import CheckResult
from .verdict import Apart, Fail

tr = translator("labs")


class ProcessEnded(Exception):
    """The process that runs the submission stopped answering: its case fails, and every later one."""


class SubmissionRaised(Exception):
    """What the submission raised, re-raised in the clean process under the submission's type name."""



class _Remote(Apart):
    """The submission as the clean process's judges see it: each call is answered by the notebook."""

    def __init__(self, inbox, outbox, time_limit: float, key: Optional[str] = None, on_silence=None) -> None:
        self.inbox, self.outbox, self.time_limit = inbox, outbox, time_limit
        self.deadline = None
        self.key = key                    # which submission, when the other side holds several (regrade.py)
        self.on_silence = on_silence      # what to do when the other side misses a reply's deadline
        self.silent = False

    def __call__(self, *args, **kwargs):
        return self._ask({}, args, kwargs)

    def observe(self, runner, args: tuple):
        """``runner(submission, *args)`` run in the notebook (check.observed); its plain account comes back."""
        name = f"{runner.__module__}:{runner.__qualname__}"
        if not runner.__module__.startswith("allocator_ref.labs.") or not runner.__qualname__.isidentifier():
            raise ValueError(f"observed() needs a module-level function of a lab module, not {name}")
        return self._ask({"observe": name}, args, {})

    def _ask(self, message: dict, args: tuple, kwargs: dict):
        import time
        if self.silent:                            # it missed a deadline or ended: nothing more to ask it
            raise ProcessEnded(tr("the process running your code stopped answering at an earlier case"))
        left = max(self.deadline - time.monotonic(), 0.001) if self.deadline else self.time_limit
        if self.key is not None:
            message = dict(message, key=self.key)
        send(self.outbox, dict(message, args=base64.b64encode(pickle.dumps((args, kwargs))).decode(),
                               time_left=left))
        try:
            # The submission's side stops the call at ``left``; past that and a grace, it escaped.
            reply = receive(self.inbox, time.monotonic() + left + REPLY_GRACE_S)
        except Silent:
            self.silent = True
            if self.on_silence is not None:
                self.on_silence()                  # regrade.py: end the submission's process
            raise CaseTimeout() from None
        if reply is None or reply.get("ended"):    # the process running the submission ended (os._exit, a crash)
            self.silent = True
            raise ProcessEnded(tr("the process running your code ended during this call (os._exit(), a crash, "
                                  "or it was killed): nothing came back to judge"))
        if reply.get("output"):
            print(reply["output"], end="")         # run_guarded here captures it as the case's output
        if reply.get("timeout"):
            raise CaseTimeout()
        if "fail" in reply:
            fail = reply["fail"]
            raise Fail(str(fail["message"]), str(fail["safe"]), fail["hint"] if isinstance(fail["hint"], str) else None)
        if "raised" in reply:
            _raise_as_submission(_reraised(reply["raised"]))
        return decode(reply["value"])


# Raised from a frame named "<submission>", not from this file: the judges tell the learner's
# exception from the course's own by the file of the deepest frame (workload._raised_inside_course).
_SCOPE: dict = {}
exec(compile("def _raise_as_submission(exc):\n    raise exc\n", "<submission>", "exec"), _SCOPE)
_raise_as_submission = _SCOPE["_raise_as_submission"]


def _reraised(info: dict) -> BaseException:
    name, message = info["type"], info["message"]
    if name == "KeyboardInterrupt":
        return KeyboardInterrupt()
    if name == "SystemExit":
        return SystemExit(message)
    exc = NotImplementedError(message) if info.get("stub") else \
        type(name if name.isidentifier() else "Exception", (SubmissionRaised,), {})(message)
    exc.where = info.get("where", "")          # check._describe_exception shows it
    return exc


def judge_here(ex, remote: _Remote, seed: int, hidden: Optional[int], time_limit: float) -> CheckResult:
    """The clean process's verdict on ``ex``: every judge runs here, calling ``remote`` for the submission."""
    import time

    def run(case, submission, limit=None):
        remote.deadline = time.monotonic() + time_limit
        # The submission's side stops it at the limit and says so; this process waits a little
        # longer, so that a reply is never left unread (the next call would read it).
        return run_case(case, submission, time_limit + REPLY_GRACE_S, shown_limit=time_limit)
    return judge(ex, remote, seed, hidden=hidden, time_limit=time_limit, run=run)


def main() -> None:
    """The clean process of a notebook's graded check: read the request, judge every case, write the result."""
    sandbox.lock()                                 # the notebook cannot read this process's memory
    inbox = sys.stdin.buffer
    outbox = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)                                  # whatever a judge prints must not enter the message stream
    request = receive(inbox)
    set_language(request.get("language"))        # speak the learner's language (judge_apart says which)
    ex = exercise(request["exercise"])
    remote = _Remote(inbox, outbox, request["time_limit"])
    result = judge_here(ex, remote, request["seed"], request["hidden"], request["time_limit"])
    send(outbox, {"done": {"cases": [dict(vars(c)) for c in result.cases], "explanation": result.explanation}})
