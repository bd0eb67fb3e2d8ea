"""The doctor in Chinese: its text and HTML report on a course-made run and on the real snapshots
(skipped when ../shared/traces is absent), through the public function and the command line.

A Chinese report must leave no English sentence outside code, numbers and names
(``catalog.english_runs``, the rule the Chinese chapters are held to); English stays the default and
the structured fields a program reads (verdict kind, the config line, the bytes to cut, JSON keys)
are the same in both languages.
"""
from __future__ import annotations

import html

import html as html_lib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import allocator_ref as ar
from allocator_ref.__main__ import main
from allocator_ref.editions import language as lang
from allocator_ref.editions.catalog import english_runs
from allocator_ref.memory_doctor import examples
from allocator_ref.memory_doctor.ranks import doctor_ranks
from allocator_ref.trace.fetch import find_trace

ROOT = Path(__file__).resolve().parents[1]
CJK = re.compile(r"[\u4e00-\u9fff]")
REAL = ("hf-finetune-expandable-oom.pickle", "small-from-empty.pickle", "multistream-select-n.pickle")


pytestmark = pytest.mark.usefixtures("plain_language")      # tests/conftest.py


SIZE_OR_FILE = re.compile(r"-?\d[\d.,]*\s?(?:B|KiB|MiB|GiB|TiB)\b|\S+\.(?:pickle|pkl|py|html)\b")


def english_sentences(text: str) -> list:
    """Runs of English words left in a Chinese report, line by line: code in backticks, quoted error texts,
    sizes ("116.0 MiB") and file names do not count (the same rule as the Chinese chapters' prose)."""
    return [(run, line.strip()[:120]) for line in text.splitlines()
            for run in english_runs(SIZE_OR_FILE.sub(" § ", line))]


def visible_html(page: str) -> str:
    """The words a reader sees on the page, the block map's labels and tooltips among them: no style,
    no code, no tags, one line per element."""
    page = re.sub(r"<style>.*?</style>|<code[^>]*>.*?</code>", " ", page, flags=re.S)
    return html_lib.unescape(re.sub(r"<[^>]+>", "\n", page))


COURSE_MADE = {
    "shortage": lambda: ar.doctor(examples.shortage_run(900)),
    "fragmentation": lambda: ar.doctor(examples.fragmentation_run(200)),
    "on-a-smaller-gpu": lambda: ar.doctor(examples.fragmentation_run(200), device_memory=1.0),
    "expandable": lambda: ar.doctor(examples.big_expandable_run(30, 60)),
}


@pytest.mark.parametrize("name", list(COURSE_MADE))
def test_a_chinese_report_has_no_english_sentence(name):
    with lang.speaking("zh"):
        report = COURSE_MADE[name]()
    text, page = report.text(), report.html()
    assert CJK.search(text) and english_sentences(text) == []
    assert "<html lang='zh-CN'>" in page and english_sentences(visible_html(page)) == []


@pytest.mark.parametrize("name", list(COURSE_MADE))
def test_the_language_changes_the_words_not_the_answer(name):
    english = COURSE_MADE[name]()
    with lang.speaking("zh"):
        chinese = COURSE_MADE[name]()
    assert not CJK.search(english.text()) and "<html lang='en'>" in english.html()
    for a, b in ((english.verdict, chinese.verdict),):
        assert (a.kind, a.line, a.reduce_by) == (b.kind, b.line, b.reduce_by)
    assert english.text() != chinese.text()
    plain, zh = english.to_json(), chinese.to_json()
    assert plain.keys() == zh.keys() and plain["recommended_line"] == zh["recommended_line"]
    assert [t["skip_reason"] for t in plain["remedies"]] == [t["skip_reason"] for t in zh["remedies"]]


def test_a_report_keeps_the_language_it_was_made_in():
    with lang.speaking("zh"):
        report = ar.doctor(examples.shortage_run(900))
    assert CJK.search(report.text())                       # read later, in an English process
    with lang.speaking("en"):
        assert CJK.search(report.text()) and CJK.search(report.verdict.text)


