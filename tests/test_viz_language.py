"""The player, the charts, the chapters' helpers and the replay tools in the reader's language.

A Chinese notebook (its kernel runs in ``chapters/zh``) must show the player's captions and
labels, the film strip, the device banner and the charts in Chinese; English stays the default
and its sentences are the ones tests and chapters quote (tests/test_viz_frames.py checks them word
for word).  "No English sentence" is ``catalog.english_runs``: no run of four English words
outside code, the same rule the Chinese prose keeps.
"""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

import allocator_ref as ar
from allocator_ref.__main__ import main
from allocator_ref.editions import catalog
from allocator_ref.editions.language import speaking
from allocator_ref.viz import chart_language, timeline
from allocator_ref.viz.frames import record_frames
from allocator_ref.viz.player import Compare, LiveView, TracePlayer

ROOT = Path(__file__).resolve().parents[1]
MiB = 2**20
CJK = re.compile(r"[\u4e00-\u9fff]")


def english_left(text: str) -> list:
    """English sentences left in a Chinese text (HTML tags and ``code`` spans are not prose)."""
    text = re.sub(r"<code>.*?</code>", " § ", text)
    text = re.sub(r"<[^>]+>", " ", text)
    text = re.sub(r"\d[\d,.]* ?(?:[KMG]iB|B|bytes)\b", " § ", text)       # sizes are numbers, not prose
    return catalog.english_runs(text)


def every_kind_of_event():
    """Frames whose captions cover every branch: split, exact fit, pending free, merges, a private
    pool, a whole segment free, cudaFree, an expandable segment's map and unmap, an OOM."""
    dev = ar.SimDevice("tiny-1gb")
    a = ar.CachingAllocator(dev)
    side = dev.create_stream()
    with record_frames(a) as frames:
        x = a.malloc(12 * MiB)
        y = a.malloc(4 * MiB)
        z = a.malloc(2 * MiB - 4096)           # small pool, nearly a whole segment: not split
        a.record_stream(y, side)
        dev.sleep(side, 1000)                  # the side stream is busy: the free must wait for it
        a.free(y)
        a.free(x)
        a.free(z)
        pool = ar.MemPool(a)
        with a.use_mem_pool(pool):
            w = a.malloc(6 * MiB)
        a.free(w)
        try:
            a.malloc(4 * 2**30)
        except ar.OutOfMemoryError:
            pass
        a.empty_cache()
    b = ar.CachingAllocator(ar.SimDevice("tiny-1gb"), "expandable_segments:True")
    with record_frames(b) as grown:
        v = b.malloc(30 * MiB)
        b.free(v)
        b.empty_cache()
    return frames, grown


@pytest.fixture(scope="module")
def sources():
    return every_kind_of_event()


@pytest.fixture(scope="module")
def frames(sources):
    """The first recording (a FrameSource: each frame, and so its caption, is made when it is read)."""
    return sources[0]


def captions(sources) -> list:
    return [f.caption for source in sources for f in source]


def test_every_caption_speaks_chinese_in_a_chinese_edition(sources):
    english = captions(sources)
    actions = {e["action"] for source in sources for e in source.events}
    assert {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "segment_map",
            "segment_unmap", "oom"} <= actions, actions
    assert any("pending free" in c for c in english) and any("private pool" in c for c in english)
    with speaking("zh"):
        chinese = captions(sources)
    for en, zh in zip(english, chinese):
        assert CJK.search(zh) and not english_left(zh), (en, zh)
    with speaking("en"):
        assert captions(sources) == english          # the Chinese left nothing behind


def test_the_player_and_its_controls_in_chinese(frames):
    with speaking("zh"):
        player = TracePlayer(frames, simulated=True)
        player.step(+3)
        controls = player.controls
        words = [player.caption.value, player.curves.value, controls.play.description, controls.back.description,
                 controls.forward.description, controls.back.tooltip, controls.slider.description,
                 controls.speed.description]
        assert all(CJK.search(w) for w in words), words
        assert not [w for w in words if english_left(w)], words
        assert 'data-index="3"' in player.caption.value         # what the browser test reads stays
    english = TracePlayer(frames, simulated=True)
    assert "<b>event 1 of" in english.caption.value and english.controls.play.description == "Play"


