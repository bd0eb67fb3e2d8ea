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


def _as_a_fresh_kernel() -> None:
    """The script starts as a notebook's kernel does: the stop button's SIGINT neither ignored nor
    blocked.  Both are inherited through exec, and the pytest worker that runs this test may carry
    either from an earlier test or library (under two workers the press once went unanswered)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


# What the script's process started with, on its stderr: a failure shows it.
SIGNALS_SAID = ("import sys as _s\n_s.stderr.write(''.join(l for l in open('/proc/self/status') "
                "if l.startswith(('SigBlk', 'SigIgn'))) if _s.platform == 'linux' else '')\n")


def run_script(*pieces: str, timeout: float = 120, interrupt_when: Path | None = None):
    """Run the pieces as one script; with ``interrupt_when``, press the stop button (SIGINT) once
    that file exists: the submission writes it when it starts, so the press lands while it runs
    (a fixed delay pressed it during the imports on a loaded machine, before there was anything to stop)."""
    code = "".join(textwrap.dedent(piece) for piece in pieces)
    env = dict(os.environ, PYTHONPATH=str(ROOT), ALLOCATOR_REF_DEVICE="sim")
    proc = subprocess.Popen([sys.executable, "-c", SIGNALS_SAID + code], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_as_a_fresh_kernel)
    if interrupt_when is not None:
        started = time.monotonic()
        while not interrupt_when.exists() and proc.poll() is None and time.monotonic() - started < timeout:
            time.sleep(0.05)
        time.sleep(0.5)                           # well inside the submission's loop
        proc.send_signal(signal.SIGINT)           # the notebook's stop button
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"check() was still running after {timeout} s: the submission kept it busy ({err.strip()[:300]})")
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


def test_the_stop_button_is_not_swallowed_either(tmp_path):
    started = tmp_path / "started"
    rc, out, err = run_script(f"""
        import pathlib, time
        from allocator_ref.labs import check
        def submission(size, config):
            pathlib.Path({str(started)!r}).touch()
            while True:
                try:
                    time.sleep(10)
                except BaseException:
                    pass
        result = check("lab2.round_size", submission, seed=1, verbose=False)   # 120 s limit
        print("STOPPED", result.cases[0].stopped, "interrupted" in result.explanation)
    """, timeout=60, interrupt_when=started)
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
                                         "lab8.get_pool", "lab2.round_size", "lab8.cross_stream_free",
                                         "lab9.stranded"])
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


def _guide_list(guide: str, opening: str) -> set:
    import re
    listed = guide.split(opening, 1)[1].split(")", 1)[0]
    named, lab = set(), None
    for word in re.findall(r"[\w.]+", listed):
        if "." in word:
            lab, name = word.split(".")
        else:
            name = word
        named.add(f"{lab}.{name}")
    return named


def test_the_instructor_guide_names_exactly_the_exercises_judged_apart():
    import importlib
    check_module = importlib.import_module("allocator_ref.labs.check")
    check_module._load_all()
    exercises = check_module.EXERCISES
    pure = {ex_id for ex_id, ex in exercises.items() if ex.pure}
    watched = {ex_id for ex_id, ex in exercises.items() if ex.observed}
    guide = " ".join((ROOT / "labs" / "README.md").read_text().split())
    assert _guide_list(guide, "(pure:") == pure, f"guide: {sorted(_guide_list(guide, '(pure:'))}; pure: {sorted(pure)}"
    assert _guide_list(guide, "(observed:") == watched, \
        f"guide: {sorted(_guide_list(guide, '(observed:'))}; observed: {sorted(watched)}"
    # "judges every exercise": none is left to the notebook's process
    assert {ex_id for ex_id, ex in exercises.items() if not ex.apart} == set()


# ---------------------------------------------------------------- exercises that hand over live objects
# Each newly judged-apart exercise meets two attacks, each with a wrong answer:
#
# * a *stack reader*: a profiler (sys.setprofile) that reads the judge's expected value off the stack
#   as the judge computes it, and writes it into the account of the submission's run the judge holds;
# * a *class patcher*: a patch of a class the reference shares (the device, the frozen reference
#   allocator, the reference buffer) so that the reference agrees with the wrong answer.
#
# In the open mode both pass: that is its documented limit (labs/README.md).  In a graded check every
# expected value is computed in the clean process, after the submission's account came back: both fail.

SPY = """
    import sys
    def spy_on(name, caller, steal):
        def profile(frame, event, arg):
            if event == "return" and frame.f_code.co_name == name and frame.f_back is not None \\
                    and frame.f_back.f_code.co_name == caller:
                steal(frame.f_back.f_locals, arg)
        sys.setprofile(profile)
