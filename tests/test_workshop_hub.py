"""A real JupyterHub for a room, started here as root: three learners and their instructor.

Starts `jupyterhub -f workshop/jupyterhub_config.py` on 127.0.0.1 over HTTPS (the real hub,
the npm configurable-http-proxy, FirstUseAuthenticator with a Unix account per learner,
LocalProcessSpawner), then, through the hub's public URLs only:

* three learners claim their names; a claimed name, the instructor's name, and an account
  of the machine (root) cannot be used by anyone else;
* each one's server runs as their own Unix user (not root) in a home only they can read;
* chapter 0 and lab 1's student copy run top to bottom in a kernel of that learner's server;
* from inside each learner's kernel: another learner's home cannot be listed, read or
  written, and the hub's cookie secret, database, password file, key and environment
  cannot be read;
* each learner imports allocator_ref from *their own* copy, on the simulated device, with
  the hidden-case seed of *their* user name; the three seeds differ;
* the room shows no `.md` twins and no nbgrader menus;
* a learner's edit survives a re-pull that brings in a new instructor commit;
* the instructor is admin (lists every learner; a learner cannot);
* a graded round trip (hand-out by the hub, make collect, autograde, feedback): from inside a
  learner's kernel, another learner's submission, graded notebook and feedback, the gradebook,
  grades.csv and the solutions cannot be read; their own feedback can; the hub exchange (the
  cluster's path) collects for the instructor's token and gives a learner's token nothing;
* idle servers are culled by jupyterhub-idle-culler, running as a hub service;
* the learners' Python is what `make workshop` finds or makes (workshop/learner_python.py):
  with this machine's Python under /root, a venv of the system Python that `nobody` can run;
* `make workshop-clean` removes the accounts the hub made and nothing else;
* stopping the hub leaves no process it started; the test removes the Unix users it made.
Every listener (the hub's public port, its API, the proxy's API) takes a free port.
"""
from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WORKSHOP = ROOT / "workshop"
PROXY = WORKSHOP / "node_modules" / ".bin" / "configurable-http-proxy"
RUN = secrets.token_hex(2)                     # fresh Unix names each run: never an existing account
LEARNERS = tuple(f"{n}-{RUN}" for n in ("ada", "grace", "linus"))
ADMIN = f"instructor-{RUN}"
ADMIN_PASSWORD = "instructor-password-" + secrets.token_hex(8)
PASSWORDS = {name: f"{name}-own-password" for name in LEARNERS}

pytestmark = pytest.mark.slow

sys.path.insert(0, str(WORKSHOP))
room = pytest.importorskip("room_check", reason="workshop/room_check.py needs requests + websocket-client")
pytest.importorskip("jupyterhub", reason="pip install '.[workshop]' (make test installs it)")
pytest.importorskip("nbgitpuller", reason="pip install '.[workshop]' (make test installs it)")
pytest.importorskip("firstuseauthenticator", reason="pip install '.[workshop]' (make test installs it)")
if os.getuid() != 0:
    pytest.skip("the room makes Unix users and runs servers as them: run as root (CI does)",
                allow_module_level=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _open_to_everyone(path: Path) -> bool:
    path = path.resolve()
    return all(p.stat().st_mode & 0o001 for p in path.parents) and bool(path.stat().st_mode & 0o004)


@pytest.fixture(scope="module")
def config():
    """workshop/ copied where every user can read it (the config refuses a folder the learners
    cannot reach, and a CI checkout may live under /root); the npm proxy is linked, not copied."""
    if not PROXY.exists():
        pytest.skip(f"{PROXY} missing: npm ci --prefix workshop (make test does it when npm exists)")
    base = Path(tempfile.mkdtemp(prefix="workshop-config-"))
    base.chmod(0o755)
    copy = base / "workshop"
    shutil.copytree(WORKSHOP, copy, ignore=shutil.ignore_patterns("node_modules", ".run", "__pycache__"))
    (copy / "node_modules").symlink_to(WORKSHOP / "node_modules")
    for p in [copy, *copy.rglob("*")]:
        if not p.is_symlink():
            p.chmod(p.stat().st_mode | 0o004 | (0o001 if p.is_dir() else 0))
    yield copy / "jupyterhub_config.py"
    shutil.rmtree(base, ignore_errors=True)


def _learner_python(base: Path) -> Path:
    """The Python the learners' servers run, as `sudo make workshop` finds or makes it
    (workshop/learner_python.py: this one when every user can run it, else a venv of the
    machine's Python, here in `base`)."""
    env = {**os.environ, "WORKSHOP_PYTHON_DIR": str(base / "learner-python")}
    env.pop("WORKSHOP_PYTHON", None)
    out = subprocess.run([sys.executable, str(WORKSHOP / "learner_python.py")], env=env,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return Path(out.stdout.strip().splitlines()[-1])


def test_make_workshop_finds_or_makes_a_python_every_learner_can_run(tmp_path):
    """`sudo make workshop` with the course's Python under /root (pyenv: closed to other users):
    workshop/learner_python.py makes a venv of the machine's Python that `nobody` can run with the
    course's packages, and says where; with an open Python it returns that one unchanged."""
    base = Path(tempfile.mkdtemp(prefix="workshop-python-"))
    base.chmod(0o755)
    try:
        python = _learner_python(base)
        assert "learner_python.py" in (ROOT / "Makefile").read_text()        # what make workshop runs
        if _open_to_everyone(Path(sys.executable)):
            assert python == Path(sys.executable)
        else:
            assert python == base / "learner-python" / "bin" / "python" and _open_to_everyone(python)
        out = subprocess.run([str(python), "-c", "import jupyterhub.singleuser, nbgitpuller, nbformat; print('ok')"],
                             user="nobody", group="nogroup", extra_groups=[], cwd="/",
                             env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}, capture_output=True, text=True)
        assert out.stdout.strip() == "ok", out.stderr[-2000:]
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _git(*args, cwd):
    subprocess.run(["git", "-c", "user.name=instructor", "-c", "user.email=i@example.org", *args],
                   cwd=cwd, check=True, capture_output=True)


def _publish(tmp: Path) -> Path:
    """The instructor's checkout: this checkout's HEAD as one commit of branch main (from `git archive`,
    so a shallow or detached CI checkout works too); the graded room's course is published from it."""
    src = tmp / "course-src"
    src.mkdir()
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive.stdout, check=True)
    _git("init", "-q", "-b", "main", cwd=src)
    _git("add", "-A", cwd=src)
    _git("commit", "-q", "-m", "the course", cwd=src)
    return src


