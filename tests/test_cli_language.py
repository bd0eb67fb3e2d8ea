"""Every command line of ours speaks the reader's language: ``--help`` and argparse's own lines ("usage:",
"the following arguments are required", "unrecognized arguments", "invalid choice") in Chinese under
``--lang zh``, ``ALLOCATOR_REF_LANG=zh`` or a Chinese locale, and unchanged in English otherwise
(editions/cli_words.py).  Chapter 5's printed refusal of a config and its growable buffer's state too, and what
``editions`` update/build/check, ``make student`` and ``make check-labs`` print, and every refused output path."""
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


# ---------------------------------------------------------------- what the command lines print, in Chinese
# The editions command (translators and Chinese learners run it: make translations, make student) and the
# labs' make student / make check-labs say their results and refusals through the doctor's catalogue.  The
# slow parts (rendering every notebook, running every lab) are stubbed: the lines are what is tested.
from english_words import english_labels      # noqa: E402
from allocator_ref.editions import build, catalog, instep, tool_catalogues   # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def chinese_only(text: str) -> None:
    """Chinese lines with no English sentence or label (code, paths and quoted names excepted)."""
    assert CJK.search(text), text
    assert not english_sentences(text) and not english_labels(text), (english_sentences(text),
                                                                       english_labels(text), text)


def ask_chinese(asked: str, monkeypatch) -> list:
    words, variables = ASKED[asked]
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    return words


@pytest.mark.parametrize("asked", ASKED)
def test_editions_update_build_and_check_print_chinese(asked, capsys, monkeypatch):
    words = ask_chinese(asked, monkeypatch)
    source = catalog.sources()[0]
    monkeypatch.setattr(catalog, "sources", lambda root=None: [source])
    monkeypatch.setattr(catalog, "write", lambda po, path: None)                 # nothing written
    monkeypatch.setattr(tool_catalogues, "update", lambda: {"doctor": (2, 1, 3)})
    monkeypatch.setattr(build, "write_all", lambda root=None: [source, ROOT / "chapters" / "zh" / "gone.ipynb"])
    monkeypatch.setattr(instep, "problems", lambda *a, **k: [])
    assert editions_main(words + ["update"]) == 0
    out = capsys.readouterr().out
    assert "保留" in out and "allocator_ref/locale/zh_CN/doctor.po：新增 2 条，作废 1 条；未翻译 3 条" in out, out
    assert editions_main(words + ["build"]) == 0
    out = capsys.readouterr().out
    assert "已写入 " in out and "已删除 chapters/zh/gone.ipynb" in out and "英文版与中文版同步" in out, out
    assert editions_main(words + ["check"]) == 0
    out += capsys.readouterr().out
    assert "个段落" in out, out
    chinese_only(out)


def test_editions_refuses_in_chinese_and_lists_the_problems_left(capsys, monkeypatch):
    monkeypatch.setenv("ALLOCATOR_REF_LANG", "zh")
    with pytest.raises(SystemExit) as refused:
        editions_main(["update", "nope.md"])
    assert str(refused.value.code).startswith("nope.md：不是英文的章节或实验源文件"), refused.value.code
    chinese_only(str(refused.value.code))
    monkeypatch.setattr(build, "write_all", lambda root=None: [])
    monkeypatch.setattr(instep, "problems", lambda *a, **k: ["x"] * 61)
    assert editions_main(["build"]) == 1
    assert "……另有 1 条" in capsys.readouterr().out


def test_editions_stays_english_when_nobody_asks(capsys, monkeypatch):
    monkeypatch.setattr(build, "write_all", lambda root=None: [])
    monkeypatch.setattr(instep, "problems", lambda *a, **k: [])
    assert editions_main(["build"]) == 0
    assert capsys.readouterr().out == "the English and Chinese editions are in step\n"


