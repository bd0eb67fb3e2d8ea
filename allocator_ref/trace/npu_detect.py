"""Was this snapshot recorded with torch_npu?  Decided from what torch_npu writes, never guessed.

``torch_npu.npu.memory._snapshot()`` (Ascend/pytorch v2.11.0-26.1.0) returns what
``THNPModule_memorySnapshot`` in ``torch_npu/csrc/npu/Module.cpp`` builds.  It differs from
PyTorch's ``torch.cuda.memory._snapshot()`` (torch/csrc/cuda/Module.cpp, PyTorch 2.11) in ways a
file keeps:

1. a ``workspace_snapshot`` action: the workspace allocator's buffers (NPUWorkspaceAllocator.cpp,
   ``get_trace``) are put at the front of each device's trace, each as three entries at its
   address (``workspace_snapshot``, ``segment_alloc``, ``alloc``), and its segments appended to
   ``segments``; PyTorch has no such action.  Decisive on its own.
2. no ``allocator_settings`` at the top level and no ``time_us`` in trace entries (PyTorch has
   written both since before 2.11; PyTorch 2.0 wrote neither, so these only rule torch_npu *out*).
3. no stream 0: torch_npu's default stream is a real ``aclrtStream`` (NPUStream.cpp,
   ``initDeviceStreamState``: ``AclrtCreateStreamWithConfig(&default_streamsi.stream, ...)``), while
   PyTorch's default CUDA stream is the null stream, 0.  Only ``snapshot`` entries carry 0
   (``record_trace(TraceEntry::SNAPSHOT, 0, total_active, nullptr, ...)``).
4. the 32-byte pad: a small-pool block is ``round512(requested + 32)`` bytes on an Ascend NPU,
   ``round512(requested)`` on CUDA (caching/npu/rounding.py); the two differ for a request that is
   a multiple of 512 or 1..32 bytes short of one.  Each block whose size only one rule explains is
   a vote, from the final segments and from consecutive allocations in the trace.

A snapshot is torch_npu's when (1) holds, or when nothing of (2)-(3) rules it out and the votes of
(4) say NPU and none says CUDA.  Course-made snapshots of the NPU mirror say so themselves: their
``allocator_settings`` name ``PYTORCH_NPU_ALLOC_CONF``.

``set_aside_workspace`` takes the workspace allocator's entries (the three of each buffer) and its
segments out before the loader
checks the file (they are not the caching allocator's decisions) and keeps them under
``npu_workspace`` so that the detection and the doctor still see them.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..caching.config import kMinBlockSize
from .trace_record import ENTRY_TYPES      # a big file's trace entries are records (trace_record.py)

ASCEND_PAD = 32            # AddPadSize(): NPUCachingAllocator.cpp (the same constant as rounding.py)
WORKSPACE_ACTION = "workspace_snapshot"


@dataclass(frozen=True)
class Detection:
    """Which allocator recorded a snapshot ('npu' or 'caching') and the evidence, in a few words."""
    policy: str
    evidence: str
    config: str = ""          # the settings to replay it under (recorded, or read off the trace)


def _round512(n: int) -> int:
    return max(kMinBlockSize, -(-n // kMinBlockSize) * kMinBlockSize)


def rounding_vote(requested: int, size: int) -> int:
    """+1 when only the NPU rounding explains a small-pool block of ``size`` for ``requested``
    bytes, -1 when only CUDA's does, 0 when both or neither do."""
    npu, cuda = _round512(requested + ASCEND_PAD), _round512(requested)
    return (size == npu) - (size == cuda) if npu != cuda else 0


def _entries(snapshot: dict):
    for trace in snapshot.get("device_traces") or []:
        yield from (e for e in trace if isinstance(e, ENTRY_TYPES))


def _votes(snapshot: dict) -> tuple:
    """(NPU votes, CUDA votes) from the small segments' blocks and from the trace's allocations."""
    npu = cuda = 0
    for seg in snapshot.get("segments") or []:
        # blocks are cut to their rounded size in small segments and in expandable ones
        # (should_split: "remaining >= kMinBlockSize"); a large block may keep a remainder
        if seg.get("segment_type") != "small" and not seg.get("is_expandable"):
            continue
        for b in seg.get("blocks") or []:
            if b.get("state") == "active_allocated" and b.get("requested_size"):
                v = rounding_vote(b["requested_size"], b["size"])
                npu, cuda = npu + (v > 0), cuda + (v < 0)
    for trace in snapshot.get("device_traces") or []:
        a = None                       # the last allocation, while it is still live
        for b in trace:
            if b.get("action") == "free_requested" and a is not None and b.get("addr") == a["addr"]:
                a = None
            if b.get("action") != "alloc":
                continue
            # two allocations in a row on one stream, the second right behind the first (still live)
            if a is not None and a["stream"] == b["stream"] and b["addr"] > a["addr"]:
                v = rounding_vote(a["size"], b["addr"] - a["addr"])
                npu, cuda = npu + (v > 0), cuda + (v < 0)
            a = b
    return npu, cuda


