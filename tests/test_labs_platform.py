"""A roster, due dates and the grade export for a course platform (roster.py, due.py, export.py).

The export is Moodle's "Import grades from CSV"; `moodle_refusals` below applies the rules Moodle's
importer applies to each row (moodle/moodle grade/import/csv/classes/load_data.php:
map_user_data_with_value, check_user_exists, update_grade_item, insert_grade_record), written from
that source, not from export.py, so a file it passes is one Moodle takes.
"""
from __future__ import annotations

import csv
import os
import stat
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from allocator_ref.labs import due, export, gradebook, grading, roster

ROOT = Path(__file__).resolve().parents[1]
pytest.importorskip("nbgrader.api", reason="nbgrader is in the test extras: pip install nbgrader")

PEOPLE = "user,name,email\nada,Ada Lovelace,ada@example.org\ngrace,\"Hopper, Grace\",grace@example.org\n"


def moodle_refusals(path: Path, users: dict[str, str]) -> list[str]:
    """What Moodle's CSV grade import would refuse in `path`, mapping 'Email address' to the user's
    email and every lab column and Total to a grade item (the importer's rules, load_data.php):
    the file is UTF-8 with a header row; a row whose mapped user field is blank is skipped; a
    user field that matches no user fails the import; a grade is '' or '-' (no grade) or a number
    (unformat_float: '.' as the decimal point), and no more than the grade point maximum (100)."""
    text = path.read_bytes().decode("utf-8")                 # raises if not UTF-8
    rows = list(csv.reader(text.splitlines()))
    header = [h.strip() for h in rows[0]]
    problems = []
    grade_columns = [i for i, h in enumerate(header) if h.startswith("lab") or h == "Total"]
    email = header.index("Email address")
    for n, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            problems.append(f"row {n}: {len(row)} fields for {len(header)} columns")
            continue
        if not row[email].strip():
            continue                                           # Moodle skips it
        if row[email] not in users:
            problems.append(f"row {n}: no user with email address {row[email]}")
        for i in grade_columns:
            value = row[i].strip()
            if value in ("", "-"):
                continue
            try:
                number = float(value)
            except ValueError:
                problems.append(f"row {n}: {header[i]} {value!r} is not a grade")
                continue
            if "," in value or number > 100:
                problems.append(f"row {n}: {header[i]} {value} refused")
    return problems


def _gradebook(course: Path, scores: dict[str, dict[str, float]], top: dict[str, int]) -> None:
    """A gradebook as make nbgrader and make autograde leave it: each lab with one grade cell per point."""
    course.mkdir(parents=True, exist_ok=True)
    with due.open_gradebook(course) as gb:
        for lab, points in top.items():
            gb.update_or_create_assignment(lab)
            gb.update_or_create_notebook(f"{lab}_x", lab)
            for i in range(points):
                gb.update_or_create_grade_cell(f"c{i}", f"{lab}_x", lab, max_score=1, cell_type="code")
        for learner, got in scores.items():
            gb.update_or_create_student(learner)
            for lab, score in got.items():
                gb.add_submission(lab, learner)
                for i in range(top[lab]):
                    gb.find_grade(f"c{i}", f"{lab}_x", lab, learner).auto_score = 1 if i < score else 0
        gb.db.commit()


def test_a_roster_maps_user_names_to_names_and_emails(tmp_path):
    source = tmp_path / "people.csv"
    source.write_text("\ufeff" + PEOPLE)                     # a spreadsheet's byte-order mark
    people = roster.keep(source, tmp_path / "course")
    assert people["grace"] == roster.Person("grace", "Hopper, Grace", "grace@example.org")
    kept = tmp_path / "course" / roster.ROSTER
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600 and roster.load(tmp_path / "course") == people


