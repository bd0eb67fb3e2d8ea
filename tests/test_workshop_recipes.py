"""The recipes for rooms this machine cannot host: Binder's image and Zero to JupyterHub.

There is no Docker daemon and no Kubernetes cluster on the CI machine, so this checks what can
be checked without them:

* repo2docker (what Binder runs) plans Binder's image from the repository as it is: its
  ``--no-build`` Dockerfile installs the root ``environment.yml`` (nothing overrides it) with
  the Python it names, and runs ``./start`` before every command;
* ``./start`` gives a hosted learner the room's settings and their hub user name as the seed;
* ``workshop/z2jh-values.yaml`` validates against the pinned chart's (4.4.0) own values schema,
  merged over the chart's defaults as helm does (``../shared/z2jh``, skipped with the reason when
  absent); its hub settings are real JupyterHub settings, its pull lands in the persistent home and
  is the local hub's pull, and its memory sizes cover what ``tools/measure_chapter_memory.py``
  measured.

The Zero to JupyterHub image (``make image``, workshop/Dockerfile) is built and run by
tests/test_workshop_image.py.  Not tested anywhere here, because nothing here can run it:
repo2docker's build to the end (no Docker engine, no conda channel) and a cluster deployment.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKSHOP = ROOT / "workshop"
sys.path.insert(0, str(WORKSHOP))
from pull import COURSE_FOLDER  # noqa: E402

CHART = "4.4.0"
Z2JH = ROOT.parent / "shared" / "z2jh"           # the pinned chart's values.schema.yaml and values.yaml
REPO = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"]
VALUES = yaml.safe_load((WORKSHOP / "z2jh-values.yaml").read_text())
MEMORY = json.loads((WORKSHOP / "chapter-memory.json").read_text())


def mib(size: str) -> float:
    """A Kubernetes quantity (512M, 1G, 1Gi) in MiB: M and G are powers of 1000, Mi and Gi of 1024."""
    number, unit, binary = re.fullmatch(r"([\d.]+)([KMG])(i?)", str(size)).groups()
    base = 1024 if binary else 1000
    return float(number) * base ** ("KMG".index(unit) + 1) / 2**20


# ------------------------------------------------------------------ Zero to JupyterHub

def test_values_file_parses_into_the_sections_the_room_needs():
    assert isinstance(VALUES, dict), "workshop/z2jh-values.yaml is not a YAML mapping"
    for section in ("hub", "singleuser", "cull", "prePuller"):
        assert isinstance(VALUES.get(section), dict), f"z2jh-values.yaml has no {section}: section"
    single = VALUES["singleuser"]
    for key in ("image", "memory", "cpu", "lifecycleHooks", "extraEnv", "storage"):
        assert key in single, f"singleuser.{key} is missing"
    assert single["image"]["name"] and str(single["image"]["tag"]), "singleuser.image needs a name and tag"
    assert VALUES["prePuller"]["continuous"]["enabled"] is True       # image on every node early
    cpu = single["cpu"]
    assert 0 < float(cpu["guarantee"]) <= float(cpu["limit"]), f"singleuser.cpu: {cpu}"


def _coalesce(defaults, values):
    """Helm's merge of a user's values over a chart's defaults (chartutil.CoalesceTables): maps
    merge key by key, anything else replaces, and a null deletes the default's key."""
    if not (isinstance(defaults, dict) and isinstance(values, dict)):
        return values
    merged = dict(defaults)
    for key, value in values.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = _coalesce(defaults.get(key), value)
    return merged


def _schema():
    path = Z2JH / "values.schema.yaml"
    if not path.exists():
        pytest.skip(f"{path} is absent: the pinned chart's schema comes with the course's shared/ folder")
    return yaml.safe_load(path.read_text())


def _without_required(schema):
    """The schema less its `required` lists: what is left to check when the chart's defaults
    (which supply every required key) are not at hand."""
    if isinstance(schema, dict):
        return {k: _without_required(v) for k, v in schema.items() if k != "required"}
    if isinstance(schema, list):
        return [_without_required(v) for v in schema]
    return schema


def _errors(schema, values) -> list[str]:
    import jsonschema
    validator = jsonschema.Draft7Validator(schema)
    return sorted(f"{'.'.join(map(str, e.absolute_path)) or '(top)'}: {e.message[:200]}"
                  for e in validator.iter_errors(values))


