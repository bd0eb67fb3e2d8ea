"""A closed lab, as its learner hears it: one line when a graded check runs after their due date.

``make due`` and ``make extend`` write each learner's own date beside their graded copy
(``~/graded/labNN/due.json``, labs/due.py), the folder a graded notebook's kernel starts in.
A graded check run after that date says, in the learner's language, that the lab is closed and
what that means (nbgrader's late penalty ``zero``: a copy changed now scores 0).  The file is a
notice, not the lock: what closes the lab is the instructor's gradebook, which no learner reaches,
so a learner who edits it changes only what they are told.
"""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

from ..editions.messages import translator

NOTICE = "due.json"                      # due.py writes it; the kernel's folder is the notebook's
tr = translator("labs")


def due_for(exercise_id: str, folder: Optional[Path] = None) -> Optional[datetime]:
    """The learner's due date (UTC) for the lab of ``exercise_id`` ('lab2.round_size' -> lab02),
    from due.json in ``folder`` (default: here); None without one, or for another lab."""
    path = (folder or Path.cwd()) / NOTICE
    try:
        notice = json.loads(path.read_text(encoding="utf-8"))
        lab = f"lab{int(exercise_id.split('.')[0][3:]):02d}"
        if notice.get("lab") != lab:
            return None
        return datetime.fromisoformat(notice["due"].replace("Z", "+00:00")).astimezone(timezone.utc)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None                      # no notice (a self-paced copy), or one we cannot read: say nothing


def closed_line(exercise_id: str, folder: Optional[Path] = None,
                now: Optional[datetime] = None) -> Optional[str]:
    """The one line a learner reads when the lab closed for them, None while it is open."""
    due = due_for(exercise_id, folder)
    now = now or datetime.now(timezone.utc)
    if due is None or now <= due:
        return None
    return tr("{lab} closed at {when} UTC, your due date: what you change now is late and scores 0; "
              "ask your instructor if you need more time",
              lab=f"lab{int(exercise_id.split('.')[0][3:]):02d}", when=f"{due:%Y-%m-%d %H:%M}")
