"""The roster: who is behind each user name of the room (make roster FILE=people.csv).

Learners pick their own user names when they first log in, so grades carry no real names.  The
instructor writes a CSV with one row per learner, ``user,name,email`` (a header row first)::

    user,name,email
    ada,Ada Lovelace,ada@example.org

``make roster FILE=people.csv`` checks it and keeps a copy in the course folder (roster.csv,
readable by the instructor only, like the grades); ``make export`` reads it to put names and
e-mails beside each learner's totals (export.py).  Every mistake in the file is one line naming
the row and what to fix, and nothing is kept until the whole file is right.
"""
from __future__ import annotations

import csv
import io
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

ROSTER = "roster.csv"                      # in the nbgrader course folder, next to grades.csv
COLUMNS = ("user", "name", "email")
USER = re.compile(r"^[a-z][a-z0-9_-]{0,30}$")           # the hub's username_pattern (a Unix name)
EMAIL = re.compile(r"^[^@\s,;<>]+@[^@\s,;<>]+\.[^@\s,;<>]+$")
# The test learners `make room-check` logs in (workshop/room_check.py room_check_name): never on a roster,
# never collected, graded or exported.
ROOM_CHECK_NAME = re.compile(r"^roomcheck\d+[0-9a-f]{6}$")


class RosterError(ValueError):
    """The roster file is wrong; the message names the row and what to fix."""


@dataclass(frozen=True)
class Person:
    user: str
    name: str
    email: str


def parse(text: str, where: str = "the roster") -> dict[str, Person]:
    """{user name: Person} from the roster's CSV text, or a RosterError naming the first bad row."""
    rows = csv.reader(io.StringIO(text.lstrip("\ufeff")))          # a spreadsheet's UTF-8 mark is not a column
    header = [h.strip().lower() for h in next(rows, [])]
    if tuple(header) != COLUMNS:
        raise RosterError(f"{where}: the first row must be the header user,name,email (found "
                          f"{','.join(header) or 'nothing'})")
    people: dict[str, Person] = {}
    emails: dict[str, str] = {}
    for n, row in enumerate(rows, start=2):
        if not any(cell.strip() for cell in row):
            continue                                               # a blank line
        if len(row) != 3:
            raise RosterError(f"{where} row {n}: {len(row)} fields; write user,name,email "
                              "(quote a name that holds a comma)")
        user, name, email = (cell.strip() for cell in row)
        if not USER.match(user):
            raise RosterError(f"{where} row {n}: {user!r} is not a room user name (lower-case letters, digits, "
                              "- and _, starting with a letter): write the name the learner logs in with")
        if not name:
            raise RosterError(f"{where} row {n}: {user} has no name")
        if not EMAIL.match(email):
            raise RosterError(f"{where} row {n}: {email!r} is not an e-mail address")
        if user in people:
            raise RosterError(f"{where} row {n}: {user} is listed twice; keep one row per learner")
        if email.lower() in emails:
            raise RosterError(f"{where} row {n}: {email} is also {emails[email.lower()]}'s; "
                              "an e-mail identifies one learner in the course platform")
        people[user] = Person(user, name, email)
        emails[email.lower()] = user
    if not people:
        raise RosterError(f"{where}: no learners under the header")
    return people


def load(course: Path) -> dict[str, Person]:
    """The roster kept in the course folder; {} when there is none."""
    path = course / ROSTER
    return parse(path.read_text(encoding="utf-8"), str(path)) if path.exists() else {}


def keep(source: Path, course: Path) -> dict[str, Person]:
    """Check `source` and keep a copy as COURSE/roster.csv (the instructor's only)."""
    if not source.is_file():
        raise RosterError(f"{source} is not a file: make roster FILE=people.csv (columns user,name,email)")
    people = parse(source.read_text(encoding="utf-8"), str(source))
    course.mkdir(parents=True, exist_ok=True)
    target = course / ROSTER
    target.touch(mode=0o600)
    target.chmod(0o600)
    shutil.copyfile(source, target)
    print(f"roster: {len(people)} learners kept in {target} (readable by you only)")
    return people
