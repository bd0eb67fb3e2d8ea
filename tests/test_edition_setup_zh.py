"""A Chinese learner's set-up: the locale as POSIX orders it, the language carried in the notebook,
JupyterLab's own menus in Chinese, and one line saying how to install a CJK font when none is there."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from allocator_ref.editions import language as lang

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
pytestmark = pytest.mark.usefixtures("plain_language")      # tests/conftest.py


@pytest.mark.parametrize("env, expected", [
    ({"LC_ALL": "zh_CN.UTF-8"}, "zh"),                                   # LANG unset: LC_ALL alone decides
    ({"LC_ALL": "en_US.UTF-8", "LANG": "zh_CN.UTF-8"}, "en"),           # LC_ALL overrides LANG
    ({"LC_MESSAGES": "zh_CN.UTF-8", "LANG": "en_US.UTF-8"}, "zh"),      # LC_MESSAGES overrides LANG
    ({"LC_ALL": "", "LC_MESSAGES": "zh_CN.UTF-8"}, "zh"),               # an empty variable counts as unset
    ({"LANGUAGE": "zh_CN:en"}, "zh"),
])
def test_locale_variables_in_posix_order(env, expected):
    assert lang.from_locale(env) == expected


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
@pytest.mark.parametrize("variable", ["LC_ALL", "LC_MESSAGES", "LANG"])
def test_make_lab_opens_chinese_with_any_locale_variable_and_chinese_menus(variable):
    env = {k: v for k, v in os.environ.items() if k not in ("LC_ALL", "LC_MESSAGES", "LANG", "COURSE_LANG")}
    env[variable] = "zh_CN.UTF-8"
    out = subprocess.run(["make", "-n", "lab"], cwd=ROOT, env=env, capture_output=True, text=True).stdout
    line = [ln for ln in out.splitlines() if "jupyter lab" in ln][-1]
    assert line.rstrip().endswith(" chapters/zh/00_setup_and_tour.ipynb") and ".jupyter-course-zh" in line, line


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_an_english_lab_keeps_english_menus():
    env = {k: v for k, v in os.environ.items() if k not in ("LC_ALL", "LC_MESSAGES", "LANG", "COURSE_LANG")}
    out = subprocess.run(["make", "-n", "lab", "LANG=en_US.UTF-8"], cwd=ROOT, env=env, capture_output=True,
                         text=True).stdout
    line = [ln for ln in out.splitlines() if "jupyter lab" in ln][-1]
    assert ".jupyter-course-zh" not in line and line.rstrip().endswith(" chapters/00_setup_and_tour.ipynb")


def test_the_chinese_menus_setting_names_the_language_pack():
    overrides = json.loads((ROOT / ".jupyter-course-zh" / "labconfig" / "default_setting_overrides.json").read_text())
    assert overrides["@jupyterlab/translation-extension:plugin"]["locale"] == "zh_CN"
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert "jupyterlab-language-pack-zh-CN" in pyproject
    assert "jupyterlab-language-pack-zh-CN" in (ROOT / "environment.yml").read_text()


def test_a_moved_chinese_notebook_still_speaks_chinese(tmp_path, monkeypatch):
    """Downloaded into a plain folder (no .course-language marker): its metadata says zh_CN."""
    moved = tmp_path / "00_setup_and_tour.ipynb"
    shutil.copy(ROOT / "chapters" / "zh" / "00_setup_and_tour.ipynb", moved)
    assert lang.language() == "en"                             # the folder alone says nothing
    monkeypatch.setenv("JPY_SESSION_NAME", str(moved))           # what Jupyter's server tells the kernel
    assert lang.language() == "zh"
    monkeypatch.setenv("JPY_SESSION_NAME", str(ROOT / "chapters" / "00_setup_and_tour.ipynb"))
    assert lang.language() == "en"                             # an English notebook names no language


def test_metadata_we_did_not_write_is_ignored():
    assert lang.language_in_metadata({"metadata": {"allocator_ref": {"language": "klingon"}}}) is None
    assert lang.language_in_metadata({"metadata": {"allocator_ref": "zh"}}) is None
    assert lang.language_in_metadata({"metadata": {"allocator_ref": {"language": "zh_CN"}}}) == "zh"


@pytest.mark.slow
def test_a_moved_chinese_chapter_runs_in_chinese(tmp_path):
    """The same notebook executed outside chapters/zh, with the server's JPY_SESSION_NAME: its
    course lines come out in Chinese."""
    from english_words import english_sentences
    from test_notebooks import execute_notebook, outputs_text
    folder = tmp_path / "chapters"                 # _course.py found as in a Colab checkout's chapters/
    folder.mkdir()
    shutil.copy(ROOT / "chapters" / "_course.py", folder / "_course.py")
    moved = folder / "09_casebook.ipynb"
    shutil.copy(ROOT / "chapters" / "zh" / "09_casebook.ipynb", moved)
    run, _ = execute_notebook(moved, extra_env=(("JPY_SESSION_NAME", str(moved)),
                                                ("PYTHONPATH", str(ROOT))))
    text = outputs_text(run)
    assert "OOM 之后，仍处于已分配状态" in text
    assert "after the OOM" not in text


def test_font_advice_only_for_a_chinese_reader_without_a_cjk_font(monkeypatch):
    from allocator_ref.viz import chart_language
    monkeypatch.setattr(chart_language, "cjk_font", lambda: None)
    assert chart_language.font_advice() is None                       # English needs no CJK font
    with lang.speaking("zh"):
        advice = chart_language.font_advice()
    assert advice and "\n" not in advice and "fonts-noto-cjk" in advice and "中文" in advice
    monkeypatch.setattr(chart_language, "cjk_font", lambda: "Noto Sans CJK SC")
    with lang.speaking("zh"):
        assert chart_language.font_advice() is None
