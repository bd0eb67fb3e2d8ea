"""One segment, two processes: the picture of a legacy (``'c'``) IPC share.

``render_ipc_share(segment, handle, receiver_ptr, ...) -> str`` draws, as SVG:

* the sender's segment (one ``cudaMalloc``) with its blocks to scale, the
  shared block outlined;
* the handle that travels: ``cudaIpcGetMemHandle`` names the *segment base*,
  so PyTorch sends (handle, offset of the block in the segment)
  (``THCPStorage_shareCuda`` in torch/csrc/StorageSharing.cpp);
* the receiver's mapping: ``cudaIpcOpenMemHandle`` maps the whole segment at
  an address of its own; the block is that base plus the offset;
* the lifetimes: the sender must keep the block allocated from the share
  until the receiver closes it, or the receiver sees whatever the sender's
  cache puts there next.

Every address and size comes from the objects passed in (the allocator's
segment dict, the handle, the pointer the receiver reported).
"""
from __future__ import annotations

from html import escape
from typing import Any

from ..editions.messages import translator
from .sizes import format_bytes

tr = translator("doctor")          # the picture's words in the reader's language (the snapshot tools' catalogue)


def _text(words: str) -> str:
    """Words for an SVG <text>: markup characters escaped, quotes left as they read."""
    return escape(words, quote=False)

WIDTH, LABEL_W, BAR_H = 960, 190, 22
SHARED, OTHER, FREE, MAPPED, INK = "#d62728", "#4c78a8", "#e9eef3", "#c7d3df", "#33414e"
MIN_W = 5


def _bar(out: list, y: float, blocks: list, base: int, total: int, shared_addr: int) -> None:
    bar_w = WIDTH - LABEL_W - 20
    for b in blocks:
        x = LABEL_W + (b["address"] - base) * bar_w / total
        w = max(MIN_W, b["size"] * bar_w / total)
        is_shared = b["address"] == shared_addr
        fill = SHARED if is_shared else (OTHER if b.get("state") == "active_allocated" else FREE)
        cls = "ar-ipc-shared" if is_shared else "ar-ipc-block"
        out.append(f'<rect class="{cls}" x="{x:.1f}" y="{y}" width="{w:.1f}" height="{BAR_H}" fill="{fill}" '
                   f'stroke="#ffffff" data-addr="{b["address"]:#x}" data-size="{b["size"]}"/>')
        if w > 60:
            ink = "#ffffff" if fill != FREE else INK
            out.append(f'<text x="{x + w / 2:.1f}" y="{y + 15}" text-anchor="middle" fill="{ink}">'
                       f'{escape(format_bytes(b["size"]))}{tr(" (shared)") if is_shared else ""}</text>')
    out.append(f'<rect x="{LABEL_W}" y="{y}" width="{bar_w}" height="{BAR_H}" fill="none" stroke="#7d8a96"/>')


