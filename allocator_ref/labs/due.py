"""Due dates: make due LAB=02 AT="2026-12-06 17:00" closes lab 2 at that time.

The due date is nbgrader's own (the assignment's ``duedate`` in gradebook.db, set here through
nbgrader's Gradebook API), so nbgrader itself computes each submission's lateness when it grades:
``make collect`` writes, beside each learner's copy, the time they last changed it
(``timestamp.txt``, which nbgrader's autograde reads as the submission time), and a copy changed
after the due date is late by that much.  A closed lab is graded as the learner left it, and the
time it was last changed is what counts: ``make collect`` names every late learner and ``make
export`` flags them beside their grade (export.py).  Nothing is deducted: the instructor decides.

A time without a zone is this machine's local time (the room's clock); ``2026-12-06T17:00+01:00``
names its zone.  nbgrader keeps UTC.
"""
from __future__ import annotations

import os
import sys
from datetime import datetime, timezone
from pathlib import Path

from . import grading

TIMESTAMP = "timestamp.txt"                # nbgrader's CourseDirectory.get_existing_timestamp reads it


class DueDateError(ValueError):
    """The due date could not be set; the message says what to write instead."""


def parse_when(text: str) -> datetime:
    """A due date as UTC without a zone (nbgrader's way), from ISO 8601 text; local time when no zone."""
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise DueDateError(f"{text!r} is not a date and time: write it as AT=\"2026-12-06 17:00\" "
                           "(this machine's time) or AT=2026-12-06T17:00+01:00") from None
    if when.tzinfo is None:
        when = when.astimezone()               # the room's clock
    return when.astimezone(timezone.utc).replace(tzinfo=None)


def open_gradebook(course: Path):
    """nbgrader's Gradebook of the course (it runs its helper `alembic` from PATH: this Python's
    scripts folder goes first, as grading._nbgrader does for nbgrader's commands)."""
    from nbgrader.api import Gradebook
    scripts = str(Path(sys.executable).parent)
    if scripts not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = os.pathsep.join([scripts, os.environ.get("PATH", "")])
    return Gradebook(f"sqlite:///{course / 'gradebook.db'}", course_id=grading.COURSE_ID)


def _gradebook(course: Path):
    if not (course / "gradebook.db").exists():
        raise DueDateError(f"no gradebook in {course}: run make nbgrader LAB=NN first")
    return open_gradebook(course)


def set_due(lab: str, when: str, course: Path = grading.COURSE_DIR) -> datetime:
    """Record `when` as lab `lab`'s due date in the course's gradebook; returns it (UTC)."""
    from nbgrader.api import MissingEntry
    name, course, due = grading.assignment_name(lab), course.resolve(), parse_when(when)
    with _gradebook(course) as gb:
        try:
            gb.find_assignment(name)
        except MissingEntry:
            raise DueDateError(f"{name} is not released in {course}: run make nbgrader LAB={name[3:]} first") from None
        gb.update_or_create_assignment(name, duedate=due)
    print(f"{name} is due {due:%Y-%m-%d %H:%M} UTC: copies changed after it are late "
          "(make collect and make export say who)")
    return due


def due_date(name: str, course: Path) -> datetime | None:
    """The assignment's due date (UTC, no zone), None when it has none."""
    from nbgrader.api import MissingEntry
    with _gradebook(course) as gb:
        try:
            return gb.find_assignment(name).duedate
        except MissingEntry:
            return None


def write_timestamp(folder: Path, changed: float) -> None:
    """When the learner last changed their copy, in nbgrader's submission time format (UTC)."""
    stamp = datetime.fromtimestamp(changed, timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f UTC")
    (folder / TIMESTAMP).write_text(stamp + "\n")


def late(name: str, course: Path) -> dict[str, float]:
    """{learner: hours late} of the collected copies changed after the assignment's due date."""
    from nbgrader.utils import parse_utc
    if not (course / "gradebook.db").exists() or (due := due_date(name, course)) is None:
        return {}
    found = {}
    for stamp in sorted((course / "submitted").glob(f"*/{name}/{TIMESTAMP}")):
        seconds = (parse_utc(stamp.read_text().strip()) - due).total_seconds()
        if seconds > 0:
            found[stamp.parents[1].name] = seconds / 3600
    return found


def say_late(name: str, course: Path) -> None:
    for learner, hours in late(name, course).items():
        print(f"LATE {learner}: {name} last changed {hours:.1f} h after its due date")
