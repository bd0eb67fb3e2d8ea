"""What the three alternative policies share: checks, bookkeeping, events, stats.

``DirectAllocator``, ``StreamOrderedAllocator`` and ``BFCAllocator`` make
different decisions, but they hand out the same :class:`Allocation`, refuse
the same bad calls with the same words, report the same trace events and
statistics, and guard stream reuse with the same CUDA events.  That common
part lives here, once, in :class:`PolicyAllocator`; each policy file only
says how it finds memory and gives it back.

Rules every policy follows (learners can rely on them when comparing):

* a bad call (negative size, double free, someone else's allocation, a
  stream of another device or a destroyed one) raises a clear error
  *before* anything changes: statistics, live set and trace stay as they were.
  The checks and their exception types are ``allocator_ref/front_door.py``,
  shared with ``CachingAllocator``: one misuse, one type, whatever the design;
* a zero-byte request returns a null allocation (``ptr == 0``) and changes
  nothing, as PyTorch does;
* statistics are PyTorch's ``memory_stats()`` keys, but only those the design
  really tracks: the others are absent, never filled with a made-up zero.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from allocator_ref.allocation import Allocation, require_device
from allocator_ref.front_door import live_allocation, resolve_stream, stream_is_destroyed
from allocator_ref.caching.oom import OutOfMemoryError, format_size  # noqa: F401 -- re-exported for the policies
from allocator_ref.editions.messages import translator
from allocator_ref.caching.stats import AGGREGATE, DeviceStats
from allocator_ref.events import TraceEntry, TraceRecorder
from allocator_ref.provenance import mark_course_made

tr = translator("doctor")          # a config the policy refuses, in the reader's language (chapter 5 prints it)

UINT64_MAX = 2**64 - 1
KiB, MiB, GiB = 1024, 1024**2, 1024**3


# --------------------------------------------------------------------------- small helpers

def round_up(nbytes: int, unit: int) -> int:
    """The smallest multiple of ``unit`` that holds ``nbytes`` (``unit`` itself for tiny requests)."""
    return max(unit, -(-nbytes // unit) * unit)


MAX_REQUEST = 2**60        # the largest size a device call accepts (the devices call more "absurd")


def check_byte_option(name: str, value: Any, low: int, high: int = MAX_REQUEST) -> int:
    """A size option (bytes) checked when the allocator is built, not at the first malloc."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name} must be a whole number of bytes between {low} and {high}, "
                         f"got {value!r}")
    return value


def stream_handle(stream: Any) -> int:
    """The raw integer PyTorch writes in traces and snapshots (0 = default stream)."""
    return int(getattr(stream, "handle", 0) or 0)


def stat_keys(arrays: Iterable[str] = (), metrics: Iterable[str] = ("current", "peak", "allocated", "freed"),
              counters: Iterable[str] = ()) -> tuple[str, ...]:
    """The flat ``memory_stats()`` keys a policy fills: ``<array>.all.<metric>`` plus plain counters."""
    keys = [f"{name}.all.{metric}" for name in arrays for metric in metrics]
    return tuple(sorted(keys + list(counters)))


def parse_config(config: Any, defaults: dict) -> dict:
    """Options from ``config`` (a dict, or a ``"key:value,key:value"`` string like
    ``PYTORCH_CUDA_ALLOC_CONF``), checked against ``defaults`` and coerced to their types."""
    options = dict(defaults)
    if config is None or config == "":
        return options
    if isinstance(config, str):
        pairs = {}
        for item in config.split(","):
            if not item.strip():
                continue
            key, sep, value = item.partition(":")
            if not sep:
                raise ValueError(tr("config item {item} is not key:value", item=repr(item)))
            pairs[key.strip()] = value.strip()
        config = pairs
    if not isinstance(config, dict):
        raise TypeError(f"config must be a dict or a 'key:value,...' string, got {type(config).__name__}")
    for key, value in config.items():
        if key not in defaults:
            raise ValueError(tr("unknown option {key}; known options: {known}", key=repr(key), known=sorted(defaults)))
        options[key] = _coerce(key, value, defaults[key])
    return options


def _coerce(key: str, value: Any, default: Any) -> Any:
    if isinstance(default, bool):
        if isinstance(value, str):
            if value.lower() not in ("true", "false", "1", "0"):
                raise ValueError(tr("option {key} expects True or False, got {value}", key=repr(key), value=repr(value)))
            return value.lower() in ("true", "1")
        return bool(value)
    if isinstance(default, int) and isinstance(value, str):
        return int(value)
    if isinstance(default, float) and isinstance(value, str):
        return float(value)
    return value


