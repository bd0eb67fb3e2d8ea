"""The Colab cells on top of every chapter and lab (tools/colab_cells.py).

* every chapter and lab (student copies included) starts with the "Open in Colab"
  link to *itself* and the bootstrap cell, for the repository in pyproject.toml, its source
  collapsed (jupyter.source_hidden) so a notebook opens on its title;
* outside Colab the bootstrap does nothing (no clone, same folder, same sys.path);
* on "Colab" it installs the course into a fresh virtual environment that has only
  what Colab preinstalls (numpy, matplotlib, ipywidgets, tqdm, IPython), from a
  local clone (ALLOCATOR_COURSE_REPO), and then chapter 0 runs top to bottom in
  that environment, in an IPython shell as Colab's kernel would run it.  The only
  network used is the package index, for those preinstalled packages.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import colab_cells  # noqa: E402

NOTEBOOKS = sorted([*ROOT.glob("chapters/*.ipynb"), *ROOT.glob("labs/source/*.ipynb"),
                    *ROOT.glob("labs/student/*.ipynb")])
REPO = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"]
COLAB_PREINSTALLED = ["numpy", "matplotlib", "ipywidgets", "tqdm", "ipython"]


def _bootstrap(nb) -> str:
    return next(c.source for c in nb.cells if colab_cells.CELL_MARK in c.source)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.relative_to(ROOT).as_posix() for p in NOTEBOOKS])
def test_every_notebook_opens_with_its_own_colab_link_and_the_bootstrap(path):
    nb = nbformat.read(path, as_version=4)
    link, boot = nb.cells[0], nb.cells[1]
    opened = "labs/student/" + path.name if path.parent.name in ("source", "student") \
        else path.relative_to(ROOT).as_posix()
    assert link.cell_type == "markdown" and colab_cells.colab_url(REPO, opened) in link.source
    assert boot.cell_type == "code" and boot.source.startswith(colab_cells.CELL_MARK)
    assert {"colab", "remove-cell"} <= set(boot.metadata.get("tags", []))
    assert f'"{REPO}"' in boot.source
    # off Colab it is out of view: JupyterLab collapses a cell whose source is hidden
    assert boot.metadata.get("jupyter", {}).get("source_hidden") is True, path.name


def test_the_cells_are_current_and_rewriting_them_is_idempotent(tmp_path):
    assert colab_cells.main(["--check"]) == 0
    src = ROOT / "chapters" / "00_setup_and_tour.md"
    copy = tmp_path / "chapters" / src.name
    copy.parent.mkdir()
    copy.write_text(src.read_text())
    assert colab_cells.rewrite(copy, "https://github.com/someone/fork") is True
    moved = copy.read_text()
    assert moved.count(colab_cells.CELL_MARK) == 1 and "someone/fork" in moved and REPO not in moved
    assert colab_cells.rewrite(copy, REPO) is True
    assert copy.read_text() == src.read_text()          # back to the published cells, nothing else moved


def test_outside_colab_the_bootstrap_does_nothing(tmp_path):
    nb = nbformat.read(ROOT / "chapters" / "00_setup_and_tour.ipynb", as_version=4)
    probe = (f"import os, sys\nbefore = (os.getcwd(), list(sys.path))\n"
             f"exec({_bootstrap(nb)!r})\n"
             f"assert (os.getcwd(), list(sys.path)) == before\nprint('untouched')")
    env = {**os.environ, "ALLOCATOR_COURSE_DIR": str(tmp_path / "course"),
           "ALLOCATOR_COURSE_REPO": str(tmp_path / "nowhere")}
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "untouched" in out.stdout, out.stderr
    assert not (tmp_path / "course").exists()


# What Colab's kernel has that a plain venv lacks: the google.colab module (loaded at start-up)
# with output.enable_custom_widget_manager(); this stand-in records the call.
FAKE_COLAB = {
    "google/__init__.py": "",
    "google/colab/__init__.py": "from . import output\n",
    "google/colab/output.py": "enabled = []\ndef enable_custom_widget_manager():\n    enabled.append(True)\n",
}

RUN_CHAPTER = r"""
import json, os, sys
import google.colab                                   # Colab's kernel has it loaded
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
cells = json.load(open(sys.argv[1]))
for i, source in enumerate(cells):
    result = shell.run_cell(source)
    if not result.success:
        raise SystemExit(f"cell {i} failed: {result.error_in_exec or result.error_before_exec!r}")
import allocator_ref
print(json.dumps({"cwd": os.getcwd(), "package": allocator_ref.__file__,
                  "widgets": google.colab.output.enabled}))
