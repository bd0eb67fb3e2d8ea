"""Replay a real PyTorch memory trace on the reference allocator, and ask "what if".

``replay(snapshot, verify=True)`` feeds the user's requests from a snapshot's
``device_traces`` (every ``alloc`` and ``free_requested``) to a fresh
``CachingAllocator`` on a simulated device, and compares every decision the
reference allocator makes with what PyTorch recorded:

* in ``verify`` mode the simulated device hands out the addresses PyTorch's
  cudaMalloc returned (the trace's ``segment_alloc``/``segment_map``
  events), and fails exactly the device calls that failed on the GPU (the
  trace's ``oom`` and retry releases), so the two runs can be compared
  address for address;
* a trace that starts mid-run gets its starting state rebuilt first
  (``rebuild.py``);
* cross-stream frees (``free_requested`` ... later ``free_completed``) are
  replayed with ``record_stream`` and events that complete exactly where the
  trace says they did.

Without ``verify`` the same requests run under any configuration or policy,
and the result says what the run would have needed: peak reserved, peak
allocated, fragmentation, device calls, simulated time, and OOMs on a device
of a given size.
"""
from __future__ import annotations

import dataclasses
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Optional

from ..caching.allocator import CachingAllocator
from ..caching.config import AllocatorConfig
from ..caching.oom import OutOfMemoryError
from ..caching.restore import restore_segment
from ..device.errors import cuda_error
from ..device.sim import SimDevice
from .rebuild import infer_initial_state
from .snapshot import load_snapshot

USER_ACTIONS = ("alloc", "free_requested")
EFFECTS_BEFORE_ALLOC = ("segment_alloc", "segment_map", "segment_free", "segment_unmap", "oom", "free_completed")


class _ManualEvent:
    """An event the replay completes where the trace says (``free_completed``)."""

    def __init__(self, device) -> None:
        self.device = device
        self.ready = False

    def record(self, stream=None) -> None:
        pass

    def query(self) -> bool:
        return self.ready

    def synchronize(self) -> None:
        self.ready = True


class ReplayDevice(SimDevice):
    """A SimDevice the replay steers: planned addresses, planned failures, manual events."""

    def __init__(self, profile: str, index: int = 0, total_memory: Optional[int] = None) -> None:
        super().__init__(profile, index=index)
        if total_memory:
            # The GPU that recorded the trace: its size decides how big each expandable
            # segment's address reservation is (1.125x the GPU), hence where the next one lands.
            self.info = dataclasses.replace(self.info, total_memory=total_memory)
        self.planned_segments: deque = deque()   # (addr, size) of upcoming segment_alloc/map
        self.fail_allocations = 0                # fail this many next cudaMalloc/cuMemCreate calls
        self.fail_all = False
        self.events_by_addr: dict = {}
        self.freeing_addr: Optional[int] = None
        self.set_address_hint(self._hint_address)

    def _hint_address(self, kind: str, size: int) -> Optional[int]:
        if kind == "malloc":
            while self.planned_segments and self.planned_segments[0][2] != "segment_alloc":
                self.planned_segments.popleft()
            if self.planned_segments and self.planned_segments[0][1] == size:
                return self.planned_segments.popleft()[0]
            return None
        # An expandable segment's first map is at its base: that is where the reservation starts.
        for addr, _size, action in self.planned_segments:
            if action == "segment_map":
                return addr
        return None

    def _maybe_fail(self, name: str) -> None:
        if self.fail_all or self.fail_allocations > 0:
            self.fail_allocations = max(0, self.fail_allocations - 1)
            raise cuda_error(name, "replay: this call failed on the GPU that recorded the trace")

    def malloc(self, nbytes: int) -> int:
        self._maybe_fail("cudaErrorMemoryAllocation")
        return super().malloc(nbytes)

    def mem_create(self, size: int) -> int:
        self._maybe_fail("CUDA_ERROR_OUT_OF_MEMORY")
        return super().mem_create(size)

    def _charge(self, nbytes: int, error: str, call: str) -> None:
        # Which calls failed is decided by the trace (fail_all / fail_allocations), not by a capacity.
        self._used += nbytes

    def create_event(self, timing: bool = True):
        event = _ManualEvent(self)
        if self.freeing_addr is not None:
            self.events_by_addr.setdefault(self.freeing_addr, []).append(event)
        return event