@pytest.mark.parametrize("text, said", [
    ("name,email\nAda,ada@example.org\n", "the first row must be the header user,name,email"),
    ("user,name,email\nAda,Ada,ada@example.org\n", "row 2: 'Ada' is not a room user name"),
    ("user,name,email\nada,Ada,ada.example.org\n", "row 2: 'ada.example.org' is not an e-mail address"),
    ("user,name,email\nada,Ada,ada@example.org\nada,Ada L,al@example.org\n", "row 3: ada is listed twice"),
    ("user,name,email\nada,Ada,ada@example.org\nbob,Bob,ADA@example.org\n", "is also ada's"),
    ("user,name,email\nada,Ada Lovelace,ada@example.org,extra\n", "row 2: 4 fields"),
    ("user,name,email\nada,,ada@example.org\n", "row 2: ada has no name"),
])
def test_a_wrong_roster_is_one_line_and_nothing_is_kept(tmp_path, text, said, capsys):
    source = tmp_path / "people.csv"
    source.write_text(text)
    assert gradebook.main(["roster", "--file", str(source), "--course", str(tmp_path / "course")]) == 1
    err = capsys.readouterr().err.strip()
    assert said in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "course" / roster.ROSTER).exists()


def test_the_export_is_moodles_grade_import_from_the_gradebook_alone(tmp_path, capsys):
    course = tmp_path / "course"
    _gradebook(course, {"ada": {"lab01": 2, "lab02": 3}, "grace": {"lab01": 1}, "bob": {"lab02": 4},
                        "roomcheck1a1b2c3": {"lab01": 2}}, {"lab01": 2, "lab02": 4})
    (course / "grades.csv").write_text("student_id,score\ngrace,99\n")    # a forged nbgrader export: not read
    (tmp_path / "people.csv").write_text(PEOPLE)
    assert gradebook.main(["roster", "--file", str(tmp_path / "people.csv"), "--course", str(course)]) == 0
    assert gradebook.main(["export", "--course", str(course)]) == 0
    said = capsys.readouterr().out
    out = course / export.EXPORT
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    rows = list(csv.DictReader(out.read_text(encoding="utf-8").splitlines()))
    by_user = {r["Username"]: r for r in rows}
    assert set(by_user) == {"ada", "grace", "bob"}                        # room-check learners left out
    assert by_user["ada"] == {"Email address": "ada@example.org", "Username": "ada", "Full name": "Ada Lovelace",
                              "lab01": "2", "lab02": "3", "Total": "5", "Late": ""}
    assert (by_user["grace"]["lab02"], by_user["grace"]["Total"]) == ("-", "1")
    assert by_user["bob"]["Email address"] == "" and "NOT ON THE ROSTER bob" in said
    users = {p.email: p.user for p in roster.load(course).values()}
    assert moodle_refusals(out, users) == []
    # the checker is not a rubber stamp: what Moodle refuses, it refuses
    bad = tmp_path / "bad.csv"
    bad.write_text("Email address,Username,Full name,lab01,Total,Late\nada@example.org,ada,A,\"1,5\",101,\n"
                   "eve@example.org,eve,E,1,1,\n")
    assert len(moodle_refusals(bad, users)) == 3


def test_a_due_date_flags_copies_changed_after_it(tmp_path, capsys):
    """make due LAB=01 AT=...; make collect records when each learner last changed their copy
    (nbgrader's timestamp.txt); the late ones are named, and flagged in the export."""
    course, homes = tmp_path / "course", tmp_path / "homes"
    _gradebook(course, {"ada": {"lab01": 2}, "grace": {"lab01": 2}}, {"lab01": 2})
    assert gradebook.main(["due", "01", "--at", "2026-12-06T17:00+00:00", "--course", str(course)]) == 0
    assert due.due_date("lab01", course) == datetime(2026, 12, 6, 17, 0)
    for learner, changed in (("ada", "2026-12-06T16:59+00:00"), ("grace", "2026-12-06T19:30+00:00")):
        copy = homes / learner / "graded" / "lab01" / "lab01_measure_it.ipynb"
        copy.parent.mkdir(parents=True)
        copy.write_text(f"{learner}'s work")
        moment = datetime.fromisoformat(changed).timestamp()
        os.utime(copy, (moment, moment))
    gradebook.collect("01", homes, course)
    said = capsys.readouterr().out
    assert "LATE grace: lab01 last changed 2.5 h after their due date: it scores 0" in said
    assert "LATE ada" not in said
    assert due.late("lab01", course) == {"grace": pytest.approx(2.5)}
    export.export(course)
    rows = {r["Username"]: r for r in csv.DictReader((course / export.EXPORT).read_text().splitlines())}
    assert rows["grace"]["Late"] == "lab01 by 2.5 h" and rows["ada"]["Late"] == ""