def npu_config(snapshot: dict) -> str:
    """The PYTORCH_NPU_ALLOC_CONF to replay a torch_npu file under.  torch_npu records none, so
    what the trace shows is used: a ``segment_map`` or an expandable segment means
    ``expandable_segments:True`` (only an expandable segment maps pages); otherwise the defaults."""
    settings = snapshot.get("allocator_settings")
    if isinstance(settings, dict) and isinstance(settings.get("PYTORCH_NPU_ALLOC_CONF"), str):
        return settings["PYTORCH_NPU_ALLOC_CONF"]
    mapped = any(e.get("action") in ("segment_map", "segment_unmap") for e in _entries(snapshot)) or \
        any(s.get("is_expandable") for s in snapshot.get("segments") or [])
    return "expandable_segments:True" if mapped else ""


def detect(snapshot: dict) -> Detection:
    """Which allocator recorded ``snapshot`` (a checked snapshot dict, as the loader returns it)."""
    found = _detect(snapshot)
    if found.policy != "npu":
        settings = snapshot.get("allocator_settings") or {}
        return Detection(found.policy, found.evidence, settings.get("PYTORCH_CUDA_ALLOC_CONF", "") or "")
    return Detection("npu", found.evidence, npu_config(snapshot))


def _detect(snapshot: dict) -> Detection:
    settings = snapshot.get("allocator_settings")
    if isinstance(settings, dict) and "PYTORCH_NPU_ALLOC_CONF" in settings:
        return Detection("npu", "allocator_settings name PYTORCH_NPU_ALLOC_CONF")
    if snapshot.get("npu_workspace"):
        return Detection("npu", "workspace_snapshot entries (torch_npu's workspace allocator)")
    if settings is not None:
        return Detection("caching", "allocator_settings present (torch.cuda writes them)")
    entries = list(_entries(snapshot))
    if any("time_us" in e for e in entries):
        return Detection("caching", "trace entries carry time_us (torch.cuda writes it)")
    if any(e.get("stream") == 0 and e.get("action") != "snapshot" for e in entries) or \
            any(s.get("stream") == 0 for s in snapshot.get("segments") or []):
        return Detection("caching", "memory on stream 0, the null stream only CUDA has")
    npu, cuda = _votes(snapshot)
    if npu and not cuda:
        return Detection("npu", f"{npu} blocks sized by the 32-byte pad, none by CUDA's rounding")
    return Detection("caching", f"rounding votes: {npu} NPU, {cuda} CUDA")


def _workspace_entries(trace: list) -> set:
    """Positions of the workspace allocator's entries in one device trace: each ``workspace_snapshot``
    and the ``segment_alloc`` and ``alloc`` torch_npu writes right after it at the same address."""
    out = set()
    for k, e in enumerate(trace):
        if isinstance(e, ENTRY_TYPES) and e.get("action") == WORKSPACE_ACTION:
            out.add(k)
            for j, action in ((k + 1, "segment_alloc"), (k + 2, "alloc")):
                nxt = trace[j] if j < len(trace) else None
                if isinstance(nxt, ENTRY_TYPES) and nxt.get("action") == action and nxt.get("addr") == e.get("addr"):
                    out.add(j)
    return out


def set_aside_workspace(obj):
    """``obj`` without torch_npu's workspace entries and segments, which are kept under
    ``npu_workspace``; anything else (a CUDA snapshot, a hostile value) is returned untouched."""
    if not isinstance(obj, dict) or not isinstance(obj.get("device_traces"), list):
        return obj
    traces = obj["device_traces"]
    found = [(d, e) for d, trace in enumerate(traces) if isinstance(trace, list)
             for e in trace if isinstance(e, ENTRY_TYPES) and e.get("action") == WORKSPACE_ACTION]
    if not found:
        return obj
    places = {(d, e.get("addr")) for d, e in found}
    segments = obj.get("segments")
    kept = [s for s in segments if not (isinstance(s, dict) and (s.get("device", 0), s.get("address")) in places)] \
        if isinstance(segments, list) else segments
    clean = []
    for t in traces:
        drop = _workspace_entries(t) if isinstance(t, list) else set()
        clean.append([e for k, e in enumerate(t) if k not in drop] if isinstance(t, list) else t)
    workspace = [{"device": d, "addr": e.get("addr"), "size": e.get("size"), "stream": e.get("stream")}
                 for d, e in found]
    return {**obj, "segments": kept, "device_traces": clean, "npu_workspace": workspace}