@dataclass
class Divergence:
    index: int                 # position in the device's trace
    expected: dict             # the trace's event
    got: Optional[dict]        # what the reference allocator did instead (None: nothing)
    context: list              # a few trace events around it
    state: list                # the segments around the address at that moment


@dataclass
class DeviceReplay:
    device: int
    events: int
    allocs: int = 0
    allocs_exact: int = 0
    segment_allocs_expected: int = 0
    segment_allocs_made: int = 0
    segment_frees_expected: int = 0
    segment_frees_made: int = 0
    ooms_expected: int = 0
    ooms_raised: int = 0
    first_divergence: Optional[Divergence] = None
    final_state_equal: Optional[bool] = None
    final_state_diff: str = ""
    inferred: list = field(default_factory=list)
    peak_reserved: int = 0
    peak_allocated: int = 0
    fragmentation_at_peak: int = 0
    device_calls: int = 0
    simulated_time_us: float = 0.0

    @property
    def allocs_exact_pct(self) -> float:
        return 100.0 * self.allocs_exact / self.allocs if self.allocs else 100.0


@dataclass
class ReplayResult:
    source: str
    policy: str
    config: str
    verify: bool
    devices: list

    def _sum(self, name: str) -> int:
        return sum(getattr(d, name) for d in self.devices)

    @property
    def first_divergence(self) -> Optional[Divergence]:
        return next((d.first_divergence for d in self.devices if d.first_divergence), None)

    @property
    def final_state_equal(self) -> Optional[bool]:
        values = [d.final_state_equal for d in self.devices if d.final_state_equal is not None]
        return all(values) if values else None

    @property
    def fits(self) -> bool:
        """No request ran out of memory (meaningful with ``device_memory``)."""
        return self._sum("ooms_raised") == 0

    @property
    def perfect(self) -> bool:
        return (self.first_divergence is None and self._sum("allocs_exact") == self._sum("allocs")
                and self.final_state_equal is not False)

    def to_json(self) -> dict:
        div = self.first_divergence
        return {
            "source": self.source, "policy": self.policy, "config": self.config, "verify": self.verify,
            "allocs": self._sum("allocs"), "allocs_exact": self._sum("allocs_exact"),
            "segment_allocs_expected": self._sum("segment_allocs_expected"),
            "segment_allocs_made": self._sum("segment_allocs_made"),
            "segment_frees_expected": self._sum("segment_frees_expected"),
            "segment_frees_made": self._sum("segment_frees_made"),
            "ooms_expected": self._sum("ooms_expected"), "ooms_raised": self._sum("ooms_raised"),
            "fits": self.fits,
            "first_divergence": asdict(div) if div else None,
            "final_state_equal": self.final_state_equal,
            "peak_reserved": max((d.peak_reserved for d in self.devices), default=0),
            "peak_allocated": max((d.peak_allocated for d in self.devices), default=0),
            "fragmentation_at_peak": max((d.fragmentation_at_peak for d in self.devices), default=0),
            "device_calls": self._sum("device_calls"),
            "simulated_time_us": self._sum("simulated_time_us"),
            "inferred": [note for d in self.devices for note in d.inferred],
            "devices": [{k: v for k, v in asdict(d).items() if k != "first_divergence"} for d in self.devices],
        }


def _config_text(snapshot: dict) -> str:
    settings = snapshot.get("allocator_settings") or {}
    return settings.get("PYTORCH_CUDA_ALLOC_CONF", "") or ""


def replay(snapshot: Any, allocator_factory: Optional[Callable] = None, *, config: Optional[str] = None,
           policy: str = "caching", verify: bool = False, profile: str = "h100-80gb",
           device_memory: Optional[int] = None, progress: Optional[bool] = None) -> ReplayResult:
    """Replay every device trace of ``snapshot`` (a dict, or a path to a pickle).

    ``config`` defaults to the snapshot's own ``PYTORCH_CUDA_ALLOC_CONF``;
    ``allocator_factory(device, config)`` builds something else than the policy named;
    ``device_memory`` (bytes) replays on a simulated GPU of that size: requests that do
    not fit raise the allocator's OutOfMemoryError, are counted in ``ooms_raised`` and
    skipped, so the report says whether the run would have fitted.
    """
    source = "<dict>"
    if not isinstance(snapshot, dict):
        source = str(snapshot)
        snapshot = load_snapshot(snapshot)
    same_config = config is None
    config = _config_text(snapshot) if config is None else config
    if verify and device_memory is not None:
        raise ValueError("--verify replays on the GPU the trace was recorded on; drop --device-memory")
    if verify and (policy != "caching" or allocator_factory is not None or not same_config):
        raise ValueError("--verify compares against PyTorch's own decisions: it needs the caching "
                         "policy and the snapshot's own config")
    devices = []
    for index, events in enumerate(snapshot.get("device_traces", [])):
        if not events:
            continue
        finals = [s for s in snapshot["segments"] if s.get("device", 0) == index]
        devices.append(_DeviceReplayer(index, events, finals, config, policy, verify, profile,
                                       allocator_factory, progress, device_memory).run())
    return ReplayResult(source, policy, config, verify, devices)


