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
