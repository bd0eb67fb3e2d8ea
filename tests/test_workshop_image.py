"""The course image for Zero to JupyterHub, built by its one documented command and then run.

``make image`` (the Makefile; README.md and workshop/README.md document it) builds
``workshop/Dockerfile``: with ``docker build`` where a Docker engine runs, else with buildah.  The
CI machine has no Docker engine and reaches only PyPI, Debian's archive and npm, so here:

* the builder is Debian's buildah (no daemon, ``BUILDAH_ISOLATION=chroot``), and
* the base is NOT Docker Hub's ``debian:bookworm-slim`` (the Dockerfile's default ``BASE``, out of
  reach here) but a stand-in: Debian 12 made by ``debootstrap --variant=minbase`` from Debian's
  archive, passed as ``make image IMAGE_BASE=localhost/allocator-course-base:bookworm``.  Same
  release, same archive, same recipe (minbase), not the same bytes.  On this machine that base also
  trusts the machine's own TLS-intercepting certificate authority, so pip can reach PyPI through
  it (``tools/install_image_builder.sh`` says how; the Dockerfile does not know).

``tools/install_image_builder.sh`` installs buildah and debootstrap and makes that base (``make
test`` runs it first; it caches the base in build/image-base/ and buildah's storage).  Everything
else is the real build: apt-get installs Python and git from Debian's archive, pip installs the
course and its workshop extra from PyPI, and the result is then run, as Zero to JupyterHub would
run it with ``workshop/z2jh-values.yaml``: as the chart's user, the values' postStart pull into
the learner's home, the values' environment, and the server serving the values' ``defaultUrl``.

Time on the 2-core CI machine, measured from nothing installed: the script about 1 minute (apt-get,
debootstrap), the build 2 to 3 minutes (most of it pip), the checks about 15 seconds.  A rerun
reuses buildah's layer cache, as ``docker build`` does, so only the layers whose files changed are
built again; a fresh machine (CI) builds every one.

Not tested here: ``docker build`` itself (the same Dockerfile; no engine here), the registry's
base image, pushing, and a cluster pulling and running the image.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

ROOT = Path(__file__).resolve().parents[1]
WORKSHOP = ROOT / "workshop"
VALUES = yaml.safe_load((WORKSHOP / "z2jh-values.yaml").read_text())
SINGLE = VALUES["singleuser"]
CHART_DEFAULTS = ROOT.parent / "shared" / "z2jh" / "values.yaml"
BASE = "localhost/allocator-course-base:bookworm"        # tools/install_image_builder.sh's
IMAGE = "localhost/allocator-course:test"
SRV = "/srv/allocator-course"                            # where the image keeps the course
BUILD_LIMIT_S = 1500


def _chart_user() -> tuple[int, int]:
    """The uid and fsGid the chart runs a learner's container with (its defaults: 1000, 100)."""
    uid, gid = SINGLE.get("uid", 1000), SINGLE.get("fsGid", 100)
    if CHART_DEFAULTS.exists():
        defaults = yaml.safe_load(CHART_DEFAULTS.read_text())["singleuser"]
        uid, gid = SINGLE.get("uid", defaults["uid"]), SINGLE.get("fsGid", defaults["fsGid"])
    return uid, gid


def _buildah(*args, timeout=300, check=True) -> subprocess.CompletedProcess:
    out = subprocess.run(["buildah", *args], capture_output=True, text=True, timeout=timeout)
    if check:
        assert out.returncode == 0, f"buildah {' '.join(args)}:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}"
    return out


def _run_args(container: str, *command, env=None, volumes=()) -> list[str]:
    args = ["buildah", "run", "--isolation", "chroot"]
    for key, value in (env or {}).items():
        args += ["--env", f"{key}={value}"]
    for volume in volumes:
        args += ["--volume", volume]
    return [*args, container, "--", *command]