# --------------------------------------------------------------------------- the event guard

@dataclass(eq=False)
class _Deferred:
    item: Any
    events: list


class EventGuard:
    """Frees that wait for CUDA events: PyTorch's ``insert_events`` / ``process_events`` /
    ``synchronize_and_free_events`` (DeviceCachingAllocator), for policies whose free is not
    stream-ordered (Direct, BFC).

    ``defer(item, streams)`` records one event on every stream that used the
    memory; ``completed()`` hands back the items whose events all finished
    (a non-blocking ``cudaEventQuery`` each); ``wait_all()`` blocks on every
    event (``cudaEventSynchronize``) and hands back everything.
    """

    def __init__(self, device: Any) -> None:
        self.device = device
        self._waiting: list[_Deferred] = []

    def __len__(self) -> int:
        return len(self._waiting)

    def items(self) -> list:
        return [d.item for d in self._waiting]

    def defer(self, item: Any, streams: Iterable[Any]) -> None:
        events = []
        for stream in streams:
            event = self.device.create_event(timing=False)   # PyTorch: cudaEventDisableTiming
            event.record(stream)
            events.append(event)
        self._waiting.append(_Deferred(item, events))

    def completed(self) -> list:
        done = [d for d in self._waiting if all(e.query() for e in d.events)]
        self._waiting = [d for d in self._waiting if d not in done]
        return [d.item for d in done]

    def wait_all(self) -> list:
        for deferred in self._waiting:
            for event in deferred.events:
                event.synchronize()
        done, self._waiting = self._waiting, []
        return [d.item for d in done]


# --------------------------------------------------------------------------- the base class

@dataclass(eq=False)
class BlockRecord:
    """The part of an allocator's own record that the shared code reads."""

    ptr: int
    size: int
    requested_size: int = 0
    stream: Any = None
    stream_uses: list = field(default_factory=list)


