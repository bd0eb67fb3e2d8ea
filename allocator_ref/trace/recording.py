"""A recorded run, loaded and checked once: what every tool replays, compares or diagnoses.

    rec = load_recording("run.pickle")      # or bytes, a snapshot dict, or a bare list of
                                            # segments (what torch.cuda.memory_snapshot() returns)
    dev = rec.device(0)
    dev.events          # the trace a replay follows ('snapshot' entries set aside)
    dev.segments        # the device's segments when the snapshot was taken
    dev.start_state()   # the allocator's state at the first event, rebuilt once (rebuild.py)
    rec.config          # the recorded PYTORCH_CUDA_ALLOC_CONF

:func:`load_recording` is the one way in.  Whatever it is given goes through the same checks
(``snapshot.py`` for the file, ``validate.py`` for every field, ``formats.py`` for older
PyTorch versions), and a bad input is refused with one line naming the source and the
field.  Every tool -- ``replay``, the doctor, the what-if, the frames and the player --
takes a ``Recording`` (or anything ``load_recording`` takes) and never re-reads or
re-checks what it holds.  A ``Recording`` passed to ``load_recording`` comes back as it is.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Optional

from ..editions.messages import translator
from ..events import NEW_MEMORY, RELEASES
from .device_traces import devices_of, raw_trace, replayable_events, replayable_positions
from .snapshot import load_snapshot, loads_snapshot
from .snapshot_error import SnapshotError, show
from .validate import validate_snapshot

from .npu_detect import detect

tr = translator("doctor")          # a refusal in the reader's language



@dataclass
class DeviceRecording:
    """One GPU's part of a recording."""
    index: int
    raw: list                     # the trace as the file has it ('snapshot' entries included)
    events: list                  # what a replay follows: every entry but 'snapshot' ones
    positions: Optional[list]     # index in ``raw`` of each of ``events`` (None: the same)
    segments: list                # the device's segments when the snapshot was taken
    config: str                   # the recorded PYTORCH_CUDA_ALLOC_CONF
    source: str = "<dict>"
    policy: str = "caching"       # the design that recorded it: "npu" for torch_npu (npu_detect.py)
    _start: Any = field(default=None, repr=False)
    _lookup: Any = field(default=None, repr=False)

    @property
    def snapshot_entries(self) -> int:
        """How many 'snapshot' entries (someone looked, nothing changed) were set aside."""
        return len(self.raw) - len(self.events)

    def raw_index(self, pos: int) -> int:
        """Where event ``pos`` of ``events`` sits in the file's trace (what error messages cite)."""
        return self.positions[pos] if self.positions and pos < len(self.positions) else pos

    def start_state(self):
        """The allocator state at the first event under the recorded settings, rebuilt once.

        Shared by every replay of this device (the verify replay and each what-if): the
        state when recording began is a fact of the run, whatever setting is replayed.
        The caller must not change it (the engine copies the notes it adds to).
        """
        if self._start is None:
            from .rebuild import infer_initial_state
            self._start = infer_initial_state(self.events, self.segments,
                                              recorded_config(self.config, self.source, self.policy))
        return self._start

    @property
    def lookup(self):
        """The trace's "what comes next" tables (trace_index.py), built once for every replay."""
        if self._lookup is None:
            from .trace_index import TraceIndex
            self._lookup = TraceIndex(self.events)
        return self._lookup

    def reserved_after_each_event(self) -> list:
        """memory_reserved() after each event, as recorded: the segments held at the first event
        plus every ``segment_alloc``/``segment_map`` less every release up to it."""
        state = self.start_state()
        reserved = sum(s.size for s in state.segments) + sum(s["total_size"] for s in state.expandable)
        out = []
        for e in self.events:
            action = e["action"]
            if action in NEW_MEMORY:
                reserved += e["size"]
            elif action in RELEASES:
                reserved -= e["size"]
            out.append(reserved)
        return out

    @property
    def peak_reserved(self) -> int:
        """The most memory the trace shows reserved at once (the recorded peak)."""
        state = self.start_state()
        start = sum(s.size for s in state.segments) + sum(s["total_size"] for s in state.expandable)
        return max([start] + self.reserved_after_each_event())

    @property
    def ooms(self) -> int:
        return sum(1 for e in self.events if e["action"] == "oom")


def recorded_config(config: str, source: str = "<dict>", policy: str = "caching"):
    """The recorded setting as an AllocatorConfig; a value PyTorch could not have had is refused
    naming the file and the field.  A torch_npu recording's is read by torch_npu's parser."""
    from ..caching.config import AllocatorConfig
    if policy == "npu":
        return _recorded_npu_config(config, source)
    try:
        return AllocatorConfig.parse(config) if config else AllocatorConfig()
    except ValueError as exc:
        raise SnapshotError(tr("{source}: allocator_settings['PYTORCH_CUDA_ALLOC_CONF'] = "
                               "{config} cannot be used: {why}", source=source,
                               config=repr(config[:80]), why=exc)) from None