def test_a_state_only_dump_and_a_job_of_ranks_in_chinese(tmp_path):
    snap = examples.fragmentation_run(200)
    snap["device_traces"] = [[]]                           # history off: the state alone
    for i, rank in enumerate(examples.job_ranks(4, outlier=2, why="laid out worse")):
        ar.save_snapshot(rank, tmp_path / f"rank{i}.pickle")
    with lang.speaking("zh"):
        state = ar.doctor(snap)
        ranks = doctor_ranks([tmp_path])
    for text in (state.text(), ranks.text()):
        assert CJK.search(text) and english_sentences(text) == []
    assert ranks.why == "the same live memory laid out worse"   # the key a program (and chapter 7) reads
    for report, name in ((state, "state.html"), (ranks, "ranks.html")):   # their pages: the text, escaped
        page = report.html(tmp_path / name)
        assert page == (tmp_path / name).read_text(encoding="utf-8")
        assert page.startswith("<!doctype html><html lang='zh-CN'>") and "<title>显存医生" in page
        assert html.unescape(page.split("<pre>", 1)[1].rsplit("</pre>", 1)[0]) == report.text()


@pytest.mark.slow
@pytest.mark.parametrize("name", REAL)
def test_a_real_snapshot_in_chinese(name):
    path = find_trace(name)
    if path is None:
        pytest.skip(f"{name} is not here (python -m allocator_ref traces fetch, or ../shared/traces)")
    with lang.speaking("zh"):
        report = ar.doctor(str(path))
    assert english_sentences(report.text()) == []
    assert english_sentences(visible_html(report.html())) == []


def test_the_command_line_flag(tmp_path, capsys):
    path = ar.save_snapshot(examples.shortage_run(900), tmp_path / "oom.pickle")
    page = tmp_path / "report.html"
    assert main(["doctor", str(path), "--lang", "zh", "--html", str(page)]) == 0
    out = capsys.readouterr().out
    assert "结论" in out and "HTML 报告已写入" in out and english_sentences(out) == []
    assert "<html lang='zh-CN'>" in page.read_text(encoding="utf-8")
    assert lang.language() == "en"                         # the flag spoke for that command only
    assert main(["doctor", str(path), "--lang", "en"]) == 0
    assert not CJK.search(capsys.readouterr().out)
    with pytest.raises(SystemExit):
        main(["doctor", str(path), "--lang", "fr"])
    assert "invalid choice: 'fr'" in capsys.readouterr().err


def _cli(path, **env) -> str:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("ALLOCATOR_REF_LANG", "LC_ALL", "LC_MESSAGES", "LANG", "LANGUAGE",
                          "ALLOCATOR_REF_SETTINGS")}        # the suite's pinned file says en: a reader's has none
    clean.update(env, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "allocator_ref", "doctor", str(path)], capture_output=True,
                          text=True, env=clean, cwd=path.parent, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.slow
def test_the_locale_and_the_variable_without_the_flag(tmp_path):
    path = ar.save_snapshot(examples.shortage_run(900), tmp_path / "oom.pickle")
    english = _cli(path, LANG="C.UTF-8")
    assert not CJK.search(english) and "VERDICT" in english
    for env in ({"LANG": "zh_CN.UTF-8"}, {"ALLOCATOR_REF_LANG": "zh"}):
        chinese = _cli(path, **env)
        assert "结论" in chinese and english_sentences(chinese) == [], env
    assert _cli(path, LANG="zh_CN.UTF-8", ALLOCATOR_REF_LANG="en") == english


def test_a_chinese_edition_folder_makes_a_chinese_report(tmp_path):
    (tmp_path / lang.MARKER).write_text("zh\n")            # what chapters/zh holds: a notebook runs there
    assert "结论" in ar.doctor(examples.shortage_run(900)).text()