def make_allocator(policy: str, device, config: str):
    """A fresh allocator of the named design on ``device``."""
    if policy == "caching":
        return CachingAllocator(device, config)
    from .. import policies
    classes = {"direct": "DirectAllocator", "stream_ordered": "StreamOrderedAllocator", "bfc": "BFCAllocator"}
    if policy not in classes:
        raise ValueError(f"unknown policy {policy!r}: choose one of caching, {', '.join(classes)}")
    return getattr(policies, classes[policy])(device)


class _DeviceReplayer:
    """Replays one device's trace."""

    def __init__(self, index, events, finals, config, policy, verify, profile, factory, progress,
                 device_memory=None):
        self.index, self.events, self.finals = index, events, finals
        self.verify, self.policy = verify, policy
        self.device = (ReplayDevice(profile, index=index, total_memory=_infer_gpu_total(events))
                       if verify else SimDevice(profile, index=index))
        if device_memory is not None:
            # A GPU of this size (the profile's context reserve still comes off the top).
            self.device.info = dataclasses.replace(self.device.info, total_memory=int(device_memory))
        self.allocator = factory(self.device, config) if factory else make_allocator(policy, self.device, config)
        self.result = DeviceReplay(index, len(events))
        self.live: dict = {}          # trace address -> our Allocation
        self.streams: dict = {0: self.device.default_stream}
        self.produced: deque = deque()
        self.progress = progress if progress is not None else len(events) > 5000
        if verify:
            self.allocator.trace.add_listener(self._on_event)
        self._guard = None

    # ------------------------------------------------------------ plumbing
    def _on_event(self, entry) -> None:
        if entry.action != "snapshot":
            self.produced.append(entry)

    def _stream(self, handle: int):
        stream = self.streams.get(handle)
        if stream is None:
            stream = self.streams[handle] = self.device.create_stream(handle=handle)
        return stream

    def _guard_stream(self):
        if self._guard is None:
            handle = max(self.streams) + 0x1000 if self.streams else 0x1000
            self._guard = self.device.create_stream(handle=handle)
        return self._guard

    def _diverge(self, pos: int, got) -> None:
        if self.result.first_divergence is not None:
            return
        expected = self.events[pos]
        addr = expected.get("addr", 0)
        segs = [s for s in self.allocator.segments() if s["address"] <= addr < s["address"] + s["total_size"]] \
            if hasattr(self.allocator, "segments") else []
        self.result.first_divergence = Divergence(
            index=pos, expected=_brief(expected), got=_brief(got.to_dict()) if got is not None else None,
            context=[_brief(e) for e in self.events[max(0, pos - 3):pos + 3]],
            state=[{"address": s["address"], "total_size": s["total_size"],
                    "blocks": [(b["address"], b["size"], b["state"]) for b in s["blocks"]]} for s in segs])

    # ------------------------------------------------------------ setup
    def _restore_start(self) -> None:
        config = getattr(self.allocator, "config", None) or AllocatorConfig()
        state = infer_initial_state(self.events, self.finals, config)
        self.result.inferred = list(state.notes)
        if state.empty:
            return
        exact = self.verify and isinstance(self.allocator, CachingAllocator)
        for seg in state.segments:
            stream = self._stream(seg.stream)
            if exact:
                self.device.planned_segments.appendleft((seg.address, seg.size, "segment_alloc"))
                self.live.update(restore_segment(self.allocator, seg.address, seg.size, stream,
                                                 seg.live_blocks, small=seg.small))
        if not exact:
            # Another design cannot have PyTorch's layout: ask it for the same live blocks instead.
            for seg in state.segments:
                for addr, size, requested in seg.live_blocks:
                    self.live[addr] = self.allocator.malloc(requested, self._stream(seg.stream))
        for addr in state.pending_free:
            if addr in self.live:
                self._free(addr, deferred=True)
        self.produced.clear()

    # ------------------------------------------------------------ actions
    def _malloc(self, pos: int) -> None:
        e = self.events[pos]
        failed_on_gpu = e["action"] == "oom"      # the request itself is only in the oom event
        if not failed_on_gpu:
            self.result.allocs += 1
        try:
            allocation = self.allocator.malloc(e["size"], self._stream(e["stream"]))
        except OutOfMemoryError:
            self.result.ooms_raised += 1
            return
        finally:
            if self.verify:
                self.device.fail_all = False
                self.device.fail_allocations = 0
        if failed_on_gpu:                          # PyTorch raised here and we did not
            self._diverge(pos, None)
            self.allocator.free(allocation)
            return
        if allocation.ptr == e["addr"]:
            self.result.allocs_exact += 1
        self.live[e["addr"]] = allocation

    def _free(self, addr: int, deferred: bool) -> None:
        allocation = self.live.pop(addr, None)
        if allocation is None:
            return
        if deferred:
            self.allocator.record_stream(allocation, self._guard_stream())
            self.device.freeing_addr = addr
        try:
            self.allocator.free(allocation)
        finally:
            if deferred:
                self.device.freeing_addr = None

    def _next_malloc(self, pos: int) -> int:
        """Index of the event that ends the malloc starting at ``pos``: its ``alloc``, or its ``oom``."""
        j = pos
        while j < len(self.events) and self.events[j]["action"] not in USER_ACTIONS + ("oom",):
            j += 1
        if j == len(self.events) or self.events[j]["action"] == "free_requested":
            return -1
        return j

    def _prepare_malloc(self, pos: int) -> int:
        """Plan the device for the malloc whose effects start at ``pos``; returns its alloc/oom index."""
        j = self._next_malloc(pos)
        if j < 0:
            return -1
        group = self.events[pos:j + 1]
        actions = [g["action"] for g in group]
        self.device.planned_segments = deque(
            (g["addr"], g["size"], g["action"]) for g in group if g["action"] in ("segment_alloc", "segment_map"))
        if "oom" in actions:
            self.device.fail_all = True          # every device allocation failed on the GPU
        elif any(a in ("segment_free", "segment_unmap") for a in actions):
            self.device.fail_allocations = 1     # cudaMalloc failed once, then the cache was emptied
        for g in group:
            if g["action"] == "free_completed":
                for event in self.device.events_by_addr.pop(g["addr"], []):
                    event.ready = True
        return j

    # ------------------------------------------------------------ the loop
    def run(self) -> DeviceReplay:
        self._restore_start()
        events, n = self.events, len(self.events)
        bar = _progress_bar(n, self.progress, f"replay device {self.index}")
        pos = 0
        while pos < n:
            e = events[pos]
            action = e["action"]
            if self.verify and self.produced:
                self._compare(pos, self.produced.popleft())
                pos += 1
                bar.update(1)
                continue
            if action == "alloc" or (self.verify and action in EFFECTS_BEFORE_ALLOC and self._starts_malloc(pos)):
                j = self._prepare_malloc(pos) if self.verify else pos
                if j < 0:
                    j = pos
                self._malloc(j)
                if not self.verify:
                    pos += 1
                    bar.update(1)
                    self._sample()
                continue
            if action == "free_requested":
                deferred = not (pos + 1 < n and events[pos + 1]["action"] == "free_completed"
                                and events[pos + 1]["addr"] == e["addr"])
                self._free(e["addr"], deferred=deferred and self.verify)
                self._sample()
                if not self.verify:
                    pos += 1
                    bar.update(1)
                continue
            if self.verify and action in ("segment_free", "segment_unmap"):
                self.allocator.empty_cache()     # the user called torch.cuda.empty_cache() here
                if not self.produced:
                    self._diverge(pos, None)
                    pos += 1
                continue
            if self.verify and action == "free_completed":
                # A deferred free whose events completed with no allocation after it.
                for event in self.device.events_by_addr.pop(e["addr"], []):
                    event.ready = True
                self.allocator.process_events()
                if not self.produced:
                    self._diverge(pos, None)
                    pos += 1
                continue
            pos += 1                             # oom without alloc, snapshot, unknown: nothing to do
            bar.update(1)
        bar.close()
        self._finish()
        return self.result

    def _starts_malloc(self, pos: int) -> bool:
        j = self._next_malloc(pos)
        if j < 0:
            return False
        actions = {g["action"] for g in self.events[pos:j + 1]}
        # A release that only empties the cache before a malloc that needs no new memory
        # was a user empty_cache(), not part of the malloc.
        return bool(actions & {"segment_alloc", "segment_map", "oom", "free_completed"})

    def _compare(self, pos: int, got) -> None:
        e = self.events[pos]
        action = e["action"]
        if action == "segment_alloc" or action == "segment_map":
            self.result.segment_allocs_expected += 1
        elif action in ("segment_free", "segment_unmap"):
            self.result.segment_frees_expected += 1
        elif action == "oom":
            self.result.ooms_expected += 1
        if got.action in ("segment_alloc", "segment_map"):
            self.result.segment_allocs_made += 1
        elif got.action in ("segment_free", "segment_unmap"):
            self.result.segment_frees_made += 1
        expected_addr = e.get("device_free", 0) if action == "oom" else e.get("addr")
        same = got.action == action and (action == "oom" or (got.addr == expected_addr and got.size == e["size"]))
        if not same:
            self._diverge(pos, got)
        if action == "alloc" or got.action == "alloc":
            self._sample()

    def _sample(self) -> None:
        a = self.allocator
        reserved, allocated = a.memory_reserved(), a.memory_allocated()
        if reserved > self.result.peak_reserved:
            self.result.peak_reserved = reserved
            self.result.fragmentation_at_peak = reserved - allocated
        self.result.peak_allocated = max(self.result.peak_allocated, allocated)

    def _finish(self) -> None:
        c = self.device.counters
        self.result.device_calls = c.malloc_calls + c.free_calls + c.vmm_calls + \
            c.malloc_async_calls + c.free_async_calls
        self.result.simulated_time_us = float(self.device.now_us())
        self.result.peak_reserved = max(self.result.peak_reserved, self.allocator.max_memory_reserved())
        self.result.peak_allocated = max(self.result.peak_allocated, self.allocator.max_memory_allocated())
        if self.verify:
            # The trace's snapshot() events recorded nothing that changes state; ignore them.
            ours = _layout(self.allocator.segments(record=False))
            theirs = _layout(self.finals)
            self.result.final_state_equal = ours == theirs
            if ours != theirs:
                self.result.final_state_diff = _diff(ours, theirs)