"""

MEASURE_LOOPS = """
    from allocator_ref.caching import CachingAllocator
    def loops(dev, nbytes, repeats, kernel_us):       # what the device must see: the checks of the run pass
        for _ in range(repeats):
            p = dev.malloc(nbytes); dev.fill(p, nbytes, 1); dev.sleep(None, kernel_us); dev.free(p)
        alloc = CachingAllocator(dev)
        for _ in range(repeats):
            b = alloc.malloc(nbytes); dev.fill(b.ptr, nbytes, 1); dev.sleep(None, kernel_us); alloc.free(b)
        alloc.close()
"""

SERIAL_PIPELINE = """
    def serial(dev, alloc, data, work_us, record):   # correct bytes, but the streams run one after the other
        side, n = dev.create_stream(), len(data)
        x = alloc.malloc(n)
        dev.write(x.ptr, data)
        dev.synchronize()
        out = alloc.malloc(n, stream=side)
        dev.sleep(side, work_us)
        dev.copy(out.ptr, x.ptr, n, stream=side)
        dev.synchronize()
        if record:
            alloc.record_stream(x, side)
        alloc.free(x)
        tmp = alloc.malloc(n)
        dev.fill(tmp.ptr, n, 0xEE)
        dev.sleep(None, work_us)
        alloc.free(tmp)
        return out