def test_live_view_and_compare_in_chinese():
    def workload(a):
        x = a.malloc(5 * MiB)
        a.free(x)

    with speaking("zh"):
        a = ar.CachingAllocator(ar.SimDevice("tiny-1gb"))
        view = LiveView(a)
        ready = view.caption.value
        workload(a)
        assert CJK.search(ready) and not english_left(ready)
        assert CJK.search(view.numbers.value) and not english_left(view.numbers.value), view.numbers.value
        view.close()
        sides = []
        for config in ("", "expandable_segments:True"):
            b = ar.CachingAllocator(ar.SimDevice("tiny-1gb"), config)
            with record_frames(b) as f:
                workload(b)
            sides.append(f)
        cmp = Compare(*sides, labels=("默认", "expandable_segments:True"), simulated=True)
        assert cmp.controls.slider.description == "调用" and not english_left(cmp.curves.value)


def test_the_memory_charts_speak_chinese_only_with_a_font_that_draws_it(frames, monkeypatch):
    def labels(fig):
        ax = fig.axes[0]
        return [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()] + [t.get_text() for t in ax.get_legend().get_texts()]

    import matplotlib.pyplot as plt
    with speaking("zh"):
        monkeypatch.setattr(chart_language, "cjk_font", lambda: None)      # no CJK font: English, not tofu
        fig = timeline.plot_memory(frames, simulated=True)
        assert not any(CJK.search(t) for t in labels(fig)) and "(simulated)" in fig.axes[0].get_title()
        plt.close(fig)
        monkeypatch.setattr(chart_language, "cjk_font", lambda: "DejaVu Sans")   # a font "that draws it"
        for plot, source in ((timeline.plot_memory, frames), (timeline.plot_active_timeline, frames.events)):
            fig = plot(source, simulated=True)
            shown = labels(fig)
            assert CJK.search(fig.axes[0].get_title()) and "（模拟）" in fig.axes[0].get_title(), shown
            assert not [t for t in shown if english_left(t)], shown
            plt.close(fig)


