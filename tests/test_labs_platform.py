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
from datetime import datetime, timedelta
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
    assert "LATE grace: lab01 last changed 2.5 h after its due date" in said and "LATE ada" not in said
    assert due.late("lab01", course) == {"grace": pytest.approx(2.5)}
    export.export(course)
    rows = {r["Username"]: r for r in csv.DictReader((course / export.EXPORT).read_text().splitlines())}
    assert rows["grace"]["Late"] == "lab01 by 2.5 h" and rows["ada"]["Late"] == ""
    assert rows["grace"]["lab01"] == "2"                          # flagged, not deducted: the instructor decides


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
    env = {k: v for k, v in os.environ.items() if k not in ("FILE", "AT", "LAB")}
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run(["make", "-s", "--no-print-directory", "roster", f"PY={sys.executable}", "STAMP=",
                          "NBGRADER_DIR=/nonexistent/course"], cwd=ROOT, capture_output=True, text=True, env=env)
    assert out.returncode != 0 and "usage: make roster FILE=people.csv" in out.stderr, out.stderr
    out = subprocess.run(["make", "-s", "--no-print-directory", "export", f"PY={sys.executable}", "STAMP=",
                          "NBGRADER_DIR=/nonexistent/course"], cwd=ROOT, capture_output=True, text=True, env=env)
    assert out.returncode != 0 and "run make autograde LAB=NN first" in out.stderr, out.stderr