@pytest.mark.parametrize("asked", ASKED)
def test_make_student_and_check_labs_print_chinese(asked, capsys, monkeypatch):
    words = ask_chinese(asked, monkeypatch)
    student = generate.STUDENT_DIR / "lab02_x.ipynb"
    monkeypatch.setattr(generate, "stale", lambda: [student])
    assert generate.main(["--check"] + words) == 1
    monkeypatch.setattr(generate, "stale", lambda: [])
    assert generate.main(["--check"] + words) == 0
    out = capsys.readouterr().out
    assert "已过期：labs/student/lab02_x.ipynb" in out and "个学生笔记本和答案文件都是最新的" in out, out
    chinese_only(out)
    monkeypatch.setattr(generate, "outputs", lambda: {})
    for rule in ("student_copy_problems", "exercise_problems", "guide_problems", "apart_problems",
                 "coverage_problems", "solution_problems"):
        monkeypatch.setattr(verify, rule, lambda *a, **k: [])
    wrong = verify.WRONG_DIR / "lab02_x.py"
    monkeypatch.setattr(verify, "wrong_files", lambda lab=None: [wrong])
    monkeypatch.setattr(verify, "verify_wrong", lambda path: verify.WrongVerdict(path, []))
    assert verify.main(words) == 0
    out = capsys.readouterr().out
    assert "通过    labs/wrong/lab02_x.py" in out and "随机种子 1, 2, 3" in out, out
    chinese_only(out)


def test_output_paths_are_refused_in_chinese(tmp_path, capsys, monkeypatch):
    """--plot, --html and predict's output: each refusal of a path is one Chinese line."""
    import os
    from allocator_ref.__main__ import output_file, plot_path
    os.mkfifo(tmp_path / "pipe")
    with speaking("zh"):
        for text, said in ((str(tmp_path), "是一个文件夹"), (str(tmp_path / "no" / "a.png"), "不存在"),
                           (str(tmp_path / "a.xyz"), "文件名须以下列后缀之一结尾"), (str(tmp_path / "pipe"), "命名管道")):
            with pytest.raises(argparse.ArgumentTypeError) as refused:
                plot_path(text)
            assert said in str(refused.value), refused.value
            chinese_only(str(refused.value))
        with pytest.raises(ValueError) as refused:
            output_file(str(tmp_path / "no" / "r.html"), "report.html")
        chinese_only(str(refused.value))
    monkeypatch.setenv("ALLOCATOR_REF_LANG", "zh")
    code, _, err = run(course_main, ["compare", "x.pickle", "--plot", str(tmp_path)], capsys)
    assert code == 2 and "参数 --plot：" in err and "是一个文件夹" in err, err
    chinese_only(err.split("错误：", 1)[1])          # the usage lines and the prog before it are code


def test_editions_check_says_what_is_out_of_step_in_chinese(tmp_path):
    """A translator reads check's problems: an edited English paragraph, a broken rule, a changed cell."""
    import shutil
    import nbformat
    source = sorted((ROOT / "labs" / "source").glob("lab*.md"))[0]
    rel = source.relative_to(ROOT)
    po = catalog.catalogue_path(source).relative_to(ROOT)
    for path in (rel, po):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / path, tmp_path / path)
    copy = tmp_path / rel
    old = next(b for b in catalog.english_blocks(copy) if len(b.split()) > 12 and "<!--" not in b
               and not b.startswith(("#", "-", "|", "[", "*", "`")) and not set("'\"") & set(b[:70]))
    copy.write_text(copy.read_text(encoding="utf-8").replace(old, old.replace(" ", " really ", 1)), encoding="utf-8")
    with speaking("zh"):
        problems = instep.catalogue_problems(copy, tmp_path)
        problems += catalog.rule_problems("Call `f()` at **1 GiB** <!-- claim -->.", "调用。", ["1 GiB"])
        problems += instep.code_cell_problems(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x")]),
                                              nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("y")]))
        problems += instep.code_cell_problems(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x")]),
                                              nbformat.v4.new_notebook(cells=[]))
    assert any("还没有翻译" in p for p in problems) and any("第 0 个单元格" in p for p in problems), problems
    assert "有 0 个单元格，英文笔记本有 1 个" in problems
    assert any("行内代码 `f()`" in p for p in problems) and any("陈述的结果 **1 GiB**" in p for p in problems)
    for line in problems:
        chinese_only(line)


@pytest.mark.parametrize("argv", [["--lang", "zh", "build"], ["build", "--lang", "zh"], ["build", "--lang=zh"]])
def test_editions_takes_lang_before_or_after_its_command(argv, capsys, monkeypatch):
    """``editions build --lang zh`` as well as ``editions --lang zh build`` (argparse refused the first)."""
    monkeypatch.delenv("ALLOCATOR_REF_LANG", raising=False)
    monkeypatch.setattr(build, "write_all", lambda root=None: [])
    monkeypatch.setattr(instep, "problems", lambda *a, **k: [])
    assert editions_main(argv) == 0
    assert capsys.readouterr().out == "英文版与中文版同步\n"
