"""The block map: every segment as a horizontal bar, its blocks coloured by state.

``render_blockmap(state) -> str`` is a pure function from allocator state to an
SVG document.  ``state`` may be

* a list of segment dicts (``torch.cuda.memory_snapshot()``),
* a snapshot dict (``torch.cuda.memory._snapshot()``: its ``segments`` are used),
* an allocator (anything with ``.segments()`` or ``.snapshot()``).

Reading the picture:

* one row per segment (one ``cudaMalloc``, or one mapped range of an
  expandable segment); a bar's length follows its segment's size, to scale
  with the largest segment of its pool group (a segment too small to see at
  that scale is drawn ``MIN_SEGMENT_W`` wide and says so in its tooltip), and
  its label carries its size; blocks are to scale within their segment;
* a block wide enough carries its size; the blocks too narrow for a label are
  listed, in address order, on a line under their segment's bar;
* blue = allocated to a tensor, orange = freed but waiting for another
  stream's work (``active_pending_free``), pale = free in the cache
  (``inactive``), hatched = reserved virtual addresses with no memory mapped
  (expandable segments; only when the state includes blocks with state
  ``"unmapped"`` -- PyTorch's snapshot never reports them);
* the small pool (blocks up to 1 MiB, 2 MiB segments) and the large pool are
  drawn as separate groups; a private pool (CUDA graphs, ``MemPool``) gets
  its own group too.

Every rectangle carries ``data-addr`` (hex), ``data-state`` and ``data-size``
so that tests, and a browser, can find blocks without parsing geometry.  The
output is deterministic: the same state gives the same bytes.
"""
from __future__ import annotations

import unicodedata
from html import escape
from typing import Any, Iterable, Mapping, Optional

from ..editions.messages import translator
from .sizes import format_bytes

tr = translator("doctor")      # the block map's words in the reader's language (the doctor's page draws it too)

# Colours: colour-blind-safe (Tableau 10), allocated dark enough for white text.
STATE_STYLE = {
    "active_allocated": ("#4c78a8", "#ffffff"),      # fill, text colour
    "active_pending_free": ("#f58518", "#ffffff"),
    "inactive": ("#e9eef3", "#33414e"),
    "unmapped": ("url(#ar-unmapped)", "#5b6770"),
}
STATE_WORDS = {
    "active_allocated": "allocated",
    "active_pending_free": "pending free (waits for another stream)",
    "inactive": "free (cached)",
    "unmapped": "unmapped virtual range",
}


def state_words(state: str) -> str:
    """A block state in the reader's language: STATE_WORDS' English, or its Chinese."""
    return {"active_allocated": tr("allocated"), "active_pending_free": tr("pending free (waits for another stream)"),
            "inactive": tr("free (cached)"), "unmapped": tr("unmapped virtual range")}.get(state, state)


def _short(words: str) -> str:
    """'free (cached)' -> 'free' (the words before the parenthesis, in either language)."""
    return words.split(" (")[0].split("（")[0]
HIGHLIGHT = "#d62728"
# Pool colours: a stripe left of each segment and its group heading say which pool owns it.
DEFAULT_POOL_COLOUR = "#9aa5b1"
PRIVATE_POOL_COLOURS = ("#54a24b", "#b279a2", "#e45756", "#72b7b2", "#eeca3b", "#9d755d", "#ff9da6")


def pool_colour(pool_id) -> str:
    """The colour of a pool id: grey for the default pools, a stable palette colour for a private one
    (the same id keeps its colour in every frame of a film)."""
    pool_id = tuple(pool_id or (0, 0))
    if pool_id == (0, 0):
        return DEFAULT_POOL_COLOUR
    return PRIVATE_POOL_COLOURS[(pool_id[0] * 7 + pool_id[1]) % len(PRIVATE_POOL_COLOURS)]

# Geometry, in SVG pixels.
WIDTH = 960
LABEL_W = 250          # left column: "seg 3 · stream 0 · 20.0 MiB"
ROW_H = 22
BAR_H = 16
HEADER_H = 24          # one pool group's heading
LEGEND_H = 30
MIN_BLOCK_W = 5        # a block narrower than this to scale is drawn this wide, on top, and marked
MIN_SEGMENT_W = 48     # a segment shorter than this to scale is drawn this long (its tooltip says so)
CHAR_W = {12: 7.0, 11: 6.4, 10: 5.8}    # about how wide a character is at each font size (DejaVu Sans)
SMALL_LINE_H = 12      # the line under a bar that lists its blocks too narrow for a label
MAX_LISTED = 8         # at most this many narrow blocks named on that line; the rest are counted


