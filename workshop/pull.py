"""Give a learner their own copy of the course, the nbgitpuller way.

The first pull clones the course into the learner's home; every later pull
(each time their server starts) merges the instructor's new commits into it
and keeps what the learner changed: nbgitpuller commits the learner's edits
locally, merges upstream with "ours wins" on conflicts, and renames a learner's
untracked file rather than overwrite it.  So the instructor can push a fix in
the middle of a workshop and nobody loses their work.

The same pull runs in the three places the course is served:
- the local hub (workshop/jupyterhub_config.py calls `pull_course` before a
  learner's server starts),
- Zero to JupyterHub (workshop/z2jh-values.yaml runs `gitpuller` in the
  single-user pod's postStart hook),
- a learner's own click on an nbgitpuller link (`/hub/user-redirect/git-pull?...`).
"""
from __future__ import annotations

import subprocess
from pathlib import Path

from nbgitpuller import GitPuller

COURSE_FOLDER = "allocator-course"     # where the course lands in each home


class PullError(RuntimeError):
    """The course could not be pulled; the message names the repository and the git error."""


def pull_course(repo: str, branch: str, home: Path) -> Path:
    """Clone or update the course in `home`/allocator-course; returns that folder."""
    home.mkdir(parents=True, exist_ok=True)
    dest = home / COURSE_FOLDER
    puller = GitPuller(repo, str(dest), branch=branch, depth=1)
    try:
        for _line in puller.pull():        # a generator of git's output lines
            pass
    except subprocess.CalledProcessError as exc:
        raise PullError(f"could not pull the course from {repo!r} (branch {branch!r}) into "
                        f"{dest}: {exc}. Check WORKSHOP_REPO and WORKSHOP_BRANCH.") from None
    return dest


GRADED_FOLDER = "graded"               # allocator_ref/labs/grading.py collects from here
FIRST_PAGE = "chapters/00_setup_and_tour.ipynb"


def pull_link(hub: str, repo: str, branch: str = "main", page: str = FIRST_PAGE) -> str:
    """nbgitpuller's link: a learner who opens it pulls the course's new commits into their own
    copy (their edits win any conflict) and lands on `page`, without restarting their server."""
    from urllib.parse import urlencode
    query = urlencode({"repo": repo, "branch": branch, "targetpath": COURSE_FOLDER,
                       "urlpath": f"lab/tree/{COURSE_FOLDER}/{page}"})
    return f"{hub.rstrip('/')}/hub/user-redirect/git-pull?{query}"


def is_this_machine(url: str) -> bool:
    """Does `url`'s host name this machine (a loopback address, or one this machine can listen on)?
    A name that does not resolve here is another machine's: the cluster's."""
    import ipaddress
    import socket
    from urllib.parse import urlparse
    host = urlparse(url).hostname or ""
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except (socket.gaierror, UnicodeError):
        return False
    for address in addresses:
        ip = ipaddress.ip_address(address.split("%")[0])
        if ip.is_loopback:
            return True
        with socket.socket(socket.AF_INET6 if ip.version == 6 else socket.AF_INET) as probe:
            try:
                probe.bind((address, 0))       # only an address of this machine can be bound
                return True
            except OSError:
                continue
    return False


def cluster_repo(values: Path = Path(__file__).parent / "z2jh-values.yaml") -> str:
    """The repository the Kubernetes room pulls: gitpuller's first argument in the values file's postStart."""
    import yaml
    command = yaml.safe_load(values.read_text())["singleuser"]["lifecycleHooks"]["postStart"]["exec"]["command"]
    return command[1]


def room_repo(hub: str, graded: str | None = None) -> str:
    """What the room at `hub` pulls, for its pull link: the one-machine hub's (this checkout, or a
    graded room's course without solutions, WORKSHOP_GRADED/course.git: workshop/room_copy.py), else
    the cluster's (workshop/z2jh-values.yaml).  WORKSHOP_REPO, when set, wins (the Makefile passes it)."""
    if not is_this_machine(hub):
        return cluster_repo()
    if graded:
        from room_copy import ROOM_REPO
        return str(Path(graded).resolve() / ROOM_REPO)
    return str(Path(__file__).resolve().parents[1])


def hand_out(release: Path, home: Path) -> list[Path]:
    """A graded workshop: copy each released assignment (an nbgrader course's release/labNN/*.ipynb,
    from `make nbgrader`) into ~/graded/labNN/, once: a learner's started work is never replaced."""
    given = []
    for notebook in sorted(release.glob("*/*.ipynb")):
        dest = home / GRADED_FOLDER / notebook.parent.name / notebook.name
        if not dest.exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(notebook.read_bytes())
            given.append(dest)
    return given


if __name__ == "__main__":
    # The local hub runs this as the learner's own Unix user (so every file is theirs):
    #     python pull.py REPO BRANCH HOME [RELEASE]
    # and `make pull-link` prints the link for a mid-workshop fix:
    #     python pull.py --link HUB REPO BRANCH [PAGE]
    # (REPO -: the room's, room_repo() above; no PAGE: chapter 0 of the room's language, as the hub
    # lands learners: room_language.py)
    import os
    import sys
    import tempfile
    if sys.argv[1] == "--link":
        if len(sys.argv) < 6:
            from room_language import RoomLanguageError, first_page, room_language
            settings = Path(os.environ.get("WORKSHOP_SETTINGS") or Path(__file__).parent / "course-settings.toml")
            try:
                sys.argv[5:] = [first_page(room_language(settings))]
            except RoomLanguageError as exc:
                sys.exit(str(exc))
        if sys.argv[3] == "-":
            sys.argv[3] = room_repo(sys.argv[2], os.environ.get("WORKSHOP_GRADED"))
        print(pull_link(*sys.argv[2:]))
        sys.exit(0)
    repo, safe = Path(sys.argv[1]), None
    if repo.exists():
        # A course folder owned by the instructor (root): git refuses to read another user's
        # repository unless it is a safe.directory, and only global config counts for the
        # process that serves a local clone.  This file is the pull's global config, nothing more.
        safe = tempfile.NamedTemporaryFile("w", suffix=".gitconfig", delete=False)
        for path in {repo, repo.resolve(), repo / ".git", repo.resolve() / ".git"}:
            safe.write(f"[safe]\n\tdirectory = {path}\n")
        safe.close()
        os.environ["GIT_CONFIG_GLOBAL"] = safe.name
    try:
        print(pull_course(sys.argv[1], sys.argv[2], Path(sys.argv[3])))
    except PullError as exc:
        sys.exit(str(exc))
    finally:
        if safe is not None:
            os.unlink(safe.name)
    if len(sys.argv) > 4:
        for path in hand_out(Path(sys.argv[4]), Path(sys.argv[3])):
            print("handed out", path)
