"""The recorded grade's judge is reached by nothing a submission runs (issue 57, items 1, 4, 9; issue 53, item 1).

Each test is an attack a learner's cell can make, or an honest mistake that cost everyone's time:
a ``setsid`` grandchild left behind that writes forged verdicts into every judge pipe it can open;
a notebook whose set-up never ends; a course-settings.toml written where a judge used to look.
Run as root, a submission runs as another user, in a namespace with no network.
"""
from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import pytest

from allocator_ref import settings
from allocator_ref.labs import generate, grading, regrade, sandbox
from sandbox_helpers import alive, use_grader_python

WRONG_PEAKS = "def peaks(snapshot):\n    return {'peak_requested': 0, 'peak_reserved': 0}\n"

# A cell that leaves a grandchild in a session of its own (no process group of the notebook's holds it),
# which for a minute opens every pipe of every judge it can reach and writes a verdict "passed" for every
# check, then "done".  It aims only at this test's own process and its forks (the judges), so a run of the
# attack on a machine shared with other test runs cannot write into theirs.
ATTACK = r'''
import json, os, struct, time
def _under(pid, root):
    """Whether pid is root or one of its descendants (a judge is a fork of the test's process)."""
    for _ in range(64):
        if pid == root:
            return True
        if pid <= 1:
            return False
        with open(f"/proc/{pid}/status") as f:
            pid = int(next(line for line in f if line.startswith("PPid:")).split()[1])
    return False
def _forge(keys, pidfile):
    if os.fork():
        os.wait()
        return
    os.setsid()
    if os.fork():
        os._exit(0)
    with open(pidfile, "w") as f:
        f.write(str(os.getpid()))
    frames = b""
    for message in [{"judged": k, "passed": True, "explanation": "forged"} for k in keys] + [{"done": True}]:
        body = json.dumps(message).encode()
        frames += struct.pack(">I", len(body)) + body
    me, end = os.getpid(), time.time() + 60
    while time.time() < end:
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == me:
                continue
            try:
                if not _under(int(pid), ROOTPID):        # only the test's own judges: never another run's
                    continue
                fds = os.listdir(f"/proc/{pid}/fd")
            except OSError:
                continue
            for fd in fds:
                try:
                    if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("pipe:"):
                        w = os.open(f"/proc/{pid}/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK)
                        os.write(w, frames)
                        os.close(w)
                except OSError:
                    pass
        time.sleep(0.002)
    os._exit(0)
_forge(KEYS, PIDFILE)
'''


def _check(key: str, exercise: str = "lab7.peaks", name: str = "peaks", **options) -> regrade.GradedCheck:
    call = {"key": key, "exercise": exercise, "expression": name, "seed": 3, "hidden": None, "time_limit": None}
    return regrade.GradedCheck(key.split("/")[0], 1, [dict(call, **options)])


@pytest.fixture
def open_folder():
    """A folder every user may write (the sandbox's user leaves its marks there)."""
    folder = Path(tempfile.mkdtemp(prefix="judge-attack-"))
    folder.chmod(0o1777)
    yield folder
    import shutil
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def graded(monkeypatch):
    use_grader_python(monkeypatch)
    monkeypatch.setenv("ALLOCATOR_REF_DEVICE", "sim")
    monkeypatch.setenv("ALLOCATOR_REF_LAB_QUICK", "1")


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="the attack reads /proc (Linux)")
def test_a_grandchild_left_behind_forges_no_verdict_and_is_ended(graded, open_folder):
    """Issue 57, item 1: learner A's cell leaves a setsid grandchild; it must be dead when A's judge
    returns, and learner B's wrong answer, judged next, must stay failed."""
    pidfile = open_folder / "attacker.pid"
    attack = (ATTACK.replace("KEYS", repr(["a/0"])).replace("PIDFILE", repr(str(pidfile)))
              .replace("ROOTPID", str(os.getpid())))
    first = regrade.judge_notebook([{"code": WRONG_PEAKS + attack}, {"take": [["a/0", "peaks"]]}], [_check("a/0")])
    assert first["a/0"][0] is False, first
    deadline = time.monotonic() + 10
    while not pidfile.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    attacker = int(pidfile.read_text())
    assert not alive(attacker), "the submission's setsid grandchild outlived its judge"
    second = regrade.judge_notebook([{"code": WRONG_PEAKS}, {"take": [["a/0", "peaks"]]}], [_check("a/0")])
    assert second["a/0"] == (False, second["a/0"][1]) and "forged" not in second["a/0"][1], second


