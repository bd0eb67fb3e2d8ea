"""JupyterHub for a workshop room, on one machine (`make workshop`, run as root).

Every learner is their own Unix user, made by the hub when they first log in, with a
home only they can read, their own server running as them (never as root), their own
copy of the course (workshop/pull.py, nbgitpuller: a re-pull never overwrites a
learner's edits), the simulated device, and hidden lab cases drawn from their user
name.  The instructor is the hub's admin.

Who may log in: a user name belongs to whoever used it first, with the password they
chose then (FirstUseAuthenticator); the instructor's name is claimed at start with the
password from WORKSHOP_ADMIN_PASSWORD_FILE (or typed at the prompt), so nobody can take it.

Why these two well-kept JupyterHub projects, and nothing written here:
* LocalProcessSpawner (JupyterHub's default spawner): with the hub as root it starts each
  server as the learner's own Unix user (setuid before exec), so learners are kept apart
  by the kernel's file permissions.  SystemdSpawner would add CPU/memory limits but
  needs a running systemd, which containers and CI machines rarely have.
* jupyterhub-firstuseauthenticator (the jupyterhub organisation): "a name belongs to its
  first password" with no accounts to prepare, mixed with JupyterHub's LocalAuthenticator
  (create_system_users) the way JupyterHub documents for every authenticator
  (oauthenticator's LocalGitHubOAuthenticator is the same two-line class).

Everything a room changes is an environment variable (the Makefile and workshop/README.md
pass them; no secret is ever one):

    WORKSHOP_ADMIN_PASSWORD_FILE  a file (mode 600) holding the instructor's password, 16+ characters;
                                  unset: the hub asks for it at the terminal
    WORKSHOP_ADMIN        the instructor's user name              (default: instructor)
    WORKSHOP_IP, WORKSHOP_PORT    where the hub listens           (default: 0.0.0.0, 8000)
    WORKSHOP_TLS          self-signed (default: a certificate made at first start, in the
                          state folder) or off (plain HTTP: only on 127.0.0.1 or behind an
                          HTTPS reverse proxy; the hub warns otherwise)
    WORKSHOP_HOSTNAME     names the certificate is for, comma-separated (default: this host's name)
    WORKSHOP_PYTHON       the Python learners' servers run with   (default: the hub's own; make
                          workshop finds or makes one every user can run: learner_python.py)
    WORKSHOP_REPO         the course's git URL or path            (default: this checkout; a graded
                          room: WORKSHOP_GRADED/course.git, the course without its solutions)
    WORKSHOP_BRANCH       the branch to pull                      (default: main)
    WORKSHOP_HOMES        where learners' homes are made          (default: workshop/.run/homes)
    WORKSHOP_STATE        the hub's database, cookie secret, passwords, certificate
                          (default: workshop/.run/hub, readable by root only)
    WORKSHOP_SETTINGS     the course settings every learner gets  (default: workshop/course-settings.toml)
    WORKSHOP_RUNTIME      where each learner's kernel sockets go, one 0700 folder per user
                          (default: /run/workshop-kernels)
    WORKSHOP_LANGUAGE     the room's language, en or zh: the edition learners land on and the language
                          the tools speak (default: course-settings.toml's language, else en; room_language.py)
    WORKSHOP_FIRST_PAGE   the notebook learners land on, in their copy (default: chapter 0 of the room's
                          language, chapters/00_setup_and_tour.ipynb or chapters/zh/00_setup_and_tour.ipynb)
    WORKSHOP_CULL         seconds of inactivity after which a learner's server is stopped
                          (jupyterhub-idle-culler; default 3600, 0: never); their files stay
    WORKSHOP_LIVE_VIEW    1: the instructor's live view of who passed which exercise, at
                          /services/live-view/ (admin only; learners are told: live_view.py)
    WORKSHOP_GRADED       a graded workshop: the nbgrader course folder of `make nbgrader`
                          (build/nbgrader); each learner gets its release/labNN/ in ~/graded/
"""
import asyncio
import getpass
import json
import ipaddress
import os
import pwd
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path

