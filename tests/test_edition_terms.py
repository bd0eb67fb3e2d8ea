"""One term per concept: the glossary's "一个概念一个词" list names the word the course uses and the words it
does not; no Chinese catalogue (chapters, labs, the tools), README.zh-CN.md, START_HERE.zh-CN.md or the
instructors' guides (labs/, workshop/README.zh-CN.md) uses
an avoided word outside code, links, fields and PyTorch's quoted texts."""
from __future__ import annotations

import glob
import re
from pathlib import Path

import polib
import pytest

ROOT = Path(__file__).resolve().parents[1]
GLOSSARY = ROOT / "chapters" / "zh" / "glossary.md"
EXCEPTIONS = {"profile": r"profile(?= 运行| 越来越|）)"}   # vLLM's own "profile run" (glossary), and a gloss "配置档（profile）"


def rules() -> dict:
    """{used word: [avoided words]} from the glossary's list ("- 轨迹 —— 不写 trace、追踪")."""
    section = GLOSSARY.read_text(encoding="utf-8").split("## 一个概念一个词", 1)[1].split("\n\n代码", 1)[0]
    found = {}
    for used, avoided in re.findall(r"^- (\S+) —— 不写 (.+)$", section, re.M):
        found[used] = [w.strip() for w in re.sub(r"（.*?）", "", avoided).split("、") if w.strip()]
    return found


def avoided_pattern(word: str) -> str:
    if re.fullmatch(r"[A-Za-z]+", word):             # an English word: whole words only
        pattern = r"(?<![\w./{-])" + word + r"(?![\w./}-])"
        if word in EXCEPTIONS:
            pattern = r"(?!" + EXCEPTIONS[word] + r")" + pattern
        return pattern
    if word == "单元":
        return r"单元(?!格|测试)"
    return re.escape(word)


def prose(text: str) -> str:
    """The text without what stays as written: code, links' targets, fields, markers, quoted texts."""
    text = re.sub(r"```.*?```", " ", text, flags=re.S)
    for pattern in (r"`[^`]*`", r"\]\([^)]*\)", r"\{[^{}]*\}", r"<!--.*?-->", r"\"[^\"\n]*\"", r"“[^”\n]*”", r"<[^>]+>"):
        text = re.sub(pattern, " ", text)
    return text


def chinese_texts():
    for path in sorted(glob.glob(str(ROOT / "locale" / "zh_CN" / "**" / "*.po"), recursive=True)) + \
            sorted(glob.glob(str(ROOT / "allocator_ref" / "locale" / "zh_CN" / "*.po"))):
        for entry in polib.pofile(path):
            if entry.msgstr and not entry.obsolete:
                yield Path(path).relative_to(ROOT).as_posix(), entry.msgstr
    for name in ("README.zh-CN.md", "START_HERE.zh-CN.md", "labs/README.zh-CN.md", "workshop/README.zh-CN.md",
                 "chapters/zh/glossary.md"):
        path = ROOT / name
        if path.exists():
            text = path.read_text(encoding="utf-8")
            if name.endswith("glossary.md"):              # the list itself names the avoided words
                text = re.sub(r"## 一个概念一个词.*?\n\n代码", "", text, flags=re.S)
                text = re.sub(r"^\|.*\|$", "", text, flags=re.M)     # the table's English column
            yield name, text


def test_the_glossary_decides_the_terms_the_issue_named():
    decided = rules()
    for used in ("轨迹", "重放", "单元格", "成本模型", "配置档", "假设分析", "显存"):
        assert used in decided and decided[used], f"the glossary decides no word for {used}"


@pytest.mark.parametrize("used", sorted(rules()))
def test_no_avoided_word_in_any_chinese_text(used):
    found = []
    for where, text in chinese_texts():
        for word in rules()[used]:
            for m in re.finditer(avoided_pattern(word), prose(text)):
                found.append(f"{where}: {word!r} (write {used}) in ...{prose(text)[max(0, m.start() - 20):m.end() + 20]}...")
    assert not found, "\n".join(found[:20])


def test_the_check_catches_an_avoided_word():
    assert re.search(avoided_pattern("回放"), prose("用假设分析回放这次运行"))
    assert re.search(avoided_pattern("trace"), prose("这个 trace 事件"))
    assert not re.search(avoided_pattern("trace"), prose("`trace` 和 {trace} 与 device_traces"))
    assert not re.search(avoided_pattern("profile"), prose("vLLM 的 profile 运行"))
    assert not re.search(avoided_pattern("单元"), prose("单元格与单元测试"))
