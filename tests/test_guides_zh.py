"""The instructors' guides in Chinese (labs/README.zh-CN.md, workshop/README.zh-CN.md) stay in step with the
English ones, as README.zh-CN.md does with README.md (test_readme_zh.py, whose helpers these tests use):
every English section has its Chinese heading, no figure is lost, every command block is the English one
byte for byte (a changed command fails until the Chinese page has it), the two pages link each other,
and the Chinese page's relative links resolve and its prose holds no English sentence.  The glossary's
terms are test_edition_terms.py's, which reads these pages too."""
from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from allocator_ref.labs.verify import _prose_list
from test_readme_zh import english_sentences, headings, lost_figures, missing_links

ROOT = Path(__file__).resolve().parents[1]
# Per guide, each English section and its Chinese heading: a new English section fails here until translated.
SECTIONS = {
    "labs/README.md": {
        "Files": "文件",
        "Which files to change": "改哪个文件",
        "How a check works (what to tell learners)": "检查如何工作（要告诉学员的）",
        "What each mode promises": "每种模式保证什么",
        "Change a lab": "修改一个实验",
        "Add an exercise on a decision the labs do not plug yet": "为实验还没接入的决策新增练习",
        "Add a lab": "新增一个实验",
        "A known-wrong answer": "已知错误答案",
        "Grading with nbgrader": "用 nbgrader 评分",
        "A workshop's settings": "工作坊的设置",
        "What CI proves (`tests/test_labs*.py`, simulated device)": "CI 证明了什么（`tests/test_labs*.py`，模拟设备）",
    },
    "workshop/README.md": {
        "1. No setup: Binder and Colab": "1. 无需准备：Binder 和 Colab",
        "2. One machine: `sudo make workshop`": "2. 一台机器：`sudo make workshop`",
        "3. Kubernetes: Zero to JupyterHub": "3. Kubernetes：Zero to JupyterHub",
        "The course website": "课程网站",
        "Publishing under another name": "以另一个名字发布",
    },
}
GUIDES = sorted(SECTIONS)


def chinese_twin(guide: str) -> Path:
    return ROOT / guide.replace("README.md", "README.zh-CN.md")


def read(guide: str) -> tuple[str, str]:
    return (ROOT / guide).read_text(encoding="utf-8"), chinese_twin(guide).read_text(encoding="utf-8")


def code_blocks(text: str) -> list:
    """Every fenced block, fences included, without the indentation of the list item it sits in."""
    return [textwrap.dedent(m.group(0)) for m in re.finditer(r"^[ \t]*```.*?^[ \t]*```[ \t]*$", text, re.S | re.M)]


def untranslated_sections(english: str, chinese: str, sections: dict) -> list:
    named = [h for h in headings(english) if h in sections]
    unnamed = [f"{h!r}: no Chinese heading named in SECTIONS" for h in headings(english) if h not in sections]
    return unnamed + [f"{sections[h]!r} (for {h!r}) is not a heading of the Chinese page"
                      for h in named if sections[h] not in headings(chinese)]


@pytest.mark.parametrize("guide", GUIDES)
def test_every_english_section_has_its_chinese(guide):
    problems = untranslated_sections(*read(guide), SECTIONS[guide])
    assert not problems, f"{guide}: " + "; ".join(problems)


@pytest.mark.parametrize("guide", GUIDES)
def test_no_figure_of_the_english_guide_is_lost(guide):
    lost = lost_figures(*read(guide))
    assert not lost, f"figures of {guide} missing from its Chinese twin: {lost}"


@pytest.mark.parametrize("guide", GUIDES)
def test_every_command_block_is_the_english_one(guide):
    english, chinese = (code_blocks(text) for text in read(guide))
    changed = [block for block in english if block not in chinese]
    assert not changed, f"{chinese_twin(guide).name} of {guide} lacks these blocks as written: {changed}"
    assert len(chinese) == len(english), f"{guide}: {len(english)} code blocks, its Chinese twin {len(chinese)}"


@pytest.mark.parametrize("guide", GUIDES)
def test_the_guides_link_each_other_and_every_link_of_the_chinese_resolves(guide):
    english, chinese = read(guide)
    assert "](README.zh-CN.md)" in english and "](README.md)" in chinese
    gone = missing_links(chinese, chinese_twin(guide).parent)
    assert not gone, f"{chinese_twin(guide)} links to missing files: {gone}"
    targets = lambda text: set(re.findall(r"\]\(([^)\s]+)\)", text)) - {"README.md", "README.zh-CN.md"}
    assert targets(english) <= targets(chinese), f"links of {guide} its twin lost: {targets(english) - targets(chinese)}"


@pytest.mark.parametrize("guide", GUIDES)
def test_the_chinese_guide_holds_no_english_sentence(guide):
    assert english_sentences(read(guide)[1]) == []


def table_rows(text: str) -> list:
    """Each table row's exercise ids, in order: a lab's row must name the same exercises in both languages."""
    return [re.findall(r"`(lab\d+\.\w+)`", line) for line in text.splitlines()
            if line.startswith("| ") and re.search(r"`lab\d+\.", line)]


def test_the_chinese_labs_guide_names_the_exercises_the_english_one_does():
    """make check-labs keeps the English table and its (pure: ...) and (observed: ...) lists in step with
    the labs (allocator_ref/labs/verify.py); the Chinese ones must say the same."""
    english, chinese = read("labs/README.md")
    assert table_rows(chinese) == table_rows(english)
    for kind in ("pure", "observed"):
        listed = _prose_list(" ".join(chinese.replace("）", ")").split()), f"{kind}：")
        assert listed == _prose_list(" ".join(english.split()), f"({kind}:"), f"the Chinese ({kind}: ...) list"


def test_the_checks_catch_a_dropped_section_and_a_changed_command():
    english, chinese = read("labs/README.md")
    assert untranslated_sections(english + "\n## A new section\n", chinese, SECTIONS["labs/README.md"])
    assert untranslated_sections(english, chinese.replace("## 已知错误答案", "## 已知错的答案"), SECTIONS["labs/README.md"])
    changed = english.replace("make rehearse LAB=02", "make rehearse LAB=03", 1)
    assert [b for b in code_blocks(changed) if b not in code_blocks(chinese)]