def test_json_keeps_its_keys(tmp_path, capsys):
    path = ar.save_snapshot(examples.fragmentation_run(200), tmp_path / "frag.pickle")
    assert main(["doctor", str(path), "--json", "--lang", "zh"]) == 0
    zh = json.loads(capsys.readouterr().out)
    assert main(["doctor", str(path), "--json"]) == 0
    en = json.loads(capsys.readouterr().out)
    assert zh.keys() == en.keys() and zh["verdict"] == en["verdict"] and CJK.search(zh["verdict_text"])


def _cli_error(path, *flags, **env):
    """The doctor's exit code and stderr on ``path`` from a reader's shell (no pinned settings)."""
    clean = {k: v for k, v in os.environ.items()
             if k not in ("ALLOCATOR_REF_LANG", "LC_ALL", "LC_MESSAGES", "LANG", "LANGUAGE",
                          "ALLOCATOR_REF_SETTINGS", "ALLOCATOR_REF_MAX_SNAPSHOT_MB")}
    clean.update(env, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "allocator_ref", "doctor", path.name, *flags],
                          capture_output=True, text=True, env=clean, cwd=path.parent, timeout=300)
    return done.returncode, done.stderr


def _hostile_files(folder: Path) -> dict:
    """Three files a user may hand the doctor, each with the English line it has always given."""
    (folder / "text.pickle").write_text("not a pickle\n")
    import pickle
    (folder / "ints.pickle").write_bytes(pickle.dumps([1, 2, 3], protocol=4))
    ar.save_snapshot({"segments": [], "device_traces": []}, folder / "big.pickle")
    return {
        "text.pickle": ({}, "error: text.pickle: not a valid pickle: unknown opcode b'n' at byte 1"),
        "ints.pickle": ({}, "error: ints.pickle: segment 0: is 1; expected a dict"),
        "big.pickle": ({"ALLOCATOR_REF_MAX_SNAPSHOT_MB": "0.00001"},
                       "error: big.pickle: is 0.0 MiB, over the 0 MiB limit for snapshots; for a file "
                       "you trust, raise it with ALLOCATOR_REF_MAX_SNAPSHOT_MB (or max_snapshot_mb in "
                       "course-settings.toml, or load_snapshot(path, max_bytes=...))"),
    }


def test_a_hostile_file_is_refused_in_chinese_and_in_the_same_english_as_before(tmp_path):
    for name, (env, english_line) in _hostile_files(tmp_path).items():
        path = tmp_path / name
        code, english = _cli_error(path, **env)
        assert (code, english) == (2, english_line + "\n"), name
        for flags, more in ((("--lang", "zh"), {}), ((), {"ALLOCATOR_REF_LANG": "zh"})):
            code, chinese = _cli_error(path, *flags, **env, **more)
            lines = chinese.splitlines()
            assert code == 2 and len(lines) == 1 and name in lines[0], (name, chinese)
            assert lines[0].startswith("错误：") and CJK.search(lines[0].replace("错误：", "")), chinese
            assert "not a valid pickle" not in chinese and "expected" not in chinese, chinese


def test_a_language_the_course_cannot_speak_is_one_error_line(tmp_path):
    """ALLOCATOR_REF_LANG=fr: the settings error, once, on a good file and a bad one (the loader's own
    refusal must not turn into a traceback when it asks for the language)."""
    good = ar.save_snapshot(examples.shortage_run(900), tmp_path / "oom.pickle")
    bad = tmp_path / "bad.pickle"
    bad.write_bytes(b"not a pickle")
    for path in (good, bad):
        code, err = _cli_error(path, ALLOCATOR_REF_LANG="fr")
        assert code == 2 and err.splitlines() == [
            "error: ALLOCATOR_REF_LANG='fr' is not a language the course speaks; use one of auto, en, zh"], err
        code, err = _cli_error(path, "--lang", "en", ALLOCATOR_REF_LANG="fr")   # the flag decides alone
        assert "ALLOCATOR_REF_LANG" not in err and "Traceback" not in err, err
