"""Due dates: make due LAB=02 AT="2026-12-06 17:00" closes lab 2 at that time.

The due date is nbgrader's own (the assignment's ``duedate`` in gradebook.db, set here through
nbgrader's Gradebook API), so nbgrader itself computes each submission's lateness when it grades:
``make collect`` writes, beside each learner's copy, the time they last changed it
(``timestamp.txt``, which nbgrader's autograde reads as the submission time), and a copy changed
after the learner's due date is late by that much.

Closed, the way nbgrader closes one:

* collect keeps the last copy from before the due date: a copy changed after it never replaces
  one already collected on time (nbgrader's ``ExchangeCollect.before_duedate``); a late copy
  with none before it is collected, and named;
* a late copy scores 0: nbgrader's ``LateSubmissionPlugin`` with ``penalty_method = "zero"``
  (``penalise``, after the judges' scores are in, so the penalty is the recorded score);
* one learner's date moves with ``make extend LAB=02 LEARNER=ada AT=...``: nbgrader's
  ``Gradebook.grant_extension``, kept on that learner's submission (``SubmittedAssignment.duedate``
  is the lab's date plus it), so their copy is on time until then;
* each learner's ``~/graded/labNN/due.json`` says their date, so a graded check run after it says
  so in one line in the learner's language (check.py ``say_closed``).  It is a notice only: what
  closes the lab is the gradebook on the instructor's side, which a learner never reaches.

A time without a zone is this machine's local time (the room's clock); ``2026-12-06T17:00+01:00``
names its zone.  nbgrader keeps UTC.
"""
from __future__ import annotations

import json
import os
import sys
from datetime import datetime, timezone
from pathlib import Path

from . import grading
from .hand_back import write_as_learner

TIMESTAMP = "timestamp.txt"                # nbgrader's CourseDirectory.get_existing_timestamp reads it
NOTICE = "due.json"                        # the learner's date, beside their copy (check.py reads it)
PENALTY = "zero"                           # nbgrader's LateSubmissionPlugin.penalty_method for a late copy


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


def set_due(lab: str, when: str, course: Path = grading.COURSE_DIR, homes: Path | None = None) -> datetime:
    """Record `when` as lab `lab`'s due date in the course's gradebook; returns it (UTC).  With the
    hub's homes, each learner's ~/graded/labNN/due.json says their own date (extensions kept)."""
    from nbgrader.api import MissingEntry
    name, course, due = grading.assignment_name(lab), course.resolve(), parse_when(when)
    with _gradebook(course) as gb:
        try:
            gb.find_assignment(name)
        except MissingEntry:
            raise DueDateError(f"{name} is not released in {course}: run make nbgrader LAB={name[3:]} first") from None
        gb.update_or_create_assignment(name, duedate=due)
    print(f"{name} is due {due:%Y-%m-%d %H:%M} UTC: a copy changed after it is late and scores 0 "
          "(make collect and make export say who; make extend moves one learner's date)")
    if homes is not None:
        tell_learners(name, course, homes)
    return due


def extend(lab: str, learner: str, when: str, course: Path = grading.COURSE_DIR,
           homes: Path | None = None) -> datetime:
    """Move one learner's due date to `when` (nbgrader's Gradebook.grant_extension: the extension is
    the time past the lab's date, kept on their submission); returns their date (UTC)."""
    from nbgrader.api import MissingEntry
    name, course, until = grading.assignment_name(lab), course.resolve(), parse_when(when)
    due = due_date(name, course)
    if due is None:
        raise DueDateError(f"{name} has no due date to extend: make due LAB={name[3:]} AT=... first")
    if until <= due:
        raise DueDateError(f"{until:%Y-%m-%d %H:%M} UTC is not after {name}'s due date "
                           f"({due:%Y-%m-%d %H:%M} UTC): an extension moves a learner's date later")
    known = known_learners(course, homes)
    if learner not in known:
        raise DueDateError(f"no learner {learner!r} in this room (the roster, the hub's homes, the collected "
                           f"copies, the gradebook): check the name{'; known: ' + ', '.join(sorted(known)[:8]) if known else ''}")
    with _gradebook(course) as gb:
        gb.update_or_create_student(learner)
        try:
            gb.find_submission(name, learner)
        except MissingEntry:                   # not collected yet: the extension waits on an empty submission
            gb.add_submission(name, learner)
        gb.grant_extension(name, learner, minutes=(until - due).total_seconds() / 60)
    print(f"{learner}: {name} is due {until:%Y-%m-%d %H:%M} UTC (the others {due:%Y-%m-%d %H:%M} UTC); "
          f"run make autograde LAB={name[3:]} again if it was graded")
    if homes is not None:
        tell_learners(name, course, homes, only=learner)
    return until


def known_learners(course: Path, homes: Path | None) -> set[str]:
    """Every learner this room knows of: the roster, the hub's homes, collected copies, the gradebook
    (an extension for a mistyped name would make a learner nobody is)."""
    from .roster import ROOM_CHECK_NAME, load
    known = set(load(course)) | {p.parent.name for p in (course / "submitted").glob("*/lab*")}
    if homes is not None and homes.is_dir():
        known |= {p.name for p in homes.iterdir() if p.is_dir() and not p.name.startswith(".")}
    with _gradebook(course) as gb:
        known |= {s.id for s in gb.students}
    return {k for k in known if not ROOM_CHECK_NAME.match(k)}


def due_date(name: str, course: Path) -> datetime | None:
    """The assignment's due date (UTC, no zone), None when it has none."""
    from nbgrader.api import MissingEntry
    with _gradebook(course) as gb:
        try:
            return gb.find_assignment(name).duedate
        except MissingEntry:
            return None