def text_width(text: str, size: int = 12) -> float:
    """About how many pixels ``text`` takes at ``size`` px (used so that no label overflows its box)."""
    return CHAR_W[size] * sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def fitted_text(text: str, x: float, y: float, room: float, size: int = 12, **attrs) -> str:
    """An SVG text that never runs past ``room`` pixels: squeezed with ``textLength`` when it would,
    never cut (a truncated label would hide the number it carries)."""
    extra = "".join(f' {k.replace("_", "-")}="{v}"' for k, v in attrs.items())
    fit = (f' textLength="{room:.1f}" lengthAdjust="spacingAndGlyphs"'
           if text_width(text, size) > room else "")
    return f'<text x="{x:.2f}" y="{y}" font-size="{size}"{fit}{extra}>{escape(text)}</text>'


def segments_of(state: Any, device: Optional[int] = None) -> list:
    """The segment list inside whatever we were given (see the module docstring)."""
    if callable(getattr(state, "segments", None)):
        try:                          # an allocator: just the segments, without a "snapshot" event
            state = state.segments(record=False)
        except TypeError:
            state = state.segments()
    elif callable(getattr(state, "snapshot", None)):
        state = state.snapshot()
    if isinstance(state, Mapping):
        state = state.get("segments", [])
    segments = list(state)
    if device is not None:
        segments = [s for s in segments if s.get("device", 0) == device]
    return segments


def default_segment_ids(segments: Iterable[dict]) -> dict:
    """Number segments 0, 1, 2 ... in address order (what ``segment 3`` means in a caption)."""
    return {s["address"]: i for i, s in enumerate(sorted(segments, key=lambda s: s["address"]))}


def pool_key(segment: dict) -> tuple:
    """Which group a segment is drawn in: default pools first, large before small."""
    pool_id = tuple(segment.get("segment_pool_id", (0, 0)) or (0, 0))
    return (pool_id != (0, 0), pool_id, segment.get("segment_type", "large") != "large")


def pool_title(segment: dict) -> str:
    small = segment.get("segment_type") == "small"
    name = (tr("Small pool: requests up to 1 MiB, 2 MiB segments") if small
            else tr("Large pool: requests over 1 MiB"))
    pool_id = tuple(segment.get("segment_pool_id", (0, 0)) or (0, 0))
    if pool_id != (0, 0):
        name = (tr("Private pool {pool} (small blocks)", pool=pool_id) if small else
                tr("Private pool {pool} (large blocks)", pool=pool_id))
    return name


def segment_count(n: int) -> str:
    """'(1 segment)', '(3 segments)' after a pool's title, in the reader's language."""
    return tr("(1 segment)") if n == 1 else tr("({n} segments)", n=n)


def render_blockmap(state: Any, *, highlight: Iterable[int] = (), segment_ids: Optional[dict] = None,
                    title: str = "", simulated: bool = False, width: int = WIDTH,
                    device: Optional[int] = None) -> str:
    """Draw ``state`` as an SVG string (see the module docstring).

    highlight:   block or segment addresses to outline in red (what just changed).
    segment_ids: address -> number shown as "seg N"; the player passes numbers
                 that stay put while segments come and go.  Default: address order.
    simulated:   say "(simulated)" in the title, as every simulated figure must.
    """
    segments = segments_of(state, device)
    ids = segment_ids if segment_ids is not None else default_segment_ids(segments)
    marked = set(highlight)
    bar_w = width - LABEL_W - 10

    body: list[str] = []
    legend, legend_h = _legend(segments, 22 if (title or simulated) else 0, width)
    y = legend_h + (22 if (title or simulated) else 0)
    groups: dict[tuple, list] = {}
    for seg in segments:
        groups.setdefault(pool_key(seg), []).append(seg)
    for key in sorted(groups):
        group = sorted(groups[key], key=lambda s: (ids.get(s["address"], 1 << 62), s["address"]))
        colour = pool_colour(group[0].get("segment_pool_id"))
        body.append(f'<rect class="ar-pool-key" x="4" y="{y + 6}" width="10" height="12" fill="{colour}"/>')
        body.append(f'<text class="ar-pool" x="18" y="{y + 16}" font-weight="bold">'
                    f'{escape(pool_title(group[0]))} {escape(segment_count(len(group)))}</text>')
        y += HEADER_H
        largest = max(_span(seg) for seg in group)
        for seg in group:
            y += _draw_segment(body, seg, ids.get(seg["address"], "?"), y, bar_w, marked, largest)
        y += 6
    if not segments:
        body.append(f'<text x="4" y="{y + 16}" fill="#5b6770">'
                    + escape(tr("No segments: the allocator has not reserved any memory yet.")) + '</text>')
        y += ROW_H

    height = y + 4
    head = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="ar-blockmap" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="DejaVu Sans, Arial, sans-serif" font-size="12" '
        f'data-segments="{len(segments)}">',
        '<defs><pattern id="ar-unmapped" width="6" height="6" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)"><rect width="6" height="6" fill="#f7f7f7"/>'
        '<line x1="0" y1="0" x2="0" y2="6" stroke="#b8c0c8" stroke-width="2"/></pattern></defs>',
        f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
    ]
    if title or simulated:
        text = title or tr("Allocator state")
        if simulated and "simulated" not in text.lower() and tr(" (simulated)").strip() not in text:
            text += tr(" (simulated)")
        head.append(f'<text class="ar-title" x="4" y="16" font-size="14" font-weight="bold">{escape(text)}</text>')
    head.append(legend)
    return "".join(head + body + ["</svg>"])


