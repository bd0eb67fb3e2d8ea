"""The snapshot format through PyTorch's versions: read every generation, write any for tests.

PyTorch has changed what ``torch.cuda.memory._snapshot()`` writes (the dict is built by
``THCPModule_memorySnapshot`` in ``torch/csrc/cuda/Module.cpp``, later
``torch/csrc/cuda/memory_snapshot.cpp``).  Newest first, by shape:

=========  ==================================================================================
current    blocks carry ``address``, ``requested_size``, ``frames``; segments
           ``is_expandable``, ``segment_pool_id``, ``frames``; trace entries ``time_us``,
           ``compile_context``, ``user_metadata``, ``pool_id``; ``allocator_settings``.
no-address blocks carry ``size``, ``requested_size``, ``state``, ``frames`` but no ``address``
           (PyTorch 2.1 to 2.3): the viewer adds each block's size to the segment's
           address as it walks them (``MemoryViz.js``), which is what :func:`upgrade` does.
history    blocks carry ``size``, ``state`` and a ``history`` list of ``{addr, real_size,
           frames}`` (PyTorch 2.0); segments no ``requested_size``; trace entries only
           ``action``, ``addr``/``device_free``, ``size``, ``stream``, ``frames``; the
           top level only ``segments`` and ``device_traces``.  ``_memory_viz.py`` reads the
           requested size from ``history[0]['real_size']`` (``_block_extra_legacy``).
list       ``torch.cuda.memory_snapshot()``: the bare list of segments, no trace at all
           (``validate_snapshot`` makes it ``{"segments": ..., "device_traces": []}``).
=========  ==================================================================================

:func:`upgrade` turns an older file into the current shape *after* the validator checked
its fields, so nothing downstream needs to know which generation it came from.  A block's
address is derived from the tiling (the validator has checked that the blocks add up to
their segment), never guessed.  :func:`rewrite_as` goes the other way: it rewrites a
snapshot the project recorded into an older generation's shape, which is how the tests
make a file of every generation without storing anyone's real trace.
"""
from __future__ import annotations

import copy

from .snapshot_error import SnapshotError, show

GENERATIONS = ("current", "no-address", "history", "list")


def needs_upgrade(snapshot: dict) -> bool:
    return any("address" not in b or ("requested_size" not in b and "history" in b)
               for s in snapshot["segments"] for b in s["blocks"])


def upgrade(snapshot: dict) -> dict:
    """The snapshot with every block's ``address`` (and, from a 2.0 ``history``, its
    ``requested_size`` and ``frames``) filled in; the caller's dicts are not changed."""
    if not needs_upgrade(snapshot):
        return snapshot
    segments = []
    for i, seg in enumerate(snapshot["segments"]):
        address, blocks = seg["address"], []
        for j, block in enumerate(seg["blocks"]):
            block = dict(block)
            block.setdefault("address", address)        # blocks tile their segment, in order
            if "history" in block:
                _from_history(block, f"segment {i} (address {seg['address']:#x}) block {j}")
            blocks.append(block)
            address += block["size"]
        segments.append(dict(seg, blocks=blocks))
    return dict(snapshot, segments=segments)


def _from_history(block: dict, where: str) -> None:
    """PyTorch 2.0: the block's last allocation is ``history[0]`` (as ``_memory_viz`` reads it)."""
    history = block["history"]
    if not isinstance(history, list) or (history and not isinstance(history[0], dict)):
        raise SnapshotError(f"{where}: 'history' is {show(history)}; expected a list of dicts")
    if not history:
        if "requested_size" not in block and block["state"] != "inactive":
            raise SnapshotError(f"{where}: an active block with an empty 'history' and no "
                                "'requested_size'; expected its last allocation in history[0]")
        return
    last = history[0]
    real = last.get("real_size")
    if "requested_size" not in block and block["state"] != "inactive":
        if not isinstance(real, int) or isinstance(real, bool) or not 0 <= real <= block["size"]:
            raise SnapshotError(f"{where}: history 0 'real_size' is {show(real)}; expected a whole "
                                f"number from 0 to the block's size {block['size']}")
        block["requested_size"] = real
    if "frames" not in block and isinstance(last.get("frames"), list):
        block["frames"] = last["frames"]


# ---------------------------------------------------------------- the other way, for tests

_SEGMENT_KEYS_2_0 = ("device", "address", "total_size", "allocated_size", "active_size", "stream",
                     "segment_type", "blocks")
_ENTRY_KEYS_2_0 = ("action", "addr", "device_free", "size", "stream", "frames")


def rewrite_as(snapshot: dict, generation: str) -> object:
    """A copy of ``snapshot`` (current shape) in the shape ``generation`` had (see the table above)."""
    if generation not in GENERATIONS:
        raise ValueError(f"unknown generation {generation!r}; choose one of {', '.join(GENERATIONS)}")
    snap = copy.deepcopy(snapshot)
    if generation == "current":
        return snap
    for seg in snap["segments"]:
        for block in seg["blocks"]:
            block.pop("address", None)
    if generation == "no-address":
        for seg in snap["segments"]:
            seg.pop("is_expandable", None)
        return snap
    segments = []
    for seg in snap["segments"]:
        old = {k: seg[k] for k in _SEGMENT_KEYS_2_0 if k in seg}
        old["blocks"], address = [], seg["address"]
        for block in seg["blocks"]:
            old["blocks"].append(_block_2_0(block, address))
            address += block["size"]
        segments.append(old)
    if generation == "list":
        return segments
    traces = [[{k: e[k] for k in _ENTRY_KEYS_2_0 if k in e} for e in trace]
              for trace in snap.get("device_traces", [])]
    return {"segments": segments, "device_traces": traces}


def _block_2_0(block: dict, address: int) -> dict:
    old = {"size": block["size"], "state": block["state"]}
    if block["state"] != "inactive":          # 2.0 kept a history for blocks that were handed out
        old["history"] = [{"addr": address, "real_size": block.get("requested_size", block["size"]),
                           "frames": block.get("frames", [])}]
    return old