from firstuseauthenticator import FirstUseAuthenticator
from jupyterhub.auth import LocalAuthenticator

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from pull import COURSE_FOLDER  # noqa: E402  (workshop/pull.py, next to this file)
from room_copy import LEFT_OUT, ROOM_REPO, holds_solutions  # noqa: E402  (a graded room's course)
from clean_up import ROOM_RECORD  # noqa: E402  (where this room's homes and kernel folders are, for the clean-up)
from room_language import (RoomLanguageError, asked_language, first_page, learner_line, room_language,  # noqa: E402
                           room_settings)
from tls import self_signed  # noqa: E402  (workshop/tls.py)

c = get_config()  # noqa: F821  (JupyterHub defines get_config when it loads this file)

# Ctrl-C reaches what the hub starts.  JupyterHub installs its own SIGINT handler only after it has
# started the proxy and the services (JupyterHub.init_signal, at the end of start()), which inherit
# the hub's SIGINT as it was: ignored, when the hub runs as a script's background job (`make workshop &`)
# or under a runner that starts it so.  Then Ctrl-C left them running: JupyterHub waited its 30 s
# interrupt_timeout for each service before SIGTERM, and the learners' servers were stopped last.
signal.signal(signal.SIGINT, signal.default_int_handler)


def _refuse(message: str):
    sys.exit(f"workshop: {message} (see workshop/README.md)")


def _reachable_by_everyone(path: Path) -> bool:
    """Can another Unix user read `path` (every folder above it must let others through)?"""
    path = path.resolve()
    if not path.exists() or not path.stat().st_mode & stat.S_IROTH:
        return False
    return all(p.stat().st_mode & stat.S_IXOTH for p in path.parents)


def _admin_password() -> str:
    """From a file only the instructor can read, else typed at the prompt; never from the
    environment or a command line (both are readable by other processes, `ps`, /proc)."""
    if os.environ.get("WORKSHOP_ADMIN_PASSWORD"):
        _refuse("WORKSHOP_ADMIN_PASSWORD is not read: a password in the environment or on a "
                "command line is visible to other processes. Write it to a file "
                "(chmod 600) and set WORKSHOP_ADMIN_PASSWORD_FILE, or leave both unset to be asked")
    name = os.environ.get("WORKSHOP_ADMIN_PASSWORD_FILE")
    if name:
        path = Path(name)
        if not path.is_file():
            _refuse(f"WORKSHOP_ADMIN_PASSWORD_FILE={name} is not a file")
        if path.stat().st_mode & 0o077:
            _refuse(f"{name} can be read by other users: chmod 600 {name}")
        value = path.read_text().strip()
    elif sys.stdin.isatty():
        value = getpass.getpass(f"password for the instructor ({ADMIN}): ")
    else:
        _refuse("no instructor password: set WORKSHOP_ADMIN_PASSWORD_FILE to a file holding it")
    if len(value) < 16:
        _refuse("the instructor's password needs 16 characters or more")
    return value


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if os.getuid() != 0:
    _refuse("the hub makes one Unix user per learner and starts each server as that user, "
            "which needs root: sudo make workshop")

STATE = Path(os.environ.get("WORKSHOP_STATE") or HERE / ".run" / "hub").resolve()
HOMES = Path(os.environ.get("WORKSHOP_HOMES") or HERE / ".run" / "homes").resolve()
REPO = os.environ.get("WORKSHOP_REPO") or str(HERE.parent)
BRANCH = os.environ.get("WORKSHOP_BRANCH") or "main"
SETTINGS = Path(os.environ.get("WORKSHOP_SETTINGS") or HERE / "course-settings.toml").resolve()
ADMIN = os.environ.get("WORKSHOP_ADMIN") or "instructor"
try:
    LANGUAGE = room_language(SETTINGS)          # en or zh (workshop/room_language.py)
except RoomLanguageError as exc:
    _refuse(str(exc))
