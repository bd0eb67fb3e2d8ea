"""Check every field of a loaded snapshot, so that nothing downstream meets nonsense.

A snapshot is the dict ``torch.cuda.memory._snapshot()`` returns (built by
``THCPModule_memorySnapshot`` in PyTorch's ``torch/csrc/cuda/Module.cpp`` from
``DeviceCachingAllocator::snapshot`` and its ``TraceEntry`` ring buffer).
:func:`validate_snapshot` checks what the course's code relies on, and
refuses the first thing wrong with one line that says where it is::

    segment 3 (address 0x7f0000000000): block 2 has size -5; expected a whole number >= 1

What is checked:

* types and ranges of every field the course reads (addresses below 2**64,
  sizes below 1 EiB, known block states and trace actions);
* each segment's blocks tile it exactly, and no two segments of a device overlap;
* each segment, block and trace entry is its own record: PyTorch never shares
  them, and a file that names one record many times (pickle's memo makes that
  cheap) only multiplies the work of whoever reads it.

Fields the course does not use are left alone, so newer PyTorch versions load; files from
older versions (blocks without ``address``, PyTorch 2.0's ``history``) are brought to the
current shape once checked (``formats.py``).
"""
from __future__ import annotations

from typing import Any

from ..editions.messages import translator
from ..events import ACTIONS, NEW_MEMORY, RELEASES, Action
from .npu_detect import set_aside_workspace
from .formats import upgrade       # older PyTorch versions' shapes, made current (formats.py)
from .trace_record import TraceRecord
from .snapshot_error import SnapshotError, show

# The refusals of a file's overall shape in the reader's language; a field path ('segment 0') and a
# value stay as they come.
tr = translator("doctor")

ADDRESS_LIMIT = 2**64            # CUDA device pointers are 64-bit
SIZE_LIMIT = 2**60               # 1 EiB: far beyond any GPU, and round_size cannot overflow below it
BLOCK_STATES = ("active_allocated", "active_pending_free", "inactive")
SEGMENT_TYPES = ("small", "large")
# Actions whose size is a real, non-zero amount of memory (PyTorch's malloc returns nullptr
# for a size-0 request without recording anything: CUDACachingAllocator's allocate()).
SIZED_ACTIONS = (Action.ALLOC.value,) + NEW_MEMORY + RELEASES


def _int(record: dict, key: str, where: str, low: int, high: int, required: bool = True):
    """record[key] as a whole number in [low, high); bools are refused (True is not a size)."""
    if key not in record:
        if required:
            raise SnapshotError(f"{where}: no '{key}' field")
        return None
    value = record[key]
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value < high:
        bound = f"below {high:#x}" if high >= 2**32 else f"below {high}"
        raise SnapshotError(f"{where}: '{key}' is {show(value)}; expected a whole number >= {low} "
                            f"and {bound}")
    return value


def _str(record: dict, key: str, where: str, choices=None, required: bool = False):
    if key not in record:
        if required:
            raise SnapshotError(f"{where}: no '{key}' field")
        return None
    value = record[key]
    if not isinstance(value, str) or (choices is not None and value not in choices):
        expected = f"one of {', '.join(choices)}" if choices else "a string"
        raise SnapshotError(f"{where}: '{key}' is {show(value)}; expected {expected}")
    return value


def _list(record: dict, key: str, where: str, required: bool = False):
    if key not in record:
        if required:
            raise SnapshotError(f"{where}: no '{key}' list")
        return None
    value = record[key]
    if not isinstance(value, list):
        raise SnapshotError(f"{where}: '{key}' is {show(value)}; expected a list")
    return value