def _blocks(seg: dict) -> list:
    return seg.get("blocks") or [{"address": seg["address"], "size": seg["total_size"],
                                  "state": "inactive", "requested_size": 0}]


def _span(seg: dict) -> int:
    return max(seg.get("total_size", 0), sum(b["size"] for b in _blocks(seg))) or 1


def _draw_segment(out: list, seg: dict, seg_id: Any, y: int, full_w: float, marked: set,
                  largest: int = 0) -> int:
    """One row: the label on the left, the bar of blocks on the right (its length to scale with the
    group's ``largest`` segment), then the line naming blocks too narrow for a label.  Returns the
    row's height."""
    blocks = _blocks(seg)
    span = _span(seg)
    to_scale = full_w * span / max(largest, span)
    bar_w = max(to_scale, min(MIN_SEGMENT_W, full_w))
    scale = bar_w / span
    addr = seg["address"]
    stream = seg.get("stream", 0)
    kind = tr(" · expandable") if seg.get("is_expandable") else ""
    label = tr("seg {segment} · stream {stream} · {size}{kind}", segment=seg_id, stream=stream,
               size=format_bytes(seg.get("total_size", span)), kind=kind)
    not_to_scale = "" if bar_w == to_scale else ' data-to-scale="0"'
    out.append(f'<g class="ar-segment" id="seg-{addr:#x}" data-addr="{addr:#x}" data-size="{seg.get("total_size", span)}" '
               f'data-stream="{stream}" data-segment="{seg_id}" data-pool="{seg.get("segment_type", "large")}"'
               f'{not_to_scale}>')
    pool_id = tuple(seg.get("segment_pool_id") or (0, 0))
    out.append(f'<rect class="ar-pool-stripe" data-pool-id="{pool_id[0]},{pool_id[1]}" x="4" y="{y}" width="5" '
               f'height="{BAR_H}" fill="{pool_colour(pool_id)}"/>')
    out.append(fitted_text(label, 12, y + 13, LABEL_W - 16, fill="#33414e"))
    x0 = LABEL_W
    offset = 0
    tiny, unlabelled = [], []
    for block in blocks:
        x, w = x0 + offset * scale, block["size"] * scale
        offset += block["size"]
        if text_width(format_bytes(block["size"]), 11) + 4 > max(w, MIN_BLOCK_W):
            unlabelled.append(block)
        if w < MIN_BLOCK_W:          # a 512 B block in a 2 MiB segment is 0.2 px: drawn after, wider
            tiny.append((block, x))
            continue
        out.append(_block_rect(block, x, y, w, addr, seg_id, marked))
    for block, x in tiny:
        x = min(max(x, x0), x0 + bar_w - MIN_BLOCK_W)
        out.append(_block_rect(block, x, y, MIN_BLOCK_W, addr, seg_id, marked, widened=True))
        out.append(f'<path class="ar-widened-mark" d="M{x + MIN_BLOCK_W / 2:.2f},{y + BAR_H + 0.5} '
                   f'l3,5 h-6 z" fill="#33414e"/>')
    stroke, sw = (HIGHLIGHT, 2.5) if addr in marked else ("#7d8a96", 1)
    outline_tip = ("" if bar_w == to_scale else
                   "<title>" + escape(tr("{size}: drawn {px} px long so that it shows; to scale with the largest "
                                         "segment here ({largest}) it is shorter", size=format_bytes(span),
                                         px=MIN_SEGMENT_W, largest=format_bytes(largest))) + "</title>")
    out.append(f'<rect class="ar-outline" x="{x0}" y="{y}" width="{bar_w:.2f}" height="{BAR_H}" fill="none" '
               f'stroke="{stroke}" stroke-width="{sw}">{outline_tip}</rect>')
    height = ROW_H
    if unlabelled:
        named = [f"{format_bytes(b['size'])} {_short(state_words(b.get('state', 'inactive')))}"
                 for b in unlabelled[:MAX_LISTED]]
        more = len(unlabelled) - len(named)
        # "unlabelled", not "small": a 16 MiB large-pool block can be too narrow to label in a wide segment.
        text = tr("blocks too narrow to label, in order: {blocks}", blocks=tr(", ").join(named)) + (
            tr(" and {n} more (hover for each)", n=more) if more else "")
        out.append(fitted_text(text, x0, y + BAR_H + 11, full_w, size=10, fill="#33414e",
                               **{"class": "ar-small-blocks"}))
        height += SMALL_LINE_H
    out.append("</g>")
    return height