FIRST_PAGE = first_page(LANGUAGE)
IP = os.environ.get("WORKSHOP_IP") or "0.0.0.0"
PORT = int(os.environ.get("WORKSHOP_PORT") or 8000)
TLS = os.environ.get("WORKSHOP_TLS") or "self-signed"
PYTHON = Path(os.environ.get("WORKSHOP_PYTHON") or sys.executable).absolute()
CULL = int(os.environ.get("WORKSHOP_CULL") or 3600)
PROXY = HERE / "node_modules" / ".bin" / "configurable-http-proxy"

if not PROXY.exists():
    _refuse(f"{PROXY} is missing; install the hub's proxy with `npm ci --prefix workshop` "
            "(make workshop does it)")
if TLS not in ("self-signed", "off"):
    _refuse(f"WORKSHOP_TLS={TLS!r}: use self-signed or off")
for what, path in (("WORKSHOP_SETTINGS", SETTINGS), ("WORKSHOP_PYTHON", PYTHON), ("the workshop folder", HERE)):
    if not _reachable_by_everyone(path):
        _refuse(f"{what} ({path}) cannot be read by the learners' Unix users (a folder above it "
                "is closed to others, e.g. /root); put it, or a copy, where every user can read it"
                + ("; WORKSHOP_PYTHON may be a venv of /usr/bin/python3 with the course installed"
                   if what == "WORKSHOP_PYTHON" else ""))
GRADED = Path(os.environ["WORKSHOP_GRADED"]).resolve() if os.environ.get("WORKSHOP_GRADED") else None
if GRADED and not _reachable_by_everyone(GRADED / "release"):
    _refuse(f"WORKSHOP_GRADED={GRADED}: no release/ there that learners can read (make nbgrader LAB=NN)")
if GRADED and (GRADED / "source").exists() and (GRADED / "source").stat().st_mode & 0o077:
    _refuse(f"{GRADED}/source holds the solutions and others can read it: chmod 700 {GRADED}/source")
if GRADED:
    # A graded room pulls the course without its solutions (workshop/room_copy.py, made by make nbgrader)
    REPO = os.environ.get("WORKSHOP_REPO") or str(GRADED / ROOM_REPO)
    if not Path(REPO).exists() and not os.environ.get("WORKSHOP_REPO"):
        _refuse(f"WORKSHOP_GRADED={GRADED}: no {ROOM_REPO} there, the course without its solutions that a "
                "graded room's learners pull: run make nbgrader LAB=NN again")
    if holds_solutions(REPO, BRANCH):
        _refuse(f"WORKSHOP_REPO={REPO} (branch {BRANCH}) holds labs/solutions.json or labs/source, and every "
                f"learner of a graded room would read them: leave WORKSHOP_REPO unset (the room then pulls "
                f"{GRADED / ROOM_REPO}, made by make nbgrader)")
    # This checkout holds them too, and its folder is open to the learners (they run its workshop/
    # files): close what holds a solution, and its .git (every old version of them), to others.
    for name in (*LEFT_OUT, ".git"):
        path = HERE.parent / name
        if path.exists() and not path.is_symlink() and path.stat().st_mode & 0o077:
            path.chmod(0o700 if path.is_dir() else 0o600)
            print(f"workshop: closed {path} to the learners (it holds solutions)", file=sys.stderr)
elif (_reachable_by_everyone(Path(REPO)) and (Path(REPO) / ".git").is_dir()
      and not _reachable_by_everyone(Path(REPO) / ".git")):
    _refuse(f"{REPO}/.git is closed to the learners, who pull from it (a graded room closes it: its solutions' "
            f"history is there); for this self-paced room open it again: chmod 755 {REPO}/.git")
if Path(REPO).exists() and not _reachable_by_everyone(Path(REPO)):
    _refuse(f"WORKSHOP_REPO={REPO} cannot be read by the learners' Unix users, who pull from it")
ADMIN_PASSWORD = _admin_password()