def render_ipc_share(segment: dict, handle: Any, receiver_ptr: int, sender_pid: int, receiver_pid: int,
                     simulated: bool = True) -> str:
    """SVG of one block shared through a legacy handle (see the module docstring)."""
    base, total = segment["address"], segment["total_size"]
    shared = base + handle.offset
    recv_base = receiver_ptr - handle.offset
    bar_w = WIDTH - LABEL_W - 20
    x_block = LABEL_W + handle.offset * bar_w / total
    title = _text(tr("One segment, two processes: a legacy ('c') IPC handle")) + (
        _text(tr(" (simulated)")) if simulated else "")
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="ar-ipc" width="{WIDTH}" height="330" '
           f'viewBox="0 0 {WIDTH} 330" font-family="DejaVu Sans, Arial, sans-serif" font-size="12">',
           f'<rect width="{WIDTH}" height="330" fill="#ffffff"/>',
           f'<text x="4" y="18" font-size="14" font-weight="bold">{title}</text>']
    # the sender's segment
    out.append(f'<text x="4" y="60" fill="{INK}">{tr("sender, pid {pid}", pid=sender_pid)}</text>')
    out.append(f'<text x="4" y="75" fill="#5b6770" font-size="11">{tr("segment at {address}", address=f"{base:#x}")}</text>')
    _bar(out, 48, segment.get("blocks", []), base, total, shared)
    out.append(f'<text x="{x_block:.1f}" y="86" fill="{SHARED}" font-size="11">'
               + _text(tr("block {address} = base + {offset}", address=f"{shared:#x}",
                           offset=format_bytes(handle.offset))) + '</text>')
    # what travels
    out.append(f'<line x1="{x_block + 4:.1f}" y1="92" x2="{x_block + 4:.1f}" y2="142" stroke="{INK}" '
               f'stroke-dasharray="4 3" marker-end="url(#ar-arrow)"/>')
    out.append('<defs><marker id="ar-arrow" markerWidth="8" markerHeight="8" refX="4" refY="4" orient="auto">'
               f'<path d="M0,0 L8,4 L0,8 z" fill="{INK}"/></marker></defs>')
    out.append(f'<text class="ar-ipc-handle" x="{LABEL_W}" y="112" fill="{INK}">'
               + _text(tr("sent: cudaIpcGetMemHandle(segment base) = {n}-byte handle, plus offset {offset} "
                           "and size {size}", n=len(handle.ipc_handle), offset=format_bytes(handle.offset),
                           size=format_bytes(handle.size))) + '</text>')
    out.append(f'<text x="{LABEL_W}" y="128" fill="{INK}">'
               + _text(tr("the receiver: cudaIpcOpenMemHandle maps the whole {size} segment, then adds the offset",
                           size=format_bytes(total))) + '</text>')
    # the receiver's mapping
    out.append(f'<text x="4" y="162" fill="{INK}">{tr("receiver, pid {pid}", pid=receiver_pid)}</text>')
    out.append(f'<text x="4" y="177" fill="#5b6770" font-size="11">{tr("maps it at {address}", address=f"{recv_base:#x}")}</text>')
    mapped = [{"address": recv_base, "size": total, "state": "mapped"},
              {"address": receiver_ptr, "size": handle.size, "state": "active_allocated"}]
    _bar(out, 150, mapped[:1], recv_base, total, -1)
    _bar(out, 150, mapped[1:], recv_base, total, receiver_ptr)
    out.append(f'<text x="{x_block:.1f}" y="188" fill="{SHARED}" font-size="11">'
               + _text(tr("{address} = its base + {offset}", address=f"{receiver_ptr:#x}",
                           offset=format_bytes(handle.offset))) + '</text>')
    # lifetimes
    y0, x0, x1 = 228, LABEL_W, WIDTH - 20
    steps = [(0.05, "malloc"), (0.2, tr("share")), (0.85, tr("free: only after the receiver closes"))]
    out.append(f'<text x="4" y="{y0 + 4}" fill="{INK}">' + _text(tr("sender's block")) + '</text>')
    out.append(f'<line x1="{x0}" y1="{y0}" x2="{x1}" y2="{y0}" stroke="{OTHER}" stroke-width="3"/>')
    for frac, words in steps:
        x = x0 + frac * (x1 - x0)
        out.append(f'<circle cx="{x:.1f}" cy="{y0}" r="4" fill="{OTHER}"/>'
                   f'<text x="{x:.1f}" y="{y0 - 8}" text-anchor="middle" fill="{INK}" font-size="11">{escape(words)}</text>')
    ry = y0 + 36
    rx0, rx1 = x0 + 0.3 * (x1 - x0), x0 + 0.7 * (x1 - x0)
    out.append(f'<text x="4" y="{ry + 4}" fill="{INK}">' + _text(tr("receiver's mapping")) + '</text>')
    out.append(f'<line x1="{rx0:.1f}" y1="{ry}" x2="{rx1:.1f}" y2="{ry}" stroke="{SHARED}" stroke-width="3"/>')
    for x, words in ((rx0, tr("open")), (rx1, tr("close"))):
        out.append(f'<circle cx="{x:.1f}" cy="{ry}" r="4" fill="{SHARED}"/>'
                   f'<text x="{x:.1f}" y="{ry + 18}" text-anchor="middle" fill="{INK}" font-size="11">{words}</text>')
    out.append(f'<text x="{x0}" y="{ry + 40}" fill="#5b6770" font-size="11">'
               + _text(tr("Free the block before the receiver closes, and the sender's cache can give those bytes "
                           "to another tensor:")) + '</text>')
    out.append(f'<text x="{x0}" y="{ry + 54}" fill="#5b6770" font-size="11">'
               + _text(tr("the receiver then reads and writes that tensor instead.")) + '</text>')
    out.append("</svg>")
    return "".join(out)