def _block_rect(block: dict, x: float, y: int, w: float, seg_addr: int, seg_id: Any, marked: set,
                widened: bool = False) -> str:
    state = block.get("state", "inactive")
    fill, ink = STATE_STYLE.get(state, STATE_STYLE["inactive"])
    addr, size = block["address"], block["size"]
    changed = addr in marked
    stroke = f'stroke="{HIGHLIGHT}" stroke-width="2.5"' if changed else 'stroke="#ffffff" stroke-width="0.5"'
    tip = tr("{state}: {size} at {address} (+{offset} in seg {segment})", state=state_words(state),
             size=format_bytes(size), address=f"{addr:#x}", offset=f"{addr - seg_addr:#x}", segment=seg_id)
    if state != "inactive" and block.get("requested_size"):
        tip += tr("; requested {size}", size=format_bytes(block["requested_size"]))
    if widened:
        tip += tr(" (drawn {px} px wide so that it shows; to scale it is narrower)", px=MIN_BLOCK_W)
    cls = "ar-block" + (" ar-changed" if changed else "") + (" ar-widened" if widened else "")
    mark = ' data-widened="1"' if widened else ""
    rect = (f'<rect class="{cls}" id="blk-{addr:#x}" data-addr="{addr:#x}" data-state="{state}" '
            f'data-size="{size}"{mark} '
            f'x="{x:.2f}" y="{y}" width="{w:.2f}" height="{BAR_H}" fill="{fill}" {stroke}>'
            f'<title>{escape(tip)}</title></rect>')
    if text_width(format_bytes(size), 11) + 4 > w:     # the label would run over its neighbours
        return rect
    return (rect + f'<text x="{x + w / 2:.2f}" y="{y + 12}" text-anchor="middle" fill="{ink}" '
            f'font-size="11" pointer-events="none">{format_bytes(size)}</text>')


def _too_narrow(seg: dict, width: int, largest: int = 0) -> bool:
    """Does this segment have a block that _draw_segment widens (same arithmetic)?"""
    blocks = seg.get("blocks") or ()
    span = _span(seg)
    full_w = width - LABEL_W - 10
    bar_w = max(full_w * span / max(largest, span), min(MIN_SEGMENT_W, full_w))
    return any(b["size"] * bar_w / span < MIN_BLOCK_W for b in blocks)


def _legend(segments: list, top: int, width: int) -> tuple[str, int]:
    """Colour key plus the totals a learner compares with memory_stats(); wraps on narrow pictures.

    Returns the SVG and the height it takes.
    """
    totals = {"active_allocated": 0, "active_pending_free": 0, "inactive": 0}
    for seg in segments:
        for block in seg.get("blocks", ()):
            if block.get("state") in totals:
                totals[block["state"]] += block["size"]
    reserved = sum(s.get("total_size", 0) for s in segments)
    items = []
    for state in ("active_allocated", "active_pending_free", "inactive", "unmapped"):
        words = _short(state_words(state))
        amount = f" {format_bytes(totals[state])}" if state in totals else ""
        items.append((STATE_STYLE[state][0], words + amount))
    items.append((None, tr("reserved {size} in {n} segment", size=format_bytes(reserved), n=len(segments))
                   if len(segments) == 1 else
                   tr("reserved {size} in {n} segments", size=format_bytes(reserved), n=len(segments))))
    largest = {}
    for seg in segments:
        largest[pool_key(seg)] = max(largest.get(pool_key(seg), 0), _span(seg))
    if any(_too_narrow(seg, width, largest[pool_key(seg)]) for seg in segments):
        items.append((None, tr("\u25b2 marks a block too small to see, drawn wider than to scale")))
    parts = [f'<g class="ar-legend" transform="translate(4,{top + 6})">']
    x = y = 0
    for fill, text in items:
        item_w = 24 + round(text_width(text))     # about 7 px per character at 12 px (a Chinese one takes two)
        if x and x + item_w > width - 8:
            x, y = 0, y + 18
        if fill:
            parts.append(f'<rect x="{x}" y="{y}" width="12" height="12" fill="{fill}" stroke="#7d8a96" '
                         f'stroke-width="0.5"/>')
        parts.append(f'<text x="{x + (16 if fill else 0)}" y="{y + 10}" fill="#33414e">{escape(text)}</text>')
        x += item_w + 8
    parts.append("</g>")
    return "".join(parts), LEGEND_H + y