def _pair(record: dict, key: str, where: str) -> None:
    """pool ids are (int, int) tuples: ``MempoolId_t``."""
    if key not in record:
        return
    value = record[key]
    if not (isinstance(value, (tuple, list)) and len(value) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
        raise SnapshotError(f"{where}: '{key}' is {show(value)}; expected a pair of whole numbers")


class _Checker:
    def __init__(self, distinct_records: bool) -> None:
        self.distinct_records = distinct_records
        self.seen: set = set()            # ids of records met so far (each must be its own)
        self.frames_ok: set = set()       # ids of frames and frame lists already checked (PyTorch shares them)

    def record(self, value: Any, where: str) -> dict:
        if not isinstance(value, dict):
            raise SnapshotError(tr("{where}: is {value}; expected a dict", where=where, value=show(value)))
        self.once(value, where)
        return value

    def once(self, value: Any, where: str) -> None:
        if not self.distinct_records:
            return
        if id(value) in self.seen:
            raise SnapshotError(f"{where}: the same record appears more than once in the file "
                                "(PyTorch writes each one separately; this file was built to "
                                "multiply the work of reading it)")
        self.seen.add(id(value))

    def frames(self, record: dict, where: str) -> None:
        frames = _list(record, "frames", where)
        if frames is None or id(frames) in self.frames_ok:
            return
        ok = self.frames_ok
        for k, frame in enumerate(frames):
            if id(frame) in ok:
                continue
            here = f"{where} frame {k}"
            if not isinstance(frame, dict):
                raise SnapshotError(f"{here}: is {show(frame)}; expected a dict")
            _str(frame, "filename", here)
            _str(frame, "name", here)
            _int(frame, "line", here, -1, 2**31, required=False)
            ok.add(id(frame))
        ok.add(id(frames))

    def segment(self, i: int, seg: Any) -> tuple:
        where = f"segment {i}"
        seg = self.record(seg, where)
        address = _int(seg, "address", where, 0, ADDRESS_LIMIT)
        where = f"segment {i} (address {address:#x})"
        total = _int(seg, "total_size", where, 1, SIZE_LIMIT)
        if address + total > ADDRESS_LIMIT:
            raise SnapshotError(f"{where}: its {total} bytes run past the end of the 64-bit address space")
        _int(seg, "stream", where, 0, ADDRESS_LIMIT)
        device = _int(seg, "device", where, 0, 2**16, required=False) or 0
        for key in ("allocated_size", "active_size", "requested_size"):
            _int(seg, key, where, 0, total + 1, required=False)
        _str(seg, "segment_type", where, SEGMENT_TYPES)
        if "is_expandable" in seg and not isinstance(seg["is_expandable"], bool):
            raise SnapshotError(f"{where}: 'is_expandable' is {show(seg['is_expandable'])}; expected True or False")
        _pair(seg, "segment_pool_id", where)
        self.frames(seg, where)
        blocks = _list(seg, "blocks", where, required=True)
        self.blocks(blocks, address, total, where)
        return device, address, total, where

    def blocks(self, blocks: list, address: int, total: int, where: str) -> None:
        if not blocks:
            raise SnapshotError(f"{where}: has no blocks (every segment is tiled by its blocks)")
        self.once(blocks, f"{where} blocks list")
        cursor = address
        for j, block in enumerate(blocks):
            here = f"{where} block {j}"
            block = self.record(block, here)
            size = _int(block, "size", here, 1, total + 1)
            start = _int(block, "address", here, 0, ADDRESS_LIMIT, required=False)
            if start is not None and start != cursor:
                raise SnapshotError(f"{here}: starts at {start:#x} but the previous block ends at "
                                    f"{cursor:#x}; blocks must tile their segment")
            state = _str(block, "state", here, BLOCK_STATES, required=True)
            # A free block keeps the request of its last user (PyTorch does not clear it).
            top = SIZE_LIMIT if state == "inactive" else size + 1
            _int(block, "requested_size", here, 0, top, required=False)
            self.frames(block, here)
            if "history" in block:
                self.history(block["history"], here)
            cursor += size
        if cursor != address + total:
            raise SnapshotError(f"{where}: its blocks add up to {cursor - address} bytes, not its "
                                f"total_size {total}")

    def history(self, history: Any, where: str) -> None:
        """PyTorch 2.0's per-block ``history``: a list of ``{addr, real_size, frames}`` records.

        Checked here like every other field (formats.py then reads the first one), so a bad
        frame is refused at load naming its block, not later by whoever reads the stack."""
        if not isinstance(history, list):
            raise SnapshotError(f"{where}: 'history' is {show(history)}; expected a list of dicts")
        for h, entry in enumerate(history):
            here = f"{where} history {h}"
            if not isinstance(entry, dict):
                raise SnapshotError(f"{here}: is {show(entry)}; expected a dict")
            _int(entry, "addr", here, 0, ADDRESS_LIMIT, required=False)
            _int(entry, "real_size", here, 0, SIZE_LIMIT, required=False)
            self.frames(entry, here)

    def entry(self, d: int, k: int, e: Any) -> None:
        if type(e) is TraceRecord:
            # Made by stream_build.py only from an entry that passed these same checks
            # (_plain_entry and frames) and was placed once in the file (safe_pickle's Plan).
            return
        if type(e) is dict and _plain_entry(e):
            # The common case, checked without building messages (a trace has 100,000s of
            # entries); anything unusual takes the field-by-field path below for its message.
            self.once(e, f"device {d} trace entry {k}")
            if "frames" in e:
                self.frames(e, f"device {d} trace entry {k} ({e['action']})")
            return
        where = f"device {d} trace entry {k}"
        e = self.record(e, where)
        action = _str(e, "action", where, ACTIONS, required=True)
        where = f"device {d} trace entry {k} ({action})"
        low = 1 if action in SIZED_ACTIONS else 0
        size = _int(e, "size", where, low, SIZE_LIMIT)
        if action == "oom":
            _int(e, "device_free", where, 0, ADDRESS_LIMIT, required=False)
        else:
            addr = _int(e, "addr", where, 0, ADDRESS_LIMIT)
            if addr + size > ADDRESS_LIMIT:
                raise SnapshotError(f"{where}: {size} bytes at {addr:#x} run past the end of the "
                                    "64-bit address space")
        _int(e, "stream", where, 0, ADDRESS_LIMIT, required=action != "snapshot")
        if "time_us" in e and e["time_us"] is not None:
            _int(e, "time_us", where, 0, 2**63)
        _str(e, "compile_context", where)
        _str(e, "user_metadata", where)
        _pair(e, "pool_id", where)
        self.frames(e, where)


_ACTION_SET = frozenset(ACTIONS)
_SIZED_SET = frozenset(SIZED_ACTIONS)


def _plain_entry(e: dict) -> bool:
    """True when ``e`` passes every check of ``_Checker.entry`` but the frames' (same rules)."""
    action, size = e.get("action"), e.get("size")
    if type(action) is not str or action not in _ACTION_SET or type(size) is not int:
        return False
    if not (1 if action in _SIZED_SET else 0) <= size < SIZE_LIMIT:
        return False
    if action == "oom":
        free = e.get("device_free", 0)
        if type(free) is not int or not 0 <= free < ADDRESS_LIMIT:
            return False
    else:
        addr = e.get("addr")
        if type(addr) is not int or not 0 <= addr < ADDRESS_LIMIT or addr + size > ADDRESS_LIMIT:
            return False
    stream = e.get("stream", 0 if action == "snapshot" else None)
    if type(stream) is not int or not 0 <= stream < ADDRESS_LIMIT:
        return False
    time_us = e.get("time_us")
    if time_us is not None and (type(time_us) is not int or not 0 <= time_us < 2**63):
        return False
    for key in ("compile_context", "user_metadata"):
        if key in e and type(e[key]) is not str:
            return False
    pool_id = e.get("pool_id", (0, 0))
    return (type(pool_id) in (tuple, list) and len(pool_id) == 2
            and type(pool_id[0]) is int and type(pool_id[1]) is int)


def validate_snapshot(obj: Any, distinct_records: bool = False) -> dict:
    """The snapshot dict, checked; raises SnapshotError naming the first bad field and where it is.

    ``distinct_records`` also refuses a record that appears twice (loading from a file).
    A bare list of segments (``torch.cuda.memory_snapshot()``'s output) becomes
    ``{"segments": ..., "device_traces": []}`` as torch's ``_memory_viz`` reads it.
    """
    if isinstance(obj, list):
        obj = {"segments": obj, "device_traces": []}
    if not isinstance(obj, dict):
        raise SnapshotError(tr("expected a dict with 'segments' and 'device_traces', got {value}", value=show(obj)))
    obj = set_aside_workspace(obj)          # torch_npu's workspace buffers are not the allocator's (npu_detect.py)
    if not isinstance(obj.get("segments"), list):
        keys = sorted(show(k) for k in list(obj)[:8])
        raise SnapshotError(tr("no 'segments' list: this is not a torch memory snapshot "
                               "(top-level keys: {keys})", keys=", ".join(keys)))
    checker = _Checker(distinct_records)
    spans = sorted(checker.segment(i, seg) for i, seg in enumerate(obj["segments"]))
    for (dev_a, addr_a, size_a, where_a), (dev_b, addr_b, _, where_b) in zip(spans, spans[1:]):
        if dev_a == dev_b and addr_b < addr_a + size_a:
            raise SnapshotError(f"{where_b} overlaps {where_a} on device {dev_a}")
    if "device_traces" not in obj:           # a copy: the caller's dict is left as it was
        obj = {**obj, "device_traces": []}
    traces = obj["device_traces"]
    if not isinstance(traces, list):
        raise SnapshotError(tr("'device_traces' is {value}; expected a list of lists (one per device)",
                               value=show(traces)))
    if len(traces) > 2**16:
        raise SnapshotError(tr("'device_traces' has {n} devices; expected one list per GPU", n=len(traces)))
    for d, trace in enumerate(traces):
        if not isinstance(trace, list):
            raise SnapshotError(tr("device {d} trace is {value}; expected a list of trace entries",
                                   d=d, value=show(trace)))
        checker.once(trace, f"device {d} trace")
        for k, entry in enumerate(trace):
            checker.entry(d, k, entry)
    settings = obj.get("allocator_settings")
    if settings is not None:
        if not isinstance(settings, dict):
            raise SnapshotError(tr("'allocator_settings' is {value}; expected a dict", value=show(settings)))
        _str(settings, "PYTORCH_CUDA_ALLOC_CONF", "allocator_settings")
    if obj.get("external_annotations") is not None:
        _list(obj, "external_annotations", "the snapshot")
    return upgrade(obj)