def _copy(homes: Path, learner: str, text: str, changed: str) -> Path:
    """A learner's graded copy with the given text, last changed at ``changed`` (ISO 8601)."""
    copy = homes / learner / "graded" / "lab01" / "lab01_measure_it.ipynb"
    copy.parent.mkdir(parents=True, exist_ok=True)
    copy.write_text(text)
    moment = datetime.fromisoformat(changed).timestamp()
    os.utime(copy, (moment, moment))
    return copy


def test_a_closed_lab_keeps_the_copy_collected_on_time(tmp_path, capsys):
    """After the due date a changed copy never replaces one collected before it (nbgrader's
    ExchangeCollect.before_duedate); a learner with no on-time copy is collected and named late."""
    course, homes = tmp_path / "course", tmp_path / "homes"
    _gradebook(course, {}, {"lab01": 2})
    due.set_due("01", "2026-12-06T17:00+00:00", course)
    _copy(homes, "ada", "ada on time", "2026-12-06T16:50+00:00")
    gradebook.collect("01", homes, course)
    _copy(homes, "ada", "ada after the due date", "2026-12-06T18:00+00:00")
    _copy(homes, "grace", "grace late", "2026-12-06T18:00+00:00")
    capsys.readouterr()
    gradebook.collect("01", homes, course)
    said = capsys.readouterr().out
    submitted = course / "submitted"
    assert (submitted / "ada" / "lab01" / "lab01_measure_it.ipynb").read_text() == "ada on time"
    assert "CLOSED ada: lab01 changed after their due date; the copy collected before it is kept" in said
    assert (submitted / "grace" / "lab01" / "lab01_measure_it.ipynb").read_text() == "grace late"
    assert due.late("lab01", course) == {"grace": pytest.approx(1.0)}


def test_a_late_copy_scores_zero_until_its_learner_gets_an_extension(tmp_path, capsys):
    """nbgrader's late penalty 'zero' on the recorded score; make extend (nbgrader's grant_extension)
    moves one learner's date, and their copy is on time again; the export says both."""
    course = tmp_path / "course"
    _gradebook(course, {"ada": {"lab01": 2}, "grace": {"lab01": 2}}, {"lab01": 2})
    due.set_due("01", "2026-12-06T17:00+00:00", course)
    with due.open_gradebook(course) as gb:
        gb.update_or_create_submission("lab01", "ada", timestamp="2026-12-06 16:00:00 UTC")
        gb.update_or_create_submission("lab01", "grace", timestamp="2026-12-06 19:00:00 UTC")
    assert due.penalise("lab01", course, {"ada", "grace"}) == {"grace": 2}
    rows = {r[1]: r for r in export.table(course)[1]}
    assert rows["grace"][3] == "0" and rows["ada"][3] == "2"
    assert gradebook.main(["extend", "01", "--learner", "grace", "--at", "2026-12-07T17:00+00:00",
                           "--course", str(course)]) == 0
    assert "grace: lab01 is due 2026-12-07 17:00 UTC" in capsys.readouterr().out
    assert due.due_dates("lab01", course) == (datetime(2026, 12, 6, 17), {"grace": datetime(2026, 12, 7, 17)})
    assert due.penalise("lab01", course, {"ada", "grace"}) == {}
    assert {r[1]: r[3] for r in export.table(course)[1]} == {"ada": "2", "grace": "2"}
    assert gradebook.main(["extend", "01", "--learner", "grace", "--at", "2026-12-06T12:00+00:00",
                           "--course", str(course)]) == 1
    assert "is not after lab01's due date" in capsys.readouterr().err
    assert gradebook.main(["extend", "01", "--learner", "gracee", "--at", "2026-12-07T17:00+00:00",
                           "--course", str(course)]) == 1
    err = capsys.readouterr().err.strip()
    assert "no learner 'gracee' in this room" in err and "ada, grace" in err and len(err.splitlines()) == 1


