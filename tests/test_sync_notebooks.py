"""make sync-notebooks (tools/sync_notebooks.py) never loses an edit and never rewrites an untouched pair.

On a scratch git clone of two chapters and a lab source, as the instructor meets it: an .md edit
against a newer-stamped .ipynb holding the older text (what `jupytext --sync` got wrong), an
.ipynb edit, both sides edited (refused, with the command that keeps either), and pairs nobody
touched (not a byte or a time stamp changed).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FILES = ("chapters/00_setup_and_tour", "chapters/01_what_cudamalloc_costs", "labs/source/lab01_measure_it")


def _sync(course: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(ROOT / "tools" / "sync_notebooks.py"), "--root", str(course), *args],
                          capture_output=True, text=True, env=env, cwd=course)


@pytest.fixture
def course(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is needed: the last sync before any is the committed .md")
    for name in FILES:
        for suffix in (".md", ".ipynb"):
            dest = tmp_path / (name + suffix)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / (name + suffix), dest)
    git = ["git", "-C", str(tmp_path), "-c", "user.name=i", "-c", "user.email=i@example.org"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "course"], check=True)
    return tmp_path


def _snapshot(course: Path, name: str):
    return [((course / (name + s)).read_bytes(), (course / (name + s)).stat().st_mtime_ns) for s in (".md", ".ipynb")]


def _newer(path: Path):
    later = time.time() + 60
    os.utime(path, (later, later))


def test_an_md_edit_wins_over_a_newer_stamped_ipynb_and_untouched_pairs_stay(course):
    md = course / "chapters" / "00_setup_and_tour.md"
    md.write_text(md.read_text().replace("# ", "# Edited: ", 1))
    _newer(md.with_suffix(".ipynb"))                         # saved later, with the older text
    untouched = {name: _snapshot(course, name) for name in FILES[1:]}
    out = _sync(course)
    assert out.returncode == 0, out.stderr
    assert "Edited: " in md.read_text()                       # the source's edit is kept ...
    assert "Edited: " in md.with_suffix(".ipynb").read_text()  # ... and copied into its pair
    assert "the .md was edited" in out.stdout
    for name, before in untouched.items():
        assert _snapshot(course, name) == before, f"{name} was rewritten though nobody touched it"
    again = _snapshot(course, FILES[0])
    assert _sync(course).returncode == 0 and _snapshot(course, FILES[0]) == again      # idempotent


def test_an_ipynb_edit_is_copied_into_the_md_then_a_later_md_edit_still_wins(course):
    import nbformat
    nb_path = course / "labs" / "source" / "lab01_measure_it.ipynb"
    nb = nbformat.read(nb_path, as_version=4)
    nb.cells[-1].source += "\n\nA line added in JupyterLab."
    nbformat.write(nb, nb_path)
    out = _sync(course)
    md = nb_path.with_suffix(".md")
    assert out.returncode == 0 and "A line added in JupyterLab." in md.read_text(), out.stderr
    md.write_text(md.read_text().replace("A line added in JupyterLab.", "A line edited in the .md."))
    out = _sync(course)                 # the last sync (recorded) says the .ipynb is untouched since
    assert out.returncode == 0, out.stderr
    assert "A line edited in the .md." in nb_path.read_text()


def test_both_sides_edited_is_refused_with_the_command_that_keeps_either(course):
    import nbformat
    md = course / "chapters" / "01_what_cudamalloc_costs.md"
    nb_path = md.with_suffix(".ipynb")
    md.write_text(md.read_text().replace("# ", "# From the md: ", 1))
    nb = nbformat.read(nb_path, as_version=4)
    nb.cells[-1].source += "\n\nFrom the notebook."
    nbformat.write(nb, nb_path)
    before = _snapshot(course, FILES[1])
    out = _sync(course)
    assert out.returncode == 1
    assert "REFUSED chapters/01_what_cudamalloc_costs.md" in out.stderr
    assert "make sync-notebooks KEEP=chapters/01_what_cudamalloc_costs.md" in out.stderr
    assert _snapshot(course, FILES[1]) == before                 # nothing written for that pair
    out = _sync(course, "--keep", "chapters/01_what_cudamalloc_costs.ipynb")
    assert out.returncode == 0, out.stderr
    assert "From the notebook." in md.read_text() and "From the md: " not in md.read_text()


def test_keep_names_a_pair_or_is_refused(course):
    out = _sync(course, "--keep", "README.md")
    assert out.returncode == 2 and "KEEP=README.md is not the .md or .ipynb" in out.stderr
