"""A correct answer that prints a lot passes in both modes (issue 57, Low: graded and open modes disagreed
on a correct submission that prints 50 MB).

What differed: the graded submission process writes its file descriptors 1 and 2 to /dev/null
(regrade.serve_main), while open mode's forked child (deadline.Child) only replaced ``sys.stdout``,
so what wrote to the descriptor itself (``os.write(1, ...)``, a C printf, a subprocess) went into the
notebook's own fd 1.  In a Jupyter kernel that is ipykernel's capture pipe: 50 MB written there from
the fork killed the kernel (measured with nbclient: DeadKernelError in open mode, "every case passes"
in the autograder).  Here fd 1 is a pipe nobody reads (a kernel whose reader is busy): the child
blocked once the pipe's 64 KiB buffer was full, and its deadline failed a correct answer."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from allocator_ref.labs import generate, grading, regrade
from sandbox_helpers import use_grader_python

ROOT = Path(__file__).resolve().parents[1]
LOUD = "def peaks(snapshot):\n    import os\n    os.write(1, b'x' * (1 << 20))\n"   # 1 MiB: 16 pipe buffers

# check() in a process whose fd 1 is a pipe that nobody reads; the verdict leaves by a file.
OPEN_MODE = r'''
import json, os, sys
code, verdict = sys.argv[1], open(sys.argv[2], "w")
read_end, write_end = os.pipe()
os.dup2(write_end, 1)
from allocator_ref.labs.check import check
namespace = {}
exec(code, namespace)
result = check("lab7.peaks", namespace["peaks"], seed=3, hidden=2, time_limit=5, verbose=False)
verdict.write(json.dumps([result.passed, result.explanation]))
verdict.close()
'''


def _loud_solution() -> str:
    _, solutions = generate.build(grading.source_for("07"))
    return solutions["lab7.peaks"].replace("def peaks(snapshot):\n", LOUD, 1)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="open mode forks only where there is fork()")
def test_a_correct_answer_writing_a_megabyte_to_fd_1_passes_in_open_and_graded_modes(monkeypatch, tmp_path):
    use_grader_python(monkeypatch)
    monkeypatch.setenv("ALLOCATOR_REF_DEVICE", "sim")
    monkeypatch.setenv("ALLOCATOR_REF_LAB_QUICK", "1")
    code = _loud_solution()
    assert "os.write(1" in code
    out = tmp_path / "verdict.json"
    run = subprocess.run([sys.executable, "-c", OPEN_MODE, code, str(out)], cwd=tmp_path, stderr=subprocess.PIPE,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, stdin=subprocess.DEVNULL, timeout=240)
    assert run.returncode == 0, run.stderr[-2000:]
    passed, explanation = json.loads(out.read_text())
    call = {"key": "a/0", "exercise": "lab7.peaks", "expression": "peaks", "seed": 3, "hidden": 2, "time_limit": 5}
    graded = regrade.judge_notebook([{"code": code}, {"take": [["a/0", "peaks"]]}],
                                    [regrade.GradedCheck("a", 1, [call])])
    assert graded["a/0"][0] is True, graded
    assert passed is True, f"open mode failed what the autograder passed: {explanation}"
