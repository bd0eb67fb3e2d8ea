"""What a check started is ended, and only that (issue 57: the open mode's setsid grandchild, and an
autograder that killed every process under its caller).  Both use allocator_ref/processes.py."""
from __future__ import annotations

import os
import subprocess
import time

import pytest

from allocator_ref import processes
from allocator_ref.labs import generate, grading, regrade
from allocator_ref.labs.check import check
from sandbox_helpers import alive, use_grader_python

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc") or not hasattr(os, "fork"),
                                reason="subreapers and /proc: Linux")

# Each call leaves a grandchild in a session of its own (out of check()'s child's process group) that
# writes its pid and sleeps; with HANG the call then outlives its time limit, and the child is killed.
ESCAPE = '''def peaks(snapshot):
    import os, time
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            with open(PIDS, "a") as f:
                f.write(f"{os.getpid()}\\n")
            time.sleep(300)
        os._exit(0)
    os.wait()
    if HANG:
        while True:
            pass
'''


def _escaping_solution(pids, hang: bool) -> str:
    _, solutions = generate.build(grading.source_for("07"))
    return solutions["lab7.peaks"].replace("def peaks(snapshot):\n", ESCAPE.replace("PIDS", repr(str(pids)))
                                           .replace("HANG", str(hang)), 1)


@pytest.mark.parametrize("hang", [False, True], ids=["returns", "killed-at-its-limit"])
def test_open_mode_ends_a_setsid_grandchild_with_its_child(monkeypatch, tmp_path, hang):
    monkeypatch.setenv("ALLOCATOR_REF_DEVICE", "sim")
    pids = tmp_path / "pids"
    namespace: dict = {}
    exec(_escaping_solution(pids, hang), namespace)             # noqa: S102 -- the test's own code
    result = check("lab7.peaks", namespace["peaks"], seed=3, hidden=1, time_limit=2, verbose=False)
    assert result.passed is (not hang), result.explanation
    deadline = time.monotonic() + 5
    while not pids.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [int(p) for p in pids.read_text().split()]
    assert left, "the submission started no grandchild"
    assert not [p for p in left if alive(p)], f"grandchildren that outlived check(): {left}"


def test_an_autograde_leaves_its_callers_other_children_alone(monkeypatch):
    """A kernel or a test's hub calls the autograder and keeps children of its own: they survive it,
    and the caller is no subreaper after it (it was none before)."""
    use_grader_python(monkeypatch)
    monkeypatch.setenv("ALLOCATOR_REF_DEVICE", "sim")
    monkeypatch.setenv("ALLOCATOR_REF_LAB_QUICK", "1")
    mine = subprocess.Popen(["sleep", "300"])
    try:
        call = {"key": "a/0", "exercise": "lab7.peaks", "expression": "peaks", "seed": 3, "hidden": 1,
                "time_limit": None}
        cells = [{"code": "def peaks(snapshot):\n    return {}\n"}, {"take": [["a/0", "peaks"]]}]
        verdicts = regrade.judge_notebook(cells, [regrade.GradedCheck("a", 1, [call])])
        assert verdicts["a/0"][0] is False
        assert mine.poll() is None, f"the autograder ended its caller's own child (status {mine.returncode})"
        assert not processes.is_subreaper()
    finally:
        mine.kill()
        mine.wait()
