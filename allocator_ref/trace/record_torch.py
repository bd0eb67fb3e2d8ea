"""Record the allocation sequence of a real PyTorch run on the CPU, as a trace to replay.

No GPU?  The sizes and lifetimes of a model's tensors are the same on the CPU:
every storage PyTorch creates asks its allocator for the same number of bytes.
``record_torch(fn)`` runs ``fn`` under ``torch.profiler`` with
``profile_memory=True``, turns each ``[memory]`` event (address, +bytes on
allocation, -bytes on free) into ``alloc`` / ``free_requested`` /
``free_completed`` trace entries, and returns a snapshot-shaped dict that
``replay`` and ``python -m allocator_ref compare`` accept:

    import torch, allocator_ref as ar
    from allocator_ref.trace.record_torch import record_torch
    model = torch.nn.TransformerEncoderLayer(256, 4, batch_first=True)
    snap = record_torch(lambda: model(torch.randn(8, 128, 256)).sum().backward())
    ar.save_snapshot(snap, "gpt_block.pickle")   # python -m allocator_ref compare gpt_block.pickle

What it cannot know: there are no segments (the CPU has no caching
allocator to copy), no streams (everything is stream 0), and the addresses
are CPU addresses, used only to pair each free with its allocation.  So such
a trace replays on the runner (a what-if), not with ``--verify``.

On a GPU, CuPy workloads are recorded directly by the reference allocator
itself: ``with allocator_ref.integrations.cupy.use(allocator): ...`` then
``allocator.snapshot()``.
"""
from __future__ import annotations

import json
import os
import tempfile
from typing import Any, Callable


def _memory_events(trace_path: str) -> list[dict]:
    with open(trace_path) as f:
        data = json.load(f)
    events = [e for e in data.get("traceEvents", []) if e.get("name") == "[memory]"]
    events.sort(key=lambda e: e.get("ts", 0))
    return events


def events_to_trace(memory_events: list[dict]) -> list[dict]:
    """Profiler ``[memory]`` events -> PyTorch-style trace entries (CPU events only)."""
    trace, live = [], {}
    for e in memory_events:
        args = e.get("args", {})
        if args.get("Device Type", 0) != 0:        # 0 = CPU; anything else was not recorded here
            continue
        addr, nbytes = int(args["Addr"]), int(args["Bytes"])
        time_us = int(e.get("ts", 0))
        if nbytes > 0:
            live[addr] = nbytes
            trace.append({"action": "alloc", "addr": addr, "size": nbytes, "stream": 0, "time_us": time_us})
        elif nbytes < 0 and addr in live:          # frees of storages made before recording are dropped
            size = live.pop(addr)
            for action in ("free_requested", "free_completed"):
                trace.append({"action": action, "addr": addr, "size": size, "stream": 0, "time_us": time_us})
    return trace


def record_torch(fn: Callable[[], Any]) -> dict:
    """Run ``fn()`` on the CPU and return its allocations as a snapshot dict (no segments)."""
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile
    except ImportError as exc:
        raise ImportError("record_torch needs PyTorch (the CPU wheel is enough): pip install torch") from exc
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    handle, path = tempfile.mkstemp(suffix=".json")
    os.close(handle)
    try:
        prof.export_chrome_trace(path)
        trace = events_to_trace(_memory_events(path))
    finally:
        os.unlink(path)
    return {
        "segments": [],
        "device_traces": [trace],
        "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": ""},
        "external_annotations": [],
        "recorded_with": f"torch {torch.__version__} on the CPU (torch.profiler memory events)",
    }