@pytest.fixture()
def course(monkeypatch):
    """chapters/_course.py, imported as a chapter imports it."""
    spec = importlib.util.spec_from_file_location("_course_under_test", ROOT / "chapters" / "_course.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    shown = []
    monkeypatch.setattr(module, "_display", shown.append)
    module.shown = shown
    yield module
    module.close_all()


def test_the_chapters_helpers_print_chinese_in_a_chinese_edition(course, capsys, frames):
    with speaking("zh"):
        dev = course.open_device("tiny-1gb")
        a = ar.CachingAllocator(dev)
        x = a.malloc(5 * MiB)
        course.show_stats(a)
        print(course.device_view(dev, a))
        course.pinned("t4-16gb")
        course.show_frames(frames, last=3)
        a.free(x)
    printed = capsys.readouterr().out
    strip = "\n".join(m.data for m in course.shown if hasattr(m, "data") and isinstance(m.data, str)
                      and not m.data.lstrip().startswith("<svg"))
    assert "模拟" in printed and "第 1/" in strip
    for line in printed.splitlines() + strip.splitlines():
        assert not english_left(line), line
    with speaking("zh"):
        rows = course.stat_rows()
    assert all(words.split()[0] in ("memory_allocated()", "memory_reserved()", key, key.split(".")[0])
               for key, words in rows), rows                         # API names stay as PyTorch writes them


def test_the_chapters_helpers_stay_english_by_default(course, capsys):
    dev = course.open_device("tiny-1gb")
    printed = capsys.readouterr().out
    assert "\ndevice     : " in printed and "what it is : SIMULATED." in printed
    assert printed.startswith("allocator_ref: using SimDevice 'tiny-1gb' (simulated: ")
    assert course.where(dev) == f"[simulated on {dev.info.name.replace(' (simulated)', '')}]"


def test_compare_and_replay_speak_chinese(tmp_path, capsys):
    a = ar.CachingAllocator(ar.SimDevice("tiny-1gb"))
    a.record_memory_history()
    xs = [a.malloc(s * MiB) for s in (3, 7, 1, 12)]
    a.free(xs[1])
    a.free(xs[0])
    path = ar.save_snapshot(a.snapshot(), tmp_path / "run.pickle")
    assert main(["compare", str(path), "--device-memory", "1", "--lang", "zh"]) == 0
    assert main(["replay", str(path), "--verify", "--lang", "zh"]) == 0
    out = capsys.readouterr().out.replace(str(path), "run.pickle")
    # the course recorded this run (provenance.py): verified against its recording, never "PyTorch"
    assert "策略" in out and "预留峰值" in out and "对照课程记录的运行验证" in out and "PyTorch" not in out
    for line in out.splitlines():
        assert not english_left(line), line
    assert main(["compare", str(path)]) == 0                              # and English by default
    assert "policy          config" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("name", ["02_caching_allocator.ipynb", "03_streams.ipynb"])
def test_a_chinese_chapters_film_strip_and_banner_are_chinese(name):
    """Run All of a Chinese chapter that plays frames: the banner and every film-strip caption in Chinese."""
    from test_notebooks import execute_notebook
    run, _ = execute_notebook(ROOT / "chapters" / "zh" / name)
    strip, banner = [], []
    for cell in run.cells:
        for out in cell.get("outputs", []):
            md = out.get("data", {}).get("text/markdown", "")
            if md.startswith("**第 "):
                strip.append(md)
            if out.get("name") == "stdout" and ("设备    ：" in out["text"] or "这是什么：" in out["text"]):
                banner.append(out["text"])
    assert strip and banner, f"zh/{name}: no film strip or banner in Chinese"
    for text in strip + banner:
        assert not english_left(text), text


def test_the_ipc_picture_and_the_growable_buffer_in_chinese():
    from allocator_ref import sharing
    from allocator_ref.viz.ipc import render_ipc_share
    from allocator_ref.vmm import GrowableBuffer

    def texts(svg: str) -> list:
        return re.findall(r"<(?:text|title)[^>]*>([^<]+)<", svg)

    dev = ar.SimDevice("tiny-1gb")
    a = ar.CachingAllocator(dev)
    a.malloc(3 * MiB)
    x = a.malloc(5 * MiB)
    h = sharing.share_block(a, x)
    try:
        seg = next(s for s in a.segments(record=False) if s["address"] <= x.ptr < s["address"] + s["total_size"])
        english = render_ipc_share(seg, h, 0x7A0000000000 + h.offset, sender_pid=1, receiver_pid=2)
        with speaking("zh"):
            chinese = render_ipc_share(seg, h, 0x7A0000000000 + h.offset, sender_pid=1, receiver_pid=2)
    finally:
        sharing.unshare(h)                   # a share left open would fail the sharing tests' leak check
    with speaking("zh"):
        buf = GrowableBuffer(dev, 64 * MiB)
        buf.resize(5_000_000)
        bars = "".join(s.to_svg() for s in buf.history)
        buf.close()
    assert "receiver, pid 2" in english and "sender's block" in english       # English as it was
    for words in texts(chinese) + texts(bars):
        assert not english_left(words), words
    assert "接收方，pid 2" in chinese and "已映射" in bars


def test_an_empty_block_map_says_so_in_chinese():
    from allocator_ref.viz.blockmap import render_blockmap
    a = ar.CachingAllocator(ar.SimDevice("tiny-1gb"))
    assert "No segments: the allocator has not reserved any memory yet." in render_blockmap(a)
    with speaking("zh"):
        svg = render_blockmap(a)
    assert "没有段" in svg and not [t for t in re.findall(r">([^<]+)<", svg) if english_left(t)]
