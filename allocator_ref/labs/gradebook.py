"""The instructor's loop of a graded room, one command a step, the grades kept private.

    make collect LAB=02     each learner's ~/graded/lab02/ copy into submitted/<learner>/lab02/
    make autograde LAB=02   grades every learner; a broken submission is reported, not a stop
    make feedback LAB=02    nbgrader generate_feedback, then each learner's report into their
                            own ~/graded/lab02/feedback/ (written as that learner)
    make nbgrader LAB=02    (grading.py's release, then `private`: an older course folder closed too)
    make rehearse [LAB=02]  before the day: the solutions and every known-wrong answer (labs/wrong)
                            per lab, graded in build/rehearsal, and whether each scored as it should

(``python -m allocator_ref.labs.gradebook collect|autograde|feedback|rehearse``.)  The release
itself is ``make nbgrader LAB=02`` (grading.py).

Private: the hub hands learners release/ from the course folder, so that folder is open to
them, but what learners hand in and what they get back is not: submitted/, autograded/,
feedback/, source/ (the solutions), gradebook.db, grades.csv and nbgrader's log are the
instructor's only (folders 0700, files 0600).  Every step runs with umask 077, so none of them
is readable by others even for a moment, and `private()` closes what an older run left open.

Collect never follows a learner's link: a learner who made ~/graded/lab02/x.ipynb a link to
the solutions (or to any file only root reads) would otherwise get it back as "feedback".
"""
from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import sys
from contextlib import contextmanager
from pathlib import Path

import nbformat

from . import due, generate, grading, roster, sandbox
from .hand_back import write_as_learner
from .regrade import printable

PRIVATE = ("source", "submitted", "autograded", "feedback", "gradebook.db", "grades.csv", ".nbgrader.log",
           "roster.csv", "grades-moodle.csv")
REHEARSAL_DIR = generate.ROOT / "build" / "rehearsal"
RIGHT, WRONG = "rehearsal-right", "rehearsal-wrong"


@contextmanager
def private_files():
    """Everything made inside is readable by its owner only (nbgrader writes with the umask)."""
    old = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old)


def private(course: Path) -> None:
    """Close the course folder's grades and submissions to everyone but the instructor; learners
    may still pass through it to release/ (0711: they cannot list it)."""
    course.chmod(0o711)
    for name in PRIVATE:
        top = course / name
        if not top.exists() or top.is_symlink():
            continue
        for path in [top, *top.rglob("*")] if top.is_dir() else [top]:
            if not path.is_symlink():
                path.chmod(0o700 if path.is_dir() else 0o600)


def _nbgrader(course: Path, *args: str) -> str:
    with private_files():
        return grading._nbgrader(course, *args).stdout


# ------------------------------------------------------------------ collect