"""


@pytest.mark.slow
def test_on_colab_the_bootstrap_installs_the_course_and_chapter_0_runs(tmp_path):
    # the course as published: a clone of this checkout's HEAD (branch main)
    published = tmp_path / "published"          # this checkout's HEAD as branch main
    published.mkdir()
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(published)], input=archive.stdout, check=True)
    git = ["git", "-c", "user.name=instructor", "-c", "user.email=i@example.org", "-C", str(published)]
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "the course"]):
        subprocess.run(git + args, check=True)
    venv = tmp_path / "colab-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    pip = subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                          *COLAB_PREINSTALLED], capture_output=True, text=True, timeout=900)
    if pip.returncode != 0:
        pytest.skip(f"the package index cannot be reached for Colab's base packages: {pip.stderr[-300:]}")
    fake = tmp_path / "colab-site"
    for name, text in FAKE_COLAB.items():
        (fake / name).parent.mkdir(parents=True, exist_ok=True)
        (fake / name).write_text(text)
    nb = nbformat.read(ROOT / "chapters" / "00_setup_and_tour.ipynb", as_version=4)
    cells = [c.source for c in nb.cells
             if c.cell_type == "code" and "gpu" not in c.metadata.get("tags", [])]
    (tmp_path / "cells.json").write_text(json.dumps(cells))
    (tmp_path / "run.py").write_text(RUN_CHAPTER)
    content = tmp_path / "content"                      # Colab's working folder
    content.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PYTHONPATH=str(fake), MPLBACKEND="Agg", ALLOCATOR_REF_DEVICE="sim",
               ALLOCATOR_COURSE_REPO=str(published), ALLOCATOR_COURSE_DIR=str(content / "allocator-course"))
    out = subprocess.run([str(py), str(tmp_path / "run.py"), str(tmp_path / "cells.json")],
                         cwd=content, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    course = content / "allocator-course"
    assert Path(got["cwd"]) == course / "chapters"
    assert Path(got["package"]).resolve().is_relative_to(course.resolve())
    assert got["widgets"] == [True]
    assert (course / ".git").is_dir()


def test_readme_badges_and_workshop_section_point_at_the_published_course():
    readme = (ROOT / "README.md").read_text()
    slug = REPO.removeprefix("https://github.com/")
    assert f"https://mybinder.org/v2/gh/{slug}/main?urlpath=lab/tree/chapters/00_setup_and_tour.ipynb" in readme
    assert colab_cells.colab_url(REPO, "chapters/00_setup_and_tour.ipynb") in readme
    section = readme.split("## Run a workshop", 1)[1].split("\n## ", 1)[0]
    for way in ("Binder", "Colab", "make workshop", "z2jh-values.yaml", "workshop/README.md"):
        assert way in section, way


# Colab keeps the notebook in the browser and hands it to the kernel on request
# (google.colab._message.blocking_request("get_ipynb"), what editions/language.py asks); this stand-in
# hands over the notebook named by COLAB_NOTEBOOK.
FAKE_COLAB_MESSAGE = ("import json, os\n"
                      "def blocking_request(name, timeout_sec=None):\n"
                      "    assert name == 'get_ipynb', name\n"
                      "    return {'ipynb': json.load(open(os.environ['COLAB_NOTEBOOK'], encoding='utf-8'))}\n")

# The notebook's first code cells as Colab's kernel runs them; the bootstrap's pip install is skipped
# (the slow test above installs for real): the course is already at ALLOCATOR_COURSE_DIR.
RUN_FIRST_CELLS = r"""
import json, subprocess, sys
real_run = subprocess.run
def run(cmd, *args, **kwargs):
    if list(cmd[1:4]) == ["-m", "pip", "install"]:
        return subprocess.CompletedProcess(cmd, 0)
    return real_run(cmd, *args, **kwargs)
subprocess.run = run
import google.colab
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
for i, source in enumerate(json.load(open(sys.argv[1]))):
    if not shell.run_cell(source).success:
        raise SystemExit(f"cell {i} failed")
import os
print("cwd=" + os.getcwd())
"""


def _first_cells_on_colab(notebook: Path, tmp_path: Path) -> str:
    """Run the bootstrap and the next code cells of ``notebook`` (a copy in Colab's /content) as Colab would."""
    fake = tmp_path / "colab-site"
    for name, text in {**FAKE_COLAB, "google/colab/_message.py": FAKE_COLAB_MESSAGE}.items():
        (fake / name).parent.mkdir(parents=True, exist_ok=True)
        (fake / name).write_text(text)
    nb = nbformat.read(notebook, as_version=4)
    cells = [c.source for c in nb.cells if c.cell_type == "code" and "gpu" not in c.metadata.get("tags", [])][:3]
    (tmp_path / "cells.json").write_text(json.dumps(cells))
    (tmp_path / "run.py").write_text(RUN_FIRST_CELLS)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "ALLOCATOR_REF_LANG", "LC_ALL", "LC_MESSAGES", "LANG", "LANGUAGE",
                        "JPY_SESSION_NAME")}
    env.update(PYTHONPATH=str(fake), MPLBACKEND="Agg", ALLOCATOR_REF_DEVICE="sim", COLAB_NOTEBOOK=str(notebook),
               ALLOCATOR_COURSE_DIR=str(ROOT), ALLOCATOR_COURSE_REPO=str(tmp_path / "no-clone-needed"))
    out = subprocess.run([sys.executable, str(tmp_path / "run.py"), str(tmp_path / "cells.json")],
                         cwd=notebook.parent, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    return out.stdout


def test_on_colab_a_chinese_notebook_moved_out_of_its_folder_still_speaks_chinese(tmp_path):
    """Colab opens a notebook out of /content and the bootstrap moves the kernel into the English
    ``chapters/`` folder: the language comes from the notebook's own metadata, which Colab hands over."""
    content = tmp_path / "content"
    content.mkdir()
    moved = content / "00_setup_and_tour.ipynb"
    shutil.copy(ROOT / "chapters" / "zh" / "00_setup_and_tour.ipynb", moved)
    said = _first_cells_on_colab(moved, tmp_path)
    assert f"cwd={ROOT / 'chapters'}" in said                       # the English edition's folder
    assert "allocator_ref：使用 SimDevice" in said and "这是什么：模拟设备" in said, said
    assert "allocator_ref: using SimDevice" not in said
    # the same cells without the metadata's language speak English there: the metadata is what carried it
    nb = json.loads(moved.read_text(encoding="utf-8"))
    del nb["metadata"]["allocator_ref"]["language"]
    moved.write_text(json.dumps(nb), encoding="utf-8")
    said = _first_cells_on_colab(moved, tmp_path)
    assert "allocator_ref：使用 SimDevice" not in said and "SimDevice" in said, said
