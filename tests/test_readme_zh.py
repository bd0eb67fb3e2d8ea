"""README.zh-CN.md covers every section of README.md with the same numbers, and START_HERE exists in both
languages, each linking the other; every relative link of the Chinese pages resolves."""
from __future__ import annotations

import re
from pathlib import Path

from allocator_ref.editions import catalog

ROOT = Path(__file__).resolve().parents[1]
# Each English section and its Chinese heading: a new English section fails here until it has its Chinese.
SECTIONS = {
    "Two commands": "两个命令",
    "Colab or a GPU box": "Colab 或一台 GPU 机器",
    "Run a workshop": "办一场工作坊",
    "Simulated or real: what the figures mean": "模拟还是真实：数字是什么意思",
    "The reference allocator": "参考分配器",
    "Replaying your own training run": "重放你自己的训练运行",
    "Will it fit before you run it? `predict` (it runs your script)": "运行之前就知道放不放得下？`predict`（它会运行你的脚本）",
    "What the snapshot loader accepts (its limits)": "快照加载器接受什么（它的限制）",
    "The real snapshots on your machine": "你机器上的真实快照",
    "Chapters": "章节",
    "FAQ: the questions engineers actually ask": "FAQ：工程师真正会问的问题",
    "Architecture: recording -> engine -> tools": "架构：录制 -> 引擎 -> 工具",
    "Layout": "目录结构",
}


def headings(text: str) -> list:
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return [h.strip() for h in re.findall(r"^#{2,3} (.+)$", text, re.M)]


def prose_numbers(text: str) -> set:
    """The figures a reader relies on: numbers with a unit or a separator, percentages, versions."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"\]\([^)]*\)|https?://\S+|#\d+", " ", text)
    return set(re.findall(r"\b\d[\d,]*(?:\.\d+)?(?:%| ?(?:GiB|MiB|KiB|GB|MB|EiB|s\b))", text)) | \
        set(re.findall(r"\b\d+,\d{3}\b|\b\d+\.\d+\b", text))


def test_every_english_section_has_its_chinese():
    english = headings((ROOT / "README.md").read_text(encoding="utf-8"))
    chinese = headings((ROOT / "README.zh-CN.md").read_text(encoding="utf-8"))
    missing = [h for h in english if h not in SECTIONS]
    assert not missing, f"README.md sections with no Chinese heading named here: {missing}"
    absent = [SECTIONS[h] for h in english if SECTIONS[h] not in chinese]
    assert not absent, f"README.zh-CN.md lacks the sections {absent}"


def lost_figures(english_text: str, chinese_text: str) -> list:
    """The English page's figures the Chinese one does not state (a "3 s" may read "3 秒")."""
    english, chinese = prose_numbers(english_text), prose_numbers(chinese_text)
    return sorted(n for n in english - chinese
                  if n.replace(" ", "") not in chinese_text.replace(" ", "")
                  and not (n.endswith(" s") and n[:-2] + " 秒" in chinese_text))


def missing_links(text: str, folder: Path) -> list:
    """The relative link targets of a page that are not files beside it (folder: the page's own)."""
    return [target for target in re.findall(r"\]\(([^)\s:#]+)(?:#[^)]*)?\)", text)
            if not (folder / target).exists()]


def english_sentences(text: str) -> list:
    """Runs of English words left in a Chinese page's prose (code, links, quotes and table code excepted)."""
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    prose = re.sub(r"^\|.*$", lambda m: re.sub(r"`[^`]*`", "", m.group(0)), prose, flags=re.M)
    return catalog.english_runs(prose, catalog.NAMES)


def test_no_number_of_the_english_readme_is_lost():
    lost = lost_figures((ROOT / "README.md").read_text(encoding="utf-8"),
                        (ROOT / "README.zh-CN.md").read_text(encoding="utf-8"))
    assert not lost, f"figures of README.md missing from README.zh-CN.md: {lost}"


def test_start_here_in_both_languages_linked_both_ways():
    english = (ROOT / "START_HERE.md").read_text(encoding="utf-8")
    chinese = (ROOT / "START_HERE.zh-CN.md").read_text(encoding="utf-8")
    assert "](START_HERE.zh-CN.md)" in english and "](START_HERE.md)" in chinese
    assert "](START_HERE.zh-CN.md)" in (ROOT / "README.zh-CN.md").read_text(encoding="utf-8")
    assert len(re.findall(r"chapters/zh/0\d_\w+\.ipynb", chinese)) >= 10
    assert len(re.findall(r"labs/student/zh/lab0\d_\w+\.ipynb", chinese)) >= 9


def test_the_chinese_pages_links_resolve_and_hold_no_english_sentence():
    for name in ("README.zh-CN.md", "START_HERE.zh-CN.md"):
        text = (ROOT / name).read_text(encoding="utf-8")
        gone = missing_links(text, ROOT)
        assert not gone, f"{name} links to missing files: {gone}"
        assert english_sentences(text) == [], name