def _recorded_npu_config(config: str, source: str):
    """A torch_npu run's setting, read by torch_npu's parser (caching/npu/config.py)."""
    from ..caching.npu.config import NPUAllocatorConfig
    try:
        return NPUAllocatorConfig.parse(config)
    except ValueError as exc:
        raise SnapshotError(tr("{source}: allocator_settings['PYTORCH_NPU_ALLOC_CONF'] = "
                               "{config} cannot be used: {why}", source=source,
                               config=repr(config[:80]), why=exc)) from None


@dataclass
class Recording:
    """A snapshot, checked once, split by device (see the module doc)."""
    source: str                   # the file's path, or "<dict>", "<list>", "<bytes>"
    snapshot: dict                # the checked snapshot, in the current format
    config: str                   # the recorded PYTORCH_CUDA_ALLOC_CONF ("" when none)
    policy: str = "caching"       # the design that recorded it: "npu" for torch_npu (npu_detect.py)
    _devices: dict = field(default_factory=dict, repr=False)

    @property
    def devices(self) -> list:
        """Every device with trace events or segments, in order."""
        return devices_of(self.snapshot)

    @property
    def devices_with_events(self) -> list:
        """Devices whose trace has events to replay."""
        traces = self.snapshot.get("device_traces") or []
        return [i for i in range(len(traces)) if self.device(i).events]

    def device(self, index: int) -> DeviceRecording:
        """Device ``index``'s part (empty lists for a device the snapshot does not name)."""
        dev = self._devices.get(index)
        if dev is None:
            raw = raw_trace(self.snapshot, index)
            segments = [s for s in self.snapshot.get("segments", []) if s.get("device", 0) == index]
            dev = self._devices[index] = DeviceRecording(
                index, raw, replayable_events(raw), replayable_positions(raw), segments,
                self.config, self.source, self.policy)
        return dev

    def forget(self, index: int) -> None:
        """Drop what device ``index``'s replays built (its rebuilt start state, its trace index:
        rebuilt when asked again); its event list stays, so no later look at every device parses
        its trace again.  The doctor of a many-device file keeps one device's at a time
        (memory_doctor/__init__.py)."""
        dev = self._devices.get(index)
        if dev is not None:
            dev._start = dev._lookup = None

    @property
    def state_only(self) -> bool:
        """Segments but no trace event on any device (history was off): nothing to replay."""
        return bool(self.snapshot.get("segments")) and not self.devices_with_events


def device_recording(events: list, segments: list, config: str = "", index: int = 0,
                     source: str = "<events>") -> DeviceRecording:
    """A DeviceRecording of events and segments already in hand (already checked: the
    replay's own tests and tools that built them), 'snapshot' entries set aside."""
    return DeviceRecording(index, events, replayable_events(events), replayable_positions(events),
                           segments, config, source)


def load_recording(source: Any, name: Optional[str] = None) -> Recording:
    """The one loader: a path, bytes, a snapshot dict, a bare list of segments, or a Recording.

    Every kind is checked the same way; the error names ``name`` (default: the path, or
    ``<dict>``/``<list>``/``<bytes>``) and the field.
    """
    if isinstance(source, Recording):
        return source
    if isinstance(source, (str, os.PathLike)):
        label = name or str(source)
        snapshot = load_snapshot(source)
    elif isinstance(source, (bytes, bytearray, memoryview)):
        label = name or "<bytes>"
        snapshot = loads_snapshot(bytes(source), label)
    elif isinstance(source, (dict, list)):
        label = name or ("<dict>" if isinstance(source, dict) else "<list>")
        try:
            snapshot = validate_snapshot(source)
        except SnapshotError as exc:
            raise SnapshotError(tr("{source}: {problem}", source=label, problem=exc)) from None
    else:
        raise SnapshotError(tr("{name}: is {value}; expected a path to a snapshot, its "
                               "bytes, the dict torch.cuda.memory._snapshot() returns, or the list "
                               "torch.cuda.memory_snapshot() returns", name=name or "<input>",
                               value=show(source)))
    found = detect(snapshot)      # PyTorch's or torch_npu's, and the settings it ran with
    if found.policy == "npu":
        recorded_config(found.config, label, "npu")    # one torch_npu could not have had: refused here
    return Recording(label, snapshot, found.config, found.policy)


__all__ = ["Recording", "DeviceRecording", "load_recording", "device_recording", "recorded_config"]