class PolicyAllocator:
    """Shared half of every policy: validation, the live set, trace, stats, snapshot shell,
    and frees that wait for other streams (``record_stream``).

    A policy derived from this class sets ``STAT_KEYS`` (the ``memory_stats()`` keys it
    fills) and implements these methods, documented where each policy defines them:

    1. ``malloc(nbytes, stream) -> Allocation``
    2. ``_free_after_events(record)``: really free a record once no stream uses it any
       more.  The base's ``free`` calls it at once, or, when another stream used the
       memory, once one event per using stream completed (``self._guard``, an
       EventGuard: PyTorch's insert_events, with every event of one free kept together).
    3. ``empty_cache()`` and ``close()``
    4. ``_segments()`` for :meth:`snapshot`, where the policy has segments.

    A policy whose free is stream-ordered by the driver (StreamOrderedAllocator) overrides
    ``free``, ``record_stream`` and ``synchronize`` instead of implementing the hook.
    """

    STAT_KEYS: tuple = ()
    ROUND = 512

    def __init__(self, device: Any) -> None:
        self.device = require_device(device, type(self).__name__)
        self.trace = TraceRecorder()
        self.stats = DeviceStats()
        self._live: dict[int, Allocation] = {}   # ptr -> Allocation handed out and not yet freed
        self._closed = False
        self._guard = EventGuard(device)         # frees waiting for other streams' events

    def _free_after_events(self, record: Any) -> None:  # pragma: no cover - every policy overrides
        """The hook: really free ``record`` (its memory is no longer used by any stream)."""
        raise NotImplementedError(f"{type(self).__name__} must implement _free_after_events")

    # ---- free, now or after the events of the streams that used the memory
    def free(self, allocation: "Allocation | int") -> None:
        """The user is done: free now, or after the events of the streams that used it."""
        self._check_open("free")
        found = self._check_allocation(allocation, "free")
        if found is None:                           # freeing a null allocation is a no-op
            if isinstance(allocation, Allocation):
                allocation.freed = True
            return
        allocation, record = found, found._block
        record.stream_uses = self._drain_destroyed(record.stream_uses)
        self._take_back(allocation)
        if record.stream_uses:
            # PyTorch's insert_events: one event per using stream; the real free once all completed.
            self._guard.defer(record, record.stream_uses)
            record.stream_uses = []
        else:
            self._free_after_events(record)

    def record_stream(self, allocation: "Allocation | int", stream: Any) -> None:
        """``Tensor.record_stream``: the free will wait for the work queued on ``stream``."""
        found = self._validated_record_stream(allocation, stream)
        if found:
            record, stream = found
            record.stream_uses.append(stream)

    def _process_events(self) -> None:
        """Really free every deferred record whose events completed."""
        for record in self._guard.completed():
            self._free_after_events(record)

    def _wait_for_deferred(self) -> bool:
        """Block on every outstanding event and free what waited (counts a sync-all)."""
        if not len(self._guard):
            return False
        self.stats.num_sync_all_streams += 1
        for record in self._guard.wait_all():
            self._free_after_events(record)
        return True

    def synchronize(self) -> None:
        """cudaDeviceSynchronize, then the deferred frees complete."""
        self._check_open("synchronize")
        self.device.synchronize()
        self._process_events()

    def __repr__(self) -> str:
        """One line for a notebook: the policy, its device, what is live and what it holds."""
        state = "closed" if self._closed else (
            f"{len(self._live)} live, {format_size(self.memory_allocated())} allocated, "
            f"{format_size(self.memory_reserved())} reserved")
        return f"{type(self).__name__}({self.device.info.name}: {state})"

    # ---- what callers may read
    def live_allocations(self) -> list[Allocation]:
        """Everything handed out and not yet freed, in address order (as CachingAllocator)."""
        return [self._live[p] for p in sorted(self._live)]

    # ---- checks (each raises before anything changes)
    def _check_open(self, what: str) -> None:
        if self._closed:
            raise RuntimeError(f"{what}: this {type(self).__name__} was closed; create a new one")

    def _resolve_stream(self, stream: Any, what: str) -> Any:
        """``None`` means the default stream; a stream must be this device's and alive (front_door.py)."""
        return resolve_stream(self.device, stream, what)

    def _drain_destroyed(self, streams: Iterable[Any]) -> list:
        """The streams still alive; if one was destroyed, first wait for the device to drain.

        A destroyed stream cannot take an event, but the work queued on it before
        ``cudaStreamDestroy`` still runs: once the device is idle the memory is surely
        unused, so the free goes ahead instead of being refused forever (a leak).  The
        caching allocator's ``insert_events`` does the same.
        """
        streams = list(streams)
        if not any(stream_is_destroyed(s) for s in streams):
            return streams
        self.device.synchronize()
        return [s for s in streams if not stream_is_destroyed(s)]

    def _check_allocation(self, allocation: Any, what: str) -> Optional[Allocation]:
        """The live Allocation named by ``allocation`` (or its int ptr); None for a null one (front_door.py)."""
        return live_allocation(self._live, self, allocation, what)

    # ---- handing out and taking back
    def _null_allocation(self, stream: Any) -> Allocation:
        """A zero-byte request: ptr 0, no stats, no trace (PyTorch returns a null DataPtr)."""
        return Allocation(ptr=0, size=0, requested_size=0, stream=stream, allocator=self)

    def _hand_out(self, block: Any, stream: Any) -> Allocation:
        """Record a new live allocation for ``block`` (an allocated record with ptr/size/requested_size)."""
        allocation = Allocation(ptr=block.ptr, size=block.size, requested_size=block.requested_size,
                                stream=stream, allocator=self, _block=block)
        self._live[block.ptr] = allocation
        self._stat_increase(("allocation", "active"), 1)
        self._stat_increase(("allocated_bytes", "active_bytes"), block.size)
        self._stat_increase(("requested_bytes",), block.requested_size)
        self._emit("alloc", block.ptr, block.requested_size, stream)
        return allocation

    def _take_back(self, allocation: Allocation) -> Any:
        """The caller gave ``allocation`` back: it stops counting as allocated (it may stay active)."""
        block = allocation._block
        allocation.freed = True
        del self._live[block.ptr]
        self._stat_decrease(("allocation",), 1)
        self._stat_decrease(("allocated_bytes",), block.size)
        self._emit("free_requested", block.ptr, block.requested_size, block.stream)
        return block

    def _complete_free(self, block: Any) -> None:
        """The memory really is free now (its events completed): it stops being active."""
        self._stat_decrease(("active",), 1)
        self._stat_decrease(("active_bytes",), block.size)
        self._stat_decrease(("requested_bytes",), block.requested_size)   # PyTorch: in free_block, with active
        self._emit("free_completed", block.ptr, block.requested_size, block.stream)

    # ---- record_stream, shared validation
    def _validated_record_stream(self, allocation: Any, stream: Any) -> Optional[tuple[Any, Any]]:
        """Checks shared by every ``record_stream``; returns (block, stream) or None for a no-op."""
        self._check_open("record_stream")
        allocation = self._check_allocation(allocation, "record_stream")
        stream = self._resolve_stream(stream, "record_stream")
        if allocation is None:
            return None                          # null allocation: nothing to protect
        block = allocation._block
        if stream is block.stream or stream in block.stream_uses:      # our record, not the caller's field
            return None                          # PyTorch: ignored on the owning stream
        return block, stream

    # ---- trace
    def _emit(self, action: str, addr: int, size: int, stream: Any) -> None:
        self.trace.record(TraceEntry(action=action, addr=addr, size=size, stream=stream_handle(stream),
                                     time_us=int(self.device.now_us())))

    def record_memory_history(self, enabled: Optional[str] = "all", context: Optional[str] = "all",
                              stacks: str = "all", max_entries: int = 2**63 - 1,
                              clear_history: bool = False, skip_actions: Iterable[str] = ()) -> None:
        """``torch.cuda.memory._record_memory_history``: start/stop keeping trace entries."""
        self.trace.configure(enabled=enabled, context=context, max_entries=max_entries,
                             clear_history=clear_history, skip_actions=skip_actions)

    # ---- statistics
    def _stat_increase(self, names: Iterable[str], amount: int) -> None:
        for name in names:
            self.stats[name][AGGREGATE].increase(amount)

    def _stat_decrease(self, names: Iterable[str], amount: int) -> None:
        for name in names:
            self.stats[name][AGGREGATE].decrease(amount)

    def memory_stats(self) -> dict:
        """``torch.cuda.memory_stats()`` keys this design tracks; every other key is absent."""
        flat = self.stats.as_flat_dict()
        return {key: flat[key] for key in self.STAT_KEYS}

    def memory_allocated(self) -> int:
        return self.stats["allocated_bytes"][AGGREGATE].current

    def memory_reserved(self) -> int:
        return self.stats["reserved_bytes"][AGGREGATE].current

    def max_memory_allocated(self) -> int:
        return self.stats["allocated_bytes"][AGGREGATE].peak

    def max_memory_reserved(self) -> int:
        return self.stats["reserved_bytes"][AGGREGATE].peak

    def reset_peak_memory_stats(self) -> None:
        self.stats.reset_peak()

    def reset_accumulated_memory_stats(self) -> None:
        self.stats.reset_accumulated()

    # ---- OOM
    def _trace_oom(self, rounded: int, stream: Any) -> None:
        self.stats.num_ooms += 1
        free, _total = self.device.mem_get_info()
        self.trace.record(TraceEntry(action="oom", addr=free, size=rounded, stream=stream_handle(stream),
                                     time_us=int(self.device.now_us())))

    # ---- snapshot (for designs with segments)
    def _segments(self) -> list[dict]:
        raise NotImplementedError

    def allocator_settings(self) -> dict:
        return {}

    def segments(self, record: bool = True) -> list[dict]:
        """The snapshot's ``segments`` list (in address order), without copying the trace."""
        return sorted(self._segments(), key=lambda s: s["address"])

    def snapshot(self) -> dict:
        """``torch.cuda.memory._snapshot()``: segments (with blocks), device traces, settings."""
        segments = self.segments()
        return mark_course_made({"segments": segments, "device_traces": [self.trace.dicts()],   # provenance.py
                                 "allocator_settings": self.allocator_settings(), "external_annotations": []})

    def _segment_dict(self, address: int, blocks: list[dict], stream: Any = None) -> dict:
        """One snapshot segment from its blocks (each with address/size/requested_size/state)."""
        active = [b for b in blocks if b["state"] != "inactive"]
        return {
            "device": self.device.info.index, "address": address,
            "total_size": sum(b["size"] for b in blocks),
            "allocated_size": sum(b["size"] for b in blocks if b["state"] == "active_allocated"),
            "active_size": sum(b["size"] for b in active),
            "requested_size": sum(b["requested_size"] for b in active),
            "stream": stream_handle(stream), "segment_type": "large", "segment_pool_id": (0, 0),
            "is_expandable": False, "frames": [], "blocks": blocks,
        }

    @staticmethod
    def _block_dict(address: int, size: int, requested_size: int, state: str) -> dict:
        return {"address": address, "size": size, "requested_size": requested_size,
                "state": state, "frames": []}

    # ---- context manager sugar: ``with DirectAllocator(dev) as a: ...`` closes on exit
    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:  # pragma: no cover - every policy overrides
        raise NotImplementedError


def warn(message: str) -> None:
    """PyTorch's TORCH_WARN: a UserWarning the learner sees once per call site."""
    warnings.warn(message, UserWarning, stacklevel=3)