def test_the_chart_is_pinned_everywhere_it_is_named():
    text = (WORKSHOP / "z2jh-values.yaml").read_text() + (WORKSHOP / "README.md").read_text()
    installs = re.findall(r"helm (?:upgrade --install|install|template)[^\n]*(?:\\\n[^\n]*)*", text)
    assert installs, "no helm command in the values file or the guide"
    for command in installs:
        assert f"--version {CHART}" in command, command
    provenance = Z2JH / "PROVENANCE.md"
    if provenance.exists():                  # the schema the tests read is that version's
        assert f"chart {CHART}" in provenance.read_text()


def test_values_validate_against_the_pinned_charts_schema_as_helm_does():
    schema = _schema()
    defaults = Z2JH / "values.yaml"
    if not defaults.exists():
        pytest.skip(f"{defaults} is absent: helm validates the values merged over the chart's defaults "
                    "(test_values_validate_against_the_schema_less_required checks the rest)")
    merged = _coalesce(yaml.safe_load(defaults.read_text()), VALUES)
    assert _errors(schema, merged) == []


def test_values_validate_against_the_schema_less_required():
    assert _errors(_without_required(_schema()), VALUES) == []


def test_the_schema_check_catches_a_misspelt_key_and_a_wrong_type():
    schema = _without_required(_schema())
    typo = _coalesce(VALUES, {"singleuser": {"memroy": {"limit": "1G"}}})
    assert any("memroy" in e for e in _errors(schema, typo))
    wrong = _coalesce(VALUES, {"cull": {"timeout": "an hour"}})
    assert any(e.startswith("cull.timeout") for e in _errors(schema, wrong))


def test_the_room_serves_https_only_merged_over_the_charts_defaults():
    """proxy.https on, as helm renders it: Let's Encrypt for a named host (or a certificate of the
    room's own), the plain HTTP port kept only for the redirect and the ACME challenge."""
    defaults = Z2JH / "values.yaml"
    if not defaults.exists():
        pytest.skip(f"{defaults} is absent: the chart's defaults come with the course's shared/ folder")
    merged = _coalesce(yaml.safe_load(defaults.read_text()), VALUES)
    assert _errors(_schema(), merged) == []
    https = merged["proxy"]["https"]
    assert https["enabled"] is True and https["hosts"], https
    assert https["type"] in ("letsencrypt", "secret", "manual"), https["type"]
    if https["type"] == "letsencrypt":
        assert "@" in (https["letsencrypt"]["contactEmail"] or ""), "Let's Encrypt needs a contact e-mail"
        assert merged["proxy"]["service"]["disableHttpPort"] is False     # its challenge comes on port 80
    off = _coalesce(merged, {"proxy": {"https": {"enabled": "yes"}}})
    assert any(e.startswith("proxy.https.enabled") for e in _errors(_schema(), off))   # the schema bites


def test_the_instructor_is_preset_from_a_secret_not_whoever_logs_in_first(tmp_path):
    """hub.extraConfig's PresetInstructor, run as the hub runs it, with the Secret's file: the
    instructor's password works, a learner claiming the name first gets nothing."""
    import asyncio
    from traitlets.config import Config
    hub = VALUES["hub"]
    mount = next(m for m in hub["extraVolumeMounts"] if m["name"] == "course-instructor")
    assert any(v.get("secret", {}).get("secretName") == "course-instructor" for v in hub["extraVolumes"])
    code = hub["extraConfig"]["instructor.py"]
    secret = tmp_path / "password"
    secret.write_text("the-instructors-own-password\n")
    c = Config()
    exec(compile(code.replace(mount["mountPath"] + "/password", str(secret)), "instructor.py", "exec"), {"c": c})
    Preset = c.JupyterHub.authenticator_class
    auth = Preset(dbm_path=str(tmp_path / "passwords.dbm"), min_password_length=8)
    login = lambda name, password: asyncio.run(auth.authenticate(None, {"username": name, "password": password}))
    assert login("instructor", "a-learner-was-first") is None
    assert login("instructor", "the-instructors-own-password") is not None
    assert "instructor" in hub["config"]["Authenticator"]["admin_users"]


def test_the_graders_role_is_real_jupyterhub_scopes():
    from jupyterhub.scopes import scope_definitions
    role = VALUES["hub"]["loadRoles"]["grader"]
    assert role["users"] == ["instructor"] and set(role["scopes"]) <= set(scope_definitions), role
    assert "access:servers" in role["scopes"]                   # what hand-out and collect need


def test_the_slim_image_leaves_the_cuda_wheels_out_on_request():
    dockerfile = (WORKSHOP / "Dockerfile").read_text()
    assert "ARG CUDA_WHEELS=yes" in dockerfile and "'$CUDA_WHEELS' != 'no'" in dockerfile
    assert "--build-arg CUDA_WHEELS=$(IMAGE_CUDA)" in (ROOT / "Makefile").read_text()
    assert "IMAGE_CUDA=no" in (WORKSHOP / "z2jh-values.yaml").read_text()


