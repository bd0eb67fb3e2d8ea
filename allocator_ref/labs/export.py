"""The grades for a course platform: make export writes build/nbgrader/grades-moodle.csv.

The format is Moodle's "Import grades from CSV" (Grades > Import > CSV file; the gradeimport_csv
plugin, grade/import/csv/classes/load_data.php): UTF-8, comma-separated, a header row, one row per
learner.  Moodle finds each learner by the column you map to "Email address" (the roster's e-mail,
roster.py); each grade column is mapped to a grade item (or to a new one, named after its header).
A grade is a number with a "." decimal point, or "-" for no grade (Moodle leaves it ungraded); Moodle
refuses a grade above its grade point maximum (100 by default), so each lab's column is its points,
never more.  Columns:

    Email address, Username, Full name, lab01, lab02, ..., Total, Late

``Total`` is the sum of the learner's lab points (the per-learner total, out of every lab's points);
``Late`` is text (map it to a feedback column, or ignore it): the labs handed in after the learner's
due date, by how many hours (due.py); such a lab's points are 0 (nbgrader's late penalty, taken off
its score here as nbgrader's own export does).

Everything comes from the gradebook alone (gradebook.db, where make autograde records the grades a
judge gave), never from a file a learner's code could have written.  make room-check's test
learners are left out.  A learner missing from the roster is exported with no e-mail (Moodle skips
such a row) and named, so you can add them to the roster and export again.
"""
from __future__ import annotations

import csv
import io
from pathlib import Path

from . import due, grading, roster

EXPORT = "grades-moodle.csv"
FIXED = ("Email address", "Username", "Full name")


def _score(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".")


def _points(submission) -> float | None:
    """A graded submission's points, less nbgrader's late penalty (as nbgrader's own export takes it
    off); None for no submission, or one nothing was graded on: make extend for a learner not
    collected yet leaves an empty submission (nbgrader's add_submission), whose score is 0 only
    because no grade cell has a score yet."""
    if submission is None or not any(grade.auto_score is not None or grade.manual_score is not None
                                     for notebook in submission.notebooks for grade in notebook.grades):
        return None
    return max(submission.score - submission.late_submission_penalty, 0)


def table(course: Path) -> tuple[list[str], list[list[str]], list[str]]:
    """(header, rows, learners missing from the roster), read from the course's gradebook."""
    from nbgrader.api import MissingEntry
    people = roster.load(course)
    with due.open_gradebook(course) as gb:
        labs = sorted(a.name for a in gb.assignments)
        learners = sorted(s.id for s in gb.students if not roster.ROOM_CHECK_NAME.match(s.id))
        scores = {}
        for lab in labs:
            for learner in learners:
                try:
                    submission = gb.find_submission(lab, learner)
                except MissingEntry:
                    submission = None
                scores[lab, learner] = _points(submission)
    late = {lab: due.late(lab, course) for lab in labs}
    rows, missing = [], []
    for learner in learners:
        person = people.get(learner)
        if person is None:
            missing.append(learner)
        got = [scores[lab, learner] for lab in labs]
        was_late = [f"{lab} by {late[lab][learner]:.1f} h" for lab in labs if learner in late[lab]]
        rows.append([person.email if person else "", learner, person.name if person else "",
                     *("-" if s is None else _score(s) for s in got),
                     _score(sum(s for s in got if s is not None)), "; ".join(was_late)])
    return [*FIXED, *labs, "Total", "Late"], rows, missing


def export(course: Path = grading.COURSE_DIR, out: Path | None = None) -> Path:
    """Write the Moodle grade import CSV (the instructor's only); returns its path."""
    course = course.resolve()
    if not (course / "gradebook.db").exists():
        raise grading.GradingError(f"no gradebook in {course}: run make autograde LAB=NN first")
    header, rows, missing = table(course)
    out = out or course / EXPORT
    text = io.StringIO()
    csv.writer(text, lineterminator="\n").writerows([header, *rows])
    out.touch(mode=0o600)
    out.chmod(0o600)
    out.write_text(text.getvalue(), encoding="utf-8")
    print(f"exported {len(rows)} learners, {len(header) - len(FIXED) - 2} labs: {out} "
          "(Moodle: Grades > Import > CSV file; map 'Email address' to the user's email address)")
    for learner in missing:
        print(f"NOT ON THE ROSTER {learner}: exported without an e-mail, which Moodle skips; add a row "
              f"'{learner},NAME,EMAIL' to your roster file, then make roster FILE=... and make export again")
    return out
