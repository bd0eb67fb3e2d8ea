"""JupyterHub for a workshop room, on one machine (`make workshop`).

Every learner logs in with the room's shared password, gets their own server
and their own copy of the course (workshop/pull.py, nbgitpuller: a re-pull
never overwrites a learner's edits), the simulated device, and hidden lab cases
drawn from a seed derived from their hub user name.  The instructor logs in
with the admin password and is the hub's admin (sees and stops every server).

Everything a room needs to change is an environment variable (the Makefile and
workshop/README.md pass them):

    WORKSHOP_PASSWORD        the learners' shared password (required, 8 characters or more)
    WORKSHOP_ADMIN           the instructor's user name              (default: instructor)
    WORKSHOP_ADMIN_PASSWORD  the instructor's password (required, 32 characters or more)
    WORKSHOP_REPO            the course's git URL or path            (default: this checkout)
    WORKSHOP_BRANCH          the branch to pull                      (default: main)
    WORKSHOP_HOMES           where learners' homes are made          (default: workshop/.run/homes)
    WORKSHOP_STATE           the hub's database, cookie secret, logs (default: workshop/.run)
    WORKSHOP_SETTINGS        the course settings every learner gets  (default: workshop/course-settings.toml)

The spawner is JupyterHub's SimpleLocalProcessSpawner: every learner's server is
a process of the user who started the hub, in its own home folder.  That suits a
room on a machine the instructor trusts; it is no isolation between learners.
For isolation, or a room bigger than one machine, use Zero to JupyterHub with
workshop/z2jh-values.yaml (one container per learner).

Run by hand: jupyterhub -f workshop/jupyterhub_config.py --ip 0.0.0.0 --port 8000
"""
import asyncio
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from pull import COURSE_FOLDER, pull_course  # noqa: E402  (workshop/pull.py, next to this file)

c = get_config()  # noqa: F821  (JupyterHub defines get_config when it loads this file)


def _required(name: str, min_length: int) -> str:
    """A password from the environment; JupyterHub's SharedPasswordAuthenticator
    refuses short ones (8 characters for learners, 32 for the admin)."""
    value = os.environ.get(name, "")
    if len(value) < min_length:
        sys.exit(f"workshop: set {name} to at least {min_length} characters "
                 f"(see workshop/README.md), e.g. {name}=... make workshop")
    return value


STATE = Path(os.environ.get("WORKSHOP_STATE") or HERE / ".run").resolve()
HOMES = Path(os.environ.get("WORKSHOP_HOMES") or STATE / "homes").resolve()
REPO = os.environ.get("WORKSHOP_REPO") or str(HERE.parent)
BRANCH = os.environ.get("WORKSHOP_BRANCH") or "main"
SETTINGS = Path(os.environ.get("WORKSHOP_SETTINGS") or HERE / "course-settings.toml").resolve()
ADMIN = os.environ.get("WORKSHOP_ADMIN") or "instructor"
PROXY = HERE / "node_modules" / ".bin" / "configurable-http-proxy"
BIN = Path(sys.executable).parent          # the hub's own environment serves the learners

if not PROXY.exists():
    sys.exit(f"workshop: {PROXY} is missing; install the hub's proxy with "
             "`npm ci --prefix workshop` (make workshop does it)")
if not SETTINGS.is_file():
    sys.exit(f"workshop: WORKSHOP_SETTINGS={SETTINGS} is not a file")
STATE.mkdir(parents=True, exist_ok=True)

# --- the hub, its database and its proxy (all state in one folder) ----------
c.JupyterHub.db_url = f"sqlite:///{STATE / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(STATE / "jupyterhub_cookie_secret")
c.ConfigurableHTTPProxy.pid_file = str(STATE / "jupyterhub-proxy.pid")
c.ConfigurableHTTPProxy.command = [str(PROXY)]
c.JupyterHub.cleanup_servers = True        # stopping the hub stops every learner's server
c.JupyterHub.cleanup_proxy = True

# --- who may log in ----------------------------------------------------------
c.JupyterHub.authenticator_class = "shared-password"
c.SharedPasswordAuthenticator.user_password = _required("WORKSHOP_PASSWORD", 8)
c.SharedPasswordAuthenticator.admin_password = _required("WORKSHOP_ADMIN_PASSWORD", 32)
c.Authenticator.admin_users = {ADMIN}
c.Authenticator.allow_all = True           # anyone in the room with the password gets a server

# --- each learner's server ---------------------------------------------------
c.JupyterHub.spawner_class = "simple"      # SimpleLocalProcessSpawner: a process per learner
c.SimpleLocalProcessSpawner.home_dir_template = str(HOMES / "{username}")
c.Spawner.cmd = [str(BIN / "jupyterhub-singleuser")]
if os.getuid() == 0:                       # a container or CI runs as root; Jupyter refuses without this
    c.Spawner.args = ["--allow-root"]
c.Spawner.default_url = f"/lab/tree/{COURSE_FOLDER}/chapters/00_setup_and_tour.ipynb"
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120


def _home(spawner) -> Path:
    return Path(spawner.home_dir)


# What a learner's server and kernels see (a value may be a function of the spawner).
c.Spawner.environment = {
    # the learner's copy of allocator_ref comes first, so their edits are what runs
    "PYTHONPATH": lambda spawner: str(_home(spawner) / COURSE_FOLDER),
    # allocator_ref/settings.py: device, profile and lab_seed for the whole room
    "ALLOCATOR_REF_SETTINGS": str(SETTINGS),
    # lab_seed = "user": check.resolve_seed derives the hidden cases from this name
    "USER": lambda spawner: spawner.user.name,
    "LOGNAME": lambda spawner: spawner.user.name,
    "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', os.defpath)}",
}


async def _pull_before_start(spawner):
    """Clone the course into a new learner's home, or merge upstream into an old one
    (in a thread: git must not stall the hub for the rest of the room)."""
    await asyncio.to_thread(pull_course, REPO, BRANCH, _home(spawner))


c.Spawner.pre_spawn_hook = _pull_before_start