def test_hub_settings_are_real_jupyterhub_settings():
    from firstuseauthenticator import FirstUseAuthenticator
    from jupyterhub.app import JupyterHub
    from jupyterhub.auth import Authenticator
    classes = {c.__name__: c for c in (JupyterHub, Authenticator, FirstUseAuthenticator)}
    for section, settings in VALUES["hub"]["config"].items():
        assert section in classes, f"hub.config.{section}: not a class this test knows"
        traits = classes[section].class_traits(config=True)
        for name in settings:
            assert name in traits, f"hub.config.{section}.{name} is not a JupyterHub setting"
    # the local hub's rule: a name belongs to whoever claimed it first (FirstUseAuthenticator)
    from importlib.metadata import entry_points
    name = VALUES["hub"]["config"]["JupyterHub"]["authenticator_class"]
    found = {e.name: e.value for e in entry_points(group="jupyterhub.authenticators")}
    assert found.get(name) == "firstuseauthenticator:FirstUseAuthenticator", name
    assert "instructor" in VALUES["hub"]["config"]["Authenticator"]["admin_users"]


def test_the_pull_and_environment_match_the_local_hub():
    single = VALUES["singleuser"]
    command = single["lifecycleHooks"]["postStart"]["exec"]["command"]
    home = single["storage"]["homeMountPath"]
    # into the persistent home, by an absolute path: the home is the chart's volume, kept when an
    # idle server is culled (and the image's working directory: tests/test_workshop_image.py)
    assert command == ["gitpuller", REPO, "main", f"{home}/{COURSE_FOLDER}"]
    assert single["extraEnv"]["PYTHONPATH"] == f"{home}/{COURSE_FOLDER}"
    # the image's copy (workshop/Dockerfile), there before the postStart pull has run
    assert single["extraEnv"]["JUPYTER_CONFIG_PATH"] == "/srv/allocator-course/.jupyter-course"
    assert (ROOT / ".jupyter-course" / "jupyter_server_config.json").is_file()
    settings = single["extraEnv"]["ALLOCATOR_REF_SETTINGS"]
    assert settings == "/srv/allocator-course/workshop/course-settings.toml"
    assert (ROOT / "workshop" / "course-settings.toml").is_file()
    url = single["defaultUrl"]
    assert url == f"/lab/tree/{COURSE_FOLDER}/chapters/00_setup_and_tour.ipynb"
    assert (ROOT / url.removeprefix(f"/lab/tree/{COURSE_FOLDER}/")).is_file()
    from pull import FIRST_PAGE                    # the local hub's landing page (WORKSHOP_FIRST_PAGE unset)
    assert url == f"/lab/tree/{COURSE_FOLDER}/{FIRST_PAGE}"
    assert "or FIRST_PAGE}" in (WORKSHOP / "jupyterhub_config.py").read_text()


