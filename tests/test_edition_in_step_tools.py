"""The commands a maintainer runs fail when the Chinese edition is out of step, and render each notebook once.

``make student`` and ``make translations`` end with ``editions build``, ``make check-labs`` with
``editions check``: each must exit non-zero on an English paragraph whose Chinese was not refreshed (before, only ``editions check``
did), and the stale-copy check covers ``labs/student/zh``."""
from __future__ import annotations

import contextlib
import io
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from allocator_ref.editions import __main__ as editions_cli
from allocator_ref.editions import build, catalog, instep

ROOT = Path(__file__).resolve().parents[1]


def _copy_course(tmp_path: Path) -> None:
    for rel in ("chapters", "locale", "labs/source", "labs/student"):
        shutil.copytree(ROOT / rel, tmp_path / rel, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))


def test_build_exits_1_when_an_edition_is_out_of_step(monkeypatch):
    monkeypatch.setattr(build, "write_all", lambda root=None: [])
    monkeypatch.setattr(instep, "problems", lambda *a, **k: ["labs/source/lab02_x.md: block 'x' is untranslated"])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert editions_cli.main(["build"]) == 1
    assert "untranslated" in out.getvalue()


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
@pytest.mark.parametrize("target", ["check-labs", "student", "translations"])
def test_make_targets_run_the_in_step_check(target):
    """Each ends with a command that exits 1 when the editions are out of step (make stops there)."""
    out = subprocess.run(["make", "-n", "-W", "pyproject.toml", target], cwd=ROOT, capture_output=True,
                         text=True).stdout
    last = [ln for ln in out.splitlines() if "allocator_ref.editions" in ln]
    assert last and re.search(r"-m allocator_ref\.editions (check|build)$", last[-1].strip()), out[-800:]


def test_an_edited_student_copy_in_zh_and_an_edited_lab_paragraph_are_caught(tmp_path):
    _copy_course(tmp_path)
    source = tmp_path / "labs" / "source" / "lab02_round_size.md"
    if not source.exists():
        source = sorted((tmp_path / "labs" / "source").glob("lab*.md"))[0]
    assert instep.problems(tmp_path, [source]) == []
    student = build.outputs_for(source, tmp_path)[1]
    assert student.parent == tmp_path / "labs" / "student" / "zh"
    student.write_text(student.read_text(encoding="utf-8").replace("zh-", "zh_", 1), encoding="utf-8")
    assert any(p.startswith("labs/student/zh/") and "differs" in p for p in instep.problems(tmp_path, [source]))
    old = next(b for b in catalog.english_blocks(source) if len(b.split()) > 12 and "<!--" not in b
               and not b.startswith(("#", "-", "|", "[", "*", "`")))
    source.write_text(source.read_text(encoding="utf-8").replace(old, old.replace(" ", " really ", 1)),
                      encoding="utf-8")
    assert any("untranslated" in p for p in instep.problems(tmp_path, [source]))


def test_build_renders_each_notebook_once(tmp_path, monkeypatch):
    """What `editions build` does: write, then say what is stale and out of step; each source rendered once."""
    _copy_course(tmp_path)
    calls = []
    real = build._render
    monkeypatch.setattr(build, "_RENDERED", {})
    monkeypatch.setattr(build, "_render", lambda source, root: calls.append(source) or real(source, root))
    build.write_all(tmp_path)
    assert instep.problems(tmp_path) == []
    assert build.stale(tmp_path) == []
    sources = build.translated_sources(tmp_path)
    assert sorted(calls) == sorted(sources), f"{len(calls)} renders for {len(sources)} sources"
