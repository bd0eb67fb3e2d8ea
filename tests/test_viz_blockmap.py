"""The block map is a pure function: a known state gives known rectangles, widths and labels."""
import re
import time

from allocator_ref.viz.blockmap import LABEL_W, WIDTH, render_blockmap
from allocator_ref.viz.sizes import format_bytes

MiB = 2**20
BASE = 0x7F0000000000
BAR_W = WIDTH - LABEL_W - 10      # the drawable width of one segment bar


def segment(addr, blocks, kind="large", stream=0, expandable=False):
    out, at = [], addr
    for size, state in blocks:
        out.append({"address": at, "size": size, "state": state, "frames": [],
                    "requested_size": size if state != "inactive" else 0})
        at += size
    return {"device": 0, "address": addr, "total_size": at - addr, "stream": stream, "segment_type": kind,
            "segment_pool_id": (0, 0), "is_expandable": expandable, "frames": [], "blocks": out,
            "allocated_size": sum(b["size"] for b in out if b["state"] == "active_allocated")}


KNOWN = [segment(BASE, [(12 * MiB, "active_allocated"), (4 * MiB, "active_pending_free"), (4 * MiB, "inactive")]),
         segment(BASE + 0x10000000, [(512, "active_allocated"), (2 * MiB - 512, "inactive")], kind="small", stream=7)]


def rect(svg, addr):
    match = re.search(rf'<rect [^>]*data-addr="{addr:#x}"[^>]*>', svg)
    assert match, f"no rect for {addr:#x}"
    return dict(re.findall(r'([\w-]+)="([^"]*)"', match.group(0)))


def test_format_bytes():
    assert [format_bytes(n) for n in (4, 512, 1536, 12 * MiB, 3 * 2**30)] == \
        ["4 B", "512 B", "1.5 KiB", "12.0 MiB", "3.0 GiB"]


def test_known_state_has_one_rect_per_block_with_state_size_and_width():
    svg = render_blockmap(KNOWN)
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert svg.count('<rect class="ar-block') == 5
    big = rect(svg, BASE)
    assert big["data-state"] == "active_allocated" and big["data-size"] == str(12 * MiB)
    assert abs(float(big["width"]) - BAR_W * 12 / 20) < 0.01       # 12 of 20 MiB, to scale
    pending = rect(svg, BASE + 12 * MiB)
    assert pending["data-state"] == "active_pending_free"
    assert abs(float(pending["x"]) - (LABEL_W + BAR_W * 12 / 20)) < 0.01
    assert abs(float(pending["width"]) - BAR_W * 4 / 20) < 0.01
    assert rect(svg, BASE + 16 * MiB)["data-state"] == "inactive"
    tiny = rect(svg, BASE + 0x10000000)
    assert float(tiny["width"]) >= 1.5          # a 512 B tensor stays visible


def test_labels_pools_and_streams_are_readable():
    svg = render_blockmap(KNOWN)
    for text in (">12.0 MiB<", ">4.0 MiB<", "seg 0 · stream 0 · 20.0 MiB", "seg 1 · stream 7 · 2.0 MiB",
                 "Large pool", "Small pool", "reserved 22.0 MiB in 2 segments"):
        assert text in svg, text
    # the large pool is drawn above the small pool
    assert svg.index("Large pool") < svg.index("Small pool")


def test_highlight_simulated_title_and_unmapped_ranges():
    exp = segment(BASE, [(32 * MiB, "active_allocated"), (8 * MiB, "inactive"), (60 * MiB, "unmapped")],
                  expandable=True)
    svg = render_blockmap([exp], highlight={BASE}, title="after malloc", simulated=True)
    assert "after malloc (simulated)" in svg
    assert "expandable" in svg
    assert rect(svg, BASE)["class"] == "ar-block ar-changed"
    assert rect(svg, BASE + 40 * MiB)["fill"] == "url(#ar-unmapped)"
    assert rect(svg, BASE + 32 * MiB)["class"] == "ar-block"