def _pull_link(*args: str) -> dict:
    from urllib.parse import parse_qs, urlparse
    env = {k: v for k, v in os.environ.items() if k not in ("WORKSHOP_REPO", "WORKSHOP_BRANCH", "WORKSHOP_GRADED")}
    out = subprocess.run(["make", "-s", "--no-print-directory", "pull-link", *args, f"PY={sys.executable}", "STAMP="],
                         cwd=ROOT, capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    link = urlparse(out.stdout.strip())
    assert (link.scheme, link.path) == ("https", "/hub/user-redirect/git-pull")
    return {"netloc": link.netloc, **{k: v[0] for k, v in parse_qs(link.query).items()}}


def test_the_pull_link_for_a_mid_workshop_fix_lands_in_each_learners_copy():
    """make pull-link: nbgitpuller's git-pull URL into the same folder the hub's pull uses, from the
    repository that room pulls: the one-machine hub's checkout (a hub on this machine)."""
    query = _pull_link("HUB=https://127.0.0.1:8000/", "PAGE=labs/student/lab02_build_the_core.ipynb")
    assert query == {"netloc": "127.0.0.1:8000", "repo": str(ROOT), "branch": "main", "targetpath": COURSE_FOLDER,
                     "urlpath": f"lab/tree/{COURSE_FOLDER}/labs/student/lab02_build_the_core.ipynb"}
    assert (ROOT / "labs/student/lab02_build_the_core.ipynb").is_file()


def test_the_pull_link_for_the_cluster_names_the_repository_the_cluster_pulls():
    """A hub elsewhere (the cluster) pulls the values file's repository: the link names it, never this
    machine's path (issue 53: it printed the instructor's checkout); WORKSHOP_REPO still wins."""
    query = _pull_link("HUB=https://room.example.org:8000/")
    assert query["netloc"] == "room.example.org:8000" and query["repo"] == REPO
    assert VALUES["singleuser"]["lifecycleHooks"]["postStart"]["exec"]["command"][1] == REPO
    mine = _pull_link("HUB=https://room.example.org", "WORKSHOP_REPO=https://git.example.org/c.git",
                      "WORKSHOP_BRANCH=fix")
    assert (mine["repo"], mine["branch"]) == ("https://git.example.org/c.git", "fix")


def test_the_pull_link_of_a_graded_room_names_its_course_without_solutions():
    query = _pull_link("HUB=https://localhost:8000", "WORKSHOP_GRADED=build/nbgrader")
    assert query["repo"] == str(ROOT / "build" / "nbgrader" / "course.git")


def test_memory_sizes_cover_the_measured_course():
    chapters = {p.stem for p in ROOT.glob("chapters/*.ipynb")}
    assert chapters <= set(MEMORY["chapters"]), (
        f"not measured: {sorted(chapters - set(MEMORY['chapters']))}; "
        "run python tools/measure_chapter_memory.py")
    server = MEMORY["server_idle_mib"]
    kernel = max(m["kernel_peak_mib"] for m in MEMORY["chapters"].values())
    with_children = max(m["kernel_peak_mib"] + m["child_processes_peak_mib"]
                        for m in MEMORY["chapters"].values())
    memory = VALUES["singleuser"]["memory"]
    assert with_children > 400            # chapter 7 with its replay process: the size that matters
    assert mib(memory["guarantee"]) >= server + with_children
    assert mib(memory["limit"]) >= server + with_children + kernel     # plus a second open notebook
    assert mib(memory["guarantee"]) <= mib(memory["limit"])


def test_idle_servers_are_culled():
    cull = VALUES["cull"]
    assert cull["enabled"] is True and 0 < cull["timeout"] <= 4 * 3600
    assert 0 < cull["every"] <= cull["timeout"]


# ------------------------------------------------------------------ repo2docker / Binder

def _environment_python() -> str:
    text = (ROOT / "environment.yml").read_text()
    return re.search(r"^\s*-\s*python=(\S+)", text, re.M).group(1)


@pytest.mark.slow
def test_repo2docker_plans_the_image_from_environment_yml_and_start():
    exe = Path(sys.executable).parent / "repo2docker"
    if not exe.exists():
        pytest.skip("pip install '.[publish]' for repo2docker (make test installs it)")
    # No Docker engine here (and conda-forge is out of reach), so repo2docker, run as Binder runs
    # it, is asked for its plan only: the Dockerfile it would build.
    command = [str(exe), "--no-build", "--debug", str(ROOT)]
    out = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    dockerfile, log = out.stdout, out.stderr
    assert f"Building conda environment for python={_environment_python()}" in log
    assert '--file "environment.yml"' in dockerfile           # the repository's own file
    assert 'R2D_ENTRYPOINT="${REPO_DIR}/start"' in dockerfile
    assert not (ROOT / "binder").exists() and not (ROOT / ".binder").exists(), \
        "a binder/ folder would make repo2docker ignore the root environment.yml"


def test_the_image_has_what_the_hub_and_the_pull_need():
    text = (ROOT / "environment.yml").read_text()
    for needed in ("jupyterhub>=5", "nbgitpuller", "jupyterlab", "- -e ."):
        assert needed in text, f"environment.yml lacks {needed}"


def test_start_gives_a_hosted_learner_the_room_settings_and_their_name(tmp_path):
    if shutil.which("bash") is None:
        pytest.skip("bash runs ./start")
    probe = ("import os, json, allocator_ref.settings as s\n"
             "from allocator_ref.labs.check import resolve_seed\n"
             "print(json.dumps([os.environ['LOGNAME'], s.value('device'), resolve_seed()]))")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLOCATOR_REF_")}
    env.update(REPO_DIR=str(ROOT), PYTHONPATH=str(ROOT), LOGNAME="jovyan", USER="jovyan")

    def run(**extra):
        out = subprocess.run(["bash", str(ROOT / "start"), sys.executable, "-c", probe],
                             env={**env, **extra}, capture_output=True, text=True, timeout=60,
                             cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    ada = run(JUPYTERHUB_USER="ada")
    grace = run(JUPYTERHUB_USER="grace")
    assert ada[:2] == ["ada", "sim"] and grace[:2] == ["grace", "sim"]
    assert ada[2] != grace[2]
    assert run()[0] == "jovyan"                    # Binder, no hub user: left alone