# Nobody logs in as an account the hub did not make (root, daemon, the instructor's own
# login...): their servers would run as that account.  Hub-made users live under HOMES.
SYSTEM_USERS = {p.pw_name for p in pwd.getpwall() if not Path(p.pw_dir).is_relative_to(HOMES)}
if ADMIN in SYSTEM_USERS:
    _refuse(f"WORKSHOP_ADMIN={ADMIN} is an existing account of this machine; pick a name the hub "
            "will create (e.g. instructor)")

STATE.mkdir(parents=True, exist_ok=True)
STATE.chmod(0o700)                         # database, cookie secret, passwords, key: the hub's only
HOMES.mkdir(parents=True, exist_ok=True)
HOMES.chmod(0o711)                         # each learner reaches their own home, lists nobody's

# --- the hub, its database and its proxy ---------------------------------------------
c.JupyterHub.ip = IP
c.JupyterHub.port = PORT
c.JupyterHub.db_url = f"sqlite:///{STATE / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(STATE / "jupyterhub_cookie_secret")
c.ConfigurableHTTPProxy.pid_file = str(STATE / "jupyterhub-proxy.pid")
c.ConfigurableHTTPProxy.command = [str(PROXY)]
# internal listeners on free ports, so a second hub on the machine (a rehearsal) never clashes
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{_free_port()}"
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = _free_port()
c.JupyterHub.cleanup_servers = True        # stopping the hub stops every learner's server
c.JupyterHub.cleanup_proxy = True

if TLS == "self-signed":
    names = [n for n in (os.environ.get("WORKSHOP_HOSTNAME") or socket.gethostname()).split(",") if n]
    cert, key, fingerprint = self_signed(STATE / "tls", names, IP)
    c.JupyterHub.ssl_cert, c.JupyterHub.ssl_key = str(cert), str(key)
    print(f"workshop: HTTPS with a self-signed certificate for {', '.join(names)}, {IP}; tell learners "
          f"its SHA-256 fingerprint so they can check it in their browser:\n  {fingerprint}",
          file=sys.stderr)
elif IP in ("", "0.0.0.0", "::") or not (IP == "localhost" or ipaddress.ip_address(IP).is_loopback):
    print(f"workshop: WARNING: plain HTTP on {IP or 'every address'}: passwords and notebooks cross "
          "the network unencrypted. Use WORKSHOP_TLS=self-signed, or put an HTTPS reverse proxy in "
          "front and set WORKSHOP_IP=127.0.0.1.", file=sys.stderr)