def _read_handed_in(home: Path, name: str) -> dict[str, tuple[bytes, float]]:
    """{file name: (bytes, time of its last change)} of home/graded/<name>/*.ipynb, opened without following any link
    (each folder and file opened O_NOFOLLOW, relative to the one above it: no race either)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW
    fds = [os.open(home, flags | os.O_DIRECTORY)]
    try:
        for part in (grading.GRADED_FOLDER, name):
            fds.append(os.open(part, flags | os.O_DIRECTORY, dir_fd=fds[-1]))
        owner = os.fstat(fds[0]).st_uid
        found = {}
        for entry in os.listdir(fds[-1]):
            if not entry.endswith(".ipynb"):
                continue
            try:
                fd = os.open(entry, flags, dir_fd=fds[-1])
            except OSError:                   # a link (ELOOP) or gone: not a handed-in notebook
                continue
            with os.fdopen(fd, "rb") as f:
                st = os.fstat(f.fileno())
                if st.st_uid == owner and (st.st_mode & 0o170000) == 0o100000:   # a regular file of theirs
                    found[entry] = (f.read(), st.st_mtime)
        return found
    finally:
        for fd in fds:
            os.close(fd)


ROOM_CHECK_NAME = roster.ROOM_CHECK_NAME       # make room-check's test learners: not the room's


def collect(lab: str, homes: Path, course: Path = grading.COURSE_DIR) -> list[Path]:
    """Copy each learner's ~/graded/labNN/*.ipynb (handed out by the hub) into
    submitted/<learner>/labNN/, where autograde reads it, readable by the instructor only.
    make room-check's test learners are left out (they ran lab 1 before the room arrived)."""
    name, course, homes = grading.assignment_name(lab), course.resolve(), homes.resolve()
    copied = []
    checks = sorted(p.name for p in homes.iterdir() if ROOM_CHECK_NAME.match(p.name))
    if checks:
        print(f"left out {len(checks)} room-check test learners ({', '.join(checks[:3])}"
              f"{', ...' if len(checks) > 3 else ''}): make room-check made them, not the room")
    lab_due, extended = due.due_dates(name, course)
    kept = []
    with private_files():
        for home in sorted(p for p in homes.iterdir() if p.is_dir() and not p.is_symlink()
                           and not ROOM_CHECK_NAME.match(p.name)):
            try:
                notebooks = _read_handed_in(home, name)
            except PermissionError:
                raise grading.GradingError(f"cannot read {home}: the learners' homes are theirs only; "
                                           "run it as root: sudo make collect LAB=" + name[3:]) from None
            except OSError:                   # no ~/graded/labNN, or a link in its place
                continue
            dest = course / "submitted" / home.name / name
            if notebooks and due.keeps_on_time(dest, max(changed for _, changed in notebooks.values()),
                                               extended.get(home.name, lab_due)):
                kept.append(home.name)        # the lab closed for them: the on-time copy stays
                continue
            for file_name, (data, _) in notebooks.items():
                dest.mkdir(parents=True, exist_ok=True)
                (dest / file_name).write_bytes(data)
                copied.append(dest / file_name)
            if notebooks:                     # when the learner last changed it: nbgrader's lateness (due.py)
                due.write_timestamp(course / "submitted" / home.name / name,
                                    max(changed for _, changed in notebooks.values()))
    for learner in kept:
        print(f"CLOSED {learner}: {name} changed after their due date; the copy collected before it is kept")
    if not copied and not kept:
        raise grading.GradingError(f"no ~/{grading.GRADED_FOLDER}/{name}/*.ipynb in any home under {homes}: "
                                   f"was the hub started with WORKSHOP_GRADED={course}?")
    private(course)
    print(f"collected {len(copied)} notebooks into {course / 'submitted'} (readable by you only)")
    due.say_late(name, course)
    return copied


# ------------------------------------------------------------------ autograde

