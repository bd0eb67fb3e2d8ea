"""Pictures of an allocator: block maps, animated traces, memory timelines.

    from allocator_ref.viz import render_blockmap, record_frames, TracePlayer, plot_memory
    with record_frames(a) as frames:          # a snapshot after every allocator event
        x = a.malloc(12 * 2**20); a.free(x)
    TracePlayer(frames, simulated=True)       # Play / step / slider, captions in plain words
    plot_memory(snapshot_dict)                # allocated vs reserved vs what nvidia-smi shows

One idea per module:

* ``blockmap``  -- state -> SVG (pure function)
* ``frames``    -- (states, events) -> frames with captions and highlights (pure), record_frames
* ``player``    -- ipywidgets: TracePlayer, LiveView, Compare
* ``timeline``  -- matplotlib: plot_memory, plot_active_timeline
* ``minichart``, ``sizes`` -- small helpers

Names load lazily: ``import allocator_ref.viz`` does not import ipywidgets or
matplotlib until a widget or a figure is asked for.
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "render_blockmap": "blockmap",
    "segments_of": "blockmap",
    "format_bytes": "sizes",
    "Frame": "frames",
    "FrameSource": "frames",
    "build_frames": "frames",
    "record_frames": "frames",
    "frames_of_snapshot": "replay_frames",
    "describe": "frames",
    "changed_addresses": "frames",
    "TracePlayer": "player",
    "LiveView": "player",
    "Compare": "player",
    "user_steps": "player",
    "memory_curves": "timeline",
    "record_memory": "timeline",
    "plot_memory": "timeline",
    "plot_active_timeline": "timeline",
    "active_lifetimes": "timeline",
    "MiniChart": "minichart",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'allocator_ref.viz' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