def _seed_of(user: str) -> int:
    """The seed the lab checker gives `user` outside any hub (what each learner must get)."""
    env = {**os.environ, "USER": user, "LOGNAME": user, "ALLOCATOR_REF_LAB_SEED": "",
           "ALLOCATOR_REF_SETTINGS": str(WORKSHOP / "course-settings.toml"), "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", "from allocator_ref.labs.check import resolve_seed;"
                          "print(resolve_seed())"], env=env, capture_output=True, text=True, check=True)
    return int(out.stdout)


@pytest.fixture(scope="module")
def hub(tmp_path_factory, config):
    if not PROXY.exists():
        pytest.skip(f"{PROXY} missing: npm ci --prefix workshop (make test does it when npm exists)")
    if shutil.which("git") is None or shutil.which("useradd") is None:
        pytest.skip("git and useradd are needed for the learners' accounts and pull")
    # Not pytest's tmp_path: it is closed to other users, and the learners must reach their
    # homes and the published course.  The hub's own state folder is made 0700 by the config.
    tmp = Path(tempfile.mkdtemp(prefix="workshop-hub-"))
    tmp.chmod(0o755)
    _publish(tmp)
    secret = tmp / "admin-password"
    secret.touch(mode=0o600)
    secret.write_text(ADMIN_PASSWORD + "\n")
    state, homes = tmp / "state", tmp / "homes"
    # Another hub on the machine (an instructor rehearsing) holds JupyterHub's default ports:
    # ours must not need them (its public port, its API and the proxy's API are all free ports).
    squatters = []
    for default in (8000, 8001, 8081):
        sock = socket.socket()
        try:
            sock.bind(("127.0.0.1", default))
            sock.listen()
            squatters.append(sock)
        except OSError:
            sock.close()                        # already taken: by someone else, same effect
    from allocator_ref.labs import grading             # a graded workshop: lab 1's release handed out
    graded = tmp / "nbgrader"
    grading.release("01", graded)
    sys.path.insert(0, str(WORKSHOP))
    import room_copy                                    # as make nbgrader does: the course without solutions,
    course = room_copy.publish(graded, root=tmp / "course-src")     # which the graded room pulls by default
    port = _free_port()
    python = _learner_python(tmp)       # the learners' servers run it; so does `sudo make autograde`
    env = {**os.environ, "WORKSHOP_BRANCH": "main",
           "WORKSHOP_STATE": str(state), "WORKSHOP_HOMES": str(homes), "WORKSHOP_ADMIN": ADMIN,
           "WORKSHOP_ADMIN_PASSWORD_FILE": str(secret), "WORKSHOP_IP": "127.0.0.1",
           "WORKSHOP_PORT": str(port), "WORKSHOP_HOSTNAME": "localhost", "WORKSHOP_GRADED": str(graded),
           "WORKSHOP_PYTHON": str(python), "PYTHONPATH": str(ROOT), "WORKSHOP_LIVE_VIEW": "1"}
    env.pop("WORKSHOP_ADMIN_PASSWORD", None)
    env.pop("WORKSHOP_REPO", None)
    log = open(tmp / "hub.log", "w")
    # Started as a script's background job starts it (`make workshop &`, a CI runner's step): with
    # Ctrl-C ignored, which the hub passes on to the services and the proxy it starts before its
    # own handler (JupyterHub.init_signal); the config must give them Ctrl-C back.
    proc = subprocess.Popen([str(Path(sys.executable).parent / "jupyterhub"), "-f",
                             str(config)], cwd=tmp, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    url = f"https://127.0.0.1:{port}"
    cert = state / "tls" / "hub.crt"
    import psutil
    import requests
    started: set[int] = set()                  # every process the hub started, seen while running

    def watch():
        try:
            started.update(p.pid for p in psutil.Process(proc.pid).children(recursive=True))
        except psutil.NoSuchProcess:
            pass

    def stop():
        watch()
        began = time.monotonic()
        proc.send_signal(signal.SIGINT)        # Ctrl-C: the hub stops the servers and the proxy it started
        try:
            proc.wait(timeout=60)
            print(f"the hub stopped {time.monotonic() - began:.1f} s after Ctrl-C")
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        time.sleep(1)

    deadline = time.monotonic() + 90
    try:
        while True:
            try:
                if cert.exists() and requests.get(f"{url}/hub/api", timeout=5, verify=str(cert)).ok:
                    break
            except requests.ConnectionError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                log.flush()
                pytest.fail("the hub did not start:\n" + (tmp / "hub.log").read_text()[-3000:])
            time.sleep(0.5)
        info = {"url": url, "cert": str(cert), "proc": proc, "tmp": tmp, "course": course, "graded": graded,
                "watch": watch, "started": started, "homes": homes, "state": state, "stop": stop,
                "python": python}
        yield info
    finally:
        stop()
        left = [p for p in started if psutil.pid_exists(p)
                and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        for pid in left:                       # never leave them behind, even when failing
            os.kill(pid, signal.SIGKILL)
        log.close()
        for sock in squatters:
            sock.close()
        kept = tmp_path_factory.getbasetemp() / "hub.log"        # the hub's log, kept for a failure
        shutil.copyfile(tmp / "hub.log", kept)
        print(f"the hub's log: {kept}")
        for account in pwd.getpwall():         # every Unix user the hub made lives under homes/
            if Path(account.pw_dir).is_relative_to(homes):
                shutil.rmtree(Path("/run/workshop-kernels") / str(account.pw_uid), ignore_errors=True)
                subprocess.run(["userdel", "--remove", account.pw_name], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def learners(hub):
    out = []
    for name in LEARNERS:
        learner = room.log_in(hub["url"], name, PASSWORDS[name], verify=hub["cert"])
        room.start_server(learner)
        out.append(learner)
    hub["watch"]()
    return out


def _kernel_says(learner, code: str):
    kernel = room.Kernel(learner, room.CHAPTER_0)
    try:
        result = kernel.run(code)
    finally:
        kernel.close()
    assert result["error"] is None, result
    return json.loads(result["stdout"].strip().splitlines()[-1])


def test_the_hub_speaks_https_only(hub):
    import requests
    with pytest.raises(requests.exceptions.SSLError):         # a self-signed certificate ...
        requests.get(f"{hub['url']}/hub/api", timeout=10)
    assert requests.get(f"{hub['url']}/hub/api", timeout=10, verify=hub["cert"]).ok   # ... this one
    plain = hub["url"].replace("https://", "http://")
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get(f"{plain}/hub/api", timeout=10)


def test_a_name_belongs_to_whoever_claimed_it(hub, learners):
    url, cert = hub["url"], hub["cert"]
    grace = LEARNERS[1]
    with pytest.raises(room.RoomError, match="could not log in"):
        room.log_in(url, grace, PASSWORDS[LEARNERS[0]], verify=cert)       # ada's password, grace's name
    with pytest.raises(room.RoomError, match="could not log in"):
        room.log_in(url, ADMIN, PASSWORDS[grace], verify=cert)             # the instructor's name is taken
    for account in ("root", pwd.getpwuid(os.getuid()).pw_name, "daemon"):  # the machine's own accounts
        with pytest.raises(room.RoomError, match="could not log in"):
            room.log_in(url, account, "any-password-at-all", verify=cert)
    assert room.log_in(url, grace, PASSWORDS[grace], verify=cert).token       # her own password works


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


def test_each_server_runs_as_its_learner_in_a_private_home(hub, learners):
    for learner in learners:
        account = pwd.getpwnam(learner.name)
        got = _kernel_says(learner, "import os, json; print(json.dumps([os.getuid(), os.getgid(), "
                                    "os.environ['HOME'], os.environ['USER']]))")
        assert got == [account.pw_uid, account.pw_gid, account.pw_dir, learner.name]
        # the kernel's channels are Unix sockets in that home, not TCP ports anyone can reach
        wire = _kernel_says(learner, "import json; from ipykernel.connect import get_connection_info; "
                                     "print(json.dumps(json.loads(get_connection_info())))")
        runtime = Path(wire["ip"]).parent
        assert wire["transport"] == "ipc" and runtime == Path("/run/workshop-kernels") / str(account.pw_uid), wire
        assert runtime.stat().st_uid == account.pw_uid and runtime.stat().st_mode & 0o777 == 0o700
        assert account.pw_uid != 0
        home = Path(account.pw_dir)
        assert home.parent == hub["homes"] and home.stat().st_uid == account.pw_uid
        assert home.stat().st_mode & 0o777 == 0o700, oct(home.stat().st_mode)
        assert (home / "allocator-course" / "README.md").stat().st_uid == account.pw_uid
    assert hub["state"].stat().st_mode & 0o777 == 0o700


REACH = """import json, os
def attempt(what, action):
    try:
        action()
        return "allowed"
    except PermissionError:
        return "denied"
def write(path):
    with open(path, "w") as f:
        f.write("x")
other = {other!r}
print(json.dumps({{
    "list the other's home": attempt("", lambda: os.listdir(other)),
    "read the other's course": attempt("", lambda: open(other + "/allocator-course/README.md").read()),
    "write in the other's home": attempt("", lambda: write(other + "/planted.txt")),
    "list the homes folder": attempt("", lambda: os.listdir(os.path.dirname(other))),
    **{{"read the hub's " + name: attempt("", lambda p=path: open(p, "rb").read())
       for name, path in {secrets!r}.items()}},
}}))"""


def test_no_learner_reaches_another_home_or_the_hubs_secrets(hub, learners):
    state = hub["state"]
    hub_secrets = {"cookie secret": str(state / "jupyterhub_cookie_secret"),
                   "database": str(state / "jupyterhub.sqlite"),
                   "TLS key": str(state / "tls" / "hub.key"),
                   "environment": f"/proc/{hub['proc'].pid}/environ"}
    hub_secrets.update({f"password file {p.name}": str(p) for p in state.glob("passwords.dbm*")})
    assert len(hub_secrets) >= 5 and all(Path(p).exists() for p in hub_secrets.values()), hub_secrets
    for i, learner in enumerate(learners):
        other = Path(pwd.getpwnam(LEARNERS[(i + 1) % len(LEARNERS)]).pw_dir)
        got = _kernel_says(learner, REACH.format(other=str(other), secrets=hub_secrets))
        assert set(got.values()) == {"denied"}, (learner.name, got)
        assert not (other / "planted.txt").exists()
    # nor through the hub: a learner's token opens no other learner's server
    r = learners[0].get(f"{hub['url']}/user/{LEARNERS[1]}/api/contents",
                        headers={"Authorization": f"token {learners[0].token}"}, allow_redirects=False)
    assert r.status_code in (302, 403, 404), r.status_code


def test_each_learner_has_their_own_copy_device_and_seed(hub, learners):
    seen = {}
    for learner in learners:
        got = room.probe(learner)
        own_copy = Path(pwd.getpwnam(learner.name).pw_dir) / "allocator-course"
        assert Path(got["package"]).resolve().is_relative_to(own_copy.resolve()), got
        assert (own_copy / ".git").is_dir()
        assert got["device"] == "sim"
        assert got["seed"] == _seed_of(learner.name), learner.name
        seen[learner.name] = got["seed"]
    assert len(set(seen.values())) == len(LEARNERS), seen


def test_a_graded_rooms_learner_copy_has_no_solutions(hub, learners):
    """The graded room pulls WORKSHOP_GRADED/course.git (make nbgrader's, workshop/room_copy.py): from
    inside a learner's kernel, no solution in their copy, its history, or the course folder."""
    got = _kernel_says(learners[1], (
        "import json, os, subprocess\n"
        "copy = os.path.expanduser('~/allocator-course')\n"
        "history = subprocess.run(['git', 'log', '--all', '--format=', '--name-only'], cwd=copy,\n"
        "                         capture_output=True, text=True).stdout.split()\n"
        "try:\n"
        "    from allocator_ref.labs import show_solution; show_solution('lab1.measure'); shown = 'shown'\n"
        "except FileNotFoundError:\n"
        "    shown = 'none'\n"
        "def reads(p):\n"
        "    try:\n"
        "        open(p).read(); return 'read'\n"
        "    except OSError:\n"
        "        return 'refused'\n"
        f"print(json.dumps({{'student': os.path.exists(copy + '/labs/student/lab01_measure_it.ipynb'),\n"
        "  'left out': [n for n in ('labs/solutions.json', 'labs/source', 'labs/wrong', 'tests')\n"
        "               if os.path.exists(copy + '/' + n)],\n"
        "  'in history': [p for p in history if p == 'labs/solutions.json' or p.startswith('labs/source/')],\n"
        f"  'source': reads('{hub['graded']}/source/lab01/lab01_measure_it.ipynb'), 'shown': shown}}))"))
    assert got == {"student": True, "left out": [], "in history": [], "source": "refused", "shown": "none"}


def test_the_room_lists_each_notebook_once_and_hides_nbgrader(hub, learners):
    ada = learners[0]
    listing = ada.server("GET", "/contents/allocator-course/chapters").json()["content"]
    names = {item["name"] for item in listing}
    assert "00_setup_and_tour.ipynb" in names
    assert not [n for n in names if n.endswith(".md")], names            # no jupytext twins
    page = ada.get(f"{hub['url']}/user/{ada.name}/lab", headers={"Authorization": f"token {ada.token}"})
    assert page.ok and '"@jupyter/nbgrader"' in page.text.split('"disabledExtensions"', 1)[1][:200]
    for path in ("formgrader", "assignments", "courses"):                # nbgrader's server parts
        r = ada.get(f"{hub['url']}/user/{ada.name}/{path}", headers={"Authorization": f"token {ada.token}"})
        assert r.status_code == 404, (path, r.status_code)


PRYING = """import json, os
def attempt(path):
    try:
        open(path, "rb").read()
        return "allowed"
    except PermissionError:
        return "denied"
    except FileNotFoundError:
        return "missing"
print(json.dumps({{name: attempt(path) for name, path in {paths!r}.items()}}))"""


def test_a_graded_room_round_trip_keeps_each_learners_work_and_grade_private(hub, learners):
    """The one path from the room to grades and back: the hub put release/lab01 in each learner's
    ~/graded (as that learner); make collect, make autograde and make feedback (as root, the
    instructor) grade everyone and hand each learner their own feedback; then, from inside
    grace's kernel, ada's submission, graded notebook, feedback, the gradebook and grades.csv
    cannot be read, while grace reads her own feedback."""
    from allocator_ref.labs import gradebook
    for learner in learners:
        listing = learner.server("GET", "/contents/graded/lab01").json()["content"]
        assert [item["name"] for item in listing] == ["lab01_measure_it.ipynb"], listing
        copy = Path(pwd.getpwnam(learner.name).pw_dir) / "graded" / "lab01" / "lab01_measure_it.ipynb"
        assert copy.stat().st_uid == pwd.getpwnam(learner.name).pw_uid
    course = hub["graded"]
    assert gradebook.main(["collect", "01", "--homes", str(hub["homes"]), "--course", str(course)]) == 0
    assert {p.parents[1].name for p in (course / "submitted").glob("*/lab01/*.ipynb")} == set(LEARNERS)
    # `sudo make autograde LAB=01`, as the Makefile runs it: its own process (the autograder ends every
    # process it finds under itself when a judge is done, which in this process is the hub), and, as
    # root, ALLOCATOR_REF_GRADER_PYTHON set to learner_python.py's Python: each submission runs as its
    # learner, who cannot run this one (pyenv's, under /root).
    graded = subprocess.run([sys.executable, "-m", "allocator_ref.labs.gradebook", "autograde", "01",
                             "--course", str(course)], cwd=ROOT, capture_output=True, text=True,
                            env={**os.environ, "ALLOCATOR_REF_GRADER_PYTHON": str(hub["python"])})
    assert graded.returncode == 0, graded.stdout[-3000:] + graded.stderr[-3000:]   # 1: a learner not graded
    assert all(name in (course / "grades.csv").read_text() for name in LEARNERS)
    given = gradebook.feedback("01", course, hub["homes"])
    assert set(given) == set(LEARNERS)
    assert not (course / "source").stat().st_mode & 0o077                  # the solutions

    ada, grace = LEARNERS[0], learners[1]
    own = Path(pwd.getpwnam(grace.name).pw_dir) / "graded" / "lab01" / "feedback" / "lab01_measure_it.html"
    assert own.stat().st_uid == pwd.getpwnam(grace.name).pw_uid
    paths = {"ada's submission": course / "submitted" / ada / "lab01" / "lab01_measure_it.ipynb",
             "ada's graded notebook": course / "autograded" / ada / "lab01" / "lab01_measure_it.ipynb",
             "ada's feedback (course)": course / "feedback" / ada / "lab01" / "lab01_measure_it.html",
             "ada's feedback (home)": given[ada][0],
             "the gradebook": course / "gradebook.db", "grades.csv": course / "grades.csv",
             "the solutions": next((course / "source" / "lab01").glob("*.ipynb"))}
    assert all(p.exists() for p in paths.values()), paths
    got = _kernel_says(grace, PRYING.format(paths={**{k: str(v) for k, v in paths.items()},
                                                   "grace's own feedback": str(own)}))
    assert got.pop("grace's own feedback") == "allowed"
    assert set(got.values()) == {"denied"}, got


def test_the_hub_exchange_hands_out_and_collects_for_the_instructor_only(hub, learners, tmp_path):
    """The cluster's path (workshop/hub_exchange.py, homes are volumes there), tried on this hub:
    the instructor's token reaches each learner's ~/graded through the hub; hand-out keeps started
    work; collect gets each learner's copy into a private submitted/; a learner's token gets nothing."""
    import hub_exchange
    from allocator_ref.labs import grading
    instructor = room.log_in(hub["url"], ADMIN, ADMIN_PASSWORD, verify=hub["cert"])
    token = tmp_path / "room-token"
    token.touch(mode=0o600)
    token.write_text(instructor.token)
    me = hub_exchange.instructor(hub["url"], token, hub["cert"])
    assert set(hub_exchange.learners(me)) >= set(LEARNERS)
    course = tmp_path / "cluster-course"
    grading.release("01", course)
    assert hub_exchange.hand_out("01", me, course) == []          # each already has it: kept as it is
    got = hub_exchange.collect("01", me, course)
    assert {p.parents[1].name for p in got} >= set(LEARNERS)
    assert (course / "submitted").stat().st_mode & 0o077 == 0
    given = hub_exchange.hand_back("01", me, hub["graded"])     # the round trip's feedback, through the hub
    assert len(given) == len(LEARNERS)
    got = learners[0].server("GET", "/contents/graded/lab01/feedback/lab01_measure_it.html?type=file&format=text")
    assert got.status_code == 200 and "lab01" in got.json()["content"]
    mine = tmp_path / "learner-token"
    mine.touch(mode=0o600)
    mine.write_text(learners[1].token)
    grace = hub_exchange.instructor(hub["url"], mine, hub["cert"])
    with pytest.raises(room.RoomError, match="would not issue a token"):    # no token for ada's server
        with hub_exchange.learner_token(grace, LEARNERS[0]):
            pass
    r = grace.request("GET", f"{hub['url']}/user/{LEARNERS[0]}/api/contents/graded/lab01/lab01_measure_it.ipynb",
                      headers={"Authorization": f"token {grace.token}"}, allow_redirects=False)
    assert r.status_code in (302, 403, 404), r.status_code           # not ada's notebook


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
    for p in [hub["course"], *hub["course"].rglob("*")]:      # the learners pull as themselves
        p.chmod(p.stat().st_mode | 0o004 | (0o001 if p.is_dir() else 0))
    room.stop_server(ada)
    room.start_server(ada)                   # the pull runs again before the server starts
    hub["watch"]()
    assert "ada was here" in saved(ada)
    errata = ada.server("GET", "/contents/allocator-course/ERRATA.md?type=file&format=text")
    assert errata.status_code == 200 and "best fit" in errata.json()["content"]
    assert "ada was here" not in saved(grace)
    # grace's server keeps running: she opens the guide's link instead (make pull-link), whose
    # page calls nbgitpuller's git-pull API in her server with these arguments
    sys.path.insert(0, str(WORKSHOP))
    from pull import pull_link
    from urllib.parse import parse_qs, urlparse
    link = urlparse(pull_link(hub["url"], str(hub["course"]), "main"))
    assert link.path == "/hub/user-redirect/git-pull"
    query = {k: v[0] for k, v in parse_qs(link.query).items() if k != "urlpath"}
    stream = grace.get(f"{hub['url']}/user/{grace.name}/git-pull/api", params=query,
                       headers={"Authorization": f"token {grace.token}"}, timeout=120).text
    assert '"phase": "finished"' in stream, stream[-2000:]
    errata = grace.server("GET", "/contents/allocator-course/ERRATA.md?type=file&format=text")
    assert errata.status_code == 200 and "best fit" in errata.json()["content"]


def test_the_instructor_is_admin_and_learners_are_not(hub, learners):
    instructor = room.log_in(hub["url"], ADMIN, ADMIN_PASSWORD, verify=hub["cert"])
    names = {u["name"] for u in instructor.api("GET", "/users").json()}
    assert set(LEARNERS) <= names
    assert instructor.api("GET", f"/users/{ADMIN}").json()["admin"] is True
    r = learners[0].api("GET", "/users")
    assert r.status_code == 403 or {u["name"] for u in r.json()} == {learners[0].name}


def test_the_live_view_shows_the_admin_who_passed_what_and_refuses_a_learner(hub, learners):
    """WORKSHOP_LIVE_VIEW=1: a learner's check() in their own kernel shows up in the hub's live-view
    service for the instructor (the hub's admin); a learner asking for it is refused."""
    linus = learners[2]
    said = _kernel_says(linus, (
        "import json\nfrom allocator_ref.labs import check\n"
        "r = check('lab9.stranded', lambda snapshot: 0, hidden=1, verbose=False)\n"
        "print(json.dumps(r.passed))"))
    assert said is False
    instructor = room.log_in(hub["url"], ADMIN, ADMIN_PASSWORD, verify=hub["cert"])
    url = f"{hub['url']}/services/live-view/"
    got = instructor.get(url + "api", headers={"Authorization": f"token {instructor.token}"}, timeout=60)
    assert got.status_code == 200, got.text[-500:]
    seen = got.json()["learners"]
    assert seen[linus.name]["lab9.stranded"]["passed"] is False
    assert seen[linus.name]["lab9.stranded"]["attempts"] == 1
    assert set(LEARNERS) <= set(seen)
    table = instructor.get(url, headers={"Authorization": f"token {instructor.token}"}, timeout=60)
    assert table.status_code == 200 and "FAIL (1)" in table.text and linus.name in table.text
    for learner in learners:
        refused = learner.get(url + "api", headers={"Authorization": f"token {learner.token}"}, timeout=60,
                              allow_redirects=False)
        assert refused.status_code == 403, (learner.name, refused.status_code, refused.text[-300:])


def test_idle_servers_are_culled_by_the_hubs_own_service(hub, learners):
    """jupyterhub-idle-culler runs as a hub service with the role that lets it stop servers."""
    instructor = room.log_in(hub["url"], ADMIN, ADMIN_PASSWORD, verify=hub["cert"])
    services = instructor.api("GET", "/services").json()
    assert "idle-culler" in services, services
    import psutil
    hub["watch"]()
    assert any("jupyterhub_idle_culler" in " ".join(psutil.Process(p).cmdline())
               for p in hub["started"] if psutil.pid_exists(p)), "the culler is not running"


def test_stopping_the_hub_stops_everything_it_started(hub, learners):
    hub["watch"]()
    assert len(hub["started"]) >= 1 + len(LEARNERS)       # the proxy and a server per learner
    hub["stop"]()
    import psutil
    alive = [p for p in hub["started"] if psutil.pid_exists(p)
             and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert not alive, [psutil.Process(p).cmdline() for p in alive]


# ------------------------------------------------------------------ refusals at start (no hub runs)

def test_workshop_clean_removes_the_learners_accounts_and_nothing_else(tmp_path):
    """sudo make workshop-clean (workshop/clean_up.py): every account whose home is under the
    hub's homes goes, with its home; the machine's own accounts stay."""
    homes = Path(tempfile.mkdtemp(prefix="workshop-homes-"))
    name = f"cleanme-{RUN}"
    try:
        subprocess.run(["useradd", "--create-home", "--home-dir", str(homes / name), name], check=True)
        out = subprocess.run([sys.executable, str(WORKSHOP / "clean_up.py"), "--homes", str(homes)],
                             capture_output=True, text=True)
        assert out.returncode == 0 and f"removed {name}" in out.stdout, out.stderr
        assert name not in {a.pw_name for a in pwd.getpwall()} and not (homes / name).exists()
        assert "root" in {a.pw_name for a in pwd.getpwall()}
        assert "workshop/clean_up.py" in (ROOT / "Makefile").read_text()
    finally:
        subprocess.run(["userdel", "--remove", name], capture_output=True)
        shutil.rmtree(homes, ignore_errors=True)


def test_workshop_clean_finds_a_non_default_runtime_folder_the_hub_recorded(config, tmp_path):
    """A room started with WORKSHOP_RUNTIME and WORKSHOP_HOMES elsewhere: the hub records both in its
    state folder, and `sudo make workshop-clean` (no variables) removes the accounts and the kernel
    folders there (issue 53: the kernel folders were left behind)."""
    base = Path(tempfile.mkdtemp(prefix="workshop-runtime-"))
    homes, runtime, state = base / "homes", base / "kernels", base / "state"
    name = f"cleanrt-{RUN}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKSHOP_")}
    try:
        loaded = _load_config(config, tmp_path, WORKSHOP_STATE=str(state), WORKSHOP_HOMES=str(homes),
                              WORKSHOP_RUNTIME=str(runtime))
        assert loaded.returncode == 0, loaded.stderr
        subprocess.run(["useradd", "--create-home", "--home-dir", str(homes / name), name], check=True)
        uid = pwd.getpwnam(name).pw_uid
        (runtime / str(uid)).mkdir(parents=True)
        (runtime / str(uid) / "kernel-1.json").write_text("{}")
        out = subprocess.run([sys.executable, str(WORKSHOP / "clean_up.py"), "--state", str(state)],
                             capture_output=True, text=True, env=env)
        assert out.returncode == 0 and f"removed {name}" in out.stdout, out.stderr
        assert not (runtime / str(uid)).exists() and not (homes / name).exists()
        assert name not in {a.pw_name for a in pwd.getpwall()}
    finally:
        subprocess.run(["userdel", "--remove", name], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def _load_config(config, tmp_path, **env_over) -> subprocess.CompletedProcess:
    """Load workshop/jupyterhub_config.py as JupyterHub does (get_config, then the file), nothing more."""
    secret = tmp_path / "admin-password"
    if not secret.exists():
        secret.touch(mode=0o600)
        secret.write_text(ADMIN_PASSWORD)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKSHOP_")}
    env.update(WORKSHOP_STATE=str(tmp_path / "state"), WORKSHOP_HOMES=str(tmp_path / "homes"),
               WORKSHOP_ADMIN_PASSWORD_FILE=str(secret), WORKSHOP_PYTHON="/usr/bin/python3",
               WORKSHOP_REPO="https://example.org/course.git", WORKSHOP_HOSTNAME="localhost",
               PYTHONPATH=str(ROOT))
    env.update(env_over)
    env = {k: v for k, v in env.items() if v is not None}
    code = ("from traitlets.config import Config; import sys; c = Config(); f = sys.argv[1]\n"
            "exec(compile(open(f).read(), f, 'exec'), {'get_config': lambda: c, '__file__': f})\n"
            "print('loaded', c.JupyterHub.ip, c.JupyterHub.port, bool(c.JupyterHub.ssl_cert))")
    return subprocess.run([sys.executable, "-c", code, str(config)],
                          env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def test_without_a_password_file_the_hub_asks_at_the_terminal(config, tmp_path):
    """`sudo make workshop` with no WORKSHOP_ADMIN_PASSWORD_FILE: the password is typed, not echoed."""
    import pty
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKSHOP_")}
    env.update(WORKSHOP_STATE=str(tmp_path / "state"), WORKSHOP_HOMES=str(tmp_path / "homes"),
               WORKSHOP_PYTHON="/usr/bin/python3", WORKSHOP_REPO="https://example.org/course.git",
               WORKSHOP_HOSTNAME="localhost", PYTHONPATH=str(ROOT))
    code = ("from traitlets.config import Config; import sys; c = Config(); f = sys.argv[1]\n"
            "g = {'get_config': lambda: c, '__file__': f}\n"
            "exec(compile(open(f).read(), f, 'exec'), g)\n"
            "print('admin password has', len(g['ADMIN_PASSWORD']), 'characters')")
    pid, fd = pty.fork()
    if pid == 0:                                   # the child: the config on a terminal
        os.execve(sys.executable, [sys.executable, "-c", code, str(config)], env)
    said = b""
    deadline = time.monotonic() + 60
    while b"password for the instructor" not in said and time.monotonic() < deadline:
        said += os.read(fd, 1024)
    os.write(fd, ADMIN_PASSWORD.encode() + b"\n")
    while True:
        try:
            chunk = os.read(fd, 1024)
        except OSError:
            break
        if not chunk:
            break
        said += chunk
    os.waitpid(pid, 0)
    text = said.decode(errors="replace")
    assert f"admin password has {len(ADMIN_PASSWORD)} characters" in text, text[-2000:]
    assert ADMIN_PASSWORD not in text                       # not echoed


def test_the_config_loads_with_https_by_default(config, tmp_path):
    out = _load_config(config, tmp_path)
    assert out.returncode == 0, out.stderr
    assert "loaded 0.0.0.0 8000 True" in out.stdout and "fingerprint" in out.stderr
    assert (tmp_path / "state").stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "state" / "tls" / "hub.key").stat().st_mode & 0o077 == 0


@pytest.mark.parametrize("change, said", [
    ({"WORKSHOP_ADMIN_PASSWORD": "a-password-typed-on-the-command-line"}, "WORKSHOP_ADMIN_PASSWORD is not read"),
    ({"WORKSHOP_ADMIN_PASSWORD_FILE": None}, "no instructor password"),
    ({"WORKSHOP_ADMIN": "root"}, "is an existing account"),
    ({"WORKSHOP_TLS": "maybe"}, "WORKSHOP_TLS='maybe'"),
])
def test_the_hub_refuses_unsafe_settings(config, tmp_path, change, said):
    out = _load_config(config, tmp_path, **change)
    assert out.returncode != 0 and said in out.stderr, out.stderr
    assert not (tmp_path / "state").exists()                  # refused before making anything


def test_a_graded_room_refuses_a_course_with_solutions(config, tmp_path):
    """WORKSHOP_GRADED pulls WORKSHOP_GRADED/course.git (made by make nbgrader); a WORKSHOP_REPO whose
    branch holds labs/solutions.json is refused, and so is a course folder without course.git."""
    base = Path(tempfile.mkdtemp(prefix="workshop-graded-"))     # not tmp_path: closed to others
    base.chmod(0o755)
    try:
        graded = base / "nbgrader"
        (graded / "release" / "lab01").mkdir(parents=True, mode=0o755)
        graded.chmod(0o755)
        missing = _load_config(config, tmp_path, WORKSHOP_GRADED=str(graded), WORKSHOP_REPO=None)
        assert missing.returncode != 0 and "run make nbgrader LAB=NN again" in missing.stderr, missing.stderr
        course = base / "course"
        _publish(base)
        _git("clone", "-q", "--bare", str(base / "course-src"), str(course), cwd=base)
        leaky = _load_config(config, tmp_path, WORKSHOP_GRADED=str(graded), WORKSHOP_REPO=str(course))
        assert leaky.returncode != 0 and "holds labs/solutions.json" in leaky.stderr, leaky.stderr
        assert not (tmp_path / "state").exists()
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_a_self_paced_room_after_a_graded_one_says_how_to_reopen_the_course(config, tmp_path):
    """A graded room closes the checkout's .git to learners; a self-paced room pulling that checkout
    afterwards is refused with the one command that opens it again, not a pull error per learner."""
    base = Path(tempfile.mkdtemp(prefix="workshop-reopen-"))
    base.chmod(0o755)
    try:
        checkout = _publish(base)
        for p in [checkout, *checkout.rglob("*")]:
            p.chmod(p.stat().st_mode | 0o004 | (0o001 if p.is_dir() else 0))
        (checkout / ".git").chmod(0o700)                     # as the graded room left it
        out = _load_config(config, tmp_path, WORKSHOP_REPO=str(checkout))
        assert out.returncode != 0 and f"chmod 755 {checkout}/.git" in out.stderr, out.stderr
        (checkout / ".git").chmod(0o755)
        assert _load_config(config, tmp_path, WORKSHOP_REPO=str(checkout)).returncode == 0
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_a_password_file_others_can_read_is_refused(config, tmp_path):
    secret = tmp_path / "admin-password"
    secret.write_text(ADMIN_PASSWORD)
    secret.chmod(0o644)
    out = _load_config(config, tmp_path)
    assert out.returncode != 0 and f"chmod 600 {secret}" in out.stderr, out.stderr


def test_ctrl_c_waits_seconds_not_half_a_minute_per_server(config, tmp_path):
    """LocalProcessSpawner waits interrupt_timeout after SIGINT (JupyterHub's default: 30 s) before the
    SIGTERM a server stops on: the room's Ctrl-C took 31-36 s (issue 53)."""
    code = ("from traitlets.config import Config; import sys; c = Config(); f = sys.argv[1]\n"
            "exec(compile(open(f).read(), f, 'exec'), {'get_config': lambda: c, '__file__': f})\n"
            "s = c.LocalProcessSpawner; print(s.interrupt_timeout, s.term_timeout)")
    secret = tmp_path / "admin-password"
    secret.touch(mode=0o600)
    secret.write_text(ADMIN_PASSWORD)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKSHOP_")}
    env.update(WORKSHOP_STATE=str(tmp_path / "state"), WORKSHOP_HOMES=str(tmp_path / "homes"),
               WORKSHOP_ADMIN_PASSWORD_FILE=str(secret), WORKSHOP_PYTHON="/usr/bin/python3",
               WORKSHOP_REPO="https://example.org/course.git", WORKSHOP_HOSTNAME="localhost", PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code, str(config)], env=env, capture_output=True, text=True,
                         timeout=120, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr
    interrupt, term = map(int, out.stdout.split()[-2:])
    assert interrupt + term <= 10


def test_plain_http_beyond_loopback_is_warned_about(config, tmp_path):
    wide = _load_config(config, tmp_path, WORKSHOP_TLS="off", WORKSHOP_IP="0.0.0.0")
    assert wide.returncode == 0 and "WARNING: plain HTTP on 0.0.0.0" in wide.stderr, wide.stderr
    local = _load_config(config, tmp_path, WORKSHOP_TLS="off", WORKSHOP_IP="127.0.0.1")
    assert local.returncode == 0 and "WARNING" not in local.stderr, local.stderr
