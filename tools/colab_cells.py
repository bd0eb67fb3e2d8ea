"""The two cells at the top of every chapter and lab that make it run on Google Colab.

1. a markdown cell: an "Open in Colab" link to this very notebook on GitHub;
2. a code cell (tags ``colab`` and ``remove-cell``: the website leaves it out) that, on Colab
   only, clones the course, installs it, and moves into the notebook's folder, so the cells
   after it run as they do in JupyterLab.  Anywhere else it does nothing, and its source is
   collapsed (``jupyter.source_hidden``: JupyterLab shows a "..." bar), so a notebook opens
   on its title, not on installation code.

The repository the links and the clone point at is ``[project.urls] Repository`` in
pyproject.toml.  Publishing the course under another name is one command::

    python tools/colab_cells.py --repo https://github.com/OWNER/NAME   # pyproject, cells, badges
    python tools/colab_cells.py            # (re)writes the cells from pyproject.toml
    python tools/colab_cells.py --check    # exit 1 if a notebook's cells are missing or stale

Then `jupytext --sync` the notebooks and regenerate the student copies (`make student`);
without --check this tool does both.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BRANCH = "main"
SOURCES = ("chapters/*.md", "labs/source/*.md")
CELL_MARK = "# colab-bootstrap"

# Colab already has numpy, matplotlib, ipywidgets, tqdm, IPython; the course adds these.
COLAB_EXTRA = ["sortedcontainers>=2.4"]

BOOTSTRAP = '''\
{mark}: on Google Colab, fetch and install the course first; anywhere else this does nothing.
import os, subprocess, sys
if "google.colab" in sys.modules:
    repo = os.environ.get("ALLOCATOR_COURSE_REPO", "{repo}")
    root = os.environ.get("ALLOCATOR_COURSE_DIR", "/content/allocator-course")
    if not os.path.isdir(root):
        subprocess.run(["git", "clone", "--depth", "1", "--branch", "{branch}", repo, root], check=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "-e", root,
                    {extra}], check=True)
    here = os.path.join(root, "{folder}")        # where JupyterLab would run this notebook
    sys.path[:0] = [here, root]                  # its helpers and the course, without a restart
    os.chdir(here)
    from google.colab import output
    output.enable_custom_widget_manager()        # the course's widgets (block-map players)'''


def repository() -> str:
    urls = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"].get("urls", {})
    if "Repository" not in urls:
        raise SystemExit("pyproject.toml has no [project.urls] Repository: set it with --repo URL")
    return urls["Repository"].rstrip("/")


def notebook_of(md: Path) -> tuple[str, str]:
    """(the notebook learners open, relative to the repository; the folder it runs in)."""
    if md.parent.name == "source" and md.parent.parent.name == "labs":
        return f"labs/student/{md.stem}.ipynb", "labs/student"   # learners open the student copy
    return f"{md.parent.name}/{md.stem}.ipynb", md.parent.name


def colab_url(repo: str, notebook: str) -> str:
    slug = re.sub(r"^https://github\.com/", "", repo)
    return f"https://colab.research.google.com/github/{slug}/blob/{BRANCH}/{notebook}"


def cells_text(md: Path, repo: str) -> str:
    """The two cells, as MyST markdown (jupytext's format for these files)."""
    notebook, folder = notebook_of(md)
    code = BOOTSTRAP.format(mark=CELL_MARK, repo=repo, branch=BRANCH, folder=folder,
                            extra=", ".join(f'"{e}"' for e in COLAB_EXTRA))
    return (f'+++ {{"tags": ["colab"]}}\n\n'
            f"[Open in Colab]({colab_url(repo, notebook)}) to run this notebook on "
            f"Google's machines (the next cell installs the course there; here it does nothing).\n\n"
            f"```{{code-cell}} ipython3\n---\njupyter:\n  source_hidden: true\n"
            f"tags: [colab, remove-cell]\n---\n{code}\n```\n\n")


def split_front_matter(text: str) -> tuple[str, str]:
    if not text.startswith("---\n"):
        raise ValueError("a jupytext MyST file starts with its '---' front matter")
    end = text.index("\n---\n", 4) + 5
    return text[:end], text[end:]


def strip_cells(body: str) -> str:
    """The body without our two cells (whatever repository they pointed at)."""
    body = body.lstrip("\n")
    if not body.startswith('+++ {"tags": ["colab"]}'):
        return body
    end = body.index("\n```\n", body.index(CELL_MARK)) + len("\n```\n")
    rest = body[end:].lstrip("\n")
    return rest[len("+++\n"):].lstrip("\n") if rest.startswith("+++\n") else rest


def rewrite(md: Path, repo: str) -> bool:
    """Put the current cells at the top of `md`; True when the file changed."""
    text = md.read_text(encoding="utf-8")
    front, body = split_front_matter(text)
    new = front + "\n" + cells_text(md, repo) + strip_cells(body)
    if new == text:
        return False
    md.write_text(new, encoding="utf-8")
    return True


def sources() -> list[Path]:
    return sorted(p for pattern in SOURCES for p in ROOT.glob(pattern))


# Files that name the repository besides the notebooks (badges, the Kubernetes pull).
ALSO_NAMING = ("README.md", "workshop/README.md", "workshop/z2jh-values.yaml")


def set_repository(url: str) -> None:
    """Point pyproject.toml, the README badges and the Kubernetes pull at `url`."""
    url = url.rstrip("/")
    if not re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", url):
        raise SystemExit(f"--repo {url!r}: give the GitHub URL, https://github.com/OWNER/NAME")
    old = repository()
    old_slug, new_slug = old.removeprefix("https://github.com/"), url.removeprefix("https://github.com/")
    path = ROOT / "pyproject.toml"
    text, n = re.subn(r'(?m)^Repository = ".*"$', f'Repository = "{url}"', path.read_text())
    if n != 1:
        raise SystemExit("pyproject.toml: expected one 'Repository = \"...\"' line under [project.urls]")
    path.write_text(text)
    for name in ALSO_NAMING:
        other = ROOT / name
        if other.exists():
            other.write_text(other.read_text().replace(old_slug, new_slug))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only report missing or stale cells")
    parser.add_argument("--repo", help="publish under this GitHub URL (rewrites pyproject.toml)")
    args = parser.parse_args(argv)
    if args.repo:
        set_repository(args.repo)
    repo = repository()
    if args.check:
        stale = [p for p in sources() if not split_front_matter(p.read_text(encoding="utf-8"))[1]
                 .lstrip("\n").startswith(cells_text(p, repo))]
        for p in stale:
            print(f"{p.relative_to(ROOT)}: Colab cells missing or stale; run python tools/colab_cells.py")
        return 1 if stale else 0
    changed = [p for p in sources() if rewrite(p, repo)]
    if changed:
        subprocess.run([str(Path(sys.executable).parent / "jupytext"), "--sync", *map(str, changed)],
                       check=True, cwd=ROOT)
        subprocess.run([sys.executable, "-m", "allocator_ref.labs.generate"], check=True, cwd=ROOT)
    print(f"{len(changed)} notebook(s) updated")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
