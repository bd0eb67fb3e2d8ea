"""The pictures a newcomer could not read, rendered and checked.

* block maps: a 512 B block in a 2 MiB segment is drawn at least
  ``MIN_BLOCK_W`` px wide, on top of the free space, and marked; rendered by
  headless Chromium, its pixels are there (it was 0.2 px and covered);
* chapter 1's history timeline: no two labels overlap (they did);
* chapter 6's picture of one segment mapped by two processes, drawn from a
  real share;
* chapter 7's player has a static film strip after it (exported notebooks
  show nothing of a widget), chapter 4's ``max_split_size_mb:4096`` run has
  its block map, chapter 6 has its IPC picture: read from the executed
  chapters (shared with tests/test_notebooks.py, so each runs once).
"""
from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from allocator_ref.viz import blockmap
from allocator_ref.viz.history import plot_history, text_overlaps

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
MiB = 1 << 20

SMALL_SEGMENT = [{
    "address": 0x7F0000000000, "total_size": 2 * MiB, "segment_type": "small", "stream": 0,
    "blocks": [{"address": 0x7F0000000000, "size": 512, "state": "active_allocated", "requested_size": 4},
               {"address": 0x7F0000000200, "size": 2 * MiB - 512, "state": "inactive"}],
}]


def _rects(svg: str) -> list[dict]:
    return [dict(re.findall(r'([\w-]+)="([^"]*)"', m)) for m in re.findall(r"<rect ([^>]*)>", svg)]


def test_a_tiny_block_is_drawn_wide_on_top_and_marked():
    svg = blockmap.render_blockmap(SMALL_SEGMENT)
    rects = [r for r in _rects(svg) if "data-state" in r]
    tiny = next(r for r in rects if r["data-size"] == "512")
    free = next(r for r in rects if r["data-state"] == "inactive")
    assert float(tiny["width"]) >= blockmap.MIN_BLOCK_W and tiny.get("data-widened") == "1"
    assert rects.index(tiny) > rects.index(free), "the tiny block must be drawn after (on top of) the free one"
    assert "ar-widened-mark" in svg and "drawn wider than to scale" in svg
    big = blockmap.render_blockmap([{**SMALL_SEGMENT[0], "blocks": [
        {"address": 0x7F0000000000, "size": MiB, "state": "active_allocated"},
        {"address": 0x7F0000100000, "size": MiB, "state": "inactive"}]}])
    assert "data-widened" not in big and "drawn wider" not in big, "blocks visible to scale are not marked"


def test_history_labels_do_not_overlap():
    from matplotlib.figure import Figure
    events = [(2007, "CUDA 1.0: cudaMalloc / cudaFree (synchronous)"), (2011, "Torch7 / THC caching allocator"),
              (2017, "c10 CUDACachingAllocator: two pools, split and merge"),
              (2020.9, "CUDA 11.2: cudaMallocAsync (stream-ordered, driver pools)"),
              (2023.8, "PyTorch 2.1: expandable_segments (VMM, experimental)"),
              (2024.5, "memory snapshots + viewer mature; expandable segments recommended"),
              (2026.4, "CUDA Graph pool fragmentation analysis, NCCL VMM interop")]
    fig = plot_history(events, "caching → stream ordering → virtualisation")
    assert text_overlaps(fig) == []
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert len(texts) == len(events)
    # The checker can fail: the old layout (labels alternating above and below one line) overlapped.
    old = Figure(figsize=(9, 3.2))
    ax = old.add_subplot()
    for i, (year, text) in enumerate(events):
        ax.text(year, 0.65 * (1 if i % 2 == 0 else -1), f"{int(year)}: {text}", ha="center", fontsize=7)
    ax.set_xlim(2005, 2028); ax.set_ylim(-1.8, 1.8)
    assert text_overlaps(old)


def test_ipc_picture_from_a_real_share():
    from allocator_ref import CachingAllocator, SimDevice, sharing
    from allocator_ref.viz.ipc import render_ipc_share
    dev = SimDevice("tiny-1gb")
    a = CachingAllocator(dev)
    pad, x = a.malloc(3 * MiB), a.malloc(5 * MiB)
    h = sharing.share_block(a, x)
    seg = next(s for s in a.segments(record=False) if s["address"] <= x.ptr < s["address"] + s["total_size"])
    svg = render_ipc_share(seg, h, receiver_ptr=0x7A0000000000 + h.offset, sender_pid=1, receiver_pid=2)
    shared = [r for r in _rects(svg) if r.get("class") == "ar-ipc-shared"]
    assert [r["data-addr"] for r in shared] == [f"{x.ptr:#x}", f"{0x7A0000000000 + h.offset:#x}"]
    assert "64-byte handle" in svg and "offset 3.0 MiB" in svg and "(simulated)" in svg
    assert "only after the receiver closes" in svg
    sharing.unshare(h)
    a.free(x); a.free(pad); dev.close()


