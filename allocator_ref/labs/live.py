"""The instructor's live view, the learner's side: each check() result, kept where the hub can read it.

In a room that opts in (the hub sets ALLOCATOR_REF_LIVE_VIEW=1 when started with WORKSHOP_LIVE_VIEW=1:
workshop/README.md), every check() writes which exercise passed or failed, and how many failed
attempts, into ~/.allocator-course/live.json (readable by this learner only; the hub's live-view
service reads it as root: workshop/live_view.py).  Anywhere else nothing is written.

What it is not: a grade.  The file is the learner's, so a learner can write anything in it; the
view is for seeing who is stuck, and the recorded grade comes from make autograde alone.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from .. import settings

FOLDER = ".allocator-course"
FILE = "live.json"
MAX_BYTES = 64 * 1024              # far more than 9 labs' exercises; the service reads no more


def enabled() -> bool:
    """The live_view setting (ALLOCATOR_REF_LIVE_VIEW, allocator_ref/settings.py) is 1; a value it refuses
    is off here (record() never raises into check(); describe() names the bad value)."""
    try:
        return settings.value("live_view") == "1"
    except settings.SettingsError:
        return False


def path(home: Path | None = None) -> Path:
    return (home or Path.home()) / FOLDER / FILE


def record(exercise_id: str, passed: bool, untouched: bool, attempts: int) -> None:
    """Keep one check's outcome for the live view (a room that opted in only); never raises into check()."""
    if not enabled():
        return
    target = path()
    try:
        target.parent.mkdir(mode=0o700, exist_ok=True)
        try:
            seen = json.loads(target.read_text())
            seen = seen if isinstance(seen, dict) else {}
        except (OSError, ValueError):
            seen = {}
        seen[exercise_id] = {"passed": bool(passed), "untouched": bool(untouched), "attempts": int(attempts),
                             "at": int(time.time())}
        tmp = target.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(seen, f)
        os.replace(tmp, target)
    except OSError:
        pass                       # a full disk or a folder the learner broke: the check still reports