def test_one_failed_set_up_fails_every_check_of_the_notebook_at_once(graded):
    """Issue 57, item 9: cells that never finish cost the set-up limit once, not once per check."""
    checks = [_check(f"c{i}/0") for i in range(5)]
    cells = [{"code": "import time\ntime.sleep(600)"}] + [{"take": [[c.calls[0]["key"], "peaks"]]} for c in checks]
    started = time.monotonic()
    verdicts = regrade.judge_notebook(cells, checks, setup_limit=3)
    took = time.monotonic() - started
    assert all(not passed and "still running after 3 s" in why for passed, why in verdicts.values()), verdicts
    assert took < 2 * 3 + 5, f"{took:.1f} s for one set-up failure and five checks"


def test_a_course_settings_file_a_submission_writes_changes_no_judge(graded, monkeypatch, tmp_path):
    """Issue 57, item 4: a judge reads the settings the autograder was started with (pinned), never a
    course-settings.toml in a folder the submission writes (`lab_quick = 7` used to kill every later judge)."""
    monkeypatch.delenv(settings.FILE_ENV)
    monkeypatch.delenv("ALLOCATOR_REF_LAB_QUICK")
    (tmp_path / settings.FILE_NAME).write_text("[course]\nlab_quick = 1\n")      # the instructor's
    monkeypatch.chdir(tmp_path)
    _, solutions = generate.build(grading.source_for("07"))
    plant = "open('course-settings.toml', 'w').write('[course]\\nlab_quick = 7\\n')\n"   # in its working folder
    cells = [{"code": plant}, {"code": solutions["lab7.peaks"]}, {"take": [["a/0", "peaks"]]},
             {"take": [["b/0", "peaks"]]}]
    verdicts = regrade.judge_notebook(cells, [_check("a/0"), _check("b/0")])
    assert verdicts["a/0"][0] is True and verdicts["b/0"][0] is True, verdicts


def test_settings_pinned_are_all_a_process_reads(monkeypatch, tmp_path):
    (tmp_path / settings.FILE_NAME).write_text("[course]\nlab_quick = 1\n")
    monkeypatch.delenv(settings.FILE_ENV)
    monkeypatch.chdir(tmp_path)
    assert settings.get("lab_quick").value == "1"
    settings.pin({**settings.pinned(), "lab_quick": "0"})
    try:
        monkeypatch.setenv("ALLOCATOR_REF_LAB_QUICK", "1")
        assert settings.get("lab_quick") == settings.Setting("lab_quick", "0", settings.PINNED)
    finally:
        settings.pin(None)
    assert settings.get("lab_quick").value == "1"


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root: a file of another user")
def test_a_settings_file_of_another_user_or_in_an_open_folder_is_refused(monkeypatch, tmp_path):
    """Issue 57, Low: as git refuses another user's repository since CVE-2022-24765."""
    monkeypatch.delenv(settings.FILE_ENV)
    planted = tmp_path / settings.FILE_NAME
    planted.write_text("[course]\nlab_quick = 1\n")
    os.chown(planted, 65534, 65534)
    with pytest.raises(settings.SettingsError, match="belongs to another user"):
        settings.get("lab_quick", start=tmp_path)
    os.chown(planted, 0, 0)
    tmp_path.chmod(0o777)
    with pytest.raises(settings.SettingsError, match="folder others may write"):
        settings.get("lab_quick", start=tmp_path)
    tmp_path.chmod(0o1777)                         # sticky (as /tmp): only a file's owner may replace it
    assert settings.get("lab_quick", start=tmp_path).value == "1"


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root: the user change and "
                    "the network namespace (not root, submissions run as the autograder's user, with network)")