# ------------------------------------------------------------------ rendered by a browser

@pytest.mark.browser
@pytest.mark.slow
def test_browser_renders_the_tiny_block(tmp_path):
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing: run tools/install_browser.sh first")
    sync_api = pytest.importorskip("playwright.sync_api", reason="python playwright is not installed")
    from PIL import Image
    svg = blockmap.render_blockmap(SMALL_SEGMENT)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1000, "height": 200})
        page.set_content(f"<html><body style='margin:0'>{svg}</body></html>")
        png = page.screenshot()
        browser.close()
    img = Image.open(io.BytesIO(png)).convert("RGB")
    tiny = next(r for r in _rects(svg) if r.get("data-size") == "512")
    x, y, w = float(tiny["x"]), float(tiny["y"]), float(tiny["width"])
    blue = blockmap.STATE_STYLE["active_allocated"][0]
    want = tuple(int(blue[i:i + 2], 16) for i in (1, 3, 5))
    pixels = [img.getpixel((int(x) + dx, int(y) + 8)) for dx in range(1, int(w))]
    assert sum(1 for px in pixels if sum(abs(a - b) for a, b in zip(px, want)) < 40) >= 3, pixels


_TEXT_BOXES = """() => [...document.querySelectorAll('svg text')].map(t => {
    const b = t.getBoundingClientRect(); return [t.textContent, b.left, b.top, b.right, b.bottom]; })"""


@pytest.mark.browser
@pytest.mark.slow
def test_browser_ipc_picture_texts_fit_and_do_not_overlap():
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing: run tools/install_browser.sh first")
    sync_api = pytest.importorskip("playwright.sync_api", reason="python playwright is not installed")
    from allocator_ref import CachingAllocator, SimDevice, sharing
    from allocator_ref.viz.ipc import WIDTH, render_ipc_share
    dev = SimDevice("tiny-1gb")
    a = CachingAllocator(dev)
    pad, x = a.malloc(3 * MiB), a.malloc(5 * MiB)
    h = sharing.share_block(a, x)
    seg = next(s for s in a.segments(record=False) if s["address"] <= x.ptr < s["address"] + s["total_size"])
    svg = render_ipc_share(seg, h, 0x7A0000000000 + h.offset, sender_pid=4242, receiver_pid=4343)
    sharing.unshare(h)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": WIDTH + 40, "height": 400})
        page.set_content(f"<html><body style='margin:0'>{svg}</body></html>")
        boxes = page.evaluate(_TEXT_BOXES)
        browser.close()
    assert len(boxes) > 10
    outside = [b[0] for b in boxes if b[3] > WIDTH]
    assert not outside, f"texts run off the picture: {outside}"
    overlap = [(a[0], b[0]) for i, a in enumerate(boxes) for b in boxes[i + 1:]
               if a[1] < b[3] - 1 and b[1] < a[3] - 1 and a[2] < b[4] - 1 and b[2] < a[4] - 1]
    assert not overlap, f"texts overlap: {overlap}"


# ------------------------------------------------------------------ in the executed chapters

def _chapter(prefix: str):
    from test_notebooks import NOTEBOOKS, execute_notebook
    path = next(p for p in NOTEBOOKS if p.name.startswith(prefix))
    run, _ = execute_notebook(path)
    return run


def _svgs(cell) -> list[str]:
    return [o["data"]["image/svg+xml"] for o in cell.get("outputs", []) if "image/svg+xml" in o.get("data", {})]


@pytest.mark.slow
def test_chapter7_player_has_a_static_film_strip():
    run = _chapter("07_")
    code = [c for c in run.cells if c.cell_type == "code"]
    i = next(k for k, c in enumerate(code) if "course.player(frames" in c.source)
    strip = _svgs(code[i + 1])
    assert len(strip) == 6 and all("ar-blockmap" in s for s in strip)


@pytest.mark.slow
def test_chapter4_max_split_run_has_its_block_map():
    run = _chapter("04_")
    cell = next(c for c in run.cells if c.cell_type == "code" and 'twenty_gb_free("max_split_size_mb:4096")' in c.source)
    svgs = _svgs(cell)
    assert svgs and "max_split_size_mb:4096" in svgs[0]
    segments = int(re.search(r'data-segments="(\d+)"', svgs[0]).group(1))
    assert segments > 1


@pytest.mark.slow
def test_chapter6_draws_the_two_processes():
    run = _chapter("06_")
    svgs = [s for c in run.cells if c.cell_type == "code" for s in _svgs(c)]
    assert any('class="ar-ipc"' in s and "receiver, pid" in s for s in svgs)