def test_accepts_snapshot_dicts_and_allocators_and_is_deterministic():
    class FakeAllocator:
        def segments(self):
            return KNOWN
    assert render_blockmap({"segments": KNOWN, "device_traces": [[]]}) == render_blockmap(KNOWN)
    assert render_blockmap(FakeAllocator()) == render_blockmap(KNOWN)
    assert "No segments" in render_blockmap([])


def test_thousand_segments_render_quickly():
    """A smoke bound only; the real measurement is benchmarks/bench_viz.py."""
    state = [segment(BASE + i * 0x4000000, [(2 * MiB, "active_allocated"), (18 * MiB, "inactive")])
             for i in range(1000)]
    start = time.perf_counter()
    svg = render_blockmap(state)
    assert time.perf_counter() - start < 2.0
    assert svg.count('<rect class="ar-block') == 2000


def _outline(svg, addr):
    group = svg[svg.index(f'id="seg-{addr:#x}"'):]
    match = re.search(r'<rect class="ar-outline"[^>]*\swidth="([\d.]+)"', group)
    return float(match.group(1)), group[:group.index("</g>")]


def test_a_segment_bar_follows_its_size_and_says_when_it_cannot():
    """A 510 MiB and a 40 MiB segment do not look alike: bars are to scale with the largest segment of
    their pool; one too short to see is drawn MIN_SEGMENT_W long and marked so."""
    from allocator_ref.viz.blockmap import MIN_SEGMENT_W
    big = segment(BASE, [(510 * MiB, "inactive")])
    mid = segment(BASE + 0x40000000, [(40 * MiB, "active_allocated")])
    small = segment(BASE + 0x80000000, [(10 * MiB, "active_allocated")])
    svg = render_blockmap([big, mid, small])
    w_big, _ = _outline(svg, big["address"])
    w_mid, mid_group = _outline(svg, mid["address"])
    w_small, small_group = _outline(svg, small["address"])
    assert abs(w_big - BAR_W) < 0.01 and abs(w_mid - BAR_W * 40 / 510) < 0.01
    assert 'data-to-scale="0"' not in mid_group
    assert w_small == MIN_SEGMENT_W and 'data-to-scale="0"' in small_group and "to scale with" in small_group


def test_no_block_label_runs_past_its_block_and_small_blocks_are_named():
    from allocator_ref.viz.blockmap import text_width
    state = [segment(BASE, [(MiB, "active_allocated"), (1023 * 1024, "inactive"), (18 * MiB, "active_allocated")]),
             *KNOWN[1:]]
    svg = render_blockmap(state)
    for m in re.finditer(r'<rect class="ar-block[^"]*"[^>]*\swidth="([\d.]+)"[^>]*>(?:<title>.*?</title>)?</rect>'
                         r'(<text [^>]*>([^<]*)</text>)?', svg):
        if m.group(2):
            assert text_width(m.group(3), 11) <= float(m.group(1)), f"label {m.group(3)!r} overflows its block"
    lines = re.findall(r'class="ar-small-blocks"[^>]*>([^<]*)<', svg)
    assert any("1.0 MiB allocated, 1023.0 KiB free" in t for t in lines), lines   # too narrow in a 20 MiB bar
    assert any("512 B allocated" in t for t in lines), "the 512 B tensor is named under its bar"
    # Unlabelled is not small: the caption must not call large-pool blocks "small blocks".
    assert lines and all(not t.startswith("small blocks") for t in lines), lines


def test_a_long_segment_label_is_fitted_not_cut():
    long_id = {BASE: 123456789}
    svg = render_blockmap([segment(BASE, [(20 * MiB, "inactive")], stream=987654321, expandable=True)],
                          segment_ids=long_id)
    label = re.search(r'<text x="12\.00"[^>]*>(seg 123456789[^<]*)</text>', svg)
    assert label and "expandable" in label.group(1) and 'textLength="' in label.group(0)
