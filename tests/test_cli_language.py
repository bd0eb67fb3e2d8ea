"""Every command line of ours speaks the reader's language: ``--help`` and argparse's own lines ("usage:",
"the following arguments are required", "unrecognized arguments", "invalid choice") in Chinese under
``--lang zh``, ``ALLOCATOR_REF_LANG=zh`` or a Chinese locale, and unchanged in English otherwise
(editions/cli_words.py).  Chapter 5's printed refusal of a config and its growable buffer's state too."""
from __future__ import annotations

import argparse
import ast
import gettext
import re
import sys
from pathlib import Path

import pytest

from allocator_ref.__main__ import main as course_main
from allocator_ref.editions import cli_words
from allocator_ref.editions.__main__ import main as editions_main
from allocator_ref.editions.language import speaking
from allocator_ref.labs import generate, gradebook, grading, verify

sys.path.insert(0, str(Path(__file__).parent))
from english_words import english_sentences      # noqa: E402

pytestmark = pytest.mark.usefixtures("plain_language")      # tests/conftest.py
CJK = re.compile(r"[\u4e00-\u9fff]")
MAINS = {"python -m allocator_ref": course_main, "python -m allocator_ref.editions": editions_main,
         "python -m allocator_ref.labs.gradebook": gradebook.main, "python -m allocator_ref.labs.verify": verify.main,
         "python -m allocator_ref.labs.grading": grading.main, "python -m allocator_ref.labs.generate": generate.main}
# one way to ask for Chinese: a command-line option, the course's variable, the locale
ASKED = {"--lang": (["--lang", "zh"], {}), "ALLOCATOR_REF_LANG": ([], {"ALLOCATOR_REF_LANG": "zh"}),
         "LANG": ([], {"LANG": "zh_CN.UTF-8"})}


def run(main, argv, capsys) -> tuple:
    """(exit status, stdout, stderr) of one command line."""
    with pytest.raises(SystemExit) as stop:
        main(argv)
    out = capsys.readouterr()
    return stop.value.code, out.out, out.err


@pytest.mark.parametrize("asked", ASKED)
@pytest.mark.parametrize("prog", MAINS)
def test_help_is_chinese_however_asked(prog, asked, capsys, monkeypatch):
    words, variables = ASKED[asked]
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    code, out, _ = run(MAINS[prog], ["--help"] + words, capsys)
    assert code == 0 and out.startswith(f"用法：{prog}") and "显示本帮助信息并退出" in out
    assert not english_sentences(out), english_sentences(out)


@pytest.mark.parametrize("prog", MAINS)
def test_help_stays_english_when_nobody_asks(prog, capsys):
    code, out, _ = run(MAINS[prog], ["--help"], capsys)
    assert code == 0 and out.startswith(f"usage: {prog}") and "show this help message and exit" in out
    assert not CJK.search(out)


# (command line, a wrong call, what argparse says in Chinese): its three commonest error lines, and an invalid choice
ERRORS = [("python -m allocator_ref", ["replay"], "缺少必需的参数：snapshot"),
          ("python -m allocator_ref", ["replay", "x", "--nope"], "无法识别的参数：--nope"),
          ("python -m allocator_ref", ["replay", "x", "--device-memory", "abc"],
           "参数 --device-memory：'abc' 不是以 GiB 计的数字"),
          ("python -m allocator_ref", ["predict", "t.py", "--memory-limit", "1"], "参数 --memory-limit：'1'：请给出"),
          ("python -m allocator_ref.editions", ["bogus"], "无效的选项：'bogus'"),
          ("python -m allocator_ref.editions", [], "缺少必需的参数：command"),
          ("python -m allocator_ref.labs.gradebook", ["grade"], "无效的选项：'grade'"),
          ("python -m allocator_ref.labs.verify", ["--nope"], "无法识别的参数：--nope"),
          ("python -m allocator_ref.labs.verify", ["--lab", "two"], "参数 --lab：无效的 int 值：'two'"),
          ("python -m allocator_ref.labs.grading", ["release"], "缺少必需的参数：lab"),
          ("python -m allocator_ref.labs.generate", ["--chek"], "无法识别的参数：--chek")]


@pytest.mark.parametrize("prog, argv, chinese", ERRORS, ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_argparse_errors_are_chinese(prog, argv, chinese, capsys, monkeypatch):
    monkeypatch.setenv("ALLOCATOR_REF_LANG", "zh")
    code, _, err = run(MAINS[prog], argv, capsys)
    assert code == 2 and err.startswith(f"用法：{prog}")
    assert re.search(rf"^{re.escape(prog)}( \w+)?：错误：", err, re.M) and chinese in err, err
    assert not english_sentences(err), english_sentences(err)
    assert argparse._ is gettext.gettext and argparse.ngettext is gettext.ngettext   # put back after the command


@pytest.mark.parametrize("prog, argv, chinese", ERRORS[:3])
def test_argparse_errors_stay_english_when_nobody_asks(prog, argv, chinese, capsys):
    code, _, err = run(MAINS[prog], argv, capsys)
    assert code == 2 and err.startswith(f"usage: {prog}") and not CJK.search(err)
    assert re.search(rf"^{re.escape(prog)}( \w+)?: error: ", err, re.M), err


def test_every_argparse_msgid_we_translate_is_one_argparse_says():
    """A msgid typed here that argparse does not say (a typo, a different space) would never be asked for."""
    tree = ast.parse(Path(argparse.__file__).read_text(encoding="utf-8"))
    said = {arg.value for node in ast.walk(tree) if isinstance(node, ast.Call)
            and getattr(node.func, "id", None) in ("_", "ngettext")
            for arg in node.args if isinstance(arg, ast.Constant) and isinstance(arg.value, str)}
    assert set(cli_words.ARGPARSE) <= said, set(cli_words.ARGPARSE) - said


def test_a_translation_that_drops_a_placeholder_is_not_used(monkeypatch):
    """argparse fills its sentence with ``%`` after the lookup: a Chinese line without ``%s`` would fail there."""
    from allocator_ref.editions import messages
    monkeypatch.setitem(messages._table("doctor"), "unrecognized arguments: %s", "无法识别的参数")
    with speaking("zh"):
        assert cli_words.argparse_gettext("unrecognized arguments: %s") == "unrecognized arguments: %s"
        assert cli_words.argparse_gettext("expected one argument") == "需要一个参数"
        assert cli_words.argparse_ngettext("expected %s argument", "expected %s arguments", 2) == "需要 %s 个参数"


def test_chapter5s_refused_config_and_growable_buffer_speak_chinese():
    """Chapter 5 prints the stream-ordered allocator's refusal of a config key and a buffer's repr."""
    import allocator_ref as ar
    from allocator_ref.policies.stream_ordered import StreamOrderedAllocator
    dev = ar.SimDevice("tiny-1gb")
    try:
        for lang, refusal, state in (("zh", "未知选项 'max_split_size_mb'；已知的选项：", "已用 0 B，映射了 0 页"),
                                     ("en", "unknown option 'max_split_size_mb'; known options: ",
                                      "0 B used, 0 page(s) mapped")):
            with speaking(lang):
                with pytest.raises(ValueError) as refused:
                    StreamOrderedAllocator(dev, "max_split_size_mb:128")
                assert str(refused.value).startswith(refusal), str(refused.value)
                buf = ar.GrowableBuffer(dev, 8 << 20)
                assert repr(buf).startswith("GrowableBuffer(ptr=0x") and repr(buf).endswith(f", {state})"), repr(buf)
                buf.close()
    finally:
        dev.close()