def _grade_ids(nb) -> set:
    return {c.metadata["nbgrader"]["grade_id"] for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id")}


def _problem(folder: Path, released: Path, ids: set) -> str | None:
    """Why this learner's folder cannot be graded, with what to do; None when it can."""
    submitted = folder / released.name
    if not submitted.exists():
        there = ", ".join(p.name for p in folder.glob("*.ipynb")) or "nothing"
        return (f"no {released.name} in {folder} (found {there}): the file must keep the released name; "
                "rename it there and run make autograde again")
    try:
        nb = nbformat.read(submitted, as_version=4)
    except Exception as exc:                  # not JSON, not a notebook: nbformat says which
        return (f"{submitted} is not a notebook ({type(exc).__name__}: {str(exc)[:120]}): ask the learner "
                f"to save it again in JupyterLab, or hand them a fresh copy of {released}")
    missing = ids - _grade_ids(nb)
    if missing:
        return (f"{submitted} is not a copy of the release (no graded cells {sorted(missing)[:3]}): most likely "
                f"labs/student/{released.name}, the self-paced copy. Ask the learner to paste their answers "
                f"into {released} and hand that in")
    return None


def autograde(lab: str, course: Path = grading.COURSE_DIR, parallel: int | None = None) -> tuple[Path, dict]:
    """Grade every learner of one lab, each on their own (``parallel`` judges at a time: default one per
    core), then export grades.csv.  Returns (grades.csv, {learner: why they were not graded}); one broken
    submission stops nobody else."""
    name, course = grading.assignment_name(lab), course.resolve()
    released = sorted((course / "release" / name).glob("*.ipynb"))
    if not released:
        raise grading.GradingError(f"no release for {name} in {course}: run make nbgrader LAB={name[3:]} first")
    ids = _grade_ids(nbformat.read(released[0], as_version=4))
    folders = sorted(p for p in (course / "submitted").glob(f"*/{name}") if p.is_dir())
    if not folders:
        raise grading.GradingError(f"no submissions: put each learner's notebook in {course}/submitted/<learner>/"
                                   f"{name}/ (make collect LAB={name[3:]} does it from the hub's homes)")
    broken = {}
    for folder in folders:
        learner = folder.parent.name
        broken[learner] = _problem(folder, released[0], ids)
        if broken[learner] is None:
            try:
                _nbgrader(course, "autograde", name, "--student", learner, "--force", *grading.NO_EXECUTION)
                _only_the_notebook(course / "autograded" / learner / name, released[0].name)
            except grading.GradingError as exc:
                broken[learner] = f"nbgrader could not grade it: {str(exc).strip().splitlines()[-1][:300]}"
    broken = {k: v for k, v in broken.items() if v}
    # nbgrader only filed the notebooks (it runs none of their code): the grade recorded is the one a
    # judge the submission never reaches gives, and each learner's report is their notebook run in a
    # sandbox (regrade.py, sandbox.py), for every learner graded, in parallel.
    from .regrade import record
    try:
        record(name, course, grading.COURSE_ID, students={f.parent.name for f in folders} - set(broken),
               parallel=parallel)
    except sandbox.SandboxError as exc:
        raise grading.GradingError(str(exc)) from None
    # A copy changed after its learner's due date scores 0: nbgrader's late penalty, from the recorded score.
    for learner, points in due.penalise(name, course, {f.parent.name for f in folders} - set(broken)).items():
        print(f"LATE {learner}: {name} handed in after their due date: {points:g} points taken "
              f"(nbgrader's late penalty '{due.PENALTY}'; make extend LAB={name[3:]} LEARNER={learner} AT=... "
              "then make autograde again accepts it)")
    grades = course / "grades.csv"
    _nbgrader(course, "export", "--to", str(grades))       # from the gradebook alone
    private(course)
    print(f"graded {len(folders) - len(broken)} of {len(folders)} learners: {grades} (readable by you only)")
    for learner, why in broken.items():
        print(printable(f"NOT GRADED {learner}: {why}"))
    return grades, broken


def _only_the_notebook(folder: Path, notebook: str) -> None:
    """Remove from a learner's autograded folder everything but their notebook (generate_feedback copies
    every other file there into the feedback it hands back, following links)."""
    if not folder.is_dir() or folder.is_symlink():
        return
    import shutil
    for entry in folder.iterdir():
        if entry.name == notebook and entry.is_file() and not entry.is_symlink():
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


# ------------------------------------------------------------------ feedback

REPORT_MAX_BYTES = 64 << 20


def _report_of(path: Path) -> bytes | None:
    """nbgrader's report of the learner's notebook, and nothing else: opened without following a link,
    only a plain file (a learner's run must not turn it into a path to the solutions)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if (os.fstat(f.fileno()).st_mode & 0o170000) != 0o100000:
            return None
        data = f.read(REPORT_MAX_BYTES + 1)
    return data if len(data) <= REPORT_MAX_BYTES else None


def feedback(lab: str, course: Path = grading.COURSE_DIR, homes: Path | None = None) -> dict[str, list[Path]]:
    """nbgrader generate_feedback for every graded learner, then each one's report into
    homes/<learner>/graded/labNN/feedback/ (nothing handed back without homes)."""
    name, course = grading.assignment_name(lab), course.resolve()
    if not (course / "autograded").is_dir():
        raise grading.GradingError(f"nothing graded in {course}: run make autograde LAB={name[3:]} first")
    released = sorted((course / "release" / name).glob("*.ipynb"))
    if not released:
        raise grading.GradingError(f"no release for {name} in {course}: run make nbgrader LAB={name[3:]} first")
    for folder in (course / "autograded").glob(f"*/{name}"):
        _only_the_notebook(folder, released[0].name)
    _nbgrader(course, "generate_feedback", name, "--force")
    private(course)
    given: dict[str, list[Path]] = {}
    report_name = Path(released[0].name).with_suffix(".html").name
    for folder in sorted((course / "feedback").glob(f"*/{name}")):
        learner = folder.parent.name
        data = _report_of(folder / report_name)
        if homes is None or data is None:     # a room on Kubernetes: workshop/hub_exchange.py hands it back
            continue
        home = homes / learner
        if not home.is_dir() or home.is_symlink():
            print(printable(f"feedback for {learner}: {folder / report_name} (no home under {homes}: hand it "
                            "over yourself)"))
            continue
        path = write_as_learner(data, home, f"{grading.GRADED_FOLDER}/{name}/feedback", report_name)
        given.setdefault(learner, []).append(path)
    if homes is not None:
        print(f"feedback handed back to {len(given)} learners, in ~/{grading.GRADED_FOLDER}/{name}/feedback/")
    return given


# ------------------------------------------------------------------ rehearse

def _answer_cells(released: Path, answers: dict) -> nbformat.NotebookNode:
    nb = nbformat.read(released, as_version=4)
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
        for ex_id, text in answers.items():
            if grade_id == f"{ex_id}-answer".replace(".", "-"):
                cell.source = text
    return nb


def _known_wrongs(released: Path, lab: int) -> list[tuple[str, str, Path]]:
    """[(exercise id, the answer cell, the file)] for every labs/wrong answer of the lab whose exercise
    has a check cell in the release, its SUBMISSION renamed to the name that cell checks."""
    text_of = "\n".join(c.source for c in nbformat.read(released, as_version=4).cells)
    found = []
    for path in sorted((generate.ROOT / "labs" / "wrong").glob(f"lab{lab}_*.py")):
        text = path.read_text()
        ex_id = re.search(r'^EXERCISE = "([^"]+)"', text, re.M).group(1)
        m = re.search(rf"""["']{re.escape(ex_id)}["']\s*,\s*(\w+)""", text_of)     # check('<id>', <name>, ...)
        if m:
            found.append((ex_id, re.sub(r"\bSUBMISSION\b", m.group(1), text), path))
    if not found:
        raise grading.GradingError(f"no labs/wrong/lab{lab}_*.py matches a check cell of {released.name}: add one "
                                   "(labs/README.md, 'A known-wrong answer')")
    return found


def _wrong_learner(path: Path) -> str:
    """The rehearsal learner who hands in one known-wrong answer: rehearsal-wrong-<its file's mistake>."""
    return f"{WRONG}-{path.stem.split('_', 1)[1].replace('_', '-')}"


def _scores(course: Path, name: str, learners: list[str]) -> tuple[dict, float]:
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", course_id=grading.COURSE_ID) as gb:
        return ({s: gb.find_submission(name, s).score for s in learners}, gb.find_assignment(name).max_score)


def rehearse(labs: list[str], course: Path = REHEARSAL_DIR) -> list[str]:
    """Per lab: release, submit the solutions, and each known-wrong answer (labs/wrong) as its own
    learner with the solutions for every other exercise, autograde, compare.  Returns the problems
    (empty: every lab scores the right full marks and every wrong one less)."""
    course, problems = course.resolve(), []
    for lab in labs:
        name = grading.assignment_name(lab)
        released = grading.release(lab, course)
        _, solutions = generate.build(grading.source_for(lab))
        wrongs = {_wrong_learner(path): (ex_id, wrong, path) for ex_id, wrong, path in _known_wrongs(released, int(lab))}
        for old in (course / "submitted").glob(f"*/{name}"):        # only this rehearsal's learners
            shutil.rmtree(old)
        with private_files():
            submissions = [(RIGHT, solutions)] + [(who, {**solutions, ex_id: wrong})
                                                  for who, (ex_id, wrong, _) in wrongs.items()]
            for learner, answers in submissions:
                folder = course / "submitted" / learner / name
                folder.mkdir(parents=True, exist_ok=True)
                nbformat.write(_answer_cells(released, answers), folder / released.name)
        _, broken = autograde(lab, course)
        if broken:
            problems += [f"{name}: {who} was not graded: {why}" for who, why in broken.items()]
            continue
        scores, top = _scores(course, name, [RIGHT, *wrongs])
        if scores[RIGHT] != top:
            problems.append(f"{name}: right {scores[RIGHT]:g}/{top:g}: the solutions lose points; "
                            f"open {course}/autograded/{RIGHT}/{name}/")
        for who, (ex_id, _, path) in wrongs.items():
            line = (f"{name}: right {scores[RIGHT]:g}/{top:g}, wrong {scores[who]:g}/{top:g} "
                    f"({ex_id}, labs/wrong/{path.name})")
            print("REHEARSAL " + line)
            if scores[who] >= top:
                problems.append(f"{line}: the known-wrong answer gets full marks; its check does not catch it")
        print(f"REHEARSAL {name}: {len(wrongs)} known-wrong answers tried")
    return problems


def _platform(args) -> int:
    """make roster, make due, make extend, make export: who is who, when a lab closes (for whom), the grades
    for Moodle."""
    from . import export
    course = args.course or grading.COURSE_DIR
    homes = args.homes.resolve() if args.homes and args.homes.is_dir() else None   # no hub's homes: no notice
    try:
        if args.action == "roster":
            if args.file is None:
                raise roster.RosterError("usage: make roster FILE=people.csv (columns user,name,email)")
            roster.keep(args.file, course.resolve())
        elif args.action == "due":
            if args.lab is None or not args.at:
                raise due.DueDateError('usage: make due LAB=02 AT="2026-12-06 17:00"')
            due.set_due(args.lab, args.at, course, homes)
        elif args.action == "extend":
            if args.lab is None or not args.at or not args.learner:
                raise due.DueDateError('usage: make extend LAB=02 LEARNER=ada AT="2026-12-07 17:00"')
            due.extend(args.lab, args.learner, args.at, course, homes)
        else:
            export.export(course)
    except (grading.GradingError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def main(argv=None) -> int:
    from ..editions.cli_words import CourseParser, add_language_option, parse_in_language   # --help in the reader's language
    parser = CourseParser(prog="python -m allocator_ref.labs.gradebook", description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=["collect", "autograde", "feedback", "rehearse", "private",
                                           "roster", "due", "extend", "export"])
    parser.add_argument("lab", nargs="?", help="the lab number, e.g. 02 (rehearse: every lab when left out)")
    parser.add_argument("--course", type=Path, help="the nbgrader course folder (default build/nbgrader; "
                                                    "rehearse: build/rehearsal)")
    parser.add_argument("--homes", type=Path, help="the hub's homes folder (WORKSHOP_HOMES)")
    parser.add_argument("--file", type=Path, help="roster: the CSV of user,name,email (roster.py)")
    parser.add_argument("--at", help="due, extend: the due date, e.g. '2026-12-06 17:00' (due.py)")
    parser.add_argument("--learner", help="extend: the learner's user name")
    add_language_option(parser)
    args = parse_in_language(parser, argv)
    if args.action in ("roster", "due", "extend", "export"):
        return _platform(args)
    if args.action == "private":              # make nbgrader runs it after each release
        course = (args.course or grading.COURSE_DIR).resolve()
        if course.is_dir():
            private(course)
        return 0
    if args.lab is None and args.action != "rehearse":
        print(f"usage: make {args.action} LAB=02", file=sys.stderr)
        return 2
    try:
        if args.action == "collect":
            if args.homes is None:
                raise grading.GradingError("collect needs --homes, the hub's WORKSHOP_HOMES folder")
            collect(args.lab, args.homes, args.course or grading.COURSE_DIR)
        elif args.action == "autograde":
            _, broken = autograde(args.lab, args.course or grading.COURSE_DIR)
            if broken:
                print(f"{len(broken)} not graded (above, each with what to do); the others are in grades.csv",
                      file=sys.stderr)
                return 1
        elif args.action == "feedback":        # homes absolute: each report is written from / as its learner
            feedback(args.lab, args.course or grading.COURSE_DIR, args.homes.resolve() if args.homes else None)
        else:
            labs = [args.lab] if args.lab else [p.stem[3:5] for p in generate.sources()]
            problems = rehearse(labs, args.course or REHEARSAL_DIR)
            for line in problems:
                print(f"REHEARSAL PROBLEM {line}", file=sys.stderr)
            print(json.dumps({"labs": len(labs), "problems": len(problems)}))
            return 1 if problems else 0
    except (grading.GradingError, ValueError, PermissionError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
