"""A real JupyterHub for a room, started here: three learners and their instructor.

Starts `jupyterhub -f workshop/jupyterhub_config.py` on 127.0.0.1 (the real hub,
the npm configurable-http-proxy, the shared-password authenticator, one local
server per learner), then, through the hub's public URLs only:

* three learners log in with the room's password (a wrong one is refused);
* each one's server is started with the REST API (POST /hub/api/users/NAME/server);
* chapter 0 and lab 1's student copy run top to bottom in a kernel of that
  learner's own server (workshop/room_check.py drives the kernel websocket);
* each learner imports allocator_ref from *their own* copy of the course, is on
  the simulated device, and gets the hidden-case seed of *their* user name (the
  seed the lab checker gives that user anywhere, allocator_ref/labs/check.py
  resolve_seed); the three seeds differ;
* a learner's edit survives a server restart and a re-pull that brings in a new
  instructor commit (nbgitpuller's merge), and no other learner sees that edit;
* the instructor is admin (lists every learner; a learner cannot);
* stopping the hub leaves no process it started (hub, proxy, servers, kernels).
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WORKSHOP = ROOT / "workshop"
PROXY = WORKSHOP / "node_modules" / ".bin" / "configurable-http-proxy"
PASSWORD, ADMIN_PASSWORD = "room-password", "instructor-password-of-32-chars!"
LEARNERS = ("ada", "grace", "linus")

pytestmark = pytest.mark.slow

sys.path.insert(0, str(WORKSHOP))
room = pytest.importorskip("room_check", reason="workshop/room_check.py needs requests + websocket-client")
pytest.importorskip("jupyterhub", reason="pip install '.[workshop]' (make test installs it)")
pytest.importorskip("nbgitpuller", reason="pip install '.[workshop]' (make test installs it)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _git(*args, cwd):
    subprocess.run(["git", "-c", "user.name=instructor", "-c", "user.email=i@example.org", *args],
                   cwd=cwd, check=True, capture_output=True)


def _publish(tmp: Path) -> Path:
    """The course as the instructor publishes it: this checkout's HEAD as branch main of a bare
    repository (from `git archive`, so a shallow or detached CI checkout works too)."""
    src, course = tmp / "course-src", tmp / "course.git"
    src.mkdir()
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive.stdout, check=True)
    _git("init", "-q", "-b", "main", cwd=src)
    _git("add", "-A", cwd=src)
    _git("commit", "-q", "-m", "the course", cwd=src)
    _git("clone", "-q", "--bare", str(src), str(course), cwd=tmp)
    return course


def _seed_of(user: str) -> int:
    """The seed the lab checker gives `user` outside any hub (what each learner must get)."""
    env = {**os.environ, "USER": user, "LOGNAME": user, "ALLOCATOR_REF_LAB_SEED": "",
           "ALLOCATOR_REF_SETTINGS": str(WORKSHOP / "course-settings.toml"), "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", "from allocator_ref.labs.check import resolve_seed;"
                          "print(resolve_seed())"], env=env, capture_output=True, text=True, check=True)
    return int(out.stdout)


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    if not PROXY.exists():
        pytest.skip(f"{PROXY} missing: npm ci --prefix workshop (make test does it when npm exists)")
    if shutil.which("git") is None:
        pytest.skip("git is needed for the learners' pull")
    tmp = tmp_path_factory.mktemp("hub")
    # The course as the instructor publishes it: this checkout's HEAD, in a bare repository.
    course = _publish(tmp)
    port = _free_port()
    env = {**os.environ, "WORKSHOP_REPO": str(course), "WORKSHOP_BRANCH": "main",
           "WORKSHOP_STATE": str(tmp / "state"), "WORKSHOP_PASSWORD": PASSWORD,
           "WORKSHOP_ADMIN_PASSWORD": ADMIN_PASSWORD, "PYTHONPATH": str(ROOT)}
    log = open(tmp / "hub.log", "w")
    proc = subprocess.Popen([str(Path(sys.executable).parent / "jupyterhub"), "-f",
                             str(WORKSHOP / "jupyterhub_config.py"), "--ip", "127.0.0.1",
                             "--port", str(port)], cwd=tmp, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    import psutil
    import requests
    started: set[int] = set()                  # every process the hub started, seen while running

    def watch():
        try:
            started.update(p.pid for p in psutil.Process(proc.pid).children(recursive=True))
        except psutil.NoSuchProcess:
            pass

    deadline = time.monotonic() + 90
    while True:
        try:
            if requests.get(f"{url}/hub/api", timeout=5).ok:
                break
        except requests.ConnectionError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            log.flush()
            pytest.fail("the hub did not start:\n" + (tmp / "hub.log").read_text()[-3000:])
        time.sleep(0.5)
    info = {"url": url, "proc": proc, "tmp": tmp, "course": course, "watch": watch,
            "started": started, "homes": tmp / "state" / "homes"}
    try:
        yield info
    finally:
        watch()
        proc.send_signal(signal.SIGTERM)       # the hub stops the servers and the proxy it started
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        time.sleep(1)
        left = [p for p in started if psutil.pid_exists(p)
                and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        for pid in left:                       # never leave them behind, even when failing
            os.kill(pid, signal.SIGKILL)
        log.close()
        info["left_running"] = left


@pytest.fixture(scope="module")
def learners(hub):
    out = []
    for name in LEARNERS:
        learner = room.log_in(hub["url"], name, PASSWORD)
        room.start_server(learner)
        out.append(learner)
    hub["watch"]()
    return out


def test_a_wrong_password_is_refused(hub):
    with pytest.raises(room.RoomError, match="could not log in"):
        room.log_in(hub["url"], "mallory", "not-the-room-password")


def test_each_learner_runs_chapter_0_and_a_lab_in_their_own_server(hub, learners):
    for learner in learners:
        chapter = room.run_notebook(learner, room.CHAPTER_0)
        said = "".join(r["stdout"] for r in chapter)
        # the simulated device, chosen by the room's settings file (workshop/course-settings.toml)
        assert "using SimDevice" in said and "course-settings.toml" in said, said[:500]
        lab = room.run_notebook(learner, room.LAB_1)
        # the student copy's checks run (and report the unwritten exercises) without raising
        assert "not written yet" in "".join(r["stdout"] for r in lab), learner.name
        hub["watch"]()


def test_each_learner_has_their_own_copy_device_and_seed(hub, learners):
    seen = {}
    for learner in learners:
        got = room.probe(learner)
        own_copy = hub["homes"] / learner.name / "allocator-course"
        assert Path(got["package"]).resolve().is_relative_to(own_copy.resolve()), got
        assert (own_copy / ".git").is_dir()
        assert got["device"] == "sim"
        assert got["seed"] == _seed_of(learner.name), learner.name
        seen[learner.name] = got["seed"]
    assert len(set(seen.values())) == len(LEARNERS), seen


def test_edits_survive_a_re_pull_and_stay_private(hub, learners):
    ada, grace = learners[0], learners[1]
    path = f"/contents/{room.LAB_1}"
    # ada answers in her lab notebook and saves it, as JupyterLab does
    lab = ada.server("GET", path).json()["content"]
    lab["cells"].append({"cell_type": "markdown", "metadata": {}, "source": "ada was here"})
    r = ada.server("PUT", path, json={"type": "notebook", "content": lab})
    assert r.status_code == 200, r.text

    def saved(learner):
        return [c["source"] for c in learner.server("GET", path).json()["content"]["cells"]]
    # the instructor publishes a new file mid-workshop
    work = hub["tmp"] / "instructor"
    _git("clone", "-q", str(hub["course"]), str(work), cwd=hub["tmp"])
    (work / "ERRATA.md").write_text("chapter 2: read 'best fit' for 'first fit'\n")
    _git("add", "ERRATA.md", cwd=work)
    _git("commit", "-q", "-m", "errata", cwd=work)
    _git("push", "-q", "origin", "main", cwd=work)
    room.stop_server(ada)
    room.start_server(ada)                   # the pull runs again before the server starts
    hub["watch"]()
    assert "ada was here" in saved(ada)
    errata = ada.server("GET", "/contents/allocator-course/ERRATA.md?type=file&format=text")
    assert errata.status_code == 200 and "best fit" in errata.json()["content"]
    assert "ada was here" not in saved(grace)


def test_the_instructor_is_admin_and_learners_are_not(hub, learners):
    instructor = room.log_in(hub["url"], "instructor", ADMIN_PASSWORD)
    names = {u["name"] for u in instructor.api("GET", "/users").json()}
    assert set(LEARNERS) <= names
    assert instructor.api("GET", "/users/instructor").json()["admin"] is True
    r = learners[0].api("GET", "/users")
    assert r.status_code == 403 or {u["name"] for u in r.json()} == {learners[0].name}
    with pytest.raises(room.RoomError):
        room.log_in(hub["url"], "instructor", PASSWORD)     # the learners' password is not enough


def test_stopping_the_hub_stops_everything_it_started(hub, learners):
    hub["watch"]()
    assert len(hub["started"]) >= 1 + len(LEARNERS)       # the proxy and a server per learner
    proc = hub["proc"]
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    import psutil
    time.sleep(1)
    alive = [p for p in hub["started"] if psutil.pid_exists(p)
             and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert not alive, [psutil.Process(p).cmdline() for p in alive]


@pytest.mark.parametrize("missing, short", [("WORKSHOP_PASSWORD", "x"), ("WORKSHOP_ADMIN_PASSWORD", "too-short")])
def test_the_hub_refuses_to_start_without_proper_passwords(tmp_path, missing, short):
    if not PROXY.exists():
        pytest.skip(f"{PROXY} missing: npm ci --prefix workshop")
    env = {**os.environ, "WORKSHOP_STATE": str(tmp_path), "WORKSHOP_PASSWORD": PASSWORD,
           "WORKSHOP_ADMIN_PASSWORD": ADMIN_PASSWORD, missing: short}
    out = subprocess.run([str(Path(sys.executable).parent / "jupyterhub"), "-f",
                          str(WORKSHOP / "jupyterhub_config.py"), "--ip", "127.0.0.1",
                          "--port", str(_free_port())], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert f"set {missing} to at least" in out.stdout + out.stderr
    assert not (tmp_path / "jupyterhub.sqlite").exists()     # refused before creating anything
