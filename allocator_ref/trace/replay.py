"""Replay a real PyTorch memory trace on the reference allocator, and ask "what if".

The entry points over the replay engine (engine.py): ``replay`` for every device of a
recording, ``TraceStepper`` to walk one device's trace and stop where you like.

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

Without ``verify`` the same requests run under any configuration or policy on
the runner (runner.py: the loop every what-if shares), and the result says what the run would have needed: peak reserved, peak
allocated, fragmentation, device calls, simulated time, and OOMs on a device
of a given size.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

from ..caching.allocator import CachingAllocator
from ..device.sizing import fit_profile, most_reserved
from ..provenance import course_made
from .engine import Engine
from .recording import load_recording, recorded_config
from .replay_report import Divergence, ReplayResult
from .runner import Runner
from .whatif import calls_of
from .validate import SnapshotError


def replay(snapshot: Any, allocator_factory: Optional[Callable] = None, *, config: Optional[str] = None,
           policy: Optional[str] = None, verify: bool = False, profile: str = "h100-80gb",
           device_memory: Optional[int] = None, progress: Optional[bool] = None) -> ReplayResult:
    """Replay every device trace of ``snapshot`` (a Recording, or anything ``load_recording``
    takes: a path, bytes, a snapshot dict, a bare list of segments).

    ``policy`` None replays on the design that recorded the file (torch_npu's or PyTorch's);
    ``config`` defaults to the snapshot's own ``PYTORCH_CUDA_ALLOC_CONF``;
    ``allocator_factory(device, config)`` builds something else than the policy named;
    ``device_memory`` (bytes) replays on a simulated GPU of that size: requests that do
    not fit raise the allocator's OutOfMemoryError, are counted in ``ooms_raised`` and
    skipped, so the report says whether the run would have fitted.
    """
    recording = load_recording(snapshot)
    source = recording.source
    same_config = config is None
    config = recording.config if config is None else config
    policy = policy or recording.policy    # none named: the design that recorded it (npu_detect.py)
    if verify and device_memory is not None:
        raise ValueError("--verify follows the trace (what failed on the GPU fails here, nothing else), so a GPU "
                         "size does not apply: drop --device-memory, or replay without --verify to ask what "
                         "happens on a GPU of that size")
    if verify and (policy not in ("caching", "npu") or allocator_factory is not None or not same_config):
        raise ValueError("--verify compares against PyTorch's own decisions: it needs the caching "
                         "policy and the snapshot's own config")
    if same_config and policy == "caching" and allocator_factory is None:
        recorded_config(config, source)  # the file's own setting: refused in the loader's words
    devices = []
    # Every device with trace events or segments (device_traces may be shorter than the
    # devices the segments name); ``snapshot`` entries are left out (device_traces.py).
    for index in recording.devices:
        dev = recording.device(index)
        if not dev.events and not verify:
            continue                     # a what-if has no requests to replay on this device
        # A verify replay runs on a simulated GPU that holds what the trace held (a B200's 150 GiB
        # run does not fit the default 80 GB profile): device/sizing.py, said in the result's notes.
        dev_profile, sized = fit_profile(profile, most_reserved(dev.events, dev.segments)) if verify else (profile, "")
        try:
            if verify:
                result = Engine(dev, config=config, policy=policy, profile=dev_profile,
                                factory=allocator_factory, progress=progress).run()
            else:                        # the trace's own calls, on the runner (runner.py)
                runner = Runner(dev, config=config, policy=policy, profile=profile,
                                factory=allocator_factory, total_memory=device_memory)
                result = runner.device_replay(runner.run(calls_of(dev)))
            if sized:
                result.inferred.insert(0, sized)
        except SnapshotError as exc:
            message = str(exc)
            raise SnapshotError(message if message.startswith(f"{source}: ") else f"{source}: {message}") from None
        result.snapshot_entries = dev.snapshot_entries
        devices.append(result)
    return ReplayResult(source, policy, config, verify, devices, course_made(recording.snapshot))


class TraceStepper:
    """Walk a real trace on the reference allocator, stopping where you like.

        stepper = TraceStepper("run.pickle")       # verify mode: PyTorch's addresses
        stepper.run_until(5000)                     # the allocator as it was at event 5000
        stepper.allocator.snapshot()

    Pictures use it to animate a window of a long trace without redrawing all of it.  It
    takes a Recording or anything ``load_recording`` takes.
    """

    def __init__(self, snapshot: Any, device: Optional[int] = None, profile: str = "h100-80gb") -> None:
        recording = load_recording(snapshot)
        if device is None:
            device = next((d for d in recording.devices if recording.device(d).events), None)
        dev = recording.device(device) if isinstance(device, int) else None
        if dev is None or not dev.events:
            raise ValueError(f"the snapshot has no trace events for device {device!r}")
        self.recording = recording
        self._replayer = Engine(dev, profile=profile, progress=False)
        self._replayer._restore_start()
        self.events = dev.events

    @property
    def allocator(self) -> CachingAllocator:
        return self._replayer.allocator

    @property
    def engine(self) -> Engine:
        """The replay engine walking the trace (its ``result`` is the verification so far)."""
        return self._replayer

    @property
    def position(self) -> int:
        """Index of the next trace event not yet replayed."""
        return self._replayer.pos

    @property
    def next_event(self) -> int:
        """Index of the first trace event the allocator has not made yet."""
        return self._replayer.pos + len(self._replayer.produced)

    @property
    def divergence(self) -> Optional[Divergence]:
        return self._replayer.result.first_divergence

    def run_until(self, index: int) -> None:
        self._replayer._run_until(min(index, len(self.events)))

    def finish(self) -> ReplayResult:
        """Replay the rest of the trace and compare the final state: what ``replay(...,
        verify=True)`` reports for this device, from this one replay."""
        engine = self._replayer
        engine._run_until(len(self.events))
        engine._finish()
        engine.result.snapshot_entries = engine.recording.snapshot_entries
        return ReplayResult(self.recording.source, engine.policy, self.recording.config, True, [engine.result])
