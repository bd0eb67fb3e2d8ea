"""A time limit no submission can escape (issue 41): what the sticky stop spares is decided from
what the submission cannot forge, and a graded check's notebook side has a deadline of its own.

Before: a loop compiled under a file name inside allocator_ref/, or a function put in
gc.callbacks and then called, ran on past check(time_limit=1) (still running after 15 s), and
a graded check's notebook side waited for its judge forever.
"""
from __future__ import annotations

import time

import pytest

from test_labs_attacks import ROOT, run_script

ESCAPES = {
    "a loop compiled under a file name inside the package": f"""
        import time
        source = ("def submission(size, config):\\n"
                  "    while True:\\n"
                  "        try:\\n"
                  "            time.sleep(0.5)\\n"
                  "        except BaseException:\\n"
                  "            pass\\n")
        exec(compile(source, {str(ROOT / "allocator_ref" / "labs" / "lab2.py")!r}, "exec"))
    """,
    "a function put in gc.callbacks, then called": """
        import gc, time
        def spin(*collector_args):
            if collector_args:                 # the collector's own calls return at once
                return
            while True:
                try:
                    time.sleep(0.5)
                except BaseException:
                    pass
        gc.callbacks.append(spin)
        def submission(size, config):
            spin()
    """,
}


@pytest.mark.parametrize("graded", [False, True], ids=["open", "graded"])
@pytest.mark.parametrize("name", list(ESCAPES))
def test_a_submission_that_fakes_what_the_stop_spares_is_still_stopped(name, graded):
    rc, out, err = run_script(ESCAPES[name], f"""
        import time
        from allocator_ref.labs import check
        started = time.monotonic()
        result = check("lab2.round_size", submission, seed=1, time_limit=1, verbose=False, graded={graded})
        print("STOPPED", result.cases[0].stopped, not result.passed, round(time.monotonic() - started, 1))
    """, timeout=60)
    assert rc == 0, err
    assert "STOPPED True True" in out, out + err
    took = float(out.split("STOPPED True True")[1].split()[0])
    assert took < 30, f"stopped only after {took} s against a 1 s limit"


def test_a_graded_checks_notebook_side_stops_waiting_for_a_silent_judge(monkeypatch):
    import sys
    from allocator_ref.labs import apart
    from allocator_ref.labs.check import exercise
    monkeypatch.setattr(apart, "judge_command", lambda: [sys.executable, "-c", "import time; time.sleep(300)"])
    monkeypatch.setattr(apart, "REPLY_GRACE_S", 0.5)
    monkeypatch.setattr(apart, "STARTUP_S", 0.5)
    started = time.monotonic()
    result = apart.judge_apart(exercise("lab2.round_size"), lambda size, config: size, 1, None, 1.0)
    assert time.monotonic() - started < 30
    assert not result.passed and result.cases[0].stopped
    assert "sent nothing for 2.5 s" in result.explanation, result.explanation


# ---------------------------------------------------------------- switching the timer off
# Each submission first turns off what guard.py's limit runs on (its SIGALRM timer or the signal's
# handler), by every door Python leaves open, then loops.  Before: the limit lived only in the
# process the submission runs in, so each ran on forever in both modes (a test killed it at 20 s).
# Now the notebook's process, which runs none of it, ends the child that does at its own deadline.
TIMER_OFF = {
    "setitimer(ITIMER_REAL, 0)": "signal.setitimer(signal.ITIMER_REAL, 0)",
    "alarm(0)": "signal.alarm(0)",
    "SIGALRM ignored": "signal.signal(signal.SIGALRM, signal.SIG_IGN)",
    "SIGALRM handler of its own": "signal.signal(signal.SIGALRM, lambda *args: None)",
    "through _signal": "import _signal; _signal.signal(_signal.SIGALRM, _signal.SIG_IGN)",
    "libc alarm(0) through ctypes": "import ctypes; ctypes.CDLL(None).alarm(0)",
    "libc signal(SIGALRM, SIG_IGN) through ctypes": "import ctypes; ctypes.CDLL(None).signal(signal.SIGALRM, 1)",
}


@pytest.mark.parametrize("graded", [False, True], ids=["open", "graded"])
@pytest.mark.parametrize("name", list(TIMER_OFF))
def test_a_submission_that_switches_the_timer_off_is_still_stopped(name, graded):
    rc, out, err = run_script(f"""
        import signal, sys, time
        from allocator_ref.labs import check
        def submission(size, config):
            {TIMER_OFF[name]}
            sys.settrace(None)
            while True:
                try:
                    time.sleep(0.05)
                except BaseException:
                    pass
        started = time.monotonic()
        result = check("lab2.round_size", submission, seed=1, time_limit=1, verbose=False, graded={graded})
        print("STOPPED", result.cases[0].stopped, not result.passed, round(time.monotonic() - started, 1))
        print("WHY", result.explanation)
        print("NOT RUN", all(c.explanation.startswith("not run") for c in result.cases[1:]))
    """, timeout=20)
    assert rc == 0, err
    assert "STOPPED True True" in out and "NOT RUN True" in out, out + err
    took = float(out.split("STOPPED True True")[1].split()[0])
    assert took < 12, f"stopped only after {took} s against a 1 s limit"
    why = out.split("WHY ")[1].split("\nNOT RUN")[0]
    assert why.startswith("stopped after 1 s:") and "\n" not in why, why


def test_a_submission_that_ends_its_process_is_reported_and_the_notebook_goes_on():
    # Before: os._exit() in an open-mode check ended the notebook's own process (the kernel died).
    rc, out, err = run_script("""
        import os
        from allocator_ref.labs import check
        result = check("lab2.round_size", lambda size, config: os._exit(3), seed=1, verbose=False)
        print("ENDED", result.cases[0].stopped, "ended during this case" in result.explanation)
    """, timeout=20)
    assert rc == 0, err
    assert "ENDED True True" in out, out + err


WRONG_ANSWERS = {
    "lab2.round_size": lambda size, config: max(512, size),
    "lab7.largest_free": lambda snapshot: 0,
}


@pytest.mark.parametrize("exercise_id", sorted(WRONG_ANSWERS))
def test_an_ordinary_answer_gets_the_same_report_from_the_child(exercise_id, monkeypatch, capsys):
    """The cases run in a forked child now; what a learner reads must be what the in-process judge
    writes, word for word (a passing answer, a failing one with its output and nudge)."""
    import importlib
    from allocator_ref.labs import check, deadline
    check_module = importlib.import_module("allocator_ref.labs.check")
    monkeypatch.setattr(check_module, "_ATTEMPTS", {})

    def noisy(*args):
        print("looking at", len(args), "arguments")
        return WRONG_ANSWERS[exercise_id](*args)
    reports = []
    for forked in (True, False):
        monkeypatch.setattr(deadline, "available", lambda forked=forked: forked)
        monkeypatch.setattr(check_module, "_ATTEMPTS", {})
        result = check(exercise_id, noisy, seed=3)
        reports.append((capsys.readouterr().out, [vars(c) for c in result.cases]))
    assert reports[0] == reports[1]
    assert "FAIL" in reports[0][0] and "looking at" in reports[0][0]