# --- who may log in -------------------------------------------------------------------
class LocalFirstUseAuthenticator(LocalAuthenticator, FirstUseAuthenticator):
    """FirstUseAuthenticator's rule plus a Unix account per user (LocalAuthenticator)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        # FirstUse's own method: the instructor's name is taken before any learner arrives
        self.reset_password(ADMIN, ADMIN_PASSWORD)


c.JupyterHub.authenticator_class = LocalFirstUseAuthenticator
c.FirstUseAuthenticator.dbm_path = str(STATE / "passwords.dbm")
c.FirstUseAuthenticator.min_password_length = 8
c.LocalAuthenticator.create_system_users = True
# useradd: the home under HOMES, readable by its owner only; a bash for JupyterLab's terminal
c.LocalAuthenticator.add_user_cmd = ["useradd", "--create-home", "--home-dir", f"{HOMES}/USERNAME",
                                     "--key", "HOME_MODE=0700", "--shell", "/bin/bash", "--user-group"]
c.Authenticator.username_pattern = r"^[a-z][a-z0-9_-]{0,30}$"       # a valid Unix name
c.Authenticator.blocked_users = SYSTEM_USERS
c.Authenticator.admin_users = {ADMIN}
c.Authenticator.allow_all = True           # anyone in the room picks a name and a password
# The instructor may open learners' servers (graded hand-out and collect through the hub,
# workshop/hub_exchange.py); the admin role alone manages servers but does not open them.  `tokens`:
# the exchange opens each learner's server with a short-lived token of theirs, never the instructor's.
c.JupyterHub.load_roles = [{"name": "grader", "description": "hand out, collect and hand back graded labs",
                            "scopes": ["access:servers", "admin:servers", "list:users", "read:users", "tokens"],
                            "users": [ADMIN]}]

# --- idle servers stop (jupyterhub-idle-culler, the JupyterHub project's): a learner's files stay
SERVICES = []
if CULL > 0:
    SERVICES.append({"name": "idle-culler",
                     "command": [sys.executable, "-m", "jupyterhub_idle_culler", f"--timeout={CULL}",
                                 f"--cull-every={max(60, CULL // 12)}"]})
    c.JupyterHub.load_roles.append({"name": "idle-culler", "services": ["idle-culler"],
                                    "scopes": ["list:users", "read:users:activity", "read:servers",
                                               "delete:servers"]})
# --- the instructor's live view (WORKSHOP_LIVE_VIEW=1): who passed which exercise, as they run check().
# A service the hub starts (as root: it reads each home's ~/.allocator-course/live.json); reaching it
# needs access:services!service=live-view, which the admin role has and a learner has not (live_view.py).
LIVE_VIEW = os.environ.get("WORKSHOP_LIVE_VIEW") == "1"
if LIVE_VIEW:
    SERVICES.append({"name": "live-view", "url": f"http://127.0.0.1:{_free_port()}", "display": True,
                     "oauth_no_confirm": True, "command": [sys.executable, str(HERE / "live_view.py")],
                     "environment": {"WORKSHOP_HOMES": str(HOMES), "WORKSHOP_LANGUAGE": LANGUAGE}})
c.JupyterHub.services = SERVICES

# --- each learner's server ------------------------------------------------------------
c.JupyterHub.spawner_class = "localprocess"  # as the learner's Unix user (the hub is root)
c.Spawner.cmd = [str(PYTHON), "-m", "jupyterhub.singleuser"]
# Kernels talk to their server over Unix sockets in the learner's own runtime folder (made by the
# hub, 0700): over TCP on 127.0.0.1 any other user could subscribe to a kernel's output channel.
# The folder is short (/run/workshop-kernels/UID), as a Unix socket's path must be under 108 bytes.
c.Spawner.args = ["--KernelManager.transport=ipc"]
RUNTIME = Path(os.environ.get("WORKSHOP_RUNTIME") or "/run/workshop-kernels")
# What `make workshop-clean` must find again, whatever the room was started with (clean_up.py reads it)
(STATE / ROOM_RECORD).write_text(json.dumps({"homes": str(HOMES), "runtime": str(RUNTIME.absolute())}) + "\n")
# where learners land (WORKSHOP_FIRST_PAGE: e.g. another edition's first chapter; make pull-link PAGE= agrees)
c.Spawner.default_url = f"/lab/tree/{COURSE_FOLDER}/{os.environ.get('WORKSHOP_FIRST_PAGE') or FIRST_PAGE}"
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120
# Ctrl-C stops every learner's server (cleanup_servers): LocalProcessSpawner.stop sends SIGINT, waits
# interrupt_timeout (JupyterHub's default 30 s) for a server that does not stop on it, then SIGTERM, which
# jupyter_server stops on cleanly (ServerApp._signal_stop).  3 s, then 5 s: the hub is back in seconds.
c.LocalProcessSpawner.interrupt_timeout = 3
c.LocalProcessSpawner.term_timeout = 5


def _home(spawner) -> Path:
    return Path(pwd.getpwnam(spawner.user.name).pw_dir)


# What a learner's server and kernels see (a value may be a function of the spawner).
# LocalProcessSpawner sets HOME, USER, LOGNAME and SHELL from the learner's Unix account,
# and the lab checker's seed (allocator_ref/labs/check.py resolve_seed) follows USER.
c.Spawner.environment = {
    # the learner's copy of allocator_ref comes first, so their edits are what runs
    "PYTHONPATH": lambda spawner: str(_home(spawner) / COURSE_FOLDER),
    # allocator_ref/settings.py: device, profile, lab_seed and language for the whole room (a copy in
    # HOMES with the language set when WORKSHOP_LANGUAGE overrides the file: room_language.py)
    "ALLOCATOR_REF_SETTINGS": str(room_settings(SETTINGS, asked_language(), HOMES)),
    # .jupyter-course/: the .md twins hidden, nbgrader's instructor menus off
    # (+ .jupyter-course-zh/ in a Chinese room: JupyterLab's menus from the Chinese language pack)
    "JUPYTER_CONFIG_PATH": lambda spawner: os.pathsep.join(
        str(_home(spawner) / COURSE_FOLDER / name)
        for name in ((".jupyter-course", ".jupyter-course-zh") if LANGUAGE == "zh" else (".jupyter-course",))),
    "PATH": f"{PYTHON.parent}{os.pathsep}/usr/local/bin:/usr/bin:/bin",
    # check() keeps each result for the instructor's live view, in a room that opted in (allocator_ref/labs/live.py)
    "ALLOCATOR_REF_LIVE_VIEW": "1" if LIVE_VIEW else "0",
    # connection files and the kernels' sockets (see RUNTIME above)
    "JUPYTER_RUNTIME_DIR": lambda spawner: str(RUNTIME / str(pwd.getpwnam(spawner.user.name).pw_uid)),
}


# nbgitpuller's link (make pull-link) pulls inside the learner's server, where git refuses a local
# repository another user owns unless it is a safe.directory, and only a global config file counts
# for the process that serves a local clone: one file, readable by all, names the course's
# repository (as pull.py does for the pull before start) and includes the learner's own ~/.gitconfig.
if Path(REPO).exists():
    GITCONFIG = HOMES / ".course-gitconfig"             # in HOMES: no user name starts with a dot
    GITCONFIG.write_text("".join(f"[safe]\n\tdirectory = {p}\n" for p in sorted(
        {REPO, str(Path(REPO).resolve()), f"{REPO}/.git", f"{Path(REPO).resolve()}/.git"}))
        + "[include]\n\tpath = ~/.gitconfig\n")
    GITCONFIG.chmod(0o644)
    c.Spawner.environment["GIT_CONFIG_GLOBAL"] = str(GITCONFIG)


def _pull_as_the_learner(spawner) -> None:
    """Clone the course into the learner's home, or merge upstream into it, as the learner
    (so every file is theirs); refuse any account the hub did not make."""
    account = pwd.getpwnam(spawner.user.name)
    home = Path(account.pw_dir)
    if account.pw_uid == 0 or not home.is_relative_to(HOMES):      # the hub's page shows it: the room's language
        raise RuntimeError(learner_line("not_a_learner", LANGUAGE, user=spawner.user.name))
    os.chown(home, account.pw_uid, account.pw_gid)
    home.chmod(0o700)
    RUNTIME.mkdir(mode=0o755, parents=True, exist_ok=True)     # made by root: nobody can plant it
    runtime = RUNTIME / str(account.pw_uid)
    runtime.mkdir(mode=0o700, exist_ok=True)
    os.chown(runtime, account.pw_uid, account.pw_gid)
    runtime.chmod(0o700)
    env = {"HOME": str(home), "PATH": c.Spawner.environment["PATH"], "LANG": "C.UTF-8"}
    release = [str(GRADED / "release")] if GRADED else []     # graded: ~/graded/labNN/ as well
    out = subprocess.run([str(PYTHON), str(HERE / "pull.py"), REPO, BRANCH, str(home), *release],
                         user=account.pw_uid, group=account.pw_gid, extra_groups=[], env=env,
                         cwd=home, capture_output=True, text=True)
    if out.returncode != 0:                  # git's words to the instructor (the log), one line to the learner
        spawner.log.error("the course could not be pulled for %s: %s", spawner.user.name, out.stderr.strip()[-1000:])
        raise RuntimeError(learner_line("no_copy", LANGUAGE))


async def _pull_before_start(spawner):
    # in a thread: git must not stall the hub for the rest of the room
    await asyncio.to_thread(_pull_as_the_learner, spawner)


c.Spawner.pre_spawn_hook = _pull_before_start