def _run(container: str, *command, env=None, volumes=()) -> str:
    """A command in the container, as the image's user, in its working directory; its stdout."""
    out = subprocess.run(_run_args(container, *command, env=env, volumes=volumes),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"{' '.join(command)}:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}"
    return out.stdout


@pytest.fixture(scope="module")
def image():
    """`make image`, the documented command, run here with buildah and the debootstrapped base."""
    if os.geteuid() != 0:
        pytest.skip("buildah builds as root here (CI runs as root)")
    if shutil.which("buildah") is None or shutil.which("make") is None:
        pytest.skip("buildah is missing: run `sh tools/install_image_builder.sh` as root (make test does)")
    if _buildah("inspect", "--type", "image", BASE, check=False).returncode != 0:
        pytest.skip(f"the base {BASE} is missing: run `sh tools/install_image_builder.sh` as root "
                    "(make test does; it debootstraps Debian 12 from Debian's archive)")
    started = time.monotonic()
    out = subprocess.run(["nice", "-n", "10", "make", "image", f"IMAGE={IMAGE}", f"IMAGE_BASE={BASE}",
                          "IMAGE_TOOL=buildah"], cwd=ROOT, capture_output=True, text=True,
                         timeout=BUILD_LIMIT_S)
    assert out.returncode == 0, f"make image failed:\n{out.stdout[-4000:]}\n{out.stderr[-4000:]}"
    print(f"make image built {IMAGE} in {time.monotonic() - started:.0f} s")
    return IMAGE


@pytest.fixture
def container(image):
    """A fresh container of the image (buildah's working container), removed afterwards."""
    name = _buildah("from", "--pull=never", image).stdout.strip().splitlines()[-1]
    yield name
    _buildah("rm", name, check=False)


def _config(image: str) -> dict:
    return json.loads(_buildah("inspect", "--type", "image", image).stdout)["OCIv1"]["config"]


def test_make_image_is_the_documented_command_and_builds_the_dockerfile(image):
    plan = subprocess.run(["make", "-n", "-s", "image", "IMAGE=registry.example/allocator-course:2026.11",
                           "IMAGE_TOOL=docker"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert plan.returncode == 0, plan.stderr
    commands = [" ".join(line.split()) for line in plan.stdout.splitlines()]
    assert ("docker build -f workshop/Dockerfile -t registry.example/allocator-course:2026.11 "
            "--build-arg CUDA_WHEELS=yes .") in commands, commands
    slim = subprocess.run(["make", "-n", "-s", "image", "IMAGE=registry.example/allocator-course:2026.11",
                           "IMAGE_TOOL=docker", "IMAGE_CUDA=no"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert "--build-arg CUDA_WHEELS=no" in slim.stdout, slim.stdout     # the slim image for simulated rooms
    for guide in (ROOT / "README.md", WORKSHOP / "README.md", WORKSHOP / "z2jh-values.yaml"):
        assert "make image IMAGE=" in guide.read_text(), f"{guide.name} does not give the command"
    # the values file's image is this one: its user, working directory and entrypoint
    config = _config(image)
    assert config["User"] == "jovyan"
    assert config["WorkingDir"] == SINGLE["storage"]["homeMountPath"]
    assert config["Entrypoint"] == [f"{SRV}/start"]


def test_the_course_imports_and_the_single_user_server_is_the_hubs(container):
    where = _run(container, "python", "-c", "import allocator_ref; print(allocator_ref.__file__)")
    assert where.strip() == "/opt/venv/lib/python3.11/site-packages/allocator_ref/__init__.py"
    version = _run(container, "jupyterhub-singleuser", "--version").strip()
    # the chart's hub is JupyterHub 5.5 (the values file says so): the same major version
    hub = re.search(r"JupyterHub (\d+)\.(\d+)", (WORKSHOP / "z2jh-values.yaml").read_text())
    assert hub, "the values file no longer names the chart's JupyterHub version"
    assert version.split(".")[0] == hub.group(1), f"jupyterhub-singleuser {version} vs the chart's hub {hub.group(0)}"
    assert "python3" in _run(container, "jupyter", "kernelspec", "list")
    extensions = _run(container, "sh", "-c", "jupyter server extension list 2>&1")
    assert re.search(r"nbgitpuller\s.*enabled", extensions), extensions     # the git-pull links
    uid, gid = _chart_user()
    assert _run(container, "id", "-u").strip() == str(uid)
    assert _run(container, "id", "-g").strip() == str(gid)


def test_the_course_is_where_the_values_file_expects(container):
    env = SINGLE["extraEnv"]
    settings = env["ALLOCATOR_REF_SETTINGS"]
    config = env["JUPYTER_CONFIG_PATH"] + "/jupyter_server_config.json"
    assert settings.startswith(SRV + "/") and config.startswith(SRV + "/")
    listing = _run(container, "sh", "-c",
                   f"test -f {settings} && test -f {config} && test -x {SRV}/start "
                   f"&& test -f {SRV}/chapters/00_setup_and_tour.ipynb && ls -A {SRV}")
    # the repository's files, not what .gitignore keeps out of it (.dockerignore)
    names = set(listing.split())
    assert {"allocator_ref", "chapters", "labs", "workshop", "pyproject.toml", "start"} <= names
    assert not names & {".venv", ".git", "build", "_build"}, names
    assert not _run(container, "sh", "-c", f"ls -A {SRV}/workshop").count("node_modules")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_pods_pull_environment_and_server_work(image, container, tmp_path):
    """What a learner's pod does: the values' postStart pull into the home, then the values'
    environment, then the server: run here in the container, from a local copy of the course's
    repository in place of GitHub (nothing here reaches GitHub)."""
    # the repository as a remote, committed state only (what the pull takes), branch main,
    # owned by the learner's uid (git refuses another user's repository)
    remote = tmp_path / "course.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(ROOT), str(remote)], check=True, timeout=120)
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    subprocess.run(["git", "-C", str(remote), "update-ref", "refs/heads/main", head], check=True)
    uid, gid = _chart_user()
    subprocess.run(["chown", "-R", f"{uid}:{gid}", str(remote)], check=True)

    hook = list(SINGLE["lifecycleHooks"]["postStart"]["exec"]["command"])
    assert hook[0] == "gitpuller" and hook[2] == "main"
    hook[1] = "/tmp/course.git"
    _run(container, *hook, volumes=[f"{remote}:/tmp/course.git:ro"])
    copy = hook[3]
    assert _run(container, "stat", "-c", "%u", f"{copy}/chapters").strip() == str(uid)

    # the values' environment, through the image's entrypoint (./start), for hub user "ada"
    env = {**{k: str(v) for k, v in SINGLE["extraEnv"].items()}, "JUPYTERHUB_USER": "ada"}
    probe = ("import os, json, allocator_ref, allocator_ref.settings as s\n"
             "from allocator_ref.labs.check import resolve_seed\n"
             "print(json.dumps([allocator_ref.__file__, os.environ['LOGNAME'], s.value('device'), resolve_seed()]))")
    where, name, device, _seed = json.loads(_run(container, f"{SRV}/start", "python", "-c", probe, env=env))
    assert where == f"{copy}/allocator_ref/__init__.py"        # the learner's copy comes first
    assert (name, device) == ("ada", "sim")

    # the server (the image's own command): its root is the home, so the values' defaultUrl is the
    # pulled chapter 0, and .jupyter-course from the image hides the chapters' .md twins
    port, token = _free_port(), "image-test"
    cmd = _config(image)["Cmd"]
    assert cmd[:2] == ["jupyter", "lab"]
    server = subprocess.Popen(
        _run_args(container, f"{SRV}/start", "jupyter", "lab", "--ip=127.0.0.1", f"--port={port}",
                  "--no-browser", f"--ServerApp.token={token}", env=env),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        url = SINGLE["defaultUrl"].replace("/lab/tree/", "/api/contents/", 1)
        chapter = _get_json(f"http://127.0.0.1:{port}{url}?content=0&token={token}", server)
        assert chapter["type"] == "notebook" and chapter["path"] == url.removeprefix("/api/contents/")
        folder = url.removeprefix("/api/contents/").rsplit("/", 1)[0]
        listing = _get_json(f"http://127.0.0.1:{port}/api/contents/{folder}?token={token}", server)
        names = {item["name"] for item in listing["content"]}
        assert "00_setup_and_tour.ipynb" in names
        assert not [n for n in names if n.endswith(".md") and re.match(r"\d\d_", n)], names
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.communicate()


def _get_json(url: str, server: subprocess.Popen, wait_s: float = 90) -> dict:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                return json.load(response)
        except urllib.error.HTTPError as exc:
            pytest.fail(f"{url.split('?')[0]}: HTTP {exc.code}")
        except OSError as exc:
            if server.poll() is not None:
                pytest.fail(f"the server stopped: {server.stdout.read().decode()[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"no answer from {url.split('?')[0]} in {wait_s:.0f} s: {exc}")
            time.sleep(0.5)
