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