def due_dates(name: str, course: Path) -> tuple[datetime | None, dict[str, datetime]]:
    """(the lab's due date, {learner: their date} of those with an extension): SubmittedAssignment.duedate."""
    if not (course / "gradebook.db").exists():
        return None, {}
    from nbgrader.api import MissingEntry
    with _gradebook(course) as gb:
        try:
            assignment = gb.find_assignment(name)
        except MissingEntry:
            return None, {}
        extended = {s.student.id: s.duedate for s in gb.assignment_submissions(name) if s.extension}
        return assignment.duedate, extended


def notice(name: str, learner: str, dates: tuple) -> bytes:
    """The text of one learner's due.json: the lab and their date (an extension's, else the lab's), UTC."""
    due, extended = dates
    when = extended.get(learner, due)
    return json.dumps({"lab": name, "due": f"{when:%Y-%m-%dT%H:%M:%S}Z"}).encode()


def tell_learners(name: str, course: Path, homes: Path, only: str | None = None) -> int:
    """Write each learner's date into their ~/graded/labNN/due.json, as that learner (hand_back.py:
    a link they planted leads only where they could write anyway); returns how many were told."""
    from .roster import ROOM_CHECK_NAME
    dates = due_dates(name, course)
    if dates[0] is None or not homes.is_dir():
        return 0
    told = 0
    for home in sorted(p for p in homes.iterdir() if p.is_dir() and not p.is_symlink()
                       and not ROOM_CHECK_NAME.match(p.name) and only in (None, p.name)):
        try:
            write_as_learner(notice(name, home.name, dates), home, f"{grading.GRADED_FOLDER}/{name}", NOTICE)
            told += 1
        except (OSError, ValueError) as exc:   # not root, or a home the hub no longer uses
            print(f"{home.name}: could not write ~/{grading.GRADED_FOLDER}/{name}/{NOTICE} ({exc})")
    print(f"{told} learners told their {name} due date (~/{grading.GRADED_FOLDER}/{name}/{NOTICE})")
    return told


def changed_at(last_modified: str) -> float:
    """A Jupyter contents model's ``last_modified`` (ISO 8601, UTC: '2026-12-06T16:59:00.5Z') as seconds
    since the epoch, the form collect's file times have (a room on Kubernetes: workshop/hub_exchange.py)."""
    when = datetime.fromisoformat(last_modified.replace("Z", "+00:00"))
    return (when if when.tzinfo else when.replace(tzinfo=timezone.utc)).timestamp()


def write_timestamp(folder: Path, changed: float) -> None:
    """When the learner last changed their copy, in nbgrader's submission time format (UTC)."""
    stamp = datetime.fromtimestamp(changed, timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f UTC")
    (folder / TIMESTAMP).write_text(stamp + "\n")


def collected_at(folder: Path) -> datetime | None:
    """The submission time collect wrote beside a learner's copy (UTC, no zone), None without one."""
    from nbgrader.utils import parse_utc
    stamp = folder / TIMESTAMP
    return parse_utc(stamp.read_text().strip()) if stamp.is_file() else None


def late(name: str, course: Path) -> dict[str, float]:
    """{learner: hours late} of the collected copies changed after their learner's due date."""
    due, extended = due_dates(name, course)
    if due is None:
        return {}
    found = {}
    for stamp in sorted((course / "submitted").glob(f"*/{name}/{TIMESTAMP}")):
        learner = stamp.parents[1].name
        seconds = (collected_at(stamp.parent) - extended.get(learner, due)).total_seconds()
        if seconds > 0:
            found[learner] = seconds / 3600
    return found


def say_late(name: str, course: Path) -> None:
    for learner, hours in late(name, course).items():
        print(f"LATE {learner}: {name} last changed {hours:.1f} h after their due date: it scores 0 "
              f"(make extend LAB={name[3:]} LEARNER={learner} AT=... accepts it)")


def keeps_on_time(folder: Path, changed: float, learner_due: datetime | None) -> bool:
    """Whether collect keeps the copy already in ``folder`` instead of one changed at ``changed``: the
    kept one is from before the learner's due date and the new one from after it
    (nbgrader's ExchangeCollect.before_duedate: the last submission before the due date)."""
    if learner_due is None:
        return False
    before = collected_at(folder)
    new = datetime.fromtimestamp(changed, timezone.utc).replace(tzinfo=None)
    return before is not None and before <= learner_due < new


def penalise(name: str, course: Path, students: set) -> dict[str, float]:
    """nbgrader's late penalty on each late submission, from the score the judges recorded (nbgrader's own
    AssignLatePenalties ran before them): LateSubmissionPlugin(penalty_method=PENALTY), clamped to the
    score as nbgrader clamps it.  Returns {learner: points taken}."""
    from nbgrader.api import MissingEntry
    from nbgrader.plugins import LateSubmissionPlugin
    plugin = LateSubmissionPlugin(penalty_method=PENALTY)
    taken = {}
    with _gradebook(course) as gb:
        for learner in sorted(students):
            try:
                submission = gb.find_submission(name, learner)
            except MissingEntry:
                continue
            seconds = submission.total_seconds_late
            for notebook in submission.notebooks:
                penalty = plugin.late_submission_penalty(learner, notebook.score, seconds) if seconds > 0 else None
                notebook.late_submission_penalty = None if penalty is None else min(max(penalty, 0), notebook.score)
                if notebook.late_submission_penalty:
                    taken[learner] = taken.get(learner, 0) + notebook.late_submission_penalty
        gb.db.commit()
    return taken