"""

EXTRA_PAGE_BUFFER = """
    class Wrong:                     # maps one page more than grow() needs (the device's checks pass)
        def __init__(self, dev, max_size):
            self.dev, self.g = dev, dev.vmm_granularity()
            self.reserved = -(-max_size // self.g) * self.g
            self.ptr = dev.address_reserve(self.reserved)
            self.handles = []
        def grow(self, n):
            if n > self.reserved:
                raise ValueError("past the reservation")
            want = min(-(-n // self.g) + 1, self.reserved // self.g)
            while len(self.handles) < want:
                addr = self.ptr + len(self.handles) * self.g
                h = self.dev.mem_create(self.g)
                self.dev.mem_map(addr, self.g, h)
                self.dev.mem_set_access(addr, self.g)
                self.handles.append(h)
        def close(self):
            self.dev.synchronize()
            while self.handles:
                h = self.handles.pop()
                self.dev.mem_unmap(self.ptr + len(self.handles) * self.g, self.g)
                self.dev.mem_release(h)
            self.dev.address_free(self.ptr, self.reserved)
"""

LIVE_ATTACKS = {
    ("lab1.measure", "stack reader"): MEASURE_LOOPS + """
    def steal(judge, expected):                       # the judge's reference_measure() as it returns
        judge["got"].update(expected)
    def submission(dev, nbytes, repeats, kernel_us):
        spy_on("reference_measure", "judge", steal)
        loops(dev, nbytes, repeats, kernel_us)
        return {"direct_us": 1.0, "cached_us": 1.0, "ratio": 1.0}
    """,
    ("lab1.measure", "class patcher"): MEASURE_LOOPS + """
    from allocator_ref.device.sim import SimDevice
    def submission(dev, nbytes, repeats, kernel_us):
        loops(dev, nbytes, repeats, kernel_us)
        calls = {}
        def now_us(self):                             # the reference's loops now "take" 7 us and 3 us
            k = calls[id(self)] = calls.get(id(self), 0) + 1
            return {2: 7.0 * repeats, 4: 3.0 * repeats}.get(k, 0.0)
        SimDevice.now_us = now_us
        return {"direct_us": 7.0, "cached_us": 3.0, "ratio": 7.0 / 3.0}
    """,
    ("lab2.merge", "stack reader"): """
    def steal(compare, reference):                    # compare()'s reference run as it returns
        compare["mine"][:] = reference
    def submission(dst, src, pool):                   # never merges
        spy_on("run", "compare", steal)
        return 0
    """,
    ("lab2.merge", "class patcher"): """
    from allocator_ref.device.sim import SimDevice
    from allocator_ref.labs import reference
    real_stats = reference.CachingAllocator.memory_stats
    # In the learner's cell: the (frozen) reference allocator never merges either, and it and the device
    # say nothing any more of what is held (the leaks a merge that never happens leaves).
    reference.CachingAllocator.try_merge_blocks = lambda self, dst, src, pool: 0
    reference.CachingAllocator.memory_stats = lambda self: {k: 0 for k in real_stats(self)}
    reference.CachingAllocator.segments = lambda self: []
    SimDevice.mem_get_info = lambda self: (1 << 40, 1 << 40)
    def submission(dst, src, pool):                   # never merges
        return 0
    """,
    ("lab3.record_stream", "stack reader"): SERIAL_PIPELINE + """
    def steal(judge, timed):                          # the reference timings as they are measured
        judge["seen"]["elapsed"] = min(judge["seen"]["elapsed"], timed[3])
    def submission(dev, alloc, data, work_us):
        spy_on("_timed", "judge_pipeline", steal)
        return serial(dev, alloc, data, work_us, True)
    """,
    ("lab3.record_stream", "class patcher"): SERIAL_PIPELINE + """
    from allocator_ref.device.sim import SimDevice
    real_wait = SimDevice.wait_event
    def slow_wait(self, stream, event):               # only the references wait on an event: slow them down
        real_wait(self, stream, event)
        self.sleep(None, 1e6)
    def submission(dev, alloc, data, work_us):
        SimDevice.wait_event = slow_wait
        return serial(dev, alloc, data, work_us, True)
    """,
    ("lab3.event", "stack reader"): SERIAL_PIPELINE + """
    def steal(judge, timed):
        judge["seen"]["elapsed"] = min(judge["seen"]["elapsed"], timed[3])
    def submission(dev, alloc, data, work_us):
        spy_on("_timed", "judge_pipeline", steal)
        return serial(dev, alloc, data, work_us, False)
    """,
    ("lab3.event", "class patcher"): SERIAL_PIPELINE + """
    from allocator_ref.device.sim import SimDevice
    real_wait = SimDevice.wait_event
    def slow_wait(self, stream, event):
        real_wait(self, stream, event)
        self.sleep(None, 1e6)
    def submission(dev, alloc, data, work_us):
        SimDevice.wait_event = slow_wait
        return serial(dev, alloc, data, work_us, False)
    """,
    ("lab5.growable_buffer", "stack reader"): EXTRA_PAGE_BUFFER + """
    def steal(judge, steps):                          # the reference's steps as they are measured
        for record, (mapped, calls) in zip(judge["seen"]["steps"], steps):
            record.update(now=mapped, held=mapped, used=calls, made=0)
    class submission(Wrong):
        def __init__(self, dev, max_size):
            spy_on("_reference_steps", "judge_buffer", steal)
            super().__init__(dev, max_size)
    """,
    ("lab5.growable_buffer", "class patcher"): EXTRA_PAGE_BUFFER + """
    from allocator_ref import vmm
    def patch():                                      # the reference buffer becomes the wrong one
        vmm.GrowableBuffer.__init__ = lambda self, dev, max_size: setattr(self, "wrong", Wrong(dev, max_size))
        vmm.GrowableBuffer.reserve = lambda self, n: self.wrong.grow(n)
        vmm.GrowableBuffer.mapped = property(lambda self: len(self.wrong.handles) * self.wrong.g)
        vmm.GrowableBuffer.close = lambda self: self.wrong.close()
    class submission(Wrong):
        def __init__(self, dev, max_size):
            patch()
            super().__init__(dev, max_size)
    """,
    # lab 6: share_handle's bytes are read by a second process, from the handle the submission made, and
    # compared with a digest of the case's own data: a patch in the notebook reaches neither, so only the
    # stack reader has something to steal (the expected segment).  read_shared runs in the second process
    # (from its source) and lifetime's judge computes no expected value: nothing to read or patch.
    ("lab6.share_handle", "stack reader"): """
    def steal(judge, expected):                       # _expected_share() as the judge computes it
        ptr, base, offset, segment_size, digest = expected
        judge["seen"].update(named_base=base, read=digest, open_error=None, read_error=None)
    def submission(alloc, allocation):                # the first segment's base: wrong for a later segment
        spy_on("_expected_share", "judge_share_handle", steal)
        base = alloc.snapshot()["segments"][0]["address"]
        return {"ipc_handle": alloc.device.ipc_get_mem_handle(base), "offset": allocation.ptr - base,
                "size": allocation.requested_size}
    """,
}


@pytest.mark.parametrize("exercise_id,attack", sorted(LIVE_ATTACKS))
def test_an_attack_on_a_live_object_exercise_passes_the_open_mode_and_fails_a_graded_check(exercise_id, attack):
    # One process per mode: the attacks patch the process they run in, for good.
    outcomes = {}
    for graded in (False, True):
        rc, out, err = run_script(SPY, LIVE_ATTACKS[exercise_id, attack], f"""
            from allocator_ref.labs import check
            result = check({exercise_id!r}, submission, seed=1, hidden=1, verbose=False, graded={graded})
            print("RESULT", result.passed, len(result.cases), sum(c.passed for c in result.cases))
            print("WHY", result.explanation.splitlines()[0] if result.explanation else "")
        """)
        assert rc == 0, err
        outcomes[graded] = out
    # The open mode's documented limit: the wrong answer passes every case.
    assert "RESULT True" in outcomes[False], outcomes[False]
    # A graded check is not fooled: not one case passes on stolen or patched values... except the cases
    # where the wrong answer happens to be right (lab 5's full-reservation grow, a merge-free public case).
    assert "RESULT False" in outcomes[True], outcomes[True]
    assert "your code raised" not in outcomes[True], outcomes[True]


SOLUTION_RUNNER = """
    import sys
    from pathlib import Path
    from allocator_ref.labs import generate, verify
    from allocator_ref.labs.check import check, exercise
    if __name__ == "__main__":
        for source in generate.sources():
            for exercise_id, submission in verify._run_lab_source(source):
                if exercise(exercise_id).observed:
                    result = check(exercise_id, submission, seed=2, hidden=1, verbose=False, graded=True)
                    print("SOLUTION", exercise_id, result.passed, len(result.cases), result.explanation[:200])
"""


def test_the_solutions_of_the_live_object_exercises_pass_a_graded_check():
    rc, out, err = run_script(SOLUTION_RUNNER, timeout=600)
    assert rc == 0, err
    lines = [line.split() for line in out.splitlines() if line.startswith("SOLUTION")]
    import importlib
    check_module = importlib.import_module("allocator_ref.labs.check")
    check_module._load_all()
    assert {line[1] for line in lines} == {i for i, ex in check_module.EXERCISES.items() if ex.observed}, out
    assert all(line[2] == "True" and int(line[3]) > 1 for line in lines), out


@pytest.mark.slow
def test_the_known_wrong_answers_of_the_live_object_exercises_fail_a_graded_check():
    rc, out, err = run_script("""
        from allocator_ref.labs import verify
        from allocator_ref.labs.check import check, exercise
        if __name__ == "__main__":
            for path in verify.wrong_files():
                wrong = verify.load_wrong(path)
                if exercise(wrong.EXERCISE).observed:
                    result = check(wrong.EXERCISE, wrong.SUBMISSION, seed=1, verbose=False, graded=True)
                    print("WRONG", path.name, result.passed, wrong.EXPECTED_REASON in result.explanation)
    """, timeout=900)
    assert rc == 0, err
    lines = [line.split() for line in out.splitlines() if line.startswith("WRONG")]
    assert len(lines) >= 25, out
    assert all(line[2:] == ["False", "True"] for line in lines), out


def test_a_graded_check_of_a_live_object_exercise_stops_a_swallower_and_reports_like_the_open_one():
    rc, out, err = run_script("""
        import time
        from allocator_ref.labs import check
        def swallower(dev, nbytes, repeats, kernel_us):
            while True:
                try:
                    time.sleep(10)
                except:
                    pass
        def stub(dev, nbytes, repeats, kernel_us):
            raise NotImplementedError("write it")
        def raiser(dev, nbytes, repeats, kernel_us):
            print("hello from the submission")
            return dev.no_such_call()
        def one_buffer(dev, nbytes, repeats, kernel_us):      # a wrong behaviour the runner sees itself
            p = dev.malloc(nbytes)
            return {"direct_us": 1.0, "cached_us": 1.0, "ratio": 1.0}
        t = time.monotonic()
        result = check("lab1.measure", swallower, seed=1, time_limit=1, verbose=False, graded=True)
        print("STOPPED", result.cases[0].stopped, "stopped after 1 s" in result.explanation,
              time.monotonic() - t < 30)
        print("STUB", check("lab1.measure", stub, seed=1, verbose=False, graded=True).untouched)
        for graded in (False, True):
            bad = check("lab1.measure", raiser, seed=1, verbose=False, graded=graded)
            print("RAISED", graded, "AttributeError" in bad.explanation, "hello from" in bad.cases[0].output)
            wrong = check("lab1.measure", one_buffer, seed=1, verbose=False, graded=graded)
            print("WRONG", graded, wrong.explanation.splitlines()[0])
    """, timeout=120)
    assert rc == 0, err
    assert "STOPPED True True True" in out and "STUB True" in out, out + err
    assert "RAISED False True True" in out and "RAISED True True True" in out, out
    wrong = [line.split(" ", 2)[2] for line in out.splitlines() if line.startswith("WRONG")]
    assert len(wrong) == 2 and wrong[0] == wrong[1] and "cudaMalloc call(s)" in wrong[0], out