def test_an_extension_before_anything_was_handed_in_exports_no_grade(tmp_path):
    """make extend for a learner not collected yet leaves an empty submission in the gradebook
    (nbgrader's add_submission, due.extend): the export says '-' (no grade, Moodle leaves it ungraded)
    for that lab, not a 0 the learner never earned; a graded 0 stays 0."""
    course = tmp_path / "course"
    _gradebook(course, {"ada": {"lab01": 0}, "grace": {}}, {"lab01": 2})
    due.set_due("01", "2026-12-06T17:00+00:00", course)
    due.extend("01", "grace", "2026-12-08T09:00+00:00", course)
    with due.open_gradebook(course) as gb:
        gb.find_submission("lab01", "grace")              # the extension made an (empty) submission
    rows = {r[1]: r for r in export.table(course)[1]}
    assert (rows["grace"][3], rows["grace"][4]) == ("-", "0")
    assert (rows["ada"][3], rows["ada"][4]) == ("0", "0")


def test_each_learner_is_told_their_own_date_and_a_closed_lab_in_their_language(tmp_path, monkeypatch, capsys):
    """make due and make extend write each learner's ~/graded/lab01/due.json (their own date); a graded
    check run after it says the lab is closed, in one line, in the learner's language."""
    from allocator_ref.labs import closed
    course, homes = tmp_path / "course", tmp_path / "homes"
    _gradebook(course, {}, {"lab01": 2})
    for learner in ("ada", "grace"):
        (homes / learner / "graded" / "lab01").mkdir(parents=True)
    due.set_due("01", "2026-12-06T17:00+00:00", course, homes)
    due.extend("01", "grace", "2026-12-08T09:00+00:00", course, homes)
    ada, grace = (homes / n / "graded" / "lab01" for n in ("ada", "grace"))
    assert (ada / "due.json").read_text() == '{"lab": "lab01", "due": "2026-12-06T17:00:00Z"}'
    assert (grace / "due.json").read_text() == '{"lab": "lab01", "due": "2026-12-08T09:00:00Z"}'
    monkeypatch.setenv("ALLOCATOR_REF_LANG", "en")
    after = datetime.fromisoformat("2026-12-07T00:00+00:00")
    line = closed.closed_line("lab1.explain", ada, now=after)
    assert line.startswith("lab01 closed at 2026-12-06 17:00 UTC, your due date") and "\n" not in line
    assert closed.closed_line("lab1.explain", grace, now=after) is None      # extended
    assert closed.closed_line("lab2.round_size", ada, now=after) is None           # another lab
    assert closed.closed_line("lab1.explain", tmp_path, now=after) is None   # no notice: self-paced
    monkeypatch.setenv("ALLOCATOR_REF_LANG", "zh")
    assert "已于 2026-12-06 17:00 UTC" in closed.closed_line("lab1.explain", ada, now=after)
    monkeypatch.setenv("ALLOCATOR_REF_LANG", "en")
    monkeypatch.chdir(ada)                       # a graded notebook's kernel starts beside its copy
    from allocator_ref.labs.check import check
    check("lab1.explain", None, graded=True)     # the date above is still to come on the test's clock?
    open_now = datetime.now(timezone.utc) <= datetime.fromisoformat("2026-12-06T17:00+00:00")
    assert ("lab01 closed" in capsys.readouterr().out) != open_now
    (ada / "due.json").write_text('{"lab": "lab01", "due": "2026-12-01T17:00:00Z"}')     # a date gone by
    check("lab1.explain", None, graded=True)
    assert "lab01 closed at 2026-12-01 17:00 UTC" in capsys.readouterr().out
    check("lab1.explain", None)                  # the self-paced check says nothing of it
    assert "closed" not in capsys.readouterr().out