def _infer_gpu_total(events: list[dict]) -> Optional[int]:
    """The recording GPU's memory, from where its expandable segments were reserved.

    Each pool's reservation is 1.125x the GPU's memory, and the driver places the second
    reservation right after the first, so the distance between the first small-pool map
    (always one 2 MiB page) and the first large-pool map is 9/8 of the GPU's memory.
    """
    small = next((e["addr"] for e in events if e["action"] == "segment_map" and e["size"] == 2 * 1024 * 1024), None)
    large = next((e["addr"] for e in events if e["action"] == "segment_map" and e["size"] != 2 * 1024 * 1024), None)
    if small is None or large is None:
        return None
    return abs(small - large) * 8 // 9


def _layout(segments: list[dict]) -> list:
    return sorted((s["address"], s["total_size"], s["stream"], bool(s.get("is_expandable")),
                   tuple((b["address"] if "address" in b else None, b["size"], b["state"])
                         for b in s["blocks"])) for s in segments)


def _diff(ours: list, theirs: list) -> str:
    a, b = {s[0]: s for s in ours}, {s[0]: s for s in theirs}
    lines = []
    for addr in sorted(set(a) | set(b)):
        if a.get(addr) != b.get(addr):
            lines.append(f"segment {addr:#x}: ours={_short(a.get(addr))} pytorch={_short(b.get(addr))}")
        if len(lines) >= 5:
            break
    return "\n".join(lines)


def _short(seg) -> str:
    if seg is None:
        return "absent"
    return f"{seg[1]} B, blocks {[(hex(x[0]) if x[0] else None, x[1], x[2]) for x in seg[4]][:6]}"


def _brief(e: dict) -> dict:
    return {k: v for k, v in e.items() if k in ("action", "addr", "size", "stream", "device_free")}


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _progress_bar(total: int, enabled: bool, desc: str):
    if not enabled:
        return _NoBar()
    from tqdm.auto import tqdm
    return tqdm(total=total, desc=desc, unit="ev", leave=False, mininterval=0.5)
