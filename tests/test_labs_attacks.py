"""check() against submissions written to beat it (issue 32, items 1 and 2).

Each submission runs the way a learner's does: handed to check() in a real
Python process (a subprocess here, so that a check that hangs fails the test
instead of hanging the suite).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_script(*pieces: str, timeout: float = 120, interrupt_after: float | None = None):
    code = "".join(textwrap.dedent(piece) for piece in pieces)
    env = dict(os.environ, PYTHONPATH=str(ROOT), ALLOCATOR_REF_DEVICE="sim")
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if interrupt_after is not None:
        time.sleep(interrupt_after)
        proc.send_signal(signal.SIGINT)           # the notebook's stop button
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"check() was still running after {timeout} s: the submission kept it busy")
    return proc.returncode, out, err


SWALLOWERS = {
    "bare except around sleep": """
        def submission(size, config):
            while True:
                try:
                    time.sleep(10)
                except:
                    pass
    """,
    "except BaseException around a busy loop": """
        def submission(size, config):
            while True:
                try:
                    while True:
                        pass
                except BaseException:
                    continue
    """,
    "contextlib.suppress in a retry loop": """
        import contextlib
        def submission(size, config):
            while True:
                with contextlib.suppress(BaseException):
                    while True:
                        time.sleep(0.01)
    """,
    "a finally that loops again": """
        def submission(size, config):
            def again():
                try:
                    while True:
                        pass
                finally:
                    again()
            again()
    """,
}


@pytest.mark.parametrize("name", sorted(SWALLOWERS))
def test_a_submission_that_swallows_the_time_limit_is_still_stopped(name):
    rc, out, err = run_script("""
        import time
        from allocator_ref.labs import check
    """, SWALLOWERS[name], """
        t = time.monotonic()
        result = check("lab2.round_size", submission, seed=1, time_limit=1, verbose=False)
        print("SECONDS", round(time.monotonic() - t, 1))
        print("STOPPED", result.cases[0].stopped, result.passed)
        print("TRACE", __import__("sys").gettrace())
    """, timeout=60)
    assert rc == 0, err
    assert "STOPPED True False" in out and "TRACE None" in out, out + err
    assert float(out.split("SECONDS")[1].split()[0]) < 10, out


def test_the_stop_button_is_not_swallowed_either():
    rc, out, err = run_script("""
        import time
        from allocator_ref.labs import check
        def submission(size, config):
            while True:
                try:
                    time.sleep(10)
                except BaseException:
                    pass
        result = check("lab2.round_size", submission, seed=1, verbose=False)   # 120 s limit
        print("STOPPED", result.cases[0].stopped, "interrupted" in result.explanation)
    """, timeout=60, interrupt_after=3.0)
    assert rc == 0, err
    assert "STOPPED True True" in out, out + err


STACK_READER = """
    import sys
    def submission(*args):
        frame = sys._getframe(1)
        while frame is not None:
            for name in ("expected", "want", "ref", "best"):
                if name in frame.f_locals:
                    value = frame.f_locals[name]
                    if isinstance(value, tuple) and name == "expected":
                        value = value[0]
                    return value
            frame = frame.f_back
"""


@pytest.mark.parametrize("exercise_id", ["lab1.explain", "lab4.diagnose", "lab7.peaks", "lab7.largest_free",
                                         "lab8.get_pool", "lab2.round_size"])
def test_a_graded_check_gives_the_submission_no_expected_value_to_read(exercise_id):
    rc, out, err = run_script(STACK_READER, f"""
        from allocator_ref.labs import check
        graded = check({exercise_id!r}, submission, seed=1, verbose=False, graded=True)
        print("GRADED", graded.passed, sum(c.passed for c in graded.cases))
    """)
    assert rc == 0, err
    assert "GRADED False 0" in out, out + err


def test_a_graded_check_is_not_fooled_by_a_patched_shared_class():
    # round_size's wrong answer: never applies the divisions.  The submission also makes the
    # shared AllocatorConfig agree with it, so a judge in this process would compare it with itself.
    rc, out, err = run_script("""
        from allocator_ref.caching.config import AllocatorConfig
        from allocator_ref.labs import check
        def submission(size, config):
            AllocatorConfig.divisions_for = lambda self, size: 1
            return 512 if size < 512 else -(-size // 512) * 512
        graded = check("lab2.round_size", submission, seed=1, verbose=False, graded=True)
        print("GRADED", graded.passed, graded.explanation.splitlines()[0])
    """)
    assert rc == 0, err
    assert "GRADED False" in out, out + err


def test_an_honest_graded_check_passes_and_reports_like_the_open_one():
    rc, out, err = run_script("""
        from allocator_ref.labs import check
        def round_size(size, config):
            if size < 512:
                return 512
            div = config.divisions_for(size)
            if div > 1 and size > 512 * div:
                if size & (size - 1) == 0:
                    return size
                step = (1 << (size.bit_length() - 1)) // div
                return -(-size // step) * step
            return -(-size // 512) * 512
        def noisy(size, config):
            print("hello from the submission")
            raise ValueError("nope")
        def stub(size, config):
            raise NotImplementedError("write it")
        print("HONEST", check("lab2.round_size", round_size, seed=5, verbose=False, graded=True).passed)
        bad = check("lab2.round_size", noisy, seed=5, verbose=False, graded=True)
        print("RAISED", "ValueError: nope" in bad.explanation, "hello from" in bad.cases[0].output)
        print("STUB", check("lab2.round_size", stub, seed=5, verbose=False, graded=True).untouched)
        class Sneaky(int):
            def __eq__(self, other):
                return True
        print("NOTPLAIN", check("lab2.round_size", lambda s, c: Sneaky(1), seed=5, verbose=False,
                                graded=True).explanation.splitlines()[0])
    """)
    assert rc == 0, err
    assert "HONEST True" in out and "RAISED True True" in out and "STUB True" in out, out + err
    assert "plain data" in out, out


def test_a_graded_check_stops_a_swallowing_submission_in_time():
    rc, out, err = run_script("""
        import time
        from allocator_ref.labs import check
    """, SWALLOWERS["bare except around sleep"], """
        t = time.monotonic()
        result = check("lab2.round_size", submission, seed=1, time_limit=1, verbose=False, graded=True)
        print("GRADED", result.cases[0].stopped, "stopped after 1 s" in result.explanation,
              round(time.monotonic() - t, 1))
    """, timeout=90)
    assert rc == 0, err
    assert "GRADED True True" in out, out + err


def test_the_instructor_guide_names_exactly_the_exercises_judged_apart():
    import importlib
    import re
    check_module = importlib.import_module("allocator_ref.labs.check")
    check_module._load_all()
    pure = {ex_id for ex_id, ex in check_module.EXERCISES.items() if ex.pure}
    guide = (ROOT / "labs" / "README.md").read_text()
    listed = guide.split("reads only what the submission returns:", 1)[1].split(")", 1)[0]
    named, lab = set(), None
    for word in re.findall(r"[\w.]+", listed):
        if "." in word:
            lab, name = word.split(".")
        else:
            name = word
        named.add(f"{lab}.{name}")
    assert named == pure, f"guide: {sorted(named)}; marked pure: {sorted(pure)}"