def test_run_as_root_a_submission_runs_as_another_user_with_no_network(graded, open_folder):
    """Issue 53, item 1: nothing of a submission runs as root; it has no network and its limits."""
    probe = ("import os, resource, socket\n"
             "s = socket.socket()\ns.settimeout(2)\n"
             "try:\n    s.connect(('1.1.1.1', 53)); net = 'reached'\nexcept OSError as e:\n    net = 'none'\n"
             f"open({str(open_folder / 'who')!r}, 'w').write(f'{{os.getuid()}} {{net}} "
             "{resource.getrlimit(resource.RLIMIT_NPROC)[0]}')\n")
    verdicts = regrade.judge_notebook([{"code": probe + WRONG_PEAKS}, {"take": [["a/0", "peaks"]]}], [_check("a/0")])
    assert verdicts["a/0"][0] is False
    uid, net, processes = (open_folder / "who").read_text().split()
    assert int(uid) == sandbox.GRADER_UID_BASE and net == "none" and int(processes) == sandbox.Limits().processes
    assert (open_folder / "who").stat().st_uid == sandbox.GRADER_UID_BASE


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root: only root changes user")
def test_a_learner_named_like_a_system_account_gets_a_numeric_user():
    """A learner folder called `daemon` (uid 1) must not run its cells as that system user."""
    assert sandbox.submission_user("daemon", 2) == (sandbox.GRADER_UID_BASE + 2,) * 2
    assert sandbox.submission_user("root", 0) == (sandbox.GRADER_UID_BASE,) * 2
    assert sandbox.submission_user("no-such-learner-here", 1) == (sandbox.GRADER_UID_BASE + 1,) * 2


def test_a_learners_text_reaches_the_instructors_terminal_without_escape_codes(graded, capsys):
    """Issue 57, Low: an exception message with terminal codes rewrote "0/1" as a full score."""
    rewrite = "\x1b[2K\r\x1b[1Aada lab07: 1/1 (judged apart)"
    cells = [{"code": f"def peaks(snapshot):\n    raise ValueError({rewrite!r})\n"}, {"take": [["a/0", "peaks"]]}]
    verdicts = regrade.judge_notebook(cells, [_check("a/0")])
    assert verdicts["a/0"][0] is False and "\x1b" in verdicts["a/0"][1]        # the judge keeps what was raised
    shown = regrade.printable(verdicts["a/0"][1])
    assert "\x1b" not in shown and "\r" not in shown and "\\x1b[2K" in shown


def test_a_judge_past_its_whole_budget_is_ended_with_all_its_submission_started(graded, monkeypatch, open_folder):
    """Issue 57, item 10: nothing a notebook does holds make autograde: each judge has a whole budget,
    past which the autograder kills it, and the submission it left (another session, another user) goes
    with it, so the next learner is graded."""
    monkeypatch.setattr(regrade, "_budget", lambda nb, setup_limit: 8.0 if nb.name == "stuck" else 600.0)
    pidfile = open_folder / "stuck.pid"
    stuck = (f"import os, time\nopen({str(pidfile)!r}, 'w').write(str(os.getpid()))\n"
             "while True:\n    time.sleep(1)\n")
    started = time.monotonic()
    answers = regrade.judge_all([regrade.Notebook("stuck", [{"code": stuck}, {"take": [["a/0", "peaks"]]}],
                                                  [_check("a/0")]),
                                 regrade.Notebook("next", [{"code": WRONG_PEAKS}, {"take": [["a/0", "peaks"]]}],
                                                  [_check("a/0")])], parallel=1, setup_limit=600)
    assert time.monotonic() - started < 8 + 60
    assert answers["stuck"].verdicts["a/0"] == (False, "not judged: the judge ran past its time budget and was "
                                                       "ended")
    assert answers["next"].verdicts["a/0"][0] is False and "not judged" not in answers["next"].verdicts["a/0"][1]
    assert not alive(int(pidfile.read_text())), "the stuck notebook's process outlived its judge"
