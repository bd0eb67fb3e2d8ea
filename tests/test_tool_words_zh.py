"""What the tools print to a Chinese reader holds no English sentence: every command's --help, predict
(with --lang zh), traces list, replay's inference lines, the block map's pool headings, hint()."""
from __future__ import annotations

import argparse
import io
import re
import sys
from pathlib import Path

import pytest

import allocator_ref as ar
from allocator_ref.__main__ import main, make_parser
from allocator_ref.editions.language import speaking
from allocator_ref.editions.messages import say

sys.path.insert(0, str(Path(__file__).parent))
from english_words import english_sentences      # noqa: E402

pytestmark = pytest.mark.usefixtures("plain_language")      # tests/conftest.py
CJK = re.compile(r"[\u4e00-\u9fff]")


def parsers(parser, name="python -m allocator_ref"):
    """(name, parser) for the command and every subcommand under it."""
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child_name, child in action.choices.items():
                yield from parsers(child, f"{name} {child_name}")


def test_every_help_sentence_of_every_command_has_its_chinese():
    missing = []
    for name, parser in parsers(make_parser()):
        for action in parser._actions:
            if action.help and action.help != argparse.SUPPRESS:
                with speaking("zh"):
                    if say("doctor", action.help) == action.help and action.help not in (
                            "show this help message and exit",):
                        missing.append(f"{name} {'/'.join(action.option_strings) or action.dest}: {action.help}")
    assert not missing, "help with no Chinese (run python -m allocator_ref.editions update): " + "; ".join(missing)


@pytest.mark.parametrize("command", [["replay"], ["compare"], ["traces"], ["traces", "fetch"],
                                     ["traces", "list"], ["doctor"], ["predict"]])
def test_help_in_chinese_has_no_english_sentence(capsys, command):
    with pytest.raises(SystemExit) as stop:
        main(command + ["--help", "--lang", "zh"])
    assert stop.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith("用法：") and "显示本帮助信息并退出" in text
    assert not english_sentences(text), english_sentences(text)


def test_top_level_help_follows_the_variable(capsys, monkeypatch):
    monkeypatch.setenv("ALLOCATOR_REF_LANG", "zh")
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert "在参考分配器上重放" in text and "重放快照的轨迹" in text and not english_sentences(text), english_sentences(text)


def test_help_in_english_is_unchanged_and_a_second_help_finds_the_english_again(capsys):
    parser = make_parser()
    with speaking("zh"):
        chinese = parser.format_help()
    english = parser.format_help()
    assert "在参考分配器上重放" in chinese
    assert english.startswith("usage: ") and "Replay PyTorch memory snapshots on the reference allocator." in english


def test_predict_takes_lang_like_every_command():
    args = make_parser().parse_args(["predict", "train.py", "--lang", "zh"])
    assert args.lang == "zh"
    with pytest.raises(SystemExit):
        make_parser().parse_args(["predict", "train.py", "--lang", "fr"])


def test_predict_speaks_chinese_its_not_traced_rows_included():
    pytest.importorskip("torch", reason="predict needs the optional torch CPU wheel (pip install torch)")
    import torch
    from allocator_ref.predict import predict

    def step():
        x = torch.ones(1024, 1024, device="cuda")
        (x @ x).sum()

    with speaking("zh"):
        text = predict(step, profile="t4-16gb").text()
    assert "未录入轨迹的部分" in text and "cuBLAS 工作区" in text
    assert not english_sentences(text), english_sentences(text)
    # the what-if rows' own words (chapter 7 printed "(as predicted)", "(default)", "doctor 建议的设置")
    assert "(default)" not in text and "(as predicted)" not in text and "doctor" not in text, text


def test_traces_list_in_chinese():
    from allocator_ref.trace import fetch
    out = io.StringIO()
    with speaking("zh"):
        fetch.main_list(out)
    text = out.getvalue()
    assert "中查找" in text and not english_sentences(text), english_sentences(text)


def test_block_map_pool_headings_in_chinese():
    from allocator_ref.viz.blockmap import render_blockmap
    a = ar.CachingAllocator(ar.SimDevice("tiny-1gb"))
    a.malloc(5 << 20), a.malloc(100)
    with speaking("zh"):
        svg = render_blockmap(a)
    shown = " ".join(re.findall(r">([^<>]+)<", svg))
    assert "（1 个段）" in shown and "segment" not in shown


def test_replay_says_what_it_inferred_in_chinese():
    dev = ar.SimDevice("tiny-1gb")
    a = ar.CachingAllocator(dev)
    kept = a.malloc(3 << 20)                 # live before recording: replay must infer it
    a.record_memory_history(enabled="all")
    a.free(a.malloc(1 << 20))
    snapshot = a.snapshot()
    with speaking("zh"):
        notes = ar.replay(snapshot, verify=True, progress=False).devices[0].inferred
    assert notes and all(CJK.search(n) for n in notes), notes
    assert not any(english_sentences(n) for n in notes), notes
    a.free(kept)


def test_hint_returns_what_it_printed(capsys):
    import importlib
    check = importlib.import_module("allocator_ref.labs.check")
    with speaking("zh"):
        returned = check.hint("lab2.round_size")
    printed = capsys.readouterr().out
    assert returned in printed and CJK.search(returned), (returned, printed)
    assert check.hint("lab2.round_size") == check.exercise("lab2.round_size").hint     # English as before


def test_cost_model_notes_in_chinese():
    """Chapter 0 prints the cost model's source notes (costs.json): each is said in Chinese, its
    citations kept, with no English word outside quotes, code and paths (what the chapter printed before)."""
    from english_words import english_labels
    costs = ar.SimDevice("tiny-1gb").costs
    keys = [k for k in costs.raw if not k.startswith("_")]
    assert costs.source_words("malloc_base_us") == costs.source("malloc_base_us")      # English unchanged
    with speaking("zh"):
        notes = {k: costs.source_words(k) for k in keys}
    assert all(CJK.search(n) for n in notes.values()), [k for k, n in notes.items() if not CJK.search(n)]
    assert "eunomia-bpf/bpftime#506" in notes["free_base_us"] and "47" in notes["free_base_us"]
    left = {k: english_labels(n) for k, n in notes.items() if english_labels(n)}
    assert not left, left
