"""Lab 6 run from a script with no ``if __name__ == "__main__":`` guard.

Its checks start a receiver with multiprocessing's spawn, which imports the script again: the
script's check() runs a second time inside the receiver, where no further process can start.  That
report used to say "your code raised RuntimeError" with the crash nudge, about a function that was
right.  Now it says where it comes from and names the guard, and the learner's own check passes.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = '''
from allocator_ref.labs import check

def share_handle(alloc, allocation):
    for seg in alloc.snapshot()["segments"]:
        base = seg["address"]
        if base <= allocation.ptr < base + seg["total_size"]:
            return {"ipc_handle": alloc.device.ipc_get_mem_handle(base), "offset": allocation.ptr - base,
                    "size": allocation.requested_size}

check("lab6.share_handle", share_handle, seed=1)
'''


def test_a_script_without_a_main_guard_is_told_to_add_one_and_its_own_check_passes(tmp_path):
    script = tmp_path / "my_lab6.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg", "ALLOCATOR_REF_LANG": "en"}
    run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    out = run.stdout
    assert run.returncode == 0, run.stderr[-2000:]
    assert 'if __name__ == "__main__":' in out, out
    assert "your code raised" not in out, out
    assert "All 8 cases pass" in out, out