@pytest.mark.parametrize("at, said", [("next friday", "is not a date and time"), ("", "usage: make due")])
def test_a_wrong_due_date_is_one_line(tmp_path, capsys, at, said):
    course = tmp_path / "course"
    _gradebook(course, {}, {"lab01": 1})
    assert gradebook.main(["due", "01", "--at", at, "--course", str(course)]) == 1
    err = capsys.readouterr().err.strip()
    assert said in err and len(err.splitlines()) == 1
    assert due.due_date("lab01", course) is None
    assert gradebook.main(["due", "03", "--at", "2026-12-06 17:00", "--course", str(course)]) == 1
    assert "lab03 is not released" in capsys.readouterr().err


def test_the_make_targets_say_their_usage():
    env = {k: v for k, v in os.environ.items() if k not in ("FILE", "AT", "LAB", "LEARNER")}
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run(["make", "-s", "--no-print-directory", "roster", f"PY={sys.executable}", "STAMP=",
                          "NBGRADER_DIR=/nonexistent/course"], cwd=ROOT, capture_output=True, text=True, env=env)
    assert out.returncode != 0 and "usage: make roster FILE=people.csv" in out.stderr, out.stderr
    out = subprocess.run(["make", "-s", "--no-print-directory", "export", f"PY={sys.executable}", "STAMP=",
                          "NBGRADER_DIR=/nonexistent/course"], cwd=ROOT, capture_output=True, text=True, env=env)
    assert out.returncode != 0 and "run make autograde LAB=NN first" in out.stderr, out.stderr
    out = subprocess.run(["make", "-s", "--no-print-directory", "extend", "LAB=01", f"PY={sys.executable}", "STAMP=",
                          "NBGRADER_DIR=/nonexistent/course"], cwd=ROOT, capture_output=True, text=True, env=env)
    assert out.returncode != 0 and "usage: make extend LAB=02 LEARNER=ada AT=" in out.stderr, out.stderr


@pytest.mark.slow
def test_make_autograde_scores_a_late_copy_zero_and_an_extension_keeps_it(tmp_path, monkeypatch, capsys):
    """The whole path on nbgrader itself (the judges stood in for: every check passes): collect writes
    the submission times, nbgrader files them, the late copy loses its points to nbgrader's late
    penalty; make extend, then make autograde again, gives them back (the extension survives nbgrader's
    filing of the submission)."""
    from nbgrader.api import Gradebook
    from allocator_ref.labs import regrade

    def every_check_passes(name, course, course_id, say=print, students=None, parallel=None):
        with Gradebook(f"sqlite:///{course / 'gradebook.db'}", course_id=course_id) as gb:
            for learner in students:
                for notebook in gb.find_submission(name, learner).notebooks:
                    for grade in notebook.grades:
                        grade.auto_score = grade.max_score
            gb.db.commit()
    monkeypatch.setattr(regrade, "record", every_check_passes)
    course, homes = tmp_path / "course", tmp_path / "homes"
    released = grading.release("01", course)
    due.set_due("01", "2026-12-06T17:00+00:00", course)
    for learner, changed in (("ada", "2026-12-06T16:00+00:00"), ("grace", "2026-12-06T18:00+00:00")):
        _copy(homes, learner, released.read_text(), changed)
    gradebook.collect("01", homes, course)
    gradebook.autograde("01", course)
    assert "LATE grace: lab01 handed in after their due date: 2 points taken" in capsys.readouterr().out
    assert {r[1]: (r[3], r[-1]) for r in export.table(course)[1]} == {"ada": ("2", ""),
                                                                       "grace": ("0", "lab01 by 1.0 h")}
    due.extend("01", "grace", "2026-12-06T19:00+00:00", course)
    gradebook.autograde("01", course)
    assert "LATE" not in capsys.readouterr().out
    assert {r[1]: (r[3], r[-1]) for r in export.table(course)[1]} == {"ada": ("2", ""), "grace": ("2", "")}
